/*
 * rpc.c - JSON-RPC 2.0 framing on top of sessions: requests, batches,
 * notifications from the client, responses to our own requests, and the
 * life of a call until it is answered.
 */
#include "rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "sbx_proto.h"
#include "session.h"

struct batch {
    struct session *sess; /* NULL once gone */
    json_t *responses;    /* array, slots filled by index */
    int outstanding;
};

/* -- helpers -------------------------------------------------------------- */

int rpc_json_depth_ok(json_t *v, int depth)
{
    if (depth > SBX_MAX_JSON_DEPTH)
        return 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) if (!rpc_json_depth_ok(x, depth + 1)) return 0;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (!rpc_json_depth_ok(x, depth + 1)) return 0;
    }
    return 1;
}

static json_t *error_response(json_t *id, int code, const char *msg, json_t *data)
{
    return json_pack("{s:s, s:O, s:{s:i, s:s, s:o}}", "jsonrpc", "2.0", "id",
                     id ? id : json_null(), "error", "code", code, "message",
                     msg ? msg : "error", "data", data ? data : json_object());
}

static void batch_slot_done(struct batch *b)
{
    if (--b->outstanding > 0)
        return;
    /* Only responses, in request order; notifications left no slot value. */
    json_t *out = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(b->responses, i, v) if (!json_is_null(v)) json_array_append(out, v);
    if (b->sess && json_array_size(out) > 0)
        session_send(b->sess, out);
    json_decref(out);
    json_decref(b->responses);
    free(b);
}

static void call_unlink(struct call *c)
{
    if (!c->sess)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->sess->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

/* Delivers msg (stolen, may be NULL for notifications) and frees c. */
static void call_finish(struct call *c, json_t *msg)
{
    if (c->batch) {
        if (msg && c->id)
            json_array_set(c->batch->responses, (size_t)c->batch_index, msg);
        batch_slot_done(c->batch);
    } else if (msg && c->id && c->sess) {
        session_send(c->sess, msg);
    }
    json_decref(msg);
    call_unlink(c);
    json_decref(c->id);
    free(c);
}

void call_reply(struct call *c, json_t *result)
{
    if (!result)
        result = json_object();
    json_t *msg = NULL;
    if (c->id)
        msg = json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", c->id, "result", result);
    json_decref(result);
    call_finish(c, msg);
}

void call_fail(struct call *c, sbx_err_t *err)
{
    json_t *msg = NULL;
    if (c->id) {
        json_t *data = err->data;
        err->data = NULL;
        msg = error_response(c->id, err->code ? err->code : SBX_E_INTERNAL,
                             err->msg ? err->msg : "internal error", data);
    }
    err_clear(err);
    call_finish(c, msg);
}

void call_error(struct call *c, int code, json_t *data, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    json_t *msg = c->id ? error_response(c->id, code, buf, data) : (json_decref(data), NULL);
    call_finish(c, msg);
}

void rpc_session_gone(struct session *s)
{
    struct call *c = s->calls;
    while (c) {
        struct call *n = c->next;
        if (c->batch)
            c->batch->sess = NULL;
        c->sess = NULL;
        c->next = c->prev = NULL;
        c = n;
    }
    s->calls = NULL;
}

/* -- dispatch ------------------------------------------------------------- */

static struct call *call_new(struct session *s, json_t *id, struct batch *b, int index)
{
    struct call *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->sess = s;
    c->id = id ? json_incref(id) : NULL;
    c->batch = b;
    c->batch_index = index;
    c->next = s->calls;
    if (s->calls)
        s->calls->prev = c;
    s->calls = c;
    return c;
}

/* Handles one request object (or a stray value). b/index: batch slot or NULL. */
static void handle_one(struct session *s, json_t *req, struct batch *b, int index)
{
    json_t *id = NULL;
    if (json_is_object(req)) {
        id = json_object_get(req, "id");
        if (id && !json_is_string(id) && !json_is_integer(id) && !json_is_real(id) &&
            !json_is_null(id))
            id = NULL;
        /* A response to one of our requests (tool.call)? */
        if (!json_object_get(req, "method") &&
            (json_object_get(req, "result") || json_object_get(req, "error"))) {
            rpc_handle_response(s, req);
            if (b)
                batch_slot_done(b);
            return;
        }
    }
    json_t *jv = json_is_object(req) ? json_object_get(req, "jsonrpc") : NULL;
    json_t *m = json_is_object(req) ? json_object_get(req, "method") : NULL;
    json_t *params = json_is_object(req) ? json_object_get(req, "params") : NULL;
    int has_id = json_is_object(req) && json_object_get(req, "id") != NULL;

    struct call *c = call_new(s, has_id ? (id ? id : json_null()) : NULL, b, index);
    if (!json_is_object(req) || !json_is_string(jv) || strcmp(json_string_value(jv), "2.0") != 0 ||
        !json_is_string(m) || (params && !json_is_object(params) && !json_is_array(params)) ||
        (has_id && !id)) {
        /* An invalid request always gets an answer, with id null if unknown. */
        if (!c->id)
            c->id = json_null();
        call_error(c, SBX_E_INVALID_REQUEST, NULL, "invalid request");
        return;
    }
    c->method = json_string_value(m);
    if (strlen(c->method) != json_string_length(m)) {
        /* "daemon.ping\u0000x" must not run daemon.ping. */
        call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", "method"),
                   "method name contains a NUL byte");
        return;
    }
    method_fn fn = api_lookup(c->method);
    if (!fn) {
        call_error(c, SBX_E_METHOD, json_pack("{s:s}", "method", c->method),
                   "method not found: %s", c->method);
        return;
    }
    if (params && json_is_array(params)) {
        call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", "params"),
                   "params must be an object");
        return;
    }
    if (D->draining && strcmp(c->method, SBX_M_PING) != 0) {
        call_error(c, SBX_E_SHUTDOWN, NULL, "daemon is shutting down");
        return;
    }
    json_t *p = params ? json_incref(params) : json_object();
    c->method = NULL; /* the string lives in req, which may go before the call ends */
    fn(c, p);
    json_decref(p);
}

void rpc_handle_line(struct session *s, const char *line, size_t len)
{
    /* Tolerate CRLF and blank keep-alive lines. */
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (len == 0)
        return;
    json_error_t jerr;
    json_t *v = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!v || !rpc_json_depth_ok(v, 0)) {
        json_t *msg = error_response(NULL, SBX_E_PARSE, v ? "nesting too deep" : "parse error",
                                     v ? NULL : json_pack("{s:s, s:i}", "detail", jerr.text,
                                                          "position", jerr.position));
        session_send(s, msg);
        json_decref(msg);
        json_decref(v);
        return;
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (n == 0) {
            json_t *msg = error_response(NULL, SBX_E_INVALID_REQUEST, "empty batch", NULL);
            session_send(s, msg);
            json_decref(msg);
            json_decref(v);
            return;
        }
        struct batch *b = calloc(1, sizeof(*b));
        if (!b)
            abort();
        b->sess = s;
        b->responses = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(b->responses, json_null());
        /* One extra count so the batch can't complete while we are still
         * dispatching its members. */
        b->outstanding = (int)n + 1;
        for (size_t i = 0; i < n; i++)
            handle_one(s, json_array_get(v, i), b, (int)i);
        batch_slot_done(b);
    } else {
        handle_one(s, v, NULL, 0);
    }
    json_decref(v);
}
