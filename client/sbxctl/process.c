/*
 * process.c - sbxctl verbs about processes: spawn, ps, kill, wait, write,
 * close-stdin. (logs is logs.c; exec, run and attach, which stream and
 * handle Ctrl-C, live in exec.c.)
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

/* Collects the positionals "ID PID" (sbxctl.h). */
void args_id_pid(const char *arg, const char **id, const char **pid)
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
            args_id_pid(p.arg, &id, &pid);
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
            args_id_pid(p.arg, &id, &pid);
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
        args_id_pid(p.arg, &id, &pid);
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");
    return ctl_simple(SBX_M_CLOSE_STDIN,
                      json_pack("{s:s, s:I}", "sandbox", id, "pid", arg_int("PID", pid)),
                      NULL);
}
