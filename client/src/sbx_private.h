/*
 * sbx_private.h - libsbx internals shared by the sync and async halves.
 *
 * Naming: every function with external linkage that is not public API is
 * prefixed `sbx__` (two underscores), so that libsbx.a and libsbx.so define
 * only `sbx_*` symbols and users' own names (ctx_init, now_ms, ...) never
 * collide with ours. Public API is `sbx_` + a lower-case letter;
 * tests/providers/symbols.sh checks both archives with nm.
 */
#ifndef SBX_PRIVATE_H
#define SBX_PRIVATE_H

#include <stdint.h>

#include "sbx/sbx.h"
#include "sbx/sbx_async.h"

#define SBX_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ctx->flags bits private to libsbx (the public ones are in sbx.h). */
#define SBX_IN_CALLBACK 0x04   /* a user callback is running */
#define SBX_DISCONNECTING 0x08 /* async: graceful disconnect requested */
#define SBX_FREEING 0x10       /* async: being torn down */
#define SBX_FREE_PENDING 0x20  /* async: free requested from a callback */

/* Room made in the reader for each read(2) (it may take more when there is). */
#define SBX_READ_CHUNK (256 * 1024)

/* Output buffer: bytes [pos, len) still to be written. */
struct sbx_obuf {
    char *data;
    size_t len;
    size_t pos;
    size_t cap;
};

struct sbx_ctx_priv {
    struct sbx_obuf obuf;
    json_int_t next_id;
    int timeout_ms;
    /* sync API */
    sbx_notify_cb notify_cb;
    void *notify_priv;
    sbx_tool_cb tool_cb;
    void *tool_priv;
    json_t *queue; /* notifications waiting for sbx_read_notification */
    size_t dropped;
};

enum msg_kind { MSG_INVALID, MSG_RESPONSE, MSG_NOTIFY, MSG_REQUEST };

/* ---- reader.c ---- */

/* A process.output notification read by the fast path. Pointers into the
 * reader (sandbox NUL-terminated); valid until the reader is used again. */
struct sbx_output_view {
    const char *sandbox;
    size_t sandbox_len;
    json_int_t pid;
    int stream; /* SBX_STDOUT, SBX_STDERR */
    uint64_t offset;
    int b64;          /* data is base64 text (data_b64), else the bytes (data) */
    const char *data; /* NULL: no view */
    size_t len;
};

/* Room for n more bytes at the end of the buffer (*avail >= n), to read
 * into directly; then sbx__reader_commit. NULL on failure (reader error set). */
char *sbx__reader_space(sbx_reader *r, size_t n, size_t *avail);
void sbx__reader_commit(sbx_reader *r, size_t n);
/* sbx_reader_get_frame, but a process.output of the daemon's shape comes
 * back in *view (view->data set, *frame_out NULL) when view is not NULL. */
int sbx__reader_next(sbx_reader *r, json_t **frame_out, struct sbx_output_view *view);
/* The notification a view stands for; new reference, NULL on OOM. */
json_t *sbx__output_view_json(const struct sbx_output_view *v);
/* The bytes of a view: the data itself, or base64 decoded into *scratch
 * (grown as needed, the caller's). SBX_ERR on bad base64 or OOM. */
int sbx__output_view_bytes(const struct sbx_output_view *v, char **scratch, size_t *scap,
                           const char **data_out, size_t *len_out);

/* ---- ctx.c ---- */
int sbx__ctx_init(sbx_ctx *c);
void sbx__ctx_deinit(sbx_ctx *c);

/* Sets err/errstr without breaking the connection (TIMEOUT, RPC, USAGE). */
void sbx__ctx_seterr(sbx_ctx *c, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
/* Sets err/errstr and marks the connection SBX_BROKEN. */
void sbx__ctx_fail(sbx_ctx *c, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
void sbx__ctx_clear_err(sbx_ctx *c);
/* Copies the reader's error into c (and breaks c). */
void sbx__ctx_fail_reader(sbx_ctx *c);

/* Creates the socket and connects. Sync: blocks up to timeout_ms, then sets
 * SBX_CONNECTED; async (nonblock): leaves SBX_CONNECTED to the first
 * writable event. Either way the fd ends up non-blocking. */
int sbx__ctx_connect_unix(sbx_ctx *c, const char *path, int timeout_ms, int nonblock);

/* Writes what the socket takes: 1 all flushed, 0 more pending, SBX_ERR. */
int sbx__ctx_flush(sbx_ctx *c);
/* One read into the reader: >0 bytes read, 0 would block, SBX_ERR (EOF too). */
int sbx__ctx_read(sbx_ctx *c);
int sbx__ctx_obuf_pending(const sbx_ctx *c);

/* Serializes msg (borrowed) + '\n' into the obuf; all or nothing. */
int sbx__ctx_append_msg(sbx_ctx *c, json_t *msg);
int sbx__ctx_append_request(sbx_ctx *c, json_int_t id, const char *method,
                            json_t *params);
/* id borrowed, result stolen. */
int sbx__ctx_append_result(sbx_ctx *c, json_t *id, json_t *result);
/* id borrowed, data stolen (NULL: {}). */
int sbx__ctx_append_error(sbx_ctx *c, json_t *id, int code, const char *message,
                          json_t *data);

enum msg_kind sbx__msg_classify(json_t *m);
/* Fills e with borrowed pointers into the error object. */
void sbx__rpc_error_view(sbx_rpc_error *e, json_t *error);
/* A heap copy of an error object, for err_out. NULL on OOM. */
sbx_rpc_error *sbx__rpc_error_new(json_t *error);

/* ---- fs.c: one fs.read chunk, for fs.c's reads and fs_archive.c's ---- */
struct sbx__fs_chunk {
    size_t n;          /* bytes the answer carried (given to the sink) */
    int eof;           /* the answer's "eof" */
    json_int_t handle; /* the answer's "handle" (an archive's), 0 when none */
};
/* Calls fs.read with params (stolen) and feeds the data to sink. SBX_OK with
 * *out filled; SBX_ERR for an RPC error (in *err_out), an answer without data
 * (SBX_ERR_PROTOCOL) or a sink that stopped (SBX_ERR_USAGE). */
int sbx__fs_read_call(sbx_ctx *c, struct sbx__fs_chunk *out, sbx_rpc_error **err_out,
                      json_t *params, sbx_fs_sink_cb sink, void *privdata);

/* ---- fs_raw.c: the raw path; 1 when the daemon does not offer it ---- */
int sbx__fs_raw_wanted(void);
int sbx__fs_read_raw(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                     const char *path, json_t *opts, sbx_fs_sink_cb sink, void *privdata);
int sbx__fs_write_raw(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                      const char *sandbox, const char *path, json_t *opts, uint64_t size,
                      sbx_fs_source_cb source, void *privdata);

/* Answers a daemon->client request other than an async tool.call. */
int sbx__ctx_reply_unknown(sbx_ctx *c, json_t *m);

uint64_t sbx__now_ms(void);

#endif
