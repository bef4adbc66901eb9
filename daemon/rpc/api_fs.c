/*
 * api_fs.c - the fs.* methods (PROTOCOL.md "Files"): params checked and
 * paths made absolute here, then core/fs.c bounds them and hands them to
 * the sandbox's provider. Write handles and watches belong to the session
 * that made them (fs_drop_owner when it closes).
 */
#include "rpc/api_fs.h"
#include "rpc/api_args.h"

#include <stdlib.h>
#include <string.h>

#include "rpc/call.h"
#include "rpc/conn.h"
#include "daemon.h"
#include "core/fs.h"
#include "rpc/fs_stream.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "core/utf8.h"
#include "xalloc.h"

#define FS_PATH_MAX 4096

/* -- params ------------------------------------------------------------------- */

static int bad(struct call *c, const char *param, const char *msg)
{
    call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", param), "%s: %s", param, msg);
    return -1;
}

static int get_bool(struct call *c, json_t *params, const char *key, int *out)
{
    json_t *v = json_object_get(params, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return bad(c, key, "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

static int get_int(struct call *c, json_t *params, const char *key, int64_t lo,
                   int64_t hi, int64_t *out)
{
    json_t *v = json_object_get(params, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char msg[96];
        snprintf(msg, sizeof(msg), "must be an integer in %lld..%lld", (long long)lo,
                 (long long)hi);
        return bad(c, key, msg);
    }
    *out = json_integer_value(v);
    return 0;
}

static uid_t uid_of(struct call *c)
{
    return c->conn ? c->conn->uid : 0;
}

static struct sandbox *get_sb(struct call *c, json_t *params)
{
    json_t *v = json_object_get(params, "sandbox");
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
        bad(c, "sandbox", "must be a string (a sandbox id)");
        return NULL;
    }
    const char *id = json_string_value(v);
    struct sandbox *sb = sandbox_find(uid_of(c), !c->conn || c->conn->admin, id);
    if (!sb) {
        call_error(c, SBX_E_NOT_FOUND, json_pack("{s:s}", "sandbox", id),
                   "sandbox not found: %s", id);
        return NULL;
    }
    return sb;
}

/* params[key] as an absolute path (relative ones join the sandbox's working
 * directory; nothing else is touched: the sandbox resolves `..` and links),
 * set into args. 0, or -1 answered. */
static int get_path(struct call *c, struct sandbox *sb, json_t *params, const char *key,
                    json_t *args)
{
    json_t *v = json_object_get(params, key);
    if (!json_is_string(v))
        return bad(c, key, "must be a string (a path)");
    const char *p = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || n > FS_PATH_MAX)
        return bad(c, key, "must be 1..4096 bytes");
    if (strlen(p) != n)
        return bad(c, key, "must not contain a NUL byte");
    if (p[0] == '/') {
        json_object_set(args, key, v);
        return 0;
    }
    const char *wd = sandbox_cwd_for(sb, NULL);
    if (!wd)
        wd = "/";
    size_t wl = strlen(wd);
    while (wl > 1 && wd[wl - 1] == '/')
        wl--;
    if (wl + 1 + n > FS_PATH_MAX)
        return bad(c, key, "is too long once joined to the working directory");
    char *abs = xmalloc(wl + 2 + n);
    memcpy(abs, wd, wl);
    size_t o = wl;
    if (!(wl == 1 && wd[0] == '/'))
        abs[o++] = '/';
    memcpy(abs + o, p, n);
    abs[o + n] = '\0';
    json_object_set_new(args, key, json_string(abs));
    free(abs);
    return 0;
}

/* What every path method starts with: the sandbox (*sb) and its args with
 * params.path made absolute. NULL, answered, when either is wrong. */
static json_t *path_args(struct call *c, json_t *params, struct sandbox **sb)
{
    *sb = get_sb(c, params);
    if (!*sb)
        return NULL;
    json_t *args = json_object();
    if (get_path(c, *sb, params, "path", args) < 0) {
        json_decref(args);
        return NULL;
    }
    return args;
}

/* params[key], a boolean (def when absent), set into args. 0, or -1 answered. */
static int set_bool(struct call *c, json_t *params, const char *key, int def,
                    json_t *args)
{
    int v = def;
    if (get_bool(c, params, key, &v) < 0)
        return -1;
    json_object_set_new(args, key, json_boolean(v));
    return 0;
}

/* -- answers ------------------------------------------------------------------ */

static void done(sbx_err_t *err, json_t *result, void *privdata)
{
    api_call_answer(privdata, err, result, "file operation failed");
}

static int on_event(json_t *params, void *owner)
{
    struct rpc_conn *k = owner;
    /* A session that does not read its events loses them (and gets an
     * overflow once it reads again) instead of growing without bound. */
    if (k->closing || k->ops->queued(k) > (size_t)D->cfg.session_output_high)
        return -1;
    conn_notify(k, SBX_N_FS_EVENT, json_incref(params));
    return 0;
}

static void start(struct call *c, struct sandbox *sb, enum fs_op op, json_t *args)
{
    fs_start(sb, uid_of(c), op, args, NULL, 0, 0, NULL, c->conn, on_event, done, c);
}

/* transport: absent or "json" 0, "raw" 1; -1 answered. */
static int get_transport(struct call *c, json_t *params)
{
    json_t *v = json_object_get(params, "transport");
    if (!v || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "json"))
        return 0;
    if (s && !strcmp(s, "raw"))
        return 1;
    return bad(c, "transport", "must be \"json\" or \"raw\"");
}

/* -- archives (format "tar") ----------------------------------------------------- */

/* fs.read {sandbox, path, format: "tar", follow?, name?, transport?} starts
 * an archive of path; fs.read {sandbox, handle} takes its next chunk. */
static void archive_read(struct call *c, json_t *params)
{
    struct sandbox *sb = get_sb(c, params);
    if (!sb)
        return;
    int64_t hid = 0, len = 0;
    int abort_it = 0;
    if (get_int(c, params, "handle", 1, INT64_MAX, &hid) < 0 ||
        get_int(c, params, "length", 0, INT64_MAX, &len) < 0 ||
        get_bool(c, params, "abort", &abort_it) < 0)
        return;
    if (abort_it && !hid) {
        bad(c, "abort", "needs the handle of the archive to let go");
        return;
    }
    if (hid) {
        struct fs_handle *h =
            c->conn ? fs_handle_find((uint64_t)hid, c->conn, FS_OP_READ) : NULL;
        const char *hsb =
            h ? json_string_value(json_object_get(fs_handle_args(h), "sandbox_id"))
              : NULL;
        if (!hsb || strcmp(hsb, sb->id) != 0) {
            bad(c, "handle", "no archive being read with this handle in this session");
            return;
        }
        if (fs_handle_busy(h)) {
            bad(c, "handle", "busy: wait for the answer to the previous chunk");
            return;
        }
        /* A client done early lets the archive go now, rather than by
         * disconnecting or after the idle timeout: the provider ends the
         * tar behind it (Docker's stream, Modal's tar in the sandbox). */
        if (abort_it) {
            fs_handle_drop(h);
            call_reply(c, json_pack("{s:b}", "aborted", 1));
            return;
        }
        json_t *args = json_deep_copy(fs_handle_args(h));
        json_object_set_new(args, "length", json_integer(len));
        fs_start(sb, uid_of(c), FS_OP_READ, args, NULL, 0, 0, h, c->conn, NULL, done, c);
        return;
    }
    json_t *fmt = json_object_get(params, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "tar") != 0) {
        bad(c, "format", "must be \"tar\" (or give a handle)");
        return;
    }
    if (json_object_get(params, "offset")) {
        bad(c, "offset", "an archive is read from its start, by its handle");
        return;
    }
    json_t *args = json_pack("{s:s, s:s}", "sandbox_id", sb->id, "format", "tar");
    json_t *name = json_object_get(params, "name");
    if (get_path(c, sb, params, "path", args) < 0 ||
        set_bool(c, params, "follow", 0, args) < 0)
        goto out;
    if (name && !json_is_null(name)) {
        const char *n = json_string_value(name);
        if (!n || !*n || strchr(n, '/') || strlen(n) != json_string_length(name) ||
            !strcmp(n, "..")) {
            bad(c, "name", "must be one path component (the top entry's name)");
            goto out;
        }
        json_object_set(args, "name", name);
    }
    int raw = get_transport(c, params);
    if (raw < 0)
        goto out;
    json_object_set_new(args, "length", json_integer(len));
    if (raw) {
        json_object_del(args, "sandbox_id"); /* fs_stream_offer sets it */
        fs_stream_offer(c, sb, FS_OP_READ, args);
        return;
    }
    fs_start(sb, uid_of(c), FS_OP_READ, args, NULL, 0, 0, NULL, c->conn, NULL, done, c);
    return;
out:
    json_decref(args);
}

/* -- methods ------------------------------------------------------------------ */

void m_fs_read(struct call *c, json_t *params)
{
    if (json_object_get(params, "handle") || json_object_get(params, "format") ||
        json_object_get(params, "abort")) {
        archive_read(c, params);
        return;
    }
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    if (!args)
        return;
    int64_t off = 0, len = 0;
    json_t *enc = json_object_get(params, "encoding");
    json_t *fmt = json_object_get(params, "format");
    if (get_int(c, params, "offset", 0, INT64_MAX, &off) < 0 ||
        get_int(c, params, "length", 0, INT64_MAX, &len) < 0)
        goto out;
    if (enc && !json_is_null(enc) &&
        (!json_is_string(enc) || (strcmp(json_string_value(enc), "utf8") != 0 &&
                                  strcmp(json_string_value(enc), "base64") != 0))) {
        bad(c, "encoding", "must be \"utf8\" or \"base64\"");
        goto out;
    }
    (void)fmt; /* null: the plain read */
    int raw = get_transport(c, params);
    if (raw < 0)
        goto out;
    json_object_set_new(args, "offset", json_integer(off));
    json_object_set_new(args, "length", json_integer(len));
    if (raw) {
        /* length here is the whole transfer's (0: to the end), not a chunk's */
        fs_stream_offer(c, sb, FS_OP_READ, args);
        return;
    }
    if (enc && json_is_string(enc))
        json_object_set(args, "encoding", enc);
    start(c, sb, FS_OP_READ, args);
    return;
out:
    json_decref(args);
}

/* data or data_b64, decoded (malloc'd) into *out. 0, or -1 answered. */
static int get_data(struct call *c, json_t *params, uint8_t **out, size_t *len)
{
    json_t *d = json_object_get(params, "data"), *b = json_object_get(params, "data_b64");
    *out = NULL;
    *len = 0;
    if (d && !json_is_null(d) && b && !json_is_null(b))
        return bad(c, "data", "give data or data_b64, not both");
    if (d && json_is_string(d)) {
        *len = json_string_length(d);
        *out = xmalloc(*len ? *len : 1);
        memcpy(*out, json_string_value(d), *len);
    } else if (b && json_is_string(b)) {
        *out = base64_decode(json_string_value(b), json_string_length(b), len);
        if (!*out)
            return bad(c, "data_b64", "must be base64");
    } else if ((d && !json_is_null(d)) || (b && !json_is_null(b))) {
        return bad(c, d ? "data" : "data_b64", "must be a string");
    } else {
        return 1; /* none: allowed for a handle's last call */
    }
    if ((int64_t)*len > D->cfg.fs_chunk_bytes) {
        free(*out);
        *out = NULL;
        call_error(c, SBX_E_LIMIT,
                   json_pack("{s:s, s:I, s:I}", "limit", "fs_chunk_bytes", "max",
                             (json_int_t)D->cfg.fs_chunk_bytes, "size", (json_int_t)*len),
                   "a write chunk of %zu bytes is over limits.fs_chunk_bytes (%lld): "
                   "send it in parts with more/handle",
                   *len, (long long)D->cfg.fs_chunk_bytes);
        return -1;
    }
    return 0;
}

void m_fs_write(struct call *c, json_t *params)
{
    struct sandbox *sb = get_sb(c, params);
    if (!sb)
        return;
    int more = 0, abort_it = 0, append = 0, parents = 0;
    int64_t hid = 0, mode = -1;
    if (get_bool(c, params, "more", &more) < 0 ||
        get_bool(c, params, "abort", &abort_it) < 0 ||
        get_int(c, params, "handle", 1, INT64_MAX, &hid) < 0)
        return;
    if (hid) {
        struct fs_handle *h =
            c->conn ? fs_handle_find((uint64_t)hid, c->conn, FS_OP_WRITE) : NULL;
        if (!h || json_object_get(fs_handle_args(h), "sandbox_id") == NULL ||
            strcmp(json_string_value(json_object_get(fs_handle_args(h), "sandbox_id")),
                   sb->id) != 0) {
            bad(c, "handle", "no open write with this handle in this session");
            return;
        }
        if (fs_handle_busy(h)) {
            bad(c, "handle", "busy: wait for the answer to the previous chunk");
            return;
        }
        if (abort_it) {
            fs_handle_drop(h);
            call_reply(c, json_pack("{s:b}", "aborted", 1));
            return;
        }
        uint8_t *data;
        size_t len;
        int r = get_data(c, params, &data, &len);
        if (r < 0)
            return;
        fs_start(sb, uid_of(c), FS_OP_WRITE, json_deep_copy(fs_handle_args(h)), data, len,
                 more, h, c->conn, NULL, done, c);
        return;
    }
    json_t *args = json_pack("{s:s}", "sandbox_id", sb->id);
    json_t *fmt = json_object_get(params, "format");
    if (fmt && !json_is_null(fmt)) {
        if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "tar") != 0) {
            json_decref(args);
            bad(c, "format", "must be \"tar\"");
            return;
        }
        if (json_object_get(params, "append") || json_object_get(params, "mode")) {
            json_decref(args);
            bad(c, "format",
                "a tar write takes no append or mode (the entries have theirs)");
            return;
        }
        json_object_set_new(args, "format", json_string("tar"));
    }
    if (get_path(c, sb, params, "path", args) < 0 ||
        get_int(c, params, "mode", 0, 07777, &mode) < 0 ||
        get_bool(c, params, "append", &append) < 0 ||
        get_bool(c, params, "mkdir_parents", &parents) < 0) {
        json_decref(args);
        return;
    }
    int raw = get_transport(c, params);
    if (raw < 0) {
        json_decref(args);
        return;
    }
    if (raw) {
        int64_t size = -1;
        if (get_int(c, params, "size", 0, INT64_MAX, &size) < 0) {
            json_decref(args);
            return;
        }
        if (size < 0 ||
            (json_object_get(params, "data") &&
             !json_is_null(json_object_get(params, "data"))) ||
            (json_object_get(params, "data_b64") &&
             !json_is_null(json_object_get(params, "data_b64"))) ||
            more) {
            bad(c, "size",
                "transport raw takes size (the byte count) and no data, data_b64 or more");
            json_decref(args);
            return;
        }
        if (mode >= 0)
            json_object_set_new(args, "mode", json_integer(mode));
        json_object_set_new(args, "append", json_boolean(append));
        json_object_set_new(args, "mkdir_parents", json_boolean(parents));
        json_object_set_new(args, "size", json_integer(size));

        json_object_del(args, "sandbox_id"); /* fs_stream_offer sets it */
        fs_stream_offer(c, sb, FS_OP_WRITE, args);
        return;
    }
    uint8_t *data;
    size_t len;
    int r = get_data(c, params, &data, &len);
    if (r != 0) {
        if (r > 0)
            bad(c, "data", "data (string) or data_b64 is required");
        json_decref(args);
        return;
    }
    if (mode >= 0)
        json_object_set_new(args, "mode", json_integer(mode));
    json_object_set_new(args, "append", json_boolean(append));
    json_object_set_new(args, "mkdir_parents", json_boolean(parents));
    fs_start(sb, uid_of(c), FS_OP_WRITE, args, data, len, more, NULL, c->conn, NULL, done,
             c);
}

void m_fs_list(struct call *c, json_t *params)
{
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    if (!args)
        return;
    int64_t depth = 1, limit = D->cfg.fs_list_max, skip = 0;
    json_t *cur = json_object_get(params, "cursor");
    if (get_int(c, params, "depth", 1, 16, &depth) < 0 ||
        get_int(c, params, "limit", 1, INT64_MAX, &limit) < 0)
        goto out;
    if (cur && !json_is_null(cur)) {
        const char *s = json_string_value(cur);
        char *end = NULL;
        skip = s ? strtoll(s, &end, 10) : -1;
        if (!s || !*s || *end || skip < 0) {
            bad(c, "cursor", "must be a cursor from an earlier fs.list");
            goto out;
        }
    }
    if (limit > D->cfg.fs_list_max)
        limit = D->cfg.fs_list_max;
    json_object_set_new(args, "depth", json_integer(depth));
    json_object_set_new(args, "limit", json_integer(limit));
    json_object_set_new(args, "skip", json_integer(skip));
    start(c, sb, FS_OP_LIST, args);
    return;
out:
    json_decref(args);
}

void m_fs_stat(struct call *c, json_t *params)
{
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    if (!args || set_bool(c, params, "follow", 1, args) < 0) {
        json_decref(args);
        return;
    }
    start(c, sb, FS_OP_STAT, args);
}

void m_fs_mkdir(struct call *c, json_t *params)
{
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    int64_t mode = -1;
    if (!args || set_bool(c, params, "parents", 0, args) < 0 ||
        get_int(c, params, "mode", 0, 07777, &mode) < 0) {
        json_decref(args);
        return;
    }
    if (mode >= 0)
        json_object_set_new(args, "mode", json_integer(mode));
    start(c, sb, FS_OP_MKDIR, args);
}

void m_fs_remove(struct call *c, json_t *params)
{
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    if (!args || set_bool(c, params, "recursive", 0, args) < 0) {
        json_decref(args);
        return;
    }
    start(c, sb, FS_OP_REMOVE, args);
}

void m_fs_rename(struct call *c, json_t *params)
{
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    if (!args || get_path(c, sb, params, "to", args) < 0 ||
        set_bool(c, params, "overwrite", 1, args) < 0) {
        json_decref(args);
        return;
    }
    start(c, sb, FS_OP_RENAME, args);
}

void m_fs_watch(struct call *c, json_t *params)
{
    struct sandbox *sb;
    json_t *args = path_args(c, params, &sb);
    if (!args || set_bool(c, params, "recursive", 0, args) < 0) {
        json_decref(args);
        return;
    }
    if (!c->conn) {
        json_decref(args);
        call_reply(c, NULL);
        return;
    }
    json_object_set_new(args, "queue", json_integer(D->cfg.fs_event_queue));
    start(c, sb, FS_OP_WATCH, args);
}

void m_fs_unwatch(struct call *c, json_t *params)
{
    struct sandbox *sb = get_sb(c, params);
    if (!sb)
        return;
    int64_t id = 0;
    if (get_int(c, params, "watch", 1, INT64_MAX, &id) < 0)
        return;
    struct fs_handle *h =
        c->conn ? fs_handle_find((uint64_t)id, c->conn, FS_OP_WATCH) : NULL;
    if (!h) {
        bad(c, "watch", "no such watch in this session");
        return;
    }
    fs_handle_drop(h);
    call_reply(c, NULL);
}
