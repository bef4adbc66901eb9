/*
 * modal_create.c - the steps of the Modal provider's start and restart jobs
 * (modal_life.c's table runs them through modal_job.c): the app, a sandbox
 * of ours from before, the image (a snapshot's, the one stop saved, a cached
 * one or a build whose log is streamed), the env as a secret, the sandbox
 * itself, its task, and the tags that say who owns it and what it was made
 * with.
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

#define BUILDER_VERSION "2024.10"
#define TASK_POLL_S 0.5
/* npm modal 0.11.1 waits 21 minutes for scheduling, then terminates the sandbox. */
#define SCHEDULING_WINDOW_S (21 * 60)
#define TASK_MAX_POLLS ((int)(SCHEDULING_WINDOW_S / TASK_POLL_S))
#define MAX_STREAM_FAILS 10 /* image build log stream */

static void job_ready(struct msb *ms);

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
    double exp =
        sb->expires_at > 0 ? sb->expires_at : daemon_now() + modal_job_lifetime(ms);
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

/* ---- APP: the Modal app, cached by environment/name ---------------------------- */

static void app_key(struct msb *ms, char *key, size_t n)
{
    snprintf(key, n, "%s/%s", nz(ms->env_name), ms->app_name);
}

int modal_create_send_app(struct msb *ms)
{
    char key[512];
    app_key(ms, key, sizeof(key));
    const char *id = json_string_value(json_object_get(ms->mp->apps, key));
    if (id) {
        modal_set_str(&ms->app_id, id);
        return modal_job_go(ms, ST_LOOKUP);
    }
    Modal__Client__AppGetOrCreateRequest req =
        MODAL__CLIENT__APP_GET_OR_CREATE_REQUEST__INIT;
    req.app_name = ms->app_name;
    req.environment_name = (char *)nz(ms->env_name);
    req.object_creation_type =
        MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_CREATE_IF_MISSING;
    modal_job_progress(ms, "app", "Looking up Modal app %s", ms->app_name);
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

void modal_create_on_app(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__AppGetOrCreateResponse *r = reply;
    if (!r || !r->app_id[0]) {
        modal_job_fail_st(ms, st, "looking up the Modal app");
        return;
    }
    char key[512];
    app_key(ms, key, sizeof(key));
    json_object_set_new(ms->mp->apps, key, json_string(r->app_id));
    modal_set_str(&ms->app_id, r->app_id);
    ms->step = ST_LOOKUP;
    modal_job_next(ms);
}

/* ---- LOOKUP: a running sandbox of ours from before, or one named like ours ------- */

int modal_create_send_lookup(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    if (ms->job == J_START && ms->sandbox_id && !ms->dead) {
        /* Started again after an error: is the old one still there? */
        ms->adopting = 1;
        ms->polls = 0;
        return modal_job_go(ms, ST_TASK);
    }
    if (ms->job != J_START || ms->lookup_done || ms->resume_image || sb->snapshot)
        return modal_job_go(ms, ST_IMAGE);
    ms->lookup_done = 1;
    Modal__Client__SandboxGetFromNameRequest req =
        MODAL__CLIENT__SANDBOX_GET_FROM_NAME_REQUEST__INIT;
    req.sandbox_name = sb->id;
    req.app_name = ms->app_name;
    req.environment_name = (char *)nz(ms->env_name);
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

void modal_create_on_lookup(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxGetFromNameResponse *r = reply;
    if (st->code == GRPC_NOT_FOUND) {
        ms->step = ST_IMAGE;
        modal_job_next(ms);
        return;
    }
    if (!r || !r->sandbox_id[0]) {
        modal_job_fail_st(ms, st, "looking up the sandbox by name");
        return;
    }
    modal_set_str(&ms->sandbox_id, r->sandbox_id);
    ms->v2 = !modal_v1_id(ms->sandbox_id);
    ms->reconnected = 1;
    ms->adopting = 1;
    ms->polls = 0;
    ms->step = ST_TASK;
    modal_job_progress(ms, "sandbox", "Found running Modal sandbox %s named %s",
                       ms->sandbox_id, ms->sb->id);
    modal_job_next(ms);
}

/* ---- IMAGE: the saved image, a snapshot's, a cached one, or a build ---------------- */

int modal_create_decide_image(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    ms->adopting = 0;
    if (ms->resume_image) {
        modal_set_str(&ms->image_id, ms->resume_image);
        return modal_job_go(ms, ST_SECRET);
    }
    if (sb->snapshot) {
        const char *im = json_string_value(json_object_get(sb->snapshot, "image_id"));
        if (!im) {
            modal_job_fail_msg(ms, "the snapshot holds no Modal image id");
            return STEP_WAIT;
        }
        modal_set_str(&ms->image_id, im);
        return modal_job_go(ms, ST_SNAP_IMAGE);
    }
    const char *id = json_string_value(json_object_get(ms->mp->images, ms->image_tag));
    if (id) {
        modal_set_str(&ms->image_id, id);
        return modal_job_go(ms, ST_SECRET);
    }
    return modal_job_go(ms, ST_BUILDER);
}

int modal_create_send_snap_image(struct msb *ms)
{
    Modal__Client__ImageFromIdRequest req = MODAL__CLIENT__IMAGE_FROM_ID_REQUEST__INIT;
    req.image_id = ms->image_id;
    modal_job_progress(ms, "image", "Using snapshot image %s", ms->image_id);
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

void modal_create_on_snap_image(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (st->code != GRPC_OK) {
        modal_job_fail_st(ms, st, "finding the snapshot image");
        return;
    }
    ms->step = ST_SECRET;
    modal_job_next(ms);
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

int modal_create_send_builder(struct msb *ms)
{
    if (ms->mp->builder_version || json_object_get(ms->mp->builders, nz(ms->env_name)))
        return modal_job_go(ms, ST_IMAGE_BUILD);
    Modal__Client__EnvironmentGetOrCreateRequest req =
        MODAL__CLIENT__ENVIRONMENT_GET_OR_CREATE_REQUEST__INIT;
    req.deployment_name = (char *)nz(ms->env_name);
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

void modal_create_on_builder(struct msb *ms, const struct grpc_status *st, void *reply)
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
    modal_job_next(ms);
}

int modal_create_send_image_build(struct msb *ms)
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
    modal_job_progress(ms, "image", "Building image %s", ms->image_tag);
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

static void image_ready(struct msb *ms)
{
    json_object_set_new(ms->mp->images, ms->image_tag, json_string(ms->image_id));
    ms->step = ST_SECRET;
}

void modal_create_on_image_build(struct msb *ms, const struct grpc_status *st,
                                 void *reply)
{
    Modal__Client__ImageGetOrCreateResponse *r = reply;
    if (!r || !r->image_id[0]) {
        modal_job_fail_st(ms, st, "building the image");
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
        modal_job_fail_msg(ms, buf);
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
    modal_job_next(ms);
}

static void join_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    Modal__Client__ImageJoinStreamingResponse *r =
        modal__client__image_join_streaming_response__unpack(NULL, len, msg);
    if (!r)
        return;
    for (size_t i = 0; i < r->n_task_logs; i++)
        modal_job_progress(ms, "image", "%s", nz(r->task_logs[i]->data));
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
        modal_job_progress(ms, "image", "Image %s is ready (%s)", ms->image_tag,
                           ms->image_id);
        modal_job_next(ms);
        return;
    }
    if (ms->join_result) {
        char buf[600];
        snprintf(buf, sizeof(buf), "building image %s failed: %s", ms->image_tag,
                 ms->join_exception ? ms->join_exception : "unknown error");
        modal_job_fail_msg(ms, buf);
        return;
    }
    if (st->code != GRPC_OK && !grpc_code_retryable(st->code)) {
        modal_job_fail_st(ms, st, "building the image");
        return;
    }
    if (st->code != GRPC_OK && ++ms->join_fails > MAX_STREAM_FAILS) {
        modal_job_fail_st(ms, st, "building the image");
        return;
    }
    modal_job_next(ms); /* the long poll ended: join again from the last entry */
}

/* A stream: join_msg and join_done read it, not job_rpc_done. */
int modal_create_send_image_join(struct msb *ms)
{
    Modal__Client__ImageJoinStreamingRequest req =
        MODAL__CLIENT__IMAGE_JOIN_STREAMING_REQUEST__INIT;
    req.image_id = ms->image_id;
    req.timeout = (float)POLL_S;
    req.last_entry_id = (char *)nz(ms->join_entry);
    ms->call = grpc_stream(&ms->mp->ch, ms->mp->steps[ST_IMAGE_JOIN].method, &req.base,
                           POLL_S + POLL_SLACK_S, join_msg, join_done, ms);
    return STEP_WAIT;
}

/* ---- SECRET: the env as an ephemeral secret ---------------------------------------- */

int modal_create_send_secret(struct msb *ms)
{
    json_t *env = sandbox_env_for(ms->sb, NULL);
    json_decref(ms->baked_env);
    ms->baked_env = env;
    free(ms->secret_id);
    ms->secret_id = NULL;
    size_t n = json_object_size(env), i = 0;
    if (n == 0)
        return modal_job_go(ms, ST_CREATE);
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
    int ret = modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
    free(ents);
    free(ptrs);
    return ret;
}

void modal_create_on_secret(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SecretGetOrCreateResponse *r = reply;
    if (!r || !r->secret_id[0]) {
        modal_job_fail_st(ms, st, "storing the sandbox env");
        return;
    }
    modal_set_str(&ms->secret_id, r->secret_id);
    ms->step = ST_CREATE;
    modal_job_next(ms);
}

int modal_create_send_create(struct msb *ms)
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
    ms->timeout_secs = modal_job_lifetime(ms);
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
    modal_job_progress(ms, "sandbox", "Creating Modal sandbox (image %s)", ms->image_id);
    int ret = modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
    free(tags);
    free(tv_s);
    json_decref(tv);
    return ret;
}

/* ---- TASK: wait for the sandbox's task (polled), or find it ended ------------------ */

int modal_create_send_task(struct msb *ms)
{
    Modal__Client__SandboxGetTaskIdRequest req =
        MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

void modal_create_on_create(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxCreateResponse *r = reply;
    if (!r || !r->sandbox_id[0]) {
        modal_job_fail_st(ms, st, "creating the sandbox");
        return;
    }
    modal_set_str(&ms->sandbox_id, r->sandbox_id);
    ms->v2 = !modal_v1_id(ms->sandbox_id);
    ms->polls = 0;
    ms->adopting = 0;
    ms->step = ST_TASK;
    modal_job_next(ms);
}

void modal_create_on_task(struct msb *ms, const struct grpc_status *st, void *reply)
{
    Modal__Client__SandboxGetTaskIdResponse *r = reply;
    int ended = modal_task_ended(st, r);
    if (st->code != GRPC_OK && !ended) {
        modal_job_fail_st(ms, st, "waiting for the sandbox");
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
            modal_job_forget(ms);
            ms->reconnected = 0;
            ms->adopting = 0;
            ms->step = ST_IMAGE;
            modal_job_next(ms);
            return;
        }
        char buf[600];
        snprintf(buf, sizeof(buf), "the Modal sandbox %s ended before it was ready: %s",
                 nz(ms->sandbox_id), why);
        modal_job_forget(ms);
        modal_job_fail_msg(ms, buf);
        return;
    }
    if (!r) {
        modal_job_fail_msg(ms, "SandboxGetTaskId: undecodable response");
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
            modal_job_forget(ms);
            modal_job_fail_msg(ms, buf);
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
    modal_job_next(ms);
}

static void job_ready(struct msb *ms)
{
    modal_job_progress(ms, "sandbox", "%s Modal sandbox %s",
                       ms->reconnected ? "Reconnected to" : "Running in", ms->sandbox_id);
    log_info("modal: sandbox %s is Modal sandbox %s (task %s)%s", ms->sb->id,
             ms->sandbox_id, ms->task_id, ms->reconnected ? ", reconnected" : "");
    modal_job_end(ms, NULL, NULL);
}

/* ---- TAGS_SET / TAGS_CHECK: who owns it, and what it was made with ----------------- */

int modal_create_send_tags_set(struct msb *ms)
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
    int ret = modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
    free(tags);
    free(tv_s);
    json_decref(tv);
    return ret;
}

void modal_create_on_tags_set(struct msb *ms, const struct grpc_status *st, void *reply)
{
    if (st->code != GRPC_OK)
        log_warn("modal: sandbox %s: tagging the owner failed (%s: %s); a restarted "
                 "sbxd will not be able to check who owns it",
                 ms->sb->id, grpc_code_name(st->code), st->message);
    job_ready(ms);
}

int modal_create_send_tags_check(struct msb *ms)
{
    Modal__Client__SandboxTagsGetRequest req =
        MODAL__CLIENT__SANDBOX_TAGS_GET_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    return modal_job_call(ms, &req.base, UNARY_TIMEOUT_S);
}

void modal_create_on_tags_check(struct msb *ms, const struct grpc_status *st, void *reply)
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
        modal_job_forget(ms);
        ms->reconnected = 0;
        modal_job_end(ms, &err, NULL);
        return;
    }
    job_ready(ms);
}
