/* chan.c - worker channel framing on the daemon side; see chan.h. */
#include "io/chan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "daemon.h"
#include "io/jdepth.h"
#include "log.h"
#include "sbx_proto.h"

#define CHAN_WLIMIT (32u * 1024 * 1024)
#define CHAN_READ_ROUNDS 16

static void chan_update(struct chan *ch);

static void fail(struct chan *ch, const char *why)
{
    if (ch->closed)
        return;
    chan_close(ch);
    if (ch->on_close)
        ch->on_close(ch, why, ch->data);
}

/* Parses complete frames from rbuf; keeps the rest. */
static int parse(struct chan *ch)
{
    size_t off = 0;
    while (!ch->closed && ch->rlen - off >= SBX_CHAN_HDR) {
        struct sbx_chan_hdr h;
        if (sbx_chan_hdr_decode(&h, ch->rbuf + off) < 0) {
            fail(ch, "invalid frame header");
            return -1;
        }
        if (ch->rlen - off < SBX_CHAN_HDR + h.len)
            break;
        ch->on_frame(ch, &h, ch->rbuf + off + SBX_CHAN_HDR, ch->data);
        off += SBX_CHAN_HDR + h.len;
    }
    if (ch->closed)
        return -1;
    if (off > 0) {
        memmove(ch->rbuf, ch->rbuf + off, ch->rlen - off);
        ch->rlen -= off;
    }
    return 0;
}

static int ensure_room(struct chan *ch, size_t want)
{
    if (ch->rcap - ch->rlen >= want)
        return 0;
    size_t ncap = ch->rcap ? ch->rcap : 64 * 1024;
    while (ncap - ch->rlen < want)
        ncap *= 2;
    /* A frame is at most header + 1 MiB, so this never passes ~2 MiB. */
    uint8_t *nb = realloc(ch->rbuf, ncap);
    if (!nb)
        return -1;
    ch->rbuf = nb;
    ch->rcap = ncap;
    return 0;
}

int chan_feed(struct chan *ch, const uint8_t *data, size_t len)
{
    while (len > 0 && !ch->closed) {
        size_t room = SBX_CHAN_HDR + SBX_CHAN_MAX_PAYLOAD + 64 * 1024;
        size_t take = len < room ? len : room;
        if (ensure_room(ch, take) < 0) {
            fail(ch, "out of memory");
            return -1;
        }
        memcpy(ch->rbuf + ch->rlen, data, take);
        ch->rlen += take;
        data += take;
        len -= take;
        if (parse(ch) < 0)
            return -1;
    }
    return ch->closed ? -1 : 0;
}

static void do_write(struct chan *ch)
{
    while (ch->wbuf.bytes > 0) {
        struct iovec iov[32];
        int n = obuf_iov(&ch->wbuf, iov, 32);
        ssize_t w = writev(ch->fd, iov, n);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            fail(ch, "write failed");
            return;
        }
        obuf_consume(&ch->wbuf, (size_t)w);
    }
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct chan *ch = w->data;
    if (revents & EV_WRITE)
        do_write(ch);
    for (int i = 0;
         i < CHAN_READ_ROUNDS && (revents & EV_READ) && !ch->closed && !ch->paused; i++) {
        if (ensure_room(ch, 64 * 1024) < 0) {
            fail(ch, "out of memory");
            return;
        }
        size_t asked = ch->rcap - ch->rlen;
        ssize_t r = read(ch->fd, ch->rbuf + ch->rlen, asked);
        if (r == 0) {
            fail(ch, "channel closed by the worker");
            return;
        }
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            fail(ch, "read failed");
            return;
        }
        ch->rlen += (size_t)r;
        if (parse(ch) < 0)
            return;
        /* A short read emptied the socket: another read would only say
         * EAGAIN (epoll is level-triggered; more data wakes us again). */
        if ((size_t)r < asked)
            break;
    }
    if (!ch->closed)
        chan_update(ch);
}

static void chan_update(struct chan *ch)
{
    if (ch->fd < 0 || ch->closed)
        return;
    int ev = (ch->paused ? 0 : EV_READ) | (ch->wbuf.bytes ? EV_WRITE : 0);
    if (ev == ch->io_events)
        return;
    ev_io_stop(D->loop, &ch->io);
    ev_io_set(&ch->io, ch->fd, ev);
    ch->io_events = ev;
    if (ev)
        ev_io_start(D->loop, &ch->io);
}

void chan_init_fd(struct chan *ch, int fd, chan_frame_cb on_frame, chan_close_cb on_close,
                  void *data)
{
    memset(ch, 0, sizeof(*ch));
    ch->fd = fd;
    ch->on_frame = on_frame;
    ch->on_close = on_close;
    ch->data = data;
    ch->wlimit = CHAN_WLIMIT;
    obuf_init(&ch->wbuf);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    ev_io_init(&ch->io, io_cb, fd, EV_READ);
    ch->io.data = ch;
    ch->io_events = EV_READ;
    ev_io_start(D->loop, &ch->io);
}

void chan_init_fed(struct chan *ch, chan_frame_cb on_frame, chan_close_cb on_close,
                   void *data)
{
    memset(ch, 0, sizeof(*ch));
    ch->fd = -1;
    ch->on_frame = on_frame;
    ch->on_close = on_close;
    ch->data = data;
    ch->wlimit = CHAN_WLIMIT;
    obuf_init(&ch->wbuf);
}

void chan_close(struct chan *ch)
{
    if (ch->closed)
        return;
    ch->closed = 1;
    if (ch->fd >= 0) {
        ev_io_stop(D->loop, &ch->io);
        close(ch->fd);
        ch->fd = -1;
    }
}

void chan_deinit(struct chan *ch)
{
    chan_close(ch);
    obuf_deinit(&ch->wbuf);
    free(ch->rbuf);
    ch->rbuf = NULL;
    ch->rlen = ch->rcap = 0;
}

int chan_send(struct chan *ch, uint8_t type, uint32_t proc, const void *payload,
              size_t len)
{
    if (ch->closed || len > SBX_CHAN_MAX_PAYLOAD)
        return -1;
    if (ch->wbuf.bytes + len > ch->wlimit)
        return -1;
    uint8_t hdr[SBX_CHAN_HDR];
    sbx_chan_hdr_encode(hdr, type, proc, (uint32_t)len);
    if (obuf_append(&ch->wbuf, hdr, sizeof(hdr)) < 0 ||
        (len && obuf_append(&ch->wbuf, payload, len) < 0))
        return -1;
    if (ch->fd >= 0) {
        /* Write now: the common case is a small frame that fits at once,
         * and latency is what an exec round trip is made of. */
        do_write(ch);
        chan_update(ch);
    }
    return ch->closed ? -1 : 0;
}

int chan_send_json(struct chan *ch, uint8_t type, uint32_t proc, json_t *payload)
{
    char *s = json_dumps(payload, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return -1;
    int r = chan_send(ch, type, proc, s, strlen(s));
    free(s);
    return r;
}

int chan_send_u32(struct chan *ch, uint8_t type, uint32_t proc, uint32_t v)
{
    uint8_t b[4];
    sbx_chan_put_u32(b, v);
    return chan_send(ch, type, proc, b, 4);
}

size_t chan_pending_output(const struct chan *ch)
{
    return ch->wbuf.bytes;
}

void chan_reset_input(struct chan *ch)
{
    ch->rlen = 0;
}

json_t *chan_json(const uint8_t *payload, size_t len)
{
    json_t *v =
        json_loadb((const char *)payload, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (v && !jdepth_ok(v, 0, SBX_MAX_JSON_DEPTH)) {
        json_decref(v);
        return NULL;
    }
    return v;
}
