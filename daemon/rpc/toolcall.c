/*
 * toolcall.c - routing tool.call: a request from a process (through its
 * provider) becomes a JSON-RPC request from the daemon to the session that
 * started the process; the client's response goes back to the process.
 * Each session keeps its open calls ("tN" -> {sandbox, pid, call}) and fails
 * them when it goes, so a process never waits on a client that left.
 */
#include "rpc/toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "core/process.h"
#include "rpc/conn.h"
#include "core/sandbox.h"
#include "sbx_proto.h"

#define GONE "the session that started this process is gone"

void toolcall_request(struct process *p, int64_t call, const char *name, json_t *args)
{
    struct rpc_conn *conn = conn_by_id(p->origin);
    if (!conn) {
        process_tool_result(p, call, NULL, SBX_E_TOOL, GONE, NULL);
        return;
    }
    char id[32];
    snprintf(id, sizeof(id), "t%llu", (unsigned long long)++conn->next_tool_id);
    json_t *req =
        json_pack("{s:s, s:s, s:s, s:{s:s, s:I, s:s, s:O}}", "jsonrpc", "2.0", "id", id,
                  "method", SBX_R_TOOL_CALL, "params", "sandbox", p->sb->id, "pid",
                  (json_int_t)p->pid, "name", name, "args", args ? args : json_null());
    json_object_set_new(conn->tool_calls, id,
                        json_pack("{s:s, s:I, s:I}", "sandbox", p->sb->id, "pid",
                                  (json_int_t)p->pid, "call", (json_int_t)call));
    char *text = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (text) {
        conn->ops->send_line(conn, text, strlen(text));
        free(text);
    }
}

static struct process *tool_target(json_t *rec, int64_t *call)
{
    struct sandbox *sb =
        sandbox_find_any(json_string_value(json_object_get(rec, "sandbox")));
    if (!sb)
        return NULL;
    *call = json_integer_value(json_object_get(rec, "call"));
    return process_find(sb, (uint32_t)json_integer_value(json_object_get(rec, "pid")));
}

/* A valid JS identifier-ish name only: it becomes the Error's .name. */
static const char *error_name(json_t *err)
{
    const char *en =
        json_string_value(json_object_get(json_object_get(err, "data"), "name"));
    if (en &&
        (strlen(en) == 0 || strlen(en) > 64 ||
         strspn(en, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_$") !=
             strlen(en)))
        return NULL;
    return en;
}

void toolcall_response(struct rpc_conn *conn, json_t *msg)
{
    json_t *id = json_object_get(msg, "id");
    const char *key = json_string_value(id);
    json_t *rec = key ? json_object_get(conn->tool_calls, key) : NULL;
    if (!rec) {
        log_debug("session %llu: response to unknown request",
                  (unsigned long long)conn->id);
        return;
    }
    int64_t call = 0;
    struct process *p = tool_target(rec, &call);
    if (p) {
        json_t *err = json_object_get(msg, "error");
        if (err) {
            const char *m = json_string_value(json_object_get(err, "message"));
            json_t *jc = json_object_get(err, "code");
            process_tool_result(p, call, NULL,
                                json_is_integer(jc) ? (int)json_integer_value(jc)
                                                    : SBX_E_TOOL,
                                m ? m : "tool failed", error_name(err));
        } else {
            process_tool_result(p, call, json_incref(json_object_get(msg, "result")), 0,
                                NULL, NULL);
        }
    }
    json_object_del(conn->tool_calls, key);
}

void toolcall_conn_gone(struct rpc_conn *conn)
{
    const char *k;
    json_t *rec;
    json_object_foreach(conn->tool_calls, k, rec) {
        int64_t call = 0;
        struct process *p = tool_target(rec, &call);
        if (p)
            process_tool_result(p, call, NULL, SBX_E_TOOL, GONE, NULL);
    }
    json_object_clear(conn->tool_calls);
}

size_t toolcall_pending(const struct rpc_conn *conn)
{
    return json_object_size(conn->tool_calls);
}
