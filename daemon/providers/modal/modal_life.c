/*
 * modal_life.c - sandbox lifecycle jobs of the Modal provider. A V2 sandbox
 * takes the *V2 twin of each call (modal_rpc); the snapshot steps run on the
 * task's command router (TaskSnapshotFilesystem) when it has one.
 *
 * A job runs one at a time per sandbox, as a walk through the step table
 * (job_steps[]): each step names its RPC, builds and sends the request, and
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
 * finds the sandbox ended, the job ends at once (modal_mark_dead): snapshot
 * fails with a provider error, stop and destroy are done (nothing is left to
 * save or end). A transient outage is not a loss: only an answer from Modal
 * that the sandbox ended (or is unknown) counts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "modal_int.h"
#include "modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define BUILDER_VERSION "2024.10"
#define TASK_POLL_S 0.5
/* npm modal 0.11.1 waits 21 minutes for scheduling, then terminates the sandbox. */
#define SCHEDULING_WINDOW_S (21 * 60)
#define TASK_MAX_POLLS ((int)(SCHEDULING_WINDOW_S / TASK_POLL_S))
#define MAX_STREAM_FAILS 10 /* image build log stream */
#define MAX_LIFETIME_S 86400
#define WATCH_POLL_S 10.0 /* SandboxWait long poll while a job runs (the SDK's wait) */
#define WATCH_RETRY_S 1.0

static void job_next(struct msb *ms);
static void job_ready(struct msb *ms);
static void run_lifecycle(struct msb *ms, enum mjob op);
static void watch_stop(struct msb *ms);

static void progress(struct msb *ms, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void progress(struct msb *ms, const char *stage, const char *fmt, ...)
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

static void forget_sandbox(struct msb *ms)
{
    free(ms->sandbox_id);
    ms->sandbox_id = NULL;
    free(ms->task_id);
    ms->task_id = NULL;
}

/* ---- ending a job ------------------------------------------------------------ */

/* Ends the current job. err (may be NULL) is cleared; result stolen. May free ms
 * (a failed first start removes the sandbox): nothing may touch ms afterwards. */
static void job_end(struct msb *ms, sbx_err_t *err, json_t *result)
{
    enum mjob job = ms->job;
    ms->job = J_NONE;
    grpc_call_cancel(ms->call);
    ms->call = NULL;
    ev_timer_stop(D->loop, &ms->timer);
    watch_stop(ms);
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
        modal_waiters_resume(ms, failed ? err->msg : NULL);
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
            run_lifecycle(ms, op);
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
        modal_start_restart(ms);
    if (!failed && job == J_START && modal_ws_start_done(ms, result))
        return; /* it ends the op once the tunnels are known */
    sandbox_op_done(ms->sb, failed ? err : NULL, result);
    err_clear(err);
}

static void job_fail_st(struct msb *ms, const struct grpc_status *st, const char *what)
{
    sbx_err_t err = {0};
    modal_grpc_err(ms->mp, &err, st, what);
    log_warn("modal: sandbox %s: %s", ms->sb->id, err.msg);
    job_end(ms, &err, NULL);
}

static void job_fail_msg(struct msb *ms, const char *msg)
{
    sbx_err_t err = {0};
    modal_plain_err(&err, msg);
    log_warn("modal: sandbox %s: %s", ms->sb->id, msg);
    job_end(ms, &err, NULL);
}

static void task_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if (ms->job != J_NONE)
        job_next(ms);
}

static uint32_t lifetime_secs(struct msb *ms)
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

/* ---- tags: owner, and what the sandbox was made with ------------------------------ */

#define TAG_IMAGE "sbxd_image"
#define TAG_WORKDIR "sbxd_workdir"
#define TAG_CPU "sbxd_cpu"
#define TAG_MEMORY "sbxd_memory_mb"
#define TAG_ENV "sbxd_env_hash"
#define TAG_EXPIRES "sbxd_expires_at"

/* FNV-1a of the env as compact sorted JSON: tags show no env values. */
static void env_hash(json_t *env, char *out, size_t n)
{
    char *js = json_dumps(env ? env : json_object(), JSON_COMPACT | JSON_SORT_KEYS);
    uint64_t h = 1469598103934665603ull;
    for (const char *c = js ? js : ""; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    free(js);
    snprintf(out, n, "%016llx", (unsigned long long)h);
}

static json_t *sandbox_tags(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    char buf[64];
    json_t *t = json_object();
    snprintf(buf, sizeof(buf), "%u", (unsigned)sb->owner);
    json_object_set_new(t, TAG_OWNER, json_string(buf));
    json_object_set_new(t, TAG_ID, json_string(sb->id));
    json_object_set_new(t, TAG_IMAGE, json_string(nz(ms->image_tag)));
    json_object_set_new(t, TAG_WORKDIR, json_string(nz(ms->workdir)));
    snprintf(buf, sizeof(buf), "%g", ms->cpu);
    json_object_set_new(t, TAG_CPU, json_string(buf));
    snprintf(buf, sizeof(buf), "%lld", (long long)ms->memory_mb);
    json_object_set_new(t, TAG_MEMORY, json_string(buf));
    env_hash(ms->baked_env, buf, sizeof(buf));
    json_object_set_new(t, TAG_ENV, json_string(buf));
    /* During the first start the core has not set expires_at yet. */
    double exp = sb->expires_at > 0 ? sb->expires_at : daemon_now() + lifetime_secs(ms);
    snprintf(buf, sizeof(buf), "%.3f", exp);
    json_object_set_new(t, TAG_EXPIRES, json_string(buf));
    return t;
}

static void tag_warning(struct msb *ms, const char *what, const char *want,
                        const char *have)
{
    char *msg =
        xasprintf("%s: requested %s, the existing Modal sandbox has %s (not applied)",
                  what, want, have);
    if (!ms->warnings)
        ms->warnings = json_array();
    json_array_append_new(ms->warnings, json_string(msg));
    free(msg);
}

/* A running Modal sandbox found by name (tags: name -> value, borrowed):
 * what the request asks that it does not have becomes a warning; its
 * lifetime goes on from the tagged deadline. */
static void compare_tags(struct msb *ms, json_t *have)
{
    json_t *want = sandbox_tags(ms);
    static const struct {
        const char *tag, *what;
    } keys[] = {{TAG_IMAGE, "image"},
                {TAG_WORKDIR, "working_dir"},
                {TAG_CPU, "options.cpu"},
                {TAG_MEMORY, "options.memory_mb"}};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *h = json_string_value(json_object_get(have, keys[i].tag));
        const char *w = json_string_value(json_object_get(want, keys[i].tag));
        if (h && w && strcmp(h, w) != 0)
            tag_warning(ms, keys[i].what, w[0] ? w : "(none)", h[0] ? h : "(none)");
    }
    const char *he = json_string_value(json_object_get(have, TAG_ENV));
    const char *we = json_string_value(json_object_get(want, TAG_ENV));
    if (he && we && strcmp(he, we) != 0) {
        /* Its secret holds another env: every command gets the requested one
         * explicitly (keys only the old env has stay set). */
        json_decref(ms->baked_env);
        ms->baked_env = json_object();
        if (!ms->warnings)
            ms->warnings = json_array();
        json_array_append_new(
            ms->warnings,
            json_string("env: the existing Modal sandbox was created with another env; "
                        "the requested env is applied to each command, but variables "
                        "only the old env has stay set"));
    }
    double exp = atof(nz(json_string_value(json_object_get(have, TAG_EXPIRES))));
    double wexp = atof(nz(json_string_value(json_object_get(want, TAG_EXPIRES))));
    struct sandbox *sb = ms->sb;
    if (exp > 0 && fabs(exp - wexp) > 2.0) {
        char w[64], h[64];
        snprintf(w, sizeof(w), "%.0f s from now", wexp - daemon_now());
        snprintf(h, sizeof(h), "%.0f s left", exp - daemon_now());
        tag_warning(ms, "timeout_ms", w, h);
        /* Modal ends it at its own deadline: sbxd's follows it. */
        ev_timer_stop(D->loop, &sb->life_timer);
        sb->expires_at = exp;
        double left = exp - daemon_now();
        ev_timer_set(&sb->life_timer, left > 0.001 ? left : 0.001, 0.);
        ev_timer_start(D->loop, &sb->life_timer);
    }
    json_decref(want);
}

/* ---- the step table ------------------------------------------------------------ */

static void job_rpc_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata);

/* What a step's send function did. */
enum { STEP_ON = 0, STEP_WAIT = 1 };

struct job_step {
    const char *method; /* the RPC of the step; NULL: it decides without one */
    const ProtobufCMessageDescriptor *reply; /* decoded for on_reply; NULL: not read */
    /* Builds and sends the request: STEP_WAIT (a call runs, or the job ended),
     * or STEP_ON after moving ms->step on without a call. */
    int (*send)(struct msb *ms);
    /* The reply: r is the decoded message (NULL if the call failed or it does
     * not decode), freed after this returns. May end the job and free ms. */
    void (*on_reply)(struct msb *ms, const struct grpc_status *st, void *r);
};

static const struct job_step job_steps[];

static int job_call(struct msb *ms, const ProtobufCMessage *req, double timeout)
{
    ms->call = grpc_unary(&ms->mp->ch, modal_rpc(ms, job_steps[ms->step].method), req,
                          timeout, job_rpc_done, ms);
    return STEP_WAIT;
}

static int go(struct msb *ms, enum mstep step)
{
    ms->step = step;
    return STEP_ON;
}

static void job_rpc_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->call = NULL;
    const struct job_step *s = &job_steps[ms->step];
    void *r = modal_reply(s->reply, st, msg, len);
    s->on_reply(ms, st, r);
    modal_reply_free(r);
}

/* Runs steps until one waits for a call (or the job ends). Steps without a
 * call only move forward, so a job takes fewer turns than the table has
 * steps twice over. */
static void job_next(struct msb *ms)
{
    for (int turns = 0; turns < 2 * ST_COUNT; turns++)
        if (job_steps[ms->step].send(ms) == STEP_WAIT)
            return;
    job_fail_msg(ms, "internal error: a Modal job went round in circles");
}

/* ---- APP: the Modal app, cached by environment/name ---------------------------- */

static void app_key(struct msb *ms, char *key, size_t n)
{
    snprintf(key, n, "%s/%s", nz(ms->env_name), ms->app_name);
}

static int send_app(struct msb *ms)
{
    char key[512];
    app_key(ms, key, sizeof(key));
    const char *id = json_string_value(json_object_get(ms->mp->apps, key));
    if (id) {
        modal_set_str(&ms->app_id, id);
        return go(ms, ST_LOOKUP);
    }
    Modal__Client__AppGetOrCreateRequest req =
        MODAL__CLIENT__APP_GET_OR_CREATE_REQUEST__INIT;
    req.app_name = ms->app_name;
    req.environment_name = (char *)nz(ms->env_name);
    req.object_creation_type =
        MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_CREATE_IF_MISSING;
    progress(ms, "app", "Looking up Modal app %s", ms->app_name);
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void on_app(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__AppGetOrCreateResponse *r = reply;
    if (!r || !r->app_id[0]) {
        job_fail_st(ms, st, "looking up the Modal app");
        return;
    }
    char key[512];
    app_key(ms, key, sizeof(key));
    json_object_set_new(ms->mp->apps, key, json_string(r->app_id));
    modal_set_str(&ms->app_id, r->app_id);
    ms->step = ST_LOOKUP;
    job_next(ms);
}

/* ---- LOOKUP: a running sandbox of ours from before, or one named like ours ------- */

static int send_lookup(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    if (ms->job == J_START && ms->sandbox_id && !ms->dead) {
        /* Started again after an error: is the old one still there? */
        ms->adopting = 1;
        ms->polls = 0;
        return go(ms, ST_TASK);
    }
    if (ms->job != J_START || ms->lookup_done || ms->resume_image || sb->snapshot)
        return go(ms, ST_IMAGE);
    ms->lookup_done = 1;
    Modal__Client__SandboxGetFromNameRequest req =
        MODAL__CLIENT__SANDBOX_GET_FROM_NAME_REQUEST__INIT;
    req.sandbox_name = sb->id;
    req.app_name = ms->app_name;
    req.environment_name = (char *)nz(ms->env_name);
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void on_lookup(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxGetFromNameResponse *r = reply;
    if (st->code == GRPC_NOT_FOUND) {
        ms->step = ST_IMAGE;
        job_next(ms);
        return;
    }
    if (!r || !r->sandbox_id[0]) {
        job_fail_st(ms, st, "looking up the sandbox by name");
        return;
    }
    modal_set_str(&ms->sandbox_id, r->sandbox_id);
    ms->v2 = !modal_v1_id(ms->sandbox_id);
    ms->reconnected = 1;
    ms->adopting = 1;
    ms->polls = 0;
    ms->step = ST_TASK;
    progress(ms, "sandbox", "Found running Modal sandbox %s named %s", ms->sandbox_id,
             ms->sb->id);
    job_next(ms);
}

/* ---- IMAGE: the saved image, a snapshot's, a cached one, or a build ---------------- */

static int decide_image(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    ms->adopting = 0;
    if (ms->resume_image) {
        modal_set_str(&ms->image_id, ms->resume_image);
        return go(ms, ST_SECRET);
    }
    if (sb->snapshot) {
        const char *im = json_string_value(json_object_get(sb->snapshot, "image_id"));
        if (!im) {
            job_fail_msg(ms, "the snapshot holds no Modal image id");
            return STEP_WAIT;
        }
        modal_set_str(&ms->image_id, im);
        return go(ms, ST_SNAP_IMAGE);
    }
    const char *id = json_string_value(json_object_get(ms->mp->images, ms->image_tag));
    if (id) {
        modal_set_str(&ms->image_id, id);
        return go(ms, ST_SECRET);
    }
    return go(ms, ST_BUILDER);
}

static int send_snap_image(struct msb *ms)
{
    Modal__Client__ImageFromIdRequest req = MODAL__CLIENT__IMAGE_FROM_ID_REQUEST__INIT;
    req.image_id = ms->image_id;
    progress(ms, "image", "Using snapshot image %s", ms->image_id);
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void on_snap_image(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (st->code != GRPC_OK) {
        job_fail_st(ms, st, "finding the snapshot image");
        return;
    }
    ms->step = ST_SECRET;
    job_next(ms);
}

/* BUILDER: the image builder version, from the config, else the workspace's
 * (what today's SDKs do), asked once per environment. */
static const char *builder_of(struct msb *ms)
{
    if (ms->mp->builder_version)
        return ms->mp->builder_version;
    const char *v =
        json_string_value(json_object_get(ms->mp->builders, nz(ms->env_name)));
    return v ? v : BUILDER_VERSION;
}

static int send_builder(struct msb *ms)
{
    if (ms->mp->builder_version || json_object_get(ms->mp->builders, nz(ms->env_name)))
        return go(ms, ST_IMAGE_BUILD);
    Modal__Client__EnvironmentGetOrCreateRequest req =
        MODAL__CLIENT__ENVIRONMENT_GET_OR_CREATE_REQUEST__INIT;
    req.deployment_name = (char *)nz(ms->env_name);
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void on_builder(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__EnvironmentGetOrCreateResponse *r = reply;
    const char *v = r && r->metadata && r->metadata->settings
                        ? r->metadata->settings->image_builder_version
                        : NULL;
    if (v && v[0]) {
        json_object_set_new(ms->mp->builders, nz(ms->env_name), json_string(v));
    } else {
        log_warn("modal: the workspace's image builder version is unknown (%s: %s); "
                 "using %s",
                 grpc_code_name(st->code), st->message, BUILDER_VERSION);
        json_object_set_new(ms->mp->builders, nz(ms->env_name),
                            json_string(BUILDER_VERSION));
    }
    ms->step = ST_IMAGE_BUILD;
    job_next(ms);
}

static int send_image_build(struct msb *ms)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "FROM %s", ms->image_tag);
    char *cmds[1] = {cmd};
    Modal__Client__Image img = MODAL__CLIENT__IMAGE__INIT;
    img.dockerfile_commands = cmds;
    img.n_dockerfile_commands = 1;
    Modal__Client__ImageGetOrCreateRequest req =
        MODAL__CLIENT__IMAGE_GET_OR_CREATE_REQUEST__INIT;
    req.image = &img;
    req.app_id = ms->app_id;
    req.builder_version = (char *)builder_of(ms);
    progress(ms, "image", "Building image %s", ms->image_tag);
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void image_ready(struct msb *ms)
{
    json_object_set_new(ms->mp->images, ms->image_tag, json_string(ms->image_id));
    ms->step = ST_SECRET;
}

static void on_image_build(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__ImageGetOrCreateResponse *r = reply;
    if (!r || !r->image_id[0]) {
        job_fail_st(ms, st, "building the image");
        return;
    }
    modal_set_str(&ms->image_id, r->image_id);
    int status = r->result ? (int)r->result->status : 0;
    if (status == 1) {
        image_ready(ms);
    } else if (status != 0) {
        char buf[700];
        snprintf(buf, sizeof(buf), "building image %s failed: %s", ms->image_tag,
                 modal_result_text(r->result));
        job_fail_msg(ms, buf);
        return;
    } else {
        /* Still building: follow its log until a result. */
        free(ms->join_entry);
        ms->join_entry = NULL;
        free(ms->join_exception);
        ms->join_exception = NULL;
        ms->join_result = 0;
        ms->join_fails = 0;
        ms->step = ST_IMAGE_JOIN;
    }
    job_next(ms);
}

static void join_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    Modal__Client__ImageJoinStreamingResponse *r =
        modal__client__image_join_streaming_response__unpack(NULL, len, msg);
    if (!r)
        return;
    for (size_t i = 0; i < r->n_task_logs; i++)
        progress(ms, "image", "%s", nz(r->task_logs[i]->data));
    if (r->entry_id && r->entry_id[0])
        modal_set_str(&ms->join_entry, r->entry_id);
    if (r->result && r->result->status != 0 && !ms->join_result) {
        ms->join_result = (int)r->result->status;
        modal_set_str(&ms->join_exception, r->result->exception);
    }
    ms->join_fails = 0;
    modal_reply_free(r);
}

static void join_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->call = NULL;
    if (ms->join_result == 1) {
        image_ready(ms);
        progress(ms, "image", "Image %s is ready (%s)", ms->image_tag, ms->image_id);
        job_next(ms);
        return;
    }
    if (ms->join_result) {
        char buf[600];
        snprintf(buf, sizeof(buf), "building image %s failed: %s", ms->image_tag,
                 ms->join_exception ? ms->join_exception : "unknown error");
        job_fail_msg(ms, buf);
        return;
    }
    if (st->code != GRPC_OK && !grpc_code_retryable(st->code)) {
        job_fail_st(ms, st, "building the image");
        return;
    }
    if (st->code != GRPC_OK && ++ms->join_fails > MAX_STREAM_FAILS) {
        job_fail_st(ms, st, "building the image");
        return;
    }
    job_next(ms); /* the long poll ended: join again from the last entry */
}

/* A stream: join_msg and join_done read it, not job_rpc_done. */
static int send_image_join(struct msb *ms)
{
    Modal__Client__ImageJoinStreamingRequest req =
        MODAL__CLIENT__IMAGE_JOIN_STREAMING_REQUEST__INIT;
    req.image_id = ms->image_id;
    req.timeout = (float)POLL_S;
    req.last_entry_id = (char *)nz(ms->join_entry);
    ms->call = grpc_stream(&ms->mp->ch, job_steps[ST_IMAGE_JOIN].method, &req.base,
                           POLL_S + POLL_SLACK_S, join_msg, join_done, ms);
    return STEP_WAIT;
}

/* ---- SECRET: the env as an ephemeral secret ---------------------------------------- */

static int send_secret(struct msb *ms)
{
    json_t *env = sandbox_env_for(ms->sb, NULL);
    json_decref(ms->baked_env);
    ms->baked_env = env;
    free(ms->secret_id);
    ms->secret_id = NULL;
    size_t n = json_object_size(env), i = 0;
    if (n == 0)
        return go(ms, ST_CREATE);
    Modal__Client__SecretGetOrCreateRequest__EnvDictEntry *ents =
        xcalloc(n, sizeof(*ents));
    Modal__Client__SecretGetOrCreateRequest__EnvDictEntry **ptrs =
        xcalloc(n, sizeof(*ptrs));
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v) {
        Modal__Client__SecretGetOrCreateRequest__EnvDictEntry e =
            MODAL__CLIENT__SECRET_GET_OR_CREATE_REQUEST__ENV_DICT_ENTRY__INIT;
        ents[i] = e;
        ents[i].key = (char *)k;
        ents[i].value = (char *)json_string_value(v);
        ptrs[i] = &ents[i];
        i++;
    }
    Modal__Client__SecretGetOrCreateRequest req =
        MODAL__CLIENT__SECRET_GET_OR_CREATE_REQUEST__INIT;
    req.environment_name = (char *)nz(ms->env_name);
    req.object_creation_type =
        MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_EPHEMERAL;
    req.env_dict = ptrs;
    req.n_env_dict = n;
    int ret = job_call(ms, &req.base, UNARY_TIMEOUT_S);
    free(ents);
    free(ptrs);
    return ret;
}

static void on_secret(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SecretGetOrCreateResponse *r = reply;
    if (!r || !r->secret_id[0]) {
        job_fail_st(ms, st, "storing the sandbox env");
        return;
    }
    modal_set_str(&ms->secret_id, r->secret_id);
    ms->step = ST_CREATE;
    job_next(ms);
}

static int send_create(struct msb *ms)
{
    Modal__Client__GPUConfig gpu = MODAL__CLIENT__GPUCONFIG__INIT;
    Modal__Client__Resources res = MODAL__CLIENT__RESOURCES__INIT;
    res.gpu_config = &gpu;
    res.milli_cpu = (uint32_t)(ms->cpu * 1000.0 + 0.5);
    res.memory_mb = (uint32_t)ms->memory_mb;
    /* What sbxd sets is a ceiling too, as memoryLimitMiB/cpuLimit in the SDKs. */
    res.milli_cpu_max = res.milli_cpu;
    res.memory_mb_max = res.memory_mb;
    Modal__Client__PortSpecs ports = MODAL__CLIENT__PORT_SPECS__INIT;
    Modal__Client__NetworkAccess net = MODAL__CLIENT__NETWORK_ACCESS__INIT;
    net.network_access_type = MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__OPEN;
    Modal__Client__Sandbox def = MODAL__CLIENT__SANDBOX__INIT;
    char a0[] = "sleep", a1[] = "48h";
    char *ep[] = {a0, a1};
    def.entrypoint_args = ep;
    def.n_entrypoint_args = 2;
    def.image_id = ms->image_id;
    char *secrets[1] = {ms->secret_id};
    if (ms->secret_id) {
        def.secret_ids = secrets;
        def.n_secret_ids = 1;
    }
    def.resources = &res;
    ms->timeout_secs = lifetime_secs(ms);
    def.timeout_secs = ms->timeout_secs;
    if (ms->workdir) {
        def._workdir_case = MODAL__CLIENT__SANDBOX___WORKDIR_WORKDIR;
        def.workdir = ms->workdir;
    }
    def.open_ports_oneof_case = MODAL__CLIENT__SANDBOX__OPEN_PORTS_ONEOF_OPEN_PORTS;
    def.open_ports = &ports;
    def.network_access = &net;
    modal_ws_create(ms, &def); /* options.ports and options.egress */
    def._name_case = MODAL__CLIENT__SANDBOX___NAME_NAME;
    def.name = ms->sb->id;
    int64_t idle = json_integer_value(json_object_get(ms->sb->conf, "idle_timeout_ms"));
    ms->idle_secs = idle > 0 ? (uint32_t)((idle + 999) / 1000) : 0;
    if (ms->idle_secs) {
        def._idle_timeout_secs_case =
            MODAL__CLIENT__SANDBOX___IDLE_TIMEOUT_SECS_IDLE_TIMEOUT_SECS;
        def.idle_timeout_secs = ms->idle_secs;
    }
    Modal__Client__SandboxCreateRequest req = MODAL__CLIENT__SANDBOX_CREATE_REQUEST__INIT;
    req.app_id = ms->app_id;
    req.definition = &def;
    /* The owner tags go in with the create: no moment without them. */
    json_t *tv = sandbox_tags(ms);
    size_t nt = json_object_size(tv), i = 0;
    Modal__Client__SandboxTag *tv_s = xcalloc(nt ? nt : 1, sizeof(*tv_s));
    Modal__Client__SandboxTag **tags = xcalloc(nt ? nt : 1, sizeof(*tags));
    const char *k;
    json_t *v;
    json_object_foreach(tv, k, v) {
        Modal__Client__SandboxTag t = MODAL__CLIENT__SANDBOX_TAG__INIT;
        tv_s[i] = t;
        tv_s[i].tag_name = (char *)k;
        tv_s[i].tag_value = (char *)json_string_value(v);
        tags[i] = &tv_s[i];
        i++;
    }
    req.tags = tags;
    req.n_tags = nt;
    progress(ms, "sandbox", "Creating Modal sandbox (image %s)", ms->image_id);
    int ret = job_call(ms, &req.base, UNARY_TIMEOUT_S);
    free(tags);
    free(tv_s);
    json_decref(tv);
    return ret;
}

/* ---- TASK: wait for the sandbox's task (polled), or find it ended ------------------ */

static int send_task(struct msb *ms)
{
    Modal__Client__SandboxGetTaskIdRequest req =
        MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void on_create(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxCreateResponse *r = reply;
    if (!r || !r->sandbox_id[0]) {
        job_fail_st(ms, st, "creating the sandbox");
        return;
    }
    modal_set_str(&ms->sandbox_id, r->sandbox_id);
    ms->v2 = !modal_v1_id(ms->sandbox_id);
    ms->polls = 0;
    ms->adopting = 0;
    ms->step = ST_TASK;
    job_next(ms);
}

static void on_task(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxGetTaskIdResponse *r = reply;
    int ended = modal_task_ended(st, r);
    if (st->code != GRPC_OK && !ended) {
        job_fail_st(ms, st, "waiting for the sandbox");
        return;
    }
    if (ended) {
        char why[512];
        snprintf(why, sizeof(why), "%s",
                 r ? modal_result_text(r->task_result) : st->message);
        if (ms->adopting) {
            /* The sandbox of that name (or ours from before) is gone: make a new one. */
            log_info(
                "modal: sandbox %s: Modal sandbox %s has ended (%s); creating a new one",
                ms->sb->id, ms->sandbox_id, why);
            forget_sandbox(ms);
            ms->reconnected = 0;
            ms->adopting = 0;
            ms->step = ST_IMAGE;
            job_next(ms);
            return;
        }
        char buf[600];
        snprintf(buf, sizeof(buf), "the Modal sandbox %s ended before it was ready: %s",
                 nz(ms->sandbox_id), why);
        forget_sandbox(ms);
        job_fail_msg(ms, buf);
        return;
    }
    if (!r) {
        job_fail_msg(ms, "SandboxGetTaskId: undecodable response");
        return;
    }
    if (r->_task_id_case !=
            MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID ||
        !r->task_id || !r->task_id[0]) {
        if (++ms->polls > TASK_MAX_POLLS) {
            /* As the SDK: a sandbox that was never scheduled is terminated, so
             * that it cannot start later with nobody to use it. */
            char buf[300];
            snprintf(buf, sizeof(buf),
                     "the Modal sandbox %s was not scheduled within %d minutes "
                     "(insufficient capacity); it was terminated",
                     nz(ms->sandbox_id), SCHEDULING_WINDOW_S / 60);
            modal_sandbox_terminate(ms->mp, ms->sandbox_id);
            forget_sandbox(ms);
            job_fail_msg(ms, buf);
            return;
        }
        ev_timer_set(&ms->timer, TASK_POLL_S, 0.);
        ev_timer_start(D->loop, &ms->timer);
        return;
    }
    modal_set_str(&ms->task_id, r->task_id);
    int adopted = ms->adopting;
    ms->adopting = 0;
    if (adopted && !ms->baked_env)
        ms->baked_env = sandbox_env_for(ms->sb, NULL);
    if (adopted && !ms->reconnected) {
        job_ready(ms); /* our own from before an error: already tagged */
        return;
    }
    /* A sandbox found by name must be this uid's; new ones get their owner tagged. */
    ms->step = adopted ? ST_TAGS_CHECK : ST_TAGS_SET;
    job_next(ms);
}

static void job_ready(struct msb *ms)
{
    progress(ms, "sandbox", "%s Modal sandbox %s",
             ms->reconnected ? "Reconnected to" : "Running in", ms->sandbox_id);
    log_info("modal: sandbox %s is Modal sandbox %s (task %s)%s", ms->sb->id,
             ms->sandbox_id, ms->task_id, ms->reconnected ? ", reconnected" : "");
    job_end(ms, NULL, NULL);
}

/* ---- TAGS_SET / TAGS_CHECK: who owns it, and what it was made with ----------------- */

static int send_tags_set(struct msb *ms)
{
    /* A restarted sbxd that finds it by name (without its state file)
     * compares and warns. */
    json_t *tv = sandbox_tags(ms);
    size_t nt = json_object_size(tv), i = 0;
    Modal__Client__SandboxTag *tv_s = xcalloc(nt, sizeof(*tv_s));
    Modal__Client__SandboxTag **tags = xcalloc(nt, sizeof(*tags));
    const char *k;
    json_t *v;
    json_object_foreach(tv, k, v) {
        Modal__Client__SandboxTag t = MODAL__CLIENT__SANDBOX_TAG__INIT;
        tv_s[i] = t;
        tv_s[i].tag_name = (char *)k;
        tv_s[i].tag_value = (char *)json_string_value(v);
        tags[i] = &tv_s[i];
        i++;
    }
    Modal__Client__SandboxTagsSetRequest req =
        MODAL__CLIENT__SANDBOX_TAGS_SET_REQUEST__INIT;
    req.environment_name = (char *)nz(ms->env_name);
    req.sandbox_id = ms->sandbox_id;
    req.tags = tags;
    req.n_tags = nt;
    int ret = job_call(ms, &req.base, UNARY_TIMEOUT_S);
    free(tags);
    free(tv_s);
    json_decref(tv);
    return ret;
}

static void on_tags_set(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (st->code != GRPC_OK)
        log_warn("modal: sandbox %s: tagging the owner failed (%s: %s); a restarted "
                 "sbxd will not be able to check who owns it",
                 ms->sb->id, grpc_code_name(st->code), st->message);
    job_ready(ms);
}

static int send_tags_check(struct msb *ms)
{
    Modal__Client__SandboxTagsGetRequest req =
        MODAL__CLIENT__SANDBOX_TAGS_GET_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void on_tags_check(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxTagsGetResponse *r = reply;
    const char *owner = NULL;
    json_t *have = json_object();
    for (size_t i = 0; r && i < r->n_tags; i++) {
        if (strcmp(r->tags[i]->tag_name, TAG_OWNER) == 0)
            owner = r->tags[i]->tag_value;
        json_object_set_new(have, r->tags[i]->tag_name,
                            json_string(nz(r->tags[i]->tag_value)));
    }
    char uid[32];
    snprintf(uid, sizeof(uid), "%u", (unsigned)ms->sb->owner);
    int other = owner && strcmp(owner, uid) != 0;
    if (!r)
        log_warn("modal: sandbox %s: cannot read the tags of Modal sandbox %s (%s: %s)",
                 ms->sb->id, ms->sandbox_id, grpc_code_name(st->code), st->message);
    if (!other)
        compare_tags(ms, have);
    json_decref(have);
    if (other) {
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_PERMISSION, json_pack("{s:s}", "sandbox", ms->sb->id),
                      "the running Modal sandbox named %s belongs to another user",
                      ms->sb->id);
        /* Not ours: forget it, so that nothing here ever terminates it. */
        forget_sandbox(ms);
        ms->reconnected = 0;
        job_end(ms, &err, NULL);
        return;
    }
    job_ready(ms);
}

/* ---- STOP_SNAP / SNAPSHOT / STOP_CHECK / TERMINATE --------------------------------- */

/* STOP_SNAP / SNAPSHOT: on the task's router when it has one, else
 * SandboxSnapshotFs (what SDKs before 0.7.5 used). */
static int pick_snapshot(struct msb *ms)
{
    int stop = ms->step == ST_STOP_SNAP;
    int u = modal_router_use_job(ms);
    if (u == 0)
        return STEP_WAIT; /* modal_job_router_ready goes on */
    if (u > 0 && !ms->snap_uuid[0])
        modal_uuid4(ms->snap_uuid); /* kept for the retries of this one snapshot */
    return go(ms, u > 0 ? (stop ? ST_STOP_TSNAP : ST_TSNAP)
                        : (stop ? ST_STOP_SNAPFS : ST_SNAPFS));
}

void modal_job_router_ready(struct msb *ms)
{
    if (ms->step == ST_STOP_SNAP || ms->step == ST_SNAPSHOT)
        job_next(ms);
}

/* TaskSnapshotFilesystem: the snapshot id makes a retried call one image.
 * Stop's images never expire (sbxd deletes them); sandbox.snapshot's live
 * providers.modal.snapshot_ttl_s (0: Modal's default, 30 days today). */
static int send_task_snapshot(struct msb *ms)
{
    Modal__TaskCommandRouter__TaskSnapshotFilesystemRequest req =
        MODAL__TASK_COMMAND_ROUTER__TASK_SNAPSHOT_FILESYSTEM_REQUEST__INIT;
    req.task_id = ms->task_id;
    req.snapshot_id = ms->snap_uuid;
    int64_t ttl = modal_snapshot_ttl(ms);
    if (ttl != 0) {
        req._ttl_seconds_case =
            MODAL__TASK_COMMAND_ROUTER__TASK_SNAPSHOT_FILESYSTEM_REQUEST___TTL_SECONDS_TTL_SECONDS;
        req.ttl_seconds = ttl;
    }
    ms->call = modal_router_unary(ms, "TaskSnapshotFilesystem", &req.base,
                                  POLL_S + POLL_SLACK_S, job_rpc_done, ms);
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
        job_next(ms);
        return 1;
    }
    if (st->code == GRPC_UNIMPLEMENTED || st->code == GRPC_FAILED_PRECONDITION) {
        log_info("modal: sandbox %s: TaskSnapshotFilesystem: %s: %s; SandboxSnapshotFs "
                 "instead",
                 ms->sb->id, grpc_code_name(st->code), st->message);
        ms->step = ms->step == ST_STOP_TSNAP ? ST_STOP_SNAPFS : ST_SNAPFS;
        job_next(ms);
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
    job_next(ms);
}

static void on_stop_tsnap(struct msb *ms, const struct grpc_status *st, void *reply)
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
        job_next(ms);
        return;
    }
    job_fail_st(ms, st, "saving the filesystem before stop");
}

static void on_tsnap(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__TaskCommandRouter__TaskSnapshotFilesystemResponse *r = reply;
    if (r && r->image_id[0]) {
        job_end(ms, NULL,
                modal_snapshot_result(ms, r->image_id, "TaskSnapshotFilesystem"));
        return;
    }
    if (task_snapshot_fallback(ms, st))
        return;
    job_fail_st(ms, st, st->code == GRPC_OK ? "snapshot: no image returned" : "snapshot");
}

static int send_snapshot_fs(struct msb *ms)
{
    Modal__Client__SandboxSnapshotFsRequest req =
        MODAL__CLIENT__SANDBOX_SNAPSHOT_FS_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    req.timeout = (float)POLL_S;
    return job_call(ms, &req.base, POLL_S + POLL_SLACK_S);
}

static int snapshot_ok(const Modal__Client__SandboxSnapshotFsResponse *r)
{
    return r && r->result && r->result->status == 1 && r->image_id[0];
}

static void on_stop_snap(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxSnapshotFsResponse *r = reply;
    if (snapshot_ok(r)) {
        saved_for_resume(ms, r->image_id);
        return;
    }
    if (st->code == GRPC_NOT_FOUND || st->code == GRPC_OK) {
        /* Maybe it died: then there is nothing to save, and stop is done. */
        ms->step = ST_STOP_CHECK;
        job_next(ms);
        return;
    }
    job_fail_st(ms, st, "saving the filesystem before stop");
}

static void stop_gone(struct msb *ms)
{
    log_warn("modal: sandbox %s: the Modal sandbox was already gone at stop; its "
             "files are lost",
             ms->sb->id);
    forget_sandbox(ms);
    job_end(ms, NULL, NULL);
}

static void on_stop_check(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (!modal_task_ended(st, reply)) {
        job_fail_msg(ms, "stop: Modal could not snapshot the sandbox's filesystem; "
                         "it keeps running");
        return;
    }
    stop_gone(ms);
}

static int send_terminate(struct msb *ms)
{
    Modal__Client__SandboxTerminateRequest req =
        MODAL__CLIENT__SANDBOX_TERMINATE_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    return job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void terminated(struct msb *ms)
{
    log_info("modal: sandbox %s: Modal sandbox %s terminated", ms->sb->id,
             ms->sandbox_id);
    forget_sandbox(ms);
    job_end(ms, NULL, NULL);
}

static void on_terminate(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND) {
        job_fail_st(ms, st,
                    ms->job == J_STOP ? "stopping the sandbox"
                                      : "terminating the sandbox");
        return;
    }
    terminated(ms);
}

static void on_snapshot(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxSnapshotFsResponse *r = reply;
    if (snapshot_ok(r)) {
        job_end(ms, NULL, modal_snapshot_result(ms, r->image_id, "SandboxSnapshotFs"));
        return;
    }
    if (st->code != GRPC_OK) {
        job_fail_st(ms, st, "snapshot");
        return;
    }
    char buf[600];
    snprintf(buf, sizeof(buf), "snapshot failed: %s",
             r && r->result ? modal_result_text(r->result) : "no image returned");
    job_fail_msg(ms, buf);
}

/* Indexed by enum mstep. */
static const struct job_step job_steps[] = {
    [ST_APP] = {"AppGetOrCreate", &modal__client__app_get_or_create_response__descriptor,
                send_app, on_app},
    [ST_LOOKUP] = {"SandboxGetFromName",
                   &modal__client__sandbox_get_from_name_response__descriptor,
                   send_lookup, on_lookup},
    [ST_IMAGE] = {NULL, NULL, decide_image, NULL},
    [ST_BUILDER] = {"EnvironmentGetOrCreate",
                    &modal__client__environment_get_or_create_response__descriptor,
                    send_builder, on_builder},
    [ST_IMAGE_BUILD] = {"ImageGetOrCreate",
                        &modal__client__image_get_or_create_response__descriptor,
                        send_image_build, on_image_build},
    [ST_IMAGE_JOIN] = {"ImageJoinStreaming", NULL, send_image_join, NULL},
    [ST_SNAP_IMAGE] = {"ImageFromId", NULL, send_snap_image, on_snap_image},
    [ST_SECRET] = {"SecretGetOrCreate",
                   &modal__client__secret_get_or_create_response__descriptor, send_secret,
                   on_secret},
    [ST_CREATE] = {"SandboxCreate", &modal__client__sandbox_create_response__descriptor,
                   send_create, on_create},
    [ST_TASK] = {"SandboxGetTaskId",
                 &modal__client__sandbox_get_task_id_response__descriptor, send_task,
                 on_task},
    [ST_TAGS_SET] = {"SandboxTagsSet", NULL, send_tags_set, on_tags_set},
    [ST_TAGS_CHECK] = {"SandboxTagsGet",
                       &modal__client__sandbox_tags_get_response__descriptor,
                       send_tags_check, on_tags_check},
    [ST_STOP_SNAP] = {NULL, NULL, pick_snapshot, NULL},
    [ST_STOP_TSNAP] =
        {"TaskSnapshotFilesystem",
         &modal__task_command_router__task_snapshot_filesystem_response__descriptor,
         send_task_snapshot, on_stop_tsnap},
    [ST_STOP_SNAPFS] = {"SandboxSnapshotFs",
                        &modal__client__sandbox_snapshot_fs_response__descriptor,
                        send_snapshot_fs, on_stop_snap},
    [ST_STOP_CHECK] = {"SandboxGetTaskId",
                       &modal__client__sandbox_get_task_id_response__descriptor,
                       send_task, on_stop_check},
    [ST_TERMINATE] = {"SandboxTerminate", NULL, send_terminate, on_terminate},
    [ST_SNAPSHOT] = {NULL, NULL, pick_snapshot, NULL},
    [ST_TSNAP] =
        {"TaskSnapshotFilesystem",
         &modal__task_command_router__task_snapshot_filesystem_response__descriptor,
         send_task_snapshot, on_tsnap},
    [ST_SNAPFS] = {"SandboxSnapshotFs",
                   &modal__client__sandbox_snapshot_fs_response__descriptor,
                   send_snapshot_fs, on_snapshot},
};

_Static_assert(sizeof(job_steps) / sizeof(job_steps[0]) == ST_COUNT,
               "one job step per enum mstep");

/* ---- losing the backend ------------------------------------------------------------
 *
 * While a snapshot (or the snapshot of a stop) runs, SandboxWait watches the
 * Modal sandbox: SnapshotFs is a long poll that a server may hold although
 * the sandbox is gone, and the core would only give up at op_timeout_ms.
 * An ended sandbox (a result, or NOT_FOUND) is a loss; any other failure
 * (an outage) only makes the watch try again. */

static void watch_open(struct msb *ms);

static void watch_stop(struct msb *ms)
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
        modal_mark_dead(ms, why);
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
static void lost_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if (!ms->dead || !watching(ms))
        return;
    if (ms->job == J_SNAPSHOT) {
        char buf[700];
        snprintf(buf, sizeof(buf), "snapshot: the Modal sandbox %s was lost: %s",
                 nz(ms->sandbox_id), nz(ms->dead_reason));
        job_fail_msg(ms, buf);
    } else if (ms->job == J_STOP) {
        stop_gone(ms); /* nothing is left to save or to end */
    }
}

void modal_mark_dead(struct msb *ms, const char *why)
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

void modal_start_restart(struct msb *ms)
{
    log_info("modal: sandbox %s: restarting the Modal sandbox (%s)", ms->sb->id,
             nz(ms->dead_reason));
    forget_sandbox(ms);
    ms->job = J_RESTART;
    ms->step = ST_APP;
    ms->polls = 0;
    job_next(ms);
}

/* Starts stop/destroy/snapshot now (the core already waits for it). */
static void run_lifecycle(struct msb *ms, enum mjob op)
{
    ms->job = op;
    ms->rt_job_tries = 0;
    ms->rt_job_waiting = 0;
    ms->snap_uuid[0] = '\0';
    if (op == J_DESTROY) {
        if (!ms->sandbox_id) {
            job_end(ms, NULL, NULL);
            return;
        }
        ms->step = ST_TERMINATE;
    } else if (op == J_STOP) {
        if (!ms->sandbox_id) {
            job_end(ms, NULL, NULL);
            return;
        }
        ms->step = ms->dead ? ST_STOP_CHECK : ST_STOP_SNAP;
    } else {
        if (!ms->sandbox_id || ms->dead) {
            if (ms->resume_image && !ms->sandbox_id) {
                ms->resume_shared = 1;
                job_end(ms, NULL, json_pack("{s:s}", "image_id", ms->resume_image));
                return;
            }
            job_fail_msg(
                ms,
                "snapshot: the sandbox has no running Modal sandbox and no saved image");
            return;
        }
        ms->step = ST_SNAPSHOT;
    }
    if (op != J_DESTROY)
        watch_open(ms);
    job_next(ms);
}

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

struct msb *modal_msb_new(struct mprov *mp, struct sandbox *sb, sbx_err_t *err)
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
    ev_init(&ms->timer, task_timer_cb);
    ms->timer.data = ms;
    ev_init(&ms->watch_timer, watch_timer_cb);
    ms->watch_timer.data = ms;
    ev_init(&ms->lost_timer, lost_cb);
    ms->lost_timer.data = ms;
    modal_router_init(ms);
    ms->v2 = mp->backend_v2; /* until a sandbox id says otherwise */
    ms->all_next = mp->all;
    if (mp->all)
        mp->all->all_prev = ms;
    mp->all = ms;
    sb->pdata = ms;
    return ms;
}

int modal_sb_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct mprov *mp = cookie;
    if (!mp->ready)
        return err_make_data(
            err, SBX_E_UNAVAILABLE,
            json_pack("{s:s, s:s}", "provider", "modal", "reason", mp->reason),
            "provider modal is unavailable: %s", mp->reason);
    struct msb *ms = sb->pdata;
    if (!ms && !(ms = modal_msb_new(mp, sb, err)))
        return -1;
    if (ms->job != J_NONE)
        return err_make(err, SBX_E_STATE,
                        "sandbox %s is busy with another Modal operation", sb->id);
    ms->job = J_START;
    ms->step = ST_APP;
    ms->polls = 0;
    job_next(ms);
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
    run_lifecycle(ms, op);
    return 0;
}

int modal_sb_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_STOP, err);
}

int modal_sb_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_DESTROY, err);
}

int modal_sb_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_SNAPSHOT, err);
}

json_t *modal_sb_metadata(void *cookie, struct sandbox *sb)
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

void modal_sb_release(void *cookie, struct sandbox *sb)
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
    watch_stop(ms);
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
