/*
 * fs_stream.c - raw transfers (PROTOCOL.md "Files", "Raw transfers").
 *
 * fs.read/fs.write with transport "raw" are answered with a token; the
 * client connects again to the same socket and sends one line, fs.stream
 * {token}, from the token's uid. That connection then carries the bytes:
 * a write's `size` bytes as they are, a read's as length-prefixed frames.
 * The sandbox still gets them chunk by chunk through fs_start (the same
 * bounds, handles and atomic commit as the JSON path); only the JSON and
 * base64 around them are gone.
 *
 * Memory: a stream holds at most two chunks (one in its call, one on the
 * socket), all charged to limits.fs_bytes_in_flight_per_uid; a token and
 * its stream hold one fs_transfers_per_uid slot. A client that stops
 * reading or sending stops the stream (its watcher waits), nothing grows.
 */
#include "rpc/fs_stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc/call.h"
#include "rpc/conn.h"
#include "daemon.h"
#include "log.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* Bytes a stream moves per event at most, so one big transfer takes turns
 * with every other client instead of holding the loop for a whole chunk. */
#define SLICE_BYTES (1u << 20)

struct token {
    struct token *next;
    char tok[33];
    uid_t uid;
    int admin;
    enum fs_op op;
    json_t *args; /* sandbox_id, path, ... (owned) */
    ev_timer expiry;
};

struct stream {
    struct stream *next;
    int fd;
    ev_io io;
    ev_timer idle; /* no byte moved for limits.fs_handle_idle_ms: ended */
    int events;
    uid_t uid;
    int admin;
    enum fs_op op;
    json_t *args;
    json_t *id; /* the fs.stream line's id */
    char *sbid;
    int dead;     /* the client left or it ended: free once no call is out */
    int busy;     /* a call is out */
    int finished; /* the last bytes are queued: close once written */
    /* out: pre (a line and/or a frame header), then data */
    char *pre;
    size_t prelen, prepos;
    uint8_t *data;
    size_t dlen, dpos, dcharged;
    char *post;
    size_t postlen, postpos;
    /* read */
    int tar; /* an archive (format "tar"): by its handle, to its end */
    int64_t offset, remaining;
    int header_sent;
    /* write */
    uint8_t *in;
    size_t ilen, icap, icharged;
    int64_t to_read; /* bytes still expected from the client */
    int first_sent;
    uint64_t handle;
};

static struct token *tokens;
static struct stream *streams;

/* -- tokens -------------------------------------------------------------------- */

static void token_free(struct token *t, int unslot)
{
    for (struct token **p = &tokens; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    ev_timer_stop(D->loop, &t->expiry);
    if (unslot)
        fs_uncharge(t->uid, 1, 0);
    json_decref(t->args);
    free(t);
}

static void expiry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    token_free(w->data, 1);
}

void fs_stream_offer(struct call *c, struct sandbox *sb, enum fs_op op, json_t *args)
{
    sbx_err_t err = {0};
    uid_t uid = c->conn ? c->conn->uid : 0;
    if (!c->conn) {
        json_decref(args);
        call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", "transport"),
                   "transport: raw needs a socket connection");
        return;
    }
    if (fs_charge(uid, 1, 0, &err) < 0) {
        json_decref(args);
        call_fail(c, &err);
        return;
    }
    struct token *t = xcalloc(1, sizeof(*t));
    uint8_t r[16];
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        free(t);
        fs_uncharge(uid, 1, 0);
        json_decref(args);
        call_error(c, SBX_E_INTERNAL, NULL, "no randomness for a token");
        return;
    }
    for (int i = 0; i < 16; i++)
        snprintf(t->tok + 2 * i, 3, "%02x", r[i]);
    t->uid = uid;
    t->admin = c->conn->admin;
    t->op = op;
    t->args = args;
    json_object_set_new(t->args, "sandbox_id", json_string(sb->id));
    ev_timer_init(&t->expiry, expiry_cb, (double)D->cfg.fs_stream_token_ms / 1000.0, 0);
    t->expiry.data = t;
    ev_timer_start(D->loop, &t->expiry);
    t->next = tokens;
    tokens = t;
    call_reply(c, json_pack("{s:s, s:s, s:O, s:I}", "transport", "raw", "token", t->tok,
                            "path", json_object_get(args, "path"), "expires_ms",
                            (json_int_t)D->cfg.fs_stream_token_ms));
}

/* -- streams --------------------------------------------------------------------- */

static void stream_io_cb(struct ev_loop *loop, ev_io *w, int revents);

static void set_events(struct stream *s, int ev)
{
    ev_timer_again(D->loop, &s->idle);
    if (s->events == ev)
        return;
    ev_io_stop(D->loop, &s->io);
    s->events = ev;
    if (ev) {
        ev_io_set(&s->io, s->fd, ev);
        ev_io_start(D->loop, &s->io);
    }
}

static void stream_free(struct stream *s)
{
    for (struct stream **p = &streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    ev_io_stop(D->loop, &s->io);
    ev_timer_stop(D->loop, &s->idle);
    if (s->fd >= 0)
        close(s->fd);
    fs_drop_owner(s); /* an uncommitted write is aborted: no half file */
    fs_uncharge(s->uid, 1, s->dcharged + s->icharged);
    free(s->pre);
    free(s->data);
    free(s->post);
    free(s->in);
    free(s->sbid);
    json_decref(s->args);
    json_decref(s->id);
    free(s);
}

/* The client is gone or the stream is over: free it now, or when its call
 * comes back. */
static void stream_end(struct stream *s)
{
    s->dead = 1;
    ev_io_stop(D->loop, &s->io);
    ev_timer_stop(D->loop, &s->idle);
    s->events = 0;
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (!s->busy)
        stream_free(s);
}

static char *line_of(json_t *msg, size_t *len)
{
    char *t = json_dumps(msg, JSON_COMPACT);
    size_t n = strlen(t);
    t = xrealloc(t, n + 2);
    t[n] = '\n';
    t[n + 1] = '\0';
    *len = n + 1;
    return t;
}

static json_t *reply_msg(json_t *id, json_t *result)
{
    return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                     "result", result);
}

static json_t *error_obj(int code, json_t *data, const char *msg)
{
    json_t *e = json_pack("{s:i, s:s}", "code", code, "message", msg);
    if (data)
        json_object_set(e, "data", data);
    return e;
}

/* Queues a last line (pre) and closes once it is written. */
static void finish_with(struct stream *s, json_t *msg)
{
    free(s->pre);
    s->pre = line_of(msg, &s->prelen);
    s->prepos = 0;
    json_decref(msg);
    s->finished = 1;
    set_events(s, EV_WRITE);
}

static void fail_err(struct stream *s, sbx_err_t *err)
{
    json_t *e = error_obj(err->code, err->data, err->msg ? err->msg : "failed");
    if (s->op == FS_OP_READ && s->header_sent) {
        /* mid-stream: a frame header of 0xffffffff, then the error line */
        char *line;
        size_t n;
        json_t *m = json_pack("{s:o}", "error", e);
        line = line_of(m, &n);
        json_decref(m);
        free(s->pre);
        s->pre = xmalloc(n + 4);
        memset(s->pre, 0xff, 4);
        memcpy(s->pre + 4, line, n);
        free(line);
        s->prelen = n + 4;
        s->prepos = 0;
        s->finished = 1;
        set_events(s, EV_WRITE);
        return;
    }
    finish_with(s, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                             s->id ? s->id : json_null(), "error", e));
}

static void fail_msg(struct stream *s, int code, json_t *data, const char *msg)
{
    sbx_err_t err = {0};
    err_make_data(&err, code, data, "%s", msg);
    fail_err(s, &err);
    err_clear(&err);
}

static struct sandbox *stream_sb(struct stream *s)
{
    struct sandbox *sb = sandbox_find(s->uid, s->admin, s->sbid);
    if (!sb)
        fail_msg(s, SBX_E_NOT_FOUND, json_pack("{s:s}", "sandbox", s->sbid),
                 "sandbox not found");
    return sb;
}

/* -- read ------------------------------------------------------------------------ */

static void read_next(struct stream *s);

static void read_done(sbx_err_t *err, json_t *result, uint8_t *buf, size_t len,
                      void *privdata)
{
    struct stream *s = privdata;
    s->busy = 0;
    if (s->dead) {
        free(buf);
        stream_free(s);
        return;
    }
    if (err) {
        fail_err(s, err);
        return;
    }
    sbx_err_t e2 = {0};
    if (fs_charge(s->uid, 0, len, &e2) < 0) {
        free(buf);
        fail_err(s, &e2);
        err_clear(&e2);
        return;
    }
    if (s->tar && !s->handle)
        s->handle = (uint64_t)json_integer_value(json_object_get(result, "handle"));
    s->dcharged = len;
    s->data = buf;
    s->dlen = len;
    s->dpos = 0;
    char *head = NULL;
    size_t hlen = 0;
    if (!s->header_sent) {
        json_t *r = json_deep_copy(result);
        json_object_del(r, "length");
        json_object_del(r, "eof");
        json_object_del(r, "handle");
        json_object_del(r, "entries");
        json_t *msg = reply_msg(s->id, r); /* steals r */
        head = line_of(msg, &hlen);
        json_decref(msg);
        s->header_sent = 1;
    }
    free(s->pre);
    s->pre = xmalloc(hlen + 4);
    if (head)
        memcpy(s->pre, head, hlen);
    free(head);
    uint32_t be = htonl((uint32_t)len);
    memcpy(s->pre + hlen, &be, 4);
    s->prelen = hlen + 4;
    s->prepos = 0;
    s->offset += (int64_t)len;
    s->remaining -= (int64_t)len;
    int eof = json_is_true(json_object_get(result, "eof"));
    if (eof || len == 0 || s->remaining <= 0) {
        json_t *t = json_pack("{s:I, s:b}", "length", (json_int_t)s->offset, "eof", eof);
        char *tl;
        size_t tn;
        tl = line_of(t, &tn);
        json_decref(t);
        s->post = xmalloc(tn + 4);
        memset(s->post, 0, 4);
        memcpy(s->post + 4, tl, tn);
        free(tl);
        s->postlen = tn + 4;
        s->postpos = 0;
        s->finished = 1;
    }
    set_events(s, EV_WRITE);
}

static void read_next(struct stream *s)
{
    struct sandbox *sb = stream_sb(s);
    if (!sb)
        return;
    struct fs_handle *h = NULL;
    if (s->tar && s->handle && !(h = fs_handle_find(s->handle, s, FS_OP_READ))) {
        fail_msg(s, SBX_E_INTERNAL, NULL, "the archive's handle is gone");
        return;
    }
    json_t *a = h ? json_deep_copy(fs_handle_args(h)) : json_deep_copy(s->args);
    if (!s->tar)
        json_object_del(a, "sandbox_id");
    int64_t want =
        s->remaining < D->cfg.fs_chunk_bytes ? s->remaining : D->cfg.fs_chunk_bytes;
    if (!s->tar)
        json_object_set_new(a, "offset", json_integer(s->offset));
    json_object_set_new(a, "length", json_integer(want));
    s->busy = 1;
    set_events(s, 0);
    fs_start_raw_read(sb, s->uid, a, h, s, read_done, s);
}

/* -- write ------------------------------------------------------------------------- */

static void write_send(struct stream *s);

static void write_done(sbx_err_t *err, json_t *result, void *privdata)
{
    struct stream *s = privdata;
    s->busy = 0;
    if (s->dead) {
        stream_free(s);
        return;
    }
    if (err) {
        fail_err(s, err);
        return;
    }
    if (!s->handle)
        s->handle = (uint64_t)json_integer_value(json_object_get(result, "handle"));
    if (s->to_read == 0 && s->ilen == 0 && !json_object_get(result, "handle")) {
        finish_with(s, reply_msg(s->id, json_deep_copy(result)));
        return;
    }
    if (s->ilen == s->icap || s->to_read == 0)
        write_send(s);
    else
        set_events(s, EV_READ);
}

/* Hands the filled buffer to the sandbox (its charge moves to the call). */
static void write_send(struct stream *s)
{
    struct sandbox *sb = stream_sb(s);
    if (!sb)
        return;
    struct fs_handle *h = NULL;
    if (s->first_sent) {
        h = fs_handle_find(s->handle, s, FS_OP_WRITE);
        if (!h) {
            fail_msg(s, SBX_E_INTERNAL, NULL, "the write's handle is gone");
            return;
        }
    }
    int more = s->to_read > 0;
    uint8_t *d = s->in;
    size_t n = s->ilen;
    fs_uncharge(s->uid, 0, s->icharged);
    s->icharged = 0;
    s->in = NULL;
    s->ilen = 0;
    if (more) {
        sbx_err_t err = {0};
        size_t cap = s->to_read < D->cfg.fs_chunk_bytes ? (size_t)s->to_read
                                                        : (size_t)D->cfg.fs_chunk_bytes;
        if (fs_charge(s->uid, 0, cap, &err) < 0) {
            free(d);
            fail_err(s, &err);
            err_clear(&err);
            return;
        }
        s->in = xmalloc(cap);
        s->icap = cap;
        s->icharged = cap;
        set_events(s, EV_READ);
    } else {
        s->icap = 0;
        set_events(s, 0);
    }
    json_t *a =
        s->first_sent ? json_deep_copy(fs_handle_args(h)) : json_deep_copy(s->args);
    s->first_sent = 1;
    s->busy = 1;
    fs_start(sb, s->uid, FS_OP_WRITE, a, d, n, more, h, s, NULL, write_done, s);
}

static void write_in(struct stream *s)
{
    size_t budget = SLICE_BYTES;
    while (s->ilen < s->icap) {
        if (!budget)
            return; /* the rest on the next turn: others get theirs first */
        size_t want = s->icap - s->ilen < budget ? s->icap - s->ilen : budget;
        ssize_t r = recv(s->fd, s->in + s->ilen, want, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            log_debug("fs stream: the client left with %lld bytes unsent",
                      (long long)s->to_read);
            stream_end(s);
            return;
        }
        if (r < 0)
            return;
        s->ilen += (size_t)r;
        s->to_read -= r;
        budget -= (size_t)r;
    }
    /* full (or all there): on to the sandbox unless a call is out */
    set_events(s, 0);
    if (!s->busy)
        write_send(s);
}

/* -- io ------------------------------------------------------------------------------ */

static int send_part(struct stream *s, const void *p, size_t len, size_t *pos,
                     size_t *budget)
{
    while (*pos < len) {
        if (!*budget)
            return 1; /* the rest on the next turn */
        size_t want = len - *pos < *budget ? len - *pos : *budget;
        ssize_t r =
            send(s->fd, (const char *)p + *pos, want, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return 1;
            return -1;
        }
        *pos += (size_t)r;
        *budget -= (size_t)r;
    }
    return 0;
}

static void stream_out(struct stream *s)
{
    size_t budget = SLICE_BYTES;
    int r = send_part(s, s->pre, s->prelen, &s->prepos, &budget);
    if (r == 0)
        r = send_part(s, s->data, s->dlen, &s->dpos, &budget);
    if (r == 0)
        r = send_part(s, s->post, s->postlen, &s->postpos, &budget);
    if (r < 0) {
        stream_end(s);
        return;
    }
    if (r > 0)
        return; /* the client reads slowly: wait, hold nothing more */
    free(s->data);
    s->data = NULL;
    s->dlen = s->dpos = 0;
    fs_uncharge(s->uid, 0, s->dcharged);
    s->dcharged = 0;
    if (s->finished) {
        stream_end(s);
        return;
    }
    read_next(s);
}

static void idle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct stream *s = w->data;
    if (s->busy) {
        ev_timer_again(D->loop, &s->idle); /* the sandbox is slow, not the client */
        return;
    }
    log_debug("fs stream: idle for limits.fs_handle_idle_ms: ended");
    stream_end(s);
}

static void stream_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    struct stream *s = w->data;
    ev_timer_again(D->loop, &s->idle);
    if (revents & EV_WRITE)
        stream_out(s);
    else if ((revents & EV_READ) && s->op == FS_OP_WRITE)
        write_in(s);
}

/* -- taking a connection ---------------------------------------------------- */

static void refuse(int fd, json_t *id, int code, const char *msg)
{
    json_t *m = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id",
                          id ? id : json_null(), "error", "code", code, "message", msg);
    size_t n;
    char *t = line_of(m, &n);
    json_decref(m);
    /* a fresh socket's buffer takes one short line; if not, the client
     * sees the connection close */
    if (send(fd, t, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        log_debug("fs stream: refusal not sent: %s", strerror(errno));
    free(t);
    close(fd);
}

int fs_stream_take(int fd, uid_t uid, const char *line, size_t len, const char *rest,
                   size_t restlen)
{
    if (!memmem(line, len, "fs.stream", 9))
        return 0;
    json_t *v = json_loadb(line, len, 0, NULL);
    const char *m = json_string_value(json_object_get(v, "method"));
    if (!m || strcmp(m, SBX_M_FS_STREAM) != 0) {
        json_decref(v);
        return 0;
    }
    json_t *id = json_incref(json_object_get(v, "id"));
    const char *tok =
        json_string_value(json_object_get(json_object_get(v, "params"), "token"));
    struct token *t = tokens;
    for (; tok && t; t = t->next)
        if (!strcmp(t->tok, tok))
            break;
    json_decref(v);
    if (!t || t->uid != uid) {
        /* unknown, used, expired or another uid's: all the same answer,
         * so a token cannot be probed for */
        refuse(fd, id, SBX_E_PARAMS,
               "fs.stream: no such token (unknown, used or expired)");
        json_decref(id);
        return 1;
    }
    struct stream *s = xcalloc(1, sizeof(*s));
    s->fd = fd;
    s->uid = t->uid;
    s->admin = t->admin;
    s->op = t->op;
    s->args = json_incref(t->args);
    s->id = id;
    s->sbid = xstrdup(json_string_value(json_object_get(t->args, "sandbox_id")));
    token_free(t, 0); /* its slot is the stream's now */
    ev_io_init(&s->io, stream_io_cb, fd, 0);
    s->io.data = s;
    ev_init(&s->idle, idle_cb);
    s->idle.repeat = (double)D->cfg.fs_handle_idle_ms / 1000.0;
    s->idle.data = s;
    ev_timer_again(D->loop, &s->idle);
    s->next = streams;
    streams = s;
    if (s->op == FS_OP_READ) {
        json_t *l = json_object_get(s->args, "length");
        s->offset = json_integer_value(json_object_get(s->args, "offset"));
        s->remaining = json_integer_value(l) > 0 ? json_integer_value(l) : INT64_MAX;
        s->tar = json_object_get(s->args, "format") != NULL;
        if (s->tar) {
            s->offset = 0;
            s->remaining = INT64_MAX;
        }
        if (restlen)
            log_debug("fs stream: %zu bytes after a read's fs.stream ignored", restlen);
        read_next(s);
        return 1;
    }
    s->to_read = json_integer_value(json_object_get(s->args, "size"));
    json_object_del(s->args, "size");
    if ((int64_t)restlen > s->to_read) {
        fail_msg(s, SBX_E_PARAMS, NULL, "more bytes than the write's size");
        return 1;
    }
    sbx_err_t err = {0};
    size_t cap = s->to_read < D->cfg.fs_chunk_bytes ? (size_t)s->to_read
                                                    : (size_t)D->cfg.fs_chunk_bytes;
    if (fs_charge(s->uid, 0, cap, &err) < 0) {
        fail_err(s, &err);
        err_clear(&err);
        return 1;
    }
    s->icharged = cap;
    s->icap = cap;
    s->in = xmalloc(cap ? cap : 1);
    memcpy(s->in, rest, restlen);
    s->ilen = restlen;
    s->to_read -= (int64_t)restlen;
    if (s->ilen == s->icap)
        write_send(s);
    else
        set_events(s, EV_READ);
    return 1;
}

void fs_stream_free_all(void)
{
    while (tokens)
        token_free(tokens, 1);
    while (streams) {
        streams->busy = 0;
        stream_free(streams);
    }
}
