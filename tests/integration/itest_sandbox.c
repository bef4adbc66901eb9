/*
 * itest_sandbox.c - sandbox and process semantics on the Duktape provider,
 * against a real sbxd: lifecycle, env/cwd precedence, clone, hooks, snapshots,
 * timeouts, kill, stdin, attach and replay, tool calls, memory limits, and a
 * client that stops reading while a process prints 200 MB.
 * usage: itest_sandbox SOCKET
 */
#include <signal.h>

#include "itest.h"
#include "sbx/sbx.h"
#include "sbx_proto.h"
#include "testhelp.h"

static const char *sock;

/* Every sandbox here is Duktape's (the default provider is js). */
static json_t *create(conn *c, const char *id, json_t *extra)
{
    json_t *p = extra ? extra : json_object();
    json_object_set_new(p, "id", json_string(id));
    if (!json_object_get(p, "provider"))
        json_object_set_new(p, "provider", json_string("duktape"));
    return cn_call(c, "sandbox.create", p);
}

static json_t *exec_js(conn *c, const char *sb, const char *code)
{
    return cn_call(c, "process.exec",
                   json_pack("{s:s, s:s}", "sandbox", sb, "command", code));
}

static json_t *result_of_exec(json_t *r)
{
    return json_object_get(res_of(r), "result");
}

static void destroy(conn *c, const char *id)
{
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
}

static void test_lifecycle(conn *c)
{
    json_t *r = create(c, "life", json_pack("{s:{s:s}}", "env", "A", "1"));
    test_eq_str("create returns status running", res_str(r, "status"), "running");
    test_cond("create says reconnected false",
              json_is_false(json_object_get(res_of(r), "reconnected")));
    test_cond("sandbox has created_at and provider",
              json_is_string(json_object_get(res_of(r), "created_at")) &&
                  strcmp(res_str(r, "provider"), "duktape") == 0);
    json_decref(r);

    r = exec_js(c, "life", "console.log('hi'); 6*7");
    test_eq_int("exec returns the completion value 42",
                json_integer_value(result_of_exec(r)), 42);
    test_eq_str("exec returns stdout", res_str(r, "stdout"), "hi\n");
    test_eq_int("exec exit code 0", res_int(r, "exit_code"), 0);
    json_decref(r);

    r = exec_js(c, "life", "var counter = 10; counter");
    json_decref(r);
    r = exec_js(c, "life", "counter += 1; counter");
    test_eq_int("state persists across execs", json_integer_value(result_of_exec(r)), 11);
    json_decref(r);

    r = create(c, "life", NULL);
    test_cond("create with an existing id of mine reconnects",
              json_is_true(json_object_get(res_of(r), "reconnected")));
    json_decref(r);
    r = exec_js(c, "life", "counter");
    test_eq_int("and it is the same sandbox", json_integer_value(result_of_exec(r)), 11);
    json_decref(r);

    r = cn_call(c, "sandbox.stop", json_pack("{s:s}", "id", "life"));
    test_eq_str("stop gives status stopped", res_str(r, "status"), "stopped");
    json_decref(r);
    r = cn_call(c, "sandbox.stop", json_pack("{s:s}", "id", "life"));
    test_eq_str("stop is idempotent", res_str(r, "status"), "stopped");
    json_decref(r);
    r = cn_call(c, "sandbox.start", json_pack("{s:s}", "id", "life"));
    test_eq_str("start gives status running", res_str(r, "status"), "running");
    json_decref(r);
    r = cn_call(c, "sandbox.start", json_pack("{s:s}", "id", "life"));
    test_eq_str("start is idempotent", res_str(r, "status"), "running");
    json_decref(r);
    r = exec_js(c, "life", "counter");
    test_eq_int("global state survives stop/start", json_integer_value(result_of_exec(r)),
                11);
    json_decref(r);

    r = cn_call(c, "sandbox.list", NULL);
    int found = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(res_of(r), "sandboxes"), i, s)
        if (strcmp(json_string_value(json_object_get(s, "id")), "life") == 0)
            found = 1;
    test_cond("list shows the sandbox", found);
    json_decref(r);

    r = cn_call(c, "sandbox.list", json_pack("{s:s}", "status", "stopped"));
    test_eq_int("list filters by status",
                json_array_size(json_object_get(res_of(r), "sandboxes")), 0);
    json_decref(r);

    /* status notifications reached us */
    int saw_status = 0;
    json_array_foreach(c->notes, i, s)
        if (strcmp(json_string_value(json_object_get(s, "method")), "sandbox.status") ==
            0)
            saw_status = 1;
    test_cond("sandbox.status notifications are sent to the owner", saw_status);
    destroy(c, "life");

    json_decref(create(c, "fresh", json_pack("{s:b}", "fresh_isolate", 1)));
    json_decref(exec_js(c, "fresh", "var q = 1"));
    r = exec_js(c, "fresh", "typeof q");
    test_cond("fresh_isolate: no state between execs",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "undefined") == 0);
    json_decref(r);
    destroy(c, "fresh");
}

static void test_env_cwd(conn *c)
{
    json_t *r = create(c, "envs",
                       json_pack("{s:{s:s, s:s, s:s}, s:s}", "env", "A", "create", "B",
                                 "create", "D", "create", "working_dir", "/work"));
    json_decref(r);
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:s, s:s, s:n}}", "id", "envs", "env", "B", "runtime",
                          "C", "runtime", "D"));
    test_cond("set_env returns the merged env without removed keys",
              json_object_get(json_object_get(res_of(r), "env"), "D") == NULL &&
                  strcmp(json_string_value(
                             json_object_get(json_object_get(res_of(r), "env"), "B")),
                         "runtime") == 0);
    json_decref(r);
    r = cn_call(
        c, "process.exec",
        json_pack(
            "{s:s, s:s, s:{s:s}}", "sandbox", "envs", "command",
            "JSON.stringify([process.env.A, process.env.B, process.env.C, process.env.D, process.cwd])",
            "env", "C", "command"));
    const char *v = json_string_value(result_of_exec(r));
    test_cond("env precedence: create < set_env < command; null removes",
              v && strcmp(v, "[\"create\",\"runtime\",\"command\",null,\"/work\"]") == 0);
    if (v && strcmp(v, "[\"create\",\"runtime\",\"command\",null,\"/work\"]") != 0)
        printf("      got %s\n", v);
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "envs", "command", "process.cwd",
                          "cwd", "/elsewhere"));
    test_cond("a command's cwd beats working_dir",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "/elsewhere") == 0);
    json_decref(r);
    r = cn_call(
        c, "process.exec",
        json_pack("{s:s, s:s, s:s}", "sandbox", "envs", "command", "1", "cwd", "rel"));
    test_eq_int("a relative cwd is -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);

    /* clone: pending, inherits config including runtime env, overrides apply */
    r = cn_call(c, "sandbox.clone",
                json_pack("{s:s, s:s, s:{s:s}, s:s}", "id", "envs", "new_id", "envs2",
                          "env", "A", "clone", "working_dir", "/cl"));
    test_eq_str("clone is pending (no provider I/O until started)", res_str(r, "status"),
                "pending");
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "envs2", "command",
                          "JSON.stringify([process.env.A, process.env.B, process.cwd])"));
    v = json_string_value(result_of_exec(r));
    test_cond("an exec starts the clone, which inherits env with overrides",
              v && strcmp(v, "[\"clone\",\"runtime\",\"/cl\"]") == 0);
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "envs2"));
    test_eq_str("the clone is running after its first exec", res_str(r, "status"),
                "running");
    json_decref(r);
    destroy(c, "envs");
    destroy(c, "envs2");
}

static void test_hooks_instructions(conn *c)
{
    json_t *r = create(c, "hooks",
                       json_pack("{s:s, s:[s], s:s}", "on_start", "var booted = 'yes'",
                                 "tools", "search", "instructions_append", "EXTRA-TEXT"));
    test_eq_str("create with an on_start hook runs", res_str(r, "status"), "running");
    json_decref(r);
    r = exec_js(c, "hooks", "booted");
    test_cond("on_start ran before the first exec",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "yes") == 0);
    json_decref(r);
    r = cn_call(c, "sandbox.instructions", json_pack("{s:s}", "id", "hooks"));
    const char *t = res_str(r, "text");
    test_cond("instructions describe JavaScript and list the tools",
              strstr(t, "JavaScript") && strstr(t, "external_search"));
    test_cond("instructions_append extends the default", strstr(t, "EXTRA-TEXT") != NULL);
    json_decref(r);
    destroy(c, "hooks");
    r = create(c, "hooks2", json_pack("{s:s}", "instructions", "ONLY THIS"));
    json_decref(r);
    r = cn_call(c, "sandbox.instructions", json_pack("{s:s}", "id", "hooks2"));
    test_eq_str("instructions replace the default", res_str(r, "text"), "ONLY THIS");
    json_decref(r);
    destroy(c, "hooks2");
}

static void test_snapshot(conn *c)
{
    json_decref(create(c, "snap", NULL));
    json_decref(
        exec_js(c, "snap", "var s = {a: [1, 2], b: 'x'}; var f = function(){}; 1"));
    json_t *r = cn_call(c, "sandbox.snapshot", json_pack("{s:s}", "id", "snap"));
    const char *sid = res_str(r, "snapshot");
    char snapid[80];
    snprintf(snapid, sizeof(snapid), "%s", sid);
    test_cond("snapshot returns an id", strncmp(snapid, "snap-", 5) == 0);
    json_decref(r);
    r = create(c, "snap2", json_pack("{s:s}", "snapshot", snapid));
    test_eq_str("create from a snapshot", res_str(r, "status"), "running");
    json_decref(r);
    r = exec_js(c, "snap2", "JSON.stringify(s) + typeof f");
    test_cond("the snapshot restored the JSON-serializable globals",
              strcmp(json_string_value(result_of_exec(r)) ?: "",
                     "{\"a\":[1,2],\"b\":\"x\"}undefined") == 0);
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:i}", "sandbox", "snap2", "command", "while(1){}",
                          "timeout_ms", 200));
    json_decref(r);
    r = exec_js(c, "snap2", "typeof s");
    test_cond("after a timeout the isolate starts empty, not from the snapshot again",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "undefined") == 0);
    json_decref(r);
    r = create(c, "snap3", json_pack("{s:s}", "snapshot", "snap-nope"));
    test_eq_int("an unknown snapshot is -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);
    r = cn_call(c, "snapshot.list", json_pack("{s:s}", "provider", "duktape"));
    json_t *l = json_object_get(res_of(r), "snapshots");
    int listed = 0;
    size_t i;
    json_t *e;
    json_array_foreach(l, i, e)
        listed |=
            strcmp(json_string_value(json_object_get(e, "snapshot")), snapid) == 0 &&
            strcmp(json_string_value(json_object_get(e, "sandbox")), "snap") == 0 &&
            json_integer_value(json_object_get(e, "sandboxes")) == 1;
    test_cond("snapshot.list shows a Duktape snapshot, its source and its user", listed);
    json_decref(r);
    r = cn_call(c, "snapshot.delete", json_pack("{s:s}", "snapshot", snapid));
    test_eq_int("snapshot.delete of a snapshot in use is -32001", err_code(r),
                SBX_E_STATE);
    json_decref(r);
    destroy(c, "snap");
    destroy(c, "snap2");
    r = cn_call(c, "snapshot.delete", json_pack("{s:s}", "snapshot", snapid));
    test_cond("snapshot.delete", json_is_true(json_object_get(res_of(r), "deleted")));
    json_decref(r);
    r = create(c, "snap4", json_pack("{s:s}", "snapshot", snapid));
    test_eq_int("a deleted snapshot is gone (-32602 on create)", err_code(r),
                SBX_E_PARAMS);
    json_decref(r);
    r = cn_call(c, "snapshot.delete", json_pack("{s:s}", "snapshot", "snap-nope"));
    test_eq_int("snapshot.delete of an unknown id is -32000", err_code(r),
                SBX_E_NOT_FOUND);
    json_decref(r);
    r = cn_call(c, "snapshot.delete", json_pack("{s:i}", "snapshot", 5));
    test_eq_int("snapshot.delete with a bad param is -32602", err_code(r), SBX_E_PARAMS);
    json_decref(r);
}

/* spawn, process.list, kill and wait. */
static void procs_kill(conn *c)
{
    json_t *r;
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "procs", "command", "while(true){}"));
    int pid = (int)res_int(r, "pid");
    test_cond("spawn returns a pid at once", pid > 0);
    json_decref(r);
    r = cn_call(c, "process.list", json_pack("{s:s}", "sandbox", "procs"));
    int running = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(res_of(r), "processes"), i, p)
        if (json_integer_value(json_object_get(p, "pid")) == pid &&
            strcmp(json_string_value(json_object_get(p, "status")), "running") == 0)
            running = 1;
    test_cond("process.list shows it running", running);
    json_decref(r);
    r = cn_call(c, "process.kill",
                json_pack("{s:s, s:i}", "sandbox", "procs", "pid", pid));
    json_decref(r);
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:i}", "sandbox", "procs", "pid", pid));
    test_cond("kill with the default signal gives 137 and killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:i}", "sandbox", "procs", "pid", pid));
    test_eq_int("a second wait returns the same result", res_int(r, "exit_code"), 137);
    json_decref(r);
    r = cn_call(c, "process.kill",
                json_pack("{s:s, s:i}", "sandbox", "procs", "pid", pid));
    test_cond("killing a finished process is not an error and says so",
              json_is_true(json_object_get(res_of(r), "already_exited")));
    json_decref(r);
}

/* stdin: write, write base64, close; exec with stdin. */
static void procs_stdin(conn *c)
{
    json_t *r;
    int pid;
    r = cn_call(
        c, "process.spawn",
        json_pack(
            "{s:s, s:s}", "sandbox", "procs", "command",
            "var got = ''; var d; while ((d = read_stdin()) !== null) got += d; got.toUpperCase()"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    r = cn_call(
        c, "process.wait",
        json_pack("{s:s, s:i, s:i}", "sandbox", "procs", "pid", pid, "timeout_ms", 200));
    test_eq_int("wait with a timeout on a running process gives -32001", err_code(r),
                SBX_E_STATE);
    json_decref(r);
    json_decref(cn_call(
        c, "process.write",
        json_pack("{s:s, s:i, s:s}", "sandbox", "procs", "pid", pid, "data", "hello ")));
    json_decref(cn_call(c, "process.write",
                        json_pack("{s:s, s:i, s:s}", "sandbox", "procs", "pid", pid,
                                  "data_b64", "d29ybGQ=")));
    json_decref(cn_call(c, "process.close_stdin",
                        json_pack("{s:s, s:i}", "sandbox", "procs", "pid", pid)));
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:i}", "sandbox", "procs", "pid", pid));
    test_cond("stdin round trip (write, write base64, close)",
              strcmp(json_string_value(json_object_get(res_of(r), "result")) ?: "",
                     "HELLO WORLD") == 0);
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "procs", "command",
                          "read_stdin()", "stdin", "given"));
    test_cond("exec with a stdin param",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "given") == 0);
    json_decref(r);
}

static void procs_output(conn *c)
{
    json_t *r;
    /* exec output cap: exec_output_bytes is 1 MiB in the test config */
    json_array_clear(c->notes);
    r = exec_js(
        c, "procs",
        "var s = new Array(1025).join('x'); for (var i = 0; i < 2048; i++) console.log(s); 1");
    test_cond("exec output over the cap is truncated",
              json_is_true(json_object_get(res_of(r), "truncated")) &&
                  json_string_length(json_object_get(res_of(r), "stdout")) <= 1048576);
    int xpid = (int)res_int(r, "pid");
    json_decref(r);
    test_cond("while notifications carry every byte",
              notes_output(c, xpid, "stdout", NULL, 0) == 2048u * 1025u);

    r = exec_js(c, "procs", "console.log('\\u00e9\\ud83d\\ude00'); 0");
    test_eq_str("non-ASCII output arrives as valid UTF-8", res_str(r, "stdout"),
                "\xc3\xa9\xf0\x9f\x98\x80\n");
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:b}", "sandbox", "procs", "command",
                          "console.log('quiet')", "stream", 0));
    int qpid = (int)res_int(r, "pid");
    json_decref(r);
    test_cond("stream:false sends no notifications",
              notes_output(c, qpid, "stdout", NULL, 0) == 0);
}

static void test_processes(conn *c)
{
    json_decref(create(c, "procs", NULL));
    json_t *r =
        cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:i}", "sandbox", "procs", "command",
                          "console.log('before'); while (true) {}", "timeout_ms", 300));
    test_eq_int("an infinite loop times out with exit code 124", res_int(r, "exit_code"),
                124);
    test_cond("timed_out and killed are true",
              json_is_true(json_object_get(res_of(r), "timed_out")) &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    test_eq_str("output printed before the loop is kept", res_str(r, "stdout"),
                "before\n");
    test_cond("the result says the isolate was reset",
              json_is_true(json_object_get(res_of(r), "isolate_reset")));
    json_decref(r);
    r = exec_js(c, "procs", "1+1");
    test_eq_int("the sandbox keeps serving after a timeout",
                json_integer_value(result_of_exec(r)), 2);
    json_decref(r);

    procs_kill(c);
    procs_stdin(c);
    r = exec_js(c, "procs", "throw new RangeError('out')");
    json_t *ex = json_object_get(res_of(r), "exception");
    test_cond(
        "an uncaught error exits 1 with name and message",
        res_int(r, "exit_code") == 1 &&
            strcmp(json_string_value(json_object_get(ex, "name")) ?: "", "RangeError") ==
                0 &&
            strcmp(json_string_value(json_object_get(ex, "message")) ?: "", "out") == 0);
    test_cond("and a stack", json_is_string(json_object_get(ex, "stack")));
    json_decref(r);

    r = exec_js(c, "procs", "console.error('to stderr'); console.warn('w')");
    test_eq_str("console.error and warn go to stderr", res_str(r, "stderr"),
                "to stderr\nw\n");
    json_decref(r);

    procs_output(c);
    destroy(c, "procs");
}

static void test_memory(conn *c)
{
    json_decref(create(c, "mem", json_pack("{s:i}", "memory_limit_mb", 32)));
    json_decref(exec_js(c, "mem", "var keep = 5"));
    /* distinct 1 MiB strings: Duktape interns equal ones */
    json_t *r = cn_call_t(
        c, 60000, "process.exec",
        json_pack("{s:s, s:s}", "sandbox", "mem", "command",
                  "var a = []; while (true) a.push('x'.repeat(1 << 20) + a.length)"));
    const char *e = res_str(r, "error");
    test_cond("a memory bomb is stopped with a clear error",
              res_int(r, "exit_code") != 0 && strstr(e, "memory") != NULL);
    if (!strstr(e, "memory"))
        printf("      got %s\n", json_dumps(res_of(r), 0));
    test_cond("the result says the isolate was reset",
              json_is_true(json_object_get(res_of(r), "isolate_reset")));
    json_decref(r);
    r = exec_js(c, "mem", "typeof keep");
    test_cond("the next exec runs on a fresh isolate",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "undefined") == 0);
    json_decref(r);
    destroy(c, "mem");
}

static json_t *tool_impl(const char *name, json_t *args, int *code, const char **msg)
{
    if (strcmp(name, "add") == 0)
        return json_integer(json_integer_value(json_object_get(args, "a")) +
                            json_integer_value(json_object_get(args, "b")));
    *code = 7;
    *msg = "tool exploded";
    return NULL;
}

static void test_tools(conn *c)
{
    c->tool = tool_impl;
    json_decref(create(c, "tools", json_pack("{s:[s, s]}", "tools", "add", "boom")));
    json_t *r = exec_js(c, "tools", "external_add({a: 20, b: 22})");
    test_eq_int("a tool call round-trips through the session",
                json_integer_value(result_of_exec(r)), 42);
    json_decref(r);
    r = exec_js(c, "tools", "try { external_boom({}); 'no' } catch (e) { e.message }");
    test_cond("a tool error is thrown inside the isolate",
              strstr(json_string_value(result_of_exec(r)) ?: "", "tool exploded") !=
                  NULL);
    json_decref(r);
    r = exec_js(c, "tools", "typeof external_other");
    test_cond("tools that were not declared do not exist",
              strcmp(json_string_value(result_of_exec(r)) ?: "", "undefined") == 0);
    json_decref(r);
    c->tool = NULL;
    destroy(c, "tools");
}

/* Gathers process.output of (pid, stdout): the bytes, and how many chunks
 * came as data and as data_b64. Returns the byte count. */
static size_t gather_output(conn *c, int pid, char *out, size_t max, int *n_text,
                            int *n_b64)
{
    size_t n = 0, i;
    json_t *m;
    *n_text = *n_b64 = 0;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") !=
                0 ||
            json_integer_value(json_object_get(p, "pid")) != pid)
            continue;
        char *d = NULL;
        size_t l = 0;
        if (sbx_output_decode(NULL, &d, &l, p) != SBX_OK)
            continue;
        if (json_object_get(p, "data"))
            (*n_text)++;
        else
            (*n_b64)++;
        if (n + l <= max)
            memcpy(out + n, d, l);
        n += l;
        free(d);
    }
    return n;
}

static int all_zero(const char *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (d[i])
            return 0;
    return 1;
}

static void encoding_two_followers(conn *c)
{
    static char buf[65536];
    int nt, nb, pid;
    json_t *r;
    size_t n;
    /* Two sessions follow one process: each gets its own spelling. */
    conn *b = cn_open(sock);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s, s:s}", "sandbox", "enc", "command",
                          "read_stdin(); console.log(new Array(3001).join('\\u0000')); 0",
                          "output_encoding", "auto"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    json_decref(cn_call(b, "process.attach",
                        json_pack("{s:s, s:i}", "sandbox", "enc", "pid", pid)));
    json_array_clear(c->notes);
    json_array_clear(b->notes);
    json_decref(cn_call(c, "process.close_stdin",
                        json_pack("{s:s, s:i}", "sandbox", "enc", "pid", pid)));
    json_decref(cn_call(c, "process.wait",
                        json_pack("{s:s, s:i}", "sandbox", "enc", "pid", pid)));
    for (int i = 0; i < 20; i++) {
        json_t *m = cn_read(b, 100);
        if (!m)
            break;
        json_array_append_new(b->notes, m);
    }
    n = gather_output(c, pid, buf, sizeof(buf), &nt, &nb);
    test_cond("the auto follower gets base64", n == 3001 && nb > 0 && nt == 0);
    n = gather_output(b, pid, buf, sizeof(buf), &nt, &nb);
    test_cond("the utf8 follower of the same process gets text",
              n == 3001 && nt > 0 && nb == 0);

    json_array_clear(b->notes);
    r = cn_call(b, "process.attach",
                json_pack("{s:s, s:i, s:s}", "sandbox", "enc", "pid", pid,
                          "output_encoding", "auto"));
    json_decref(r);
    n = gather_output(b, pid, buf, sizeof(buf), &nt, &nb);
    test_cond("attach with auto replays as base64",
              n == 3001 && nb > 0 && nt == 0 && all_zero(buf, 3000));
    cn_close(b);
}

/* output_encoding "auto": control-heavy chunks go as base64, text as text,
 * per follower. */
static void test_output_encoding(conn *c)
{
    static char buf[65536];
    int nt, nb;
    const char *nuls = "console.log(new Array(3001).join('\\u0000')); 0";
    json_decref(create(c, "enc", NULL));

    json_array_clear(c->notes);
    json_t *r = cn_call(c, "process.exec",
                        json_pack("{s:s, s:s, s:s}", "sandbox", "enc", "command", nuls,
                                  "output_encoding", "auto"));
    int pid = (int)res_int(r, "pid");
    size_t n = gather_output(c, pid, buf, sizeof(buf), &nt, &nb);
    test_cond("auto: NUL-heavy output arrives as data_b64", nb > 0 && nt == 0);
    test_cond("auto: the bytes are exact (3000 NULs and a newline)",
              n == 3001 && all_zero(buf, 3000) && buf[3000] == '\n');
    char *d = NULL;
    size_t l = 0;
    test_cond("auto: the exec result has stdout_b64 with the same bytes",
              !json_object_get(res_of(r), "stdout") &&
                  sbx_json_get_bytes(&d, &l, res_of(r), "stdout") == SBX_OK &&
                  l == 3001 && all_zero(d, 3000));
    free(d);
    json_decref(r);

    json_array_clear(c->notes);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "enc", "command", nuls));
    pid = (int)res_int(r, "pid");
    n = gather_output(c, pid, buf, sizeof(buf), &nt, &nb);
    test_cond("default (utf8): the same output arrives as data",
              nt > 0 && nb == 0 && n == 3001);
    test_cond("default: the result keeps stdout as text",
              json_string_length(json_object_get(res_of(r), "stdout")) == 3001);
    json_decref(r);

    json_array_clear(c->notes);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "enc", "command",
                          "console.log('plain \"text\"\\tand\\nlines'); 0",
                          "output_encoding", "auto"));
    pid = (int)res_int(r, "pid");
    n = gather_output(c, pid, buf, sizeof(buf), &nt, &nb);
    test_cond("auto: ordinary text still arrives as data",
              nt > 0 && nb == 0 && n == 23 &&
                  memcmp(buf, "plain \"text\"\tand\nlines\n", 23) == 0);
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "enc", "command", "1",
                          "output_encoding", "base64"));
    test_cond(
        "an unknown output_encoding is -32602 naming the param",
        err_code(r) == SBX_E_PARAMS &&
            strcmp(json_string_value(json_object_get(
                       json_object_get(json_object_get(r, "error"), "data"), "param"))
                       ?: "",
                   "output_encoding") == 0);
    json_decref(r);

    encoding_two_followers(c);
    destroy(c, "enc");
}

static void test_reattach(void)
{
    conn *a = cn_open(sock);
    json_decref(create(a, "bg", NULL));
    json_t *r = cn_call(
        a, "process.spawn",
        json_pack(
            "{s:s, s:s}", "sandbox", "bg", "command",
            "console.log('first'); var x = read_stdin(); console.log('got ' + x); 5"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    /* wait until the first line is out */
    for (int i = 0; i < 50; i++) {
        if (notes_output(a, pid, "stdout", NULL, 0) > 0)
            break;
        json_t *m = cn_read(a, 100);
        if (m)
            json_array_append_new(a->notes, m);
    }
    cn_close(a);

    conn *b = cn_open(sock);
    r = cn_call(b, "process.list", json_pack("{s:s}", "sandbox", "bg"));
    json_t *p0 = json_array_get(json_object_get(res_of(r), "processes"), 0);
    test_cond("a process outlives the session that started it",
              p0 && strcmp(json_string_value(json_object_get(p0, "status")), "running") ==
                        0);
    json_decref(r);
    r = cn_call(b, "process.attach",
                json_pack("{s:s, s:i, s:i}", "sandbox", "bg", "pid", pid, "offset", 0));
    test_cond("attach says running", json_is_true(json_object_get(res_of(r), "running")));
    json_decref(r);
    char buf[256] = "";
    notes_output(b, pid, "stdout", buf, sizeof(buf));
    test_cond("attach replays earlier output from offset 0", strcmp(buf, "first\n") == 0);
    json_array_clear(b->notes);
    r = cn_call(b, "process.attach",
                json_pack("{s:s, s:i, s:i, s:b}", "sandbox", "bg", "pid", pid, "offset",
                          3, "follow", 0));
    buf[0] = 0;
    notes_output(b, pid, "stdout", buf, sizeof(buf));
    test_cond("attach from an offset replays from there", strcmp(buf, "st\n") == 0);
    json_decref(r);
    json_array_clear(b->notes);
    json_decref(
        cn_call(b, "process.write",
                json_pack("{s:s, s:i, s:s}", "sandbox", "bg", "pid", pid, "data", "x")));
    json_decref(cn_call(b, "process.close_stdin",
                        json_pack("{s:s, s:i}", "sandbox", "bg", "pid", pid)));
    r = cn_call(b, "process.wait", json_pack("{s:s, s:i}", "sandbox", "bg", "pid", pid));
    test_eq_int("another session can drive and wait for it", res_int(r, "exit_code"), 0);
    json_decref(r);
    /* the live output and exit reached the attached session */
    for (int i = 0; i < 20; i++) {
        json_t *m = cn_read(b, 50);
        if (!m)
            break;
        json_array_append_new(b->notes, m);
    }
    buf[0] = 0;
    notes_output(b, pid, "stdout", buf, sizeof(buf));
    int saw_exit = 0;
    size_t i;
    json_t *m;
    json_array_foreach(b->notes, i, m)
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.exit") == 0)
            saw_exit = 1;
    test_cond("the attached session got live output and the exit",
              strcmp(buf, "got x\n") == 0 && saw_exit);
    if (strcmp(buf, "got x\n") != 0 || !saw_exit)
        printf("      got '%s' exit %d\n", buf, saw_exit);
    destroy(b, "bg");
    cn_close(b);
}

static long daemon_rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* While one session is flooded: another is served. */
static void other_session_served(void)
{
    json_t *r;
    double t0 = now_ms();
    conn *o = cn_open(sock);
    r = cn_call_t(o, 2000, "daemon.ping", NULL);
    test_cond("another session is served meanwhile",
              json_is_true(json_object_get(res_of(r), "pong")));
    printf("      ping while flooded: %.2f ms\n", now_ms() - t0);
    json_decref(r);
    cn_close(o);
}

/* A client that stops reading while a process prints 200 MB: the daemon
 * stops reading the process, memory stays bounded, others are served, and
 * every byte arrives in order once the client reads again. */
static void test_slow_client(void)
{
    conn *c = cn_open(sock);
    json_t *r = cn_call(c, "daemon.info", NULL);
    int dpid = (int)res_int(r, "pid");
    json_decref(r);
    json_decref(create(c, "flood", NULL));
    const long total = 200L * 1024 * 1024;
    /* lines of 64 KiB - 1 + newline */
    r = cn_call(
        c, "process.spawn",
        json_pack(
            "{s:s, s:s, s:i}", "sandbox", "flood", "command",
            "var s = new Array(65536).join('y'); for (var i = 0; i < 3200; i++) console.log(s); 'done'",
            "timeout_ms", 600000));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    long rss0 = daemon_rss_kb(dpid);
    usleep(3000 * 1000); /* not reading */
    long rss1 = daemon_rss_kb(dpid);
    printf("      daemon RSS before %ld kB, after 3 s of a stalled reader %ld kB\n", rss0,
           rss1);
    test_cond("daemon memory stays bounded while the client does not read",
              rss1 - rss0 < 64 * 1024);
    other_session_served();
    r = cn_call(c, "process.list", json_pack("{s:s}", "sandbox", "flood"));
    json_t *p0 = json_array_get(json_object_get(res_of(r), "processes"), 0);
    test_cond("the process is paused, not finished",
              p0 && json_integer_value(json_object_get(p0, "stdout_bytes")) < total);
    json_decref(r);
    /* Now read everything. */
    long got = 0, expect_off = 0;
    int in_order = 1, exited = 0;
    double deadline = now_ms() + 120000;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *pp = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") ==
                0 &&
            json_integer_value(json_object_get(pp, "pid")) == pid) {
            if (json_integer_value(json_object_get(pp, "offset")) != expect_off)
                in_order = 0;
            long l = (long)json_string_length(json_object_get(pp, "data"));
            got += l;
            expect_off += l;
        }
    }
    json_array_clear(c->notes);
    while (!exited && now_ms() < deadline) {
        m = cn_read(c, 10000);
        if (!m)
            break;
        json_t *pp = json_object_get(m, "params");
        const char *meth = json_string_value(json_object_get(m, "method"));
        if (meth && strcmp(meth, "process.output") == 0 &&
            json_integer_value(json_object_get(pp, "pid")) == pid) {
            if (json_integer_value(json_object_get(pp, "offset")) != expect_off)
                in_order = 0;
            long l = (long)json_string_length(json_object_get(pp, "data"));
            got += l;
            expect_off += l;
        } else if (meth && strcmp(meth, "process.exit") == 0 &&
                   json_integer_value(json_object_get(pp, "pid")) == pid) {
            exited = 1;
        }
        json_decref(m);
    }
    printf("      received %ld of %ld bytes\n", got, 3200L * 65536);
    test_cond("every byte arrives once the client reads again",
              got == 3200L * 65536 && exited);
    test_cond("in order, with contiguous offsets", in_order);
    destroy(c, "flood");
    cn_close(c);
}

static void test_lifetimes(conn *c)
{
    json_decref(create(c, "short", json_pack("{s:i}", "timeout_ms", 400)));
    json_decref(create(c, "idle", json_pack("{s:i}", "idle_timeout_ms", 400)));
    json_decref(create(c, "busy", json_pack("{s:i}", "idle_timeout_ms", 300)));
    json_t *r =
        cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "busy", "command", "read_stdin()"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    usleep(900 * 1000);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "short"));
    test_eq_int("a sandbox past its timeout_ms is destroyed", err_code(r),
                SBX_E_NOT_FOUND);
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "idle"));
    test_eq_int("an idle sandbox past idle_timeout_ms is destroyed", err_code(r),
                SBX_E_NOT_FOUND);
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "busy"));
    test_eq_str("a sandbox with a running process is not idle", res_str(r, "status"),
                "running");
    json_decref(r);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "busy", "pid", pid)));
    destroy(c, "busy");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
        return 2;
    }
    sock = argv[1];
    signal(SIGPIPE, SIG_IGN);
    conn *c = cn_open(sock);
    test_lifecycle(c);
    test_env_cwd(c);
    test_hooks_instructions(c);
    test_snapshot(c);
    test_processes(c);
    test_output_encoding(c);
    test_memory(c);
    test_tools(c);
    test_lifetimes(c);
    cn_close(c);
    test_reattach();
    if (!getenv("SBX_SKIP_FLOOD"))
        test_slow_client();
    else
        test_skip("a client that stops reading while a process prints 200 MB",
                  "SBX_SKIP_FLOOD (under valgrind it takes many minutes)");
    return test_report();
}
