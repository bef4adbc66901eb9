/*
 * provider.h - what a provider is: a table of function pointers (crun's
 * custom_handler_s). The core knows nothing about Duktape, Docker or Modal;
 * it drives sandboxes and processes through these calls and hears back
 * through the provider-facing functions at the end of this file.
 *
 * Threading and re-entrancy: everything runs on the daemon's one libev
 * loop. A provider may call the provider-facing functions from any of its
 * own event callbacks, and also synchronously from inside an op (e.g.
 * sb_start may call sandbox_op_done before it returns).
 */
#ifndef SBXD_PROVIDER_H
#define SBXD_PROVIDER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "err.h"
#include "sbx_proto.h"

struct sandbox;
struct process;
struct fs_call;

/* net18 (issue 18): what sandbox.expose asks for (provider.sb_expose_req). */
struct sbx_expose_req {
    int port, host_port;
    const char *host; /* an address literal, or NULL: 127.0.0.1 */
    int unix_socket;  /* 1: a Unix socket under sbxd's runtime directory */
    uid_t uid;        /* the caller's */
};

struct sbx_provider {
    const char *name;
    const struct cfg_key *config_keys; /* allowed keys of providers.<name> */
    /* How a process's command reaches the provider (p->spec): 1, a string
     * runs through the shell ("shell") and an array as "argv"; 0, the
     * command is source code ("code"; an array is joined with spaces).
     * Nothing else depends on it. */
    int shell_commands;
    const char *default_cwd; /* when neither cwd nor working_dir is given; may be NULL */
    int enabled_by_default;
    /* 1: a sandbox created without timeout_ms has no lifetime (it lives until
     * destroyed: Docker). 0: it gets the config's defaults.timeout_ms. A
     * provider with a backend-side lifetime (Modal) clamps conf.timeout_ms
     * itself in sb_start. */
    int no_default_lifetime;
    /* 1: a process.exec/spawn on a sandbox in status error (its backend died
     * or was removed behind sbxd's back) restarts it with sb_start (which
     * restarts or recreates the backend from the sandbox's config) and runs
     * the command then, once; the exit record says retried and
     * sandbox_restarted. 0: such a call is -32001. */
    int restart_on_call;
    /* What sandbox.create may ask of this provider (issue 19): takes_image 1
     * when create's `image` means something to it (else `image` is -32602
     * naming the provider); option_keys, when non-NULL, the only keys its
     * `options` may have, NULL-terminated (others are -32602 naming the key
     * and the provider). NULL: the provider checks its options itself, as
     * Docker and Modal do in sb_start. */
    int takes_image;
    const char *const *option_keys;
    /* issue 16 (seccore): 1, after load the provider lists its backend and
     * adopts what it finds (sandbox_adopt), then calls
     * sandbox_adoption_done(name); each sandbox adopted running calls
     * sandbox_adopted() once its processes are back. Until then calls
     * naming an unknown id wait (core/adoption.h). */
    int adopts_at_load;
    /* issue 20 (modalmisc): 1, sb_snapshot honours sb->snap_ttl (seconds the
     * snapshot lives, -1 never, 0 the provider's default). 0: its snapshots
     * never expire, and sandbox.snapshot takes only ttl -1 (else -32011). */
    int snapshot_ttl;

    /* conf: providers.<name>, borrowed. Fills *cookie. An error here means
     * the provider is unavailable (the daemon still runs). */
    int (*load)(json_t *conf, void **cookie, sbx_err_t *err);
    void (*unload)(void *cookie);
    /* Optional. At SIGTERM/SIGINT, while the loop still runs (the daemon is
     * draining: no new sessions or calls), gives back what this sbxd made
     * for itself and no user owns (Docker: its warm pools' unused
     * containers), without blocking the loop. Returns 1 when it started
     * work and will call done(data) once, never from inside this call; 0
     * when it has nothing to do (done is never called). The daemon exits
     * when every provider is done, at limits.shutdown_drain_ms or at a
     * second signal, whichever comes first; unload runs after, as always.
     * Users' sandboxes are left as they are (they outlive restarts). */
    int (*shutdown_drain)(void *cookie, void (*done)(void *data), void *data);
    /* 1 = available; 0 = not, with *reason (static or provider-owned string). */
    int (*available)(void *cookie, const char **reason);
    /* Extra fields for daemon.info, new reference or NULL. */
    json_t *(*info)(void *cookie);

    /* Lifecycle ops. Each is started once at a time per sandbox and finishes
     * with sandbox_op_done(). Returning <0 means it failed at once (and
     * sandbox_op_done must NOT be called). sb_start may finish with the
     * result {"reconnected": true} when it found the backend already there,
     * plus "warnings": [strings] when that backend differs from what was
     * asked for (the sandbox.create answer carries them). */
    int (*sb_start)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    int (*sb_stop)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    int (*sb_destroy)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    /* Finishes with sandbox_op_done(sb, NULL, data): data is what a later
     * sb_start of a sandbox created from this snapshot gets as sb->snapshot.
     * sb->snap_id is the id the snapshot will have (label it with that when
     * the backend keeps it, so snapshot_list can register it again). */
    int (*sb_snapshot)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    /* Provider metadata for sandbox.get, new reference or NULL. */
    json_t *(*sb_metadata)(void *cookie, struct sandbox *sb);
    /* The sandbox's default text for sandbox.instructions (malloc'd): how an
     * agent uses it, its tools and limits. Every provider has one; a
     * provider whose string commands run through the shell may use
     * sandbox_shell_instructions. NULL (or no op): no default text. */
    char *(*sb_instructions)(void *cookie, struct sandbox *sb);
    /* The sandbox object is going away (after destroy, or at shutdown). */
    void (*sb_release)(void *cookie, struct sandbox *sb);
    /* Optional (issue 16, item 8). A destroy was asked while op sb->op is
     * pending: the provider may end that op now, calling sandbox_op_done
     * (with an error saying why) before it returns, so the destroy goes
     * ahead at once; or do nothing, and the destroy waits for the op. The
     * sandbox may be freed during the call: the caller touches it no more. */
    void (*sb_cancel)(void *cookie, struct sandbox *sb);
    /* Optional. sandbox.create named an existing sandbox of the caller:
     * append to warnings (an array of strings, borrowed) what the request
     * (params, borrowed) asks for that the running sandbox does not have
     * and will not get. The core already compares the generic params and
     * each key of options against the sandbox's conf. */
    void (*sb_reconnect_warnings)(void *cookie, struct sandbox *sb, json_t *params,
                                  json_t *warnings);

    /* Snapshots the backend keeps beyond sbxd's memory (Docker images by
     * label, a state file). Both optional (NULL: the core's in-memory
     * registry alone, as for Duktape).
     * snapshot_list: brings the registry up to date by calling
     * snapshot_register() for every snapshot the backend holds, then
     * done(data, NULL) (or done(data, err) when the backend could not be
     * asked), exactly once, possibly before it returns. Returning <0 means
     * done will not be called. Registered entries of this provider that were
     * not registered again by a successful list are dropped.
     * snapshot_delete: removes snapshot id's backend object (rec = its
     * registry record {provider, owner, created_at, sandbox, data},
     * borrowed), then done(data, err); "already gone" counts as success. */
    int (*snapshot_list)(void *cookie, void (*done)(void *data, sbx_err_t *err),
                         void *data, sbx_err_t *err);
    int (*snapshot_delete)(void *cookie, const char *id, json_t *rec,
                           void (*done)(void *data, sbx_err_t *err), void *data,
                           sbx_err_t *err);

    /* Starts p (p->spec holds argv/shell/code, env, cwd, timeout_ms). The
     * provider reports process_started / process_output / process_exited. */
    int (*proc_spawn)(void *cookie, struct process *p, sbx_err_t *err);
    int (*proc_write)(void *cookie, struct process *p, const void *data, size_t len,
                      sbx_err_t *err);
    int (*proc_close_stdin)(void *cookie, struct process *p, sbx_err_t *err);
    /* The process (and its children) must really end; report process_exited. */
    int (*proc_kill)(void *cookie, struct process *p, int sig, sbx_err_t *err);
    /* Output is welcome again after process_output_blocked() said 1. */
    void (*proc_resume)(void *cookie, struct process *p);
    /* Answer to a tool call: reply = {"call", "result"} or {"call","error"}, borrowed. */
    void (*proc_tool_result)(void *cookie, struct process *p, json_t *reply);
    /* The process record is being freed; drop p->pdata. */
    void (*proc_release)(void *cookie, struct process *p);

    /* -- files (fs.*, PROTOCOL.md "Files"; core/fs.h has struct fs_call) --
     * Both NULL: every fs.* is -32011 {provider, feature: "fs"}.
     * fs_call: one operation on fc->sb, which is running and owned by the
     * caller (the core checked). fc->op says which; fc->args (borrowed,
     * valid until fs_call_done) holds the validated params with "path"
     * (and "to") made absolute. Results use the agent's shapes (CHANNEL.md
     * "Files": mtime_ms, {entries, more}, {size, n, eof}); the core turns
     * them into the protocol's. A read hands its bytes to fs_call_data()
     * before fs_call_done(). A write (FS_OP_WRITE) spans calls of one
     * handle: fc->first opens it, fc->data/len are this call's bytes,
     * fc->more 0 commits; *fc->hdata is the provider's per-handle pointer,
     * kept by the core between the calls. A watch (FS_OP_WATCH) lives on
     * after its fs_call_done as handle fc->handle, reporting through
     * fs_event(). Finishes with fs_call_done() exactly once (possibly
     * before returning); returning <0 means it failed at once (err set)
     * and fs_call_done must NOT be called. */
    int (*fs_call)(void *cookie, struct fs_call *fc, sbx_err_t *err);
    /* The core drops handle (an open write: abort and remove the temporary
     * file; a watch: stop it) — unwatch, abort, its session closed, idle
     * timeout, sandbox stopped. hdata is what the provider kept in
     * *fc->hdata. No fs_call of that handle is in flight. */
    void (*fs_release)(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata);
    /* Optional: fs_call for a sandbox that is stopped (its files kept), for
     * the reads only (FS_OP_READ plain or tar, FS_OP_STAT, FS_OP_LIST); the
     * calls of a handle it opened come here too, and fs_release_stopped
     * drops it. Docker: the Engine API's archive endpoints. */
    int (*fs_call_stopped)(void *cookie, struct fs_call *fc, sbx_err_t *err);
    /* 1: fs_call serves args.format "tar" (PROTOCOL.md "Archives"); else a
     * tar read or write is -32011 {provider, feature: "fs.tar"}. Docker and
     * Modal set it (Modal runs GNU tar in the sandbox, modal_fstar.c). */
    int fs_tar;
    void (*fs_release_stopped)(void *cookie, struct sandbox *sb, uint64_t handle,
                               void *hdata);
    /* -- issue 18: terminals, ports, stats (all optional) -- */
    /* Present: processes may run on a terminal (p->spec "pty": {cols, rows},
     * all output on stdout). Sets a running p's window size. */
    int (*proc_resize)(void *cookie, struct process *p, unsigned cols, unsigned rows,
                       sbx_err_t *err);
    /* Present: sandbox.stats works. Samples sb's resource use and calls
     * done(data, stats, NULL) or done(data, NULL, err) exactly once, maybe
     * later (never before it returns 0; <0 = failed at once, done is not
     * called). stats (stolen) has the members of PROTOCOL.md's sandbox.stats
     * the provider knows (cpu, memory, pids, block_io, network, disk); the
     * core adds id and time. with_size: also the writable layer's size
     * (slow). sb may be gone by the time done runs: done must not touch it. */
    int (*sb_stats)(void *cookie, struct sandbox *sb, int with_size,
                    void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                    sbx_err_t *err);
    /* Present: sandbox.expose works. Makes port (1..65535) inside sb
     * reachable on 127.0.0.1:host_port (0: any free port); *out (new) is
     * {port, host, host_port, url, ...}. Exposing an exposed port again
     * answers the same. */
    int (*sb_expose)(void *cookie, struct sandbox *sb, int port, int host_port,
                     json_t **out, sbx_err_t *err);
    int (*sb_unexpose)(void *cookie, struct sandbox *sb, int port, sbx_err_t *err);
    /* net18 (issue 18): sandbox.expose with a host address or on a Unix
     * socket. When present it is called instead of sb_expose, with req
     * (borrowed, valid during the call) as api_ws.c checked it. */
    int (*sb_expose_req)(void *cookie, struct sandbox *sb,
                         const struct sbx_expose_req *req, json_t **out, sbx_err_t *err);
    /* issue 17 (ts17). Present: sandbox.mount / sandbox.unmount work. Binds
     * the host directory source (absolute) at target (absolute) inside the
     * running sb, read-only when ro, once the provider's policy grants it to
     * sb's owner (-32003 in its words otherwise); unmount undoes only a
     * mount made so. done(data, result, NULL) or done(data, NULL, err)
     * exactly once, later (never before it returns 0; <0 = failed at once,
     * done is not called); result (stolen) {source, target, read_only} or
     * {target}. sb may be gone when done runs. */
    int (*sb_mount)(void *cookie, struct sandbox *sb, const char *source,
                    const char *target, int ro,
                    void (*done)(void *data, json_t *result, sbx_err_t *err), void *data,
                    sbx_err_t *err);
    int (*sb_unmount)(void *cookie, struct sandbox *sb, const char *target,
                      void (*done)(void *data, json_t *result, sbx_err_t *err),
                      void *data, sbx_err_t *err);
};

/* -- provider-facing core functions ---------------------------------------- */

/* Ends the current lifecycle op. err NULL = success; result stolen (may be NULL). */
void sandbox_op_done(struct sandbox *sb, sbx_err_t *err, json_t *result);
/* The backend is gone behind our back: status error, processes fail. */
void sandbox_lost(struct sandbox *sb, const char *reason);
/* Puts a snapshot the backend holds into the registry (or refreshes it);
 * data stolen. See snapshot_list above. */
void snapshot_register(const char *id, const char *provider, uid_t owner,
                       double created_at, const char *sandbox, json_t *data);
/* issue 16 (seccore): the memory sb is about to be given (its memory limit
 * in bytes: a container's Memory, an isolate worker's ceiling; 0 = none), to
 * be counted against the owner's limits.memory_per_uid together with every
 * other sandbox it holds. Call it from sb_start before the backend is asked
 * for anything; on -32005 (err filled) fail the start with it. err NULL
 * (adoption: the memory is already in use) counts without refusing. The
 * reservation replaces sb's previous one and ends when sb stops or goes. */
int sandbox_reserve_memory(struct sandbox *sb, uint64_t bytes, sbx_err_t *err);
/* issue 16 (seccore): an adopts_at_load provider finished its listing at
 * load (whatever it found is registered, or the listing failed). */
void sandbox_adoption_done(const char *provider);
/* A sandbox adopted running has its processes back (or they are lost). */
void sandbox_adopted(struct sandbox *sb);
/* A progress notification to the sandbox's owner sessions; params stolen. */
void sandbox_progress(struct sandbox *sb, json_t *params);
/* Any notification (method) to the sandbox's owner sessions, params stolen
 * ("sandbox" is added): sandbox.egress (issue 18). */
void sandbox_notify(struct sandbox *sb, const char *method, json_t *params);

void process_started(struct process *p, long os_pid);
/* stream SBX_STREAM_STDOUT (1) or SBX_STREAM_STDERR (2), as in libsbx. */
void process_output(struct process *p, int stream, const void *data, size_t len);
/* 1 while a follower cannot take more: stop reading / withhold credit. */
int process_output_blocked(struct process *p);
/* rec (borrowed): {exit_code, signal, timed_out, killed, error, result, exception,
 * reset}. */
void process_exited(struct process *p, json_t *rec);
/* An sb_instructions for providers whose commands run through the shell:
 * sh -c, argv, working directory, timeouts, persistence. */
char *sandbox_shell_instructions(void *cookie, struct sandbox *sb);
/* A tool call from inside the sandbox; args borrowed. */
void process_tool_call(struct process *p, int64_t call, const char *name, json_t *args);

/* -- files (core/fs.c) -------------------------------------------------------- */

/* Read bytes of fc (FS_OP_READ), in order. Returns -1 when they go past the
 * length asked for (the provider then stops and finishes with an error). */
int fs_call_data(struct fs_call *fc, const void *data, size_t len);
/* Ends fc: err NULL = success with result (stolen, may be NULL); err is
 * used and cleared. fc is freed: do not touch it afterwards. */
void fs_call_done(struct fs_call *fc, sbx_err_t *err, json_t *result);
/* A -32010 {errno, path, message} error; errno_name like "ENOENT". */
int fs_err(sbx_err_t *err, const char *errno_name, const char *path, const char *message);
/* Events of watch `handle` of sb: kind "create"|"modify"|"delete"|"rename"|
 * "overflow"; dropped > 0 adds an overflow. Unknown handles are ignored
 * (a watch dropped while its events were under way). */
void fs_event(struct sandbox *sb, uint64_t handle, const char *path, const char *kind);
void fs_overflow(struct sandbox *sb, uint64_t handle, int ended);

/* The registered providers, NULL-terminated. */
extern const struct sbx_provider *const sbx_providers[];

#endif
