/*
 * itest_protocol.c - the wire protocol against a real sbxd: framing, batches,
 * every error code, bad input, limits, a second uid.
 * usage: itest_protocol SOCKET
 */
#include <signal.h>
#include <sys/wait.h>

#include "itest.h"
#include "sbx_proto.h"
#include "testhelp.h"

static const char *sock;

static json_t *raw_line(conn *c, const char *line)
{
    cn_send_raw(c, line, strlen(line));
    cn_send_raw(c, "\n", 1);
    return cn_read(c, 5000);
}

static int ping_ok(void)
{
    conn *c = cn_open(sock);
    if (!c)
        return 0;
    json_t *r = cn_call(c, "daemon.ping", NULL);
    int ok = json_is_true(json_object_get(res_of(r), "pong"));
    json_decref(r);
    cn_close(c);
    return ok;
}

/* Batches, a lone notification, deep nesting, blank lines. */
static void framing_batch_deep(conn *c)
{
    json_t *r;
    r = raw_line(c, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\"},"
                    "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"},"
                    "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"nope\"}]");
    test_cond("batch answers requests but not notifications",
              json_is_array(r) && json_array_size(r) == 2);
    test_cond(
        "batch answers in order with ids",
        json_integer_value(json_object_get(json_array_get(r, 0), "id")) == 1 &&
            strcmp(json_string_value(json_object_get(json_array_get(r, 1), "id")) ?: "",
                   "x") == 0 &&
            err_code(json_array_get(r, 1)) == SBX_E_METHOD);
    json_decref(r);

    /* A notification alone gets no answer: the next response is the ping's. */
    cn_send_raw(c, "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"}\n", 41);
    r = cn_call(c, "daemon.ping", NULL);
    test_cond("a notification gets no response",
              json_integer_value(json_object_get(r, "id")) == c->next_id);
    json_decref(r);

    char deep[400];
    size_t k = 0;
    for (int i = 0; i < 100; i++)
        deep[k++] = '[';
    for (int i = 0; i < 100; i++)
        deep[k++] = ']';
    deep[k] = 0;
    r = raw_line(c, deep);
    test_eq_int("nesting over 64 levels is a parse error", err_code(r), SBX_E_PARSE);
    json_decref(r);

    cn_send_raw(c, "\r\n\n", 3);
    r = cn_call(c, "daemon.ping", NULL);
    test_cond("blank lines are ignored and the session still serves",
              json_is_true(json_object_get(res_of(r), "pong")));
    json_decref(r);
}

static void framing_oversize(void)
{
    conn *c;
    json_t *r;
    /* Over the maximum message size: an error, then the connection closes. */
    c = cn_open(sock);
    size_t big = 17u * 1024 * 1024;
    char *line = malloc(big + 256);
    int n = snprintf(
        line, 256,
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\",\"params\":{\"x\":\"");
    memset(line + n, 'a', big);
    snprintf(line + n + big, 256 - (size_t)n, "\"}}\n");
    cn_send_raw(c, line, strlen(line));
    free(line);
    r = cn_read(c, 10000);
    test_eq_int("a message over 16 MiB gets -32007", err_code(r), SBX_E_TOO_LARGE);
    json_decref(r);
    r = cn_read(c, 5000);
    test_cond("then the connection is closed", r == NULL && c->closed);
    json_decref(r);
    cn_close(c);
    test_cond("the daemon still serves others after an oversize message", ping_ok());

    /* Client closes mid-line: nothing breaks. */
    c = cn_open(sock);
    cn_send_raw(c, "{\"jsonrpc\":\"2.0\",\"id\":1,", 24);
    cn_close(c);
    test_cond("a client that hangs up mid-message does no harm", ping_ok());
}

static void test_framing(void)
{
    conn *c = cn_open(sock);
    json_t *r;

    r = raw_line(c, "this is not json");
    test_eq_int("garbage line gets -32700 parse error", err_code(r), SBX_E_PARSE);
    test_cond("parse error has id null", json_is_null(json_object_get(r, "id")));
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.pi");
    test_eq_int("truncated JSON gets -32700", err_code(r), SBX_E_PARSE);
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":5}");
    test_eq_int("method of the wrong type gets -32600", err_code(r),
                SBX_E_INVALID_REQUEST);
    test_eq_int("invalid request keeps its id",
                json_integer_value(json_object_get(r, "id")), 7);
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"1.0\",\"id\":8,\"method\":\"daemon.ping\"}");
    test_eq_int("wrong jsonrpc version gets -32600", err_code(r), SBX_E_INVALID_REQUEST);
    json_decref(r);

    r = raw_line(c, "[1,2]");
    test_cond("batch of non-objects gets an array of -32600",
              json_is_array(r) && json_array_size(r) == 2 &&
                  err_code(json_array_get(r, 0)) == SBX_E_INVALID_REQUEST);
    json_decref(r);

    r = raw_line(c, "[]");
    test_eq_int("empty batch gets -32600", err_code(r), SBX_E_INVALID_REQUEST);
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"no.such\"}");
    test_eq_int("unknown method gets -32601", err_code(r), SBX_E_METHOD);
    test_cond("-32601 names the method in data",
              strcmp(json_string_value(json_object_get(
                         json_object_get(json_object_get(r, "error"), "data"), "method"))
                         ?: "",
                     "no.such") == 0);
    json_decref(r);

    r = raw_line(
        c, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"sandbox.get\",\"params\":[1]}");
    test_eq_int("positional params get -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = raw_line(
        c,
        "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"sandbox.get\",\"params\":{\"id\":5}}");
    test_eq_int("id of the wrong type gets -32602", err_code(r), SBX_E_PARAMS);
    test_cond("-32602 names the param",
              strcmp(json_string_value(json_object_get(
                         json_object_get(json_object_get(r, "error"), "data"), "param"))
                         ?: "",
                     "id") == 0);
    json_decref(r);

    framing_batch_deep(c);
    cn_close(c);

    framing_oversize();
}

static void test_info(void)
{
    conn *c = cn_open(sock);
    json_t *r = cn_call(c, "daemon.info", NULL);
    json_t *res = res_of(r);
    test_cond("daemon.info has a version",
              json_is_string(json_object_get(res, "version")));
    json_t *provs = json_object_get(res, "providers");
    json_t *duk = NULL;
    size_t i;
    json_t *p;
    json_array_foreach(provs, i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), "duktape") == 0)
            duk = p;
    test_cond("daemon.info lists duktape as available",
              duk && json_is_true(json_object_get(duk, "available")));
    test_cond(
        "daemon.info has counts and uptime",
        json_is_integer(json_object_get(json_object_get(res, "counts"), "sessions")) &&
            json_is_number(json_object_get(res, "uptime_s")));
    json_decref(r);
    cn_close(c);
}

/* A stopped sandbox, a failing on_start hook, the process limits; errs destroyed. */
static void errors_state_hook_limits(conn *c)
{
    json_t *r;
    r = cn_call(c, "sandbox.stop", json_pack("{s:s}", "id", "errs"));
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "errs", "command", "1"));
    test_eq_int("exec in a stopped sandbox gets -32001", err_code(r), SBX_E_STATE);
    test_cond("-32001 data says the status",
              strcmp(json_string_value(json_object_get(
                         json_object_get(json_object_get(r, "error"), "data"), "status"))
                         ?: "",
                     "stopped") == 0);
    json_decref(r);

    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s, s:s}", "provider", "duktape", "id", "hookfail",
                          "on_start", "throw new Error('nope')"));
    test_eq_int("a failing on_start hook fails the create with -32006", err_code(r),
                SBX_E_PROVIDER);
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "hookfail"));
    test_eq_str("and leaves the sandbox in error", res_str(r, "status"), "error");
    json_decref(r);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "hookfail")));

    /* limits: max_processes_per_sandbox is 16 and max_queued_per_sandbox 24
     * in the test config: 40 are taken, the 41st is refused */
    json_decref(cn_call(c, "sandbox.start", json_pack("{s:s}", "id", "errs")));
    int limited = 0, taken = 0;
    for (int i = 0; i < 45 && !limited; i++) {
        r = cn_call(
            c, "process.spawn",
            json_pack("{s:s, s:s}", "sandbox", "errs", "command", "read_stdin()"));
        if (err_code(r) == SBX_E_LIMIT)
            limited = 1;
        else if (res_int(r, "pid") > 0)
            taken++;
        json_decref(r);
    }
    test_cond(
        "more processes than max_processes_per_sandbox + max_queued_per_sandbox get -32005",
        limited && taken == 40);
    r = cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "errs"));
    test_eq_str("destroy answers status destroyed", res_str(r, "status"), "destroyed");
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "errs"));
    test_eq_int("a destroyed sandbox is gone", err_code(r), SBX_E_NOT_FOUND);
    json_decref(r);
}

static void test_errors(void)
{
    conn *c = cn_open(sock);
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "does-not-exist"));
    test_eq_int("unknown sandbox gets -32000", err_code(r), SBX_E_NOT_FOUND);
    json_decref(r);

    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s}", "provider", "duktape", "id", "errs"));
    test_eq_str("create a sandbox for the error tests", res_str(r, "status"), "running");
    json_decref(r);

    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:i}", "sandbox", "errs", "pid", 999));
    test_eq_int("unknown pid gets -32004", err_code(r), SBX_E_NO_PROCESS);
    json_decref(r);

    r = cn_call(c, "sandbox.create", json_pack("{s:s}", "provider", "nosuch"));
    test_eq_int("unknown provider gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s}", "provider", "duktape", "id", "../bad"));
    test_eq_int("an invalid id gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(c, "sandbox.create", json_pack("{s:s}", "working_dir", "relative/dir"));
    test_eq_int("a relative working_dir gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(
        c, "process.exec",
        json_pack("{s:s, s:s, s:s}", "sandbox", "errs", "command", "1", "cwd", "~/x"));
    test_eq_int("a cwd with ~ gets -32602 (no expansion)", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:i}", "sandbox", "errs", "command", 5));
    test_eq_int("a command of the wrong type gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(
        c, "process.kill",
        json_pack("{s:s, s:i, s:s}", "sandbox", "errs", "pid", 1, "signal", "NOPE"));
    test_eq_int("kill with an unknown pid gets -32004 before the signal is looked at",
                err_code(r), SBX_E_NO_PROCESS);
    json_decref(r);

    errors_state_hook_limits(c);
    cn_close(c);
}

/* Strings that name things may not hide a NUL; integers may not wrap. */
static void test_strictness(void)
{
    conn *c = cn_open(sock);
    json_t *r;

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\\u0000x\"}");
    test_eq_int("a method name with NUL gets -32602, not a ping", err_code(r),
                SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s}", "provider", "duktape", "id", "nul1"));
    test_eq_str("create a sandbox for the strictness tests", res_str(r, "status"),
                "running");
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sandbox.get\","
                    "\"params\":{\"id\":\"nul1\\u0000zz\"}}");
    test_eq_int("a sandbox id with NUL gets -32602, it does not resolve to its prefix",
                err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"sandbox.set_env\","
                    "\"params\":{\"id\":\"nul1\",\"env\":{\"A\":\"x\\u0000y\"}}}");
    test_eq_int("an env value with NUL gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = raw_line(
        c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"process.exec\","
           "\"params\":{\"sandbox\":\"nul1\",\"command\":\"1\",\"cwd\":\"/a\\u0000b\"}}");
    test_eq_int("a cwd with NUL gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = raw_line(c, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"sandbox.create\","
                    "\"params\":{\"tools\":[\"a\\u0000b\"]}}");
    test_eq_int("a tool name with NUL gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "nul1", "command", "1+1"));
    test_eq_int("pid 1 exists", res_int(r, "pid"), 1);
    json_decref(r);
    r = cn_call(
        c, "process.wait",
        json_pack("{s:s, s:I}", "sandbox", "nul1", "pid", (json_int_t)4294967297LL));
    test_eq_int("pid 2^32+1 gets -32602 and does not alias pid 1", err_code(r),
                SBX_E_PARAMS);
    json_decref(r);
    r = cn_call(c, "process.wait", json_pack("{s:s, s:i}", "sandbox", "nul1", "pid", -1));
    test_eq_int("a negative pid gets -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "nul1")));
    cn_close(c);
}

/* A batch whose first member finishes last (an exec that runs ~100 ms while
 * the pings behind it answer at once): the reply still lists the answers in
 * request order, skips notifications, and an answer arriving early waits for
 * the members before it. */
static void test_batch_order(void)
{
    conn *c = cn_open(sock);
    json_t *r = cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "border"));
    test_eq_str("create a sandbox for the batch order test", res_str(r, "status"),
                "running");
    json_decref(r);
    const char *batch =
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"process.exec\",\"params\":"
        "{\"sandbox\":\"border\",\"command\":\"var t=Date.now();"
        "while(Date.now()-t<100){}; 'slow'\"}},"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"daemon.ping\"},"
        "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"},"
        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"process.exec\",\"params\":"
        "{\"sandbox\":\"border\",\"command\":\"'queued'\"}},"
        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"daemon.ping\"},"
        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"nope\"}]\n";
    cn_send_raw(c, batch, strlen(batch));
    /* process.exit notifications may come first: the batch's reply is the array */
    r = cn_read(c, 5000);
    for (int k = 0; k < 8 && r && !json_is_array(r); k++) {
        json_decref(r);
        r = cn_read(c, 5000);
    }
    test_eq_int("batch with a slow first member: one answer per request",
                (long long)json_array_size(r), 5);
    int in_order = json_is_array(r);
    for (size_t i = 0; in_order && i < json_array_size(r); i++)
        in_order = json_integer_value(json_object_get(json_array_get(r, i), "id")) ==
                   (json_int_t)i + 1;
    test_cond("batch answers in request order although member 1 finished last", in_order);
    test_eq_str("the slow exec's own answer is in slot 1",
                json_string_value(json_object_get(
                    json_object_get(json_array_get(r, 0), "result"), "result")),
                "slow");
    test_eq_int("the unknown method's -32601 is in the last slot",
                err_code(json_array_get(r, 4)), SBX_E_METHOD);
    json_decref(r);
    test_cond("the session serves a plain call after the batch", ping_ok());
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "border")));
    cn_close(c);
}

/* start_token: process.started names the pid before any output and before
 * the result (what sbxctl mcp relies on to cancel an exec it has no result
 * of); a token that is not a 1..128-byte string is -32602. */
static void test_start_token(void)
{
    conn *c = cn_open(sock);
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "stok")));
    json_t *r =
        cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "stok", "command",
                          "print('one'); print('two'); 3", "start_token", "tk-1"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    long started = -1, first_out = -1;
    size_t i;
    json_t *n;
    json_array_foreach(c->notes, i, n) {
        const char *meth = json_string_value(json_object_get(n, "method"));
        json_t *p = json_object_get(n, "params");
        if (json_integer_value(json_object_get(p, "pid")) != pid)
            continue;
        if (!strcmp(meth, "process.started") && started < 0 &&
            !strcmp(json_string_value(json_object_get(p, "token")), "tk-1") &&
            !strcmp(json_string_value(json_object_get(p, "sandbox")), "stok"))
            started = (long)i;
        if (!strcmp(meth, "process.output") && first_out < 0)
            first_out = (long)i;
    }
    test_cond("start_token: process.started with the token, the sandbox and the pid",
              started >= 0);
    test_cond("start_token: process.started precedes the process's output",
              started >= 0 && first_out > started);
    json_array_clear(c->notes);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "stok", "command", "1"));
    int none = 1;
    json_array_foreach(c->notes, i, n)
        none &= strcmp(json_string_value(json_object_get(n, "method")),
                       "process.started") != 0;
    test_cond("no start_token: no process.started", none && res_int(r, "pid") > 0);
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:i}", "sandbox", "stok", "command", "1",
                          "start_token", 7));
    test_eq_int("start_token: a number is -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "stok", "command", "1",
                          "start_token", ""));
    test_eq_int("start_token: an empty one is -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "stok")));
    cn_close(c);
}

/* A second uid: sees nothing of root's, can't take its ids. */
static void test_second_uid(void)
{
    conn *c = cn_open(sock);
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "roots")));
    int fds[2];
    if (pipe(fds) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (setgid(65534) < 0 || setuid(65534) < 0)
            _exit(3);
        conn *o = cn_open(sock);
        char res[8] = "00000";
        if (o) {
            json_t *r = cn_call(o, "sandbox.get", json_pack("{s:s}", "id", "roots"));
            res[0] = err_code(r) == SBX_E_NOT_FOUND ? '1' : '0';
            json_decref(r);
            r = cn_call(o, "sandbox.list", NULL);
            res[1] =
                json_array_size(json_object_get(res_of(r), "sandboxes")) == 0 ? '1' : '0';
            json_decref(r);
            r = cn_call(o, "process.exec",
                        json_pack("{s:s, s:s}", "sandbox", "roots", "command", "1"));
            res[2] = err_code(r) == SBX_E_NOT_FOUND ? '1' : '0';
            json_decref(r);
            r = cn_call(o, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "roots"));
            res[3] = err_code(r) == SBX_E_PERMISSION ? '1' : '0';
            json_decref(r);
            r = cn_call(o, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "nobodys"));
            res[4] = json_integer_value(json_object_get(res_of(r), "owner_uid")) == 65534
                         ? '1'
                         : '0';
            json_decref(r);
            cn_close(o);
        }
        if (write(fds[1], res, 5) != 5)
            _exit(4);
        _exit(0);
    }
    close(fds[1]);
    char res[8] = {0};
    if (read(fds[0], res, 5) != 5)
        res[0] = 'x';
    close(fds[0]);
    waitpid(pid, NULL, 0);
    test_cond("another uid gets -32000 for root's sandbox", res[0] == '1');
    test_cond("another uid's list does not show root's sandbox", res[1] == '1');
    test_cond("another uid cannot exec in root's sandbox", res[2] == '1');
    test_cond("another uid cannot take root's id (-32003)", res[3] == '1');
    test_cond("another uid owns what it creates", res[4] == '1');
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "nobodys"));
    test_eq_int("root (admin) sees the other uid's sandbox",
                json_integer_value(json_object_get(res_of(r), "owner_uid")), 65534);
    json_decref(r);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "nobodys")));
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "roots")));
    cn_close(c);
}

static void test_limits(void)
{
    conn *c = cn_open(sock);
    /* max_sandboxes_per_uid is 40 in the test config */
    int made = 0, limited = 0;
    char id[32];
    for (int i = 0; i < 45 && !limited; i++) {
        snprintf(id, sizeof(id), "lim%d", i);
        json_t *r = cn_call(
            c, "sandbox.create",
            json_pack("{s:s, s:s, s:b}", "provider", "duktape", "id", id, "start", 0));
        if (err_code(r) == SBX_E_LIMIT)
            limited = 1;
        else if (res_of(r))
            made++;
        json_decref(r);
    }
    test_cond("more sandboxes than max_sandboxes_per_uid get -32005",
              limited && made <= 40);
    for (int i = 0; i < made; i++) {
        snprintf(id, sizeof(id), "lim%d", i);
        json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
    }
    json_t *r = cn_call(c, "sandbox.list", NULL);
    test_eq_int("and they can all be destroyed again",
                json_array_size(json_object_get(res_of(r), "sandboxes")), 0);
    json_decref(r);
    cn_close(c);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
        return 2;
    }
    sock = argv[1];
    signal(SIGPIPE, SIG_IGN);
    test_framing();
    test_info();
    test_errors();
    test_strictness();
    test_batch_order();
    test_start_token();
    test_second_uid();
    test_limits();
    test_cond("the daemon still answers at the end", ping_ok());
    return test_report();
}
