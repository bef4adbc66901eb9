/*
 * mcp.h - what mcp.c (the MCP server: stdio, JSON-RPC, sandboxes, daemon
 * connection) and mcp_tools.c (the tools) share. `sbxctl mcp` only.
 */
#ifndef SBXCTL_MCP_H
#define SBXCTL_MCP_H

#include <stddef.h>

#include <ev.h>
#include <jansson.h>

#include <sbx/sbx_async.h>

/* A byte buffer that never grows past `max`. */
struct mbuf {
    char *p;
    size_t len, cap;
};

/* A sandbox the server uses: the one for commands and the one for code. */
enum slot_state { SLOT_NONE, SLOT_INFO, SLOT_CREATING, SLOT_READY };

struct slot {
    const char *what; /* "command" or "code", for messages */
    enum slot_state state;
    char *id;             /* the sandbox id (chosen before creating it) */
    char *progress;       /* the last sandbox.progress message while creating */
    char *provider;       /* the provider it runs on, once READY */
    int owned;            /* created by us: destroyed on exit */
    struct call *waiters; /* calls waiting for READY (linked by wnext) */
};

struct tool;

/* One tools/call in flight. Freed when answered (or cancelled) and no daemon
 * reply it waits for is outstanding. */
struct call {
    struct mcp *m;
    json_t *id;             /* the request id */
    json_t *progress_token; /* NULL when the client asked for no progress */
    const struct tool *tool;
    json_t *args; /* the arguments object */
    struct slot *slot;
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
    struct call *prev, *next, *wnext;
};

struct mcp {
    struct ev_loop *loop;
    /* options */
    const char *provider, *image, *sandbox_name, *code_provider;
    json_t *sb_env, *sb_opts;
    json_int_t lifetime_ms, idle_ms, default_timeout_ms;
    size_t max_output, max_message, max_calls;
    int progress_ms, verbose;
    /* Picked at start from daemon.info when not given (issue 19): the
     * command sandbox's provider and image (docker and its configured
     * image), run_code's provider; code_only when sbxd has no shell
     * provider, so only run_code is offered. Owned copies in picked[]. */
    int code_only;
    char *picked[3];

    /* stdio */
    ev_io in_w, out_w;
    struct mbuf in, out;
    int discarding, in_eof, in_paused;
    int in_flags0, out_flags0;

    /* MCP session */
    char version[16];
    int structured; /* the negotiated revision has structuredContent/outputSchema */
    int annotated;  /* ... has tool annotations and progress messages */
    json_t *tools_json;

    /* sbxd */
    sbx_async *ac;
    char conn_err[256]; /* why the last connect failed */
    int outstanding;    /* daemon calls in flight */
    struct slot cmd, code;
    struct call *calls;
    size_t ncalls;
    struct offsets *offsets;
    size_t noffsets;
    json_int_t next_token; /* start_token of the next exec */

    /* leaving */
    int quitting, signals, status;
    ev_signal sigint, sigterm;
    ev_timer quit_timer;
};

/* ---- mcp.c: for the tools ---- */
typedef void (*dreply_fn)(struct call *c, json_t *result, const sbx_rpc_error *err);
/* A daemon call for c (params stolen). fn runs exactly once, also when c is
 * done (check c->done) and with both NULL when the connection is lost.
 * Returns 0, or -1 when nothing could be sent (fn will not run). */
int mcp_dcall(struct call *c, const char *method, json_t *params, dreply_fn fn);
/* Text for a failed daemon reply (err, or the lost connection). Static buffer. */
const char *mcp_errtext(struct mcp *m, const sbx_rpc_error *err);
/* Runs c->on_ready once the slot's sandbox exists (creating it on first use). */
void mcp_slot_use(struct call *c, struct slot *s, void (*ready)(struct call *c));
/* The slot's sandbox is gone behind our back (e.g. expired): make a new one next time. */
void mcp_slot_lost(struct mcp *m, struct slot *s);
/* Answers c: structured (stolen, may be NULL) with is_error. text NULL = the
 * JSON. is_error only when the tool could not do its job: a command that ran
 * and exited non-zero is a result (issue 19). */
void mcp_answer(struct call *c, json_t *structured, int is_error, const char *text);
void mcp_answer_error(struct call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees c when it is done and nothing is outstanding. */
void mcp_call_maybe_free(struct call *c);
/* Remembered process_output offsets per (sandbox, pid). */
void mcp_offsets_get(struct mcp *m, const char *sandbox, json_int_t pid,
                     json_int_t off[2]);
void mcp_offsets_put(struct mcp *m, const char *sandbox, json_int_t pid,
                     const json_int_t off[2]);

/* mbuf: appends up to max bytes in all; returns how many were taken. */
size_t mbuf_append(struct mbuf *b, const char *data, size_t len, size_t max);
void mbuf_free(struct mbuf *b);
/* A JSON string of b's bytes with invalid UTF-8 replaced by U+FFFD (new ref). */
json_t *mbuf_string(const char *p, size_t len);

/* ---- mcp_tools.c ---- */
/* The tools/list array (new reference); with_structured adds outputSchema
 * and title, with_annotations the annotations. */
json_t *mcp_tools_list(const struct mcp *m, int with_structured, int with_annotations);
/* The tool of that name when m offers it (code_only: run_code alone), else NULL. */
const struct tool *mcp_tool_find(const struct mcp *m, const char *name);
const char *mcp_tool_name(const struct tool *t);
/* Validates c->args and starts the tool. Answers c itself on bad arguments. */
void mcp_tool_start(struct call *c);
/* Cancellation or shutdown: kills c's remote process if it has one. */
void mcp_tool_cancel(struct call *c);
/* Routes a process.output/process.exit to the call it belongs to. 1 if taken. */
int mcp_tool_route(struct mcp *m, const char *method, json_t *params);
/* A process.started: the pid of an exec of ours, before its output. */
void mcp_tool_started(struct mcp *m, json_t *params);
/* Whether a tool reports progress while it runs. */
int mcp_tool_has_progress(const struct tool *t);
/* A progress message for c (malloc'd). */
char *mcp_tool_progress_text(struct call *c);

/* ---- mcp_files.c: the file tools (fs.* in the command sandbox) ---- */
void mcpf_read_start(struct call *c);
void mcpf_write_start(struct call *c);
void mcpf_edit_start(struct call *c);
void mcpf_list_start(struct call *c);
void mcpf_move_start(struct call *c);
void mcpf_info_start(struct call *c);

#endif
