/*
 * itest_js_fresh.c - the js worker prepares the next run's global while it is
 * idle and keeps the programs it stripped (jsw_scache.c); neither may carry
 * anything of one run into the next. Against a real sbxd over its socket, on
 * one sandbox whose worker stays the same (checked by its pid): a program that
 * changes everything it can reach (globals, built-in prototypes, JSON,
 * Promise, console, its tool, a pending tool call, a late microtask) is
 * followed by one that looks for each change, on the same worker and on the
 * next sandbox that gets the worker after a destroy, and one that changes
 * things before and after awaiting a tool (the next global is made during
 * that await) is followed by the same checker; programs that differ by a byte
 * keep their own results through the cache; a program that does not parse is
 * reported each time; plain JavaScript (which skips the stripper) and
 * TypeScript type arguments keep their meanings.
 * usage: itest_js_fresh SOCKET
 */
#include <signal.h>
#include <unistd.h>

#include "itest.h"
#include "testhelp.h"

static const char *sock;

static json_t *echo(const char *name, json_t *args, int *code, const char **msg)
{
    /* {slow: true}: the answer takes 20 ms, so the worker is surely idle
     * (and makes the next run's global) while the program awaits it */
    if (json_is_true(json_object_get(args, "slow")))
        usleep(20000);
    return json_incref(args);
}

static json_t *run(conn *c, const char *sb, const char *code)
{
    return cn_call_t(c, 40000, "process.exec",
                     json_pack("{s:s, s:s, s:i}", "sandbox", sb, "command", code,
                               "timeout_ms", 10000));
}

static long worker_pid(conn *c, const char *sb)
{
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", sb));
    long pid = (long)json_integer_value(
        json_object_get(json_object_get(res_of(r), "metadata"), "worker_pid"));
    json_decref(r);
    return pid;
}

/* The JSON of the exec's result equals want (compact). */
static int result_is(json_t *r, const char *want)
{
    json_t *v = json_object_get(res_of(r), "result");
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int ok = s && strcmp(s, want) == 0;
    if (!ok)
        printf("      result: %s (want %s)\n", s ? s : "(none)", want);
    free(s);
    return ok;
}

/* Changes every shared thing a program can reach, leaves a tool call and a
 * microtask behind, and returns before they settle. */
static const char polluter[] =
    "Promise.resolve().then(() => { globalThis.late = 1 });\n"
    "external_echo({a: 2}).then(() => { Object.prototype.afterTool = 1 });\n"
    "globalThis.leak = 1;\n"
    "Object.defineProperty(globalThis, 'hidden', {value: 2, enumerable: false});\n"
    "Object.prototype.leakP = 3;\n"
    "Array.prototype.leakA = 4;\n"
    "String.prototype.trim = () => 'polluted';\n"
    "Function.prototype.leakF = 5;\n"
    "JSON.stringify = () => '\"polluted\"';\n"
    "JSON.parse = () => 'polluted';\n"
    "Promise.prototype.then = function () { return 'polluted' };\n"
    "Math.random = () => 42;\n"
    "console.log = () => { globalThis.logged = 1 };\n"
    "globalThis.external_echo = () => 'polluted';\n"
    "Error.prototype.toString = () => 'polluted';\n"
    "Object.freeze(Object.prototype);\n"
    "return 'done';";

/* Every change of the polluter, looked for from a fresh global; `leak` must
 * be all false and the real tool must answer. */
static const char checker[] =
    "const leak = {\n"
    "  global: 'leak' in globalThis || 'hidden' in globalThis,\n"
    "  late: 'late' in globalThis || 'logged' in globalThis || 'afterTool' in {},\n"
    "  objectProto: 'leakP' in {} || Object.isFrozen(Object.prototype),\n"
    "  arrayProto: 'leakA' in [],\n"
    "  stringProto: ' x '.trim() !== 'x',\n"
    "  functionProto: 'leakF' in function () {},\n"
    "  json: JSON.parse('[1]')[0] !== 1,\n"
    "  math: Math.random() === 42,\n"
    "  errorProto: String(new Error('e')) !== 'Error: e',\n"
    "};\n"
    "console.log('checked');\n"
    "const r = await external_echo({a: 1});\n"
    "return {leak, tool: r.a};";

static const char clean[] = "{\"leak\":{\"global\":false,\"late\":false,\"objectProto\":"
                            "false,\"arrayProto\":false,\"stringProto\":false,"
                            "\"functionProto\":false,\"json\":false,\"math\":false,"
                            "\"errorProto\":false},\"tool\":1}";

/* Runs the checker on sb: *clean_ok and *logs_ok stay 1 only if it found
 * nothing and its console line and tool are its own. */
static void check(conn *c, const char *sb, int *clean_ok, int *logs_ok)
{
    json_t *r = run(c, sb, checker);
    *clean_ok &= result_is(r, clean);
    json_t *logs = json_object_get(res_of(r), "logs");
    *logs_ok &= json_array_size(logs) == 1 &&
                strcmp(json_string_value(json_array_get(logs, 0)), "checked") == 0;
    json_decref(r);
}

static void test_prepared_global(conn *c)
{
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s, s:[s]}", "id", "jsf-a", "provider", "js",
                                  "tools", "echo")));
    long pid = 0;
    int polluted_ok = 1, clean_ok = 1, logs_ok = 1, same = 1;
    /* Several rounds: the first checker gets the global prepared right after
     * the polluter's run, the later ones globals prepared after checkers. The
     * worker is read after each run (a non-persistent sandbox holds one only
     * while it runs; an idle one of its last run is preferred). */
    for (int i = 0; i < 5; i++) {
        json_t *r = run(c, "jsf-a", polluter);
        polluted_ok &= result_is(r, "\"done\"");
        json_decref(r);
        if (i == 0)
            pid = worker_pid(c, "jsf-a");
        same &= pid > 0 && worker_pid(c, "jsf-a") == pid;
        check(c, "jsf-a", &clean_ok, &logs_ok);
        same &= worker_pid(c, "jsf-a") == pid;
    }
    test_cond("the polluting program runs (5 times)", polluted_ok);
    test_cond("the next run's prepared global has nothing of the polluter's run",
              clean_ok);
    test_cond("console and the tool of the next run are its own", logs_ok);
    test_cond("all of it on the same worker process", same);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "jsf-a")));
}

/* Changes half of what the polluter does, awaits a slow tool answer (the
 * worker makes the next run's global meanwhile: jsw_engine_idle), then the
 * other half, after that global exists, and one more tool call. */
static const char polluter_mid[] =
    "globalThis.leak = 1;\n"
    "Object.prototype.leakP = 3;\n"
    "String.prototype.trim = () => 'polluted';\n"
    "const r = await external_echo({a: 2, slow: true});\n"
    "Object.defineProperty(globalThis, 'hidden', {value: 2, enumerable: false});\n"
    "Array.prototype.leakA = 4;\n"
    "Function.prototype.leakF = 5;\n"
    "JSON.parse = () => 'polluted';\n"
    "Math.random = () => 42;\n"
    "console.log = () => { globalThis.logged = 1 };\n"
    "Error.prototype.toString = () => 'polluted';\n"
    "Promise.resolve().then(() => { globalThis.late = 1 });\n"
    "await external_echo({a: 3});\n"
    "Object.freeze(Object.prototype);\n"
    "return r.a === 2 ? 'done' : 'no answer';";

/* The next run's global is made while a program awaits a tool; what the
 * program does before and after that must not be in it. */
static void test_prepared_mid_run(conn *c)
{
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s, s:[s]}", "id", "jsf-m", "provider", "js",
                                  "tools", "echo")));
    int polluted_ok = 1, clean_ok = 1, logs_ok = 1;
    for (int i = 0; i < 5; i++) {
        json_t *r = run(c, "jsf-m", polluter_mid);
        polluted_ok &= result_is(r, "\"done\"");
        json_decref(r);
        check(c, "jsf-m", &clean_ok, &logs_ok);
    }
    test_cond("a program awaiting a slow tool, polluting around it, runs (5 times)",
              polluted_ok);
    test_cond("the global made during its await has nothing of it", clean_ok);
    test_cond("console and the tool of the run after it are its own", logs_ok);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "jsf-m")));
}

/* A destroyed sandbox's worker goes back to the pool with the global it
 * prepared after its last run; the next sandbox to get that worker must see
 * nothing of the polluter either. */
static void test_recycled_worker(conn *c)
{
    int same = 0, ok = 0;
    for (int attempt = 0; attempt < 10 && !same; attempt++) {
        json_decref(cn_call(c, "sandbox.create",
                            json_pack("{s:s, s:s, s:[s]}", "id", "jsf-r1", "provider",
                                      "js", "tools", "echo")));
        json_decref(run(c, "jsf-r1", polluter));
        long pid = worker_pid(c, "jsf-r1");
        json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "jsf-r1")));
        usleep(100 * 1000); /* a dedicated worker's HELLO after its RESET */
        json_decref(cn_call(c, "sandbox.create",
                            json_pack("{s:s, s:s, s:[s]}", "id", "jsf-r2", "provider",
                                      "js", "tools", "echo")));
        json_t *r = run(c, "jsf-r2", checker);
        if (pid > 0 && worker_pid(c, "jsf-r2") == pid) {
            same = 1;
            ok = result_is(r, clean);
        }
        json_decref(r);
        json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "jsf-r2")));
    }
    if (same)
        test_cond("a recycled worker's next sandbox sees nothing of the last one", ok);
    else
        test_skip("a recycled worker's next sandbox sees nothing of the last one",
                  "the pool never handed the same worker back in 10 tries");
}

/* Shared workers (js_share.c): two live non-persistent sandboxes of one uid
 * take turns on one worker process. A polluter in one and a checker in the
 * other, alternating: the checker's sandbox must see nothing, and both must
 * really have run on the same process (else the check says nothing). */
static void test_shared_worker(conn *c)
{
    const char *ids[] = {"jsf-s1", "jsf-s2"};
    for (int i = 0; i < 2; i++)
        json_decref(cn_call(c, "sandbox.create",
                            json_pack("{s:s, s:s, s:[s]}", "id", ids[i], "provider", "js",
                                      "tools", "echo")));
    int shared = 0, ok = 1;
    for (int i = 0; i < 6; i++) {
        json_t *r = run(c, "jsf-s1", polluter);
        json_decref(r);
        long p1 = worker_pid(c, "jsf-s1");
        r = run(c, "jsf-s2", checker);
        long p2 = worker_pid(c, "jsf-s2");
        if (p1 > 0 && p1 == p2) {
            shared++;
            ok &= result_is(r, clean);
        }
        json_decref(r);
    }
    if (shared)
        test_cond("a program of another sandbox on the same worker sees nothing of the "
                  "polluter's run",
                  ok);
    else
        test_skip("a program of another sandbox on the same worker sees nothing of the "
                  "polluter's run",
                  "the two sandboxes never ran on one worker (share_workers off?)");
    for (int i = 0; i < 2; i++)
        json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", ids[i])));
}

static void test_strip_cache(conn *c)
{
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", "jsf-b", "provider", "js")));
    int ok = 1;
    for (int i = 0; i < 20; i++) {
        json_t *r = run(c, "jsf-b", i % 2 ? "return 1" : "return 2");
        ok &= result_is(r, i % 2 ? "1" : "2");
        json_decref(r);
    }
    test_cond("programs a byte apart keep their own results (20 runs)", ok);

    ok = 1;
    for (int i = 0; i < 3; i++) {
        json_t *r = run(c, "jsf-b", "const n: number = 20; return (n as number) + 1;");
        ok &= result_is(r, "21");
        json_decref(r);
    }
    test_cond("the same TypeScript program gives the same result 3 times", ok);

    ok = 1;
    for (int i = 0; i < 3; i++) {
        json_t *r = run(c, "jsf-b", "return (;");
        const char *name = json_string_value(
            json_object_get(json_object_get(res_of(r), "exception"), "name"));
        ok &= name && strcmp(name, "SyntaxError") == 0 && res_int(r, "exit_code") == 1;
        json_decref(r);
    }
    test_cond("a program that does not parse is a SyntaxError every time", ok);

    /* Programs that parse as JavaScript skip the stripper, unless they may
     * hold type arguments, which JavaScript reads as comparisons. */
    static const struct {
        const char *code, *want;
    } both[] = {
        {"function id(x) { return x }\nreturn id<string>('a');", "\"a\""},
        {"function id(x) { return x }\nreturn id<string> /* c */ ('b');", "\"b\""},
        {"const tag = (s) => s[0];\nreturn tag<number>`c`;", "\"c\""},
        {"const a = 1, b = 2;\nreturn [a < b, b > a, a<b>a];", "[true,true,false]"},
        {"const m = new Map<string, number>([['k', 4]]);\nreturn m.get('k');", "4"},
    };
    ok = 1;
    for (size_t i = 0; i < sizeof(both) / sizeof(both[0]); i++) {
        json_t *r = run(c, "jsf-b", both[i].code);
        ok &= result_is(r, both[i].want);
        json_decref(r);
    }
    test_cond("type arguments are TypeScript's, comparisons JavaScript's", ok);

    /* State a program stores in a global of its run is gone the next run, even
     * for the very same program text (the cache holds text, not runs). */
    const char *counter = "globalThis.n = (globalThis.n || 0) + 1; return n;";
    ok = 1;
    for (int i = 0; i < 3; i++) {
        json_t *r = run(c, "jsf-b", counter);
        ok &= result_is(r, "1");
        json_decref(r);
    }
    test_cond("the same program run 3 times starts from nothing each time", ok);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "jsf-b")));
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
    c->tool = echo;
    test_prepared_global(c);
    test_prepared_mid_run(c);
    test_recycled_worker(c);
    test_shared_worker(c);
    test_strip_cache(c);
    cn_close(c);
    return test_report();
}
