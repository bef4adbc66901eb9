/*
 * docker_stats.c - sandbox.stats for Docker sandboxes, from the engine's
 * stats endpoint (GET /containers/ID/stats?stream=false).
 *
 * Why the engine and not the agent reading /sys/fs/cgroup: the engine reads
 * the same cgroup files, knows the cgroup driver and version, counts the
 * network namespace, and gives a CPU percentage over a one-second window
 * (precpu_stats) without sbxd keeping samples; the agent would need a frame
 * pair and a cgroup parser for each layout. The cost is the engine's second
 * of sampling per answer, spent in the engine, not on our loop.
 *
 * memory.peak: cgroup v1 reports max_usage; on v2 the engine does not, so
 * "peak" is the highest use sbxd has sampled (documented in PROTOCOL.md).
 * With size, a second call (inspect ?size=1) adds the writable layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

struct st_req {
    struct dk_prov *dp;
    char *sb_id;
    char cid[80];
    int with_size;
    json_t *stats; /* built from the first answer when a size follows */
    void (*done)(void *data, json_t *stats, sbx_err_t *err);
    void *data;
};

static void st_finish(struct st_req *q, json_t *stats, sbx_err_t *err)
{
    q->done(q->data, stats, err);
    json_decref(q->stats);
    free(q->sb_id);
    free(q);
}

static json_int_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* The sandbox still there (it may have gone while the engine answered). */
static struct dk_sb *st_sandbox(struct st_req *q)
{
    struct sandbox *sb = sandbox_find_any(q->sb_id);
    struct dk_sb *ds = dk_sb_of(sb);
    if (!ds)
        return NULL;
    return strcmp(ds->cid, q->cid) == 0 ? ds : NULL;
}

static json_t *cpu_of(json_t *j)
{
    json_t *cs = json_object_get(j, "cpu_stats"),
           *ps = json_object_get(j, "precpu_stats");
    double total = (double)jint(json_object_get(cs, "cpu_usage"), "total_usage");
    double pre = (double)jint(json_object_get(ps, "cpu_usage"), "total_usage");
    double sys = (double)jint(cs, "system_cpu_usage");
    double psys = (double)jint(ps, "system_cpu_usage");
    json_int_t ncpu = jint(cs, "online_cpus");
    if (ncpu <= 0)
        ncpu = (json_int_t)json_array_size(
            json_object_get(json_object_get(cs, "cpu_usage"), "percpu_usage"));
    if (ncpu <= 0)
        ncpu = 1;
    /* docker stats' formula: share of the host's CPU time, times the CPUs
     * (100% = one core busy). */
    double pct = 0;
    if (sys > psys && total >= pre && pre > 0)
        pct = (total - pre) / (sys - psys) * (double)ncpu * 100.0;
    return json_pack("{s:f, s:f, s:I}", "usage_s", total / 1e9, "percent", pct, "online",
                     ncpu);
}

static json_t *memory_of(json_t *j, struct dk_sb *ds)
{
    json_t *ms = json_object_get(j, "memory_stats"), *st = json_object_get(ms, "stats");
    json_int_t usage = jint(ms, "usage");
    /* As docker stats: the page cache the kernel can drop is not "used". */
    json_int_t cache = json_object_get(st, "inactive_file")
                           ? jint(st, "inactive_file")
                           : jint(st, "total_inactive_file");
    json_int_t cur = usage > cache ? usage - cache : usage;
    json_int_t peak = jint(ms, "max_usage");
    if (ds) {
        if ((uint64_t)cur > ds->mem_peak)
            ds->mem_peak = (uint64_t)cur;
        if (peak <= 0)
            peak = (json_int_t)ds->mem_peak;
    }
    json_t *m = json_pack("{s:I, s:I, s:I}", "current", cur, "usage", usage, "peak",
                          peak > cur ? peak : cur);
    json_int_t lim = jint(ms, "limit");
    json_object_set_new(m, "limit", lim > 0 ? json_integer(lim) : json_null());
    return m;
}

static json_t *blkio_of(json_t *j)
{
    json_int_t rd = 0, wr = 0;
    size_t i;
    json_t *e;
    json_array_foreach(
        json_object_get(json_object_get(j, "blkio_stats"), "io_service_bytes_recursive"),
        i, e) {
        const char *op = json_string_value(json_object_get(e, "op"));
        if (op && strcasecmp(op, "read") == 0)
            rd += jint(e, "value");
        else if (op && strcasecmp(op, "write") == 0)
            wr += jint(e, "value");
    }
    return json_pack("{s:I, s:I}", "read_bytes", rd, "write_bytes", wr);
}

static json_t *network_of(json_t *j)
{
    json_t *nets = json_object_get(j, "networks");
    if (!json_is_object(nets) || json_object_size(nets) == 0)
        return json_null(); /* network: none */
    json_int_t rx = 0, tx = 0;
    const char *k;
    json_t *v;
    json_object_foreach(nets, k, v) {
        rx += jint(v, "rx_bytes");
        tx += jint(v, "tx_bytes");
    }
    return json_pack("{s:I, s:I}", "rx_bytes", rx, "tx_bytes", tx);
}

static void size_done(struct dk_resp *r, void *data)
{
    struct st_req *q = data;
    if (r->status != 200 || !r->json) {
        sbx_err_t err = {0};
        dkapi_err(&err, r, "inspect container size");
        st_finish(q, NULL, &err);
        err_clear(&err);
        return;
    }
    json_t *s = q->stats;
    q->stats = NULL;
    json_object_set_new(s, "disk",
                        json_pack("{s:I, s:I}", "writable_bytes", jint(r->json, "SizeRw"),
                                  "rootfs_bytes", jint(r->json, "SizeRootFs")));
    st_finish(q, s, NULL);
}

static void stats_done(struct dk_resp *r, void *data)
{
    struct st_req *q = data;
    if (r->status != 200 || !json_is_object(r->json)) {
        sbx_err_t err = {0};
        dkapi_err(&err, r, "container stats");
        st_finish(q, NULL, &err);
        err_clear(&err);
        return;
    }
    struct dk_sb *ds = st_sandbox(q);
    json_t *pids = json_object_get(r->json, "pids_stats");
    json_t *s =
        json_pack("{s:o, s:o, s:{s:I}, s:o, s:o}", "cpu", cpu_of(r->json), "memory",
                  memory_of(r->json, ds), "pids", "current", jint(pids, "current"),
                  "block_io", blkio_of(r->json), "network", network_of(r->json));
    json_t *eg = ds ? dkn_egress_stats(ds) : NULL;
    if (eg)
        json_object_set_new(s, "egress", eg);
    if (ds) /* net18: exposed ports, their bounds */
        json_object_set_new(s, "ports", dkn_stats(ds));
    json_int_t plim = jint(pids, "limit");
    if (plim > 0 && plim < ((json_int_t)1 << 53))
        json_object_set_new(json_object_get(s, "pids"), "limit", json_integer(plim));
    if (!q->with_size) {
        st_finish(q, s, NULL);
        return;
    }
    q->stats = s;
    char *path = dkapi_path(&q->dp->eng, "/containers/%s/json?size=1", q->cid);
    struct dk_req *rq = dkapi_call(&q->dp->eng, &q->dp->misc, "GET", path, NULL,
                                   DK_CALL_TIMEOUT_MS, size_done, q);
    free(path);
    if (!rq) {
        sbx_err_t err = {0};
        err_make(&err, SBX_E_PROVIDER, "docker: cannot ask for the container's size");
        st_finish(q, NULL, &err);
        err_clear(&err);
    }
}

int dkstats_sb_stats(void *cookie, struct sandbox *sb, int with_size,
                     void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                     sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (!ds || !ds->cid[0])
        return err_make(err, SBX_E_STATE, "sandbox %s has no container", sb->id);
    struct st_req *q = xcalloc(1, sizeof(*q));
    q->dp = dp;
    q->sb_id = xstrdup(sb->id);
    snprintf(q->cid, sizeof(q->cid), "%s", ds->cid);
    q->with_size = with_size;
    q->done = done;
    q->data = data;
    /* Not one-shot: the engine samples twice, a second apart, so that
     * precpu_stats gives the CPU percentage of that second. */
    char *path = dkapi_path(&dp->eng, "/containers/%s/stats?stream=false", ds->cid);
    struct dk_req *rq = dkapi_call(&dp->eng, &dp->misc, "GET", path, NULL,
                                   DK_CALL_TIMEOUT_MS, stats_done, q);
    free(path);
    if (!rq) {
        free(q->sb_id);
        free(q);
        return err_make(err, SBX_E_PROVIDER,
                        "docker: cannot ask for the container's stats");
    }
    return 0;
}
