/*
 * mcp_text.c - tool results of `sbxctl mcp` as people and models read them
 * (issue 19): stdout, stderr and the exit status laid out in text; the JSON
 * stays in structuredContent.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_tools.h"
#include "sbxctl.h"

/* ---- text for people and models (issue 19) ---------------------------------------- */

/* A growing string; OOM aborts, as elsewhere in sbxctl. */
struct text {
    char *p;
    size_t len, cap;
};

static void text_add(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        t->p = ctl_nonnull(realloc(t->p, cap));
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void text_printf(struct text *t, const char *fmt, ...) SBXCTL_PRINTF(2, 3);
static void text_printf(struct text *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0)
        text_add(t, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A labelled block of output ("stdout:\n...") when it has any. */
static void text_stream(struct text *t, const char *label, json_t *s)
{
    const char *v = json_string_value(s);
    size_t n = json_string_length(s);
    if (!v || !n)
        return;
    text_printf(t, "%s%s:\n", t->len ? "\n" : "", label);
    text_add(t, v, n);
    if (v[n - 1] != '\n')
        text_add(t, "\n", 1);
}

/* "exit code 3", "exit code 124 (timed out)", "killed by signal 9". */
static void text_status(struct text *t, json_t *s)
{
    json_int_t code = json_integer_value(json_object_get(s, "exit_code"));
    json_int_t sig = json_integer_value(json_object_get(s, "signal"));
    const char *err = json_string_value(json_object_get(s, "error"));
    text_printf(t, "%sexit code %" JSON_INTEGER_FORMAT, t->len ? "\n" : "", code);
    if (json_is_true(json_object_get(s, "timed_out")))
        text_printf(t, " (timed out)");
    else if (sig > 0)
        text_printf(t, " (killed by signal %" JSON_INTEGER_FORMAT ")", sig);
    if (err)
        text_printf(t, ": %.400s", err);
    text_add(t, "\n", 1);
    if (json_is_true(json_object_get(s, "truncated")))
        text_printf(t, "(output was cut at the kept maximum)\n");
}

char *mcp_exec_text(json_t *s)
{
    struct text t = {0};
    text_stream(&t, "stdout", json_object_get(s, "stdout"));
    text_stream(&t, "stderr", json_object_get(s, "stderr"));
    if (!t.len && json_object_get(s, "exit_code"))
        text_printf(&t, "(no output)\n");
    if (json_is_true(json_object_get(s, "running")))
        text_printf(&t, "%sprocess %" JSON_INTEGER_FORMAT " is still running\n",
                    t.len ? "\n" : "", json_integer_value(json_object_get(s, "pid")));
    else if (json_object_get(s, "exit_code"))
        text_status(&t, s);
    else if (!t.len)
        text_printf(&t, "(no new output)\n");
    return t.p ? t.p : ctl_nonnull(strdup(""));
}

char *mcp_code_text(json_t *s)
{
    struct text t = {0};
    json_t *logs = json_object_get(s, "logs"), *err = json_object_get(s, "error");
    size_t i;
    json_t *l;
    if (json_array_size(logs))
        text_printf(&t, "console:\n");
    json_array_foreach(logs, i, l) {
        if (json_is_string(l)) {
            text_add(&t, json_string_value(l), json_string_length(l));
            text_add(&t, "\n", 1);
        }
    }
    if (json_is_object(err)) {
        const char *name = json_string_value(json_object_get(err, "name"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        text_printf(&t, "%suncaught %s: %.1000s\n", t.len ? "\n" : "",
                    name ? name : "Error", msg ? msg : "");
    } else {
        char *r = json_dumps(json_object_get(s, "result"),
                             JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_SORT_KEYS);
        text_printf(&t, "%sresult: ", t.len ? "\n" : "");
        if (r)
            text_add(&t, r, strlen(r));
        text_add(&t, "\n", 1);
        free(r);
    }
    return t.p;
}
