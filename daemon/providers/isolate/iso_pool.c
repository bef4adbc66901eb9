/*
 * iso_pool.c - the isolate workers as processes, and the pool of warm ones:
 * starting a worker (its OS uid, environment, channel fd), ending and reaping
 * it, and the pool that sandbox.create takes from and gives back to after a
 * RESET. What a worker says is not heard here: its channel, memory timer and
 * frames go to the handlers duktape.c set in struct duk_prov (on_frame,
 * on_closed, on_rss, on_new), so this file never calls back into its caller.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "providers/isolate/iso_int.h"
#include "log.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

extern char **environ;

static struct log_limit pool_log; /* workers not (yet) bound to a sandbox */

/* LOG frames count against the sandbox's agent_log once the worker has one. */
void iso_pool_log_to(struct worker *w)
{
    struct duk_sb *ds = w->owner;
    pchan_set_log(&w->pc, ds ? &ds->sb->agent_log : &pool_log,
                  ds ? ds->sb->id : "isolate pool", 500);
}

void iso_pool_worker_free(struct worker *w)
{
    ev_timer_stop(D->loop, &w->rss);
    if (w->statm_fd >= 0)
        close(w->statm_fd);
    pchan_deinit(&w->pc);
    chan_deinit(&w->ch);
    free(w);
}

static void child_cb(struct ev_loop *loop, ev_child *c, int revents)
{
    struct worker *w = c->data;
    ev_child_stop(loop, c);
    if (!w->dead) {
        char why[64];
        if (WIFSIGNALED(c->rstatus))
            snprintf(why, sizeof(why), "isolate worker died (signal %d)",
                     WTERMSIG(c->rstatus));
        else
            snprintf(why, sizeof(why), "isolate worker exited (%d)",
                     WEXITSTATUS(c->rstatus));
        w->dp->on_closed(&w->ch, why, w);
    }
    iso_pool_worker_free(w);
}

/*
 * The OS uid of socket user `uid`'s workers: base + uid (README "Security").
 * One socket uid, one worker uid, so no user's process can signal another
 * user's worker; a uid beyond the range gets no worker at all rather than a
 * shared one. Returns 0, or -1 with err set (-32005, limit worker_uid_count).
 */
static int worker_uid(struct duk_prov *dp, uid_t uid, uid_t *out, sbx_err_t *err)
{
    if (uid >= dp->uid_count)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:I, s:s, s:I, s:I}", "limit", "worker_uid_count", "max",
                      (json_int_t)dp->uid_count, "provider", dp->name, "uid",
                      (json_int_t)uid, "base", (json_int_t)dp->uid_base),
            "%s: no isolate worker uid for uid %u: the range "
            "providers.%s.worker_uid_base %u + worker_uid_count %u covers socket "
            "uids 0..%u only",
            dp->name, (unsigned)uid, dp->name, (unsigned)dp->uid_base,
            (unsigned)dp->uid_count, (unsigned)(dp->uid_count - 1));
    *out = dp->uid_base + uid;
    return 0;
}

/* Starts a worker for socket user `for_uid` ((uid_t)-1: any user, only
 * without uid_mode). NULL with err set when it cannot. */
struct worker *iso_pool_spawn(struct duk_prov *dp, int64_t mem_mb, int jit, uid_t for_uid,
                              sbx_err_t *err)
{
    uid_t os_uid = (uid_t)-1;
    if (dp->uid_mode && worker_uid(dp, for_uid, &os_uid, err) < 0)
        return NULL;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        err_make(err, SBX_E_PROVIDER, "%s: cannot start a worker: %s", dp->name,
                 strerror(errno));
        return NULL;
    }
    char mem[32], a0[] = "sbxd-worker", a1[] = "--worker", a2[] = "--fd", a3[] = "3",
                  a4[] = "--memory-limit-mb", a6[] = "--user", a7[] = "--uid",
                  j0[] = "sbxd-jsworker", idbuf[24];
    snprintf(mem, sizeof(mem), "%lld", (long long)mem_mb);
    snprintf(idbuf, sizeof(idbuf), "%u", (unsigned)os_uid);
    char *who_opt = dp->uid_mode ? a7 : dp->user ? a6 : NULL;
    char *who = dp->uid_mode ? idbuf : dp->user;
    char *argv[] = {a0, a1, a2, a3, a4, mem, who_opt, who, NULL};
    /* The js worker needs no memory option: its limit is watched from here. */
    char *jargv[] = {j0, a2, a3, who_opt, who, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* dup2 clears CLOEXEC on fd 3; everything else of ours is CLOEXEC. */
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    /* libev blocks/handles signals in the parent; the worker starts clean. */
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char noseccomp[] = "SBX_NO_SECCOMP=1", nojit[] = "JSC_useJIT=false";
    char *envp[5] = {NULL, NULL, NULL, NULL, NULL};
    int ne = 0;
    if (getenv("SBX_NO_SECCOMP"))
        envp[ne++] = noseccomp;
    if (dp->js && !jit)
        envp[ne++] = nojit;
    /* A sanitized build's workers get the suite's sanitizer options; a js
     * worker's RSS is watched against its limit, so ASan's quarantine of
     * freed memory (256 MB by default) is kept small there. */
    char *asan = NULL, *ubsan = NULL;
    if (getenv("SBX_SANITIZED") && getenv("ASAN_OPTIONS") &&
        asprintf(&asan, "ASAN_OPTIONS=%s%s", getenv("ASAN_OPTIONS"),
                 dp->js ? ":quarantine_size_mb=8:thread_local_quarantine_size_kb=64"
                        : "") > 0)
        envp[ne++] = asan;
    if (getenv("SBX_SANITIZED") && getenv("UBSAN_OPTIONS") &&
        asprintf(&ubsan, "UBSAN_OPTIONS=%s", getenv("UBSAN_OPTIONS")) > 0)
        envp[ne++] = ubsan;
    pid_t pid;
    int r = posix_spawn(&pid, dp->worker_path, &fa, &at, dp->js ? jargv : argv, envp);
    free(asan);
    free(ubsan);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(sv[1]);
    if (r != 0) {
        err_make(err, SBX_E_PROVIDER, "%s: cannot start a worker: %s", dp->name,
                 strerror(r));
        close(sv[0]);
        return NULL;
    }
    struct worker *w = xcalloc(1, sizeof(*w));
    w->dp = dp;
    w->pid = pid;
    w->mem_mb = mem_mb;
    w->jit = jit;
    /* A worker of a uid of its own serves that socket user only, from birth. */
    w->bound_uid = dp->uid_mode ? for_uid : (uid_t)-1;
    w->os_uid = os_uid;
    w->statm_fd = -1;
    w->base_pages = -1;
    ev_timer_init(&w->rss, dp->on_rss, RSS_INTERVAL_S, RSS_INTERVAL_S);
    w->rss.data = w;
    if (dp->js) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
        w->statm_fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    chan_init_fd(&w->ch, sv[0], dp->on_frame, dp->on_closed, w);
    dp->on_new(w);
    ev_child_init(&w->child, child_cb, pid, 0);
    w->child.data = w;
    ev_child_start(D->loop, &w->child);
    return w;
}

/* Ends a worker. The struct lives until the child is reaped. */
void iso_pool_kill(struct worker *w)
{
    if (w->dead)
        return;
    w->dead = 1;
    if (w->dp->on_kill)
        w->dp->on_kill(w);
    kill(w->pid, SIGKILL);
    ev_timer_stop(D->loop, &w->rss);
    chan_close(&w->ch);
}

void iso_pool_remove(struct duk_prov *dp, struct worker *w)
{
    for (struct worker **pp = &dp->pool; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            w->next = NULL;
            dp->npool--;
            return;
        }
}

/* Without uid_mode the pool's workers serve anyone (until first used); with
 * it, each is born for one socket user, so the pool warms workers for the
 * user who last took one (refill_uid) and counts only theirs. */
static int pool_count(struct duk_prov *dp)
{
    /* shared workers running a program come back to the pool (js_share.c) */
    int (*busy)(struct duk_prov *, uid_t) = dp->busy_count;
    if (!dp->uid_mode)
        return dp->npool + (busy ? busy(dp, (uid_t)-1) : 0);
    int n = busy ? busy(dp, dp->refill_uid) : 0;
    for (struct worker *w = dp->pool; w; w = w->next)
        n += w->bound_uid == dp->refill_uid;
    return n;
}

/* The pool holds at most 2 * pool_size workers. With uid_mode, room for
 * user `uid` is made by ending an idle worker of another user (the pool's
 * oldest): workers of a user who went away must not keep the active one
 * from recycling its own. Returns 1 when there is room. */
static int pool_room(struct duk_prov *dp, uid_t uid)
{
    if (dp->npool < 2 * dp->pool_size)
        return 1;
    if (!dp->uid_mode)
        return 0;
    struct worker *victim = NULL;
    for (struct worker *w = dp->pool; w; w = w->next)
        if (w->bound_uid != uid && w->ready)
            victim = w; /* the last one: the pool's oldest */
    if (!victim)
        return 0;
    iso_pool_remove(dp, victim);
    iso_pool_kill(victim);
    return 1;
}

static int pool_add_one(struct duk_prov *dp)
{
    sbx_err_t err = {0};
    if (dp->uid_mode && (dp->refill_uid == (uid_t)-1 || !pool_room(dp, dp->refill_uid)))
        return -1;
    struct worker *w = iso_pool_spawn(dp, dp->mem_mb, dp->jit,
                                      dp->uid_mode ? dp->refill_uid : (uid_t)-1, &err);
    if (!w) {
        log_error("%s", err.msg ? err.msg : "cannot start a worker");
        err_clear(&err);
        return -1;
    }
    w->next = dp->pool;
    dp->pool = w;
    dp->npool++;
    return 0;
}

void iso_pool_fill_now(struct duk_prov *dp)
{
    while (!D->draining && pool_count(dp) < dp->pool_size && pool_add_one(dp) == 0)
        ;
}

static void refill_cb(struct ev_loop *loop, ev_idle *w, int revents)
{
    struct duk_prov *dp = w->data;
    ev_idle_stop(loop, w);
    /* one per idle turn, so a burst of creates is not held up by a burst of spawns */
    if (pool_count(dp) < dp->pool_size && !D->draining && pool_add_one(dp) == 0 &&
        pool_count(dp) < dp->pool_size)
        ev_idle_start(loop, w);
}

void iso_pool_fill(struct duk_prov *dp)
{
    if (pool_count(dp) < dp->pool_size && !D->draining)
        ev_idle_start(D->loop, &dp->refill);
}

int iso_pool_usable_by(const struct worker *w, uid_t uid)
{
    return !w->dead && (w->bound_uid == (uid_t)-1 || w->bound_uid == uid);
}

/* Whether a pool worker can serve a sandbox with this limit and JIT setting:
 * a Duktape worker is started for its heap limit; a js worker's limit is
 * watched from here, so only the JIT setting (its environment) must match. */
int iso_pool_fits(struct duk_prov *dp, int64_t mem_mb, int jit)
{
    return dp->js ? jit == dp->jit : mem_mb == dp->mem_mb;
}

/* A ready pool worker of the default size that this uid may use, or NULL. */
struct worker *iso_pool_take(struct duk_prov *dp, int64_t mem_mb, int jit, uid_t uid)
{
    if (!iso_pool_fits(dp, mem_mb, jit))
        return NULL;
    for (struct worker *w = dp->pool; w; w = w->next)
        if (w->ready && iso_pool_usable_by(w, uid)) {
            iso_pool_remove(dp, w);
            return w;
        }
    return NULL;
}

/* Gives a healthy worker back to the pool after a RESET instead of killing
 * it: a process start costs far more than a fresh heap. Only the same owner
 * gets it again, so whatever an escape left in the process stays with the
 * uid that put it there. Returns 0 if the worker can't be recycled. */
int iso_pool_recycle(struct duk_prov *dp, struct worker *w, uid_t owner)
{
    if (w->dead || !w->ready || w->running || w->snapshot_wanted ||
        !iso_pool_fits(dp, w->mem_mb, w->jit) || D->draining || !pool_room(dp, owner))
        return 0;
    if (chan_send(&w->ch, SBX_CHAN_RESET, 0, NULL, 0) < 0)
        return 0;
    w->ready = 0; /* until the new HELLO */
    w->owner = NULL;
    iso_pool_log_to(w);
    w->bound_uid = owner;
    w->next = dp->pool;
    dp->pool = w;
    dp->npool++;
    return 1;
}

void iso_pool_init(struct duk_prov *dp)
{
    ev_idle_init(&dp->refill, refill_cb);
    dp->refill.data = dp;
}

/* The sandbox's memory limit (the core clamped it to the configured
 * ceiling) or the provider's default. */
int64_t iso_pool_sb_mem(struct duk_prov *dp, struct sandbox *sb)
{
    json_int_t m = json_integer_value(json_object_get(sb->conf, "memory_limit_mb"));
    return m > 0 ? m : dp->mem_mb;
}

struct worker *iso_pool_take_any(struct duk_prov *dp, uid_t uid, int ready, pid_t prefer)
{
    struct worker *got = NULL;
    for (struct worker *w = dp->pool; w && !(got && got->pid == prefer); w = w->next)
        if (!w->ready == !ready && iso_pool_usable_by(w, uid) &&
            (!got || w->pid == prefer))
            got = w;
    if (got)
        iso_pool_remove(dp, got);
    return got;
}

int iso_pool_keep(struct duk_prov *dp, struct worker *w, uid_t uid)
{
    if (w->dead || !w->ready || w->running || D->draining || !pool_room(dp, uid))
        return 0;
    w->bound_uid = uid;
    w->next = dp->pool;
    dp->pool = w;
    dp->npool++;
    return 1;
}
