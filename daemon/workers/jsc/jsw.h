/*
 * jsw.h - internals of the js isolate worker (sbxd-jsworker): JavaScriptCore
 * through its C API, one program at a time, driven over the worker channel
 * (proto/CHANNEL.md). Shared by jsw_main.c (options, hardening, dispatch),
 * jsw_chan.c (frame I/O, output credit) and jsw_engine.c (contexts, the
 * code-mode contract, snapshot/restore). Not for use outside daemon/workers/jsc/.
 *
 * Prefix: jsw_ (JS* and kJS* are JavaScriptCore's).
 */
#ifndef SBXD_JSW_H
#define SBXD_JSW_H

#include <JavaScriptCore/JavaScript.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx_chan.h"
#include "workers/common/wk.h"

/* console lines kept for the exec result's `logs` (bytes of text). */
#define JSW_LOGS_MAX (1u << 20)
/* Largest message (tool call, tool result, exit record) the worker builds or
 * accepts, split into MORE frames above SBX_CHAN_MAX_PAYLOAD. The SPAWN's
 * `max_message` lowers it. */
#define JSW_MESSAGE_MAX (64u << 20)
/* Tool calls in flight at once per program. */
#define JSW_MAX_CALLS 1024

/* The cache of stripped programs (jsw_scache.c). */
#define JSW_SCACHE_ENTRIES 64
#define JSW_SCACHE_BYTES (2u << 20)
#define JSW_SCACHE_ONE (64u << 10)

struct jsw_scache_entry {
    uint64_t hash;
    char *src; /* the program as the SPAWN gave it */
    size_t len;
    JSStringRef out; /* the stripped, wrapped program (retained); NULL = free slot */
    size_t bytes;    /* counted against JSW_SCACHE_BYTES */
    uint64_t used;   /* clock of the last use */
};

struct jsw_scache {
    struct jsw_scache_entry e[JSW_SCACHE_ENTRIES];
    size_t bytes;
    uint64_t clock;
    uint64_t hits;
};

struct jsw_call {
    struct jsw_call *next;
    uint32_t id;
    char *tool;                  /* the original tool id */
    JSObjectRef resolve, reject; /* protected */
};

struct jsw {
    int fd; /* the channel */
    /* jsw_main.c's frame handler, handed down so that jsw_chan.c serves
     * frames while output waits for credit without calling up into main. */
    wk_dispatch_fn *dispatch;
    JSContextGroupRef group;

    /* TypeScript stripping: a context of its own holding the bundled
     * stripper; programs never see it. */
    JSGlobalContextRef strip_ctx;
    JSObjectRef strip_fn; /* protected */
    struct jsw_scache scache;

    /* The context of a persistent sandbox (kept between programs). */
    JSGlobalContextRef pctx;
    JSObjectRef papi;

    JSStringRef prelude_src; /* prelude.js as a JS string, made once */

    /* A fresh global made while idle, for the next non-persistent program. */
    JSGlobalContextRef spare;
    JSObjectRef spare_api;

    /* The running program: proc 0 = none. */
    uint32_t proc;
    uint64_t credit;
    JSGlobalContextRef ctx; /* pctx, or a fresh one for this run */
    JSObjectRef api;        /* the prelude's object in ctx (protected) */
    int done;               /* the program settled: rec is ready */
    json_t *rec;            /* exit record being built */
    char *result;           /* JSON text of the return value, or NULL */
    size_t result_len;
    json_t *logs; /* array of console lines */
    size_t logs_bytes;
    int logs_truncated;
    uint32_t next_call;
    struct jsw_call *calls;
    unsigned ncalls;
    size_t max_message;
    unsigned memory_mb; /* the SPAWN's memory_limit_mb (the daemon enforces it) */
    int statm_fd;       /* /proc/self/statm, opened before the seccomp filter */
    long page_size;

    /* MORE frames received for the next frame of `more_proc`. */
    uint8_t *more;
    size_t more_len, more_cap;
    uint32_t more_proc;
};

/* ---- jsw_chan.c (frames: workers/common/wk.h) ------------------------------- */

/* Program output under the credit; blocks serving frames while there is none. */
void jsw_output(struct jsw *w, uint8_t type, const uint8_t *data, size_t len);

/* ---- jsw_scache.c --------------------------------------------------------- */

/* The stripped program for exactly these bytes (a new reference), or NULL. */
JSStringRef jsw_scache_get(struct jsw_scache *c, const char *src, size_t len);
/* Keeps out (retained) for src; evicts the least recently used to fit. */
void jsw_scache_put(struct jsw_scache *c, const char *src, size_t len, JSStringRef out);
void jsw_scache_clear(struct jsw_scache *c);

/* ---- jsw_engine.c ---------------------------------------------------------- */

/* The context group and the stripper. Returns 0 or -1 with *why. */
int jsw_engine_init(struct jsw *w, const char **why);
void jsw_engine_deinit(struct jsw *w);
/* Drops the persistent context and the stripped programs (RESET); keeps the
 * spare, in which nothing has run. */
void jsw_engine_reset(struct jsw *w);
/* Starts the program of a SPAWN (req borrowed). Sends STARTED and, if it
 * settles at once, EXIT; otherwise jsw_engine_finish does when it does. */
void jsw_engine_spawn(struct jsw *w, uint32_t proc, json_t *req);
/* Makes the spare context when there is none (call while idle). */
void jsw_engine_prepare(struct jsw *w);
/* The frame loop's idle hook (wk_serve_idle): while the running program
 * awaits a tool's answer and no frame is waiting, makes the spare for the
 * next run, so that a run after a tool round trip finds it made. */
void jsw_engine_idle(void *w);
/* Sends the EXIT of a program that settled (w->done) and cleans up. */
void jsw_engine_finish(struct jsw *w);
/* A TOOL_RESULT payload (NUL-terminated) for the running program. */
void jsw_engine_tool_result(struct jsw *w, uint32_t proc, const char *payload,
                            size_t len);
/* SNAP_DATA payload {"globals":{...}} or {"error":S}; malloc'd. */
char *jsw_engine_snapshot(struct jsw *w, size_t *len_out);
/* RESTORE {"globals":{...}}. 0 or -1 with *why. */
int jsw_engine_restore(struct jsw *w, const char *payload, size_t len, const char **why);

#endif
