/*
 * conn.h - a client connection as the JSON-RPC layer sees it (rpc.c, api.c,
 * toolcall.c): identity, pending calls, tool calls, followed processes,
 * and a small table of operations to write to it. The session (session.c)
 * embeds one and fills the operations, so nothing under it needs to know
 * sessions: the arrows go session -> rpc -> api -> core, and all of them
 * to this header.
 */
#ifndef SBXD_CONN_H
#define SBXD_CONN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/output.h"

struct call;
struct batch;
struct rpc_conn;

/* How the protocol layer writes to a connection: the session behind it
 * (session.c). */
struct rpc_conn_ops {
    /* Queues one line (text without the newline); dropped once closing. */
    void (*send_line)(struct rpc_conn *k, const char *text, size_t len);
    /* The same, taking text over (malloc'd). */
    void (*send_line_owned)(struct rpc_conn *k, char *text, size_t len);
    /* Queues the -32005 that replaces a reply reply_room had no room for.
     * It may pass the hard limit by its own size, up to
     * limits.session_output_slack bytes over it, so that the caller learns
     * why instead of being disconnected for the error meant to spare it
     * that; past the slack, a client that reads nothing and keeps asking is
     * disconnected as before, and its memory stays bounded. */
    void (*send_limit_line)(struct rpc_conn *k, const char *text, size_t len);
    /* Bytes a reply may still take before the hard limit. */
    size_t (*reply_room)(const struct rpc_conn *k);
    /* Bytes queued for the client now. */
    size_t (*queued)(const struct rpc_conn *k);
    /* Bytes queued for every client together (limits.output_bytes_total). */
    size_t (*queued_all)(const struct rpc_conn *k);
};

/*
 * The JSON-RPC side of a client connection, embedded in its session: who
 * the client is, its unanswered calls and tool calls, a batch still being
 * dispatched, the processes it follows. rpc.c, api.c and toolcall.c see
 * only this, never the session.
 */
struct rpc_conn {
    struct rpc_conn *next, *prev; /* every live connection (conn_by_id) */
    uint64_t id;
    uid_t uid;
    int admin;
    const struct rpc_conn_ops *ops;
    struct call *calls;      /* unanswered calls */
    struct batch *cur_batch; /* a batch still being dispatched, slice by slice */
    struct follower fol;     /* the processes it follows (output.h) */
    json_t *tool_calls;      /* "tN" -> {sandbox, pid, call} (toolcall.c) */
    uint64_t next_tool_id;
    int closing; /* nothing more is written: conn_by_id skips it */
};

/* Sets up k (embedded, zeroed) for the client id/uid/admin and links it. */
void conn_init(struct rpc_conn *k, uint64_t id, uid_t uid, int admin,
               const struct rpc_conn_ops *ops);
/* Unlinks k and frees what it holds; its calls, tool calls and followed
 * processes must be let go first (rpc_conn_gone, toolcall_conn_gone,
 * output_follower_gone). */
void conn_deinit(struct rpc_conn *k);
/* The live (not closing) connection with that id, or NULL. */
struct rpc_conn *conn_by_id(uint64_t id);
/* Sends msg (borrowed) to k as one line. */
void conn_send(struct rpc_conn *k, json_t *msg);
/* Sends a notification (params stolen) to k. */
void conn_notify(struct rpc_conn *k, const char *method, json_t *params);
/* Sends a notification (params stolen; NULL: nothing) to every live
 * connection of uid. */
void conn_notify_uid(uid_t uid, const char *method, json_t *params);

#endif
