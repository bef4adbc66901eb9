/*
 * events.c - sbxctl events: sandbox status changes and process exits, as they
 * happen, one line each (docker events' shape).
 *
 * sbxd pushes sandbox.status to every session of the owner; process.exit goes
 * only to the session that follows a process, so exits are found by asking
 * process.list of the sandboxes that run, once a second (POLL_MS), and
 * reporting each exited process not reported before (sbxd keeps exited
 * records a while, so a process shorter than a poll is seen too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbxctl.h"

#define POLL_MS 1000
#define MAX_TRACKED 4096 /* exited processes remembered, over all sandboxes */

struct seen { /* an exited process already reported (or there at the start) */
    char *sandbox;
    json_int_t pid;
    int listed; /* still in process.list this round */
};

struct events {
    const char **only; /* sandbox ids to report (NULL: all) */
    int nonly;
    struct seen *procs;
    size_t nprocs;
};

static int wanted(const struct events *e, const char *sandbox)
{
    if (!e->nonly)
        return 1;
    for (int i = 0; i < e->nonly; i++)
        if (sandbox && !strcmp(e->only[i], sandbox))
            return 1;
    return 0;
}

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* The time now, as sbxd writes times (UTC, milliseconds). */
static void now_text(char *buf, size_t size)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%03ldZ", base, ts.tv_nsec / 1000000);
}

/* One event: a line, or with --json an object {time, type, ...fields}. */
static void emit(const char *type, json_t *fields)
{
    char t[48];
    now_text(t, sizeof(t));
    if (g.json) {
        json_t *o = json_pack("{s:s, s:s}", "time", t, "type", type);
        json_object_update(o, fields);
        print_json(o);
        json_decref(o);
    } else if (!strcmp(type, "sandbox")) {
        const char *err = json_string_value(json_object_get(fields, "error"));
        printf("%s sandbox %s %s%s%s\n", t,
               json_string_value(json_object_get(fields, "sandbox")),
               json_string_value(json_object_get(fields, "status")), err ? ": " : "",
               err ? err : "");
    } else {
        char *cmd = field_text(fields, "command");
        char *code = field_text(fields, "exit_code");
        printf("%s process %s %" JSON_INTEGER_FORMAT " exited %s  %s\n", t,
               json_string_value(json_object_get(fields, "sandbox")),
               json_integer_value(json_object_get(fields, "pid")), code[0] ? code : "?",
               cmd);
        free(cmd);
        free(code);
    }
    fflush(stdout);
}

static struct seen *find_seen(struct events *e, const char *sandbox, json_int_t pid)
{
    for (size_t i = 0; i < e->nprocs; i++)
        if (e->procs[i].pid == pid && !strcmp(e->procs[i].sandbox, sandbox))
            return &e->procs[i];
    return NULL;
}

static void forget(struct events *e, size_t i)
{
    free(e->procs[i].sandbox);
    e->procs[i] = e->procs[--e->nprocs];
}

/* One round: every running sandbox's processes; an exit is an exited
 * process not seen before. The first round (report 0) only learns them. */
static int poll_processes(sbx_ctx *c, struct events *e, int report)
{
    json_t *r, *sb, *pr;
    size_t i, k;
    if (ctl_call(c, SBX_M_LIST, json_object(), &r))
        return EXIT_RPC;
    for (i = 0; i < e->nprocs; i++)
        e->procs[i].listed = 0;
    json_array_foreach(json_object_get(r, "sandboxes"), i, sb) {
        const char *id = json_string_value(json_object_get(sb, "id"));
        const char *st = json_string_value(json_object_get(sb, "status"));
        if (!id || !st || strcmp(st, "running") != 0 || !wanted(e, id))
            continue;
        json_t *pl = NULL;
        sbx_rpc_error *err = NULL;
        json_t *params = json_pack("{s:s}", "sandbox", id);
        if (sbx_call_new(c, &pl, &err, SBX_M_PLIST, params) != SBX_OK) {
            sbx_rpc_error_free(err); /* gone between the two calls: next round */
            if (c->err != SBX_ERR_RPC) {
                json_decref(r);
                warnx_("%s", c->errstr);
                return EXIT_RPC;
            }
            continue;
        }
        json_array_foreach(json_object_get(pl, "processes"), k, pr) {
            json_int_t pid = json_integer_value(json_object_get(pr, "pid"));
            const char *ps = json_string_value(json_object_get(pr, "status"));
            if (!ps || strcmp(ps, "exited") != 0)
                continue;
            struct seen *s = find_seen(e, id, pid);
            if (s) {
                s->listed = 1;
                continue;
            }
            if (e->nprocs < MAX_TRACKED)
                e->procs[e->nprocs++] = (struct seen){ctl_nonnull(strdup(id)), pid, 1};
            if (!report)
                continue;
            json_t *code = json_object_get(pr, "exit_code");
            json_t *cmd = json_object_get(pr, "command");
            json_t *f =
                json_pack("{s:s, s:I, s:O, s:O}", "sandbox", id, "pid", pid, "exit_code",
                          code ? code : json_null(), "command", cmd ? cmd : json_null());
            emit("process", f);
            json_decref(f);
        }
        json_decref(pl);
    }
    json_decref(r);
    for (i = e->nprocs; i-- > 0;)
        if (!e->procs[i].listed)
            forget(e, i); /* its record (or sandbox) is gone: it cannot come back */
    return 0;
}

int cmd_events(int argc, char **argv)
{
    struct parser p;
    struct events e = {0};
    int o, rc = 0;

    e.only = ctl_nonnull(calloc((size_t)argc + 1, sizeof(*e.only)));
    e.procs = ctl_nonnull(calloc(MAX_TRACKED, sizeof(*e.procs)));
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        e.only[e.nonly++] = p.arg;
    }
    sbx_ctx *c = ctl_connect();
    if ((rc = poll_processes(c, &e, 0)) != 0)
        goto out;
    double last = mono_ms();
    for (;;) {
        json_t *n;
        int wait = (int)(last + POLL_MS - mono_ms());
        if (wait > 0 && sbx_read_notification(c, &n, wait) == SBX_OK) {
            const char *method = json_string_value(json_object_get(n, "method"));
            json_t *params = json_object_get(n, "params");
            if (method && !strcmp(method, SBX_N_STATUS) &&
                wanted(&e, json_string_value(json_object_get(params, "sandbox"))))
                emit("sandbox", params);
            json_decref(n);
            continue;
        }
        if (wait > 0 && c->err != SBX_ERR_TIMEOUT) {
            warnx_("sbxd: %s", c->errstr);
            rc = EXIT_RPC;
            break;
        }
        if ((rc = poll_processes(c, &e, 1)) != 0)
            break;
        last = mono_ms();
    }
out:
    sbx_free(c);
    for (size_t i = 0; i < e.nprocs; i++)
        free(e.procs[i].sandbox);
    free(e.procs);
    free(e.only);
    return rc;
}
