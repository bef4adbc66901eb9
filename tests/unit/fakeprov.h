/*
 * fakeprov.h - a provider for unit tests of the core and rpc/ that finishes
 * its operations when the test says so (the kit of issue 22, item 5).
 *
 * fakeprov_setup() makes a daemon (D) with this provider as the only one,
 * loaded, named "fake" and the default. Lifecycle ops (start, stop,
 * destroy, snapshot) finish at once unless fakeprov.defer is set: then they
 * wait in a queue until fakeprov_finish() ends the oldest. fail_now makes
 * the next op fail before it returns (the provider's "<0 at once");
 * fail_code makes it finish with that error code.
 *
 * Processes understand a tiny command language (p->spec "code", or the
 * shell string):
 *   out TEXT   prints TEXT on stdout, exits 0
 *   err TEXT   prints TEXT on stderr, exits 1
 *   exit N     exits with N
 *   anything else runs until killed (proc_kill reports 128+sig).
 * Writes to stdin are appended to fakeprov.stdin_bytes; the last answer to a
 * tool call the provider got is fakeprov.tool_reply.
 *
 * For rpc/ tests the kit also has a client connection without a socket
 * (struct fakeconn): lines go in through rpc_handle_line, and what the
 * protocol layer writes back is kept, parsed, in order.
 */
#ifndef SBX_TEST_FAKEPROV_H
#define SBX_TEST_FAKEPROV_H

#include <jansson.h>
#include <stddef.h>

#include "rpc/conn.h"
#include "daemon.h"
#include "core/provider.h"

#define FAKEPROV_MAX_PENDING 16

struct fakeprov_state {
    /* controls, read by the next op */
    int defer;     /* 1: lifecycle ops wait for fakeprov_finish() */
    int fail_now;  /* non-zero: the next lifecycle op fails at once with this code */
    int fail_code; /* non-zero: lifecycle ops finish with this error code */
    json_t *start_result; /* stolen by the next successful start (e.g. reconnected) */
    /* what happened */
    int n_start, n_stop, n_destroy, n_snapshot, n_cancel, n_release;
    int n_spawn, n_write, n_close_stdin, n_kill;
    int last_signal;
    json_t *tool_reply; /* the last proc_tool_result reply (a reference) */
    char stdin_bytes[4096];
    size_t stdin_len;
    /* deferred ops, oldest first */
    struct sandbox *pending[FAKEPROV_MAX_PENDING];
    int npending;
};

extern struct fakeprov_state fakeprov;
extern const struct sbx_provider fakeprov_provider;
/* The daemon fakeprov_setup() made (D points at it). */
extern struct daemon fakeprov_daemon;

/* D, the config's defaults, EV_DEFAULT, the provider in slot 0, the loop's
 * prepare watcher (sessions and sandboxes flushed before it sleeps). */
void fakeprov_setup(void);
/* Frees sessions, sandboxes, the snapshot registry and the config. */
void fakeprov_teardown(void);
/* Forgets the counters and controls (not the pending queue). */
void fakeprov_reset(void);
/* Ends the oldest deferred op: code 0 succeeds, else fails with code and
 * msg. Returns 0, or -1 when nothing was pending. */
int fakeprov_finish(int code, const char *msg);
/* A sandbox of the fake provider owned by uid, made and started (conf
 * stolen, may be NULL). NULL when the core refused. */
struct sandbox *fakeprov_sandbox(const char *id, uid_t owner, json_t *conf);

/* A process of sb running cmd (a string, see the command language), made and
 * launched; NULL when the core refused. */
struct process *fakeprov_process(struct sandbox *sb, const char *cmd);

/* ---- a client connection without a socket ------------------------------------ */

struct fakeconn {
    struct rpc_conn k; /* first: the ops get &k */
    json_t *got;       /* every line written to the client, parsed (null if not JSON) */
    size_t room;       /* what reply_room answers (default 64 MiB) */
};

/* Links c as client id (uid, admin); c may be on the stack. */
void fakeconn_init(struct fakeconn *c, uid_t uid, int admin);
/* What a session does when its client goes: calls detached, followers and
 * tool calls dropped, the conn unlinked. */
void fakeconn_deinit(struct fakeconn *c);
/* Sends one line (without its newline), dispatches a batch to its end and
 * runs the loop a little. Returns the last answer (a response or a batch's
 * array, not a notification) written back since (borrowed, valid until the
 * next call), or NULL when none came. */
json_t *fakeconn_line(struct fakeconn *c, const char *line);
/* How many messages came back in all; how many of them are answers. */
size_t fakeconn_count(const struct fakeconn *c);
size_t fakeconn_answers(const struct fakeconn *c);
/* The last answer in all (borrowed), or NULL. */
json_t *fakeconn_last_answer(const struct fakeconn *c);
/* The last notification of that method (borrowed), or NULL. */
json_t *fakeconn_notification(const struct fakeconn *c, const char *method);
/* Runs the loop without sleeping, n times. */
void fakeprov_spin(int n);

#endif
