/*
 * async.c - the event-driven API (hiredis's async.c, for JSON-RPC).
 *
 * Re-entrancy: every user callback runs with SBX_IN_CALLBACK set. A free or
 * disconnect requested from a callback only sets a flag; the top-level entry
 * points (handle_read/write/timeout) notice it after the callback returns and
 * tear the context down there, so no frame of our own call chain ever touches
 * freed memory. teardown() is the only place that frees an sbx_async.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "sbx_private.h"

/* A call waiting for its response. Hash-chained by id for lookup, and on a
 * list in sending order so teardown fails them in order. */
struct pending {
    json_int_t id;
    sbx_reply_cb cb;
    void *privdata;
    struct watch *spawn; /* set for the process.spawn of sbx_async_spawn */
    struct pending *hnext;
    struct pending *prev, *next;
};

/* A process followed by sbx_async_spawn. */
struct watch {
    char *sandbox;
    json_int_t pid; /* -1 until the spawn response arrives */
    sbx_output_cb on_output;
    sbx_exit_cb on_exit;
    void *privdata;
    json_t *backlog; /* notifications for `sandbox` seen while pid was unknown */
    struct watch *prev, *next;
};

struct sbx_async_priv {
    struct pending **buckets;
    size_t nbuckets; /* a power of two */
    size_t npending;
    struct pending *head, *tail;
    struct watch *watches;
    sbx_connect_cb on_connect;
    sbx_disconnect_cb on_disconnect;
    sbx_async_notify_cb notify_cb;
    void *notify_priv;
    sbx_async_output_cb output_cb;
    void *output_priv;
    char *scratch; /* decoded base64 output */
    size_t scap;
    sbx_async_tool_cb tool_cb;
    void *tool_priv;
    int timeout_ms;
    uint64_t last_activity;
};

#define EV_CALL(ac, hook)                                                                \
    do {                                                                                 \
        if ((ac)->ev.hook)                                                               \
            (ac)->ev.hook((ac)->ev.data);                                                \
    } while (0)

static void teardown(sbx_async *ac);
static void on_notify(sbx_async *ac, json_t *m);

/* ---- callbacks ------------------------------------------------------------------ */

/* Returns the previous IN_CALLBACK state, for nesting (teardown runs callbacks
 * while flagged). */
static int cb_enter(sbx_async *ac)
{
    int was = ac->c.flags & SBX_IN_CALLBACK;
    ac->c.flags |= SBX_IN_CALLBACK;
    return was;
}

static void cb_leave(sbx_async *ac, int was)
{
    if (!was)
        ac->c.flags &= ~SBX_IN_CALLBACK;
}

/* True when the context must stop processing (a deferred free, or broken). */
static int must_stop(const sbx_async *ac)
{
    return (ac->c.flags & (SBX_FREE_PENDING | SBX_BROKEN | SBX_FREEING)) != 0;
}

/* ---- pending calls ------------------------------------------------------------ */

static size_t bucket_of(const struct sbx_async_priv *p, json_int_t id)
{
    return (size_t)((uint64_t)id * 0x9E3779B97F4A7C15ull >> 32) & (p->nbuckets - 1);
}

static int pending_grow(struct sbx_async_priv *p)
{
    size_t n = p->nbuckets ? p->nbuckets * 2 : 16;
    struct pending **b = calloc(n, sizeof(*b));
    if (!b)
        return -1;
    free(p->buckets);
    p->buckets = b;
    p->nbuckets = n;
    for (struct pending *e = p->head; e; e = e->next) {
        size_t i = bucket_of(p, e->id);
        e->hnext = b[i];
        b[i] = e;
    }
    return 0;
}

static int pending_add(struct sbx_async_priv *p, struct pending *e)
{
    if (p->npending + 1 > p->nbuckets && pending_grow(p) < 0)
        return -1;
    size_t i = bucket_of(p, e->id);
    e->hnext = p->buckets[i];
    p->buckets[i] = e;
    e->next = NULL;
    e->prev = p->tail;
    if (p->tail)
        p->tail->next = e;
    else
        p->head = e;
    p->tail = e;
    p->npending++;
    return 0;
}

static void pending_unlink(struct sbx_async_priv *p, struct pending *e)
{
    struct pending **pp = &p->buckets[bucket_of(p, e->id)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    if (e->prev)
        e->prev->next = e->next;
    else
        p->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        p->tail = e->prev;
    p->npending--;
}

static struct pending *pending_take(struct sbx_async_priv *p, json_int_t id)
{
    if (!p->nbuckets)
        return NULL;
    for (struct pending *e = p->buckets[bucket_of(p, id)]; e; e = e->hnext) {
        if (e->id == id) {
            pending_unlink(p, e);
            return e;
        }
    }
    return NULL;
}

/* ---- spawn watches ------------------------------------------------------------- */

static void watch_unlink(struct sbx_async_priv *p, struct watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        p->watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    w->prev = w->next = NULL;
}

static void watch_free(struct watch *w)
{
    json_decref(w->backlog);
    free(w->sandbox);
    free(w);
}

/* Runs the watch's on_exit (it must be unlinked already) and frees it. */
static void watch_finish(sbx_async *ac, struct watch *w, json_t *exit_params,
                         const sbx_rpc_error *err)
{
    int was = cb_enter(ac);
    w->on_exit(ac, exit_params, err, w->privdata);
    cb_leave(ac, was);
    watch_free(w);
}

/* Claims a process.output/process.exit for a watch. Returns 1 if claimed. */
static int watch_dispatch(sbx_async *ac, const char *method, json_t *m)
{
    struct sbx_async_priv *p = ac->apriv;
    json_t *params = json_object_get(m, "params");
    const char *sandbox = json_string_value(json_object_get(params, "sandbox"));
    json_t *pidj = json_object_get(params, "pid");
    struct watch *w, *waiting = NULL;

    if (!sandbox || !json_is_integer(pidj))
        return 0;
    json_int_t pid = json_integer_value(pidj);
    for (w = p->watches; w; w = w->next) {
        if (strcmp(w->sandbox, sandbox) != 0)
            continue;
        if (w->pid == pid)
            break;
        if (w->pid < 0 && !waiting)
            waiting = w;
    }
    if (!w) {
        /* Output may overtake the spawn response: hold it until the pid is known. */
        if (!waiting)
            return 0;
        if (!waiting->backlog)
            waiting->backlog = json_array();
        if (waiting->backlog)
            json_array_append(waiting->backlog, m);
        return 1;
    }

    if (strcmp(method, SBX_N_EXIT) == 0) {
        watch_unlink(p, w);
        watch_finish(ac, w, params, NULL);
        return 1;
    }
    int stream;
    char *data;
    size_t len;
    if (sbx_output_decode(&stream, &data, &len, params) != SBX_OK)
        return 1; /* malformed output; nothing to deliver */
    int was = cb_enter(ac);
    w->on_output(ac, stream, data, len, w->privdata);
    cb_leave(ac, was);
    free(data);
    return 1;
}

static void replay_backlog(sbx_async *ac, json_t *backlog)
{
    size_t i;
    json_t *m;

    json_array_foreach(backlog, i, m) {
        if (must_stop(ac))
            break;
        on_notify(ac, m);
    }
}

static void spawn_reply(sbx_async *ac, struct watch *w, json_t *result,
                        const sbx_rpc_error *err)
{
    struct sbx_async_priv *p = ac->apriv;
    json_t *pidj = json_object_get(result, "pid");
    json_t *backlog = w->backlog;

    w->backlog = NULL;
    if (err || !json_is_integer(pidj)) {
        sbx_rpc_error bad = {SBX_E_INTERNAL, "process.spawn result without a pid", NULL};
        watch_unlink(p, w);
        watch_finish(ac, w, NULL, err ? err : &bad);
    } else {
        w->pid = json_integer_value(pidj);
    }
    if (backlog) {
        replay_backlog(ac, backlog);
        json_decref(backlog);
    }
}

/* ---- incoming messages --------------------------------------------------------- */

static void on_response(sbx_async *ac, json_t *m)
{
    json_t *id = json_object_get(m, "id");
    json_t *error = json_object_get(m, "error");
    sbx_rpc_error e;

    if (!json_is_integer(id)) {
        if (error && (!id || json_is_null(id))) {
            /* Not tied to a call (-32700, -32007): the daemon gave up on us. */
            sbx__rpc_error_view(&e, error);
            sbx__ctx_fail(&ac->c, SBX_ERR_PROTOCOL, "sbxd: %s (code %d)", e.message,
                          e.code);
        }
        return;
    }
    struct pending *pc = pending_take(ac->apriv, json_integer_value(id));
    if (!pc)
        return; /* not ours (any more) */
    if (error)
        sbx__rpc_error_view(&e, error);
    json_t *result = error ? NULL : json_object_get(m, "result");

    if (pc->spawn) {
        spawn_reply(ac, pc->spawn, result, error ? &e : NULL);
    } else if (pc->cb) {
        int was = cb_enter(ac);
        pc->cb(ac, result, error ? &e : NULL, pc->privdata);
        cb_leave(ac, was);
    }
    free(pc);
}

static void deliver_output(sbx_async *ac, const char *sandbox, json_int_t pid, int stream,
                           uint64_t offset, const char *data, size_t len)
{
    struct sbx_async_priv *p = ac->apriv;
    int was = cb_enter(ac);
    p->output_cb(ac, sandbox, pid, stream, offset, data, len, p->output_priv);
    cb_leave(ac, was);
}

static void on_notify(sbx_async *ac, json_t *m)
{
    struct sbx_async_priv *p = ac->apriv;
    const char *method = json_string_value(json_object_get(m, "method"));

    if (p->watches &&
        (strcmp(method, SBX_N_OUTPUT) == 0 || strcmp(method, SBX_N_EXIT) == 0) &&
        watch_dispatch(ac, method, m))
        return;
    if (p->output_cb && strcmp(method, SBX_N_OUTPUT) == 0) {
        /* A line the fast path did not take (another shape): same delivery. */
        json_t *params = json_object_get(m, "params");
        const char *sandbox = json_string_value(json_object_get(params, "sandbox"));
        json_t *pidj = json_object_get(params, "pid"),
               *offj = json_object_get(params, "offset");
        int stream;
        char *data;
        size_t len;
        if (!sandbox || !json_is_integer(pidj) ||
            sbx_output_decode(&stream, &data, &len, params) != SBX_OK) {
            sbx__ctx_fail(&ac->c, SBX_ERR_PROTOCOL, "malformed process.output from sbxd");
            return;
        }
        json_int_t off = json_integer_value(offj);
        deliver_output(ac, sandbox, json_integer_value(pidj), stream,
                       off > 0 ? (uint64_t)off : 0, data, len);
        free(data);
        return;
    }
    if (p->notify_cb) {
        int was = cb_enter(ac);
        p->notify_cb(ac, method, json_object_get(m, "params"), p->notify_priv);
        cb_leave(ac, was);
    }
}

/* A process.output taken by the reader's fast path. */
static void on_output_view(sbx_async *ac, const struct sbx_output_view *v)
{
    struct sbx_async_priv *p = ac->apriv;
    if (p->output_cb && !p->watches) {
        const char *data;
        size_t len;
        if (sbx__output_view_bytes(v, &p->scratch, &p->scap, &data, &len) != SBX_OK) {
            sbx__ctx_fail(&ac->c, SBX_ERR_PROTOCOL,
                          "process.output with invalid base64 from sbxd");
            return;
        }
        deliver_output(ac, v->sandbox, v->pid, v->stream, v->offset, data, len);
        return;
    }
    if (!p->watches && !p->notify_cb)
        return;
    json_t *m = sbx__output_view_json(v);
    if (!m) {
        sbx__ctx_fail(&ac->c, SBX_ERR_OOM, "out of memory");
        return;
    }
    on_notify(ac, m);
    json_decref(m);
}

static void on_request(sbx_async *ac, json_t *m)
{
    struct sbx_async_priv *p = ac->apriv;
    const char *method = json_string_value(json_object_get(m, "method"));
    json_t *id = json_object_get(m, "id");
    json_t *params = json_object_get(m, "params");
    int rc;

    if (p->tool_cb && strcmp(method, SBX_R_TOOL_CALL) == 0) {
        const char *tool = json_string_value(json_object_get(params, "name"));
        if (!json_is_string(id) || !tool) {
            rc = sbx__ctx_append_error(&ac->c, id, SBX_E_INVALID_REQUEST,
                                       "tool.call needs a string id and a name", NULL);
        } else {
            int was = cb_enter(ac);
            p->tool_cb(ac, json_string_value(id), tool, json_object_get(params, "args"),
                       params, p->tool_priv);
            cb_leave(ac, was);
            return;
        }
    } else {
        rc = sbx__ctx_reply_unknown(&ac->c, m);
    }
    if (rc != SBX_OK)
        sbx__ctx_fail(&ac->c, SBX_ERR_OOM, "cannot answer %s", method);
    EV_CALL(ac, add_write);
}

static void dispatch(sbx_async *ac, json_t *m)
{
    switch (sbx__msg_classify(m)) {
    case MSG_RESPONSE:
        on_response(ac, m);
        break;
    case MSG_NOTIFY:
        on_notify(ac, m);
        break;
    case MSG_REQUEST:
        on_request(ac, m);
        break;
    default:
        sbx__ctx_fail(&ac->c, SBX_ERR_PROTOCOL, "unexpected message from sbxd");
        break;
    }
}

/* ---- lifecycle ------------------------------------------------------------------ */

sbx_async *sbx_async_connect_unix(const char *path)
{
    sbx_async *ac = calloc(1, sizeof(*ac));
    if (!ac)
        return NULL;
    if (sbx__ctx_init(&ac->c) != SBX_OK) {
        free(ac);
        return NULL;
    }
    ac->apriv = calloc(1, sizeof(*ac->apriv));
    if (!ac->apriv) {
        sbx__ctx_deinit(&ac->c);
        free(ac);
        return NULL;
    }
    ac->apriv->last_activity = sbx__now_ms();
    sbx__ctx_connect_unix(&ac->c, path, 0, 1);
    return ac;
}

int sbx_async_attach(sbx_async *ac, const sbx_async_ev *ev)
{
    if (ac->ev.data || ac->ev.add_read || ac->c.fd < 0 || must_stop(ac))
        return SBX_ERR;
    ac->ev = *ev;
    EV_CALL(ac, add_read);
    /* The first writable event completes the connect and flushes calls
     * queued before attaching. */
    EV_CALL(ac, add_write);
    if (ac->apriv->timeout_ms > 0 && ac->ev.schedule_timer)
        ac->ev.schedule_timer(ac->ev.data, ac->apriv->timeout_ms);
    return SBX_OK;
}

void sbx_async_set_connect_cb(sbx_async *ac, sbx_connect_cb cb)
{
    ac->apriv->on_connect = cb;
}

void sbx_async_set_disconnect_cb(sbx_async *ac, sbx_disconnect_cb cb)
{
    ac->apriv->on_disconnect = cb;
}

void sbx_async_set_notify_cb(sbx_async *ac, sbx_async_notify_cb cb, void *privdata)
{
    ac->apriv->notify_cb = cb;
    ac->apriv->notify_priv = privdata;
}

void sbx_async_set_output_cb(sbx_async *ac, sbx_async_output_cb cb, void *privdata)
{
    ac->apriv->output_cb = cb;
    ac->apriv->output_priv = privdata;
}

void sbx_async_set_tool_cb(sbx_async *ac, sbx_async_tool_cb cb, void *privdata)
{
    ac->apriv->tool_cb = cb;
    ac->apriv->tool_priv = privdata;
}

void sbx_async_set_timeout(sbx_async *ac, int timeout_ms)
{
    ac->apriv->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

size_t sbx_async_pending(const sbx_async *ac)
{
    return ac->apriv->npending;
}

/* The only place an sbx_async is freed. */
static void teardown(sbx_async *ac)
{
    struct sbx_async_priv *p = ac->apriv;

    if (ac->c.flags & SBX_FREEING)
        return;
    ac->c.flags |= SBX_FREEING;
    int was = cb_enter(ac); /* disconnect/free from these callbacks are no-ops */

    struct pending *pc;
    while ((pc = p->head)) {
        pending_unlink(p, pc);
        /* A spawn's watch gets its on_exit below. */
        if (!pc->spawn && pc->cb)
            pc->cb(ac, NULL, NULL, pc->privdata);
        free(pc);
    }
    struct watch *w;
    while ((w = p->watches)) {
        watch_unlink(p, w);
        watch_finish(ac, w, NULL, NULL);
    }
    if ((ac->c.flags & SBX_CONNECTED) && p->on_disconnect)
        p->on_disconnect(ac, (ac->c.flags & SBX_BROKEN) ? SBX_ERR : SBX_OK);
    cb_leave(ac, was);

    if (ac->ev.cleanup)
        ac->ev.cleanup(ac->ev.data);
    if (ac->data_cleanup)
        ac->data_cleanup(ac->data);
    free(p->buckets);
    free(p->scratch);
    free(p);
    sbx__ctx_deinit(&ac->c);
    free(ac);
}

/* A graceful disconnect completes once nothing is due either way. */
static int maybe_finish_disconnect(sbx_async *ac)
{
    if ((ac->c.flags & SBX_DISCONNECTING) && ac->apriv->npending == 0 &&
        !sbx__ctx_obuf_pending(&ac->c)) {
        teardown(ac);
        return 1;
    }
    return 0;
}

/* After callbacks at the top level: tear down if asked to or broken.
 * Returns 1 when ac is gone. */
static int after_callbacks(sbx_async *ac)
{
    if (ac->c.flags & (SBX_FREE_PENDING | SBX_BROKEN)) {
        teardown(ac);
        return 1;
    }
    return maybe_finish_disconnect(ac);
}

void sbx_async_disconnect(sbx_async *ac)
{
    if (ac->c.flags & (SBX_FREEING | SBX_FREE_PENDING))
        return;
    ac->c.flags |= SBX_DISCONNECTING;
    if (!(ac->c.flags & SBX_IN_CALLBACK))
        maybe_finish_disconnect(ac);
}

void sbx_async_free(sbx_async *ac)
{
    if (!ac || (ac->c.flags & SBX_FREEING))
        return;
    if (ac->c.flags & SBX_IN_CALLBACK) {
        ac->c.flags |= SBX_FREE_PENDING;
        return;
    }
    teardown(ac);
}

/* ---- calls ---------------------------------------------------------------------- */

static void touch(sbx_async *ac)
{
    ac->apriv->last_activity = sbx__now_ms();
}

static int can_send(sbx_async *ac)
{
    if (ac->c.flags & SBX_BROKEN)
        return SBX_ERR;
    if (ac->c.flags & (SBX_DISCONNECTING | SBX_FREEING | SBX_FREE_PENDING)) {
        sbx__ctx_seterr(&ac->c, SBX_ERR_USAGE, "context is disconnecting");
        return SBX_ERR;
    }
    return SBX_OK;
}

static int send_call(sbx_async *ac, const char *method, json_t *params, sbx_reply_cb cb,
                     void *privdata, struct watch *spawn)
{
    struct sbx_async_priv *p = ac->apriv;

    if (can_send(ac) != SBX_OK)
        return SBX_ERR;
    struct pending *pc = calloc(1, sizeof(*pc));
    if (!pc) {
        sbx__ctx_seterr(&ac->c, SBX_ERR_OOM, "out of memory");
        return SBX_ERR;
    }
    pc->id = ac->c.priv->next_id++;
    pc->cb = cb;
    pc->privdata = privdata;
    pc->spawn = spawn;
    if (pending_add(p, pc) < 0) {
        free(pc);
        sbx__ctx_seterr(&ac->c, SBX_ERR_OOM, "out of memory");
        return SBX_ERR;
    }
    if (sbx__ctx_append_request(&ac->c, pc->id, method, params) != SBX_OK) {
        pending_unlink(p, pc);
        free(pc);
        return SBX_ERR;
    }
    if (p->npending == 1)
        touch(ac); /* the wait for an answer starts now */
    EV_CALL(ac, add_write);
    if (p->timeout_ms > 0 && ac->ev.schedule_timer)
        ac->ev.schedule_timer(ac->ev.data, p->timeout_ms);
    return SBX_OK;
}

int sbx_async_call(sbx_async *ac, const char *method, json_t *params, sbx_reply_cb cb,
                   void *privdata)
{
    return send_call(ac, method, params, cb, privdata, NULL);
}

int sbx_async_call_new(sbx_async *ac, const char *method, json_t *params, sbx_reply_cb cb,
                       void *privdata)
{
    int rc = send_call(ac, method, params, cb, privdata, NULL);
    json_decref(params);
    return rc;
}

int sbx_async_spawn(sbx_async *ac, json_t *params, sbx_output_cb on_output,
                    sbx_exit_cb on_exit, void *privdata)
{
    struct sbx_async_priv *p = ac->apriv;
    const char *sandbox = json_string_value(json_object_get(params, "sandbox"));

    if (!sandbox || !on_output || !on_exit) {
        sbx__ctx_seterr(&ac->c, SBX_ERR_USAGE,
                        "sbx_async_spawn needs params.sandbox and callbacks");
        return SBX_ERR;
    }
    struct watch *w = calloc(1, sizeof(*w));
    if (!w || !(w->sandbox = strdup(sandbox))) {
        free(w);
        sbx__ctx_seterr(&ac->c, SBX_ERR_OOM, "out of memory");
        return SBX_ERR;
    }
    w->pid = -1;
    w->on_output = on_output;
    w->on_exit = on_exit;
    w->privdata = privdata;
    if (send_call(ac, SBX_M_SPAWN, params, NULL, NULL, w) != SBX_OK) {
        watch_free(w);
        return SBX_ERR;
    }
    w->next = p->watches;
    if (p->watches)
        p->watches->prev = w;
    p->watches = w;
    return SBX_OK;
}

int sbx_async_tool_reply(sbx_async *ac, const char *call_id, json_t *result,
                         int error_code, const char *error_msg)
{
    if (ac->c.flags & (SBX_BROKEN | SBX_FREEING | SBX_FREE_PENDING))
        return SBX_ERR;
    json_t *id = json_string(call_id);
    int rc;
    if (!id) {
        sbx__ctx_seterr(&ac->c, SBX_ERR_USAGE, "invalid call id");
        return SBX_ERR;
    }
    if (error_code)
        rc = sbx__ctx_append_error(&ac->c, id, error_code,
                                   error_msg ? error_msg : "tool failed", NULL);
    else
        rc = sbx__ctx_append_result(&ac->c, id, json_incref(result));
    json_decref(id);
    if (rc == SBX_OK)
        EV_CALL(ac, add_write);
    return rc;
}

/* ---- event handlers ---------------------------------------------------------------- */

/* Completes the connect on the first event. Returns SBX_ERR when ac is gone. */
static int handle_connect(sbx_async *ac)
{
    struct sbx_async_priv *p = ac->apriv;
    int soerr = 0;
    socklen_t len = sizeof(soerr);

    if (getsockopt(ac->c.fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
        soerr = errno;
    if (soerr) {
        sbx__ctx_fail(&ac->c, SBX_ERR_IO, "connect: %s", strerror(soerr));
        if (p->on_connect) {
            int was = cb_enter(ac);
            p->on_connect(ac, SBX_ERR);
            cb_leave(ac, was);
        }
        teardown(ac);
        return SBX_ERR;
    }
    ac->c.flags |= SBX_CONNECTED;
    touch(ac);
    if (p->on_connect) {
        int was = cb_enter(ac);
        p->on_connect(ac, SBX_OK);
        cb_leave(ac, was);
        if (ac->c.flags & (SBX_FREE_PENDING | SBX_BROKEN)) {
            teardown(ac);
            return SBX_ERR;
        }
    }
    return SBX_OK;
}

void sbx_async_handle_read(sbx_async *ac)
{
    assert(!(ac->c.flags & SBX_IN_CALLBACK));
    if (ac->c.flags & SBX_FREEING)
        return;
    if (!(ac->c.flags & SBX_CONNECTED) && handle_connect(ac) != SBX_OK)
        return;

    int n = sbx__ctx_read(&ac->c);
    if (n < 0) {
        teardown(ac);
        return;
    }
    if (n > 0)
        touch(ac);

    /* Bounded by what one read brought in. */
    for (;;) {
        json_t *m;
        struct sbx_output_view v;
        if (sbx__reader_next(ac->c.reader, &m, &v) != SBX_OK) {
            sbx__ctx_fail_reader(&ac->c);
            break;
        }
        if (v.data) {
            on_output_view(ac, &v);
        } else {
            if (!m)
                break;
            dispatch(ac, m);
            json_decref(m);
        }
        if (must_stop(ac))
            break;
    }
    after_callbacks(ac);
}

void sbx_async_handle_write(sbx_async *ac)
{
    assert(!(ac->c.flags & SBX_IN_CALLBACK));
    if (ac->c.flags & SBX_FREEING)
        return;
    if (!(ac->c.flags & SBX_CONNECTED) && handle_connect(ac) != SBX_OK)
        return;

    int rc = sbx__ctx_flush(&ac->c);
    if (rc < 0) {
        teardown(ac);
        return;
    }
    if (rc == 1) {
        EV_CALL(ac, del_write);
        maybe_finish_disconnect(ac);
    }
}

void sbx_async_handle_timeout(sbx_async *ac)
{
    struct sbx_async_priv *p = ac->apriv;

    assert(!(ac->c.flags & SBX_IN_CALLBACK));
    if ((ac->c.flags & SBX_FREEING) || p->timeout_ms <= 0)
        return;
    if ((ac->c.flags & SBX_CONNECTED) && p->npending == 0)
        return; /* idle is fine; the next call re-arms the timer */

    uint64_t idle = sbx__now_ms() - p->last_activity;
    if (idle < (uint64_t)p->timeout_ms) {
        if (ac->ev.schedule_timer)
            ac->ev.schedule_timer(ac->ev.data, p->timeout_ms - (int)idle);
        return;
    }
    if (!(ac->c.flags & SBX_CONNECTED)) {
        sbx__ctx_fail(&ac->c, SBX_ERR_TIMEOUT, "connect: timed out");
        if (p->on_connect) {
            int was = cb_enter(ac);
            p->on_connect(ac, SBX_ERR);
            cb_leave(ac, was);
        }
    } else {
        sbx__ctx_fail(&ac->c, SBX_ERR_TIMEOUT, "timed out waiting for sbxd");
    }
    teardown(ac);
}
