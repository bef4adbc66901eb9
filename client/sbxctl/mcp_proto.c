/*
 * mcp_proto.c - the MCP floor of `sbxctl mcp` (mcp.h): JSON-RPC 2.0 messages
 * from the stdio transport, revision negotiation, tools/list and tools/call,
 * cancellation (notifications/cancelled), progress notifications, and the
 * encoding of tool results. The tools are reached through m->tools; sbxd
 * through mcp_sbxd.h; the owner through m->on_gone and m->on_idle.
 *
 * Bounds: at most --max-calls tools/call run at once; while stdout is
 * congested progress notifications are skipped (a slow reader gets fewer,
 * not more memory).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "sbxctl.h"

/* Revisions we speak, newest first. Older than 2025-06-18 has no
 * structuredContent, outputSchema or title; 2024-11-05 has no tool
 * annotations and no progress message either. */
static const char *const versions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                       "2024-11-05"};
#define NVERSIONS (sizeof(versions) / sizeof(versions[0]))
#define FIRST_STRUCTURED 1 /* index of the oldest revision with structured content */
#define FIRST_ANNOTATED 2  /* ... with tool annotations and progress messages */

/* Sends one message (msg stolen). */
static void send_msg(struct mcp *m, json_t *msg)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!s) {
        mcp_log("out of memory encoding a message");
        return;
    }
    mstdio_send(&m->io, s, strlen(s));
    free(s);
}

static void send_result(struct mcp *m, json_t *id, json_t *result)
{
    send_msg(m,
             json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void send_error(struct mcp *m, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_error(struct mcp *m, json_t *id, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:i, s:s%}", "code", code, "message", msg, strlen(msg));
    if (!e) /* not UTF-8: a name from the request, say */
        e = json_pack("{s:i, s:s}", "code", code, "message", "invalid request");
    send_msg(m, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id",
                          id ? id : json_null(), "error", e));
}

/* ---- calls ------------------------------------------------------------------------ */

static void call_unlink(struct call *c)
{
    struct mcp *m = c->m;
    if (c->prev)
        c->prev->next = c->next;
    else
        m->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    m->ncalls--;
}

void mcp_call_maybe_free(struct call *c)
{
    if (!c->done || c->refs > 0)
        return;
    struct mcp *m = c->m;
    ev_timer_stop(m->loop, &c->progress);
    call_unlink(c);
    json_decref(c->id);
    json_decref(c->progress_token);
    json_decref(c->args);
    json_decref(c->exit);
    free(c->sandbox);
    mbuf_free(&c->out[0]);
    mbuf_free(&c->out[1]);
    mbuf_free(&c->logs);
    free(c);
    m->on_idle(m);
}

void mcp_answer(struct call *c, json_t *structured, int is_error, const char *text)
{
    struct mcp *m = c->m;
    if (c->done) {
        json_decref(structured);
        return;
    }
    c->done = 1;
    ev_timer_stop(m->loop, &c->progress);
    if (!c->cancelled && !mstdio_gone(&m->io)) {
        json_t *r = json_object();
        char *dump = NULL;
        if (!text && structured)
            text = dump = json_dumps(structured, JSON_COMPACT | JSON_ENCODE_ANY);
        json_t *content =
            json_pack("{s:s, s:s}", "type", "text", "text", text ? text : "");
        if (!content) /* text from a daemon message that is not UTF-8 */
            content =
                json_pack("{s:s, s:s}", "type", "text", "text", "(unprintable message)");
        json_t *items = json_pack("[o]", content);
        /* A revision without structuredContent gets the JSON as a second text
         * item, after the readable one. */
        if (structured && !m->structured && !dump) {
            char *js = json_dumps(structured, JSON_COMPACT | JSON_ENCODE_ANY);
            if (js)
                json_array_append_new(
                    items, json_pack("{s:s, s:s}", "type", "text", "text", js));
            free(js);
        }
        json_object_set_new(r, "content", items);
        if (structured && m->structured)
            json_object_set(r, "structuredContent", structured);
        if (is_error)
            json_object_set_new(r, "isError", json_true());
        send_result(m, c->id, r);
        free(dump);
    }
    json_decref(structured);
    mcp_call_maybe_free(c);
}

void mcp_answer_error(struct call *c, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mcp_answer(c, NULL, 1, msg);
}

static void progress_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct call *c = w->data;
    struct mcp *m = c->m;
    (void)revents;
    if (c->done || mstdio_congested(&m->io))
        return; /* a slow reader gets fewer progress notifications, not more memory */
    /* progress = milliseconds since the call began (it must grow with every
     * notification); total = the time limit, when the call has one. */
    json_int_t elapsed = (json_int_t)((ev_now(loop) - c->t0) * 1000.0);
    if (elapsed <= c->progress_last)
        elapsed = c->progress_last + 1;
    c->progress_last = elapsed;
    json_t *p =
        json_pack("{s:O, s:I}", "progressToken", c->progress_token, "progress", elapsed);
    if (c->timeout_ms > 0)
        json_object_set_new(p, "total", json_integer(c->timeout_ms));
    char *text = m->annotated ? m->tools->progress_text(c) : NULL;
    if (text)
        json_object_set_new(p, "message", mbuf_string(text, strlen(text)));
    free(text);
    send_msg(m, json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method",
                          "notifications/progress", "params", p));
}

/* ---- daemon calls and sandboxes for calls ------------------------------------------ */

struct creq {
    struct call *c;
    dreply_fn fn;
};

static void creq_reply(void *priv, json_t *result, const sbx_rpc_error *err)
{
    struct creq *r = priv;
    struct call *c = r->c;
    dreply_fn fn = r->fn;
    free(r);
    /* The reply still counts while fn runs, so an answer in fn cannot free c. */
    fn(c, result, err);
    c->refs--;
    mcp_call_maybe_free(c);
}

int mcp_dcall(struct call *c, const char *method, json_t *params, dreply_fn fn)
{
    struct creq *r = calloc(1, sizeof(*r));
    if (!r) {
        json_decref(params);
        return -1;
    }
    r->c = c;
    r->fn = fn;
    if (msbx_call(&c->m->sb, method, params, creq_reply, r) < 0) {
        free(r);
        return -1;
    }
    c->refs++;
    return 0;
}

const char *mcp_errtext(struct mcp *m, const sbx_rpc_error *err)
{
    return msbx_errtext(&m->sb, err);
}

static void call_ready(struct mwaiter *w)
{
    struct call *c = (struct call *)((char *)w - offsetof(struct call, w));
    c->on_ready(c);
}

static void call_unready(struct mwaiter *w, const char *why)
{
    struct call *c = (struct call *)((char *)w - offsetof(struct call, w));
    mcp_answer_error(c, "%s", why);
}

void mcp_slot_use(struct call *c, struct slot *s, void (*ready)(struct call *c))
{
    c->slot = s;
    c->on_ready = ready;
    c->w.ready = call_ready;
    c->w.fail = call_unready;
    msbx_slot_use(&c->m->sb, s, &c->w);
}

/* ---- requests ---------------------------------------------------------------------- */

static json_t *server_instructions(struct mcp *m)
{
    char buf[1024];
    if (m->conf.code_only) {
        snprintf(buf, sizeof(buf),
                 "Tools of an sbxd sandbox. run_code runs a JavaScript program in an "
                 "isolate (sbxd's %s provider) and returns its result and logs. sbxd "
                 "has no shell provider available here, so there is no tool for shell "
                 "commands.",
                 m->conf.code_provider ? m->conf.code_provider : "js");
        return json_string(buf);
    }
    snprintf(
        buf, sizeof(buf),
        "Tools of an sbxd sandbox. exec_command runs a shell command in %s%s%s%s%s%s%s "
        "and returns its output and exit code; spawn_process starts one in the "
        "background (then process_output and kill_process take its pid). run_code runs "
        "a JavaScript program in an isolate (provider %s) and returns its result and "
        "logs. sandbox_info describes the sandbox.",
        m->conf.sandbox_name ? "the sandbox " : "a sandbox",
        m->conf.sandbox_name ? m->conf.sandbox_name : "",
        m->conf.provider ? " (provider " : "", m->conf.provider ? m->conf.provider : "",
        m->conf.image ? ", image " : "", m->conf.image ? m->conf.image : "",
        m->conf.provider ? ")" : "",
        m->conf.code_provider ? m->conf.code_provider : "js");
    return json_string(buf);
}

static void on_initialize(struct mcp *m, json_t *id, json_t *params)
{
    const char *want = json_string_value(json_object_get(params, "protocolVersion"));
    if (!want) {
        send_error(m, id, SBX_E_PARAMS,
                   "initialize needs params.protocolVersion (a string)");
        return;
    }
    /* The client's revision when we speak it, else our newest. */
    size_t pick = 0;
    for (size_t i = 0; i < NVERSIONS; i++)
        if (strcmp(want, versions[i]) == 0)
            pick = i;
    snprintf(m->version, sizeof(m->version), "%s", versions[pick]);
    m->structured = pick <= FIRST_STRUCTURED;
    m->annotated = pick <= FIRST_ANNOTATED;
    json_decref(m->tools_json);
    m->tools_json = m->tools->list(m, m->structured, m->annotated);
    if (m->conf.verbose)
        mcp_log("client asked for %s, speaking %s", want, m->version);

    json_t *info = json_pack("{s:s, s:s}", "name", "sbxd", "version", SBX_VERSION);
    if (m->structured)
        json_object_set_new(info, "title", json_string("sbxd sandboxes"));
    send_result(m, id,
                json_pack("{s:s, s:{s:{s:b}}, s:o, s:o}", "protocolVersion", m->version,
                          "capabilities", "tools", "listChanged", 0, "serverInfo", info,
                          "instructions", server_instructions(m)));
}

static struct call *find_call(struct mcp *m, json_t *id)
{
    for (struct call *c = m->calls; c; c = c->next)
        if (!c->done && json_equal(c->id, id))
            return c;
    return NULL;
}

static void on_tools_call(struct mcp *m, json_t *id, json_t *params)
{
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    json_t *meta = json_object_get(params, "_meta");
    json_t *token = json_object_get(meta, "progressToken");

    if (!name) {
        send_error(m, id, SBX_E_PARAMS, "tools/call needs params.name (a string)");
        return;
    }
    const struct tool *t = m->tools->find(m, name);
    if (!t) {
        send_error(m, id, SBX_E_PARAMS, "Unknown tool: %s", name);
        return;
    }
    if (args && !json_is_object(args) && !json_is_null(args)) {
        send_error(m, id, SBX_E_PARAMS, "params.arguments must be an object");
        return;
    }
    if (token && !json_is_string(token) && !json_is_integer(token)) {
        send_error(m, id, SBX_E_PARAMS,
                   "_meta.progressToken must be a string or an integer");
        return;
    }
    if (find_call(m, id)) {
        send_error(m, id, SBX_E_INVALID_REQUEST,
                   "a request with this id is still running");
        return;
    }
    struct call *c = calloc(1, sizeof(*c));
    if (!c) {
        send_error(m, id, SBX_E_INTERNAL, "out of memory");
        return;
    }
    c->m = m;
    c->id = json_incref(id);
    c->tool = t;
    c->args = json_is_object(args) ? json_incref(args) : json_object();
    c->pid = -1;
    c->t0 = ev_now(m->loop);
    c->next = m->calls;
    if (m->calls)
        m->calls->prev = c;
    m->calls = c;
    m->ncalls++;
    ev_timer_init(&c->progress, progress_cb, m->conf.progress_ms / 1000.0,
                  m->conf.progress_ms / 1000.0);
    c->progress.data = c;
    if (m->ncalls > m->conf.max_calls) {
        mcp_answer_error(c,
                         "too many tool calls at once (at most %zu); try again when one "
                         "has finished",
                         m->conf.max_calls);
        return;
    }
    if (token && m->tools->has_progress(t)) {
        c->progress_token = json_incref(token);
        ev_timer_start(m->loop, &c->progress);
    }
    m->tools->start(c);
}

static void cancel_call(struct call *c, const char *why)
{
    struct mcp *m = c->m;
    if (c->done)
        return;
    if (m->conf.verbose)
        mcp_log("cancelling a %s call (%s)", m->tools->name(c->tool), why);
    c->cancelled = 1;
    c->done = 1;
    ev_timer_stop(m->loop, &c->progress);
    if (c->slot)
        msbx_slot_unwait(c->slot, &c->w);
    m->tools->cancel(c);
    mcp_call_maybe_free(c);
}

static void on_notification(struct mcp *m, const char *method, json_t *params)
{
    if (strcmp(method, "notifications/cancelled") == 0) {
        json_t *rid = json_object_get(params, "requestId");
        struct call *c = rid ? find_call(m, rid) : NULL;
        if (c)
            cancel_call(c, "notifications/cancelled");
        return;
    }
    /* notifications/initialized and anything else: nothing to do. */
}

static void on_message(struct mcp *m, json_t *msg)
{
    if (json_is_array(msg)) {
        send_error(m, NULL, SBX_E_INVALID_REQUEST, "batches are not supported");
        return;
    }
    json_t *id = json_object_get(msg, "id");
    json_t *jm = json_object_get(msg, "method");
    const char *method = json_string_value(jm);
    json_t *params = json_object_get(msg, "params");
    const char *ver = json_string_value(json_object_get(msg, "jsonrpc"));

    if (id && !json_is_string(id) && !json_is_integer(id))
        id = NULL; /* MCP ids are strings or integers; null is not an id */
    if (!json_is_object(msg) || !ver || strcmp(ver, "2.0") != 0) {
        send_error(m, id, SBX_E_INVALID_REQUEST, "not a JSON-RPC 2.0 message");
        return;
    }
    if (!jm) {
        /* A response: we send no requests, so there is nothing to match. */
        return;
    }
    if (!method || (params && !json_is_object(params))) {
        send_error(m, id, SBX_E_INVALID_REQUEST,
                   !method ? "method must be a string" : "params must be an object");
        return;
    }
    if (!json_object_get(msg, "id")) {
        on_notification(m, method, params);
        return;
    }
    if (!id) {
        send_error(m, NULL, SBX_E_INVALID_REQUEST, "id must be a string or an integer");
        return;
    }
    if (m->conf.verbose)
        mcp_log("<- %s", method);
    if (strcmp(method, "initialize") == 0)
        on_initialize(m, id, params);
    else if (strcmp(method, "ping") == 0)
        send_result(m, id, json_object());
    else if (strcmp(method, "tools/list") == 0)
        send_result(m, id, json_pack("{s:O}", "tools", m->tools_json));
    else if (strcmp(method, "tools/call") == 0)
        on_tools_call(m, id, params);
    else
        send_error(m, id, SBX_E_METHOD, "Method not found: %s", method);
}

/* ---- lines ------------------------------------------------------------------------- */

static void on_line(struct mcp *m, char *line, size_t len)
{
    json_error_t jerr;
    if (m->quitting)
        return;
    while (len > 0 &&
           (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    if (len == 0)
        return;
    json_t *msg = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!msg) {
        send_error(m, NULL, SBX_E_PARSE, "parse error: %s", jerr.text);
        return;
    }
    on_message(m, msg);
    json_decref(msg);
}

static void too_long(struct mcp *m)
{
    send_error(m, NULL, SBX_E_INVALID_REQUEST,
               "message longer than %zu bytes (sbxctl mcp --max-message)",
               m->conf.max_message);
}

/* ---- the session ------------------------------------------------------------------- */

static void io_line(void *data, char *line, size_t len)
{
    on_line(data, line, len);
}

static void io_too_long(void *data)
{
    too_long(data);
}

static void io_closed(void *data)
{
    struct mcp *m = data;
    m->on_gone(m);
}

static void io_drained(void *data)
{
    struct mcp *m = data;
    m->on_idle(m);
}

void mcp_proto_start(struct mcp *m)
{
    static const struct mstdio_cbs cbs = {io_line, io_too_long, io_closed, io_drained};
    snprintf(m->version, sizeof(m->version), "%s", versions[0]);
    m->structured = m->annotated = 1;
    m->tools_json = m->tools->list(m, 1, 1);
    mstdio_init(&m->io, m->loop, m->conf.max_message, &cbs, m);
}

void mcp_proto_cancel_all(struct mcp *m, const char *why)
{
    struct call *c, *next;
    for (c = m->calls; c; c = next) {
        next = c->next;
        c->cancelled = 1; /* no answer after the client left */
        if (!c->done)
            cancel_call(c, why);
    }
}

void mcp_proto_abandon(struct mcp *m)
{
    for (struct call *c = m->calls; c; c = c->next)
        c->done = c->cancelled = 1;
}

void mcp_proto_fini(struct mcp *m)
{
    while (m->calls) {
        m->calls->refs = 0;
        mcp_call_maybe_free(m->calls);
    }
    mstdio_fini(&m->io);
    json_decref(m->tools_json);
}
