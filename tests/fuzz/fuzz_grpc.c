/*
 * fuzz_grpc.c - gRPC framing of responses, as grpc.c receives them from
 * libcurl: response header lines (grpc-status, grpc-message with its
 * percent-decoding, grpc-encoding), body chunks cut anywhere (the 5-byte
 * message prefix, compression flag, size limit, one message for unary
 * calls), the end of the transfer (status from trailers, HTTP or transport;
 * "response ended inside a message"), pausing and resuming a stream from
 * its message callback, and the channel's token fetch (its reply handed to
 * the owner's parse hook; Modal's own token parsing is fuzzed in
 * fuzz_modal.c). grpc.c's call record and receive path come from its
 * internal header (grpc_int.h); calls are linked into a real channel but never sent (no
 * retry, no token fetch), so no network is used. grpc-status-details-bin header lines
 * reach the RPCRetryPolicy parser through on_header; the whole input is also given to
 * grpc_retry_policy_parse as base64 text.
 *
 * Input: byte 0 = kind (0 unary, 1 stream, 2 token fetch), byte 1 = HTTP
 * status class and end code, then records [type][u16 len][bytes]: type
 * even = a header line, odd = a body chunk; a chunk whose first byte is
 * 0xff also pauses the stream at its next message and resumes after it.
 */
#include <stdio.h>

#include "fuzz_daemon.h"
#include "providers/modal/grpc_int.h"
#include "xalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct grpc_chan chan;
static int pause_next;
static size_t msgs;

static void on_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    msgs++;
    if (len > chan.max_msg)
        abort();
    if (pause_next) {
        pause_next = 0;
        grpc_call_pause(c);
    }
}

static void on_done(struct grpc_call *c, const struct grpc_status *st, const uint8_t *msg,
                    size_t len, void *privdata)
{
    if (!st->message)
        abort();
    if (st->code == GRPC_OK && c->unary && !msg && len)
        abort();
}

/* The owner's token hook: the whole reply is the token. */
static char *token_parse(const uint8_t *msg, size_t len, double *refresh_in_s,
                         void *privdata)
{
    *refresh_in_s = 60;
    return len ? strndup((const char *)msg, len) : NULL;
}

/* call_new without call_begin: linked into the channel, never sent. */
static struct grpc_call *fz_call(int kind)
{
    struct grpc_call *c = xcalloc(1, sizeof(*c));
    c->ch = &chan;
    snprintf(c->method, sizeof(c->method), "%s", kind == 2 ? "TokenGet" : "Fuzz");
    c->url = xasprintf("%s/%s/%s", chan.base_url, chan.service, c->method);
    c->unary = kind != 1;
    c->is_token = kind == 2;
    c->attempt = MAX_RETRIES; /* a retry would send */
    c->on_msg = kind == 1 ? on_msg : NULL;
    c->on_done = kind == 2 ? grpc_token_done : on_done;
    c->privdata = kind == 2 ? (void *)&chan : NULL;
    c->grpc_status = -1;
    c->state = CS_SENDING;
    ev_init(&c->timer, grpc_call_retry_cb);
    c->timer.data = c;
    c->next = chan.calls;
    if (chan.calls)
        chan.calls->prev = c;
    chan.calls = c;
    if (kind == 2)
        chan.token_call = c;
    return c;
}

/* Resuming outside libcurl may finish (and free) the call, as it would
 * after cancelling its transfer: then there is no grpc_call_req_done either. */
static int alive(const struct grpc_call *c)
{
    for (struct grpc_call *x = chan.calls; x; x = x->next)
        if (x == c)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_daemon_setup();
    if (!chan.base_url) {
        sbx_err_t err = {0};
        if (grpc_chan_init(&chan, D->loop, "http://127.0.0.1:9", "fuzz.Service", &err) <
            0)
            abort();
        grpc_chan_set_token(&chan, "TokenGet", token_parse, NULL);
        chan.max_msg = 64 * 1024; /* small, so that the limit is reachable */
    }
    double secs = -1;
    if (grpc_retry_policy_parse((const char *)data, size, &secs) == 0 &&
        !(secs >= 0 && secs <= 3600))
        abort();
    if (size < 2)
        return 0;
    int kind = data[0] % 3;
    static const long https[] = {200, 200, 200, 400, 401, 404, 429, 500, 502, 503, 0};
    long http = https[(data[1] >> 4) % (sizeof(https) / sizeof(https[0]))];
    CURLcode rc = data[1] & 8 ? CURLE_RECV_ERROR : CURLE_OK;
    data += 2;
    size -= 2;
    msgs = 0;
    pause_next = 0;

    struct grpc_call *c = fz_call(kind);
    int aborted = 0;
    size_t off = 0;
    while (off + 3 <= size && !aborted && alive(c)) {
        uint8_t type = data[off];
        size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
        off += 3;
        if (len > size - off)
            len = size - off;
        const char *d = (const char *)data + off;
        off += len;
        if (type % 2 == 0) {
            grpc_call_on_header(NULL, d, len, c);
            continue;
        }
        int pausing = len > 0 && (uint8_t)d[0] == 0xff;
        if (pausing)
            pause_next = 1;
        size_t r = grpc_call_on_data(NULL, d, len, c);
        if (r == CURL_WRITEFUNC_PAUSE) {
            grpc_call_resume(c); /* the owner drained its queue */
            continue;
        }
        if (r != len)
            aborted = 1; /* libcurl ends the transfer: req_done follows */
        else if (c->paused)
            grpc_call_resume(c);
    }
    /* The transfer ends; a held stream finishes when resumed. */
    if (alive(c))
        grpc_call_req_done(NULL, rc, http, "fuzz", c);
    while (chan.calls) {
        struct grpc_call *x = chan.calls;
        if (x->state == CS_HELD && x->paused) {
            grpc_call_resume(x);
            if (chan.calls == x && x->paused)
                grpc_call_cancel(x);
        } else {
            grpc_call_cancel(x);
        }
    }
    free(chan.token);
    chan.token = NULL;
    return 0;
}
