/*
 * mcp_stdio.c - MCP's stdio transport (mcp_stdio.h): lines in from stdin,
 * lines out to stdout, both non-blocking on the loop, with backpressure on
 * the client while stdout is full.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp_stdio.h"

#define IN_CHUNK (64 * 1024)

static void out_flush(struct mstdio *s)
{
    while (s->out.len > 0) {
        ssize_t n = write(1, s->out.p, s->out.len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!ev_is_active(&s->out_w))
                ev_io_start(s->loop, &s->out_w);
            return;
        }
        if (n <= 0) {
            /* The client is gone: nobody reads our answers any more. */
            if (!s->quiet)
                mcp_log("stdout: %s", n < 0 ? strerror(errno) : "closed");
            s->out.len = 0;
            ev_io_stop(s->loop, &s->out_w);
            s->in_eof = 1;
            s->cb.closed(s->data);
            return;
        }
        memmove(s->out.p, s->out.p + n, s->out.len - (size_t)n);
        s->out.len -= (size_t)n;
    }
    ev_io_stop(s->loop, &s->out_w);
    /* Below half the mark: read requests again. */
    if (s->in_paused && s->out.len < MSTDIO_HIGH / 2 && !s->in_eof) {
        s->in_paused = 0;
        ev_io_start(s->loop, &s->in_w);
    }
    s->cb.drained(s->data);
}

static void out_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)revents;
    out_flush(w->data);
}

void mstdio_send(struct mstdio *s, const char *text, size_t len)
{
    if (mbuf_append(&s->out, text, len, (size_t)-1) != len ||
        mbuf_append(&s->out, "\n", 1, (size_t)-1) != 1)
        mcp_log("out of memory queueing a message");
    if (s->out.len > MSTDIO_HIGH && !s->in_paused) {
        s->in_paused = 1;
        ev_io_stop(s->loop, &s->in_w);
    }
    out_flush(s);
}

size_t mstdio_queued(const struct mstdio *s)
{
    return s->out.len;
}

int mstdio_congested(const struct mstdio *s)
{
    return s->out.len > MSTDIO_HIGH / 2;
}

int mstdio_gone(const struct mstdio *s)
{
    return s->in_eof;
}

void mstdio_stop_reading(struct mstdio *s)
{
    ev_io_stop(s->loop, &s->in_w);
}

static void in_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct mstdio *s = w->data;
    (void)loop;
    (void)revents;

    if (s->in.cap < s->in.len + IN_CHUNK + 1) {
        char *p = realloc(s->in.p, s->in.len + IN_CHUNK + 1);
        if (!p) {
            mcp_log("out of memory reading stdin");
            return;
        }
        s->in.p = p;
        s->in.cap = s->in.len + IN_CHUNK + 1;
    }
    ssize_t n = read(0, s->in.p + s->in.len, IN_CHUNK);
    if (n < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
            return;
        mcp_log("stdin: %s", strerror(errno));
    }
    if (n <= 0) {
        ev_io_stop(s->loop, &s->in_w);
        s->in_eof = 1;
        s->cb.closed(s->data);
        return;
    }
    size_t start = s->in.len;
    s->in.len += (size_t)n;

    /* Every complete line in what came in; bounded by this read. */
    size_t from = 0;
    for (size_t i = start; i < s->in.len; i++) {
        if (s->in.p[i] != '\n')
            continue;
        if (s->discarding)
            s->discarding = 0;
        else if (i - from > s->max_message)
            s->cb.too_long(s->data);
        else
            s->cb.line(s->data, s->in.p + from, i - from);
        from = i + 1;
    }
    memmove(s->in.p, s->in.p + from, s->in.len - from);
    s->in.len -= from;
    if (s->in.len > s->max_message) {
        if (!s->discarding)
            s->cb.too_long(s->data);
        s->discarding = 1;
        s->in.len = 0;
    }
    /* Keep the buffer small between messages. */
    if (s->in.len == 0 && s->in.cap > 4 * IN_CHUNK) {
        free(s->in.p);
        s->in.p = NULL;
        s->in.cap = 0;
    }
}

static void set_nonblock(int fd, int *flags0)
{
    *flags0 = fcntl(fd, F_GETFL);
    if (*flags0 >= 0)
        fcntl(fd, F_SETFL, *flags0 | O_NONBLOCK);
}

void mstdio_init(struct mstdio *s, struct ev_loop *loop, size_t max_message,
                 const struct mstdio_cbs *cb, void *data)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    s->max_message = max_message;
    s->cb = *cb;
    s->data = data;
    set_nonblock(0, &s->in_flags0);
    set_nonblock(1, &s->out_flags0);
    ev_io_init(&s->in_w, in_cb, 0, EV_READ);
    ev_io_init(&s->out_w, out_cb, 1, EV_WRITE);
    s->in_w.data = s->out_w.data = s;
    ev_io_start(loop, &s->in_w);
}

void mstdio_fini(struct mstdio *s)
{
    ev_io_stop(s->loop, &s->in_w);
    ev_io_stop(s->loop, &s->out_w);
    if (s->in_flags0 >= 0)
        fcntl(0, F_SETFL, s->in_flags0);
    if (s->out_flags0 >= 0)
        fcntl(1, F_SETFL, s->out_flags0);
    mbuf_free(&s->in);
    mbuf_free(&s->out);
}
