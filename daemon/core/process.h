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
#include "core/sandbox_obj.h"

struct sandbox;

enum proc_state { P_QUEUED, P_RUNNING, P_EXITED };

struct waiter {
    struct waiter *next;
    sbx_result_cb cb;
    void *privdata;
    ev_timer timer; /* process.wait timeout_ms */
    struct process *p;
};

typedef void (*process_done_fn)(struct process *p, void *data);

struct process {
    struct process *next, *prev; /* in sandbox */
    struct sandbox *sb;
    uint32_t pid;
    enum proc_state state;
    long os_pid;
    json_t *spec;      /* {argv|shell|code, env, cwd, timeout_ms, tools...} sent to the
                          provider */
    char *display;     /* command for process.list */
    double started_at; /* wall clock */
    ev_tstamp t0;      /* monotonic, for duration_ms */
    int64_t timeout_ms;
    ev_timer timer;
    uint64_t origin; /* session id that started it (tool calls go there) */
    struct pstream out[2];
    struct sub *subs;
    sbx_result_cb exec_cb; /* process.exec: answered with the exit and the output */
    void *exec_data;
    struct waiter *waiters;
    json_t *exit;          /* the exit record, once exited */
    json_t *stdin_pending; /* bytes given with exec's stdin param (sent after spawn) */
    int kill_sig;          /* a kill was asked for */
    int timed_out;
    int internal;            /* hook: not listed, no limits */
    enum out_enc result_enc; /* stdout/stderr of the exec result */
    process_done_fn done;
    void *done_data;
    void *pdata; /* the provider's */
    /* Exited records that still hold replay or result bytes, oldest first
     * (daemon-wide): what limits.retained_bytes_* evict first. */
    struct process *rnext, *rprev;
    int in_retained;
    size_t result_bytes; /* encoded size of exit.result, while kept */
    int pty;             /* runs on a terminal (spec "pty": {cols, rows}); terminal.c */
    /* While queued: its command, env and pending stdin, counted against the
     * owner's limits.queued_bytes_per_uid (issue 16, item 3). */
    size_t queued_bytes;
    int in_exit; /* process_exited runs for it: prune_exited must not free it */
};

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
