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
 * This file holds the provider table and its configuration, Modal's
 * credentials and auth headers (x-modal-host, the throttle-retry marks;
 * grpc.c itself names nothing Modal), the state file, and the helpers the
 * other rooms share (modal_int.h): modal_life.c runs the sandbox lifecycle
 * jobs, modal_proc.c the processes, modal_router.c the router link.
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
#include "modal_int.h"
#include "modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DEFAULT_URL "https://api.modal.com:443"
#define DEFAULT_APP "sbxd"
#define DEFAULT_IMAGE "ubuntu:22.04"
#define SERVICE "modal.client.ModalClient"
#define MODAL_MAX_MSG (100u * 1024 * 1024) /* Modal's own limit */

/* ---- small helpers -------------------------------------------------------- */

void modal_set_str(char **dst, const char *src)
{
    char *n = src ? xstrdup(src) : NULL;
    free(*dst);
    *dst = n;
}

/* A Modal failure as a daemon error: unreachable -> -32002, else -32006. */
int modal_grpc_err(struct mprov *mp, sbx_err_t *err, const struct grpc_status *st,
                   const char *what)
{
    snprintf(mp->last_error, sizeof(mp->last_error), "%s: %s: %s", st->method,
             grpc_code_name(st->code), st->message);
    if (st->transport)
        return err_make_data(err, SBX_E_UNAVAILABLE,
                             json_pack("{s:s, s:s, s:s}", "provider", "modal", "reason",
                                       st->message, "rpc", st->method),
                             "%s: Modal is unreachable: %s", what, st->message);
    return err_make_data(err, SBX_E_PROVIDER,
                         json_pack("{s:s, s:s, s:i, s:s, s:s}", "provider", "modal",
                                   "message", st->message, "grpc_status", st->code,
                                   "grpc_code", grpc_code_name(st->code), "rpc",
                                   st->method),
                         "%s: Modal %s failed: %s: %s", what, st->method,
                         grpc_code_name(st->code), st->message);
}

int modal_plain_err(sbx_err_t *err, const char *msg)
{
    return err_make_data(err, SBX_E_PROVIDER,
                         json_pack("{s:s, s:s}", "provider", "modal", "message", msg),
                         "%s", msg);
}

const char *modal_result_text(const Modal__Client__GenericResult *r)
{
    if (r && r->exception && r->exception[0])
        return r->exception;
    switch (r ? (int)r->status : 0) {
    case 2:
        return "failed";
    case 3:
        return "terminated";
    case 4:
        return "timed out";
    case 5:
        return "failed to start";
    case 6:
        return "internal failure";
    case 7:
        return "idle timeout";
    default:
        return "ended";
    }
}

int modal_opt_number(json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        char *end;
        double d = strtod(json_string_value(v), &end);
        if (end != json_string_value(v) && *end == '\0') {
            *out = d;
            return 0;
        }
    }
    return -1;
}

/* The one place a reply is decoded: every reply site gets the message or
 * NULL, and frees it with modal_reply_free. */
void *modal_reply(const ProtobufCMessageDescriptor *desc, const struct grpc_status *st,
                  const uint8_t *msg, size_t len)
{
    if (!desc || st->code != GRPC_OK)
        return NULL;
    return protobuf_c_message_unpack(desc, NULL, len, msg);
}

void modal_reply_free(void *r)
{
    if (r)
        protobuf_c_message_free_unpacked(r, NULL);
}

int modal_task_ended(const struct grpc_status *st,
                     const Modal__Client__SandboxGetTaskIdResponse *r)
{
    return st->code == GRPC_NOT_FOUND ||
           (r &&
            r->_task_result_case ==
                MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT);
}

/* ---- state file: what survives an sbxd restart -------------------------------------
 *
 * Modal sandboxes outlive sbxd. So that a restarted sbxd lists them again with
 * their env, working dir and lifetime, and re-adopts their running processes,
 * each sandbox this daemon started is kept in a JSON file (mode 0600: env
 * values may be secrets), rewritten whole (write + rename) within a second
 * of a change, at most once a second, and at shutdown. The file is authoritative for
 * sbxd's view (conf, owner, lifetime, exec ids); Modal is authoritative for what still
 * runs: after adoption each sandbox is checked (SandboxGetTaskId) and each
 * process's output is read again from its first batch; what Modal no longer
 * knows is reported as lost, never dropped silently.
 *
 * {"version": 1, "server_url": URL,
 *  "sandboxes": {ID: {owner, conf, runtime_env, created_at, expires_at, stopped,
 *                     modal: {...}, procs: [{pid, exec_id, tag, command,
 *                     started_at, deadline}]}},
 *  "snapshots": {SNAP: {owner, created_at, sandbox, data}}}
 */

#define STATE_VERSION 1
/* Changes are gathered and written at most once per this many seconds (and
 * at shutdown), on the writer thread. */
#define STATE_SAVE_DELAY_S 1.0
#define MAX_ADOPT_PROCS 256

static void put_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static const char *get_str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static json_t *msb_state(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    json_t *m = json_object();
    put_str(m, "app_name", ms->app_name);
    put_str(m, "env_name", ms->env_name);
    put_str(m, "app_id", ms->app_id);
    put_str(m, "image_tag", ms->image_tag);
    put_str(m, "image_id", ms->image_id);
    put_str(m, "resume_image", ms->resume_image);
    put_str(m, "sandbox_id", ms->sandbox_id);
    put_str(m, "task_id", ms->task_id);
    put_str(m, "workdir", ms->workdir);
    put_str(m, "secret_id", ms->secret_id);
    json_object_set_new(m, "cpu", json_real(ms->cpu));
    json_object_set_new(m, "memory_mb", json_integer(ms->memory_mb));
    json_object_set_new(m, "timeout_secs", json_integer(ms->timeout_secs));
    json_object_set_new(m, "idle_secs", json_integer(ms->idle_secs));
    if (ms->baked_env)
        json_object_set(m, "baked_env", ms->baked_env);
    json_t *procs = json_array();
    for (struct mproc *x = ms->procs; x; x = x->next) {
        if (x->reported || x->have_exit || !x->p)
            continue;
        struct process *p = x->p;
        double deadline = p->timeout_ms > 0 && p->started_at > 0
                              ? p->started_at + p->timeout_ms / 1000.0
                              : 0;
        /* Without an exec id (ContainerExec not answered yet) it is kept too:
         * after a restart it is reported lost and its tag killed. */
        json_t *pe = json_pack("{s:I, s:s, s:s, s:f, s:f}", "pid", (json_int_t)p->pid,
                               "tag", x->tag, "command", p->display ? p->display : "",
                               "started_at", p->started_at, "deadline", deadline);
        if (x->exec_id)
            json_object_set_new(pe, "exec_id", json_string(x->exec_id));
        if (x->exec_id && x->router)
            json_object_set_new(pe, "router_task", json_string(nz(x->rexec_task)));
        json_array_append_new(procs, pe);
    }
    json_t *conf = json_deep_copy(sb->conf);
    json_t *e = json_pack(
        "{s:I, s:o, s:f, s:f, s:b, s:o, s:o}", "owner", (json_int_t)sb->owner, "conf",
        conf, "created_at", sb->created_at, "expires_at", sb->expires_at, "stopped",
        sb->status == SB_STOPPED || (!ms->sandbox_id && ms->resume_image), "modal", m,
        "procs", procs);
    if (sb->runtime_env)
        json_object_set(e, "runtime_env", sb->runtime_env);
    return e;
}

/* The whole state as compact JSON (malloc'd), serialized on the loop: the
 * writer thread gets a copy and touches nothing else. */
static char *state_serialize(struct mprov *mp)
{
    json_t *sbs = json_object();
    for (struct msb *ms = mp->all; ms; ms = ms->all_next) {
        struct sandbox *sb = ms->sb;
        if (ms->destroyed || sb->status == SB_DESTROYING || sb->status == SB_DESTROYED ||
            (!ms->sandbox_id && !ms->resume_image))
            continue;
        json_object_set_new(sbs, sb->id, msb_state(ms));
    }
    json_t *root =
        json_pack("{s:i, s:s, s:o, s:O}", "version", STATE_VERSION, "server_url",
                  nz(mp->url), "sandboxes", sbs, "snapshots", mp->snaps);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        x_oom("json_dumps");
    return text;
}

/* On the writer thread: text to path (write + fsync-free rename, as before).
 * Returns 0 or an errno. */
static int state_put(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    /* Never through a link someone else planted, never into their file. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    size_t len = strlen(text), off = 0;
    int e = 0;
    while (off < len && !e) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno != EINTR)
            e = errno;
        else if (n > 0)
            off += (size_t)n;
    }
    if (close(fd) < 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) < 0)
        e = errno;
    if (e)
        unlink(tmp);
    return e;
}

/* The writer thread: writes the newest state handed over, until told to quit
 * (and then what is still pending). Only w's fields under w->mu are shared. */
static void *writer_main(void *arg)
{
    struct mprov *mp = arg;
    struct state_writer *w = &mp->writer;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->next && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->next)
            break;
        char *text = w->next;
        w->next = NULL;
        pthread_mutex_unlock(&w->mu);
        int e = state_put(mp->state_path, text);
        free(text);
        pthread_mutex_lock(&w->mu);
        if (e) {
            w->error = e;
            ev_async_send(D->loop, &w->done);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* On the loop: a write failed on the thread. */
static void writer_done_cb(struct ev_loop *loop, ev_async *a, int revents)
{
    struct mprov *mp = a->data;
    pthread_mutex_lock(&mp->writer.mu);
    int e = mp->writer.error;
    mp->writer.error = 0;
    pthread_mutex_unlock(&mp->writer.mu);
    if (e)
        log_warn("modal: cannot write the state file %s: %s; a restarted sbxd will not "
                 "find these sandboxes",
                 mp->state_path, strerror(e));
}

/* A write (about 2 ms on ext4: write + rename) must not block the loop: the
 * loop serializes, the writer thread writes. A newer state replaces one the
 * thread has not taken yet. */
static void state_write(struct mprov *mp)
{
    ev_timer_stop(D->loop, &mp->save_timer);
    mp->dirty = 0;
    if (!mp->state_path)
        return;
    struct state_writer *w = &mp->writer;
    if (!w->started) {
        if (pthread_create(&w->thread, NULL, writer_main, mp) != 0) {
            /* No thread: write here rather than lose the state. */
            char *text = state_serialize(mp);
            int e = state_put(mp->state_path, text);
            free(text);
            if (e)
                log_warn("modal: cannot write the state file %s: %s", mp->state_path,
                         strerror(e));
            return;
        }
        w->started = 1;
    }
    char *text = state_serialize(mp);
    pthread_mutex_lock(&w->mu);
    free(w->next);
    w->next = text;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void writer_init(struct mprov *mp)
{
    struct state_writer *w = &mp->writer;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    ev_async_init(&w->done, writer_done_cb);
    w->done.data = mp;
    ev_async_start(D->loop, &w->done);
    ev_unref(D->loop); /* the writer's wakeup alone keeps no loop alive */
}

/* At unload: the last state handed over is written before the thread ends. */
static void writer_deinit(struct mprov *mp)
{
    struct state_writer *w = &mp->writer;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    ev_ref(D->loop);
    ev_async_stop(D->loop, &w->done);
    free(w->next);
    w->next = NULL;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void modal_state_flush(struct mprov *mp)
{
    if (mp->dirty)
        state_write(mp);
}

static void save_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    state_write(w->data);
}

void modal_state_dirty(struct mprov *mp)
{
    if (!mp->state_path || mp->dirty || D->draining)
        return;
    mp->dirty = 1;
    ev_timer_set(&mp->save_timer, STATE_SAVE_DELAY_S, 0.);
    ev_timer_start(D->loop, &mp->save_timer);
}

/* Reads the state file; a missing file is an empty state. */
void modal_state_read(struct mprov *mp)
{
    mp->snaps = json_object();
    if (!mp->state_path)
        return;
    json_error_t je = {0};
    int fd = open(mp->state_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            log_warn("modal: cannot open the state file %s: %s; starting without it",
                     mp->state_path, strerror(errno));
        return;
    }
    /* It names owners: only a file of ours that nobody else may write counts. */
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022)) {
        log_warn("modal: state file %s is not a regular file owned by this user and "
                 "writable only by it; ignored",
                 mp->state_path);
        close(fd);
        return;
    }
    json_t *root = json_loadfd(fd, 0, &je);
    close(fd);
    if (!root) {
        log_warn("modal: state file %s is unreadable (%s); starting without it",
                 mp->state_path, je.text);
        return;
    }
    const char *url = get_str(root, "server_url");
    if (json_integer_value(json_object_get(root, "version")) != STATE_VERSION || !url ||
        strcmp(url, nz(mp->url)) != 0) {
        log_warn("modal: state file %s is for another server or version (%s); ignored",
                 mp->state_path, url ? url : "?");
        json_decref(root);
        return;
    }
    json_t *snaps = json_object_get(root, "snapshots");
    if (json_is_object(snaps))
        json_object_update(mp->snaps, snaps);
    json_t *sbs = json_object_get(root, "sandboxes");
    if (json_is_object(sbs) && json_object_size(sbs) > 0)
        mp->saved = json_incref(sbs);
    json_decref(root);
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
        modal_mark_dead(ms, why); /* the next call restarts it */
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
    struct msb *ms = modal_msb_new(mp, sb, &err);
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

/* Where the state file lives: providers.modal.state_file, else
 * $STATE_DIRECTORY (systemd's StateDirectory=sbxd) or the socket's folder,
 * named after the socket so that daemons sharing a folder keep apart. */
static char *state_path_for(json_t *conf)
{
    const char *f = json_string_value(json_object_get(conf, "state_file"));
    if (f)
        return f[0] ? xstrdup(f) : NULL; /* "" turns it off */
    const char *sock = D->cfg.socket_path ? D->cfg.socket_path : "sbxd.sock";
    char *a = xstrdup(sock), *b = xstrdup(sock);
    const char *dir = getenv("STATE_DIRECTORY");
    if (dir && strchr(dir, ':'))
        dir = NULL; /* several directories: use the socket's */
    char *path =
        xasprintf("%s/%s.modal.json", dir && dir[0] ? dir : dirname(a), basename(b));
    free(a);
    free(b);
    return path;
}

/* ---- authentication: Modal's headers and auth token ----------------------------------
 *
 * grpc.c knows no Modal: every call carries the token id and secret, every
 * call but AuthTokenGet the auth token it fetched (a JWT), and unary calls
 * the SDK's idempotency key and retry marks (shared/modal-protocol.md 1.1-1.2).
 */

/* No exp claim in the token: treat it as valid this long (the SDK's rule). */
#define TOKEN_DEFAULT_LIFE 1200.0
#define TOKEN_REFRESH_EARLY 300.0

static void add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[8400];
    snprintf(line, sizeof(line), "%s: %s", name, value);
    grpc_header_add(list, line);
}

static void auth_headers(struct curl_slist **list, const struct grpc_attempt *a,
                         void *privdata)
{
    struct mprov *mp = privdata;
    add_header(list, "x-modal-token-id", mp->token_id);
    add_header(list, "x-modal-token-secret", mp->token_secret);
    if (a->token && !a->is_token)
        add_header(list, "x-modal-auth-token", a->token);
    if (!a->unary)
        return;
    char v[32];
    add_header(list, "x-idempotency-key", a->call_id);
    snprintf(v, sizeof(v), "%d", a->attempt);
    add_header(list, "x-retry-attempt", v);
    if (a->attempt > 0) {
        snprintf(v, sizeof(v), "%.3f", a->since_first_s);
        add_header(list, "x-retry-delay", v);
    }
    /* As npm modal 0.11.1: the host it dials, and how often the server's
     * RPCRetryPolicy has sent it back. */
    if (mp->host)
        add_header(list, "x-modal-host", mp->host);
    snprintf(v, sizeof(v), "%d", a->throttle_attempt);
    add_header(list, "x-throttle-retry-attempt", v);
    if (a->throttle_attempt > 0) {
        snprintf(v, sizeof(v), "%.3f", a->since_first_s);
        add_header(list, "x-throttle-retry-delay", v);
    }
}

/* The host of a server URL, without scheme, port or brackets. */
static char *url_host(const char *url)
{
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    size_t n = strcspn(h, "/?#");
    if (n && h[0] == '[') {
        const char *e = memchr(h, ']', n);
        return e ? xstrndup(h + 1, (size_t)(e - h - 1)) : NULL;
    }
    const char *c = memchr(h, ':', n);
    return xstrndup(h, c ? (size_t)(c - h) : n);
}

static int b64url_val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '-' || ch == '+')
        return 62;
    if (ch == '_' || ch == '/')
        return 63;
    return -1;
}

/* ---- ids and images ---------------------------------------------------------- */

void modal_uuid4(char *out)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) {
        static unsigned long long ctr;
        unsigned long long v = (unsigned long long)time(NULL) ^ (++ctr << 20) ^
                               (unsigned long long)(uintptr_t)out;
        memcpy(b, &v, 8);
        v ^= ctr * 0x9e3779b97f4a7c15ULL;
        memcpy(b + 8, &v, 8);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

static void image_deleted(struct grpc_call *c, const struct grpc_status *st,
                          const uint8_t *msg, size_t len, void *privdata)
{
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND)
        log_warn("modal: ImageDelete failed: %s: %s", grpc_code_name(st->code),
                 st->message);
}

static void terminated_unscheduled(struct grpc_call *c, const struct grpc_status *st,
                                   const uint8_t *msg, size_t len, void *privdata)
{
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND)
        log_warn("modal: SandboxTerminate failed: %s: %s", grpc_code_name(st->code),
                 st->message);
}

void modal_sandbox_terminate(struct mprov *mp, const char *sandbox_id)
{
    if (!mp->ready || !sandbox_id)
        return;
    const char *method =
        modal_v1_id(sandbox_id) ? "SandboxTerminate" : "SandboxTerminateV2";
    Modal__Client__SandboxTerminateRequest req =
        MODAL__CLIENT__SANDBOX_TERMINATE_REQUEST__INIT;
    req.sandbox_id = (char *)sandbox_id;
    grpc_call_retry_budget(grpc_unary(&mp->ch, method, &req.base, UNARY_TIMEOUT_S,
                                      terminated_unscheduled, NULL),
                           mp->retry_budget_s);
}

void modal_image_delete(struct mprov *mp, const char *image_id)
{
    if (!mp->ready || !image_id || !image_id[0])
        return;
    Modal__Client__ImageDeleteRequest req = MODAL__CLIENT__IMAGE_DELETE_REQUEST__INIT;
    req.image_id = (char *)image_id;
    log_info("modal: deleting image %s", image_id);
    grpc_unary(&mp->ch, "ImageDelete", &req.base, UNARY_TIMEOUT_S, image_deleted, NULL);
}

int modal_v1_id(const char *id)
{
    if (!id || strncmp(id, "sb-", 3) != 0 || strlen(id) != 25)
        return 0;
    for (const char *p = id + 3; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9')))
            return 0;
    return 1;
}

const char *modal_rpc(const struct msb *ms, const char *method)
{
    static const char *const twins[][2] = {
        {"SandboxCreate", "SandboxCreateV2"},
        {"SandboxGetFromName", "SandboxGetFromNameV2"},
        {"SandboxGetTaskId", "SandboxGetTaskIdV2"},
        {"SandboxGetTunnels", "SandboxGetTunnelsV2"},
        {"SandboxTagsGet", "SandboxTagsGetV2"},
        {"SandboxTagsSet", "SandboxTagsSetV2"},
        {"SandboxTerminate", "SandboxTerminateV2"},
        {"SandboxWait", "SandboxWaitV2"},
    };
    if (!ms || !ms->v2 || !method)
        return method;
    for (size_t i = 0; i < sizeof(twins) / sizeof(twins[0]); i++)
        if (strcmp(twins[i][0], method) == 0)
            return twins[i][1];
    return method;
}

double modal_jwt_exp(const char *tok)
{
    const char *a = strchr(tok, '.');
    const char *b = a ? strchr(a + 1, '.') : NULL;
    if (!b || b - a - 1 > 8192)
        return 0;
    size_t n = (size_t)(b - a - 1);
    char *out = xmalloc(n + 1);
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64url_val((unsigned char)a[1 + i]);
        if (v < 0)
            break;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    json_t *j = json_loadb(out, o, 0, NULL);
    free(out);
    json_t *e = json_object_get(j, "exp");
    double exp = json_is_number(e) ? json_number_value(e) : 0;
    json_decref(j);
    return exp;
}

/* AuthTokenGet's reply: the token, refreshed 5 min before its exp (or half
 * way through a shorter life). */
char *modal_auth_token_parse(const uint8_t *msg, size_t len, double *refresh_in_s,
                             void *privdata)
{
    Modal__Client__AuthTokenGetResponse *r =
        modal__client__auth_token_get_response__unpack(NULL, len, msg);
    if (!r)
        return NULL;
    char *tok = r->token && r->token[0] ? xstrdup(r->token) : NULL;
    modal__client__auth_token_get_response__free_unpacked(r, NULL);
    if (!tok)
        return NULL;
    double now = daemon_now();
    double exp = modal_jwt_exp(tok);
    double life = exp > now ? exp - now : TOKEN_DEFAULT_LIFE;
    if (exp <= 0)
        log_warn("modal: the auth token has no exp claim; treating it as valid for "
                 "%.0f s",
                 TOKEN_DEFAULT_LIFE);
    double early = life / 2 < TOKEN_REFRESH_EARLY ? life / 2 : TOKEN_REFRESH_EARLY;
    *refresh_in_s = life - early;
    return tok;
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
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
    ev_init(&mp->save_timer, save_timer_cb);
    mp->save_timer.data = mp;
    writer_init(mp);
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
    modal_snapshot_ttl_load(mp, conf);
    *cookie = mp;
    if (!tid || !tid[0] || !tsec || !tsec[0]) {
        snprintf(mp->reason, sizeof(mp->reason),
                 "no Modal credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or "
                 "providers.modal.token_id and token_secret");
        return 0;
    }
    if (!printable(tid) || !printable(tsec)) {
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
    mp->host = url_host(mp->url);
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
    grpc_chan_set_headers(&mp->ch, auth_headers, mp);
    grpc_chan_set_token(&mp->ch, "AuthTokenGet", modal_auth_token_parse, mp);
    const char *cp = getenv("SBXD_MODAL_CURL_PAUSE");
    mp->curl_pause = cp ? atoi(cp) != 0 : 1;
    mp->ready = 1;
    mp->state_path = state_path_for(conf);
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

static void m_unload(void *cookie)
{
    struct mprov *mp = cookie;
    ev_timer_stop(D->loop, &mp->adopt_timer);
    ev_timer_stop(D->loop, &mp->save_timer);
    writer_deinit(mp);
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
    .available = m_available,
    .info = m_info,
    .sb_start = modal_sb_start,
    .sb_stop = modal_sb_stop,
    .sb_destroy = modal_sb_destroy,
    .sb_snapshot = modal_sb_snapshot,
    .sb_metadata = modal_sb_metadata,
    .sb_instructions = sandbox_shell_instructions,
    .sb_release = modal_sb_release,
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
    .snapshot_list = m_snapshot_list,
    .snapshot_delete = m_snapshot_delete,
    /* issue 18 (modal_ws.c) */
    .proc_resize = modal_ws_resize,
    .sb_stats = modal_ws_stats,
    .sb_expose = modal_ws_expose,
    .sb_unexpose = modal_ws_unexpose,
};
