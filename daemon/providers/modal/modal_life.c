/*
 * modal_life.c - sandbox lifecycle jobs of the Modal provider: the step table
 * and the provider's sandbox ops. The steps are in modal_create.c (start,
 * restart) and modal_stop.c (stop, snapshot, destroy); modal_job.c runs them. A V2
 * sandbox takes the *V2 twin of each call (modal_rpc); the snapshot steps run on the
 * task's command router (TaskSnapshotFilesystem) when it has one.
 *
 * A job runs one at a time per sandbox, as a walk through the step table
 * (modal_life_steps[]): each step names its RPC, builds and sends the request, and
 * handles the reply, which job_rpc_done decodes (modal_reply) and frees for
 * it. A step may also decide without a call and move on.
 *   start   APP -> LOOKUP [SandboxGetFromName: adopt a running sandbox named
 *           like ours -> TASK -> TAGS_CHECK: it must be this uid's] or: IMAGE
 *           (BUILDER [the workspace's image builder version] + IMAGE_BUILD +
 *           IMAGE_JOIN, SNAP_IMAGE for a snapshot, or the image saved by stop)
 *           -> SECRET (for env) -> CREATE (owner tags in it) -> TASK (polled
 *           for 21 minutes, then terminated) -> TAGS_SET (owner uid)
 *   restart the same without the lookup, when a call found the sandbox dead
 *   stop    STOP_SNAP (-> STOP_TSNAP on the router, never expiring, or
 *           STOP_SNAPFS) -> TERMINATE (start recreates from the saved image);
 *           STOP_CHECK when the snapshot fails: a dead sandbox has nothing
 *           to save
 *   destroy TERMINATE
 *   snapshot SNAPSHOT (-> TSNAP with snapshot_ttl_s, or SNAPFS)
 * A lifecycle op asked for during a restart waits for it (pending_op).
 *
 * Losing the backend: while stop, destroy or snapshot talk to a Modal
 * sandbox, a SandboxWait long poll watches it. When it (or any process call)
 * finds the sandbox ended, the job ends at once (modal_job_mark_dead): snapshot
 * fails with a provider error, stop and destroy are done (nothing is left to
 * save or end). A transient outage is not a loss: only an answer from Modal
 * that the sandbox ended (or is unknown) counts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "providers/modal/modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* Indexed by enum mstep. */
const struct job_step modal_life_steps[] = {
    [ST_APP] = {"AppGetOrCreate", &modal__client__app_get_or_create_response__descriptor,
                modal_create_send_app, modal_create_on_app},
    [ST_LOOKUP] = {"SandboxGetFromName",
                   &modal__client__sandbox_get_from_name_response__descriptor,
                   modal_create_send_lookup, modal_create_on_lookup},
    [ST_IMAGE] = {NULL, NULL, modal_create_decide_image, NULL},
    [ST_BUILDER] = {"EnvironmentGetOrCreate",
                    &modal__client__environment_get_or_create_response__descriptor,
                    modal_create_send_builder, modal_create_on_builder},
    [ST_IMAGE_BUILD] = {"ImageGetOrCreate",
                        &modal__client__image_get_or_create_response__descriptor,
                        modal_create_send_image_build, modal_create_on_image_build},
    [ST_IMAGE_JOIN] = {"ImageJoinStreaming", NULL, modal_create_send_image_join, NULL},
    [ST_SNAP_IMAGE] = {"ImageFromId", NULL, modal_create_send_snap_image,
                       modal_create_on_snap_image},
    [ST_SECRET] = {"SecretGetOrCreate",
                   &modal__client__secret_get_or_create_response__descriptor,
                   modal_create_send_secret, modal_create_on_secret},
    [ST_CREATE] = {"SandboxCreate", &modal__client__sandbox_create_response__descriptor,
                   modal_create_send_create, modal_create_on_create},
    [ST_TASK] = {"SandboxGetTaskId",
                 &modal__client__sandbox_get_task_id_response__descriptor,
                 modal_create_send_task, modal_create_on_task},
    [ST_TAGS_SET] = {"SandboxTagsSet", NULL, modal_create_send_tags_set,
                     modal_create_on_tags_set},
    [ST_TAGS_CHECK] = {"SandboxTagsGet",
                       &modal__client__sandbox_tags_get_response__descriptor,
                       modal_create_send_tags_check, modal_create_on_tags_check},
    [ST_STOP_SNAP] = {NULL, NULL, modal_stop_pick_snapshot, NULL},
    [ST_STOP_TSNAP] =
        {"TaskSnapshotFilesystem",
         &modal__task_command_router__task_snapshot_filesystem_response__descriptor,
         modal_stop_send_task_snapshot, modal_stop_on_stop_tsnap},
    [ST_STOP_SNAPFS] = {"SandboxSnapshotFs",
                        &modal__client__sandbox_snapshot_fs_response__descriptor,
                        modal_stop_send_snapshot_fs, modal_stop_on_stop_snap},
    [ST_STOP_CHECK] = {"SandboxGetTaskId",
                       &modal__client__sandbox_get_task_id_response__descriptor,
                       modal_create_send_task, modal_stop_on_stop_check},
    [ST_TERMINATE] = {"SandboxTerminate", NULL, modal_stop_send_terminate,
                      modal_stop_on_terminate},
    [ST_SNAPSHOT] = {NULL, NULL, modal_stop_pick_snapshot, NULL},
    [ST_TSNAP] =
        {"TaskSnapshotFilesystem",
         &modal__task_command_router__task_snapshot_filesystem_response__descriptor,
         modal_stop_send_task_snapshot, modal_stop_on_tsnap},
    [ST_SNAPFS] = {"SandboxSnapshotFs",
                   &modal__client__sandbox_snapshot_fs_response__descriptor,
                   modal_stop_send_snapshot_fs, modal_stop_on_snapshot},
};

_Static_assert(sizeof(modal_life_steps) / sizeof(modal_life_steps[0]) == ST_COUNT,
               "one job step per enum mstep");

/* ---- sandbox ops ------------------------------------------------------------ */

static const char *opt_string(json_t *opts, const char *key)
{
    return json_string_value(json_object_get(opts, key));
}

/* The options a Modal sandbox takes; anything else is -32602, as on Docker. */
static const char *const option_keys[] = {"app_name", "environment", "image",
                                          "cpu",      "memory_mb",   "memory",
                                          "ports",    "egress",      NULL};

static int check_options(json_t *opts, sbx_err_t *err)
{
    if (opts && !json_is_object(opts) && !json_is_null(opts))
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options"),
                             "options must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(opts, k, v) {
        int known = 0;
        for (size_t i = 0; option_keys[i]; i++)
            known |= strcmp(option_keys[i], k) == 0;
        if (!known) {
            char param[300];
            snprintf(param, sizeof(param), "options.%s", k);
            return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", param),
                                 "%s: not a Modal option (known: app_name, environment, "
                                 "image, cpu, memory_mb, memory, ports, egress)",
                                 param);
        }
    }
    return 0;
}

struct msb *modal_life_msb_new(struct mprov *mp, struct sandbox *sb, sbx_err_t *err)
{
    json_t *opts = json_object_get(sb->conf, "options");
    if (check_options(opts, err) < 0)
        return NULL;
    double cpu = mp->cpu;
    json_t *v = json_object_get(opts, "cpu");
    if (v && !json_is_null(v) &&
        (modal_opt_number(v, &cpu) < 0 || cpu < 0 || cpu > 1024)) {
        err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.cpu"),
                      "options.cpu must be a number of cores");
        return NULL;
    }
    double mem = (double)mp->memory_mb;
    json_int_t ml = json_integer_value(json_object_get(sb->conf, "memory_limit_mb"));
    if (ml > 0)
        mem = (double)ml;
    const char *mkeys[] = {"memory_mb", "memory"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(opts, mkeys[i]);
        if (v && !json_is_null(v) &&
            (modal_opt_number(v, &mem) < 0 || mem < 0 || mem > 4194304)) {
            err_make_data(err, SBX_E_PARAMS,
                          json_pack("{s:s}", "param", "options.memory_mb"),
                          "options.%s must be a number of MiB", mkeys[i]);
            return NULL;
        }
    }
    const char *keys[] = {"app_name", "environment", "image"};
    for (int i = 0; i < 3; i++) {
        v = json_object_get(opts, keys[i]);
        if (v && !json_is_null(v) && (!json_is_string(v) || !json_string_length(v))) {
            char p[64];
            snprintf(p, sizeof(p), "options.%s", keys[i]);
            err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", p),
                          "%s must be a non-empty string", p);
            return NULL;
        }
    }
    struct mws *ws;
    if (modal_ws_new(mp, opts, &ws, err) < 0)
        return NULL;
    struct msb *ms = xcalloc(1, sizeof(*ms));
    ms->sb = sb;
    ms->mp = mp;
    ms->ws = ws;
    ms->app_name = xstrdup(opt_string(opts, "app_name") ? opt_string(opts, "app_name")
                                                        : mp->app_name);
    const char *env = opt_string(opts, "environment") ? opt_string(opts, "environment")
                                                      : mp->environment;
    ms->env_name = env ? xstrdup(env) : NULL;
    const char *img = json_string_value(json_object_get(sb->conf, "image"));
    if (!img)
        img = opt_string(opts, "image");
    ms->image_tag = xstrdup(img ? img : mp->image);
    const char *wd = json_string_value(json_object_get(sb->conf, "working_dir"));
    modal_set_str(&ms->workdir, wd ? wd : mp->working_dir);
    ms->cpu = cpu;
    ms->memory_mb = (int64_t)mem;
    modal_job_init(ms);
    modal_router_init(ms);
    ms->v2 = mp->backend_v2; /* until a sandbox id says otherwise */
    ms->all_next = mp->all;
    if (mp->all)
        mp->all->all_prev = ms;
    mp->all = ms;
    sb->pdata = ms;
    return ms;
}

int modal_life_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct mprov *mp = cookie;
    if (!mp->ready)
        return err_make_data(
            err, SBX_E_UNAVAILABLE,
            json_pack("{s:s, s:s}", "provider", "modal", "reason", mp->reason),
            "provider modal is unavailable: %s", mp->reason);
    struct msb *ms = sb->pdata;
    if (!ms && !(ms = modal_life_msb_new(mp, sb, err)))
        return -1;
    if (ms->job != J_NONE)
        return err_make(err, SBX_E_STATE,
                        "sandbox %s is busy with another Modal operation", sb->id);
    ms->job = J_START;
    ms->step = ST_APP;
    ms->polls = 0;
    modal_job_next(ms);
    return 0;
}

static int lifecycle(struct sandbox *sb, enum mjob op, sbx_err_t *err)
{
    struct msb *ms = sb->pdata;
    if (!ms) {
        if (op == J_SNAPSHOT)
            return modal_plain_err(err, "snapshot: this sandbox never started");
        sandbox_op_done(sb, NULL, NULL);
        return 0;
    }
    if (ms->job == J_RESTART) {
        ms->pending_op = op;
        return 0;
    }
    if (ms->job != J_NONE)
        return err_make(err, SBX_E_STATE,
                        "sandbox %s is busy with another Modal operation", sb->id);
    modal_job_run(ms, op);
    return 0;
}

int modal_life_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_STOP, err);
}

int modal_life_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_DESTROY, err);
}

int modal_life_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_SNAPSHOT, err);
}

json_t *modal_life_metadata(void *cookie, struct sandbox *sb)
{
    struct mprov *mp = cookie;
    struct msb *ms = sb->pdata;
    if (!ms)
        return json_pack("{s:s}", "server_url", mp->url ? mp->url : "");
    json_t *o = json_object();
    json_object_set_new(o, "server_url", json_string(nz(mp->url)));
    json_object_set_new(o, "app", json_string(ms->app_name));
    if (ms->app_id)
        json_object_set_new(o, "app_id", json_string(ms->app_id));
    json_object_set_new(o, "environment",
                        ms->env_name ? json_string(ms->env_name) : json_null());
    json_object_set_new(o, "image", json_string(ms->image_tag));
    if (ms->image_id)
        json_object_set_new(o, "image_id", json_string(ms->image_id));
    if (ms->resume_image)
        json_object_set_new(o, "saved_image_id", json_string(ms->resume_image));
    json_object_set_new(o, "sandbox_id",
                        ms->sandbox_id ? json_string(ms->sandbox_id) : json_null());
    if (ms->task_id)
        json_object_set_new(o, "task_id", json_string(ms->task_id));
    json_object_set_new(o, "timeout_secs", json_integer(ms->timeout_secs));
    if (ms->idle_secs)
        json_object_set_new(o, "idle_timeout_secs", json_integer(ms->idle_secs));
    if (ms->workdir)
        json_object_set_new(o, "workdir", json_string(ms->workdir));
    json_object_set_new(o, "cpu", json_real(ms->cpu));
    json_object_set_new(o, "memory_mb", json_integer(ms->memory_mb));
    json_object_set_new(o, "reconnected", json_boolean(ms->reconnected));
    json_object_set_new(o, "restarts", json_integer(ms->restarts));
    json_object_set_new(o, "retried", json_boolean(ms->last_retried));
    if (ms->dead)
        json_object_set_new(o, "dead", json_string(nz(ms->dead_reason)));
    modal_router_metadata(ms, o);
    modal_ws_metadata(ms, o);
    return o;
}

void modal_life_release(void *cookie, struct sandbox *sb)
{
    struct msb *ms = sb->pdata;
    if (!ms)
        return;
    /* The Modal sandbox stays: a restarted sbxd adopts it from the state file
     * (or by name). A pending write goes out while every sandbox is still here. */
    modal_state_flush(ms->mp);
    if (!ms->destroyed)
        modal_state_dirty(ms->mp);
    if (ms->all_prev)
        ms->all_prev->all_next = ms->all_next;
    else
        ms->mp->all = ms->all_next;
    if (ms->all_next)
        ms->all_next->all_prev = ms->all_prev;
    grpc_call_cancel(ms->call);
    grpc_call_cancel(ms->check_call);
    modal_job_watch_stop(ms);
    ev_timer_stop(D->loop, &ms->timer);
    ev_timer_stop(D->loop, &ms->lost_timer);
    modal_fs_release_all(ms, "the sandbox is released");
    modal_ws_free(ms);
    modal_router_reset(ms);
    for (struct mproc *m = ms->procs; m; m = m->next) {
        m->rt_waiting = 0;
        m->rt_next = NULL;
        m->ms = NULL;
    }
    free(ms->app_name);
    free(ms->env_name);
    free(ms->app_id);
    free(ms->image_tag);
    free(ms->image_id);
    free(ms->resume_image);
    free(ms->sandbox_id);
    free(ms->task_id);
    free(ms->workdir);
    free(ms->secret_id);
    free(ms->dead_reason);
    free(ms->join_entry);
    free(ms->join_exception);
    json_decref(ms->baked_env);
    json_decref(ms->warnings);
    free(ms);
    sb->pdata = NULL;
}
