/*
 * mcp_sbxd.h - `sbxctl mcp`'s side of sbxd: one async libsbx connection
 * (made again on the next call when sbxd closed it), the two sandboxes the
 * server uses (the command sandbox and run_code's), and the process_output
 * offsets it remembers. Knows nothing of MCP: calls get their replies through
 * the function they passed, process notifications go to on_process, and
 * on_idle runs after every reply so the owner can see whether it is done.
 */
#ifndef SBXCTL_MCP_SBXD_H
#define SBXCTL_MCP_SBXD_H

#include <stddef.h>

#include <ev.h>
#include <jansson.h>

#include <sbx/sbx_async.h>

/* What `sbxctl mcp` was told (or picked from daemon.info) at start. */
struct mcp_conf {
    const char *provider, *image, *sandbox_name, *code_provider;
    json_t *sb_env, *sb_opts;
    json_int_t lifetime_ms, idle_ms, default_timeout_ms;
    size_t max_output, max_message, max_calls;
    int progress_ms, verbose;
    int code_only; /* no shell provider: only run_code is offered */
};

/* Someone waiting for a slot's sandbox: exactly one of ready or fail runs. */
struct mwaiter {
    void (*ready)(struct mwaiter *w);
    void (*fail)(struct mwaiter *w, const char *why); /* why: a whole sentence */
    struct mwaiter *next;
};

enum slot_state { SLOT_NONE, SLOT_INFO, SLOT_CREATING, SLOT_READY };

struct slot {
    const char *what; /* "command" or "code", for messages */
    enum slot_state state;
    char *id;       /* the sandbox id (chosen before creating it) */
    char *progress; /* the last sandbox.progress message while creating */
    char *provider; /* the provider it runs on, once READY */
    int owned;      /* created by us: destroyed on exit */
    struct mwaiter *waiters;
};

/* A reply: result or err, both NULL when the connection was lost. */
typedef void (*msbx_fn)(void *priv, json_t *result, const sbx_rpc_error *err);

struct offsets;

struct msbx {
    struct ev_loop *loop;
    const struct mcp_conf *conf;
    sbx_async *ac;
    ev_prepare flush;   /* writes the calls of this turn before the loop sleeps */
    char conn_err[256]; /* why the last connect failed */
    int outstanding;    /* calls in flight */
    int quitting;       /* set by the owner: sandboxes made now are destroyed */
    struct slot cmd, code;
    struct offsets *offsets;
    size_t noffsets;
    /* process.output, process.exit and process.started notifications */
    void (*on_process)(void *data, const char *method, json_t *params);
    void (*on_idle)(void *data);
    void *data;
};

void msbx_init(struct msbx *b, struct ev_loop *loop, const struct mcp_conf *conf);
/* A call (params stolen). fn runs exactly once, with both NULL when the
 * connection is lost. Returns 0, or -1 when nothing could be sent (fn will
 * not run). */
int msbx_call(struct msbx *b, const char *method, json_t *params, msbx_fn fn, void *priv);
/* Text for a failed reply (err, or the lost connection). Static buffer. */
const char *msbx_errtext(const struct msbx *b, const sbx_rpc_error *err);
/* w->ready once the slot's sandbox exists (creating it on first use), or w->fail. */
void msbx_slot_use(struct msbx *b, struct slot *s, struct mwaiter *w);
/* Takes w off s's waiters (a cancelled call). */
void msbx_slot_unwait(struct slot *s, struct mwaiter *w);
/* The slot's sandbox is gone behind our back: make a new one next time. */
void msbx_slot_lost(struct slot *s);
/* Destroys the slot's sandbox when we made it. */
void msbx_slot_destroy(struct msbx *b, struct slot *s);
/* Calls in flight or a sandbox being made: not done yet. */
int msbx_busy(const struct msbx *b);
/* Remembered process_output offsets per (sandbox, pid). */
void msbx_offsets_get(const struct msbx *b, const char *sandbox, json_int_t pid,
                      json_int_t off[2]);
void msbx_offsets_put(struct msbx *b, const char *sandbox, json_int_t pid,
                      const json_int_t off[2]);
/* Closes the connection (replies still owed run with NULLs) and frees all. */
void msbx_fini(struct msbx *b);

#endif
