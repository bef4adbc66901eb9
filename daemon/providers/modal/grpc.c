/*
 * grpc.c - gRPC over HTTP/2 on curlev; see grpc.h for the contract.
 *
 * A call goes through: QUEUED (waiting for the channel's token) -> SENDING (a
 * curlev transfer runs) -> [RETRY_WAIT -> SENDING ...] -> maybe HELD (the
 * transfer ended while the owner had paused it and parsed messages are still
 * held back) -> finished (on_done, then freed). Owner callbacks run with
 * c->in_cb raised; a cancel during one only marks the call, and whoever
 * raised in_cb frees it when the callback returns.
 */
#include "providers/modal/grpc.h"
#include "providers/modal/grpc_int.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define MAX_GRPC_MESSAGE_TEXT 4096
#define DEFAULT_CONNECT_MS 10000
#define TOKEN_CALL_TIMEOUT_S 30.0

static void call_send(struct grpc_call *c);
static void call_begin(struct grpc_call *c);
static void call_free(struct grpc_call *c);

/* ---- helpers ------------------------------------------------------------- */

const char *grpc_code_name(int code)
{
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    return code >= 0 && code <= 16 ? names[code] : "UNKNOWN";
}

int grpc_code_retryable(int code)
{
    return code == GRPC_CANCELLED || code == GRPC_UNKNOWN ||
           code == GRPC_DEADLINE_EXCEEDED || code == GRPC_INTERNAL ||
           code == GRPC_UNAVAILABLE;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void uuid4(char *out)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) {
        static unsigned long long ctr;
        unsigned long long v = (unsigned long long)time(NULL) ^ ++ctr;
        memcpy(b, &v, 8);
        memcpy(b + 8, &ctr, 8);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* grpc-message is percent-encoded UTF-8. */
static char *percent_decode(const char *s, size_t n)
{
    if (n > MAX_GRPC_MESSAGE_TEXT)
        n = MAX_GRPC_MESSAGE_TEXT;
    char *out = xmalloc(n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '%' && i + 2 < n && (h = hexval((unsigned char)s[i + 1])) >= 0 &&
            (l = hexval((unsigned char)s[i + 2])) >= 0) {
            *o++ = (char)(h * 16 + l);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return out;
}

/* The gRPC code grpc-js uses when a response carries no grpc-status. */
static int code_from_http(long http)
{
    switch (http) {
    case 400:
        return GRPC_INTERNAL;
    case 401:
        return GRPC_UNAUTHENTICATED;
    case 403:
        return GRPC_PERMISSION_DENIED;
    case 404:
        return GRPC_UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
        return GRPC_UNAVAILABLE;
    default:
        return GRPC_UNKNOWN;
    }
}

static int header_value_ok(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

/* ---- channel --------------------------------------------------------------- */

int grpc_chan_init(struct grpc_chan *ch, struct ev_loop *loop, const char *url,
                   const char *service, sbx_err_t *err)
{
    memset(ch, 0, sizeof(*ch));
    const char *rest = url;
    int tls = 0;
    if (strncasecmp(url, "https://", 8) == 0) {
        tls = 1;
        rest = url + 8;
    } else if (strncasecmp(url, "http://", 7) == 0) {
        rest = url + 7;
    } else if (strstr(url, "://")) {
        return err_make(err, SBX_E_PARAMS,
                        "server URL %s: only http:// and https:// are supported", url);
    }
    size_t hl = strcspn(rest, "/?#");
    if (hl == 0 || hl > 255)
        return err_make(err, SBX_E_PARAMS, "server URL %s has no host", url);
    char host[256];
    memcpy(host, rest, hl);
    host[hl] = '\0';
    for (size_t i = 0; i < hl; i++)
        if (!isalnum((unsigned char)host[i]) && !strchr(".-:[]_", host[i]))
            return err_make(err, SBX_E_PARAMS, "server URL %s: bad host", url);
    /* A port is there unless the last ':' belongs to an IPv6 literal. */
    const char *colon = strrchr(host, ':');
    int has_port = colon && !strchr(colon, ']');
    ch->base_url = xasprintf("%s://%s%s", tls ? "https" : "http", host,
                             has_port ? ""
                             : tls    ? ":443"
                                      : ":80");
    ch->service = xstrdup(service);
    ch->tls = tls;
    ch->loop = loop;
    ch->max_msg = GRPC_DEFAULT_MAX_MSG;
    ch->connect_timeout_ms = DEFAULT_CONNECT_MS;
    /* libcurl before 8.0 breaks a reused prior-knowledge (h2c) connection with
     * "Error in the HTTP2 framing layer" (curl issue 10634, fixed by PR 10643):
     * there, every cleartext call gets a connection of its own. */
    curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
    ch->no_reuse = !tls && vi->version_num < 0x080000;
    if (ch->no_reuse)
        log_info(
            "grpc: libcurl %s cannot reuse cleartext HTTP/2 connections; one connection "
            "per call to %s",
            vi->version, ch->base_url);
    /* libcurl's trace on stderr, for debugging the wire. */
    ch->verbose = getenv("SBXD_CURL_VERBOSE") != NULL;
    if (curlev_init(&ch->ce, loop) < 0) {
        grpc_chan_deinit(ch);
        return err_make(err, SBX_E_INTERNAL, "cannot set up libcurl");
    }
    return 0;
}

int grpc_header_add(struct curl_slist **list, const char *line)
{
    if (!header_value_ok(line) || !strchr(line, ':'))
        return -1;
    struct curl_slist *n = curl_slist_append(*list, line);
    if (!n)
        x_oom("curl_slist_append");
    *list = n;
    return 0;
}

int grpc_chan_header(struct grpc_chan *ch, const char *line)
{
    return grpc_header_add(&ch->extra, line);
}

void grpc_chan_set_ca(struct grpc_chan *ch, const char *path)
{
    free(ch->ca_file);
    ch->ca_file = path && path[0] ? xstrdup(path) : NULL;
}

void grpc_chan_set_throttle(struct grpc_chan *ch, double budget_s)
{
    ch->throttle_s = budget_s > 0 ? budget_s : 0;
}

/* ---- RPCRetryPolicy in grpc-status-details-bin --------------------------------- */

static int b64_val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

/* Decodes base64 (padding optional) into out (room for n*3/4+3). Returns the
 * length, or -1 on a bad character. */
static long b64_decode(const char *s, size_t n, uint8_t *out)
{
    uint32_t acc = 0;
    int bits = 0;
    long o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=' || s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')
            continue;
        int v = b64_val((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    return o;
}

static int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (int sh = 0; sh < 64 && *p < end; sh += 7) {
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* The next field of [*p, end): its number, wire type and, for length-delimited
 * fields, data and dlen; fixed32 is left in *data too. -1 on malformed bytes. */
static int pb_field(const uint8_t **p, const uint8_t *end, uint32_t *num, int *wire,
                    const uint8_t **data, size_t *dlen)
{
    uint64_t key, v;
    if (pb_varint(p, end, &key) < 0 || key >> 3 == 0 || key >> 3 > UINT32_MAX)
        return -1;
    *num = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    *data = *p;
    *dlen = 0;
    switch (*wire) {
    case 0:
        return pb_varint(p, end, &v);
    case 1:
        if (end - *p < 8)
            return -1;
        *p += 8;
        *dlen = 8;
        return 0;
    case 2:
        if (pb_varint(p, end, &v) < 0 || v > (uint64_t)(end - *p))
            return -1;
        *data = *p;
        *dlen = (size_t)v;
        *p += v;
        return 0;
    case 5:
        if (end - *p < 4)
            return -1;
        *p += 4;
        *dlen = 4;
        return 0;
    default:
        return -1;
    }
}

static const char POLICY_TYPE[] = "/modal.client.RPCRetryPolicy";

/* An Any: type_url=1, value=2. 0 and *secs if it is a retry policy. */
static int any_policy(const uint8_t *p, const uint8_t *end, double *secs)
{
    const uint8_t *val = NULL;
    size_t vlen = 0;
    int is_policy = 0;
    while (p < end) {
        uint32_t num;
        int wire;
        const uint8_t *d;
        size_t dl;
        if (pb_field(&p, end, &num, &wire, &d, &dl) < 0)
            return -1;
        size_t tl = sizeof(POLICY_TYPE) - 1;
        if (num == 1 && wire == 2)
            is_policy = dl >= tl && memcmp(d + dl - tl, POLICY_TYPE, tl) == 0;
        else if (num == 2 && wire == 2)
            val = d, vlen = dl;
    }
    if (!is_policy)
        return -1;
    float f = 0;
    const uint8_t *q = val, *qe = val ? val + vlen : NULL;
    while (q && q < qe) {
        uint32_t num;
        int wire;
        const uint8_t *d;
        size_t dl;
        if (pb_field(&q, qe, &num, &wire, &d, &dl) < 0)
            return -1;
        if (num == 1 && wire == 5) {
            uint32_t u = (uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16 |
                         (uint32_t)d[3] << 24;
            memcpy(&f, &u, sizeof(f));
        }
    }
    double s = (double)f;
    if (!(s >= 0)) /* NaN and negatives */
        s = 0;
    *secs = s > 3600 ? 3600 : s;
    return 0;
}

int grpc_retry_policy_parse(const char *b64, size_t n, double *secs_out)
{
    if (!b64 || n == 0 || n > 65536)
        return -1;
    uint8_t *buf = xmalloc(n * 3 / 4 + 4);
    long len = b64_decode(b64, n, buf);
    int ret = -1;
    const uint8_t *p = buf, *end = buf + (len > 0 ? len : 0);
    while (len > 0 && p < end) {
        uint32_t num;
        int wire;
        const uint8_t *d;
        size_t dl;
        if (pb_field(&p, end, &num, &wire, &d, &dl) < 0)
            break;
        double s;
        if (num == 3 && wire == 2 && any_policy(d, d + dl, &s) == 0) {
            *secs_out = s;
            ret = 0;
            break;
        }
    }
    free(buf);
    return ret;
}

void grpc_chan_set_headers(struct grpc_chan *ch, grpc_headers_cb cb, void *privdata)
{
    ch->headers_cb = cb;
    ch->headers_data = privdata;
}

void grpc_chan_set_token(struct grpc_chan *ch, const char *method, grpc_token_cb parse,
                         void *privdata)
{
    free(ch->token_method);
    ch->token_method = method ? xstrdup(method) : NULL;
    ch->token_parse = parse;
    ch->token_data = privdata;
}

void grpc_chan_deinit(struct grpc_chan *ch)
{
    while (ch->calls) {
        struct grpc_call *c = ch->calls;
        c->in_cb = 0;
        c->cancelled = 1;
        call_free(c);
    }
    ch->token_call = NULL;
    ch->token_wait = ch->token_wait_tail = NULL;
    curlev_deinit(&ch->ce);
    curl_slist_free_all(ch->extra);
    free(ch->base_url);
    free(ch->service);
    free(ch->token_method);
    free(ch->token);
    free(ch->ca_file);
    memset(ch, 0, sizeof(*ch));
}

/* ---- call bookkeeping ---------------------------------------------------------- */

static void reset_response(struct grpc_call *c)
{
    free(c->in);
    c->in = NULL;
    c->in_off = c->in_len = c->in_cap = 0;
    c->grpc_status = -1;
    c->unsent = 0;
    free(c->grpc_message);
    c->grpc_message = NULL;
    c->compressed_ok = 0;
    c->retry_after = -1;
    c->local_code = 0;
    free(c->local_msg);
    c->local_msg = NULL;
    free(c->resp);
    c->resp = NULL;
    c->resp_len = 0;
    c->got_msg = 0;
}

static void unqueue(struct grpc_call *c)
{
    struct grpc_chan *ch = c->ch;
    struct grpc_call *prev = NULL;
    for (struct grpc_call *x = ch->token_wait; x; prev = x, x = x->qnext)
        if (x == c) {
            if (prev)
                prev->qnext = x->qnext;
            else
                ch->token_wait = x->qnext;
            if (ch->token_wait_tail == x)
                ch->token_wait_tail = prev;
            break;
        }
    c->qnext = NULL;
}

/* Releases everything; no callback. */
static void call_free(struct grpc_call *c)
{
    struct grpc_chan *ch = c->ch;
    if (c->state == CS_QUEUED)
        unqueue(c);
    if (c->req) {
        curlev_req_cancel(c->req);
        c->req = NULL;
    }
    ev_timer_stop(ch->loop, &c->timer);
    if (ch->token_call == c)
        ch->token_call = NULL;
    if (c->prev)
        c->prev->next = c->next;
    else
        ch->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    reset_response(c);
    free(c->held_msg);
    free(c->used_token);
    free(c->hdr);
    free(c->frame);
    free(c->url);
    free(c);
}

/* After an owner callback: 1 if the owner cancelled c (it is freed now). */
static int gone_after_cb(struct grpc_call *c)
{
    if (c->in_cb > 0 || !c->cancelled)
        return 0;
    if (c->state == CS_FAILING)
        return 1; /* the failing loop frees it */
    call_free(c);
    return 1;
}

/* The one exit: on_done, then free. */
static void call_finish(struct grpc_call *c, int code, const char *msg, int transport,
                        long http)
{
    c->state = CS_DONE;
    if (c->req) {
        curlev_req_cancel(c->req);
        c->req = NULL;
    }
    ev_timer_stop(c->ch->loop, &c->timer);
    if (!c->cancelled && c->on_done) {
        struct grpc_status st = {.code = code,
                                 .message = msg ? msg : "",
                                 .transport = transport,
                                 .http_status = http,
                                 .method = c->method,
                                 .unsent = c->unsent};
        int ok = code == GRPC_OK;
        c->in_cb++;
        c->on_done(c, &st, ok ? c->resp : NULL, ok ? c->resp_len : 0, c->privdata);
        c->in_cb--;
    }
    call_free(c);
}

/* ---- the channel's token ---------------------------------------------------------- */

void grpc_token_done(struct grpc_call *tc, const struct grpc_status *st,
                     const uint8_t *msg, size_t len, void *privdata)
{
    struct grpc_chan *ch = privdata;
    ch->token_call = NULL;
    double valid_s = 0;
    char *tok = st->code == GRPC_OK && ch->token_parse
                    ? ch->token_parse(msg, len, &valid_s, ch->token_data)
                    : NULL;
    if (tok && tok[0] && header_value_ok(tok)) {
        free(ch->token);
        ch->token = tok;
        ch->token_refresh_at = wall_now() + (valid_s > 0 ? valid_s : 0);
        log_debug("grpc: %s: token good for %.0f s", ch->token_method, valid_s);
        /* Send everything that waited. Callbacks can't run from here: sends are async. */
        while (ch->token_wait) {
            struct grpc_call *c = ch->token_wait;
            ch->token_wait = c->qnext;
            if (!ch->token_wait)
                ch->token_wait_tail = NULL;
            c->qnext = NULL;
            call_send(c);
        }
        return;
    }
    free(tok);
    int code = st->code;
    const char *m = st->message;
    char buf[160];
    if (code == GRPC_OK) {
        code = GRPC_UNAUTHENTICATED;
        snprintf(buf, sizeof(buf), "%s returned no usable token", ch->token_method);
        m = buf;
    }
    log_warn("grpc: %s failed: %s: %s", ch->token_method, grpc_code_name(code), m);
    /* Fail the calls that waited; ones queued by their callbacks wait for a new fetch. */
    struct grpc_call *list = ch->token_wait;
    ch->token_wait = ch->token_wait_tail = NULL;
    for (struct grpc_call *c = list; c; c = c->qnext)
        c->state = CS_FAILING;
    while (list) {
        struct grpc_call *c = list;
        list = c->qnext;
        c->qnext = NULL;
        if (c->cancelled) {
            c->state = CS_DONE;
            call_free(c);
            continue;
        }
        if (c->budget_s > 0 && grpc_code_retryable(code) &&
            wall_now() - c->t0 < c->budget_s) {
            /* A call with a retry budget waits for a later token fetch. */
            double delay = 0.1 * (double)(1u << (c->attempt < 10 ? c->attempt : 10));
            c->attempt++;
            c->state = CS_RETRY_WAIT;
            ev_timer_set(&c->timer, delay > 5.0 ? 5.0 : delay, 0.);
            ev_timer_start(ch->loop, &c->timer);
            continue;
        }
        struct grpc_status st2 = *st;
        st2.code = code;
        st2.message = m;
        st2.method = ch->token_method;
        st2.unsent = 1; /* it waited for the token: never sent */
        c->state = CS_DONE;
        if (c->on_done) {
            c->in_cb++;
            c->on_done(c, &st2, NULL, 0, c->privdata);
            c->in_cb--;
        }
        call_free(c);
    }
}

/* ---- receiving ------------------------------------------------------------------ */

static void set_local(struct grpc_call *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_local(struct grpc_call *c, int code, const char *fmt, ...)
{
    if (c->local_code)
        return;
    va_list ap;
    va_start(ap, fmt);
    free(c->local_msg);
    if (vasprintf(&c->local_msg, fmt, ap) < 0)
        c->local_msg = NULL;
    va_end(ap);
    c->local_code = code;
}

/* Hands complete messages over until paused. Returns 1 if c is gone. */
static int parse(struct grpc_call *c)
{
    while (!c->paused && !c->cancelled && !c->local_code) {
        size_t avail = c->in_len - c->in_off;
        if (avail < 5)
            break;
        const uint8_t *p = c->in + c->in_off;
        uint32_t len = ((uint32_t)p[1] << 24) | ((uint32_t)p[2] << 16) |
                       ((uint32_t)p[3] << 8) | p[4];
        if (p[0] > 1 || (p[0] == 1 && !c->compressed_ok)) {
            set_local(c, GRPC_INTERNAL,
                      "compressed gRPC message, but only identity was accepted");
            break;
        }
        if (p[0] == 1) {
            set_local(c, GRPC_UNIMPLEMENTED,
                      "compressed gRPC messages are not supported");
            break;
        }
        if (len > c->ch->max_msg) {
            set_local(c, GRPC_RESOURCE_EXHAUSTED,
                      "received message of %u bytes exceeds the limit of %zu", len,
                      c->ch->max_msg);
            break;
        }
        if (avail < 5 + (size_t)len)
            break;
        c->in_off += 5 + (size_t)len;
        if (c->unary) {
            if (c->got_msg) {
                set_local(c, GRPC_INTERNAL, "more than one message in a unary response");
                break;
            }
            c->resp = xmalloc(len);
            memcpy(c->resp, p + 5, len);
            c->resp_len = len;
            c->got_msg = 1;
        } else {
            c->got_msg = 1;
            if (c->on_msg) {
                c->in_cb++;
                c->on_msg(c, p + 5, len, c->privdata);
                c->in_cb--;
                if (gone_after_cb(c))
                    return 1;
            }
        }
    }
    if (c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
    return 0;
}

size_t grpc_call_on_data(struct curlev_req *r, const char *d, size_t n, void *privdata)
{
    struct grpc_call *c = privdata;
    if (c->cancelled || c->local_code)
        return 0;
    if (c->paused)
        return CURL_WRITEFUNC_PAUSE;
    if (n == 0)
        return 0; /* nothing to add; c->in may still be NULL (memcpy(NULL, d, 0) is UB) */
    /* Room: compact first, then grow to at most one message + prefix + this chunk. */
    if (c->in_off > 0 && c->in_off == c->in_len)
        c->in_off = c->in_len = 0;
    if (c->in_len + n > c->in_cap && c->in_off > 0) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    if (c->in_len + n > c->in_cap) {
        size_t want = c->in_cap ? c->in_cap : 16384;
        while (want < c->in_len + n)
            want *= 2;
        if (want > c->ch->max_msg + 5 + n && c->in_len + n <= c->ch->max_msg + 5 + n)
            want = c->in_len + n;
        uint8_t *nb = realloc(c->in, want);
        if (!nb) {
            set_local(c, GRPC_RESOURCE_EXHAUSTED, "out of memory for a %zu-byte response",
                      want);
            return 0;
        }
        c->in = nb;
        c->in_cap = want;
    }
    memcpy(c->in + c->in_len, d, n);
    c->in_len += n;
    if (parse(c))
        return 0; /* cancelled by its owner: the transfer goes too */
    if (c->local_code)
        return 0; /* aborts; grpc_call_req_done reports local_code */
    return n;
}

void grpc_call_on_header(struct curlev_req *r, const char *line, size_t n, void *privdata)
{
    struct grpc_call *c = privdata;
    const char *colon = memchr(line, ':', n);
    if (!colon || colon == line)
        return;
    size_t kl = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vl = n - kl - 1;
    while (vl > 0 && (*v == ' ' || *v == '\t'))
        v++, vl--;
    if (kl == 11 && strncasecmp(line, "grpc-status", 11) == 0) {
        int code = 0;
        for (size_t i = 0; i < vl && i < 4 && isdigit((unsigned char)v[i]); i++)
            code = code * 10 + (v[i] - '0');
        c->grpc_status = code;
    } else if (kl == 12 && strncasecmp(line, "grpc-message", 12) == 0) {
        free(c->grpc_message);
        c->grpc_message = percent_decode(v, vl);
    } else if (kl == 13 && strncasecmp(line, "grpc-encoding", 13) == 0) {
        c->compressed_ok = !(vl == 8 && strncasecmp(v, "identity", 8) == 0);
    } else if (kl == 23 && strncasecmp(line, "grpc-status-details-bin", 23) == 0) {
        while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        double secs;
        if (grpc_retry_policy_parse(v, vl, &secs) == 0)
            c->retry_after = secs;
    }
}

void grpc_call_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct grpc_call *c = w->data;
    if (c->state == CS_RETRY_WAIT)
        call_begin(c);
    else if (c->state == CS_NEW) /* a start failure, reported from the loop */
        call_finish(c, GRPC_INTERNAL, "cannot start the HTTP/2 transfer", 1, 0);
}

void grpc_call_req_done(struct curlev_req *r, CURLcode rc, long http, const char *errmsg,
                        void *privdata)
{
    struct grpc_call *c = privdata;
    struct grpc_chan *ch = c->ch;
    c->req = NULL;
    int code, transport = 0;
    char buf[CURL_ERROR_SIZE + 160];
    const char *msg;
    if (c->local_code) {
        code = c->local_code;
        msg = c->local_msg ? c->local_msg : grpc_code_name(code);
    } else if (c->grpc_status >= 0) {
        code = c->grpc_status;
        msg = c->grpc_message ? c->grpc_message : "";
        if (code == GRPC_OK && c->in_len > c->in_off && !c->paused) {
            code = GRPC_INTERNAL;
            msg = "response ended inside a message";
        }
    } else if (rc != CURLE_OK) {
        code = rc == CURLE_OPERATION_TIMEDOUT ? GRPC_DEADLINE_EXCEEDED : GRPC_UNAVAILABLE;
        transport = http == 0;
        /* No connection was ever made: the server cannot have seen the call. */
        c->unsent = http == 0 &&
                    (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
                     rc == CURLE_COULDNT_RESOLVE_PROXY);
        snprintf(buf, sizeof(buf), "%s %s: %s",
                 transport ? "cannot reach" : "connection to", ch->base_url, errmsg);
        msg = buf;
    } else {
        code = http == 200 ? GRPC_UNKNOWN : code_from_http(http);
        snprintf(buf, sizeof(buf), "no grpc-status in the response (HTTP %ld)", http);
        msg = buf;
    }
    if (c->unary && code == GRPC_OK && !c->got_msg) {
        code = GRPC_UNIMPLEMENTED;
        msg = "No message received";
    }
    /* The server said when to try again (RPCRetryPolicy): do so, whatever the
     * code, while the channel's throttle budget lasts, as the SDKs do. */
    if (c->unary && code != GRPC_OK && c->retry_after >= 0 && ch->throttle_s > 0) {
        double delay = c->retry_after < 0.1 ? 0.1 : c->retry_after;
        if (wall_now() - c->t0 + delay < ch->throttle_s) {
            log_debug("grpc: %s: the server asks for a retry in %.2f s (%s: %s)",
                      c->method, delay, grpc_code_name(code), msg);
            c->throttle_retries++;
            c->state = CS_RETRY_WAIT;
            ev_timer_set(&c->timer, delay, 0.);
            ev_timer_start(ch->loop, &c->timer);
            return;
        }
    }
    /* Unary: retry what the SDK retries, with the same idempotency key (a
     * no_resend call only when the attempt never reached the server). */
    int more =
        c->budget_s > 0 ? wall_now() - c->t0 < c->budget_s : c->attempt < MAX_RETRIES;
    if (c->unary && code != GRPC_OK && (grpc_code_retryable(code) || transport) && more &&
        (!c->no_resend || c->unsent)) {
        double cap = c->budget_s > 0 ? 5.0 : 1.0;
        double delay = 0.1 * (double)(1u << (c->attempt < 10 ? c->attempt : 10));
        if (delay > cap)
            delay = cap;
        log_debug("grpc: %s failed (%s: %s), retry %d in %.1f s", c->method,
                  grpc_code_name(code), msg, c->attempt + 1, delay);
        c->attempt++;
        c->state = CS_RETRY_WAIT;
        ev_timer_set(&c->timer, delay, 0.);
        ev_timer_start(ch->loop, &c->timer);
        return;
    }
    /* A rejected token (expired, rotated): fetch a new one once. */
    if (code == GRPC_UNAUTHENTICATED && !c->is_token && !c->token_retried &&
        c->used_token && ch->token && strcmp(c->used_token, ch->token) == 0) {
        log_debug("grpc: %s: token rejected (%s); fetching a new one", c->method, msg);
        c->token_retried = 1;
        free(ch->token);
        ch->token = NULL;
        call_begin(c);
        return;
    }
    if (!c->unary && c->paused && c->in_len > c->in_off) {
        /* Messages still held back: finish once the owner resumes. */
        c->state = CS_HELD;
        c->held_code = code;
        free(c->held_msg);
        c->held_msg = xstrdup(msg);
        c->held_http = http;
        c->held_transport = transport;
        return;
    }
    call_finish(c, code, msg, transport, http);
}

/* ---- sending -------------------------------------------------------------------------
 */

static void call_send(struct grpc_call *c)
{
    struct grpc_chan *ch = c->ch;
    reset_response(c);
    c->state = CS_SENDING;
    struct curlev_req *r = curlev_req_new(&ch->ce, "POST", c->url);
    curlev_req_header(r, "Content-Type: application/grpc");
    curlev_req_header(r, "TE: trailers");
    curlev_req_header(r, "Expect:");
    curlev_req_header(r, "Accept:");
    curlev_req_header(r, "grpc-accept-encoding: identity");
    for (struct curl_slist *h = ch->extra; h; h = h->next)
        curlev_req_header(r, h->data);
    free(c->used_token);
    c->used_token = NULL;
    if (!c->is_token && ch->token)
        c->used_token = xstrdup(ch->token);
    if (ch->headers_cb) {
        /* The owner's metadata for this attempt (credentials, retry marks). */
        struct grpc_attempt at = {.method = c->method,
                                  .unary = c->unary,
                                  .is_token = c->is_token,
                                  .attempt = c->attempt,
                                  .since_first_s = wall_now() - c->t0,
                                  .call_id = c->idem,
                                  .token = c->used_token,
                                  .throttle_attempt = c->throttle_retries};
        struct curl_slist *hs = NULL;
        ch->headers_cb(&hs, &at, ch->headers_data);
        for (struct curl_slist *h = hs; h; h = h->next)
            curlev_req_header(r, h->data);
        curl_slist_free_all(hs);
    }
    if (c->hdr)
        curlev_req_header(r, c->hdr);
    curlev_req_body(r, c->frame, c->frame_len);
    CURL *e = curlev_req_easy(r);
    if (ch->tls && ch->ca_file)
        curl_easy_setopt(e, CURLOPT_CAINFO, ch->ca_file);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION,
                     ch->tls ? (long)CURL_HTTP_VERSION_2TLS
                             : (long)CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE);
    if (ch->no_reuse) {
        curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    } else {
        curl_easy_setopt(e, CURLOPT_PIPEWAIT, 1L);
    }
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    if (ch->verbose)
        curl_easy_setopt(e, CURLOPT_VERBOSE, 1L);
    curlev_req_timeouts(r, c->timeout_s > 0 ? (long)(c->timeout_s * 1000) : 0,
                        ch->connect_timeout_ms);
    curlev_req_callbacks(r, grpc_call_on_data, grpc_call_on_header, grpc_call_req_done,
                         c);
    c->req = r;
    if (curlev_req_start(r) < 0) {
        c->req = NULL;
        /* Report from the loop: on_done never runs inside the starter. */
        c->state = CS_NEW;
        ev_timer_set(&c->timer, 0., 0.);
        ev_timer_start(ch->loop, &c->timer);
    }
}

static void start_token(struct grpc_chan *ch)
{
    if (ch->token_call)
        return;
    struct grpc_call *c = xcalloc(1, sizeof(*c));
    c->ch = ch;
    snprintf(c->method, sizeof(c->method), "%s", ch->token_method);
    c->url = xasprintf("%s/%s/%s", ch->base_url, ch->service, ch->token_method);
    c->frame = xcalloc(1, 5); /* an empty message */
    c->frame_len = 5;
    c->unary = 1;
    c->is_token = 1;
    c->timeout_s = TOKEN_CALL_TIMEOUT_S;
    c->on_done = grpc_token_done;
    c->privdata = ch;
    c->t0 = wall_now();
    uuid4(c->idem);
    ev_init(&c->timer, grpc_call_retry_cb);
    c->timer.data = c;
    c->next = ch->calls;
    if (ch->calls)
        ch->calls->prev = c;
    ch->calls = c;
    ch->token_call = c;
    call_send(c);
}

/* Sends now if the token is good, else queues behind a token fetch. */
static void call_begin(struct grpc_call *c)
{
    struct grpc_chan *ch = c->ch;
    if (c->is_token || !ch->token_method ||
        (ch->token && wall_now() < ch->token_refresh_at)) {
        call_send(c);
        return;
    }
    c->state = CS_QUEUED;
    c->qnext = NULL;
    if (ch->token_wait_tail)
        ch->token_wait_tail->qnext = c;
    else
        ch->token_wait = c;
    ch->token_wait_tail = c;
    start_token(ch);
}

static struct grpc_call *call_new(struct grpc_chan *ch, const char *method,
                                  const ProtobufCMessage *req, int unary,
                                  double timeout_s, const char *hdr, grpc_msg_cb on_msg,
                                  grpc_done_cb on_done, void *privdata)
{
    struct grpc_call *c = xcalloc(1, sizeof(*c));
    c->ch = ch;
    c->hdr = hdr && strchr(hdr, ':') && header_value_ok(hdr) ? xstrdup(hdr) : NULL;
    snprintf(c->method, sizeof(c->method), "%s", method);
    c->url = xasprintf("%s/%s/%s", ch->base_url, ch->service, method);
    size_t n = req ? protobuf_c_message_get_packed_size(req) : 0;
    c->frame = xmalloc(5 + n);
    c->frame[0] = 0;
    c->frame[1] = (uint8_t)(n >> 24);
    c->frame[2] = (uint8_t)(n >> 16);
    c->frame[3] = (uint8_t)(n >> 8);
    c->frame[4] = (uint8_t)n;
    if (n)
        protobuf_c_message_pack(req, c->frame + 5);
    c->frame_len = 5 + n;
    c->unary = unary;
    c->timeout_s = timeout_s;
    c->on_msg = on_msg;
    c->on_done = on_done;
    c->privdata = privdata;
    c->t0 = wall_now();
    c->grpc_status = -1;
    uuid4(c->idem);
    ev_init(&c->timer, grpc_call_retry_cb);
    c->timer.data = c;
    c->next = ch->calls;
    if (ch->calls)
        ch->calls->prev = c;
    ch->calls = c;
    call_begin(c);
    return c;
}

struct grpc_call *grpc_unary(struct grpc_chan *ch, const char *method,
                             const ProtobufCMessage *req, double timeout_s,
                             grpc_done_cb on_done, void *privdata)
{
    return call_new(ch, method, req, 1, timeout_s, NULL, NULL, on_done, privdata);
}

struct grpc_call *grpc_unary_h(struct grpc_chan *ch, const char *method,
                               const ProtobufCMessage *req, double timeout_s,
                               const char *header, grpc_done_cb on_done, void *privdata)
{
    return call_new(ch, method, req, 1, timeout_s, header, NULL, on_done, privdata);
}

struct grpc_call *grpc_stream_h(struct grpc_chan *ch, const char *method,
                                const ProtobufCMessage *req, double timeout_s,
                                const char *header, grpc_msg_cb on_msg,
                                grpc_done_cb on_done, void *privdata)
{
    return call_new(ch, method, req, 0, timeout_s, header, on_msg, on_done, privdata);
}

struct grpc_call *grpc_stream(struct grpc_chan *ch, const char *method,
                              const ProtobufCMessage *req, double timeout_s,
                              grpc_msg_cb on_msg, grpc_done_cb on_done, void *privdata)
{
    return call_new(ch, method, req, 0, timeout_s, NULL, on_msg, on_done, privdata);
}

/* ---- owner controls -----------------------------------------------------------------
 */

void grpc_call_retry_budget(struct grpc_call *c, double budget_s)
{
    if (c)
        c->budget_s = budget_s;
}

void grpc_call_no_resend(struct grpc_call *c)
{
    if (c)
        c->no_resend = 1;
}

void grpc_call_cancel(struct grpc_call *c)
{
    if (!c || c->cancelled)
        return;
    c->cancelled = 1;
    c->on_msg = NULL;
    c->on_done = NULL;
    c->privdata = NULL;
    if (c->in_cb > 0 || c->state == CS_FAILING || c->state == CS_DONE)
        return; /* freed by whoever runs the callback */
    call_free(c);
}

void grpc_call_pause(struct grpc_call *c)
{
    if (c)
        c->paused = 1;
}

void grpc_call_resume(struct grpc_call *c)
{
    if (!c || c->cancelled || !c->paused)
        return;
    c->paused = 0;
    if (c->in_cb > 0)
        return; /* inside its own on_msg: the parse loop goes on by itself */
    if (parse(c))
        return;
    if (c->paused)
        return;
    if (c->state == CS_HELD) {
        int code = c->held_code;
        if (c->local_code) {
            code = c->local_code;
        } else if (code == GRPC_OK && c->in_len > c->in_off) {
            code = GRPC_INTERNAL;
        }
        char *m = c->held_msg;
        c->held_msg = NULL;
        call_finish(c, code,
                    c->local_code ? c->local_msg
                    : code == GRPC_INTERNAL && c->held_code == GRPC_OK
                        ? "response ended inside a message"
                        : m,
                    c->held_transport, c->held_http);
        free(m);
        return;
    }
    if (c->local_code) {
        /* A bad frame found while delivering held bytes: end the transfer. */
        call_finish(c, c->local_code, c->local_msg, 0, 0);
        return;
    }
    if (c->req && curlev_req_paused(c->req))
        curlev_req_resume(c->req);
}
