/*
 * js_share.c - shared js workers (issue 21): a non-persistent js sandbox
 * holds a worker process only while one of its programs runs. Between runs
 * any idle worker of the same uid serves it, so 64 busy sandboxes of one
 * user run on a few JavaScriptCore processes instead of 64: the runs'
 * CPU cost was dominated by 64 processes of ~30 MB taking turns on the
 * caches and TLBs of 2 cores (README, Benchmark).
 *
 * Why this keeps the code-mode contract: a non-persistent run starts in a
 * fresh global and leaves nothing in the worker but the spare global made
 * after it (in which nothing ran) and the cache of stripped program text,
 * which programs cannot reach; that is what two runs of one sandbox on its
 * own worker already share. Workers never cross uids (bound_uid, and in
 * uid mode each is born as its user's OS uid). One program at a time per
 * worker, as before, so the memory watchdog's RSS, a timeout's SIGKILL and
 * a crash concern that program only; programs of other sandboxes wait in
 * the daemon, not in the worker.
 *
 * At most share_max workers (one per core) run programs of one uid at once
 * (a worker waiting on a tool call does not count, up to 4 x share_max in
 * all); past that a program waits on the provider's queue (FIFO) for the
 * next worker to come free. A queue that no worker has left for STALL_S
 * gets one more worker per STALL_S while every worker running its uid's
 * programs is on a long one (STALL_CPU_S of CPU since the timer first saw
 * it), so a long program delays its neighbours by milliseconds, not by its
 * run time. Wall time alone is not the test: on a loaded machine short
 * programs wait 10 ms for a core too, and each extra worker (a process
 * start of tens of ms of CPU when the pool is empty) made it worse: 64
 * clients fell from ~1,500 to 20-30 runs/s in some windows at load 25.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon.h"
#include "providers/isolate/iso_int.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "log.h"
#include "xalloc.h"

#define STALL_S 0.01
#define STALL_CPU_S 0.005

static int busy_of(struct duk_prov *dp, uid_t uid)
{
    int n = 0;
    for (struct worker *w = dp->sbusy; w; w = w->snext)
        n += w->owner && w->owner->sb->owner == uid && w->tools_out == 0;
    return n;
}

/* Shared workers running a program of uid ((uid_t)-1: of anyone), tool
 * waiters included: the pool's busy_count hook. */
static int busy_all(struct duk_prov *dp, uid_t uid)
{
    int n = 0;
    for (struct worker *w = dp->sbusy; w; w = w->snext)
        n += w->owner && (uid == (uid_t)-1 || w->owner->sb->owner == uid);
    return n;
}

/* Off the list of busy shared workers: the pool's on_kill hook, and a run's end. */
static void unbusy(struct worker *w)
{
    if (!w->sbusy)
        return;
    for (struct worker **pp = &w->dp->sbusy; *pp; pp = &(*pp)->snext)
        if (*pp == w) {
            *pp = w->snext;
            break;
        }
    w->snext = NULL;
    w->sbusy = 0;
}

static void unwait(struct duk_prov *dp, struct duk_sb *ds)
{
    struct duk_sb *prev = NULL;
    if (!ds->waiting)
        return;
    for (struct duk_sb *x = dp->waitq; x; prev = x, x = x->wnext)
        if (x == ds) {
            if (prev)
                prev->wnext = x->wnext;
            else
                dp->waitq = x->wnext;
            if (dp->waitq_tail == x)
                dp->waitq_tail = prev;
            break;
        }
    ds->wnext = NULL;
    ds->waiting = 0;
}

void js_share_forget(struct duk_sb *ds)
{
    if (ds->shared)
        unwait(ds->sb->prov->cookie, ds);
}

/* ds runs its next program on w (ready or still starting: its HELLO then
 * pumps ds). */
static void give(struct duk_sb *ds, struct worker *w)
{
    struct duk_prov *dp = w->dp;
    ds->w = w;
    w->owner = ds;
    w->mem_mb = iso_pool_sb_mem(dp, ds->sb);
    w->bound_uid = ds->sb->owner;
    w->tools_out = 0;
    w->stall_cpu0 = -1;
    w->snext = dp->sbusy;
    dp->sbusy = w;
    w->sbusy = 1;
    /* The pool's refill counts the busy shared workers too (pool_count):
     * they come back to it, and counted out, a refill per run started a
     * process per run that the full pool then ended. */
    if (dp->uid_mode)
        dp->refill_uid = ds->sb->owner;
    iso_pool_fill(dp);
}

void js_share_start(struct duk_sb *ds)
{
    struct duk_prov *dp = ds->sb->prov->cookie;
    if (dp->uid_mode)
        dp->refill_uid = ds->sb->owner;
    iso_pool_fill(dp);
}

/* A worker for ds now: a ready pool worker of its uid, else (below the cap
 * or `force`) a starting one or a new one. NULL when it must wait. */
static struct worker *find(struct duk_prov *dp, struct duk_sb *ds, int force)
{
    uid_t uid = ds->sb->owner;
    struct worker *w;
    /* Workers waiting on a tool call are not counted against share_max,
     * but each is a process of ~30 MB more taking turns on the caches: all
     * of them together stay within 4 x share_max. */
    if (!force &&
        (busy_of(dp, uid) >= dp->share_max || busy_all(dp, uid) >= 4 * dp->share_max))
        return NULL;
    if ((w = iso_pool_take_any(dp, uid, 1, ds->last_pid)) ||
        (w = iso_pool_take_any(dp, uid, 0, 0)))
        return w;
    sbx_err_t err = {0};
    w = iso_pool_spawn(dp, iso_pool_sb_mem(dp, ds->sb), dp->jit, uid, &err);
    if (!w)
        log_warn("sandbox %s: %s", ds->sb->id, err.msg ? err.msg : "no isolate worker");
    err_clear(&err);
    return w;
}

/* CPU seconds of pid's main thread (the JS thread) from /proc/PID/schedstat,
 * -1 if unknown. A /proc file is made by the kernel on read: no wait. */
static double thread_cpu(pid_t pid)
{
    char path[48], buf[96];
    snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    return (double)strtoull(buf, NULL, 10) / 1e9;
}

/* Whether uid's queue may get one more worker: every worker running one of
 * its programs (tool waiters aside) is on a long one. With none running
 * (all wait on tools), only below the 4 x share_max bound. */
static int all_long(struct duk_prov *dp, uid_t uid)
{
    int n = 0, longs = 0;
    for (struct worker *w = dp->sbusy; w; w = w->snext) {
        if (!w->owner || w->owner->sb->owner != uid || w->tools_out > 0)
            continue;
        n++;
        double cpu = thread_cpu(w->pid);
        if (cpu < 0)
            longs++; /* unknown: as before, by wall time alone */
        else if (w->stall_cpu0 < 0)
            w->stall_cpu0 = cpu;
        else if (cpu - w->stall_cpu0 >= STALL_CPU_S)
            longs++;
    }
    return n > 0 ? longs == n : busy_all(dp, uid) < 4 * dp->share_max;
}

static void stall_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct duk_prov *dp = t->data;
    struct duk_sb *ds = dp->waitq;
    if (!ds) {
        ev_timer_stop(loop, t);
        return;
    }
    if (ev_now(loop) - dp->last_free < STALL_S || !all_long(dp, ds->sb->owner))
        return;
    struct worker *w = find(dp, ds, 1);
    if (!w)
        return;
    unwait(dp, ds);
    dp->last_free = ev_now(loop);
    give(ds, w);
    dp->on_worker(ds);
}

int js_share_attach(struct duk_sb *ds)
{
    struct duk_prov *dp = ds->sb->prov->cookie;
    if (ds->w)
        return 1;
    if (ds->waiting || ds->sb->status != SB_RUNNING)
        return 0;
    /* FIFO: nobody of the same uid is overtaken */
    int queued = 0;
    for (struct duk_sb *x = dp->waitq; x && !queued; x = x->wnext)
        queued = x->sb->owner == ds->sb->owner;
    struct worker *w = queued ? NULL : find(dp, ds, 0);
    if (w) {
        give(ds, w);
        return 1;
    }
    ds->waiting = 1;
    ds->wnext = NULL;
    if (dp->waitq_tail)
        dp->waitq_tail->wnext = ds;
    else
        dp->waitq = ds;
    dp->waitq_tail = ds;
    if (!ev_is_active(&dp->stall)) {
        dp->last_free = ev_now(D->loop);
        ev_timer_start(D->loop, &dp->stall);
    }
    return 0;
}

void js_share_done(struct duk_sb *ds, struct worker *w)
{
    struct duk_prov *dp = w->dp;
    uid_t uid = ds->sb->owner;
    unbusy(w);
    ds->w = NULL;
    w->owner = NULL;
    ds->last_pid = w->pid;
    dp->last_free = ev_now(D->loop);
    struct duk_sb *next = NULL;
    for (struct duk_sb *x = dp->waitq; x && !next; x = x->wnext)
        if (x->sb->owner == uid)
            next = x;
    if (next && !w->dead) {
        unwait(dp, next);
        give(next, w);
        dp->on_worker(next);
    } else if (!iso_pool_keep(dp, w, uid)) {
        iso_pool_kill(w);
    }
    if (ds->queue)
        dp->on_worker(ds);
}

/* A live worker of the sandbox's last run (stats, metadata), or 0. */
pid_t js_share_last_pid(struct duk_sb *ds)
{
    struct duk_prov *dp = ds->sb->prov->cookie;
    for (struct worker *w = dp->pool; w; w = w->next)
        if (w->pid == ds->last_pid && !w->dead)
            return w->pid;
    for (struct worker *w = dp->sbusy; w; w = w->snext)
        if (w->pid == ds->last_pid && !w->dead)
            return w->pid;
    return 0;
}

void js_share_load(struct duk_prov *dp, json_t *conf)
{
    json_t *v = json_object_get(conf, "share_workers");
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    dp->share = dp->js && (!v || json_is_true(v));
    v = json_object_get(conf, "shared_workers");
    /* One per core by default: on 2 cores, 2 workers spent 353 us of CPU per
     * `return 1 + 1` under 64 clients, 4 workers 393 us, 8 workers 769 us
     * (js_bench, same hour); a worker waiting on a tool is not counted. */
    dp->share_max = v && json_integer_value(v) > 0 ? (int)json_integer_value(v)
                                                   : (int)(cpus > 2 ? cpus : 2);
    if (dp->share_max > 256)
        dp->share_max = 256;
    ev_timer_init(&dp->stall, stall_cb, STALL_S, STALL_S);
    dp->stall.data = dp;
    if (dp->share) {
        dp->busy_count = busy_all;
        dp->on_kill = unbusy;
    }
}

void js_share_unload(struct duk_prov *dp)
{
    ev_timer_stop(D->loop, &dp->stall);
}
