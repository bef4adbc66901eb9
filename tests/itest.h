/*
 * itest.h - a deliberately dumb JSON-RPC client for integration tests: raw
 * socket, blocking reads with a deadline, no libsbx, so the tests check the
 * wire protocol itself. Header-only; each test binary includes it once.
 */
#ifndef SBX_ITEST_H
#define SBX_ITEST_H

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef json_t *(*tool_fn)(const char *name, json_t *args, int *err_code,
                           const char **err_msg);

typedef struct conn {
    int fd;
    char *buf;
    size_t off, len, cap; /* unread bytes are buf[off, len) */
    json_t *notes;        /* notifications seen, in order */
    int next_id;
    tool_fn tool;
    int closed;
} conn;

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline conn *cn_open(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return NULL;
    }
    conn *c = calloc(1, sizeof(*c));
    c->fd = fd;
    c->notes = json_array();
    return c;
}

static inline void cn_close(conn *c)
{
    if (!c)
        return;
    close(c->fd);
    free(c->buf);
    json_decref(c->notes);
    free(c);
}

static inline int cn_send_raw(conn *c, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Next message (new ref), or NULL on timeout/EOF. */
static inline json_t *cn_read(conn *c, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        char *nl =
            c->len > c->off ? memchr(c->buf + c->off, '\n', c->len - c->off) : NULL;
        if (nl) {
            size_t l = (size_t)(nl - (c->buf + c->off));
            json_t *v =
                json_loadb(c->buf + c->off, l, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            c->off += l + 1;
            return v ? v : json_string("<unparseable>");
        }
        if (c->off > 0) {
            memmove(c->buf, c->buf + c->off, c->len - c->off);
            c->len -= c->off;
            c->off = 0;
        }
        int left = (int)(deadline - now_ms());
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, left > 0 ? left : 0) <= 0) {
            if (left <= 0)
                return NULL;
            continue;
        }
        if (c->cap - c->len < 65536) {
            c->cap = c->cap ? c->cap * 2 : 262144;
            c->buf = realloc(c->buf, c->cap);
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r <= 0) {
            c->closed = 1;
            return NULL;
        }
        c->len += (size_t)r;
    }
}

static inline void cn_answer_tool(conn *c, json_t *req)
{
    json_t *params = json_object_get(req, "params");
    int code = 0;
    const char *msg = NULL;
    json_t *res = c->tool ? c->tool(json_string_value(json_object_get(params, "name")),
                                    json_object_get(params, "args"), &code, &msg)
                          : NULL;
    json_t *ans =
        res ? json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                        json_object_get(req, "id"), "result", res)
            : json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                        json_object_get(req, "id"), "error", "code", code ? code : -1,
                        "message", msg ? msg : "no tool handler");
    char *s = json_dumps(ans, JSON_COMPACT);
    cn_send_raw(c, s, strlen(s));
    cn_send_raw(c, "\n", 1);
    free(s);
    json_decref(ans);
}

/* Sends a request with params (stolen) and waits for its response (new ref).
 * Notifications are kept in c->notes; tool.call requests are answered. */
static inline json_t *cn_call_t(conn *c, int timeout_ms, const char *method,
                                json_t *params)
{
    int id = ++c->next_id;
    json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method",
                            method, "params", params ? params : json_object());
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    /* One send with its newline, as a client does: two would cost the
     * daemon a second wakeup whenever it reads between them. */
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (line) {
        s = line;
        s[n++] = '\n';
        s[n] = '\0';
        cn_send_raw(c, s, n);
    } else {
        cn_send_raw(c, s, n);
        cn_send_raw(c, "\n", 1);
    }
    free(s);
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - now_ms());
        json_t *m = cn_read(c, left > 0 ? left : 0);
        if (!m)
            return json_pack("{s:{s:i, s:s}}", "error", "code", 1, "message",
                             "timeout or EOF");
        json_t *mid = json_object_get(m, "id");
        const char *meth = json_string_value(json_object_get(m, "method"));
        if (meth && mid && strcmp(meth, "tool.call") == 0) {
            cn_answer_tool(c, m);
            json_decref(m);
            continue;
        }
        if (meth) {
            json_array_append_new(c->notes, m);
            continue;
        }
        if (json_is_integer(mid) && json_integer_value(mid) == id)
            return m;
        json_decref(m);
    }
}

static inline json_t *cn_call(conn *c, const char *method, json_t *params)
{
    return cn_call_t(c, 15000, method, params);
}

static inline int err_code(json_t *resp)
{
    return (int)json_integer_value(
        json_object_get(json_object_get(resp, "error"), "code"));
}
/* The errno name in an error's data (fs.* -32010), or "". */
static inline const char *err_errno(json_t *resp)
{
    json_t *d = json_object_get(json_object_get(resp, "error"), "data");
    const char *s = json_string_value(json_object_get(d, "errno"));
    return s ? s : "";
}

static inline json_t *res_of(json_t *resp)
{
    return json_object_get(resp, "result");
}
static inline json_int_t res_int(json_t *resp, const char *k)
{
    return json_integer_value(json_object_get(res_of(resp), k));
}
static inline const char *res_str(json_t *resp, const char *k)
{
    const char *s = json_string_value(json_object_get(res_of(resp), k));
    return s ? s : "";
}

/* Count and concatenate process.output notes for (pid, stream). */
static inline size_t notes_output(conn *c, int pid, const char *stream, char *out,
                                  size_t max)
{
    size_t n = 0, i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") !=
            0)
            continue;
        if (json_integer_value(json_object_get(p, "pid")) != pid ||
            strcmp(json_string_value(json_object_get(p, "stream")), stream) != 0)
            continue;
        const char *d = json_string_value(json_object_get(p, "data"));
        size_t l = json_string_length(json_object_get(p, "data"));
        if (out && d && n + l < max) {
            memcpy(out + n, d, l);
            out[n + l] = '\0';
        }
        n += d ? l : 0;
    }
    return n;
}

#endif
