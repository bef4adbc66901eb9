/*
 * call.h - one request being answered.
 *
 * The framing (rpc.c) makes a call for every request and says, through
 * finish, where its answer goes (the connection, or a slot of a batch); the
 * methods (api.c) answer it exactly once with call_reply(), call_fail() or
 * call_error(). This is the only thing the methods need from the protocol
 * layer above them, so they see this header and not rpc.h.
 *
 * A call may outlive its connection (an exec that runs on after the client
 * left); then c->conn is NULL and the answer is dropped.
 */
#ifndef SBXD_CALL_H
#define SBXD_CALL_H

#include <jansson.h>

#include "err.h"

struct rpc_conn;
struct batch;
struct call;

/* Delivers msg (stolen; NULL when there is nothing to send) and frees c. */
typedef void (*call_finish_fn)(struct call *c, json_t *msg);

struct call {
    struct call *next, *prev; /* in conn->calls */
    struct rpc_conn *conn;
    json_t *id;          /* NULL: a notification, no answer */
    struct batch *batch; /* NULL unless part of a batch */
    int batch_index;
    const char *method;
    call_finish_fn finish; /* set by whoever made the call */
    /* Its method's handler (api.h: method_fn), so that it can run again
     * later (api.c: calls that wait for the restart's adoption). */
    void (*fn)(struct call *c, json_t *params);
    /* Optional (NULL: finish gets the whole response): takes call_reply's
     * result (stolen) and frees c, writing the response around the result's
     * text without building a wrapper object to encode (rpc.c, calls that
     * are not in a batch). */
    void (*finish_result)(struct call *c, json_t *result);
};

/* result stolen (NULL = {}). Frees c. */
void call_reply(struct call *c, json_t *result);
/* Uses and clears err. Frees c. */
void call_fail(struct call *c, sbx_err_t *err);
/* Convenience: data stolen (may be NULL). Frees c. */
void call_error(struct call *c, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A JSON-RPC error response (data stolen, may be NULL; id borrowed, NULL
 * for null). */
json_t *call_error_response(json_t *id, int code, const char *msg, json_t *data);

#endif
