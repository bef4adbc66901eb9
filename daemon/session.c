/*
 * session.c - client connections: reading request lines, writing replies and
 * notifications through a chunked buffer, watermarks, deferred free.
 */
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "process.h"
#include "rpc.h"
#include "sbx_proto.h"

#define IBUF_INITIAL (16 * 1024)
#define WRITE_PER_ITERATION (1024 * 1024)

/* Sessions that have output to flush or must be freed, linked by pending_next. */
static struct session **pending;
static size_t npending, cappending;

static void session_io_cb(struct ev_loop *loop, ev_io *w, int revents);
static void session_update_watcher(struct session *s);

static void mark_pending(struct session *s)
{
    if (s->flags & SESS_PENDING)
        return;
    if (npending == cappending) {
        size_t ncap = cappending ? cappending * 2 : 64;
        struct session **np = realloc(pending, ncap * sizeof(*np));
        if (!np)
            abort(); /* small allocation: OOM here is fatal by policy */
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

void session_accept(int fd)
{
    if (D->nsessions >= D->cfg.max_sessions || D->draining) {
        /* Tell the client why, best effort, then close: it is not a session. */
        char msg[256];
        int n = snprintf(msg, sizeof(msg),
                         "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":%d,\"message\":"
                         "\"%s\",\"data\":{\"limit\":\"max_sessions\",\"max\":%lld}}}\n",
                         D->draining ? SBX_E_SHUTDOWN : SBX_E_LIMIT,
                         D->draining ? "daemon is shutting down" : "too many sessions",
                         (long long)D->cfg.max_sessions);
        if (send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
            log_debug("refused session: %s", strerror(errno));
        close(fd);
        return;
    }
    struct session *s = calloc(1, sizeof(*s));
    if (!s) {
        close(fd);
        return;
    }
    s->fd = fd;
    s->id = ++D->next_session_id;
    struct ucred cred;
    socklen_t clen = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) {
        s->uid = cred.uid;
        s->gid = cred.gid;
        s->pid = cred.pid;
    } else {
        /* No credentials: treat as the least privileged user. */
        s->uid = (uid_t)-2;
        s->gid = (gid_t)-2;
    }
    s->admin = s->uid == 0 ||
               (D->have_admin_gid && peer_in_group(s->pid, s->gid, D->admin_gid));
    obuf_init(&s->obuf);
    s->tool_calls = json_object();
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
    } else if ((s->flags & SESS_CONGESTED) && s->obuf.bytes < high / 2) {
        s->flags &= ~SESS_CONGESTED;
        process_session_writable(s);
    }
}

static void append_line(struct session *s, const char *data, size_t len)
{
    if (s->flags & SESS_CLOSE_ASAP)
        return;
    if (obuf_append(&s->obuf, data, len) < 0 || obuf_append(&s->obuf, "\n", 1) < 0) {
        log_error("session %llu: out of memory for output", (unsigned long long)s->id);
        session_close(s, 0);
        return;
    }
    if (s->obuf.bytes > (size_t)D->cfg.session_output_hard) {
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
    char *text = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) {
        log_error("session %llu: cannot encode a message", (unsigned long long)s->id);
        return;
    }
    append_line(s, text, strlen(text));
    free(text);
}

void session_send_line(struct session *s, const char *text, size_t len)
{
    if (s && !(s->flags & SESS_CLOSE_ASAP))
        append_line(s, text, len);
}

void session_notify(struct session *s, const char *method, json_t *params)
{
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params",
                            params ? params : json_object());
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
    ev_io_stop(D->loop, &s->io);
    mark_pending(s);
}

static void session_free(struct session *s)
{
    log_debug("session %llu closed", (unsigned long long)s->id);
    rpc_session_gone(s);
    process_session_gone(s);
    ev_io_stop(D->loop, &s->io);
    close(s->fd);
    if (s->prev)
        s->prev->next = s->next;
    else
        D->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    D->nsessions--;
    obuf_deinit(&s->obuf);
    free(s->ibuf);
    json_decref(s->tool_calls);
    free(s);
}

void session_free_all(void)
{
    while (D->sessions)
        session_free(D->sessions);
    npending = 0;
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
    if (!(s->flags & (SESS_CLOSE_AFTER_WRITE | SESS_CONGESTED)))
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
            log_debug("session %llu: write: %s", (unsigned long long)s->id, strerror(errno));
            session_close(s, 0);
            return;
        }
        obuf_consume(&s->obuf, (size_t)w);
        written += (size_t)w;
    }
    if (s->obuf.bytes == 0 && (s->flags & SESS_CLOSE_AFTER_WRITE)) {
        session_close(s, 0);
        return;
    }
    update_congestion(s);
    session_update_watcher(s);
}

static void session_read(struct session *s)
{
    size_t max = (size_t)D->cfg.max_message_bytes;
    /* Read a bounded amount per event so one chatty client can't starve others. */
    for (int rounds = 0; rounds < 16; rounds++) {
        if (s->flags & (SESS_CLOSE_ASAP | SESS_CLOSE_AFTER_WRITE))
            return;
        if (s->icap - s->ilen < 4096) {
            size_t ncap = s->icap ? s->icap * 2 : IBUF_INITIAL;
            if (ncap > max + 4096)
                ncap = max + 4096;
            if (ncap <= s->icap) {
                /* A line already exceeds the limit: handled below. */
            } else {
                char *nb = realloc(s->ibuf, ncap);
                if (!nb) {
                    session_close(s, 0);
                    return;
                }
                s->ibuf = nb;
                s->icap = ncap;
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
        /* Hand out complete lines. */
        size_t start = 0;
        for (;;) {
            char *nl = memchr(s->ibuf + s->iscan, '\n', s->ilen - s->iscan);
            if (!nl) {
                s->iscan = s->ilen;
                break;
            }
            size_t end = (size_t)(nl - s->ibuf);
            size_t len = end - start;
            if (len > max) {
                /* Over the limit even though the newline arrived. */
                s->iscan = start;
                break;
            }
            rpc_handle_line(s, s->ibuf + start, len);
            start = end + 1;
            s->iscan = start;
            if (s->flags & (SESS_CLOSE_ASAP | SESS_CLOSE_AFTER_WRITE))
                return;
        }
        if (start > 0) {
            memmove(s->ibuf, s->ibuf + start, s->ilen - start);
            s->ilen -= start;
            s->iscan -= start;
        }
        if (s->ilen == 0 && s->icap > 0) {
            /* Idle sessions hold no input buffer (Redis frees idle query
             * buffers too): a thousand idle clients cost a thousand structs,
             * not a thousand 16 KiB buffers. */
            free(s->ibuf);
            s->ibuf = NULL;
            s->icap = 0;
            s->iscan = 0;
        }
        if (s->ilen > max) {
            json_t *msg = json_pack("{s:s, s:n, s:{s:i, s:s, s:{s:I}}}", "jsonrpc", "2.0", "id",
                                    "error", "code", SBX_E_TOO_LARGE, "message",
                                    "message too large", "data", "max", (json_int_t)max);
            session_send(s, msg);
            json_decref(msg);
            log_warn("session %llu: message over %zu bytes, closing", (unsigned long long)s->id,
                     max);
            session_close(s, 1);
            return;
        }
        if (s->flags & SESS_CONGESTED)
            return; /* stop taking requests until the client reads */
        if ((size_t)r < 4096)
            return;
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
