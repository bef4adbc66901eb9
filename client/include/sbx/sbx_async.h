/*
 * sbx_async.h - libsbx asynchronous API (hiredis's async.h, for sbxd).
 *
 * An sbx_async wraps an sbx_ctx (its first member, so `&ac->c` is the context
 * with err/errstr/fd) and is driven by an event loop through adapter hooks:
 * the adapter calls sbx_async_handle_read/handle_write/handle_timeout when the
 * socket is readable/writable or the timer fires, and libsbx asks the adapter
 * to watch or unwatch the socket through the hooks. Ready-made adapters:
 * adapters/libev.h (sbx_libev_attach) and adapters/poll.h (sbx_poll_attach).
 *
 * Calls are matched to responses by id, so replies may come out of order.
 * Every reply callback runs exactly once: with the result, with the RPC error,
 * or with both NULL when the connection was lost or the context freed.
 *
 * Callbacks may call sbx_async_call, sbx_async_spawn, sbx_async_tool_reply,
 * sbx_async_disconnect and sbx_async_free (the last two are deferred until the
 * callback returns). They must not call sbx_async_handle_* (asserted).
 * The synchronous functions of sbx.h must never be used on &ac->c.
 */
#ifndef SBX_ASYNC_H
#define SBX_ASYNC_H

#include <stdint.h>

#include "sbx.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sbx_async sbx_async;
struct sbx_async_priv;

/* Event-loop hooks, filled in by an adapter. All are idempotent: libsbx may
 * call add_read on a socket already watched. `data` is the adapter's. */
typedef struct sbx_async_ev {
    void *data;
    void (*add_read)(void *data);
    void (*del_read)(void *data);
    void (*add_write)(void *data);
    void (*del_write)(void *data);
    /* The context is going away: stop watching, free the adapter state. */
    void (*cleanup)(void *data);
    /* (Re)arm a one-shot timer that calls sbx_async_handle_timeout. */
    void (*schedule_timer)(void *data, int timeout_ms);
} sbx_async_ev;

struct sbx_async {
    sbx_ctx c;                        /* must stay first */
    sbx_async_ev ev;                  /* set by sbx_async_attach */
    void *data;                       /* the user's */
    void (*data_cleanup)(void *data); /* called on data when ac is freed */
    struct sbx_async_priv *apriv;     /* private */
};

/**
 * Reply to a call. Exactly once per call.
 * @param result  borrowed; NULL on error or on lost connection.
 * @param err     borrowed; NULL on success or on lost connection.
 * Both NULL: the connection was lost (see ac->c.err) or the context freed.
 */
typedef void (*sbx_reply_cb)(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                             void *privdata);

/** status is SBX_OK, or SBX_ERR when connecting failed (see ac->c.errstr; ac is
 *  freed after the callback returns). */
typedef void (*sbx_connect_cb)(sbx_async *ac, int status);

/** Comes last, and only if on_connect(SBX_OK) ran. status is SBX_OK for a
 *  requested disconnect/free, SBX_ERR when the connection broke. */
typedef void (*sbx_disconnect_cb)(sbx_async *ac, int status);

/** A notification not claimed by an sbx_async_spawn watch.
 *  @param method, params  borrowed (params may be NULL). */
typedef void (*sbx_async_notify_cb)(sbx_async *ac, const char *method, json_t *params,
                                    void *privdata);

/**
 * A tool.call request from the daemon. Answer it now or later with
 * sbx_async_tool_reply(ac, call_id, ...); copy call_id to answer later.
 * @param call_id, tool, args, params  borrowed, valid during the callback only.
 */
typedef void (*sbx_async_tool_cb)(sbx_async *ac, const char *call_id, const char *tool,
                                  json_t *args, json_t *params, void *privdata);

/**
 * Process output, decoded, for sbx_async_set_output_cb.
 * @param sandbox  borrowed
 * @param offset   the stream offset of data[0]
 * @param data     len bytes, borrowed, valid during the call only; NOT
 *                 NUL-terminated (it points into libsbx's read buffer).
 */
typedef void (*sbx_async_output_cb)(sbx_async *ac, const char *sandbox, json_int_t pid,
                                    int stream, uint64_t offset, const char *data,
                                    size_t len, void *privdata);

/** Output of a spawned process, in order. data is borrowed (len bytes, NUL after). */
typedef void (*sbx_output_cb)(sbx_async *ac, int stream, const char *data, size_t len,
                              void *privdata);

/**
 * End of a spawned process; always the last callback of its watch.
 * @param exit  the process.exit params (borrowed); NULL when the spawn failed
 *              (err set) or the connection was lost (err NULL).
 */
typedef void (*sbx_exit_cb)(sbx_async *ac, json_t *exit, const sbx_rpc_error *err,
                            void *privdata);

/**
 * Starts a non-blocking connect to sbxd's Unix socket. Returns a context even
 * on failure, with ac->c.err set (then sbx_async_free it without attaching);
 * NULL only on OOM. on_connect runs on the first writable event.
 */
SBX_API sbx_async *sbx_async_connect_unix(const char *path) SBX_WARN_UNUSED;

/**
 * Installs event-loop hooks (for adapters). Starts reading and asks for a
 * writable event to finish the connect.
 * @return SBX_ERR when hooks are already installed or ac failed to connect.
 */
SBX_API int sbx_async_attach(sbx_async *ac, const sbx_async_ev *ev);

SBX_API void sbx_async_set_connect_cb(sbx_async *ac, sbx_connect_cb cb);
SBX_API void sbx_async_set_disconnect_cb(sbx_async *ac, sbx_disconnect_cb cb);
SBX_API void sbx_async_set_notify_cb(sbx_async *ac, sbx_async_notify_cb cb,
                                     void *privdata);

/**
 * The fast way to receive output: with cb set, every process.output that no
 * sbx_async_spawn watch claims goes to cb as bytes (data or data_b64
 * decoded) instead of to the notify callback as JSON. Output lines in the
 * daemon's own shape are then never parsed into JSON at all. A data_b64
 * that is not valid base64 breaks the connection (SBX_ERR_PROTOCOL).
 * Ask for output_encoding "auto" in process.exec/spawn/attach so that
 * binary output costs base64 rather than \u00XX escapes. NULL: off.
 */
SBX_API void sbx_async_set_output_cb(sbx_async *ac, sbx_async_output_cb cb,
                                     void *privdata);

/** Sets the tool.call handler (NULL: tool calls fail with SBX_E_TOOL at once). */
SBX_API void sbx_async_set_tool_cb(sbx_async *ac, sbx_async_tool_cb cb, void *privdata);

/**
 * Time limit (<= 0: none, the default) for connecting and for waiting while
 * calls are pending: when nothing arrives for timeout_ms, the connection is
 * dropped with SBX_ERR_TIMEOUT and the pending callbacks get NULLs.
 * Needs an adapter with schedule_timer.
 */
SBX_API void sbx_async_set_timeout(sbx_async *ac, int timeout_ms);

/**
 * Sends a call. cb (may be NULL) runs exactly once, later, never from inside
 * this function.
 * @param params  borrowed; an object, or NULL.
 * @return SBX_OK, or SBX_ERR when disconnecting/freeing/broken or out of memory.
 */
SBX_API int sbx_async_call(sbx_async *ac, const char *method, json_t *params,
                           sbx_reply_cb cb, void *privdata);

/** Like sbx_async_call, but steals params (even on failure). */
SBX_API int sbx_async_call_new(sbx_async *ac, const char *method, json_t *params,
                               sbx_reply_cb cb, void *privdata);

/**
 * Reads sandbox:path by chunks (fs.read), one call in flight: sink gets each
 * chunk in order (a non-zero return stops), then done runs exactly once with
 * the last answer (or NULL and the error; NULL, NULL: connection lost or the
 * sink stopped).
 * @return SBX_OK, or SBX_ERR (no callback will run).
 */
SBX_API int sbx_async_fs_read(sbx_async *ac, const char *sandbox, const char *path,
                              sbx_fs_sink_cb sink, sbx_reply_cb done, void *privdata);

/**
 * Writes len bytes (borrowed: keep them until done) to sandbox:path in
 * SBX_FS_CHUNK calls, each sent when the previous one was answered; done runs
 * once with the last answer {path, size} or the error.
 * @param opts  borrowed, may be NULL (mode, append, mkdir_parents).
 */
SBX_API int sbx_async_fs_write(sbx_async *ac, const char *sandbox, const char *path,
                               const void *data, size_t len, json_t *opts,
                               sbx_reply_cb done, void *privdata);

/**
 * Sends process.spawn (params borrowed; must hold "sandbox") and follows the
 * process: on_output(stream, bytes) for each process.output, then on_exit
 * exactly once (the exit params; or NULL with err when the spawn failed; or
 * NULL, NULL when the connection was lost). Keep "stream" true (the default)
 * in params, or no output arrives. Notifications claimed here do not reach
 * the notify callback.
 * @return SBX_OK, or SBX_ERR (no callback will run).
 */
SBX_API int sbx_async_spawn(sbx_async *ac, json_t *params, sbx_output_cb on_output,
                            sbx_exit_cb on_exit, void *privdata);

/**
 * Answers a tool.call.
 * @param result      borrowed; NULL means JSON null. Ignored if error_code != 0.
 * @param error_code  0 for success, else the error code (SBX_E_TOOL).
 * @param error_msg   the error message (NULL: "tool failed").
 */
SBX_API int sbx_async_tool_reply(sbx_async *ac, const char *call_id, json_t *result,
                                 int error_code, const char *error_msg);

/** Number of calls waiting for a response. */
SBX_API size_t sbx_async_pending(const sbx_async *ac);

/**
 * Graceful: refuses new calls, delivers the replies still due, flushes, then
 * closes and frees ac (on_disconnect with SBX_OK). Deferred in a callback.
 */
SBX_API void sbx_async_disconnect(sbx_async *ac);

/**
 * Immediate: pending callbacks get (NULL, NULL), spawn watches on_exit(NULL),
 * then on_disconnect, the adapter cleanup and data_cleanup run, and ac is
 * freed. Deferred until the callback returns when called from one. NULL is a
 * no-op.
 */
SBX_API void sbx_async_free(sbx_async *ac);

/* For adapters only; never from a callback (asserted). */
SBX_API void sbx_async_handle_read(sbx_async *ac);
SBX_API void sbx_async_handle_write(sbx_async *ac);
SBX_API void sbx_async_handle_timeout(sbx_async *ac);

#ifdef __cplusplus
}
#endif

#endif
