/*
 * sandbox.c - sbxctl verbs about the daemon and sandboxes: ping, info, create,
 * ls, get, stop, start, rm, snapshot, clone, set-env, instructions.
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "sbxctl.h"

/* Parses a verb that takes exactly `n` positionals and no options of its own. */
static void positionals(int argc, char **argv, int n, const char **out)
{
    struct parser p;
    int o, got = 0;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        arg_positional(out, &got, n, p.arg);
    }
    if (got < n)
        usage_error("missing argument");
}

/* Prints "key: value" lines, nested values as compact JSON. */
static void print_fields(json_t *obj)
{
    const char *key;
    json_t *v;

    json_object_foreach(obj, key, v) {
        char *t = field_text(obj, key);
        printf("%s: %s\n", key, t ? t : "");
        free(t);
    }
}

static void progress_cb(sbx_ctx *c, const char *method, json_t *params, void *privdata)
{
    (void)c;
    (void)privdata;
    print_progress(method, params);
}

/* ---- ping, info -------------------------------------------------------------------- */

int cmd_ping(int argc, char **argv)
{
    json_t *r;
    positionals(argc, argv, 0, NULL);
    int rc = ctl_simple(SBX_M_PING, json_object(), &r);
    if (rc)
        return rc;
    if (!g.json) {
        const char *t = json_string_value(json_object_get(r, "time"));
        printf("pong%s%s\n", t ? " " : "", t ? t : "");
    }
    json_decref(r);
    return 0;
}

int cmd_info(int argc, char **argv)
{
    json_t *r, *v;
    size_t i;
    const char *key;

    positionals(argc, argv, 0, NULL);
    int rc = ctl_simple(SBX_M_INFO, json_object(), &r);
    if (rc)
        return rc;
    if (g.json) {
        json_decref(r);
        return 0;
    }
    json_object_foreach(r, key, v) {
        if (strcmp(key, "providers") == 0) {
            json_t *pv;
            printf("providers:\n");
            json_array_foreach(v, i, pv) {
                const char *reason = json_string_value(json_object_get(pv, "reason"));
                printf("  %-10s %s%s%s%s\n",
                       json_string_value(json_object_get(pv, "name"))
                           ? json_string_value(json_object_get(pv, "name"))
                           : "?",
                       json_is_true(json_object_get(pv, "available")) ? "available"
                                                                      : "unavailable",
                       json_is_true(json_object_get(pv, "default")) ? " (default)" : "",
                       reason ? ": " : "", reason ? reason : "");
            }
        } else if (json_is_object(v)) {
            const char *k2;
            json_t *v2;
            printf("%s:\n", key);
            json_object_foreach(v, k2, v2) {
                char *t = field_text(v, k2);
                printf("  %s: %s\n", k2, t ? t : "");
                free(t);
            }
        } else if (strcmp(key, "uptime_s") == 0 && json_is_number(v)) {
            char d[48];
            format_duration(d, sizeof(d), json_number_value(v));
            printf("uptime: %s\n", d);
        } else {
            char *t = field_text(r, key);
            printf("%s: %s\n", key, t ? t : "");
            free(t);
        }
    }
    json_decref(r);
    return 0;
}

/* ---- create ----------------------------------------------------------------------- */

enum {
    C_PROVIDER = 1,
    C_ID,
    C_IMAGE,
    C_ENV,
    C_WORKDIR,
    C_TIMEOUT,
    C_IDLE,
    C_OPT,
    C_TOOL,
    C_MEMORY,
    C_SNAPSHOT,
    C_NOSTART,
    C_INSTRUCTIONS,
    C_FRESH,
    C_CMD_TIMEOUT,
    C_INSTR_APPEND,
    C_ON_START,
    C_ON_STOP,
    C_ON_DESTROY,
};

static const struct opt create_opts[] = {
    {"provider", 'p', 1, C_PROVIDER},
    {"id", 0, 1, C_ID},
    {"image", 'i', 1, C_IMAGE},
    {"env", 'e', 1, C_ENV},
    {"workdir", 'w', 1, C_WORKDIR},
    {"lifetime", 0, 1, C_TIMEOUT},
    {"timeout", 0, 1, C_TIMEOUT}, /* the old name of --lifetime */
    {"command-timeout", 0, 1, C_CMD_TIMEOUT},
    {"idle-timeout", 0, 1, C_IDLE},
    {"opt", 'o', 1, C_OPT},
    {"tool", 0, 1, C_TOOL},
    {"memory-mb", 0, 1, C_MEMORY},
    {"snapshot", 0, 1, C_SNAPSHOT},
    {"no-start", 0, 0, C_NOSTART},
    {"instructions", 0, 1, C_INSTRUCTIONS},
    {"fresh-isolate", 0, 0, C_FRESH},
    {"instructions-append", 0, 1, C_INSTR_APPEND},
    {"on-start", 0, 1, C_ON_START},
    {"on-stop", 0, 1, C_ON_STOP},
    {"on-destroy", 0, 1, C_ON_DESTROY},
    {NULL, 0, 0, 0},
};

int cmd_create(int argc, char **argv)
{
    struct parser p;
    json_t *params = json_object(), *r;
    int o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, create_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            usage_error("unexpected argument: %s", p.arg);
        case C_PROVIDER:
            json_object_set_new(params, "provider", json_string(p.arg));
            break;
        case C_ID:
            json_object_set_new(params, "id", json_string(p.arg));
            break;
        case C_IMAGE:
            json_object_set_new(params, "image", json_string(p.arg));
            break;
        case C_ENV:
            arg_env(obj_object(params, "env"), p.arg, 0);
            break;
        case C_WORKDIR:
            json_object_set_new(params, "working_dir", json_string(p.arg));
            break;
        case C_TIMEOUT:
            json_object_set_new(params, "timeout_ms",
                                json_integer(arg_int("--lifetime", p.arg)));
            break;
        case C_CMD_TIMEOUT:
            json_object_set_new(params, "command_timeout_ms",
                                json_integer(arg_int("--command-timeout", p.arg)));
            break;
        case C_IDLE:
            json_object_set_new(params, "idle_timeout_ms",
                                json_integer(arg_int("--idle-timeout", p.arg)));
            break;
        case C_OPT:
            arg_opt(obj_object(params, "options"), p.arg);
            break;
        case C_TOOL:
            json_array_append_new(obj_array(params, "tools"), json_string(p.arg));
            break;
        case C_MEMORY:
            json_object_set_new(params, "memory_limit_mb",
                                json_integer(arg_int("--memory-mb", p.arg)));
            break;
        case C_SNAPSHOT:
            json_object_set_new(params, "snapshot", json_string(p.arg));
            break;
        case C_NOSTART:
            json_object_set_new(params, "start", json_false());
            break;
        case C_INSTRUCTIONS:
            json_object_set_new(params, "instructions", json_string(p.arg));
            break;
        case C_FRESH:
            json_object_set_new(params, "fresh_isolate", json_true());
            break;
        case C_INSTR_APPEND:
            json_object_set_new(params, "instructions_append", json_string(p.arg));
            break;
        case C_ON_START:
            json_object_set_new(params, "on_start", json_string(p.arg));
            break;
        case C_ON_STOP:
            json_object_set_new(params, "on_stop", json_string(p.arg));
            break;
        case C_ON_DESTROY:
            json_object_set_new(params, "on_destroy", json_string(p.arg));
            break;
        }
    }

    sbx_ctx *c = ctl_connect();
    sbx_set_notify_cb(c, progress_cb, NULL);
    int rc = ctl_call(c, SBX_M_CREATE, params, &r);
    sbx_free(c);
    if (rc)
        return rc;
    if (g.json) {
        print_json(r);
    } else {
        printf("%s\n", json_string_value(json_object_get(r, "id")));
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(r, "warnings"), i, w)
            warnx_("warning: %s", json_string_value(w) ? json_string_value(w) : "?");
    }
    json_decref(r);
    return 0;
}

/* ---- ls, get ----------------------------------------------------------------------- */

static const struct opt ls_opts[] = {
    {"provider", 'p', 1, 1},
    {"status", 0, 1, 2},
    {"quiet", 'q', 0, 3},
    {NULL, 0, 0, 0},
};

/* The image a sandbox runs: create's image, else the provider's (metadata). */
static const char *sandbox_image(json_t *sb)
{
    const char *img = json_string_value(json_object_get(sb, "image"));
    if (!img)
        img =
            json_string_value(json_object_get(json_object_get(sb, "metadata"), "image"));
    return img ? img : "-";
}

int cmd_ls(int argc, char **argv)
{
    struct parser p;
    json_t *params = json_object(), *r, *sb;
    int o, quiet = 0;
    size_t i;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, ls_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            usage_error("unexpected argument: %s", p.arg);
        if (o == 3)
            quiet = 1;
        else
            json_object_set_new(params, o == 1 ? "provider" : "status",
                                json_string(p.arg));
    }
    int rc = ctl_simple(SBX_M_LIST, params, &r);
    if (rc || g.json) {
        json_decref(r);
        return rc;
    }

    json_t *list = json_object_get(r, "sandboxes");
    if (quiet) { /* ids only, for $(sbxctl ls -q) */
        json_array_foreach(list, i, sb)
            printf("%s\n", json_string_value(json_object_get(sb, "id")));
        json_decref(r);
        return 0;
    }
    int wid = 2, wprov = 8, wstat = 6, wimg = 5;
    json_array_foreach(list, i, sb) {
        const char *id = json_string_value(json_object_get(sb, "id"));
        const char *pr = json_string_value(json_object_get(sb, "provider"));
        const char *st = json_string_value(json_object_get(sb, "status"));
        if (id && (int)strlen(id) > wid)
            wid = (int)strlen(id);
        if (pr && (int)strlen(pr) > wprov)
            wprov = (int)strlen(pr);
        if (st && (int)strlen(st) > wstat)
            wstat = (int)strlen(st);
        if ((int)strlen(sandbox_image(sb)) > wimg)
            wimg = (int)strlen(sandbox_image(sb));
    }
    printf("%-*s  %-*s  %-*s  %-*s  %s\n", wid, "ID", wprov, "PROVIDER", wimg, "IMAGE",
           wstat, "STATUS", "CREATED");
    json_array_foreach(list, i, sb) {
        const char *id = json_string_value(json_object_get(sb, "id"));
        const char *pr = json_string_value(json_object_get(sb, "provider"));
        const char *st = json_string_value(json_object_get(sb, "status"));
        const char *cr = json_string_value(json_object_get(sb, "created_at"));
        printf("%-*s  %-*s  %-*s  %-*s  %s\n", wid, id ? id : "?", wprov, pr ? pr : "?",
               wimg, sandbox_image(sb), wstat, st ? st : "?", cr ? cr : "");
    }
    json_decref(r);
    return 0;
}

int cmd_get(int argc, char **argv)
{
    const char *id;
    json_t *r;
    positionals(argc, argv, 1, &id);
    int rc = ctl_simple(SBX_M_GET, json_pack("{s:s}", "id", id), &r);
    if (rc)
        return rc;
    if (!g.json)
        print_fields(r);
    json_decref(r);
    return 0;
}

/* ---- stop, start, rm, snapshot, instructions --------------------------------------- */

/* A verb taking one sandbox id; prints `field` of the result (or the id). */
static int id_verb(int argc, char **argv, const char *method, const char *field)
{
    const char *id;
    json_t *r;

    positionals(argc, argv, 1, &id);
    sbx_ctx *c = ctl_connect();
    sbx_set_notify_cb(c, progress_cb, NULL);
    int rc = ctl_call(c, method, json_pack("{s:s}", "id", id), &r);
    sbx_free(c);
    if (rc)
        return rc;
    if (g.json) {
        print_json(r);
    } else if (field) {
        const char *v = json_string_value(json_object_get(r, field));
        printf("%s\n", v ? v : "");
    }
    json_decref(r);
    return 0;
}

int cmd_stop(int argc, char **argv)
{
    return id_verb(argc, argv, SBX_M_STOP, NULL);
}

int cmd_start(int argc, char **argv)
{
    return id_verb(argc, argv, SBX_M_START, NULL);
}

static const struct opt rm_opts[] = {
    {"force", 'f', 0, 1},
    {NULL, 0, 0, 0},
};

/* rm [-f] ID...: destroys each (a running sandbox too: destroy kills its
 * processes, so -f is accepted for docker's habit and changes nothing);
 * prints each id destroyed, as docker rm does; 125 if any failed. */
int cmd_rm(int argc, char **argv)
{
    struct parser p;
    const char **ids = ctl_nonnull(calloc((size_t)argc + 1, sizeof(*ids)));
    int o, n = 0, rc = 0;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, rm_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            ids[n++] = p.arg;
    }
    if (!n)
        usage_error("missing sandbox ID");
    sbx_ctx *c = ctl_connect();
    sbx_set_notify_cb(c, progress_cb, NULL);
    for (int i = 0; i < n; i++) {
        json_t *r;
        if (ctl_call(c, SBX_M_DESTROY, json_pack("{s:s}", "id", ids[i]), &r)) {
            rc = EXIT_RPC;
            if (c->err && c->err != SBX_ERR_RPC)
                break; /* the connection is gone */
            continue;
        }
        if (g.json)
            print_json(r);
        else
            printf("%s\n", ids[i]);
        json_decref(r);
    }
    sbx_free(c);
    free(ids);
    return rc;
}

static const struct opt snapshot_opts[] = {
    {"ttl", 0, 1, 1}, /* seconds the snapshot's image lives, or "never" */
    {NULL, 0, 0, 0},
};

int cmd_snapshot(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL;
    json_t *params = json_object(), *r;
    int o;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, snapshot_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG && id)
            usage_error("unexpected argument: %s", p.arg);
        if (o == OPT_ARG)
            id = p.arg;
        else
            json_object_set_new(
                params, "ttl",
                json_integer(strcmp(p.arg, "never") == 0 ? -1 : arg_int("--ttl", p.arg)));
    }
    if (!id)
        usage_error("missing sandbox ID");
    json_object_set_new(params, "id", json_string(id));
    sbx_ctx *c = ctl_connect();
    sbx_set_notify_cb(c, progress_cb, NULL);
    int rc = ctl_call(c, SBX_M_SNAPSHOT, params, &r);
    sbx_free(c);
    if (rc)
        return rc;
    if (g.json)
        print_json(r);
    else
        printf("%s\n", json_string_value(json_object_get(r, "snapshot")));
    json_decref(r);
    return 0;
}

/* ---- snapshots --------------------------------------------------------------------- */

static const struct opt snapshots_opts[] = {
    {"provider", 'p', 1, 1},
    {NULL, 0, 0, 0},
};

int cmd_snapshots(int argc, char **argv)
{
    struct parser p;
    json_t *params = json_object(), *r, *s;
    int o;
    size_t i;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, snapshots_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            usage_error("unexpected argument: %s", p.arg);
        json_object_set_new(params, "provider", json_string(p.arg));
    }
    int rc = ctl_simple(SBX_M_SNAPSHOT_LIST, params, &r);
    if (rc || g.json) {
        json_decref(r);
        return rc;
    }
    printf("%-22s  %-8s  %-10s  %-24s  %s\n", "SNAPSHOT", "PROVIDER", "OWNER", "CREATED",
           "FROM");
    json_array_foreach(json_object_get(r, "snapshots"), i, s) {
        /* The owner by name where this host knows the uid (getpwuid_r:
         * the number otherwise). */
        char owner[64], pwbuf[1024];
        struct passwd pw, *pwp = NULL;
        uid_t uid = (uid_t)json_integer_value(json_object_get(s, "owner_uid"));
        if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp)
            snprintf(owner, sizeof(owner), "%s", pwp->pw_name);
        else
            snprintf(owner, sizeof(owner), "%u", (unsigned)uid);
        const char *from = json_string_value(json_object_get(s, "sandbox"));
        printf("%-22s  %-8s  %-10s  %-24s  %s\n",
               json_string_value(json_object_get(s, "snapshot")),
               json_string_value(json_object_get(s, "provider")), owner,
               json_string_value(json_object_get(s, "created_at")), from ? from : "-");
    }
    json_array_foreach(json_object_get(r, "errors"), i, s)
        warnx_("%s: %s", json_string_value(json_object_get(s, "provider")),
               json_string_value(json_object_get(s, "message")));
    json_decref(r);
    return 0;
}

int cmd_snapshot_rm(int argc, char **argv)
{
    const char *id;
    json_t *r;
    positionals(argc, argv, 1, &id);
    int rc = ctl_simple(SBX_M_SNAPSHOT_DELETE, json_pack("{s:s}", "snapshot", id), &r);
    if (rc)
        return rc;
    if (g.json)
        print_json(r);
    json_decref(r);
    return 0;
}

int cmd_instructions(int argc, char **argv)
{
    const char *id;
    json_t *r;

    positionals(argc, argv, 1, &id);
    int rc = ctl_simple(SBX_M_INSTRUCTIONS, json_pack("{s:s}", "id", id), &r);
    if (rc)
        return rc;
    if (!g.json) {
        const char *t = json_string_value(json_object_get(r, "text"));
        size_t n = t ? strlen(t) : 0;
        fputs(t ? t : "", stdout);
        if (n == 0 || t[n - 1] != '\n')
            putchar('\n');
    }
    json_decref(r);
    return 0;
}

/* ---- clone, set-env ---------------------------------------------------------------- */

static const struct opt clone_opts[] = {
    {"id", 0, 1, 1},    {"env", 'e', 1, 2},        {"workdir", 'w', 1, 3},
    {"start", 0, 0, 4}, {"idle-timeout", 0, 1, 5}, {NULL, 0, 0, 0},
};

int cmd_clone(int argc, char **argv)
{
    struct parser p;
    json_t *params = json_object(), *r;
    const char *id = NULL;
    int o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, clone_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            if (id)
                usage_error("unexpected argument: %s", p.arg);
            id = p.arg;
            break;
        case 1:
            json_object_set_new(params, "new_id", json_string(p.arg));
            break;
        case 2:
            arg_env(obj_object(params, "env"), p.arg, 1);
            break;
        case 3:
            json_object_set_new(params, "working_dir", json_string(p.arg));
            break;
        case 4:
            json_object_set_new(params, "start", json_true());
            break;
        case 5:
            json_object_set_new(params, "idle_timeout_ms",
                                json_integer(arg_int("--idle-timeout", p.arg)));
            break;
        }
    }
    if (!id)
        usage_error("missing sandbox ID");
    json_object_set_new(params, "id", json_string(id));
    int rc = ctl_simple(SBX_M_CLONE, params, &r);
    if (rc)
        return rc;
    if (!g.json)
        printf("%s\n", json_string_value(json_object_get(r, "id")));
    json_decref(r);
    return 0;
}

int cmd_set_env(int argc, char **argv)
{
    struct parser p;
    json_t *env = json_object(), *r;
    const char *id = NULL;
    int o;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (!id)
            id = p.arg;
        else
            arg_env(env, p.arg, 1);
    }
    if (!id)
        usage_error("missing sandbox ID");
    if (json_object_size(env) == 0)
        usage_error("missing K=V");
    int rc = ctl_simple(SBX_M_SET_ENV, json_pack("{s:s, s:o}", "id", id, "env", env), &r);
    if (rc)
        return rc;
    if (!g.json) {
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(r, "env"), k, v) {
            if (json_is_string(v))
                printf("%s=%s\n", k, json_string_value(v));
        }
    }
    json_decref(r);
    return 0;
}
