/*
 * fs_raw.c - the raw byte path of fs.read/fs.write (PROTOCOL.md "Files",
 * "Raw transfers"): the call with transport "raw" answers a token, a second
 * connection to the same socket (found with getpeername on the first)
 * presents it and then carries the bytes, without JSON or base64. The
 * helpers in fs.c use it when the daemon offers it and fall back to base64
 * chunks when it does not (an older daemon).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sbx/sbx.h"
#include "sbx_private.h"

#define LINE_MAX_BYTES (64u << 10)

struct rconn {
    int fd;
    char buf[64 << 10];
    size_t len, pos;
};

/* Waits for fd to be ready for ev; the connection is blocking but waits
 * are bounded by the context's timeout between bytes. */
static int wait_fd(sbx_ctx *c, int fd, short ev)
{
    struct pollfd p = {fd, ev, 0};
    int t = c->priv && c->priv->timeout_ms > 0 ? c->priv->timeout_ms : -1;
    for (;;) {
        int r = poll(&p, 1, t);
        if (r > 0)
            return 0;
        if (r == 0) {
            sbx__ctx_seterr(c, SBX_ERR_TIMEOUT, "%s", "raw transfer: timed out");
            return -1;
        }
        if (errno != EINTR) {
            sbx__ctx_seterr(c, SBX_ERR_IO, "poll: %s", strerror(errno));
            return -1;
        }
    }
}

static int rc_fill(sbx_ctx *c, struct rconn *rc)
{
    if (rc->pos == rc->len)
        rc->pos = rc->len = 0;
    for (;;) {
        ssize_t r = recv(rc->fd, rc->buf + rc->len, sizeof(rc->buf) - rc->len, 0);
        if (r > 0) {
            rc->len += (size_t)r;
            return 0;
        }
        if (r == 0) {
            sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s",
                            "raw transfer: the daemon closed the connection");
            return -1;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN && wait_fd(c, rc->fd, POLLIN) == 0)
            continue;
        sbx__ctx_seterr(c, SBX_ERR_IO, "recv: %s", strerror(errno));
        return -1;
    }
}

/* The next line (without its newline) as JSON, or NULL. */
static json_t *rc_line(sbx_ctx *c, struct rconn *rc)
{
    char *acc = NULL;
    size_t alen = 0;
    for (;;) {
        if (rc->pos == rc->len && rc_fill(c, rc) < 0) {
            free(acc);
            return NULL;
        }
        char *nl = memchr(rc->buf + rc->pos, '\n', rc->len - rc->pos);
        size_t k = nl ? (size_t)(nl - (rc->buf + rc->pos)) : rc->len - rc->pos;
        if (alen + k > LINE_MAX_BYTES) {
            free(acc);
            sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "raw transfer: line too long");
            return NULL;
        }
        char *na = realloc(acc, alen + k + 1);
        if (!na) {
            free(acc);
            sbx__ctx_seterr(c, SBX_ERR_OOM, "%s", "out of memory");
            return NULL;
        }
        acc = na;
        memcpy(acc + alen, rc->buf + rc->pos, k);
        alen += k;
        rc->pos += k + (nl ? 1 : 0);
        if (nl)
            break;
    }
    json_t *v = json_loadb(acc, alen, 0, NULL);
    free(acc);
    if (!v)
        sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "raw transfer: a line is not JSON");
    return v;
}

static int send_all(sbx_ctx *c, int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        ssize_t r = send(fd, s, n, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && wait_fd(c, fd, POLLOUT) == 0)
                continue;
            sbx__ctx_seterr(c, SBX_ERR_IO, "send: %s", strerror(errno));
            return -1;
        }
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

/* A second connection to c's daemon with token presented. fd or -1. */
static int raw_open(sbx_ctx *c, const char *token)
{
    struct sockaddr_un sa;
    socklen_t sl = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    if (getpeername(c->fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sun_family != AF_UNIX ||
        !sa.sun_path[0]) {
        sbx__ctx_seterr(c, SBX_ERR_IO, "%s", "raw transfer: the daemon's socket path");
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sl) < 0) {
        sbx__ctx_seterr(c, SBX_ERR_IO, "connect: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    json_t *m = json_pack("{s:s, s:i, s:s, s:{s:s}}", "jsonrpc", "2.0", "id", 1, "method",
                          SBX_M_FS_STREAM, "params", "token", token);
    char *t = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    int ok = t && send_all(c, fd, t, strlen(t)) == 0 && send_all(c, fd, "\n", 1) == 0;
    free(t);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A line that is a JSON-RPC error (or {error}) into *err_out. */
static int line_error(sbx_ctx *c, json_t *v, sbx_rpc_error **err_out)
{
    json_t *e = json_object_get(v, "error");
    if (!e)
        return 0;
    if (err_out)
        *err_out = sbx__rpc_error_new(e);
    sbx__ctx_seterr(c, SBX_ERR_RPC, "%s",
                    json_string_value(json_object_get(e, "message"))
                        ? json_string_value(json_object_get(e, "message"))
                        : "raw transfer failed");
    return 1;
}

/* The raw connection for token, an answer's (res, stolen: tok points into
 * it). NULL with c's error set when out of memory or it could not connect. */
static struct rconn *rconn_new(sbx_ctx *c, json_t *res, const char *tok)
{
    struct rconn *rc = malloc(sizeof(*rc));
    if (!rc) {
        json_decref(res);
        sbx__ctx_seterr(c, SBX_ERR_OOM, "%s", "out of memory");
        return NULL;
    }
    rc->len = rc->pos = 0;
    rc->fd = raw_open(c, tok);
    json_decref(res);
    if (rc->fd < 0) {
        free(rc);
        return NULL;
    }
    return rc;
}

static void rconn_free(struct rconn *rc)
{
    if (!rc)
        return;
    close(rc->fd);
    free(rc);
}

/* fs.read's or fs.write's params for the raw path: opts (borrowed) and these. */
static json_t *raw_params(json_t *opts, const char *sandbox, const char *path)
{
    json_t *p = opts ? json_deep_copy(opts) : json_object();
    json_object_set_new(p, "sandbox", json_string(sandbox));
    json_object_set_new(p, "path", json_string(path));
    json_object_set_new(p, "transport", json_string("raw"));
    return p;
}

int sbx__fs_raw_wanted(void)
{
    /* SBX_FS_TRANSPORT=json keeps to base64 chunks (benchmarks, old peers) */
    const char *t = getenv("SBX_FS_TRANSPORT");
    return !t || strcmp(t, "json") != 0;
}

int sbx__fs_read_raw(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                     const char *path, json_t *opts, sbx_fs_sink_cb sink, void *privdata)
{
    json_t *res = NULL;
    json_t *p = raw_params(opts, sandbox, path);
    if (sbx_call_new(c, &res, err_out, SBX_M_FS_READ, p) != SBX_OK)
        return SBX_ERR;
    const char *tok = json_string_value(json_object_get(res, "token"));
    if (!tok) {
        json_decref(res); /* an older daemon answered a chunk: not offered */
        return 1;
    }
    struct rconn *rc = rconn_new(c, res, tok);
    if (!rc)
        return SBX_ERR;
    int rcode = SBX_ERR;
    json_t *head = rc_line(c, rc);
    if (!head || line_error(c, head, err_out)) {
        json_decref(head);
        goto out;
    }
    json_decref(head);
    for (;;) {
        while (rc->len - rc->pos < 4)
            if (rc->pos > 0 && rc->len > rc->pos) {
                memmove(rc->buf, rc->buf + rc->pos, rc->len - rc->pos);
                rc->len -= rc->pos;
                rc->pos = 0;
            } else if (rc->pos == rc->len) {
                rc->pos = rc->len = 0;
                if (rc_fill(c, rc) < 0)
                    goto out;
            } else if (rc_fill(c, rc) < 0) {
                goto out;
            }
        uint32_t be;
        memcpy(&be, rc->buf + rc->pos, 4);
        rc->pos += 4;
        uint32_t n = ntohl(be);
        if (n == 0xffffffffu || n == 0) {
            json_t *t = rc_line(c, rc);
            if (t && !line_error(c, t, err_out) && n == 0)
                rcode = SBX_OK;
            else if (t && n != 0 && !json_object_get(t, "error"))
                sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "raw transfer: bad trailer");
            json_decref(t);
            goto out;
        }
        while (n) {
            if (rc->pos == rc->len && rc_fill(c, rc) < 0)
                goto out;
            size_t k = rc->len - rc->pos < n ? rc->len - rc->pos : n;
            if (sink(rc->buf + rc->pos, k, privdata) != 0) {
                sbx__ctx_seterr(c, SBX_ERR_USAGE, "%s", "the sink stopped the read");
                goto out;
            }
            rc->pos += k;
            n -= (uint32_t)k;
        }
    }
out:
    rconn_free(rc);
    return rcode;
}

int sbx__fs_write_raw(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                      const char *sandbox, const char *path, json_t *opts, uint64_t size,
                      sbx_fs_source_cb source, void *privdata)
{
    json_t *p = raw_params(opts, sandbox, path);
    json_object_set_new(p, "size", json_integer((json_int_t)size));
    json_t *res = NULL;
    sbx_rpc_error *e = NULL;
    if (sbx_call_new(c, &res, &e, SBX_M_FS_WRITE, p) != SBX_OK) {
        /* An older daemon asks for data: not offered. */
        if (e && e->code == SBX_E_PARAMS &&
            !strcmp(json_string_value(json_object_get(e->data, "param"))
                        ? json_string_value(json_object_get(e->data, "param"))
                        : "",
                    "data")) {
            sbx_rpc_error_free(e);
            return 1;
        }
        if (err_out)
            *err_out = e;
        else
            sbx_rpc_error_free(e);
        return SBX_ERR;
    }
    const char *tok = json_string_value(json_object_get(res, "token"));
    if (!tok) {
        json_decref(res);
        sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "fs.write raw: no token");
        return SBX_ERR;
    }
    char *buf = malloc(1 << 20);
    if (!buf) {
        json_decref(res);
        sbx__ctx_seterr(c, SBX_ERR_OOM, "%s", "out of memory");
        return SBX_ERR;
    }
    struct rconn *rc = rconn_new(c, res, tok);
    int rcode = SBX_ERR;
    if (!rc)
        goto out;
    uint64_t left = size;
    while (left) {
        long n = source(buf, left < (1u << 20) ? (size_t)left : (1u << 20), privdata);
        if (n <= 0) {
            /* closing short of size aborts the write: nothing appears */
            sbx__ctx_seterr(c, SBX_ERR_USAGE, "%s", "the source failed or ended early");
            goto out;
        }
        if (send_all(c, rc->fd, buf, (size_t)n) < 0)
            break; /* the daemon gave up: its reason is in the line below */
        left -= (uint64_t)n;
    }
    json_t *v = rc_line(c, rc);
    if (v && !line_error(c, v, err_out)) {
        json_t *r = json_object_get(v, "result");
        if (left == 0 && r) {
            if (result_out)
                *result_out = json_incref(r);
            rcode = SBX_OK;
        } else {
            sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "raw transfer: no result");
        }
    }
    json_decref(v);
out:
    rconn_free(rc);
    free(buf);
    return rcode;
}
