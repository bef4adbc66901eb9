/*
 * sandbox.h - provider-independent sandbox semantics: the registry,
 * ownership, the status machine, lifetimes, env and cwd precedence, hooks.
 */
#ifndef SBXD_SANDBOX_H
#define SBXD_SANDBOX_H

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
 * files below this one (process.c, fs.c) need not call up into it. */
static inline const char *sandbox_status_name(enum sb_status s)
{
    static const char *const names[] = {"pending", "starting",   "running",   "stopping",
                                        "stopped", "destroying", "destroyed", "error"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* Lookup honouring ownership: another uid's sandbox is "not found" (admin
 * sees every uid's). */
struct sandbox *sandbox_find(uid_t uid, int admin, const char *id);
struct sandbox *sandbox_find_any(const char *id);
int sandbox_visible(uid_t uid, int admin, struct sandbox *sb);

/* Creates from normalised conf (stolen). Status pending. */
int sandbox_new(struct sandbox **out, const char *id, struct provider_inst *prov,
                uid_t owner, json_t *conf, sbx_err_t *err);
/*
 * Registers a sandbox that already exists in a provider's backend (found at
 * load, e.g. Docker containers labelled with an sbxd id after a restart).
 * conf stolen (normalised create params as far as known); status is what the
 * backend says (SB_RUNNING or SB_STOPPED). No provider op is called. The
 * lifetime timer starts now with conf.timeout_ms (the old deadline is not
 * known). Fails if the id is taken.
 */
int sandbox_adopt(struct sandbox **out, const char *id, struct provider_inst *prov,
                  uid_t owner, json_t *conf, enum sb_status status, sbx_err_t *err);
/* The sandbox object for replies; new reference. */
json_t *sandbox_to_json(struct sandbox *sb);

/* Lifecycle. Each calls cb (may be NULL: nobody waits) once when done;
 * the answer is the sandbox object, or for a snapshot {snapshot, provider,
 * sandbox, created_at}, or for a destroy {id, status}. */
void sandbox_start(struct sandbox *sb, sbx_result_cb cb, void *privdata);
void sandbox_stop(struct sandbox *sb, sbx_result_cb cb, void *privdata);
void sandbox_destroy(struct sandbox *sb, sbx_result_cb cb, void *privdata);
void sandbox_snapshot(struct sandbox *sb, sbx_result_cb cb, void *privdata);
/* sandbox.snapshot with a ttl (seconds, -1 never, 0 the provider's default):
 * a provider without snapshot_ttl takes only -1 (its snapshots never expire)
 * and answers anything else -32011 {provider, feature: "snapshot ttl"}. */
void sandbox_snapshot_ttl(struct sandbox *sb, int64_t ttl, sbx_result_cb cb,
                          void *privdata);
/* Records activity for the idle timer (inline: process.c and fs.c, below
 * this file, record it too). */
static inline void sandbox_touch(struct sandbox *sb)
{
    sb->last_activity = ev_now(EV_DEFAULT);
}
/* -- sandbox_env.c: env and cwd precedence -- */
/* Final env of a process: provider defaults < conf.env < runtime_env < cmd_env (borrowed,
 * may be NULL). New ref. */
json_t *sandbox_env_for(struct sandbox *sb, json_t *cmd_env);
/* The cwd for a process (cmd_cwd may be NULL); borrowed string or NULL. */
const char *sandbox_cwd_for(struct sandbox *sb, const char *cmd_cwd);
/* Checks a {K: V|null} patch (names, types, no NUL, at most limits.env_bytes);
 * -32602 or -32005. */
int env_check(json_t *patch, sbx_err_t *err);
/* Applies a {K: V|null} patch to an env object. With err, the patch is
 * checked first and the result must fit limits.env_bytes (env is then
 * changed even on failure: merge into a copy). */
int env_merge(json_t *env, json_t *patch, sbx_err_t *err);
/* The text for sandbox.instructions; malloc'd. */
char *sandbox_instructions(struct sandbox *sb);
/* Frees the sandboxes removed during this loop iteration. ev_prepare. */
void sandboxes_before_sleep(void);
/* Frees every sandbox at shutdown (providers' sb_release called). */
void sandbox_free_all(void);
/* 1 when a process.exec/spawn on sb should first restart it: it is in error
 * with no op running, and its provider restarts on a call (restart_on_call)
 * and is available. */
int sandbox_restarts_on_call(struct sandbox *sb);
/* The sandbox lifetime for a create without timeout_ms (0 = none). */
int64_t sandbox_default_timeout(struct provider_inst *prov);
/* What a sandbox.create on the existing sandbox sb asks for that sb does not
 * have (params borrowed): a new array of strings, or NULL when nothing differs. */
json_t *sandbox_reconnect_warnings(struct sandbox *sb, json_t *params);
/* Count of sandboxes owned by uid. */
int sandbox_count_owned(uid_t uid);

#endif
