/*
 * process_obj.h - the process record itself: its fields, its state, its
 * waiters. output.c, below process.c, includes this instead of process.h,
 * so that it takes no names from the file that calls it.
 */
#ifndef SBXD_PROCESS_OBJ_H
#define SBXD_PROCESS_OBJ_H

#include <ev.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
