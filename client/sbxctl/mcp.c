/*
 * mcp.c - `sbxctl mcp`: sbxd as a Model Context Protocol server over stdio.
 *
 * MCP is JSON-RPC 2.0, one message per line on stdin/stdout (stdout carries
 * nothing else; diagnostics go to stderr). One libev loop watches stdin,
 * stdout and one async libsbx connection to sbxd, so several tools/call run
 * at once and a notifications/cancelled can kill the remote process of the
 * call it names. The tools themselves are in mcp_tools.c.
 *
 * Sandboxes: the command sandbox (--provider/--image, created on first use
 * and destroyed on exit; or --sandbox ID, attached to and kept) and the code
 * sandbox of run_code (--code-provider, default `js` when sbxd offers it,
 * else `duktape`), created on first use, destroyed on exit.
 *
 * Bounds: an incoming line is at most --max-message bytes (a longer one is
 * skipped and answered with an error); at most --max-calls tools/call run at
 * once; each call keeps at most --max-output bytes per stream; while more
 * than OUT_HIGH bytes wait for stdout, stdin is not read and progress
 * notifications are skipped.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp.h"
#include "sbxctl.h"

#include "../adapters/libev.h"

#define IN_CHUNK (64 * 1024)
#define OUT_HIGH (8u << 20)
#define OFFSETS_MAX 1024
#define QUIT_GRACE 10.0

/* Revisions we speak, newest first. Older than 2025-06-18 has no
 * structuredContent, outputSchema or title; 2024-11-05 has no tool
 * annotations and no progress message either. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                       "2024-11-05"};
#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))
#define FIRST_STRUCTURED 1 /* index of the oldest revision with structured content */
#define FIRST_ANNOTATED 2  /* ... with tool annotations and progress messages */

static void send_msg(struct mcp *m, json_t *msg);
static void maybe_quit(struct mcp *m);
static void begin_quit(struct mcp *m);

static void mlog(struct mcp *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void mlog(struct mcp *m, const char *fmt, ...)
{
    va_list ap;
    (void)m;
    fputs("sbxctl mcp: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- buffers ----------------------------------------------------------------------- */

size_t mbuf_append(struct mbuf *b, const char *data, size_t len, size_t max)
{
    if (b->len >= max)
        return 0;
    if (len > max - b->len)
        len = max - b->len;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return len;
}

void mbuf_free(struct mbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

json_t *mbuf_string(const char *p, size_t len)
{
    const unsigned char *s = (const unsigned char *)p;
    struct mbuf b = {0};
    size_t i = 0, run = 0;
    json_t *j;

    while (i < len) {
        size_t k = utf8_seq(s + i, len - i);
        if (k) {
            i += k;
            continue;
        }
        /* Flush the valid run before i, then U+FFFD for the bad byte. */
        mbuf_append(&b, p + run, i - run, (size_t)-1);
        mbuf_append(&b, "\xEF\xBF\xBD", 3, (size_t)-1);
        run = ++i;
    }
    if (run == 0)
        return json_stringn(p ? p : "", len);
    mbuf_append(&b, p + run, len - run, (size_t)-1);
    j = json_stringn(b.p ? b.p : "", b.len);
    mbuf_free(&b);
    return j;
}

/* ---- stdout ----------------------------------------------------------------------- */

static void out_flush(struct mcp *m)
{
    while (m->out.len > 0) {
        ssize_t n = write(1, m->out.p, m->out.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!ev_is_active(&m->out_w))
                ev_io_start(m->loop, &m->out_w);
            return;
        }
        if (n <= 0) {
            /* The client is gone: nobody reads our answers any more. */
            if (!m->quitting)
                mlog(m, "stdout: %s", n < 0 ? strerror(errno) : "closed");
            m->out.len = 0;
            ev_io_stop(m->loop, &m->out_w);
            m->in_eof = 1;
            begin_quit(m);
            return;
        }
        memmove(m->out.p, m->out.p + n, m->out.len - (size_t)n);
        m->out.len -= (size_t)n;
    }
    ev_io_stop(m->loop, &m->out_w);
    /* Below half the mark: read requests again. */
    if (m->in_paused && m->out.len < OUT_HIGH / 2 && !m->in_eof) {
        m->in_paused = 0;
        ev_io_start(m->loop, &m->in_w);
    }
    maybe_quit(m);
}

static void out_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    out_flush(w->data);
}

/* Sends one message (msg stolen). */
static void send_msg(struct mcp *m, json_t *msg)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!s) {
        mlog(m, "out of memory encoding a message");
        return;
    }
    size_t n = strlen(s);
    if (mbuf_append(&m->out, s, n, (size_t)-1) != n ||
        mbuf_append(&m->out, "\n", 1, (size_t)-1) != 1)
        mlog(m, "out of memory queueing a message");
    free(s);
    if (m->out.len > OUT_HIGH && !m->in_paused) {
        m->in_paused = 1;
        ev_io_stop(m->loop, &m->in_w);
    }
    out_flush(m);
}

static void send_result(struct mcp *m, json_t *id, json_t *result)
{
    send_msg(m,
             json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_error(struct mcp *m, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_error(struct mcp *m, json_t *id, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:i, s:s%}", "code", code, "message", msg, strlen(msg));
    if (!e) /* not UTF-8: a name from the request, say */
        e = json_pack("{s:i, s:s}", "code", code, "message", "invalid request");
    send_msg(m, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                          id ? id : json_null(), "error", e));
}

/* ---- calls ------------------------------------------------------------------------ */

static void call_unlink(struct call *c)
{
    struct mcp *m = c->m;
    if (c->prev)
        c->prev->next = c->next;
    else
        m->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    m->ncalls--;
}

void mcp_call_maybe_free(struct call *c)
{
    if (!c->done || c->refs > 0)
        return;
    struct mcp *m = c->m;
    ev_timer_stop(m->loop, &c->progress);
    call_unlink(c);
    json_decref(c->id);
    json_decref(c->progress_token);
    json_decref(c->args);
    json_decref(c->exit);
    free(c->sandbox);
    mbuf_free(&c->out[0]);
    mbuf_free(&c->out[1]);
    mbuf_free(&c->logs);
    free(c);
    maybe_quit(m);
}

void mcp_answer(struct call *c, json_t *structured, int is_error, const char *text)
{
    struct mcp *m = c->m;
    if (c->done) {
        json_decref(structured);
        return;
    }
    c->done = 1;
    ev_timer_stop(m->loop, &c->progress);
    if (!c->cancelled && !m->in_eof) {
        json_t *r = json_object();
        char *dump = NULL;
        if (!text && structured)
            text = dump = json_dumps(structured, JSON_COMPACT | JSON_ENCODE_ANY);
        json_t *content =
            json_pack("{s:s, s:s}", "type", "text", "text", text ? text : "");
        if (!content) /* text from a daemon message that is not UTF-8 */
            content =
                json_pack("{s:s, s:s}", "type", "text", "text", "(unprintable message)");
        json_t *items = json_pack("[o]", content);
        /* A revision without structuredContent gets the JSON as a second text
         * item, after the readable one. */
        if (structured && !m->structured && !dump) {
            char *js = json_dumps(structured, JSON_COMPACT | JSON_ENCODE_ANY);
            if (js)
                json_array_append_new(
                    items, json_pack("{s:s, s:s}", "type", "text", "text", js));
            free(js);
        }
        json_object_set_new(r, "content", items);
        if (structured && m->structured)
            json_object_set(r, "structuredContent", structured);
        if (is_error)
            json_object_set_new(r, "isError", json_true());
        send_result(m, c->id, r);
        free(dump);
    }
    json_decref(structured);
    mcp_call_maybe_free(c);
}

void mcp_answer_error(struct call *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mcp_answer(c, NULL, 1, msg);
}

static void progress_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct call *c = w->data;
    struct mcp *m = c->m;
    (void)revents;
    if (c->done || m->out.len > OUT_HIGH / 2)
        return; /* a slow reader gets fewer progress notifications, not more memory */
    /* progress = milliseconds since the call began (it must grow with every
     * notification); total = the time limit, when the call has one. */
    json_int_t elapsed = (json_int_t)((ev_now(loop) - c->t0) * 1000.0);
    if (elapsed <= c->progress_last)
        elapsed = c->progress_last + 1;
    c->progress_last = elapsed;
    json_t *p =
        json_pack("{s:O, s:I}", "progressToken", c->progress_token, "progress", elapsed);
    if (c->timeout_ms > 0)
        json_object_set_new(p, "total", json_integer(c->timeout_ms));
    char *text = m->annotated ? mcp_tool_progress_text(c) : NULL;
    if (text)
        json_object_set_new(p, "message", mbuf_string(text, strlen(text)));
    free(text);
    send_msg(m, json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
                          "notifications/progress", "params", p));
}

/* ---- the daemon ------------------------------------------------------------------ */

struct dreq {
    struct mcp *m;
    struct call *c;
    struct slot *s;
    dreply_fn fn;
    void (*sfn)(struct mcp *m, struct slot *s, json_t *result, const sbx_rpc_error *err);
};

static void ac_gone(void *data)
{
    struct mcp *m = data;
    /* sbxd closes idle sessions (limits.session_idle_timeout_ms); sandboxes
     * outlive the session, so the next call just connects again. */
    if (!m->quitting && m->ac) /* NULL: never attached (daemon_conn failed) */
        mlog(m, "connection to sbxd closed (%s); the next call reconnects",
             m->ac->c.errstr[0] ? m->ac->c.errstr : "EOF");
    m->ac = NULL;
}

static void route_notify(sbx_async *ac, const char *method, json_t *params,
                         void *privdata);

static sbx_async *daemon_conn(struct mcp *m)
{
    if (m->ac)
        return m->ac;
    sbx_async *ac = sbx_async_connect_unix(socket_path());
    if (!ac)
        return NULL;
    if (ac->c.err) {
        snprintf(m->conn_err, sizeof(m->conn_err), "cannot connect to sbxd at %.80s: %s",
                 socket_path(), ac->c.errstr);
        mlog(m, "%s", m->conn_err);
        sbx_async_free(ac);
        return NULL;
    }
    ac->data = m;
    ac->data_cleanup = ac_gone;
    sbx_async_set_notify_cb(ac, route_notify, m);
    if (sbx_libev_attach(m->loop, ac) != SBX_OK) {
        mlog(m, "cannot attach to the event loop");
        sbx_async_free(ac);
        return NULL;
    }
    m->ac = ac;
    return ac;
}

static void dreply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                   void *privdata)
{
    struct dreq *r = privdata;
    struct mcp *m = r->m;
    (void)ac;
    m->outstanding--;
    if (r->c) {
        /* The reply still counts while fn runs, so an answer in fn cannot free c. */
        r->fn(r->c, result, err);
        r->c->refs--;
        mcp_call_maybe_free(r->c);
    } else {
        r->sfn(m, r->s, result, err);
    }
    free(r);
    maybe_quit(m);
}

static int dsend(struct mcp *m, struct dreq *r, const char *method, json_t *params)
{
    sbx_async *ac = daemon_conn(m);
    if (!ac || sbx_async_call_new(ac, method, params, dreply, r) != SBX_OK) {
        if (!ac)
            json_decref(params);
        free(r);
        return -1;
    }
    m->outstanding++;
    if (r->c)
        r->c->refs++;
    return 0;
}

int mcp_dcall(struct call *c, const char *method, json_t *params, dreply_fn fn)
{
    struct dreq *r = calloc(1, sizeof(*r));
    if (!r) {
        json_decref(params);
        return -1;
    }
    r->m = c->m;
    r->c = c;
    r->fn = fn;
    return dsend(c->m, r, method, params);
}

static int slot_dcall(struct mcp *m, struct slot *s, const char *method, json_t *params,
                      void (*fn)(struct mcp *, struct slot *, json_t *,
                                 const sbx_rpc_error *))
{
    struct dreq *r = calloc(1, sizeof(*r));
    if (!r) {
        json_decref(params);
        return -1;
    }
    r->m = m;
    r->s = s;
    r->sfn = fn;
    return dsend(m, r, method, params);
}

const char *mcp_errtext(struct mcp *m, const sbx_rpc_error *err)
{
    static char buf[600];
    if (err)
        snprintf(buf, sizeof(buf), "%s (code %d)", err->message, err->code);
    else
        snprintf(buf, sizeof(buf), "lost the connection to sbxd%s%s",
                 m->ac && m->ac->c.errstr[0] ? ": " : "", m->ac ? m->ac->c.errstr : "");
    return buf;
}

/* process.* notifications go to the call that follows the process (its pid
 * known from the process.started that precedes them). */
static void route_notify(sbx_async *ac, const char *method, json_t *params,
                         void *privdata)
{
    struct mcp *m = privdata;
    (void)ac;
    if (strcmp(method, SBX_N_OUTPUT) == 0 || strcmp(method, SBX_N_EXIT) == 0) {
        /* No call of ours: another client's process, or one of a call
         * that is gone. Ours are named by process.started first. */
        mcp_tool_route(m, method, params);
        return;
    }
    if (strcmp(method, SBX_N_STARTED) == 0) {
        mcp_tool_started(m, params);
        return;
    }
    if (strcmp(method, SBX_N_PROGRESS) == 0) {
        /* Image pulls and the like while a sandbox of ours is being made:
         * the calls waiting for it show this in their progress. */
        const char *id = json_string_value(json_object_get(params, "sandbox"));
        const char *msg = json_string_value(json_object_get(params, "message"));
        const char *stage = json_string_value(json_object_get(params, "stage"));
        struct slot *slots[2] = {&m->cmd, &m->code};
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
        const char *id = json_string_value(json_object_get(params, "sandbox"));
        const char *st = json_string_value(json_object_get(params, "status"));
        struct slot *slots[2] = {&m->cmd, &m->code};
        for (int i = 0; i < 2 && id && st; i++) {
            struct slot *s = slots[i];
            if (s->state == SLOT_READY && s->id && strcmp(s->id, id) == 0 &&
                (strcmp(st, "destroyed") == 0 || strcmp(st, "destroying") == 0)) {
                if (m->verbose)
                    mlog(m, "the %s sandbox %s is %s", s->what, id, st);
                mcp_slot_lost(m, s);
            }
        }
    }
}

/* ---- sandboxes --------------------------------------------------------------------- */

static void slot_fail_waiters(struct mcp *m, struct slot *s, const char *why)
{
    struct call *c;
    (void)m;
    while ((c = s->waiters)) {
        s->waiters = c->wnext;
        c->wnext = NULL;
        mcp_answer_error(c, "cannot create the %s sandbox: %s", s->what, why);
    }
}

static void destroy_reply(struct mcp *m, struct slot *s, json_t *result,
                          const sbx_rpc_error *err)
{
    (void)s;
    (void)result;
    if (err && err->code != SBX_E_NOT_FOUND)
        mlog(m, "destroying a sandbox failed: %s", mcp_errtext(m, err));
}

static void slot_destroy(struct mcp *m, struct slot *s)
{
    if (s->state != SLOT_READY || !s->owned)
        return;
    if (m->verbose)
        mlog(m, "destroying the %s sandbox %s", s->what, s->id);
    slot_dcall(m, s, SBX_M_DESTROY, json_pack("{s:s}", "id", s->id), destroy_reply);
    mcp_slot_lost(m, s);
}

static void create_reply(struct mcp *m, struct slot *s, json_t *result,
                         const sbx_rpc_error *err)
{
    const char *id = json_string_value(json_object_get(result, "id"));
    free(s->progress);
    s->progress = NULL;
    if (!id) {
        mcp_slot_lost(m, s);
        slot_fail_waiters(m, s, result ? "no id in the result" : mcp_errtext(m, err));
        return;
    }
    free(s->id);
    s->id = strdup(id);
    const char *prov = json_string_value(json_object_get(result, "provider"));
    free(s->provider);
    s->provider = prov ? strdup(prov) : NULL;
    s->state = SLOT_READY;
    s->owned = !(s == &m->cmd && m->sandbox_name);
    if (m->verbose)
        mlog(m, "%s sandbox %s (%s)", s->what, id,
             json_string_value(json_object_get(result, "provider")));
    if (m->quitting) {
        slot_destroy(m, s);
        slot_fail_waiters(m, s, "shutting down");
        return;
    }
    struct call *c;
    while (s->state == SLOT_READY && (c = s->waiters)) {
        s->waiters = c->wnext;
        c->wnext = NULL;
        c->on_ready(c);
    }
}

static void slot_create(struct mcp *m, struct slot *s, const char *provider)
{
    json_t *p = json_object();
    if (s == &m->cmd) {
        if (m->sandbox_name)
            json_object_set_new(p, "id", json_string(m->sandbox_name));
        if (m->provider)
            json_object_set_new(p, "provider", json_string(m->provider));
        if (m->image)
            json_object_set_new(p, "image", json_string(m->image));
        if (m->sb_env)
            json_object_set(p, "env", m->sb_env);
        if (m->sb_opts)
            json_object_set(p, "options", m->sb_opts);
    } else {
        json_object_set_new(p, "provider", json_string(provider));
    }
    if (!(s == &m->cmd && m->sandbox_name)) {
        /* Our own id, so that sandbox.progress before the reply is ours. */
        unsigned char r[8];
        char id[40];
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(r, 1, sizeof(r), f) != sizeof(r)) {
            for (size_t i = 0; i < sizeof(r); i++)
                r[i] = (unsigned char)(rand() ^ (int)getpid() >> (int)i);
        }
        if (f)
            fclose(f);
        snprintf(id, sizeof(id), "mcp-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1], r[2],
                 r[3], r[4], r[5], r[6], r[7]);
        free(s->id);
        s->id = strdup(id);
        json_object_set_new(p, "id", json_string(id));
        json_object_set_new(p, "timeout_ms", json_integer(m->lifetime_ms));
        json_object_set_new(p, "idle_timeout_ms", json_integer(m->idle_ms));
    }
    s->state = SLOT_CREATING;
    if (slot_dcall(m, s, SBX_M_CREATE, p, create_reply) < 0) {
        s->state = SLOT_NONE;
        slot_fail_waiters(m, s, m->conn_err[0] ? m->conn_err : "cannot reach sbxd");
    }
}

/* run_code's provider: --code-provider, else js when sbxd has it, else duktape. */
static void info_reply(struct mcp *m, struct slot *s, json_t *result,
                       const sbx_rpc_error *err)
{
    const char *pick = "duktape";
    size_t i;
    json_t *pv;
    if (!result) {
        s->state = SLOT_NONE;
        slot_fail_waiters(m, s, mcp_errtext(m, err));
        return;
    }
    json_array_foreach(json_object_get(result, "providers"), i, pv) {
        const char *name = json_string_value(json_object_get(pv, "name"));
        if (name && strcmp(name, "js") == 0 &&
            json_is_true(json_object_get(pv, "available")))
            pick = "js";
    }
    if (m->quitting) {
        s->state = SLOT_NONE;
        slot_fail_waiters(m, s, "shutting down");
        return;
    }
    slot_create(m, s, pick);
}

void mcp_slot_use(struct call *c, struct slot *s, void (*ready)(struct call *c))
{
    struct mcp *m = c->m;
    c->slot = s;
    c->on_ready = ready;
    if (s->state == SLOT_READY) {
        ready(c);
        return;
    }
    c->wnext = s->waiters;
    s->waiters = c;
    if (s->state != SLOT_NONE)
        return;
    if (s == &m->code && !m->code_provider) {
        s->state = SLOT_INFO;
        if (slot_dcall(m, s, SBX_M_INFO, NULL, info_reply) < 0) {
            s->state = SLOT_NONE;
            slot_fail_waiters(m, s, m->conn_err[0] ? m->conn_err : "cannot reach sbxd");
        }
        return;
    }
    slot_create(m, s, s == &m->code ? m->code_provider : NULL);
}

void mcp_slot_lost(struct mcp *m, struct slot *s)
{
    (void)m;
    free(s->id);
    s->id = NULL;
    free(s->progress);
    s->progress = NULL;
    free(s->provider);
    s->provider = NULL;
    s->state = SLOT_NONE;
    s->owned = 0;
}

static void slot_unwait(struct slot *s, struct call *c)
{
    for (struct call **pp = &s->waiters; *pp; pp = &(*pp)->wnext) {
        if (*pp == c) {
            *pp = c->wnext;
            c->wnext = NULL;
            return;
        }
    }
}

/* ---- remembered offsets ------------------------------------------------------------ */

struct offsets {
    char *sandbox;
    json_int_t pid, off[2];
    struct offsets *next;
};

void mcp_offsets_get(struct mcp *m, const char *sandbox, json_int_t pid,
                     json_int_t off[2])
{
    off[0] = off[1] = 0;
    for (struct offsets *o = m->offsets; o; o = o->next) {
        if (o->pid == pid && strcmp(o->sandbox, sandbox) == 0) {
            off[0] = o->off[0];
            off[1] = o->off[1];
            return;
        }
    }
}

void mcp_offsets_put(struct mcp *m, const char *sandbox, json_int_t pid,
                     const json_int_t off[2])
{
    struct offsets **pp, *o;
    for (pp = &m->offsets; (o = *pp); pp = &o->next) {
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
        m->noffsets++;
    }
    o->off[0] = off[0];
    o->off[1] = off[1];
    o->next = m->offsets;
    m->offsets = o;
    if (m->noffsets > OFFSETS_MAX) { /* forget the least recently used */
        for (pp = &m->offsets; (*pp)->next; pp = &(*pp)->next)
            ;
        free((*pp)->sandbox);
        free(*pp);
        *pp = NULL;
        m->noffsets--;
    }
}

/* ---- requests ---------------------------------------------------------------------- */

static json_t *server_instructions(struct mcp *m)
{
    char buf[1024];
    if (m->code_only) {
        snprintf(buf, sizeof(buf),
                 "Tools of an sbxd sandbox. run_code runs a JavaScript program in an "
                 "isolate (sbxd's %s provider) and returns its result and logs. sbxd "
                 "has no shell provider available here, so there is no tool for shell "
                 "commands.",
                 m->code_provider ? m->code_provider : "js");
        return json_string(buf);
    }
    snprintf(
        buf, sizeof(buf),
        "Tools of an sbxd sandbox. exec_command runs a shell command in %s%s%s%s%s%s%s "
        "and returns its output and exit code; spawn_process starts one in the "
        "background (then process_output and kill_process take its pid). run_code runs "
        "a JavaScript program in an isolate (provider %s) and returns its result and "
        "logs. sandbox_info describes the sandbox.",
        m->sandbox_name ? "the sandbox " : "a sandbox",
        m->sandbox_name ? m->sandbox_name : "", m->provider ? " (provider " : "",
        m->provider ? m->provider : "", m->image ? ", image " : "",
        m->image ? m->image : "", m->provider ? ")" : "",
        m->code_provider ? m->code_provider : "js");
    return json_string(buf);
}

static void on_initialize(struct mcp *m, json_t *id, json_t *params)
{
    const char *want = json_string_value(json_object_get(params, "protocolVersion"));
    if (!want) {
        send_error(m, id, SBX_E_PARAMS,
                   "initialize needs params.protocolVersion (a string)");
        return;
    }
    /* The client's revision when we speak it, else our newest. */
    size_t pick = 0;
    for (size_t i = 0; i < NVERSIONS; i++)
        if (strcmp(want, versions[i]) == 0)
            pick = i;
    snprintf(m->version, sizeof(m->version), "%s", versions[pick]);
    m->structured = pick <= FIRST_STRUCTURED;
    m->annotated = pick <= FIRST_ANNOTATED;
    json_decref(m->tools_json);
    m->tools_json = mcp_tools_list(m, m->structured, m->annotated);
    if (m->verbose)
        mlog(m, "client asked for %s, speaking %s", want, m->version);

    json_t *info = json_pack("{s:s, s:s}", "name", "sbxd", "version", SBX_VERSION);
    if (m->structured)
        json_object_set_new(info, "title", json_string("sbxd sandboxes"));
    send_result(m, id,
                json_pack("{s:s, s:{s:{s:b}}, s:o, s:o}", "protocolVersion", m->version,
                          "capabilities", "tools", "listChanged", 0, "serverInfo", info,
                          "instructions", server_instructions(m)));
}

static struct call *find_call(struct mcp *m, json_t *id)
{
    for (struct call *c = m->calls; c; c = c->next)
        if (!c->done && json_equal(c->id, id))
            return c;
    return NULL;
}

static void on_tools_call(struct mcp *m, json_t *id, json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    json_t *meta = json_object_get(params, "_meta");
    json_t *token = json_object_get(meta, "progressToken");

    if (!name) {
        send_error(m, id, SBX_E_PARAMS, "tools/call needs params.name (a string)");
        return;
    }
    const struct tool *t = mcp_tool_find(m, name);
    if (!t) {
        send_error(m, id, SBX_E_PARAMS, "Unknown tool: %s", name);
        return;
    }
    if (args && !json_is_object(args) && !json_is_null(args)) {
        send_error(m, id, SBX_E_PARAMS, "params.arguments must be an object");
        return;
    }
    if (token && !json_is_string(token) && !json_is_integer(token)) {
        send_error(m, id, SBX_E_PARAMS,
                   "_meta.progressToken must be a string or an integer");
        return;
    }
    if (find_call(m, id)) {
        send_error(m, id, SBX_E_INVALID_REQUEST,
                   "a request with this id is still running");
        return;
    }
    struct call *c = calloc(1, sizeof(*c));
    if (!c) {
        send_error(m, id, SBX_E_INTERNAL, "out of memory");
        return;
    }
    c->m = m;
    c->id = json_incref(id);
    c->tool = t;
    c->args = json_is_object(args) ? json_incref(args) : json_object();
    c->pid = -1;
    c->t0 = ev_now(m->loop);
    c->next = m->calls;
    if (m->calls)
        m->calls->prev = c;
    m->calls = c;
    m->ncalls++;
    ev_timer_init(&c->progress, progress_cb, m->progress_ms / 1000.0,
                  m->progress_ms / 1000.0);
    c->progress.data = c;
    if (m->ncalls > m->max_calls) {
        mcp_answer_error(c,
                         "too many tool calls at once (at most %zu); try again when one "
                         "has finished",
                         m->max_calls);
        return;
    }
    if (token && mcp_tool_has_progress(t)) {
        c->progress_token = json_incref(token);
        ev_timer_start(m->loop, &c->progress);
    }
    mcp_tool_start(c);
}

static void cancel_call(struct call *c, const char *why)
{
    struct mcp *m = c->m;
    if (c->done)
        return;
    if (m->verbose)
        mlog(m, "cancelling a %s call (%s)", mcp_tool_name(c->tool), why);
    c->cancelled = 1;
    c->done = 1;
    ev_timer_stop(m->loop, &c->progress);
    if (c->slot)
        slot_unwait(c->slot, c);
    mcp_tool_cancel(c);
    mcp_call_maybe_free(c);
}

static void on_notification(struct mcp *m, const char *method, json_t *params)
{
    if (strcmp(method, "notifications/cancelled") == 0) {
        json_t *rid = json_object_get(params, "requestId");
        struct call *c = rid ? find_call(m, rid) : NULL;
        if (c)
            cancel_call(c, "notifications/cancelled");
        return;
    }
    /* notifications/initialized and anything else: nothing to do. */
}

static void on_message(struct mcp *m, json_t *msg)
{
    if (json_is_array(msg)) {
        send_error(m, NULL, SBX_E_INVALID_REQUEST, "batches are not supported");
        return;
    }
    json_t *id = json_object_get(msg, "id");
    json_t *jm = json_object_get(msg, "method");
    const char *method = json_string_value(jm);
    json_t *params = json_object_get(msg, "params");
    const char *ver = json_string_value(json_object_get(msg, "jsonrpc"));

    if (id && !json_is_string(id) && !json_is_integer(id))
        id = NULL; /* MCP ids are strings or integers; null is not an id */
    if (!json_is_object(msg) || !ver || strcmp(ver, "2.0") != 0) {
        send_error(m, id, SBX_E_INVALID_REQUEST, "not a JSON-RPC 2.0 message");
        return;
    }
    if (!jm) {
        /* A response: we send no requests, so there is nothing to match. */
        return;
    }
    if (!method || (params && !json_is_object(params))) {
        send_error(m, id, SBX_E_INVALID_REQUEST,
                   !method ? "method must be a string" : "params must be an object");
        return;
    }
    if (!json_object_get(msg, "id")) {
        on_notification(m, method, params);
        return;
    }
    if (!id) {
        send_error(m, NULL, SBX_E_INVALID_REQUEST, "id must be a string or an integer");
        return;
    }
    if (m->verbose)
        mlog(m, "<- %s", method);
    if (strcmp(method, "initialize") == 0)
        on_initialize(m, id, params);
    else if (strcmp(method, "ping") == 0)
        send_result(m, id, json_object());
    else if (strcmp(method, "tools/list") == 0)
        send_result(m, id, json_pack("{s:O}", "tools", m->tools_json));
    else if (strcmp(method, "tools/call") == 0)
        on_tools_call(m, id, params);
    else
        send_error(m, id, SBX_E_METHOD, "Method not found: %s", method);
}

/* ---- stdin ------------------------------------------------------------------------- */

static void on_line(struct mcp *m, char *line, size_t len)
{
    json_error_t jerr;
    if (m->quitting)
        return;
    while (len > 0 &&
           (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (len == 0)
        return;
    json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        send_error(m, NULL, SBX_E_PARSE, "parse error: %s", jerr.text);
        return;
    }
    on_message(m, msg);
    json_decref(msg);
}

static void too_long(struct mcp *m)
{
    send_error(m, NULL, SBX_E_INVALID_REQUEST,
               "message longer than %zu bytes (sbxctl mcp --max-message)",
               m->max_message);
}

static void in_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct mcp *m = w->data;
    (void)loop;
    (void)revents;

    if (m->in.cap < m->in.len + IN_CHUNK + 1) {
        char *p = realloc(m->in.p, m->in.len + IN_CHUNK + 1);
        if (!p) {
            mlog(m, "out of memory reading stdin");
            return;
        }
        m->in.p = p;
        m->in.cap = m->in.len + IN_CHUNK + 1;
    }
    ssize_t n = read(0, m->in.p + m->in.len, IN_CHUNK);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        mlog(m, "stdin: %s", strerror(errno));
    }
    if (n <= 0) {
        ev_io_stop(m->loop, &m->in_w);
        m->in_eof = 1;
        begin_quit(m);
        return;
    }
    size_t start = m->in.len;
    m->in.len += (size_t)n;

    /* Every complete line in what came in; bounded by this read. */
    size_t from = 0;
    for (size_t i = start; i < m->in.len; i++) {
        if (m->in.p[i] != '\n')
            continue;
        if (m->discarding)
            m->discarding = 0;
        else if (i - from > m->max_message)
            too_long(m);
        else
            on_line(m, m->in.p + from, i - from);
        from = i + 1;
    }
    memmove(m->in.p, m->in.p + from, m->in.len - from);
    m->in.len -= from;
    if (m->in.len > m->max_message) {
        if (!m->discarding)
            too_long(m);
        m->discarding = 1;
        m->in.len = 0;
    }
    /* Keep the buffer small between messages. */
    if (m->in.len == 0 && m->in.cap > 4 * IN_CHUNK) {
        free(m->in.p);
        m->in.p = NULL;
        m->in.cap = 0;
    }
}

/* ---- leaving ----------------------------------------------------------------------- */

static void maybe_quit(struct mcp *m)
{
    if (!m->quitting || m->outstanding > 0 || m->ncalls > 0 || m->out.len > 0)
        return;
    if (m->cmd.state == SLOT_CREATING || m->cmd.state == SLOT_INFO ||
        m->code.state == SLOT_CREATING || m->code.state == SLOT_INFO)
        return;
    ev_break(m->loop, EVBREAK_ALL);
}

/* stdin closed, stdout broken or a signal: stop the calls, destroy what we made. */
static void begin_quit(struct mcp *m)
{
    if (m->quitting)
        return;
    m->quitting = 1;
    ev_io_stop(m->loop, &m->in_w);
    struct call *c, *next;
    for (c = m->calls; c; c = next) {
        next = c->next;
        c->cancelled = 1; /* no answer after the client left */
        if (!c->done)
            cancel_call(c, "shutting down");
    }
    slot_destroy(m, &m->cmd);
    slot_destroy(m, &m->code);
    ev_timer_start(m->loop, &m->quit_timer);
    maybe_quit(m);
}

static void quit_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mcp *m = w->data;
    (void)revents;
    mlog(m, "gave up waiting for sbxd after %.0f s", QUIT_GRACE);
    m->status = EXIT_RPC;
    ev_break(loop, EVBREAK_ALL);
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct mcp *m = w->data;
    (void)revents;
    if (++m->signals > 1) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    begin_quit(m);
}

/* ---- options and main ------------------------------------------------------------ */

static const struct opt mcp_opts[] = {
    {"provider", 'p', 1, 1},    {"image", 'i', 1, 2},      {"sandbox", 0, 1, 3},
    {"code-provider", 0, 1, 4}, {"env", 'e', 1, 5},        {"opt", 'o', 1, 6},
    {"timeout", 't', 1, 7},     {"lifetime", 0, 1, 8},     {"idle-timeout", 0, 1, 9},
    {"max-output", 0, 1, 10},   {"max-message", 0, 1, 11}, {"max-calls", 0, 1, 12},
    {"progress-ms", 0, 1, 13},  {"verbose", 'v', 0, 14},   {NULL, 0, 0, 0},
};

static json_int_t arg_range(const char *what, const char *s, json_int_t lo, json_int_t hi)
{
    json_int_t v = arg_int(what, s);
    if (v < lo || v > hi)
        usage_error("%s must be between %" JSON_INTEGER_FORMAT
                    " and %" JSON_INTEGER_FORMAT,
                    what, lo, hi);
    return v;
}

static void set_nonblock(int fd, int *flags0)
{
    *flags0 = fcntl(fd, F_GETFL);
    if (*flags0 >= 0)
        fcntl(fd, F_SETFL, *flags0 | O_NONBLOCK);
}

/* What was not given, from daemon.info (issue 19): without --provider and
 * --sandbox the command sandbox is docker with its configured image when
 * docker is available, else only run_code is offered; run_code's provider is
 * js when available, else duktape. Asked once, before the loop runs (a
 * command-line client may wait here); sbxd unreachable, the command sandbox
 * stays docker and calls say why they fail. */
static void pick_defaults(struct mcp *m)
{
    int want_cmd = !m->provider && !m->sandbox_name;
    if (!want_cmd && m->code_provider)
        return;
    json_t *info = NULL;
    sbx_ctx *c = sbx_connect_unix(socket_path(), 5000);
    if (c && !c->err) {
        sbx_rpc_error *e = NULL;
        if (sbx_call_new(c, &info, &e, SBX_M_INFO, NULL) != SBX_OK)
            info = NULL;
        sbx_rpc_error_free(e);
    }
    sbx_free(c);
    const char *docker_image = NULL, *docker_why = "sbxd did not answer";
    int js = 0, docker = 0;
    size_t i;
    json_t *pv;
    json_array_foreach(json_object_get(info, "providers"), i, pv) {
        const char *name = json_string_value(json_object_get(pv, "name"));
        int avail = json_is_true(json_object_get(pv, "available"));
        if (name && !strcmp(name, "js"))
            js = avail;
        if (name && !strcmp(name, "docker")) {
            docker = avail;
            docker_image =
                json_string_value(json_object_get(json_object_get(pv, "info"), "image"));
            docker_why = json_string_value(json_object_get(pv, "reason"));
        }
    }
    if (!m->code_provider)
        m->code_provider = m->picked[0] = strdup(!info || js ? "js" : "duktape");
    if (!want_cmd)
        goto out;
    if (docker || !info) {
        m->provider = "docker";
        if (!m->image && docker_image)
            m->image = m->picked[1] = strdup(docker_image);
    } else {
        m->code_only = 1;
        mlog(m,
             "no shell provider (docker: %s): offering run_code only; pass --provider "
             "for another",
             docker_why ? docker_why : "unavailable");
    }
out:
    json_decref(info);
}

int cmd_mcp(int argc, char **argv)
{
    struct mcp mm, *m = &mm;
    struct parser p;
    int o;

    memset(m, 0, sizeof(*m));
    m->lifetime_ms = 86400000;
    m->idle_ms = 3600000;
    m->max_output = 1 << 20;
    m->max_message = 4 << 20; /* below sbxd's 16 MiB max_message_bytes, with room */
    m->max_calls = 64;
    m->progress_ms = 1000;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, mcp_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            usage_error("unexpected argument: %s", p.arg);
        case 1:
            m->provider = p.arg;
            break;
        case 2:
            m->image = p.arg;
            break;
        case 3:
            m->sandbox_name = p.arg;
            break;
        case 4:
            m->code_provider = p.arg;
            break;
        case 5:
            if (!m->sb_env)
                m->sb_env = json_object();
            arg_env(m->sb_env, p.arg, 0);
            break;
        case 6:
            if (!m->sb_opts)
                m->sb_opts = json_object();
            arg_opt(m->sb_opts, p.arg);
            break;
        case 7:
            m->default_timeout_ms = arg_range("--timeout", p.arg, 0, 86400000);
            break;
        case 8:
            m->lifetime_ms = arg_range("--lifetime", p.arg, 1, 86400000);
            break;
        case 9:
            m->idle_ms = arg_range("--idle-timeout", p.arg, 0, 86400000);
            break;
        case 10:
            m->max_output = (size_t)arg_range("--max-output", p.arg, 1024, 64 << 20);
            break;
        case 11:
            m->max_message = (size_t)arg_range("--max-message", p.arg, 4096, 256 << 20);
            break;
        case 12:
            m->max_calls = (size_t)arg_range("--max-calls", p.arg, 1, 4096);
            break;
        case 13:
            m->progress_ms = (int)arg_range("--progress-ms", p.arg, 50, 3600000);
            break;
        case 14:
            m->verbose = 1;
            break;
        }
    }

    pick_defaults(m);
    m->loop = EV_DEFAULT;
    m->cmd.what = "command";
    m->code.what = "code";
    snprintf(m->version, sizeof(m->version), "%s", versions[0]);
    m->structured = m->annotated = 1;
    m->tools_json = mcp_tools_list(m, 1, 1);
    signal(SIGPIPE, SIG_IGN);

    set_nonblock(0, &m->in_flags0);
    set_nonblock(1, &m->out_flags0);
    ev_io_init(&m->in_w, in_cb, 0, EV_READ);
    ev_io_init(&m->out_w, out_cb, 1, EV_WRITE);
    m->in_w.data = m->out_w.data = m;
    ev_io_start(m->loop, &m->in_w);
    ev_signal_init(&m->sigint, signal_cb, SIGINT);
    ev_signal_init(&m->sigterm, signal_cb, SIGTERM);
    m->sigint.data = m->sigterm.data = m;
    ev_signal_start(m->loop, &m->sigint);
    ev_signal_start(m->loop, &m->sigterm);
    ev_timer_init(&m->quit_timer, quit_timer_cb, QUIT_GRACE, 0.);
    m->quit_timer.data = m;
    if (m->verbose)
        mlog(m, "serving MCP on stdio; sbxd at %s", socket_path());

    ev_run(m->loop, 0);

    /* Replies we no longer wait for get NULLs; the calls go with them. */
    m->quitting = 1;
    for (struct call *c = m->calls; c; c = c->next)
        c->done = c->cancelled = 1;
    if (m->ac)
        sbx_async_free(m->ac);
    while (m->calls) {
        m->calls->refs = 0;
        mcp_call_maybe_free(m->calls);
    }
    ev_io_stop(m->loop, &m->in_w);
    ev_io_stop(m->loop, &m->out_w);
    ev_signal_stop(m->loop, &m->sigint);
    ev_signal_stop(m->loop, &m->sigterm);
    ev_timer_stop(m->loop, &m->quit_timer);
    if (m->in_flags0 >= 0)
        fcntl(0, F_SETFL, m->in_flags0);
    if (m->out_flags0 >= 0)
        fcntl(1, F_SETFL, m->out_flags0);
    mbuf_free(&m->in);
    mbuf_free(&m->out);
    json_decref(m->tools_json);
    json_decref(m->sb_env);
    json_decref(m->sb_opts);
    mcp_slot_lost(m, &m->cmd);
    mcp_slot_lost(m, &m->code);
    for (size_t i = 0; i < sizeof(m->picked) / sizeof(m->picked[0]); i++)
        free(m->picked[i]);
    while (m->offsets) {
        struct offsets *n = m->offsets->next;
        free(m->offsets->sandbox);
        free(m->offsets);
        m->offsets = n;
    }
    return m->status;
}
