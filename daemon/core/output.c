/*
 * output.c - what a process prints, on its way out: the replay ring and its
 * time marks, the exec result accumulation, UTF-8-safe pieces for every
 * follower and for replay (handed to the events table: the protocol floor
 * encodes them), and flow control: a congested follower holds its
 * processes back through the provider (process_output_blocked /
 * proc_resume).
 *
 * A follower is the protocol layer's reader (a session embeds one): this
 * file only reads its congested flag and names it in replay events, so the
 * core needs nothing of sessions or JSON-RPC framing.
 */
#include "core/output.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "core/events.h"
#include "core/process_obj.h"
#include "sbx_proto.h"
#include "core/utf8.h"
#include "wallclock.h"
#include "xalloc.h"

#define NOTIFY_PIECE (256 * 1024)

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

/* -- time marks ------------------------------------------------------------ */

size_t output_marks_bytes(const struct pstream *st)
{
    return st->marks.cap * sizeof(struct tmark);
}

void output_stream_drop(struct pstream *st)
{
    free(st->ring.buf);
    memset(&st->ring, 0, sizeof(st->ring));
    free(st->marks.m);
    memset(&st->marks, 0, sizeof(st->marks));
}

/* Merges the oldest half of the marks pairwise (each pair: the first's
 * offset, the second's time, an upper bound for both chunks), so that a
 * process printing a byte at a time keeps times for its whole ring. */
static void marks_merge_old(struct tmarks *mk)
{
    struct tmark *m = mk->m + mk->start;
    size_t half = mk->len / 2 & ~(size_t)1, o = 0;
    for (size_t i = 0; i < half; i += 2)
        m[o++] = (struct tmark){m[i].off, m[i + 1].ns};
    memmove(m + o, m + half, (mk->len - half) * sizeof(*m));
    mk->len -= half - o;
}

/* A chunk starting at stream offset off arrived at ns; oldest is the offset
 * of the ring's oldest byte. Returns how many bytes the marks grew by. */
static size_t marks_add(struct tmarks *mk, size_t ring_max, uint64_t oldest, uint64_t off,
                        int64_t ns)
{
    if (ring_max == 0)
        return 0;
    if (mk->max == 0)
        mk->max = ring_max / TMARK_GRAIN > 16 ? ring_max / TMARK_GRAIN : 16;
    /* Marks whose bytes all left the ring go (the first one left covers it). */
    while (mk->len >= 2 && mk->m[mk->start + 1].off <= oldest) {
        mk->start++;
        mk->len--;
    }
    if (mk->len > 0 && mk->m[mk->start + mk->len - 1].ns >= ns)
        return 0; /* same time (or a clock step back): the last mark covers it */
    if (mk->len == mk->max)
        marks_merge_old(mk);
    size_t grew = 0;
    if (mk->start + mk->len == mk->cap) {
        if (mk->start > 0) {
            memmove(mk->m, mk->m + mk->start, mk->len * sizeof(*mk->m));
            mk->start = 0;
        } else {
            size_t ncap = mk->cap ? 2 * mk->cap : 16;
            if (ncap > mk->max)
                ncap = mk->max;
            struct tmark *nm = realloc(mk->m, ncap * sizeof(*nm));
            if (!nm)
                return 0; /* no time for this chunk: the previous mark covers it */
            grew = (ncap - mk->cap) * sizeof(*nm);
            mk->m = nm;
            mk->cap = ncap;
        }
    }
    mk->m[mk->start + mk->len++] = (struct tmark){off, ns};
    return grew;
}

/* Index (from start) of the mark covering offset off: the last one at or
 * before it, else the first. mk->len > 0. */
static size_t mark_index(const struct tmarks *mk, uint64_t off)
{
    const struct tmark *m = mk->m + mk->start;
    size_t lo = 0, hi = mk->len; /* the answer is the last i with m[i].off <= off */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (m[mid].off <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The time of the byte at offset off (0 when none is known). */
static int64_t mark_ns(const struct tmarks *mk, uint64_t off)
{
    return mk->len ? mk->m[mk->start + mark_index(mk, off)].ns : 0;
}

/* -- to the followers -------------------------------------------------------- */

int output_b64_cheaper(enum out_enc enc, const uint8_t *d, size_t n)
{
    return enc == ENC_AUTO && json_escaped_len(d, n, base64_len(n)) > base64_len(n);
}

/* Hands a piece of live output to the events table, with its time when a
 * follower asked for times. */
static void notify_output(struct process *p, int stream, uint64_t offset,
                          const uint8_t *d, size_t n, int valid_utf8)
{
    const struct core_events *ev = core_events();
    if (!ev->output)
        return;
    int timed = 0;
    for (struct sub *sb = p->subs; sb && !timed; sb = sb->pnext)
        timed = sb->timestamps;
    struct out_piece piece = {stream, offset, d, n, valid_utf8, 0};
    if (timed) {
        piece.ns = mark_ns(&p->out[stream].marks, offset);
        if (piece.ns == 0)
            piece.ns = wallclock_now_ns(); /* no ring (replay_bytes 0), so no marks */
    }
    ev->output(p, &piece);
}

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

size_t output_append(struct process *p, int stream, const void *data, size_t len,
                     int accumulate)
{
    struct pstream *st = &p->out[stream];
    size_t cap0 = st->ring.cap;
    ring_append(&st->ring, data, len);
    size_t grew = st->ring.cap - cap0;
    uint64_t oldest = st->total + len - st->ring.len;
    grew += marks_add(&st->marks, st->ring.max, oldest, st->total, wallclock_now_ns());
    if (accumulate) {
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
    return grew;
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

void process_subscribe(struct process *p, struct follower *f, enum out_enc enc,
                       int timestamps)
{
    if (!f)
        return;
    for (struct sub *x = p->subs; x; x = x->pnext)
        if (x->f == f) {
            x->enc = enc;
            x->timestamps = timestamps;
            return;
        }
    struct sub *n = xcalloc(1, sizeof(*n));
    n->p = p;
    n->f = f;
    n->enc = enc;
    n->timestamps = timestamps;
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

void output_notify_exit(struct process *p, const struct exit_note *e)
{
    const struct core_events *ev = core_events();
    if (p->subs && ev->exit)
        ev->exit(p, e);
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
    if (utf8_valid(d, n) && !output_b64_cheaper(enc, d, n)) {
        json_object_set_new(o, key, json_stringn((const char *)d, n));
    } else {
        char k2[32];
        snprintf(k2, sizeof(k2), "%s_b64", key);
        char *b = base64_encode(d, n);
        json_object_set_new(o, k2, json_string(b ? b : ""));
        free(b);
    }
}

/* Where one stream's replay stands. */
struct replay_cur {
    int stream;
    uint64_t pos, end;
};

/* The first offset at or after from whose bytes arrived at or after since. */
static uint64_t since_start(const struct pstream *st, uint64_t from, uint64_t end,
                            int64_t since)
{
    const struct tmarks *mk = &st->marks;
    if (since <= 0 || from >= end)
        return from;
    const struct tmark *m = mk->m + mk->start;
    for (size_t i = mk->len; i-- > 0;) /* usually near the end: walk back */
        if (m[i].ns < since)
            return i + 1 < mk->len ? (m[i + 1].off > from ? m[i + 1].off : from) : end;
    return from; /* every mark is new enough (or none is known) */
}

/* Sends the next piece of cur to f: at most NOTIFY_PIECE, not past the next
 * mark when timed (so each piece has one time), never ending inside a UTF-8
 * sequence unless the stream's emitted end is there. */
static void replay_piece(struct process *p, struct follower *f, struct replay_cur *cur,
                         const struct replay_opts *o)
{
    struct pstream *st = &p->out[cur->stream];
    uint64_t lim =
        cur->end - cur->pos < NOTIFY_PIECE ? cur->end : cur->pos + NOTIFY_PIECE;
    int64_t ns = 0;
    if (o->timestamps && st->marks.len) {
        size_t i = mark_index(&st->marks, cur->pos);
        ns = st->marks.m[st->marks.start + i].ns;
        if (i + 1 < st->marks.len && st->marks.m[st->marks.start + i + 1].off < lim)
            lim = st->marks.m[st->marks.start + i + 1].off;
    }
    size_t n = (size_t)(lim - cur->pos);
    uint8_t *buf = xmalloc(n);
    ring_copy(&st->ring, st->total, cur->pos, lim, buf);
    size_t hold = lim < cur->end ? utf8_incomplete_tail(buf, n) : 0;
    if (hold == n)
        hold = 0;
    const struct core_events *ev = core_events();
    if (ev->replay) {
        struct out_piece piece = {
            cur->stream, cur->pos, buf, n - hold, utf8_valid(buf, n - hold), 0};
        if (o->timestamps)
            piece.ns = ns ? ns : wallclock_now_ns();
        ev->replay(f, p, &piece, o->enc, o->timestamps);
    }
    cur->pos += n - hold;
    free(buf);
}

/* The time of cur's next piece, for ordering the two streams. */
static int64_t next_ns(struct process *p, const struct replay_cur *cur)
{
    return mark_ns(&p->out[cur->stream].marks, cur->pos);
}

json_t *process_replay(struct process *p, struct follower *f, const struct replay_opts *o)
{
    struct replay_cur cur[2];
    for (int i = 0; i < 2; i++) {
        struct pstream *st = &p->out[i];
        uint64_t oldest = st->total - st->ring.len;
        uint64_t end = st->emitted; /* the live stream continues from here */
        uint64_t from = o->off[i] < oldest ? oldest : o->off[i];
        if (from > end)
            from = end;
        uint64_t start = since_start(st, from, end, o->since_ns);
        cur[i] = (struct replay_cur){i, start < end ? start : end, end};
    }
    uint64_t s0 = cur[0].pos, s1 = cur[1].pos;
    /* Untimed: all of stdout, then stderr, as ever. Timed: in arrival order. */
    for (int i = 0; i < 2;) {
        if (cur[i].pos >= cur[i].end) {
            i++;
            continue;
        }
        int k = i;
        if (o->timestamps && i == 0 && cur[1].pos < cur[1].end &&
            next_ns(p, &cur[1]) < next_ns(p, &cur[0]))
            k = 1;
        replay_piece(p, f, &cur[k], o);
    }
    return json_pack("{s:b, s:I, s:I, s:I, s:I}", "running", p->state != P_EXITED,
                     "stdout_start", (json_int_t)s0, "stderr_start", (json_int_t)s1,
                     "stdout_offset", (json_int_t)p->out[0].emitted, "stderr_offset",
                     (json_int_t)p->out[1].emitted);
}
