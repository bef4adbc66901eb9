/*
 * rpc.c - JSON-RPC 2.0 framing on top of connections: requests, batches,
 * notifications from the client, responses to our own requests, and the
 * life of a call until it is answered.
 */
#include "rpc/rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/api.h"
#include "daemon.h"
#include "rpc/jfast.h"
#include "log.h"
#include "rpc/parse.h"
#include "sbx_proto.h"
#include "rpc/toolcall.h"
#include "xalloc.h"

/*
 * A batch is dispatched a slice at a time (session.c decides when the next
 * slice runs), and each response is encoded when it arrives, so neither the
 * dispatch nor one big json_dumps at the end holds the loop for long.
 *
 * The reply line is built as the answers arrive: `out` holds '[' and the
 * answers of members 0..emit-1, comma-separated, so that when the last one
 * comes the line is complete and is handed to the session without a copy
 * (assembling and copying 3 MB at the end held the loop for up to 9 ms).
 * An answer that arrives before an earlier member's waits in `arena` and
 * moves to `out` once the members before it are done.
 *
 * Both are bounded by the room the connection has for a reply
 * (session_output_hard less what it has queued): past it the batch is
 * over, the answers' texts are dropped and only their ids kept, and every
 * member is answered with a -32005 of its own. Without that, 300,000
 * daemon.info calls in one 16 MiB line built a gigabyte before the check.
 */
struct batch {
    struct rpc_conn *conn; /* NULL once gone */
    json_t *reqs;          /* the request array, until every member is dispatched */
    size_t next;           /* next member to dispatch */
    size_t n;
    size_t emit; /* members [0, emit) are done and their answers in out */
    char *out;   /* '[' + answers in order, comma-separated */
    size_t out_len, out_cap;
    /* Early answers, one after another in one buffer (50k small mallocs
     * and frees per batch cost milliseconds at the end). */
    char *arena;
    size_t arena_len, arena_cap;
    /* Member i's answer is (in_out[i] ? out : arena)[off[i], +lens[i]);
     * off[i] is NO_TEXT until member i is done, NO_ANSWER for a member
     * that is done with nothing to say (a notification). */
    size_t *off, *lens;
    unsigned char *in_out;
    size_t count;    /* answers in out */
    size_t answered; /* members that have an answer (kept or not) */
    size_t size;     /* the reply's length with every answer in it */
    json_t **ids;    /* once over: member i's id (owned), for its -32005 */
    int outstanding;
};

#define BATCH_SLICE_S 0.001
#define NO_TEXT ((size_t)-1)
#define NO_ANSWER ((size_t)-2)
#define OVER ((size_t)-3) /* answered, text dropped: the reply had no room */
#define BATCH_CHECK_EVERY 16

/* -- helpers -------------------------------------------------------------- */

int rpc_json_depth_ok(json_t *v, int depth)
{
    return parse_depth_ok(v, depth);
}

/* The error that replaces a reply the session has no room for. */
static json_t *too_large(json_t *id, size_t size, size_t room)
{
    json_t *data =
        json_pack("{s:s, s:I, s:I}", "limit", "session_output_hard", "max",
                  (json_int_t)D->cfg.session_output_hard, "size", (json_int_t)size);
    json_t *e = call_error_response(
        id, SBX_E_LIMIT, "reply too large for this session's output buffer", data);
    (void)room;
    return e;
}

/* Sends the -32005 that replaces a reply of size bytes k has no room for. It
 * goes past the hard limit if it must (conn.h, send_limit_line): counted
 * against the limit like a reply, it would disconnect the session instead. */
static void send_too_large(struct rpc_conn *k, json_t *id, size_t size, size_t room)
{
    json_t *e = too_large(id, size, room);
    char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    if (text)
        k->ops->send_limit_line(k, text, strlen(text));
    free(text);
}

/* Sends msg (borrowed) to k, or a -32005 in its place when the encoded reply
 * would take the session past its hard limit (instead of a disconnect). */
static void send_reply(struct rpc_conn *k, json_t *msg)
{
    char *text = json_dumps(msg, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        return;
    size_t len = strlen(text);
    size_t room = k->ops->reply_room(k);
    if (len + 1 > room) {
        free(text);
        send_too_large(k, json_object_get(msg, "id"), len, room);
        return;
    }
    k->ops->send_line(k, text, len);
    free(text);
}

static void batch_free(struct batch *b)
{
    free(b->out);
    free(b->arena);
    free(b->off);
    free(b->lens);
    free(b->in_out);
    if (b->ids)
        for (size_t i = 0; i < b->n; i++)
            json_decref(b->ids[i]);
    free(b->ids);
    parse_dispose(b->reqs);
    free(b);
}

/* Appends n bytes to buf (growing it by doubling); -1 on OOM. */
static int buf_put(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n > *cap) {
        size_t ncap = *cap ? *cap : 4096;
        while (ncap < *len + n)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (!nb)
            return -1;
        *buf = nb;
        *cap = ncap;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    return 0;
}

/* Appends member i's answer text to out, after a comma if needed. */
static void out_put(struct batch *b, size_t i, const char *text, size_t n)
{
    if (b->count > 0 && buf_put(&b->out, &b->out_len, &b->out_cap, ",", 1) < 0) {
        b->off[i] = NO_ANSWER;
        return;
    }
    size_t at = b->out_len;
    if (buf_put(&b->out, &b->out_len, &b->out_cap, text, n) < 0) {
        b->off[i] = NO_ANSWER;
        return;
    }
    b->off[i] = at;
    b->lens[i] = n;
    b->in_out[i] = 1;
    b->count++;
}

/* Member i is done; msg (borrowed, may be NULL) is its answer. */
static void batch_member_done(struct batch *b, size_t i, json_t *msg)
{
    if (b->off[i] != NO_TEXT)
        return; /* answered already */
    char *text = msg && b->conn ? json_dumps(msg, JSON_COMPACT) : NULL;
    size_t n = text ? strlen(text) : 0;
    if (text) {
        b->answered++;
        b->size += n + 1;
        if (!b->ids && b->size + 1 > b->conn->ops->reply_room(b->conn))
            b->ids = xcalloc(b->n, sizeof(*b->ids));
    }
    if (!text) {
        b->off[i] = NO_ANSWER;
    } else if (b->ids) {
        b->off[i] = OVER;
        b->ids[i] = json_incref(json_object_get(msg, "id"));
    } else if (i == b->emit) {
        out_put(b, i, text, n);
    } else {
        size_t at = b->arena_len;
        b->off[i] = buf_put(&b->arena, &b->arena_len, &b->arena_cap, text, n) < 0
                        ? NO_ANSWER
                        : at;
        b->lens[i] = n;
    }
    free(text);
    /* Members done early follow the ones now in place. */
    while (b->emit < b->n && b->off[b->emit] != NO_TEXT) {
        size_t e = b->emit++;
        if (b->off[e] != NO_ANSWER && b->off[e] != OVER && !b->in_out[e])
            out_put(b, e, b->arena + b->off[e], b->lens[e]);
    }
}

static void batch_slot_done(struct batch *b)
{
    if (--b->outstanding > 0)
        return;
    /* Only responses, in request order; notifications left no text. */
    struct rpc_conn *k = b->conn;
    if (!k || b->answered == 0) {
        batch_free(b);
        return;
    }
    size_t len = b->size + 1; /* '[' + answers and commas + ']' */
    size_t room = k->ops->reply_room(k);
    if (!b->ids && len + 1 <= room &&
        buf_put(&b->out, &b->out_len, &b->out_cap, "]", 1) == 0) {
        char *out = b->out;
        b->out = NULL;
        k->ops->send_line_owned(k, out, b->out_len);
    } else {
        /* No room: every request still gets an answer, a -32005 of its own,
         * written straight into one line (a tree of 20,000 error objects
         * would cost more than the answers it replaces). */
        char *line = NULL;
        size_t llen = 0, lcap = 0;
        int ok = buf_put(&line, &llen, &lcap, "[", 1) == 0;
        for (size_t i = 0; ok && i < b->n; i++) {
            if (b->off[i] == NO_TEXT || b->off[i] == NO_ANSWER)
                continue;
            json_t *r = NULL, *id = b->off[i] == OVER ? b->ids[i] : NULL;
            if (b->off[i] != OVER) {
                const char *t = (b->in_out[i] ? b->out : b->arena) + b->off[i];
                r = json_loadb(t, b->lens[i], JSON_ALLOW_NUL, NULL);
                id = json_object_get(r, "id");
            }
            json_t *e = too_large(id, len, room);
            char *et = e ? json_dumps(e, JSON_COMPACT) : NULL;
            ok = et && (llen == 1 || buf_put(&line, &llen, &lcap, ",", 1) == 0) &&
                 buf_put(&line, &llen, &lcap, et, strlen(et)) == 0;
            free(et);
            json_decref(e);
            json_decref(r);
        }
        ok = ok && buf_put(&line, &llen, &lcap, "]", 1) == 0;
        if (ok && llen + 1 <= room) {
            k->ops->send_line_owned(k, line, llen);
        } else {
            free(line);
            /* Not even the errors fit: one for the whole batch. */
            send_too_large(k, NULL, len, room);
        }
    }
    batch_free(b);
}

static void call_unlink(struct call *c)
{
    if (!c->conn)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        c->conn->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
}

/* Where every call's answer goes (call.h's finish): its batch slot, or the
 * connection. msg stolen, may be NULL for notifications; frees c. */
static void call_finish(struct call *c, json_t *msg)
{
    if (c->batch) {
        struct batch *b = c->batch;
        size_t i = (size_t)c->batch_index;
        batch_member_done(b, i, c->id ? msg : NULL);
        batch_slot_done(b);
    } else if (msg && c->id && c->conn) {
        send_reply(c->conn, msg);
    }
    json_decref(msg);
    call_unlink(c);
    json_decref(c->id);
    free(c);
}

/* v in decimal; buf has room for 21 bytes. Returns the length. */
static size_t put_int(char *buf, json_int_t v)
{
    char tmp[24];
    size_t n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t len = 0;
    if (v < 0)
        buf[len++] = '-';
    while (n)
        buf[len++] = tmp[--n];
    return len;
}

/*
 * call_reply's path for a call outside a batch (call.h: finish_result): the
 * line is {"jsonrpc":"2.0","id":ID,"result":RESULT}, the same bytes
 * json_dumps gives for the wrapper object, written around the result's text.
 * Building and encoding that wrapper was a third of the daemon's work for a
 * daemon.ping.
 */
static void call_finish_result(struct call *c, json_t *result)
{
    static const char pre[] = "{\"jsonrpc\":\"2.0\",\"id\":", mid[] = ",\"result\":";
    struct rpc_conn *k = c->conn;
    if (k) {
        char ibuf[24], *itext = NULL;
        const char *idt = ibuf;
        size_t il;
        if (json_is_integer(c->id)) {
            il = put_int(ibuf, json_integer_value(c->id));
        } else {
            itext = json_dumps(c->id, JSON_COMPACT | JSON_ENCODE_ANY);
            idt = itext;
            il = itext ? strlen(itext) : 0;
        }
        char *rt = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
        if (rt && idt) {
            size_t rl = strlen(rt);
            size_t len = sizeof(pre) - 1 + il + sizeof(mid) - 1 + rl + 1;
            size_t room = k->ops->reply_room(k);
            if (len + 1 > room) {
                send_too_large(k, c->id, len, room);
            } else {
                char stack[512];
                char *line = len <= sizeof(stack) ? stack : malloc(len);
                if (line) {
                    char *p = line;
                    memcpy(p, pre, sizeof(pre) - 1);
                    p += sizeof(pre) - 1;
                    memcpy(p, idt, il);
                    p += il;
                    memcpy(p, mid, sizeof(mid) - 1);
                    p += sizeof(mid) - 1;
                    memcpy(p, rt, rl);
                    p += rl;
                    *p = '}';
                    if (line == stack)
                        k->ops->send_line(k, line, len);
                    else
                        k->ops->send_line_owned(k, line, len);
                }
            }
        }
        free(rt);
        free(itext);
    }
    json_decref(result);
    call_unlink(c);
    json_decref(c->id);
    free(c);
}

void rpc_conn_gone(struct rpc_conn *k)
{
    struct batch *b = k->cur_batch;
    if (b) {
        /* Members not dispatched yet never will be: drop their slots. */
        k->cur_batch = NULL;
        b->conn = NULL;
        b->outstanding -= (int)(b->n - b->next);
        b->next = b->n;
        parse_dispose(b->reqs);
        b->reqs = NULL;
        batch_slot_done(b); /* the dispatch's own count */
    }
    struct call *c = k->calls;
    while (c) {
        struct call *n = c->next;
        if (c->batch)
            c->batch->conn = NULL;
        c->conn = NULL;
        c->next = c->prev = NULL;
        c = n;
    }
    k->calls = NULL;
}

/* -- dispatch ------------------------------------------------------------- */

static void handle_one(struct rpc_conn *k, json_t *req, struct batch *b, int index);

int rpc_batch_resume(struct rpc_conn *k)
{
    struct batch *b = k->cur_batch;
    if (!b)
        return 0;
    ev_tstamp t0 = ev_time();
    while (b->next < b->n) {
        if (b->next % BATCH_CHECK_EVERY == BATCH_CHECK_EVERY - 1 &&
            ev_time() - t0 > BATCH_SLICE_S)
            return 1;
        size_t i = b->next++;
        handle_one(k, json_array_get(b->reqs, i), b, (int)i);
        if (k->cur_batch != b)
            return 0; /* the session went away inside the call */
    }
    k->cur_batch = NULL;
    parse_dispose(b->reqs); /* a 50k-member tree takes tens of ms to free */
    b->reqs = NULL;
    batch_slot_done(b);
    return 0;
}

static struct call *call_new(struct rpc_conn *k, json_t *id, struct batch *b, int index)
{
    struct call *c = xcalloc(1, sizeof(*c));
    c->finish = call_finish;
    if (!b)
        c->finish_result = call_finish_result;
    c->conn = k;
    c->id = id ? json_incref(id) : NULL;
    c->batch = b;
    c->batch_index = index;
    c->next = k->calls;
    if (k->calls)
        k->calls->prev = c;
    k->calls = c;
    return c;
}

/* Handles one request object (or a stray value). b/index: batch slot or NULL. */
static void handle_one(struct rpc_conn *k, json_t *req, struct batch *b, int index)
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
            toolcall_response(k, req);
            if (b) {
                batch_member_done(b, (size_t)index, NULL);
                batch_slot_done(b);
            }
            return;
        }
    }
    json_t *jv = json_is_object(req) ? json_object_get(req, "jsonrpc") : NULL;
    json_t *m = json_is_object(req) ? json_object_get(req, "method") : NULL;
    json_t *params = json_is_object(req) ? json_object_get(req, "params") : NULL;
    int has_id = json_is_object(req) && json_object_get(req, "id") != NULL;

    struct call *c = call_new(k, has_id ? (id ? id : json_null()) : NULL, b, index);
    if (!json_is_object(req) || !json_is_string(jv) ||
        strcmp(json_string_value(jv), "2.0") != 0 || !json_is_string(m) ||
        (params && !json_is_object(params) && !json_is_array(params)) ||
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
    c->fn = fn;
    fn(c, p);
    json_decref(p);
}

void rpc_handle_line(struct rpc_conn *k, const char *line, size_t len)
{
    /* Tolerate CRLF and blank keep-alive lines. */
    while (len > 0 &&
           (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (len == 0)
        return;
    json_error_t jerr;
    jerr.text[0] = '\0'; /* read only when parsing failed, but copied */
    jerr.position = 0;
    json_t *v = jfast_load(line, len);
    if (!v)
        v = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    rpc_handle_value(k, v, v && parse_depth_ok(v, 0), &jerr);
}

void rpc_handle_value(struct rpc_conn *k, json_t *v, int depth_ok,
                      const json_error_t *jerr_in)
{
    json_error_t jerr = *jerr_in;
    if (!v || !depth_ok) {
        json_t *msg = call_error_response(
            NULL, SBX_E_PARSE, v ? "nesting too deep" : "parse error",
            v ? NULL
              : json_pack("{s:s, s:i}", "detail", jerr.text, "position", jerr.position));
        conn_send(k, msg);
        json_decref(msg);
        json_decref(v);
        return;
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if (n == 0) {
            json_t *msg =
                call_error_response(NULL, SBX_E_INVALID_REQUEST, "empty batch", NULL);
            conn_send(k, msg);
            json_decref(msg);
            json_decref(v);
            return;
        }
        struct batch *b = xcalloc(1, sizeof(*b));
        b->conn = k;
        b->n = n;
        b->off = xmalloc(n * sizeof(*b->off));
        b->lens = xcalloc(n, sizeof(*b->lens));
        b->in_out = xcalloc(n, 1);
        if (buf_put(&b->out, &b->out_len, &b->out_cap, "[", 1) < 0)
            x_oom("batch");
        for (size_t i = 0; i < n; i++)
            b->off[i] = NO_TEXT;
        /* One extra count so the batch can't complete while we are still
         * dispatching its members. */
        b->outstanding = (int)n + 1;
        b->reqs = json_incref(v);
        k->cur_batch = b;
        rpc_batch_resume(k);
    } else {
        handle_one(k, v, NULL, 0);
    }
    json_decref(v);
}
