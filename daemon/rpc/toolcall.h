/*
 * toolcall.h - tool.call, the daemon's own request to a client: a process
 * inside a sandbox calls a host tool, the session that started the process
 * answers it. The process side is process_tool_call() (provider.h, in
 * core/process.c, which checks the tool is the sandbox's and hands it here
 * through the events table) and process_tool_result() (process.h); this is
 * the protocol side between.
 */
#ifndef SBXD_TOOLCALL_H
#define SBXD_TOOLCALL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct rpc_conn;
struct process;

/* The core's tool_call event (core/events.h): sends tool.call to the
 * session that started p, or answers p at once when it is gone. */
void toolcall_request(struct process *p, int64_t call, const char *name, json_t *args);

/* A response from the client (msg borrowed) to one of our tool.call
 * requests: the answer goes to the process that asked. */
void toolcall_response(struct rpc_conn *k, json_t *msg);
/* The connection is going away: its unanswered tool calls fail. */
void toolcall_conn_gone(struct rpc_conn *k);
/* Tool calls of k still waiting for an answer. */
size_t toolcall_pending(const struct rpc_conn *k);

#endif
