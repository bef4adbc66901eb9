/*
 * itest_js.c - the js provider (JavaScriptCore) and the code-mode contract
 * of proto/PROTOCOL.md, item by item, against a real sbxd over its socket:
 * async body and result, TypeScript, console and logs, concurrent tool calls,
 * failures as results, timeouts, memory, no host globals, fresh and
 * persistent globals with snapshot/restore, kill while awaiting a tool, and
 * the per-uid worker pool.
 * usage: itest_js SOCKET
 */
#include <signal.h>
#include <sys/wait.h>

#include "itest.h"
#include "sbx_proto.h"
#include "testhelp.h"

static const char *sock;

static json_t *create_js(conn *c, const char *id, json_t *extra)
{
    json_t *p = extra ? extra : json_object();
    json_object_set_new(p, "id", json_string(id));
    json_object_set_new(p, "provider", json_string("js"));
    return cn_call(c, "sandbox.create", p);
}

static json_t *run_t(conn *c, const char *sb, const char *code, int timeout_ms)
{
    return cn_call_t(c, timeout_ms + 30000, "process.exec",
                     json_pack("{s:s, s:s, s:i}", "sandbox", sb, "command", code,
                               "timeout_ms", timeout_ms));
}

static json_t *run(conn *c, const char *sb, const char *code)
{
    return run_t(c, sb, code, 10000);
}

static void destroy(conn *c, const char *id)
{
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
}

static json_t *result(json_t *r)
{
    return json_object_get(res_of(r), "result");
}

static const char *exc_field(json_t *r, const char *k)
{
    const char *s =
        json_string_value(json_object_get(json_object_get(res_of(r), "exception"), k));
    return s ? s : "";
}

/* The JSON of the exec's result equals want (compact). */
static int result_is(json_t *r, const char *want)
{
    json_t *v = result(r);
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int ok = s && strcmp(s, want) == 0;
    if (!ok)
        printf("      result: %s (want %s)\n", s ? s : "(none)", want);
    free(s);
    return ok;
}

/* ---- 1, 2: async body, TypeScript ------------------------------------------------ */

static void test_body_and_ts(conn *c)
{
    json_t *r = create_js(c, "js-basic", NULL);
    test_cond("create a js sandbox", strcmp(res_str(r, "provider"), "js") == 0 &&
                                         strcmp(res_str(r, "status"), "running") == 0);
    json_decref(r);

    r = run(c, "js-basic", "return 1 + 2");
    test_cond("return 1 + 2 gives result 3",
              result_is(r, "3") && res_int(r, "exit_code") == 0);
    json_decref(r);
    r = run(c, "js-basic", "const v = await Promise.resolve(20); return v + 1");
    test_cond("top-level await works", result_is(r, "21"));
    json_decref(r);
    r = run(c, "js-basic", "let x = 1");
    test_cond("no return leaves result out", res_int(r, "exit_code") == 0 && !result(r));
    json_decref(r);
    r = run(
        c, "js-basic",
        "const f = (x) => x * 2; const {a, ...rest} = {a: 1, b: 2}; "
        "return `${f(21)}-${a}-${Object.keys(rest)}-${typeof Promise}-${[1, [2]].flat()}`");
    test_cond("modern JavaScript: arrows, destructuring, templates, Promise",
              result_is(r, "\"42-1-b-function-1,2\""));
    json_decref(r);

    r = run(c, "js-basic",
            "const double = (n: number): number => n * 2; return [1,2,3].map(double)");
    test_cond("TypeScript annotations are stripped", result_is(r, "[2,4,6]"));
    json_decref(r);
    r = run(
        c, "js-basic",
        "interface P { x: number; y?: string }\n"
        "type Q = P & { z: number[] };\n"
        "function first<T>(xs: T[], d?: T): T { return xs.length ? xs[0]! : (d as T); }\n"
        "const q = { x: 1, z: [2] } satisfies Q;\n"
        "class K { constructor(private n: number) {} get(): number { return this.n } }\n"
        "return [first<number>([7, 8]), q.x, new K(5).get(), (q as P).x]");
    test_cond("interfaces, aliases, generics, !, as, satisfies, optional params",
              result_is(r, "[7,1,5,1]"));
    json_decref(r);
    r = run(c, "js-basic",
            "const a = 1;\nconst b: number = 2;\nthrow new Error('line ' + b)");
    test_cond("stripping keeps line numbers",
              strstr(exc_field(r, "stack"), ":3:") != NULL);
    json_decref(r);
    destroy(c, "js-basic");
}

/* ---- 3: console -------------------------------------------------------------------- */

static void test_console(conn *c)
{
    json_decref(create_js(c, "js-console", NULL));
    json_t *r = run(c, "js-console",
                    "console.log('hello', {a: 1}); console.info(1, 'two', [3]);"
                    "console.debug(null, undefined, true); console.warn('careful');"
                    "console.error(new TypeError('bad')); return 0");
    json_t *logs = json_object_get(res_of(r), "logs");
    test_cond("console.log formats like node: hello {\"a\":1}",
              json_array_size(logs) == 5 &&
                  strcmp(json_string_value(json_array_get(logs, 0)), "hello {\"a\":1}") ==
                      0);
    test_cond("numbers, strings, arrays, null, undefined, booleans",
              strcmp(json_string_value(json_array_get(logs, 1)) ?: "", "1 two [3]") ==
                      0 &&
                  strcmp(json_string_value(json_array_get(logs, 2)) ?: "",
                         "null undefined true") == 0);
    test_cond("an Error prints as Name: message",
              strncmp(json_string_value(json_array_get(logs, 4)) ?: "", "TypeError: bad",
                      14) == 0);
    test_cond("log/info/debug stream on stdout",
              strcmp(res_str(r, "stdout"),
                     "hello {\"a\":1}\n1 two [3]\nnull undefined true\n") == 0);
    test_cond("warn/error stream on stderr",
              strncmp(res_str(r, "stderr"), "careful\nTypeError: bad", 22) == 0);
    json_decref(r);

    r = run(c, "js-console", "console.log('before'); throw new RangeError('after')");
    logs = json_object_get(res_of(r), "logs");
    test_cond("logs written before a failure are kept",
              json_array_size(logs) == 1 &&
                  strcmp(json_string_value(json_array_get(logs, 0)), "before") == 0 &&
                  strcmp(exc_field(r, "name"), "RangeError") == 0);
    json_decref(r);

    /* streamed as process.output too */
    json_array_clear(c->notes);
    r = run(c, "js-console", "console.log('streamed'); return 1");
    char buf[256] = "";
    notes_output(c, (int)res_int(r, "pid"), "stdout", buf, sizeof(buf));
    test_cond("console lines are streamed as process.output",
              strcmp(buf, "streamed\n") == 0);
    json_decref(r);
    destroy(c, "js-console");
}

/* ---- 4: tools ---------------------------------------------------------------------- */

static int tool_calls; /* tool.calls answered by echo_tool */

static json_t *echo_tool(const char *name, json_t *args, int *code, const char **msg)
{
    tool_calls++;
    if (strcmp(name, "fail") == 0) {
        *code = 42;
        *msg = "no such record";
        return NULL;
    }
    return json_pack("{s:s, s:O}", "tool", name, "args", args);
}

/* Sends an exec and answers the tool calls it makes only once `want` of them
 * are in flight, last first. Returns the exec response. */
static json_t *exec_answering_reversed(conn *c, const char *sb, const char *code,
                                       int want, int *seen_out, json_t **names_out)
{
    int id = ++c->next_id;
    json_t *req =
        json_pack("{s:s, s:i, s:s, s:{s:s, s:s}}", "jsonrpc", "2.0", "id", id, "method",
                  "process.exec", "params", "sandbox", sb, "command", code);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    cn_send_raw(c, s, strlen(s));
    cn_send_raw(c, "\n", 1);
    free(s);
    json_t *pending = json_array(), *names = json_array(), *resp = NULL;
    double deadline = now_ms() + 15000;
    while (!resp && now_ms() < deadline) {
        json_t *m = cn_read(c, 1000);
        if (!m)
            continue;
        const char *meth = json_string_value(json_object_get(m, "method"));
        if (meth && strcmp(meth, "tool.call") == 0) {
            json_array_append(names,
                              json_object_get(json_object_get(m, "params"), "name"));
            json_array_append_new(pending, m);
            if ((int)json_array_size(pending) == want) {
                for (int i = want - 1; i >= 0; i--) {
                    json_t *call = json_array_get(pending, (size_t)i);
                    json_t *params = json_object_get(call, "params");
                    json_t *ans = json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id",
                                            json_object_get(call, "id"), "result",
                                            json_object_get(params, "args"));
                    char *t = json_dumps(ans, JSON_COMPACT);
                    cn_send_raw(c, t, strlen(t));
                    cn_send_raw(c, "\n", 1);
                    free(t);
                    json_decref(ans);
                }
            }
            continue;
        }
        if (meth) {
            json_decref(m);
            continue;
        }
        if (json_integer_value(json_object_get(m, "id")) == id)
            resp = m;
        else
            json_decref(m);
    }
    *seen_out = (int)json_array_size(pending);
    json_decref(pending);
    *names_out = names;
    return resp ? resp : json_pack("{s:{s:i}}", "error", "code", 1);
}

static void test_tools(conn *c)
{
    json_decref(create_js(
        c, "js-tools",
        json_pack("{s:[s,s,s,s]}", "tools", "lookup", "my-tool", "fail", "a.b")));
    c->tool = echo_tool;
    json_t *r = run(c, "js-tools", "const x = await external_lookup({id: 1}); return x");
    test_cond("external_lookup round-trips through tool.call",
              result_is(r, "{\"tool\":\"lookup\",\"args\":{\"id\":1}}"));
    json_decref(r);
    r = run(c, "js-tools",
            "const p = external_lookup(1); return [p instanceof Promise, await p]");
    test_cond("external_* returns a Promise",
              result_is(r, "[true,{\"tool\":\"lookup\",\"args\":1}]"));
    json_decref(r);
    r = run(
        c, "js-tools",
        "return [typeof external_my_tool, (await external_my_tool('x')).tool, typeof external_a_b]");
    test_cond("my-tool is external_my_tool and tool.call names my-tool",
              result_is(r, "[\"function\",\"my-tool\",\"function\"]"));
    json_decref(r);
    r = run(
        c, "js-tools",
        "try { await external_fail({}) } catch (e) { return [e instanceof Error, e.name, "
        "e.message, e.code, e.tool] }");
    test_cond("a tool error is an Error with the tool's message",
              result_is(r, "[true,\"ToolError\",\"no such record\",42,\"fail\"]"));
    json_decref(r);

    const char *bad[] = {"await external_lookup({n: 1n})",
                         "BigInt",
                         "const o = {}; o.self = o; await external_lookup(o)",
                         "cycle",
                         "await external_lookup({f() {}})",
                         "function"};
    for (int i = 0; i < 6; i += 2) {
        int before = tool_calls;
        r = run(c, "js-tools", bad[i]);
        char name[96];
        snprintf(name, sizeof(name), "a %s argument is a TypeError saying so",
                 bad[i + 1]);
        test_cond(name,
                  strcmp(exc_field(r, "name"), "TypeError") == 0 &&
                      strstr(exc_field(r, "message"), "JSON-serializable") != NULL &&
                      res_int(r, "exit_code") == 1);
        snprintf(name, sizeof(name), "and no tool.call was sent for the %s", bad[i + 1]);
        test_cond(name, tool_calls == before);
        json_decref(r);
    }
    c->tool = NULL;

    int seen = 0;
    json_t *names = NULL;
    r = exec_answering_reversed(
        c, "js-tools",
        "const r = await Promise.all([external_lookup(1), external_my_tool(2), "
        "external_lookup(3)]); return r",
        3, &seen, &names);
    test_cond("Promise.all sends all three tool.calls before any answer", seen == 3);
    test_cond("answers in reverse order settle their own promises",
              result_is(r, "[1,2,3]"));
    json_decref(r);
    json_decref(names);
    destroy(c, "js-tools");
}

/* ---- 5: failures ------------------------------------------------------------------- */

static void test_failures(conn *c)
{
    json_decref(create_js(c, "js-fail", NULL));
    json_t *r = run(c, "js-fail", "function f() { throw new TypeError('boom') }\nf()");
    test_cond("an uncaught throw is exception {name, message, stack}",
              strcmp(exc_field(r, "name"), "TypeError") == 0 &&
                  strcmp(exc_field(r, "message"), "boom") == 0 &&
                  strstr(exc_field(r, "stack"), "TypeError: boom\n    at f (program:") !=
                      NULL &&
                  res_int(r, "exit_code") == 1);
    test_cond("and Uncaught TypeError: boom on stderr",
              strstr(res_str(r, "stderr"), "Uncaught TypeError: boom") != NULL);
    json_decref(r);
    r = run(c, "js-fail", "await Promise.reject(new Error('rejected'))");
    test_cond("an unhandled rejection of the body is an exception",
              strcmp(exc_field(r, "message"), "rejected") == 0);
    json_decref(r);
    r = run(c, "js-fail", "throw 'plain'");
    test_cond("a thrown string: name Error, message the string",
              strcmp(exc_field(r, "name"), "Error") == 0 &&
                  strcmp(exc_field(r, "message"), "plain") == 0);
    json_decref(r);
    r = run(c, "js-fail", "const = 1");
    test_cond("an unparsable program gives a SyntaxError",
              strcmp(exc_field(r, "name"), "SyntaxError") == 0 &&
                  strstr(exc_field(r, "message"), "(1:") != NULL);
    json_decref(r);
    r = run(c, "js-fail", "return {a: 1n}");
    test_cond("a BigInt return value gives a TypeError saying so",
              strcmp(exc_field(r, "name"), "TypeError") == 0 &&
                  strstr(exc_field(r, "message"),
                         "return value is not JSON-serializable") != NULL);
    json_decref(r);
    r = run(c, "js-fail", "const o = {}; o.o = o; return o");
    test_cond("a cyclic return value gives a TypeError",
              strcmp(exc_field(r, "name"), "TypeError") == 0);
    json_decref(r);
    r = run(c, "js-fail", "return 7");
    test_cond("the sandbox serves the next program", result_is(r, "7"));
    json_decref(r);
    destroy(c, "js-fail");
}

/* ---- 6, 7: time and memory --------------------------------------------------------- */

static int pid_alive(json_t *meta_resp, long *pid_out)
{
    json_t *m = json_object_get(res_of(meta_resp), "metadata");
    long pid = (long)json_integer_value(json_object_get(m, "worker_pid"));
    *pid_out = pid;
    return pid > 0 && kill((pid_t)pid, 0) == 0;
}

static void test_timeouts(conn *c)
{
    json_decref(create_js(c, "js-time", NULL));
    const char *loops[] = {"while (true) {}",
                           "a synchronous loop",
                           "for (;;) await null",
                           "a microtask loop",
                           "await new Promise(() => {})",
                           "a promise that never settles"};
    for (int i = 0; i < 6; i += 2) {
        /* Spawned, so the worker running it is the one sandbox.get names (a
         * non-persistent sandbox holds a worker only while it runs). */
        double t0 = now_ms();
        json_t *r = cn_call(c, "process.spawn",
                            json_pack("{s:s, s:s, s:i}", "sandbox", "js-time", "command",
                                      loops[i], "timeout_ms", 300));
        int ppid = (int)res_int(r, "pid");
        json_decref(r);
        json_t *g = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "js-time"));
        long before = 0;
        pid_alive(g, &before);
        json_decref(g);
        r = cn_call_t(c, 30000, "process.wait",
                      json_pack("{s:s, s:i}", "sandbox", "js-time", "pid", ppid));
        double dt = now_ms() - t0;
        char name[128];
        snprintf(name, sizeof(name),
                 "timeout of %s: TimeoutError, timed out after 300 ms, 124",
                 loops[i + 1]);
        test_cond(name,
                  res_int(r, "exit_code") == 124 &&
                      json_is_true(json_object_get(res_of(r), "timed_out")) &&
                      strcmp(exc_field(r, "name"), "TimeoutError") == 0 &&
                      strcmp(exc_field(r, "message"), "timed out after 300 ms") == 0 &&
                      dt < 5000);
        json_decref(r);
        /* the worker that ran it is really gone */
        int gone = 0;
        for (int k = 0; k < 100 && !gone; k++) {
            gone = before > 0 && kill((pid_t)before, 0) < 0;
            if (!gone)
                usleep(20000);
        }
        snprintf(name, sizeof(name), "and the worker process really ended (%s)",
                 loops[i + 1]);
        test_cond(name, gone);
    }
    json_t *r = run(c, "js-time", "return 'next'");
    test_cond("after timeouts the sandbox runs the next program",
              result_is(r, "\"next\""));
    json_decref(r);
    destroy(c, "js-time");
}

static void test_memory(conn *c)
{
    json_decref(create_js(c, "js-mem", json_pack("{s:i}", "memory_limit_mb", 96)));
    const char *bombs[] = {
        "const a = []; while (true) a.push(new Array(1 << 20).fill('x'))", "arrays",
        "var a = [], i = 0; for (;;) a.push(new Array(100000).join('xy') + (i++))",
        "distinct strings"};
    /* A sanitized build allocates several times slower, and at a load of 4-8
     * its distinct-strings bomb took more than 20 s to reach the limit (13.5 s
     * at load 1-2): what is checked there is that the limit ends it. */
    int slow = getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND");
    int timeout = slow ? 60000 : 20000;
    for (int i = 0; i < 4; i += 2) {
        double t0 = now_ms();
        json_t *r = run_t(c, "js-mem", bombs[i], timeout);
        double dt = now_ms() - t0;
        char name[128];
        snprintf(name, sizeof(name), "a %s bomb ends with memory limit exceeded (96 MiB)",
                 bombs[i + 1]);
        test_cond(name,
                  res_int(r, "exit_code") == 1 &&
                      strstr(res_str(r, "error"), "memory limit exceeded (96 MiB)") &&
                      strcmp(exc_field(r, "name"), "RangeError") == 0 &&
                      json_is_true(json_object_get(res_of(r), "isolate_reset")));
        /* The limit is the program's own memory (above the worker's baseline). */
        double bound = slow ? 45000 : 5000;
        snprintf(name, sizeof(name),
                 "the %s bomb ends within %.0f s (%d s timeout; %.1f s)", bombs[i + 1],
                 bound / 1000, timeout / 1000, dt / 1000);
        test_cond(name,
                  dt < bound && !json_is_true(json_object_get(res_of(r), "timed_out")));
        json_decref(r);
    }
    json_t *r = run(c, "js-mem", "return 'alive'");
    test_cond("the sandbox serves the next program after the memory limit",
              result_is(r, "\"alive\""));
    json_decref(r);
    /* ~24 MB each, well under 128 MiB, six in a row (150 MB in all): an
     * earlier program's garbage must not count against the next one */
    json_decref(create_js(c, "js-mem2", json_pack("{s:i}", "memory_limit_mb", 128)));
    int all = 1;
    for (int i = 0; i < 6; i++) {
        r = run(
            c, "js-mem2",
            "const a = []; for (let i = 0; i < 3; i++) a.push(new Array(1 << 20).fill(i)); "
            "return a.length");
        all &= res_int(r, "exit_code") == 0 && result_is(r, "3");
        json_decref(r);
    }
    test_cond(
        "programs under the limit, one after another, all run (garbage is collected)",
        all);
    destroy(c, "js-mem2");
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "js-mem"));
    test_cond("memory_limit_mb shows in the metadata",
              json_integer_value(json_object_get(json_object_get(res_of(r), "metadata"),
                                                 "memory_limit_mb")) == 96);
    json_decref(r);
    destroy(c, "js-mem");

    json_decref(create_js(c, "js-mem-big", json_pack("{s:i}", "memory_limit_mb", 60000)));
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "js-mem-big"));
    test_cond(
        "a client's memory_limit_mb is clamped to limits.max_memory_limit_mb",
        json_integer_value(
            json_object_get(json_object_get(res_of(r), "metadata"), "memory_limit_mb")) ==
            json_integer_value(json_object_get(
                json_object_get(json_object_get(res_of(r), "clamped"), "memory_limit_mb"),
                "max")));
    json_decref(r);
    destroy(c, "js-mem-big");
}

/* ---- 8: nothing of the host -------------------------------------------------------- */

static void test_no_host(conn *c)
{
    json_decref(create_js(c, "js-host", NULL));
    json_t *r = run(
        c, "js-host",
        "return [typeof process, typeof require, typeof fetch, typeof setTimeout, "
        "typeof XMLHttpRequest, typeof importScripts, typeof setInterval, "
        "typeof queueMicrotask === 'function' || typeof queueMicrotask === 'undefined']");
    test_cond(
        "process, require, fetch, setTimeout, XMLHttpRequest, importScripts are undefined",
        result_is(r, "[\"undefined\",\"undefined\",\"undefined\",\"undefined\","
                     "\"undefined\",\"undefined\",\"undefined\",true]"));
    json_decref(r);
    r = run(c, "js-host",
            "try { await import('fs'); return 'imported' } catch (e) { return 'no' }");
    test_cond("import() of a module fails", result_is(r, "\"no\""));
    json_decref(r);
    r = run(c, "js-host", "import fs from 'fs'\nreturn fs.readFileSync('/etc/passwd')");
    test_cond("a static import is a SyntaxError",
              strcmp(exc_field(r, "name"), "SyntaxError") == 0);
    json_decref(r);
    destroy(c, "js-host");
}

/* ---- 9: fresh and persistent globals ---------------------------------------------- */

static void test_state(conn *c)
{
    json_decref(create_js(c, "js-fresh", NULL));
    json_t *r = run(c, "js-fresh", "globalThis.leak = 1; undeclared = 2; return 0");
    json_decref(r);
    r = run(c, "js-fresh", "return [typeof leak, typeof undeclared]");
    test_cond("a fresh global per run by default",
              result_is(r, "[\"undefined\",\"undefined\"]"));
    json_decref(r);
    r = run(c, "js-fresh", "Array.prototype.evil = 1; return 0");
    json_decref(r);
    r = run(c, "js-fresh", "return typeof [].evil");
    test_cond("builtins changed by one run are pristine in the next",
              result_is(r, "\"undefined\""));
    json_decref(r);
    destroy(c, "js-fresh");

    r = create_js(c, "js-repl", json_pack("{s:b}", "persistent", 1));
    test_cond("persistent shows in the sandbox",
              json_is_true(json_object_get(res_of(r), "persistent")));
    json_decref(r);
    json_decref(run(c, "js-repl",
                    "globalThis.counter = 10; notes = ['a']; const local = 1; return 0"));
    r = run(c, "js-repl",
            "counter += 1; notes.push('b'); return [counter, notes, typeof local]");
    test_cond("persistent: globals stay between execs",
              result_is(r, "[11,[\"a\",\"b\"],\"undefined\"]"));
    json_decref(r);
    r = cn_call(c, "sandbox.snapshot", json_pack("{s:s}", "id", "js-repl"));
    const char *snap = res_str(r, "snapshot");
    json_t *r2 = create_js(c, "js-repl2",
                           json_pack("{s:b, s:s}", "persistent", 1, "snapshot", snap));
    json_decref(r2);
    json_decref(r);
    r = run(c, "js-repl2", "return [counter, notes]");
    test_cond("snapshot/restore carries the JSON-serializable globals",
              result_is(r, "[11,[\"a\",\"b\"]]"));
    json_decref(r);
    r = cn_call(c, "sandbox.stop", json_pack("{s:s}", "id", "js-repl"));
    json_decref(r);
    json_decref(cn_call(c, "sandbox.start", json_pack("{s:s}", "id", "js-repl")));
    r = run(c, "js-repl", "return counter");
    test_cond("persistent globals survive stop/start", result_is(r, "11"));
    json_decref(r);
    destroy(c, "js-repl");
    destroy(c, "js-repl2");
}

/* ---- 10: kill ---------------------------------------------------------------------- */

static void test_kill(conn *c)
{
    json_decref(create_js(c, "js-kill", json_pack("{s:[s]}", "tools", "slow")));
    c->tool = NULL;
    json_t *r =
        cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "js-kill", "command",
                          "console.log('waiting'); return await external_slow({})"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    /* wait for the tool.call, and do not answer it */
    int got = 0;
    for (int i = 0; i < 100 && !got; i++) {
        json_t *m = cn_read(c, 100);
        if (m && strcmp(json_string_value(json_object_get(m, "method")) ?: "",
                        "tool.call") == 0)
            got = 1;
        json_decref(m);
    }
    test_cond("the program is awaiting its tool call", got);
    double t0 = now_ms();
    r = cn_call(c, "process.kill",
                json_pack("{s:s, s:i}", "sandbox", "js-kill", "pid", pid));
    json_decref(r);
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:i}", "sandbox", "js-kill", "pid", pid));
    test_cond("kill ends it at once while it awaits a tool call",
              json_is_true(json_object_get(res_of(r), "killed")) &&
                  res_int(r, "exit_code") == 137 && now_ms() - t0 < 2000);
    json_decref(r);
    r = run(c, "js-kill", "return 'after kill'");
    test_cond("and the sandbox runs the next program", result_is(r, "\"after kill\""));
    json_decref(r);
    destroy(c, "js-kill");
}

/* ---- large tool results, both engines ---------------------------------------------- */

#define BIG_RESULT (3u << 20)

static json_t *big_tool(const char *name, json_t *args, int *code, const char **msg)
{
    char *s = malloc(BIG_RESULT + 1);
    memset(s, 'x', BIG_RESULT);
    s[BIG_RESULT] = '\0';
    json_t *v = json_string(s);
    free(s);
    return v;
}

static void test_big_results(conn *c)
{
    c->tool = big_tool;
    json_decref(create_js(c, "js-big", json_pack("{s:[s]}", "tools", "big")));
    /* generous timeouts: 3 MiB of JSON crawls under valgrind */
    json_t *r =
        run_t(c, "js-big", "const s = await external_big(); return s.length", 120000);
    test_cond("js: a 3 MiB tool result arrives whole", result_is(r, "3145728"));
    json_decref(r);
    r = run_t(c, "js-big", "return (await external_big()).slice(0, 3)", 120000);
    test_cond("js: and the next program gets its result too", result_is(r, "\"xxx\""));
    json_decref(r);
    r = run_t(c, "js-big", "const s = await external_big(); return s + s", 120000);
    test_cond("js: a 6 MiB return value comes back whole",
              json_string_length(result(r)) == 2 * BIG_RESULT);
    json_decref(r);
    destroy(c, "js-big");

    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s, s:[s]}", "id", "duk-big", "provider",
                                  "duktape", "tools", "big")));
    r = run_t(c, "duk-big", "external_big().length", 120000);
    test_cond("duktape: a 3 MiB tool result arrives whole", result_is(r, "3145728"));
    json_decref(r);
    destroy(c, "duk-big");
    c->tool = NULL;

    /* Beyond max_message_bytes the client cannot even send it: its line is
     * refused (-32007, the connection closes) and the waiting program fails
     * at once instead of hanging. */
    conn *a = cn_open(sock);
    json_decref(create_js(a, "js-huge", json_pack("{s:[s]}", "tools", "huge")));
    json_t *info = cn_call(a, "daemon.info", NULL);
    size_t max = (size_t)json_integer_value(
        json_object_get(json_object_get(res_of(info), "limits"), "max_message_bytes"));
    json_decref(info);
    r = cn_call(a, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "js-huge", "command",
                          "try { await external_huge() } catch (e) "
                          "{ return e.name + ': ' + e.message }"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    json_t *call = NULL;
    for (int i = 0; i < 100 && !call; i++) {
        json_t *m = cn_read(a, 100);
        if (m && strcmp(json_string_value(json_object_get(m, "method")) ?: "",
                        "tool.call") == 0)
            call = m;
        else
            json_decref(m);
    }
    if (call && max > 0 && max < (64u << 20)) {
        char head[64];
        int n = snprintf(head, sizeof(head),
                         "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"result\":\"",
                         json_string_value(json_object_get(call, "id")));
        size_t len = max + 1024;
        char *line = malloc(len + 4);
        memcpy(line, head, (size_t)n);
        memset(line + n, 'y', len - (size_t)n);
        memcpy(line + len, "\"}\n", 3);
        cn_send_raw(a, line, len + 3);
        free(line);
    }
    json_decref(call);
    double t0 = now_ms();
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:i, s:i}", "sandbox", "js-huge", "pid", pid,
                          "timeout_ms", 10000));
    test_cond("a result over max_message_bytes fails the call at once with an error",
              res_int(r, "exit_code") == 0 &&
                  strstr(json_string_value(result(r)) ?: "", "ToolError") != NULL &&
                  now_ms() - t0 < 5000);
    json_decref(r);
    cn_close(a);
    destroy(c, "js-huge");
}

/* Duktape: a bomb of distinct 200 KB strings ends with "memory limit
 * exceeded" (the worker gives up a second after the first refused
 * allocation at the latest), not at its timeout. */
static void test_duk_bomb(conn *c)
{
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s, s:i}", "id", "duk-bomb", "provider",
                                  "duktape", "memory_limit_mb", 16)));
    json_t *r = run_t(
        c, "duk-bomb",
        "var a=[],i=0; for(;;) a.push(new Array(100000).join(\"xy\")+(i++))", 60000);
    test_cond("duktape: the distinct-string bomb ends with memory limit exceeded",
              strstr(res_str(r, "error"), "memory limit exceeded (16 MiB)") != NULL &&
                  !json_is_true(json_object_get(res_of(r), "timed_out")));
    json_decref(r);
    r = run(c, "duk-bomb", "6*7");
    test_cond("duktape: and the sandbox runs the next program", result_is(r, "42"));
    json_decref(r);
    destroy(c, "duk-bomb");
}

/* ---- more execs than run at once --------------------------------------------------- */

/* The test daemon runs 16 processes per sandbox and queues 24 more. A js
 * sandbox runs one program at a time: a blocker that awaits an unanswered
 * tool call holds the rest in line. */
static void test_queue(conn *c)
{
    json_t *info = cn_call(c, "daemon.info", NULL);
    json_t *lim = json_object_get(res_of(info), "limits");
    int running =
        (int)json_integer_value(json_object_get(lim, "max_processes_per_sandbox"));
    int queued = (int)json_integer_value(json_object_get(lim, "max_queued_per_sandbox"));
    json_decref(info);
    if (running <= 0 || queued <= 0 || running + queued > 200) {
        test_skip("execs beyond max_processes_per_sandbox queue",
                  "limits not set for it");
        return;
    }
    json_decref(create_js(c, "js-queue", json_pack("{s:[s]}", "tools", "hold")));
    /* the blocker's tool.call goes to a connection that never answers it */
    conn *b = cn_open(sock);
    json_t *r = cn_call(b, "process.spawn",
                        json_pack("{s:s, s:s}", "sandbox", "js-queue", "command",
                                  "return await external_hold()"));
    int blocker = (int)res_int(r, "pid");
    json_decref(r);
    int ok = 1, last = 0;
    for (int i = 1; i < running + queued; i++) {
        char code[64];
        snprintf(code, sizeof(code), "return %d", i);
        r = cn_call(c, "process.spawn",
                    json_pack("{s:s, s:s}", "sandbox", "js-queue", "command", code));
        if (res_int(r, "pid") <= 0)
            ok = 0;
        last = (int)res_int(r, "pid");
        json_decref(r);
    }
    test_cond("processes past max_processes_per_sandbox are queued, not refused", ok);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "js-queue", "command",
                          "return 'one too many'"));
    test_cond(
        "past max_queued_per_sandbox more: -32005 naming max_queued_per_sandbox",
        err_code(r) == SBX_E_LIMIT &&
            strcmp(json_string_value(json_object_get(
                       json_object_get(json_object_get(r, "error"), "data"), "limit"))
                       ?: "",
                   "max_queued_per_sandbox") == 0);
    json_decref(r);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "js-queue", "pid", blocker)));
    r = cn_call_t(c, 60000, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "js-queue", "pid", last));
    char want[16];
    snprintf(want, sizeof(want), "%d", running + queued - 1);
    test_cond("and every queued one runs in turn once the blocker ends",
              res_int(r, "exit_code") == 0 && result_is(r, want));
    json_decref(r);
    cn_close(b);
    destroy(c, "js-queue");
}

/* ---- the jit option, instructions, the pool ---------------------------------------- */

static void test_options(conn *c)
{
    json_t *r = create_js(c, "js-nojit", json_pack("{s:{s:b}}", "options", "jit", 0));
    test_cond(
        "options.jit false shows in the metadata",
        json_is_false(json_object_get(json_object_get(res_of(r), "metadata"), "jit")));
    json_decref(r);
    r = run(c, "js-nojit", "let s = 0; for (let i = 0; i < 1e5; i++) s += i; return s");
    test_cond("and programs run without the JIT", result_is(r, "4999950000"));
    json_decref(r);
    destroy(c, "js-nojit");

    json_decref(create_js(c, "js-instr", json_pack("{s:[s]}", "tools", "my-tool")));
    r = cn_call(c, "sandbox.instructions", json_pack("{s:s}", "id", "js-instr"));
    test_cond("instructions describe code mode and the sanitised tool names",
              strstr(res_str(r, "text"), "async function") &&
                  strstr(res_str(r, "text"), "external_my_tool(args)"));
    json_decref(r);
    destroy(c, "js-instr");

    r = cn_call(c, "daemon.info", NULL);
    json_t *provs = json_object_get(res_of(r), "providers"), *p;
    size_t i;
    int found = 0;
    json_array_foreach(provs, i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), "js") == 0)
            found = json_is_true(json_object_get(p, "available")) &&
                    strcmp(json_string_value(
                               json_object_get(json_object_get(p, "info"), "engine"))
                               ?: "",
                           "javascriptcore") == 0;
    test_cond("daemon.info lists js on javascriptcore", found);
    json_decref(r);
}

/* A worker that ran code of one uid never serves another: run as another
 * uid in a child (root only) and compare worker pids. */
static void test_pool_uids(conn *c)
{
    if (geteuid() != 0) {
        test_skip("pool workers never cross uids",
                  "needs root to connect as another uid");
        return;
    }
    json_decref(create_js(c, "js-uid-a", NULL));
    json_decref(run(c, "js-uid-a", "return 1"));
    /* after a run: the worker that ran it (shared workers, js_share.c) */
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "js-uid-a"));
    long pa = (long)json_integer_value(
        json_object_get(json_object_get(res_of(r), "metadata"), "worker_pid"));
    json_decref(r);
    destroy(c, "js-uid-a"); /* the worker goes back to the pool, bound to root */
    int fds[2];
    if (pipe(fds) < 0)
        return;
    pid_t ch = fork();
    if (ch == 0) {
        close(fds[0]);
        if (setgid(65534) < 0 || setuid(65534) < 0)
            _exit(2);
        conn *o = cn_open(sock);
        if (!o)
            _exit(3);
        json_decref(create_js(o, "js-uid-b", NULL));
        json_decref(run(o, "js-uid-b", "return 2"));
        json_t *x = cn_call(o, "sandbox.get", json_pack("{s:s}", "id", "js-uid-b"));
        long pb = (long)json_integer_value(
            json_object_get(json_object_get(res_of(x), "metadata"), "worker_pid"));
        if (write(fds[1], &pb, sizeof(pb)) < 0)
            _exit(4);
        json_decref(x);
        json_decref(cn_call(o, "sandbox.destroy", json_pack("{s:s}", "id", "js-uid-b")));
        cn_close(o);
        _exit(0);
    }
    close(fds[1]);
    long pb = 0;
    if (read(fds[0], &pb, sizeof(pb)) != (ssize_t)sizeof(pb))
        pb = -1;
    close(fds[0]);
    waitpid(ch, NULL, 0);
    test_cond("another uid gets a different worker than the one root used",
              pa > 0 && pb > 0 && pb != pa);
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
    if (!c) {
        printf("cannot connect to %s\n", sock);
        return 1;
    }
    test_body_and_ts(c);
    test_console(c);
    test_tools(c);
    test_failures(c);
    test_timeouts(c);
    test_memory(c);
    test_no_host(c);
    test_state(c);
    test_kill(c);
    test_queue(c);
    test_big_results(c);
    test_duk_bomb(c);
    test_options(c);
    test_pool_uids(c);
    cn_close(c);
    return test_report();
}
