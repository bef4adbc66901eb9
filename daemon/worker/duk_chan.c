/*
 * duk_chan.c - the worker's side of the channel (proto/CHANNEL.md): blocking
 * frame I/O and per-process output credit.
 *
 * The worker is its own process with a single channel, so plain blocking
 * reads and writes are the simplest correct thing: while JS waits for credit,
 * a tool result or stdin, the worker reads frames and serves them
 * (dukw_pump_nested) until what it waits for arrives.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "worker/duk_worker_int.h"

/* ---- sending --------------------------------------------------------------- */

void dukw_send(struct dukw *w, uint8_t type, uint32_t proc, const void *data, size_t len)
{
    uint8_t hdr[SBX_CHAN_HDR];
    struct iovec iov[2];
    struct iovec *v = iov;
    int cnt = len ? 2 : 1;

    if (len > SBX_CHAN_MAX_PAYLOAD) { /* a bug in a caller: never break the framing */
        static const char msg[] = "worker bug: oversized frame dropped";
        dukw_send(w, SBX_CHAN_LOG, 0, msg, sizeof(msg) - 1);
        return;
    }
    sbx_chan_hdr_encode(hdr, type, proc, (uint32_t)len);
    iov[0].iov_base = hdr;
    iov[0].iov_len = sizeof(hdr);
    iov[1].iov_base = (void *)data;
    iov[1].iov_len = len;
    /* Header and payload go out in one writev; short writes are resumed. */
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

void dukw_send_json(struct dukw *w, uint8_t type, uint32_t proc, json_t *json)
{
    char *s = json_dumps(json, JSON_COMPACT | JSON_ENCODE_ANY);

    if (!s)
        return;
    dukw_send(w, type, proc, s, strlen(s));
    free(s);
}

void dukw_log(struct dukw *w, const char *fmt, ...)
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
    dukw_send(w, SBX_CHAN_LOG, 0, buf, (size_t)n);
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

int dukw_recv(struct dukw *w, struct sbx_chan_hdr *hdr, uint8_t **payload_out)
{
    uint8_t raw[SBX_CHAN_HDR];
    uint8_t *payload;
    ssize_t r;

    *payload_out = NULL;
    r = read_full(w->fd, raw, sizeof(raw));
    if (r == 0)
        return 1;
    if (r != (ssize_t)sizeof(raw))
        return -1;
    if (sbx_chan_hdr_decode(hdr, raw) < 0)
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

/*
 * Serves whatever frames are already waiting. A program that prints a lot
 * with credit to spare never blocks, so without this the daemon's CREDITs
 * and PINGs would pile up unread in the socket (and a daemon with blocking
 * writes would deadlock against us). The daemon writes whole frames, so a
 * readable channel means a frame that arrives promptly.
 */
static void drain_input(struct dukw *w)
{
    struct pollfd p = {w->fd, POLLIN, 0};
    int budget = 64; /* bounded: output must make progress too */

    while (budget-- > 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)))
        dukw_pump_nested(w);
}

void dukw_output(struct dukw *w, uint8_t type, const uint8_t *data, size_t len)
{
    uint32_t proc = w->proc;

    if (proc == 0)
        return; /* e.g. a getter run by SNAPSHOT between processes */
    while (len > 0) {
        size_t n = len;

        while (w->credit == 0)
            dukw_pump_nested(w);
        if (n > w->credit)
            n = (size_t)w->credit;
        if (n > SBX_CHAN_MAX_PAYLOAD)
            n = SBX_CHAN_MAX_PAYLOAD;
        dukw_send(w, type, proc, data, n);
        w->credit -= n;
        data += n;
        len -= n;
        drain_input(w);
    }
}

void dukw_output_cesu8(struct dukw *w, uint8_t type, const uint8_t *s, size_t len)
{
    /* On the stack, not static: output may nest (a getter logging while a
     * SNAPSHOT is served during a credit wait). */
    uint8_t buf[64 * 1024];
    size_t pos = 0;

    if (w->proc == 0)
        return;
    while (pos < len) {
        size_t n = dukw_utf8_from_cesu8(buf, sizeof(buf), s, len, &pos);
        dukw_output(w, type, buf, n);
    }
}
