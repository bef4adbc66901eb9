/*
 * process.c - processes, provider-independent: output fan-out to followers
 * with UTF-8-safe framing, the replay ring, exec result accumulation,
 * timeouts, kill, wait, tool answers, and flow control towards providers.
 */
#include "process.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "sandbox.h"
#include "sbx_proto.h"
#include "session.h"
#include "utf8.h"
#include "xalloc.h"

#define MAX_EXITED_KEPT 128
/* After its exec has been answered, an exit record keeps a completion value
 * only up to this encoded size: a 500k-element array costs ~19 MiB as a
 * jansson tree, for every wait that might come (issue 11, reproduction 2). */
#define RESULT_KEEP_BYTES (64 * 1024)
#define NOTIFY_PIECE (256 * 1024)
/* After a kill, how long the provider gets to confirm before we give up on it. */
#define KILL_GRACE_S 5.0

static const char *stream_name[2] = {"stdout", "stderr"};

static const struct sbx_provider *ops_of(struct process *p)
{
    return p->sb->prov->ops;
}
static void *cookie_of(struct process *p)
{
    return p->sb->prov->cookie;
}

/* -- retained bytes ------------------------------------------------------------ */

/*
 * Replay rings and kept results are counted per process, per sandbox and
 * daemon-wide. Past limits.retained_bytes_per_sandbox or _total, the oldest
 * exited processes lose their replay and result first (the records stay, so
 * wait/list still work; attach reports the bytes as gone). Running processes
 * are never trimmed: they are bounded by replay_bytes and
 * max_processes_per_sandbox.
 */
static size_t retained_total;
static struct process *rhead, *rtail; /* exited records holding bytes, oldest first */

size_t process_retained_total(void)
{
    return retained_total;
}

static size_t proc_bytes(const struct process *p)
{
    return p->out[0].ring.cap + p->out[1].ring.cap + p->result_bytes;
}

static void retained_unlink(struct process *p)
{
    if (!p->in_retained)
        return;
    if (p->rprev)
        p->rprev->rnext = p->rnext;
    else
        rhead = p->rnext;
    if (p->rnext)
        p->rnext->rprev = p->rprev;
    else
        rtail = p->rprev;
    p->rnext = p->rprev = NULL;
    p->in_retained = 0;
}

/* The members of an exit record that are always small. Anything else (a
 * completion value, the js provider's logs, an exception) is counted. */
static int small_member(const char *k)
{
    static const char *const keys[] = {"exit_code", "signal",        "timed_out",
                                       "killed",    "error",         "duration_ms",
                                       "isolate_reset", "retried",   "sandbox_restarted",
                                       NULL};
    for (size_t i = 0; keys[i]; i++)
        if (strcmp(k, keys[i]) == 0)
            return 1;
    return strlen(k) > 8 && strcmp(k + strlen(k) - 8, "_dropped") == 0;
}

/*
 * Replaces the large members of the exit record with null and a
 * "<member>_dropped": true. all = 1: every member that is not small
 * (eviction); all = 0: those encoding to more than RESULT_KEEP_BYTES. Returns
 * the encoded bytes of the members kept.
 */
static size_t drop_members(struct process *p, int all)
{
    const char *drop[16];
    size_t ndrop = 0, kept = 0;
    const char *k;
    json_t *v;
    json_object_foreach(p->exit, k, v)
    {
        if (small_member(k) || json_is_null(v))
            continue;
        size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
        if ((all || n > RESULT_KEEP_BYTES) && ndrop < 16)
            drop[ndrop++] = k;
        else
            kept += n;
    }
    for (size_t i = 0; i < ndrop; i++) {
        char flag[80];
        snprintf(flag, sizeof(flag), "%s_dropped", drop[i]);
        json_object_set_new(p->exit, flag, json_true()); /* before the key string goes */
        json_object_set_new(p->exit, drop[i], json_null());
    }
    return kept;
}

/* Drops what an exited record holds beyond its exit status. */
static void evict(struct process *p)
{
    retained_total -= proc_bytes(p);
    for (int i = 0; i < 2; i++) {
        free(p->out[i].ring.buf);
        memset(&p->out[i].ring, 0, sizeof(p->out[i].ring));
    }
    if (p->result_bytes && p->exit)
        drop_members(p, 1);
    p->result_bytes = 0;
    retained_unlink(p);
    log_debug("sandbox %s: pid %u: replay and result dropped (limits.retained_bytes_*)",
              p->sb->id, p->pid);
}

static void retained_enforce(struct sandbox *sb)
{
    size_t cap = (size_t)D->cfg.retained_bytes_per_sandbox, used = 0;
    struct process *p;
    for (p = sb->procs; p; p = p->next)
        used += proc_bytes(p);
    for (p = sb->procs; p && used > cap; p = p->next)
        if (p->state == P_EXITED && proc_bytes(p) > 0) {
            used -= proc_bytes(p);
            evict(p);
        }
    while (retained_total > (size_t)D->cfg.retained_bytes_total && rhead)
        evict(rhead);
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
static void ring_copy(const struct ring *r, uint64_t total, uint64_t from, uint64_t to, uint8_t *out)
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
static json_t *output_params(struct process *p, int stream, uint64_t offset, const uint8_t *d,
                             size_t n, enum out_enc enc)
{
    json_t *params = json_pack("{s:s, s:I, s:s, s:I}", "sandbox", p->sb->id, "pid",
                               (json_int_t)p->pid, "stream", stream_name[stream], "offset",
                               (json_int_t)offset);
    if (utf8_valid(d, n) && !b64_cheaper(enc, d, n)) {
        json_object_set_new(params, "data", json_stringn((const char *)d, n));
    } else {
        char *b = base64_encode(d, n);
        json_object_set_new(params, "data_b64", json_string(b ? b : ""));
        free(b);
    }
    return params;
}

static void notify_subs(struct process *p, const char *method, json_t *params)
{
    /* Build the line once, send to every follower. */
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!text)
        return;
    size_t len = strlen(text);
    for (struct sub *sb = p->subs; sb; sb = sb->pnext)
        session_send_line(sb->s, text, len);
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
static void send_output_line(struct process *p, int stream, uint64_t offset, const uint8_t *d,
                             size_t n, int as_b64, int utf8_b64, int auto_b64)
{
    char head[200];
    int hl = snprintf(head, sizeof(head),
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
            session_send_line(sb->s, line, o);
}

/* The hot path of streaming: the process.output line is written by hand.
 * jansson would copy the bytes into a string, check their UTF-8 again and
 * escape them into a third buffer; here they are checked once (the caller
 * did) and escaped once. Ids are [A-Za-z0-9_.-], safe to embed. At most two
 * lines are built: text for the followers that get text, base64 for the
 * others (invalid UTF-8, or "auto" followers when base64 is shorter). */
static void notify_output(struct process *p, int stream, uint64_t offset, const uint8_t *d, size_t n,
                          int valid_utf8)
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
static void emit_stream(struct process *p, int stream, const uint8_t *d, size_t n, int final)
{
    struct pstream *st = &p->out[stream];
    /* Join the held-back tail with the new bytes (no copy when there is none). */
    size_t tot = st->ntail + n;
    uint8_t small[4096];
    uint8_t *buf = st->ntail == 0 ? (uint8_t *)d : tot <= sizeof(small) ? small : malloc(tot);
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
    if (st->ring.cap != cap0) {
        retained_total += st->ring.cap - cap0;
        retained_enforce(p->sb);
    }
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
        if (s->s->flags & SESS_CONGESTED)
            return 1;
    return 0;
}

void process_session_writable(struct session *s)
{
    for (struct sub *sb = s->subs; sb; sb = sb->snext) {
        struct process *p = sb->p;
        if (p->state == P_RUNNING && !process_output_blocked(p) && ops_of(p)->proc_resume)
            ops_of(p)->proc_resume(cookie_of(p), p);
    }
}

/* -- followers ------------------------------------------------------------- */

void process_subscribe(struct process *p, struct session *s, enum out_enc enc)
{
    if (!s)
        return;
    for (struct sub *x = p->subs; x; x = x->pnext)
        if (x->s == s) {
            x->enc = enc;
            return;
        }
    struct sub *n = calloc(1, sizeof(*n));
    if (!n)
        abort();
    n->p = p;
    n->s = s;
    n->enc = enc;
    n->pnext = p->subs;
    if (p->subs)
        p->subs->pprev = n;
    p->subs = n;
    n->snext = s->subs;
    if (s->subs)
        s->subs->sprev = n;
    s->subs = n;
}

static void sub_free(struct sub *x)
{
    struct process *p = x->p;
    struct session *s = x->s;
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

void process_unsubscribe(struct process *p, struct session *s)
{
    for (struct sub *x = p->subs; x; x = x->pnext)
        if (x->s == s) {
            sub_free(x);
            break;
        }
    /* The process may have been held back only by this session. */
    if (p->state == P_RUNNING && !process_output_blocked(p) && ops_of(p)->proc_resume)
        ops_of(p)->proc_resume(cookie_of(p), p);
}

/* -- tool calls ------------------------------------------------------------ */

void process_tool_result(struct process *p, int64_t call, json_t *result, int code, const char *msg,
                         const char *ename)
{
    if (!ops_of(p)->proc_tool_result || p->state != P_RUNNING) {
        json_decref(result);
        return;
    }
    json_t *reply = result ? json_pack("{s:I, s:o}", "call", (json_int_t)call, "result", result)
                           : json_pack("{s:I, s:{s:i, s:s}}", "call", (json_int_t)call, "error",
                                       "code", code, "message", msg);
    if (!result && ename && reply)
        json_object_set_new(json_object_get(reply, "error"), "name", json_string(ename));
    ops_of(p)->proc_tool_result(cookie_of(p), p, reply);
    json_decref(reply);
}

void process_session_gone(struct session *s)
{
    while (s->subs)
        sub_free(s->subs);
}

/* -- creation -------------------------------------------------------------- */

/* Drops finished hook records and the oldest exits over the limit. Called
 * only when a process is added: an exit can be reported from deep inside a
 * caller that still holds the process or walks the list. */
static void prune_exited(struct sandbox *sb, struct process *keep)
{
    struct process *p = sb->procs;
    while (p) {
        struct process *next = p->next;
        if (p != keep && p->internal && p->state == P_EXITED)
            process_free(p);
        p = next;
    }
    while (sb->nexited > MAX_EXITED_KEPT) {
        struct process *victim = NULL;
        for (p = sb->procs; p; p = p->next)
            if (p != keep && p->state == P_EXITED && !p->waiters && !p->subs) {
                victim = p;
                break;
            }
        if (!victim)
            return;
        process_free(victim);
    }
}


static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents);

static char *display_of(json_t *cmd)
{
    if (json_is_string(cmd))
        return strdup(json_string_value(cmd));
    size_t i, n = 0;
    json_t *a;
    json_array_foreach(cmd, i, a) n += strlen(json_string_value(a)) + 1;
    char *s = malloc(n + 1), *o = s;
    if (!s)
        return NULL;
    json_array_foreach(cmd, i, a)
    {
        size_t l = strlen(json_string_value(a));
        if (i)
            *o++ = ' ';
        memcpy(o, json_string_value(a), l);
        o += l;
    }
    *o = '\0';
    return s;
}

/* A new live record: oldest first in the list, so append at the tail. */
static void link_process(struct sandbox *sb, struct process *p)
{
    for (int i = 0; i < 2; i++)
        p->out[i].ring.max = (size_t)D->cfg.replay_bytes;
    struct process **pp = &sb->procs, *prev = NULL;
    while (*pp) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    *pp = p;
    p->prev = prev;
    sb->nlive++;
    D->nprocesses++;
}

int process_new(struct process **out, struct sandbox *sb, const struct proc_opts *o,
                sbx_err_t *err)
{
    json_t *cmd = o->command;
    int64_t timeout = o->timeout_ms > 0
                          ? o->timeout_ms
                          : json_integer_value(json_object_get(sb->conf, "command_timeout_ms"));
    /* Past max_processes_per_sandbox running, processes wait their turn
     * (process_launch); past that many more, they are refused. */
    if (sb->nlive >= D->cfg.max_processes_per_sandbox + D->cfg.max_queued_per_sandbox &&
        !o->internal) {
        return err_make_data(err, SBX_E_LIMIT,
                             json_pack("{s:s, s:I}", "limit", "max_queued_per_sandbox", "max",
                                       (json_int_t)D->cfg.max_queued_per_sandbox),
                             "too many processes in sandbox %s (%lld running, %lld queued)",
                             sb->id, (long long)D->cfg.max_processes_per_sandbox,
                             (long long)D->cfg.max_queued_per_sandbox);
    }

    /* Build everything that can fail before the record exists. */
    json_t *spec = json_object();
    char *display = display_of(cmd);
    if (spec && display) {
        int bad = 0;
        if (sb->prov->ops->shell_commands)
            bad |= json_object_set(spec, json_is_string(cmd) ? "shell" : "argv", cmd);
        else
            bad |= json_object_set_new(spec, "code", json_string(display));
        json_t *fenv = sandbox_env_for(sb, o->env);
        bad |= !fenv;
        bad |= json_object_set_new(spec, "env", fenv);
        const char *wd = sandbox_cwd_for(sb, o->cwd);
        if (wd)
            bad |= json_object_set_new(spec, "cwd", json_string(wd));
        bad |= json_object_set_new(spec, "timeout_ms", json_integer(timeout));
        if (o->sandbox_restarted)
            bad |= json_object_set_new(spec, "sandbox_restarted", json_true());
        if (bad) {
            json_decref(spec);
            spec = NULL;
        }
    }
    if (!spec || !display) {
        json_decref(spec);
        free(display);
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    }

    prune_exited(sb, NULL);
    struct process *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->sb = sb;
    p->pid = ++sb->next_pid;
    p->state = P_QUEUED;
    p->timeout_ms = timeout;
    p->origin = o->origin;
    p->internal = o->internal;
    p->result_enc = o->result_enc;
    p->exec_cb = o->exec_cb;
    p->exec_data = o->exec_data;
    p->stdin_pending = o->stdin_data ? json_incref(o->stdin_data) : NULL;
    p->display = display;
    p->spec = spec;
    link_process(sb, p);
    *out = p;
    return 0;
}

struct process *process_adopt(struct sandbox *sb, uint32_t pid, const char *display)
{
    if (pid == 0 || process_find(sb, pid))
        return NULL;
    struct process *p = calloc(1, sizeof(*p));
    if (!p)
        abort();
    p->sb = sb;
    p->pid = pid;
    if (sb->next_pid < pid)
        sb->next_pid = pid;
    p->state = P_RUNNING;
    p->started_at = daemon_now();
    p->t0 = ev_now(D->loop);
    p->display = strdup(display ? display : "");
    p->spec = json_object();
    ev_timer_init(&p->timer, timeout_cb, 0., 0.);
    p->timer.data = p;
    link_process(sb, p);
    return p;
}

struct process *process_find(struct sandbox *sb, uint32_t pid)
{
    for (struct process *p = sb->procs; p; p = p->next)
        if (p->pid == pid && !p->internal)
            return p;
    return NULL;
}

/* -- running --------------------------------------------------------------- */

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct process *p = w->data;
    if (p->state != P_RUNNING)
        return;
    if (!p->timed_out) {
        p->timed_out = 1;
        log_info("sandbox %s: pid %u timed out after %lld ms", p->sb->id, p->pid,
                 (long long)p->timeout_ms);
        sbx_err_t err = {0};
        if (ops_of(p)->proc_kill(cookie_of(p), p, SIGKILL, &err) < 0) {
            log_warn("sandbox %s: pid %u: kill failed: %s", p->sb->id, p->pid, err.msg);
            err_clear(&err);
        }
        /* If the provider never confirms, don't hang whoever waits. */
        ev_timer_set(w, KILL_GRACE_S, 0.);
        ev_timer_start(loop, w);
        return;
    }
    process_fail(p, "the provider did not confirm the end of the process");
}

void process_started(struct process *p, long os_pid)
{
    p->os_pid = os_pid;
}

static int spawn_now(struct process *p, sbx_err_t *err)
{
    p->state = P_RUNNING;
    p->started_at = daemon_now();
    p->t0 = ev_now(D->loop);
    ev_timer_init(&p->timer, timeout_cb, p->timeout_ms > 0 ? p->timeout_ms / 1000.0 : 0., 0.);
    p->timer.data = p;
    if (p->timeout_ms > 0)
        ev_timer_start(D->loop, &p->timer);
    if (ops_of(p)->proc_spawn(cookie_of(p), p, err) < 0)
        return -1;
    if (p->stdin_pending && p->state == P_RUNNING) {
        sbx_err_t e2 = {0};
        const char *s = json_string_value(p->stdin_pending);
        if (ops_of(p)->proc_write(cookie_of(p), p, s, json_string_length(p->stdin_pending), &e2) < 0 ||
            ops_of(p)->proc_close_stdin(cookie_of(p), p, &e2) < 0) {
            log_warn("sandbox %s: pid %u: stdin: %s", p->sb->id, p->pid, e2.msg);
            err_clear(&e2);
        }
    }
    json_decref(p->stdin_pending);
    p->stdin_pending = NULL;
    return 0;
}

static void fail_with(struct process *p, sbx_err_t *err)
{
    process_fail(p, err->msg ? err->msg : "spawn failed");
    err_clear(err);
}

/* On failure the caller answers its call with err: the process forgets it. */
static int launch_failed(struct process *p, const char *why)
{
    p->exec_cb = NULL;
    process_fail(p, why);
    return -1;
}

/* Processes handed to the provider and not yet exited. */
static int64_t nrunning(struct sandbox *sb)
{
    int64_t n = 0;
    for (struct process *p = sb->procs; p; p = p->next)
        n += p->state == P_RUNNING;
    return n;
}

/* A process exited: queued ones may start, from the loop (not from inside
 * the provider call that reported the exit). */
static ev_idle queue_idle;

static void queue_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    ev_idle_stop(loop, w);
    for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next)
        if (sb->status == SB_RUNNING && sb->nlive > 0)
            process_spawn_queued(sb);
}

static void queue_kick(void)
{
    if (!ev_is_active(&queue_idle)) {
        ev_idle_init(&queue_idle, queue_cb);
        ev_idle_start(D->loop, &queue_idle);
    }
}

int process_launch(struct process *p, sbx_err_t *err)
{
    struct sandbox *sb = p->sb;
    if (sb->status == SB_RUNNING && !p->internal &&
        nrunning(sb) >= D->cfg.max_processes_per_sandbox)
        return 0; /* queued: started when one ends */
    if (sb->status == SB_RUNNING || (p->internal && sb->hook_phase)) {
        if (spawn_now(p, err) < 0)
            return launch_failed(p, err->msg ? err->msg : "spawn failed");
        return 0;
    }
    /* Pending: queued until the caller starts the sandbox; its completion
     * spawns the process (or fails it). */
    if (sb->status == SB_PENDING || sb->status == SB_STARTING)
        return 0;
    err_make_data(err, SBX_E_STATE,
                  json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                            sandbox_status_name(sb->status)),
                  "sandbox %s is %s", sb->id, sandbox_status_name(sb->status));
    return launch_failed(p, "sandbox is not running");
}

void process_spawn_queued(struct sandbox *sb)
{
    int64_t running = nrunning(sb);
    for (struct process *p = sb->procs; p; p = p->next) {
        if (p->state != P_QUEUED)
            continue;
        if (!p->internal && running >= D->cfg.max_processes_per_sandbox)
            break;
        running++;
        sbx_err_t err = {0};
        if (spawn_now(p, &err) < 0)
            fail_with(p, &err);
    }
}

int process_kill(struct process *p, int sig, sbx_err_t *err)
{
    if (p->state == P_EXITED)
        return 0;
    p->kill_sig = sig;
    if (p->state == P_QUEUED) {
        json_t *rec = json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig, "killed", 1);
        process_exited(p, rec);
        json_decref(rec);
        return 0;
    }
    return ops_of(p)->proc_kill(cookie_of(p), p, sig, err);
}

/* -- exit ------------------------------------------------------------------ */

static void put_output(json_t *o, const char *key, struct pstream *st, enum out_enc enc)
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

json_t *process_exit_json(struct process *p, int with_output)
{
    json_t *o = json_object();
    json_object_set_new(o, "pid", json_integer(p->pid));
    if (p->exit) {
        json_object_update(o, p->exit);
    } else {
        json_object_set_new(o, "running", json_true());
    }
    if (with_output) {
        put_output(o, "stdout", &p->out[0], p->result_enc);
        put_output(o, "stderr", &p->out[1], p->result_enc);
        json_object_set_new(o, "truncated", json_boolean(p->out[0].truncated || p->out[1].truncated));
    }
    return o;
}

void process_exited(struct process *p, json_t *rec)
{
    if (p->state == P_EXITED)
        return;
    for (int i = 0; i < 2; i++)
        if (p->out[i].ntail)
            emit_stream(p, i, NULL, 0, 1);
    ev_timer_stop(D->loop, &p->timer);

    json_t *jc = json_object_get(rec, "exit_code");
    int code = json_is_integer(jc) ? (int)json_integer_value(jc) : -1;
    int sig = (int)json_integer_value(json_object_get(rec, "signal"));
    int killed = json_is_true(json_object_get(rec, "killed")) || p->kill_sig || p->timed_out;
    int timed_out = p->timed_out || json_is_true(json_object_get(rec, "timed_out"));
    if (timed_out)
        code = SBX_EXIT_TIMEOUT;
    else if (p->kill_sig && code < 128 && code != 0 && !json_object_get(rec, "error"))
        code = 128 + p->kill_sig;
    json_t *e = json_object();
    json_object_set_new(e, "exit_code", json_integer(code));
    json_object_set_new(e, "signal", json_integer(sig));
    json_object_set_new(e, "timed_out", json_boolean(timed_out));
    json_object_set_new(e, "killed", json_boolean(killed));
    json_t *er = json_object_get(rec, "error");
    json_object_set(e, "error", json_is_string(er) ? er : json_null());
    json_object_set_new(e, "duration_ms",
                        json_real(p->t0 > 0 ? (ev_now(D->loop) - p->t0) * 1000.0 : 0.));
    if (json_object_get(rec, "result"))
        json_object_set(e, "result", json_object_get(rec, "result"));
    if (json_object_get(rec, "exception"))
        json_object_set(e, "exception", json_object_get(rec, "exception"));
    /* js: the program's console lines */
    if (json_is_array(json_object_get(rec, "logs")))
        json_object_set(e, "logs", json_object_get(rec, "logs"));
    if (json_is_true(json_object_get(rec, "logs_truncated")))
        json_object_set_new(e, "logs_truncated", json_true());
    if (json_is_true(json_object_get(rec, "reset")))
        json_object_set_new(e, "isolate_reset", json_true());
    /* A provider that restarted a dead backend and retried says so. */
    if (json_is_true(json_object_get(rec, "retried")))
        json_object_set_new(e, "retried", json_true());
    if (json_is_true(json_object_get(rec, "sandbox_restarted")))
        json_object_set_new(e, "sandbox_restarted", json_true());
    /* Output that could not be read to its end (a Modal outage): never a clean exit. */
    if (json_is_true(json_object_get(rec, "output_incomplete")))
        json_object_set_new(e, "output_incomplete", json_true());
    if (json_is_integer(json_object_get(rec, "remote_exit_code")))
        json_object_set(e, "remote_exit_code", json_object_get(rec, "remote_exit_code"));
    if (json_is_true(json_object_get(p->spec, "sandbox_restarted"))) {
        /* The call found the backend dead and was run again after a restart;
         * a restart that failed ends it with the start's error. */
        json_object_set_new(e, "retried", json_true());
        json_object_set_new(e, "sandbox_restarted", json_boolean(p->t0 > 0));
    }
    p->exit = e;
    int was_running = p->state == P_RUNNING;
    p->state = P_EXITED;
    p->sb->nlive--;
    p->sb->nexited++;
    D->nprocesses--;
    if (was_running && p->sb->nlive >= D->cfg.max_processes_per_sandbox)
        queue_kick();

    if (p->subs) {
        json_t *n = json_pack("{s:s, s:I, s:i, s:i, s:b, s:b, s:O}", "sandbox", p->sb->id, "pid",
                              (json_int_t)p->pid, "exit_code", code, "signal", sig, "timed_out",
                              timed_out, "killed", killed, "error", json_object_get(e, "error"));
        if (json_object_get(e, "output_incomplete"))
            json_object_set_new(n, "output_incomplete", json_true());
        notify_subs(p, SBX_N_EXIT, n);
    }
    if (p->exec_cb) {
        sbx_result_cb cb = p->exec_cb;
        p->exec_cb = NULL;
        json_t *r = process_exit_json(p, 1);
        cb(NULL, r, p->exec_data);
        json_decref(r);
    }
    while (p->waiters) {
        struct waiter *w = p->waiters;
        p->waiters = w->next;
        ev_timer_stop(D->loop, &w->timer);
        json_t *r = process_exit_json(p, 0);
        w->cb(NULL, r, w->privdata);
        json_decref(r);
        free(w);
    }
    while (p->subs)
        sub_free(p->subs);
    if (p->done)
        p->done(p, p->done_data);
    for (int i = 0; i < 2; i++) {
        free(p->out[i].acc);
        p->out[i].acc = NULL;
    }
    /* What the record keeps from now on is counted, and may be evicted: a
     * member over RESULT_KEEP_BYTES (a completion value, the js provider's
     * console logs) was in the exec's answer and is not kept for later waits. */
    if (p->exit) {
        p->result_bytes = drop_members(p, 0);
        retained_total += p->result_bytes;
    }
    if (proc_bytes(p) > 0) {
        p->rprev = rtail;
        if (rtail)
            rtail->rnext = p;
        else
            rhead = p;
        rtail = p;
        p->in_retained = 1;
    }
    retained_enforce(p->sb);
    sandbox_process_gone(p->sb);
}

void process_fail(struct process *p, const char *why)
{
    if (p->state == P_EXITED)
        return;
    if (p->state == P_RUNNING && ops_of(p)->proc_release) {
        /* The provider must forget it: no events may follow. */
        ops_of(p)->proc_release(cookie_of(p), p);
        p->pdata = NULL;
    }
    json_t *rec = json_pack("{s:i, s:i, s:b, s:s}", "exit_code", -1, "signal", 0, "killed", 1,
                            "error", why);
    p->kill_sig = p->kill_sig ? p->kill_sig : SIGKILL;
    process_exited(p, rec);
    json_decref(rec);
}

void process_free(struct process *p)
{
    struct sandbox *sb = p->sb;
    if (p->state != P_EXITED)
        process_fail(p, "process record freed");
    if (p->prev)
        p->prev->next = p->next;
    else
        sb->procs = p->next;
    if (p->next)
        p->next->prev = p->prev;
    sb->nexited--;
    if (ops_of(p)->proc_release && p->pdata)
        ops_of(p)->proc_release(cookie_of(p), p);
    while (p->subs)
        sub_free(p->subs);
    while (p->waiters) {
        struct waiter *w = p->waiters;
        p->waiters = w->next;
        ev_timer_stop(D->loop, &w->timer);
        sbx_err_t err = {0};
        err_make(&err, SBX_E_NO_PROCESS, "process record was dropped");
        w->cb(&err, NULL, w->privdata);
        err_clear(&err);
        free(w);
    }
    ev_timer_stop(D->loop, &p->timer);
    retained_total -= proc_bytes(p);
    retained_unlink(p);
    for (int i = 0; i < 2; i++) {
        free(p->out[i].ring.buf);
        free(p->out[i].acc);
    }
    json_decref(p->spec);
    json_decref(p->exit);
    json_decref(p->stdin_pending);
    free(p->display);
    free(p);
}

/* -- wait, list, replay ---------------------------------------------------- */

static void wait_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct waiter *w = t->data;
    struct process *p = w->p;
    for (struct waiter **pp = &p->waiters; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_STATE,
                  json_pack("{s:s, s:I, s:s}", "sandbox", p->sb->id, "pid", (json_int_t)p->pid,
                            "status", "running"),
                  "process %u is still running", p->pid);
    w->cb(&err, NULL, w->privdata);
    err_clear(&err);
    free(w);
}

void process_add_waiter(struct process *p, int64_t timeout_ms, sbx_result_cb cb, void *privdata)
{
    struct waiter *w = xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->privdata = privdata;
    w->p = p;
    w->next = p->waiters;
    p->waiters = w;
    ev_timer_init(&w->timer, wait_timeout_cb, timeout_ms / 1000.0, 0.);
    w->timer.data = w;
    if (timeout_ms > 0)
        ev_timer_start(D->loop, &w->timer);
}

json_t *process_list_json(struct process *p)
{
    char ts[40];
    json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:I}", "pid", (json_int_t)p->pid, "command",
                          p->display ? p->display : "", "status",
                          p->state == P_EXITED ? "exited" : p->state == P_QUEUED ? "queued" : "running",
                          "stdout_bytes", (json_int_t)p->out[0].total, "stderr_bytes",
                          (json_int_t)p->out[1].total);
    if (p->started_at > 0)
        json_object_set_new(o, "started_at", json_string(daemon_timestamp(p->started_at, ts)));
    if (p->exit)
        json_object_set(o, "exit_code", json_object_get(p->exit, "exit_code"));
    return o;
}

static uint64_t replay_stream(struct process *p, struct session *s, int stream, uint64_t from,
                              enum out_enc enc)
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
        uint8_t *buf = malloc(n);
        if (!buf)
            break;
        ring_copy(&st->ring, st->total, from, from + n, buf);
        size_t hold = from + n < end ? utf8_incomplete_tail(buf, n) : 0;
        if (hold == n)
            hold = 0;
        session_notify(s, SBX_N_OUTPUT, output_params(p, stream, from, buf, n - hold, enc));
        from += n - hold;
        free(buf);
    }
    return start;
}

json_t *process_replay(struct process *p, struct session *s, uint64_t off_out, uint64_t off_err,
                       enum out_enc enc)
{
    uint64_t s0 = replay_stream(p, s, 0, off_out, enc);
    uint64_t s1 = replay_stream(p, s, 1, off_err, enc);
    return json_pack("{s:b, s:I, s:I, s:I, s:I}", "running", p->state != P_EXITED, "stdout_start",
                     (json_int_t)s0, "stderr_start", (json_int_t)s1, "stdout_offset",
                     (json_int_t)p->out[0].emitted, "stderr_offset", (json_int_t)p->out[1].emitted);
}
