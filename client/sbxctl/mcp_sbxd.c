/*
 * mcp_sbxd.c - `sbxctl mcp`'s side of sbxd (mcp_sbxd.h): the connection,
 * the command and code sandboxes, remembered offsets.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp_sbxd.h"
#include "mcp_util.h"
#include "sbxctl.h"

#include "../adapters/libev.h"

#define OFFSETS_MAX 1024

/* ---- the connection ---------------------------------------------------------------- */

struct req {
    struct msbx *b;
    msbx_fn fn;
    void *priv;
};

static void notify(sbx_async *ac, const char *method, json_t *params, void *privdata);

static void ac_gone(void *data)
{
    struct msbx *b = data;
    /* sbxd closes idle sessions (limits.session_idle_timeout_ms); sandboxes
     * outlive the session, so the next call just connects again. */
    if (!b->quitting && b->ac) /* NULL: never attached (connect failed) */
        mcp_log("connection to sbxd closed (%s); the next call reconnects",
                b->ac->c.errstr[0] ? b->ac->c.errstr : "EOF");
    b->ac = NULL;
}

static sbx_async *conn(struct msbx *b)
{
    if (b->ac)
        return b->ac;
    sbx_async *ac = sbx_async_connect_unix(socket_path());
    if (!ac)
        return NULL;
    if (ac->c.err) {
        snprintf(b->conn_err, sizeof(b->conn_err), "cannot connect to sbxd at %.80s: %s",
                 socket_path(), ac->c.errstr);
        mcp_log("%s", b->conn_err);
        sbx_async_free(ac);
        return NULL;
    }
    ac->data = b;
    ac->data_cleanup = ac_gone;
    sbx_async_set_notify_cb(ac, notify, b);
    if (sbx_libev_attach(b->loop, ac) != SBX_OK) {
        mcp_log("cannot attach to the event loop");
        sbx_async_free(ac);
        return NULL;
    }
    b->ac = ac;
    return ac;
}

static void reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err, void *privdata)
{
    struct req *r = privdata;
    struct msbx *b = r->b;
    (void)ac;
    b->outstanding--;
    r->fn(r->priv, result, err);
    free(r);
    b->on_idle(b->data);
}

/* Before the loop sleeps: the calls queued in this turn go out now, in one
 * write, instead of on the writable event libsbx asked for. That event costs
 * two epoll_ctl and one more epoll_wait per call (issue 21); libev drops the
 * watcher change when it is undone before the loop polls. A prepare callback
 * is outside every libsbx callback, so a write error tearing the connection
 * down is as safe here as in the write watcher. */
static void flush_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct msbx *b = w->data;
    (void)loop;
    (void)revents;
    if (!b->ac || !(b->ac->c.flags & SBX_CONNECTED))
        return; /* the first writable event completes the connect */
    const sbx_libev_events *e = b->ac->ev.data;
    if (e && e->writing)
        sbx_async_handle_write(b->ac);
}

int msbx_call(struct msbx *b, const char *method, json_t *params, msbx_fn fn, void *priv)
{
    struct req *r = calloc(1, sizeof(*r));
    sbx_async *ac = r ? conn(b) : NULL;
    if (!ac) {
        json_decref(params);
        free(r);
        return -1;
    }
    r->b = b;
    r->fn = fn;
    r->priv = priv;
    if (sbx_async_call_new(ac, method, params, reply, r) != SBX_OK) {
        free(r);
        return -1;
    }
    b->outstanding++;
    return 0;
}

const char *msbx_errtext(const struct msbx *b, const sbx_rpc_error *err)
{
    static char buf[600];
    if (err)
        snprintf(buf, sizeof(buf), "%s (code %d)", err->message, err->code);
    else
        snprintf(buf, sizeof(buf), "lost the connection to sbxd%s%s",
                 b->ac && b->ac->c.errstr[0] ? ": " : "", b->ac ? b->ac->c.errstr : "");
    return buf;
}

/* process.* go to the owner; progress and status are about our sandboxes. */
static void notify(sbx_async *ac, const char *method, json_t *params, void *privdata)
{
    struct msbx *b = privdata;
    (void)ac;
    if (!strcmp(method, SBX_N_OUTPUT) || !strcmp(method, SBX_N_EXIT) ||
        !strcmp(method, SBX_N_STARTED)) {
        b->on_process(b->data, method, params);
        return;
    }
    const char *id = json_string_value(json_object_get(params, "sandbox"));
    struct slot *slots[2] = {&b->cmd, &b->code};
    if (strcmp(method, SBX_N_PROGRESS) == 0) {
        /* Image pulls and the like while a sandbox of ours is being made:
         * the calls waiting for it show this in their progress. */
        const char *msg = json_string_value(json_object_get(params, "message"));
        const char *stage = json_string_value(json_object_get(params, "stage"));
        for (int i = 0; i < 2 && id && (msg || stage); i++) {
            struct slot *s = slots[i];
            if (s->state == SLOT_CREATING && s->id && strcmp(s->id, id) == 0) {
                free(s->progress);
                s->progress = strdup(msg ? msg : stage);
            }
        }
        return;
    }
    if (strcmp(method, SBX_N_STATUS) == 0) {
        const char *st = json_string_value(json_object_get(params, "status"));
        for (int i = 0; i < 2 && id && st; i++) {
            struct slot *s = slots[i];
            if (s->state == SLOT_READY && s->id && strcmp(s->id, id) == 0 &&
                (strcmp(st, "destroyed") == 0 || strcmp(st, "destroying") == 0)) {
                if (b->conf->verbose)
                    mcp_log("the %s sandbox %s is %s", s->what, id, st);
                msbx_slot_lost(s);
            }
        }
    }
}

/* ---- the sandboxes ----------------------------------------------------------------- */

struct sreq {
    struct msbx *b;
    struct slot *s;
    void (*fn)(struct msbx *b, struct slot *s, json_t *result, const sbx_rpc_error *err);
};

static void slot_reply(void *priv, json_t *result, const sbx_rpc_error *err)
{
    struct sreq *r = priv;
    r->fn(r->b, r->s, result, err);
    free(r);
}

static int slot_call(struct msbx *b, struct slot *s, const char *method, json_t *params,
                     void (*fn)(struct msbx *, struct slot *, json_t *,
                                const sbx_rpc_error *))
{
    struct sreq *r = calloc(1, sizeof(*r));
    if (!r) {
        json_decref(params);
        return -1;
    }
    r->b = b;
    r->s = s;
    r->fn = fn;
    if (msbx_call(b, method, params, slot_reply, r) < 0) {
        free(r);
        return -1;
    }
    return 0;
}

static void slot_fail_waiters(struct slot *s, const char *why)
{
    char msg[900];
    struct mwaiter *w;
    snprintf(msg, sizeof(msg), "cannot create the %s sandbox: %s", s->what, why);
    while ((w = s->waiters)) {
        s->waiters = w->next;
        w->next = NULL;
        w->fail(w, msg);
    }
}

static void destroy_reply(struct msbx *b, struct slot *s, json_t *result,
                          const sbx_rpc_error *err)
{
    (void)s;
    (void)result;
    if (err && err->code != SBX_E_NOT_FOUND)
        mcp_log("destroying a sandbox failed: %s", msbx_errtext(b, err));
}

void msbx_slot_destroy(struct msbx *b, struct slot *s)
{
    if (s->state != SLOT_READY || !s->owned)
        return;
    if (b->conf->verbose)
        mcp_log("destroying the %s sandbox %s", s->what, s->id);
    slot_call(b, s, SBX_M_DESTROY, json_pack("{s:s}", "id", s->id), destroy_reply);
    msbx_slot_lost(s);
}

static void create_reply(struct msbx *b, struct slot *s, json_t *result,
                         const sbx_rpc_error *err)
{
    const char *id = json_string_value(json_object_get(result, "id"));
    free(s->progress);
    s->progress = NULL;
    if (!id) {
        msbx_slot_lost(s);
        slot_fail_waiters(s, result ? "no id in the result" : msbx_errtext(b, err));
        return;
    }
    free(s->id);
    s->id = strdup(id);
    const char *prov = json_string_value(json_object_get(result, "provider"));
    free(s->provider);
    s->provider = prov ? strdup(prov) : NULL;
    s->state = SLOT_READY;
    s->owned = !(s == &b->cmd && b->conf->sandbox_name);
    if (b->conf->verbose)
        mcp_log("%s sandbox %s (%s)", s->what, id, prov ? prov : "?");
    if (b->quitting) {
        msbx_slot_destroy(b, s);
        slot_fail_waiters(s, "shutting down");
        return;
    }
    struct mwaiter *w;
    while (s->state == SLOT_READY && (w = s->waiters)) {
        s->waiters = w->next;
        w->next = NULL;
        w->ready(w);
    }
}

/* Our own id, so that sandbox.progress before the reply is ours. */
static void random_id(char *id, size_t n)
{
    unsigned char r[8];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(r, 1, sizeof(r), f) != sizeof(r)) {
        for (size_t i = 0; i < sizeof(r); i++)
            r[i] = (unsigned char)(rand() ^ (int)getpid() >> (int)i);
    }
    if (f)
        fclose(f);
    snprintf(id, n, "mcp-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2], r[3], r[4],
             r[5], r[6], r[7]);
}

static void slot_create(struct msbx *b, struct slot *s, const char *provider)
{
    const struct mcp_conf *cf = b->conf;
    json_t *p = json_object();
    if (s == &b->cmd) {
        if (cf->sandbox_name)
            json_object_set_new(p, "id", json_string(cf->sandbox_name));
        if (cf->provider)
            json_object_set_new(p, "provider", json_string(cf->provider));
        if (cf->image)
            json_object_set_new(p, "image", json_string(cf->image));
        if (cf->sb_env)
            json_object_set(p, "env", cf->sb_env);
        if (cf->sb_opts)
            json_object_set(p, "options", cf->sb_opts);
    } else {
        json_object_set_new(p, "provider", json_string(provider));
    }
    if (!(s == &b->cmd && cf->sandbox_name)) {
        char id[40];
        random_id(id, sizeof(id));
        free(s->id);
        s->id = strdup(id);
        json_object_set_new(p, "id", json_string(id));
        json_object_set_new(p, "timeout_ms", json_integer(cf->lifetime_ms));
        json_object_set_new(p, "idle_timeout_ms", json_integer(cf->idle_ms));
    }
    s->state = SLOT_CREATING;
    if (slot_call(b, s, SBX_M_CREATE, p, create_reply) < 0) {
        s->state = SLOT_NONE;
        slot_fail_waiters(s, b->conn_err[0] ? b->conn_err : "cannot reach sbxd");
    }
}

/* run_code's provider: --code-provider, else js when sbxd has it, else duktape. */
static void info_reply(struct msbx *b, struct slot *s, json_t *result,
                       const sbx_rpc_error *err)
{
    const char *pick = "duktape";
    size_t i;
    json_t *pv;
    if (!result) {
        s->state = SLOT_NONE;
        slot_fail_waiters(s, msbx_errtext(b, err));
        return;
    }
    json_array_foreach(json_object_get(result, "providers"), i, pv) {
        const char *name = json_string_value(json_object_get(pv, "name"));
        if (name && strcmp(name, "js") == 0 &&
            json_is_true(json_object_get(pv, "available")))
            pick = "js";
    }
    if (b->quitting) {
        s->state = SLOT_NONE;
        slot_fail_waiters(s, "shutting down");
        return;
    }
    slot_create(b, s, pick);
}

void msbx_slot_use(struct msbx *b, struct slot *s, struct mwaiter *w)
{
    if (s->state == SLOT_READY) {
        w->ready(w);
        return;
    }
    w->next = s->waiters;
    s->waiters = w;
    if (s->state != SLOT_NONE)
        return;
    if (s == &b->code && !b->conf->code_provider) {
        s->state = SLOT_INFO;
        if (slot_call(b, s, SBX_M_INFO, NULL, info_reply) < 0) {
            s->state = SLOT_NONE;
            slot_fail_waiters(s, b->conn_err[0] ? b->conn_err : "cannot reach sbxd");
        }
        return;
    }
    slot_create(b, s, s == &b->code ? b->conf->code_provider : NULL);
}

void msbx_slot_lost(struct slot *s)
{
    free(s->id);
    s->id = NULL;
    free(s->progress);
    s->progress = NULL;
    free(s->provider);
    s->provider = NULL;
    s->state = SLOT_NONE;
    s->owned = 0;
}

void msbx_slot_unwait(struct slot *s, struct mwaiter *w)
{
    for (struct mwaiter **pp = &s->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            w->next = NULL;
            return;
        }
    }
}

int msbx_busy(const struct msbx *b)
{
    return b->outstanding > 0 || b->cmd.state == SLOT_CREATING ||
           b->cmd.state == SLOT_INFO || b->code.state == SLOT_CREATING ||
           b->code.state == SLOT_INFO;
}

/* ---- remembered offsets ------------------------------------------------------------ */

struct offsets {
    char *sandbox;
    json_int_t pid, off[2];
    struct offsets *next;
};

void msbx_offsets_get(const struct msbx *b, const char *sandbox, json_int_t pid,
                      json_int_t off[2])
{
    off[0] = off[1] = 0;
    for (struct offsets *o = b->offsets; o; o = o->next) {
        if (o->pid == pid && strcmp(o->sandbox, sandbox) == 0) {
            off[0] = o->off[0];
            off[1] = o->off[1];
            return;
        }
    }
}

void msbx_offsets_put(struct msbx *b, const char *sandbox, json_int_t pid,
                      const json_int_t off[2])
{
    struct offsets **pp, *o;
    for (pp = &b->offsets; (o = *pp); pp = &o->next) {
        if (o->pid == pid && strcmp(o->sandbox, sandbox) == 0)
            break;
    }
    if (o) {
        *pp = o->next; /* moved to the front below */
    } else {
        o = calloc(1, sizeof(*o));
        if (!o || !(o->sandbox = strdup(sandbox))) {
            free(o);
            return;
        }
        o->pid = pid;
        b->noffsets++;
    }
    o->off[0] = off[0];
    o->off[1] = off[1];
    o->next = b->offsets;
    b->offsets = o;
    if (b->noffsets > OFFSETS_MAX) { /* forget the least recently used */
        for (pp = &b->offsets; (*pp)->next; pp = &(*pp)->next)
            ;
        free((*pp)->sandbox);
        free(*pp);
        *pp = NULL;
        b->noffsets--;
    }
}

/* ---- setup ------------------------------------------------------------------------- */

void msbx_init(struct msbx *b, struct ev_loop *loop, const struct mcp_conf *conf)
{
    b->loop = loop;
    b->conf = conf;
    b->cmd.what = "command";
    b->code.what = "code";
    ev_prepare_init(&b->flush, flush_cb);
    b->flush.data = b;
    ev_prepare_start(loop, &b->flush);
    ev_unref(loop); /* it alone must not keep the loop running */
}

void msbx_fini(struct msbx *b)
{
    b->quitting = 1;
    ev_ref(b->loop);
    ev_prepare_stop(b->loop, &b->flush);
    if (b->ac)
        sbx_async_free(b->ac);
    msbx_slot_lost(&b->cmd);
    msbx_slot_lost(&b->code);
    while (b->offsets) {
        struct offsets *n = b->offsets->next;
        free(b->offsets->sandbox);
        free(b->offsets);
        b->offsets = n;
    }
}
