/*
 * sandbox.c - the provider-independent life of a sandbox: registry and
 * ownership, the status machine around provider ops, lifecycle hooks,
 * wall-clock and idle timeouts (env and cwd precedence: sandbox_env.c).
 */
#include "core/sandbox.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/adoption.h"
#include "daemon.h"
#include "core/events.h"
#include "core/fs.h"
#include "log.h"
#include "core/process.h"
#include "sbx_proto.h"
#include "core/snapshot.h"
#include "core/usage.h"
#include "xalloc.h"

#define HOOK_TIMEOUT_MS 60000

int sandbox_visible(uid_t uid, int admin, struct sandbox *sb)
{
    return admin || sb->owner == uid;
}

struct sandbox *sandbox_find_any(const char *id)
{
    if (!id)
        return NULL;
    for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next)
        if (strcmp(sb->id, id) == 0)
            return sb;
    return NULL;
}

struct sandbox *sandbox_find(uid_t uid, int admin, const char *id)
{
    struct sandbox *sb = sandbox_find_any(id);
    return sb && sandbox_visible(uid, admin, sb) ? sb : NULL;
}

int sandbox_count_owned(uid_t uid)
{
    int n = 0;
    for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next)
        if (sb->owner == uid)
            n++;
    return n;
}

/* -- status ----------------------------------------------------------------- */

static void notify_owner(struct sandbox *sb)
{
    const struct core_events *ev = core_events();
    if (ev->status)
        ev->status(sb);
}

static void set_status(struct sandbox *sb, enum sb_status st, const char *error)
{
    if (error) {
        free(sb->error);
        sb->error = xstrdup(error);
    } else if (st != SB_ERROR) {
        free(sb->error);
        sb->error = NULL;
    }
    if (sb->status == st && !error)
        return;
    log_debug("sandbox %s: %s -> %s%s%s", sb->id, sandbox_status_name(sb->status),
              sandbox_status_name(st), error ? ": " : "", error ? error : "");
    sb->status = st;
    if (st != SB_RUNNING)
        fs_drop_sandbox(sb); /* open writes and watches end with the backend */
    notify_owner(sb);
}

void sandbox_progress(struct sandbox *sb, json_t *params)
{
    sandbox_notify(sb, NULL, params);
}

void sandbox_notify(struct sandbox *sb, const char *method, json_t *params)
{
    const struct core_events *ev = core_events();
    if (ev->note)
        ev->note(sb, method, params);
    else
        json_decref(params);
}

/* -- timers ----------------------------------------------------------------- */

static void op_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents);

static void life_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct sandbox *sb = w->data;
    log_info("sandbox %s: lifetime of %lld ms is over, destroying", sb->id,
             (long long)json_integer_value(json_object_get(sb->conf, "timeout_ms")));
    sandbox_destroy(sb, NULL, NULL);
}

static void idle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct sandbox *sb = w->data;
    double idle =
        json_integer_value(json_object_get(sb->conf, "idle_timeout_ms")) / 1000.0;
    double left = sb->last_activity + idle - ev_now(loop);
    if (sb->nlive > 0 || left > 0.001) {
        ev_timer_set(w, left > 0.001 ? left : idle, 0.);
        ev_timer_start(loop, w);
        return;
    }
    log_info("sandbox %s: idle for %.0f s, destroying", sb->id, idle);
    sandbox_destroy(sb, NULL, NULL);
}

static void arm_timers(struct sandbox *sb)
{
    int64_t t = json_integer_value(json_object_get(sb->conf, "timeout_ms"));
    /* timeout_ms 0: no lifetime, the sandbox lives until destroyed. */
    if (t > 0 && !ev_is_active(&sb->life_timer) && sb->expires_at == 0) {
        sb->expires_at = daemon_now() + t / 1000.0;
        ev_timer_set(&sb->life_timer, t / 1000.0, 0.);
        ev_timer_start(D->loop, &sb->life_timer);
    }
    int64_t idle = json_integer_value(json_object_get(sb->conf, "idle_timeout_ms"));
    if (idle > 0 && !ev_is_active(&sb->idle_timer)) {
        sandbox_touch(sb);
        ev_timer_set(&sb->idle_timer, idle / 1000.0, 0.);
        ev_timer_start(D->loop, &sb->idle_timer);
    }
}

/* -- creation ---------------------------------------------------------------- */

static void next_op_cb(struct ev_loop *loop, ev_timer *t, int revents);

int sandbox_new(struct sandbox **out, const char *id, struct provider_inst *prov,
                uid_t owner, json_t *conf, sbx_err_t *err)
{
    struct sandbox *sb = calloc(1, sizeof(*sb));
    if (!sb) {
        json_decref(conf);
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    }
    snprintf(sb->id, sizeof(sb->id), "%s", id);
    sb->prov = prov;
    sb->owner = owner;
    sb->status = SB_PENDING;
    sb->created_at = daemon_now();
    sb->conf = conf;
    sb->runtime_env = json_object();
    ev_timer_init(&sb->life_timer, life_cb, 1., 0.);
    sb->life_timer.data = sb;
    ev_timer_init(&sb->idle_timer, idle_cb, 1., 0.);
    sb->idle_timer.data = sb;
    ev_timer_init(&sb->op_timer, op_deadline_cb, 1., 0.);
    sb->op_timer.data = sb;
    ev_timer_init(&sb->next_op, next_op_cb, 0., 0.);
    sb->next_op.data = sb;
    sandbox_touch(sb);
    const char *snap = json_string_value(json_object_get(conf, "snapshot"));
    if (snap) {
        json_t *rec = json_object_get(D->snapshots, snap);
        sb->snapshot = snapshot_data(rec);
    }
    sb->next = D->sandboxes;
    if (D->sandboxes)
        D->sandboxes->prev = sb;
    D->sandboxes = sb;
    D->nsandboxes++;
    *out = sb;
    return 0;
}

int sandbox_adopt(struct sandbox **out, const char *id, struct provider_inst *prov,
                  uid_t owner, json_t *conf, enum sb_status status, sbx_err_t *err)
{
    if (sandbox_find_any(id)) {
        json_decref(conf);
        return err_make(err, SBX_E_PERMISSION, "sandbox id %s is taken", id);
    }
    if (!json_is_integer(json_object_get(conf, "timeout_ms")))
        json_object_set_new(conf, "timeout_ms",
                            json_integer(sandbox_default_timeout(prov)));
    if (!json_is_integer(json_object_get(conf, "idle_timeout_ms")))
        json_object_set_new(conf, "idle_timeout_ms",
                            json_integer(D->cfg.default_idle_timeout_ms));
    if (!json_is_integer(json_object_get(conf, "command_timeout_ms")))
        json_object_set_new(conf, "command_timeout_ms",
                            json_integer(D->cfg.default_command_timeout_ms));
    json_object_set_new(conf, "provider", json_string(prov->ops->name));
    struct sandbox *sb = NULL;
    if (sandbox_new(&sb, id, prov, owner, conf, err) < 0)
        return -1;
    sb->status = status;
    sb->started_once = 1;
    if (status == SB_RUNNING) {
        sb->started_at = daemon_now();
        arm_timers(sb);
        /* Its processes come back with the provider's reconnect: calls on
         * them wait for it (issue 16, item 12). */
        if (prov->ops->adopts_at_load)
            adoption_sandbox_begin(sb);
    }
    log_info("sandbox %s adopted from provider %s (%s)", id, prov->ops->name,
             sandbox_status_name(status));
    *out = sb;
    return 0;
}

/* Sandboxes removed but not yet freed: providers end ops from deep inside
 * their own call chains (a send that fails at once, a transfer's done
 * callback), so the memory behind sb and the provider's pdata must outlive
 * the current event. Freed in the prepare hook, like sessions. */
static struct sandbox *graveyard;

static void sandbox_destroy_now(struct sandbox *sb)
{
    fs_drop_sandbox(sb);
    while (sb->procs)
        process_free(sb->procs);
    if (sb->prov->ops->sb_release)
        sb->prov->ops->sb_release(sb->prov->cookie, sb);
    json_decref(sb->conf);
    json_decref(sb->runtime_env);
    json_decref(sb->op_result);
    json_decref(sb->snapshot);
    json_decref(sb->start_warnings);
    free(sb->error);
    free(sb);
}

/* -- memory per uid (issue 16, item 6) ------------------------------------------- */

static void memory_release(struct sandbox *sb)
{
    if (!sb->mem_reserved)
        return;
    struct uid_usage *u = usage_find(sb->owner);
    if (u) {
        u->memory_bytes -= sb->mem_reserved;
        usage_release(u);
    }
    sb->mem_reserved = 0;
}

/* One uid held 64 x 512 MiB = 32 GiB of memory limits, more than the host:
 * the sum of a uid's reservations is capped by limits.memory_per_uid. */
int sandbox_reserve_memory(struct sandbox *sb, uint64_t bytes, sbx_err_t *err)
{
    memory_release(sb);
    struct uid_usage *u = usage_find(sb->owner);
    uint64_t used = u ? u->memory_bytes : 0, max = (uint64_t)D->cfg.memory_per_uid;
    if (err && bytes > 0 && used + bytes > max)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:I, s:I, s:I}", "limit", "memory_per_uid", "max",
                      (json_int_t)max, "used", (json_int_t)used, "requested",
                      (json_int_t)bytes),
            "sandbox %s: memory limits of uid %d would total %llu MiB (limit %llu MiB)",
            sb->id, (int)sb->owner, (unsigned long long)((used + bytes) >> 20),
            (unsigned long long)(max >> 20));
    if (bytes == 0)
        return 0;
    usage_of(sb->owner)->memory_bytes += bytes;
    sb->mem_reserved = bytes;
    return 0;
}

/* Removes sb from the registry at once (lookups stop finding it, its id is
 * free again) and frees it before the loop sleeps. */
static void sandbox_free(struct sandbox *sb)
{
    memory_release(sb);
    adoption_sandbox_end(sb);
    ev_timer_stop(D->loop, &sb->life_timer);
    ev_timer_stop(D->loop, &sb->idle_timer);
    ev_timer_stop(D->loop, &sb->op_timer);
    ev_timer_stop(D->loop, &sb->next_op);
    while (sb->waiters) {
        struct op_waiter *w = sb->waiters;
        sb->waiters = w->next;
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_NOT_FOUND, json_pack("{s:s}", "sandbox", sb->id),
                      "sandbox %s is gone", sb->id);
        if (w->cb)
            w->cb(&err, NULL, w->privdata);
        err_clear(&err);
        free(w);
    }
    if (sb->prev)
        sb->prev->next = sb->next;
    else
        D->sandboxes = sb->next;
    if (sb->next)
        sb->next->prev = sb->prev;
    D->nsandboxes--;
    sb->prev = NULL;
    sb->next = graveyard;
    graveyard = sb;
}

void sandboxes_before_sleep(void)
{
    while (graveyard) {
        struct sandbox *sb = graveyard;
        graveyard = sb->next;
        sandbox_destroy_now(sb);
    }
}

void sandbox_free_all(void)
{
    while (D->sandboxes)
        sandbox_free(D->sandboxes);
    sandboxes_before_sleep();
}

json_t *sandbox_to_json(struct sandbox *sb)
{
    char ts[40];
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(sb->id));
    json_object_set_new(o, "provider", json_string(sb->prov->ops->name));
    json_object_set_new(o, "status", json_string(sandbox_status_name(sb->status)));
    json_object_set_new(o, "owner_uid", json_integer(sb->owner));
    json_object_set_new(o, "created_at",
                        json_string(daemon_timestamp(sb->created_at, ts)));
    if (sb->started_at > 0)
        json_object_set_new(o, "started_at",
                            json_string(daemon_timestamp(sb->started_at, ts)));
    if (sb->expires_at > 0)
        json_object_set_new(o, "expires_at",
                            json_string(daemon_timestamp(sb->expires_at, ts)));
    const char *keys[] = {
        "timeout_ms", "idle_timeout_ms", "working_dir",   "image",   "tools",
        "snapshot",   "memory_limit_mb", "fresh_isolate", "clamped", "persistent"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(sb->conf, keys[i]);
        if (v && !json_is_null(v))
            json_object_set(o, keys[i], v);
    }
    json_t *env = sandbox_env_for(sb, NULL);
    json_object_set_new(o, "env", env);
    if (sb->error)
        json_object_set_new(o, "error", json_string(sb->error));
    json_object_set_new(o, "processes", json_integer(sb->nlive));
    json_t *meta = sb->prov->ops->sb_metadata
                       ? sb->prov->ops->sb_metadata(sb->prov->cookie, sb)
                       : NULL;
    json_object_set_new(o, "metadata", meta ? meta : json_object());
    return o;
}

/* -- ops ---------------------------------------------------------------------- */

/* The answer to a request that is complete now: result stolen (NULL = {}). */
static void answer(sbx_result_cb cb, void *privdata, json_t *result)
{
    if (cb)
        cb(NULL, result, privdata);
    json_decref(result);
}

/* A failed request: err is used and cleared. */
static void answer_err(sbx_result_cb cb, void *privdata, sbx_err_t *err)
{
    if (cb)
        cb(err, NULL, privdata);
    err_clear(err);
}

/* A waiter with no cb still counts: a start or stop queued behind another op
 * (issue 16, item 11) is run from its waiter record when that op ends. */
static void add_waiter(struct sandbox *sb, sbx_result_cb cb, void *privdata,
                       enum sb_op op)
{
    struct op_waiter *w = xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->privdata = privdata;
    w->op = op;
    /* append: answers go out in request order */
    struct op_waiter **pp = &sb->waiters;
    while (*pp)
        pp = &(*pp)->next;
    *pp = w;
}

/* Answers the waiters of op: with err, or with make_result(sb). */
static void answer_waiters(struct sandbox *sb, enum sb_op op, sbx_err_t *err,
                           json_t *result)
{
    struct op_waiter **pp = &sb->waiters;
    while (*pp) {
        struct op_waiter *w = *pp;
        if (w->op != op) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        if (!w->cb) {
            /* nobody waits for the answer */
        } else if (err && err->msg) {
            w->cb(err, NULL, w->privdata);
        } else {
            json_t *r = result ? json_incref(result) : sandbox_to_json(sb);
            w->cb(NULL, r, w->privdata);
            json_decref(r);
        }
        free(w);
    }
}

static int wrong_state(sbx_result_cb cb, void *privdata, struct sandbox *sb,
                       const char *what)
{
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_STATE,
                  json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                            sandbox_status_name(sb->status)),
                  "cannot %s sandbox %s: it is %s", what, sb->id,
                  sandbox_status_name(sb->status));
    answer_err(cb, privdata, &err);
    return -1;
}

static int provider_ready(struct sandbox *sb, sbx_err_t *err)
{
    const char *reason = NULL;
    if (!sb->prov->loaded || !sb->prov->ops->available(sb->prov->cookie, &reason))
        return err_make_data(err, SBX_E_UNAVAILABLE,
                             json_pack("{s:s, s:s}", "provider", sb->prov->ops->name,
                                       "reason",
                                       reason                 ? reason
                                       : sb->prov->load_error ? sb->prov->load_error
                                                              : "not loaded"),
                             "provider %s is unavailable: %s", sb->prov->ops->name,
                             reason                 ? reason
                             : sb->prov->load_error ? sb->prov->load_error
                                                    : "not loaded");
    return 0;
}

static int run_hook(struct sandbox *sb, const char *key, process_done_fn done);
static void finish_op(struct sandbox *sb, sbx_err_t *err);

/* Every provider op runs against limits.op_timeout_ms (issue 11, reproduction
 * 6: a getter that never returns held a snapshot, and the destroy behind it,
 * forever). Hooks have their own command timeouts and are not counted. */
static void op_deadline_start(struct sandbox *sb)
{
    ev_timer_stop(D->loop, &sb->op_timer);
    ev_timer_set(&sb->op_timer, (double)D->cfg.op_timeout_ms / 1000.0, 0.);
    ev_timer_start(D->loop, &sb->op_timer);
}

static const char *op_name(enum sb_op op)
{
    return op == OP_START     ? "start"
           : op == OP_STOP    ? "stop"
           : op == OP_DESTROY ? "destroy"
                              : "snapshot";
}

/*
 * The provider op did not finish in time. The provider is told to forget the
 * sandbox (sb_release cancels its requests and ends a Duktape worker), so no
 * late completion can follow. A destroy then counts as done: it always
 * finishes. Any other op fails and leaves the sandbox in error, from where
 * start begins afresh and destroy cleans up.
 */
static void op_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct sandbox *sb = w->data;
    enum sb_op op = sb->op;
    if (op == OP_NONE)
        return;
    char msg[200];
    snprintf(msg, sizeof(msg), "%s did not finish within %lld ms (limits.op_timeout_ms)",
             op_name(op), (long long)D->cfg.op_timeout_ms);
    log_warn("sandbox %s: %s; releasing its backend", sb->id, msg);
    for (struct process *p = sb->procs; p; p = p->next)
        if (p->state != P_EXITED)
            process_fail(p, msg);
    if (sb->prov->ops->sb_release)
        sb->prov->ops->sb_release(sb->prov->cookie, sb);
    if (op == OP_DESTROY) {
        finish_op(sb, NULL);
        return;
    }
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_PROVIDER,
                  json_pack("{s:s, s:s, s:s, s:I}", "provider", sb->prov->ops->name,
                            "message", msg, "limit", "op_timeout_ms", "max",
                            (json_int_t)D->cfg.op_timeout_ms),
                  "%s", msg);
    if (op != OP_START) /* a failed start sets error itself, and may remove the sandbox */
        set_status(sb, SB_ERROR, msg);
    finish_op(sb, &err);
    err_clear(&err);
}
static void continue_destroy(struct sandbox *sb);
static void stop_continue(struct sandbox *sb);

void sandbox_start(struct sandbox *sb, sbx_result_cb cb, void *privdata)
{
    sandbox_touch(sb);
    if (sb->status == SB_RUNNING && sb->op != OP_START) {
        if (cb)
            answer(cb, privdata, sandbox_to_json(sb));
        return;
    }
    if (sb->op == OP_START) {
        add_waiter(sb, cb, privdata, OP_START);
        return;
    }
    if (sb->op != OP_NONE) {
        /* A stop or snapshot is in flight: start when it ends (finish_op),
         * rather than answer "it is stopping" to a reconnecting client. */
        add_waiter(sb, cb, privdata, OP_START);
        return;
    }
    if ((sb->status != SB_PENDING && sb->status != SB_STOPPED &&
         sb->status != SB_ERROR)) {
        wrong_state(cb, privdata, sb, "start");
        return;
    }
    sbx_err_t err = {0};
    if (provider_ready(sb, &err) < 0) {
        answer_err(cb, privdata, &err);
        /* queued processes can't run */
        for (struct process *p = sb->procs; p; p = p->next)
            if (p->state == P_QUEUED)
                process_fail(p, "provider unavailable");
        /* A create that never reached its backend leaves nothing behind. */
        if (sb->discard_on_fail && !sb->started_once)
            sandbox_free(sb);
        return;
    }
    add_waiter(sb, cb, privdata, OP_START);
    sb->op = OP_START;
    adoption_sandbox_end(sb); /* the start takes over a reconnect in progress */
    set_status(sb, SB_STARTING, NULL);
    op_deadline_start(sb);
    if (sb->prov->ops->sb_start(sb->prov->cookie, sb, &err) < 0)
        finish_op(sb, &err);
}

void sandbox_stop(struct sandbox *sb, sbx_result_cb cb, void *privdata)
{
    sandbox_touch(sb);
    if ((sb->status == SB_STOPPED || sb->status == SB_PENDING) && sb->op == OP_NONE) {
        if (cb)
            answer(cb, privdata, sandbox_to_json(sb));
        return;
    }
    if (sb->op == OP_STOP) {
        add_waiter(sb, cb, privdata, OP_STOP);
        return;
    }
    if (sb->op != OP_NONE) {
        /* A start (or snapshot) is in flight: stop once it ends, instead of
         * -32001 "it is starting" (issue 16, item 11). */
        add_waiter(sb, cb, privdata, OP_STOP);
        return;
    }
    if (sb->status != SB_RUNNING && sb->status != SB_ERROR) {
        wrong_state(cb, privdata, sb, "stop");
        return;
    }
    add_waiter(sb, cb, privdata, OP_STOP);
    sb->op = OP_STOP;
    int had_error = sb->status == SB_ERROR;
    set_status(sb, SB_STOPPING, NULL);
    if (had_error || run_hook(sb, "on_stop", NULL) != 1) {
        /* No hook to wait for. */
        stop_continue(sb);
    }
}

static void stop_continue(struct sandbox *sb)
{
    sb->hook_phase = 0;
    for (struct process *p = sb->procs; p; p = p->next)
        if (p->state != P_EXITED)
            process_fail(p, "sandbox stopped");
    sbx_err_t err = {0};
    op_deadline_start(sb);
    if (sb->prov->ops->sb_stop(sb->prov->cookie, sb, &err) < 0)
        finish_op(sb, &err);
}

void sandbox_destroy(struct sandbox *sb, sbx_result_cb cb, void *privdata)
{
    if (sb->status == SB_DESTROYING || sb->op == OP_DESTROY) {
        add_waiter(sb, cb, privdata, OP_DESTROY);
        return;
    }
    add_waiter(sb, cb, privdata, OP_DESTROY);
    if (sb->op != OP_NONE) {
        /* Another op is in flight: destroy as soon as it finishes; a provider
         * that can end that op early (an isolate reading its globals) does
         * so now, and finish_op goes on to the destroy. */
        if (sb->prov->ops->sb_cancel && !sb->hook_phase)
            sb->prov->ops->sb_cancel(sb->prov->cookie, sb);
        return;
    }
    continue_destroy(sb);
}

static void destroy_after_hook(struct process *p, void *data)
{
    struct sandbox *sb = data;
    sb->hook_phase = 0;
    for (struct process *x = sb->procs; x; x = x->next)
        if (x->state != P_EXITED && x != p)
            process_fail(x, "sandbox destroyed");
    sbx_err_t err = {0};
    op_deadline_start(sb);
    if (sb->prov->ops->sb_destroy(sb->prov->cookie, sb, &err) < 0)
        finish_op(sb, &err);
}

static void continue_destroy(struct sandbox *sb)
{
    ev_timer_stop(D->loop, &sb->life_timer);
    ev_timer_stop(D->loop, &sb->idle_timer);
    int was_running = sb->status == SB_RUNNING;
    sb->op = OP_DESTROY;
    set_status(sb, SB_DESTROYING, NULL);
    if (!was_running || run_hook(sb, "on_destroy", destroy_after_hook) != 1)
        destroy_after_hook(NULL, sb);
}

/* A snapshot's data above this is kept encoded: a Duktape global of 340k
 * objects is ~1 MiB as text and ~75 MiB as a jansson tree. The tree exists
 * only while a sandbox started from it lives (snapshot_data). */
#define SNAPSHOT_TEXT_FROM 4096

/* Checks the new data against limits.snapshot_bytes_per_uid; -32005 if over. */
static int snapshot_fits(struct sandbox *sb, json_t *data, sbx_err_t *err)
{
    int count;
    size_t bytes;
    snapshot_usage(sb->owner, &count, &bytes);
    size_t n = data ? json_dumpb(data, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY) : 0;
    if (bytes + n > (size_t)D->cfg.snapshot_bytes_per_uid)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:I, s:I, s:I}", "limit", "snapshot_bytes_per_uid", "max",
                      (json_int_t)D->cfg.snapshot_bytes_per_uid, "used",
                      (json_int_t)bytes, "size", (json_int_t)n),
            "snapshot of %zu bytes does not fit: this uid's snapshots hold %zu "
            "of %lld bytes",
            n, bytes, (long long)D->cfg.snapshot_bytes_per_uid);
    return 0;
}

/* Stores data (stolen) in rec with its size in "bytes". */
static void keep_snapshot_data(json_t *rec, json_t *data)
{
    char *text = json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t n = text ? strlen(text) : 0;
    json_object_set_new(rec, "bytes", json_integer((json_int_t)n));
    if (text && n > SNAPSHOT_TEXT_FROM) {
        json_object_set_new(rec, "data_text", json_stringn_nocheck(text, n));
        json_decref(data);
    } else {
        json_object_set_new(rec, "data", data);
    }
    free(text);
}

void sandbox_snapshot(struct sandbox *sb, sbx_result_cb cb, void *privdata)
{
    sandbox_snapshot_ttl(sb, 0, cb, privdata);
}

void sandbox_snapshot_ttl(struct sandbox *sb, int64_t ttl, sbx_result_cb cb,
                          void *privdata)
{
    sandbox_touch(sb);
    if (sb->op != OP_NONE || (sb->status != SB_RUNNING && sb->status != SB_STOPPED)) {
        wrong_state(cb, privdata, sb, "snapshot");
        return;
    }
    sbx_err_t err = {0};
    if (!sb->prov->ops->sb_snapshot) {
        err_make_data(&err, SBX_E_PROVIDER,
                      json_pack("{s:s, s:s}", "provider", sb->prov->ops->name, "message",
                                "snapshots are not supported"),
                      "provider %s does not support snapshots", sb->prov->ops->name);
        answer_err(cb, privdata, &err);
        return;
    }
    if (ttl != 0 && ttl != -1 && !sb->prov->ops->snapshot_ttl) {
        err_make_data(&err, SBX_E_UNSUPPORTED,
                      json_pack("{s:s, s:s}", "provider", sb->prov->ops->name, "feature",
                                "snapshot ttl"),
                      "%s snapshots never expire: ttl takes only -1",
                      sb->prov->ops->name);
        answer_err(cb, privdata, &err);
        return;
    }
    sb->snap_ttl = ttl;
    int count;
    size_t bytes;
    snapshot_usage(sb->owner, &count, &bytes);
    if (count >= D->cfg.max_snapshots_per_uid) {
        err_make_data(&err, SBX_E_LIMIT,
                      json_pack("{s:s, s:I}", "limit", "max_snapshots_per_uid", "max",
                                (json_int_t)D->cfg.max_snapshots_per_uid),
                      "too many snapshots (limit %lld): delete one first",
                      (long long)D->cfg.max_snapshots_per_uid);
        answer_err(cb, privdata, &err);
        return;
    }
    add_waiter(sb, cb, privdata, OP_SNAPSHOT);
    sb->op = OP_SNAPSHOT;
    daemon_random_id("snap-", sb->snap_id, sizeof(sb->snap_id));
    op_deadline_start(sb);
    if (sb->prov->ops->sb_snapshot(sb->prov->cookie, sb, &err) < 0)
        finish_op(sb, &err);
}

/* -- hooks ------------------------------------------------------------------------ */

static void stop_hook_done(struct process *p, void *data)
{
    struct sandbox *sb = data;
    if (json_integer_value(json_object_get(p->exit, "exit_code")) != 0)
        log_warn("sandbox %s: on_stop hook failed (best effort): exit %lld", sb->id,
                 (long long)json_integer_value(json_object_get(p->exit, "exit_code")));
    stop_continue(sb);
}

static void start_hook_done(struct process *p, void *data)
{
    struct sandbox *sb = data;
    sb->hook_phase = 0;
    sb->discard_on_fail = 0; /* the backend is up: a hook failure leaves it in error */
    json_int_t code = json_integer_value(json_object_get(p->exit, "exit_code"));
    if (code == 0) {
        finish_op(sb, NULL);
        return;
    }
    sbx_err_t err = {0};
    const char *stderr_text = p->out[1].acc_len ? p->out[1].acc : "";
    int n = (int)(p->out[1].acc_len > 500 ? 500 : p->out[1].acc_len);
    err_make_data(&err, SBX_E_PROVIDER,
                  json_pack("{s:s, s:s, s:I}", "provider", sb->prov->ops->name, "message",
                            "on_start hook failed", "exit_code", code),
                  "on_start hook failed with exit code %lld%s%.*s", (long long)code,
                  n ? ": " : "", n, stderr_text);
    finish_op(sb, &err);
}

/* Returns 1 when the hook runs (done will be called), 0 when there is none. */
static int run_hook(struct sandbox *sb, const char *key, process_done_fn done)
{
    json_t *cmd = json_object_get(sb->conf, key);
    if (!cmd || json_is_null(cmd))
        return 0;
    struct proc_opts o = {.command = cmd, .timeout_ms = HOOK_TIMEOUT_MS, .internal = 1};
    struct process *p = NULL;
    sbx_err_t err = {0};
    if (process_new(&p, sb, &o, &err) < 0) {
        log_warn("sandbox %s: %s hook: %s", sb->id, key, err.msg);
        err_clear(&err);
        return 0;
    }
    p->done =
        done ? done : (strcmp(key, "on_stop") == 0 ? stop_hook_done : start_hook_done);
    p->done_data = sb;
    sb->hook_phase = 1;
    if (process_launch(p, &err) < 0) {
        /* process_launch already ran done() through process_fail. */
        err_clear(&err);
    }
    return 1;
}

/* -- op completion ---------------------------------------------------------------- */

static void finish_op(struct sandbox *sb, sbx_err_t *err)
{
    enum sb_op op = sb->op;
    ev_timer_stop(D->loop, &sb->op_timer);
    int failed = err && err->msg;
    switch (op) {
    case OP_START:
        sb->op = OP_NONE;
        if (failed) {
            memory_release(sb);
            set_status(sb, SB_ERROR, err->msg);
            for (struct process *p = sb->procs; p; p = p->next)
                if (p->state == P_QUEUED)
                    process_fail(p, err->msg);
            if (sb->discard_on_fail && !sb->started_once) {
                /* A create that never got a backend leaves nothing behind. */
                answer_waiters(sb, OP_START, err, NULL);
                err_clear(err);
                log_info("sandbox %s: first start failed, removed", sb->id);
                sandbox_free(sb);
                return;
            }
        } else {
            sb->started_at = daemon_now();
            sb->started_once = 1;
            set_status(sb, SB_RUNNING, NULL);
            arm_timers(sb);
        }
        answer_waiters(sb, OP_START, err, NULL);
        if (!failed)
            process_spawn_queued(sb);
        break;
    case OP_STOP:
        sb->op = OP_NONE;
        ev_timer_stop(D->loop, &sb->idle_timer);
        if (failed) {
            set_status(sb, SB_ERROR, err->msg);
        } else {
            memory_release(sb);
            set_status(sb, SB_STOPPED, NULL);
        }
        answer_waiters(sb, OP_STOP, err, NULL);
        break;
    case OP_SNAPSHOT:
        sb->op = OP_NONE;
        answer_waiters(sb, OP_SNAPSHOT, err, sb->op_result);
        json_decref(sb->op_result);
        sb->op_result = NULL;
        break;
    case OP_DESTROY:
        sb->op = OP_NONE;
        if (failed) {
            set_status(sb, SB_ERROR, err->msg);
            answer_waiters(sb, OP_DESTROY, err, NULL);
            break;
        } else {
            set_status(sb, SB_DESTROYED, NULL);
            json_t *res = json_pack("{s:s, s:s}", "id", sb->id, "status", "destroyed");
            answer_waiters(sb, OP_DESTROY, NULL, res);
            json_decref(res);
            log_info("sandbox %s destroyed", sb->id);
            sandbox_free(sb);
            return;
        }
    case OP_NONE:
        break;
    }
    err_clear(err);
    /* A destroy asked for while another op ran goes ahead at once. */
    if (sb->op == OP_NONE) {
        for (struct op_waiter *w = sb->waiters; w; w = w->next)
            if (w->op == OP_DESTROY) {
                continue_destroy(sb);
                return;
            }
    }
    /* A start or stop asked for meanwhile goes next, from the loop: finish_op
     * may run inside the provider's own start or inside process_exited of a
     * hook, and the next op would run its provider call and hook there. */
    if (sb->op == OP_NONE && sb->waiters && !ev_is_active(&sb->next_op)) {
        ev_timer_set(&sb->next_op, 0., 0.);
        ev_timer_start(D->loop, &sb->next_op);
    }
}

static void next_op_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct sandbox *sb = t->data;
    if (sb->op != OP_NONE || !sb->waiters)
        return; /* an op began meanwhile: its finish_op comes back here */
    /* A destroy asked for while another op ran goes first. */
    for (struct op_waiter *w = sb->waiters; w; w = w->next)
        if (w->op == OP_DESTROY) {
            continue_destroy(sb);
            return;
        }
    /* Else the oldest start or stop (others of its kind join it as its
     * waiters; the rest wait for its end). */
    struct op_waiter *w = sb->waiters;
    sb->waiters = w->next;
    sbx_result_cb cb = w->cb;
    void *privdata = w->privdata;
    enum sb_op next = w->op;
    free(w);
    if (next == OP_START)
        sandbox_start(sb, cb, privdata);
    else if (next == OP_STOP)
        sandbox_stop(sb, cb, privdata);
}

void sandbox_op_done(struct sandbox *sb, sbx_err_t *err, json_t *result)
{
    /* A start may have found the backend already there (Docker container
     * by label, Modal sandbox by name): the create answer says so. */
    if (sb->op == OP_START && json_is_true(json_object_get(result, "reconnected")))
        sb->backend_reconnected = 1;
    if (sb->op == OP_START) {
        json_t *w = json_object_get(result, "warnings");
        json_decref(sb->start_warnings);
        sb->start_warnings = json_array_size(w) > 0 ? json_incref(w) : NULL;
    }
    if (sb->op == OP_START && !(err && err->msg) &&
        json_object_get(sb->conf, "on_start") &&
        !json_is_null(json_object_get(sb->conf, "on_start"))) {
        json_decref(result);
        /* The backend is up; the hook decides whether the start counts. */
        set_status(sb, SB_STARTING, NULL);
        if (run_hook(sb, "on_start", start_hook_done) == 1)
            return;
    }
    sbx_err_t lim = {0};
    if (sb->op == OP_SNAPSHOT && !(err && err->msg) &&
        snapshot_fits(sb, result, &lim) < 0) {
        json_decref(result);
        finish_op(sb, &lim);
        err_clear(&lim);
        return;
    }
    if (sb->op == OP_SNAPSHOT && !(err && err->msg)) {
        char id[64];
        snprintf(id, sizeof(id), "%s", sb->snap_id);
        char ts[40];
        json_t *rec = json_pack("{s:s, s:I, s:s, s:s}", "provider", sb->prov->ops->name,
                                "owner", (json_int_t)sb->owner, "created_at",
                                daemon_timestamp(daemon_now(), ts), "sandbox", sb->id);
        sb->op_result =
            json_pack("{s:s, s:s, s:s, s:s}", "snapshot", id, "provider",
                      sb->prov->ops->name, "sandbox", sb->id, "created_at", ts);
        /* The lifetime a provider gave it (issue 20: Modal's ttl): in the
         * answer and in snapshot.list. */
        static const char *const life[] = {"ttl_s", "expires_at", "ttl"};
        for (size_t k = 0; k < 3; k++) {
            json_t *v = json_object_get(result, life[k]);
            if (v) {
                json_object_set(sb->op_result, life[k], v);
                json_object_set(rec, life[k], v);
            }
        }
        keep_snapshot_data(rec, result ? result : json_object());
        json_object_set_new(D->snapshots, id, rec);
        result = NULL;
    }
    json_decref(result);
    finish_op(sb, err);
}

void sandbox_lost(struct sandbox *sb, const char *reason)
{
    log_warn("sandbox %s lost: %s", sb->id, reason);
    adoption_sandbox_end(sb);
    for (struct process *p = sb->procs; p; p = p->next)
        if (p->state != P_EXITED)
            process_fail(p, reason);
    if (sb->status != SB_DESTROYING)
        set_status(sb, SB_ERROR, reason);
}

/* -- lifetime and reconnect honesty ------------------------------------------------ */

int sandbox_restarts_on_call(struct sandbox *sb)
{
    const char *why_not = NULL;
    return sb->status == SB_ERROR && sb->op == OP_NONE &&
           sb->prov->ops->restart_on_call && sb->prov->loaded &&
           sb->prov->ops->available(sb->prov->cookie, &why_not);
}

int64_t sandbox_default_timeout(struct provider_inst *prov)
{
    return prov->ops->no_default_lifetime ? 0 : D->cfg.default_timeout_ms;
}

static void differs(json_t *w, const char *what, json_t *want, json_t *have)
{
    char *a = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT);
    char *b = have ? json_dumps(have, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
    char *msg = xasprintf("%s: requested %s, the existing sandbox has %s (not applied)",
                          what, a ? a : "?", b ? b : "none");
    json_array_append_new(w, json_string(msg));
    free(msg);
    free(a);
    free(b);
}

json_t *sandbox_reconnect_warnings(struct sandbox *sb, json_t *params)
{
    json_t *w = json_array();
    static const char *const keys[] = {"image",
                                       "working_dir",
                                       "timeout_ms",
                                       "idle_timeout_ms",
                                       "command_timeout_ms",
                                       "memory_limit_mb",
                                       "fresh_isolate",
                                       "tools",
                                       "on_start",
                                       "on_stop",
                                       "on_destroy",
                                       "instructions",
                                       "instructions_append",
                                       "snapshot",
                                       NULL};
    for (size_t i = 0; keys[i]; i++) {
        json_t *want = json_object_get(params, keys[i]);
        if (!want || json_is_null(want))
            continue;
        json_t *have = json_object_get(sb->conf, keys[i]);
        if (!have || !json_equal(want, have))
            differs(w, keys[i], want, have);
    }
    const char *pn = json_string_value(json_object_get(params, "provider"));
    if (pn && strcmp(pn, sb->prov->ops->name) != 0)
        differs(w, "provider", json_object_get(params, "provider"),
                json_object_get(sb->conf, "provider"));
    json_t *env = json_object_get(params, "env");
    if (json_is_object(env)) {
        json_t *cur = sandbox_env_for(sb, NULL);
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v) {
            json_t *have = json_object_get(cur, k);
            if (json_is_null(v) ? have == NULL : (have && json_equal(v, have)))
                continue;
            char what[300];
            snprintf(what, sizeof(what), "env.%s", k);
            differs(w, what, v, have);
        }
        json_decref(cur);
    }
    json_t *opts = json_object_get(params, "options");
    if (json_is_object(opts)) {
        json_t *cur = json_object_get(sb->conf, "options");
        const char *k;
        json_t *v;
        json_object_foreach(opts, k, v) {
            json_t *have = json_object_get(cur, k);
            if (have && json_equal(v, have))
                continue;
            char what[300];
            snprintf(what, sizeof(what), "options.%s", k);
            differs(w, what, v, have);
        }
    }
    if (sb->prov->loaded && sb->prov->ops->sb_reconnect_warnings)
        sb->prov->ops->sb_reconnect_warnings(sb->prov->cookie, sb, params, w);
    if (json_array_size(w) == 0) {
        json_decref(w);
        return NULL;
    }
    return w;
}

/* -- instructions -------------------------------------------------------------------- */

char *sandbox_shell_instructions(void *cookie, struct sandbox *sb)
{
    const char *wd = sandbox_cwd_for(sb, NULL);
    return xasprintf(
        "Run shell commands in sandbox %s (%s provider). A string command runs "
        "with sh -c, so pipes and redirects work; an array runs as argv. The "
        "working directory is %s unless you pass an absolute cwd. Each command "
        "has a timeout (exit code 124 when it is hit); a killed command exits "
        "137. Files persist between commands for the sandbox's lifetime.",
        sb->id, sb->prov->ops->name, wd ? wd : "the provider's default");
}

char *sandbox_instructions(struct sandbox *sb)
{
    const char *replace = json_string_value(json_object_get(sb->conf, "instructions"));
    const char *append =
        json_string_value(json_object_get(sb->conf, "instructions_append"));
    if (!replace)
        replace = D->cfg.instructions_text;
    char *base = NULL;
    if (replace)
        base = xstrdup(replace);
    else if (sb->prov->ops->sb_instructions)
        base = sb->prov->ops->sb_instructions(sb->prov->cookie, sb);
    if (!base)
        return NULL;
    const char *cfg_append = D->cfg.instructions_append;
    char *out = xasprintf("%s%s%s%s%s", base, cfg_append ? "\n\n" : "",
                          cfg_append ? cfg_append : "", append ? "\n\n" : "",
                          append ? append : "");
    free(base);
    return out;
}
