/*
 * jsw_chan.c - the js worker's side of the channel (proto/CHANNEL.md):
 * blocking frame I/O, messages larger than one frame (MORE), and output
 * credit. The worker has one channel and runs one program, so blocking
 * reads are the simplest correct thing: while a console call waits for
 * credit the worker serves frames from inside it.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "jsworker/jsw.h"

/* ---- sending --------------------------------------------------------------- */

void jsw_send(struct jsw *w, uint8_t type, uint32_t proc, const void *data, size_t len)
{
    uint8_t hdr[SBX_CHAN_HDR];
    struct iovec iov[2];
    struct iovec *v = iov;
    int cnt = len ? 2 : 1;

    if (len > SBX_CHAN_MAX_PAYLOAD) { /* a caller's bug: never break the framing */
        static const char msg[] = "worker bug: oversized frame dropped";
        jsw_send(w, SBX_CHAN_LOG, 0, msg, sizeof(msg) - 1);
        return;
    }
    sbx_chan_hdr_encode(hdr, type, proc, (uint32_t)len);
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    while (cnt > 0) {
        ssize_t r = writev(w->fd, v, cnt);
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

void jsw_send_big(struct jsw *w, uint8_t type, uint32_t proc, const void *data, size_t len)
{
    const uint8_t *d = data;

    while (len > SBX_CHAN_MAX_PAYLOAD) {
        jsw_send(w, SBX_CHAN_MORE, proc, d, SBX_CHAN_MAX_PAYLOAD);
        d += SBX_CHAN_MAX_PAYLOAD;
        len -= SBX_CHAN_MAX_PAYLOAD;
    }
    jsw_send(w, type, proc, d, len);
}

void jsw_send_json(struct jsw *w, uint8_t type, uint32_t proc, json_t *json)
{
    char *s = json_dumps(json, JSON_COMPACT | JSON_ENCODE_ANY);

    if (!s)
        return;
    jsw_send_big(w, type, proc, s, strlen(s));
    free(s);
}

void jsw_log(struct jsw *w, const char *fmt, ...)
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
    jsw_send(w, SBX_CHAN_LOG, 0, buf, (size_t)n);
}

/* ---- receiving ------------------------------------------------------------- */

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

int jsw_recv(struct jsw *w, struct sbx_chan_hdr *hdr, uint8_t **payload_out)
{
    uint8_t raw[SBX_CHAN_HDR];
    uint8_t *payload;
    ssize_t r;

    *payload_out = NULL;
    r = read_full(w->fd, raw, sizeof(raw));
    if (r == 0)
        return 1;
    if (r != (ssize_t)sizeof(raw) || sbx_chan_hdr_decode(hdr, raw) < 0)
        return -1;
    payload = malloc((size_t)hdr->len + 1);
    if (!payload)
        return -1;
    if (hdr->len > 0 && read_full(w->fd, payload, hdr->len) != (ssize_t)hdr->len) {
        free(payload);
        return -1;
    }
    payload[hdr->len] = '\0';
    *payload_out = payload;
    return 0;
}

/* ---- program output ------------------------------------------------------- */

/* Serves frames already waiting (credit, PING), bounded, so a program that
 * prints with credit to spare does not let them pile up unread. */
static void drain_input(struct jsw *w)
{
    struct pollfd p = {w->fd, POLLIN, 0};
    int budget = 64;

    while (budget-- > 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)))
        jsw_pump(w);
}

void jsw_output(struct jsw *w, uint8_t type, const uint8_t *data, size_t len)
{
    uint32_t proc = w->proc;

    if (proc == 0)
        return;
    while (len > 0) {
        size_t n = len;

        while (w->credit == 0 && w->proc == proc)
            jsw_pump(w);
        if (w->proc != proc)
            return;
        if (n > w->credit)
            n = (size_t)w->credit;
        if (n > SBX_CHAN_MAX_PAYLOAD)
            n = SBX_CHAN_MAX_PAYLOAD;
        jsw_send(w, type, proc, data, n);
        w->credit -= n;
        data += n;
        len -= n;
        drain_input(w);
    }
}
