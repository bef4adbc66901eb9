/*
 * sbx.h - libsbx, the C client of sbxd (synchronous API, frame reader, helpers).
 *
 * libsbx speaks the JSON-RPC 2.0 protocol of proto/PROTOCOL.md over the daemon's
 * Unix socket. It is modelled on hiredis: a context that is returned even when
 * connecting failed (check c->err), a frame reader that can be used on its own,
 * and an asynchronous API in sbx_async.h driven by an event-loop adapter
 * (adapters/libev.h, adapters/poll.h). JSON values are jansson json_t.
 *
 * Conventions
 * - Functions return SBX_OK (0) or SBX_ERR (-1). After SBX_ERR, c->err holds one
 *   of the SBX_ERR_* codes and c->errstr a message. IO, EOF, PROTOCOL and OOM
 *   break the connection for good (c->flags gets SBX_BROKEN; only sbx_free is
 *   left). TIMEOUT, RPC and USAGE do not: the next call clears them.
 * - Every json_t parameter says whether it is *borrowed* (the caller keeps its
 *   reference) or *stolen* (libsbx takes it, even on failure). Stealing variants
 *   end in _new. Out-pointers (`x_out`) hand the caller a *new* reference.
 * - Out-parameters come first: after the context or reader a function acts
 *   on, if any (sbx_call(c, &result, &err, ...)), else at the very start
 *   (sbx_output_decode(&stream, &data, &len, params), sbx_base64_encode).
 *   Values passed to callbacks are borrowed and valid only during the call.
 * - Callbacks: a function may be called from inside a libsbx callback unless
 *   its comment says otherwise. The sync calls (sbx_call, sbx_read_notification)
 *   refuse with SBX_ERR_USAGE; sbx_free must not be called on the context whose
 *   callback is running.
 * - A context is not thread-safe; use one per thread.
 */
#ifndef SBX_H
#define SBX_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sbx_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SBX_BUILDING_LIB) && defined(__GNUC__)
#define SBX_API __attribute__((visibility("default")))
#else
#define SBX_API
#endif

#if defined(__GNUC__)
#define SBX_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define SBX_WARN_UNUSED
#endif

#define SBX_VERSION_MAJOR 0
#define SBX_VERSION_MINOR 1
#define SBX_VERSION_PATCH 0

#define SBX_OK 0
#define SBX_ERR -1

/* ctx->err codes. [breaks]: the connection is broken for good. */
#define SBX_ERR_IO 1       /* socket error; errstr has strerror() [breaks] */
#define SBX_ERR_EOF 3      /* the daemon closed the connection [breaks] */
#define SBX_ERR_PROTOCOL 4 /* malformed, oversized or too deep frame [breaks] */
#define SBX_ERR_OOM 5      /* out of memory [breaks] */
#define SBX_ERR_TIMEOUT 6  /* sbx_set_timeout / connect timeout expired */
#define SBX_ERR_RPC 7      /* the daemon answered with a JSON-RPC error */
#define SBX_ERR_USAGE 8    /* API misuse, e.g. a sync call from inside a callback */

#define SBX_ERRSTR_LEN 128

/* ctx->flags (read-only for the user; other bits are libsbx's own). */
#define SBX_CONNECTED 0x01 /* connection established (async: on_connect ran) */
#define SBX_BROKEN 0x02    /* a fatal error happened; only free is left */

/* Output streams (process.output "stream"). */
#define SBX_STDOUT SBX_STREAM_STDOUT /* 1 */
#define SBX_STDERR SBX_STREAM_STDERR /* 2 */

/* Notifications queued by the sync API when no notify callback is set. */
#define SBX_NOTIFY_QUEUE_MAX 4096

/* Buffer size a tool callback gets for its error message. */
#define SBX_TOOL_ERRMSG_LEN 256

/* ---- frame reader ------------------------------------------------------- */

/*
 * The reader splits a byte stream into '\n'-terminated JSON frames, like
 * hiredis's redisReader. Empty lines are skipped. A frame longer than the
 * maximum (default SBX_DEFAULT_MAX_MESSAGE), nested deeper than
 * SBX_MAX_JSON_DEPTH, not valid JSON, or not an object/array puts the reader in
 * a permanent error state (SBX_ERR_PROTOCOL).
 */
typedef struct sbx_reader sbx_reader;

/** Creates a reader. Returns NULL on OOM. */
SBX_API sbx_reader *sbx_reader_new(void) SBX_WARN_UNUSED;

/** Frees a reader and any buffered bytes. NULL is a no-op. */
SBX_API void sbx_reader_free(sbx_reader *r);

/** Sets the maximum frame size in bytes, newline excluded (0 = default). */
SBX_API void sbx_reader_set_max_frame(sbx_reader *r, size_t max);

/** Sets the maximum nesting depth of a frame (0 = SBX_MAX_JSON_DEPTH). */
SBX_API void sbx_reader_set_max_depth(sbx_reader *r, int depth);

/**
 * Appends bytes to the reader's buffer.
 * @return SBX_OK, or SBX_ERR when the reader is in error or out of memory.
 */
SBX_API int sbx_reader_feed(sbx_reader *r, const char *buf, size_t len);

/**
 * Takes the next complete frame.
 * @param frame_out  set to a new reference, or to NULL when no complete frame is
 *                   buffered yet.
 * @return SBX_OK (also when there is no frame yet), SBX_ERR on a bad frame.
 */
SBX_API int sbx_reader_get_frame(sbx_reader *r, json_t **frame_out);

/** Number of buffered bytes not yet returned as frames. */
SBX_API size_t sbx_reader_buffered(const sbx_reader *r);

/** 0 or the SBX_ERR_* code of the reader's error. */
SBX_API int sbx_reader_err(const sbx_reader *r);

/** The reader's error message ("" when none). Borrowed from the reader. */
SBX_API const char *sbx_reader_errstr(const sbx_reader *r);

/* ---- context -------------------------------------------------------------- */

struct sbx_ctx_priv;

/* A connection. The fields below are public and read-only. */
typedef struct sbx_ctx {
    int err;                     /* SBX_ERR_* of the last failure, 0 if none */
    char errstr[SBX_ERRSTR_LEN]; /* message for err */
    int fd;                      /* the socket, -1 when not connected */
    int flags;                   /* SBX_CONNECTED, SBX_BROKEN, ... */
    sbx_reader *reader;          /* incoming frames */
    struct sbx_ctx_priv *priv;   /* private */
} sbx_ctx;

/* A JSON-RPC error object {code, message, data}. */
typedef struct sbx_rpc_error {
    int code;            /* SBX_E_* from sbx_proto.h */
    const char *message; /* never NULL */
    json_t *data;        /* error.data, may be NULL */
} sbx_rpc_error;

/**
 * Frees an error returned through an err_out parameter (its message and its
 * reference to data). NULL is a no-op. Never pass the borrowed errors that
 * callbacks receive.
 */
SBX_API void sbx_rpc_error_free(sbx_rpc_error *e);

/**
 * Called for every notification (process.output, process.exit, sandbox.*)
 * that arrives while a sync call waits.
 * @param method  borrowed
 * @param params  borrowed, may be NULL
 * The callback must not call sbx_call / sbx_read_notification / sbx_free on c.
 */
typedef void (*sbx_notify_cb)(sbx_ctx *c, const char *method, json_t *params,
                              void *privdata);

/**
 * Answers a daemon->client `tool.call` request (Duktape `external_<tool>(args)`).
 * @param result_out  set it to a new reference with the result (stolen by
 *                    libsbx; NULL means JSON null) and return SBX_OK;
 * @param errmsg      or write a message here (errmsg_size bytes) and return
 *                    SBX_ERR: the daemon gets error SBX_E_TOOL and the script
 *                    sees a thrown Error(message).
 * @param args, params  borrowed (params is the whole request params:
 *                    sandbox, pid, name, args).
 * The callback must not call sbx_call / sbx_read_notification / sbx_free on c.
 */
typedef int (*sbx_tool_cb)(sbx_ctx *c, json_t **result_out, const char *tool,
                           json_t *args, json_t *params, char *errmsg, size_t errmsg_size,
                           void *privdata);

/**
 * Connects to sbxd's Unix socket, blocking for at most timeout_ms (<= 0: no
 * limit). Returns a context even on failure, with c->err/c->errstr set (check
 * c->err, then sbx_free it). NULL only when out of memory.
 * Not callable from a callback.
 */
SBX_API sbx_ctx *sbx_connect_unix(const char *path, int timeout_ms) SBX_WARN_UNUSED;

/** Closes the connection and frees c. NULL is a no-op. Not from a callback. */
SBX_API void sbx_free(sbx_ctx *c);

/** Time limit for each sbx_call (<= 0: none, the default). */
SBX_API void sbx_set_timeout(sbx_ctx *c, int timeout_ms);

/** Largest frame accepted from the daemon (0: SBX_DEFAULT_MAX_MESSAGE). */
SBX_API void sbx_set_max_frame(sbx_ctx *c, size_t max);

/**
 * Sets the callback for notifications that arrive during sbx_call (NULL: queue
 * them for sbx_read_notification, at most SBX_NOTIFY_QUEUE_MAX; later ones are
 * dropped and counted by sbx_notifications_dropped).
 */
SBX_API void sbx_set_notify_cb(sbx_ctx *c, sbx_notify_cb cb, void *privdata);

/** Sets the tool.call handler (NULL: tool calls fail with SBX_E_TOOL). */
SBX_API void sbx_set_tool_cb(sbx_ctx *c, sbx_tool_cb cb, void *privdata);

/**
 * Calls method and waits for its response. Notifications that arrive
 * meanwhile go to the notify callback; tool.call requests go to the tool
 * callback and its answer is sent back automatically.
 * @param result_out  if not NULL: on SBX_OK a new reference to the result.
 * @param err_out     if not NULL: on an RPC error (c->err == SBX_ERR_RPC) the
 *                    error, to be freed with sbx_rpc_error_free. Otherwise NULL.
 * @param params      borrowed; an object, or NULL for none.
 * @return SBX_OK or SBX_ERR. Not callable from a callback (SBX_ERR_USAGE).
 */
SBX_API int sbx_call(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                     const char *method, json_t *params);

/** Like sbx_call, but steals params (even on failure). */
SBX_API int sbx_call_new(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                         const char *method, json_t *params);

/**
 * Waits for the next notification, at most timeout_ms (< 0: forever; 0: only
 * what is already readable). Queued notifications come first. The notify
 * callback is bypassed; tool.call requests are still answered; responses to
 * calls that timed out earlier are dropped.
 * @param notification_out  a new reference to the whole message
 *                          {"jsonrpc","method","params"}.
 * @return SBX_OK, or SBX_ERR (SBX_ERR_TIMEOUT when nothing came in time).
 * Not callable from a callback.
 */
SBX_API int sbx_read_notification(sbx_ctx *c, json_t **notification_out, int timeout_ms);

/** Number of notifications dropped because the queue was full. */
SBX_API size_t sbx_notifications_dropped(const sbx_ctx *c);

/* ---- output and base64 helpers ---------------------------------------------- */

/**
 * Decodes a process.output notification's params: `stream` and `data` (UTF-8
 * text) or `data_b64` (base64 bytes).
 * @param stream_out  SBX_STDOUT or SBX_STDERR (may be NULL)
 * @param data_out    a malloc'd, NUL-terminated copy of the bytes (free() it);
 *                    may hold NUL bytes, so use len_out.
 * @param params      borrowed
 * @return SBX_OK, or SBX_ERR if params is not a valid process.output.
 * Callable from callbacks.
 */
SBX_API int sbx_output_decode(int *stream_out, char **data_out, size_t *len_out,
                              const json_t *params);

/**
 * Reads the bytes of obj[key] (a string) or obj[key + "_b64"] (base64), as
 * in exec results (stdout / stdout_b64) and notifications (data / data_b64).
 * @param data_out  malloc'd, NUL-terminated (free() it).
 * @return SBX_OK, or SBX_ERR when neither key holds a (valid) string.
 */
SBX_API int sbx_json_get_bytes(char **data_out, size_t *len_out, const json_t *obj,
                               const char *key);

/** Length of the base64 text for n bytes, without the NUL. */
SBX_API size_t sbx_base64_encoded_len(size_t n);

/**
 * Encodes n bytes as standard padded base64. out needs
 * sbx_base64_encoded_len(n) + 1 bytes; a NUL is appended.
 * @return the length written (without the NUL).
 */
SBX_API size_t sbx_base64_encode(char *out, const void *in, size_t n);

/**
 * Decodes standard base64 (padding optional, no whitespace). out needs
 * n / 4 * 3 + 3 bytes.
 * @return SBX_OK with *out_len set, or SBX_ERR on invalid input.
 */
SBX_API int sbx_base64_decode(void *out, size_t *out_len, const char *in, size_t n);

/* ---- files (fs.*, PROTOCOL.md "Files"; client/src/fs.c) -------------------- */

/* Bytes per fs call of the helpers below: the daemon's default
 * limits.fs_chunk_bytes. Other fs.* methods: sbx_call with SBX_M_FS_*. */
#define SBX_FS_CHUNK (4u << 20)

/** Takes len bytes of a streamed read; return 0 to go on, non-zero to stop
 *  (the read then fails with SBX_ERR_USAGE). data is borrowed. */
typedef int (*sbx_fs_sink_cb)(const void *data, size_t len, void *privdata);
/** Fills buf (cap bytes) with the next bytes of a streamed write: returns how
 *  many (cap unless at the end), 0 at the end, < 0 to abort the write. */
typedef long (*sbx_fs_source_cb)(void *buf, size_t cap, void *privdata);

/**
 * Reads sandbox:path whole into memory by chunks (fs.read with offsets).
 * @param data_out  malloc'd, NUL-terminated (free() it); len_out its length.
 * @param err_out   as sbx_call (an fs error is SBX_E_FS with data {errno, path}).
 * @return SBX_OK or SBX_ERR. Not callable from a callback.
 */
SBX_API int sbx_fs_read(sbx_ctx *c, char **data_out, size_t *len_out,
                        sbx_rpc_error **err_out, const char *sandbox, const char *path);

/**
 * Streams sandbox:path to sink, one SBX_FS_CHUNK call at a time: memory stays
 * at one chunk whatever the file's size. Not callable from a callback.
 */
SBX_API int sbx_fs_read_stream(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                               const char *path, sbx_fs_sink_cb sink, void *privdata);

/**
 * Writes len bytes to sandbox:path, atomically (the file appears whole when
 * the last chunk is in), in SBX_FS_CHUNK calls.
 * @param opts        borrowed, may be NULL: fs.write params (mode, append,
 *                    mkdir_parents).
 * @param result_out  if not NULL: the last answer {path, size}.
 * Not callable from a callback.
 */
SBX_API int sbx_fs_write(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                         const char *sandbox, const char *path, const void *data,
                         size_t len, json_t *opts);

/** As sbx_fs_write, the bytes from source; a source failure aborts the write
 *  (nothing appears at path). */
SBX_API int sbx_fs_write_stream(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                                const char *sandbox, const char *path, json_t *opts,
                                sbx_fs_source_cb source, void *privdata);

/* Writes from this size up go through the raw path (PROTOCOL.md "Raw
 * transfers") when the daemon offers it; smaller ones as base64 chunks. */
#define SBX_FS_RAW_MIN (256u << 10)

/** As sbx_fs_write_stream, the bytes read from fd to its end. A regular file
 *  of SBX_FS_RAW_MIN bytes or more goes through the raw path when the daemon
 *  offers it (size known up front); else base64 chunks. fd is not closed. */
SBX_API int sbx_fs_write_fd(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                            const char *sandbox, const char *path, json_t *opts, int fd);

/* ---- archives (fs.read/fs.write format "tar"; client/src/fs_archive.c) ----- */

/**
 * Streams a tar archive of sandbox:path (a file or a directory; its top entry
 * named after path's base name, or opts.name) to sink, as `docker cp` makes
 * one: over the raw path when the daemon offers it, else in SBX_FS_CHUNK
 * calls. opts (borrowed, may be NULL): fs.read params (follow, name).
 * Extracting one into a sandbox directory: sbx_fs_write_stream or
 * sbx_fs_write_fd with opts {"format": "tar"}. Not callable from a callback.
 */
SBX_API int sbx_fs_archive_read(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                                const char *path, json_t *opts, sbx_fs_sink_cb sink,
                                void *privdata);

/**
 * As sbx_fs_write_stream when the byte count is known up front (size: what
 * source gives in all): from SBX_FS_RAW_MIN up it goes over the raw path
 * when the daemon offers it. A tar upload of a tree whose size was measured
 * (sbxctl cp). Not callable from a callback.
 */
SBX_API int sbx_fs_write_sized(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                               const char *sandbox, const char *path, json_t *opts,
                               uint64_t size, sbx_fs_source_cb source, void *privdata);

/* ---- terminals (issue 18) ------------------------------------------------- */

/**
 * Sets the window size of a process started with "pty" (process.resize).
 * @param err_out  as in sbx_call (may be NULL).
 * @param sandbox  borrowed.
 * @return SBX_OK or SBX_ERR. Not callable from a callback.
 */
SBX_API int sbx_process_resize(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                               json_int_t pid, unsigned cols, unsigned rows);

/**
 * The "pty" member of process.spawn/exec params for a terminal of cols x
 * rows (a new reference: json_object_set_new(params, "pty", ...)).
 */
SBX_API json_t *sbx_pty_params(unsigned cols, unsigned rows) SBX_WARN_UNUSED;

/** Returns the library version, "MAJOR.MINOR.PATCH". */
SBX_API const char *sbx_version(void);

#ifdef __cplusplus
}
#endif

#endif
