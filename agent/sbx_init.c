/*
 * sbx_init.c - sbx-init: PID 1 of a Docker sandbox and the agent end of the
 * worker channel (proto/CHANNEL.md).
 *
 *   sbx-init [--] [CMD ARGS...]
 *
 * This file is the running agent: the poll() loop, signals, children and the
 * channel. main.c starts it (arguments, descriptors, signal handlers, the
 * main child), then calls agent_run.
 *
 * stdin carries frames from the daemon, stdout carries frames to it, stderr is
 * for diagnostics only. With CMD, sbx-init also behaves like tini: CMD runs as
 * the main child (stdin /dev/null, stdout and stderr to our stderr), the usual
 * signals are forwarded to it and sbx-init exits with its status.
 *
 * Behaviour the daemon relies on:
 *   - HELLO {procs:[]} first (lost if nobody is attached yet); after every
 *     PING: PONG, then a fresh HELLO. HELLO entries also carry "os_pid" and "command".
 *   - Output flows only against credit. A pipe is read only while the process
 *     has credit not yet covered by unsent bytes, so a reader that returns no
 *     credit blocks the child in write(). EXIT follows the last output byte.
 *   - EXIT is sent when the group leader has exited and its pipes reached EOF,
 *     or AGENT_EXIT_GRACE_MS after the leader exited when background children
 *     hold the pipes: what is in the pipes at that moment is still delivered,
 *     later writes are not (our read ends are closed; writers get SIGPIPE).
 *     Background children are not killed when the leader exits; KILL still
 *     signals the group after EXIT, until FORGET.
 *   - REPLAY resets the process's credit to its window and, for an exited
 *     process, sends EXIT again after the replayed bytes.
 *   - A malformed frame header (reserved bits, length over 1 MiB) desyncs the
 *     stream: sbx-init sends ERROR and discards input (what it holds and what
 *     comes) until it sees an exact PING frame (12 bytes: 50 00 .. 00), then
 *     answers that PING normally. Bad payloads in well-formed frames only cost
 *     a LOG (for SPAWN: an EXIT with exit_code 126 and "error"), because ERROR
 *     would make the daemon drop a channel that is still in sync.
 *   - Stdin for a process is buffered up to AGENT_STDIN_MAX; bytes beyond that
 *     are dropped with a LOG (the channel is shared, so it is never paused).
 *   - EOF on stdin: with a main child, stop reading and keep going; without
 *     one nobody can ever talk to us again, so kill everything and exit 0.
 *   - DIRECT on stdin opens the direct socket; a peer that proves the key
 *     becomes the channel and frames go there (CHANNEL.md, Direct socket).
 *     Whatever was queued for stdout then is dropped: the daemon REPLAYs.
 *     When that socket fails, or a PING arrives on stdin, stdout is the
 *     channel again.
 *   - SIGTERM (or SIGINT) without a main child: SIGKILL every process group
 *     we spawned, flush what we can for up to a second and exit 0.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "sbx_init_int.h"

/* The one instance (sbx_init_int.h): main.c sets it up, the loop below runs it. */
struct agent_state agent;

static const uint8_t ping_frame[SBX_CHAN_HDR] = {SBX_CHAN_PING};

static void flush_for(int ms);
static void drain_exited(struct proc *p);

/* ---- frames out (queued by out.c) ------------------------------------------ */

/* LOG frame for the daemon's log, and the same line on stderr. */
static void __attribute__((format(printf, 1, 2))) chan_log(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    alog("%s", msg);
    agent_send(SBX_CHAN_LOG, 0, msg, strlen(msg));
}

static void send_error(const char *msg)
{
    struct buf b = {0};
    buf_puts(&b, "{\"message\":");
    json_put_str(&b, msg, strlen(msg));
    buf_puts(&b, "}");
    agent_send_buf(SBX_CHAN_ERROR, 0, &b);
}

/* EXIT for a SPAWN that never got a record (bad request, table full). */
static void send_spawn_error(uint32_t proc, const char *msg)
{
    struct buf b = {0};
    buf_puts(&b, "{\"exit_code\":126,\"signal\":0,\"timed_out\":false,\"killed\":false,"
                 "\"error\":");
    json_put_str(&b, msg, strlen(msg));
    buf_puts(&b, "}");
    agent_send_buf(SBX_CHAN_EXIT, proc, &b);
}

void agent_send_hello(void)
{
    struct buf b = {0};
    buf_printf(&b, "{\"version\":%d,\"agent\":\"sbx-init\",\"procs\":[",
               SBX_CHAN_VERSION);
    for (size_t k = 0; k < agent.nprocs; k++) {
        const struct proc *p = agent.procs[k];
        buf_printf(&b,
                   "%s{\"proc\":%u,\"running\":%s,\"os_pid\":%d,\"stdout\":%llu,"
                   "\"stderr\":%llu",
                   k ? "," : "", p->id, p->state == PROC_EXITED ? "false" : "true",
                   (int)p->pid, (unsigned long long)p->out[0].total,
                   (unsigned long long)p->out[1].total);
        if (p->pty)
            buf_puts(&b, ",\"pty\":true");
        buf_puts(&b, ",\"command\":");
        json_put_str(&b, p->command, strlen(p->command));
        if (p->state == PROC_EXITED) {
            buf_puts(&b, ",\"exit\":");
            proc_exit_json(p, &b);
        }
        buf_puts(&b, "}");
    }
    buf_puts(&b, "]}");
    agent_send_buf(SBX_CHAN_HELLO, 0, &b);
}

/* ---- process table --------------------------------------------------------- */

static struct proc *find_proc(uint32_t id)
{
    for (size_t k = 0; k < agent.nprocs; k++)
        if (agent.procs[k]->id == id)
            return agent.procs[k];
    return NULL;
}

void agent_remove_proc(struct proc *p)
{
    for (size_t k = 0; k < agent.nprocs; k++)
        if (agent.procs[k] == p) {
            agent.procs[k] = agent.procs[--agent.nprocs];
            break;
        }
    proc_free(p);
}

/* Writes pending stdin bytes; closes the pipe after STDIN_EOF once empty. */
static void flush_stdin(struct proc *p)
{
    while (p->in_fd >= 0 && buf_pending(&p->in) > 0) {
        ssize_t n = write(p->in_fd, p->in.data + p->in.off, buf_pending(&p->in));
        if (n > 0) {
            buf_consume(&p->in, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        /* EPIPE: the child closed its stdin; what is left can never be read. */
        proc_close_stdin(p);
        return;
    }
    if (p->in_fd >= 0 && p->in_eof)
        proc_close_stdin(p);
}

/* ---- the direct socket ---------------------------------------------------- */

static void drop_direct(const char *why)
{
    if (agent_out.dfd < 0)
        return;
    alog("direct socket: %s; stdout is the channel again", why);
    close(agent_out.dfd);
    agent_out.dfd = -1;
    out_drop_queued();
    buf_consume(&agent.dbuf, buf_pending(&agent.dbuf));
}

static void use_direct(int fd, struct buf *answer)
{
    if (agent_out.dfd >= 0)
        close(agent_out.dfd);
    out_drop_queued();
    buf_consume(&agent.dbuf, buf_pending(&agent.dbuf));
    if (buf_reserve(&agent.dbuf, IBUF_CAP) < 0) {
        close(fd);
        agent_out.dfd = -1;
        buf_deinit(answer);
        return;
    }
    agent_out.dfd = fd;
    agent_send_buf(SBX_CHAN_DIRECT, 0, answer);
}

/* ---- frames in ------------------------------------------------------------- */

static void on_spawn(uint32_t id, const uint8_t *payload, size_t n)
{
    char err[256];
    struct spawn_req req;
    if (id == 0) {
        chan_log("SPAWN for proc 0 ignored");
        return;
    }
    if (find_proc(id)) {
        chan_log("SPAWN for proc %u, which exists, ignored", id);
        return;
    }
    if (agent.nprocs >= AGENT_MAX_PROCS) {
        send_spawn_error(id, "too many processes");
        return;
    }
    if (spawn_req_parse(&req, payload, n, err, sizeof(err)) < 0) {
        send_spawn_error(id, err);
        return;
    }
    struct proc *p = proc_spawn(id, &req);
    spawn_req_deinit(&req);
    agent.procs[agent.nprocs++] = p;
    if (p->state == PROC_RUNNING) {
        struct buf b = {0};
        buf_printf(&b, "{\"os_pid\":%d}", (int)p->pid);
        agent_send_buf(SBX_CHAN_STARTED, id, &b);
    }
    /* A failed exec is PROC_EXITED already: agent_pump_output sends its EXIT. */
}

/* RESIZE: u32 cols, u32 rows. A process without a terminal, or one whose
 * terminal is gone, ignores it: the resize raced with its exit. */
static void on_resize(struct proc *p, const uint8_t *payload, size_t n)
{
    if (n != 8) {
        chan_log("RESIZE for proc %u with %zu bytes (want 8) ignored", p->id, n);
        return;
    }
    uint32_t cols = sbx_chan_get_u32(payload), rows = sbx_chan_get_u32(payload + 4);
    if (cols == 0 || rows == 0 || cols > AGENT_PTY_MAX_DIM || rows > AGENT_PTY_MAX_DIM) {
        chan_log("RESIZE for proc %u to %ux%u ignored", p->id, cols, rows);
        return;
    }
    if (!p->pty || p->tty_fd < 0 || p->state != PROC_RUNNING)
        return;
    if (pty_resize(p->tty_fd, cols, rows) < 0)
        chan_log("RESIZE for proc %u: %s", p->id, strerror(errno));
}

static void on_replay(struct proc *p, const uint8_t *payload, size_t n)
{
    char err[128];
    uint64_t want[2] = {0, 0};
    struct jval *root = json_parse((const char *)payload, n, err, sizeof(err));
    if (!root || root->type != J_OBJ) {
        chan_log("REPLAY for proc %u: bad payload: %s", p->id,
                 root ? "not an object" : err);
        json_free(root);
        return;
    }
    static const char *const names[2] = {"stdout", "stderr"};
    for (int s = 0; s < 2; s++) {
        const struct jval *v = json_get(root, names[s]);
        if (!v)
            continue;
        if (v->type != J_NUM || !v->is_int || v->ival < 0) {
            chan_log("REPLAY for proc %u: \"%s\" is not an offset", p->id, names[s]);
            json_free(root);
            return;
        }
        want[s] = (uint64_t)v->ival;
    }
    json_free(root);
    uint64_t start[2];
    for (int s = 0; s < 2; s++) {
        uint64_t oldest = proc_ring_oldest(p, s);
        start[s] = want[s] < oldest ? oldest : want[s];
        if (start[s] > p->out[s].total)
            start[s] = p->out[s].total;
    }
    struct buf b = {0};
    buf_printf(&b, "{\"stdout\":%llu,\"stderr\":%llu}", (unsigned long long)start[0],
               (unsigned long long)start[1]);
    agent_send_buf(SBX_CHAN_REPLAY, p->id, &b);
    /*
     * The replayed bytes go out as ordinary output from the ring. The daemon
     * lost its credit accounting, so the window starts over; an exited process
     * gets its EXIT again after the replayed bytes.
     */
    for (int s = 0; s < 2; s++)
        p->out[s].sent = start[s];
    p->credit = p->window;
    p->exit_sent = false;
}

static void handle_frame(const struct sbx_chan_hdr *h, const uint8_t *payload,
                         bool direct)
{
    struct proc *p = NULL;
    uint32_t v = 0;
    switch (h->type) {
    case SBX_CHAN_SPAWN:
        on_spawn(h->proc, payload, h->len);
        return;
    case SBX_CHAN_NET_OPEN:
    case SBX_CHAN_NET_OPENED: /* the answer to an EGRESS_OPEN */
    case SBX_CHAN_NET_DATA:
    case SBX_CHAN_NET_EOF:
    case SBX_CHAN_NET_CLOSE:
    case SBX_CHAN_NET_CREDIT:
    case SBX_CHAN_NET_LISTEN:
        net_frame(h->type, h->proc, payload, h->len);
        return;
    case SBX_CHAN_PING:
        if (!direct && agent_out.dfd >= 0) {
            /* A daemon attached: the socket is not its. Tell the one on the
             * socket why it loses it, so that it does not take it back. */
            static const char moved[] = "{\"moved\":true}";
            flush_for(200);
            agent_send(SBX_CHAN_DIRECT, 0, moved, sizeof(moved) - 1);
            flush_for(200);
            drop_direct("a PING arrived on stdin");
        }
        if (!direct)
            direct_stop();
        /* A (re)connecting daemon: relayed connections were the old one's. */
        net_close_all();
        agent_send(SBX_CHAN_PONG, 0, NULL, 0);
        agent_send_hello();
        return;
    case SBX_CHAN_DIRECT: {
        if (direct) {
            chan_log("DIRECT on the direct socket ignored");
            return;
        }
        struct buf b = {0};
        direct_listen(payload, h->len, &b);
        agent_send_buf(SBX_CHAN_DIRECT, 0, &b);
        return;
    }
    case SBX_CHAN_FS_REQ:
    case SBX_CHAN_FS_DATA:
    case SBX_CHAN_FS_CANCEL:
        fs_frame(h->type, h->proc, payload, h->len);
        return;
    case SBX_CHAN_SNAPSHOT: {
        static const char msg[] = "{\"error\":\"sbx-init does not take snapshots\"}";
        agent_send(SBX_CHAN_SNAP_DATA, 0, msg, sizeof(msg) - 1);
        return;
    }
    case SBX_CHAN_STDIN:
    case SBX_CHAN_STDIN_EOF:
    case SBX_CHAN_KILL:
    case SBX_CHAN_CREDIT:
    case SBX_CHAN_REPLAY:
    case SBX_CHAN_FORGET:
    case SBX_CHAN_RESIZE:
        p = find_proc(h->proc);
        if (!p) {
            /*
             * CREDIT and stdin racing with EXIT/FORGET are normal and dropped
             * silently; the others are worth a line, never an error.
             */
            if (h->type != SBX_CHAN_CREDIT && h->type != SBX_CHAN_STDIN &&
                h->type != SBX_CHAN_STDIN_EOF)
                chan_log("%s for unknown proc %u ignored", sbx_chan_type_name(h->type),
                         h->proc);
            return;
        }
        break;
    default:
        chan_log("unexpected frame type 0x%02x (%s), proc %u, %u bytes: ignored", h->type,
                 sbx_chan_type_name(h->type), h->proc, h->len);
        return;
    }
    if (h->type == SBX_CHAN_KILL || h->type == SBX_CHAN_CREDIT) {
        if (h->len != 4) {
            chan_log("%s for proc %u with %u bytes (want 4) ignored",
                     sbx_chan_type_name(h->type), h->proc, h->len);
            return;
        }
        v = sbx_chan_get_u32(payload);
    }
    switch (h->type) {
    case SBX_CHAN_STDIN:
        if (p->in_fd < 0 || p->in_eof)
            return; /* closed, or the process is gone: nothing can read it */
        if (buf_pending(&p->in) + h->len > AGENT_STDIN_MAX ||
            buf_append(&p->in, payload, h->len) < 0) {
            chan_log("stdin buffer of proc %u is full (%u bytes max): %u bytes dropped",
                     p->id, AGENT_STDIN_MAX, h->len);
            return;
        }
        flush_stdin(p);
        return;
    case SBX_CHAN_STDIN_EOF:
        p->in_eof = true;
        flush_stdin(p);
        return;
    case SBX_CHAN_KILL:
        if (v == 0 || v >= (uint32_t)NSIG) {
            chan_log("KILL for proc %u with bad signal %u ignored", p->id, v);
            return;
        }
        if (p->pid <= 0)
            return;
        if (kill(-p->pid, (int)v) < 0 && errno == ESRCH && p->state == PROC_RUNNING)
            kill(p->pid, (int)v); /* setpgid lost a race: signal the leader alone */
        if (p->state == PROC_RUNNING)
            p->killed = true;
        return;
    case SBX_CHAN_CREDIT:
        p->credit += v;
        if (p->credit > AGENT_CREDIT_MAX)
            p->credit = AGENT_CREDIT_MAX;
        return;
    case SBX_CHAN_REPLAY:
        on_replay(p, payload, h->len);
        return;
    case SBX_CHAN_RESIZE:
        on_resize(p, payload, h->len);
        return;
    case SBX_CHAN_FORGET:
        if (p->state != PROC_EXITED) {
            chan_log("FORGET for proc %u, which still runs, ignored", p->id);
            return;
        }
        agent_remove_proc(p);
        return;
    }
}

/* Handles complete frames of one input while the output queue has room. */
void agent_process_buf(struct buf *in, bool direct)
{
    while (agent_out_room() && (!direct || agent_out.dfd >= 0)) {
        size_t avail = buf_pending(in);
        const uint8_t *d = in->data + in->off;
        if (!direct && agent.in_resync) {
            const uint8_t *hit =
                avail >= SBX_CHAN_HDR ? memmem(d, avail, ping_frame, SBX_CHAN_HDR) : NULL;
            if (hit) {
                buf_consume(in, (size_t)(hit - d));
                agent.in_resync = false;
                alog("input in sync again at a PING frame");
                continue;
            }
            if (avail >= SBX_CHAN_HDR) /* keep a possible partial PING */
                buf_consume(in, avail - (SBX_CHAN_HDR - 1));
            return;
        }
        if (avail < SBX_CHAN_HDR)
            return;
        struct sbx_chan_hdr h;
        if (sbx_chan_hdr_decode(&h, d) < 0) {
            if (direct) { /* no resync on the socket: the daemon can reconnect */
                drop_direct("malformed frame header");
                return;
            }
            alog("malformed frame header (%02x %02x %02x %02x, len %u): discarding input "
                 "until a PING",
                 d[0], d[1], d[2], d[3], h.len);
            send_error("malformed frame header; input discarded until the next PING");
            buf_consume(in, 1); /* the rest is scanned for a PING */
            agent.in_resync = true;
            continue;
        }
        if (avail < SBX_CHAN_HDR + (size_t)h.len)
            return;
        handle_frame(&h, d + SBX_CHAN_HDR, direct);
        buf_consume(in, SBX_CHAN_HDR + (size_t)h.len);
    }
}

static void process_input(void)
{
    agent_process_buf(&agent.ibuf, false);
    agent_process_buf(&agent.dbuf, true);
}

static bool buf_ready(const struct buf *in, bool resync)
{
    size_t avail = buf_pending(in);
    if (avail < SBX_CHAN_HDR || !agent_out_room())
        return false;
    if (resync)
        return true;
    return avail >= SBX_CHAN_HDR + (size_t)sbx_chan_get_u32(in->data + in->off + 8) ||
           sbx_chan_hdr_decode(&(struct sbx_chan_hdr){0}, in->data + in->off) < 0;
}

/* process_input() would make progress right now. */
static bool input_ready(void)
{
    return buf_ready(&agent.ibuf, agent.in_resync) ||
           (agent_out.dfd >= 0 && buf_ready(&agent.dbuf, false));
}

/* ---- output ---------------------------------------------------------------- */

static bool proc_has_output(const struct proc *p)
{
    for (int s = 0; s < 2; s++)
        if (p->out[s].sent < p->out[s].total)
            return true;
    return false;
}

/* Frames ring bytes against credit; EXIT once a finished process has sent everything. */
void agent_pump_output(void)
{
    size_t n = agent.nprocs;
    for (size_t k = 0; k < n && agent_out_room(); k++) {
        struct proc *p = agent.procs[(agent.rr + k) % n];
        for (int s = 0; s < 2; s++) {
            struct stream *st = &p->out[s];
            while (p->credit > 0 && st->sent < st->total && agent_out_room()) {
                uint64_t len = st->total - st->sent;
                if (len > (uint64_t)p->credit)
                    len = (uint64_t)p->credit;
                if (len > AGENT_FRAME_OUT)
                    len = AGENT_FRAME_OUT;
                if (!out_ok()) {
                    st->sent += len; /* nobody will ever read it */
                    p->credit -= (int64_t)len;
                    continue;
                }
                if (buf_reserve(&agent_out.q, SBX_CHAN_HDR + len) < 0)
                    return;
                sbx_chan_hdr_encode(agent_out.q.data + agent_out.q.len,
                                    s ? SBX_CHAN_STDERR : SBX_CHAN_STDOUT, p->id,
                                    (uint32_t)len);
                proc_ring_read(p, s, st->sent,
                               agent_out.q.data + agent_out.q.len + SBX_CHAN_HDR,
                               (size_t)len);
                agent_out.q.len += SBX_CHAN_HDR + (size_t)len;
                st->sent += len;
                p->credit -= (int64_t)len;
            }
        }
        if (p->state == PROC_EXITED && !p->exit_sent && !proc_has_output(p) &&
            agent_out_room()) {
            struct buf b = {0};
            proc_exit_json(p, &b);
            agent_send_buf(SBX_CHAN_EXIT, p->id, &b);
            p->exit_sent = true;
        }
    }
    agent.rr = n ? (agent.rr + 1) % n : 0;
    return;
}

static bool output_ready(void)
{
    if (!agent_out_room())
        return false;
    for (size_t k = 0; k < agent.nprocs; k++) {
        const struct proc *p = agent.procs[k];
        if (p->credit > 0 && proc_has_output(p))
            return true;
        if (p->state == PROC_EXITED && !p->exit_sent && !proc_has_output(p))
            return true;
    }
    return false;
}

static void flush_out(void)
{
    while (out_ok() && buf_pending(&agent_out.q) > 0) {
        ssize_t n = write(out_fd(), agent_out.q.data + agent_out.q.off,
                          buf_pending(&agent_out.q));
        if (n > 0) {
            buf_consume(&agent_out.q, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (agent_out.dfd >= 0) {
            drop_direct(n < 0 ? strerror(errno) : "EOF");
            return;
        }
        alog("stdout: %s: frames are dropped from now on",
             n < 0 ? strerror(errno) : "EOF");
        agent_out.dead = true;
        buf_deinit(&agent_out.q);
    }
}

/* ---- lifecycle ------------------------------------------------------------- */

/* Kills every group we started, flushes for up to a second, exits. */
static void __attribute__((noreturn)) shutdown_exit(int code)
{
    for (size_t k = 0; k < agent.nprocs; k++)
        if (agent.procs[k]->pid > 0)
            kill(-agent.procs[k]->pid, SIGKILL);
    if (agent.main_pid > 0)
        kill(-agent.main_pid, SIGKILL);
    flush_for(1000);
    exit(code);
}

/* Writes what is queued, waiting up to ms for the reader. */
static void flush_for(int ms)
{
    int64_t until = now_ms() + ms;
    while (out_ok() && buf_pending(&agent_out.q) > 0 && now_ms() < until) {
        struct pollfd pfd = {.fd = out_fd(), .events = POLLOUT};
        if (poll(&pfd, 1, (int)(until - now_ms())) < 0 && errno != EINTR)
            break;
        flush_out();
    }
}

static void handle_signals(void)
{
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(agent.sigpipe[0], sigs, sizeof(sigs))) > 0) {
        for (ssize_t k = 0; k < n; k++) {
            int sig = sigs[k];
            if (sig == SIGCHLD)
                continue; /* reap() runs every iteration */
            if (agent.main_pid > 0 && !agent.main_exited) {
                kill(agent.main_pid, sig);
                continue;
            }
            if (sig == SIGTERM || sig == SIGINT) {
                alog("%s: killing all processes and exiting", strsignal(sig));
                shutdown_exit(0);
            }
            alog("%s ignored (no main child)", strsignal(sig));
        }
    }
}

static void reap(void)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == agent.main_pid) {
            agent.main_exited = true;
            agent.main_status = st;
            continue;
        }
        for (size_t k = 0; k < agent.nprocs; k++) {
            struct proc *p = agent.procs[k];
            if (p->pid == pid && p->state == PROC_RUNNING) {
                proc_leader_exited(p, st, now_ms());
                drain_exited(p);
                break;
            }
        }
        /* Anyone else is an orphan that we inherited: reaped silently. */
    }
}

/* Timeouts and grace periods; returns the poll timeout in ms (-1 = none). */
static int run_timers(void)
{
    int64_t now = now_ms(), next = -1;
    for (size_t k = 0; k < agent.nprocs; k++) {
        struct proc *p = agent.procs[k];
        if (p->state == PROC_RUNNING && p->deadline) {
            if (now >= p->deadline)
                proc_timeout(p);
            else if (next < 0 || p->deadline < next)
                next = p->deadline;
        }
        if (p->state == PROC_DRAINING && p->grace_at) {
            if (now >= p->grace_at)
                proc_grace_expired(p);
            else if (next < 0 || p->grace_at < next)
                next = p->grace_at;
        }
    }
    int ft = fs_timers(now);
    if (ft >= 0 && (next < 0 || now + ft < next))
        next = now + ft;
    if (next < 0)
        return -1;
    int64_t d = next - now;
    return d > 60000 ? 60000 : (int)d;
}

static void read_channel(void)
{
    if (agent.ibuf.off > 0 && agent.ibuf.cap - agent.ibuf.len < (64u << 10)) {
        memmove(agent.ibuf.data, agent.ibuf.data + agent.ibuf.off,
                buf_pending(&agent.ibuf));
        agent.ibuf.len -= agent.ibuf.off;
        agent.ibuf.off = 0;
    }
    size_t room = agent.ibuf.cap - agent.ibuf.len;
    if (room == 0)
        return;
    ssize_t n = read(0, agent.ibuf.data + agent.ibuf.len, room);
    if (n > 0) {
        agent.ibuf.len += (size_t)n;
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    alog("channel input: %s", n < 0 ? strerror(errno) : "EOF");
    agent.in_open = false;
    if (agent.main_pid <= 0) {
        alog("no channel and no main child: exiting");
        shutdown_exit(0);
    }
}

static void read_direct(void)
{
    if (agent_out.dfd < 0)
        return;
    if (buf_reserve(&agent.dbuf, 64u << 10) < 0 || buf_pending(&agent.dbuf) >= IBUF_CAP)
        return;
    ssize_t n = read(agent_out.dfd, agent.dbuf.data + agent.dbuf.len,
                     agent.dbuf.cap - agent.dbuf.len);
    if (n > 0) {
        agent.dbuf.len += (size_t)n;
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    drop_direct(n < 0 ? strerror(errno) : "closed by the daemon");
}

/* Reads what stream s of p has; false when there was nothing to read now. */
static bool read_pipe(struct proc *p, int s)
{
    static uint8_t chunk[AGENT_FRAME_OUT];
    size_t allow = proc_read_allowance(p, s);
    if (allow == 0)
        return false;
    struct stream *st = &p->out[s];
    ssize_t n = read(st->fd, chunk, allow);
    if (n > 0) {
        proc_ring_write(p, s, chunk, (size_t)n);
        if (st->drain_limit != UINT64_MAX && st->total >= st->drain_limit)
            proc_close_stream(p, s);
        return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    proc_close_stream(p, s);
    return false;
}

/*
 * The leader just exited: its pipes are usually at EOF already. Reading them
 * now lets the last output and the EXIT leave in one write instead of two
 * trips around the loop (a wakeup each, on both sides of the channel).
 */
static void drain_exited(struct proc *p)
{
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 16 && p->out[s].fd >= 0 && read_pipe(p, s); k++)
            ;
}

/* ---- the loop -------------------------------------------------------------- */

enum slot_kind {
    SLOT_STDIN,
    SLOT_STDOUT,
    SLOT_SIG,
    SLOT_OUT,
    SLOT_ERR,
    SLOT_IN,
    SLOT_DIRECT_IN, /* the direct socket */
    SLOT_LISTEN,    /* its listener and unproven connections */
    SLOT_WATCH,     /* a file watch's inotify fd (fs.c) */
    SLOT_NET,       /* relayed connections (net.c); slot[].k is net.c's index */
};
#define SLOTS (4 + 3 * AGENT_MAX_PROCS + 8 + 64 + AGENT_MAX_CONNS)

void agent_run(void)
{
    static struct pollfd pfd[SLOTS];
    static struct {
        enum slot_kind kind;
        struct proc *p;
        uint32_t id;
        int k;
    } slot[SLOTS];

    for (;;) {
        handle_signals();
        reap();
        if (agent.main_pid > 0 && agent.main_exited) {
            int st = agent.main_status;
            shutdown_exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
        }
        process_input();
        int timeout = run_timers(); /* after SPAWNs, so new deadlines count */
        agent_pump_output();
        fs_pump();
        flush_out();
        if (input_ready() || output_ready() || (fs_has_output() && agent_out_room()))
            timeout = 0;

        nfds_t n = 0;
        bool obuf_room = agent_out_room();
        if (agent.in_open && obuf_room && agent.ibuf.cap - buf_pending(&agent.ibuf) > 0) {
            pfd[n] = (struct pollfd){.fd = 0, .events = POLLIN};
            slot[n++].kind = SLOT_STDIN;
        }
        if (out_ok() && buf_pending(&agent_out.q) > 0) {
            pfd[n] = (struct pollfd){.fd = out_fd(), .events = POLLOUT};
            slot[n++].kind = SLOT_STDOUT;
        }
        if (agent_out.dfd >= 0 && obuf_room && buf_pending(&agent.dbuf) < IBUF_CAP) {
            pfd[n] = (struct pollfd){.fd = agent_out.dfd, .events = POLLIN};
            slot[n++].kind = SLOT_DIRECT_IN;
        }
        int lfds[8];
        int nl = direct_poll_fds(lfds, 8);
        for (int k = 0; k < nl; k++) {
            pfd[n] = (struct pollfd){.fd = lfds[k], .events = POLLIN};
            slot[n++].kind = SLOT_LISTEN;
        }
        pfd[n] = (struct pollfd){.fd = agent.sigpipe[0], .events = POLLIN};
        slot[n++].kind = SLOT_SIG;
        int wfds[64];
        uint32_t wids[64];
        int nw = fs_poll_fds(wfds, wids, 64);
        for (int k = 0; k < nw; k++) {
            pfd[n] = (struct pollfd){.fd = wfds[k], .events = POLLIN};
            slot[n].kind = SLOT_WATCH;
            slot[n++].id = wids[k];
        }
        for (size_t k = 0; k < agent.nprocs; k++) {
            struct proc *p = agent.procs[k];
            for (int s = 0; s < 2; s++)
                if (obuf_room && proc_read_allowance(p, s) > 0) {
                    pfd[n] = (struct pollfd){.fd = p->out[s].fd, .events = POLLIN};
                    slot[n].kind = s ? SLOT_ERR : SLOT_OUT;
                    slot[n++].p = p;
                }
            if (p->in_fd >= 0 && buf_pending(&p->in) > 0) {
                pfd[n] = (struct pollfd){.fd = p->in_fd, .events = POLLOUT};
                slot[n].kind = SLOT_IN;
                slot[n++].p = p;
            }
        }

        int nn = net_pollfds(pfd + n, (int)(SLOTS - n), obuf_room);
        for (int k = 0; k < nn; k++) {
            slot[n + k].kind = SLOT_NET;
            slot[n + k].k = k;
        }
        n += (nfds_t)nn;

        int r = poll(pfd, n, timeout);
        if (r < 0) {
            if (errno != EINTR)
                alog("poll: %s", strerror(errno));
            continue;
        }
        /* The table does not change while dispatching: slots stay valid. */
        for (nfds_t k = 0; k < n && r > 0; k++) {
            if (!pfd[k].revents)
                continue;
            switch (slot[k].kind) {
            case SLOT_STDIN:
                read_channel();
                break;
            case SLOT_STDOUT:
                flush_out();
                break;
            case SLOT_SIG:
                break; /* handled at the top of the loop */
            case SLOT_OUT:
                read_pipe(slot[k].p, 0);
                break;
            case SLOT_ERR:
                read_pipe(slot[k].p, 1);
                break;
            case SLOT_IN:
                flush_stdin(slot[k].p);
                break;
            case SLOT_DIRECT_IN:
                read_direct();
                break;
            case SLOT_WATCH:
                fs_ready(slot[k].id);
                break;
            case SLOT_NET:
                net_ready(slot[k].k, pfd[k].revents);
                break;
            case SLOT_LISTEN: {
                struct buf answer = {0};
                int fd = direct_ready(pfd[k].fd, &answer);
                if (fd >= 0)
                    use_direct(fd, &answer);
                break;
            }
            }
        }
        net_reap();
    }
}
