/*
 * wk_chan.c - the workers' side of the channel (proto/CHANNEL.md): blocking
 * frame I/O. A worker is its own process with a single channel, so plain
 * blocking reads and writes are the simplest correct thing.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "workers/common/wk.h"

/* ---- sending --------------------------------------------------------------- */

void wk_send(int fd, uint8_t type, uint32_t proc, const void *data, size_t len)
{
    uint8_t hdr[SBX_CHAN_HDR];
    struct iovec iov[2];
    struct iovec *v = iov;
    int cnt = len ? 2 : 1;

    if (len > SBX_CHAN_MAX_PAYLOAD) { /* a caller's bug: never break the framing */
        static const char msg[] = "worker bug: oversized frame dropped";
        wk_send(fd, SBX_CHAN_LOG, 0, msg, sizeof(msg) - 1);
        return;
    }
    sbx_chan_hdr_encode(hdr, type, proc, (uint32_t)len);
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    /* Header and payload go out in one writev; short writes are resumed. */
    while (cnt > 0) {
        ssize_t r = writev(fd, v, cnt);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            _exit(0); /* EPIPE and friends: the daemon is gone */
        }
        while (cnt > 0 && (size_t)r >= v->iov_len) {
            r -= (ssize_t)v->iov_len;
            v++;
            cnt--;
        }
        if (cnt > 0) {
            v->iov_base = (uint8_t *)v->iov_base + r;
            v->iov_len -= (size_t)r;
        }
    }
}

void wk_send_big(int fd, uint8_t type, uint32_t proc, const void *data, size_t len)
{
    const uint8_t *d = data;

    while (len > SBX_CHAN_MAX_PAYLOAD) {
        wk_send(fd, SBX_CHAN_MORE, proc, d, SBX_CHAN_MAX_PAYLOAD);
        d += SBX_CHAN_MAX_PAYLOAD;
        len -= SBX_CHAN_MAX_PAYLOAD;
    }
    wk_send(fd, type, proc, d, len);
}

static void send_json(int fd, uint8_t type, uint32_t proc, json_t *json, int split)
{
    char *s = json_dumps(json, JSON_COMPACT | JSON_ENCODE_ANY);

    if (!s)
        return;
    if (split)
        wk_send_big(fd, type, proc, s, strlen(s));
    else
        wk_send(fd, type, proc, s, strlen(s));
    free(s);
}

void wk_send_json(int fd, uint8_t type, uint32_t proc, json_t *json)
{
    send_json(fd, type, proc, json, 0);
}

void wk_send_json_big(int fd, uint8_t type, uint32_t proc, json_t *json)
{
    send_json(fd, type, proc, json, 1);
}

void wk_send_error(int fd, const char *msg)
{
    json_t *j = json_pack("{s:s}", "message", msg);

    if (j)
        wk_send_json(fd, SBX_CHAN_ERROR, 0, j);
    json_decref(j);
}

void wk_log(int fd, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(buf))
        n = sizeof(buf) - 1;
    wk_send(fd, SBX_CHAN_LOG, 0, buf, (size_t)n);
}

/* ---- receiving ------------------------------------------------------------- */

/* Reads up to len bytes; returns the count read (short only at EOF) or -1. */
static ssize_t read_full(int fd, uint8_t *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t r = read(fd, buf + got, len - got);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

int wk_recv(int fd, struct sbx_chan_hdr *hdr, uint8_t **payload_out)
{
    uint8_t raw[SBX_CHAN_HDR];
    uint8_t *payload;
    ssize_t r;

    *payload_out = NULL;
    r = read_full(fd, raw, sizeof(raw));
    if (r == 0)
        return 1;
    if (r != (ssize_t)sizeof(raw) || sbx_chan_hdr_decode(hdr, raw) < 0)
        return -1;
    payload = malloc((size_t)hdr->len + 1);
    if (!payload)
        return -1;
    if (hdr->len > 0 && read_full(fd, payload, hdr->len) != (ssize_t)hdr->len) {
        free(payload);
        return -1;
    }
    payload[hdr->len] = '\0';
    *payload_out = payload;
    return 0;
}

uint8_t *wk_recv_nested(int fd, struct sbx_chan_hdr *hdr)
{
    uint8_t *payload;
    int r = wk_recv(fd, hdr, &payload);

    if (r == 1)
        _exit(0); /* the daemon closed the channel mid-run: nobody to report to */
    if (r < 0) {
        wk_send_error(fd, "invalid frame");
        _exit(1);
    }
    return payload;
}

/* ---- serving frames --------------------------------------------------------- */

void wk_pump(int fd, wk_dispatch_fn *dispatch, void *worker)
{
    struct sbx_chan_hdr h;
    uint8_t *payload = wk_recv_nested(fd, &h);

    dispatch(worker, &h, payload);
    free(payload);
}

int wk_serve(int fd, wk_dispatch_fn *dispatch, void *worker)
{
    return wk_serve_idle(fd, dispatch, NULL, worker);
}

int wk_serve_idle(int fd, wk_dispatch_fn *dispatch, wk_idle_fn *idle, void *worker)
{
    for (;;) {
        struct sbx_chan_hdr h;
        uint8_t *payload;
        if (idle)
            idle(worker);
        int r = wk_recv(fd, &h, &payload);

        if (r == 1)
            return 0;
        if (r < 0) {
            wk_send_error(fd, "invalid frame");
            return 1;
        }
        dispatch(worker, &h, payload);
        free(payload);
    }
}

/* ---- program output ----------------------------------------------------------- */

/*
 * Serves whatever frames are already waiting. A program that prints a lot
 * with credit to spare never blocks, so without this the daemon's CREDITs
 * and PINGs would pile up unread in the socket (and a daemon with blocking
 * writes would deadlock against us). The daemon writes whole frames, so a
 * readable channel means a frame that arrives promptly.
 */
static void drain_input(int fd, wk_dispatch_fn *dispatch, void *worker)
{
    struct pollfd p = {fd, POLLIN, 0};
    int budget = 64; /* bounded: output must make progress too */

    while (budget-- > 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)))
        wk_pump(fd, dispatch, worker);
}

void wk_output(const struct wk_out *o, uint8_t type, const uint8_t *data, size_t len)
{
    uint32_t proc = *o->proc;

    if (proc == 0)
        return; /* e.g. a getter run by SNAPSHOT between processes */
    while (len > 0) {
        size_t n = len;

        while (*o->credit == 0 && *o->proc == proc)
            wk_pump(o->fd, o->dispatch, o->worker);
        if (*o->proc != proc)
            return;
        if (n > *o->credit)
            n = (size_t)*o->credit;
        if (n > SBX_CHAN_MAX_PAYLOAD)
            n = SBX_CHAN_MAX_PAYLOAD;
        wk_send(o->fd, type, proc, data, n);
        *o->credit -= n;
        data += n;
        len -= n;
        drain_input(o->fd, o->dispatch, o->worker);
    }
}
