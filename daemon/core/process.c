/*
 * process.c - processes, provider-independent: creation and the run queue,
 * timeouts, kill, wait, the exit record, tool answers, and the budget of
 * replay and result bytes that exited records keep. What a process prints
 * and who follows it is output.c's.
 */
#include "core/process.h"

#include <ctype.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "core/events.h"
#include "log.h"
#include "core/sandbox_env.h"
#include "core/sandbox_obj.h"
#include "sbx_proto.h"
#include "core/usage.h"
#include "core/utf8.h"
#include "xalloc.h"

#define MAX_EXITED_KEPT 128
/* After its exec has been answered, an exit record keeps a completion value
 * only up to this encoded size: a 500k-element array costs ~19 MiB as a
 * jansson tree, for every wait that might come (issue 11, reproduction 2). */
#define RESULT_KEEP_BYTES (64 * 1024)
/* After a kill, how long the provider gets to confirm before we give up on it. */
#define KILL_GRACE_S 5.0

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
    return p->out[0].ring.cap + p->out[1].ring.cap + output_marks_bytes(&p->out[0]) +
           output_marks_bytes(&p->out[1]) + p->result_bytes;
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
    static const char *const keys[] = {
        "exit_code",     "signal",  "timed_out",         "killed", "error", "duration_ms",
        "isolate_reset", "retried", "sandbox_restarted", NULL};
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
    json_object_foreach(p->exit, k, v) {
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
    for (int i = 0; i < 2; i++)
        output_stream_drop(&p->out[i]);
    if (p->result_bytes && p->exit)
        drop_members(p, 1);
    p->result_bytes = 0;
    retained_unlink(p);
    log_debug("sandbox %s: pid %u: replay and result dropped (limits.retained_bytes_*)",
              p->sb->id, p->pid);
}

static void retained_enforce(struct sandbox *sb);

static void retained_grew(struct process *p, size_t n)
{
    retained_total += n;
    retained_enforce(p->sb);
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

/* -- queued bytes ---------------------------------------------------------- */

/*
 * A queued process holds its command, its whole env and the stdin given with
 * the call until it runs: 48 queued spawns with 8 MiB of stdin each took sbxd
 * from 10 to 443 MiB (issue 16, item 3). They are counted per owner uid from
 * process_new until the process leaves the queue (spawned, killed, failed).
 */
static size_t queued_cost(const struct process *p)
{
    size_t n = sizeof(*p) + strlen(p->display) + 1;
    n += json_dumpb(p->spec, NULL, 0, JSON_COMPACT);
    if (p->stdin_pending)
        n += json_string_length(p->stdin_pending);
    return n;
}

static void queued_release(struct process *p)
{
    if (!p->queued_bytes)
        return;
    struct uid_usage *u = usage_find(p->sb->owner);
    if (u) {
        u->queued_bytes -= p->queued_bytes;
        usage_release(u);
    }
    p->queued_bytes = 0;
}

/* -- output ---------------------------------------------------------------- */

void process_output(struct process *p, int stream, const void *data, size_t len)
{
    if (p->state == P_EXITED || len == 0)
        return;
    if (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR)
        return;
    /* p->out[] and output.c index 0, 1 */
    size_t grew = output_append(p, stream - SBX_STREAM_STDOUT, data, len,
                                p->exec_cb || p->internal);
    if (grew)
        retained_grew(p, grew);
    sandbox_touch(p->sb);
}

/* -- tool calls ------------------------------------------------------------ */

void process_tool_call(struct process *p, int64_t call, const char *name, json_t *args)
{
    json_t *tools = json_object_get(p->sb->conf, "tools");
    int known = 0;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (json_is_string(t) && strcmp(json_string_value(t), name) == 0)
            known = 1;
    }
    const struct core_events *ev = core_events();
    if (!known)
        process_tool_result(p, call, NULL, SBX_E_TOOL, "unknown tool", NULL);
    else if (!ev->tool_call)
        process_tool_result(p, call, NULL, SBX_E_TOOL, "no client can answer tool calls",
                            NULL);
    else
        ev->tool_call(p, call, name, args);
}

void process_tool_result(struct process *p, int64_t call, json_t *result, int code,
                         const char *msg, const char *ename)
{
    if (!ops_of(p)->proc_tool_result || p->state != P_RUNNING) {
        json_decref(result);
        return;
    }
    json_t *reply =
        result ? json_pack("{s:I, s:o}", "call", (json_int_t)call, "result", result)
               : json_pack("{s:I, s:{s:i, s:s}}", "call", (json_int_t)call, "error",
                           "code", code, "message", msg);
    if (!result && ename && reply)
        json_object_set_new(json_object_get(reply, "error"), "name", json_string(ename));
    ops_of(p)->proc_tool_result(cookie_of(p), p, reply);
    json_decref(reply);
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
        if (p != keep && p->internal && p->state == P_EXITED && !p->in_exit)
            process_free(p);
        p = next;
    }
    while (sb->nexited > MAX_EXITED_KEPT) {
        struct process *victim = NULL;
        for (p = sb->procs; p; p = p->next)
            if (p != keep && p->state == P_EXITED && !p->waiters && !p->subs &&
                !p->in_exit) {
                victim = p;
                break;
            }
        if (!victim)
            return;
        process_free(victim);
    }
}

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents);

/* 1 when a word needs quoting to read back as one shell word. */
static int needs_quote(const char *w)
{
    if (!*w)
        return 1;
    for (; *w; w++)
        if (!isalnum((unsigned char)*w) && !strchr("@%+=:,./_-", *w))
            return 1;
    return 0;
}

/* The command as a person would type it: a string as given, an argv joined
 * with its words shell-quoted where needed ('a b', 'it'\''s'), so that
 * process.list shows ["sh", "-c", "echo a b"] as sh -c 'echo a b'. Without
 * quote (an isolate, whose array is code joined with spaces) a plain join. */
static char *display_of(json_t *cmd, int quote)
{
    if (json_is_string(cmd))
        return strdup(json_string_value(cmd));
    size_t i, n = 1;
    json_t *a;
    json_array_foreach(cmd, i, a)
        n += 4 * strlen(json_string_value(a)) + 3;
    char *s = malloc(n), *o = s;
    if (!s)
        return NULL;
    json_array_foreach(cmd, i, a) {
        const char *w = json_string_value(a);
        if (i)
            *o++ = ' ';
        if (!quote || !needs_quote(w)) {
            size_t l = strlen(w);
            memcpy(o, w, l);
            o += l;
            continue;
        }
        *o++ = '\'';
        for (; *w; w++) {
            if (*w == '\'') {
                memcpy(o, "'\\''", 4);
                o += 4;
            } else {
                *o++ = *w;
            }
        }
        *o++ = '\'';
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
    int64_t timeout =
        o->timeout_ms > 0
            ? o->timeout_ms
            : json_integer_value(json_object_get(sb->conf, "command_timeout_ms"));
    /* Past max_processes_per_sandbox running, processes wait their turn
     * (process_launch); past that many more, they are refused. */
    if (sb->nlive >= D->cfg.max_processes_per_sandbox + D->cfg.max_queued_per_sandbox &&
        !o->internal) {
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:I}", "limit", "max_queued_per_sandbox", "max",
                      (json_int_t)D->cfg.max_queued_per_sandbox),
            "too many processes in sandbox %s (%lld running, %lld queued)", sb->id,
            (long long)D->cfg.max_processes_per_sandbox,
            (long long)D->cfg.max_queued_per_sandbox);
    }

    /* Build everything that can fail before the record exists. */
    json_t *spec = json_object();
    char *display = display_of(cmd, sb->prov->ops->shell_commands);
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
        if (o->pty_cols > 0)
            bad |= json_object_set_new(spec, "pty",
                                       json_pack("{s:i, s:i}", "cols", (int)o->pty_cols,
                                                 "rows", (int)o->pty_rows));
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

    size_t cost = 0;
    if (!o->internal) {
        struct process probe = {
            .display = display, .spec = spec, .stdin_pending = o->stdin_data};
        cost = queued_cost(&probe);
        struct uid_usage *u = usage_find(sb->owner);
        size_t used = u ? u->queued_bytes : 0;
        if (used + cost > (size_t)D->cfg.queued_bytes_per_uid) {
            json_decref(spec);
            free(display);
            return err_make_data(
                err, SBX_E_LIMIT,
                json_pack("{s:s, s:I, s:I, s:I}", "limit", "queued_bytes_per_uid", "max",
                          (json_int_t)D->cfg.queued_bytes_per_uid, "used",
                          (json_int_t)used, "requested", (json_int_t)cost),
                "queued processes of uid %d would hold %zu bytes (limit %lld)",
                (int)sb->owner, used + cost, (long long)D->cfg.queued_bytes_per_uid);
        }
        usage_of(sb->owner)->queued_bytes += cost;
    }

    prune_exited(sb, NULL);
    struct process *p = xcalloc(1, sizeof(*p));
    p->queued_bytes = cost;
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
    p->pty = o->pty_cols > 0;
    link_process(sb, p);
    *out = p;
    return 0;
}

struct process *process_adopt(struct sandbox *sb, uint32_t pid, const char *display)
{
    if (pid == 0 || process_find(sb, pid))
        return NULL;
    struct process *p = xcalloc(1, sizeof(*p));
    p->sb = sb;
    p->pid = pid;
    if (sb->next_pid < pid)
        sb->next_pid = pid;
    p->state = P_RUNNING;
    p->started_at = daemon_now();
    p->t0 = ev_now(D->loop);
    p->display = xstrdup(display ? display : "");
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
    queued_release(p);
    p->state = P_RUNNING;
    p->started_at = daemon_now();
    p->t0 = ev_now(D->loop);
    ev_timer_init(&p->timer, timeout_cb, p->timeout_ms > 0 ? p->timeout_ms / 1000.0 : 0.,
                  0.);
    p->timer.data = p;
    if (p->timeout_ms > 0)
        ev_timer_start(D->loop, &p->timer);
    if (ops_of(p)->proc_spawn(cookie_of(p), p, err) < 0)
        return -1;
    if (p->stdin_pending && p->state == P_RUNNING) {
        sbx_err_t e2 = {0};
        const char *s = json_string_value(p->stdin_pending);
        if (ops_of(p)->proc_write(cookie_of(p), p, s,
                                  json_string_length(p->stdin_pending), &e2) < 0 ||
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

int process_write(struct process *p, const void *data, size_t len, sbx_err_t *err)
{
    return ops_of(p)->proc_write(cookie_of(p), p, data, len, err);
}

int process_close_stdin(struct process *p, sbx_err_t *err)
{
    return ops_of(p)->proc_close_stdin(cookie_of(p), p, err);
}

int process_kill(struct process *p, int sig, sbx_err_t *err)
{
    if (p->state == P_EXITED)
        return 0;
    p->kill_sig = sig;
    if (p->state == P_QUEUED) {
        json_t *rec = json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig,
                                "killed", 1);
        process_exited(p, rec);
        json_decref(rec);
        return 0;
    }
    return ops_of(p)->proc_kill(cookie_of(p), p, sig, err);
}

/* -- exit ------------------------------------------------------------------ */

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
        output_put_result(o, "stdout", &p->out[0], p->result_enc);
        output_put_result(o, "stderr", &p->out[1], p->result_enc);
        json_object_set_new(o, "truncated",
                            json_boolean(p->out[0].truncated || p->out[1].truncated));
    }
    return o;
}

void process_exited(struct process *p, json_t *rec)
{
    if (p->state == P_EXITED)
        return;
    output_flush(p);
    ev_timer_stop(D->loop, &p->timer);

    json_t *jc = json_object_get(rec, "exit_code");
    int code = json_is_integer(jc) ? (int)json_integer_value(jc) : -1;
    int sig = (int)json_integer_value(json_object_get(rec, "signal"));
    int killed =
        json_is_true(json_object_get(rec, "killed")) || p->kill_sig || p->timed_out;
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
    /* A provider's advice on what went wrong (the js shell hint, issue 19). */
    if (json_is_string(json_object_get(rec, "hint")))
        json_object_set(e, "hint", json_object_get(rec, "hint"));
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
    queued_release(p);
    /* Its callbacks below (a hook's done, an exec's answer) may start an op
     * whose hook adds a process: that must not free this record under us. */
    p->in_exit = 1;
    int was_running = p->state == P_RUNNING;
    p->state = P_EXITED;
    p->sb->nlive--;
    p->sb->nexited++;
    D->nprocesses--;
    if (was_running && p->sb->nlive >= D->cfg.max_processes_per_sandbox)
        queue_kick();

    if (p->subs) {
        json_t *er2 = json_object_get(e, "error");
        struct exit_note note = {code,
                                 sig,
                                 timed_out,
                                 killed,
                                 json_is_string(er2) ? json_string_value(er2) : NULL,
                                 json_object_get(e, "output_incomplete") != NULL};
        output_notify_exit(p, &note);
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
    output_unfollow_all(p);
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
    p->in_exit = 0;
    sandbox_touch(p->sb); /* a process of sb finished: the idle timer starts over */
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
    json_t *rec = json_pack("{s:i, s:i, s:b, s:s}", "exit_code", -1, "signal", 0,
                            "killed", 1, "error", why);
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
    output_unfollow_all(p);
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
        output_stream_drop(&p->out[i]);
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
                  json_pack("{s:s, s:I, s:s}", "sandbox", p->sb->id, "pid",
                            (json_int_t)p->pid, "status", "running"),
                  "process %u is still running", p->pid);
    w->cb(&err, NULL, w->privdata);
    err_clear(&err);
    free(w);
}

void process_add_waiter(struct process *p, int64_t timeout_ms, sbx_result_cb cb,
                        void *privdata)
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
    json_t *o = json_pack("{s:I, s:s, s:s, s:I, s:I}", "pid", (json_int_t)p->pid,
                          "command", p->display ? p->display : "", "status",
                          p->state == P_EXITED   ? "exited"
                          : p->state == P_QUEUED ? "queued"
                                                 : "running",
                          "stdout_bytes", (json_int_t)p->out[0].total, "stderr_bytes",
                          (json_int_t)p->out[1].total);
    if (p->started_at > 0)
        json_object_set_new(o, "started_at",
                            json_string(daemon_timestamp(p->started_at, ts)));
    if (p->exit)
        json_object_set(o, "exit_code", json_object_get(p->exit, "exit_code"));
    if (p->pty)
        json_object_set_new(o, "pty", json_true());
    return o;
}
