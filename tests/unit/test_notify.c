/*
 * test_notify.c - daemon/rpc/notify.c, the protocol floor's side of the
 * core's events: process.output lines written by hand are exactly what
 * jansson would write for the same message (so the fast path changes no
 * byte), each follower gets the variant its encoding and timestamps ask
 * for, a replay piece and process.exit carry the right members, and
 * sandbox.status reaches only the owner's connections.
 */
#include <signal.h>

#include "rpc/conn.h"
#include "daemon.h"
#include "core/events.h"
#include "rpc/notify.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"

static int f_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static int f_available(void *cookie, const char **reason)
{
    return 1;
}
static int f_op(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
static int f_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    return 0;
}
static int f_kill(void *c, struct process *p, int sig, sbx_err_t *e)
{
    json_t *rec = json_pack("{s:i, s:i}", "exit_code", 128 + sig, "signal", sig);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

static const struct sbx_provider fake = {
    .name = "fake",
    .load = f_load,
    .available = f_available,
    .sb_start = f_op,
    .sb_stop = f_op,
    .sb_destroy = f_op,
    .proc_spawn = f_spawn,
    .proc_kill = f_kill,
};

/* A connection that keeps the last line sent to it. */
struct tconn {
    struct rpc_conn k;
    int n;
    char last[4096];
};
static void t_send_line(struct rpc_conn *k, const char *text, size_t len)
{
    struct tconn *t = (struct tconn *)k;
    t->n++;
    snprintf(t->last, sizeof(t->last), "%.*s", (int)len, text);
}
static const struct rpc_conn_ops tops = {.send_line = t_send_line};

static struct daemon d;

/* The line, parsed and encoded again by jansson, gives the same bytes. */
static int same_as_jansson(const char *line)
{
    json_t *v = json_loads(line, JSON_ALLOW_NUL, NULL);
    char *again = v ? json_dumps(v, JSON_COMPACT) : NULL;
    int same = again && strcmp(again, line) == 0;
    if (!same)
        printf("      fast:    %s\n      jansson: %s\n", line, again ? again : "(none)");
    free(again);
    json_decref(v);
    return same;
}

static const char *member(const char *line, const char *key, char *buf, size_t n)
{
    json_t *v = json_loads(line, JSON_ALLOW_NUL, NULL);
    json_t *x = json_object_get(json_object_get(v, "params"), key);
    snprintf(buf, n, "%s",
             x ? (json_is_string(x) ? json_string_value(x) : "<other>") : "");
    json_decref(v);
    return buf;
}

static void test_output_lines(struct process *p, struct tconn *a, struct tconn *b,
                              struct tconn *t)
{
    char buf[256];
    process_subscribe(p, &a->k.fol, ENC_UTF8, 0);
    process_subscribe(p, &b->k.fol, ENC_AUTO, 0);
    process_subscribe(p, &t->k.fol, ENC_UTF8, 1);
    process_output(p, SBX_STREAM_STDOUT, "h\xc3\xa9llo \"q\"\n\t", 12);
    test_cond("the hand-written line is byte for byte jansson's",
              a->n == 1 && same_as_jansson(a->last) && same_as_jansson(t->last));
    test_cond("text goes as data to utf8 and auto followers alike",
              strcmp(member(a->last, "data", buf, sizeof(buf)),
                     "h\xc3\xa9llo \"q\"\n\t") == 0 &&
                  strcmp(a->last, b->last) == 0);
    test_cond("the timed follower's line carries its time, the others' not",
              strlen(member(t->last, "time", buf, sizeof(buf))) == 30 &&
                  !strstr(a->last, "\"time\""));
    process_output(p, SBX_STREAM_STDERR, "\0\0\0\0\0\0", 6);
    test_cond("NULs: utf8 gets escaped data, auto the shorter base64",
              strstr(a->last, "\"data\":\"\\u0000") &&
                  strstr(b->last, "\"data_b64\":\"") && same_as_jansson(a->last) &&
                  same_as_jansson(b->last));
    process_output(p, SBX_STREAM_STDOUT, "\xff\xfe", 2);
    test_cond("invalid UTF-8 is base64 for everyone",
              strstr(a->last, "\"data_b64\":\"//4=\"") && strcmp(a->last, b->last) == 0);
}

static void test_replay_and_exit(struct process *p, struct tconn *a)
{
    char buf[64];
    struct replay_opts o = {.timestamps = 1};
    int n0 = a->n;
    json_decref(process_replay(p, &a->k.fol, &o));
    test_cond("a timed replay's pieces carry their time",
              a->n > n0 && strlen(member(a->last, "time", buf, sizeof(buf))) == 30 &&
                  strstr(a->last, "\"method\":\"process.output\""));
    sbx_err_t err = {0};
    process_kill(p, SIGTERM, &err);
    test_cond("process.exit with its members",
              strstr(a->last, "\"method\":\"process.exit\"") &&
                  strstr(a->last, "\"exit_code\":143") &&
                  strstr(a->last, "\"killed\":true") &&
                  strstr(a->last, "\"error\":null"));
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    D = &d;
    config_init_defaults(&d.cfg);
    d.loop = EV_DEFAULT;
    d.snapshots = json_object();
    d.providers[0].ops = &fake;
    d.providers[0].enabled = d.providers[0].loaded = 1;
    d.nproviders = 1;
    notify_init();

    static struct tconn a, b, t, other;
    conn_init(&a.k, 1, 0, 0, &tops);
    conn_init(&b.k, 2, 0, 0, &tops);
    conn_init(&t.k, 3, 0, 0, &tops);
    conn_init(&other.k, 4, 1000, 0, &tops);
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    sandbox_new(&sb, "n1", &d.providers[0], 0,
                json_pack("{s:i, s:i, s:i}", "timeout_ms", 60000, "idle_timeout_ms", 0,
                          "command_timeout_ms", 60000),
                &err);
    sandbox_start(sb, NULL, NULL);
    test_cond("sandbox.status goes to the owner's connections only",
              strstr(a.last, "\"method\":\"sandbox.status\"") &&
                  strstr(a.last, "\"status\":\"running\"") && other.n == 0);
    json_t *cmd = json_string("run");
    struct proc_opts po = {.command = cmd};
    struct process *p = NULL;
    process_new(&p, sb, &po, &err);
    process_launch(p, &err);
    json_decref(cmd);
    a.n = 0;
    test_output_lines(p, &a, &b, &t);
    test_replay_and_exit(p, &a);
    sandbox_progress(sb, json_pack("{s:s}", "stage", "pull"));
    test_cond("a provider's progress names the sandbox",
              strstr(a.last, "\"method\":\"sandbox.progress\"") &&
                  strstr(a.last, "\"sandbox\":\"n1\"") && other.n == 0);

    core_events_set(NULL);
    sandbox_free_all();
    conn_deinit(&a.k);
    conn_deinit(&b.k);
    conn_deinit(&t.k);
    conn_deinit(&other.k);
    json_decref(d.snapshots);
    config_deinit(&d.cfg);
    return test_report();
}
