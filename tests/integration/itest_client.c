/*
 * test_client.c - libsbx against a real sbxd (Duktape provider): sync calls
 * with notifications and tool calls, spawn/attach/wait, error codes, and the
 * async API on libev (out-of-order replies, tool calls answered later, spawn
 * watches, disconnect and free).
 *
 * usage: test_client [SOCKET]
 * Without SOCKET (or $SBXD_SOCKET) it starts ../sbxd next to its own binary
 * on a socket in a temporary directory, and stops it at the end.
 */
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sbx/sbx.h>
#include <sbx/sbx_async.h>

#include "adapters/libev.h"
#include "testhelp.h"

static const char *sock;
static char sb_a[64], sb_t[64]; /* a plain sandbox, one with tools */

/* ---- helpers ----------------------------------------------------------------------- */

/* Calls and returns the result (new reference), or NULL on any error. */
static json_t *call_ok(sbx_ctx *c, const char *method, json_t *params)
{
    json_t *r = NULL;
    sbx_rpc_error *e = NULL;
    if (sbx_call_new(c, &r, &e, method, params) != SBX_OK) {
        printf("      %s failed: %s (code %d)\n", method, c->errstr, e ? e->code : 0);
        sbx_rpc_error_free(e);
        return NULL;
    }
    return r;
}

/* Calls and returns the RPC error (caller frees), or NULL if it succeeded. */
static sbx_rpc_error *call_err(sbx_ctx *c, const char *method, json_t *params)
{
    json_t *r = NULL;
    sbx_rpc_error *e = NULL;
    if (sbx_call_new(c, &r, &e, method, params) == SBX_OK)
        json_decref(r);
    return e;
}

static const char *data_str(const sbx_rpc_error *e, const char *key)
{
    const char *s = e ? json_string_value(json_object_get(e->data, key)) : NULL;
    return s ? s : "";
}

static json_int_t jint(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static const char *jstr(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

/* Notifications seen by a sync context, for one pid (or any when pid < 0). */
struct notes {
    json_int_t pid;
    char *out;
    size_t out_len;
    char err[256];
    int outputs, exits;
    int exit_after_output; /* every exit came after the outputs before it */
    json_int_t exit_code;
    json_int_t first_offset;
};

static void notes_reset(struct notes *n, json_int_t pid)
{
    free(n->out);
    memset(n, 0, sizeof(*n));
    n->pid = pid;
    n->exit_after_output = 1;
    n->exit_code = -1;
    n->first_offset = -1;
}

static void notes_add(struct notes *n, const char *method, json_t *params)
{
    if (n->pid >= 0 && jint(params, "pid") != n->pid)
        return;
    if (strcmp(method, SBX_N_OUTPUT) == 0) {
        int stream;
        char *data;
        size_t len;
        if (n->exits)
            n->exit_after_output = 0;
        if (sbx_output_decode(&stream, &data, &len, params) != SBX_OK)
            return;
        n->outputs++;
        if (n->first_offset < 0 && stream == SBX_STDOUT)
            n->first_offset = jint(params, "offset");
        if (stream == SBX_STDOUT) {
            char *o = realloc(n->out, n->out_len + len + 1);
            if (o) {
                memcpy(o + n->out_len, data, len);
                n->out_len += len;
                o[n->out_len] = '\0';
                n->out = o;
            }
        } else {
            strncat(n->err, data, sizeof(n->err) - strlen(n->err) - 1);
        }
        free(data);
    } else if (strcmp(method, SBX_N_EXIT) == 0) {
        n->exits++;
        n->exit_code = jint(params, "exit_code");
    }
}

static void notes_cb(sbx_ctx *c, const char *method, json_t *params, void *privdata)
{
    (void)c;
    notes_add(privdata, method, params);
}

static json_t *exec_js(sbx_ctx *c, const char *sandbox, const char *js)
{
    return call_ok(c, SBX_M_EXEC,
                   json_pack("{s:s, s:s}", "sandbox", sandbox, "command", js));
}

/* ---- sync: daemon and sandboxes ---------------------------------------------------- */

static void test_basics(sbx_ctx *c)
{
    json_t *r;

    r = call_ok(c, SBX_M_PING, NULL);
    test_cond("ping: pong is true", json_is_true(json_object_get(r, "pong")));
    test_cond("ping: has a time", json_is_string(json_object_get(r, "time")));
    json_decref(r);

    r = call_ok(c, SBX_M_INFO, NULL);
    int duk = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(r, "providers"), i, p) {
        if (strcmp(jstr(p, "name"), "duktape") == 0 &&
            json_is_true(json_object_get(p, "available")))
            duk = 1;
    }
    test_cond("info: version and protocol",
              json_is_string(json_object_get(r, "version")) &&
                  strcmp(jstr(r, "protocol"), SBX_PROTO_VERSION) == 0);
    test_cond("info: uid is the caller's", jint(r, "uid") == (json_int_t)getuid());
    test_cond("info: duktape is available", duk);
    json_decref(r);

    /* Duktape named: the default provider is js */
    r = call_ok(c, SBX_M_CREATE,
                json_pack("{s:s, s:s, s:{s:s}}", "provider", "duktape", "id", sb_a, "env",
                          "GREETING", "hi"));
    test_cond("create: returns the sandbox",
              strcmp(jstr(r, "id"), sb_a) == 0 &&
                  strcmp(jstr(r, "provider"), "duktape") == 0 &&
                  strcmp(jstr(r, "status"), "running") == 0);
    test_cond("create: not a reconnect",
              json_is_false(json_object_get(r, "reconnected")));
    json_decref(r);

    r = call_ok(c, SBX_M_CREATE, json_pack("{s:s}", "id", sb_a));
    test_cond("create: same id again reconnects",
              json_is_true(json_object_get(r, "reconnected")));
    json_decref(r);

    r = call_ok(c, SBX_M_GET, json_pack("{s:s}", "id", sb_a));
    test_cond("get: id and env",
              strcmp(jstr(r, "id"), sb_a) == 0 &&
                  strcmp(jstr(json_object_get(r, "env"), "GREETING"), "hi") == 0);
    json_decref(r);

    r = call_ok(c, SBX_M_LIST, json_object());
    int found = 0;
    json_array_foreach(json_object_get(r, "sandboxes"), i, p) {
        if (strcmp(jstr(p, "id"), sb_a) == 0)
            found = 1;
    }
    test_cond("list: contains the sandbox", found);
    json_decref(r);
}

static void test_exec(sbx_ctx *c)
{
    struct notes n = {0};
    json_t *r;

    notes_reset(&n, -1);
    sbx_set_notify_cb(c, notes_cb, &n);
    r = exec_js(c, sb_a, "console.log('hi'); console.error('oops'); 6*7");
    test_eq_int("exec: result 42", json_integer_value(json_object_get(r, "result")), 42);
    test_cond("exec: stdout in the result", strcmp(jstr(r, "stdout"), "hi\n") == 0);
    test_cond("exec: output notifications arrived during the call",
              n.out && strcmp(n.out, "hi\n") == 0 && strcmp(n.err, "oops\n") == 0 &&
                  n.first_offset == 0);
    test_cond("exec: process.exit came after the output and before the response",
              n.exits == 1 && n.exit_after_output && n.exit_code == 0);
    json_decref(r);

    notes_reset(&n, -1);
    r = exec_js(c, sb_a, "process.env.GREETING + ' there'");
    test_cond("exec: sandbox env is visible", strcmp(jstr(r, "result"), "hi there") == 0);
    json_decref(r);

    /* 2 MiB of output: the result is truncated, the notifications are not. */
    notes_reset(&n, -1);
    r = exec_js(
        c, sb_a,
        "var s = new Array(1024).join('x'); for (var i = 0; i < 2048; i++) console.log(s);"
        " 'done'");
    test_cond("exec: big output, result truncated",
              json_is_true(json_object_get(r, "truncated")));
    test_cond("exec: big output, every byte notified", n.out_len == 2048u * 1024u);
    json_decref(r);

    notes_reset(&n, -1);
    r = call_ok(c, SBX_M_EXEC,
                json_pack("{s:s, s:s, s:i}", "sandbox", sb_a, "command",
                          "while (true) {}", "timeout_ms", 300));
    test_cond("exec: timeout gives 124 and timed_out",
              jint(r, "exit_code") == SBX_EXIT_TIMEOUT &&
                  json_is_true(json_object_get(r, "timed_out")));
    json_decref(r);

    r = exec_js(c, sb_a, "throw new TypeError('bad thing')");
    json_t *exc = json_object_get(r, "exception");
    test_cond("exec: an uncaught error is the exception",
              jint(r, "exit_code") != 0 && strcmp(jstr(exc, "name"), "TypeError") == 0 &&
                  strcmp(jstr(exc, "message"), "bad thing") == 0);
    json_decref(r);
    sbx_set_notify_cb(c, NULL, NULL);
    free(n.out);
}

/* ---- sync: tool.call --------------------------------------------------------------- */

static int tool_calls;
static char tool_sandbox[64];

static int tool_cb(sbx_ctx *c, json_t **result_out, const char *tool, json_t *args,
                   json_t *params, char *errmsg, size_t errmsg_size, void *privdata)
{
    (void)c;
    (void)privdata;
    tool_calls++;
    snprintf(tool_sandbox, sizeof(tool_sandbox), "%s", jstr(params, "sandbox"));
    if (strcmp(tool, "add") == 0) {
        *result_out = json_integer(jint(args, "a") + jint(args, "b"));
        return SBX_OK;
    }
    snprintf(errmsg, errmsg_size, "nope from client (%s)", tool);
    return SBX_ERR;
}

static void test_tools(sbx_ctx *c)
{
    json_t *r = call_ok(c, SBX_M_CREATE,
                        json_pack("{s:s, s:s, s:[s,s]}", "provider", "duktape", "id",
                                  sb_t, "tools", "add", "fail"));
    test_cond("tools: sandbox with tools created", r != NULL);
    json_decref(r);

    sbx_set_tool_cb(c, tool_cb, NULL);
    r = exec_js(c, sb_t, "external_add({a: 1, b: 2})");
    test_cond("tools: external_add({a:1,b:2}) returns 3 through the tool callback",
              json_integer_value(json_object_get(r, "result")) == 3 && tool_calls == 1);
    test_cond("tools: tool.call params name the sandbox",
              strcmp(tool_sandbox, sb_t) == 0);
    json_decref(r);

    r = exec_js(c, sb_t, "try { external_fail({}); 'no' } catch (e) { e.message }");
    test_cond("tools: a failing tool throws its message in the isolate",
              strstr(jstr(r, "result"), "nope from client (fail)") != NULL);
    json_decref(r);

    /* A client without a tool handler: the call throws, nothing hangs. */
    sbx_ctx *c2 = sbx_connect_unix(sock, 2000);
    r = exec_js(c2, sb_t,
                "try { external_add({a: 1, b: 2}); 'no' } catch (e) { 'caught' }");
    test_cond("tools: without a handler the tool throws",
              strcmp(jstr(r, "result"), "caught") == 0);
    json_decref(r);
    sbx_free(c2);
    sbx_set_tool_cb(c, NULL, NULL);
}

/* ---- sync: spawn, attach, wait, kill ----------------------------------------------- */

/* A running process: wait with a timeout, then kill. */
static void processes_kill(sbx_ctx *c)
{
    json_t *r;
    json_int_t pid;
    /* kill */
    r = call_ok(c, SBX_M_SPAWN,
                json_pack("{s:s, s:s, s:b}", "sandbox", sb_a, "command",
                          "while (true) {}", "stream", 0));
    pid = jint(r, "pid");
    json_decref(r);
    sbx_rpc_error *e = call_err(
        c, SBX_M_WAIT,
        json_pack("{s:s, s:I, s:i}", "sandbox", sb_a, "pid", pid, "timeout_ms", 100));
    test_cond("wait: with a timeout on a running process is -32001",
              e && e->code == SBX_E_STATE);
    sbx_rpc_error_free(e);
    r = call_ok(c, SBX_M_KILL, json_pack("{s:s, s:I}", "sandbox", sb_a, "pid", pid));
    test_cond("kill: accepted", r != NULL);
    json_decref(r);
    r = call_ok(c, SBX_M_WAIT, json_pack("{s:s, s:I}", "sandbox", sb_a, "pid", pid));
    test_cond("kill: exit 137 and killed",
              jint(r, "exit_code") == SBX_EXIT_KILLED &&
                  json_is_true(json_object_get(r, "killed")));
    json_decref(r);
}

static void test_processes(sbx_ctx *c)
{
    struct notes n = {0};
    json_t *r, *m;

    r = call_ok(c, SBX_M_SPAWN,
                json_pack("{s:s, s:s, s:b}", "sandbox", sb_a, "command",
                          "for (var i = 0; i < 5; i++) console.log('n' + i); 7", "stream",
                          0));
    json_int_t pid = jint(r, "pid");
    test_cond("spawn: returns a pid", pid > 0);
    json_decref(r);

    r = call_ok(c, SBX_M_WAIT, json_pack("{s:s, s:I}", "sandbox", sb_a, "pid", pid));
    test_cond("wait: exit code 0", r && jint(r, "exit_code") == 0);
    json_decref(r);

    /* Attach from another connection: replay, then process.exit. */
    sbx_ctx *c2 = sbx_connect_unix(sock, 2000);
    r = call_ok(c2, SBX_M_ATTACH,
                json_pack("{s:s, s:I, s:b}", "sandbox", sb_a, "pid", pid, "follow", 0));
    test_cond("attach: finished process, offsets",
              r && json_is_false(json_object_get(r, "running")) &&
                  jint(r, "stdout_offset") == 15);
    json_decref(r);
    notes_reset(&n, pid);
    while (!n.exits && sbx_read_notification(c2, &m, 2000) == SBX_OK) {
        notes_add(&n, jstr(m, "method"), json_object_get(m, "params"));
        json_decref(m);
    }
    test_cond("attach: replayed output then process.exit",
              n.out && strcmp(n.out, "n0\nn1\nn2\nn3\nn4\n") == 0 && n.exits == 1 &&
                  n.exit_after_output);
    sbx_free(c2);

    /* Streaming spawn, pumped with sbx_read_notification. */
    r = call_ok(
        c, SBX_M_SPAWN,
        json_pack("{s:s, s:s}", "sandbox", sb_a, "command",
                  "console.log('s0'); var t = Date.now(); while (Date.now() - t < 300) {}"
                  " console.log('s1'); 1"));
    pid = jint(r, "pid");
    json_decref(r);
    notes_reset(&n, pid);
    while (!n.exits && sbx_read_notification(c, &m, 5000) == SBX_OK) {
        notes_add(&n, jstr(m, "method"), json_object_get(m, "params"));
        json_decref(m);
    }
    test_cond("spawn: live output via sbx_read_notification",
              n.out && strcmp(n.out, "s0\ns1\n") == 0 && n.exits == 1 &&
                  n.exit_code == 0);

    r = call_ok(c, SBX_M_PLIST, json_pack("{s:s}", "sandbox", sb_a));
    size_t i;
    json_t *p;
    int listed = 0;
    json_array_foreach(json_object_get(r, "processes"), i, p) {
        if (jint(p, "pid") == pid && strcmp(jstr(p, "status"), "exited") == 0)
            listed = 1;
    }
    test_cond("process.list: shows the exited process", listed);
    json_decref(r);

    processes_kill(c);
    free(n.out);
}

/* ---- sync: errors ------------------------------------------------------------------ */

static void test_errors(sbx_ctx *c)
{
    sbx_rpc_error *e;

    e = call_err(c, SBX_M_GET, json_pack("{s:s}", "id", "no-such-sandbox"));
    test_cond("error: unknown sandbox is -32000 with data.sandbox",
              e && e->code == SBX_E_NOT_FOUND &&
                  strcmp(data_str(e, "sandbox"), "no-such-sandbox") == 0);
    test_cond("error: ctx->err is SBX_ERR_RPC with the message",
              c->err == SBX_ERR_RPC && strcmp(c->errstr, e ? e->message : "") == 0);
    sbx_rpc_error_free(e);

    e = call_err(c, "no.such.method", NULL);
    test_cond("error: unknown method is -32601 with data.method",
              e && e->code == SBX_E_METHOD &&
                  strcmp(data_str(e, "method"), "no.such.method") == 0);
    sbx_rpc_error_free(e);

    e = call_err(c, SBX_M_GET, json_pack("{s:i}", "id", 5));
    test_cond("error: a wrong param type is -32602 with data.param",
              e && e->code == SBX_E_PARAMS && strcmp(data_str(e, "param"), "id") == 0);
    sbx_rpc_error_free(e);

    e = call_err(c, SBX_M_WAIT, json_pack("{s:s, s:i}", "sandbox", sb_a, "pid", 999999));
    test_cond("error: unknown pid is -32004", e && e->code == SBX_E_NO_PROCESS);
    sbx_rpc_error_free(e);

    e = call_err(c, SBX_M_EXEC,
                 json_pack("{s:s, s:s, s:s}", "sandbox", sb_a, "command", "1", "cwd",
                           "relative/dir"));
    test_cond("error: a relative cwd is -32602", e && e->code == SBX_E_PARAMS);
    sbx_rpc_error_free(e);

    json_t *r = call_ok(c, SBX_M_PING, NULL);
    test_cond("error: the connection is still usable", r != NULL && c->err == 0);
    json_decref(r);
}

/* ---- async on libev ---------------------------------------------------------------- */

struct astate {
    struct ev_loop *loop;
    int connected, disconnected, disc_status;
    char order[32];
    int replies, nulls;
    json_int_t exec_result;
    sbx_rpc_error err; /* code only */
    int tool_calls;
    char *tool_id;
    json_int_t tool_sum;
    ev_timer tool_timer;
    sbx_async *ac;
    char out[128];
    int exits;
    json_int_t exit_code;
    int notes;
};

static void a_connect(sbx_async *ac, int status)
{
    struct astate *s = ac->data;
    s->connected = status == SBX_OK ? 1 : -1;
}

static void a_disconnect(sbx_async *ac, int status)
{
    struct astate *s = ac->data;
    s->disconnected++;
    s->disc_status = status;
}

static char tags[] = "EPXTGN";

static void a_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                    void *privdata)
{
    struct astate *s = ac->data;
    const char *tag = privdata;
    s->replies++;
    if (!result && !err) {
        s->nulls++;
        return;
    }
    size_t n = strlen(s->order);
    if (n + 1 < sizeof(s->order)) {
        s->order[n] = *tag;
        s->order[n + 1] = '\0';
    }
    if (err)
        s->err.code = err->code;
    if (result && json_object_get(result, "result"))
        s->exec_result = json_integer_value(json_object_get(result, "result"));
}

static void a_notify(sbx_async *ac, const char *method, json_t *params, void *privdata)
{
    struct astate *s = privdata;
    (void)ac;
    (void)params;
    if (strcmp(method, SBX_N_OUTPUT) == 0)
        s->notes++;
}

/* Answers the pending tool call from a timer: "later", outside the callback. */
static void tool_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct astate *s = w->data;
    (void)loop;
    (void)revents;
    json_t *v = json_integer(s->tool_sum);
    sbx_async_tool_reply(s->ac, s->tool_id, v, 0, NULL);
    json_decref(v);
    free(s->tool_id);
    s->tool_id = NULL;
}

static void a_tool(sbx_async *ac, const char *call_id, const char *tool, json_t *args,
                   json_t *params, void *privdata)
{
    struct astate *s = privdata;
    (void)params;
    s->tool_calls++;
    if (strcmp(tool, "add") != 0) {
        sbx_async_tool_reply(ac, call_id, NULL, SBX_E_TOOL, "only add here");
        return;
    }
    s->tool_sum = jint(args, "a") + jint(args, "b");
    s->tool_id = strdup(call_id);
    ev_timer_init(&s->tool_timer, tool_timer_cb, 0.05, 0.);
    s->tool_timer.data = s;
    ev_timer_start(s->loop, &s->tool_timer);
}

static void a_output(sbx_async *ac, int stream, const char *data, size_t len,
                     void *privdata)
{
    struct astate *s = ac->data;
    (void)privdata;
    if (stream == SBX_STDOUT && strlen(s->out) + len < sizeof(s->out))
        strncat(s->out, data, len);
}

static void a_exit(sbx_async *ac, json_t *exit_params, const sbx_rpc_error *err,
                   void *privdata)
{
    struct astate *s = ac->data;
    (void)err;
    (void)privdata;
    s->exits++;
    s->exit_code = exit_params ? jint(exit_params, "exit_code") : -1;
}

static int loop_timed_out;

static void guard_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    loop_timed_out = 1;
    ev_break(loop, EVBREAK_ONE);
}

/* Runs the loop until *flag >= want or secs pass. */
static int run_until(struct ev_loop *loop, int *flag, int want, double secs)
{
    ev_timer guard;
    ev_timer_init(&guard, guard_cb, secs, 0.);
    ev_timer_start(loop, &guard);
    loop_timed_out = 0;
    while (*flag < want && !loop_timed_out)
        ev_run(loop, EVRUN_ONCE);
    ev_timer_stop(loop, &guard);
    return *flag >= want;
}

static sbx_async *a_open(struct astate *s, struct ev_loop *loop)
{
    memset(s, 0, sizeof(*s));
    s->loop = loop;
    sbx_async *ac = sbx_async_connect_unix(sock);
    s->ac = ac;
    ac->data = s;
    sbx_async_set_connect_cb(ac, a_connect);
    sbx_async_set_disconnect_cb(ac, a_disconnect);
    sbx_async_set_notify_cb(ac, a_notify, s);
    sbx_async_set_tool_cb(ac, a_tool, s);
    return ac;
}

static void test_async(void)
{
    struct ev_loop *loop = EV_DEFAULT;
    struct astate s;

    sbx_async *ac = a_open(&s, loop);
    test_cond("async: connect started", ac && ac->c.err == 0);
    test_cond("async: libev attach", sbx_libev_attach(loop, ac) == SBX_OK);
    test_cond("async: second attach rejected", sbx_libev_attach(loop, ac) == SBX_ERR);
    run_until(loop, &s.connected, 1, 5);
    test_cond("async: on_connect(SBX_OK)", s.connected == 1);

    /* Out of order: a slow exec first, a ping second; the ping wins. */
    sbx_async_call_new(ac, SBX_M_EXEC,
                       json_pack("{s:s, s:s}", "sandbox", sb_a, "command",
                                 "var t = Date.now(); while (Date.now() - t < 400) {} 5"),
                       a_reply, &tags[0]);
    sbx_async_call(ac, SBX_M_PING, NULL, a_reply, &tags[1]);
    test_cond("async: two calls pending", sbx_async_pending(ac) == 2);
    run_until(loop, &s.replies, 2, 10);
    test_cond("async: replies matched by id, out of order", strcmp(s.order, "PE") == 0);
    test_cond("async: exec result arrived", s.exec_result == 5);

    /* An error. */
    sbx_async_call_new(ac, SBX_M_GET, json_pack("{s:s}", "id", "no-such-sandbox"),
                       a_reply, &tags[2]);
    run_until(loop, &s.replies, 3, 5);
    test_cond("async: RPC error delivered", s.err.code == SBX_E_NOT_FOUND);

    /* A tool call answered later, from a timer. */
    sbx_async_call_new(ac, SBX_M_EXEC,
                       json_pack("{s:s, s:s}", "sandbox", sb_t, "command",
                                 "external_add({a: 20, b: 22})"),
                       a_reply, &tags[3]);
    run_until(loop, &s.replies, 4, 10);
    test_cond("async: tool.call answered later round-trips",
              s.tool_calls == 1 && s.exec_result == 42);
    sbx_async_call_new(ac, SBX_M_EXEC,
                       json_pack("{s:s, s:s}", "sandbox", sb_t, "command",
                                 "try { external_fail({}) } catch (e) { e.message }"),
                       a_reply, &tags[3]);
    run_until(loop, &s.replies, 5, 10);
    test_cond("async: tool error answered at once", s.tool_calls == 2);

    /* sbx_async_spawn: output and exit through the watch. */
    s.notes = 0;
    json_t *sp = json_pack("{s:s, s:s}", "sandbox", sb_a, "command",
                           "console.log('x1'); console.log('x2'); 3");
    test_cond("async: spawn sent",
              sbx_async_spawn(ac, sp, a_output, a_exit, NULL) == SBX_OK);
    json_decref(sp);
    run_until(loop, &s.exits, 1, 10);
    test_cond("async: spawn watch got the output", strcmp(s.out, "x1\nx2\n") == 0);
    test_cond("async: spawn watch got the exit", s.exits == 1 && s.exit_code == 0);
    test_cond("async: claimed output did not reach the notify callback", s.notes == 0);

    /* Graceful disconnect: the pending reply first, then on_disconnect(OK). */
    sbx_async_call(ac, SBX_M_PING, NULL, a_reply, &tags[4]);
    sbx_async_disconnect(ac);
    test_cond("async: no new calls while disconnecting",
              sbx_async_call(ac, SBX_M_PING, NULL, a_reply, &tags[5]) == SBX_ERR);
    run_until(loop, &s.disconnected, 1, 5);
    test_cond("async: disconnect delivered the pending reply",
              strchr(s.order, 'G') != NULL && s.nulls == 0);
    test_cond("async: on_disconnect(SBX_OK)",
              s.disconnected == 1 && s.disc_status == SBX_OK);

    /* Free with a call in flight: its callback gets NULLs. */
    ac = a_open(&s, loop);
    sbx_libev_attach(loop, ac);
    run_until(loop, &s.connected, 1, 5);
    sbx_async_call_new(ac, SBX_M_EXEC,
                       json_pack("{s:s, s:s}", "sandbox", sb_a, "command",
                                 "var t = Date.now(); while (Date.now() - t < 300) {} 1"),
                       a_reply, &tags[0]);
    int tick = 0;
    run_until(loop, &tick, 1, 0.1); /* lets the request go out */
    sbx_async_free(ac);
    test_cond("async: free -> pending callback gets NULLs, on_disconnect once",
              s.nulls == 1 && s.disconnected == 1);
}

/* ---- main -------------------------------------------------------------------------- */

static pid_t own_sbxd;
static char own_dir[64], own_sock[128];

static const char *start_own_sbxd(const char *argv0)
{
    char self[PATH_MAX], bin[PATH_MAX + 16];
    snprintf(self, sizeof(self), "%s", argv0);
    snprintf(bin, sizeof(bin), "%s/../sbxd", dirname(self));
    if (access(bin, X_OK) != 0)
        return NULL;
    snprintf(own_dir, sizeof(own_dir), "/tmp/sbx-tc.XXXXXX");
    if (!mkdtemp(own_dir))
        return NULL;
    snprintf(own_sock, sizeof(own_sock), "%s/sbxd.sock", own_dir);
    own_sbxd = fork();
    if (own_sbxd == 0) {
        char log[128];
        snprintf(log, sizeof(log), "%s/sbxd.log", own_dir);
        if (!freopen(log, "w", stderr) || !freopen("/dev/null", "w", stdout))
            _exit(127);
        setenv("SBXD_SOCKET", own_sock, 1);
        execl(bin, bin, "--foreground", (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 200 && stat(own_sock, &st) != 0; i++)
        usleep(50000);
    return stat(own_sock, &st) == 0 ? own_sock : NULL;
}

static void stop_own_sbxd(void)
{
    if (own_sbxd <= 0)
        return;
    kill(own_sbxd, SIGTERM);
    waitpid(own_sbxd, NULL, 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/sbxd.log", own_dir);
    unlink(path);
    unlink(own_sock);
    rmdir(own_dir);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    sock = argc > 1 ? argv[1] : getenv("SBXD_SOCKET");
    if (!sock || !*sock)
        sock = start_own_sbxd(argv[0]);
    if (!sock) {
        printf("test_client: no socket given and no sbxd to start\n");
        test_cond("an sbxd to test against", 0);
        return test_report();
    }
    snprintf(sb_a, sizeof(sb_a), "tc-%d-a", (int)getpid());
    snprintf(sb_t, sizeof(sb_t), "tc-%d-t", (int)getpid());

    sbx_ctx *c = sbx_connect_unix(sock, 5000);
    test_cond("connect", c && c->err == 0);
    if (!c || c->err) {
        printf("      %s\n", c ? c->errstr : "oom");
        sbx_free(c);
        stop_own_sbxd();
        return test_report();
    }
    sbx_set_timeout(c, 30000);

    test_basics(c);
    test_exec(c);
    test_tools(c);
    test_processes(c);
    test_errors(c);
    test_async();

    json_t *r = call_ok(c, SBX_M_DESTROY, json_pack("{s:s}", "id", sb_a));
    test_cond("destroy: status destroyed", strcmp(jstr(r, "status"), "destroyed") == 0);
    json_decref(r);
    json_decref(call_ok(c, SBX_M_DESTROY, json_pack("{s:s}", "id", sb_t)));
    sbx_rpc_error *e = call_err(c, SBX_M_GET, json_pack("{s:s}", "id", sb_a));
    test_cond("destroy: then get is -32000", e && e->code == SBX_E_NOT_FOUND);
    sbx_rpc_error_free(e);

    sbx_free(c);
    stop_own_sbxd();
    return test_report();
}
