/*
 * modal_job.c - the runner of the Modal provider's lifecycle jobs: walks a
 * job through the step table (mp->steps, modal_life.c's, handed down at
 * load), ends it (the result, the restart's waiters through the hooks, a
 * pending op), starts the jobs, and watches the Modal sandbox while stop and
 * snapshot talk to it (losing the backend, below). The steps themselves
 * (modal_create.c, modal_stop.c) call into this file; it calls none of them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "providers/modal/modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define MAX_LIFETIME_S 86400
#define WATCH_POLL_S 10.0 /* SandboxWait long poll while a job runs (the SDK's wait) */
#define WATCH_RETRY_S 1.0

void modal_job_progress(struct msb *ms, const char *stage, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (n == 0)
        return;
    sandbox_progress(ms->sb, json_pack("{s:s, s:s}", "stage", stage, "message", buf));
}

void modal_job_forget(struct msb *ms)
{
    free(ms->sandbox_id);
    ms->sandbox_id = NULL;
    free(ms->task_id);
    ms->task_id = NULL;
}

/* ---- ending a job ------------------------------------------------------------ */

/* Ends the current job. err (may be NULL) is cleared; result stolen. May free ms
 * (a failed first start removes the sandbox): nothing may touch ms afterwards. */
void modal_job_end(struct msb *ms, sbx_err_t *err, json_t *result)
{
    enum mjob job = ms->job;
    ms->job = J_NONE;
    grpc_call_cancel(ms->call);
    ms->call = NULL;
    ev_timer_stop(D->loop, &ms->timer);
    modal_job_watch_stop(ms);
    int failed = err && err->msg;
    if (job == J_DESTROY && !failed) {
        ms->destroyed = 1;
        /* Stop's images never expire: the sandbox they resumed is gone now. */
        if (ms->resume_image && !ms->resume_shared)
            modal_image_delete(ms->mp, ms->resume_image);
    }
    if (job == J_SNAPSHOT && !failed && result && ms->sb->snap_id[0])
        /* Kept in the state file: the registry gets it back after a restart. */
        json_object_set_new(
            ms->mp->snaps, ms->sb->snap_id,
            json_pack("{s:I, s:f, s:s, s:O}", "owner", (json_int_t)ms->sb->owner,
                      "created_at", daemon_now(), "sandbox", ms->sb->id, "data", result));
    modal_state_dirty(ms->mp);
    if (job == J_RESTART) {
        json_decref(result);
        if (!failed) {
            ms->restarts++;
            ms->dead = 0;
            modal_ws_refresh(ms); /* a new Modal sandbox has new tunnels */
        }
        char why[600] = "";
        if (failed)
            snprintf(why, sizeof(why),
                     "the Modal sandbox died and could not be restarted: %s", err->msg);
        ms->mp->hooks.waiters_resume(ms, failed ? err->msg : NULL);
        enum mjob op = ms->pending_op;
        ms->pending_op = J_NONE;
        err_clear(err);
        if (op == J_SNAPSHOT && failed) {
            /* Nothing runs to take it from: the op fails now, with the cause. */
            sbx_err_t e = {0};
            modal_plain_err(&e, why);
            sandbox_lost(ms->sb, why);
            sandbox_op_done(ms->sb, &e, NULL);
            err_clear(&e);
            return;
        }
        if (op != J_NONE) {
            modal_job_run(ms, op);
            return;
        }
        if (failed)
            sandbox_lost(ms->sb, why);
        return;
    }
    if (!failed && job == J_START) {
        ms->dead = 0;
        if (ms->reconnected && !result)
            result = json_pack("{s:b}", "reconnected", 1);
        if (result && json_array_size(ms->warnings) > 0)
            json_object_set(result, "warnings", ms->warnings);
    }
    json_decref(ms->warnings);
    ms->warnings = NULL;
    /* Processes that wanted a restart while another op ran. */
    if (ms->waiters && ms->job == J_NONE && job == J_SNAPSHOT)
        modal_job_restart(ms);
    if (!failed && job == J_START && modal_ws_start_done(ms, result))
        return; /* it ends the op once the tunnels are known */
    sandbox_op_done(ms->sb, failed ? err : NULL, result);
    err_clear(err);
}

void modal_job_fail_st(struct msb *ms, const struct grpc_status *st, const char *what)
{
    sbx_err_t err = {0};
    modal_grpc_err(ms->mp, &err, st, what);
    log_warn("modal: sandbox %s: %s", ms->sb->id, err.msg);
    modal_job_end(ms, &err, NULL);
}

void modal_job_fail_msg(struct msb *ms, const char *msg)
{
    sbx_err_t err = {0};
    modal_plain_err(&err, msg);
    log_warn("modal: sandbox %s: %s", ms->sb->id, msg);
    modal_job_end(ms, &err, NULL);
}

static void task_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if (ms->job != J_NONE)
        modal_job_next(ms);
}

uint32_t modal_job_lifetime(struct msb *ms)
{
    double ms_total =
        (double)json_integer_value(json_object_get(ms->sb->conf, "timeout_ms"));
    double left = ms_total / 1000.0;
    if (ms->sb->expires_at > 0)
        left = ms->sb->expires_at - daemon_now();
    if (ms->mp->max_timeout_ms > 0 && left > ms->mp->max_timeout_ms / 1000.0)
        left = ms->mp->max_timeout_ms / 1000.0;
    double secs = ceil(left);
    if (secs < 1)
        secs = 1;
    if (secs > MAX_LIFETIME_S)
        secs = MAX_LIFETIME_S;
    return (uint32_t)secs;
}

/* ---- the step table ------------------------------------------------------------ */

int modal_job_call(struct msb *ms, const ProtobufCMessage *req, double timeout)
{
    ms->call = grpc_unary(&ms->mp->ch, modal_rpc(ms, ms->mp->steps[ms->step].method), req,
                          timeout, modal_job_rpc_done, ms);
    return STEP_WAIT;
}

int modal_job_go(struct msb *ms, enum mstep step)
{
    ms->step = step;
    return STEP_ON;
}

void modal_job_rpc_done(struct grpc_call *c, const struct grpc_status *st,
                        const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->call = NULL;
    const struct job_step *s = &ms->mp->steps[ms->step];
    void *r = modal_reply(s->reply, st, msg, len);
    s->on_reply(ms, st, r);
    modal_reply_free(r);
}

/* Runs steps until one waits for a call (or the job ends). Steps without a
 * call only move forward, so a job takes fewer turns than the table has
 * steps twice over. */
void modal_job_next(struct msb *ms)
{
    for (int turns = 0; turns < 2 * ST_COUNT; turns++)
        if (ms->mp->steps[ms->step].send(ms) == STEP_WAIT)
            return;
    modal_job_fail_msg(ms, "internal error: a Modal job went round in circles");
}

void modal_job_router_ready(struct msb *ms)
{
    if (ms->step == ST_STOP_SNAP || ms->step == ST_SNAPSHOT)
        modal_job_next(ms);
}

/* ---- losing the backend ------------------------------------------------------------
 *
 * While a snapshot (or the snapshot of a stop) runs, SandboxWait watches the
 * Modal sandbox: SnapshotFs is a long poll that a server may hold although
 * the sandbox is gone, and the core would only give up at op_timeout_ms.
 * An ended sandbox (a result, or NOT_FOUND) is a loss; any other failure
 * (an outage) only makes the watch try again. */

static void watch_open(struct msb *ms);

void modal_job_watch_stop(struct msb *ms)
{
    grpc_call_cancel(ms->watch_call);
    ms->watch_call = NULL;
    ev_timer_stop(D->loop, &ms->watch_timer);
}

static int watching(struct msb *ms)
{
    return ms->step == ST_SNAPSHOT || ms->step == ST_STOP_SNAP || ms->step == ST_TSNAP ||
           ms->step == ST_SNAPFS || ms->step == ST_STOP_TSNAP ||
           ms->step == ST_STOP_SNAPFS || ms->step == ST_STOP_CHECK;
}

static void watch_done(struct grpc_call *c, const struct grpc_status *st,
                       const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->watch_call = NULL;
    if ((ms->job != J_SNAPSHOT && ms->job != J_STOP) || !watching(ms))
        return;
    Modal__Client__SandboxWaitResponse *r =
        modal_reply(&modal__client__sandbox_wait_response__descriptor, st, msg, len);
    int ended = st->code == GRPC_NOT_FOUND || (r && r->result);
    char why[512];
    snprintf(why, sizeof(why), "%s", r ? modal_result_text(r->result) : st->message);
    modal_reply_free(r);
    if (ended) {
        modal_job_mark_dead(ms, why);
        return;
    }
    if (st->code == GRPC_OK) {
        watch_open(ms); /* the long poll ended: the sandbox still runs */
        return;
    }
    ev_timer_set(&ms->watch_timer, WATCH_RETRY_S, 0.);
    ev_timer_start(D->loop, &ms->watch_timer);
}

static void watch_open(struct msb *ms)
{
    if (ms->watch_call || !ms->sandbox_id || ms->dead)
        return;
    Modal__Client__SandboxWaitRequest req = MODAL__CLIENT__SANDBOX_WAIT_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    req.timeout = (float)WATCH_POLL_S;
    ms->watch_call = grpc_unary(&ms->mp->ch, modal_rpc(ms, "SandboxWait"), &req.base,
                                WATCH_POLL_S + POLL_SLACK_S, watch_done, ms);
}

static void watch_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if ((ms->job == J_SNAPSHOT || ms->job == J_STOP) && watching(ms))
        watch_open(ms);
}

/* From a fresh loop iteration (the loss may be noticed deep inside a process's
 * callbacks): a job that depends on the lost sandbox ends now. */
void modal_job_stop_gone(struct msb *ms)
{
    log_warn("modal: sandbox %s: the Modal sandbox was already gone at stop; its "
             "files are lost",
             ms->sb->id);
    modal_job_forget(ms);
    modal_job_end(ms, NULL, NULL);
}

static void lost_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if (!ms->dead || !watching(ms))
        return;
    if (ms->job == J_SNAPSHOT) {
        char buf[700];
        snprintf(buf, sizeof(buf), "snapshot: the Modal sandbox %s was lost: %s",
                 nz(ms->sandbox_id), nz(ms->dead_reason));
        modal_job_fail_msg(ms, buf);
    } else if (ms->job == J_STOP) {
        modal_job_stop_gone(ms); /* nothing is left to save or to end */
    }
}

void modal_job_mark_dead(struct msb *ms, const char *why)
{
    if (!ms)
        return;
    if (!ms->dead)
        log_warn("modal: sandbox %s: the Modal sandbox %s is gone: %s", ms->sb->id,
                 nz(ms->sandbox_id), why);
    ms->dead = 1;
    modal_set_str(&ms->dead_reason, why);
    if ((ms->job == J_SNAPSHOT || ms->job == J_STOP) && watching(ms)) {
        ev_timer_set(&ms->lost_timer, 0., 0.);
        ev_timer_start(D->loop, &ms->lost_timer);
    }
}

/* ---- starting jobs ----------------------------------------------------------------- */

void modal_job_restart(struct msb *ms)
{
    log_info("modal: sandbox %s: restarting the Modal sandbox (%s)", ms->sb->id,
             nz(ms->dead_reason));
    modal_job_forget(ms);
    ms->job = J_RESTART;
    ms->step = ST_APP;
    ms->polls = 0;
    modal_job_next(ms);
}

/* Starts stop/destroy/snapshot now (the core already waits for it). */
void modal_job_run(struct msb *ms, enum mjob op)
{
    ms->job = op;
    ms->rt_job_tries = 0;
    ms->rt_job_waiting = 0;
    ms->snap_uuid[0] = '\0';
    if (op == J_DESTROY) {
        if (!ms->sandbox_id) {
            modal_job_end(ms, NULL, NULL);
            return;
        }
        ms->step = ST_TERMINATE;
    } else if (op == J_STOP) {
        if (!ms->sandbox_id) {
            modal_job_end(ms, NULL, NULL);
            return;
        }
        ms->step = ms->dead ? ST_STOP_CHECK : ST_STOP_SNAP;
    } else {
        if (!ms->sandbox_id || ms->dead) {
            if (ms->resume_image && !ms->sandbox_id) {
                ms->resume_shared = 1;
                modal_job_end(ms, NULL, json_pack("{s:s}", "image_id", ms->resume_image));
                return;
            }
            modal_job_fail_msg(
                ms,
                "snapshot: the sandbox has no running Modal sandbox and no saved image");
            return;
        }
        ms->step = ST_SNAPSHOT;
    }
    if (op != J_DESTROY)
        watch_open(ms);
    modal_job_next(ms);
}

/* The job's timers of a new record (task polls, the watch, a loss). */
void modal_job_init(struct msb *ms)
{
    ev_init(&ms->timer, task_timer_cb);
    ms->timer.data = ms;
    ev_init(&ms->watch_timer, watch_timer_cb);
    ms->watch_timer.data = ms;
    ev_init(&ms->lost_timer, lost_cb);
    ms->lost_timer.data = ms;
}
