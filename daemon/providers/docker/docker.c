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
 * The lifecycle runs as a small machine (enum dk_phase) whose steps are
 * engine calls; each answer moves it on. It serves the core's start op and
 * our own recovery when the attach stream ends while the sandbox runs (the
 * container died, was removed, or the engine went away): recovery inspects
 * the container, re-attaches to a live one, restarts a dead one once when a
 * process had been sent but never started (that process is then spawned
 * again and its result says "isolate_reset"), and otherwise reports the
 * sandbox lost with the reason.
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
#include "docker_archive.h"
#include "docker_int.h"
#include "docker_mount.h"
#include "log.h"
#include "process.h"
#include "provider.h"
#include "sandbox.h"
#include "sbx_proto.h"
#include "policy.h"
#include "snapshot.h"
#include "terminal.h"
#include "xalloc.h"

#define STDIN_LIMIT (16u * 1024 * 1024)
#define STOP_WAIT_S 3
#define SNAP_REPO "sbxd-snapshot"

static const char *sb_label_socket(void)
{
    return D->cfg.socket_path ? D->cfg.socket_path : "";
}

/* ---- small helpers --------------------------------------------------------------------
 */

static void progress(struct dk_sb *ds, const char *stage, const char *msg)
{
    sandbox_progress(ds->sb, json_pack("{s:s, s:s}", "stage", stage, "message", msg));
}

json_t *dk_spawn_env(struct dk_sb *ds, struct process *p)
{
    json_t *env = ds->base_env ? json_deep_copy(ds->base_env) : json_object();
    /* The container's env holds the create-time env: the sandbox's layers
     * (create env, set_env) come back from the spec, so a key they set and
     * a null removed is absent from the spec and must go here too. */
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(ds->sb->conf, "env"), k, v)
        json_object_del(env, k);
    json_object_foreach(ds->sb->runtime_env, k, v)
        json_object_del(env, k);
    json_t *se = json_object_get(p->spec, "env");
    if (json_is_object(se))
        json_object_update(env, se);
    return env;
}

const char *dk_spawn_cwd(struct dk_sb *ds, struct process *p)
{
    const char *c = json_string_value(json_object_get(p->spec, "cwd"));
    if (c)
        return c;
    c = json_string_value(json_object_get(ds->opts, "working_dir"));
    return c ? c : "/workspace";
}

/* ---- lifecycle steps
 * -------------------------------------------------------------------- */

static void step_error(struct dk_sb *ds, struct dk_resp *r, const char *what)
{
    sbx_err_t err = {0};
    dk_err(&err, r, what);
    dk_lc_fail(ds, &err);
}

static void cleanup_done(struct dk_resp *r, void *data);
static json_t *create_labels(struct dk_sb *ds);

static void renamed(struct dk_resp *r, void *data)
{
    if (r->status >= 300)
        log_warn("docker: renaming a pooled container failed: %s",
                 r->errmsg ? r->errmsg : "?");
}

/* A pooled container's labels were set before it had an owner, and labels
 * cannot change. Its owner, id and config go into a claim that only sbxd
 * writes: a volume sbxd-claim-<container id> whose labels say them (a
 * restarted sbxd adopts the container from the claim, never from its name
 * or anything inside it; docker_pool.c). The rename to sbxp.<owner>.<id> is
 * for people reading `docker ps` only. */
static void pool_record(struct dk_sb *ds)
{
    ds->pool_record = 0;
    free(ds->name);
    ds->name = xasprintf("sbxp.%u.%s", (unsigned)ds->sb->owner, ds->sb->id);
    json_t *labels = create_labels(ds);
    char own[32];
    snprintf(own, sizeof(own), "%u", (unsigned)ds->sb->owner);
    json_object_set_new(labels, "sbxd.claim", json_string(ds->cid));
    json_object_set_new(labels, "sbxd.id", json_string(ds->sb->id));
    json_object_set_new(labels, "sbxd.owner", json_string(own));
    json_object_set_new(labels, "sbxd.exec_mode", json_string("agent"));
    char vname[120];
    snprintf(vname, sizeof(vname), "%s%s", DK_CLAIM_PREFIX, ds->cid);
    json_t *body = json_pack("{s:s, s:o}", "Name", vname, "Labels", labels);
    char *vp = dk_path(&ds->dp->eng, "/volumes/create");
    dk_call(&ds->dp->eng, &ds->dp->misc, "POST", vp, body, DK_CALL_TIMEOUT_MS, renamed,
            NULL);
    free(vp);
    json_decref(body);
    char *ne = dk_escape(ds->name);
    char *path = dk_path(&ds->dp->eng, "/containers/%s/rename?name=%s", ds->cid, ne);
    dk_call(&ds->dp->eng, &ds->dp->misc, "POST", path, NULL, DK_CALL_TIMEOUT_MS, renamed,
            NULL);
    free(ne);
    free(path);
}

static void claim_removed(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status >= 300 && r->status != 404)
        log_warn("docker: removing the pool claim of %.12s: %s (the next start removes "
                 "it)",
                 ds->cid, r->errmsg ? r->errmsg : "?");
    ds->cid[0] = '\0';
    sandbox_op_done(ds->sb, NULL, NULL); /* frees sb and ds */
}

/* The claim of a pooled container goes with it, before the destroy answers;
 * 0 when the request cannot start (an orphan claim is removed at the next
 * start). */
static int claim_remove(struct dk_sb *ds)
{
    char *path = dk_path(&ds->dp->eng, "/volumes/%s%s", DK_CLAIM_PREFIX, ds->cid);
    struct dk_req *rq = dk_call(&ds->dp->eng, &ds->reqs, "DELETE", path, NULL,
                                DK_CALL_TIMEOUT_MS, claim_removed, ds);
    free(path);
    return rq != NULL;
}

/* A started container of a warm pool with the same options: the start is
 * answered now; the attach and handshake follow in the background (calls
 * meanwhile wait for the agent, as after an adoption). */
static int take_pooled(struct dk_sb *ds)
{
    json_t *env = NULL;
    /* a user the image must resolve is checked between create and start: a
     * started pool container has no such moment */
    if (dks_user_needed(ds))
        return 0;
    const char *pool = dkp_take(ds->dp, ds->opts, ds->cid, sizeof(ds->cid), &env);
    if (!pool)
        return 0;
    free(ds->pool);
    ds->pool = strdup(pool);
    json_decref(ds->base_env);
    ds->base_env = env ? env : json_object();
    log_info("docker %s: container %.12s from pool %s", ds->sb->id, ds->cid, pool);
    /* recorded (renamed, config file) once the agent answers: the engine
     * serves the attach first */
    ds->pool_record = 1;
    ds->running = 1;
    ds->need_start = 0;
    ds->why = WHY_RECOVER;
    ds->recovering = 1;
    ds->phase = PH_ATTACH;
    struct sandbox *sb = ds->sb;
    sandbox_op_done(sb, NULL, NULL);
    /* ds outlives this call chain (sandbox frees are deferred); a destroy
     * asked for meanwhile has taken the machine over. */
    if (sb->pdata == ds && ds->phase == PH_ATTACH && ds->why == WHY_RECOVER)
        dk_lc_next(ds);
    return 1;
}

static void lookup_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 200 || !json_is_array(r->json)) {
        step_error(ds, r, "list containers");
        return;
    }
    /* Only a container of this sbxd is this sandbox's. Another sbxd on the
     * same engine (another socket) may hold a sandbox of the same id: taking
     * its container would attach two daemons to one agent, whose frames then
     * interleave on its stdin and each of whose PINGs takes the agent from
     * the other. Adoption and snapshots skip them the same way. */
    json_t *c = NULL, *x;
    size_t i;
    json_array_foreach(r->json, i, x) {
        const char *sock = json_string_value(
            json_object_get(json_object_get(x, "Labels"), "sbxd.socket"));
        if (!sock || !strcmp(sock, sb_label_socket())) {
            c = x;
            break;
        }
    }
    const char *id = json_string_value(json_object_get(c, "Id"));
    const char *own =
        json_string_value(json_object_get(json_object_get(c, "Labels"), "sbxd.owner"));
    if (id && (!own || strtoul(own, NULL, 10) != (unsigned long)ds->sb->owner)) {
        sbx_err_t err = {0};
        err_make_data(
            &err, SBX_E_PERMISSION, json_pack("{s:s}", "sandbox", ds->sb->id),
            "docker: container %.12s labelled sbxd.id=%s belongs to another user", id,
            ds->sb->id);
        dk_lc_fail(ds, &err);
        return;
    }
    if (id) {
        snprintf(ds->cid, sizeof(ds->cid), "%s", id);
        ds->reconnected = 1;
        ds->first_hello = 1;
        ds->phase = PH_INSPECT;
    } else if (!ds->sb->snapshot && !ds->exec_mode && take_pooled(ds)) {
        return;
    } else {
        ds->phase = PH_IMAGE;
    }
    dk_lc_next(ds);
}

static int has_unstarted(struct dk_sb *ds)
{
    for (struct dk_proc *x = ds->procs; x; x = x->next)
        if (!x->exited && x->spawned && !x->pc.started && !x->retried && x->p &&
            x->p->state == P_RUNNING)
            return 1;
    return 0;
}

static void inspect_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status == 404) {
        ds->cid[0] = '\0';
        if (ds->why == WHY_RECOVER) {
            /* Its file system is gone: the sandbox is in error until the next
             * call or start makes a new container from its config. */
            sbx_err_t err = {0};
            err_make_data(&err, SBX_E_PROVIDER,
                          json_pack("{s:s, s:s, s:i}", "provider", "docker", "message",
                                    "container removed", "status", 404),
                          "the container was removed behind sbxd's back");
            dk_lc_fail(ds, &err);
            return;
        }
        if (ds->sb->started_once) {
            log_warn("docker %s: the container was removed; creating a new one from the "
                     "sandbox's config",
                     ds->sb->id);
            progress(ds, "recreate", "the container was removed; creating a new one");
            if (!ds->warnings)
                ds->warnings = json_array();
            json_array_append_new(
                ds->warnings, json_string("the container was removed behind sbxd's back; "
                                          "a new one was made from the sandbox's config "
                                          "(its files are gone)"));
            ds->reconnected = 0;
            ds->recreated++;
        }
        ds->phase = PH_IMAGE;
        dk_lc_next(ds);
        return;
    }
    if (r->status != 200 || !json_is_object(r->json)) {
        step_error(ds, r, "inspect container");
        return;
    }
    json_t *st = json_object_get(r->json, "State");
    json_t *cfg = json_object_get(r->json, "Config");
    ds->running = json_is_true(json_object_get(st, "Running"));
    ds->paused = json_is_true(json_object_get(st, "Paused"));
    json_decref(ds->base_env);
    ds->base_env = dk_env_to_obj(json_object_get(cfg, "Env"));
    if (!ds->name) {
        const char *nm = json_string_value(json_object_get(r->json, "Name"));
        if (nm)
            ds->name = strdup(nm[0] == '/' ? nm + 1 : nm);
    }
    /* A container made without the agent runs in exec mode. */
    json_t *ep = json_object_get(cfg, "Entrypoint");
    const char *e0 = json_string_value(json_array_get(ep, 0));
    const char *lm = json_string_value(
        json_object_get(json_object_get(cfg, "Labels"), "sbxd.exec_mode"));
    if (lm && strcmp(lm, "docker-exec") == 0)
        ds->exec_mode = 1;
    else if (!e0 || strcmp(e0, DK_AGENT_IN) != 0)
        ds->exec_mode = 1;
    else
        ds->exec_mode = 0;
    if (ds->reconnected && ds->why == WHY_START && !ds->warnings && ds->opts)
        ds->warnings = dk_warnings(ds->opts, r->json);
    const char *sstat = json_string_value(json_object_get(st, "Status"));
    if (ds->why == WHY_RECOVER && sstat &&
        (strcmp(sstat, "removing") == 0 || strcmp(sstat, "dead") == 0)) {
        sbx_err_t err = {0};
        err_make(&err, SBX_E_PROVIDER,
                 "the container was removed behind sbxd's back (%s)", sstat);
        dk_lc_fail(ds, &err);
        return;
    }
    if (ds->why == WHY_RECOVER && !ds->running) {
        char why[300];
        json_t *code = json_object_get(st, "ExitCode");
        snprintf(why, sizeof(why),
                 "the container stopped behind sbxd's back (exit code %lld%s%s%s)",
                 (long long)json_integer_value(code),
                 json_is_true(json_object_get(st, "OOMKilled")) ? ", out of memory" : "",
                 json_string_value(json_object_get(st, "Error")) &&
                         json_string_value(json_object_get(st, "Error"))[0]
                     ? ": "
                     : "",
                 json_string_value(json_object_get(st, "Error"))
                     ? json_string_value(json_object_get(st, "Error"))
                     : "");
        if (has_unstarted(ds) && ds->restarts < 3 && !ds->exec_mode) {
            ds->restarts++;
            log_warn("docker %s: %s; restarting it to retry a call", ds->sb->id, why);
            progress(ds, "restart",
                     "the container died; restarting it to retry the call");
        } else {
            sbx_err_t err = {0};
            err_make(&err, SBX_E_PROVIDER, "%s", why);
            dk_lc_fail(ds, &err);
            return;
        }
    }
    if (ds->paused) {
        ds->phase = PH_UNPAUSE;
    } else if (ds->exec_mode) {
        ds->need_start = !ds->running;
        ds->phase = ds->running ? PH_IDLE : PH_START;
        if (ds->running) {
            dk_lc_ok(ds);
            return;
        }
    } else {
        ds->need_start = !ds->running;
        ds->phase = PH_ATTACH;
    }
    dk_lc_next(ds);
}

static void image_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status == 404) {
        if (ds->sb->snapshot) {
            sbx_err_t err = {0};
            err_make_data(&err, SBX_E_PROVIDER,
                          json_pack("{s:s, s:s, s:i}", "provider", "docker", "message",
                                    "snapshot image not found", "status", 404),
                          "docker: the snapshot's image %s is gone",
                          ds->image_id ? ds->image_id : "?");
            dk_lc_fail(ds, &err);
            return;
        }
        if (ds->pull_t < 0) { /* pulled already and still missing */
            step_error(ds, r, "image after pull");
            return;
        }
        ds->phase = PH_PULL;
        dk_lc_next(ds);
        return;
    }
    if (r->status != 200 || !json_is_object(r->json)) {
        step_error(ds, r, "inspect image");
        return;
    }
    /* A snapshot image holds its owner's files and env: only they (or root)
     * may start from it, whichever name it is reached by. */
    json_t *il = json_object_get(json_object_get(r->json, "Config"), "Labels");
    const char *iown = json_string_value(json_object_get(il, "sbxd.owner"));
    if (json_object_get(il, "sbxd.snapshot") && ds->sb->owner != 0 &&
        (!iown || strtoul(iown, NULL, 10) != (unsigned long)ds->sb->owner)) {
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_PERMISSION, json_pack("{s:s}", "param", "image"),
                      "docker: image %s is another user's snapshot",
                      json_string_value(json_object_get(ds->opts, "image")));
        dk_lc_fail(ds, &err);
        return;
    }
    json_decref(ds->image_env);
    ds->image_env =
        dk_env_to_obj(json_object_get(json_object_get(r->json, "Config"), "Env"));
    const char *id = json_string_value(json_object_get(r->json, "Id"));
    if (id && !ds->image_id)
        ds->image_id = strdup(id);
    ds->phase = PH_CREATE;
    dk_lc_next(ds);
}

static int pull_line(const char *line, size_t len, void *data)
{
    struct dk_sb *ds = data;
    json_t *v = json_loadb(line, len, 0, NULL);
    if (!json_is_object(v)) {
        json_decref(v);
        return 0;
    }
    const char *e = json_string_value(json_object_get(v, "error"));
    if (!e)
        e = json_string_value(
            json_object_get(json_object_get(v, "errorDetail"), "message"));
    /* A pull refused before it streams is one {"message": ...}: the engine's
     * own words, not "HTTP status 500". */
    if (!e)
        e = json_string_value(json_object_get(v, "message"));
    if (e) {
        json_decref(ds->pull_last);
        ds->pull_last = json_pack("{s:s}", "error", e);
        json_decref(v);
        return 0;
    }
    const char *status = json_string_value(json_object_get(v, "status"));
    const char *id = json_string_value(json_object_get(v, "id"));
    json_t *pd = json_object_get(v, "progressDetail");
    double now = ev_now(D->loop);
    int has_num = json_is_integer(json_object_get(pd, "total"));
    /* Throttled: byte counts at most every 200 ms, status changes always. */
    if (status && (!has_num || now - ds->pull_t >= 0.2)) {
        ds->pull_t = now;
        char msg[300];
        snprintf(msg, sizeof(msg), "%s%s%s", id ? id : "", id ? ": " : "", status);
        json_t *n = json_pack("{s:s, s:s}", "stage", "pull", "message", msg);
        if (has_num) {
            json_object_set(n, "current", json_object_get(pd, "current"));
            json_object_set(n, "total", json_object_get(pd, "total"));
        }
        sandbox_progress(ds->sb, n);
    }
    json_decref(v);
    return 0;
}

static void pull_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    const char *e = json_string_value(json_object_get(ds->pull_last, "error"));
    if (r->status != 200 || e) {
        char what[300];
        snprintf(what, sizeof(what), "pull %s",
                 json_string_value(json_object_get(ds->opts, "image")));
        struct dk_resp r2 = *r;
        if (e) {
            if (r2.status == 200)
                r2.status = 404;
            r2.errmsg = e;
        }
        json_t *keep = ds->pull_last;
        ds->pull_last = NULL;
        step_error(ds, &r2, what);
        json_decref(keep);
        return;
    }
    json_decref(ds->pull_last);
    ds->pull_last = NULL;
    ds->pull_t = -1; /* pulled: a second 404 is an error */
    progress(ds, "pull", "image pulled");
    ds->phase = PH_IMAGE;
    dk_lc_next(ds);
}

/* The container name sbx-<id> is another's (a second sbxd on the engine with
 * a sandbox of the same id): this sbxd's own name for it, the same on every
 * create, sbx-<id>-<hash of our socket>. Names are for people reading
 * `docker ps`; sbxd finds its containers by label. 1 when it tries again. */
static int name_taken(struct dk_sb *ds, struct dk_resp *r)
{
    const char *want = dk_opt_str(ds->opts, "name");
    char *dflt = dk_name(NULL, ds->sb->id);
    int retry = r->status == 409 && r->errmsg && strstr(r->errmsg, "already in use") &&
                (!want || !want[0]) && ds->name && !strcmp(ds->name, dflt);
    free(dflt);
    if (!retry)
        return 0;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = sb_label_socket(); *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    char *n = xasprintf("%s-%08x", ds->name, (unsigned)h);
    free(ds->name);
    ds->name = n;
    ds->phase = PH_CREATE;
    dk_lc_next(ds);
    return 1;
}

static void create_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 201 || !json_string_value(json_object_get(r->json, "Id"))) {
        if (dks_create_failed(ds, r) || name_taken(ds, r))
            return;
        step_error(ds, r, "create container");
        return;
    }
    snprintf(ds->cid, sizeof(ds->cid), "%s",
             json_string_value(json_object_get(r->json, "Id")));
    json_t *w = json_object_get(r->json, "Warnings");
    size_t i;
    json_t *x;
    json_array_foreach(w, i, x) {
        if (!json_is_string(x))
            continue;
        if (!ds->warnings)
            ds->warnings = json_array();
        json_array_append(ds->warnings, x);
    }
    /* The container's env is the image's with ours over it. */
    json_decref(ds->base_env);
    ds->base_env = ds->image_env ? json_deep_copy(ds->image_env) : json_object();
    json_object_update(ds->base_env, json_object_get(ds->opts, "env"));
    ds->running = 0;
    ds->need_start = 1;
    if (ds->agent_mounted)
        ds->phase = ds->exec_mode ? PH_START : PH_ATTACH; /* the agent is mounted */
    else
        ds->phase = ds->dp->agent_tar ? PH_UPLOAD : PH_START;
    if (ds->user_check) {
        /* who runs is decided by the image's files: read them before a start */
        ds->user_then = ds->phase;
        ds->user_step = 0;
        ds->phase = PH_USER;
    }
    dk_lc_next(ds);
}

static void upload_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 200) {
        step_error(ds, r, "upload the agent");
        return;
    }
    ds->phase = ds->exec_mode ? PH_START : PH_ATTACH;
    dk_lc_next(ds);
}

static void unpause_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 204 && r->status != 304) {
        step_error(ds, r, "unpause container");
        return;
    }
    ds->paused = 0;
    ds->need_start = !ds->running;
    ds->phase = ds->exec_mode ? (ds->running ? PH_IDLE : PH_START) : PH_ATTACH;
    if (ds->phase == PH_IDLE) {
        dk_lc_ok(ds);
        return;
    }
    dk_lc_next(ds);
}

static void start_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 204 && r->status != 304) {
        step_error(ds, r, "start container");
        return;
    }
    ds->running = 1;
    ds->need_start = 0;
    if (ds->exec_mode) {
        ds->phase = PH_IDLE;
        ds->ready = 1;
        dk_lc_ok(ds);
        return;
    }
    /* The attach made before the start may have ended meanwhile: again. */
    ds->phase = ds->att ? PH_HANDSHAKE : PH_ATTACH;
    dk_lc_next(ds);
}

static json_t *create_labels(struct dk_sb *ds)
{
    json_t *conf = json_deep_copy(ds->sb->conf);
    json_object_del(conf, "snapshot");
    char *cs = json_dumps(conf, JSON_COMPACT);
    json_decref(conf);
    char created[64];
    snprintf(created, sizeof(created), "%.3f", ds->sb->created_at);
    json_t *l = json_pack("{s:s, s:s, s:s, s:s}", "sbxd.socket", sb_label_socket(),
                          "sbxd.conf", cs ? cs : "{}", "sbxd.created", created,
                          "sbxd.exec_mode", ds->exec_mode ? "docker-exec" : "agent");
    free(cs);
    return l;
}

/* The agent reaches the container without an upload: on a local engine the
 * installed sbx-init is bind-mounted read-only (container root cannot
 * replace it: the mount is read-only and remounting needs CAP_SYS_ADMIN);
 * on a remote one the volume of a never-started holder container that got
 * the agent by one upload is shared read-only (VolumesFrom). No anonymous
 * volume is made per create; the direct socket's directory is a small tmpfs.
 * body's Binds/Tmpfs may be the options' own arrays: replaced, not changed. */
void dk_agent_mount(struct dk_prov *dp, json_t *body)
{
    json_t *hc = json_object_get(body, "HostConfig");
    json_object_del(body, "Volumes");
    if (dp->agent_bind) {
        json_t *binds = json_is_array(json_object_get(hc, "Binds"))
                            ? json_copy(json_object_get(hc, "Binds"))
                            : json_array();
        char *b = xasprintf("%s:%s:ro", dp->agent_path, DK_AGENT_IN);
        json_array_append_new(binds, json_string(b));
        free(b);
        json_object_set_new(hc, "Binds", binds);
    } else {
        char *v = xasprintf("%s:ro", dp->agent_holder);
        json_object_set_new(hc, "VolumesFrom", json_pack("[s]", v));
        free(v);
    }
    /* The run directory is ours unless the options mount something there. */
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(hc, "Binds"), i, b) {
        const char *s = json_string_value(b), *c = s ? strchr(s, ':') : NULL;
        size_t n = strlen(DK_AGENT_DIR "/run");
        if (c && !strncmp(c + 1, DK_AGENT_DIR "/run", n) &&
            (c[1 + n] == '\0' || c[1 + n] == ':'))
            return;
    }
    if (dkd_run_volume(dp, body))
        return;
    json_t *tmpfs = json_is_object(json_object_get(hc, "Tmpfs"))
                        ? json_copy(json_object_get(hc, "Tmpfs"))
                        : json_object();
    if (!json_object_get(tmpfs, DK_AGENT_DIR "/run"))
        json_object_set_new(tmpfs, DK_AGENT_DIR "/run",
                            json_string("rw,nosuid,nodev,noexec,size=1m,mode=0700"));
    json_object_set_new(hc, "Tmpfs", tmpfs);
}

/* Runs the current phase: one engine call, whose answer moves on. */
void dk_lc_next(struct dk_sb *ds)
{
    struct dk_prov *dp = ds->dp;
    struct dk_engine *e = &dp->eng;
    int ok = 1;
    char *path = NULL;
    switch (ds->phase) {
    case PH_IDLE:
        return;
    case PH_LOOKUP: {
        char *f = xasprintf("{\"label\":[\"sbxd.id=%s\"]}", ds->sb->id);
        char *fe = dk_escape(f);
        free(f);
        path = dk_path(e, "/containers/json?all=1&filters=%s", fe);
        free(fe);
        ok = NULL != dk_call(e, &ds->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                             lookup_done, ds);
        break;
    }
    case PH_INSPECT:
        path = dk_path(e, "/containers/%s/json", ds->cid);
        ok = NULL != dk_call(e, &ds->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                             inspect_done, ds);
        break;
    case PH_IMAGE: {
        const char *img = ds->image_id && ds->sb->snapshot
                              ? ds->image_id
                              : json_string_value(json_object_get(ds->opts, "image"));
        char *ref = dk_image_ref(img);
        char *re = dk_escape(ref);
        path = dk_path(e, "/images/%s/json", re);
        free(ref);
        free(re);
        ok = NULL !=
             dk_call(e, &ds->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS, image_done, ds);
        break;
    }
    case PH_PULL: {
        char *ref = dk_image_ref(json_string_value(json_object_get(ds->opts, "image")));
        char *re = dk_escape(ref);
        path = dk_path(e, "/images/create?fromImage=%s", re);
        char msg[300];
        snprintf(msg, sizeof(msg), "pulling %s", ref);
        progress(ds, "pull", msg);
        free(ref);
        free(re);
        ds->pull_t = 0;
        ok = NULL != dk_call_lines(e, &ds->reqs, "POST", path, DK_PULL_TIMEOUT_MS,
                                   pull_line, pull_done, ds);
        break;
    }
    case PH_CREATE: {
        json_t *body = NULL;
        sbx_err_t err = {0};
        json_t *labels = create_labels(ds);
        if (ds->sb->snapshot && ds->image_id) {
            json_t *o2 = json_deep_copy(ds->opts);
            json_object_set_new(o2, "image", json_string(ds->image_id));
            json_decref(ds->opts);
            ds->opts = o2;
        }
        if (dk_create_body(&body, ds->opts, ds->sb->id, ds->sb->owner,
                           dp->agent_tar ? DK_AGENT_IN : NULL, labels, &err) < 0) {
            json_decref(labels);
            dk_lc_fail(ds, &err);
            return;
        }
        json_decref(labels);
        /* Decided here, once: the holder may become ready before create_done. */
        ds->agent_mounted = dp->agent_tar && (dp->agent_bind || dp->agent_holder[0]);
        if (ds->agent_mounted)
            dk_agent_mount(dp, body);
        dks_create_body(ds, body);
        ds->user_check = dks_user_needed(ds);
        char *ne = dk_escape(ds->name);
        path = dk_path(e, "/containers/create?name=%s", ne);
        free(ne);
        progress(ds, "create", "creating the container");
        ok = NULL != dk_call(e, &ds->reqs, "POST", path, body, DK_CALL_TIMEOUT_MS,
                             create_done, ds);
        json_decref(body);
        break;
    }
    case PH_UPLOAD:
        path = dk_path(e, "/containers/%s/archive?path=%s", ds->cid, DK_AGENT_DIR);
        ok = NULL != dk_call_raw(e, &ds->reqs, "PUT", path, "application/x-tar",
                                 dp->agent_tar, dp->agent_tar_len, DK_CALL_TIMEOUT_MS,
                                 upload_done, ds);
        break;
    case PH_UNPAUSE:
        path = dk_path(e, "/containers/%s/unpause", ds->cid);
        ok = NULL != dk_call(e, &ds->reqs, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
                             unpause_done, ds);
        break;
    case PH_ATTACH:
        ok = dka_attach(ds) == 0;
        break;
    case PH_START:
        path = dk_path(e, "/containers/%s/start", ds->cid);
        progress(ds, "start", "starting the container");
        ok = NULL != dk_call(e, &ds->reqs, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
                             start_done, ds);
        break;
    case PH_HANDSHAKE:
        dka_handshake(ds);
        return;
    case PH_USER:
        dks_user_next(ds);
        return;
    default:
        return;
    }
    free(path);
    if (!ok) {
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_UNAVAILABLE,
                      json_pack("{s:s, s:s}", "provider", "docker", "reason",
                                "cannot start a request"),
                      "docker: cannot start an engine request");
        dk_lc_fail(ds, &err);
    }
}

static void cleanup_done(struct dk_resp *r, void *data)
{
    if (r->status >= 300 && r->status != 404)
        log_warn("docker: removing a half-made container: %s",
                 r->errmsg ? r->errmsg : "?");
}

void dk_lc_fail(struct dk_sb *ds, sbx_err_t *err)
{
    enum dk_why why = ds->why;
    ds->why = WHY_NONE;
    ds->phase = PH_IDLE;
    dk_reqlist_cancel(&ds->reqs);
    ev_timer_stop(D->loop, &ds->hs_timer);
    dka_close_attach(ds);
    struct sandbox *sb = ds->sb;
    if (why == WHY_RECOVER) {
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", err->msg ? err->msg : "container lost");
        err_clear(err);
        ds->recovering = 0;
        sandbox_lost(sb, msg);
        return;
    }
    if (why != WHY_START) {
        err_clear(err);
        return;
    }
    if (sb->discard_on_fail && !sb->started_once && ds->cid[0] && !ds->reconnected) {
        /* A create that failed leaves no container behind. */
        char *path = dk_path(&ds->dp->eng, "/containers/%s?force=1&v=1", ds->cid);
        dk_call(&ds->dp->eng, &ds->dp->misc, "DELETE", path, NULL, DK_CALL_TIMEOUT_MS,
                cleanup_done, NULL);
        free(path);
        ds->cid[0] = '\0';
    }
    sandbox_op_done(sb, err, NULL); /* may free sb and ds */
    err_clear(err);
}

void dk_lc_ok(struct dk_sb *ds)
{
    enum dk_why why = ds->why;
    ds->why = WHY_NONE;
    ds->phase = PH_IDLE;
    ev_timer_stop(D->loop, &ds->hs_timer);
    if (ds->pool_record && ds->cid[0])
        pool_record(ds);
    if (why == WHY_RECOVER) {
        ds->recovering = 0;
        log_info("docker %s: reconnected to container %.12s", ds->sb->id, ds->cid);
        sandbox_adopted(ds->sb); /* its processes are back */
        /* Anything queued meanwhile goes out now. */
        for (struct dk_proc *x = ds->procs; x; x = x->next)
            if (!x->spawned && !x->exited && x->p && x->p->state == P_RUNNING &&
                !ds->exec_mode)
                dka_send_spawn(ds, x);
        return;
    }
    if (why != WHY_START)
        return;
    json_t *res = json_object();
    if (ds->reconnected)
        json_object_set_new(res, "reconnected", json_true());
    if (ds->warnings)
        json_object_set(res, "warnings", ds->warnings);
    sandbox_op_done(ds->sb, NULL, res);
}

void dk_container_trouble(struct dk_sb *ds, const char *why)
{
    if (ds->recovering || ds->phase != PH_IDLE)
        return;
    struct sandbox *sb = ds->sb;
    if (sb->status != SB_RUNNING) {
        dka_close_attach(ds);
        return;
    }
    log_warn("docker %s: %s; checking the container", sb->id, why);
    dka_close_attach(ds);
    ds->recovering = 1;
    ds->why = WHY_RECOVER;
    ds->phase = ds->cid[0] ? PH_INSPECT : PH_IDLE;
    if (ds->phase == PH_IDLE) {
        sbx_err_t err = {0};
        err_make(&err, SBX_E_PROVIDER, "container unknown");
        dk_lc_fail(ds, &err);
        return;
    }
    dk_lc_next(ds);
}

/* ---- processes
 * ------------------------------------------------------------------------------ */

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

static int d_proc_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    struct dk_sb *ds = p->sb->pdata;
    if (!ds)
        return err_make(err, SBX_E_STATE, "sandbox %s has no container", p->sb->id);
    if (p->pty && ds->exec_mode) /* docker_pty.c: sbx-init holds terminals */
        return terminal_unsupported(err, p->sb, "pty");
    struct dk_proc *dpp = dk_proc_new(ds, p);
    if (ds->exec_mode)
        return dkx_spawn(ds, dpp, err);
    if (ds->ready)
        dka_send_spawn(ds, dpp);
    /* else: sent when the agent is back (recovery) */
    return 0;
}

static int d_proc_write(void *cookie, struct process *p, const void *data, size_t len,
                        sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp || dpp->stdin_eof)
        return err_make(err, SBX_E_STATE, "stdin of process %u is closed", p->pid);
    if (ds->exec_mode)
        return dkx_write(dpp, data, len, err);
    size_t pending =
        dpp->stdin_buf.bytes + (ds->ch_live ? chan_pending_output(ds->cur) : 0);
    if (pending + len > STDIN_LIMIT)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "stdin_buffer", "max", (int)STDIN_LIMIT),
            "stdin buffer of process %u is full", p->pid);
    const uint8_t *d = data;
    while (len > 0) {
        size_t k = len < SBX_CHAN_MAX_PAYLOAD ? len : SBX_CHAN_MAX_PAYLOAD;
        if (dpp->spawned && ds->ready) {
            if (dka_send_frame(ds, SBX_CHAN_STDIN, p->pid, d, k) < 0)
                return err_make(err, SBX_E_PROVIDER, "docker: the agent channel failed");
        } else {
            obuf_append(&dpp->stdin_buf, d, k);
        }
        d += k;
        len -= k;
    }
    return 0;
}

static int d_proc_close_stdin(void *cookie, struct process *p, sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp || dpp->stdin_eof)
        return 0;
    if (ds->exec_mode)
        return dkx_close_stdin(dpp, err);
    dpp->stdin_eof = 1;
    if (dpp->spawned && ds->ready)
        dka_send_frame(ds, SBX_CHAN_STDIN_EOF, p->pid, NULL, 0);
    return 0;
}

static int d_proc_kill(void *cookie, struct process *p, int sig, sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp)
        return 0;
    if (ds->exec_mode)
        return dkx_kill(dpp, sig, err);
    if (!dpp->spawned) {
        json_t *rec = json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig,
                                "killed", 1);
        dka_proc_gone(ds, dpp, rec);
        json_decref(rec);
        return 0;
    }
    if (dka_send_u32(ds, SBX_CHAN_KILL, p->pid, (uint32_t)sig) < 0 && !ds->recovering)
        return err_make(err, SBX_E_PROVIDER, "docker: the agent channel is closed");
    /* During recovery the kill goes out after the re-attach: REPLAY then
     * KILL would need ordering we don't have; the core's grace timer ends it. */
    return 0;
}

static void d_proc_resume(void *cookie, struct process *p)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp || !ds)
        return;
    if (ds->exec_mode) {
        dkx_resume(dpp);
        return;
    }
    if (ds->ready)
        dka_send_credit(ds, dpp, 1);
}

static void d_proc_release(void *cookie, struct process *p)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    if (!dpp)
        return;
    if (ds) {
        if (ds->exec_mode)
            dkx_release(dpp);
        else if (!dpp->exited && dpp->spawned && ds->ready &&
                 p->sb->status == SB_RUNNING && !D->draining)
            /* The core gave up on it (it never confirmed a kill): end it anyway. */
            dka_send_u32(ds, SBX_CHAN_KILL, dpp->pid, SIGKILL);
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

static struct dk_sb *ds_new(struct dk_prov *dp, struct sandbox *sb)
{
    struct dk_sb *ds = xcalloc(1, sizeof(*ds));
    ds->sb = sb;
    ds->dp = dp;
    dka_init(ds);
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
        ds = ds_new(dp, sb);
    if (ds->phase != PH_IDLE) {
        /* recovery in progress: take it over as the start */
        dk_reqlist_cancel(&ds->reqs);
        dka_close_attach(ds);
        ds->phase = PH_IDLE;
        ds->recovering = 0;
    }
    json_t *opts = NULL;
    json_t *req_opts = json_object_get(sb->conf, "options");
    if (policy_reserved(req_opts, err) < 0)
        return -1;
    if (dk_options(&opts, dp->conf, sb->conf, err) < 0)
        return -1;
    /* A rule's required runtime is what a request without one gets. */
    const char *req_rt = policy_required_runtime(dp->policy, sb->owner);
    if (req_rt && !dk_opt_str(req_opts, "runtime"))
        json_object_set_new(opts, "runtime", json_string(req_rt));
    if (policy_check(dp->policy, sb->owner, dp->conf, opts, err) < 0 ||
        sandbox_reserve_memory(
            sb, (uint64_t)json_integer_value(json_object_get(opts, "memory")), err) < 0 ||
        dks_disk_total(dp, sb, opts, err) < 0) {
        json_decref(opts);
        return -1;
    }
    const char *mode = dk_opt_str(opts, "exec_mode");
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
        ds->name = dk_name(dk_opt_str(opts, "name"), sb->id);
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
    /* A known container (stop/start, adoption) is inspected; else looked up by
     * label, unless sbxd just made the id up (nothing can carry it yet). */
    if (ds->cid[0]) {
        ds->phase = PH_INSPECT;
    } else if (sb->id_generated && !sb->started_once) {
        if (!sb->snapshot && !ds->exec_mode && take_pooled(ds))
            return 0;
        ds->phase = PH_IMAGE;
    } else {
        ds->phase = PH_LOOKUP;
    }
    dk_lc_next(ds);
    return 0;
}

/* An engine call of stop/destroy/snapshot failed: the op ends with its error. */
static void op_error(struct dk_sb *ds, struct dk_resp *r, const char *what)
{
    sbx_err_t err = {0};
    dk_err(&err, r, what);
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
    dk_reqlist_cancel(&ds->reqs);
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
    char *path = dk_path(&dp->eng, "/containers/%s/stop?t=%d", ds->cid, STOP_WAIT_S);
    struct dk_req *rq = dk_call(&dp->eng, &ds->reqs, "POST", path, NULL,
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
    if (ds->pool && claim_remove(ds))
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
    char *path = dk_path(&dp->eng, "/containers/%s?force=1&v=1", ds->cid);
    struct dk_req *rq = dk_call(&dp->eng, &ds->reqs, "DELETE", path, NULL,
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
    char *te = dk_escape(tag);
    char *path = dk_path(&dp->eng, "/commit?container=%s&repo=%s&tag=%s&pause=1", ds->cid,
                         SNAP_REPO, te);
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
                  created, "sbxd.socket", sb_label_socket());
    json_object_update(labels, ours);
    json_decref(ours);
    json_t *body = json_pack("{s:o}", "Labels", labels);
    struct dk_req *rq = dk_call(&dp->eng, &ds->snap_reqs, "POST", path, body,
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
        if (sock && strcmp(sock, sb_label_socket()) != 0)
            continue; /* another sbxd's */
        snapshot_register(
            sid, "docker", (uid_t)strtoul(own, NULL, 10),
            cr ? atof(cr) : (double)json_integer_value(json_object_get(im, "Created")),
            of, json_pack("{s:s, s:s}", "image", id, "engine", dp->eng.host));
    }
}

static char *snap_images_path(struct dk_engine *e)
{
    char *fe = dk_escape("{\"label\":[\"sbxd.snapshot\"]}");
    char *path = dk_path(e, "/images/json?filters=%s", fe);
    free(fe);
    return path;
}

static void snap_list_done(struct dk_resp *r, void *data)
{
    struct snap_job *j = data;
    sbx_err_t err = {0};
    if (r->status != 200 || !json_is_array(r->json))
        dk_err(&err, r, "list snapshot images");
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
    struct dk_req *rq = dk_call(&dp->eng, &dp->misc, "GET", path, NULL,
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
        dk_err(&err, r, "remove the snapshot image");
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
    char *ie = dk_escape(img);
    /* force: the image has its repo tag besides the id. */
    char *path = dk_path(&dp->eng, "/images/%s?force=1", ie);
    free(ie);
    struct dk_req *rq = dk_call(&dp->eng, &dp->misc, "DELETE", path, NULL,
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
    dk_reqlist_cancel(&ds->reqs);
    dk_reqlist_cancel(&ds->snap_reqs);
    dk_reqlist_cancel(&ds->disk_reqs);
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
    if (sock && strcmp(sock, sb_label_socket()) != 0)
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
    struct dk_sb *ds = ds_new(dp, sb);
    snprintf(ds->cid, sizeof(ds->cid), "%s", cid);
    const char *pool = json_string_value(json_object_get(labels, "sbxd.pool"));
    if (pool && json_object_get(labels, "sbxd.claim"))
        ds->pool = strdup(pool); /* its claim goes with it */
    ds->first_hello = 1;
    ds->reconnected = 1;
    sbx_err_t e2 = {0};
    json_t *opts = NULL;
    if (dk_options(&opts, dp->conf, sb->conf, &e2) == 0)
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
        dk_lc_next(ds);
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
    dk_call(e, &dp->misc, "GET", sp, NULL, DK_CALL_TIMEOUT_MS, snap_boot_done, dp);
    free(sp);
    char *fe = dk_escape("{\"label\":[\"sbxd.id\"]}");
    char *path = dk_path(e, "/containers/json?all=1&filters=%s", fe);
    free(fe);
    if (!dk_call(e, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS, adopt_list_done,
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
        dk_tar_one(&dp->agent_tar, &dp->agent_tar_len, "sbx-init", 0755, bin, got) < 0 ||
        dk_tar_agent_tree(&dp->agent_tree, &dp->agent_tree_len, bin, got) < 0) {
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
    char *path = dk_path(&dp->eng, "/containers/create?name=%s", name);
    if (!dk_call(&dp->eng, &dp->misc, "POST", path, body, DK_CALL_TIMEOUT_MS,
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
    char *path = dk_path(&dp->eng, "/images/create?fromSrc=-&repo=sbxd-agent&tag=%s",
                         dp->agent_hash);
    if (!dk_call_raw(&dp->eng, &dp->misc, "POST", path, "application/x-tar",
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
    char *path = dk_path(&dp->eng, "/containers/sbxd-agent-%s/json", dp->agent_hash);
    if (!dk_call(&dp->eng, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
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
    if (dk_engine_init(&dp->eng, dp->conf, err) < 0) {
        policy_free(dp->policy);
        json_decref(dp->conf);
        free(dp);
        return -1;
    }
    dp->eng.misc = &dp->misc;
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
    dk_engine_start(&dp->eng);
    *cookie = dp;
    return 0;
}

static void d_unload(void *cookie)
{
    struct dk_prov *dp = cookie;
    dk_reqlist_cancel(&dp->misc);
    dk_engine_deinit(&dp->eng);
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
    .fs_call_stopped = dka_call_stopped, /* docker_archive.c: the engine's archives */
    .fs_release_stopped = dka_release_stopped,
    .fs_tar = 1,
    .proc_resize = dk_proc_resize,
    .sb_stats = dk_sb_stats,
    .sb_expose = dk_sb_expose,
    .sb_mount = dkm_mount, /* docker_mount.c */
    .sb_unmount = dkm_unmount,
    .sb_unexpose = dk_sb_unexpose,
    .sb_expose_req = dk_sb_expose_req,
};
