/*
 * fakeprov.c - the fake provider of the unit tests (fakeprov.h): lifecycle
 * ops that finish when the test says so, processes driven by their command.
 */
#include "fakeprov.h"

#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "rpc/notify.h"
#include "core/output.h"
#include "rpc/parse.h"
#include "core/process.h"
#include "rpc/rpc.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "rpc/session.h"
#include "rpc/toolcall.h"

struct fakeprov_state fakeprov;
struct daemon fakeprov_daemon;
static ev_prepare prepare;

/* ---- lifecycle ----------------------------------------------------------------- */

static void forget(struct sandbox *sb)
{
    int j = 0;
    for (int i = 0; i < fakeprov.npending; i++)
        if (fakeprov.pending[i] != sb)
            fakeprov.pending[j++] = fakeprov.pending[i];
    fakeprov.npending = j;
}

/* Ends an op of sb now: success (with start_result for a start), or the
 * configured failure. */
static void finish(struct sandbox *sb, int code, const char *msg)
{
    if (code) {
        sbx_err_t err = {0};
        err_make(&err, code, "%s", msg ? msg : "fake: failed");
        sandbox_op_done(sb, &err, NULL);
        err_clear(&err);
        return;
    }
    json_t *result = NULL;
    if (sb->op == OP_START && fakeprov.start_result) {
        result = fakeprov.start_result;
        fakeprov.start_result = NULL;
    } else if (sb->op == OP_SNAPSHOT) {
        result = json_pack("{s:s}", "fake", sb->id);
    }
    sandbox_op_done(sb, NULL, result);
}

static int op(struct sandbox *sb, int *count, sbx_err_t *err)
{
    (*count)++;
    if (fakeprov.fail_now) {
        int code = fakeprov.fail_now;
        fakeprov.fail_now = 0;
        return err_make(err, code, "fake: refused at once");
    }
    if (fakeprov.defer && fakeprov.npending < FAKEPROV_MAX_PENDING) {
        fakeprov.pending[fakeprov.npending++] = sb;
        return 0;
    }
    finish(sb, fakeprov.fail_code, "fake: failed");
    return 0;
}

int fakeprov_finish(int code, const char *msg)
{
    if (fakeprov.npending == 0)
        return -1;
    struct sandbox *sb = fakeprov.pending[0];
    forget(sb);
    finish(sb, code, msg);
    return 0;
}

static int f_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static void f_unload(void *cookie)
{
}
static int f_available(void *cookie, const char **reason)
{
    return 1;
}
static int f_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return op(sb, &fakeprov.n_start, err);
}
static int f_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return op(sb, &fakeprov.n_stop, err);
}
static int f_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return op(sb, &fakeprov.n_destroy, err);
}
static int f_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return op(sb, &fakeprov.n_snapshot, err);
}
/* A destroy while an op waits: end that op, so the destroy goes ahead. */
static void f_cancel(void *cookie, struct sandbox *sb)
{
    fakeprov.n_cancel++;
    for (int i = 0; i < fakeprov.npending; i++)
        if (fakeprov.pending[i] == sb) {
            forget(sb);
            finish(sb, SBX_E_PROVIDER, "fake: cancelled by destroy");
            return;
        }
}
static void f_release(void *cookie, struct sandbox *sb)
{
    fakeprov.n_release++;
    forget(sb);
}

/* ---- processes ---------------------------------------------------------------- */

static void exit_with(struct process *p, int code)
{
    json_t *rec = json_pack("{s:i}", "exit_code", code);
    process_exited(p, rec);
    json_decref(rec);
}

static int f_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    fakeprov.n_spawn++;
    const char *code = json_string_value(json_object_get(p->spec, "code"));
    if (!code)
        code = json_string_value(json_object_get(p->spec, "shell"));
    if (!code)
        code = "";
    process_started(p, 4242);
    if (strncmp(code, "out ", 4) == 0) {
        process_output(p, SBX_STREAM_STDOUT, code + 4, strlen(code + 4));
        exit_with(p, 0);
    } else if (strncmp(code, "err ", 4) == 0) {
        process_output(p, SBX_STREAM_STDERR, code + 4, strlen(code + 4));
        exit_with(p, 1);
    } else if (strncmp(code, "exit ", 5) == 0) {
        exit_with(p, atoi(code + 5));
    }
    return 0;
}
static int f_write(void *c, struct process *p, const void *d, size_t n, sbx_err_t *e)
{
    fakeprov.n_write++;
    size_t room = sizeof(fakeprov.stdin_bytes) - fakeprov.stdin_len;
    size_t k = n < room ? n : room;
    memcpy(fakeprov.stdin_bytes + fakeprov.stdin_len, d, k);
    fakeprov.stdin_len += k;
    return 0;
}
static int f_close_stdin(void *c, struct process *p, sbx_err_t *e)
{
    fakeprov.n_close_stdin++;
    return 0;
}
static int f_kill(void *c, struct process *p, int sig, sbx_err_t *e)
{
    fakeprov.n_kill++;
    fakeprov.last_signal = sig;
    json_t *rec = json_pack("{s:i, s:i}", "exit_code", 128 + sig, "signal", sig);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

static void f_tool_result(void *c, struct process *p, json_t *reply)
{
    json_decref(fakeprov.tool_reply);
    fakeprov.tool_reply = json_incref(reply);
}

const struct sbx_provider fakeprov_provider = {
    .name = "fake",
    .default_cwd = "/fake",
    .load = f_load,
    .unload = f_unload,
    .available = f_available,
    .sb_start = f_start,
    .sb_stop = f_stop,
    .sb_destroy = f_destroy,
    .sb_snapshot = f_snapshot,
    .sb_cancel = f_cancel,
    .sb_release = f_release,
    .proc_spawn = f_spawn,
    .proc_write = f_write,
    .proc_close_stdin = f_close_stdin,
    .proc_kill = f_kill,
    .proc_tool_result = f_tool_result,
};

/* ---- the daemon around it ----------------------------------------------------- */

/* As in main.c: output is flushed before the loop sleeps. */
static void prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    sessions_before_sleep();
    sandboxes_before_sleep();
}

void fakeprov_setup(void)
{
    struct daemon *d = &fakeprov_daemon;
    D = d;
    config_init_defaults(&d->cfg);
    free(d->cfg.default_provider);
    d->cfg.default_provider = strdup("fake");
    d->loop = EV_DEFAULT;
    ev_prepare_init(&prepare, prepare_cb);
    ev_prepare_start(d->loop, &prepare);
    d->snapshots = json_object();
    d->providers[0].ops = &fakeprov_provider;
    d->providers[0].enabled = 1;
    d->providers[0].loaded = 1;
    d->nproviders = 1;
    fakeprov_reset();
}

void fakeprov_reset(void)
{
    struct sandbox *pending[FAKEPROV_MAX_PENDING];
    int n = fakeprov.npending;
    memcpy(pending, fakeprov.pending, sizeof(pending));
    json_decref(fakeprov.start_result);
    json_decref(fakeprov.tool_reply);
    memset(&fakeprov, 0, sizeof(fakeprov));
    memcpy(fakeprov.pending, pending, sizeof(pending));
    fakeprov.npending = n;
}

void fakeprov_teardown(void)
{
    fakeprov.defer = 0;
    while (fakeprov_finish(0, NULL) == 0)
        ;
    session_free_all();
    parse_shutdown(); /* the off-loop parser's thread, as main.c ends it */
    sandbox_free_all();
    ev_prepare_stop(D->loop, &prepare);
    json_decref(D->snapshots);
    D->snapshots = NULL;
    json_decref(fakeprov.start_result);
    fakeprov.start_result = NULL;
    json_decref(fakeprov.tool_reply);
    fakeprov.tool_reply = NULL;
    config_deinit(&D->cfg);
}

struct sandbox *fakeprov_sandbox(const char *id, uid_t owner, json_t *conf)
{
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (!conf)
        conf = json_object();
    json_object_set_new(conf, "timeout_ms", json_integer(60000));
    json_object_set_new(conf, "idle_timeout_ms", json_integer(0));
    json_object_set_new(conf, "command_timeout_ms", json_integer(60000));
    if (sandbox_new(&sb, id, &D->providers[0], owner, conf, &err) < 0) {
        err_clear(&err);
        return NULL;
    }
    sandbox_start(sb, NULL, NULL);
    return sb;
}

struct process *fakeprov_process(struct sandbox *sb, const char *cmd)
{
    json_t *command = json_string(cmd);
    struct proc_opts o = {.command = command};
    struct process *p = NULL;
    sbx_err_t err = {0};
    if (process_new(&p, sb, &o, &err) < 0 || process_launch(p, &err) < 0)
        p = NULL;
    err_clear(&err);
    json_decref(command);
    return p;
}

/* ---- a client connection without a socket ------------------------------------ */

static void fc_send_line(struct rpc_conn *k, const char *text, size_t len)
{
    struct fakeconn *c = (struct fakeconn *)k;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, NULL);
    json_array_append_new(c->got, v ? v : json_null());
}

static void fc_send_line_owned(struct rpc_conn *k, char *text, size_t len)
{
    fc_send_line(k, text, len);
    free(text);
}

static size_t fc_reply_room(const struct rpc_conn *k)
{
    return ((const struct fakeconn *)k)->room;
}

static size_t fc_queued(const struct rpc_conn *k)
{
    return 0;
}

static const struct rpc_conn_ops fc_ops = {
    .send_line = fc_send_line,
    .send_line_owned = fc_send_line_owned,
    .send_limit_line = fc_send_line,
    .reply_room = fc_reply_room,
    .queued = fc_queued,
    .queued_all = fc_queued,
};

static uint64_t fc_next_id = 1u << 30; /* apart from the sessions' ids */

void fakeconn_init(struct fakeconn *c, uid_t uid, int admin)
{
    memset(c, 0, sizeof(*c));
    c->got = json_array();
    c->room = 64u << 20;
    conn_init(&c->k, fc_next_id++, uid, admin, &fc_ops);
    notify_init(); /* the core's events reach connections through rpc/notify.c */
}

void fakeconn_deinit(struct fakeconn *c)
{
    c->k.closing = 1;
    rpc_conn_gone(&c->k);
    output_follower_gone(&c->k.fol);
    toolcall_conn_gone(&c->k);
    fs_drop_owner(&c->k);
    conn_deinit(&c->k);
    json_decref(c->got);
    c->got = NULL;
}

void fakeprov_spin(int n)
{
    for (int i = 0; i < n; i++)
        ev_run(D->loop, EVRUN_NOWAIT);
}

static int is_answer(json_t *m)
{
    return json_is_array(m) || json_object_get(m, "id") != NULL;
}

json_t *fakeconn_line(struct fakeconn *c, const char *line)
{
    size_t before = json_array_size(c->got);
    rpc_handle_line(&c->k, line, strlen(line));
    for (int i = 0; i < 100000 && rpc_batch_resume(&c->k); i++)
        ;
    fakeprov_spin(3);
    for (size_t i = json_array_size(c->got); i > before; i--)
        if (is_answer(json_array_get(c->got, i - 1)))
            return json_array_get(c->got, i - 1);
    return NULL;
}

size_t fakeconn_answers(const struct fakeconn *c)
{
    size_t n = 0;
    for (size_t i = 0; i < json_array_size(c->got); i++)
        n += is_answer(json_array_get(c->got, i));
    return n;
}

json_t *fakeconn_last_answer(const struct fakeconn *c)
{
    for (size_t i = json_array_size(c->got); i > 0; i--)
        if (is_answer(json_array_get(c->got, i - 1)))
            return json_array_get(c->got, i - 1);
    return NULL;
}

json_t *fakeconn_notification(const struct fakeconn *c, const char *method)
{
    for (size_t i = json_array_size(c->got); i > 0; i--) {
        json_t *m = json_array_get(c->got, i - 1);
        const char *mm = json_string_value(json_object_get(m, "method"));
        if (!is_answer(m) && mm && !strcmp(mm, method))
            return m;
    }
    return NULL;
}

size_t fakeconn_count(const struct fakeconn *c)
{
    return json_array_size(c->got);
}
