/*
 * fs.c - sbxctl fs ls|cat|write|stat|rm|mkdir|mv|watch ID PATH: files in a
 * sandbox through fs.* (PROTOCOL.md "Files"), streamed in chunks by libsbx.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sbxctl.h"

static int write_out(const void *data, size_t len, void *privdata)
{
    FILE *f = privdata;
    return fwrite(data, 1, len, f) == len ? 0 : -1;
}

static long read_in(void *buf, size_t cap, void *privdata)
{
    FILE *f = privdata;
    size_t n = 0;
    while (n < cap) {
        size_t k = fread((char *)buf + n, 1, cap - n, f);
        if (k == 0)
            break;
        n += k;
    }
    return ferror(f) ? -1 : (long)n;
}

/* Prints an error answer (or the connection's) and returns 1. */
static int failed(sbx_ctx *c, sbx_rpc_error *e)
{
    if (e)
        print_rpc_error(e);
    else
        warnx_("%s", c->errstr);
    sbx_rpc_error_free(e);
    return EXIT_RPC;
}

static void print_entry(json_t *e)
{
    const char *type = json_string_value(json_object_get(e, "type"));
    const char *t = json_string_value(json_object_get(e, "target"));
    printf("%-7s %06llo %12lld %s  %s%s%s\n", type ? type : "?",
           (unsigned long long)json_integer_value(json_object_get(e, "mode")),
           (long long)json_integer_value(json_object_get(e, "size")),
           json_string_value(json_object_get(e, "mtime")) ?: "",
           json_string_value(json_object_get(e, "path")) ?: "", t ? " -> " : "",
           t ? t : "");
}

static const struct opt fs_opts[] = {
    {"recursive", 'r', 0, 1}, {"parents", 'p', 0, 2}, {"depth", 'd', 1, 3},
    {"mode", 'm', 1, 4},      {"append", 'a', 0, 5},  {NULL, 0, 0, 0},
};

static volatile sig_atomic_t stop;
static void on_sigint(int sig)
{
    (void)sig;
    stop = 1;
}

int cmd_fs(int argc, char **argv)
{
    struct parser p;
    const char *pos[4] = {0};
    int npos = 0, o, recursive = 0, parents = 0, append = 0;
    json_int_t depth = 1, mode = -1;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, fs_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            arg_positional(pos, &npos, 4, p.arg);
            break;
        case 1:
            recursive = 1;
            break;
        case 2:
            parents = 1;
            break;
        case 3:
            depth = arg_int("--depth", p.arg);
            break;
        case 4: {
            char *end;
            mode = strtol(p.arg, &end, 8);
            if (*end || mode < 0 || mode > 07777)
                usage_error("--mode takes octal permission bits, like 644");
            break;
        }
        case 5:
            append = 1;
            break;
        }
    }
    if (npos < 3)
        usage_error("usage: fs ls|cat|write|stat|rm|mkdir|mv|watch ID PATH");
    const char *sub = pos[0], *id = pos[1], *path = pos[2];
    sbx_ctx *c = ctl_connect();
    sbx_rpc_error *e = NULL;
    json_t *r = NULL;
    int rc = 0;
    if (!strcmp(sub, "cat")) {
        if (sbx_fs_read_stream(c, &e, id, path, write_out, stdout) != SBX_OK)
            rc = failed(c, e);
        fflush(stdout);
    } else if (!strcmp(sub, "write")) {
        /* fs write ID PATH [FILE|-]: standard input by default */
        FILE *f = npos > 3 && strcmp(pos[3], "-") ? fopen(pos[3], "rb") : stdin;
        if (!f) {
            warnx_("%s: cannot open", pos[3]);
            sbx_free(c);
            return EXIT_RPC;
        }
        json_t *opts =
            json_pack("{s:b, s:b}", "append", append, "mkdir_parents", parents);
        if (mode >= 0)
            json_object_set_new(opts, "mode", json_integer(mode));
        if (sbx_fs_write_stream(c, &r, &e, id, path, opts, read_in, f) != SBX_OK)
            rc = failed(c, e);
        else if (g.json)
            print_json(r);
        json_decref(opts);
        if (f != stdin)
            fclose(f);
    } else if (!strcmp(sub, "ls")) {
        const char *cursor = NULL;
        json_t *page = NULL;
        do {
            json_t *q =
                json_pack("{s:s, s:s, s:I}", "sandbox", id, "path", path, "depth", depth);
            if (cursor)
                json_object_set_new(q, "cursor", json_string(cursor));
            json_decref(page);
            page = NULL;
            if (ctl_call(c, SBX_M_FS_LIST, q, &page)) {
                rc = EXIT_RPC;
                break;
            }
            size_t i;
            json_t *ent;
            json_array_foreach(json_object_get(page, "entries"), i, ent) {
                if (g.json)
                    print_json(ent);
                else
                    print_entry(ent);
            }
            cursor = json_string_value(json_object_get(page, "cursor"));
        } while (cursor);
        json_decref(page);
    } else if (!strcmp(sub, "stat")) {
        rc = ctl_call(c, SBX_M_FS_STAT,
                      json_pack("{s:s, s:s}", "sandbox", id, "path", path), &r);
        if (!rc)
            print_json(r);
    } else if (!strcmp(sub, "rm")) {
        rc = ctl_call(c, SBX_M_FS_REMOVE,
                      json_pack("{s:s, s:s, s:b}", "sandbox", id, "path", path,
                                "recursive", recursive),
                      &r);
    } else if (!strcmp(sub, "mkdir")) {
        rc = ctl_call(
            c, SBX_M_FS_MKDIR,
            json_pack("{s:s, s:s, s:b}", "sandbox", id, "path", path, "parents", parents),
            &r);
    } else if (!strcmp(sub, "mv")) {
        if (npos < 4)
            usage_error("usage: fs mv ID PATH TO");
        rc = ctl_call(
            c, SBX_M_FS_RENAME,
            json_pack("{s:s, s:s, s:s}", "sandbox", id, "path", path, "to", pos[3]), &r);
    } else if (!strcmp(sub, "watch")) {
        rc = ctl_call(c, SBX_M_FS_WATCH,
                      json_pack("{s:s, s:s, s:b}", "sandbox", id, "path", path,
                                "recursive", recursive),
                      &r);
        signal(SIGINT, on_sigint);
        signal(SIGTERM, on_sigint);
        setvbuf(stdout, NULL, _IOLBF, 0);
        while (!rc && !stop) {
            json_t *n = NULL;
            if (sbx_read_notification(c, &n, 500) != SBX_OK) {
                if (c->err == SBX_ERR_TIMEOUT)
                    continue;
                rc = failed(c, NULL);
                break;
            }
            json_t *prm = json_object_get(n, "params");
            const char *m = json_string_value(json_object_get(n, "method"));
            if (m && !strcmp(m, SBX_N_FS_EVENT)) {
                if (g.json)
                    print_json(prm);
                else
                    printf("%s %s\n", json_string_value(json_object_get(prm, "kind")),
                           json_string_value(json_object_get(prm, "path")));
            }
            json_decref(n);
        }
    } else {
        usage_error("unknown fs command: %s (ls, cat, write, stat, rm, mkdir, mv, watch)",
                    sub);
    }
    if (!rc && g.json && r && strcmp(sub, "stat") && strcmp(sub, "write"))
        print_json(r);
    json_decref(r);
    sbx_free(c);
    return rc;
}
