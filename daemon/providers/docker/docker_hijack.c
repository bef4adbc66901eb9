/*
 * docker_hijack.c - the Engine's upgraded connections ("hijacking"): attach
 * to a container's stdio, or start an exec with its stdio, then a raw byte
 * stream both ways.
 *
 * libcurl has no generic HTTP Upgrade, so the connection is made by libcurl
 * with CURLOPT_CONNECT_ONLY (over the Unix socket, or TCP + TLS with libcurl
 * doing the TLS) and the request is written by hand. The connect is a
 * connect-only curlev request (daemon/io/curlev.c), on a curlev of its own:
 * in the engine's shared one, libcurl's connection cache could take the
 * idle-looking connection with unread input for a dead one and close it.
 * Once connected, the request is held and its socket is watched with an
 * ev_io here, read and written with curlev_req_recv/curlev_req_send, which
 * never block: CURLE_AGAIN means "wait for the socket".
 *
 * Received bytes are Docker stream frames (Tty false): a header of 8 bytes
 * {stream, 0, 0, 0, u32 BE length} and the payload. Payloads are passed on
 * as they arrive, never buffered whole, so a frame's size costs nothing.
 * Reading is bounded per event (HJ_READ_ROUNDS); since TLS may hold
 * decrypted bytes the socket no longer shows, a zero timer continues a read
 * that stopped on the bound or on a resume.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "io/curlev.h"
#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "xalloc.h"

#define HJ_RBUF (64u * 1024)
#define HJ_READ_ROUNDS 16
#define HJ_WRITE_ROUNDS 64
#define HJ_HEAD_MAX 8192
#define HJ_EBODY_MAX (64u * 1024)
#define HJ_ANSWER_TIMEOUT_S 60.0 /* connect + the engine's answer to the request */

enum dkh_state { HJ_CONNECTING, HJ_REQUEST, HJ_HEAD, HJ_ERRBODY, HJ_STREAM, HJ_DEAD };

struct dkh {
    struct dk_engine *e;
    struct curlev ce;       /* the connect; then it holds the connection */
    struct curlev_req *req; /* connect-only, held once connected */
    enum dkh_state st;
    curl_socket_t fd;
    ev_io io;
    int io_events;
    ev_timer kick;
    ev_timer answer; /* until the response head is in */
    char *req_text;  /* the HTTP request, sent once connected */
    size_t req_len, req_off;
    size_t again_len; /* a send that got CURLE_AGAIN is retried with the same length */
    char head[HJ_HEAD_MAX + 1];
    size_t head_len;
    long status;
    long clen;
    char *ebody;
    size_t elen;
    uint8_t *rbuf;
    size_t rpos, rlen;
    struct obuf *out;
    uint8_t fh[8];
    size_t fhl;
    uint32_t left;
    int stream;
    int paused;
    int wshut_wanted, wshut_done;
    int in_cb;
    int closing;
    dkh_open_cb on_open;
    dkh_data_cb on_data;
    dkh_close_cb on_close;
    void *data;
    char errbuf[CURL_ERROR_SIZE];
};

static void dkh_free(struct dkh *h);
static void update_io(struct dkh *h);
static void do_read(struct dkh *h);
static void flush_inner(struct dkh *h);
static void fail_stream(struct dkh *h, const char *why);

/* ---- connect phase ----------------------------------------------------------------- */

/* Calls the open callback. A failure marks h closing; it is freed when the
 * outermost of our own callbacks returns (callers always hold in_cb). */
static void open_result(struct dkh *h, long status, const char *msg)
{
    int ok = status == 101 || status == 200;
    ev_timer_stop(D->loop, &h->answer);
    h->in_cb++;
    if (h->on_open && !h->closing)
        h->on_open(h, status, msg, h->data);
    h->in_cb--;
    if (!ok) {
        h->st = HJ_DEAD;
        h->closing = 1;
    }
}

/* Our own callbacks may close h; it is freed on the next iteration (kick),
 * never inside curlev's done callback: curlev still uses h->ce after it. */
static void reap_later(struct dkh *h)
{
    if (h->io_events)
        ev_io_stop(D->loop, &h->io);
    h->io_events = 0;
    ev_timer_stop(D->loop, &h->kick);
    ev_timer_set(&h->kick, 0., 0.);
    ev_timer_start(D->loop, &h->kick);
}

static void connected(struct curlev_req *r, CURLcode rc, long status, const char *errmsg,
                      void *data)
{
    struct dkh *h = data;
    h->in_cb++;
    if (rc != CURLE_OK) {
        h->req = NULL; /* curlev frees it when we return */
        if (h->st == HJ_CONNECTING) {
            char msg[CURL_ERROR_SIZE + 300];
            snprintf(msg, sizeof(msg), "cannot reach the Docker engine at %.200s: %s",
                     h->e->host, curl_easy_strerror(rc));
            h->st = HJ_DEAD;
            dkapi_engine_failed(h->e, msg);
            open_result(h, 0, msg);
        } else {
            fail_stream(h, errmsg); /* the multi handle failed under a held connection */
        }
    } else {
        curl_socket_t fd = curlev_req_socket(r);
        if (fd == CURL_SOCKET_BAD) {
            h->st = HJ_DEAD;
            open_result(h, 0, "no socket after connect");
        } else {
            h->fd = fd;
            h->st = HJ_REQUEST;
            ev_io_init(&h->io, NULL, fd, 0);
            h->io_events = 0;
            flush_inner(h);
        }
    }
    h->in_cb--;
    if (h->closing)
        reap_later(h);
}

/* ---- raw phase ------------------------------------------------------------------------
 */

static int send_some(struct dkh *h, const char *p, size_t n, size_t *sent)
{
    if (h->again_len && h->again_len <= n)
        n = h->again_len;
    CURLcode rc = curlev_req_send(h->req, p, n, sent);
    if (rc == CURLE_AGAIN) {
        h->again_len = n;
        *sent = 0;
        return 0;
    }
    h->again_len = 0;
    if (rc != CURLE_OK) {
        snprintf(h->errbuf, sizeof(h->errbuf), "send: %s", curl_easy_strerror(rc));
        return -1;
    }
    return 0;
}

static void fail_stream(struct dkh *h, const char *why)
{
    if (h->st == HJ_DEAD)
        return;
    enum dkh_state was = h->st;
    h->st = HJ_DEAD;
    if (was != HJ_STREAM) {
        open_result(h, h->status ? h->status : 0, why);
        return;
    }
    h->in_cb++;
    if (h->on_close && !h->closing)
        h->on_close(h, why, h->data);
    h->in_cb--;
    h->closing = 1;
}

void dkh_flush(struct dkh *h)
{
    if (!h || h->closing)
        return;
    h->in_cb++;
    flush_inner(h);
    h->in_cb--;
    if (h->closing && !h->in_cb)
        dkh_free(h);
}

static void flush_inner(struct dkh *h)
{
    if (h->closing || h->st == HJ_DEAD || h->st == HJ_CONNECTING)
        return;
    int rounds = 0;
    if (h->st == HJ_REQUEST) {
        while (h->req_off < h->req_len && rounds++ < HJ_WRITE_ROUNDS) {
            size_t n = 0;
            if (send_some(h, h->req_text + h->req_off, h->req_len - h->req_off, &n) < 0) {
                fail_stream(h, h->errbuf);
                return;
            }
            if (n == 0)
                break;
            h->req_off += n;
        }
        if (h->req_off == h->req_len)
            h->st = HJ_HEAD;
    }
    if (h->st == HJ_STREAM && h->out) {
        while (h->out->bytes > 0 && rounds++ < HJ_WRITE_ROUNDS) {
            struct iovec iov[1];
            obuf_iov(h->out, iov, 1);
            size_t n = 0;
            if (send_some(h, iov[0].iov_base, iov[0].iov_len, &n) < 0) {
                fail_stream(h, h->errbuf);
                return;
            }
            if (n == 0)
                break;
            obuf_consume(h->out, n);
        }
    }
    if (h->st == HJ_STREAM && h->wshut_wanted && !h->wshut_done &&
        (!h->out || h->out->bytes == 0)) {
        h->wshut_done = 1;
        shutdown(h->fd, SHUT_WR);
    }
    update_io(h);
}

/* Leaving a callback: a close asked for inside it happens now, else the
 * watchers follow the stream's state. */
static void cb_leave(struct dkh *h)
{
    h->in_cb--;
    if (h->closing) {
        if (!h->in_cb)
            dkh_free(h);
        return;
    }
    update_io(h);
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct dkh *h = w->data;
    h->in_cb++;
    if (revents & EV_WRITE)
        dkh_flush(h);
    if ((revents & EV_READ) && !h->closing && h->st != HJ_DEAD)
        do_read(h);
    cb_leave(h);
}

/* An engine that takes the connection but never answers must not hang us. */
static void answer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct dkh *h = w->data;
    h->in_cb++;
    if (h->st == HJ_CONNECTING) {
        h->st = HJ_DEAD;
        open_result(h, 0, "the Docker engine did not answer in time");
    } else if (h->st != HJ_STREAM && h->st != HJ_DEAD) {
        fail_stream(h, "the Docker engine did not answer in time");
    }
    h->in_cb--;
    if (h->closing && !h->in_cb)
        dkh_free(h);
}

static void kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct dkh *h = w->data;
    h->in_cb++;
    do_read(h);
    cb_leave(h);
}

static void update_io(struct dkh *h)
{
    if (h->closing || h->st == HJ_DEAD || h->st == HJ_CONNECTING)
        return;
    int ev = 0;
    if (h->st == HJ_REQUEST || (h->st == HJ_STREAM && h->out && h->out->bytes > 0) ||
        (h->wshut_wanted && !h->wshut_done))
        ev |= EV_WRITE;
    if (h->st == HJ_REQUEST && h->req_off == h->req_len)
        ev &= ~EV_WRITE;
    if (h->st == HJ_HEAD || h->st == HJ_ERRBODY || (h->st == HJ_STREAM && !h->paused))
        ev |= EV_READ;
    if (ev == h->io_events)
        return;
    ev_io_stop(D->loop, &h->io);
    h->io.data = h;
    ev_set_cb(&h->io, io_cb);
    ev_io_set(&h->io, h->fd, ev);
    h->io_events = ev;
    if (ev)
        ev_io_start(D->loop, &h->io);
}

/* Parses the response head; returns 0 when complete, 1 when more is needed, -1 on error.
 */
static int parse_head(struct dkh *h)
{
    h->head[h->head_len] = '\0';
    char *end = strstr(h->head, "\r\n\r\n");
    if (!end)
        return h->head_len >= HJ_HEAD_MAX ? -1 : 1;
    int major = 0, minor = 0;
    long status = 0;
    if (sscanf(h->head, "HTTP/%d.%d %ld", &major, &minor, &status) != 3)
        return -1;
    h->status = status;
    h->clen = -1;
    for (char *l = strstr(h->head, "\r\n"); l && l < end; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "Content-Length:", 15) == 0)
            h->clen = strtol(l + 17, NULL, 10);
    }
    /* Bytes after the head belong to the stream (or the error body). */
    size_t hl = (size_t)(end + 4 - h->head);
    size_t rest = h->head_len - hl;
    memcpy(h->rbuf, h->head + hl, rest);
    h->rpos = 0;
    h->rlen = rest;
    return 0;
}

static void finish_error(struct dkh *h)
{
    char msg[512];
    json_t *j = h->ebody ? json_loadb(h->ebody, h->elen, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(j, "message"));
    if (m)
        snprintf(msg, sizeof(msg), "%s", m);
    else if (h->elen)
        snprintf(msg, sizeof(msg), "%.*s", (int)(h->elen > 300 ? 300 : h->elen),
                 h->ebody);
    else
        snprintf(msg, sizeof(msg), "HTTP status %ld", h->status);
    size_t ml = strlen(msg);
    while (ml > 0 && (msg[ml - 1] == '\n' || msg[ml - 1] == '\r'))
        msg[--ml] = '\0';
    json_decref(j);
    h->st = HJ_DEAD;
    open_result(h, h->status, msg);
}

/* Hands buffered stream bytes to the owner frame by frame; stops on pause. */
static void demux(struct dkh *h)
{
    while (h->rpos < h->rlen && !h->paused && !h->closing && h->st == HJ_STREAM) {
        if (h->fhl < 8) {
            size_t k = 8 - h->fhl;
            if (k > h->rlen - h->rpos)
                k = h->rlen - h->rpos;
            memcpy(h->fh + h->fhl, h->rbuf + h->rpos, k);
            h->fhl += k;
            h->rpos += k;
            if (h->fhl < 8)
                return;
            h->stream = h->fh[0];
            h->left = (uint32_t)h->fh[4] << 24 | (uint32_t)h->fh[5] << 16 |
                      (uint32_t)h->fh[6] << 8 | h->fh[7];
            if (h->fh[1] || h->fh[2] || h->fh[3] || h->stream > 3) {
                fail_stream(h, "invalid stream frame from the engine");
                return;
            }
            if (h->left == 0)
                h->fhl = 0;
            continue;
        }
        size_t k = h->rlen - h->rpos;
        if (k > h->left)
            k = h->left;
        const uint8_t *d = h->rbuf + h->rpos;
        h->rpos += k;
        h->left -= (uint32_t)k;
        int stream = h->stream;
        if (h->left == 0)
            h->fhl = 0;
        if (stream == 3) {
            /* The engine's own error (exec start failures): ends the stream. */
            char why[300];
            snprintf(why, sizeof(why), "engine: %.*s", (int)(k > 250 ? 250 : k),
                     (const char *)d);
            fail_stream(h, why);
            return;
        }
        h->in_cb++;
        if (h->on_data)
            h->on_data(h, stream, d, k, h->data);
        h->in_cb--;
    }
}

static void do_read(struct dkh *h)
{
    for (int round = 0; round < HJ_READ_ROUNDS; round++) {
        if (h->closing || h->st == HJ_DEAD || h->st == HJ_REQUEST)
            return;
        if (h->st == HJ_STREAM) {
            demux(h);
            if (h->paused || h->closing || h->st != HJ_STREAM || h->rpos < h->rlen)
                return;
            h->rpos = h->rlen = 0;
        }
        char *dst;
        size_t room;
        if (h->st == HJ_HEAD) {
            dst = h->head + h->head_len;
            room = HJ_HEAD_MAX - h->head_len;
        } else if (h->st == HJ_ERRBODY) {
            if (!h->ebody)
                h->ebody = xmalloc(HJ_EBODY_MAX);
            dst = h->ebody + h->elen;
            room = HJ_EBODY_MAX - h->elen;
            if (room == 0) {
                finish_error(h);
                return;
            }
        } else {
            dst = (char *)h->rbuf;
            room = HJ_RBUF;
        }
        size_t n = 0;
        CURLcode rc = curlev_req_recv(h->req, dst, room, &n);
        if (rc == CURLE_AGAIN)
            return;
        if (rc != CURLE_OK || n == 0) {
            if (h->st == HJ_ERRBODY) {
                finish_error(h);
                return;
            }
            char why[128];
            snprintf(why, sizeof(why), "%s",
                     rc != CURLE_OK ? curl_easy_strerror(rc)
                                    : "connection closed by the engine");
            fail_stream(h, why);
            return;
        }
        if (h->st == HJ_HEAD) {
            h->head_len += n;
            int r = parse_head(h);
            if (r == 1)
                continue;
            if (r < 0) {
                fail_stream(h, "invalid HTTP answer from the engine");
                return;
            }
            if (h->status == 101 || h->status == 200) {
                h->st = HJ_STREAM;
                open_result(h, h->status, NULL);
                if (h->closing)
                    return;
                dkh_flush(h);
                continue;
            }
            h->st = HJ_ERRBODY;
            if (!h->ebody)
                h->ebody = xmalloc(HJ_EBODY_MAX);
            size_t k = h->rlen < HJ_EBODY_MAX ? h->rlen : HJ_EBODY_MAX;
            memcpy(h->ebody, h->rbuf, k);
            h->elen = k;
            h->rlen = 0;
            if (h->clen >= 0 && (long)h->elen >= h->clen) {
                finish_error(h);
                return;
            }
            continue;
        }
        if (h->st == HJ_ERRBODY) {
            h->elen += n;
            if (h->clen >= 0 && (long)h->elen >= h->clen) {
                finish_error(h);
                return;
            }
            continue;
        }
        h->rpos = 0;
        h->rlen = n;
    }
    /* Read budget spent: continue on the next loop iteration (TLS may hold
     * bytes the socket does not show). */
    if (!h->closing && h->st != HJ_DEAD && !ev_is_active(&h->kick)) {
        ev_timer_set(&h->kick, 0., 0.);
        ev_timer_start(D->loop, &h->kick);
    }
}

/* ---- public
 * ---------------------------------------------------------------------------------- */

struct dkh *dkh_open(struct dk_engine *e, const char *method, const char *path,
                     json_t *body, struct obuf *out, dkh_open_cb on_open,
                     dkh_data_cb on_data, dkh_close_cb on_close, void *data)
{
    struct dkh *h = xcalloc(1, sizeof(*h));
    h->e = e;
    h->out = out;
    h->on_open = on_open;
    h->on_data = on_data;
    h->on_close = on_close;
    h->data = data;
    h->fd = CURL_SOCKET_BAD;
    h->rbuf = xmalloc(HJ_RBUF);
    ev_timer_init(&h->kick, kick_cb, 0., 0.);
    h->kick.data = h;
    ev_timer_init(&h->answer, answer_cb, HJ_ANSWER_TIMEOUT_S, 0.);
    h->answer.data = h;
    ev_timer_start(D->loop, &h->answer);
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    size_t bl = b ? strlen(b) : 0;
    h->req_text = xasprintf(
        "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sbxd/" SBX_VERSION
        "\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n%sContent-Length: %zu\r\n\r\n%s",
        method, path, e->unix_path ? "localhost" : strstr(e->base, "://") + 3,
        b ? "Content-Type: application/json\r\n" : "", bl, b ? b : "");
    free(b);
    h->req_len = strlen(h->req_text);

    if (curlev_init(&h->ce, D->loop) < 0)
        x_oom("curl_multi_init");
    char *url = xasprintf("%s/", e->base);
    h->req = curlev_req_new(&h->ce, "GET", url);
    free(url);
    CURL *easy = curlev_req_easy(h->req);
    if (e->unix_path)
        curlev_req_unix_socket(h->req, e->unix_path);
    dkapi_engine_tls(e, easy);
    curlev_req_connect_only(h->req);
    curlev_req_timeouts(h->req, 0, DK_CONNECT_TIMEOUT_MS);
    curl_easy_setopt(easy, CURLOPT_TCP_NODELAY, 1L);
    /* curl_easy_recv reads at most this much per call (16 KiB by default):
     * a whole rbuf per read takes a quarter of the syscalls on a stream. */
    curl_easy_setopt(easy, CURLOPT_BUFFERSIZE, (long)HJ_RBUF);
    curlev_req_callbacks(h->req, NULL, NULL, connected, h);
    h->st = HJ_CONNECTING;
    if (curlev_req_start(h->req) < 0) {
        h->req = NULL; /* freed by curlev */
        h->st = HJ_DEAD;
        dkh_free(h);
        return NULL;
    }
    /* libcurl armed its timer (0 ms): the connect starts on the next iteration. */
    return h;
}

void dkh_pause(struct dkh *h, int paused)
{
    if (!h || h->closing || h->paused == !!paused)
        return;
    h->paused = !!paused;
    if (!h->paused && h->st == HJ_STREAM && !ev_is_active(&h->kick)) {
        /* Bytes may wait in rbuf or in TLS buffers: look next iteration. */
        ev_timer_set(&h->kick, 0., 0.);
        ev_timer_start(D->loop, &h->kick);
    }
    if (!h->in_cb)
        update_io(h);
}

int dkh_shutdown_write(struct dkh *h)
{
    if (!h || h->closing)
        return -1;
    if (h->e->tls)
        return -1;
    h->wshut_wanted = 1;
    if (!h->in_cb)
        dkh_flush(h);
    return 0;
}

int dkh_streaming(const struct dkh *h)
{
    return h && h->st == HJ_STREAM && !h->closing;
}

void dkh_close(struct dkh *h)
{
    if (!h || h->closing)
        return;
    h->closing = 1;
    h->on_open = NULL;
    h->on_data = NULL;
    h->on_close = NULL;
    if (!h->in_cb)
        dkh_free(h);
}

static void dkh_free(struct dkh *h)
{
    ev_timer_stop(D->loop, &h->answer);
    ev_timer_stop(D->loop, &h->kick);
    if (h->io_events)
        ev_io_stop(D->loop, &h->io);
    h->io_events = 0;
    h->st = HJ_DEAD;
    if (h->req)
        curlev_req_cancel(h->req); /* removes the handle: closes the connection */
    h->req = NULL;
    curlev_deinit(&h->ce);
    free(h->req_text);
    free(h->ebody);
    free(h->rbuf);
    free(h);
}
