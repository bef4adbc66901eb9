/*
 * rpc.h - JSON-RPC 2.0 over a connection: parsing lines and batches, the
 * method table, and calls that finish later.
 *
 * A call is created for every request and finished exactly once with
 * call_reply() or call_fail(). It may outlive its connection (an exec that
 * runs on after the client left); then c->conn is NULL and the answer is
 * dropped.
 */
#ifndef SBXD_RPC_H
#define SBXD_RPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "conn.h"

struct batch;

struct call {
    struct call *next, *prev; /* in conn->calls */
    struct rpc_conn *conn;
    json_t *id;          /* NULL: a notification, no answer */
    struct batch *batch; /* NULL unless part of a batch */
    int batch_index;
    const char *method;
};

/* 1 if v nests no deeper than SBX_MAX_JSON_DEPTH (counting from depth). */
int rpc_json_depth_ok(json_t *v, int depth);

/* Dispatches the next slice of the connection's unfinished batch
 * (k->cur_batch). Returns 1 if members are left for another slice, else 0. */
int rpc_batch_resume(struct rpc_conn *k);
/* A parsed line (v stolen; NULL with jerr on a parse error; depth_ok 0 when
 * it nests too deep). A batch may be left unfinished in k->cur_batch. */
void rpc_handle_value(struct rpc_conn *k, json_t *v, int depth_ok,
                      const json_error_t *jerr);
/* One complete line from the client (without the '\n'). A batch may be left
 * unfinished in k->cur_batch. */
void rpc_handle_line(struct rpc_conn *k, const char *line, size_t len);

/* result stolen (NULL = {}). Frees c. */
void call_reply(struct call *c, json_t *result);
/* Uses and clears err. Frees c. */
void call_fail(struct call *c, sbx_err_t *err);
/* Convenience: data stolen (may be NULL). Frees c. */
void call_error(struct call *c, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The connection is going away: its calls are detached (they may still
 * finish, unanswered). */
void rpc_conn_gone(struct rpc_conn *k);

#endif
