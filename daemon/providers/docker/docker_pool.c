/*
 * docker_pool.c - warm pools: per configured profile (image + options), N
 * containers created and started ahead of time, agent running, so that a
 * sandbox.create whose effective options equal a profile's takes one and
 * answers without waiting for the engine's create and start.
 *
 * A pooled container has never run anyone's code: it is taken once, by one
 * sandbox, and removed with it; it never goes back to a pool. The policy is
 * checked on the taker's effective options before the take (d_sb_start), so
 * a pool never hands out more than its taker may have. Refill runs in the
 * background after each take; a failed fill is retried after a pause.
 * Containers of a pool are labelled sbxd.pool (and sbxd.socket); at
 * shutdown sbxd removes its unused ones and those being filled
 * (dkp_shutdown_drain), and those an earlier sbxd still left (killed, or
 * past limits.shutdown_drain_ms) are removed when the engine comes up. A taken one
 * is recorded in a claim (a volume sbxd-claim-<id> with sbxd's labels): the
 * only thing a restarted sbxd adopts it from.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "sbx_proto.h"

#define POOL_MAX 32
#define POOL_RETRY_S 5.0
#define POOL_REFILL_DELAY_S 0.5

struct pool_item {
    struct pool_item *next;
    char cid[80];
    json_t *env; /* the container's env (image + options), object */
};

struct dk_pool {
    char name[48];
    json_t *conf; /* the sandbox conf it stands for: {image?, options?} */
    json_t *opts; /* its effective options (dkspec_options) */
    int size, ready, filling;
    struct pool_item *items;
    int taken, failed;
};

struct fill {
    struct fill *next, *prev; /* in fills: freed at unload if still in flight */
    struct dk_prov *dp;
    struct dk_pool *pl;
    char cid[80];
    int step;    /* 0 create, 1 upload, 2 start, 3 inspect */
    int mounted; /* the create mounted the agent (no upload) */
};

/* Fills in flight (their engine requests are cancelled at unload without a
 * callback). One Docker provider per daemon. */
static struct fill *fills;

/* The shutdown drain (dkp_shutdown_drain): on from SIGTERM; pending counts
 * its removals in flight; done is called once nothing is left. */
static struct {
    int on, pending;
    void (*done)(void *data);
    void *data;
} drain;

static void fill_link(struct fill *f)
{
    f->next = fills;
    if (fills)
        fills->prev = f;
    fills = f;
}

static void fill_free(struct fill *f)
{
    if (f->prev)
        f->prev->next = f->next;
    else
        fills = f->next;
    if (f->next)
        f->next->prev = f->prev;
    free(f);
}

static const char *our_socket(void)
{
    return D->cfg.socket_path ? D->cfg.socket_path : "";
}

static void pool_timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

int dkp_load(struct dk_prov *dp, json_t *conf, sbx_err_t *err)
{
    json_t *pools = json_object_get(conf, "pools");
    if (!pools || json_is_null(pools))
        return 0;
    if (!json_is_array(pools) || json_array_size(pools) > 16)
        return err_make(err, SBX_E_UNAVAILABLE,
                        "docker: pools must be a list of at most 16 profiles");
    dp->pools = calloc(json_array_size(pools), sizeof(*dp->pools));
    ev_init(&dp->pool_timer, pool_timer_cb);
    dp->pool_timer.data = dp;
    size_t i;
    json_t *p;
    json_array_foreach(pools, i, p) {
        struct dk_pool *pl = calloc(1, sizeof(*pl));
        dp->pools[dp->npools++] = pl;
        const char *k;
        json_t *v;
        json_object_foreach(p, k, v)
            if (strcmp(k, "name") && strcmp(k, "image") && strcmp(k, "options") &&
                strcmp(k, "size"))
                return err_make(err, SBX_E_UNAVAILABLE,
                                "docker: pools[%zu].%s: unknown key", i, k);
        json_t *sz = json_object_get(p, "size");
        if (!json_is_object(p) || !json_is_integer(sz) || json_integer_value(sz) < 1 ||
            json_integer_value(sz) > POOL_MAX)
            return err_make(err, SBX_E_UNAVAILABLE,
                            "docker: pools[%zu]: needs size 1..%d", i, POOL_MAX);
        pl->size = (int)json_integer_value(sz);
        const char *nm = json_string_value(json_object_get(p, "name"));
        snprintf(pl->name, sizeof(pl->name), "%s", nm ? nm : "");
        if (!pl->name[0])
            snprintf(pl->name, sizeof(pl->name), "p%zu", i);
        for (char *c = pl->name; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                  (*c >= '0' && *c <= '9') || *c == '-' || *c == '_'))
                *c = '_';
        pl->conf = json_object();
        if (json_is_string(json_object_get(p, "image")))
            json_object_set(pl->conf, "image", json_object_get(p, "image"));
        if (json_is_object(json_object_get(p, "options")))
            json_object_set(pl->conf, "options", json_object_get(p, "options"));
        if (dkspec_options(&pl->opts, conf, pl->conf, err) < 0) {
            char msg[400];
            snprintf(msg, sizeof(msg), "docker: pools[%zu]: %s", i, err->msg);
            err_clear(err);
            return err_make(err, SBX_E_UNAVAILABLE, "%s", msg);
        }
        const char *mode = dkspec_opt_str(pl->opts, "exec_mode");
        if ((mode && !strcmp(mode, "docker-exec")) || (!mode && dp->exec_mode))
            return err_make(err, SBX_E_UNAVAILABLE,
                            "docker: pools[%zu]: pools need exec_mode agent", i);
    }
    return 0;
}

static void item_free(struct pool_item *it)
{
    json_decref(it->env);
    free(it);
}

void dkp_unload(struct dk_prov *dp)
{
    ev_timer_stop(D->loop, &dp->pool_timer);
    while (fills)
        fill_free(fills);
    memset(&drain, 0, sizeof(drain)); /* its requests were cancelled with the rest */
    for (int i = 0; i < dp->npools; i++) {
        struct dk_pool *pl = dp->pools[i];
        if (!pl)
            continue;
        while (pl->items) {
            struct pool_item *it = pl->items;
            pl->items = it->next;
            item_free(it);
        }
        json_decref(pl->conf);
        json_decref(pl->opts);
        free(pl);
    }
    free(dp->pools);
    json_decref(dp->claims);
}

/* ---- filling ----------------------------------------------------------------------- */

static void pool_timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

static void fill_next(struct fill *f);

static void removed(struct dk_resp *r, void *data)
{
    (void)r;
    (void)data;
}

static void remove_container(struct dk_prov *dp, const char *cid)
{
    char *path = dkapi_path(&dp->eng, "/containers/%s?force=1&v=1", cid);
    dkapi_call(&dp->eng, &dp->misc, "DELETE", path, NULL, DK_CALL_TIMEOUT_MS, removed,
               NULL);
    free(path);
}

static void fill_failed(struct fill *f, struct dk_resp *r, const char *what)
{
    log_warn("docker: pool %s: %s failed: %s (retrying in %.0f s)", f->pl->name, what,
             r && r->errmsg ? r->errmsg : "?", POOL_RETRY_S);
    if (f->cid[0])
        remove_container(f->dp, f->cid);
    f->pl->filling--;
    f->pl->failed++;
    struct dk_prov *dp = f->dp;
    fill_free(f);
    if (!ev_is_active(&dp->pool_timer)) {
        ev_timer_set(&dp->pool_timer, POOL_RETRY_S, 0.);
        ev_timer_start(D->loop, &dp->pool_timer);
    }
}

static void drain_fill(struct fill *f, struct dk_resp *r);

static void fill_done(struct dk_resp *r, void *data)
{
    struct fill *f = data;
    if (drain.on) {
        drain_fill(f, r);
        return;
    }
    switch (f->step) {
    case 0:
        if (r->status != 201 || !json_string_value(json_object_get(r->json, "Id"))) {
            fill_failed(f, r, "create");
            return;
        }
        snprintf(f->cid, sizeof(f->cid), "%s",
                 json_string_value(json_object_get(r->json, "Id")));
        f->step = f->mounted ? 2 : 1;
        break;
    case 1:
        if (r->status != 200) {
            fill_failed(f, r, "agent upload");
            return;
        }
        f->step = 2;
        break;
    case 2:
        if (r->status != 204 && r->status != 304) {
            fill_failed(f, r, "start");
            return;
        }
        f->step = 3;
        break;
    case 3: {
        if (r->status != 200 || !json_is_true(json_object_get(
                                    json_object_get(r->json, "State"), "Running"))) {
            fill_failed(f, r, "inspect");
            return;
        }
        struct pool_item *it = calloc(1, sizeof(*it));
        snprintf(it->cid, sizeof(it->cid), "%s", f->cid);
        it->env =
            dkspec_env_to_obj(json_object_get(json_object_get(r->json, "Config"), "Env"));
        /* FIFO: the oldest ready container goes first */
        struct pool_item **pp = &f->pl->items;
        while (*pp)
            pp = &(*pp)->next;
        *pp = it;
        f->pl->ready++;
        f->pl->filling--;
        log_debug("docker: pool %s: %.12s ready (%d/%d)", f->pl->name, it->cid,
                  f->pl->ready, f->pl->size);
        fill_free(f);
        return;
    }
    }
    fill_next(f);
}

static void fill_next(struct fill *f)
{
    struct dk_prov *dp = f->dp;
    struct dk_engine *e = &dp->eng;
    char *path = NULL;
    struct dk_req *rq = NULL;
    switch (f->step) {
    case 0: {
        json_t *body = NULL;
        sbx_err_t err = {0};
        json_t *labels = json_pack("{s:s, s:s}", "sbxd.pool", f->pl->name, "sbxd.socket",
                                   our_socket());
        if (dkspec_create_body(&body, f->pl->opts, "", 0, DK_AGENT_IN, labels, &err) <
            0) {
            json_decref(labels);
            log_warn("docker: pool %s: %s", f->pl->name, err.msg);
            err_clear(&err);
            fill_failed(f, NULL, "create body");
            return;
        }
        json_decref(labels);
        json_t *l = json_object_get(body, "Labels");
        json_object_del(l, "sbxd.id");
        json_object_del(l, "sbxd.owner");
        json_object_set_new(l, "sbxd.exec_mode", json_string("agent"));
        f->mounted = dp->agent_bind || dp->agent_holder[0];
        if (f->mounted)
            dkspawn_agent_mount(dp, body);
        char name[96], rnd[64];
        daemon_random_id("", rnd, sizeof(rnd));
        snprintf(name, sizeof(name), "sbxpool-%s-%.12s", f->pl->name, rnd);
        path = dkapi_path(e, "/containers/create?name=%s", name);
        rq = dkapi_call(e, &dp->misc, "POST", path, body, DK_CALL_TIMEOUT_MS, fill_done,
                        f);
        json_decref(body);
        break;
    }
    case 1:
        path = dkapi_path(e, "/containers/%s/archive?path=%s", f->cid, DK_AGENT_DIR);
        rq = dkapi_call_raw(e, &dp->misc, "PUT", path, "application/x-tar", dp->agent_tar,
                            dp->agent_tar_len, DK_CALL_TIMEOUT_MS, fill_done, f);
        break;
    case 2:
        path = dkapi_path(e, "/containers/%s/start", f->cid);
        rq = dkapi_call(e, &dp->misc, "POST", path, NULL, DK_CALL_TIMEOUT_MS, fill_done,
                        f);
        break;
    case 3:
        path = dkapi_path(e, "/containers/%s/json", f->cid);
        rq =
            dkapi_call(e, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS, fill_done, f);
        break;
    }
    free(path);
    if (!rq)
        fill_failed(f, NULL, "an engine request");
}

/* Starts fills until every pool has size containers ready or on the way. */
void dkp_refill(struct dk_prov *dp)
{
    if (!dp->eng.up || !dp->pools_clean || !dp->agent_tar || drain.on)
        return;
    for (int i = 0; i < dp->npools; i++) {
        struct dk_pool *pl = dp->pools[i];
        while (pl->ready + pl->filling < pl->size) {
            struct fill *f = calloc(1, sizeof(*f));
            fill_link(f);
            f->dp = dp;
            f->pl = pl;
            pl->filling++;
            fill_next(f);
        }
    }
}

static void pool_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    dkp_refill(w->data);
}

/* A container taken from a pool by an earlier sbxd: adopted from its claim
 * (docker.c pool_record), a volume whose labels only sbxd writes; its name,
 * its files and its own labels beyond sbxd.pool/socket say nothing. */
static void readopt(struct dk_prov *dp, json_t *c, json_t *claim)
{
    json_t *entry = json_deep_copy(c);
    json_t *labels = json_object_get(entry, "Labels");
    static const char *const keys[] = {"sbxd.id",      "sbxd.owner",     "sbxd.conf",
                                       "sbxd.created", "sbxd.exec_mode", "sbxd.claim"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        json_t *v = json_object_get(claim, keys[i]);
        if (json_is_string(v))
            json_object_set(labels, keys[i], v);
        else
            json_object_del(labels, keys[i]);
    }
    dp->adopt_entry(dp, entry);
    json_decref(entry);
}

static void volume_removed(struct dk_resp *r, void *data)
{
    (void)data;
    if (r->status >= 300 && r->status != 404)
        log_warn("docker: removing a pool claim failed: %s", r->errmsg ? r->errmsg : "?");
}

/* Unused pool containers of an earlier sbxd on this socket go, claimed ones
 * are adopted; claims without their container go; then fill. */
static void old_listed(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    size_t i;
    json_t *c;
    json_t *claims = dp->claims ? dp->claims : json_object();
    dp->claims = NULL;
    json_t *seen = json_object();
    if (r->status == 200)
        json_array_foreach(r->json, i, c) {
            json_t *labels = json_object_get(c, "Labels");
            const char *sock = json_string_value(json_object_get(labels, "sbxd.socket"));
            const char *cid = json_string_value(json_object_get(c, "Id"));
            if (!sock || strcmp(sock, our_socket()) != 0 || !cid)
                continue;
            /* sbxd never makes a pool container with an owner: such a
             * container is adopted by its labels (docker.c), never here */
            if (json_object_get(labels, "sbxd.id") ||
                json_object_get(labels, "sbxd.owner"))
                continue;
            json_t *claim = json_object_get(claims, cid);
            if (claim) {
                json_object_set_new(seen, cid, json_true());
                readopt(dp, c, claim);
            } else {
                remove_container(dp, cid);
            }
        }
    if (r->status == 200) {
        const char *k;
        json_t *v;
        json_object_foreach(claims, k, v)
            if (!json_object_get(seen, k)) {
                char *path = dkapi_path(&dp->eng, "/volumes/%s%s", DK_CLAIM_PREFIX, k);
                dkapi_call(&dp->eng, &dp->misc, "DELETE", path, NULL, DK_CALL_TIMEOUT_MS,
                           volume_removed, NULL);
                free(path);
            }
    }
    json_decref(seen);
    json_decref(claims);
    dp->pools_clean = 1;
    dkp_refill(dp);
}

static void list_pool_containers(struct dk_prov *dp)
{
    char *fe = dkapi_escape("{\"label\":[\"sbxd.pool\"]}");
    char *path = dkapi_path(&dp->eng, "/containers/json?all=1&filters=%s", fe);
    free(fe);
    if (!dkapi_call(&dp->eng, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                    old_listed, dp))
        dp->pools_clean = 1;
    free(path);
}

/* The claims of this socket's sbxd, by container id; then the containers. */
static void claims_listed(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    json_decref(dp->claims);
    dp->claims = json_object();
    size_t i;
    json_t *v;
    if (r->status != 200) {
        /* without the claims no pool container is adopted or removed */
        log_warn("docker: listing pool claims failed: %s; pool containers of an "
                 "earlier sbxd are left as they are",
                 r->errmsg ? r->errmsg : "?");
        json_decref(dp->claims);
        dp->claims = NULL;
        dp->pools_clean = 1;
        dkp_refill(dp);
        return;
    }
    json_array_foreach(json_object_get(r->json, "Volumes"), i, v) {
        json_t *l = json_object_get(v, "Labels");
        const char *nm = json_string_value(json_object_get(v, "Name"));
        const char *cid = json_string_value(json_object_get(l, "sbxd.claim"));
        const char *sock = json_string_value(json_object_get(l, "sbxd.socket"));
        size_t pl = strlen(DK_CLAIM_PREFIX);
        /* the name sbxd gave it and the labels sbxd wrote must agree */
        if (!nm || !cid || !sock || strcmp(sock, our_socket()) != 0 ||
            strncmp(nm, DK_CLAIM_PREFIX, pl) != 0 || strcmp(nm + pl, cid) != 0)
            continue;
        json_object_set(dp->claims, cid, l);
    }
    list_pool_containers(dp);
}

void dkp_engine_up(struct dk_prov *dp)
{
    /* Listed even without pools now: sandboxes taken from one before. */
    if (dp->pools_clean) {
        dkp_refill(dp);
        return;
    }
    char *fe = dkapi_escape("{\"label\":[\"sbxd.claim\"]}");
    char *path = dkapi_path(&dp->eng, "/volumes?filters=%s", fe);
    free(fe);
    if (!dkapi_call(&dp->eng, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                    claims_listed, dp))
        dp->pools_clean = 1;
    free(path);
}

/* ---- taking ------------------------------------------------------------------------ */

/* The options that make two containers the same: all but the container's
 * env and labels (processes get their env from the sandbox, per spawn). */
static int same_container(json_t *a, json_t *b)
{
    json_t *x = json_deep_copy(a), *y = json_deep_copy(b);
    const char *drop[] = {"env", "labels"};
    for (size_t i = 0; i < 2; i++) {
        json_object_del(x, drop[i]);
        json_object_del(y, drop[i]);
    }
    int eq = json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return eq;
}

const char *dkp_take(struct dk_prov *dp, json_t *opts, char *cid, size_t n, json_t **env)
{
    if (drain.on)
        return NULL; /* what the pools held is being removed */
    for (int i = 0; i < dp->npools; i++) {
        struct dk_pool *pl = dp->pools[i];
        if (!pl->items || !same_container(pl->opts, opts))
            continue;
        struct pool_item *it = pl->items;
        pl->items = it->next;
        pl->ready--;
        pl->taken++;
        snprintf(cid, n, "%s", it->cid);
        *env = it->env;
        it->env = NULL;
        item_free(it);
        /* Refill a moment later: a create+start now would queue the taker's
         * own attach and handshake behind it in the engine. */
        if (!ev_is_active(&dp->pool_timer)) {
            ev_timer_set(&dp->pool_timer, POOL_REFILL_DELAY_S, 0.);
            ev_timer_start(D->loop, &dp->pool_timer);
        }
        return pl->name;
    }
    return NULL;
}

json_t *dkp_info(struct dk_prov *dp)
{
    if (dp->npools == 0)
        return NULL;
    json_t *a = json_array();
    for (int i = 0; i < dp->npools; i++) {
        struct dk_pool *pl = dp->pools[i];
        json_array_append_new(a, json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "name",
                                           pl->name, "size", pl->size, "ready", pl->ready,
                                           "filling", pl->filling, "taken", pl->taken,
                                           "failed", pl->failed));
    }
    return a;
}

/* ---- draining at shutdown ------------------------------------------------------- */

static void drain_check(void)
{
    if (!drain.on || drain.pending > 0 || fills || !drain.done)
        return;
    void (*done)(void *) = drain.done;
    drain.done = NULL;
    log_info("docker: the warm pools' containers are removed");
    done(drain.data);
}

static void drain_removed(struct dk_resp *r, void *data)
{
    (void)data;
    if (r->status >= 300 && r->status != 404)
        log_warn("docker: removing a pool container at shutdown failed: %s",
                 r->errmsg ? r->errmsg : "?");
    drain.pending--;
    drain_check();
}

static void drain_remove(struct dk_prov *dp, const char *cid)
{
    char *path = dkapi_path(&dp->eng, "/containers/%s?force=1&v=1", cid);
    if (dkapi_call(&dp->eng, &dp->misc, "DELETE", path, NULL, DK_CALL_TIMEOUT_MS,
                   drain_removed, NULL))
        drain.pending++;
    else
        log_warn("docker: pool container %.12s left at shutdown (no engine request)",
                 cid);
    free(path);
}

/* A fill whose engine request answered during the drain: what it made goes
 * (a create that answered names its container). */
static void drain_fill(struct fill *f, struct dk_resp *r)
{
    const char *id = json_string_value(json_object_get(r->json, "Id"));
    if (!f->cid[0] && f->step == 0 && r->status == 201 && id)
        snprintf(f->cid, sizeof(f->cid), "%s", id);
    if (f->cid[0])
        drain_remove(f->dp, f->cid);
    f->pl->filling--;
    fill_free(f);
    drain_check();
}

int dkp_shutdown_drain(void *cookie, void (*done)(void *data), void *data)
{
    struct dk_prov *dp = cookie;
    drain.on = 1;
    ev_timer_stop(D->loop, &dp->pool_timer);
    int n = 0;
    for (int i = 0; i < dp->npools; i++) {
        struct dk_pool *pl = dp->pools[i];
        while (pl->items) {
            struct pool_item *it = pl->items;
            pl->items = it->next;
            drain_remove(dp, it->cid);
            item_free(it);
            n++;
        }
        pl->ready = 0;
    }
    if (!drain.pending && !fills)
        return 0;
    int nf = 0;
    for (struct fill *f = fills; f; f = f->next)
        nf++;
    log_info("docker: shutdown: removing %d unused warm-pool container(s) and the %d "
             "being filled",
             n, nf);
    drain.done = done;
    drain.data = data;
    return 1;
}
