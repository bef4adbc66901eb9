/*
 * api_ws.c - the methods of sandboxes as workspaces (issue 18): terminals
 * (process.exec/spawn "pty", process.resize) and resource stats
 * (sandbox.stats, with its stream of sandbox.stats notifications). Same
 * rules as api.c: check params, ownership and limits, hand over to the
 * core, answer once.
 */
#include "rpc/api_ws.h"

#include <stdlib.h>
#include <string.h>

#include "rpc/call.h"
#include "rpc/conn.h"
#include "daemon.h"
#include "log.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "core/stats.h"
#include "core/terminal.h"
#include "xalloc.h"

static int ws_param(struct call *c, const char *param, const char *msg)
{
    call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", param), "%s: %s", param, msg);
    return -1;
}

/* cols/rows of obj: integers 1..TERMINAL_MAX_DIM. */
static int get_dim(struct call *c, json_t *obj, const char *key, const char *param,
                   unsigned *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > TERMINAL_MAX_DIM)
        return ws_param(c, param, "cols and rows must be integers in 1..10000");
    *out = (unsigned)json_integer_value(v);
    return 0;
}

/* ---- terminals ----------------------------------------------------------------- */

int api_ws_pty_param(struct call *c, json_t *params, struct sandbox *sb,
                     struct proc_opts *o)
{
    json_t *pty = json_object_get(params, "pty");
    if (!pty || json_is_null(pty) || json_is_false(pty))
        return 0;
    if (json_is_true(pty)) {
        o->pty_cols = 80;
        o->pty_rows = 24;
    } else if (!json_is_object(pty) || get_dim(c, pty, "cols", "pty", &o->pty_cols) < 0 ||
               get_dim(c, pty, "rows", "pty", &o->pty_rows) < 0) {
        if (!json_is_object(pty))
            ws_param(c, "pty", "must be {\"cols\": N, \"rows\": N} or true");
        return -1;
    }
    sbx_err_t err = {0};
    if (terminal_supported(sb, &err) < 0) {
        call_fail(c, &err);
        return -1;
    }
    return 0;
}

static void m_resize(struct call *c, json_t *params)
{
    struct process *p = api_process_arg(c, params, NULL);
    if (!p)
        return;
    unsigned cols, rows;
    if (get_dim(c, params, "cols", "cols", &cols) < 0 ||
        get_dim(c, params, "rows", "rows", &rows) < 0)
        return;
    sbx_err_t err = {0};
    if (process_resize(p, cols, rows, &err) < 0)
        call_fail(c, &err);
    else
        call_reply(c, json_pack("{s:i, s:i}", "cols", (int)cols, "rows", (int)rows));
}

/* ---- stats ----------------------------------------------------------------------- */

/*
 * A session's stream of one sandbox's stats: a timer that samples every
 * limits.stats_interval_ms and notifies the session. It holds ids, not
 * pointers (the session and the sandbox may go at any time): each tick
 * looks both up again and ends the stream when either is gone. A tick
 * while a sample is still out, or while the session's output is over
 * its high mark, is skipped: stats are samples, the next one supersedes.
 */
struct stats_stream {
    struct stats_stream *next;
    uint64_t conn_id;
    uid_t uid;
    int admin;
    char *sb_id;
    ev_timer timer;
    int busy; /* a sample is out */
    int dead; /* ended while busy: freed when the sample comes back */
};

static struct stats_stream *streams;

static void stream_free(struct stats_stream *st)
{
    for (struct stats_stream **pp = &streams; *pp; pp = &(*pp)->next)
        if (*pp == st) {
            *pp = st->next;
            break;
        }
    ev_timer_stop(D->loop, &st->timer);
    free(st->sb_id);
    free(st);
}

static void stream_end(struct stats_stream *st)
{
    if (st->busy) {
        st->dead = 1;
        ev_timer_stop(D->loop, &st->timer);
        return;
    }
    stream_free(st);
}

static struct stats_stream *stream_find(uint64_t conn_id, const char *id)
{
    for (struct stats_stream *st = streams; st; st = st->next)
        if (!st->dead && st->conn_id == conn_id && strcmp(st->sb_id, id) == 0)
            return st;
    return NULL;
}

static void stream_sampled(void *data, json_t *stats, sbx_err_t *err)
{
    struct stats_stream *st = data;
    st->busy = 0;
    struct rpc_conn *k = st->dead ? NULL : conn_by_id(st->conn_id);
    if (k && stats)
        conn_notify(k, SBX_N_STATS, json_incref(stats));
    else if (k && err)
        log_debug("stats stream of %s: %s", st->sb_id, err->msg ? err->msg : "?");
    json_decref(stats);
    if (st->dead || !k)
        stream_free(st);
}

static void stream_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct stats_stream *st = w->data;
    (void)loop;
    (void)revents;
    struct rpc_conn *k = conn_by_id(st->conn_id);
    struct sandbox *sb = sandbox_find(st->uid, st->admin, st->sb_id);
    if (!k || !sb || sb->status == SB_DESTROYED || sb->status == SB_DESTROYING) {
        stream_end(st);
        return;
    }
    if (st->busy || k->ops->queued(k) > (size_t)D->cfg.session_output_high)
        return;
    if (sb->status != SB_RUNNING)
        return; /* stopped for now: samples resume when it runs again */
    sbx_err_t err = {0};
    st->busy = 1;
    if (sandbox_stats(sb, 0, stream_sampled, st, &err) < 0) {
        st->busy = 0;
        err_clear(&err);
    }
}

static int streams_of(uint64_t conn_id)
{
    int n = 0;
    for (struct stats_stream *st = streams; st; st = st->next)
        n += !st->dead && st->conn_id == conn_id;
    return n;
}

static void stats_answered(void *data, json_t *stats, sbx_err_t *err)
{
    struct call *c = data;
    if (stats)
        call_reply(c, stats);
    else
        call_fail(c, err);
}

static void m_stats(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (!sb)
        return;
    json_t *js = json_object_get(params, "stream"), *jz = json_object_get(params, "size");
    if ((js && !json_is_boolean(js) && !json_is_null(js)) ||
        (jz && !json_is_boolean(jz) && !json_is_null(jz))) {
        ws_param(c, js && !json_is_boolean(js) && !json_is_null(js) ? "stream" : "size",
                 "must be a boolean");
        return;
    }
    if (json_is_false(js) && c->conn) {
        /* stream: false ends this session's stream of the sandbox */
        struct stats_stream *st = stream_find(c->conn->id, sb->id);
        if (st)
            stream_end(st);
    }
    struct stats_stream *made = NULL;
    if (json_is_true(js) && c->conn && !stream_find(c->conn->id, sb->id)) {
        int64_t max = D->cfg.stats_streams_per_session;
        if (streams_of(c->conn->id) >= max) {
            call_error(c, SBX_E_LIMIT,
                       json_pack("{s:s, s:I}", "limit", "stats_streams_per_session",
                                 "max", (json_int_t)max),
                       "this session already streams the stats of %lld sandboxes",
                       (long long)max);
            return;
        }
        struct stats_stream *st = xcalloc(1, sizeof(*st));
        st->conn_id = c->conn->id;
        st->uid = c->conn->uid;
        st->admin = c->conn->admin;
        st->sb_id = xstrdup(sb->id);
        double every = (double)D->cfg.stats_interval_ms / 1000.0;
        ev_timer_init(&st->timer, stream_tick, every, every);
        st->timer.data = st;
        ev_timer_start(D->loop, &st->timer);
        st->next = streams;
        streams = st;
        made = st;
    }
    sbx_err_t err = {0};
    if (sandbox_stats(sb, json_is_true(jz), stats_answered, c, &err) < 0) {
        if (made) /* nothing to stream from (stopped, not supported) */
            stream_end(made);
        call_fail(c, &err);
    }
}

/* ---- ports ------------------------------------------------------------------------ */

static int port_arg(struct call *c, json_t *params, const char *key, int lo, int *out)
{
    json_t *v = json_object_get(params, key);
    *out = 0;
    if (!v || json_is_null(v)) {
        if (lo > 0)
            return ws_param(c, key, "is required (1..65535)");
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > 65535)
        return ws_param(c, key, lo > 0 ? "must be a port 1..65535" : "must be 0..65535");
    *out = (int)json_integer_value(v);
    return 0;
}

/* net18: sandbox.expose's host (an address literal) and unix (a Unix socket). */
static int expose_req_args(struct call *c, json_t *params, struct sbx_expose_req *rq)
{
    json_t *h = json_object_get(params, "host"), *u = json_object_get(params, "unix");
    rq->uid = c->conn ? c->conn->uid : 0;
    if (h && !json_is_null(h) &&
        (!json_is_string(h) || json_string_length(h) == 0 || json_string_length(h) > 45))
        return ws_param(c, "host", "must be an IPv4 or IPv6 address literal");
    if (u && !json_is_null(u) && !json_is_boolean(u))
        return ws_param(c, "unix", "must be true or false");
    rq->host = json_is_string(h) ? json_string_value(h) : NULL;
    rq->unix_socket = json_is_true(u);
    if (rq->unix_socket && (rq->host || rq->host_port))
        return ws_param(c, "unix", "a Unix socket takes no host or host_port");
    return 0;
}

static void m_expose(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    int port, host_port;
    if (!sb || port_arg(c, params, "port", 1, &port) < 0 ||
        port_arg(c, params, "host_port", 0, &host_port) < 0)
        return;
    struct sbx_expose_req rq = {.port = port, .host_port = host_port};
    if (expose_req_args(c, params, &rq) < 0)
        return;
    sbx_err_t err = {0};
    json_t *out = NULL;
    int extra = rq.host || rq.unix_socket;
    if (!sb->prov->ops->sb_expose || (extra && !sb->prov->ops->sb_expose_req))
        terminal_unsupported(&err, sb, rq.unix_socket ? "expose.unix" : "expose");
    else if (sb->status != SB_RUNNING)
        err_make_data(&err, SBX_E_STATE,
                      json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                                sandbox_status_name(sb->status)),
                      "sandbox %s is %s", sb->id, sandbox_status_name(sb->status));
    else if ((sb->prov->ops->sb_expose_req
                  ? sb->prov->ops->sb_expose_req(sb->prov->cookie, sb, &rq, &out, &err)
                  : sb->prov->ops->sb_expose(sb->prov->cookie, sb, port, host_port, &out,
                                             &err)) == 0) {
        sandbox_touch(sb);
        call_reply(c, out);
        return;
    }
    call_fail(c, &err);
}

static void m_unexpose(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    int port;
    if (!sb || port_arg(c, params, "port", 1, &port) < 0)
        return;
    sbx_err_t err = {0};
    if (!sb->prov->ops->sb_unexpose)
        terminal_unsupported(&err, sb, "expose");
    else if (sb->prov->ops->sb_unexpose(sb->prov->cookie, sb, port, &err) == 0) {
        call_reply(c, json_pack("{s:i}", "port", port));
        return;
    }
    call_fail(c, &err);
}

/* ---- table ----------------------------------------------------------------------- */

static const struct {
    const char *name;
    method_fn fn;
} ws_methods[] = {
    {SBX_M_RESIZE, m_resize},
    {SBX_M_STATS, m_stats},
    {SBX_M_EXPOSE, m_expose},
    {SBX_M_UNEXPOSE, m_unexpose},
};

method_fn api_ws_lookup(const char *method)
{
    for (size_t i = 0; i < sizeof(ws_methods) / sizeof(ws_methods[0]); i++)
        if (strcmp(ws_methods[i].name, method) == 0)
            return ws_methods[i].fn;
    return NULL;
}
