/*
 * fs.c - files in sandboxes (fs.*, PROTOCOL.md "Files"): whole-file and
 * streamed reads and writes, sync and async. A stream is a sequence of
 * calls of at most one chunk each (SBX_FS_CHUNK), one in flight at a time,
 * so memory stays at a chunk on both sides whatever the file's size; the
 * daemon's answer to each chunk is the backpressure.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbx/sbx.h"
#include "sbx/sbx_async.h"
#include "sbx_private.h"

/* -- shared --------------------------------------------------------------------- */

static json_t *read_params(const char *sandbox, const char *path, uint64_t off)
{
    return json_pack("{s:s, s:s, s:I, s:I, s:s}", "sandbox", sandbox, "path", path,
                     "offset", (json_int_t)off, "length", (json_int_t)SBX_FS_CHUNK,
                     "encoding", "base64");
}

/* The next write call's params: data as base64, the handle once there is one. */
static json_t *write_params(const char *sandbox, const char *path, json_t *opts,
                            json_int_t handle, const void *data, size_t len, int more)
{
    json_t *p = handle ? json_object() : (opts ? json_deep_copy(opts) : json_object());
    char *b64 = malloc(sbx_base64_encoded_len(len) + 1);
    if (!p || !b64) {
        json_decref(p);
        free(b64);
        return NULL;
    }
    sbx_base64_encode(b64, data, len);
    json_object_set_new(p, "sandbox", json_string(sandbox));
    json_object_set_new(p, "data_b64", json_string(b64));
    json_object_set_new(p, "more", json_boolean(more));
    if (handle)
        json_object_set_new(p, "handle", json_integer(handle));
    else
        json_object_set_new(p, "path", json_string(path));
    free(b64);
    return p;
}

/* -- sync ------------------------------------------------------------------------- */

int sbx__fs_read_call(sbx_ctx *c, struct sbx__fs_chunk *out, sbx_rpc_error **err_out,
                      json_t *params, sbx_fs_sink_cb sink, void *privdata)
{
    json_t *res = NULL;
    if (sbx_call_new(c, &res, err_out, SBX_M_FS_READ, params) != SBX_OK)
        return SBX_ERR;
    char *d = NULL;
    size_t n = 0;
    if (sbx_json_get_bytes(&d, &n, res, "data") != SBX_OK) {
        json_decref(res);
        sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "fs.read answer without data");
        return SBX_ERR;
    }
    out->n = n;
    out->handle = json_integer_value(json_object_get(res, "handle"));
    out->eof = json_is_true(json_object_get(res, "eof"));
    json_decref(res);
    int r = n ? sink(d, n, privdata) : 0;
    free(d);
    if (r != 0) {
        sbx__ctx_seterr(c, SBX_ERR_USAGE, "%s", "the sink stopped the read");
        return SBX_ERR;
    }
    return SBX_OK;
}

int sbx_fs_read_stream(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                       const char *path, sbx_fs_sink_cb sink, void *privdata)
{
    uint64_t off = 0;
    if (err_out)
        *err_out = NULL;
    if (sbx__fs_raw_wanted()) {
        int r = sbx__fs_read_raw(c, err_out, sandbox, path, NULL, sink, privdata);
        if (r != 1)
            return r;
    }
    for (;;) {
        struct sbx__fs_chunk ch;
        if (sbx__fs_read_call(c, &ch, err_out, read_params(sandbox, path, off), sink,
                              privdata) != SBX_OK)
            return SBX_ERR;
        off += ch.n;
        if (ch.eof || ch.n == 0)
            return SBX_OK;
    }
}

int sbx_fs_write_stream(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                        const char *sandbox, const char *path, json_t *opts,
                        sbx_fs_source_cb source, void *privdata)
{
    char *buf = malloc(SBX_FS_CHUNK);
    json_int_t handle = 0;
    if (result_out)
        *result_out = NULL;
    if (err_out)
        *err_out = NULL;
    if (!buf) {
        sbx__ctx_seterr(c, SBX_ERR_OOM, "%s", "out of memory");
        return SBX_ERR;
    }
    /* One chunk ahead, so the last call is known to be the last (more: false). */
    long n = source(buf, SBX_FS_CHUNK, privdata);
    for (;;) {
        if (n < 0) {
            if (handle)
                sbx_call_new(c, NULL, NULL, SBX_M_FS_WRITE,
                             json_pack("{s:s, s:I, s:b}", "sandbox", sandbox, "handle",
                                       handle, "abort", 1));
            free(buf);
            sbx__ctx_seterr(c, SBX_ERR_USAGE, "%s", "the source failed");
            return SBX_ERR;
        }
        char *next = NULL;
        long nn = 0;
        if ((size_t)n == SBX_FS_CHUNK) {
            next = malloc(SBX_FS_CHUNK);
            nn = next ? source(next, SBX_FS_CHUNK, privdata) : -1;
        }
        int more = nn > 0 || (nn < 0 && next);
        json_t *p = write_params(sandbox, path, opts, handle, buf, (size_t)n, more);
        json_t *res = NULL;
        int rc = p ? sbx_call_new(c, &res, err_out, SBX_M_FS_WRITE, p) : SBX_ERR;
        free(buf);
        buf = next;
        if (rc != SBX_OK) {
            free(buf);
            return SBX_ERR;
        }
        handle = json_integer_value(json_object_get(res, "handle"));
        if (!more) {
            if (result_out)
                *result_out = res;
            else
                json_decref(res);
            free(buf);
            return SBX_OK;
        }
        json_decref(res);
        n = nn;
    }
}

struct membuf {
    char *d;
    size_t len, cap;
};

static int mem_sink(const void *data, size_t len, void *privdata)
{
    struct membuf *m = privdata;
    if (m->len + len + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < m->len + len + 1)
            cap *= 2;
        char *d = realloc(m->d, cap);
        if (!d)
            return -1;
        m->d = d;
        m->cap = cap;
    }
    memcpy(m->d + m->len, data, len);
    m->len += len;
    m->d[m->len] = '\0';
    return 0;
}

int sbx_fs_read(sbx_ctx *c, char **data_out, size_t *len_out, sbx_rpc_error **err_out,
                const char *sandbox, const char *path)
{
    struct membuf m = {0};
    *data_out = NULL;
    *len_out = 0;
    if (sbx_fs_read_stream(c, err_out, sandbox, path, mem_sink, &m) != SBX_OK) {
        free(m.d);
        return SBX_ERR;
    }
    if (!m.d && mem_sink("", 0, &m) != 0) {
        sbx__ctx_seterr(c, SBX_ERR_OOM, "%s", "out of memory");
        return SBX_ERR;
    }
    *data_out = m.d;
    *len_out = m.len;
    return SBX_OK;
}

struct memsrc {
    const char *d;
    size_t len, off;
};

static long mem_source(void *buf, size_t cap, void *privdata)
{
    struct memsrc *m = privdata;
    size_t n = m->len - m->off < cap ? m->len - m->off : cap;
    memcpy(buf, m->d + m->off, n);
    m->off += n;
    return (long)n;
}

int sbx_fs_write(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                 const char *sandbox, const char *path, const void *data, size_t len,
                 json_t *opts)
{
    struct memsrc m = {data, len, 0};
    if (len >= SBX_FS_RAW_MIN && sbx__fs_raw_wanted()) {
        if (result_out)
            *result_out = NULL;
        if (err_out)
            *err_out = NULL;
        int r = sbx__fs_write_raw(c, result_out, err_out, sandbox, path, opts, len,
                                  mem_source, &m);
        if (r != 1)
            return r;
    }
    return sbx_fs_write_stream(c, result_out, err_out, sandbox, path, opts, mem_source,
                               &m);
}

static long fd_source(void *buf, size_t cap, void *privdata)
{
    int fd = *(int *)privdata;
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, (char *)buf + got, cap - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (long)got;
}

int sbx_fs_write_fd(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                    const char *sandbox, const char *path, json_t *opts, int fd)
{
    struct stat st;
    if (result_out)
        *result_out = NULL;
    if (err_out)
        *err_out = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= SBX_FS_RAW_MIN &&
        sbx__fs_raw_wanted()) {
        off_t pos = lseek(fd, 0, SEEK_CUR);
        uint64_t size = pos >= 0 && pos < st.st_size ? (uint64_t)(st.st_size - pos) : 0;
        int r = sbx__fs_write_raw(c, result_out, err_out, sandbox, path, opts, size,
                                  fd_source, &fd);
        if (r != 1)
            return r;
    }
    return sbx_fs_write_stream(c, result_out, err_out, sandbox, path, opts, fd_source,
                               &fd);
}

/* -- async -------------------------------------------------------------------------- */

struct aread {
    char *sandbox, *path;
    uint64_t off;
    sbx_fs_sink_cb sink;
    sbx_reply_cb done;
    void *privdata;
};

static void aread_free(struct aread *r)
{
    free(r->sandbox);
    free(r->path);
    free(r);
}

static void aread_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                        void *privdata)
{
    struct aread *r = privdata;
    char *d = NULL;
    size_t n = 0;
    if (!result || sbx_json_get_bytes(&d, &n, result, "data") != SBX_OK) {
        r->done(ac, NULL, err, r->privdata);
        aread_free(r);
        return;
    }
    int stop = n ? r->sink(d, n, r->privdata) : 0;
    free(d);
    r->off += n;
    if (stop || json_is_true(json_object_get(result, "eof")) || n == 0 ||
        sbx_async_call_new(ac, SBX_M_FS_READ, read_params(r->sandbox, r->path, r->off),
                           aread_reply, r) != SBX_OK) {
        r->done(ac, stop ? NULL : result, NULL, r->privdata);
        aread_free(r);
    }
}

int sbx_async_fs_read(sbx_async *ac, const char *sandbox, const char *path,
                      sbx_fs_sink_cb sink, sbx_reply_cb done, void *privdata)
{
    struct aread *r = calloc(1, sizeof(*r));
    if (!r)
        return SBX_ERR;
    r->sandbox = strdup(sandbox);
    r->path = strdup(path);
    r->sink = sink;
    r->done = done;
    r->privdata = privdata;
    if (!r->sandbox || !r->path ||
        sbx_async_call_new(ac, SBX_M_FS_READ, read_params(sandbox, path, 0), aread_reply,
                           r) != SBX_OK) {
        aread_free(r);
        return SBX_ERR;
    }
    return SBX_OK;
}

struct awrite {
    char *sandbox, *path;
    json_t *opts;
    const char *data;
    size_t len, off;
    json_int_t handle;
    sbx_reply_cb done;
    void *privdata;
};

static void awrite_free(struct awrite *w)
{
    free(w->sandbox);
    free(w->path);
    json_decref(w->opts);
    free(w);
}

static int awrite_next(sbx_async *ac, struct awrite *w);

static void awrite_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                         void *privdata)
{
    struct awrite *w = privdata;
    if (!result || w->off >= w->len) {
        w->done(ac, result, err, w->privdata);
        awrite_free(w);
        return;
    }
    w->handle = json_integer_value(json_object_get(result, "handle"));
    if (awrite_next(ac, w) != SBX_OK) {
        w->done(ac, NULL, NULL, w->privdata);
        awrite_free(w);
    }
}

static int awrite_next(sbx_async *ac, struct awrite *w)
{
    size_t n = w->len - w->off > SBX_FS_CHUNK ? SBX_FS_CHUNK : w->len - w->off;
    int more = w->off + n < w->len;
    json_t *p =
        write_params(w->sandbox, w->path, w->opts, w->handle, w->data + w->off, n, more);
    w->off += n;
    if (!p)
        return SBX_ERR;
    return sbx_async_call_new(ac, SBX_M_FS_WRITE, p, awrite_reply, w);
}

int sbx_async_fs_write(sbx_async *ac, const char *sandbox, const char *path,
                       const void *data, size_t len, json_t *opts, sbx_reply_cb done,
                       void *privdata)
{
    struct awrite *w = calloc(1, sizeof(*w));
    if (!w)
        return SBX_ERR;
    w->sandbox = strdup(sandbox);
    w->path = strdup(path);
    w->opts = opts ? json_deep_copy(opts) : NULL;
    w->data = data;
    w->len = len;
    w->done = done;
    w->privdata = privdata;
    if (!w->sandbox || !w->path || awrite_next(ac, w) != SBX_OK) {
        awrite_free(w);
        return SBX_ERR;
    }
    return SBX_OK;
}
