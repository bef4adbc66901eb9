/*
 * args.c - the argument and JSON helpers the verb files share (sbxctl.h):
 * numbers, K=V pairs, commands, files, fields, durations, exit statuses.
 * Bad input is a usage_error (cli.c, the floor below).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxctl.h"

/* ---- argument helpers -------------------------------------------------------------- */

json_int_t arg_int(const char *what, const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        usage_error("%s: not an integer: %s", what, s);
    return (json_int_t)v;
}

void arg_env(json_t *obj, const char *kv, int null_if_empty)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        usage_error("expected KEY=VALUE, got: %s", kv);
    char *key = ctl_nonnull(strndup(kv, (size_t)(eq - kv)));
    json_object_set_new(
        obj, key, null_if_empty && eq[1] == '\0' ? json_null() : json_string(eq + 1));
    free(key);
}

void arg_opt(json_t *obj, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        usage_error("expected KEY=VALUE, got: %s", kv);
    char *key = ctl_nonnull(strndup(kv, (size_t)(eq - kv)));
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v)
        v = json_string(eq + 1);
    json_object_set_new(obj, key, v);
    free(key);
}

void arg_positional(const char **pos, int *n, int max, const char *arg)
{
    if (*n == max)
        usage_error("unexpected argument: %s", arg);
    pos[(*n)++] = arg;
}

json_t *command_json(int n, char **args)
{
    if (n == 1)
        return json_string(args[0]);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(args[i]));
    return a;
}

json_t *file_string(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        warnx_("%s: %s", path, strerror(errno));
        exit(EXIT_RPC);
    }
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        warnx_("%s: read error", path);
        exit(EXIT_RPC);
    }
    if (f != stdin)
        fclose(f);
    json_t *s = json_stringn(buf, len);
    free(buf);
    if (!s) {
        warnx_("%s: not valid UTF-8 text", path);
        exit(EXIT_RPC);
    }
    return s;
}

/* obj[key], made by make() when absent (borrowed). */
static json_t *obj_child(json_t *obj, const char *key, json_t *(*make)(void))
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        v = make();
        json_object_set_new(obj, key, v);
    }
    return v;
}

json_t *obj_object(json_t *obj, const char *key)
{
    return obj_child(obj, key, json_object);
}

json_t *obj_array(json_t *obj, const char *key)
{
    return obj_child(obj, key, json_array);
}

char *field_text(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return strdup("");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return s ? s : strdup("?");
}

void format_duration(char *buf, size_t size, double secs)
{
    long long t = (long long)(secs + 0.5);
    if (secs < 0)
        snprintf(buf, size, "-");
    else if (secs < 10)
        snprintf(buf, size, "%.1fs", secs);
    else if (t < 60)
        snprintf(buf, size, "%llds", t);
    else if (t < 3600)
        snprintf(buf, size, "%lldm %llds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, size, "%lldh %lldm", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, size, "%lldd %lldh", t / 86400, t % 86400 / 3600);
}

int exit_status(json_t *rec)
{
    json_t *code = json_object_get(rec, "exit_code");
    json_int_t sig = json_integer_value(json_object_get(rec, "signal"));
    if (json_is_integer(code) && json_integer_value(code) >= 0 &&
        json_integer_value(code) <= 255)
        return (int)json_integer_value(code);
    if (sig > 0 && sig < 128)
        return 128 + (int)sig;
    return 1;
}
