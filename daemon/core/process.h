/*
 * process.h - a process inside a sandbox, provider-independent: creation,
 * the run queue, timeout, kill, wait, the exit record and the retained-bytes
 * budget. Its output and followers are output.h's.
 */
#ifndef SBXD_PROCESS_H
#define SBXD_PROCESS_H

#include <ev.h>
#include <jansson.h>
#include <stdint.h>

#include "err.h"
#include "core/output.h"
#include "core/process_obj.h"
#include "core/sandbox_obj.h"

/* What to run, checked by the caller (api.c parses process.exec/spawn
 * params into it; sandbox.c fills it for a hook). Everything borrowed. */
struct proc_opts {
    json_t *command;    /* a non-empty string, or a non-empty array of strings; no NUL */
    json_t *env;        /* a checked {K: V|null} patch (env_check), or NULL */
    const char *cwd;    /* absolute, or NULL */
    int64_t timeout_ms; /* 0: the sandbox's command_timeout_ms */
    json_t *stdin_data; /* a string of bytes sent after the spawn, or NULL */
    uint64_t origin;    /* the session asking (tool calls go there); 0 for none */
    int internal;       /* a hook: not listed, not counted against the limits */
    int sandbox_restarted;   /* the call restarted the sandbox (restart_on_call) */
    enum out_enc result_enc; /* stdout/stderr of an exec result */
    sbx_result_cb exec_cb;   /* process.exec: cb gets the exit record with the output */
    void *exec_data;
    unsigned pty_cols, pty_rows; /* a terminal of this size (terminal.h); 0: none */
};

/* A queued process record from o; -32005 past max_queued_per_sandbox or past
 * the owner's limits.queued_bytes_per_uid (its command, env and stdin). */
int process_new(struct process **out, struct sandbox *sb, const struct proc_opts *o,
                sbx_err_t *err);
/*
 * A process the provider found already running (its agent survived an sbxd
 * restart). The record is RUNNING with the provider's pid; later pids of the
 * sandbox are higher. display: the command, for process.list. The caller
 * sets p->pdata and then reports output (replayed from offset 0) and exit as
 * usual. Returns NULL if the pid is taken.
 */
struct process *process_adopt(struct sandbox *sb, uint32_t pid, const char *display);
/* Starts p, or queues it until the sandbox runs (a pending sandbox is the
 * caller's to start). On failure p has failed and err says why. */
int process_launch(struct process *p, sbx_err_t *err);
struct process *process_find(struct sandbox *sb, uint32_t pid);
/* Bytes for a running process's stdin (the provider's proc_write). */
int process_write(struct process *p, const void *data, size_t len, sbx_err_t *err);
/* Ends a running process's stdin. */
int process_close_stdin(struct process *p, sbx_err_t *err);
int process_kill(struct process *p, int sig, sbx_err_t *err);
/* Ends the process record (after exit), or kills and forgets. */
void process_free(struct process *p);
json_t *process_exit_json(struct process *p, int with_output);
json_t *process_list_json(struct process *p);
/* Fails a queued/running process without the provider (sandbox lost/stopped). */
void process_fail(struct process *p, const char *why);
/* The sandbox started: spawn queued processes. */
void process_spawn_queued(struct sandbox *sb);
/* cb gets the exit record when p exits, or an error after timeout_ms (0 =
 * none) or when the record is dropped. */
void process_add_waiter(struct process *p, int64_t timeout_ms, sbx_result_cb cb,
                        void *privdata);
/*
 * Hands the answer to a tool call (provider.h: process_tool_call) to the
 * process's provider: result (stolen) on success, else code, msg and ename
 * (the Error name the client's handler threw, may be NULL). Dropped when
 * the process no longer runs.
 */
void process_tool_result(struct process *p, int64_t call, json_t *result, int code,
                         const char *msg, const char *ename);
/* Replay and result bytes held by every process record (daemon.info). */
size_t process_retained_total(void);

#endif
