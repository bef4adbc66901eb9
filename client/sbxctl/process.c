/*
 * process.c - sbxctl verbs about processes: spawn, ps, logs, kill, wait,
 * write, close-stdin. (exec, run and attach, which stream and handle Ctrl-C,
 * live in exec.c.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxctl.h"

/* ---- spawn ------------------------------------------------------------------------- */

static const struct opt spawn_opts[] = {
    {"env", 'e', 1, 1},
    {"cwd", 'C', 1, 2},
    {"timeout", 't', 1, 3},
    {NULL, 0, 0, 0},
};

int cmd_spawn(int argc, char **argv)
{
    struct parser p;
    json_t *params = json_object(), *r;
    const char *id = NULL;
    char **cmd = NULL;
    int ncmd = 0, o;

    cmd = calloc((size_t)argc + 1, sizeof(*cmd));
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, spawn_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            if (!id) {
                id = p.arg;
            } else {
                cmd[ncmd++] = (char *)p.arg;
                p.stop = 1;
            }
            break;
        case 1:
            arg_env(obj_object(params, "env"), p.arg, 0);
            break;
        case 2:
            json_object_set_new(params, "cwd", json_string(p.arg));
            break;
        case 3:
            json_object_set_new(params, "timeout_ms",
                                json_integer(arg_int("--timeout", p.arg)));
            break;
        }
    }
    if (!id)
        usage_error("missing sandbox ID");
    if (!ncmd)
        usage_error("missing command");
    json_object_set_new(params, "sandbox", json_string(id));
    json_object_set_new(params, "command", command_json(ncmd, cmd));
    /* Nobody stays to read notifications. */
    json_object_set_new(params, "stream", json_false());
    free(cmd);

    int rc = ctl_simple(SBX_M_SPAWN, params, &r);
    if (rc)
        return rc;
    if (!g.json)
        printf("%" JSON_INTEGER_FORMAT "\n",
               json_integer_value(json_object_get(r, "pid")));
    json_decref(r);
    return 0;
}

/* ---- ps ---------------------------------------------------------------------------- */

static const struct opt ps_opts[] = {
    {"quiet", 'q', 0, 1},
    {NULL, 0, 0, 0},
};

int cmd_ps(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL;
    json_t *r, *pr;
    size_t i;
    int o, quiet = 0;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, ps_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == 1) {
            quiet = 1;
            continue;
        }
        if (id)
            usage_error("unexpected argument: %s", p.arg);
        id = p.arg;
    }
    if (!id)
        usage_error("missing sandbox ID");
    int rc = ctl_simple(SBX_M_PLIST, json_pack("{s:s}", "sandbox", id), &r);
    if (rc)
        return rc;
    if (!g.json && quiet) { /* pids only, for scripts */
        json_array_foreach(json_object_get(r, "processes"), i, pr)
            printf("%" JSON_INTEGER_FORMAT "\n",
                   json_integer_value(json_object_get(pr, "pid")));
    } else if (!g.json) {
        printf("%-6s  %-8s  %-4s  %-24s  %s\n", "PID", "STATUS", "EXIT", "STARTED",
               "COMMAND");
        json_array_foreach(json_object_get(r, "processes"), i, pr) {
            char *cmd = field_text(pr, "command");
            char *ex = field_text(pr, "exit_code");
            const char *st = json_string_value(json_object_get(pr, "status"));
            const char *at = json_string_value(json_object_get(pr, "started_at"));
            printf("%-6" JSON_INTEGER_FORMAT "  %-8s  %-4s  %-24s  %s\n",
                   json_integer_value(json_object_get(pr, "pid")), st ? st : "?",
                   ex ? ex : "", at ? at : "", cmd ? cmd : "");
            free(cmd);
            free(ex);
        }
    }
    json_decref(r);
    return 0;
}

/* ---- kill, wait -------------------------------------------------------------------- */

static const struct opt kill_opts[] = {
    {"signal", 's', 1, 1},
    {NULL, 0, 0, 0},
};

/* Collects the positionals "ID PID". */
static void two_args(const char *arg, const char **id, const char **pid)
{
    if (!*id)
        *id = arg;
    else if (!*pid)
        *pid = arg;
    else
        usage_error("unexpected argument: %s", arg);
}

int cmd_kill(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *pid = NULL, *sig = NULL;
    int o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, kill_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            two_args(p.arg, &id, &pid);
        else
            sig = p.arg;
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");

    json_t *params = json_pack("{s:s, s:I}", "sandbox", id, "pid", arg_int("PID", pid));
    if (sig) {
        char *end;
        long n = strtol(sig, &end, 10);
        json_object_set_new(params, "signal",
                            *sig && *end == '\0' ? json_integer(n) : json_string(sig));
    }
    return ctl_simple(SBX_M_KILL, params, NULL);
}

static const struct opt wait_opts[] = {
    {"timeout", 't', 1, 1},
    {NULL, 0, 0, 0},
};

int cmd_wait(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *pid = NULL;
    json_int_t timeout = -1;
    json_t *r;
    int o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, wait_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            two_args(p.arg, &id, &pid);
        else
            timeout = arg_int("--timeout", p.arg);
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");

    json_t *params = json_pack("{s:s, s:I}", "sandbox", id, "pid", arg_int("PID", pid));
    if (timeout >= 0)
        json_object_set_new(params, "timeout_ms", json_integer(timeout));
    int rc = ctl_simple(SBX_M_WAIT, params, &r);
    if (rc)
        return rc;
    int status = exit_status(r);
    if (!g.json)
        printf("%d\n", status);
    json_decref(r);
    return status;
}

/* ---- logs -------------------------------------------------------------------------- */

struct logs_state {
    const char *sandbox;
    json_int_t pid;
    json_int_t end[3]; /* per stream: offset after the last byte received */
    int exited;
    int status; /* the exit status from process.exit */
    /* --tail N: the replay is held (as chunks in arrival order, bounded by
     * what sbxd replays) and only its last N lines printed. */
    long tail; /* -1: all */
    int holding;
    struct chunk {
        int stream;
        char *data;
        size_t len;
    } * held;
    size_t nheld, capheld;
};

/* Prints the held replay's last s->tail lines (counted over both streams,
 * in the order they arrived), then stops holding. */
static void logs_flush(struct logs_state *s)
{
    size_t from_chunk = 0, from_off = 0;
    long need = s->tail;
    int first = 1, found = 0;
    if (need == 0) {
        from_chunk = s->nheld;
        found = 1;
    }
    /* Back from the end: the tail-th newline before the last byte starts it. */
    for (size_t ci = s->nheld; !found && ci-- > 0;) {
        const struct chunk *k = &s->held[ci];
        for (size_t j = k->len; j-- > 0;) {
            int nl = k->data[j] == '\n';
            if (first) {
                first = 0;
                if (nl)
                    continue; /* the newline that ends the last line */
            }
            if (nl && --need == 0) {
                from_chunk = ci;
                from_off = j + 1;
                found = 1;
                break;
            }
        }
    }
    for (size_t i = from_chunk; i < s->nheld; i++) {
        const struct chunk *k = &s->held[i];
        size_t off = i == from_chunk ? from_off : 0;
        FILE *f = k->stream == SBX_STDERR ? stderr : stdout;
        fwrite(k->data + off, 1, k->len - off, f);
        fflush(f);
    }
    for (size_t i = 0; i < s->nheld; i++)
        free(s->held[i].data);
    free(s->held);
    s->held = NULL;
    s->nheld = s->capheld = 0;
    s->holding = 0;
}

static void logs_note(struct logs_state *s, const char *method, json_t *params)
{
    const char *sb = json_string_value(json_object_get(params, "sandbox"));
    json_t *pid = json_object_get(params, "pid");

    if (!sb || strcmp(sb, s->sandbox) != 0 || !json_is_integer(pid) ||
        json_integer_value(pid) != s->pid)
        return;
    if (strcmp(method, SBX_N_EXIT) == 0) {
        s->exited = 1;
        s->status = exit_status(params);
        return;
    }
    if (strcmp(method, SBX_N_OUTPUT) != 0)
        return;
    int stream;
    char *data;
    size_t len;
    if (sbx_output_decode(&stream, &data, &len, params) != SBX_OK)
        return;
    if (s->holding) {
        if (s->nheld == s->capheld) {
            s->capheld = s->capheld ? 2 * s->capheld : 64;
            s->held = ctl_nonnull(realloc(s->held, s->capheld * sizeof(*s->held)));
        }
        s->held[s->nheld++] = (struct chunk){stream, data, len};
    } else {
        FILE *f = stream == SBX_STDERR ? stderr : stdout;
        fwrite(data, 1, len, f);
        fflush(f);
        free(data);
    }
    json_int_t end =
        json_integer_value(json_object_get(params, "offset")) + (json_int_t)len;
    if (end > s->end[stream])
        s->end[stream] = end;
}

static void logs_cb(sbx_ctx *c, const char *method, json_t *params, void *privdata)
{
    (void)c;
    logs_note(privdata, method, params);
}

static const struct opt logs_opts[] = {
    {"follow", 'f', 0, 1},
    {"tail", 'n', 1, 2},
    {NULL, 0, 0, 0},
};

int cmd_logs(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *pid = NULL;
    int follow = 0, o;
    long tail = -1;
    json_t *r;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, logs_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            two_args(p.arg, &id, &pid);
        else if (o == 1)
            follow = 1;
        else if (strcmp(p.arg, "all") != 0 && (tail = (long)arg_int("--tail", p.arg)) < 0)
            usage_error("--tail: a number of lines, or all");
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");

    struct logs_state s = {id,   arg_int("PID", pid), {0, 0, 0}, 0, 0,
                           tail, tail >= 0,           NULL,      0, 0};
    sbx_ctx *c = ctl_connect();
    sbx_set_notify_cb(c, logs_cb, &s);
    int rc = ctl_call(
        c, SBX_M_ATTACH,
        json_pack("{s:s, s:I, s:b}", "sandbox", id, "pid", s.pid, "follow", follow), &r);
    if (rc) {
        sbx_free(c);
        return rc;
    }
    int running = json_is_true(json_object_get(r, "running"));
    json_int_t want[3] = {0, json_integer_value(json_object_get(r, "stdout_offset")),
                          json_integer_value(json_object_get(r, "stderr_offset"))};
    json_int_t start[3] = {0, json_integer_value(json_object_get(r, "stdout_start")),
                           json_integer_value(json_object_get(r, "stderr_start"))};
    if (g.json)
        print_json(r);
    json_decref(r);

    /* A finished process: the replay ends with its process.exit. A running one
     * without -f: the replay ends at the offsets of the attach result. */
    for (;;) {
        int replayed = (s.end[1] >= want[1] || want[1] <= start[1]) &&
                       (s.end[2] >= want[2] || want[2] <= start[2]);
        if (s.holding && (s.exited || replayed))
            logs_flush(&s); /* --tail: the replay is complete, live output follows */
        if (s.exited)
            break;
        if (running && !follow && replayed)
            break;
        json_t *n;
        if (sbx_read_notification(c, &n, follow || !running ? -1 : 5000) != SBX_OK) {
            if (c->err == SBX_ERR_TIMEOUT)
                break;
            warnx_("%s", c->errstr);
            sbx_free(c);
            return EXIT_RPC;
        }
        logs_note(&s, json_string_value(json_object_get(n, "method")),
                  json_object_get(n, "params"));
        json_decref(n);
    }
    if (s.holding)
        logs_flush(&s);
    sbx_free(c);
    /* -f follows to the end: exit with the process's status, as wait does. */
    return follow && s.exited ? s.status : 0;
}

/* ---- write, close-stdin ------------------------------------------------------------ */

#define WRITE_CHUNK (256 * 1024)

static const struct opt write_opts[] = {
    {"file", 'f', 1, 1},
    {"close", 0, 0, 2},
    {NULL, 0, 0, 0},
};

/* Sends len bytes (base64) to the process's stdin. */
static int write_chunk(sbx_ctx *c, const char *id, json_int_t pid, const char *buf,
                       size_t len)
{
    char *b64 = ctl_nonnull(malloc(sbx_base64_encoded_len(len) + 1));
    sbx_base64_encode(b64, buf, len);
    json_t *params =
        json_pack("{s:s, s:I, s:s}", "sandbox", id, "pid", pid, "data_b64", b64);
    free(b64);
    return ctl_call(c, SBX_M_WRITE, params, NULL);
}

int cmd_write(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *pid = NULL, *data = NULL, *file = NULL;
    int close_after = 0, o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, write_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            if (!id)
                id = p.arg;
            else if (!pid)
                pid = p.arg;
            else if (!data)
                data = p.arg;
            else
                usage_error("unexpected argument: %s", p.arg);
            break;
        case 1:
            file = p.arg;
            break;
        case 2:
            close_after = 1;
            break;
        }
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");
    if (data && file)
        usage_error("give either DATA or --file, not both");
    json_int_t n = arg_int("PID", pid);
    sbx_ctx *c = ctl_connect();
    int rc = 0;
    if (data) {
        rc = write_chunk(c, id, n, data, strlen(data));
    } else {
        /* --file, or standard input: streamed in chunks, so any size goes. */
        FILE *f = !file || strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
        if (!f) {
            warnx_("%s: cannot open", file);
            sbx_free(c);
            return EXIT_RPC;
        }
        static char buf[WRITE_CHUNK];
        size_t got;
        while (!rc && (got = fread(buf, 1, sizeof(buf), f)) > 0)
            rc = write_chunk(c, id, n, buf, got);
        if (!rc && ferror(f)) {
            warnx_("%s: read error", file ? file : "stdin");
            rc = EXIT_RPC;
        }
        if (f != stdin)
            fclose(f);
    }
    if (!rc && close_after)
        rc = ctl_call(c, SBX_M_CLOSE_STDIN,
                      json_pack("{s:s, s:I}", "sandbox", id, "pid", n), NULL);
    sbx_free(c);
    return rc;
}

int cmd_close_stdin(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *pid = NULL;
    int o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        two_args(p.arg, &id, &pid);
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");
    return ctl_simple(SBX_M_CLOSE_STDIN,
                      json_pack("{s:s, s:I}", "sandbox", id, "pid", arg_int("PID", pid)),
                      NULL);
}
