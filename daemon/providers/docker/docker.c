/*
 * docker.c - the Docker provider: a sandbox is one long-running container.
 *
 * The static agent sbx-init is uploaded into the created container (archive
 * upload into the /.sbx volume) and runs as its PID 1. sbxd keeps one
 * attached connection to PID 1's stdin/stdout per sandbox and speaks the
 * worker channel (proto/CHANNEL.md) over it: every process of the sandbox is
 * multiplexed there, with credit-based flow control per process. After an
 * sbxd restart the containers are found again by label, attached, and the
 * agent's HELLO (answering a PING) lists the processes it still runs; they
 * are adopted under their old pids and their output is replayed. On a local
 * engine the channel then moves to a Unix socket inside the container
 * (docker_direct.c); ds->cur is whichever carries it. The channel itself
 * (attach stream, frames, handshake, reconciliation) is docker_agent.c.
 *
 * Here: the provider table, the sandbox and process ops, the snapshot
 * registry, adoption after a restart and loading. Below it, each reporting up
 * only through callbacks it was given: the lifecycle (docker_lc.c, a step
 * table of engine calls that also serves our own recovery), the agent link
 * (docker_agent.c, docker_direct.c; struct dk_link_ev in ds->up), the two
 * process transports (struct dk_ptrans: the agent's, dka_ptrans, and the
 * engine exec's, dkx_ptrans), the pool and the policy leaves.
 *
 * exec_mode docker-exec runs processes through the Engine's exec API
 * instead (docker_exec.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "providers/docker/docker_archive.h"
#include "providers/docker/docker_int.h"
#include "providers/docker/docker_mount.h"
#include "log.h"
#include "core/process.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "providers/docker/policy.h"
#include "providers/docker/policy_expose.h"
#include "core/snapshot.h"
#include "core/terminal.h"
#include "xalloc.h"

#define STOP_WAIT_S 3
#define SNAP_REPO "sbxd-snapshot"

/* ---- small helpers --------------------------------------------------------------------
 */

struct dk_proc *dk_proc_new(struct dk_sb *ds, struct process *p)
{
    struct dk_proc *dpp = xcalloc(1, sizeof(*dpp));
    dpp->p = p;
    dpp->ds = ds;
    dpp->pid = p->pid;
    obuf_init(&dpp->stdin_buf);
    p->pdata = dpp;
    dpp->next = ds->procs;
    if (ds->procs)
        ds->procs->prev = dpp;
    ds->procs = dpp;
    return dpp;
}

static const struct dk_ptrans *transport(struct dk_sb *ds)
{
    return ds->exec_mode ? &dkx_ptrans : &dka_ptrans;
}

static int d_proc_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    struct dk_sb *ds = p->sb->pdata;
    if (!ds)
        return err_make(err, SBX_E_STATE, "sandbox %s has no container", p->sb->id);
    if (p->pty && ds->exec_mode) /* docker_pty.c: sbx-init holds terminals */
        return terminal_unsupported(err, p->sb, "pty");
    struct dk_proc *dpp = dk_proc_new(ds, p);
    return transport(ds)->spawn(ds, dpp, err);
}

static int d_proc_write(void *cookie, struct process *p, const void *data, size_t len,
                        sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp || dpp->stdin_eof)
        return err_make(err, SBX_E_STATE, "stdin of process %u is closed", p->pid);
    return transport(ds)->write(dpp, data, len, err);
}

static int d_proc_close_stdin(void *cookie, struct process *p, sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp || dpp->stdin_eof)
        return 0;
    return transport(ds)->close_stdin(dpp, err);
}

static int d_proc_kill(void *cookie, struct process *p, int sig, sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp)
        return 0;
    return transport(ds)->kill(dpp, sig, err);
}

static void d_proc_resume(void *cookie, struct process *p)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp || !ds)
        return;
    transport(ds)->resume(dpp);
}

static void d_proc_release(void *cookie, struct process *p)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp)
        return;
    if (ds) {
        transport(ds)->release(dpp);
        if (dpp->prev)
            dpp->prev->next = dpp->next;
        else
            ds->procs = dpp->next;
        if (dpp->next)
            dpp->next->prev = dpp->prev;
    }
    obuf_deinit(&dpp->stdin_buf);
    free(dpp);
    p->pdata = NULL;
}

/* ---- sandbox ops
 * ------------------------------------------------------------------------------ */

static void dtimer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct dk_sb *ds = w->data;
    if (ds->dead) {
        dk_ds_free(ds);
        return;
    }
    dkd_timer(ds);
}

/* ---- what the agent link reports (struct dk_link_ev), and the frames of
 * files and connections it carries ---- */

static void link_linked(struct dk_sb *ds)
{
    dkf_kick(ds);
}

static const struct dk_link_ev link_ev = {
    .step = dklc_next,
    .ok = dklc_ok,
    .fail = dklc_fail,
    .trouble = dklc_container_trouble,
    .release = dk_ds_free,
    .adopt = dk_proc_new,
    .ready = dkn_egress_ready,
    .linked = link_linked,
    .reset = dkf_reset,
    .lost = dkn_channel_lost,
};

static void f_fs(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                 struct pchan_proc *pp, void *proc, void *data)
{
    dkf_frame(data, h, payload);
}

static void f_net(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                  struct pchan_proc *pp, void *proc, void *data)
{
    dkn_frame(data, h->type, h->proc, payload, h->len);
}

struct dk_sb *dk_ds_new(struct dk_prov *dp, struct sandbox *sb)
{
    struct dk_sb *ds = xcalloc(1, sizeof(*ds));
    ds->sb = sb;
    ds->dp = dp;
    ds->up = &link_ev;
    dka_init(ds);
    /* files (0x60-0x6f) to docker_fs.c, connections (0x80-0x9f) to docker_net.c */
    static const uint8_t fs[] = {SBX_CHAN_FS_DATA, SBX_CHAN_FS_RESULT, SBX_CHAN_FS_EVENT};
    for (size_t i = 0; i < sizeof(fs); i++)
        pchan_on(&ds->pc, fs[i], 0, f_fs, ds);
    static const uint8_t net[] = {SBX_CHAN_NET_OPENED, SBX_CHAN_NET_DATA,
                                  SBX_CHAN_NET_EOF,    SBX_CHAN_NET_CLOSE,
                                  SBX_CHAN_NET_CREDIT, SBX_CHAN_EGRESS_OPEN};
    for (size_t i = 0; i < sizeof(net); i++)
        pchan_on(&ds->pc, net[i], 0, f_net, ds);

    ev_timer_init(&ds->dtimer, dtimer_cb, 0., 0.);
    ds->dtimer.data = ds;
    sb->pdata = ds;
    return ds;
}

static int d_sb_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (!ds)
        ds = dk_ds_new(dp, sb);
    if (ds->phase != PH_IDLE) {
        /* recovery in progress: take it over as the start */
        dkapi_reqlist_cancel(&ds->reqs);
        dka_close_attach(ds);
        ds->phase = PH_IDLE;
        ds->recovering = 0;
    }
    json_t *opts = NULL;
    json_t *req_opts = json_object_get(sb->conf, "options");
    if (policy_reserved(req_opts, err) < 0)
        return -1;
    if (dkspec_options(&opts, dp->conf, sb->conf, err) < 0)
        return -1;
    /* A rule's required runtime is what a request without one gets. */
    const char *req_rt = policy_required_runtime(dp->policy, sb->owner);
    if (req_rt && !dkspec_opt_str(req_opts, "runtime"))
        json_object_set_new(opts, "runtime", json_string(req_rt));
    if (policy_check(dp->policy, sb->owner, dp->conf, opts, err) < 0 ||
        sandbox_reserve_memory(
            sb, (uint64_t)json_integer_value(json_object_get(opts, "memory")), err) < 0 ||
        dks_disk_total(dp, sb, opts, err) < 0) {
        json_decref(opts);
        return -1;
    }
    const char *mode = dkspec_opt_str(opts, "exec_mode");
    int exec_mode = mode ? strcmp(mode, "docker-exec") == 0 : dp->exec_mode;
    if (!exec_mode && !dp->agent_tar) {
        json_decref(opts);
        return err_make_data(
            err, SBX_E_UNAVAILABLE,
            json_pack("{s:s, s:s}", "provider", "docker", "reason", dp->agent_err),
            "docker: %s", dp->agent_err);
    }
    json_decref(ds->opts);
    ds->opts = opts;
    if (!json_object_get(sb->conf, "working_dir"))
        json_object_set(sb->conf, "working_dir", json_object_get(opts, "working_dir"));
    if (!ds->name)
        ds->name = dkspec_name(dkspec_opt_str(opts, "name"), sb->id);
    if (sb->snapshot && !ds->image_id) {
        const char *img = json_string_value(json_object_get(sb->snapshot, "image"));
        if (img)
            ds->image_id = strdup(img);
    }
    ds->why = WHY_START;
    ds->pull_t = 0;
    ds->disk_exceeded = 0;
    ds->exec_mode = exec_mode;
    ds->dtries = 0;
    dklc_start(ds);
    return 0;
}

/* An engine call of stop/destroy/snapshot failed: the op ends with its error. */
static void op_error(struct dk_sb *ds, struct dk_resp *r, const char *what)
{
    sbx_err_t err = {0};
    dkapi_err(&err, r, what);
    sandbox_op_done(ds->sb, &err, NULL);
    err_clear(&err);
}

static void stop_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    ds->phase = PH_IDLE;
    if (r->status != 204 && r->status != 304 && r->status != 404) {
        op_error(ds, r, "stop container");
        return;
    }
    if (r->status == 404)
        ds->cid[0] = '\0';
    ds->running = 0;
    sandbox_op_done(ds->sb, NULL, NULL);
}

static void quiesce(struct dk_sb *ds)
{
    dkapi_reqlist_cancel(&ds->reqs);
    dka_close_attach(ds);
    ds->phase = PH_IDLE;
    ds->why = WHY_NONE;
    ds->recovering = 0;
}

static int d_sb_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (!ds || !ds->cid[0]) {
        sandbox_op_done(sb, NULL, NULL);
        return 0;
    }
    quiesce(ds);
    ds->phase = PH_STOP;
    char *path = dkapi_path(&dp->eng, "/containers/%s/stop?t=%d", ds->cid, STOP_WAIT_S);
    struct dk_req *rq =
        dkapi_call(&dp->eng, &ds->reqs, "POST", path, NULL,
                   DK_CALL_TIMEOUT_MS + STOP_WAIT_S * 1000, stop_done, ds);
    free(path);
    if (!rq)
        return err_make(err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
    return 0;
}

static void destroy_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    ds->phase = PH_IDLE;
    if (r->status != 204 && r->status != 404 && r->status != 409) {
        op_error(ds, r, "remove container");
        return;
    }
    if (ds->pool && dklc_claim_remove(ds))
        return; /* the destroy answers once the claim is gone too */
    ds->cid[0] = '\0';
    sandbox_op_done(ds->sb, NULL, NULL); /* frees sb and ds */
}

static int d_sb_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (!ds || !ds->cid[0]) {
        sandbox_op_done(sb, NULL, NULL);
        return 0;
    }
    quiesce(ds);
    dkn_release(ds); /* net18: exposed ports (and Unix socket files) go at once */
    ds->phase = PH_DESTROY;
    char *path = dkapi_path(&dp->eng, "/containers/%s?force=1&v=1", ds->cid);
    struct dk_req *rq = dkapi_call(&dp->eng, &ds->reqs, "DELETE", path, NULL,
                                   DK_CALL_TIMEOUT_MS, destroy_done, ds);
    free(path);
    if (!rq)
        return err_make(err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
    return 0;
}

static void commit_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    const char *id = json_string_value(json_object_get(r->json, "Id"));
    if (r->status != 201 || !id) {
        op_error(ds, r, "commit container");
        return;
    }
    log_info("docker %s: snapshot image %.19s", ds->sb->id, id);
    sandbox_op_done(ds->sb, NULL,
                    json_pack("{s:s, s:s}", "image", id, "engine", ds->dp->eng.host));
}

static int d_sb_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (!ds || !ds->cid[0])
        return err_make(err, SBX_E_STATE, "sandbox %s has no container yet", sb->id);
    char tag[128];
    snprintf(tag, sizeof(tag), "%s-%lld", sb->id, (long long)(daemon_now() * 1000));
    for (char *c = tag; *c; c++)
        if (!(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') &&
            !(*c >= '0' && *c <= '9') && *c != '_' && *c != '.' && *c != '-')
            *c = '_';
    char *te = dkapi_escape(tag);
    char *path = dkapi_path(&dp->eng, "/commit?container=%s&repo=%s&tag=%s&pause=1",
                            ds->cid, SNAP_REPO, te);
    free(te);
    /* Not part of the lifecycle machine: a recovery may run meanwhile. The
     * labels make the image the registry's record: after an sbxd restart
     * snapshot_list finds it by them (sbxd.owner guards its use). */
    char own[32], created[64];
    snprintf(own, sizeof(own), "%u", (unsigned)sb->owner);
    snprintf(created, sizeof(created), "%.3f", daemon_now());
    json_t *labels = json_object();
    json_t *cl = json_object_get(ds->opts, "labels");
    if (json_is_object(cl))
        json_object_update(labels, cl);
    json_t *ours =
        json_pack("{s:s, s:s, s:s, s:s, s:s}", "sbxd.snapshot", sb->snap_id,
                  "sbxd.snapshot_of", sb->id, "sbxd.owner", own, "sbxd.snapshot_created",
                  created, "sbxd.socket", dklc_label_socket());
    json_object_update(labels, ours);
    json_decref(ours);
    json_t *body = json_pack("{s:o}", "Labels", labels);
    struct dk_req *rq = dkapi_call(&dp->eng, &ds->snap_reqs, "POST", path, body,
                                   DK_COMMIT_TIMEOUT_MS, commit_done, ds);
    json_decref(body);
    free(path);
    if (!rq)
        return err_make(err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
    return 0;
}

/* ---- the snapshot registry: images labelled sbxd.snapshot -------------------------- */

struct snap_job {
    struct dk_prov *dp;
    void (*done)(void *data, sbx_err_t *err);
    void *data;
};

/* Registers every snapshot image of this sbxd from an /images/json answer. */
static void register_images(struct dk_prov *dp, json_t *list)
{
    size_t i;
    json_t *im;
    json_array_foreach(list, i, im) {
        json_t *l = json_object_get(im, "Labels");
        const char *sid = json_string_value(json_object_get(l, "sbxd.snapshot"));
        const char *own = json_string_value(json_object_get(l, "sbxd.owner"));
        const char *sock = json_string_value(json_object_get(l, "sbxd.socket"));
        const char *of = json_string_value(json_object_get(l, "sbxd.snapshot_of"));
        const char *cr = json_string_value(json_object_get(l, "sbxd.snapshot_created"));
        const char *id = json_string_value(json_object_get(im, "Id"));
        if (!sid || !own || !id || strncmp(sid, "snap-", 5) != 0 || strlen(sid) > 63)
            continue;
        if (sock && strcmp(sock, dklc_label_socket()) != 0)
            continue; /* another sbxd's */
        snapshot_register(
            sid, "docker", (uid_t)strtoul(own, NULL, 10),
            cr ? atof(cr) : (double)json_integer_value(json_object_get(im, "Created")),
            of, json_pack("{s:s, s:s}", "image", id, "engine", dp->eng.host));
    }
}

static char *snap_images_path(struct dk_engine *e)
{
    char *fe = dkapi_escape("{\"label\":[\"sbxd.snapshot\"]}");
    char *path = dkapi_path(e, "/images/json?filters=%s", fe);
    free(fe);
    return path;
}

static void snap_list_done(struct dk_resp *r, void *data)
{
    struct snap_job *j = data;
    sbx_err_t err = {0};
    if (r->status != 200 || !json_is_array(r->json))
        dkapi_err(&err, r, "list snapshot images");
    else
        register_images(j->dp, r->json);
    j->done(j->data, err.msg ? &err : NULL);
    err_clear(&err);
    free(j);
}

static int d_snapshot_list(void *cookie, void (*done)(void *data, sbx_err_t *err),
                           void *data, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct snap_job *j = calloc(1, sizeof(*j));
    if (!j)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    *j = (struct snap_job){dp, done, data};
    char *path = snap_images_path(&dp->eng);
    struct dk_req *rq = dkapi_call(&dp->eng, &dp->misc, "GET", path, NULL,
                                   DK_CALL_TIMEOUT_MS, snap_list_done, j);
    free(path);
    if (!rq) {
        free(j);
        return err_make(err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
    }
    return 0;
}

static void snap_delete_done(struct dk_resp *r, void *data)
{
    struct snap_job *j = data;
    sbx_err_t err = {0};
    if (r->status != 200 && r->status != 404)
        dkapi_err(&err, r, "remove the snapshot image");
    j->done(j->data, err.msg ? &err : NULL);
    err_clear(&err);
    free(j);
}

static int d_snapshot_delete(void *cookie, const char *id, json_t *rec,
                             void (*done)(void *data, sbx_err_t *err), void *data,
                             sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    const char *img =
        json_string_value(json_object_get(json_object_get(rec, "data"), "image"));
    if (!img) {
        done(data, NULL);
        return 0;
    }
    struct snap_job *j = calloc(1, sizeof(*j));
    if (!j)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    *j = (struct snap_job){dp, done, data};
    char *ie = dkapi_escape(img);
    /* force: the image has its repo tag besides the id. */
    char *path = dkapi_path(&dp->eng, "/images/%s?force=1", ie);
    free(ie);
    struct dk_req *rq = dkapi_call(&dp->eng, &dp->misc, "DELETE", path, NULL,
                                   DK_CALL_TIMEOUT_MS, snap_delete_done, j);
    free(path);
    if (!rq) {
        free(j);
        return err_make(err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
    }
    return 0;
}

static json_t *d_sb_metadata(void *cookie, struct sandbox *sb)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    json_t *o = json_pack("{s:s}", "engine", dp->eng.host);
    if (!ds)
        return o;
    if (ds->cid[0])
        json_object_set_new(o, "container_id", json_string(ds->cid));
    if (ds->name)
        json_object_set_new(o, "container_name", json_string(ds->name));
    if (ds->opts)
        json_object_set(o, "image", json_object_get(ds->opts, "image"));
    if (ds->image_id)
        json_object_set_new(o, "image_id", json_string(ds->image_id));
    json_object_set_new(o, "exec_mode",
                        json_string(ds->exec_mode ? "docker-exec" : "agent"));
    json_object_set_new(o, "agent_ready", json_boolean(ds->ready && !ds->exec_mode));
    if (!ds->exec_mode)
        json_object_set_new(o, "channel",
                            json_string(ds->dstate == DKD_ON ? "direct" : "attach"));
    json_object_set_new(o, "reconnected", json_boolean(ds->reconnected));
    if (ds->restarts)
        json_object_set_new(o, "restarts", json_integer(ds->restarts));
    if (ds->recreated)
        json_object_set_new(o, "recreated", json_integer(ds->recreated));
    if (ds->pool)
        json_object_set_new(o, "pool", json_string(ds->pool));
    if (ds->warnings)
        json_object_set(o, "warnings", ds->warnings);
    json_t *disk = dks_metadata(ds);
    if (disk)
        json_object_set_new(o, "disk", disk);
    if (ds->ports)
        json_object_set_new(o, "ports", dkn_ports_json(ds));
    return o;
}

void dk_ds_free(struct dk_sb *ds)
{
    dkn_release(ds);
    dkd_close(ds);
    ev_timer_stop(D->loop, &ds->dtimer);
    if (ds->ch_live)
        chan_deinit(&ds->ch);
    json_decref(ds->opts);
    json_decref(ds->base_env);
    json_decref(ds->image_env);
    json_decref(ds->warnings);
    json_decref(ds->pull_last);
    json_decref(ds->hello);
    free(ds->image_id);
    free(ds->name);
    free(ds->pool);
    dks_user_free(ds);
    free(ds);
}

static void d_sb_release(void *cookie, struct sandbox *sb)
{
    struct dk_sb *ds = sb->pdata;
    if (!ds)
        return;
    dkf_release_all(ds);
    dkapi_reqlist_cancel(&ds->reqs);
    dkapi_reqlist_cancel(&ds->snap_reqs);
    dkapi_reqlist_cancel(&ds->disk_reqs);
    dka_close_attach(ds);
    dkn_release(ds);
    ev_timer_stop(D->loop, &ds->hs_timer);
    /* process records were released before us; drop anything left */
    while (ds->procs) {
        struct dk_proc *x = ds->procs;
        ds->procs = x->next;
        if (x->p)
            x->p->pdata = NULL;
        if (ds->exec_mode)
            dkx_release(x);
        obuf_deinit(&x->stdin_buf);
        free(x);
    }
    sb->pdata = NULL;
    ds->sb = NULL;
    if (ds->in_feed) {
        /* inside chan_feed: stop parsing, free when it returns */
        ds->dead = 1;
        if (ds->ch_live)
            chan_close(&ds->ch);
        return;
    }
    if (ds->in_direct) {
        /* inside the direct socket's callback: free from dtimer */
        ds->dead = 1;
        ev_timer_stop(D->loop, &ds->dtimer);
        ev_timer_set(&ds->dtimer, 0., 0.);
        ev_timer_start(D->loop, &ds->dtimer);
        return;
    }
    dk_ds_free(ds);
}

/* ---- adoption after an sbxd restart
 * --------------------------------------------------------- */

void dk_adopt_entry(struct dk_prov *dp, json_t *c);

static void adopt_one(struct dk_prov *dp, json_t *c)
{
    json_t *labels = json_object_get(c, "Labels");
    const char *id = json_string_value(json_object_get(labels, "sbxd.id"));
    const char *own = json_string_value(json_object_get(labels, "sbxd.owner"));
    const char *sock = json_string_value(json_object_get(labels, "sbxd.socket"));
    const char *cs = json_string_value(json_object_get(labels, "sbxd.conf"));
    const char *cr = json_string_value(json_object_get(labels, "sbxd.created"));
    const char *cid = json_string_value(json_object_get(c, "Id"));
    const char *state = json_string_value(json_object_get(c, "State"));
    if (!id || !own || !cid || strlen(id) > 63 || strlen(cid) >= 80)
        return;
    if (sock && strcmp(sock, dklc_label_socket()) != 0)
        return; /* another sbxd's */
    if (sandbox_find_any(id))
        return;
    /* One container backs at most one sandbox, whatever its labels say. */
    for (struct sandbox *o = D->sandboxes; o; o = o->next) {
        struct dk_sb *x = o->pdata;
        if (o->prov->cookie == dp && x && !strcmp(x->cid, cid)) {
            log_warn("docker: container %.12s already backs sandbox %s; not adopting it "
                     "again as %s",
                     cid, o->id, id);
            return;
        }
    }
    json_t *conf = cs ? json_loads(cs, 0, NULL) : NULL;
    if (!json_is_object(conf)) {
        json_decref(conf);
        conf = json_object();
    }
    json_object_set_new(conf, "provider", json_string("docker"));
    json_object_del(conf, "snapshot");
    double created = cr ? atof(cr) : 0;
    /* A label is the container's to say: "inf" or "1e300" must not reach the
     * float-to-integer conversion below (UB). Anything not a plausible epoch
     * second counts as unknown. */
    if (!(created > 0 && created < 1e11))
        created = 0;
    /* The lifetime counts from the original creation. */
    json_int_t life = json_integer_value(json_object_get(conf, "timeout_ms"));
    if (life <= 0)
        /* it lives until destroyed */
        json_object_set_new(conf, "timeout_ms", json_integer(0));
    else if (created > 0) {
        double left_ms = (created + life / 1000.0 - daemon_now()) * 1000.0;
        json_object_set_new(conf, "timeout_ms",
                            json_integer(left_ms > 1 ? (json_int_t)left_ms : 1));
    }
    int running =
        state && (strcmp(state, "running") == 0 || strcmp(state, "paused") == 0);
    struct provider_inst *pi = daemon_provider("docker");
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (!pi || sandbox_adopt(&sb, id, pi, (uid_t)strtoul(own, NULL, 10), conf,
                             running ? SB_RUNNING : SB_STOPPED, &err) < 0) {
        log_warn("docker: cannot adopt container %.12s (%s): %s", cid, id,
                 err.msg ? err.msg : "?");
        err_clear(&err);
        return;
    }
    if (created > 0)
        sb->created_at = created;
    struct dk_sb *ds = dk_ds_new(dp, sb);
    snprintf(ds->cid, sizeof(ds->cid), "%s", cid);
    const char *pool = json_string_value(json_object_get(labels, "sbxd.pool"));
    if (pool && json_object_get(labels, "sbxd.claim"))
        ds->pool = strdup(pool); /* its claim goes with it */
    ds->first_hello = 1;
    ds->reconnected = 1;
    sbx_err_t e2 = {0};
    json_t *opts = NULL;
    if (dkspec_options(&opts, dp->conf, sb->conf, &e2) == 0)
        ds->opts = opts;
    sandbox_reserve_memory(
        sb, running ? (uint64_t)json_integer_value(json_object_get(opts, "memory")) : 0,
        NULL);
    err_clear(&e2);
    if (running) {
        /* Reconnect in the background: attach, PING, adopt the agent's
         * processes. Calls that come meanwhile wait for the agent. */
        ds->why = WHY_RECOVER;
        ds->recovering = 1;
        ds->phase = PH_INSPECT;
        dklc_next(ds);
    }
}

void dk_adopt_entry(struct dk_prov *dp, json_t *c)
{
    adopt_one(dp, c);
}

static void adopt_list_done(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    if (r->status != 200 || !json_is_array(r->json)) {
        log_warn("docker: listing sbxd containers failed: %s",
                 r->errmsg ? r->errmsg : "?");
        dp->adopted_once = 0;
        sandbox_adoption_done("docker");
        return;
    }
    size_t i;
    json_t *c;
    json_array_foreach(r->json, i, c)
        adopt_one(dp, c);
    sandbox_adoption_done("docker"); /* calls waiting for the restart go on */
}

static void snap_boot_done(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    if (r->status == 200 && json_is_array(r->json))
        register_images(dp, r->json);
    else
        log_warn("docker: listing snapshot images failed: %s",
                 r->errmsg ? r->errmsg : "?");
}

static void ensure_holder(struct dk_prov *dp);

/* No engine to list: nothing to wait for after a restart (issue 16). What
 * it holds is adopted when it comes up, as before. */
static void engine_down(struct dk_engine *e, void *data)
{
    sandbox_adoption_done("docker");
}

static void engine_up(struct dk_engine *e, void *data)
{
    struct dk_prov *dp = data;
    ensure_holder(dp);
    dks_engine_up(dp);
    dkp_engine_up(dp);
    if (dp->adopted_once)
        return;
    dp->adopted_once = 1;
    /* The snapshots this sbxd made before a restart are usable again. */
    char *sp = snap_images_path(e);
    dkapi_call(e, &dp->misc, "GET", sp, NULL, DK_CALL_TIMEOUT_MS, snap_boot_done, dp);
    free(sp);
    char *fe = dkapi_escape("{\"label\":[\"sbxd.id\"]}");
    char *path = dkapi_path(e, "/containers/json?all=1&filters=%s", fe);
    free(fe);
    if (!dkapi_call(e, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS, adopt_list_done,
                    dp)) {
        dp->adopted_once = 0;
        sandbox_adoption_done("docker");
    }
    free(path);
}

/* ---- provider
 * ----------------------------------------------------------------------------------- */

static char *find_agent(json_t *conf)
{
    const char *cfg = json_string_value(json_object_get(conf, "agent_path"));
    if (cfg)
        return strdup(cfg);
    char *dir = strdup(D->exe_path ? D->exe_path : "."), *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    const char *cands[] = {"sbx-init", "../libexec/sbxd/sbx-init"};
    char *found = NULL;
    for (size_t i = 0; i < 2 && !found; i++) {
        char *p = NULL;
        if (asprintf(&p, "%s/%s", slash ? dir : ".", cands[i]) < 0)
            break;
        if (access(p, R_OK) == 0)
            found = p;
        else
            free(p);
    }
    free(dir);
    return found;
}

/* Reads the agent once at load and wraps it in the tar we upload. */
static void load_agent(struct dk_prov *dp)
{
    dp->agent_path = find_agent(dp->conf);
    if (!dp->agent_path) {
        snprintf(
            dp->agent_err, sizeof(dp->agent_err),
            "the agent sbx-init was not found (beside sbxd or in ../libexec/sbxd; set "
            "providers.docker.agent_path)");
        return;
    }
    int fd = open(dp->agent_path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        st.st_size > (64 << 20)) {
        snprintf(dp->agent_err, sizeof(dp->agent_err), "the agent %s cannot be read: %s",
                 dp->agent_path,
                 fd < 0 ? strerror(errno) : "not a regular file of sane size");
        if (fd >= 0)
            close(fd);
        return;
    }
    uint8_t *bin = malloc((size_t)st.st_size);
    size_t got = 0;
    while (bin && got < (size_t)st.st_size) {
        ssize_t n = read(fd, bin + got, (size_t)st.st_size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    if (!bin || got != (size_t)st.st_size ||
        dkspec_tar_one(&dp->agent_tar, &dp->agent_tar_len, "sbx-init", 0755, bin, got) <
            0 ||
        dkspec_tar_agent_tree(&dp->agent_tree, &dp->agent_tree_len, bin, got) < 0) {
        snprintf(dp->agent_err, sizeof(dp->agent_err), "the agent %s cannot be read",
                 dp->agent_path);
        free(dp->agent_tar);
        dp->agent_tar = NULL;
    } else {
        /* FNV-1a: names the holder of this agent version on remote engines. */
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < got; i++)
            h = (h ^ bin[i]) * 1099511628211ULL;
        snprintf(dp->agent_hash, sizeof(dp->agent_hash), "%016llx",
                 (unsigned long long)h);
        /* The bind mount names the real file, not a symlink to it. */
        char real[PATH_MAX];
        if (realpath(dp->agent_path, real)) {
            free(dp->agent_path);
            dp->agent_path = strdup(real);
        }
    }
    free(bin);
}

/* ---- the agent on remote engines: one upload into a holder's volume -------------- */

static void holder_created(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    dp->holder_busy = 0;
    if (r->status != 201 && r->status != 409) {
        log_warn("docker: creating the agent holder failed (%s); each create uploads the "
                 "agent",
                 r->errmsg ? r->errmsg : "?");
        return;
    }
    snprintf(dp->agent_holder, sizeof(dp->agent_holder), "sbxd-agent-%s", dp->agent_hash);
    log_info("docker: the agent is shared read-only from %s", dp->agent_holder);
}

static void holder_imported(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    if (r->status != 200 || (r->body && memmem(r->body, r->len, "\"error\"", 7))) {
        dp->holder_busy = 0;
        log_warn("docker: importing the agent image failed (%s); each create uploads the "
                 "agent",
                 r->errmsg ? r->errmsg : "?");
        return;
    }
    char name[64], image[64];
    snprintf(name, sizeof(name), "sbxd-agent-%s", dp->agent_hash);
    snprintf(image, sizeof(image), "sbxd-agent:%s", dp->agent_hash);
    /* Never started: its volume (filled from the image at create) is all it is. */
    json_t *body =
        json_pack("{s:s, s:[s], s:{s:{}}, s:{s:s}, s:{s:s}}", "Image", image, "Cmd",
                  DK_AGENT_IN, "Volumes", DK_AGENT_DIR, "Labels", "sbxd.agent",
                  dp->agent_hash, "HostConfig", "NetworkMode", "none");
    char *path = dkapi_path(&dp->eng, "/containers/create?name=%s", name);
    if (!dkapi_call(&dp->eng, &dp->misc, "POST", path, body, DK_CALL_TIMEOUT_MS,
                    holder_created, dp))
        dp->holder_busy = 0;
    free(path);
    json_decref(body);
}

static void holder_inspected(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    if (r->status == 200) {
        dp->holder_busy = 0;
        snprintf(dp->agent_holder, sizeof(dp->agent_holder), "sbxd-agent-%s",
                 dp->agent_hash);
        return;
    }
    if (r->status != 404) {
        dp->holder_busy = 0;
        return;
    }
    char *path = dkapi_path(&dp->eng, "/images/create?fromSrc=-&repo=sbxd-agent&tag=%s",
                            dp->agent_hash);
    if (!dkapi_call_raw(&dp->eng, &dp->misc, "POST", path, "application/x-tar",
                        dp->agent_tree, dp->agent_tree_len, DK_CALL_TIMEOUT_MS,
                        holder_imported, dp))
        dp->holder_busy = 0;
    free(path);
}

static void ensure_holder(struct dk_prov *dp)
{
    if (dp->agent_bind || !dp->agent_tree || dp->agent_holder[0] || dp->holder_busy ||
        !dp->agent_share)
        return;
    dp->holder_busy = 1;
    char *path = dkapi_path(&dp->eng, "/containers/sbxd-agent-%s/json", dp->agent_hash);
    if (!dkapi_call(&dp->eng, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                    holder_inspected, dp))
        dp->holder_busy = 0;
    free(path);
}

static void d_unload(void *cookie);

static int d_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    struct dk_prov *dp = calloc(1, sizeof(*dp));
    if (!dp)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    dp->conf = conf ? json_deep_copy(conf) : json_object();
    dks_defaults(dp->conf);
    const char *mode = json_string_value(json_object_get(conf, "exec_mode"));
    if (mode && strcmp(mode, "agent") != 0 && strcmp(mode, "docker-exec") != 0) {
        err_make(err, SBX_E_UNAVAILABLE,
                 "docker: exec_mode must be agent or docker-exec, not %s", mode);
        json_decref(dp->conf);
        free(dp);
        return -1;
    }
    dp->exec_mode = mode && strcmp(mode, "docker-exec") == 0;
    const char *de = json_string_value(json_object_get(conf, "disk_enforcement"));
    if (de && strcmp(de, "auto") && strcmp(de, "quota") && strcmp(de, "measured")) {
        err_make(err, SBX_E_UNAVAILABLE,
                 "docker: disk_enforcement must be auto, quota or measured, not %s", de);
        json_decref(dp->conf);
        free(dp);
        return -1;
    }
    json_t *dc = json_object_get(conf, "direct_channel");
    dp->direct = !json_is_false(dc);
    if (policy_expose_conf(conf, err) < 0 || /* net18 */
        policy_parse(&dp->policy, json_object_get(conf, "policy"), err) < 0) {
        json_decref(dp->conf);
        free(dp);
        return -1;
    }
    if (dkapi_engine_init(&dp->eng, dp->conf, err) < 0) {
        policy_free(dp->policy);
        json_decref(dp->conf);
        free(dp);
        return -1;
    }
    dp->eng.misc = &dp->misc;
    dp->adopt_entry = dk_adopt_entry;
    dp->eng.on_up = engine_up;
    dp->eng.on_down = engine_down;
    dp->eng.on_up_data = dp;
    load_agent(dp);
    /* agent_mount: auto (a read-only bind on a local engine, one shared
     * upload on a remote one) or upload (into every container, as before). */
    const char *am = json_string_value(json_object_get(conf, "agent_mount"));
    if (am && strcmp(am, "auto") != 0 && strcmp(am, "upload") != 0) {
        err_make(err, SBX_E_UNAVAILABLE,
                 "docker: agent_mount must be auto or upload, not %s", am);
        d_unload(dp);
        return -1;
    }
    dp->agent_share = !am || strcmp(am, "auto") == 0;
    dp->agent_bind =
        dp->agent_share && dp->agent_tar && dp->eng.unix_path && dp->agent_path[0] == '/';
    if (dkp_load(dp, dp->conf, err) < 0) {
        d_unload(dp);
        return -1;
    }
    if (!dp->agent_tar)
        log_warn("docker: %s%s", dp->agent_err,
                 dp->exec_mode ? "" : "; sandboxes in agent mode cannot be created");
    dkapi_engine_start(&dp->eng);
    *cookie = dp;
    return 0;
}

static void d_unload(void *cookie)
{
    struct dk_prov *dp = cookie;
    dkapi_reqlist_cancel(&dp->misc);
    dkapi_engine_deinit(&dp->eng);
    dkp_unload(dp);
    dks_unload(dp);
    policy_free(dp->policy);
    json_decref(dp->conf);
    free(dp->agent_path);
    free(dp->agent_tar);
    free(dp->agent_tree);
    free(dp);
}

static int d_available(void *cookie, const char **reason)
{
    struct dk_prov *dp = cookie;
    if (dp->eng.up)
        return 1;
    *reason = dp->eng.reason;
    return 0;
}

static json_t *d_info(void *cookie)
{
    struct dk_prov *dp = cookie;
    json_t *o = json_pack("{s:s, s:s, s:b, s:b}", "host", dp->eng.host, "exec_mode",
                          dp->exec_mode ? "docker-exec" : "agent", "tls", dp->eng.tls,
                          "direct_channel", dp->direct && dp->eng.unix_path);
    if (dp->eng.version[0])
        json_object_set_new(o, "api_version", json_string(dp->eng.version));
    if (dp->eng.engine_version[0])
        json_object_set_new(o, "engine_version", json_string(dp->eng.engine_version));
    json_object_set_new(o, "agent",
                        dp->agent_tar ? json_string(dp->agent_path) : json_null());
    json_object_set_new(o, "agent_mount",
                        json_string(dp->agent_bind        ? "bind"
                                    : dp->agent_holder[0] ? "shared"
                                                          : "upload"));
    if (!dp->agent_tar)
        json_object_set_new(o, "agent_error", json_string(dp->agent_err));
    /* What a create without image runs (sbxctl mcp names it to the model). */
    const char *img = json_string_value(json_object_get(dp->conf, "image"));
    json_object_set_new(o, "image", json_string(img && img[0] ? img : DK_DEFAULT_IMAGE));
    json_t *pools = dkp_info(dp);
    if (pools)
        json_object_set_new(o, "pools", pools);
    json_object_set_new(o, "disk", dks_info(dp));
    return o;
}

static const struct cfg_key docker_keys[] = {
    {"host", CFG_STR},
    {"api_version", CFG_STR},
    {"tls_ca", CFG_STR},
    {"tls_cert", CFG_STR},
    {"tls_key", CFG_STR},
    {"tls_verify", CFG_BOOL},
    {"exec_mode", CFG_STR},
    {"direct_channel", CFG_BOOL},
    {"agent_path", CFG_STR},
    {"image", CFG_STR},
    {"command", CFG_ANY},
    {"network", CFG_STR},
    {"privileged", CFG_BOOL},
    {"memory", CFG_STR},
    {"memory_swap", CFG_STR},
    {"cpu_shares", CFG_INT},
    {"cpu_quota", CFG_INT},
    {"cpu_period", CFG_INT},
    {"pids_limit", CFG_INT},
    {"readonly_rootfs", CFG_BOOL},
    {"cap_drop", CFG_LIST},
    {"cap_add", CFG_LIST},
    {"security_opt", CFG_LIST},
    {"ulimits", CFG_ANY},
    {"tmpfs", CFG_ANY},
    {"working_dir", CFG_STR},
    {"user", CFG_STR},
    {"labels", CFG_MAP},
    {"volumes", CFG_ANY},
    {"command_timeout_ms", CFG_INT},
    {"runtime", CFG_STR},
    {"policy", CFG_ANY},
    {"agent_mount", CFG_STR},
    {"pools", CFG_ANY},
    /* secdock (issue 16): disk limits */
    {"disk", CFG_STR},
    {"disk_per_uid", CFG_STR},
    {"disk_check_ms", CFG_INT},
    {"disk_enforcement", CFG_STR},
    /* issue 18: sandbox.expose (docker_net.c) */
    {"expose", CFG_BOOL},
    {"expose_max_ports", CFG_INT},
    {"expose_max_connections", CFG_INT},
    /* net18: addresses, host ports, bytes (policy_expose.c); egress lookups */
    {"expose_addresses", CFG_LIST},
    {"expose_host_ports", CFG_ANY},
    {"expose_max_bytes", CFG_ANY},
    {"egress", CFG_ANY}, /* {allow: [patterns], allow_private_addresses: false} */
    /* issue 17 (ts17): sandbox.mount (docker_mount.c) */
    {"mount", CFG_BOOL},
    {"mount_max", CFG_INT},
    {NULL, 0},
};

const struct sbx_provider sbx_provider_docker = {
    .takes_image = 1,
    .name = "docker",
    .config_keys = docker_keys,
    .shell_commands = 1,
    .default_cwd = "/workspace",
    .enabled_by_default = 1,
    .no_default_lifetime = 1,
    .restart_on_call = 1,
    .load = d_load,
    .unload = d_unload,
    .shutdown_drain = dkp_shutdown_drain, /* docker_pool.c: the warm pools go */
    .available = d_available,
    .info = d_info,
    .sb_start = d_sb_start,
    .sb_stop = d_sb_stop,
    .sb_destroy = d_sb_destroy,
    .sb_snapshot = d_sb_snapshot,
    .sb_metadata = d_sb_metadata,
    .sb_instructions = sandbox_shell_instructions,
    .sb_release = d_sb_release,
    .adopts_at_load = 1,
    .snapshot_list = d_snapshot_list,
    .snapshot_delete = d_snapshot_delete,
    .proc_spawn = d_proc_spawn,
    .proc_write = d_proc_write,
    .proc_close_stdin = d_proc_close_stdin,
    .proc_kill = d_proc_kill,
    .proc_resume = d_proc_resume,
    .proc_tool_result = NULL,
    .proc_release = d_proc_release,
    .fs_call = dkf_call,
    .fs_release = dkf_release,
    .fs_call_stopped = dkar_call_stopped, /* docker_archive.c: the engine's archives */
    .fs_release_stopped = dkar_release_stopped,
    .fs_tar = 1,
    .proc_resize = dkpty_proc_resize,
    .sb_stats = dkstats_sb_stats,
    .sb_expose = dkn_sb_expose,
    .sb_mount = dkm_mount, /* docker_mount.c */
    .sb_unmount = dkm_unmount,
    .sb_unexpose = dkn_sb_unexpose,
    .sb_expose_req = dkn_sb_expose_req,
};
