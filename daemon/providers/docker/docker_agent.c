/*
 * docker_agent.c - the agent channel of the Docker provider: sbxd's end of
 * proto/CHANNEL.md spoken with sbx-init, PID 1 of every agent-mode container.
 *
 * The channel rides on the container's attach stream (docker_hijack.c): our
 * frames go to PID 1's stdin, its frames come back as Docker's stdout
 * stream, and its stderr is diagnostics, logged line by line. On a local
 * engine it may move to a Unix socket inside the container afterwards
 * (docker_direct.c); ds->cur is whichever chan carries it, and frames from
 * both arrive at dka_frame().
 *
 * Here: sending frames; the attach stream's callbacks, with the resync to an
 * exact PONG after the agent left the stream mid-frame; the frames of running
 * processes (output with credit-based flow control, STARTED, EXIT, REPLAY,
 * LOG and ERROR, rate-limited); the handshake (PING until PONG, then HELLO)
 * and the reconciliation of the agent's process list with ours after every
 * (re)attach: ours are replayed, respawned once or ended, theirs adopted
 * after an sbxd restart. The lifecycle (docker_lc.c) calls dka_attach() and
 * dka_handshake() as its steps and hears back through the events it set in
 * ds->up (struct dk_link_ev): this file never calls the lifecycle by name.
 * It is also the agent's process transport (dka_ptrans).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "io/pchan.h"
#include "core/process.h"
#include "core/process_pchan.h"
#include "core/sandbox.h"
#include "sbx_proto.h"

/* Never above the agent's replay ring (1 MiB): all bytes in flight when the
 * channel moves or sbxd restarts can then be replayed. */
#define DK_WINDOW (1024u * 1024)
#define HS_PING_S 1.0
#define STDIN_LIMIT (16u * 1024 * 1024)
#define HS_PINGS 10
#define MAX_ADOPT 256
#define AGENT_LOG_LINES 200

static void agent_chan_closed(struct chan *ch, const char *why, void *data);

/* ---- sending frames ---------------------------------------------------------------- */

static struct dk_proc *find_dpp(struct dk_sb *ds, uint32_t pid)
{
    for (struct dk_proc *x = ds->procs; x; x = x->next)
        if (x->pid == pid)
            return x;
    return NULL;
}

/* The direct socket's chan writes by itself; the attach stream's needs a push. */
static void flush_attach(struct dk_sb *ds)
{
    if (ds->att && ds->cur == &ds->ch)
        dkh_flush(ds->att);
}

int dka_send_frame(struct dk_sb *ds, uint8_t type, uint32_t pid, const void *d, size_t n)
{
    if (!ds->ch_live)
        return -1;
    int r = chan_send(ds->cur, type, pid, d, n);
    flush_attach(ds);
    return r;
}

static int send_json(struct dk_sb *ds, uint8_t type, uint32_t pid, json_t *v)
{
    if (!ds->ch_live)
        return -1;
    int r = chan_send_json(ds->cur, type, pid, v);
    flush_attach(ds);
    return r;
}

int dka_send_json(struct dk_sb *ds, uint8_t type, uint32_t pid, json_t *v)
{
    return send_json(ds, type, pid, v);
}

static void rehandshake(struct dk_sb *ds);

/* What the direct socket (docker_direct.c, below this file) reports here. */
static const struct dkd_ev direct_ev = {
    .frame = dka_frame,
    .resync = rehandshake,
    .send_json = send_json,
};

int dka_send_u32(struct dk_sb *ds, uint8_t type, uint32_t pid, uint32_t v)
{
    if (!ds->ch_live)
        return -1;
    int r = chan_send_u32(ds->cur, type, pid, v);
    flush_attach(ds);
    return r;
}

/* ---- the attach stream and the agent channel
 * --------------------------------------------- */

static void agent_stderr(struct dk_sb *ds, const uint8_t *d, size_t n)
{
    /* Diagnostics of the agent: logged line by line, bounded per attach. */
    for (size_t i = 0; i < n; i++) {
        if (d[i] != '\n') {
            if (ds->errlen < sizeof(ds->errline) - 1)
                ds->errline[ds->errlen++] =
                    (char)(d[i] >= 0x20 || d[i] == '\t' ? d[i] : '?');
            continue;
        }
        ds->errline[ds->errlen] = '\0';
        if (ds->errlen > 0 && ds->errlines < AGENT_LOG_LINES)
            log_info("docker %s agent: %s", ds->sb->id, ds->errline);
        else if (ds->errlines == AGENT_LOG_LINES)
            log_info("docker %s agent: further diagnostics are not logged", ds->sb->id);
        ds->errlines++;
        ds->errlen = 0;
    }
}

/*
 * CHANNEL.md Resync: after the agent left the attach stream mid-frame, skip
 * to the exact PONG header that answers our PING. Returns how many bytes of
 * d precede the frame that PONG starts, or n when it has not been seen.
 */
static size_t skip_to_pong(struct dk_sb *ds, const uint8_t *d, size_t n)
{
    static const uint8_t pong[SBX_CHAN_HDR] = {SBX_CHAN_PONG};
    for (size_t i = 0; i < n; i++) {
        if (d[i] == pong[ds->sync_k])
            ds->sync_k++;
        else
            ds->sync_k = d[i] == pong[0];
        if (ds->sync_k == SBX_CHAN_HDR) {
            ds->att_sync = 0;
            return i + 1;
        }
    }
    return n;
}

void dka_att_data(struct dkh *h, int stream, const uint8_t *d, size_t n, void *data)
{
    struct dk_sb *ds = data;
    if (ds->dead)
        return;
    if (stream == 1 && ds->cur != &ds->ch)
        return; /* the direct socket is the channel: these are stale */
    if (stream == 1 && ds->att_sync && ds->ch_live) {
        if (ds->sync_k == 0)
            chan_reset_input(&ds->ch);
        size_t k = skip_to_pong(ds, d, n);
        if (ds->att_sync)
            return;
        static const uint8_t pong[SBX_CHAN_HDR] = {SBX_CHAN_PONG};
        ds->in_feed++;
        chan_feed(&ds->ch, pong, sizeof(pong));
        ds->in_feed--;
        if (ds->dead) {
            if (!ds->in_feed)
                ds->up->release(ds);
            return;
        }
        d += k;
        n -= k;
    }
    if (stream == 1) {
        if (ds->ch_live) {
            /* Frames may end the sandbox (a failing on_start hook frees a
             * first-time sandbox): keep ds alive until chan_feed returns. */
            ds->in_feed++;
            chan_feed(&ds->ch, d, n);
            ds->in_feed--;
            if (ds->dead && !ds->in_feed)
                ds->up->release(ds);
        }
        return;
    }
    agent_stderr(ds, d, n);
}

/* The channel broke during a lifecycle step: that step fails with msg. */
static void fail_step(struct dk_sb *ds, const char *msg)
{
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_PROVIDER,
                  json_pack("{s:s, s:s}", "provider", "docker", "message", msg),
                  "docker: %s", msg);
    ds->up->fail(ds, &err);
}

static void att_closed(struct dkh *h, const char *why, void *data)
{
    struct dk_sb *ds = data;
    ds->att = NULL;
    if (ds->phase == PH_START)
        return; /* a failed start ends the attach too; start_done says why */
    char msg[300];
    snprintf(msg, sizeof(msg), "attach stream ended: %s", why);
    if (ds->phase != PH_IDLE) {
        fail_step(ds, msg);
        return;
    }
    ds->up->trouble(ds, msg);
}

static void handshake_done(struct dk_sb *ds);

static void att_open(struct dkh *h, long status, const char *msg, void *data)
{
    struct dk_sb *ds = data;
    if (status != 101 && status != 200) {
        ds->att = NULL;
        struct dk_resp r = {.status = status, .errmsg = msg, .transport = status == 0};
        sbx_err_t err = {0};
        dkapi_err(&err, &r, "attach");
        if (status == 404)
            ds->cid[0] = '\0';
        ds->up->fail(ds, &err);
        return;
    }
    ds->phase = ds->need_start ? PH_START : PH_HANDSHAKE;
    ds->up->step(ds);
}

void dka_open_channel(struct dk_sb *ds)
{
    if (ds->ch_live)
        chan_deinit(&ds->ch);
    chan_init_fed(&ds->ch, dka_frame, agent_chan_closed, ds);
    ds->ch_live = 1;
}

void dka_close_attach(struct dk_sb *ds)
{
    if (ds->sb)
        ds->up->reset(ds, "the agent channel closed");
    ds->ready = 0;
    ds->up->lost(ds);
    dkd_close(ds);
    ds->att_sync = 0;
    if (ds->att) {
        dkh_close(ds->att);
        ds->att = NULL;
    }
    ev_timer_stop(D->loop, &ds->hs_timer);
}

void dka_send_credit(struct dk_sb *ds, struct dk_proc *dpp, int force)
{
    pchan_credit(&ds->pc, &dpp->pc, dpp->p, dpp->pid, force);
}

/* An EXIT record from the agent, reduced to fields of known types. */
static json_t *clean_exit(json_t *v)
{
    json_t *o = json_object();
    json_t *x;
    if (json_is_integer(x = json_object_get(v, "exit_code")))
        json_object_set(o, "exit_code", x);
    else
        json_object_set_new(o, "exit_code", json_integer(-1));
    if (json_is_integer(x = json_object_get(v, "signal")))
        json_object_set(o, "signal", x);
    if (json_is_boolean(x = json_object_get(v, "timed_out")))
        json_object_set(o, "timed_out", x);
    if (json_is_boolean(x = json_object_get(v, "killed")))
        json_object_set(o, "killed", x);
    const char *e = json_string_value(json_object_get(v, "error"));
    if (e)
        json_object_set_new(o, "error",
                            json_stringn(e, strlen(e) > 1000 ? 1000 : strlen(e)));
    if (!json_is_object(v))
        json_object_set_new(o, "error",
                            json_string("invalid exit record from the agent"));
    return o;
}

void dka_proc_gone(struct dk_sb *ds, struct dk_proc *dpp, json_t *rec)
{
    struct process *p = dpp->p;
    dpp->exited = 1;
    if (dpp->retried)
        json_object_set_new(rec, "retried", json_true());
    /* process_exited may free an internal (hook) process, and dpp with it. */
    process_exited(p, rec);
}

/* ---- frames from the agent, through the process channel (io/pchan.h) ---- */

void dka_frame(struct chan *ch, const struct sbx_chan_hdr *h, const uint8_t *payload,
               void *data)
{
    struct dk_sb *ds = data;
    if (ds->dead)
        return;
    if (h->type == SBX_CHAN_DIRECT) {
        dkd_frame(ds, ch, payload, h->len);
        return;
    }
    if (ch != ds->cur)
        return; /* the direct socket before it proved itself */
    pchan_dispatch(&ds->pc, h, payload);
}

static struct pchan_proc *a_lookup(uint32_t pid, void **proc_out, void *data)
{
    struct dk_proc *dpp = find_dpp(data, pid);
    if (!dpp || !dpp->p || dpp->exited)
        dpp = NULL;
    *proc_out = dpp ? dpp->p : NULL;
    return dpp ? &dpp->pc : NULL;
}

static int a_send(uint8_t type, uint32_t proc, const void *d, size_t n, void *data)
{
    return dka_send_frame(data, type, proc, d, n);
}

static void f_pong(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                   struct pchan_proc *pp, void *proc, void *data)
{
    struct dk_sb *ds = data;
    if (ds->phase == PH_HANDSHAKE)
        ds->pong = 1;
}

static void f_hello(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload, struct pchan_proc *pp, void *proc, void *data)
{
    struct dk_sb *ds = data;
    if (ds->phase != PH_HANDSHAKE || !ds->pong)
        return;
    json_t *v = chan_json(payload, h->len);
    json_t *procs = json_object_get(v, "procs");
    if (!json_is_object(v) || !json_is_array(procs)) {
        json_decref(v);
        log_warn("docker %s: invalid HELLO from the agent", ds->sb->id);
        return;
    }
    json_decref(ds->hello);
    ds->hello = v;
    handshake_done(ds);
}

static void f_error(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload, struct pchan_proc *pp, void *proc, void *data)
{
    struct dk_sb *ds = data;
    /* The agent is inside the container: rate-limited with its LOG lines, so a
     * replaced or forged one cannot flood the daemon's log (issue 11). */
    if (pchan_log_take(pc))
        log_warn("docker %s: agent error: %.*s; resynchronising", ds->sb->id,
                 (int)(h->len > 300 ? 300 : h->len), (const char *)payload);
    if (ds->phase == PH_IDLE && ds->att) {
        ds->ready = 0;
        ds->why = WHY_RECOVER;
        ds->phase = PH_HANDSHAKE;
        ds->up->step(ds);
    }
}

static void f_ignore(struct pchan *pc, const struct sbx_chan_hdr *h,
                     const uint8_t *payload, struct pchan_proc *pp, void *proc,
                     void *data)
{
}

static void f_exit(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                   struct pchan_proc *pp, void *proc, void *data)
{
    struct dk_sb *ds = data;
    struct dk_proc *dpp = find_dpp(ds, h->proc);
    if (pp->mute)
        return; /* repeated after the replayed bytes */
    json_t *v = chan_json(payload, h->len);
    json_t *rec = clean_exit(v);
    json_decref(v);
    uint32_t pid = dpp->pid;
    /* The caller's answer first: FORGET wakes the agent, which on a
     * small machine competes with the caller for a CPU. */
    dka_proc_gone(ds, dpp, rec);
    json_decref(rec);
    if (!ds->dead)
        dka_send_frame(ds, SBX_CHAN_FORGET, pid, NULL, 0);
}

static void f_replay(struct pchan *pc, const struct sbx_chan_hdr *h,
                     const uint8_t *payload, struct pchan_proc *pp, void *proc,
                     void *data)
{
    struct process *p = proc;
    pp->mute = 0;
    json_t *v = chan_json(payload, h->len);
    static const char *const names[2] = {"stdout", "stderr"};
    for (int s = 0; s < 2; s++) {
        json_t *o = json_object_get(v, names[s]);
        /* An adopted process starts where the agent's ring starts. */
        if (json_is_integer(o) && json_integer_value(o) > 0 && p->out[s].total == 0) {
            p->out[s].total = (uint64_t)json_integer_value(o);
            p->out[s].emitted = p->out[s].total;
        }
    }
    json_decref(v);
}

/* The frames of the agent link beyond pchan's own (output, STARTED, LOG); the
 * lifecycle registers those of files and connections (docker.c ds_new). */
static void agent_frames(struct dk_sb *ds)
{
    char tag[128];
    snprintf(tag, sizeof(tag), "docker %s agent", ds->sb ? ds->sb->id : "?");
    pchan_init(&ds->pc, &process_pchan_sink, DK_WINDOW, a_lookup, a_send, ds, tag);
    if (ds->sb)
        pchan_set_log(&ds->pc, &ds->sb->agent_log, ds->sb->id, 300);
    pchan_on(&ds->pc, SBX_CHAN_PONG, 0, f_pong, ds);
    pchan_on(&ds->pc, SBX_CHAN_HELLO, 0, f_hello, ds);
    pchan_on(&ds->pc, SBX_CHAN_ERROR, 0, f_error, ds);
    pchan_on(&ds->pc, SBX_CHAN_SNAP_DATA, 0, f_ignore, ds);
    pchan_on(&ds->pc, SBX_CHAN_EXIT, PCHAN_PROC, f_exit, ds);
    pchan_on(&ds->pc, SBX_CHAN_REPLAY, PCHAN_PROC, f_replay, ds);
}

static void agent_chan_closed(struct chan *ch, const char *why, void *data)
{
    struct dk_sb *ds = data;
    /* A broken frame from the agent: it is not trusted any further. */
    char msg[200];
    snprintf(msg, sizeof(msg), "agent protocol error: %s", why);
    log_warn("docker %s: %s", ds->sb->id, msg);
    dka_close_attach(ds);
    if (ds->phase != PH_IDLE) {
        fail_step(ds, msg);
        return;
    }
    sandbox_lost(ds->sb, msg);
}

/* ---- handshake and reconciliation
 * ------------------------------------------------------- */

static void hs_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct dk_sb *ds = w->data;
    if (ds->phase != PH_HANDSHAKE)
        return;
    if (++ds->pings >= HS_PINGS) {
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_PROVIDER,
                      json_pack("{s:s, s:s}", "provider", "docker", "message",
                                "the agent in the container does not answer"),
                      "docker: the agent (sbx-init) in container %.12s does not answer",
                      ds->cid);
        ds->up->fail(ds, &err);
        return;
    }
    dka_send_frame(ds, SBX_CHAN_PING, 0, NULL, 0);
    ev_timer_set(w, HS_PING_S, 0.);
    ev_timer_start(loop, w);
}

static void rehandshake(struct dk_sb *ds)
{
    ds->up->reset(ds, "the agent channel is being resynchronised");
    if (ds->cur == &ds->ch) {
        /* The agent may have left the attach stream in the middle of a frame. */
        ds->att_sync = 1;
        ds->sync_k = 0;
    }
    switch (ds->phase) {
    case PH_DIRECT:
    case PH_HANDSHAKE:
        ds->phase = PH_HANDSHAKE;
        ds->up->step(ds);
        return;
    case PH_IDLE:
        /* The socket was lost but the container lives: the attach stream again. */
        ds->ready = 0;
        ds->why = WHY_RECOVER;
        ds->phase = PH_HANDSHAKE;
        ds->up->step(ds);
        return;
    default:
        return; /* stopping, destroying or recovering: they see to it */
    }
}

static void replay(struct dk_sb *ds, struct dk_proc *dpp)
{
    json_t *r = json_pack("{s:I, s:I}", "stdout", (json_int_t)dpp->p->out[0].total,
                          "stderr", (json_int_t)dpp->p->out[1].total);
    dpp->pc.owed = 0;
    if (send_json(ds, SBX_CHAN_REPLAY, dpp->pid, r) == 0)
        dpp->pc.mute = 1;
    json_decref(r);
}

/* Matches the agent's process list with ours after a (re)attach. */
static void reconcile(struct dk_sb *ds, json_t *hello)
{
    json_t *procs = json_object_get(hello, "procs");
    size_t n = json_array_size(procs);
    if (n > 4096)
        n = 4096;
    /* Ours first. Collect before acting: exits may unlink entries. */
    struct dk_proc *todo[1024];
    size_t nt = 0;
    for (struct dk_proc *x = ds->procs; x && nt < 1024; x = x->next)
        if (!x->exited && x->p && x->p->state == P_RUNNING)
            todo[nt++] = x;
    for (size_t k = 0; k < nt; k++) {
        struct dk_proc *dpp = todo[k];
        json_t *found = NULL;
        for (size_t i = 0; i < n && !found; i++) {
            json_t *e = json_array_get(procs, i);
            if (json_integer_value(json_object_get(e, "proc")) == (json_int_t)dpp->pid)
                found = e;
        }
        if (found) {
            dpp->spawned = 1;
            /* Its STARTED may have been left on a channel we no longer read. */
            json_t *op = json_object_get(found, "os_pid");
            if (!dpp->pc.started && json_is_integer(op) && json_integer_value(op) > 0) {
                dpp->pc.started = 1;
                process_started(dpp->p, (long)json_integer_value(op));
            }
            replay(ds, dpp);
        } else if (!dpp->spawned) {
            dka_send_spawn(ds, dpp);
        } else if (!dpp->pc.started && !dpp->retried) {
            dpp->retried = 1;
            log_info("docker %s: pid %u never started; spawning it again", ds->sb->id,
                     dpp->pid);
            dpp->spawned = 0;
            dka_send_spawn(ds, dpp);
        } else {
            json_t *rec =
                json_pack("{s:i, s:s, s:b}", "exit_code", -1, "error",
                          "process lost: the container was restarted", "reset", 1);
            dka_proc_gone(ds, dpp, rec);
            json_decref(rec);
        }
    }
    /* Theirs: adopted on the first handshake after sbxd started, otherwise
     * a process the daemon never spawned is ignored. */
    int adopt = ds->first_hello;
    ds->first_hello = 0;
    int adopted = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(procs, i);
        json_t *jp = json_object_get(e, "proc");
        if (!json_is_integer(jp) || json_integer_value(jp) <= 0 ||
            json_integer_value(jp) > UINT32_MAX)
            continue;
        uint32_t pid = (uint32_t)json_integer_value(jp);
        if (find_dpp(ds, pid))
            continue;
        struct process *known = NULL;
        for (struct process *q = ds->sb->procs; q; q = q->next)
            if (q->pid == pid)
                known = q;
        if (known) {
            /* We have its exit already: the agent may forget it. */
            if (known->state == P_EXITED)
                dka_send_frame(ds, SBX_CHAN_FORGET, pid, NULL, 0);
            continue;
        }
        if (!adopt || adopted >= MAX_ADOPT)
            continue;
        /* The agent's word for what runs: shown only, as any other output. */
        const char *cmd = json_string_value(json_object_get(e, "command"));
        if (!cmd || strlen(cmd) > 4096)
            cmd = "(adopted after an sbxd restart)";
        struct process *p = process_adopt(ds->sb, pid, cmd);
        if (!p)
            continue;
        p->pty = json_is_true(json_object_get(e, "pty"));
        json_t *op = json_object_get(e, "os_pid");
        if (json_is_integer(op))
            process_started(p, (long)json_integer_value(op));
        struct dk_proc *dpp = ds->up->adopt(ds, p);
        dpp->spawned = dpp->pc.started = dpp->adopted = 1;
        adopted++;
        replay(ds, dpp);
    }
    if (adopted)
        log_info("docker %s: adopted %d process(es) from the agent", ds->sb->id, adopted);
}

static void handshake_done(struct dk_sb *ds)
{
    ev_timer_stop(D->loop, &ds->hs_timer);
    json_t *hello = ds->hello;
    ds->hello = NULL;
    if (dkd_begin(ds) == 0) {
        /* The handshake is repeated on the direct socket (or here again). */
        json_decref(hello);
        return;
    }
    ds->ready = 1;
    ds->phase = PH_IDLE;
    ds->up->ready(ds);
    reconcile(ds, hello);
    json_decref(hello);
    ds->up->ok(ds);
    if (!ds->dead && ds->sb)
        ds->up->linked(ds);
}

void dka_send_spawn(struct dk_sb *ds, struct dk_proc *dpp)
{
    struct process *p = dpp->p;
    if (!ds->ready || dpp->spawned || !p)
        return;
    json_t *msg = json_object();
    json_t *v;
    if ((v = json_object_get(p->spec, "shell")))
        json_object_set(msg, "shell", v);
    else
        json_object_set(msg, "argv", json_object_get(p->spec, "argv"));
    json_object_set_new(msg, "env", dkspawn_env(ds, p));
    json_object_set_new(msg, "cwd", json_string(dkspawn_cwd(ds, p)));
    json_object_set(msg, "timeout_ms", json_object_get(p->spec, "timeout_ms"));
    json_object_set_new(msg, "window", json_integer(DK_WINDOW));
    if ((v = json_object_get(p->spec, "pty")))
        json_object_set(msg, "pty", v);
    int r = send_json(ds, SBX_CHAN_SPAWN, dpp->pid, msg);
    json_decref(msg);
    if (r < 0) {
        json_t *rec = json_pack("{s:i, s:s}", "exit_code", -1, "error",
                                "docker: the agent channel is full or closed");
        dka_proc_gone(ds, dpp, rec);
        json_decref(rec);
        return;
    }
    dpp->spawned = 1;
    /* stdin given before the SPAWN went out */
    struct obuf *b = &dpp->stdin_buf;
    while (b->bytes > 0) {
        struct iovec iov[1];
        obuf_iov(b, iov, 1);
        if (dka_send_frame(ds, SBX_CHAN_STDIN, dpp->pid, iov[0].iov_base,
                           iov[0].iov_len) < 0)
            break;
        obuf_consume(b, iov[0].iov_len);
    }
    if (dpp->stdin_eof)
        dka_send_frame(ds, SBX_CHAN_STDIN_EOF, dpp->pid, NULL, 0);
}

/* ---- the lifecycle's steps (docker.c) ---------------------------------------------- */

void dka_init(struct dk_sb *ds)
{
    ev_timer_init(&ds->hs_timer, hs_timer_cb, HS_PING_S, 0.);
    ds->hs_timer.data = ds;
    ds->cur = &ds->ch;
    ds->dev = &direct_ev;
    agent_frames(ds);
}

int dka_attach(struct dk_sb *ds)
{
    struct dk_engine *e = &ds->dp->eng;
    dka_close_attach(ds);
    dka_open_channel(ds);
    char *path = dkapi_path(e, "/containers/%s/attach?stream=1&stdin=1&stdout=1&stderr=1",
                            ds->cid);
    ds->att = dkh_open(e, "POST", path, NULL, &ds->ch.wbuf, att_open, dka_att_data,
                       att_closed, ds);
    free(path);
    return ds->att ? 0 : -1;
}

void dka_handshake(struct dk_sb *ds)
{
    ds->pong = 0;
    ds->pings = 0;
    ds->ready = 0;
    if (dka_send_frame(ds, SBX_CHAN_PING, 0, NULL, 0) < 0) {
        if (ds->dlost)
            return; /* the direct socket failed: dtimer falls back */
        sbx_err_t err = {0};
        err_make(&err, SBX_E_PROVIDER, "docker: the agent channel is closed");
        ds->up->fail(ds, &err);
        return;
    }
    ev_timer_stop(D->loop, &ds->hs_timer);
    ev_timer_set(&ds->hs_timer, HS_PING_S, 0.);
    ev_timer_start(D->loop, &ds->hs_timer);
}

/* ---- the agent as a process transport (struct dk_ptrans) ---- */

static int ap_spawn(struct dk_sb *ds, struct dk_proc *dpp, sbx_err_t *err)
{
    if (ds->ready)
        dka_send_spawn(ds, dpp);
    /* else: sent when the agent is back (recovery) */
    return 0;
}

static int ap_write(struct dk_proc *dpp, const void *data, size_t len, sbx_err_t *err)
{
    struct dk_sb *ds = dpp->ds;
    struct process *p = dpp->p;
    size_t pending =
        dpp->stdin_buf.bytes + (ds->ch_live ? chan_pending_output(ds->cur) : 0);
    if (pending + len > STDIN_LIMIT)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "stdin_buffer", "max", (int)STDIN_LIMIT),
            "stdin buffer of process %u is full", p->pid);
    const uint8_t *d = data;
    while (len > 0) {
        size_t k = len < SBX_CHAN_MAX_PAYLOAD ? len : SBX_CHAN_MAX_PAYLOAD;
        if (dpp->spawned && ds->ready) {
            if (dka_send_frame(ds, SBX_CHAN_STDIN, p->pid, d, k) < 0)
                return err_make(err, SBX_E_PROVIDER, "docker: the agent channel failed");
        } else {
            obuf_append(&dpp->stdin_buf, d, k);
        }
        d += k;
        len -= k;
    }
    return 0;
}

static int ap_close_stdin(struct dk_proc *dpp, sbx_err_t *err)
{
    struct dk_sb *ds = dpp->ds;
    dpp->stdin_eof = 1;
    if (dpp->spawned && ds->ready)
        dka_send_frame(ds, SBX_CHAN_STDIN_EOF, dpp->pid, NULL, 0);
    return 0;
}

static int ap_kill(struct dk_proc *dpp, int sig, sbx_err_t *err)
{
    struct dk_sb *ds = dpp->ds;
    if (!dpp->spawned) {
        json_t *rec = json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig,
                                "killed", 1);
        dka_proc_gone(ds, dpp, rec);
        json_decref(rec);
        return 0;
    }
    if (dka_send_u32(ds, SBX_CHAN_KILL, dpp->pid, (uint32_t)sig) < 0 && !ds->recovering)
        return err_make(err, SBX_E_PROVIDER, "docker: the agent channel is closed");
    /* During recovery the kill goes out after the re-attach: REPLAY then
     * KILL would need ordering we don't have; the core's grace timer ends it. */
    return 0;
}

static void ap_resume(struct dk_proc *dpp)
{
    if (dpp->ds->ready)
        dka_send_credit(dpp->ds, dpp, 1);
}

static void ap_release(struct dk_proc *dpp)
{
    struct dk_sb *ds = dpp->ds;
    if (!dpp->exited && dpp->spawned && ds->ready && ds->sb->status == SB_RUNNING &&
        !D->draining)
        /* The core gave up on it (it never confirmed a kill): end it anyway. */
        dka_send_u32(ds, SBX_CHAN_KILL, dpp->pid, SIGKILL);
}

const struct dk_ptrans dka_ptrans = {
    .spawn = ap_spawn,
    .write = ap_write,
    .close_stdin = ap_close_stdin,
    .kill = ap_kill,
    .resume = ap_resume,
    .release = ap_release,
};
