/*
 * mcp.h - `sbxctl mcp`'s protocol floor (mcp_proto.c): the MCP session, its
 * tools/call in flight, and what the tools use to answer them. The floors,
 * each calling only down (upward only through the callbacks it was given):
 *
 *   mcp.c          options, defaults from daemon.info, wiring, leaving
 *   mcp_tools.c    the tool table: schemas, argument checks (mcp_tools.h)
 *   mcp_proc.c     the process tools; mcp_files.c the file tools; mcp_text.c
 *   mcp_proto.c    MCP: negotiation, ids, tools/list and tools/call,
 *                  cancellation, progress, result encoding (this header)
 *   mcp_sbxd.c     sbxd: the connection, the two sandboxes, offsets
 *   mcp_stdio.c    the stdio transport
 *   mcp_util.c     buffers, UTF-8, the diagnostic line
 */
#ifndef SBXCTL_MCP_H
#define SBXCTL_MCP_H

#include <stddef.h>

#include <ev.h>
#include <jansson.h>

#include <sbx/sbx_async.h>

#include "mcp_sbxd.h"
#include "mcp_stdio.h"
#include "mcp_util.h"

struct tool;
struct call;
struct mcp;

/* The tool table, as the protocol floor sees it (mcp_tools.c fills one). */
struct mcp_toolbox {
    /* The tools/list array (new ref); structured adds outputSchema and
     * title, annotated the annotations. */
    json_t *(*list)(const struct mcp *m, int structured, int annotated);
    /* The tool of that name when m offers it, else NULL. */
    const struct tool *(*find)(const struct mcp *m, const char *name);
    const char *(*name)(const struct tool *t);
    int (*has_progress)(const struct tool *t);
    /* Checks c->args and starts the tool; answers c itself on bad arguments. */
    void (*start)(struct call *c);
    /* Cancellation or shutdown: kills c's remote process if it has one. */
    void (*cancel)(struct call *c);
    /* A progress message for c (malloc'd), or NULL. */
    char *(*progress_text)(struct call *c);
};

/* One tools/call in flight. Freed when answered (or cancelled) and no daemon
 * reply it waits for is outstanding. */
struct call {
    struct mcp *m;
    json_t *id;             /* the request id */
    json_t *progress_token; /* NULL when the client asked for no progress */
    const struct tool *tool;
    json_t *args; /* the arguments object */
    struct slot *slot;
    struct mwaiter w; /* waiting for slot's sandbox */
    void (*on_ready)(struct call *c);
    int refs; /* daemon replies outstanding */
    int done; /* answered, or cancelled: no (further) answer */
    int cancelled;
    int retried; /* ran again once in a new sandbox */
    double t0;

    /* a process of ours: exec_command, run_code, process_output */
    char *sandbox;
    json_int_t pid; /* -1 until known */
    int following;  /* routed process.output goes here */
    int attaching;  /* process_output: process.attach in flight */
    int blocked;    /* process_output: another call attaches to this pid */
    int kill_sent;
    json_int_t token; /* exec_command/run_code: process.exec's start_token, 0 none */
    json_int_t timeout_ms;
    struct mbuf out[2]; /* stdout, stderr */
    struct mbuf logs;   /* run_code: both streams in arrival order */
    int truncated;
    json_int_t at[2];   /* process_output: next offset per stream */
    json_int_t dropped; /* process_output: bytes no longer buffered by sbxd */
    json_t *exit;       /* process_output: the process.exit seen */

    ev_timer progress;
    json_int_t progress_last;
    struct call *prev, *next;
};

struct mcp {
    struct ev_loop *loop;
    struct mcp_conf conf;
    struct mstdio io;
    struct msbx sb;
    const struct mcp_toolbox *tools;

    /* MCP session */
    char version[16];
    int structured; /* the negotiated revision has structuredContent/outputSchema */
    int annotated;  /* ... has tool annotations and progress messages */
    json_t *tools_json;
    struct call *calls;
    size_t ncalls;
    json_int_t next_token; /* start_token of the next exec */

    /* the owner (mcp.c): told when the client left and whenever a call or
     * a write finished, so it can see whether it is done */
    int quitting;
    void (*on_gone)(struct mcp *m);
    void (*on_idle)(struct mcp *m);
    /* the owner's own: signals, exit status, the grace timer, and the
     * copies of what pick_defaults chose */
    int signals, status;
    ev_signal sigint, sigterm;
    ev_timer quit_timer;
    char *picked[3];
};

/* ---- mcp_proto.c ---- */
/* Starts the session on stdio (m->loop, m->conf, m->tools set). */
void mcp_proto_start(struct mcp *m);
/* Cancels every call (the client left or a signal came). */
void mcp_proto_cancel_all(struct mcp *m, const char *why);
/* After the loop: every call is abandoned and freed, replies or not. */
void mcp_proto_abandon(struct mcp *m);
void mcp_proto_fini(struct mcp *m);

typedef void (*dreply_fn)(struct call *c, json_t *result, const sbx_rpc_error *err);
/* A daemon call for c (params stolen). fn runs exactly once, also when c is
 * done (check c->done) and with both NULL when the connection is lost.
 * Returns 0, or -1 when nothing could be sent (fn will not run). */
int mcp_dcall(struct call *c, const char *method, json_t *params, dreply_fn fn);
/* Text for a failed daemon reply (err, or the lost connection). Static buffer. */
const char *mcp_errtext(struct mcp *m, const sbx_rpc_error *err);
/* Runs ready(c) once the slot's sandbox exists (creating it on first use);
 * answers c with the reason when it cannot be made. */
void mcp_slot_use(struct call *c, struct slot *s, void (*ready)(struct call *c));
/* Answers c: structured (stolen, may be NULL) with is_error. text NULL = the
 * JSON. is_error only when the tool could not do its job: a command that ran
 * and exited non-zero is a result (issue 19). */
void mcp_answer(struct call *c, json_t *structured, int is_error, const char *text);
void mcp_answer_error(struct call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees c when it is done and nothing is outstanding. */
void mcp_call_maybe_free(struct call *c);

#endif
