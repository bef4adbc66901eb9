/*
 * rpc.h - JSON-RPC 2.0 over a session: parsing lines and batches, the
 * method table, and calls that finish later.
 *
 * A call is created for every request and finished exactly once with
 * call_reply() or call_fail(). It may outlive its session (an exec that
 * runs on after the client left); then c->sess is NULL and the answer is
 * dropped.
 */
#ifndef SBXD_RPC_H
#define SBXD_RPC_H

#include <jansson.h>

#include "err.h"

struct session;
struct batch;

struct call {
    struct call *next, *prev; /* in sess->calls */
    struct session *sess;
    json_t *id;           /* NULL: a notification, no answer */
    struct batch *batch;  /* NULL unless part of a batch */
    int batch_index;
    const char *method;
};

/* 1 if v nests no deeper than SBX_MAX_JSON_DEPTH (counting from depth). */
int rpc_json_depth_ok(json_t *v, int depth);

/* Dispatches the next slice of the session's unfinished batch (s->cur_batch).
 * Returns 1 if members are left for another slice, else 0. */
int rpc_batch_resume(struct session *s);
/* A parsed line (v stolen; NULL with jerr on a parse error; depth_ok 0 when
 * it nests too deep). A batch may be left unfinished in s->cur_batch. */
void rpc_handle_value(struct session *s, json_t *v, int depth_ok, const json_error_t *jerr);
/* One complete line from the session (without the '\n'). A batch may be left
 * unfinished in s->cur_batch. */
void rpc_handle_line(struct session *s, const char *line, size_t len);

/* result stolen (NULL = {}). Frees c. */
void call_reply(struct call *c, json_t *result);
/* Uses and clears err. Frees c. */
void call_fail(struct call *c, sbx_err_t *err);
/* Convenience: data stolen (may be NULL). Frees c. */
void call_error(struct call *c, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The session is going away: detach its calls. */
void rpc_session_gone(struct session *s);

/* Method handlers (api.c). params: a borrowed object. */
typedef void (*method_fn)(struct call *c, json_t *params);
method_fn api_lookup(const char *method);

#endif
