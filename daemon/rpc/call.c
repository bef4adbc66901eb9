/* call.c - answering a call; see call.h. */
#include "rpc/call.h"

#include <stdarg.h>
#include <stdio.h>

#include "sbx_proto.h"
#include "xalloc.h"

json_t *call_error_response(json_t *id, int code, const char *msg, json_t *data)
{
    return json_pack("{s:s, s:O, s:{s:i, s:s, s:o}}", "jsonrpc", "2.0", "id",
                     id ? id : json_null(), "error", "code", code, "message",
                     msg ? msg : "error", "data", data ? data : json_object());
}

void call_reply(struct call *c, json_t *result)
{
    if (!result)
        result = json_object();
    if (c->id && c->finish_result) {
        c->finish_result(c, result);
        return;
    }
    json_t *msg = NULL;
    if (c->id) {
        /* Every answer comes through here: no json_pack format parsing. */
        msg = json_object();
        json_object_set_new(msg, "jsonrpc", json_string_nocheck("2.0"));
        json_object_set(msg, "id", c->id);
        json_object_set(msg, "result", result);
    }
    json_decref(result);
    c->finish(c, msg);
}

void call_fail(struct call *c, sbx_err_t *err)
{
    json_t *msg = NULL;
    if (c->id) {
        json_t *data = err->data;
        err->data = NULL;
        msg = call_error_response(c->id, err->code ? err->code : SBX_E_INTERNAL,
                                  err->msg ? err->msg : "internal error", data);
    }
    err_clear(err);
    c->finish(c, msg);
}

void call_error(struct call *c, int code, json_t *data, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_t *msg = NULL;
    if (c->id)
        msg = call_error_response(c->id, code, buf, data);
    else
        json_decref(data);
    c->finish(c, msg);
}
