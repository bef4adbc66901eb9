/*
 * fs.c - files in sandboxes: the bounds, the handles and the answers of
 * fs.* (PROTOCOL.md "Files"). The provider does the work (provider.h,
 * fs_call); this file decides whether it may start, keeps what outlives a
 * call (open writes, watches) and turns the provider's shapes into the
 * protocol's.
 *
 * Memory: a call holds at most one chunk (limits.fs_chunk_bytes) of file
 * data, counted against limits.fs_bytes_in_flight_per_uid from the moment
 * it is asked for until its answer is handed on; so a 1 GiB transfer costs
 * sbxd one chunk at a time, however it is driven.
 */
#include "core/fs.h"

#include <ev.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "core/provider.h"
#include "core/sandbox_obj.h"
#include "sbx_proto.h"
#include "core/usage.h"
#include "core/utf8.h"
#include "xalloc.h"

struct fs_handle {
    struct fs_handle *next, *prev;
    uint64_t id;
    enum fs_op op; /* FS_OP_WRITE or FS_OP_WATCH */
    struct sandbox *sb;
    uid_t uid;
    void *owner;
    fs_event_cb on_event;
    json_t *args; /* the first call's args (owned) */
    void *hdata;  /* the provider's */
    int busy;     /* a call of it is in flight */
    int open;     /* the provider holds it (the first call succeeded) */
    int stopped;  /* opened on a stopped sandbox: fs_call_stopped's */
    int dropped;  /* watch: events lost since the last delivered one */
    double last_used;
};

static struct fs_handle *handles;
static uint64_t next_handle = 1;
static ev_timer idle_timer;
static int idle_timer_on;

/* A read or write of a tar stream (`format: "tar"`): a handle across calls. */
static int is_tar(json_t *args)
{
    const char *f = json_string_value(json_object_get(args, "format"));
    return f && !strcmp(f, "tar");
}

/* Handles that hold a transfer slot and expire when idle. */
static int is_transfer(enum fs_op op)
{
    return op == FS_OP_WRITE || op == FS_OP_READ;
}

/* -- bounds --------------------------------------------------------------------- */

static int limit_err(sbx_err_t *err, const char *limit, int64_t max)
{
    return err_make_data(err, SBX_E_LIMIT,
                         json_pack("{s:s, s:I}", "limit", limit, "max", (json_int_t)max),
                         "limit exceeded: limits.%s (%lld)", limit, (long long)max);
}

static int count_watches(struct sandbox *sb)
{
    int n = 0;
    for (struct fs_handle *h = handles; h; h = h->next)
        n += h->sb == sb && h->op == FS_OP_WATCH;
    return n;
}

/* Takes a transfer slot (unless the handle already holds one) and charge
 * bytes for uid. 0, or -1 with err. */
static int charge(uid_t uid, int slot, size_t bytes, sbx_err_t *err)
{
    struct uid_usage *u = usage_of(uid);
    if (slot && u->fs_transfers >= D->cfg.fs_transfers_per_uid) {
        usage_release(u);
        return limit_err(err, "fs_transfers_per_uid", D->cfg.fs_transfers_per_uid);
    }
    if (u->fs_bytes + bytes > (uint64_t)D->cfg.fs_bytes_in_flight_per_uid) {
        usage_release(u);
        return limit_err(err, "fs_bytes_in_flight_per_uid",
                         D->cfg.fs_bytes_in_flight_per_uid);
    }
    u->fs_transfers += slot;
    u->fs_bytes += bytes;
    return 0;
}

static void uncharge(uid_t uid, int slot, size_t bytes)
{
    struct uid_usage *u = usage_find(uid);
    if (!u)
        return;
    u->fs_transfers -= slot;
    u->fs_bytes -= bytes;
    usage_release(u);
}

/* -- handles ---------------------------------------------------------------------- */

static void idle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    fs_expire(ev_now(D->loop));
}

static struct fs_handle *handle_new(struct sandbox *sb, uid_t uid, enum fs_op op,
                                    json_t *args, void *owner, fs_event_cb on_event)
{
    struct fs_handle *h = xcalloc(1, sizeof(*h));
    h->id = next_handle++;
    h->op = op;
    h->sb = sb;
    h->uid = uid;
    h->owner = owner;
    h->on_event = on_event;
    h->args = json_incref(args);
    h->last_used = ev_now(D->loop);
    h->next = handles;
    if (handles)
        handles->prev = h;
    handles = h;
    if (is_transfer(op) && !idle_timer_on) {
        ev_timer_init(&idle_timer, idle_cb, 1.0, 1.0);
        ev_timer_start(D->loop, &idle_timer);
        idle_timer_on = 1;
    }
    return h;
}

/* Unlinks and frees h; tells the provider when it holds it. */
static void handle_free(struct fs_handle *h, int tell)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        handles = h->next;
    if (h->next)
        h->next->prev = h->prev;
    const struct sbx_provider *ops = h->sb->prov->ops;
    if (tell && h->open && h->stopped && ops->fs_release_stopped)
        ops->fs_release_stopped(h->sb->prov->cookie, h->sb, h->id, h->hdata);
    else if (tell && h->open && !h->stopped && ops->fs_release)
        ops->fs_release(h->sb->prov->cookie, h->sb, h->id, h->hdata);
    if (is_transfer(h->op))
        uncharge(h->uid, 1, 0);
    json_decref(h->args);
    free(h);
    int writes = 0;
    for (struct fs_handle *x = handles; x; x = x->next)
        writes += is_transfer(x->op);
    if (!writes && idle_timer_on) {
        ev_timer_stop(D->loop, &idle_timer);
        idle_timer_on = 0;
    }
}

struct fs_handle *fs_handle_find(uint64_t id, void *owner, enum fs_op op)
{
    for (struct fs_handle *h = handles; h; h = h->next)
        if (h->id == id && h->owner == owner && h->op == op)
            return h;
    return NULL;
}

json_t *fs_handle_args(struct fs_handle *h)
{
    return h->args;
}

int fs_handle_busy(const struct fs_handle *h)
{
    return h->busy;
}

void fs_handle_drop(struct fs_handle *h)
{
    if (h->busy) {
        /* Its call's answer frees it (the provider still has it). */
        h->owner = NULL;
        return;
    }
    handle_free(h, 1);
}

void fs_drop_owner(void *owner)
{
    struct fs_handle *h = handles, *next;
    for (; h; h = next) {
        next = h->next;
        if (h->owner == owner)
            fs_handle_drop(h);
    }
}

void fs_drop_sandbox(struct sandbox *sb)
{
    struct fs_handle *h = handles, *next;
    for (; h; h = next) {
        next = h->next;
        if (h->sb != sb)
            continue;
        if (h->op == FS_OP_WATCH && h->owner && h->on_event) {
            json_t *p =
                json_pack("{s:s, s:I, s:O, s:s, s:b}", "sandbox", sb->id, "watch",
                          (json_int_t)h->id, "path", json_object_get(h->args, "path"),
                          "kind", "overflow", "ended", 1);
            h->on_event(p, h->owner);
            json_decref(p);
        }
        fs_handle_drop(h);
    }
}

void fs_expire(double now)
{
    struct fs_handle *h = handles, *next;
    for (; h; h = next) {
        next = h->next;
        if (is_transfer(h->op) && !h->busy &&
            now - h->last_used > (double)D->cfg.fs_handle_idle_ms / 1000.0) {
            log_debug("sandbox %s: write handle %llu idle: aborted", h->sb->id,
                      (unsigned long long)h->id);
            handle_free(h, 1);
        }
    }
}

/* -- answers ------------------------------------------------------------------------ */

static void put_mtime(json_t *o)
{
    json_t *m = json_object_get(o, "mtime_ms");
    if (!json_is_integer(m))
        return;
    char ts[40];
    json_object_set_new(
        o, "mtime",
        json_string(daemon_timestamp((double)json_integer_value(m) / 1000.0, ts)));
    json_object_del(o, "mtime_ms");
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

/* The protocol's answer from the provider's result (borrowed). New reference. */
static json_t *answer(struct fs_call *fc, json_t *res)
{
    json_t *path = json_object_get(fc->args, "path");
    json_t *out = json_object();
    json_object_set(out, "path", path);
    switch (fc->op) {
    case FS_OP_READ: {
        const char *enc = json_string_value(json_object_get(fc->args, "encoding"));
        if (fc->h) {
            /* a tar stream: bytes, its handle until the end */
            if (!fc->raw_done) {
                char *s = base64_encode(fc->buf, fc->blen);
                json_object_set_new(out, "data_b64", json_string_nocheck(s));
                free(s);
            }
            json_object_set_new(out, "format", json_string("tar"));
            json_object_set_new(out, "length", json_integer((json_int_t)fc->blen));
            json_object_set(out, "eof", json_object_get(res, "eof"));
            json_object_set(out, "entries", json_object_get(res, "entries"));
            if (!json_is_true(json_object_get(res, "eof")))
                json_object_set_new(out, "handle", json_integer((json_int_t)fc->handle));
            break;
        }
        if (fc->raw_done)
            goto read_meta;
        int b64 = (enc && !strcmp(enc, "base64")) || !utf8_valid(fc->buf, fc->blen);
        if (b64) {
            char *s = base64_encode(fc->buf, fc->blen);
            /* base64 is ASCII: no UTF-8 check needed */
            json_object_set_new(out, "data_b64", json_string_nocheck(s));
            free(s);
        } else {
            json_object_set_new(out, "data",
                                json_stringn_nocheck((const char *)fc->buf, fc->blen));
        }
    read_meta:
        json_object_set(out, "size", json_object_get(res, "size"));
        json_object_set(out, "offset", json_object_get(fc->args, "offset"));
        json_object_set_new(out, "length", json_integer((json_int_t)fc->blen));
        json_object_set(out, "eof", json_object_get(res, "eof"));
        json_object_set(out, "mtime_ms", json_object_get(res, "mtime_ms"));
        put_mtime(out);
        break;
    }
    case FS_OP_WRITE:
        json_object_set(out, "size", json_object_get(res, "size"));
        if (json_object_get(res, "entries")) {
            json_object_set(out, "entries", json_object_get(res, "entries"));
            json_object_set(out, "skipped", json_object_get(res, "skipped"));
        }
        if (fc->more)
            json_object_set_new(out, "handle", json_integer((json_int_t)fc->handle));
        break;
    case FS_OP_LIST: {
        json_t *ents = json_object_get(res, "entries");
        size_t i;
        json_t *e;
        json_array_foreach(ents, i, e)
            put_mtime(e);
        json_object_set(out, "entries", ents ? ents : json_array());
        if (json_is_true(json_object_get(res, "more"))) {
            json_int_t skip = json_integer_value(json_object_get(fc->args, "skip"));
            char cur[32];
            snprintf(cur, sizeof(cur), "%lld", (long long)(skip + json_array_size(ents)));
            json_object_set_new(out, "cursor", json_string(cur));
        }
        break;
    }
    case FS_OP_STAT:
        json_object_update(out, res);
        json_object_set_new(out, "name", json_string(base_name(json_string_value(path))));
        json_object_set(out, "path", path);
        put_mtime(out);
        break;
    case FS_OP_MKDIR:
        json_object_set(out, "created", json_object_get(res, "created"));
        break;
    case FS_OP_REMOVE:
        json_object_set_new(out, "removed", json_true());
        break;
    case FS_OP_RENAME:
        json_object_set(out, "to", json_object_get(fc->args, "to"));
        break;
    case FS_OP_WATCH:
        json_object_set_new(out, "watch", json_integer((json_int_t)fc->handle));
        break;
    }
    return out;
}

int fs_call_data(struct fs_call *fc, const void *data, size_t len)
{
    if (fc->op != FS_OP_READ || len > fc->bmax - fc->blen)
        return -1;
    memcpy(fc->buf + fc->blen, data, len);
    fc->blen += len;
    return 0;
}

void fs_call_done(struct fs_call *fc, sbx_err_t *err, json_t *result)
{
    struct fs_handle *h = fc->h;
    json_t *out = NULL;
    if (!err)
        out = answer(fc, result);
    if (h) {
        h->busy = 0;
        h->last_used = ev_now(D->loop);
        if (!err && fc->first)
            h->open = 1;
        /* A write ends with its commit or its first failure (the provider
         * has dropped it then); a watch ends only if it failed to start. */
        int gone = err || (fc->op == FS_OP_WRITE && !fc->more) ||
                   (fc->op == FS_OP_READ && json_is_true(json_object_get(result, "eof")));
        if (!gone && !h->owner)
            handle_free(h, 1); /* its owner left meanwhile */
        else if (gone)
            handle_free(h, 0);
    }
    uncharge(fc->uid, !h || fc->op == FS_OP_WATCH ? 1 : 0, fc->charged);
    if (fc->raw_done) {
        uint8_t *buf = err ? NULL : fc->buf;
        size_t blen = err ? 0 : fc->blen;
        if (!err)
            fc->buf = NULL;
        fc->raw_done(err, out, buf, blen, fc->privdata);
    } else {
        fc->done(err, out, fc->privdata);
    }
    if (err)
        err_clear(err);
    json_decref(out);
    json_decref(result);
    json_decref(fc->args);
    free(fc->buf);
    free(fc);
}

int fs_err(sbx_err_t *err, const char *errno_name, const char *path, const char *message)
{
    return err_make_data(err, SBX_E_FS,
                         json_pack("{s:s, s:s, s:s}", "errno", errno_name, "path",
                                   path ? path : "", "message", message ? message : ""),
                         "%s: %s", path ? path : "", message ? message : errno_name);
}

static struct fs_handle *find_sb(struct sandbox *sb, uint64_t id)
{
    for (struct fs_handle *h = handles; h; h = h->next)
        if (h->id == id && h->sb == sb && h->op == FS_OP_WATCH)
            return h;
    return NULL;
}

static void deliver(struct fs_handle *h, const char *path, const char *kind)
{
    if (!h->owner || !h->on_event)
        return;
    if (h->dropped) {
        json_t *o = json_pack("{s:s, s:I, s:O, s:s}", "sandbox", h->sb->id, "watch",
                              (json_int_t)h->id, "path", json_object_get(h->args, "path"),
                              "kind", "overflow");
        int r = h->on_event(o, h->owner);
        json_decref(o);
        if (r < 0)
            return;
        h->dropped = 0;
        if (!strcmp(kind, "overflow"))
            return;
    }
    json_t *p = json_pack("{s:s, s:I, s:s, s:s}", "sandbox", h->sb->id, "watch",
                          (json_int_t)h->id, "path", path, "kind", kind);
    if (h->on_event(p, h->owner) < 0)
        h->dropped = 1;
    json_decref(p);
}

void fs_event(struct sandbox *sb, uint64_t handle, const char *path, const char *kind)
{
    struct fs_handle *h = find_sb(sb, handle);
    if (h)
        deliver(h, path, kind);
}

void fs_overflow(struct sandbox *sb, uint64_t handle, int ended)
{
    struct fs_handle *h = find_sb(sb, handle);
    if (!h)
        return;
    h->dropped = 1;
    if (ended) {
        deliver(h, json_string_value(json_object_get(h->args, "path")), "overflow");
        fs_handle_drop(h);
        return;
    }
    deliver(h, json_string_value(json_object_get(h->args, "path")), "overflow");
}

/* -- starting ------------------------------------------------------------------------ */

static void fail_now(sbx_err_t *err, fs_done_cb done, void *privdata)
{
    done(err, NULL, privdata);
    err_clear(err);
}

int fs_charge(uid_t uid, int slot, size_t bytes, sbx_err_t *err)
{
    return charge(uid, slot, bytes, err);
}

void fs_uncharge(uid_t uid, int slot, size_t bytes)
{
    uncharge(uid, slot, bytes);
}

static void (*next_raw)(sbx_err_t *, json_t *, uint8_t *, size_t, void *);

static void raw_fail(sbx_err_t *err, json_t *result, void *privdata)
{
    (void)result;
    next_raw(err, NULL, NULL, 0, privdata);
}

void fs_start_raw_read(struct sandbox *sb, uid_t uid, json_t *args, struct fs_handle *h,
                       void *owner,
                       void (*raw_done)(sbx_err_t *err, json_t *result, uint8_t *buf,
                                        size_t len, void *privdata),
                       void *privdata)
{
    /* fs_start answers a refusal through done before any call exists; the
     * call it makes otherwise is found through the hook below. */
    next_raw = raw_done;
    fs_start(sb, uid, FS_OP_READ, args, NULL, 0, 0, h, owner, NULL, raw_fail, privdata);
    next_raw = NULL;
}

void fs_start(struct sandbox *sb, uid_t uid, enum fs_op op, json_t *args, uint8_t *data,
              size_t len, int more, struct fs_handle *h, void *owner,
              fs_event_cb on_event, fs_done_cb done, void *privdata)
{
    sbx_err_t err = {0};
    const struct sbx_provider *ops = sb->prov->ops;
    if (!ops->fs_call) {
        err_make_data(&err, SBX_E_UNSUPPORTED,
                      json_pack("{s:s, s:s}", "provider", ops->name, "feature", "fs"),
                      "the %s provider has no filesystem: fs.* is not supported",
                      ops->name);
        goto fail;
    }
    if (is_tar(args) && !ops->fs_tar) {
        err_make_data(&err, SBX_E_UNSUPPORTED,
                      json_pack("{s:s, s:s}", "provider", ops->name, "feature", "fs.tar"),
                      "the %s provider has no tar archives: copy files one by one",
                      ops->name);
        goto fail;
    }
    /* A stopped sandbox's files can still be read where the provider can
     * (Docker: from the engine); a handle stays with the side that opened it. */
    int stopped = h ? h->stopped
                    : sb->status == SB_STOPPED && ops->fs_call_stopped &&
                          (op == FS_OP_READ || op == FS_OP_STAT || op == FS_OP_LIST);
    if (sb->status != SB_RUNNING && !stopped) {
        int ro = ops->fs_call_stopped && sb->status == SB_STOPPED;
        err_make_data(&err, SBX_E_STATE,
                      json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                                sandbox_status_name(sb->status)),
                      "sandbox %s is %s%s", sb->id, sandbox_status_name(sb->status),
                      ro ? ": only reads (fs.read, fs.stat, fs.list) work while it is "
                           "stopped; start it to change files (files made by the "
                           "engine would not belong to the command user)"
                         : "");
        goto fail;
    }
    if (op == FS_OP_WATCH && count_watches(sb) >= D->cfg.fs_watches_per_sandbox) {
        limit_err(&err, "fs_watches_per_sandbox", D->cfg.fs_watches_per_sandbox);
        goto fail;
    }
    size_t bytes = len;
    if (op == FS_OP_READ) {
        int64_t want = json_integer_value(json_object_get(args, "length"));
        if (want <= 0 || want > D->cfg.fs_chunk_bytes)
            want = D->cfg.fs_chunk_bytes;
        json_object_set_new(args, "length", json_integer(want));
        bytes = (size_t)want;
    }
    /* A continued write uses the slot its handle holds; a new write takes
     * one for the handle, kept until it ends. */
    int slot = h ? 0 : 1;
    if (charge(uid, slot, bytes, &err) < 0)
        goto fail;
    struct fs_call *fc = xcalloc(1, sizeof(*fc));
    fc->op = op;
    fc->sb = sb;
    fc->args = args;
    fc->uid = uid;
    fc->charged = bytes;
    fc->done = done;
    fc->privdata = privdata;
    if (op == FS_OP_READ && next_raw)
        fc->raw_done = next_raw;
    if (op == FS_OP_READ) {
        fc->bmax = bytes;
        fc->buf = malloc(bytes ? bytes : 1);
        if (!fc->buf) {
            free(fc);
            uncharge(uid, slot, bytes);
            err_make(&err, SBX_E_INTERNAL, "out of memory for a read of %zu bytes",
                     bytes);
            goto fail;
        }
    }
    if (op == FS_OP_WRITE || op == FS_OP_WATCH || (op == FS_OP_READ && is_tar(args))) {
        if (!h) {
            h = handle_new(sb, uid, op, args, owner, on_event);
            h->stopped = stopped;
            fc->first = 1;
        }
        h->busy = 1;
        fc->h = h;
        fc->handle = h->id;
        fc->hdata = &h->hdata;
        fc->more = more;
    }
    if (op == FS_OP_WRITE) {
        fc->buf = data;
        fc->blen = len;
        fc->data = data;
        fc->len = len;
        data = NULL;
    }
    args = NULL;
    sandbox_touch(sb);
    if ((stopped ? ops->fs_call_stopped : ops->fs_call)(sb->prov->cookie, fc, &err) < 0) {
        /* The provider took nothing: undo as fs_call_done would. */
        fs_call_done(fc, &err, NULL);
        return;
    }
    return;
fail:
    free(data);
    json_decref(args);
    fail_now(&err, done, privdata);
}
