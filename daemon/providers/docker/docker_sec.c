/*
 * docker_sec.c - the Docker provider's hardening that is not option policy
 * (issue 16): the built-in hardened defaults, the user a container will run
 * as (read from the image's own /etc/passwd and /etc/group, the way the
 * runtime reads them), and disk limits (the engine's quota where the storage
 * driver has one, else measured on a timer).
 *
 * Disk: options.disk (a size; providers.docker.disk is the default and the
 * ceiling, a rule may raise it) bounds a container's writable layer. Drivers
 * with a per-container quota (btrfs, zfs, devicemapper, windowsfilter, and
 * overlay2/vfs on xfs mounted with pquota) get HostConfig.StorageOpt size: the
 * engine refuses the write (ENOSPC). On the others (vfs or overlay2 on ext4
 * and the like) sbxd asks the engine for the writable layer's size
 * (/containers/{id}/json?size=1, SizeRw) every disk_check_ms, one request per
 * container at a time, through the async client; past the limit the
 * container is killed and the sandbox goes to `error` with the reason (a
 * process.exec restarts it as after any error, a destroy frees the space).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "providers/docker/policy.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DISK_CHECK_MS_DEFAULT 5000
#define USER_FILE_MAX (1u << 20)

/* ---- built-in defaults ------------------------------------------------------------ */

/* The hardened ceilings, the same as config/sbxd.yaml's: with no config file
 * a non-root user still gets no network, no capabilities, no-new-privileges,
 * pids/memory/CPU limits, a sized /tmp and a disk limit. A key the file sets
 * (even to 0, [] or {}) is the operator's. */
void dks_defaults(json_t *conf)
{
    static const char *const defaults =
        "{\"network\": \"none\", \"memory\": \"512m\", \"memory_swap\": \"512m\","
        " \"cpu_shares\": 1024, \"cpu_quota\": 100000, \"cpu_period\": 100000,"
        " \"pids_limit\": 256, \"cap_drop\": [\"ALL\"],"
        " \"security_opt\": [\"no-new-privileges\"],"
        " \"ulimits\": {\"nofile\": {\"soft\": 4096, \"hard\": 4096}},"
        " \"tmpfs\": {\"/tmp\": \"rw,nosuid,nodev,size=64m\"},"
        " \"disk\": \"4g\", \"disk_per_uid\": \"64g\"}";
    json_t *d = json_loads(defaults, 0, NULL);
    const char *k;
    json_t *v;
    json_object_foreach(d, k, v)
        if (!json_object_get(conf, k))
            json_object_set(conf, k, v);
    json_decref(d);
}

/* ---- the user, as the runtime will resolve it ----------------------------------- */

const char *dks_tar_first_file(const char *b, size_t len, size_t *n, int *link)
{
    size_t pos = 0;
    *link = 0;
    while (pos + 512 <= len) {
        const char *h = b + pos;
        if (!h[0])
            return NULL;
        char num[13];
        memcpy(num, h + 124, 12);
        num[12] = '\0';
        size_t sz = strtoul(num, NULL, 8);
        char type = h[156];
        if (type == '0' || type == '\0') {
            if (sz > len - pos - 512)
                return NULL;
            *n = sz;
            return h + 512;
        }
        if (type == '1' || type == '2') {
            *link = 1;
            return NULL;
        }
        size_t skip = 512 + ((sz + 511) / 512) * 512;
        if (sz > len || skip > len - pos)
            return NULL;
        pos += skip;
    }
    return NULL;
}

static void user_removed(struct dk_resp *r, void *data)
{
    (void)r;
    (void)data;
}

static void user_fail(struct dk_sb *ds, sbx_err_t *err)
{
    /* the container was made for this start only: it goes */
    char *path = dkapi_path(&ds->dp->eng, "/containers/%s?force=1&v=1", ds->cid);
    dkapi_call(&ds->dp->eng, &ds->dp->misc, "DELETE", path, NULL, DK_CALL_TIMEOUT_MS,
               user_removed, NULL);
    free(path);
    ds->cid[0] = '\0';
    ds->up->fail(ds, err);
}

static void user_decide(struct dk_sb *ds)
{
    const char *spec = dkspec_opt_str(ds->opts, "user");
    struct policy_user u;
    char why[300] = "";
    sbx_err_t err = {0};
    policy_user_spell(spec ? spec : "", &u);
    if (ds->user_link) {
        err_make_data(&err, SBX_E_PERMISSION,
                      json_pack("{s:s, s:s, s:s}", "option", "user", "reason", "denied",
                                "requested", spec ? spec : ""),
                      "docker: policy: options.user: %s: the image's /etc/passwd or "
                      "/etc/group is a link; give the user as uid:gid numbers",
                      spec ? spec : "");
        user_fail(ds, &err);
        return;
    }
    if (policy_user_resolve(&u, ds->user_passwd, ds->user_passwd_len, ds->user_group,
                            ds->user_group_len, why, sizeof(why)) < 0) {
        err_make_data(&err, SBX_E_PERMISSION,
                      json_pack("{s:s, s:s, s:s}", "option", "user", "reason", "denied",
                                "requested", spec ? spec : ""),
                      "docker: policy: options.user: %s", why);
        user_fail(ds, &err);
        return;
    }
    if (policy_user_ids_check(spec ? spec : "", &u, &err) < 0) {
        user_fail(ds, &err);
        return;
    }
    log_debug("docker %s: user %s is %lld:%lld in the image", ds->sb->id,
              spec ? spec : "", u.ruid, u.rgid);
    ds->user_check = 0;
    ds->phase = ds->user_then;
    ds->up->step(ds);
}

static void user_file_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (r->status != 200 && r->status != 404) {
        sbx_err_t err = {0};
        dkapi_err(&err, r, "read the image's user files");
        user_fail(ds, &err);
        return;
    }
    char **dst = ds->user_step == 0 ? &ds->user_passwd : &ds->user_group;
    size_t *dl = ds->user_step == 0 ? &ds->user_passwd_len : &ds->user_group_len;
    if (r->status == 200 && r->body) {
        size_t n = 0;
        int link = 0;
        const char *f = dks_tar_first_file(r->body, r->len, &n, &link);
        if (link)
            ds->user_link = 1;
        if (f && n <= USER_FILE_MAX) {
            free(*dst);
            *dst = xmalloc(n + 1);
            memcpy(*dst, f, n);
            (*dst)[n] = '\0';
            *dl = n;
        }
    }
    ds->user_step++;
    if (ds->user_step < 2) {
        dks_user_next(ds);
        return;
    }
    user_decide(ds);
}

int dks_user_needed(struct dk_sb *ds)
{
    struct policy_user u;
    const char *spec = dkspec_opt_str(ds->opts, "user");
    if (!policy_root_forbidden(ds->sb->owner, ds->dp->conf, ds->opts))
        return 0;
    return !policy_user_spell(spec ? spec : "", &u);
}

void dks_user_next(struct dk_sb *ds)
{
    static const char *const files[] = {"/etc/passwd", "/etc/group"};
    if (ds->user_step == 0) {
        free(ds->user_passwd);
        free(ds->user_group);
        ds->user_passwd = ds->user_group = NULL;
        ds->user_passwd_len = ds->user_group_len = 0;
        ds->user_link = 0;
    }
    char *fe = dkapi_escape(files[ds->user_step]);
    char *path = dkapi_path(&ds->dp->eng, "/containers/%s/archive?path=%s", ds->cid, fe);
    free(fe);
    struct dk_req *rq = dkapi_call(&ds->dp->eng, &ds->reqs, "GET", path, NULL,
                                   DK_CALL_TIMEOUT_MS, user_file_done, ds);
    free(path);
    if (!rq) {
        sbx_err_t err = {0};
        err_make(&err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
        user_fail(ds, &err);
    }
}

void dks_user_free(struct dk_sb *ds)
{
    free(ds->user_passwd);
    free(ds->user_group);
    ds->user_passwd = ds->user_group = NULL;
}

/* ---- disk ------------------------------------------------------------------------ */

static const char *disk_mode_name(int m)
{
    return m == DKS_DISK_QUOTA      ? "quota"
           : m == DKS_DISK_MEASURED ? "measured"
                                    : "unknown";
}

static void info_done(struct dk_resp *r, void *data)
{
    struct dk_prov *dp = data;
    if (r->status != 200 || !json_is_object(r->json))
        return;
    const char *drv = json_string_value(json_object_get(r->json, "Driver"));
    snprintf(dp->disk_driver, sizeof(dp->disk_driver), "%s", drv ? drv : "");
    dp->disk_backing[0] = '\0';
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(r->json, "DriverStatus"), i, x) {
        const char *k = json_string_value(json_array_get(x, 0));
        const char *v = json_string_value(json_array_get(x, 1));
        if (k && v && !strcmp(k, "Backing Filesystem"))
            snprintf(dp->disk_backing, sizeof(dp->disk_backing), "%s", v);
    }
    /* Quota where the driver has one per container; overlay2 and vfs only on
     * xfs (with pquota: a create that says otherwise switches to measuring).
     * disk_enforcement: measured never asks for a quota, quota always tries
     * one first (the same fallback). */
    const char *force = json_string_value(json_object_get(dp->conf, "disk_enforcement"));
    if (force && !strcmp(force, "measured"))
        dp->disk_mode = DKS_DISK_MEASURED;
    else if (force && !strcmp(force, "quota"))
        dp->disk_mode =
            dp->disk_mode == DKS_DISK_MEASURED ? DKS_DISK_MEASURED : DKS_DISK_QUOTA;
    else if (!strcmp(dp->disk_driver, "btrfs") || !strcmp(dp->disk_driver, "zfs") ||
             !strcmp(dp->disk_driver, "devicemapper") ||
             !strcmp(dp->disk_driver, "windowsfilter"))
        dp->disk_mode = DKS_DISK_QUOTA;
    else if ((!strcmp(dp->disk_driver, "overlay2") || !strcmp(dp->disk_driver, "vfs")) &&
             !strcmp(dp->disk_backing, "xfs") && dp->disk_mode != DKS_DISK_MEASURED)
        dp->disk_mode = DKS_DISK_QUOTA;
    else
        dp->disk_mode = DKS_DISK_MEASURED;
    log_info("docker: storage driver %s%s%s: disk limits by %s", dp->disk_driver,
             dp->disk_backing[0] ? " on " : "", dp->disk_backing,
             disk_mode_name(dp->disk_mode));
}

static void disk_timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

void dks_engine_up(struct dk_prov *dp)
{
    char *path = dkapi_path(&dp->eng, "/info");
    dkapi_call(&dp->eng, &dp->misc, "GET", path, NULL, DK_CALL_TIMEOUT_MS, info_done, dp);
    free(path);
    if (!ev_is_active(&dp->disk_timer)) {
        json_t *ms = json_object_get(dp->conf, "disk_check_ms");
        double s = (json_is_integer(ms) && json_integer_value(ms) > 0
                        ? (double)json_integer_value(ms)
                        : DISK_CHECK_MS_DEFAULT) /
                   1000.0;
        ev_timer_init(&dp->disk_timer, disk_timer_cb, s, s);
        dp->disk_timer.data = dp;
        ev_timer_start(D->loop, &dp->disk_timer);
    }
}

void dks_unload(struct dk_prov *dp)
{
    ev_timer_stop(D->loop, &dp->disk_timer);
}

static int64_t disk_of(json_t *opts)
{
    json_t *v = json_object_get(opts, "disk");
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

void dks_create_body(struct dk_sb *ds, json_t *body)
{
    int64_t d = disk_of(ds->opts);
    ds->disk_quota = 0;
    if (d <= 0 || ds->dp->disk_mode != DKS_DISK_QUOTA)
        return;
    char sz[32];
    snprintf(sz, sizeof(sz), "%lld", (long long)d);
    json_object_set_new(json_object_get(body, "HostConfig"), "StorageOpt",
                        json_pack("{s:s}", "size", sz));
    ds->disk_quota = 1;
}

int dks_create_failed(struct dk_sb *ds, struct dk_resp *r)
{
    const char *m = r->errmsg;
    if (!ds->disk_quota || r->transport || !m ||
        !(strstr(m, "storage-opt") || strstr(m, "storage opt") || strstr(m, "quota")))
        return 0;
    log_warn("docker: the engine refused a disk quota (%s); disk limits are measured "
             "from now on",
             m);
    ds->dp->disk_mode = DKS_DISK_MEASURED;
    ds->disk_quota = 0;
    ds->phase = PH_CREATE;
    ds->up->step(ds);
    return 1;
}

int dks_disk_total(struct dk_prov *dp, struct sandbox *sb, json_t *opts, sbx_err_t *err)
{
    int64_t want = disk_of(opts);
    json_t *pu = json_object_get(dp->conf, "disk_per_uid");
    int64_t max = pu ? dkspec_parse_size(pu) : 0;
    if (sb->owner == 0 || want <= 0 || max <= 0)
        return 0;
    int64_t sum = 0;
    for (struct sandbox *o = D->sandboxes; o; o = o->next) {
        struct dk_sb *x = o->pdata;
        if (o == sb || o->owner != sb->owner || o->prov->cookie != dp || !x)
            continue;
        sum += disk_of(x->opts);
    }
    if (sum + want <= max)
        return 0;
    return err_make_data(
        err, SBX_E_LIMIT,
        json_pack("{s:s, s:I, s:I, s:I}", "limit", "disk_per_uid", "max", (json_int_t)max,
                  "used", (json_int_t)sum, "requested", (json_int_t)want),
        "docker: your sandboxes' disk limits would add up to %lld bytes, "
        "above providers.docker.disk_per_uid %lld",
        (long long)(sum + want), (long long)max);
}

static void killed(struct dk_resp *r, void *data)
{
    (void)r;
    (void)data;
}

static void size_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    ds->disk_busy = 0;
    if (r->status != 200 || !ds->sb)
        return;
    json_t *rw = json_object_get(r->json, "SizeRw");
    int64_t used = json_is_integer(rw) ? json_integer_value(rw) : 0;
    int64_t lim = disk_of(ds->opts);
    ds->disk_used = used;
    if (lim <= 0 || used <= lim || ds->sb->status != SB_RUNNING)
        return;
    char why[300];
    snprintf(why, sizeof(why),
             "disk limit exceeded: the container's writable layer is %lld bytes, above "
             "options.disk %lld; its processes were killed",
             (long long)used, (long long)lim);
    ds->disk_exceeded = 1;
    char *path = dkapi_path(&ds->dp->eng, "/containers/%s/kill", ds->cid);
    dkapi_call(&ds->dp->eng, &ds->dp->misc, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
               killed, NULL);
    free(path);
    sandbox_lost(ds->sb, why);
}

static void disk_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop;
    (void)revents;
    struct dk_prov *dp = w->data;
    if (!dp->eng.up)
        return;
    for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next) {
        struct dk_sb *ds = sb->pdata;
        if (sb->prov->cookie != dp || !ds || ds->dp != dp || !ds->cid[0] ||
            ds->disk_busy || ds->disk_quota || sb->status != SB_RUNNING ||
            disk_of(ds->opts) <= 0)
            continue;
        char *path = dkapi_path(&dp->eng, "/containers/%s/json?size=1", ds->cid);
        if (dkapi_call(&dp->eng, &ds->disk_reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                       size_done, ds))
            ds->disk_busy = 1;
        free(path);
    }
}

json_t *dks_info(struct dk_prov *dp)
{
    json_t *d =
        json_pack("{s:s, s:s, s:s}", "driver", dp->disk_driver, "backing_filesystem",
                  dp->disk_backing, "enforcement", disk_mode_name(dp->disk_mode));
    int64_t c = dkspec_parse_size(json_object_get(dp->conf, "disk"));
    int64_t u = dkspec_parse_size(json_object_get(dp->conf, "disk_per_uid"));
    json_object_set_new(d, "default", json_integer(c > 0 ? c : 0));
    json_object_set_new(d, "per_uid", json_integer(u > 0 ? u : 0));
    json_t *ms = json_object_get(dp->conf, "disk_check_ms");
    if (dp->disk_mode != DKS_DISK_QUOTA)
        json_object_set_new(d, "check_ms",
                            json_integer(json_is_integer(ms) ? json_integer_value(ms)
                                                             : DISK_CHECK_MS_DEFAULT));
    return d;
}

json_t *dks_metadata(struct dk_sb *ds)
{
    int64_t lim = disk_of(ds->opts);
    if (lim <= 0)
        return NULL;
    json_t *d = json_pack("{s:I, s:s}", "limit", (json_int_t)lim, "enforcement",
                          ds->disk_quota ? "quota" : "measured");
    if (!ds->disk_quota && ds->disk_used > 0)
        json_object_set_new(d, "used", json_integer(ds->disk_used));
    if (ds->disk_exceeded)
        json_object_set_new(d, "exceeded", json_true());
    return d;
}
