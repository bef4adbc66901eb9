/*
 * docker_lc.c - the Docker provider's lifecycle: the machine (enum dk_phase)
 * that takes a sandbox to a running container with a live agent link, for
 * the core's start op and for our own recovery when the link ends while the
 * sandbox runs (the container died, was removed, or the engine went away).
 * The phases are a step table (dklc_steps[]: name, what starts the step,
 * the handler of the engine's answer), as Modal's jobs are (modal_life.c);
 * each answer moves it on: lookup by label,
 * inspect, image (pull), create, upload the agent, unpause, attach, start,
 * handshake (docker_agent.c), user check (docker_sec.c). Recovery re-attaches
 * to a live container, restarts a dead one once when a process had been sent
 * but never started, and otherwise reports the sandbox lost with the reason.
 * A warm pool container (docker_pool.c) skips the create.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "core/process.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* The value of every container's sbxd.socket label: which sbxd it is of. */
const char *dklc_label_socket(void)
{
    return D->cfg.socket_path ? D->cfg.socket_path : "";
}

static void progress(struct dk_sb *ds, const char *stage, const char *msg)
{
    sandbox_progress(ds->sb, json_pack("{s:s, s:s}", "stage", stage, "message", msg));
}

/* ---- lifecycle steps
 * -------------------------------------------------------------------- */

static void step_error(struct dk_sb *ds, struct dk_resp *r, const char *what)
{
    sbx_err_t err = {0};
    dkapi_err(&err, r, what);
    dklc_fail(ds, &err);
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
    char *vp = dkapi_path(&ds->dp->eng, "/volumes/create");
    dkapi_call(&ds->dp->eng, &ds->dp->misc, "POST", vp, body, DK_CALL_TIMEOUT_MS, renamed,
               NULL);
    free(vp);
    json_decref(body);
    char *ne = dkapi_escape(ds->name);
    char *path = dkapi_path(&ds->dp->eng, "/containers/%s/rename?name=%s", ds->cid, ne);
    dkapi_call(&ds->dp->eng, &ds->dp->misc, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
               renamed, NULL);
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
int dklc_claim_remove(struct dk_sb *ds)
{
    char *path = dkapi_path(&ds->dp->eng, "/volumes/%s%s", DK_CLAIM_PREFIX, ds->cid);
    struct dk_req *rq = dkapi_call(&ds->dp->eng, &ds->reqs, "DELETE", path, NULL,
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
        dklc_next(ds);
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
        if (!sock || !strcmp(sock, dklc_label_socket())) {
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
        dklc_fail(ds, &err);
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
    dklc_next(ds);
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
            dklc_fail(ds, &err);
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
        dklc_next(ds);
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
    ds->base_env = dkspec_env_to_obj(json_object_get(cfg, "Env"));
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
        ds->warnings = dkspec_warnings(ds->opts, r->json);
    const char *sstat = json_string_value(json_object_get(st, "Status"));
    if (ds->why == WHY_RECOVER && sstat &&
        (strcmp(sstat, "removing") == 0 || strcmp(sstat, "dead") == 0)) {
        sbx_err_t err = {0};
        err_make(&err, SBX_E_PROVIDER,
                 "the container was removed behind sbxd's back (%s)", sstat);
        dklc_fail(ds, &err);
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
            dklc_fail(ds, &err);
            return;
        }
    }
    if (ds->paused) {
        ds->phase = PH_UNPAUSE;
    } else if (ds->exec_mode) {
        ds->need_start = !ds->running;
        ds->phase = ds->running ? PH_IDLE : PH_START;
        if (ds->running) {
            dklc_ok(ds);
            return;
        }
    } else {
        ds->need_start = !ds->running;
        ds->phase = PH_ATTACH;
    }
    dklc_next(ds);
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
            dklc_fail(ds, &err);
            return;
        }
        if (ds->pull_t < 0) { /* pulled already and still missing */
            step_error(ds, r, "image after pull");
            return;
        }
        ds->phase = PH_PULL;
        dklc_next(ds);
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
        dklc_fail(ds, &err);
        return;
    }
    json_decref(ds->image_env);
    ds->image_env =
        dkspec_env_to_obj(json_object_get(json_object_get(r->json, "Config"), "Env"));
    const char *id = json_string_value(json_object_get(r->json, "Id"));
    if (id && !ds->image_id)
        ds->image_id = strdup(id);
    ds->phase = PH_CREATE;
    dklc_next(ds);
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
    dklc_next(ds);
}

/* The container name sbx-<id> is another's (a second sbxd on the engine with
 * a sandbox of the same id): this sbxd's own name for it, the same on every
 * create, sbx-<id>-<hash of our socket>. Names are for people reading
 * `docker ps`; sbxd finds its containers by label. 1 when it tries again. */
static int name_taken(struct dk_sb *ds, struct dk_resp *r)
{
    const char *want = dkspec_opt_str(ds->opts, "name");
    char *dflt = dkspec_name(NULL, ds->sb->id);
    int retry = r->status == 409 && r->errmsg && strstr(r->errmsg, "already in use") &&
                (!want || !want[0]) && ds->name && !strcmp(ds->name, dflt);
    free(dflt);
    if (!retry)
        return 0;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const char *p = dklc_label_socket(); *p; p++)
        h = (h ^ (uint8_t)*p) * 16777619u;
    char *n = xasprintf("%s-%08x", ds->name, (unsigned)h);
    free(ds->name);
    ds->name = n;
    ds->phase = PH_CREATE;
    dklc_next(ds);
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
    dklc_next(ds);
}

static void upload_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 200) {
        step_error(ds, r, "upload the agent");
        return;
    }
    ds->phase = ds->exec_mode ? PH_START : PH_ATTACH;
    dklc_next(ds);
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
        dklc_ok(ds);
        return;
    }
    dklc_next(ds);
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
        dklc_ok(ds);
        return;
    }
    /* The attach made before the start may have ended meanwhile: again. */
    ds->phase = ds->att ? PH_HANDSHAKE : PH_ATTACH;
    dklc_next(ds);
}

static json_t *create_labels(struct dk_sb *ds)
{
    json_t *conf = json_deep_copy(ds->sb->conf);
    json_object_del(conf, "snapshot");
    char *cs = json_dumps(conf, JSON_COMPACT);
    json_decref(conf);
    char created[64];
    snprintf(created, sizeof(created), "%.3f", ds->sb->created_at);
    json_t *l = json_pack("{s:s, s:s, s:s, s:s}", "sbxd.socket", dklc_label_socket(),
                          "sbxd.conf", cs ? cs : "{}", "sbxd.created", created,
                          "sbxd.exec_mode", ds->exec_mode ? "docker-exec" : "agent");
    free(cs);
    return l;
}

void dklc_start(struct dk_sb *ds)
{
    struct sandbox *sb = ds->sb;
    /* A known container (stop/start, adoption) is inspected; else looked up by
     * label, unless sbxd just made the id up (nothing can carry it yet). */
    if (ds->cid[0]) {
        ds->phase = PH_INSPECT;
    } else if (sb->id_generated && !sb->started_once) {
        if (!sb->snapshot && !ds->exec_mode && take_pooled(ds))
            return;
        ds->phase = PH_IMAGE;
    } else {
        ds->phase = PH_LOOKUP;
    }
    dklc_next(ds);
}

/* ---- the step table ---- */

/* What a step's send says: a call runs (its answer moves on), the step drives
 * itself (or has ended the run), or no request could start. */
enum { STEP_CALL, STEP_OWN, STEP_FAIL };

/* One phase of the machine: its name, what starts it, and the handler of the
 * engine's answer (NULL for a step that is not one engine call). */
struct dklc_step {
    const char *name;
    int (*send)(struct dk_sb *ds, const struct dklc_step *st);
    dk_cb on_reply;
};

static int call_result(struct dk_req *rq, char *path)
{
    free(path);
    return rq ? STEP_CALL : STEP_FAIL;
}

static int send_lookup(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_engine *e = &ds->dp->eng;
    char *f = xasprintf("{\"label\":[\"sbxd.id=%s\"]}", ds->sb->id);
    char *fe = dkapi_escape(f);
    free(f);
    char *path = dkapi_path(e, "/containers/json?all=1&filters=%s", fe);
    free(fe);
    return call_result(
        dkapi_call(e, &ds->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS, st->on_reply, ds),
        path);
}

static int send_inspect(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_engine *e = &ds->dp->eng;
    char *path = dkapi_path(e, "/containers/%s/json", ds->cid);
    return call_result(
        dkapi_call(e, &ds->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS, st->on_reply, ds),
        path);
}

static int send_image(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_engine *e = &ds->dp->eng;
    const char *img = ds->image_id && ds->sb->snapshot
                          ? ds->image_id
                          : json_string_value(json_object_get(ds->opts, "image"));
    char *ref = dkspec_image_ref(img);
    char *re = dkapi_escape(ref);
    char *path = dkapi_path(e, "/images/%s/json", re);
    free(ref);
    free(re);
    return call_result(
        dkapi_call(e, &ds->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS, st->on_reply, ds),
        path);
}

static int send_pull(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_engine *e = &ds->dp->eng;
    char *ref = dkspec_image_ref(json_string_value(json_object_get(ds->opts, "image")));
    char *re = dkapi_escape(ref);
    char *path = dkapi_path(e, "/images/create?fromImage=%s", re);
    char msg[300];
    snprintf(msg, sizeof(msg), "pulling %s", ref);
    progress(ds, "pull", msg);
    free(ref);
    free(re);
    ds->pull_t = 0;
    return call_result(dkapi_call_lines(e, &ds->reqs, "POST", path, DK_PULL_TIMEOUT_MS,
                                        pull_line, st->on_reply, ds),
                       path);
}

static int send_create(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_prov *dp = ds->dp;
    struct dk_engine *e = &dp->eng;
    json_t *body = NULL;
    sbx_err_t err = {0};
    json_t *labels = create_labels(ds);
    if (ds->sb->snapshot && ds->image_id) {
        json_t *o2 = json_deep_copy(ds->opts);
        json_object_set_new(o2, "image", json_string(ds->image_id));
        json_decref(ds->opts);
        ds->opts = o2;
    }
    if (dkspec_create_body(&body, ds->opts, ds->sb->id, ds->sb->owner,
                           dp->agent_tar ? DK_AGENT_IN : NULL, labels, &err) < 0) {
        json_decref(labels);
        dklc_fail(ds, &err);
        return STEP_OWN;
    }
    json_decref(labels);
    /* Decided here, once: the holder may become ready before create_done. */
    ds->agent_mounted = dp->agent_tar && (dp->agent_bind || dp->agent_holder[0]);
    if (ds->agent_mounted)
        dkspawn_agent_mount(dp, body);
    dks_create_body(ds, body);
    ds->user_check = dks_user_needed(ds);
    char *ne = dkapi_escape(ds->name);
    char *path = dkapi_path(e, "/containers/create?name=%s", ne);
    free(ne);
    progress(ds, "create", "creating the container");
    struct dk_req *rq = dkapi_call(e, &ds->reqs, "POST", path, body, DK_CALL_TIMEOUT_MS,
                                   st->on_reply, ds);
    json_decref(body);
    return call_result(rq, path);
}

static int send_upload(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_prov *dp = ds->dp;
    char *path =
        dkapi_path(&dp->eng, "/containers/%s/archive?path=%s", ds->cid, DK_AGENT_DIR);
    return call_result(dkapi_call_raw(&dp->eng, &ds->reqs, "PUT", path,
                                      "application/x-tar", dp->agent_tar,
                                      dp->agent_tar_len, DK_CALL_TIMEOUT_MS, st->on_reply,
                                      ds),
                       path);
}

static int send_unpause(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_engine *e = &ds->dp->eng;
    char *path = dkapi_path(e, "/containers/%s/unpause", ds->cid);
    return call_result(dkapi_call(e, &ds->reqs, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
                                  st->on_reply, ds),
                       path);
}

static int send_attach(struct dk_sb *ds, const struct dklc_step *st)
{
    return dka_attach(ds) == 0 ? STEP_CALL : STEP_FAIL;
}

static int send_start(struct dk_sb *ds, const struct dklc_step *st)
{
    struct dk_engine *e = &ds->dp->eng;
    char *path = dkapi_path(e, "/containers/%s/start", ds->cid);
    progress(ds, "start", "starting the container");
    return call_result(dkapi_call(e, &ds->reqs, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
                                  st->on_reply, ds),
                       path);
}

static int send_handshake(struct dk_sb *ds, const struct dklc_step *st)
{
    dka_handshake(ds);
    return STEP_OWN;
}

static int send_user(struct dk_sb *ds, const struct dklc_step *st)
{
    dks_user_next(ds);
    return STEP_OWN;
}

/* The phases the machine runs, in the order a first start meets them. The
 * others (PH_IDLE, PH_DIRECT, PH_STOP, PH_DESTROY) are not steps of its own:
 * the direct socket (docker_direct.c) and the core's stop and destroy
 * (docker.c) drive those. */
static const struct dklc_step dklc_steps[] = {
    [PH_LOOKUP] = {"lookup", send_lookup, lookup_done},
    [PH_INSPECT] = {"inspect", send_inspect, inspect_done},
    [PH_IMAGE] = {"image", send_image, image_done},
    [PH_PULL] = {"pull", send_pull, pull_done},
    [PH_CREATE] = {"create", send_create, create_done},
    [PH_USER] = {"user", send_user, NULL},
    [PH_UPLOAD] = {"upload", send_upload, upload_done},
    [PH_UNPAUSE] = {"unpause", send_unpause, unpause_done},
    [PH_ATTACH] = {"attach", send_attach, NULL},
    [PH_START] = {"start", send_start, start_done},
    [PH_HANDSHAKE] = {"handshake", send_handshake, NULL},
};

/* Runs the current phase: one engine call, whose answer moves on. */
void dklc_next(struct dk_sb *ds)
{
    size_t n = sizeof(dklc_steps) / sizeof(dklc_steps[0]);
    if ((size_t)ds->phase >= n || !dklc_steps[ds->phase].send)
        return;
    const struct dklc_step *st = &dklc_steps[ds->phase];
    if (st->send(ds, st) != STEP_FAIL)
        return;
    sbx_err_t err = {0};
    err_make_data(
        &err, SBX_E_UNAVAILABLE,
        json_pack("{s:s, s:s}", "provider", "docker", "reason", "cannot start a request"),
        "docker: cannot start an engine request");
    dklc_fail(ds, &err);
}

static void cleanup_done(struct dk_resp *r, void *data)
{
    if (r->status >= 300 && r->status != 404)
        log_warn("docker: removing a half-made container: %s",
                 r->errmsg ? r->errmsg : "?");
}

void dklc_fail(struct dk_sb *ds, sbx_err_t *err)
{
    enum dk_why why = ds->why;
    ds->why = WHY_NONE;
    ds->phase = PH_IDLE;
    dkapi_reqlist_cancel(&ds->reqs);
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
        char *path = dkapi_path(&ds->dp->eng, "/containers/%s?force=1&v=1", ds->cid);
        dkapi_call(&ds->dp->eng, &ds->dp->misc, "DELETE", path, NULL, DK_CALL_TIMEOUT_MS,
                   cleanup_done, NULL);
        free(path);
        ds->cid[0] = '\0';
    }
    sandbox_op_done(sb, err, NULL); /* may free sb and ds */
    err_clear(err);
}

void dklc_ok(struct dk_sb *ds)
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

void dklc_container_trouble(struct dk_sb *ds, const char *why)
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
        dklc_fail(ds, &err);
        return;
    }
    dklc_next(ds);
}
