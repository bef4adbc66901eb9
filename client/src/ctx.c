/*
 * ctx.c - what the sync and async APIs share: errors, the socket, the output
 * buffer, message serialization and classification.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sbx_private.h"

/* The obuf shrinks back after a flush when it grew beyond this. */
#define OBUF_KEEP (256 * 1024)

uint64_t sbx__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- errors ---------------------------------------------------------------- */

static void vseterr(sbx_ctx *c, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void vseterr(sbx_ctx *c, int code, const char *fmt, va_list ap)
{
    c->err = code;
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
}

void sbx__ctx_seterr(sbx_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vseterr(c, code, fmt, ap);
    va_end(ap);
}

void sbx__ctx_fail(sbx_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    /* Keep the first fatal error: it is the cause, later ones are echoes. */
    if (c->flags & SBX_BROKEN)
        return;
    va_start(ap, fmt);
    vseterr(c, code, fmt, ap);
    va_end(ap);
    c->flags |= SBX_BROKEN;
}

void sbx__ctx_clear_err(sbx_ctx *c)
{
    c->err = 0;
    c->errstr[0] = '\0';
}

void sbx__ctx_fail_reader(sbx_ctx *c)
{
    sbx__ctx_fail(c, sbx_reader_err(c->reader), "%s", sbx_reader_errstr(c->reader));
}

/* ---- lifecycle --------------------------------------------------------------- */

int sbx__ctx_init(sbx_ctx *c)
{
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->reader = sbx_reader_new();
    c->priv = calloc(1, sizeof(*c->priv));
    if (!c->reader || !c->priv) {
        sbx_reader_free(c->reader);
        free(c->priv);
        return SBX_ERR;
    }
    c->priv->next_id = 1;
    return SBX_OK;
}

void sbx__ctx_deinit(sbx_ctx *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    sbx_reader_free(c->reader);
    c->reader = NULL;
    if (c->priv) {
        free(c->priv->obuf.data);
        json_decref(c->priv->queue);
        free(c->priv);
        c->priv = NULL;
    }
}

/* ---- socket ------------------------------------------------------------------ */

int sbx__ctx_connect_unix(sbx_ctx *c, const char *path, int timeout_ms, int nonblock)
{
    struct sockaddr_un sa;
    size_t n = strlen(path);

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (n == 0 || n >= sizeof(sa.sun_path)) {
        sbx__ctx_fail(c, SBX_ERR_IO, "socket path %s: %s", n ? "too long" : "empty",
                      path);
        return SBX_ERR;
    }
    memcpy(sa.sun_path, path, n + 1);

    int fd =
        socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
    if (fd < 0) {
        sbx__ctx_fail(c, SBX_ERR_IO, "socket: %s", strerror(errno));
        return SBX_ERR;
    }
    c->fd = fd;

    if (!nonblock && timeout_ms > 0) {
        /* For AF_UNIX, a blocking connect waits for room in the listen
         * backlog for at most SO_SNDTIMEO. */
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        if (nonblock && e == EINPROGRESS) {
            /* Finished by the first writable event (handle_write). */
        } else if (!nonblock && (e == EAGAIN || e == EINPROGRESS)) {
            sbx__ctx_fail(c, SBX_ERR_TIMEOUT, "connect %s: timed out", path);
            return SBX_ERR;
        } else {
            sbx__ctx_fail(c, SBX_ERR_IO, "connect %s: %s", path, strerror(e));
            return SBX_ERR;
        }
    }
    if (!nonblock) {
        struct timeval zero = {0, 0};
        if (timeout_ms > 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof(zero));
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
            sbx__ctx_fail(c, SBX_ERR_IO, "fcntl: %s", strerror(errno));
            return SBX_ERR;
        }
        c->flags |= SBX_CONNECTED;
    }
    return SBX_OK;
}

int sbx__ctx_obuf_pending(const sbx_ctx *c)
{
    return c->priv->obuf.pos < c->priv->obuf.len;
}

int sbx__ctx_flush(sbx_ctx *c)
{
    struct sbx_obuf *ob = &c->priv->obuf;

    if (c->flags & SBX_BROKEN)
        return SBX_ERR;
    while (ob->pos < ob->len) {
        ssize_t n = send(c->fd, ob->data + ob->pos, ob->len - ob->pos, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            sbx__ctx_fail(c, SBX_ERR_IO, "write: %s", strerror(errno));
            return SBX_ERR;
        }
        ob->pos += (size_t)n;
    }
    ob->pos = ob->len = 0;
    if (ob->cap > OBUF_KEEP) {
        free(ob->data);
        ob->data = NULL;
        ob->cap = 0;
    }
    return 1;
}

int sbx__ctx_read(sbx_ctx *c)
{
    ssize_t n;

    if (c->flags & SBX_BROKEN)
        return SBX_ERR;
    /* Straight into the reader's buffer: no bounce through the stack. */
    size_t avail;
    char *dst = sbx__reader_space(c->reader, SBX_READ_CHUNK, &avail);
    if (!dst) {
        sbx__ctx_fail_reader(c);
        return SBX_ERR;
    }
    do {
        n = recv(c->fd, dst, avail, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        sbx__ctx_fail(c, SBX_ERR_IO, "read: %s", strerror(errno));
        return SBX_ERR;
    }
    if (n == 0) {
        sbx__ctx_fail(c, SBX_ERR_EOF, "connection closed by sbxd");
        return SBX_ERR;
    }
    sbx__reader_commit(c->reader, (size_t)n);
    return n > INT32_MAX ? INT32_MAX : (int)n;
}

/* ---- serialization ----------------------------------------------------------- */

static int obuf_reserve(struct sbx_obuf *ob, size_t extra)
{
    if (ob->len + extra <= ob->cap)
        return 0;
    /* Reclaim the flushed prefix before growing. */
    if (ob->pos > 0) {
        memmove(ob->data, ob->data + ob->pos, ob->len - ob->pos);
        ob->len -= ob->pos;
        ob->pos = 0;
        if (ob->len + extra <= ob->cap)
            return 0;
    }
    size_t cap = ob->cap ? ob->cap : 4096;
    while (cap < ob->len + extra) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    char *d = realloc(ob->data, cap);
    if (!d)
        return -1;
    ob->data = d;
    ob->cap = cap;
    return 0;
}

static int dump_cb(const char *buf, size_t n, void *data)
{
    struct sbx_obuf *ob = data;
    if (obuf_reserve(ob, n) < 0)
        return -1;
    memcpy(ob->data + ob->len, buf, n);
    ob->len += n;
    return 0;
}

int sbx__ctx_append_msg(sbx_ctx *c, json_t *msg)
{
    struct sbx_obuf *ob = &c->priv->obuf;
    size_t start = ob->len - ob->pos; /* survives a compaction in dump_cb */

    /* JSON_COMPACT output holds no raw newline: strings escape it. */
    if (json_dump_callback(msg, dump_cb, ob, JSON_COMPACT) < 0 ||
        dump_cb("\n", 1, ob) < 0) {
        ob->len = ob->pos + start; /* all or nothing */
        sbx__ctx_seterr(c, SBX_ERR_OOM, "cannot serialize message (out of memory?)");
        return SBX_ERR;
    }
    return SBX_OK;
}

/* sbx__ctx_append_msg for a message built here (stolen; NULL: it could not be). */
static int append_msg_new(sbx_ctx *c, json_t *msg)
{
    if (!msg) {
        sbx__ctx_seterr(c, SBX_ERR_OOM, "out of memory");
        return SBX_ERR;
    }
    int rc = sbx__ctx_append_msg(c, msg);
    json_decref(msg);
    return rc;
}

int sbx__ctx_append_request(sbx_ctx *c, json_int_t id, const char *method, json_t *params)
{
    json_t *msg =
        json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", id, "method", method);
    if (msg && params && json_object_set(msg, "params", params) < 0) {
        json_decref(msg);
        msg = NULL;
    }
    return append_msg_new(c, msg);
}

int sbx__ctx_append_result(sbx_ctx *c, json_t *id, json_t *result)
{
    return append_msg_new(c, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
                                       "result", result ? result : json_null()));
}

int sbx__ctx_append_error(sbx_ctx *c, json_t *id, int code, const char *message,
                          json_t *data)
{
    return append_msg_new(c, json_pack("{s:s, s:O, s:{s:i, s:s, s:o}}", "jsonrpc", "2.0",
                                       "id", id ? id : json_null(), "error", "code", code,
                                       "message", message, "data",
                                       data ? data : json_object()));
}

/* ---- messages ---------------------------------------------------------------- */

enum msg_kind sbx__msg_classify(json_t *m)
{
    if (!json_is_object(m))
        return MSG_INVALID;
    json_t *method = json_object_get(m, "method");
    json_t *id = json_object_get(m, "id");
    if (method) {
        if (!json_is_string(method))
            return MSG_INVALID;
        return id && !json_is_null(id) ? MSG_REQUEST : MSG_NOTIFY;
    }
    if (json_object_get(m, "result") || json_is_object(json_object_get(m, "error")))
        return MSG_RESPONSE;
    return MSG_INVALID;
}

void sbx__rpc_error_view(sbx_rpc_error *e, json_t *error)
{
    json_t *code = json_object_get(error, "code");
    const char *msg = json_string_value(json_object_get(error, "message"));
    json_t *data = json_object_get(error, "data");

    e->code = json_is_integer(code) ? (int)json_integer_value(code) : SBX_E_INTERNAL;
    e->message = msg ? msg : "";
    e->data = data;
}

sbx_rpc_error *sbx__rpc_error_new(json_t *error)
{
    sbx_rpc_error view;
    sbx__rpc_error_view(&view, error);

    size_t n = strlen(view.message);
    sbx_rpc_error *e = malloc(sizeof(*e) + n + 1);
    if (!e)
        return NULL;
    char *msg = (char *)(e + 1);
    memcpy(msg, view.message, n + 1);
    e->code = view.code;
    e->message = msg;
    e->data = json_incref(view.data);
    return e;
}

void sbx_rpc_error_free(sbx_rpc_error *e)
{
    if (!e)
        return;
    json_decref(e->data);
    free(e);
}

int sbx__ctx_reply_unknown(sbx_ctx *c, json_t *m)
{
    const char *method = json_string_value(json_object_get(m, "method"));
    json_t *id = json_object_get(m, "id");

    if (method && strcmp(method, SBX_R_TOOL_CALL) == 0) {
        json_t *params = json_object_get(m, "params");
        const char *tool = json_string_value(json_object_get(params, "name"));
        return sbx__ctx_append_error(c, id, SBX_E_TOOL, "no tool handler in this client",
                                     json_pack("{s:s}", "tool", tool ? tool : ""));
    }
    return sbx__ctx_append_error(c, id, SBX_E_METHOD, "method not found",
                                 json_pack("{s:s}", "method", method ? method : ""));
}
