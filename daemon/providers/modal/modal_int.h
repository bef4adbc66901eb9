/*
 * modal_int.h - what the rooms of the Modal provider share. From the top
 * down: each file calls only files below it (news that must go up goes
 * through struct mhooks, which modal.c fills at load), and each non-static
 * name starts with its file's prefix.
 *
 *   file             prefix            what it is
 *   modal.c          sbx_provider_modal the provider table, configuration,
 *                                      credentials, adopting the state file's
 *                                      sandboxes and snapshots at load
 *   modal_life.c     modal_life_       the provider's sandbox ops and the step
 *                                      table {RPC, build the request, on the
 *                                      reply} of the lifecycle jobs
 *   modal_create.c   modal_create_     the start/restart steps (app, lookup,
 *                                      image, secret, create, task, tags)
 *   modal_stop.c     modal_stop_       the stop/snapshot/destroy steps
 *   modal_job.c      modal_job_        runs a job through the step table, ends
 *                                      it, watches the sandbox while it runs
 *   modal_proc.c     modal_proc_       processes: starting the exec (on the
 *                                      TaskCommandRouter, ContainerExec when
 *                                      it is refused), kill, the process ops,
 *                                      adoption after a restart
 *   modal_pout.c     modal_pout_       a process's output streams, its wait
 *                                      and its exit report
 *   modal_stdin.c    modal_stdin_      a process's stdin, also after a restart
 *   modal_kill.c     modal_kill_       the killer exec that ends a tagged
 *                                      command (processes, tar archives)
 *   modal_fs.c       modal_fs_         fs.* through the filesystem tool
 *   modal_fsmv.c     modal_fs_mv_      fs.rename's helper
 *   modal_fstar.c    modal_fstar_      tar archives' helper (fs.read/fs.write
 *                                      format "tar"), counting their entries
 *   modal_fswatch.c  modal_fswatch_    fs.watch (the tool's Watch)
 *   modal_fs_parse.c modal_fs_parse_   the tool's output parsers (untrusted),
 *                    modal_fs_errno    and its error kinds as errno names
 *   modal_ws.c       modal_ws_         ports, egress, stats (modal_ws.h,
 *                                      modal_ws_int.h)
 *   modal_router.c   modal_router_     the link to the command router: access
 *                                      (URL + JWT) per task, refreshed before
 *                                      it expires, one TLS HTTP/2 channel per
 *                                      worker URL
 *   modal_snap.c     modal_snap_       snapshot ttls
 *   modal_state.c    modal_state_      the state file (what survives an sbxd
 *                                      restart), written off the loop
 *   modal_util.c     modal_ (bare)     the leaf: replies, errors, ids, auth
 *                                      headers and token, the fire-and-forget
 *                                      SandboxTerminate and ImageDelete
 *   grpc.c           grpc_             a generic gRPC client on curlev (grpc.h)
 *
 * Not a public header: only these files include it, and the tests that reach
 * their internals (tests/fuzz/fuzz_modal*.c, tests/unit).
 */
#ifndef SBXD_MODAL_INT_H
#define SBXD_MODAL_INT_H

#include <pthread.h>
#include <stdint.h>

#include "daemon.h"
#include "providers/modal/grpc.h"
#include "modal_api.pb-c.h"
#include "task_command_router.pb-c.h"
#include "io/obuf.h"
#include "core/process.h"
#include "core/provider.h"
#include "core/sandbox.h"

#define UNARY_TIMEOUT_S 60.0
#define POLL_S 55.0            /* server-side long poll, as the SDK */
#define POLL_SLACK_S 30.0      /* our transfer timeout on top of it */
#define RETRY_BUDGET_MS 120000 /* default providers.modal.retry_budget_ms */
#define TAG_OWNER "sbxd_owner_uid"
#define TAG_ID "sbxd_id"

/* Writes the state file off the loop (see modal_state.c). */
struct state_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *next;  /* the newest serialized state not taken yet (under mu) */
    int quit;    /* under mu */
    int error;   /* errno of a failed write, for the loop (under mu) */
    int started; /* loop only */
    ev_async done;
};

/* One TLS HTTP/2 connection (a channel) per command-router URL (a worker),
 * shared by every task on it; kept until the provider unloads. */
struct mrouter {
    struct grpc_chan ch;
    char *url;
    struct mrouter *next;
};

struct mfs;
struct mwatch;
struct mws; /* modal_ws.c: ports, egress, stats (issue 18) */

enum rt_mode { RT_UNKNOWN, RT_FETCHING, RT_ON, RT_OFF };

struct msb;
struct mproc;
struct job_step;

/*
 * What a lower room reports to a higher one. Each room calls only down the
 * list above; news that must go up (the router's access is settled, the
 * lifecycle has the sandbox running again) goes through these, which modal.c,
 * the top, fills at load with the higher rooms' functions.
 */
struct mhooks {
    /* modal_life.c -> processes: a restart ended (failure: why, or NULL) */
    void (*waiters_resume)(struct msb *ms, const char *failure);
    /* modal_router.c -> lifecycle: the access a step waited for is settled */
    void (*job_router_ready)(struct msb *ms);
    /* modal_router.c -> lifecycle: the Modal sandbox is gone */
    void (*mark_dead)(struct msb *ms, const char *why);
    /* modal_router.c -> files and processes: the access is settled */
    void (*fs_router_ready)(struct msb *ms, const char *failure);
    void (*proc_router_ready)(struct mproc *m, const char *failure);
};

struct mprov {
    struct grpc_chan ch;
    char *host;              /* of url: the x-modal-host header */
    char *ca_file;           /* providers.modal.ca_file: verifies https peers */
    int container_exec_only; /* providers.modal.exec_transport: container_exec */
    int backend_v2;          /* providers.modal.backend: new sandboxes are V2 */
    struct mrouter *routers;
    int ready;        /* credentials and a channel */
    char reason[256]; /* why not ready */
    char *url, *app_name, *environment, *image, *working_dir;
    char *token_id, *token_secret; /* sent on every call */
    double cpu;
    int64_t memory_mb;
    int64_t max_timeout_ms;
    double retry_budget_s; /* how long exec streams and waits retry in an outage */
    /* sandbox.snapshot images: -1 never expire, 0 Modal's default */
    int64_t snapshot_ttl_s;
    int64_t snapshot_ttl_max_s; /* the ceiling of a ttl asked; -1 none (modal_snap.c) */
    json_t *apps;               /* "env/name" -> app_id */
    json_t *images;             /* tag -> image_id */
    char *builder_version;      /* providers.modal.image_builder_version (NULL: ask) */
    json_t *builders;           /* environment -> the workspace's image builder version */
    char last_error[512];
    /* Output flow control: 1 = pause the HTTP/2 stream (CURL_WRITEFUNC_PAUSE,
     * resumed with curl_easy_pause), the default. 0 (SBXD_MODAL_CURL_PAUSE=0) =
     * close a blocked output stream and reopen it from its last batch index on
     * resume: the way out if a libcurl stalls paused h2 streams (curl issues
     * 10988, 16955). Either way a stuck stream ends at its transfer timeout
     * and is reopened from the last batch. */
    int curl_pause;
    json_t *ws_conf; /* modal_ws.c: expose, expose_max_ports, egress */
    int ws_adopting; /* modal_ws.c: options of a sandbox adopted at load */

    /* What survives an sbxd restart (see "state file" below). */
    char *state_path; /* NULL: nothing is kept */
    json_t *saved;    /* read at load, adopted on the first loop iteration */
    json_t *snaps;    /* snapshot id -> {owner, created_at, sandbox, data} */
    ev_timer adopt_timer;
    ev_timer save_timer; /* writes at most once per STATE_SAVE_DELAY_S */
    struct state_writer writer;
    int dirty;
    /* Every Modal sandbox object, until released: at shutdown the core has
     * already taken them out of its registry when the first one is released
     * (and the pending write goes out). */
    struct msb *all;
    struct mhooks hooks; /* filled by modal.c at load */
    /* modal_life.c's step table, which modal_job.c runs (set by modal.c at load) */
    const struct job_step *steps;
};

enum mjob { J_NONE, J_START, J_RESTART, J_STOP, J_DESTROY, J_SNAPSHOT };

enum mstep {
    ST_APP,
    ST_LOOKUP,
    ST_IMAGE,
    ST_BUILDER, /* the workspace's image builder version (EnvironmentGetOrCreate) */
    ST_IMAGE_BUILD,
    ST_IMAGE_JOIN,
    ST_SNAP_IMAGE,
    ST_SECRET,
    ST_CREATE,
    ST_TASK,
    ST_TAGS_SET,
    ST_TAGS_CHECK,
    ST_STOP_SNAP,   /* picks ST_STOP_TSNAP (the router) or ST_STOP_SNAPFS */
    ST_STOP_TSNAP,  /* TaskSnapshotFilesystem, never expiring */
    ST_STOP_SNAPFS, /* SandboxSnapshotFs, the fallback */
    ST_STOP_CHECK,
    ST_TERMINATE,
    ST_SNAPSHOT, /* picks ST_TSNAP or ST_SNAPFS */
    ST_TSNAP,    /* TaskSnapshotFilesystem with providers.modal.snapshot_ttl_s */
    ST_SNAPFS,
    ST_COUNT
};

/* What a step's send function did. */
enum { STEP_ON = 0, STEP_WAIT = 1 };

/* One row of the lifecycle's step table (modal_life.c), indexed by enum mstep. */
struct job_step {
    const char *method; /* the RPC of the step; NULL: it decides without one */
    const ProtobufCMessageDescriptor *reply; /* decoded for on_reply; NULL: not read */
    /* Builds and sends the request: STEP_WAIT (a call runs, or the job ended),
     * or STEP_ON after moving ms->step on without a call. */
    int (*send)(struct msb *ms);
    /* The reply: r is the decoded message (NULL if the call failed or it does
     * not decode), freed after this returns. May end the job and free ms. */
    void (*on_reply)(struct msb *ms, const struct grpc_status *st, void *r);
};

struct msb {
    struct sandbox *sb;
    struct mprov *mp;
    char *app_name, *env_name, *app_id;
    char *image_tag;
    char *image_id;     /* image of the current Modal sandbox */
    char *resume_image; /* saved by stop: the next start uses it */
    int resume_shared;  /* a sandbox.snapshot handed it out: never deleted by sbxd */
    char *sandbox_id, *task_id;
    char *workdir;
    double cpu;
    int64_t memory_mb;
    uint32_t timeout_secs, idle_secs;
    json_t *baked_env; /* what the sandbox's secret holds */
    char *secret_id;
    int reconnected, restarts, last_retried, adopting, lookup_done;
    int dead;
    char *dead_reason;

    enum mjob job;
    enum mstep step;
    struct grpc_call *call;
    ev_timer timer; /* task id polling */
    int polls;
    char *join_entry;
    int join_fails, join_result; /* join_result: GenericStatus seen, 0 = none */
    char *join_exception;
    enum mjob pending_op; /* a lifecycle op that waits for a restart */

    struct mproc *procs;             /* live processes */
    struct mproc *waiters;           /* processes waiting for the restart */
    int destroyed;                   /* terminated: no longer kept in the state file */
    struct msb *all_next, *all_prev; /* mp->all */
    json_t *warnings;             /* a found-by-name sandbox differs from the request */
    struct grpc_call *check_call; /* after adoption: is the Modal sandbox still there? */
    struct grpc_call *watch_call; /* during a lifecycle job: does the sandbox end? */
    ev_timer watch_timer;         /* SandboxWait again after a failure */
    ev_timer lost_timer;          /* ends a job that depends on a lost sandbox */

    int v2; /* a V2 sandbox (by its id's shape): the *V2 calls */

    /* The command router of the current task (modal_router.c). */
    enum rt_mode rt_mode;
    char *rt_task; /* the task the access below is for */
    char *rt_jwt;
    char *rt_auth;  /* "authorization: Bearer <jwt>" */
    char *rt_why;   /* RT_OFF: why the router is not used */
    double rt_exp;  /* wall clock when the JWT expires; 0: unknown */
    double rt_life; /* how long the current JWT was good for when it came */
    struct mrouter *router;
    struct grpc_call *rt_call; /* TaskGetCommandRouterAccess in flight */
    ev_timer rt_timer;         /* fetches the access again before it expires */
    struct mproc *rt_waiters;  /* processes waiting for the access */
    int rt_job_waiting;        /* a lifecycle step waits for the access too */
    int rt_job_tries;          /* accesses the current job waited for */
    char snap_uuid[40];        /* TaskSnapshotFilesystem.snapshot_id of the current job */

    /* fs.* (modal_fs.c): operations in flight and open writes. */
    struct mfs *fs_ops;
    int rt_fs_waiting;      /* some of them wait for the router access */
    struct mwatch *watches; /* fs.watch (modal_fswatch.c) */
    struct mws *ws;         /* modal_ws.c: declared ports, egress, stats (NULL: none) */
};

struct mproc {
    struct process *p;
    struct msb *ms;
    struct mproc *next, *prev; /* ms->procs */
    struct mproc *wnext;       /* ms->waiters */
    int waiting;
    char tag[40];
    char argv0[48]; /* "sbxd-<tag>": $0 of the wrapper shell */
    char *exec_id;
    struct grpc_call *exec_call, *out[2], *wait_call, *stdin_call, *check_call;
    uint64_t last_batch[2];
    double out_t0[2];
    int out_got[2], out_done[2], out_fails[2], reopen[2];
    int have_exit, exit_code;
    char *exit_error;
    int gone;
    int retried, restarted;
    int paused;
    struct obuf stdin_q;
    int stdin_eof, stdin_eof_sent, stdin_broken;
    uint64_t stdin_index;
    int kill_sig, kill_escalated;
    ev_timer kill_timer;
    ev_timer grace;
    ev_timer report_timer;
    ev_timer retry_timer;
    int wait_fails;
    double wait_fail_t0; /* first failure of the current run of failures, 0 = none */
    double out_fail_t0[2];
    ev_timer out_timer[2]; /* reopen a broken output stream after a backoff */
    int exec_fails;
    double exec_fail_t0;
    ev_timer exec_timer; /* ContainerExec again after a failure short of Modal */
    int incomplete;      /* some output could not be read: never a clean exit */
    char *incomplete_why;
    int reported;
    double t0;
    double last_output; /* when a batch last arrived */
    int tail_tries;
    int adopted; /* found in the state file after an sbxd restart */

    /* On the command router (router = 1): the exec id is ours (a UUID made
     * before the first TaskExecStart, so a retried start never runs twice),
     * last_batch[] are byte offsets of stdout/stderr, stdin goes by offset. */
    int router;
    char *rexec_id, *rexec_task;
    uint64_t stdin_off, stdin_inflight;
    int exit_signal;
    int unauth_tries;
    struct mproc *rt_next; /* ms->rt_waiters */
    int rt_waiting;
    /* Adopted on the router: stdin waits for TaskExecStdinStatus (modal_stdin.c)
     * to say how many bytes the exec has, and whether it is closed. */
    int stdin_recovering;
};

/* ---- modal_util.c: replies, errors, ids, auth (the leaf) ------------------------ */

static inline const char *nz(const char *s)
{
    return s ? s : "";
}

/** Replaces *dst with a copy of src (NULL allowed). */
void modal_set_str(char **dst, const char *src);

/** A Modal failure as a daemon error: unreachable -> -32002, else -32006. */
int modal_grpc_err(struct mprov *mp, sbx_err_t *err, const struct grpc_status *st,
                   const char *what);

/** A random UUIDv4 into out (37 bytes): exec and snapshot ids sbxd chooses. */
void modal_uuid4(char *out);

/** 1 if id has the shape of a V1 sandbox id: sb- and 22 base62 characters. */
int modal_v1_id(const char *id);

/**
 * The RPC to call for a sandbox: method itself, or its V2 twin when ms is a V2
 * sandbox (SandboxCreate, SandboxGetTaskId, SandboxWait, ...: the same
 * messages on the wire). ms may be NULL.
 */
const char *modal_rpc(const struct msb *ms, const char *method);

/** exp of a JWT's payload (seconds since the epoch), or 0 if it has none. */
double modal_jwt_exp(const char *tok);

/** A number or a numeric string (an option's value) into *out: 0, or -1. */
int modal_opt_number(json_t *v, double *out);

/** A provider error (-32006) with msg as its text. */
int modal_plain_err(sbx_err_t *err, const char *msg);

/** What a GenericResult says, as text (r may be NULL). */
const char *modal_result_text(const Modal__Client__GenericResult *r);

/**
 * The reply of a call that ended OK, decoded as desc: NULL if the call failed
 * or the bytes do not decode (or desc is NULL). The caller owns it: free it
 * with modal_reply_free().
 */
void *modal_reply(const ProtobufCMessageDescriptor *desc, const struct grpc_status *st,
                  const uint8_t *msg, size_t len);

/** Frees a modal_reply() result; NULL is a no-op. */
void modal_reply_free(void *r);

/** The exit code a TaskExecWait reply carries (128 + N for signal N), or -1
 * when the call failed, the reply does not decode or carries no status. */
int modal_exec_wait_code(const struct grpc_status *st, const uint8_t *msg, size_t len);

/** Whether a sandbox's GetTaskId reply (or its NOT_FOUND) says it has ended. */
int modal_task_ended(const struct grpc_status *st,
                     const Modal__Client__SandboxGetTaskIdResponse *r);

/** Terminates a Modal sandbox, nobody waits (one that was never scheduled). */
void modal_sandbox_terminate(struct mprov *mp, const char *sandbox_id);

/** Deletes a Modal image, nobody waits (an image sbxd made and no longer needs). */
void modal_image_delete(struct mprov *mp, const char *image_id);

/** The channel's header hook (privdata = mp): token id and secret, the auth
 * token, idempotency key and retry marks, x-modal-host. */
void modal_auth_headers(struct curl_slist **list, const struct grpc_attempt *a,
                        void *privdata);

/** AuthTokenGet's reply (the channel's token hook): the token (caller frees),
 * refreshed 5 min before its JWT exp. Also reached by tests/fuzz/fuzz_modal.c. */
char *modal_auth_token_parse(const uint8_t *msg, size_t len, double *refresh_in_s,
                             void *privdata);

/** The host of url (malloc'd; NULL if it has none): the x-modal-host header. */
char *modal_url_host(const char *url);

/** 1 if s has no control characters (a token id or secret). */
int modal_printable(const char *s);

/* ---- modal_state.c: the state file --------------------------------------------- */

/** The save timer and the writer thread of mp. */
void modal_state_init(struct mprov *mp);

/** Writes what is pending and stops the writer thread. */
void modal_state_deinit(struct mprov *mp);

/** Where the state file lives for this config (malloc'd), NULL: none kept. */
char *modal_state_path(json_t *conf);

/** Something the state file holds changed: written within a second, off the loop. */
void modal_state_dirty(struct mprov *mp);

/** Writes the state file now if a write is pending (shutdown, release). */
void modal_state_flush(struct mprov *mp);

/** At load: mp->state_path's file into mp->snaps (always made) and mp->saved
 * (its sandboxes, or NULL). A missing file is an empty state; a file not
 * owned by this user, writable by others, unreadable, or for another
 * server_url or version is ignored with a warning. Reachable for
 * tests/unit/test_modal.c. */
void modal_state_read(struct mprov *mp);

/* ---- modal_life.c: lifecycle ------------------------------------------------------- */

/** The Modal record of sb (sb->pdata), from sb->conf; NULL with err for bad options. */
struct msb *modal_life_msb_new(struct mprov *mp, struct sandbox *sb, sbx_err_t *err);

int modal_life_start(void *cookie, struct sandbox *sb, sbx_err_t *err);
int modal_life_stop(void *cookie, struct sandbox *sb, sbx_err_t *err);
int modal_life_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err);
int modal_life_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err);
json_t *modal_life_metadata(void *cookie, struct sandbox *sb);
void modal_life_release(void *cookie, struct sandbox *sb);

/** The step table, indexed by enum mstep: modal_create.c's and modal_stop.c's steps. */
extern const struct job_step modal_life_steps[];

/* ---- modal_job.c: the job runner (the steps below call it) ------------------------ */

/** A progress line of the sandbox's create/start (stage, printf text). */
void modal_job_progress(struct msb *ms, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Forgets the Modal sandbox and task ids (a new one is made). */
void modal_job_forget(struct msb *ms);
/** Ends the current job; err (may be NULL) cleared, result stolen. May free ms. */
void modal_job_end(struct msb *ms, sbx_err_t *err, json_t *result);
/** Ends the job with a Modal failure / with msg as a provider error. May free ms. */
void modal_job_fail_st(struct msb *ms, const struct grpc_status *st, const char *what);
void modal_job_fail_msg(struct msb *ms, const char *msg);
/** The sandbox's lifetime in seconds, clamped to the config's ceiling. */
uint32_t modal_job_lifetime(struct msb *ms);
/** Sends the current step's RPC with req: STEP_WAIT. */
int modal_job_call(struct msb *ms, const ProtobufCMessage *req, double timeout);
/** Moves the job to step without a call: STEP_ON. */
int modal_job_go(struct msb *ms, enum mstep step);
/** A step's reply (privdata = ms): decoded as the step says, to its on_reply. */
void modal_job_rpc_done(struct grpc_call *c, const struct grpc_status *st,
                        const uint8_t *msg, size_t len, void *privdata);
/** A stop found the Modal sandbox gone: nothing is left to save, stop is done. */
void modal_job_stop_gone(struct msb *ms);
/** Runs steps until one waits for a call (or the job ends). */
void modal_job_next(struct msb *ms);
/** The router access a lifecycle step waited for is settled: the job goes on. */
void modal_job_router_ready(struct msb *ms);
/** Stops the SandboxWait watch of a stop or snapshot. */
void modal_job_watch_stop(struct msb *ms);
/**
 * The Modal sandbox is gone (why: a short text): recorded, and a lifecycle
 * job that depends on it ends at once instead of waiting for its calls.
 */
void modal_job_mark_dead(struct msb *ms, const char *why);
/** Recreates a dead Modal sandbox; its waiting processes go on once it runs. */
void modal_job_restart(struct msb *ms);
/** Starts stop/destroy/snapshot now (the core already waits for it). */
void modal_job_run(struct msb *ms, enum mjob op);
/** The job's timers of a new record. */
void modal_job_init(struct msb *ms);

/* ---- modal_create.c, modal_stop.c: the steps (rows of modal_life_steps) ----------- */

int modal_create_send_app(struct msb *ms);
void modal_create_on_app(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_create_send_lookup(struct msb *ms);
void modal_create_on_lookup(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_create_decide_image(struct msb *ms);
int modal_create_send_snap_image(struct msb *ms);
void modal_create_on_snap_image(struct msb *ms, const struct grpc_status *st,
                                void *reply);
int modal_create_send_builder(struct msb *ms);
void modal_create_on_builder(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_create_send_image_build(struct msb *ms);
void modal_create_on_image_build(struct msb *ms, const struct grpc_status *st,
                                 void *reply);
int modal_create_send_image_join(struct msb *ms);
int modal_create_send_secret(struct msb *ms);
void modal_create_on_secret(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_create_send_create(struct msb *ms);
int modal_create_send_task(struct msb *ms);
void modal_create_on_create(struct msb *ms, const struct grpc_status *st, void *reply);
void modal_create_on_task(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_create_send_tags_set(struct msb *ms);
void modal_create_on_tags_set(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_create_send_tags_check(struct msb *ms);
void modal_create_on_tags_check(struct msb *ms, const struct grpc_status *st,
                                void *reply);

int modal_stop_pick_snapshot(struct msb *ms);
int modal_stop_send_task_snapshot(struct msb *ms);
void modal_stop_on_stop_tsnap(struct msb *ms, const struct grpc_status *st, void *reply);
void modal_stop_on_tsnap(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_stop_send_snapshot_fs(struct msb *ms);
void modal_stop_on_stop_snap(struct msb *ms, const struct grpc_status *st, void *reply);
void modal_stop_on_stop_check(struct msb *ms, const struct grpc_status *st, void *reply);
int modal_stop_send_terminate(struct msb *ms);
void modal_stop_on_terminate(struct msb *ms, const struct grpc_status *st, void *reply);
void modal_stop_on_snapshot(struct msb *ms, const struct grpc_status *st, void *reply);

/* ---- modal_router.c: the command router ------------------------------------------ */

/**
 * Whether m may call the router of its sandbox's task now: 1 (yes), -1 (no:
 * use ContainerExec, the router was refused or is turned off), 0 (m waits:
 * the access is being fetched; modal_proc_router_ready(m, ...) follows).
 */
int modal_router_use(struct mproc *m);

/** A call on the router of ms with its current bearer token (see grpc_unary). */
struct grpc_call *modal_router_unary(struct msb *ms, const char *method,
                                     const ProtobufCMessage *req, double timeout_s,
                                     grpc_done_cb on_done, void *privdata);
struct grpc_call *modal_router_stream(struct msb *ms, const char *method,
                                      const ProtobufCMessage *req, double timeout_s,
                                      grpc_msg_cb on_msg, grpc_done_cb on_done,
                                      void *privdata);

/** The router rejected the token (UNAUTHENTICATED): fetch a new one now. */
void modal_router_stale(struct msb *ms);

/** Sets up the router part of a new ms. */
void modal_router_init(struct msb *ms);

/** Forgets the access of ms (release, or its task is gone); waiters are not told. */
void modal_router_reset(struct msb *ms);

/**
 * modal_router_use for a lifecycle step of ms: 1, -1 as there; 0: the access
 * is being fetched and modal_job_router_ready(ms) follows.
 */
int modal_router_use_job(struct msb *ms);

/** Takes m off the access waiters (it is released). */
void modal_router_unwait(struct mproc *m);

/** Adds what sandbox.get says about the exec transport to o. */
void modal_router_metadata(struct msb *ms, json_t *o);

/** Frees every router channel (provider unload). */
void modal_router_unload(struct mprov *mp);

/* ---- modal_kill.c: ending a tagged command ------------------------------------- */

/* The provider's shutdown_drain: calls sent at SIGTERM that sbxd waits for
 * (a tar's killer, a Watch's EOF); done(data) once the last one answered. */
struct mdrain {
    int pending;
    void (*done)(void *data);
    void *data;
};
/** Runs the killer for tag (the command's shell has $0 "sbxd-<tag>") with
 * signal sig in ms's task. On the router when the sandbox uses it (a fresh
 * exec id, output discarded), else ContainerExec; retried through outages
 * for the retry budget. Nobody waits for it, unless d (the shutdown drain)
 * counts it. */
void modal_kill_send(struct msb *ms, const char *tag, int sig, struct mdrain *d);
/** A call's callback (privdata d) for the shutdown drain's calls. */
void modal_drain_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata);
/** Counts call c (NULL: it was never sent) in d (NULL: no drain). */
void modal_drain_count(struct mdrain *d, struct grpc_call *c);

/* ---- modal_fs.c: files (fs.*) through modal-sandbox-fs-tools ------------------- */

/** modal_router_use for fs.* on ms: 1, -1; 0: modal_fs_router_ready(ms) follows. */
int modal_router_use_fs(struct msb *ms);
/** The router access fs operations waited for is settled (failure: why not). */
void modal_fs_router_ready(struct msb *ms, const char *failure);
int modal_fs_call(void *cookie, struct fs_call *fc, sbx_err_t *err);
void modal_fs_release(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata);
/** Ends every fs operation of ms (it is released) with why. */
void modal_fs_release_all(struct msb *ms, const char *why);
/** At shutdown: ms's running archives get their killer and its watches
 * their EOF, counted in d (the watches' records are freed). */
void modal_fs_drain(struct msb *ms, struct mdrain *d);
/* ---- modal_fsmv.c, modal_fswatch.c: fs.rename and fs.watch ----------------------- */

/** 1 if fc (an fs.rename) has the absolute path and to the helper needs. */
int modal_fs_mv_argv_ok(struct fs_call *fc);
/** The exec's argv for fs.rename fc (a shell script), n in *n_out; NULL if bad. */
char **modal_fs_mv_argv(struct fs_call *fc, size_t *n_out);
void modal_fs_mv_argv_free(char **argv, size_t n);
/** A helper's stderr (untrusted; fs.rename's or an archive's, their lines
 * "sbxd-mv: ERRNO: text" / "sbxd-tar: ...", or a tool's words): 0 with an errno
 * name and msg, or -1 (EIO). */
int modal_fs_mv_error(const uint8_t *buf, size_t len, const char **errno_name, char *msg,
                      size_t msgsz);
/* ---- modal_fstar.c: tar archives (format "tar") --------------------------------- */

/* Entries of a tar stream seen so far (modal_fstar_count; any bytes). */
struct mtar_count {
    uint64_t skip; /* data bytes of the current entry still to pass */
    uint8_t hdr[512];
    size_t hlen;
    uint64_t entries;
};
/** 1 if fc asks for an archive (args.format "tar"). */
int modal_fstar_is(const struct fs_call *fc);
/** The exec's argv for the archive fc (a get or a put: a shell script running
 * tar, whose $0 is argv0, "sbxd-<tag>" for modal_kill_send), n in *n_out;
 * NULL if bad. Freed with modal_fs_mv_argv_free. */
char **modal_fstar_argv(struct fs_call *fc, const char *argv0, size_t *n_out);
/** Bytes that make an unfinished put's tar fail (sent with EOF on an abort). */
const uint8_t *modal_fstar_poison(size_t *n_out);
/** Counts the entries whose headers are in d (the next n bytes of a stream). */
void modal_fstar_count(struct mtar_count *c, const uint8_t *d, size_t n);
/** fs.watch fc on ms: 0 (answered later), or -1 with err. */
int modal_fswatch_call(struct msb *ms, struct fs_call *fc, sbx_err_t *err);
/** The router access is settled (failure: why not) for watches that waited. */
void modal_fswatch_router_ready(struct msb *ms, const char *failure);
/** hdata, if it is one of ms's watches, is unwatched (its tool stopped). */
void modal_fswatch_release(struct msb *ms, void *hdata);
/** Every watch of ms ends (it is released). */
void modal_fswatch_release_all(struct msb *ms);
/** At shutdown: every running Watch of ms gets its EOF, counted in d. */
void modal_fswatch_drain(struct msb *ms, struct mdrain *d);

/* ---- modal_fs_parse.c: the tool's output (untrusted; tests/fuzz/fuzz_modal_fs.c) - */

const char *modal_fs_errno(const char *error_kind);
/** stderr's {"error_kind","message"}: 0 with the errno name and msg, or -1 (EIO). */
int modal_fs_parse_error(const uint8_t *buf, size_t len, const char **errno_name,
                         char *msg, size_t msgsz);
/** A Stat's entry in the agent's shape, or NULL. New reference. */
json_t *modal_fs_parse_stat(const uint8_t *buf, size_t len);
/** ListFiles' array as {entries, more} from skip, at most limit, or NULL. */
json_t *modal_fs_parse_list(const uint8_t *buf, size_t len, int64_t skip, int64_t limit);
/** One Watch line of the tool (untrusted) as [{path, kind}], or NULL. New reference. */
json_t *modal_fs_parse_watch(const uint8_t *buf, size_t len);

/* ---- modal_snap.c: snapshot lifetimes --------------------------------------------- */

/** providers.modal.snapshot_ttl_max_s (and the default's clamp) from conf. */
void modal_snap_ttl_load(struct mprov *mp, json_t *conf);

/**
 * TaskSnapshotFilesystem.ttl_seconds for the step ms is at: -1 for stop's
 * images (sbxd deletes them with the sandbox), else the ttl sandbox.snapshot
 * asked or snapshot_ttl_s, clamped by snapshot_ttl_max_s; 0: leave it out
 * (Modal's default).
 */
int64_t modal_snap_ttl(const struct msb *ms);

/** sandbox.snapshot's result for image_id made by via (new reference). */
json_t *modal_snap_result(const struct msb *ms, const char *image_id, const char *via);

/* ---- modal_stdin.c: stdin, also of a re-adopted process --------------------------- */

/**
 * m was adopted on the router and its access is there: asks the router where
 * m's stdin stands (bytes taken, closed) and goes on writing from there.
 */
void modal_stdin_recover(struct mproc *m);

/** Sends m's next stdin piece (or its EOF) when nothing is in flight. */
void modal_stdin_pump(struct mproc *m);

/* ---- modal_pout.c: a process's output streams, its wait and its exit report ------- */

/** 1 if a call's code says the Modal sandbox or exec is gone (NOT_FOUND,
 * FAILED_PRECONDITION). */
int modal_pout_dead_code(int code);
/** Cancels every call and timer of m. */
void modal_pout_stop_calls(struct mproc *m);
/** The wait before the next retry in an outage (t0, fails: the run of failures so
 * far), or -1 when the retry budget is spent. */
double modal_pout_retry_after(struct mprov *mp, double *t0, int *fails);
/** Reports the exit from a fresh loop iteration once everything is in. */
void modal_pout_schedule_report(struct mproc *m);
/** Ends m with a provider error (printf text) reported as its exit. */
void modal_pout_report_error(struct mproc *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** 1 (after reporting) if m's router went away under it. */
int modal_pout_router_gone(struct mproc *m);
/** Opens (or reopens, where it broke) the output stream of fd 1 or 2. */
void modal_pout_open(struct mproc *m, int fd);
/** Opens the wait for m's exit. */
void modal_pout_wait_open(struct mproc *m);
/** The timers of a new process record. */
void modal_pout_init(struct mproc *m);
/* Reached by tests/fuzz/fuzz_modal.c too: one message of m's output stream c
 * (privdata = m): a RuntimeOutputBatch, or TaskExecStdioRead bytes on the
 * router; and the ExecWait reply (privdata = m): the exit, or a wait again. */
void modal_pout_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata);
void modal_pout_wait_done(struct grpc_call *c, const struct grpc_status *st,
                          const uint8_t *msg, size_t len, void *privdata);

/* ---- modal_proc.c: processes ------------------------------------------------------- */

/**
 * The router access m waited for is there (failure NULL) or could not be had
 * (failure: why): m goes on with its exec or its streams, or fails.
 */
void modal_proc_router_ready(struct mproc *m, const char *failure);

/** Starts (or starts again) m's ContainerExec, waiting for a restart if needed. */
void modal_exec_start(struct mproc *m);

/**
 * A restart of ms ended: its waiting processes go on, or, with failure set,
 * end with that error.
 */
void modal_proc_waiters_resume(struct msb *ms, const char *failure);

/** Re-adopts one process of the state file (pe borrowed) after an sbxd restart. */
void modal_proc_adopt(struct msb *ms, json_t *pe);

int modal_proc_spawn(void *cookie, struct process *p, sbx_err_t *err);
int modal_proc_write(void *cookie, struct process *p, const void *data, size_t len,
                     sbx_err_t *err);
int modal_proc_close_stdin(void *cookie, struct process *p, sbx_err_t *err);
int modal_proc_kill(void *cookie, struct process *p, int sig, sbx_err_t *err);
void modal_proc_resume(void *cookie, struct process *p);
void modal_proc_release(void *cookie, struct process *p);

#endif
