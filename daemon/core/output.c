/*
 * output.c - what a process prints, on its way out: the replay ring, the
 * exec result accumulation, process.output lines (UTF-8-safe, built by
 * hand on the hot path) to every follower, replay for attach, and flow
 * control: a congested follower holds its processes back through the
 * provider (process_output_blocked / proc_resume).
 *
 * A follower is the protocol layer's reader (a session embeds one): this
 * file only writes whole lines to it and reads its congested flag, so the
 * core needs nothing of sessions or JSON-RPC framing.
 */
#include "output.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "process.h"
#include "sandbox.h"
#include "sbx_proto.h"
#include "utf8.h"
#include "xalloc.h"

#define NOTIFY_PIECE (256 * 1024)

static const char *stream_name[2] = {"stdout", "stderr"};

static const struct sbx_provider *ops_of(struct process *p)
{
    return p->sb->prov->ops;
}
static void *cookie_of(struct process *p)
{
    return p->sb->prov->cookie;
}

/* -- ring ------------------------------------------------------------------ */

static void ring_append(struct ring *r, const uint8_t *d, size_t n)
{
    if (r->max == 0)
        return;
    if (n >= r->max) {
        d += n - r->max;
        n = r->max;
    }
    if (r->len + n > r->cap && r->cap < r->max) {
        /* Grow lazily: most processes print little. */
        size_t ncap = r->cap ? r->cap : 4096;
        while (ncap < r->len + n && ncap < r->max)
            ncap *= 2;
        if (ncap > r->max)
            ncap = r->max;
        uint8_t *nb = malloc(ncap);
        if (nb) {
            for (size_t i = 0; i < r->len; i++)
                nb[i] = r->buf[(r->head + i) % r->cap];
            free(r->buf);
            r->buf = nb;
            r->cap = ncap;
            r->head = 0;
        }
    }
    if (r->cap == 0)
        return;
    for (size_t i = 0; i < n;) {
        size_t tail = (r->head + r->len) % r->cap;
        if (r->len == r->cap) {
            /* full: overwrite the oldest byte(s) */
            size_t k = r->cap - r->head;
            if (k > n - i)
                k = n - i;
            memcpy(r->buf + r->head, d + i, k);
            r->head = (r->head + k) % r->cap;
            i += k;
            continue;
        }
        size_t room = r->cap - r->len;
        size_t k = r->cap - tail;
        if (k > room)
            k = room;
        if (k > n - i)
            k = n - i;
        memcpy(r->buf + tail, d + i, k);
        r->len += k;
        i += k;
    }
}

/* Copies ring bytes for stream offsets [from, to); total is the stream's offset
 * at the ring's end. */
static void ring_copy(const struct ring *r, uint64_t total, uint64_t from, uint64_t to,
                      uint8_t *out)
{
    uint64_t first = total - r->len;
    for (uint64_t o = from; o < to; o++)
        out[o - from] = r->buf[(r->head + (size_t)(o - first)) % r->cap];
}

/* -- notifications --------------------------------------------------------- */

/* 1 when bytes that are valid UTF-8 still go as base64 for enc: escaping
 * them (control characters become \u00XX) would be longer. */
static int b64_cheaper(enum out_enc enc, const uint8_t *d, size_t n)
{
    return enc == ENC_AUTO && json_escaped_len(d, n, base64_len(n)) > base64_len(n);
}

/* params for one process.output; data is sent as a string when valid UTF-8. */
static json_t *output_params(struct process *p, int stream, uint64_t offset,
                             const uint8_t *d, size_t n, enum out_enc enc)
{
    json_t *params =
        json_pack("{s:s, s:I, s:s, s:I}", "sandbox", p->sb->id, "pid", (json_int_t)p->pid,
                  "stream", stream_name[stream], "offset", (json_int_t)offset);
    if (utf8_valid(d, n) && !b64_cheaper(enc, d, n)) {
        json_object_set_new(params, "data", json_stringn((const char *)d, n));
    } else {
        char *b = base64_encode(d, n);
        json_object_set_new(params, "data_b64", json_string(b ? b : ""));
        free(b);
    }
    return params;
}

/* A notification as one line (params stolen); malloc'd, NULL if it cannot
 * be encoded. */
static char *notification_text(const char *method, json_t *params)
{
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                            "params", params);
    char *text = msg ? json_dumps(msg, JSON_COMPACT) : NULL;
    json_decref(msg);
    if (!text)
        log_error("cannot encode a %s notification", method);
    return text;
}

static void notify_subs(struct process *p, const char *method, json_t *params)
{
    /* Build the line once, send to every follower. */
    char *text = notification_text(method, params);
    if (!text)
        return;
    size_t len = strlen(text);
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        sb->f->send_line(sb->f, text, len);
    free(text);
}

/*
 * One line buffer for the daemon, kept between calls: at streaming rates
 * a fresh malloc of up to 6 x NOTIFY_PIECE per piece was an mmap, a
 * page-fault storm and an munmap every time. Bounded by that size.
 */
static char *line_buffer(size_t cap)
{
    static char *line;
    static size_t line_cap;
    if (cap > line_cap) {
        char *nl = realloc(line, cap);
        if (!nl)
            return NULL;
        line = nl;
        line_cap = cap;
    }
    return line;
}

/* Writes one process.output line with d as "data" (escaped) or "data_b64"
 * (as_b64) and sends it to the followers whose encoding gives that choice:
 * utf8_b64 for "utf8" followers, auto_b64 for "auto" ones. */
static void send_output_line(struct process *p, int stream, uint64_t offset,
                             const uint8_t *d, size_t n, int as_b64, int utf8_b64,
                             int auto_b64)
{
    char head[200];
    int hl = snprintf(
        head, sizeof(head),
        "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{\"sandbox\":\"%s\","
        "\"pid\":%u,\"stream\":\"%s\",\"offset\":%llu,\"%s\":\"",
        p->sb->id, p->pid, stream_name[stream], (unsigned long long)offset,
        as_b64 ? "data_b64" : "data");
    char *line = line_buffer((size_t)hl + (as_b64 ? base64_len(n) + 1 : n * 6) + 8);
    if (!line)
        return;
    memcpy(line, head, (size_t)hl);
    size_t o = (size_t)hl;
    o += as_b64 ? base64_encode_to(line + o, d, n) : json_escape_to(line + o, d, n);
    memcpy(line + o, "\"}}", 3);
    o += 3;
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        if ((sb->enc == ENC_AUTO ? auto_b64 : utf8_b64) == as_b64)
            sb->f->send_line(sb->f, line, o);
}

/* The hot path of streaming: the process.output line is written by hand.
 * jansson would copy the bytes into a string, check their UTF-8 again and
 * escape them into a third buffer; here they are checked once (the caller
 * did) and escaped once. Ids are [A-Za-z0-9_.-], safe to embed. At most two
 * lines are built: text for the followers that get text, base64 for the
 * others (invalid UTF-8, or "auto" followers when base64 is shorter). */
static void notify_output(struct process *p, int stream, uint64_t offset,
                          const uint8_t *d, size_t n, int valid_utf8)
{
    int have_utf8 = 0, have_auto = 0;
    for (struct sub *sb = p->subs; sb; sb = sb->pnext) {
        if (sb->enc == ENC_AUTO)
            have_auto = 1;
        else
            have_utf8 = 1;
    }
    int utf8_b64 = !valid_utf8;
    int auto_b64 = !valid_utf8 || (have_auto && b64_cheaper(ENC_AUTO, d, n));
    if ((have_utf8 && !utf8_b64) || (have_auto && !auto_b64))
        send_output_line(p, stream, offset, d, n, 0, utf8_b64, auto_b64);
    if ((have_utf8 && utf8_b64) || (have_auto && auto_b64))
        send_output_line(p, stream, offset, d, n, 1, utf8_b64, auto_b64);
}

/* Emits bytes [emitted, total) minus an incomplete UTF-8 tail (unless final). */
static void emit_stream(struct process *p, int stream, const uint8_t *d, size_t n,
                        int final)
{
    struct pstream *st = &p->out[stream];
    /* Join the held-back tail with the new bytes (no copy when there is none). */
    size_t tot = st->ntail + n;
    uint8_t small[4096];
    uint8_t *buf = st->ntail == 0         ? (uint8_t *)d
                   : tot <= sizeof(small) ? small
                                          : malloc(tot);
    if (!buf)
        return;
    if (buf != d) {
        memcpy(buf, st->tail, st->ntail);
        if (n > 0) /* the final flush passes d == NULL: memcpy(x, NULL, 0) is UB */
            memcpy(buf + st->ntail, d, n);
    }
    size_t hold = final ? 0 : utf8_incomplete_tail(buf, tot);
    size_t send = tot - hold;
    int valid = utf8_valid(buf, send);
    if (hold && !valid)
        hold = 0, send = tot; /* binary anyway: no point holding */
    if (send > 0) {
        if (p->subs)
            notify_output(p, stream, st->emitted, buf, send, valid);
        st->emitted += send;
    }
    memcpy(st->tail, buf + send, hold);
    st->ntail = hold;
    if (buf != small && buf != d)
        free(buf);
}

void process_output(struct process *p, int stream, const void *data, size_t len)
{
    if (p->state == P_EXITED || len == 0)
        return;
    if (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR)
        return;
    stream -= SBX_STREAM_STDOUT; /* p->out[] and the helpers below index 0, 1 */
    struct pstream *st = &p->out[stream];
    size_t cap0 = st->ring.cap;
    ring_append(&st->ring, data, len);
    if (st->ring.cap != cap0)
        process_retained_grew(p, st->ring.cap - cap0);
    if (p->exec_cb || p->internal) {
        size_t cap = (size_t)D->cfg.exec_output_bytes;
        size_t room = st->acc_len < cap ? cap - st->acc_len : 0;
        size_t take = len < room ? len : room;
        if (take > 0) {
            char *na = realloc(st->acc, st->acc_len + take);
            if (na) {
                memcpy(na + st->acc_len, data, take);
                st->acc = na;
                st->acc_len += take;
            }
        }
        if (take < len)
            st->truncated = 1;
    }
    st->total += len;
    /* Notifications in pieces so one huge frame doesn't become one huge line. */
    const uint8_t *d = data;
    while (len > 0) {
        size_t k = len < NOTIFY_PIECE ? len : NOTIFY_PIECE;
        emit_stream(p, stream, d, k, 0);
        d += k;
        len -= k;
    }
    sandbox_touch(p->sb);
}

int process_output_blocked(struct process *p)
{
    for (struct sub *s = p->subs; s; s = s->pnext)
        if (s->f->congested)
            return 1;
    return 0;
}

void output_follower_writable(struct follower *f)
{
    for (struct sub *sb = f->subs; sb; sb = sb->snext) {
        struct process *p = sb->p;
        if (p->state == P_RUNNING && !process_output_blocked(p) && ops_of(p)->proc_resume)
            ops_of(p)->proc_resume(cookie_of(p), p);
    }
}

/* -- followers ------------------------------------------------------------- */

void process_subscribe(struct process *p, struct follower *f, enum out_enc enc)
{
    if (!f)
        return;
    for (struct sub *x = p->subs; x; x = x->pnext)
        if (x->f == f) {
            x->enc = enc;
            return;
        }
    struct sub *n = xcalloc(1, sizeof(*n));
    n->p = p;
    n->f = f;
    n->enc = enc;
    n->pnext = p->subs;
    if (p->subs)
        p->subs->pprev = n;
    p->subs = n;
    n->snext = f->subs;
    if (f->subs)
        f->subs->sprev = n;
    f->subs = n;
}

static void sub_free(struct sub *x)
{
    struct process *p = x->p;
    struct follower *s = x->f;
    if (x->pprev)
        x->pprev->pnext = x->pnext;
    else
        p->subs = x->pnext;
    if (x->pnext)
        x->pnext->pprev = x->pprev;
    if (x->sprev)
        x->sprev->snext = x->snext;
    else
        s->subs = x->snext;
    if (x->snext)
        x->snext->sprev = x->sprev;
    free(x);
}

void process_unsubscribe(struct process *p, struct follower *f)
{
    for (struct sub *x = p->subs; x; x = x->pnext)
        if (x->f == f) {
            sub_free(x);
            break;
        }
    /* The process may have been held back only by this follower. */
    if (p->state == P_RUNNING && !process_output_blocked(p) && ops_of(p)->proc_resume)
        ops_of(p)->proc_resume(cookie_of(p), p);
}

/* -- the end of a process ---------------------------------------------------- */

void output_flush(struct process *p)
{
    for (int i = 0; i < 2; i++)
        if (p->out[i].ntail)
            emit_stream(p, i, NULL, 0, 1);
}

void output_notify_exit(struct process *p, json_t *params)
{
    notify_subs(p, SBX_N_EXIT, params);
}

void output_unfollow_all(struct process *p)
{
    while (p->subs)
        sub_free(p->subs);
}

void output_follower_gone(struct follower *f)
{
    while (f->subs)
        sub_free(f->subs);
}

/* -- results and replay ---------------------------------------------------- */

void output_put_result(json_t *o, const char *key, struct pstream *st, enum out_enc enc)
{
    const uint8_t *d = (const uint8_t *)(st->acc ? st->acc : "");
    size_t n = st->acc_len;
    if (st->truncated && !utf8_valid(d, n))
        n -= utf8_incomplete_tail(d, n); /* a cut inside a character */
    if (utf8_valid(d, n) && !b64_cheaper(enc, d, n)) {
        json_object_set_new(o, key, json_stringn((const char *)d, n));
    } else {
        char k2[32];
        snprintf(k2, sizeof(k2), "%s_b64", key);
        char *b = base64_encode(d, n);
        json_object_set_new(o, k2, json_string(b ? b : ""));
        free(b);
    }
}

static uint64_t replay_stream(struct process *p, struct follower *f, int stream,
                              uint64_t from, enum out_enc enc)
{
    struct pstream *st = &p->out[stream];
    uint64_t oldest = st->total - st->ring.len;
    uint64_t end = st->emitted; /* the live stream continues from here */
    if (from < oldest)
        from = oldest;
    if (from > end)
        from = end;
    uint64_t start = from;
    while (from < end) {
        size_t n = (size_t)(end - from < NOTIFY_PIECE ? end - from : NOTIFY_PIECE);
        uint8_t *buf = xmalloc(n);
        ring_copy(&st->ring, st->total, from, from + n, buf);
        size_t hold = from + n < end ? utf8_incomplete_tail(buf, n) : 0;
        if (hold == n)
            hold = 0;
        char *text = notification_text(
            SBX_N_OUTPUT, output_params(p, stream, from, buf, n - hold, enc));
        if (text) {
            f->send_line(f, text, strlen(text));
            free(text);
        }
        from += n - hold;
        free(buf);
    }
    return start;
}

json_t *process_replay(struct process *p, struct follower *f, uint64_t off_out,
                       uint64_t off_err, enum out_enc enc)
{
    uint64_t s0 = replay_stream(p, f, 0, off_out, enc);
    uint64_t s1 = replay_stream(p, f, 1, off_err, enc);
    return json_pack("{s:b, s:I, s:I, s:I, s:I}", "running", p->state != P_EXITED,
                     "stdout_start", (json_int_t)s0, "stderr_start", (json_int_t)s1,
                     "stdout_offset", (json_int_t)p->out[0].emitted, "stderr_offset",
                     (json_int_t)p->out[1].emitted);
}
