/*
 * conn.c - the registry of client connections as the JSON-RPC layer sees
 * them (conn.h), and writing whole messages to one.
 */
#include "rpc/conn.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rpc/jfast.h"

static struct rpc_conn *conns;

void conn_init(struct rpc_conn *k, uint64_t id, uid_t uid, int admin,
               const struct rpc_conn_ops *ops)
{
    k->id = id;
    k->uid = uid;
    k->admin = admin;
    k->ops = ops;
    k->tool_calls = json_object(); /* NULL (no memory): tool calls then fail */
    k->prev = NULL;
    k->next = conns;
    if (conns)
        conns->prev = k;
    conns = k;
}

struct rpc_conn *conn_by_id(uint64_t id)
{
    for (struct rpc_conn *k = conns; k; k = k->next)
        if (k->id == id && !k->closing)
            return k;
    return NULL;
}

void conn_notify(struct rpc_conn *k, const char *method, json_t *params)
{
    json_t *msg = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method,
                            "params", params ? params : json_object());
    if (msg) {
        conn_send(k, msg);
        json_decref(msg);
    }
}

void conn_notify_uid(uid_t uid, const char *method, json_t *params)
{
    json_t *msg = params ? json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
                                     method, "params", params)
                         : NULL;
    size_t len = 0;
    char *text = msg ? jfast_dumps(msg, &len) : NULL;
    json_decref(msg);
    if (!text)
        return;
    for (struct rpc_conn *k = conns; k; k = k->next)
        if (k->uid == uid && !k->closing)
            k->ops->send_line(k, text, len);
    free(text);
}

void conn_deinit(struct rpc_conn *k)
{
    json_decref(k->tool_calls);
    k->tool_calls = NULL;
    if (k->prev)
        k->prev->next = k->next;
    else if (conns == k)
        conns = k->next;
    if (k->next)
        k->next->prev = k->prev;
    k->next = k->prev = NULL;
}

/* Sends msg (borrowed) to k as one line. */
void conn_send(struct rpc_conn *k, json_t *msg)
{
    size_t len = 0;
    char *text = msg ? jfast_dumps(msg, &len) : NULL;
    if (!text) {
        log_error("session %llu: cannot encode a message", (unsigned long long)k->id);
        return;
    }
    k->ops->send_line(k, text, len);
    free(text);
}
