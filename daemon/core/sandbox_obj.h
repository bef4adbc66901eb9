/*
 * sandbox_obj.h - the sandbox object itself: its fields, its status, the
 * completion type of the core's requests, and the inline helpers that the
 * files below sandbox.c (process.c, fs.c, sandbox_env.c) use of a sandbox.
 * No functions of sandbox.c: including this header calls nothing up.
 */
#ifndef SBXD_SANDBOX_OBJ_H
#define SBXD_SANDBOX_OBJ_H

#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "log.h"

struct provider_inst;
struct process;

enum sb_status {
    SB_PENDING,
    SB_STARTING,
    SB_RUNNING,
    SB_STOPPING,
    SB_STOPPED,
    SB_DESTROYING,
    SB_DESTROYED,
    SB_ERROR,
};

enum sb_op { OP_NONE, OP_START, OP_STOP, OP_DESTROY, OP_SNAPSHOT };

/*
 * How the core answers a request that may finish later (a lifecycle op, an
 * exec, a wait): exactly once, perhaps before the function that took it
 * returns. Success: err NULL, result the answer (may be NULL, meaning {}).
 * Failure: err set, result NULL. Both are borrowed: valid during the call.
 */
typedef void (*sbx_result_cb)(sbx_err_t *err, json_t *result, void *privdata);

struct op_waiter {
    struct op_waiter *next;
    sbx_result_cb cb;
    void *privdata;
    enum sb_op op;
};

struct sandbox {
    struct sandbox *next, *prev;
    char id[64];
    struct provider_inst *prov;
    uid_t owner;
    enum sb_status status;
    char *error;
    double created_at, started_at, expires_at;
    double last_activity; /* monotonic */

    /* The normalised create params: provider, image, env, working_dir,
     * timeout_ms, idle_timeout_ms, tools, memory_limit_mb, fresh_isolate,
     * options, on_start/on_stop/on_destroy, instructions(_append). Owned.
     * Clones copy it. */
    json_t *conf;
    json_t *runtime_env;    /* sandbox.set_env layer, owned object */
    json_t *snapshot;       /* snapshot data to start from (a reference of its own) */
    char snap_id[64];       /* OP_SNAPSHOT: the id the new snapshot gets */
    int64_t snap_ttl;       /* OP_SNAPSHOT: its ttl asked (seconds, -1 never, 0 none) */
    json_t *start_warnings; /* the last start's provider warnings (array) or NULL */

    ev_timer life_timer;
    ev_timer idle_timer;
    ev_timer op_timer; /* limits.op_timeout_ms for the provider op in flight */
    ev_timer next_op;  /* runs an op asked for while another ran, from the loop */
    struct log_limit agent_log; /* its agent's LOG/ERROR lines */

    struct process *procs;
    uint32_t next_pid;
    int nlive;   /* queued or running */
    int nexited; /* kept for wait/list/attach */

    enum sb_op op;
    json_t *op_result;
    struct op_waiter *waiters;
    int started_once;
    int discard_on_fail;     /* a failed first start (not a hook) removes it */
    int id_generated;        /* sbxd chose the id: no backend can have it yet */
    int backend_reconnected; /* the first start found an existing backend */
    int hook_phase;          /* running on_start/on_stop/on_destroy */
    /* Memory its provider gives it (sandbox_reserve_memory), counted in the
     * owner's limits.memory_per_uid until it stops or goes (issue 16). */
    uint64_t mem_reserved;
    int adopting; /* adopted running; its processes are not back yet (adoption.h) */

    void *pdata; /* the provider's */
};

/* The status as the protocol spells it ("running"). Inline, so that the
 * files below sandbox.c (process.c, fs.c) need not call up into it. */
static inline const char *sandbox_status_name(enum sb_status s)
{
    static const char *const names[] = {"pending", "starting",   "running",   "stopping",
                                        "stopped", "destroying", "destroyed", "error"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* Records activity for the idle timer (inline: process.c and fs.c, below
 * sandbox.c, record it too). */
static inline void sandbox_touch(struct sandbox *sb)
{
    sb->last_activity = ev_now(EV_DEFAULT);
}

#endif
