/*
 * rpc.h - JSON-RPC 2.0 over a connection: parsing lines and batches, and
 * dispatching each request to its method (api.h) as a call (call.h).
 */
#ifndef SBXD_RPC_H
#define SBXD_RPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rpc/call.h"
#include "rpc/conn.h"
#include "err.h"

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

/* The connection is going away: its calls are detached (they may still
 * finish, unanswered). */
void rpc_conn_gone(struct rpc_conn *k);

#endif
