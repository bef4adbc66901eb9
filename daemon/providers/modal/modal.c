/*
 * modal.c - the Modal provider: a sandbox is a Modal Sandbox, driven over
 * Modal's own gRPC API as npm modal 0.11.1 speaks it (grpc.c on curlev,
 * protobuf-c messages generated from proto/modal/modal_api.proto and
 * task_command_router.proto): the ModalClient control plane for the
 * lifecycle, V2 sandboxes by default (providers.modal.backend; an id's shape
 * says which calls it takes, modal_rpc), the TaskCommandRouter on the
 * sandbox's worker for processes and snapshots. proto/PROTOCOL.md ("Modal:
 * what sbxd speaks") has the calls.
 *
 * This file is the top of the provider: its table and configuration, Modal's
 * credentials, and the adoption of what the state file kept. It calls down
 * into the other rooms (modal_int.h): modal_life.c runs the sandbox lifecycle
 * jobs, modal_proc.c the processes, modal_router.c the router link,
 * modal_state.c writes and reads the state file, and modal_util.c (the leaf)
 * has the replies, errors, ids and auth headers every room shares.
 *
 * Restarts: the sandboxes, their running execs and the snapshots live in a
 * state file (see "state file" below) and are adopted on the first loop
 * iteration; tags on each Modal sandbox (owner, image, workdir, resources,
 * env hash, deadline) serve the by-name reconnect when the file is gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "providers/modal/modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DEFAULT_URL "https://api.modal.com:443"
#define DEFAULT_APP "sbxd"
#define DEFAULT_IMAGE "ubuntu:22.04"
#define SERVICE "modal.client.ModalClient"
#define MODAL_MAX_MSG (100u * 1024 * 1024) /* Modal's own limit */
#define MAX_ADOPT_PROCS 256

static const char *get_str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static void adopt_check_done(struct grpc_call *c, const struct grpc_status *st,
                             const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->check_call = NULL;
    Modal__Client__SandboxGetTaskIdResponse *r = modal_reply(
        &modal__client__sandbox_get_task_id_response__descriptor, st, msg, len);
    if (modal_task_ended(st, r)) {
        char why[512];
        snprintf(why, sizeof(why), "ended while sbxd was down: %s",
                 r ? modal_result_text(r->task_result) : st->message);
        modal_job_mark_dead(ms, why); /* the next call restarts it */
    } else if (r &&
               r->_task_id_case ==
                   MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID &&
               r->task_id && r->task_id[0]) {
        modal_set_str(&ms->task_id, r->task_id);
        modal_ws_refresh(ms); /* the tunnels of its declared ports */
        log_info("modal: sandbox %s: Modal sandbox %s is still running", ms->sb->id,
                 ms->sandbox_id);
    } else if (st->code != GRPC_OK) {
        log_warn(
            "modal: sandbox %s: cannot check Modal sandbox %s after the restart: %s: "
            "%s",
            ms->sb->id, nz(ms->sandbox_id), grpc_code_name(st->code), st->message);
    }
    modal_reply_free(r);
}

static void adopt_sandbox(struct mprov *mp, const char *id, json_t *e)
{
    json_t *mm = json_object_get(e, "modal");
    json_t *conf = json_object_get(e, "conf");
    json_int_t owner = json_integer_value(json_object_get(e, "owner"));
    if (!json_is_object(mm) || !json_is_object(conf) || owner < 0 ||
        !json_is_integer(json_object_get(e, "owner")) || strlen(id) > 63)
        return;
    double expires = json_number_value(json_object_get(e, "expires_at"));
    double now = daemon_now();
    if (expires > 0 && expires <= now) {
        log_info("modal: sandbox %s reached its lifetime while sbxd was down; Modal has "
                 "ended it",
                 id);
        return;
    }
    int stopped = json_is_true(json_object_get(e, "stopped"));
    struct provider_inst *pi = daemon_provider("modal");
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (!pi || sandbox_adopt(&sb, id, pi, (uid_t)owner, json_deep_copy(conf),
                             stopped ? SB_STOPPED : SB_RUNNING, &err) < 0) {
        log_warn("modal: cannot adopt sandbox %s: %s", id, err.msg ? err.msg : "?");
        err_clear(&err);
        return;
    }
    double created = json_number_value(json_object_get(e, "created_at"));
    if (created > 0)
        sb->created_at = created;
    json_t *renv = json_object_get(e, "runtime_env");
    if (json_is_object(renv)) {
        json_decref(sb->runtime_env);
        sb->runtime_env = json_deep_copy(renv);
    }
    if (expires > 0 && !stopped) {
        /* The lifetime runs on from the original creation. */
        ev_timer_stop(D->loop, &sb->life_timer);
        sb->expires_at = expires;
        ev_timer_set(&sb->life_timer, expires - now, 0.);
        ev_timer_start(D->loop, &sb->life_timer);
    }
    mp->ws_adopting = 1; /* its Modal sandbox has its network already */
    struct msb *ms = modal_life_msb_new(mp, sb, &err);
    mp->ws_adopting = 0;
    if (!ms) {
        log_warn("modal: sandbox %s: %s", id, err.msg ? err.msg : "?");
        err_clear(&err);
        return;
    }
    const char *v;
    if ((v = get_str(mm, "app_id")))
        modal_set_str(&ms->app_id, v);
    if ((v = get_str(mm, "image_id")))
        modal_set_str(&ms->image_id, v);
    if ((v = get_str(mm, "resume_image")))
        modal_set_str(&ms->resume_image, v);
    if ((v = get_str(mm, "sandbox_id")))
        modal_set_str(&ms->sandbox_id, v);
    if ((v = get_str(mm, "task_id")))
        modal_set_str(&ms->task_id, v);
    if ((v = get_str(mm, "secret_id")))
        modal_set_str(&ms->secret_id, v);
    if ((v = get_str(mm, "workdir")))
        modal_set_str(&ms->workdir, v);
    ms->timeout_secs = (uint32_t)json_integer_value(json_object_get(mm, "timeout_secs"));
    ms->idle_secs = (uint32_t)json_integer_value(json_object_get(mm, "idle_secs"));
    json_t *be = json_object_get(mm, "baked_env");
    ms->baked_env = json_is_object(be) ? json_deep_copy(be) : sandbox_env_for(sb, NULL);
    ms->reconnected = 1;
    ms->lookup_done = 1;
    int nprocs = 0;
    if (!stopped && ms->sandbox_id) {
        Modal__Client__SandboxGetTaskIdRequest req =
            MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
        req.sandbox_id = ms->sandbox_id;
        ms->v2 = !modal_v1_id(ms->sandbox_id); /* routed by the id's shape */
        ms->check_call = grpc_unary(&mp->ch, modal_rpc(ms, "SandboxGetTaskId"), &req.base,
                                    UNARY_TIMEOUT_S, adopt_check_done, ms);
        grpc_call_retry_budget(ms->check_call, mp->retry_budget_s);
        size_t i;
        json_t *pe;
        json_array_foreach(json_object_get(e, "procs"), i, pe) {
            if (nprocs >= MAX_ADOPT_PROCS)
                break;
            modal_proc_adopt(ms, pe);
            nprocs++;
        }
    }
    log_info("modal: sandbox %s (Modal sandbox %s, uid %u) adopted from the state file; "
             "%d process(es) re-adopted",
             id, nz(ms->sandbox_id), (unsigned)owner, nprocs);
}

/* Puts the snapshots of the state file into the core's registry. */
static void register_snaps(struct mprov *mp)
{
    const char *id;
    json_t *e;
    json_object_foreach(mp->snaps, id, e) {
        json_int_t owner = json_integer_value(json_object_get(e, "owner"));
        json_t *data = json_object_get(e, "data");
        if (owner < 0 || !json_is_object(data))
            continue;
        snapshot_register(id, "modal", (uid_t)owner,
                          json_number_value(json_object_get(e, "created_at")),
                          json_string_value(json_object_get(e, "sandbox")),
                          json_deep_copy(data));
    }
}

static int m_snapshot_list(void *cookie, void (*done)(void *data, sbx_err_t *err),
                           void *data, sbx_err_t *err)
{
    register_snaps(cookie);
    done(data, NULL);
    return 0;
}

/* Modal's API has no call that deletes an image (the SDK has none either):
 * the snapshot is forgotten here and in the state file; Modal keeps or
 * expires the image by its own rules. */
struct snap_del {
    struct mprov *mp;
    char *id;
    void (*done)(void *data, sbx_err_t *err);
    void *data;
};

static void snap_image_deleted(struct grpc_call *c, const struct grpc_status *st,
                               const uint8_t *msg, size_t len, void *privdata)
{
    struct snap_del *d = privdata;
    sbx_err_t err = {0};
    if (st->code == GRPC_OK || st->code == GRPC_NOT_FOUND) {
        json_object_del(d->mp->snaps, d->id);
        modal_state_dirty(d->mp);
        d->done(d->data, NULL);
    } else {
        modal_grpc_err(d->mp, &err, st, "deleting the snapshot's Modal image");
        d->done(d->data, &err);
        err_clear(&err);
    }
    free(d->id);
    free(d);
}

/* snapshot.delete deletes the Modal image too (ImageDelete), unless a stopped
 * sandbox still starts from it. */
static int m_snapshot_delete(void *cookie, const char *id, json_t *rec,
                             void (*done)(void *data, sbx_err_t *err), void *data,
                             sbx_err_t *err)
{
    struct mprov *mp = cookie;
    const char *img =
        json_string_value(json_object_get(json_object_get(rec, "data"), "image_id"));
    for (struct msb *ms = mp->all; img && ms; ms = ms->all_next)
        if (ms->resume_image && strcmp(ms->resume_image, img) == 0)
            img = NULL;
    if (!img || !mp->ready) {
        json_object_del(mp->snaps, id);
        modal_state_dirty(mp);
        done(data, NULL);
        return 0;
    }
    struct snap_del *d = xcalloc(1, sizeof(*d));
    d->mp = mp;
    d->id = xstrdup(id);
    d->done = done;
    d->data = data;
    Modal__Client__ImageDeleteRequest req = MODAL__CLIENT__IMAGE_DELETE_REQUEST__INIT;
    req.image_id = (char *)img;
    grpc_call_retry_budget(grpc_unary(&mp->ch, "ImageDelete", &req.base, UNARY_TIMEOUT_S,
                                      snap_image_deleted, d),
                           mp->retry_budget_s);
    return 0;
}

static void adopt_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mprov *mp = w->data;
    /* Snapshots first: a sandbox made from one finds it again (a restart
     * of that sandbox starts from the snapshot, as before). */
    register_snaps(mp);
    json_t *saved = mp->saved;
    mp->saved = NULL;
    const char *id;
    json_t *e;
    json_object_foreach(saved, id, e) {
        if (sandbox_find_any(id))
            continue;
        adopt_sandbox(mp, id, e);
    }
    json_decref(saved);
    modal_state_dirty(mp);
}

/* ---- provider ------------------------------------------------------------------- */

static const char *first_env(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && v[0] ? v : fallback;
}

static int m_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    struct mprov *mp = xcalloc(1, sizeof(*mp));
    mp->apps = json_object();
    mp->images = json_object();
    mp->builders = json_object();
    modal_ws_load(mp, conf);
    ev_init(&mp->adopt_timer, adopt_timer_cb);
    mp->adopt_timer.data = mp;
    modal_state_init(mp);
    mp->steps = modal_life_steps;
    mp->hooks = (struct mhooks){.waiters_resume = modal_proc_waiters_resume,
                                .job_router_ready = modal_job_router_ready,
                                .mark_dead = modal_job_mark_dead,
                                .fs_router_ready = modal_fs_router_ready,
                                .proc_router_ready = modal_proc_router_ready};
    const char *url = first_env("MODAL_SERVER_URL",
                                json_string_value(json_object_get(conf, "server_url")));
    mp->url = xstrdup(url ? url : DEFAULT_URL);
    const char *tid =
        first_env("MODAL_TOKEN_ID", json_string_value(json_object_get(conf, "token_id")));
    const char *tsec = first_env(
        "MODAL_TOKEN_SECRET", json_string_value(json_object_get(conf, "token_secret")));
    const char *app = json_string_value(json_object_get(conf, "app_name"));
    mp->app_name = xstrdup(app && app[0] ? app : DEFAULT_APP);
    const char *envn = first_env("MODAL_ENVIRONMENT",
                                 json_string_value(json_object_get(conf, "environment")));
    mp->environment = envn ? xstrdup(envn) : NULL;
    const char *img = json_string_value(json_object_get(conf, "image"));
    mp->image = xstrdup(img && img[0] ? img : DEFAULT_IMAGE);
    const char *wd = json_string_value(json_object_get(conf, "working_dir"));
    if (wd && wd[0] != '/') {
        log_warn("modal: working_dir %s is not absolute; ignored", wd);
        wd = NULL;
    }
    mp->working_dir = wd ? xstrdup(wd) : NULL;
    json_t *cpu = json_object_get(conf, "cpu");
    if (cpu && modal_opt_number(cpu, &mp->cpu) < 0) {
        log_warn("modal: cpu must be a number; ignored");
        mp->cpu = 0;
    }
    mp->memory_mb = json_integer_value(json_object_get(conf, "memory_mb"));
    mp->max_timeout_ms = json_integer_value(json_object_get(conf, "timeout_ms"));
    json_int_t rb = json_integer_value(json_object_get(conf, "retry_budget_ms"));
    mp->retry_budget_s = (rb > 0 ? (double)rb : RETRY_BUDGET_MS) / 1000.0;
    mp->snapshot_ttl_s = json_integer_value(json_object_get(conf, "snapshot_ttl_s"));
    const char *bv =
        first_env("MODAL_IMAGE_BUILDER_VERSION",
                  json_string_value(json_object_get(conf, "image_builder_version")));
    mp->builder_version = bv && bv[0] ? xstrdup(bv) : NULL;
    if (mp->snapshot_ttl_s < -1)
        mp->snapshot_ttl_s = -1;
    modal_snap_ttl_load(mp, conf);
    *cookie = mp;
    if (!tid || !tid[0] || !tsec || !tsec[0]) {
        snprintf(mp->reason, sizeof(mp->reason),
                 "no Modal credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or "
                 "providers.modal.token_id and token_secret");
        return 0;
    }
    if (!modal_printable(tid) || !modal_printable(tsec)) {
        snprintf(mp->reason, sizeof(mp->reason), "token id/secret not printable");
        return 0;
    }
    if (grpc_chan_init(&mp->ch, D->loop, mp->url, SERVICE, err) < 0) {
        snprintf(mp->reason, sizeof(mp->reason), "%s",
                 err->msg ? err->msg : "bad configuration");
        err_clear(err);
        return 0;
    }
    json_int_t mm = json_integer_value(json_object_get(conf, "max_message_bytes"));
    if (mm > 0)
        mp->ch.max_msg = mm > MODAL_MAX_MSG ? MODAL_MAX_MSG : (size_t)mm;
    grpc_chan_header(&mp->ch, "User-Agent: sbxd/" SBX_VERSION " (libcurl)");
    grpc_chan_header(&mp->ch, "x-modal-client-type: 8");
    grpc_chan_header(&mp->ch, "x-modal-client-version: 1.0.0");
    grpc_chan_header(&mp->ch, "x-modal-libmodal-version: sbxd/" SBX_VERSION);
    mp->token_id = xstrdup(tid);
    mp->token_secret = xstrdup(tsec);
    mp->host = modal_url_host(mp->url);
    const char *ca = json_string_value(json_object_get(conf, "ca_file"));
    mp->ca_file = ca && ca[0] ? xstrdup(ca) : NULL;
    grpc_chan_set_ca(&mp->ch, mp->ca_file);
    const char *et = json_string_value(json_object_get(conf, "exec_transport"));
    mp->container_exec_only = et && strcmp(et, "container_exec") == 0;
    /* auto: as npm modal 0.11.1, V2 (its V1 is for GPUs, which sbxd does not ask for). */
    const char *be = json_string_value(json_object_get(conf, "backend"));
    mp->backend_v2 = !be || strcmp(be, "v1") != 0;
    if (be && strcmp(be, "v1") != 0 && strcmp(be, "v2") != 0 && strcmp(be, "auto") != 0)
        log_warn("modal: backend %s is not v1, v2 or auto; auto", be);
    if (et && !mp->container_exec_only && strcmp(et, "auto") != 0)
        log_warn("modal: exec_transport %s is neither auto nor container_exec; auto", et);
    grpc_chan_set_throttle(&mp->ch, mp->retry_budget_s);
    grpc_chan_set_headers(&mp->ch, modal_auth_headers, mp);
    grpc_chan_set_token(&mp->ch, "AuthTokenGet", modal_auth_token_parse, mp);
    const char *cp = getenv("SBXD_MODAL_CURL_PAUSE");
    mp->curl_pause = cp ? atoi(cp) != 0 : 1;
    mp->ready = 1;
    mp->state_path = modal_state_path(conf);
    modal_state_read(mp);
    if (mp->saved || json_object_size(mp->snaps) > 0) {
        /* The provider table is complete only once every provider loaded. */
        ev_timer_set(&mp->adopt_timer, 0., 0.);
        ev_timer_start(D->loop, &mp->adopt_timer);
    }
    log_info("modal: server %s, app %s, image %s; output flow control by %s; state in %s",
             mp->url, mp->app_name, mp->image,
             mp->curl_pause ? "pausing the stream" : "closing and resuming the stream",
             mp->state_path ? mp->state_path : "(not kept)");
    return 0;
}

/* SIGTERM: what runs in the sandboxes for sbxd alone ends (running tar
 * archives, fs.watch's Watch execs), or it would run on for up to an hour
 * after sbxd; processes stay (a restarted sbxd adopts them). */
static struct mdrain drain;

static int m_shutdown_drain(void *cookie, void (*done)(void *data), void *data)
{
    struct mprov *mp = cookie;
    drain = (struct mdrain){0};
    for (struct msb *ms = mp->all; ms; ms = ms->all_next)
        modal_fs_drain(ms, &drain);
    if (!drain.pending)
        return 0;
    log_info("modal: shutdown: ending %d archive or watch exec(s)", drain.pending);
    drain.done = done;
    drain.data = data;
    return 1;
}

static void m_unload(void *cookie)
{
    struct mprov *mp = cookie;
    ev_timer_stop(D->loop, &mp->adopt_timer);
    ev_timer_stop(D->loop, &mp->save_timer);
    modal_state_deinit(mp);
    json_decref(mp->saved);
    json_decref(mp->snaps);
    free(mp->state_path);
    modal_router_unload(mp);
    if (mp->ready)
        grpc_chan_deinit(&mp->ch);
    json_decref(mp->apps);
    json_decref(mp->images);
    json_decref(mp->builders);
    modal_ws_unload(mp);
    free(mp->builder_version);
    free(mp->url);
    free(mp->app_name);
    free(mp->environment);
    free(mp->image);
    free(mp->working_dir);
    free(mp->token_id);
    free(mp->token_secret);
    free(mp->host);
    free(mp->ca_file);
    free(mp);
}

static int m_available(void *cookie, const char **reason)
{
    struct mprov *mp = cookie;
    if (mp->ready)
        return 1;
    *reason = mp->reason;
    return 0;
}

static json_t *m_info(void *cookie)
{
    struct mprov *mp = cookie;
    json_t *o = json_pack("{s:s, s:s, s:s}", "server_url", nz(mp->url), "app_name",
                          nz(mp->app_name), "image", nz(mp->image));
    if (mp->environment)
        json_object_set_new(o, "environment", json_string(mp->environment));
    json_object_set_new(o, "authenticated", json_boolean(mp->ready && mp->ch.token));
    if (mp->last_error[0])
        json_object_set_new(o, "last_error", json_string(mp->last_error));
    return o;
}

static const struct cfg_key modal_keys[] = {
    {"server_url", CFG_STR},
    {"token_id", CFG_STR},
    {"token_secret", CFG_STR},
    {"app_name", CFG_STR},
    {"environment", CFG_STR},
    {"image", CFG_STR},
    {"cpu", CFG_ANY},
    {"memory_mb", CFG_INT},
    {"timeout_ms", CFG_INT},
    {"working_dir", CFG_STR},
    {"command_timeout_ms", CFG_INT},
    {"max_message_bytes", CFG_INT}, /* one received gRPC message; default 16 MiB */
    {"retry_budget_ms", CFG_INT},   /* outages: how long streams and waits retry */
    {"state_file", CFG_STR},        /* what survives a restart; "" = nothing */
    /* CA bundle for https (the control plane and the command router) */
    {"ca_file", CFG_STR},
    /* sandbox.snapshot images: -1 never expire, 0 Modal's default */
    {"snapshot_ttl_s", CFG_INT},
    /* the longest ttl sandbox.snapshot may ask; -1: no ceiling (modal_snap.c) */
    {"snapshot_ttl_max_s", CFG_INT},
    /* auto (the command router, ContainerExec if refused) | container_exec */
    {"exec_transport", CFG_STR},
    /* default: the workspace's (EnvironmentGetOrCreate) */
    {"image_builder_version", CFG_STR},
    /* v1 | v2 | auto (V2, as today's SDKs): the backend of new sandboxes */
    {"backend", CFG_STR},
    /* issue 18 (modal_ws.c): tunnels of options.ports, NetworkAccess ceiling */
    {"expose", CFG_BOOL},
    {"expose_max_ports", CFG_INT},
    {"egress", CFG_ANY}, /* {allow: [hosts, *.domains, CIDRs], allow_private_addresses} */
    {NULL, 0},
};

const struct sbx_provider sbx_provider_modal = {
    .takes_image = 1,
    .snapshot_ttl = 1,
    .name = "modal",
    .config_keys = modal_keys,
    .shell_commands = 1,
    .default_cwd = NULL,
    .enabled_by_default = 1,
    .load = m_load,
    .unload = m_unload,
    .shutdown_drain = m_shutdown_drain,
    .available = m_available,
    .info = m_info,
    .sb_start = modal_life_start,
    .sb_stop = modal_life_stop,
    .sb_destroy = modal_life_destroy,
    .sb_snapshot = modal_life_snapshot,
    .sb_metadata = modal_life_metadata,
    .sb_instructions = sandbox_shell_instructions,
    .sb_release = modal_life_release,
    .proc_spawn = modal_proc_spawn,
    .proc_write = modal_proc_write,
    .proc_close_stdin = modal_proc_close_stdin,
    .proc_kill = modal_proc_kill,
    .proc_resume = modal_proc_resume,
    .proc_tool_result = NULL,
    .proc_release = modal_proc_release,
    /* files: exec of modal-sandbox-fs-tools on the router (modal_fs.c) */
    .fs_call = modal_fs_call,
    .fs_release = modal_fs_release,
    .fs_tar = 1,
    .snapshot_list = m_snapshot_list,
    .snapshot_delete = m_snapshot_delete,
    /* issue 18 (modal_ws.c) */
    .proc_resize = modal_ws_resize,
    .sb_stats = modal_ws_stats,
    .sb_expose = modal_ws_expose,
    .sb_unexpose = modal_ws_unexpose,
};
