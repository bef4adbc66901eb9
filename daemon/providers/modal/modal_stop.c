/*
 * modal_stop.c - the steps of the Modal provider's stop, snapshot and
 * destroy jobs (modal_life.c's table runs them through modal_job.c): the
 * filesystem snapshot (on the task's command router, or SandboxSnapshotFs),
 * the check of a sandbox that died, and SandboxTerminate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "providers/modal/modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* ---- STOP_SNAP / SNAPSHOT / STOP_CHECK / TERMINATE --------------------------------- */

/* STOP_SNAP / SNAPSHOT: on the task's router when it has one, else
 * SandboxSnapshotFs (what SDKs before 0.7.5 used). */
int modal_stop_pick_snapshot(struct msb *ms)
{
    int stop = ms->step == ST_STOP_SNAP;
    int u = modal_router_use_job(ms);
    if (u == 0)
        return STEP_WAIT; /* modal_job_router_ready goes on */
    if (u > 0 && !ms->snap_uuid[0])
        modal_uuid4(ms->snap_uuid); /* kept for the retries of this one snapshot */
    return modal_job_go(ms, u > 0 ? (stop ? ST_STOP_TSNAP : ST_TSNAP)
                                  : (stop ? ST_STOP_SNAPFS : ST_SNAPFS));
}

/* TaskSnapshotFilesystem: the snapshot id makes a retried call one image.
 * Stop's images never expire (sbxd deletes them); sandbox.snapshot's live
 * providers.modal.snapshot_ttl_s (0: Modal's default, 30 days today). */
int modal_stop_send_task_snapshot(struct msb *ms)
{
    Modal__TaskCommandRouter__TaskSnapshotFilesystemRequest req =
        MODAL__TASK_COMMAND_ROUTER__TASK_SNAPSHOT_FILESYSTEM_REQUEST__INIT;
    req.task_id = ms->task_id;
    req.snapshot_id = ms->snap_uuid;
    int64_t ttl = modal_snap_ttl(ms);
    if (ttl != 0) {
        req._ttl_seconds_case =
            MODAL__TASK_COMMAND_ROUTER__TASK_SNAPSHOT_FILESYSTEM_REQUEST___TTL_SECONDS_TTL_SECONDS;
        req.ttl_seconds = ttl;
    }
    ms->call = modal_router_unary(ms, "TaskSnapshotFilesystem", &req.base,
                                  POLL_S + POLL_SLACK_S, modal_job_rpc_done, ms);
    grpc_call_retry_budget(ms->call, ms->mp->retry_budget_s);
    return STEP_WAIT;
}

/* A router snapshot that failed in a way the fallback may fix: 1 after moving on. */
static int task_snapshot_fallback(struct msb *ms, const struct grpc_status *st)
{
    if (st->code == GRPC_UNAUTHENTICATED && ms->rt_job_tries < 3) {
        modal_router_stale(ms);
        ms->rt_job_tries++;
        ms->step = ms->step == ST_STOP_TSNAP ? ST_STOP_SNAP : ST_SNAPSHOT;
        modal_job_next(ms);
        return 1;
    }
    if (st->code == GRPC_UNIMPLEMENTED || st->code == GRPC_FAILED_PRECONDITION) {
        log_info("modal: sandbox %s: TaskSnapshotFilesystem: %s: %s; SandboxSnapshotFs "
                 "instead",
                 ms->sb->id, grpc_code_name(st->code), st->message);
        ms->step = ms->step == ST_STOP_TSNAP ? ST_STOP_SNAPFS : ST_SNAPFS;
        modal_job_next(ms);
        return 1;
    }
    return 0;
}

static void saved_for_resume(struct msb *ms, const char *image_id)
{
    /* The image of an earlier stop is not needed any more. */
    if (ms->resume_image && strcmp(ms->resume_image, image_id) != 0 && !ms->resume_shared)
        modal_image_delete(ms->mp, ms->resume_image);
    ms->resume_shared = 0;
    modal_set_str(&ms->resume_image, image_id);
    log_info("modal: sandbox %s: filesystem saved as %s", ms->sb->id, ms->resume_image);
    ms->step = ST_TERMINATE;
    modal_job_next(ms);
}

void modal_stop_on_stop_tsnap(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__TaskCommandRouter__TaskSnapshotFilesystemResponse *r = reply;
    if (r && r->image_id[0]) {
        saved_for_resume(ms, r->image_id);
        return;
    }
    if (task_snapshot_fallback(ms, st))
        return;
    if (st->code == GRPC_NOT_FOUND || st->code == GRPC_OK) {
        ms->step = ST_STOP_CHECK;
        modal_job_next(ms);
        return;
    }
    modal_job_fail_st(ms, st, "saving the filesystem before stop");
}

void modal_stop_on_tsnap(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__TaskCommandRouter__TaskSnapshotFilesystemResponse *r = reply;
    if (r && r->image_id[0]) {
        modal_job_end(ms, NULL,
                      modal_snap_result(ms, r->image_id, "TaskSnapshotFilesystem"));
        return;
    }
    if (task_snapshot_fallback(ms, st))
        return;
    modal_job_fail_st(ms, st,
                      st->code == GRPC_OK ? "snapshot: no image returned" : "snapshot");
}

int modal_stop_send_snapshot_fs(struct msb *ms)
{
    Modal__Client__SandboxSnapshotFsRequest req =
        MODAL__CLIENT__SANDBOX_SNAPSHOT_FS_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    req.timeout = (float)POLL_S;
    return modal_job_call(ms, &req.base, POLL_S + POLL_SLACK_S);
}

static int snapshot_ok(const Modal__Client__SandboxSnapshotFsResponse *r)
{
    return r && r->result && r->result->status == 1 && r->image_id[0];
}

void modal_stop_on_stop_snap(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxSnapshotFsResponse *r = reply;
    if (snapshot_ok(r)) {
        saved_for_resume(ms, r->image_id);
        return;
    }
    if (st->code == GRPC_NOT_FOUND || st->code == GRPC_OK) {
        /* Maybe it died: then there is nothing to save, and stop is done. */
        ms->step = ST_STOP_CHECK;
        modal_job_next(ms);
        return;
    }
    modal_job_fail_st(ms, st, "saving the filesystem before stop");
}

void modal_stop_on_stop_check(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (!modal_task_ended(st, reply)) {
        modal_job_fail_msg(ms, "stop: Modal could not snapshot the sandbox's filesystem; "
                               "it keeps running");
        return;
    }
    modal_job_stop_gone(ms);
}

int modal_stop_send_terminate(struct msb *ms)
{
    Modal__Client__SandboxTerminateRequest req =
        MODAL__CLIENT__SANDBOX_TERMINATE_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void terminated(struct msb *ms)
{
    log_info("modal: sandbox %s: Modal sandbox %s terminated", ms->sb->id,
             ms->sandbox_id);
    modal_job_forget(ms);
    modal_job_end(ms, NULL, NULL);
}

void modal_stop_on_terminate(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND) {
        modal_job_fail_st(ms, st,
                          ms->job == J_STOP ? "stopping the sandbox"
                                            : "terminating the sandbox");
        return;
    }
    terminated(ms);
}

void modal_stop_on_snapshot(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxSnapshotFsResponse *r = reply;
    if (snapshot_ok(r)) {
        modal_job_end(ms, NULL, modal_snap_result(ms, r->image_id, "SandboxSnapshotFs"));
        return;
    }
    if (st->code != GRPC_OK) {
        modal_job_fail_st(ms, st, "snapshot");
        return;
    }
    char buf[600];
    snprintf(buf, sizeof(buf), "snapshot failed: %s",
             r && r->result ? modal_result_text(r->result) : "no image returned");
    modal_job_fail_msg(ms, buf);
}
