/*
 * iso_int.h - the isolate providers' internals (duktape.c, js_share.c,
 * iso_pool.c, iso_text.c): the state of a provider, a sandbox, a worker and
 * a process. The files call down only: duktape.c (the provider table) ->
 * js_share.c -> iso_pool.c; the lower ones report up through the hooks in
 * struct duk_prov (on_frame, on_closed, on_rss, on_new, busy_count,
 * on_kill, on_worker).
 */
#ifndef SBXD_ISO_INT_H
#define SBXD_ISO_INT_H

#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/chan.h"
#include "err.h"
#include "io/obuf.h"
#include "io/pchan.h"

struct process;
struct sandbox;

/* How often a running js worker's RSS is read. */
#define RSS_INTERVAL_S 0.02

struct duk_prov;
struct duk_sb;

struct worker {
    struct worker *next; /* in the pool, or the graveyard */
    struct duk_prov *dp;
    pid_t pid;
    struct chan ch;
    ev_child child;
    int64_t mem_mb;
    int ready; /* HELLO seen */
    int dead;  /* killed or lost: no more frames are acted on */
    struct duk_sb *owner;
    struct process *running;
    /* A recycled worker ran code of this uid and only serves it again;
     * (uid_t)-1 for a worker that never ran anything. */
    uid_t bound_uid;
    int snapshot_wanted; /* 1 = snapshot op, 2 = stop op */
    int jit;             /* js: started with the JIT on */
    uid_t os_uid;        /* the OS uid it runs as, (uid_t)-1 = the shared worker_user */
    int statm_fd;        /* js: /proc/PID/statm, -1 if none */
    /* js: resident pages when the first program after a HELLO started (the
     * engine's own baseline, not the program's), -1 until then */
    long base_pages;
    ev_timer rss;    /* js: the memory watchdog while a program runs */
    struct pchan pc; /* the frames from the worker (io/pchan.h) */
    /* js_share.c: on the provider's list of shared workers running a program */
    struct worker *snext;
    int sbusy;
    int tools_out; /* tool calls it made that wait for the client */
    /* CPU seconds of its JS thread when the stall timer first saw its
     * current run, -1 before: a run is long once it used STALL_CPU_S more */
    double stall_cpu0;
};

struct duk_proc {
    struct process *p;
    struct duk_proc *qnext;
    struct pchan_proc pcp; /* output credit owed (io/pchan.h) */
    struct obuf stdin_buf; /* stdin given before the SPAWN was sent */
    int stdin_eof;
    int spawned;
};

struct duk_sb {
    struct sandbox *sb;
    struct worker *w;
    struct duk_proc *queue, *queue_tail;
    json_t *saved;        /* global state kept across stop/start */
    ev_timer state_timer; /* the budget of a snapshot or stop (snapshot_timeout_s) */
    int starting;
    int reset_pending; /* the next exit result says isolate_reset */
    /* js_share.c: a non-persistent js sandbox holds a worker only while one of
     * its programs runs (ds->w); between runs any idle worker of its uid
     * serves it. */
    int shared;
    int waiting; /* on the provider's queue for a worker */
    struct duk_sb *wnext;
    pid_t last_pid; /* the worker of its last run (metadata, stats) */
};

struct duk_prov {
    const char *name;
    int js; /* the js provider (JavaScriptCore) */
    int jit;
    long page_size;
    char *worker_path;
    int pool_size;
    int64_t mem_mb;
    char *user;
    int fresh;
    int persistent; /* js: the default of sandbox.create's `persistent` */
    /* Per-user worker uids: uid_mode when sbxd is root and worker_uid_base
     * is not 0; uid_off says why not otherwise (daemon.info). */
    int uid_mode;
    uid_t uid_base;
    uid_t uid_count;
    const char *uid_off;
    uid_t refill_uid; /* uid_mode: whom the idle refill warms workers for */
    double state_timeout_s;
    /* duktape.c's handlers of every worker the pool starts */
    chan_frame_cb on_frame;
    chan_close_cb on_closed;
    void (*on_rss)(struct ev_loop *loop, ev_timer *t, int revents);
    void (*on_new)(struct worker *w); /* sets up its frames (w->pc) */
    /* js_share.c's hooks into the pool (NULL when workers are not shared):
     * how many workers running a program of uid ((uid_t)-1: anyone) will
     * come back to the pool, and a worker ending (off the busy list). So
     * iso_pool.c reports up and never calls into js_share.c. */
    int (*busy_count)(struct duk_prov *dp, uid_t uid);
    void (*on_kill)(struct worker *w);
    /* duktape.c's hook for js_share.c: ds got a worker, run its queue. */
    void (*on_worker)(struct duk_sb *ds);
    struct worker *pool;
    int npool;
    /* Refills happen when the loop is idle: a process start (vfork+exec)
     * costs a millisecond or more, and the create that took the worker
     * should get its answer first. */
    ev_idle refill;
    /* js_share.c */
    int share;     /* providers.js.share_workers */
    int share_max; /* shared workers running programs of one uid before the queue */
    struct worker *sbusy;
    struct duk_sb *waitq, *waitq_tail;
    ev_timer stall;
    double last_free; /* ev_now when a shared worker last came free */
};

/* ---- iso_pool.c: the workers and their pool ---- */
void iso_pool_init(struct duk_prov *dp);
/* Starts a worker for socket user for_uid ((uid_t)-1: any user, only without
 * uid_mode). NULL with err set when it cannot. */
struct worker *iso_pool_spawn(struct duk_prov *dp, int64_t mem_mb, int jit, uid_t for_uid,
                              sbx_err_t *err);
/* Ends a worker; the struct lives until the child is reaped. */
void iso_pool_kill(struct worker *w);
void iso_pool_worker_free(struct worker *w);
void iso_pool_remove(struct duk_prov *dp, struct worker *w);
/* Refills the pool now (load) or when the loop is idle. */
void iso_pool_fill_now(struct duk_prov *dp);
void iso_pool_fill(struct duk_prov *dp);
int iso_pool_usable_by(const struct worker *w, uid_t uid);
/* Whether a pool worker can serve a sandbox with this limit and JIT setting. */
int iso_pool_fits(struct duk_prov *dp, int64_t mem_mb, int jit);
/* A ready pool worker of the default size that this uid may use, or NULL. */
struct worker *iso_pool_take(struct duk_prov *dp, int64_t mem_mb, int jit, uid_t uid);
/* Gives a healthy worker back to the pool (RESET); 0 if it can't be. */
int iso_pool_recycle(struct duk_prov *dp, struct worker *w, uid_t owner);
/* The sandbox's memory limit (the core clamped it to the configured ceiling)
 * or the provider's default. */
int64_t iso_pool_sb_mem(struct duk_prov *dp, struct sandbox *sb);
/* LOG frames of w count against its owner's limit, or the pool's. */
void iso_pool_log_to(struct worker *w);

/* js_share.c: a ready (or, `ready` 0, a starting) pool worker usable by uid,
 * the one of pid `prefer` if it is there; taken off the pool. */
struct worker *iso_pool_take_any(struct duk_prov *dp, uid_t uid, int ready, pid_t prefer);
/* Puts an idle, ready worker back on the pool for uid without a RESET; 0 if
 * there is no room. */
int iso_pool_keep(struct duk_prov *dp, struct worker *w, uid_t uid);

/* ---- js_share.c: shared js workers ---- */
/* providers.js.share_workers / shared_workers; the stall timer. */
void js_share_load(struct duk_prov *dp, json_t *conf);
void js_share_unload(struct duk_prov *dp);
/* A shared sandbox starts: its uid's pool is warmed. */
void js_share_start(struct duk_sb *ds);
/* Gives a shared sandbox with a program queued a worker (1) or puts it on
 * the provider's queue (0). */
int js_share_attach(struct duk_sb *ds);
/* The run on w (ds->w) ended: w goes to the next waiting sandbox of the uid
 * or back to the pool; ds's next program is pumped. */
void js_share_done(struct duk_sb *ds, struct worker *w);
/* Off the queue (stop, release). */
void js_share_forget(struct duk_sb *ds);
/* A live worker of the sandbox's last run, or 0. */
pid_t js_share_last_pid(struct duk_sb *ds);

/* ---- iso_text.c: the texts of the isolate providers ---- */
/* The instructions of sandbox.create's answer, malloc'd. */
char *iso_text_duk(struct sandbox *sb, int64_t mem_mb);
char *iso_text_js(struct sandbox *sb, int64_t mem_mb, int persistent);
/* A SyntaxError on a program that reads like shell: a hint on stderr and in rec. */
void iso_text_shell_hint(struct process *p, json_t *rec);

#endif
