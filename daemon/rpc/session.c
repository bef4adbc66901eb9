/*
 * session.c - client connections: reading request lines, writing replies and
 * notifications through a chunked buffer, watermarks, deferred free.
 */
#include "rpc/session.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "daemon.h"
#include "core/fs.h"
#include "rpc/fs_stream.h"
#include "rpc/jfast.h"
#include "log.h"
#include "rpc/notify.h"
#include "rpc/parse.h"
#include "rpc/rpc.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "rpc/toolcall.h"
#include "core/usage.h"
#include "xalloc.h"

#define IBUF_INITIAL (16 * 1024)
#define WRITE_PER_ITERATION (1024 * 1024)
/* One session's request work per turn of the loop: past this, its remaining
 * lines (or the rest of a batch) wait for the next turn, so another client's
 * ping is answered within a few milliseconds (issue 11's fairness). */
#define SLICE_S 0.001
#define IDLE_CHECK_S 1.0

/* Sessions that have output to flush or must be freed, linked by pending_next. */
static struct session **pending;
static size_t npending, cappending;

static void session_io_cb(struct ev_loop *loop, ev_io *w, int revents);
static void session_update_watcher(struct session *s);
static void session_update_watcher_ex(struct session *s, int flush_coming);

static size_t out_total; /* obuf bytes of all sessions */

/* One initial input buffer kept back from the last session that dropped
 * one: a client sending one request at a time would otherwise cost a 16 KiB
 * malloc and free (and malloc's consolidation of its small free chunks) per
 * request. It counts against nobody while spare: one buffer, bounded. */
static char *spare_ibuf;

/* Sessions with request work left over (SESS_BUSY), run by an ev_idle. */
static struct session **busy;
static size_t nbusy, capbusy;
static ev_idle work_idle;
static ev_timer idle_timer;
static int watchers_ready;

static void work_cb(struct ev_loop *loop, ev_idle *w, int revents);
static void idle_check_cb(struct ev_loop *loop, ev_timer *w, int revents);
static const struct rpc_conn_ops conn_ops;
static void line_parsed(uint64_t id, json_t *v, int depth_ok, const json_error_t *jerr);

static void init_watchers(void)
{
    if (watchers_ready)
        return;
    ev_idle_init(&work_idle, work_cb);
    ev_timer_init(&idle_timer, idle_check_cb, IDLE_CHECK_S, IDLE_CHECK_S);
    ev_timer_start(D->loop, &idle_timer);
    ev_unref(D->loop); /* the sweep alone must not keep a loop alive */
    notify_init();
    watchers_ready = 1;
}

static void mark_busy(struct session *s)
{
    if (s->flags & SESS_BUSY)
        return;
    if (nbusy == capbusy) {
        size_t ncap = capbusy ? capbusy * 2 : 16;
        struct session **nb = xrealloc(busy, ncap * sizeof(*nb));
        busy = nb;
        capbusy = ncap;
    }
    busy[nbusy++] = s;
    s->flags |= SESS_BUSY;
    if (!ev_is_active(&work_idle))
        ev_idle_start(D->loop, &work_idle);
}

static void unmark_busy(struct session *s)
{
    if (!(s->flags & SESS_BUSY))
        return;
    for (size_t i = 0; i < nbusy; i++)
        if (busy[i] == s) {
            memmove(busy + i, busy + i + 1, (nbusy - i - 1) * sizeof(*busy));
            nbusy--;
            break;
        }
    s->flags &= ~SESS_BUSY;
}

/* Answers with a -32005 naming the limit (id null), then closes once sent. */
static void fail_limit(struct session *s, const char *limit, long long max,
                       const char *msg)
{
    json_t *m = json_pack("{s:s, s:n, s:{s:i, s:s, s:{s:s, s:I}}}", "jsonrpc", "2.0",
                          "id", "error", "code", SBX_E_LIMIT, "message", msg, "data",
                          "limit", limit, "max", (json_int_t)max);
    session_send(s, m);
    json_decref(m);
    log_warn("session %llu (uid %d): %s (limits.%s = %lld), closing",
             (unsigned long long)s->id, (int)s->uid, msg, limit, max);
    session_close(s, 1);
}

static void mark_pending(struct session *s)
{
    if (s->flags & SESS_PENDING)
        return;
    if (npending == cappending) {
        size_t ncap = cappending ? cappending * 2 : 64;
        struct session **np = xrealloc(pending, ncap * sizeof(*np));
        pending = np;
        cappending = ncap;
    }
    pending[npending++] = s;
    s->flags |= SESS_PENDING;
}

/* Is gid among the peer's groups? Read from /proc: getgrouplist would go
 * through NSS, which may block on the network. */
static int peer_in_group(pid_t pid, gid_t primary, gid_t want)
{
    if (primary == want)
        return 1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, "Groups:", 7) != 0)
            continue;
        char *p = line + 7, *end;
        for (;;) {
            unsigned long g = strtoul(p, &end, 10);
            if (end == p)
                break;
            if ((gid_t)g == want)
                found = 1;
            p = end;
        }
        break;
    }
    fclose(f);
    return found;
}

/* Refuses a connection with one error line; it never becomes a session. */
static void refuse(int fd, int code, const char *msg, const char *limit, long long max)
{
    char line[320];
    int n;
    if (limit)
        n = snprintf(
            line, sizeof(line),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":"
            "\"%s\",\"data\":{\"limit\":\"%s\",\"max\":%lld}}}\n",
            code, msg, limit, max);
    else
        n = snprintf(
            line, sizeof(line),
            "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":"
            "\"%s\",\"data\":{}}}\n",
            code, msg);
    if (send(fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        log_debug("refused session: %s", strerror(errno));
    close(fd);
}

int session_count_uid(uid_t uid)
{
    struct uid_usage *u = usage_find(uid);
    return u ? u->sessions : 0;
}

void session_accept(int fd)
{
    if (D->draining) {
        refuse(fd, SBX_E_SHUTDOWN, "daemon is shutting down", NULL, 0);
        return;
    }
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    uid_t uid = (uid_t)-2;
    gid_t gid = (gid_t)-2;
    pid_t pid = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
        uid = cred.uid;
        gid = cred.gid;
        pid = cred.pid;
    } /* else: no credentials, treat as the least privileged user */
    int admin = uid == 0 || (D->have_admin_gid && peer_in_group(pid, gid, D->admin_gid));
    long long max = (long long)D->cfg.max_sessions;
    long long reserved = (long long)D->cfg.admin_reserved_sessions;
    if (D->nsessions >= max) {
        refuse(fd, SBX_E_LIMIT, "too many sessions", "max_sessions", max);
        return;
    }
    /* The last admin_reserved_sessions places are for administrators: one
     * user's idle connections cannot lock root out. */
    if (!admin && D->nsessions >= max - reserved) {
        refuse(fd, SBX_E_LIMIT,
               "too many sessions (the rest are reserved for administrators)",
               "max_sessions", max);
        return;
    }
    if (!admin && session_count_uid(uid) >= D->cfg.max_sessions_per_uid) {
        refuse(fd, SBX_E_LIMIT, "too many sessions for this uid", "max_sessions_per_uid",
               (long long)D->cfg.max_sessions_per_uid);
        return;
    }
    struct session *s = calloc(1, sizeof(*s));
    if (!s) {
        close(fd);
        return;
    }
    init_watchers();
    s->fd = fd;
    s->id = ++D->next_session_id;
    s->uid = uid;
    s->gid = gid;
    s->pid = pid;
    s->admin = admin;
    s->usage = usage_of(uid);
    s->usage->sessions++;
    s->last_active = ev_now(D->loop);
    obuf_init(&s->obuf);
    conn_init(&s->conn, s->id, uid, admin, &conn_ops);
    s->next = D->sessions;
    if (D->sessions)
        D->sessions->prev = s;
    D->sessions = s;
    D->nsessions++;
    ev_io_init(&s->io, session_io_cb, fd, EV_READ);
    s->io.data = s;
    s->io_events = EV_READ;
    ev_io_start(D->loop, &s->io);
    log_debug("session %llu: uid %d pid %d%s", (unsigned long long)s->id, (int)s->uid,
              (int)s->pid, s->admin ? " (admin)" : "");
}

/* -- the JSON-RPC side's view (rpc.h) ------------------------------------------ */

static struct session *of_conn(const struct rpc_conn *k)
{
    return (struct session *)((char *)k - offsetof(struct session, conn));
}

static void conn_send_line(struct rpc_conn *k, const char *text, size_t len)
{
    session_send_line(of_conn(k), text, len);
}

static void conn_send_line_owned(struct rpc_conn *k, char *text, size_t len)
{
    session_send_line_owned(of_conn(k), text, len);
}

static void conn_send_limit_line(struct rpc_conn *k, const char *text, size_t len)
{
    session_send_limit_line(of_conn(k), text, len);
}

static size_t conn_reply_room(const struct rpc_conn *k)
{
    return session_reply_room(of_conn(k));
}

static size_t conn_queued(const struct rpc_conn *k)
{
    return of_conn(k)->obuf.bytes;
}

static size_t conn_queued_all(const struct rpc_conn *k)
{
    return out_total;
}

static const struct rpc_conn_ops conn_ops = {
    .send_line = conn_send_line,
    .send_line_owned = conn_send_line_owned,
    .send_limit_line = conn_send_limit_line,
    .reply_room = conn_reply_room,
    .queued = conn_queued,
    .queued_all = conn_queued_all,
};

/* The core's status and progress notifications (sandbox.h): the line is
 * built once for all of the owner's sessions. params stolen. */
struct session *session_by_id(uint64_t id)
{
    for (struct session *s = D->sessions; s; s = s->next)
        if (s->id == id && !(s->flags & SESS_CLOSE_ASAP))
            return s;
    return NULL;
}

static void update_congestion(struct session *s)
{
    size_t high = (size_t)D->cfg.session_output_high;
    if (!(s->flags & SESS_CONGESTED) && s->obuf.bytes >= high) {
        s->flags |= SESS_CONGESTED;
        s->conn.fol.congested = 1;
    } else if ((s->flags & SESS_CONGESTED) && s->obuf.bytes < high / 2) {
        s->flags &= ~SESS_CONGESTED;
        s->conn.fol.congested = 0;
        output_follower_writable(&s->conn.fol);
        if (s->ilen > 0 || s->conn.cur_batch)
            mark_busy(s); /* requests were left waiting for the client to read */
    }
}

/* Over limits.output_bytes_total: the session holding the most unsent output
 * goes (it is the one not reading), not whoever happened to append last. */
static void shed_output(void)
{
    struct session *big = NULL;
    for (struct session *x = D->sessions; x; x = x->next)
        if (!(x->flags & SESS_CLOSE_ASAP) && (!big || x->obuf.bytes > big->obuf.bytes))
            big = x;
    if (!big)
        return;
    log_warn("session %llu (uid %d): %zu bytes unsent while all sessions hold %zu "
             "(limits.output_bytes_total = %lld), disconnecting it",
             (unsigned long long)big->id, (int)big->uid, big->obuf.bytes, out_total,
             (long long)D->cfg.output_bytes_total);
    session_close(big, 0);
}

size_t session_reply_room(const struct session *s)
{
    size_t hard = (size_t)D->cfg.session_output_hard;
    size_t room = s->obuf.bytes < hard ? hard - s->obuf.bytes : 0;
    size_t total = (size_t)D->cfg.output_bytes_total;
    size_t troom = out_total < total ? total - out_total : 0;
    return room < troom ? room : troom;
}

size_t session_output_total(void)
{
    return out_total;
}

/* Queues data and a newline. owned: data is a malloc'd buffer the obuf
 * takes over (no copy) and frees; otherwise it is copied. slack: bytes the
 * line may take the session past its limits (a -32005 replacing a reply,
 * limits.session_output_slack), 0 for everything else. */
static void append_line(struct session *s, const char *data, size_t len, char *owned,
                        size_t slack)
{
    if (s->flags & SESS_CLOSE_ASAP) {
        free(owned);
        return;
    }
    size_t before = s->obuf.bytes;
    int rc = owned ? obuf_adopt(&s->obuf, owned, len) : obuf_append(&s->obuf, data, len);
    if (rc < 0 || obuf_append(&s->obuf, "\n", 1) < 0) {
        out_total += s->obuf.bytes - before;
        log_error("session %llu: out of memory for output", (unsigned long long)s->id);
        session_close(s, 0);
        return;
    }
    out_total += s->obuf.bytes - before;
    if (out_total > (size_t)D->cfg.output_bytes_total + slack) {
        shed_output();
        if (s->flags & SESS_CLOSE_ASAP)
            return;
    }
    if (s->obuf.bytes > (size_t)D->cfg.session_output_hard + slack) {
        log_warn("session %llu: output buffer over %lld bytes, disconnecting",
                 (unsigned long long)s->id, (long long)D->cfg.session_output_hard);
        session_close(s, 0);
        return;
    }
    update_congestion(s);
    mark_pending(s);
}

void session_send(struct session *s, json_t *msg)
{
    if (!s || (s->flags & SESS_CLOSE_ASAP))
        return;
    size_t len;
    char *text = jfast_dumps(msg, &len);
    if (!text) {
        log_error("session %llu: cannot encode a message", (unsigned long long)s->id);
        return;
    }
    append_line(s, text, len, NULL, 0);
    free(text);
}

void session_send_line(struct session *s, const char *text, size_t len)
{
    if (s && !(s->flags & SESS_CLOSE_ASAP))
        append_line(s, text, len, NULL, 0);
}

void session_send_line_owned(struct session *s, char *text, size_t len)
{
    if (s)
        append_line(s, text, len, text, 0);
    else
        free(text);
}

void session_send_limit_line(struct session *s, const char *text, size_t len)
{
    if (s && !(s->flags & SESS_CLOSE_ASAP))
        append_line(s, text, len, NULL, (size_t)D->cfg.session_output_slack);
}

void session_notify(struct session *s, const char *method, json_t *params)
{
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                            "params", params ? params : json_object());
    if (msg) {
        session_send(s, msg);
        json_decref(msg);
    }
}

void session_close(struct session *s, int graceful)
{
    if (graceful && s->obuf.bytes > 0) {
        s->flags |= SESS_CLOSE_AFTER_WRITE;
        session_update_watcher(s);
        mark_pending(s);
        return;
    }
    if (s->flags & SESS_CLOSE_ASAP)
        return;
    s->flags |= SESS_CLOSE_ASAP;
    s->conn.closing = 1;
    ev_io_stop(D->loop, &s->io);
    /* Nothing more is written: give the output (and its share of
     * output_bytes_total) back now, not at the prepare hook. */
    out_total -= s->obuf.bytes;
    obuf_deinit(&s->obuf);
    obuf_init(&s->obuf);
    unmark_busy(s);
    mark_pending(s);
}

static void session_free(struct session *s)
{
    log_debug("session %llu closed", (unsigned long long)s->id);
    rpc_conn_gone(&s->conn);
    output_follower_gone(&s->conn.fol);
    toolcall_conn_gone(&s->conn);
    fs_drop_owner(&s->conn); /* its open writes and watches */
    conn_deinit(&s->conn);
    ev_io_stop(D->loop, &s->io);
    if (s->fd >= 0)
        close(s->fd);
    if (s->prev)
        s->prev->next = s->next;
    else
        D->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    D->nsessions--;
    unmark_busy(s);
    out_total -= s->obuf.bytes;
    obuf_deinit(&s->obuf);
    s->usage->input_bytes -= s->icap;
    s->usage->sessions--;
    usage_release(s->usage);
    free(s->ibuf);
    free(s);
}

void session_free_all(void)
{
    while (D->sessions)
        session_free(D->sessions);
    npending = 0;
    nbusy = 0;
    free(spare_ibuf);
    spare_ibuf = NULL;
    obuf_release_spare();
    free(busy);
    busy = NULL;
    capbusy = 0;
    if (watchers_ready) {
        ev_ref(D->loop);
        ev_timer_stop(D->loop, &idle_timer);
        ev_idle_stop(D->loop, &work_idle);
        watchers_ready = 0;
    }
}

/* READ iff we may take input (not closing, output below the high mark);
 * WRITE iff output is pending and the prepare hook could not flush it. */
/*
 * flush_coming: the session is pending, so sessions_before_sleep writes its
 * output before the loop sleeps. Arming EV_WRITE for that would be undone
 * right after, and libev turns every such flip into an epoll_ctl (one more
 * syscall per request, most of them failing with EEXIST).
 */
static void session_update_watcher_ex(struct session *s, int flush_coming)
{
    if (s->flags & SESS_CLOSE_ASAP)
        return;
    int ev = 0;
    if (!(s->flags & (SESS_CLOSE_AFTER_WRITE | SESS_CONGESTED | SESS_BUSY)) &&
        !s->parsing)
        ev |= EV_READ;
    if (s->obuf.bytes > 0 && (!flush_coming || (s->io_events & EV_WRITE)))
        ev |= EV_WRITE;
    if (ev == s->io_events)
        return;
    ev_io_stop(D->loop, &s->io);
    ev_io_set(&s->io, s->fd, ev);
    s->io_events = ev;
    if (ev)
        ev_io_start(D->loop, &s->io);
}

static void session_update_watcher(struct session *s)
{
    session_update_watcher_ex(s, 0);
}

static void session_write(struct session *s)
{
    size_t written = 0;
    while (s->obuf.bytes > 0 && written < WRITE_PER_ITERATION) {
        struct iovec iov[64];
        int n = obuf_iov(&s->obuf, iov, 64);
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            log_debug("session %llu: write: %s", (unsigned long long)s->id,
                      strerror(errno));
            session_close(s, 0);
            return;
        }
        obuf_consume(&s->obuf, (size_t)w);
        out_total -= (size_t)w;
        written += (size_t)w;
    }
    if (s->obuf.bytes == 0 && (s->flags & SESS_CLOSE_AFTER_WRITE)) {
        session_close(s, 0);
        return;
    }
    update_congestion(s);
    session_update_watcher(s);
}

/* Frees the input buffer of a session with nothing buffered: a thousand idle
 * clients cost a thousand structs, not a thousand 16 KiB buffers (Redis frees
 * idle query buffers too). */
static void drop_ibuf(struct session *s)
{
    s->usage->input_bytes -= s->icap;
    if (!spare_ibuf && s->icap == IBUF_INITIAL)
        spare_ibuf = s->ibuf;
    else
        free(s->ibuf);
    s->ibuf = NULL;
    s->icap = 0;
    s->ilen = 0;
    s->iscan = 0;
}

/*
 * Handles complete lines (and the rest of a batch) for about SLICE_S.
 * Returns 1 if work is left for the next turn, 0 if not (or the session is
 * closing).
 */
static int process_lines(struct session *s)
{
    size_t max = (size_t)D->cfg.max_message_bytes;
    ev_tstamp t0 = ev_time();
    int more = 0;
    if (s->parsing)
        return 0; /* resumed by session_parsed */
    if (s->conn.cur_batch && rpc_batch_resume(&s->conn))
        return 1;
    size_t start = 0;
    for (;;) {
        if (s->flags & (SESS_CLOSE_ASAP | SESS_CLOSE_AFTER_WRITE))
            return 0;
        if (s->conn.cur_batch) {
            more = 1;
            break;
        }
        if (s->parsing)
            break;
        if (s->flags & SESS_CONGESTED)
            break; /* resumed once the client reads (update_congestion) */
        char *nl = s->ilen > s->iscan
                       ? memchr(s->ibuf + s->iscan, '\n', s->ilen - s->iscan)
                       : NULL;
        if (!nl) {
            s->iscan = s->ilen;
            break;
        }
        if (start > 0 && ev_time() - t0 > SLICE_S) {
            more = 1;
            break;
        }
        size_t end = (size_t)(nl - s->ibuf);
        size_t len = end - start;
        if (len > max) {
            /* Over the limit even though the newline arrived. */
            s->iscan = start;
            break;
        }
        if (!s->lines_seen++ && len < 1024 &&
            fs_stream_take(s->fd, s->uid, s->ibuf + start, len, nl + 1,
                           s->ilen - (end + 1))) {
            /* A raw transfer's connection (fs_stream.c) has the socket now:
             * this session ends without touching it. */
            s->fd = -1;
            s->ilen = 0;
            s->iscan = 0;
            session_close(s, 0);
            return 0;
        }
        if (len >= PARSE_OFFLOOP_MIN &&
            parse_submit(s->id, s->ibuf + start, len, line_parsed) == 0)
            s->parsing = 1; /* the rest waits for its value */
        else
            rpc_handle_line(&s->conn, s->ibuf + start, len);
        start = end + 1;
        s->iscan = start;
    }
    if (start > 0) {
        memmove(s->ibuf, s->ibuf + start, s->ilen - start);
        s->ilen -= start;
        s->iscan -= start;
    }
    if (s->ilen == 0 && s->icap > 0)
        drop_ibuf(s);
    if (s->ilen > max) {
        json_t *msg = json_pack("{s:s, s:n, s:{s:i, s:s, s:{s:I}}}", "jsonrpc", "2.0",
                                "id", "error", "code", SBX_E_TOO_LARGE, "message",
                                "message too large", "data", "max", (json_int_t)max);
        session_send(s, msg);
        json_decref(msg);
        log_warn("session %llu: message over %zu bytes, closing",
                 (unsigned long long)s->id, max);
        session_close(s, 1);
        return 0;
    }
    return more;
}

static void session_read(struct session *s)
{
    size_t max = (size_t)D->cfg.max_message_bytes;
    /* Read a bounded amount per event so one chatty client can't starve
     * others: at most 16 reads and about SLICE_S of work (each read's lines
     * take up to a slice of their own); what is left in the socket wakes us
     * on the next turn. */
    ev_tstamp t0 = ev_time();
    for (int rounds = 0; rounds < 16; rounds++) {
        if ((s->flags & (SESS_CLOSE_ASAP | SESS_CLOSE_AFTER_WRITE | SESS_BUSY)) ||
            s->parsing)
            return;
        if (rounds > 0 && ev_time() - t0 > SLICE_S)
            return;
        if (s->icap - s->ilen < 4096) {
            size_t ncap = s->icap ? s->icap * 2 : IBUF_INITIAL;
            if (ncap > max + 4096)
                ncap = max + 4096;
            if (ncap <= s->icap) {
                /* A line already exceeds the limit: handled in process_lines. */
            } else {
                size_t grow = ncap - s->icap;
                if (s->usage->input_bytes + grow > (size_t)D->cfg.input_bytes_per_uid) {
                    fail_limit(s, "input_bytes_per_uid",
                               (long long)D->cfg.input_bytes_per_uid,
                               "too much unparsed input for this uid");
                    return;
                }
                char *nb;
                if (!s->ibuf && ncap == IBUF_INITIAL && spare_ibuf) {
                    nb = spare_ibuf;
                    spare_ibuf = NULL;
                } else {
                    nb = realloc(s->ibuf, ncap);
                }
                if (!nb) {
                    session_close(s, 0);
                    return;
                }
                s->ibuf = nb;
                s->icap = ncap;
                s->usage->input_bytes += grow;
            }
        }
        ssize_t r = recv(s->fd, s->ibuf + s->ilen, s->icap - s->ilen, MSG_DONTWAIT);
        if (r == 0) {
            session_close(s, 0);
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            session_close(s, 0);
            return;
        }
        s->ilen += (size_t)r;
        s->last_active = ev_now(D->loop);
        if (process_lines(s)) {
            mark_busy(s);
            return;
        }
        if (s->flags & (SESS_CLOSE_ASAP | SESS_CLOSE_AFTER_WRITE | SESS_CONGESTED))
            return; /* congested: stop taking requests until the client reads */
        if ((size_t)r < 4096)
            return;
    }
}

/* The parser thread's value for a line of session id (parse.h). */
static void line_parsed(uint64_t id, json_t *v, int depth_ok, const json_error_t *jerr)
{
    struct session *s = session_by_id(id);
    if (s)
        session_parsed(s, v, depth_ok, jerr);
    else
        json_decref(v);
}

void session_parsed(struct session *s, json_t *v, int depth_ok, const json_error_t *jerr)
{
    s->parsing = 0;
    if (s->flags & SESS_CLOSE_ASAP) {
        json_decref(v);
        return;
    }
    rpc_handle_value(&s->conn, v, depth_ok, jerr);
    if (s->ilen > 0 || s->conn.cur_batch)
        mark_busy(s);
    if (!(s->flags & SESS_CLOSE_ASAP))
        session_update_watcher_ex(s, (s->flags & SESS_PENDING) != 0);
}

/* The loop had nothing else to do: give each busy session its next slice,
 * oldest first. */
static void work_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    struct session *turn[64];
    size_t n = nbusy < 64 ? nbusy : 64;
    memcpy(turn, busy, n * sizeof(*turn));
    for (size_t i = 0; i < n; i++)
        unmark_busy(turn[i]);
    for (size_t i = 0; i < n; i++) {
        struct session *s = turn[i];
        if (s->flags & SESS_CLOSE_ASAP)
            continue;
        if (process_lines(s))
            mark_busy(s);
        if (!(s->flags & SESS_CLOSE_ASAP))
            session_update_watcher_ex(s, (s->flags & SESS_PENDING) != 0);
    }
    if (nbusy == 0)
        ev_idle_stop(loop, w);
}

/* Closes sessions that did nothing for limits.session_idle_timeout_ms. A
 * session waiting for an answer, following a process or owing a tool result
 * is not idle. */
static void idle_check_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    int64_t ms = D->cfg.session_idle_timeout_ms;
    if (ms <= 0)
        return;
    ev_tstamp now = ev_now(loop);
    for (struct session *s = D->sessions; s; s = s->next) {
        if ((s->flags & (SESS_CLOSE_ASAP | SESS_CLOSE_AFTER_WRITE)) || s->conn.calls ||
            s->conn.fol.subs || s->conn.cur_batch || s->parsing || s->obuf.bytes ||
            toolcall_pending(&s->conn))
            continue;
        if ((now - s->last_active) * 1000.0 >= (double)ms)
            fail_limit(s, "session_idle_timeout_ms", (long long)ms,
                       "session idle for too long");
    }
}

static void session_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct session *s = w->data;
    if (revents & EV_WRITE)
        session_write(s);
    if ((revents & EV_READ) && !(s->flags & SESS_CLOSE_ASAP))
        session_read(s);
    if (!(s->flags & SESS_CLOSE_ASAP))
        session_update_watcher_ex(s, (s->flags & SESS_PENDING) != 0);
}

void sessions_before_sleep(void)
{
    /* Bounded: handles only what was pending when we started. */
    size_t n = npending;
    for (size_t i = 0; i < n; i++) {
        struct session *s = pending[i];
        if (!(s->flags & SESS_CLOSE_ASAP) && s->obuf.bytes > 0)
            session_write(s);
    }
    size_t keep = 0;
    for (size_t i = 0; i < npending; i++) {
        struct session *s = pending[i];
        if (s->flags & SESS_CLOSE_ASAP) {
            session_free(s);
            continue;
        }
        s->flags &= ~SESS_PENDING;
        if (i >= n) {
            pending[keep++] = s; /* became pending while we flushed */
            s->flags |= SESS_PENDING;
        }
    }
    npending = keep;
}
