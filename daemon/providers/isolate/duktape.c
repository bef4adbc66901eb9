/*
 * duktape.c - the isolate providers, daemon side: `duktape` (Duktape, ES5,
 * worker sbxd-worker) and `js` (JavaScriptCore, the code-mode engine,
 * worker sbxd-jsworker). Both have the same shape, so one implementation
 * serves both; `js` differs where its engine does (dp->js): memory is
 * enforced here by an RSS watchdog on the worker (JSC has no heap cap), the
 * SPAWN carries `persistent`/`max_message` instead of `fresh`, and a
 * timeout is reported as a TimeoutError.
 *
 * Each sandbox owns one isolate worker process reached over the worker channel.
 * A small pool of warm workers makes sandbox.create cost a pool pop instead
 * of a process start. Runaway programs are the worker's problem, never the
 * loop's: a timeout or kill ends the worker with SIGKILL and the sandbox
 * gets a fresh isolate.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/wait.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/chan.h"
#include "daemon.h"
#include "providers/isolate/iso_int.h"
#include "io/pchan.h"
#include "log.h"
#include "providers/isolate/isolate_stats.h"
#include "core/process.h"
#include "core/process_pchan.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DEFAULT_POOL 2
#define DEFAULT_MEM_MB 128
#define STDIN_LIMIT (16u * 1024 * 1024)
/* Per-user worker uids (README "Security"): worker uid = base + socket uid,
 * for socket uids below count. 0x70000000 is above every range that
 * systemd, useradd and /etc/subuid hand out by default. */
#define DEFAULT_UID_BASE 1879048192
#define DEFAULT_UID_COUNT 65536
/* How long a snapshot or stop may take to read an isolate's globals. */
#define DEFAULT_STATE_TIMEOUT_S 5

static void worker_frame(struct chan *ch, const struct sbx_chan_hdr *h,
                         const uint8_t *payload, void *data);
static void worker_frames(struct worker *w);
static void worker_closed(struct chan *ch, const char *why, void *data);
static void pump(struct duk_sb *ds);
static void rss_cb(struct ev_loop *loop, ev_timer *t, int revents);
static long read_rss_pages(struct worker *w);
static void attach_worker(struct duk_sb *ds, struct worker *w);

/* Takes the sandbox's worker away from it and ends it. */
static void drop_worker(struct duk_sb *ds)
{
    struct worker *w = ds->w;
    if (!w)
        return;
    w->owner = NULL;
    w->running = NULL;
    iso_pool_log_to(w);
    iso_pool_kill(w);
    ds->w = NULL;
}

/* js: create's `persistent`, else options.persistent, else the config's. */
static int sb_persistent(struct duk_prov *dp, struct sandbox *sb)
{
    json_t *v = json_object_get(sb->conf, "persistent");
    if (!json_is_boolean(v))
        v = json_object_get(json_object_get(sb->conf, "options"), "persistent");
    return json_is_boolean(v) ? json_is_true(v) : dp->persistent;
}

/* js: options.jit, else the provider's setting. */
static int sb_jit(struct duk_prov *dp, struct sandbox *sb)
{
    json_t *v = json_object_get(json_object_get(sb->conf, "options"), "jit");
    return json_is_boolean(v) ? json_is_true(v) : dp->jit;
}

/* Gives the sandbox a worker: from the pool when one is warm, else a new one
 * (the start finishes on its HELLO). Returns 0, or -1 with err set. */
static int get_worker(struct duk_sb *ds, sbx_err_t *err)
{
    struct duk_prov *dp = ds->sb->prov->cookie;
    int64_t mem = iso_pool_sb_mem(dp, ds->sb);
    int jit = sb_jit(dp, ds->sb);
    struct worker *w = iso_pool_take(dp, mem, jit, ds->sb->owner);
    if (!w) {
        if (iso_pool_fits(dp, mem, jit)) {
            /* Take a starting pool worker rather than start one more. */
            for (struct worker *x = dp->pool; x; x = x->next)
                if (iso_pool_usable_by(x, ds->sb->owner)) {
                    w = x;
                    iso_pool_remove(dp, x);
                    break;
                }
        }
        if (!w)
            w = iso_pool_spawn(dp, mem, jit, ds->sb->owner, err);
    }
    if (dp->uid_mode && w)
        dp->refill_uid = ds->sb->owner;
    iso_pool_fill(dp);
    if (!w)
        return -1;
    attach_worker(ds, w);
    return 0;
}

/* get_worker where nobody waits for an answer: the reason goes to the log,
 * and the sandbox's next program fails for want of a worker. */
static void get_worker_or_log(struct duk_sb *ds)
{
    sbx_err_t err = {0};
    if (get_worker(ds, &err) < 0)
        log_warn("sandbox %s: %s", ds->sb->id, err.msg ? err.msg : "no isolate worker");
    err_clear(&err);
}

static void finish_start(struct duk_sb *ds)
{
    int was_start = ds->starting;
    ds->starting = 0;
    /* A start loads the state kept by stop, or the snapshot the sandbox was
     * created from; a worker replaced after a timeout starts empty. */
    json_t *state = ds->saved ? ds->saved : ds->sb->snapshot;
    if (was_start && state && !json_is_null(state))
        chan_send_json(&ds->w->ch, SBX_CHAN_RESTORE, 0, state);
    json_decref(ds->saved);
    ds->saved = NULL;
    if (ds->sb->op == OP_START)
        sandbox_op_done(ds->sb, NULL, NULL);
    pump(ds);
}

static void attach_worker(struct duk_sb *ds, struct worker *w)
{
    ds->w = w;
    w->owner = ds;
    iso_pool_log_to(w);
    w->mem_mb = iso_pool_sb_mem(ds->sb->prov->cookie, ds->sb);
    if (w->ready)
        finish_start(ds);
    /* else: worker_frame(HELLO) finishes it */
}

/* -- processes ----------------------------------------------------------------- */

static void flush_stdin(struct worker *w, struct duk_proc *dpp)
{
    struct obuf *b = &dpp->stdin_buf;
    while (b->bytes > 0) {
        struct iovec iov[1];
        obuf_iov(b, iov, 1);
        if (chan_send(&w->ch, SBX_CHAN_STDIN, dpp->p->pid, iov[0].iov_base,
                      iov[0].iov_len) < 0)
            break;
        obuf_consume(b, iov[0].iov_len);
    }
    if (dpp->stdin_eof && b->bytes == 0)
        chan_send(&w->ch, SBX_CHAN_STDIN_EOF, dpp->p->pid, NULL, 0);
}

static void pump(struct duk_sb *ds)
{
    if (ds->shared && !ds->w && ds->queue && !js_share_attach(ds))
        return;
    /* a shared sandbox with nothing to run holds no worker (its program
     * ended while the worker was still starting) */
    if (ds->shared && ds->w && ds->w->ready && !ds->w->running && !ds->queue) {
        js_share_done(ds, ds->w);
        return;
    }
    struct worker *w = ds->w;
    if (!w || !w->ready || w->dead || w->running || !ds->queue || ds->starting)
        return;
    struct duk_proc *dpp = ds->queue;
    ds->queue = dpp->qnext;
    if (!ds->queue)
        ds->queue_tail = NULL;
    dpp->qnext = NULL;
    struct process *p = dpp->p;
    json_t *msg = json_deep_copy(p->spec);
    json_object_set_new(msg, "window", json_integer(SBX_CHAN_WINDOW));
    json_t *tools = json_object_get(ds->sb->conf, "tools");
    if (tools)
        json_object_set(msg, "tools", tools);
    struct duk_prov *dp = ds->sb->prov->cookie;
    if (dp->js) {
        json_object_set_new(msg, "persistent", json_boolean(sb_persistent(dp, ds->sb)));
        json_object_set_new(msg, "max_message",
                            json_integer((json_int_t)D->cfg.max_message_bytes));
        json_object_set_new(msg, "memory_limit_mb", json_integer((json_int_t)w->mem_mb));
    } else {
        int fresh =
            dp->fresh || json_is_true(json_object_get(ds->sb->conf, "fresh_isolate"));
        json_object_set_new(msg, "fresh", json_boolean(fresh));
    }
    if (chan_send_json(&w->ch, SBX_CHAN_SPAWN, p->pid, msg) < 0) {
        json_decref(msg);
        json_t *rec =
            json_pack("{s:i, s:s}", "exit_code", -1, "error", "isolate channel failed");
        process_exited(p, rec);
        json_decref(rec);
        return;
    }
    json_decref(msg);
    w->running = p;
    dpp->spawned = 1;
    /* js: what the engine holds before the first program of this isolate
     * (the heap, the TypeScript stripper, its caches) is the baseline; the
     * program's memory is what comes on top (issue 16, item 10). */
    if (dp->js && w->statm_fd >= 0 && (w->base_pages < 0 || ds->shared)) {
        /* shared (js_share.c): the lowest RSS any run started at, since
         * the engine gives pages back between runs (a baseline above the
         * RSS a run starts at gives it that much more) */
        long r = read_rss_pages(w);
        if (w->base_pages < 0 || (r > 0 && r < w->base_pages))
            w->base_pages = r;
    }
    if (dp->js && w->statm_fd >= 0)
        ev_timer_start(D->loop, &w->rss);
    flush_stdin(w, dpp);
}

static int d_proc_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    struct duk_sb *ds = p->sb->pdata;
    struct duk_proc *dpp = xcalloc(1, sizeof(*dpp));
    dpp->p = p;
    obuf_init(&dpp->stdin_buf);
    p->pdata = dpp;
    if (ds->queue_tail)
        ds->queue_tail->qnext = dpp;
    else
        ds->queue = dpp;
    ds->queue_tail = dpp;
    pump(ds);
    return 0;
}

static int d_proc_write(void *cookie, struct process *p, const void *data, size_t len,
                        sbx_err_t *err)
{
    struct duk_proc *dpp = p->pdata;
    struct duk_sb *ds = p->sb->pdata;
    if (!dpp || dpp->stdin_eof)
        return err_make(err, SBX_E_STATE, "stdin of process %u is closed", p->pid);
    if (dpp->stdin_buf.bytes + len > STDIN_LIMIT ||
        (ds->w && chan_pending_output(&ds->w->ch) + len > STDIN_LIMIT))
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "stdin_buffer", "max", (int)STDIN_LIMIT),
            "stdin buffer of process %u is full", p->pid);
    const uint8_t *d = data;
    if (dpp->spawned && ds->w && !ds->w->dead) {
        while (len > 0) {
            size_t k = len < SBX_CHAN_MAX_PAYLOAD ? len : SBX_CHAN_MAX_PAYLOAD;
            if (chan_send(&ds->w->ch, SBX_CHAN_STDIN, p->pid, d, k) < 0)
                return err_make(err, SBX_E_PROVIDER, "isolate channel failed");
            d += k;
            len -= k;
        }
        return 0;
    }
    /* Queued behind another program: keep it until the SPAWN goes out. */
    while (len > 0) {
        size_t k = len < SBX_CHAN_MAX_PAYLOAD ? len : SBX_CHAN_MAX_PAYLOAD;
        obuf_append(&dpp->stdin_buf, d, k);
        d += k;
        len -= k;
    }
    return 0;
}

static int d_proc_close_stdin(void *cookie, struct process *p, sbx_err_t *err)
{
    struct duk_proc *dpp = p->pdata;
    struct duk_sb *ds = p->sb->pdata;
    if (!dpp || dpp->stdin_eof)
        return 0;
    dpp->stdin_eof = 1;
    if (dpp->spawned && ds->w && !ds->w->dead)
        chan_send(&ds->w->ch, SBX_CHAN_STDIN_EOF, p->pid, NULL, 0);
    return 0;
}

static void unqueue(struct duk_sb *ds, struct duk_proc *dpp)
{
    struct duk_proc *prev = NULL;
    for (struct duk_proc *x = ds->queue; x; prev = x, x = x->qnext)
        if (x == dpp) {
            if (prev)
                prev->qnext = x->qnext;
            else
                ds->queue = x->qnext;
            if (ds->queue_tail == x)
                ds->queue_tail = prev;
            x->qnext = NULL;
            return;
        }
}

/* The isolate can't be interrupted from outside, so ending the running
 * program means ending its worker; the sandbox continues on a fresh one. */
static void replace_worker(struct duk_sb *ds)
{
    drop_worker(ds);
    if (ds->shared) { /* nothing of the sandbox was in that worker */
        if (ds->sb->status == SB_RUNNING)
            pump(ds);
        return;
    }
    ds->reset_pending = 1;
    if (ds->sb->status == SB_RUNNING || ds->sb->status == SB_STARTING)
        get_worker_or_log(ds);
}

static int d_proc_kill(void *cookie, struct process *p, int sig, sbx_err_t *err)
{
    struct duk_proc *dpp = p->pdata;
    struct duk_sb *ds = p->sb->pdata;
    struct duk_prov *dp = cookie;
    if (!dpp)
        return 0;
    json_t *rec =
        json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig, "killed", 1);
    if (dp->js && p->timed_out) {
        /* The code-mode contract: a timeout is an exception of the program. */
        char msg[64];
        snprintf(msg, sizeof(msg), "timed out after %lld ms", (long long)p->timeout_ms);
        json_object_set_new(rec, "error", json_string(msg));
        json_object_set_new(rec, "exception",
                            json_pack("{s:s, s:s, s:s}", "name", "TimeoutError",
                                      "message", msg, "stack", ""));
    }
    if (ds->w && ds->w->running == p) {
        json_object_set_new(rec, "reset", json_true());
        replace_worker(ds);
        ds->reset_pending = 0;
    } else {
        unqueue(ds, dpp);
    }
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

/* The worker's resident pages, or -1 if /proc cannot say. */
static long read_rss_pages(struct worker *w)
{
    char buf[128];
    unsigned long size = 0, res = 0;
    ssize_t n = pread(w->statm_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    if (sscanf(buf, "%lu %lu", &size, &res) != 2)
        return -1;
    return (long)res;
}

/* js: the worker's resident memory, read every RSS_INTERVAL_S while a
 * program runs; past the limit (counted above the worker's baseline) the
 * worker is ended and the sandbox goes on with a fresh one. JSC has no heap
 * cap and cannot live under RLIMIT_AS or RLIMIT_DATA (it reserves large
 * regions at start), and cgroups are not everywhere ours to use: this works
 * on every Linux host. */
static void rss_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct worker *w = t->data;
    struct duk_prov *dp = w->dp;
    if (w->dead || !w->running || !w->owner) {
        ev_timer_stop(loop, t);
        return;
    }
    long res = read_rss_pages(w);
    if (res < 0)
        return;
    /* The limit is the program's own memory: above the engine's baseline. */
    /* RSS below the baseline (the engine gave pages back) is no use at all,
     * not all of RSS */
    long base = w->base_pages > 0 ? w->base_pages : 0;
    int64_t used_mb =
        (int64_t)(res > base ? res - base : 0) * dp->page_size / (1024 * 1024);
    if (used_mb < w->mem_mb)
        return;
    struct duk_sb *ds = w->owner;
    struct process *p = w->running;
    char msg[128];
    /* "out of memory" too: the words Mastra's transports (quickjs) use. */
    snprintf(msg, sizeof(msg), "memory limit exceeded (%lld MiB): out of memory",
             (long long)w->mem_mb);
    log_info("sandbox %s: pid %u: %s, the program used %lld MiB above the worker's "
             "baseline of %lld MiB",
             ds->sb->id, p->pid, msg, (long long)used_mb,
             (long long)((int64_t)base * dp->page_size / (1024 * 1024)));
    json_t *rec = json_pack("{s:i, s:s, s:b, s:{s:s, s:s, s:s}}", "exit_code", 1, "error",
                            msg, "reset", 1, "exception", "name", "RangeError", "message",
                            msg, "stack", "");
    replace_worker(ds);
    ds->reset_pending = 0; /* this record says it */
    process_exited(p, rec);
    json_decref(rec);
}

static void d_proc_resume(void *cookie, struct process *p)
{
    struct duk_proc *dpp = p->pdata;
    struct duk_sb *ds = p->sb->pdata;
    if (dpp && ds->w && ds->w->running == p)
        pchan_credit(&ds->w->pc, &dpp->pcp, p, p->pid, 1);
}

/* A message larger than one frame goes out as MORE frames and a last frame
 * of `type` (CHANNEL.md); all or nothing. */
static int send_big(struct chan *ch, uint8_t type, uint32_t proc, const char *data,
                    size_t len)
{
    size_t frames = len / SBX_CHAN_MAX_PAYLOAD + 1;
    if (chan_pending_output(ch) + len + frames * SBX_CHAN_HDR > ch->wlimit)
        return -1;
    while (len > SBX_CHAN_MAX_PAYLOAD) {
        if (chan_send(ch, SBX_CHAN_MORE, proc, data, SBX_CHAN_MAX_PAYLOAD) < 0)
            return -1;
        data += SBX_CHAN_MAX_PAYLOAD;
        len -= SBX_CHAN_MAX_PAYLOAD;
    }
    return chan_send(ch, type, proc, data, len);
}

/* Results up to limits.max_message_bytes reach the program (the client's
 * line cannot be larger); one that cannot be carried fails the call at
 * once with a clear error instead of leaving the program waiting. */
static void d_proc_tool_result(void *cookie, struct process *p, json_t *reply)
{
    struct duk_sb *ds = p->sb->pdata;
    if (!ds->w || ds->w->running != p)
        return;
    if (ds->w->tools_out > 0)
        ds->w->tools_out--;
    char *s = json_dumps(reply, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = s ? strlen(s) : 0;
    size_t max = (size_t)D->cfg.max_message_bytes;
    if (s && len <= max &&
        send_big(&ds->w->ch, SBX_CHAN_TOOL_RESULT, p->pid, s, len) == 0) {
        free(s);
        return;
    }
    free(s);
    char msg[160];
    snprintf(msg, sizeof(msg), "tool result too large (%zu bytes; the limit is %lld)",
             len, (long long)(max < ds->w->ch.wlimit ? max : ds->w->ch.wlimit));
    json_t *e = json_pack("{s:O, s:{s:i, s:s}}", "call", json_object_get(reply, "call"),
                          "error", "code", SBX_E_LIMIT, "message", msg);
    chan_send_json(&ds->w->ch, SBX_CHAN_TOOL_RESULT, p->pid, e);
    json_decref(e);
}

static void d_proc_release(void *cookie, struct process *p)
{
    struct duk_proc *dpp = p->pdata;
    struct duk_sb *ds = p->sb->pdata;
    if (!dpp)
        return;
    if (ds && ds->w && ds->w->running == p)
        replace_worker(ds);
    else if (ds)
        unqueue(ds, dpp);
    obuf_deinit(&dpp->stdin_buf);
    free(dpp);
    p->pdata = NULL;
}

/* -- frames from the worker ----------------------------------------------------- */

static void on_exit_frame(struct worker *w, const uint8_t *payload, size_t len)
{
    struct process *p = w->running;
    struct duk_sb *ds = w->owner;
    w->running = NULL;
    ev_timer_stop(D->loop, &w->rss);
    json_t *rec = chan_json(payload, len);
    if (!json_is_object(rec)) {
        json_decref(rec);
        rec = json_pack("{s:i, s:s}", "exit_code", -1, "error",
                        "invalid exit record from isolate");
    }
    if (ds && ds->reset_pending) {
        json_object_set_new(rec, "reset", json_true());
        ds->reset_pending = 0;
    }
    struct duk_proc *dpp = p->pdata;
    if (dpp)
        dpp->pcp.owed = 0;
    /* The worker ends right after this EXIT (CHANNEL.md): nothing more may
     * be sent to it, so the sandbox moves on to a fresh one now. */
    int exiting = json_is_true(json_object_get(rec, "exiting"));
    iso_text_shell_hint(p, rec);
    process_exited(p, rec);
    json_decref(rec);
    if (ds && exiting && ds->w == w) {
        replace_worker(ds);
        ds->reset_pending = 0; /* this EXIT said so */
        return;
    }
    if (ds && ds->shared && ds->w == w)
        js_share_done(ds, w);
    else if (ds)
        pump(ds);
}

/* ---- the worker's frames, through the process channel (io/pchan.h) ---- */

/* The running program, if pid names it. */
static struct pchan_proc *w_lookup(uint32_t pid, void **proc_out, void *data)
{
    struct worker *w = data;
    struct process *p = w->running;
    struct duk_proc *dpp = p && p->pid == pid ? p->pdata : NULL;
    *proc_out = dpp ? p : NULL;
    return dpp ? &dpp->pcp : NULL;
}

static int w_send(uint8_t type, uint32_t proc, const void *d, size_t n, void *data)
{
    struct worker *w = data;
    return chan_send(&w->ch, type, proc, d, n);
}

static void worker_frame(struct chan *ch, const struct sbx_chan_hdr *h,
                         const uint8_t *payload, void *data)
{
    struct worker *w = data;
    if (w->dead)
        return;
    /* up to the largest message plus the logs an exit record may carry */
    pchan_set_more(&w->pc, (size_t)D->cfg.max_message_bytes + 2 * SBX_CHAN_MAX_PAYLOAD);
    pchan_dispatch(&w->pc, h, payload);
}

static void f_hello(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload, struct pchan_proc *pp, void *proc, void *data)
{
    struct worker *w = data;
    struct duk_sb *ds = w->owner;
    if (!w->ready) {
        w->ready = 1;
        w->base_pages = -1; /* a fresh isolate: measured again at its first run */
        if (ds && ds->w == w)
            finish_start(ds);
    }
}

static void f_exit(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                   struct pchan_proc *pp, void *proc, void *data)
{
    on_exit_frame(data, payload, h->len);
}

static void f_tool_call(struct pchan *pc, const struct sbx_chan_hdr *h,
                        const uint8_t *payload, struct pchan_proc *pp, void *proc,
                        void *data)
{
    json_t *v = chan_json(payload, h->len);
    const char *name = json_string_value(json_object_get(v, "name"));
    json_t *call = json_object_get(v, "call");
    if (name && json_is_integer(call)) {
        ((struct worker *)data)->tools_out++; /* js_share.c: waits for the client */
        process_tool_call(proc, json_integer_value(call), name,
                          json_object_get(v, "args"));
    }
    json_decref(v);
}

static void f_snap_data(struct pchan *pc, const struct sbx_chan_hdr *h,
                        const uint8_t *payload, struct pchan_proc *pp, void *proc,
                        void *data)
{
    struct worker *w = data;
    struct duk_sb *ds = w->owner;
    json_t *v = chan_json(payload, h->len);
    int why = w->snapshot_wanted;
    w->snapshot_wanted = 0;
    if (ds)
        ev_timer_stop(D->loop, &ds->state_timer);
    if (!ds || !why) {
        json_decref(v);
        return;
    }
    const char *e = json_string_value(json_object_get(v, "error"));
    if (why == 2) {
        /* stop: keep the state, end the worker */
        json_decref(ds->saved);
        ds->saved = e || !v ? NULL : v;
        if (e || !v)
            json_decref(v);
        drop_worker(ds);
        sandbox_op_done(ds->sb, NULL, NULL);
        return;
    }
    if (e || !v) {
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_PROVIDER,
                      json_pack("{s:s, s:s}", "provider", w->dp->name, "message",
                                e ? e : "invalid snapshot"),
                      "snapshot failed: %s", e ? e : "invalid snapshot");
        json_decref(v);
        sandbox_op_done(ds->sb, &err, NULL);
        err_clear(&err);
        return;
    }
    sandbox_op_done(ds->sb, NULL, v);
}

static void f_error(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload, struct pchan_proc *pp, void *proc, void *data)
{
    struct worker *w = data;
    log_warn("%s worker %d gave up: %.*s", w->dp->name, (int)w->pid,
             (int)(h->len > 500 ? 500 : h->len), (const char *)payload);
    worker_closed(&w->ch, "isolate worker reported an error", w);
}

/* The frames an isolate worker sends beyond pchan's own (output, STARTED, LOG). */
static void worker_frames(struct worker *w)
{
    char tag[48];
    snprintf(tag, sizeof(tag), "%s worker %d", w->dp->name, (int)w->pid);
    pchan_init(&w->pc, &process_pchan_sink, SBX_CHAN_WINDOW, w_lookup, w_send, w, tag);
    iso_pool_log_to(w);
    pchan_on(&w->pc, SBX_CHAN_HELLO, 0, f_hello, w);
    pchan_on(&w->pc, SBX_CHAN_EXIT, PCHAN_PROC, f_exit, w);
    pchan_on(&w->pc, SBX_CHAN_TOOL_CALL, PCHAN_PROC, f_tool_call, w);
    pchan_on(&w->pc, SBX_CHAN_SNAP_DATA, 0, f_snap_data, w);
    pchan_on(&w->pc, SBX_CHAN_ERROR, 0, f_error, w);
}

/* The worker is gone (crash, memory fatal, EOF): fail what it ran and give
 * its sandbox a fresh one. */
static void worker_closed(struct chan *ch, const char *why, void *data)
{
    struct worker *w = data;
    if (w->dead)
        return;
    struct duk_sb *ds = w->owner;
    struct process *p = w->running;
    int snap = w->snapshot_wanted;
    iso_pool_kill(w);
    struct duk_prov *dp = w->dp;
    if (!ds) {
        iso_pool_remove(dp, w);
        iso_pool_fill(dp);
        return;
    }
    w->owner = NULL;
    w->running = NULL;
    iso_pool_log_to(w);
    ds->w = NULL;
    if (p) {
        json_t *rec =
            json_pack("{s:i, s:s, s:b}", "exit_code", 1, "error", why, "reset", 1);
        process_exited(p, rec);
        json_decref(rec);
    }
    if (snap) {
        sbx_err_t err = {0};
        ev_timer_stop(D->loop, &ds->state_timer);
        if (snap == 2) {
            sandbox_op_done(ds->sb, NULL, NULL);
        } else {
            err_make(&err, SBX_E_PROVIDER, "snapshot failed: %s", why);
            sandbox_op_done(ds->sb, &err, NULL);
            err_clear(&err);
        }
        return;
    }
    if (ds->starting) {
        ds->starting = 0;
        sbx_err_t err = {0};
        err_make(&err, SBX_E_PROVIDER, "isolate failed to start: %s", why);
        sandbox_op_done(ds->sb, &err, NULL);
        err_clear(&err);
        return;
    }
    if (ds->shared)
        pump(ds);
    else if (ds->sb->status == SB_RUNNING) {
        ds->reset_pending = 1;
        get_worker_or_log(ds);
    }
}

/* -- sandbox ops ------------------------------------------------------------------ */

/*
 * A snapshot or stop reads the isolate's globals, which runs their getters
 * and toJSON methods: a hostile one (a getter that never returns) would hold
 * the sandbox, and a destroy queued behind it, for limits.op_timeout_ms.
 * These ops get a budget of their own (providers.<name>.snapshot_timeout_s);
 * past it the worker is ended: a snapshot fails, a stop fails and the
 * globals are lost, and the sandbox goes on (or starts again) on a fresh
 * isolate.
 */
static void state_timer_start(struct duk_sb *ds)
{
    struct duk_prov *dp = ds->sb->prov->cookie;
    ev_timer_stop(D->loop, &ds->state_timer);
    ev_timer_set(&ds->state_timer, dp->state_timeout_s, 0.);
    ev_timer_start(D->loop, &ds->state_timer);
}

/* Ends the worker of a pending snapshot/stop and finishes the op with err
 * (NULL: success). */
static void state_op_end(struct duk_sb *ds, sbx_err_t *err)
{
    struct worker *w = ds->w;
    int why = w ? w->snapshot_wanted : 0;
    ev_timer_stop(D->loop, &ds->state_timer);
    if (w)
        w->snapshot_wanted = 0;
    drop_worker(ds);
    if (why == 1 && ds->sb->status == SB_RUNNING) {
        /* a snapshot leaves the sandbox running, on a fresh isolate */
        ds->reset_pending = 1;
        get_worker_or_log(ds);
    }
    sandbox_op_done(ds->sb, err, NULL);
}

static void state_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct duk_sb *ds = t->data;
    struct duk_prov *dp = ds->sb->prov->cookie;
    if (!ds->w || !ds->w->snapshot_wanted)
        return;
    int stop = ds->w->snapshot_wanted == 2;
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_PROVIDER,
                  json_pack("{s:s, s:s, s:s, s:I}", "provider", dp->name, "message",
                            "reading the globals took too long", "limit",
                            "snapshot_timeout_s", "max", (json_int_t)dp->state_timeout_s),
                  "%s did not finish within %g s (providers.%s.snapshot_timeout_s): "
                  "reading the isolate's globals (a getter or toJSON) ran too long; "
                  "the isolate was ended%s",
                  stop ? "stop" : "snapshot", dp->state_timeout_s, dp->name,
                  stop ? " and its globals are lost"
                       : " and the sandbox runs on a fresh one");
    log_warn("sandbox %s: %s", ds->sb->id, err.msg);
    state_op_end(ds, &err);
    err_clear(&err);
}

/* A destroy was asked while an op runs (provider.h sb_cancel): a snapshot or
 * stop still reading globals is ended now, so the destroy goes ahead at once
 * instead of waiting for a getter that may never return. */
static void d_sb_cancel(void *cookie, struct sandbox *sb)
{
    struct duk_sb *ds = sb->pdata;
    if (!ds || !ds->w || !ds->w->snapshot_wanted)
        return;
    sbx_err_t err = {0};
    int stop = ds->w->snapshot_wanted == 2;
    if (!stop)
        err_make(&err, SBX_E_PROVIDER,
                 "snapshot cancelled: sandbox %s is being destroyed", sb->id);
    /* a stop just ends: the destroy that follows needs no globals */
    state_op_end(ds, stop ? NULL : &err);
    err_clear(&err);
}

static int d_sb_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct duk_sb *ds = sb->pdata;
    if (sandbox_reserve_memory(sb, (uint64_t)iso_pool_sb_mem(cookie, sb) << 20, err) < 0)
        return -1;
    if (!ds) {
        ds = calloc(1, sizeof(*ds));
        if (!ds)
            return err_make(err, SBX_E_INTERNAL, "out of memory");
        ds->sb = sb;
        sb->pdata = ds;
        ev_timer_init(&ds->state_timer, state_timeout_cb, 0., 0.);
        ds->state_timer.data = ds;
    }
    struct duk_prov *dp = cookie;
    ds->shared = dp->share && !sb_persistent(dp, sb) && sb_jit(dp, sb) == dp->jit;
    if (ds->shared)
        js_share_start(ds);
    if ((ds->w && !ds->w->dead) || ds->shared) {
        sandbox_op_done(sb, NULL, NULL);
        pump(ds);
        return 0;
    }
    ds->starting = 1;
    if (get_worker(ds, err) < 0 || !ds->w) {
        ds->starting = 0;
        if (!err->msg)
            err_make(err, SBX_E_PROVIDER, "cannot start an isolate worker");
        return -1;
    }
    return 0;
}

static int d_sb_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct duk_sb *ds = sb->pdata;
    if (!ds || !ds->w || ds->w->dead || !ds->w->ready || ds->w->running) {
        /* No isolate to ask for its state (or it is busy): it is lost. */
        if (ds) {
            js_share_forget(ds);
            drop_worker(ds);
        }
        sandbox_op_done(sb, NULL, NULL);
        return 0;
    }
    /* Keep the global state across stop/start. */
    ds->w->snapshot_wanted = 2;
    if (chan_send(&ds->w->ch, SBX_CHAN_SNAPSHOT, 0, NULL, 0) < 0)
        return err_make(err, SBX_E_PROVIDER, "isolate channel failed");
    state_timer_start(ds);
    return 0;
}

static int d_sb_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct duk_sb *ds = sb->pdata;
    if (ds && ds->w) {
        if (iso_pool_recycle(cookie, ds->w, sb->owner))
            ds->w = NULL;
        else
            drop_worker(ds);
    }
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}

static int d_sb_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct duk_sb *ds = sb->pdata;
    if (!ds || !ds->w || ds->w->dead) {
        /* stopped: the saved state is the snapshot */
        sandbox_op_done(sb, NULL,
                        ds && ds->saved    ? json_deep_copy(ds->saved)
                        : ds && ds->shared ? json_pack("{s:{}}", "globals")
                                           : json_object());
        return 0;
    }
    if (ds->w->running)
        return err_make_data(err, SBX_E_STATE,
                             json_pack("{s:s, s:s}", "sandbox", sb->id, "status", "busy"),
                             "sandbox %s is running a program; snapshot when it is idle",
                             sb->id);
    if (!ds->w->ready)
        return err_make(err, SBX_E_STATE, "isolate is still starting");
    ds->w->snapshot_wanted = 1;
    if (chan_send(&ds->w->ch, SBX_CHAN_SNAPSHOT, 0, NULL, 0) < 0)
        return err_make(err, SBX_E_PROVIDER, "isolate channel failed");
    state_timer_start(ds);
    return 0;
}

static json_t *d_sb_metadata(void *cookie, struct sandbox *sb)
{
    struct duk_sb *ds = sb->pdata;
    struct duk_prov *dp = cookie;
    json_t *o =
        json_pack("{s:I}", "memory_limit_mb", (json_int_t)iso_pool_sb_mem(dp, sb));
    if (ds && ds->w && !ds->w->dead)
        json_object_set_new(o, "worker_pid", json_integer(ds->w->pid));
    else if (ds && ds->shared && js_share_last_pid(ds) > 0)
        json_object_set_new(o, "worker_pid", json_integer(js_share_last_pid(ds)));
    int q = 0;
    for (struct duk_proc *x = ds ? ds->queue : NULL; x; x = x->qnext)
        q++;
    json_object_set_new(o, "queued", json_integer(q));
    if (dp->js) {
        json_object_set_new(o, "persistent", json_boolean(sb_persistent(dp, sb)));
        json_object_set_new(o, "jit", json_boolean(sb_jit(dp, sb)));
    }
    return o;
}

static void d_sb_release(void *cookie, struct sandbox *sb)
{
    struct duk_sb *ds = sb->pdata;
    if (!ds)
        return;
    ev_timer_stop(D->loop, &ds->state_timer);
    js_share_forget(ds);
    drop_worker(ds);
    json_decref(ds->saved);
    free(ds);
    sb->pdata = NULL;
}

static char *duk_instructions(void *cookie, struct sandbox *sb)
{
    return iso_text_duk(sb, iso_pool_sb_mem(cookie, sb));
}

static char *js_instructions(void *cookie, struct sandbox *sb)
{
    return iso_text_js(sb, iso_pool_sb_mem(cookie, sb), sb_persistent(cookie, sb));
}

/* -- provider ---------------------------------------------------------------------- */

/* The worker binary: configured, or beside sbxd (build tree), or in
 * ../libexec/sbxd/ (installed). */
static char *find_worker(json_t *conf, const char *bin)
{
    const char *cfg = json_string_value(json_object_get(conf, "worker_path"));
    if (cfg)
        return xstrdup(cfg);
    char *dir = xstrdup(D->exe_path), *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    const char *cands[] = {"", "../libexec/sbxd/"};
    char *found = NULL;
    for (size_t i = 0; i < 2 && !found; i++) {
        char *p = NULL;
        if (asprintf(&p, "%s/%s%s", slash ? dir : ".", cands[i], bin) < 0)
            break;
        if (access(p, X_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(dir);
    return found;
}

static int load(json_t *conf, void **cookie, sbx_err_t *err, int js)
{
    const char *bin = js ? "sbxd-jsworker" : "sbxd-worker";
    char *wp = find_worker(conf, bin);
    if (!wp || access(wp, X_OK) != 0) {
        err_make(err, SBX_E_UNAVAILABLE, "isolate worker %s not found or not executable",
                 wp ? wp : bin);
        free(wp);
        return -1;
    }
    struct duk_prov *dp = calloc(1, sizeof(*dp));
    if (!dp) {
        free(wp);
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    }
    dp->worker_path = wp;
    dp->js = js;
    dp->name = js ? "js" : "duktape";
    dp->page_size = sysconf(_SC_PAGESIZE);
    json_t *v;
    dp->jit = (v = json_object_get(conf, "jit")) ? json_is_true(v) : 1;
    dp->persistent = json_is_true(json_object_get(conf, "persistent"));

    dp->pool_size = (v = json_object_get(conf, "pool_size")) ? (int)json_integer_value(v)
                                                             : DEFAULT_POOL;
    if (dp->pool_size < 0 || dp->pool_size > 64)
        dp->pool_size = DEFAULT_POOL;
    dp->mem_mb = (v = json_object_get(conf, "memory_limit_mb")) ? json_integer_value(v)
                                                                : DEFAULT_MEM_MB;
    if (dp->mem_mb <= 0)
        dp->mem_mb = DEFAULT_MEM_MB;
    const char *u = json_string_value(json_object_get(conf, "worker_user"));
    dp->user = u ? xstrdup(u) : NULL;
    dp->fresh = json_is_true(json_object_get(conf, "fresh_isolate"));
    json_int_t base = (v = json_object_get(conf, "worker_uid_base"))
                          ? json_integer_value(v)
                          : DEFAULT_UID_BASE;
    json_int_t count = (v = json_object_get(conf, "worker_uid_count"))
                           ? json_integer_value(v)
                           : DEFAULT_UID_COUNT;
    /* Below 2^31 so no tool reads a worker uid as negative; never 0. */
    if (base != 0 && (base < 1 || count < 1 || base + count > 2147483647LL)) {
        free(dp->user);
        free(dp->worker_path);
        free(dp);
        return err_make(err, SBX_E_UNAVAILABLE,
                        "providers.%s: worker_uid_base %lld + worker_uid_count %lld must "
                        "be a range of uids in 1..2147483646 (or worker_uid_base 0)",
                        js ? "js" : "duktape", (long long)base, (long long)count);
    }
    if (base == 0) {
        dp->uid_off = "worker_uid_base is 0: every user's workers share worker_user";
    } else if (geteuid() != 0) {
        dp->uid_off = "sbxd is not root: workers run as sbxd's own uid";
    } else {
        dp->uid_mode = 1;
        dp->uid_base = (uid_t)base;
        dp->uid_count = (uid_t)count;
        if (dp->user)
            log_warn("providers.%s.worker_user is not used: each user's workers run as "
                     "worker_uid_base + their uid (set worker_uid_base: 0 to share "
                     "worker_user)",
                     dp->name);
    }
    dp->refill_uid = (uid_t)-1;
    json_int_t st = (v = json_object_get(conf, "snapshot_timeout_s"))
                        ? json_integer_value(v)
                        : DEFAULT_STATE_TIMEOUT_S;
    dp->state_timeout_s = st > 0 && st <= 3600 ? (double)st : DEFAULT_STATE_TIMEOUT_S;
    js_share_load(dp, conf);
    *cookie = dp;
    dp->on_frame = worker_frame;
    dp->on_closed = worker_closed;
    dp->on_rss = rss_cb;
    dp->on_new = worker_frames;
    dp->on_worker = pump;
    iso_pool_init(dp);
    iso_pool_fill_now(dp);
    return 0;
}

static int d_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return load(conf, cookie, err, 0);
}

static int js_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return load(conf, cookie, err, 1);
}

static void d_unload(void *cookie)
{
    struct duk_prov *dp = cookie;
    ev_idle_stop(D->loop, &dp->refill);
    js_share_unload(dp);
    while (dp->pool) {
        struct worker *w = dp->pool;
        dp->pool = w->next;
        iso_pool_kill(w);
        /* reap now: the loop is about to go */
        ev_child_stop(D->loop, &w->child);
        waitpid(w->pid, NULL, 0);
        iso_pool_worker_free(w);
    }
    free(dp->user);
    free(dp->worker_path);
    free(dp);
}

static int d_available(void *cookie, const char **reason)
{
    return 1;
}

static json_t *d_info(void *cookie)
{
    struct duk_prov *dp = cookie;
    int ready = 0;
    for (struct worker *w = dp->pool; w; w = w->next)
        ready += w->ready && !w->dead && w->bound_uid == (uid_t)-1;
    json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:s}", "engine",
                          dp->js ? "javascriptcore" : "duktape 2.7", "pool_size",
                          dp->pool_size, "pool_ready", ready, "memory_limit_mb",
                          (json_int_t)dp->mem_mb, "worker", dp->worker_path);
    if (dp->js) {
        json_object_set_new(o, "jit", json_boolean(dp->jit));
        json_object_set_new(o, "persistent", json_boolean(dp->persistent));
        json_object_set_new(o, "typescript", json_true());
    }
    /* Which OS uid a socket user's workers get (README "Security"). */
    if (dp->uid_mode)
        json_object_set_new(o, "worker_uids",
                            json_pack("{s:I, s:I, s:s}", "base", (json_int_t)dp->uid_base,
                                      "count", (json_int_t)dp->uid_count, "map",
                                      "base + socket uid"));
    else
        json_object_set_new(o, "worker_uids", json_pack("{s:s}", "off", dp->uid_off));
    json_object_set_new(o, "snapshot_timeout_s",
                        json_integer((json_int_t)dp->state_timeout_s));
    return o;
}

/* ---- the two provider tables ---------------------------------------------------- */

/* The keys both isolate providers take under providers.<name>, after their
 * own; the list's end. */
#define ISOLATE_KEYS                                                                     \
    {"memory_limit_mb", CFG_INT}, {"pool_size", CFG_INT}, {"worker_user", CFG_STR},      \
        {"worker_path", CFG_STR}, {"command_timeout_ms", CFG_INT},                       \
        {"worker_uid_base", CFG_INT}, {"worker_uid_count", CFG_INT},                     \
        {"snapshot_timeout_s", CFG_INT}, {NULL, 0},

static const struct cfg_key duk_keys[] = {{"fresh_isolate", CFG_BOOL}, ISOLATE_KEYS};
static const struct cfg_key js_keys[] = {{"jit", CFG_BOOL},
                                         {"persistent", CFG_BOOL},
                                         {"share_workers", CFG_BOOL},
                                         {"shared_workers", CFG_INT},
                                         ISOLATE_KEYS};

/* Both providers are this file, one engine binary or the other (dp->js):
 * they differ only in name, keys, load and the instructions text. */
#define ISOLATE_OPS                                                                      \
    .shell_commands = 0, .default_cwd = "/", .enabled_by_default = 1,                    \
    .unload = d_unload, .available = d_available, .info = d_info,                        \
    .sb_start = d_sb_start, .sb_stop = d_sb_stop, .sb_destroy = d_sb_destroy,            \
    .sb_cancel = d_sb_cancel, .sb_snapshot = d_sb_snapshot,                              \
    .sb_metadata = d_sb_metadata, .sb_release = d_sb_release,                            \
    .proc_spawn = d_proc_spawn, .proc_write = d_proc_write,                              \
    .proc_close_stdin = d_proc_close_stdin, .proc_kill = d_proc_kill,                    \
    .proc_resume = d_proc_resume, .proc_tool_result = d_proc_tool_result,                \
    .proc_release = d_proc_release, .sb_stats = iso_sb_stats

/* create's options (PROTOCOL.md): Duktape has none, js has jit and persistent. */
static const char *const duk_option_keys[] = {NULL};
static const char *const js_option_keys[] = {"jit", "persistent", NULL};

const struct sbx_provider sbx_provider_duktape = {
    .name = "duktape",
    .option_keys = duk_option_keys,
    .config_keys = duk_keys,
    .load = d_load,
    .sb_instructions = duk_instructions,
    ISOLATE_OPS,
};

/* js: JavaScriptCore, the code-mode engine (proto/PROTOCOL.md, "Code mode"). */
const struct sbx_provider sbx_provider_js = {
    .name = "js",
    .option_keys = js_option_keys,
    .config_keys = js_keys,
    .load = js_load,
    .sb_instructions = js_instructions,
    ISOLATE_OPS,
};
