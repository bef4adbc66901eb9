/*
 * sbx_private.h - libsbx internals shared by the sync and async halves.
 */
#ifndef SBX_PRIVATE_H
#define SBX_PRIVATE_H

#include <stdint.h>

#include "sbx/sbx.h"
#include "sbx/sbx_async.h"

#define SBX_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Bytes read from the socket per read(2). */
#define SBX_READ_CHUNK (64 * 1024)

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

/* ---- ctx.c ---- */
int ctx_init(sbx_ctx *c);
void ctx_deinit(sbx_ctx *c);

/* Sets err/errstr without breaking the connection (TIMEOUT, RPC, USAGE). */
void ctx_seterr(sbx_ctx *c, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
/* Sets err/errstr and marks the connection SBX_BROKEN. */
void ctx_fail(sbx_ctx *c, int code, const char *fmt, ...) SBX_PRINTF(3, 4);
void ctx_clear_err(sbx_ctx *c);
/* Copies the reader's error into c (and breaks c). */
void ctx_fail_reader(sbx_ctx *c);

/* Creates the socket and connects. Sync: blocks up to timeout_ms, then sets
 * SBX_CONNECTED; async (nonblock): leaves SBX_CONNECTED to the first
 * writable event. Either way the fd ends up non-blocking. */
int ctx_connect_unix(sbx_ctx *c, const char *path, int timeout_ms, int nonblock);

/* Writes what the socket takes: 1 all flushed, 0 more pending, SBX_ERR. */
int ctx_flush(sbx_ctx *c);
/* One read into the reader: >0 bytes read, 0 would block, SBX_ERR (EOF too). */
int ctx_read(sbx_ctx *c);
int ctx_obuf_pending(const sbx_ctx *c);

/* Serializes msg (borrowed) + '\n' into the obuf; all or nothing. */
int ctx_append_msg(sbx_ctx *c, json_t *msg);
int ctx_append_request(sbx_ctx *c, json_int_t id, const char *method, json_t *params);
/* id borrowed, result stolen. */
int ctx_append_result(sbx_ctx *c, json_t *id, json_t *result);
/* id borrowed, data stolen (NULL: {}). */
int ctx_append_error(sbx_ctx *c, json_t *id, int code, const char *message, json_t *data);

enum msg_kind msg_classify(json_t *m);
/* Fills e with borrowed pointers into the error object. */
void rpc_error_view(sbx_rpc_error *e, json_t *error);
/* A heap copy of an error object, for err_out. NULL on OOM. */
sbx_rpc_error *rpc_error_new(json_t *error);

/* Answers a daemon->client request other than an async tool.call. */
int ctx_reply_unknown(sbx_ctx *c, json_t *m);

uint64_t now_ms(void);

#endif
