/*
 * test_js_worker.c - the js isolate worker (sbxd-jsworker) on its own, driven
 * over a real socketpair: this test plays the daemon with raw channel frames
 * (proto/CHANNEL.md). Hardening, bad frames, credit, MORE frames both ways,
 * concurrent tool calls, late and unknown answers, snapshot/restore, RESET.
 * usage: test_js_worker [WORKER]   (default: sbxd-jsworker beside this
 * binary's directory, i.e. build/sbxd-jsworker for build/tests/test_js_worker)
 */
#include <errno.h>
#include <jansson.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbx_chan.h"
#include "testhelp.h"

#define TIMEOUT_MS 20000

static char worker[4096];

struct wk {
    pid_t pid;
    int fd;
};

struct frame {
    struct sbx_chan_hdr h;
    char *p; /* NUL-terminated */
};

static int start_env(struct wk *k, int drop, const char *env)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    fflush(stdout);
    k->pid = fork();
    if (k->pid < 0)
        return -1;
    if (k->pid == 0) {
        char fd[16];
        int f = dup(sv[1]); /* without CLOEXEC */
        snprintf(fd, sizeof(fd), "%d", f);
        if (env)
            putenv((char *)env);
        if (drop)
            execl(worker, "sbxd-jsworker", "--fd", fd, (char *)NULL);
        else
            execl(worker, "sbxd-jsworker", "--fd", fd, "--no-drop", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    k->fd = sv[0];
    return 0;
}

static int start(struct wk *k)
{
    return start_env(k, 0, NULL);
}

/* Starts the worker with --uid uid (the daemon's per-user worker uid). */
static int start_uid(struct wk *k, const char *uid)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    fflush(stdout);
    k->pid = fork();
    if (k->pid < 0)
        return -1;
    if (k->pid == 0) {
        char fd[16];
        int f = dup(sv[1]); /* without CLOEXEC */
        snprintf(fd, sizeof(fd), "%d", f);
        execl(worker, "sbxd-jsworker", "--fd", fd, "--uid", uid, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    k->fd = sv[0];
    return 0;
}

static int stop(struct wk *k)
{
    int st = -1;
    close(k->fd);
    waitpid(k->pid, &st, 0);
    return st;
}

static int read_timed(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, TIMEOUT_MS) <= 0)
            return -1;
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Next frame, or type 0 on EOF/timeout. */
static struct frame next(struct wk *k)
{
    struct frame f = {0};
    uint8_t h[SBX_CHAN_HDR];
    if (read_timed(k->fd, h, sizeof(h)) < 0 || sbx_chan_hdr_decode(&f.h, h) < 0) {
        f.h.type = 0;
        return f;
    }
    f.p = malloc(f.h.len + 1);
    if (f.h.len && read_timed(k->fd, f.p, f.h.len) < 0) {
        f.h.type = 0;
        return f;
    }
    f.p[f.h.len] = '\0';
    return f;
}

/* Next frame of type (others dropped, MORE joined into it). */
static struct frame wait_for(struct wk *k, uint8_t type)
{
    char *more = NULL;
    size_t more_len = 0;
    for (;;) {
        struct frame f = next(k);
        if (f.h.type == 0) {
            free(more);
            return f;
        }
        if (f.h.type == SBX_CHAN_MORE) {
            more = realloc(more, more_len + f.h.len + 1);
            memcpy(more + more_len, f.p, f.h.len);
            more_len += f.h.len;
            free(f.p);
            continue;
        }
        if (f.h.type == type) {
            if (more) {
                more = realloc(more, more_len + f.h.len + 1);
                memcpy(more + more_len, f.p, f.h.len);
                more[more_len + f.h.len] = '\0';
                f.h.len += (uint32_t)more_len;
                free(f.p);
                f.p = more;
            }
            return f;
        }
        free(more);
        more = NULL;
        more_len = 0;
        free(f.p);
    }
}

static void send_frame(struct wk *k, uint8_t type, uint32_t proc, const void *p,
                       size_t len)
{
    uint8_t h[SBX_CHAN_HDR];
    sbx_chan_hdr_encode(h, type, proc, (uint32_t)len);
    if (write(k->fd, h, sizeof(h)) != (ssize_t)sizeof(h) ||
        (len && write(k->fd, p, len) != (ssize_t)len))
        perror("send_frame");
}

static void send_json(struct wk *k, uint8_t type, uint32_t proc, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    send_frame(k, type, proc, s, strlen(s));
    free(s);
    json_decref(j);
}

static json_t *exit_of(struct wk *k)
{
    struct frame f = wait_for(k, SBX_CHAN_EXIT);
    json_t *j = f.h.type ? json_loads(f.p, 0, NULL) : NULL;
    free(f.p);
    return j;
}

static json_t *run(struct wk *k, uint32_t proc, const char *code)
{
    send_json(k, SBX_CHAN_SPAWN, proc, json_pack("{s:s}", "code", code));
    return exit_of(k);
}

static int result_is(json_t *rec, const char *want)
{
    json_t *v = json_object_get(rec, "result");
    char *s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int ok = s && strcmp(s, want) == 0;
    if (!ok)
        printf("      got %s, want %s\n", s ? s : "(none)", want);
    free(s);
    return ok;
}

static int status_field(pid_t pid, const char *key, char *out, size_t n)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int found = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0) {
            snprintf(out, n, "%s", line + strlen(key));
            found = 0;
            break;
        }
    fclose(f);
    return found;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_hello_and_hardening(void)
{
    struct wk k;
    int sanitized =
        getenv("SBX_NO_SECCOMP") || getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND");
    start_env(&k, geteuid() == 0, NULL);
    struct frame f = wait_for(&k, SBX_CHAN_HELLO);
    json_t *h = f.h.type ? json_loads(f.p, 0, NULL) : NULL;
    test_cond(
        "HELLO names agent jsc with no processes",
        h && strcmp(json_string_value(json_object_get(h, "agent")) ?: "", "jsc") == 0 &&
            json_array_size(json_object_get(h, "procs")) == 0);
    json_decref(h);
    free(f.p);
    char v[128];
    test_cond("no_new_privs is set",
              status_field(k.pid, "NoNewPrivs:", v, sizeof(v)) == 0 && atoi(v) == 1);
    if (sanitized)
        test_skip("the seccomp filter is installed",
                  "SBX_NO_SECCOMP / sanitizer / valgrind run");
    else
        test_cond("the seccomp filter is installed",
                  status_field(k.pid, "Seccomp:", v, sizeof(v)) == 0 && atoi(v) == 2);
    if (geteuid() == 0)
        test_cond("started as root it runs as nobody",
                  status_field(k.pid, "Uid:", v, sizeof(v)) == 0 && atoi(v) == 65534);
    else
        test_skip("started as root it runs as nobody", "not root");
    json_t *r = run(&k, 1, "return [typeof process, typeof require, 1 + 1]");
    test_cond("a hardened worker runs a program",
              result_is(r, "[\"undefined\",\"undefined\",2]"));
    json_decref(r);
    int st = stop(&k);
    test_cond("EOF on the channel: the worker exits 0",
              WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* --uid N: uid and gid N (the socket user's own worker uid); 0 is refused. */
static void test_worker_uid(void)
{
    struct wk k;
    char v[128];
    if (geteuid() != 0) {
        test_skip("--uid N runs the worker as uid and gid N", "not root");
        return;
    }
    start_uid(&k, "1879048198");
    struct frame f = wait_for(&k, SBX_CHAN_HELLO);
    free(f.p);
    int uid_ok = status_field(k.pid, "Uid:", v, sizeof(v)) == 0 && atol(v) == 1879048198;
    int gid_ok = status_field(k.pid, "Gid:", v, sizeof(v)) == 0 && atol(v) == 1879048198;
    json_t *r = run(&k, 1, "return 6 * 7");
    test_cond("--uid N runs the worker as uid and gid N, and it works",
              f.h.type == SBX_CHAN_HELLO && uid_ok && gid_ok && result_is(r, "42"));
    json_decref(r);
    stop(&k);
    start_uid(&k, "0");
    f = next(&k);
    test_cond("--uid 0 is refused with an ERROR frame",
              f.h.type == SBX_CHAN_ERROR && f.p && strstr(f.p, "uid 0") != NULL);
    free(f.p);
    stop(&k);
}

static void test_bad_frames(void)
{
    struct wk k;
    start(&k);
    free(wait_for(&k, SBX_CHAN_HELLO).p);
    send_frame(&k, SBX_CHAN_SPAWN, 1, "not json", 8);
    json_t *r = exit_of(&k);
    test_cond("a SPAWN that is not JSON: EXIT 126 with an error",
              json_integer_value(json_object_get(r, "exit_code")) == 126 &&
                  json_is_string(json_object_get(r, "error")));
    json_decref(r);
    send_json(&k, SBX_CHAN_SPAWN, 2, json_pack("{s:s}", "shell", "ls"));
    r = exit_of(&k);
    test_cond("a SPAWN without code: EXIT 126",
              json_integer_value(json_object_get(r, "exit_code")) == 126);
    json_decref(r);
    send_json(&k, SBX_CHAN_SPAWN, 3, json_pack("{s:s, s:[i]}", "code", "1", "tools", 5));
    r = exit_of(&k);
    test_cond("a SPAWN with bad tools: EXIT 126",
              json_integer_value(json_object_get(r, "exit_code")) == 126);
    json_decref(r);
    send_frame(&k, 0x6a, 0, "x", 1);
    struct frame f = wait_for(&k, SBX_CHAN_LOG);
    test_cond("an unknown frame type gets a LOG",
              f.h.type == SBX_CHAN_LOG && strstr(f.p, "unexpected"));
    free(f.p);
    send_json(&k, SBX_CHAN_TOOL_RESULT, 9,
              json_pack("{s:i, s:i}", "call", 1, "result", 1));
    send_frame(&k, SBX_CHAN_PING, 0, NULL, 0);
    f = wait_for(&k, SBX_CHAN_PONG);
    test_cond("a TOOL_RESULT for no program is ignored; PING still answered",
              f.h.type == SBX_CHAN_PONG);
    free(f.p);
    r = run(&k, 4, "return 'still fine'");
    test_cond("and the worker runs the next program", result_is(r, "\"still fine\""));
    json_decref(r);
    uint8_t bad[SBX_CHAN_HDR] = {SBX_CHAN_PING, 1, 0, 0};
    if (write(k.fd, bad, sizeof(bad)) < 0)
        perror("write");
    f = wait_for(&k, SBX_CHAN_ERROR);
    test_cond("a header with reserved bits: ERROR", f.h.type == SBX_CHAN_ERROR);
    free(f.p);
    int st = stop(&k);
    test_cond("and the worker exits 1", WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

static void test_credit(void)
{
    struct wk k;
    start(&k);
    free(wait_for(&k, SBX_CHAN_HELLO).p);
    send_json(
        &k, SBX_CHAN_SPAWN, 1,
        json_pack("{s:s, s:i}", "code",
                  "for (let i = 0; i < 10; i++) console.log('x'.repeat(99)); return 1",
                  "window", 300));
    size_t out = 0;
    struct frame f;
    for (;;) {
        struct pollfd p = {k.fd, POLLIN, 0};
        if (poll(&p, 1, 500) <= 0)
            break; /* blocked for credit */
        f = next(&k);
        if (f.h.type == SBX_CHAN_STDOUT)
            out += f.h.len;
        int ex = f.h.type == SBX_CHAN_EXIT || f.h.type == 0;
        free(f.p);
        if (ex)
            break;
    }
    test_cond("output stops at the window (300 bytes)", out == 300);
    uint8_t c[4];
    sbx_chan_put_u32(c, 10000);
    send_frame(&k, SBX_CHAN_CREDIT, 1, c, 4);
    json_t *r = NULL;
    for (;;) {
        f = next(&k);
        if (f.h.type == SBX_CHAN_STDOUT)
            out += f.h.len;
        if (f.h.type == SBX_CHAN_EXIT)
            r = json_loads(f.p, 0, NULL);
        int ex = f.h.type == SBX_CHAN_EXIT || f.h.type == 0;
        free(f.p);
        if (ex)
            break;
    }
    test_cond("CREDIT lets the rest out, then EXIT", out == 1000 && result_is(r, "1"));
    test_cond("the EXIT has the ten lines in logs",
              json_array_size(json_object_get(r, "logs")) == 10);
    json_decref(r);
    stop(&k);
}

/* Big arguments, error answers, and an answer after the program returned. */
static void tools_big_args_errors_late(struct wk *k)
{
    json_t *r;
    /* arguments over 1 MiB go out as MORE frames too */
    send_json(k, SBX_CHAN_SPAWN, 2,
              json_pack("{s:s, s:[s]}", "code",
                        "return await external_a('y'.repeat(2500000))", "tools", "a"));
    struct frame f = wait_for(k, SBX_CHAN_TOOL_CALL);
    json_t *c = json_loads(f.p ?: "", 0, NULL);
    test_cond("a TOOL_CALL of 2.5 MB arrives whole (MORE frames)",
              json_string_length(json_object_get(c, "args")) == 2500000);
    free(f.p);
    send_json(k, SBX_CHAN_TOOL_RESULT, 2,
              json_pack("{s:O, s:{s:i, s:s, s:s}}", "call", json_object_get(c, "call"),
                        "error", "code", 7, "message", "nope", "name", "RangeError"));
    json_decref(c);
    r = exit_of(k);
    test_cond(
        "an error answer rejects with an Error named as the tool's error",
        strcmp(json_string_value(json_object_get(json_object_get(r, "exception"), "name"))
                   ?: "",
               "RangeError") == 0 &&
            strcmp(json_string_value(
                       json_object_get(json_object_get(r, "exception"), "message"))
                       ?: "",
                   "nope") == 0);
    json_decref(r);

    /* a program that returns before its call is answered: the late answer is ignored */
    send_json(
        k, SBX_CHAN_SPAWN, 3,
        json_pack("{s:s, s:[s]}", "code", "external_a(1); return 'early'", "tools", "a"));
    f = wait_for(k, SBX_CHAN_TOOL_CALL);
    c = json_loads(f.p ?: "", 0, NULL);
    free(f.p);
    r = exit_of(k);
    test_cond("a program may return with a call in flight", result_is(r, "\"early\""));
    json_decref(r);
    send_json(k, SBX_CHAN_TOOL_RESULT, 3,
              json_pack("{s:O, s:i}", "call", json_object_get(c, "call"), "result", 1));
    json_decref(c);
    r = run(k, 4, "return 'next'");
    test_cond("and its late answer changes nothing", result_is(r, "\"next\""));
    json_decref(r);
}

static void test_tools_and_more(void)
{
    struct wk k;
    start(&k);
    free(wait_for(&k, SBX_CHAN_HELLO).p);
    send_json(&k, SBX_CHAN_SPAWN, 1,
              json_pack("{s:s, s:[s,s]}", "code",
                        "const r = await Promise.all([external_a(1), external_b_c(2)]);\n"
                        "return r",
                        "tools", "a", "b.c"));
    struct frame f1 = wait_for(&k, SBX_CHAN_TOOL_CALL),
                 f2 = wait_for(&k, SBX_CHAN_TOOL_CALL);
    json_t *c1 = json_loads(f1.p ?: "", 0, NULL), *c2 = json_loads(f2.p ?: "", 0, NULL);
    test_cond(
        "two TOOL_CALLs before any answer, with the original ids",
        c1 && c2 &&
            strcmp(json_string_value(json_object_get(c1, "name")) ?: "", "a") == 0 &&
            strcmp(json_string_value(json_object_get(c2, "name")) ?: "", "b.c") == 0);
    /* answer the second first; the first with a result over 1 MiB, in MORE frames */
    send_json(
        &k, SBX_CHAN_TOOL_RESULT, 1,
        json_pack("{s:O, s:s}", "call", json_object_get(c2, "call"), "result", "two"));
    size_t big = (3u << 20) + 123;
    char *s = malloc(big + 64);
    int n = snprintf(s, 64, "{\"call\":%lld,\"result\":\"",
                     (long long)json_integer_value(json_object_get(c1, "call")));
    memset(s + n, 'z', big);
    memcpy(s + n + big, "\"}", 2);
    size_t total = (size_t)n + big + 2, off = 0;
    while (total - off > SBX_CHAN_MAX_PAYLOAD) {
        send_frame(&k, SBX_CHAN_MORE, 1, s + off, SBX_CHAN_MAX_PAYLOAD);
        off += SBX_CHAN_MAX_PAYLOAD;
    }
    send_frame(&k, SBX_CHAN_TOOL_RESULT, 1, s + off, total - off);
    free(s);
    json_decref(c1);
    json_decref(c2);
    free(f1.p);
    free(f2.p);
    json_t *r = exit_of(&k);
    json_t *res = json_object_get(r, "result");
    test_cond("answers in any order; a 3 MiB result joined from MORE frames",
              json_array_size(res) == 2 &&
                  json_string_length(json_array_get(res, 0)) == big &&
                  strcmp(json_string_value(json_array_get(res, 1)) ?: "", "two") == 0);
    json_decref(r);

    tools_big_args_errors_late(&k);
    stop(&k);
}

static void test_state(void)
{
    struct wk k;
    start(&k);
    free(wait_for(&k, SBX_CHAN_HELLO).p);
    send_json(&k, SBX_CHAN_RESTORE, 0,
              json_pack("{s:{s:i, s:[i], s:s}}", "globals", "kept", 5, "list", 1, "Array",
                        "clobber"));
    send_json(&k, SBX_CHAN_SPAWN, 1,
              json_pack("{s:s, s:b}", "code", "kept++; return [kept, list, typeof Array]",
                        "persistent", 1));
    json_t *r = exit_of(&k);
    test_cond("RESTORE loads globals into the persistent global, never over a builtin",
              result_is(r, "[6,[1],\"function\"]"));
    json_decref(r);
    r = run(&k, 2, "return typeof kept");
    test_cond("a non-persistent program does not see them",
              result_is(r, "\"undefined\""));
    json_decref(r);
    send_frame(&k, SBX_CHAN_SNAPSHOT, 0, NULL, 0);
    struct frame f = wait_for(&k, SBX_CHAN_SNAP_DATA);
    json_t *snap = json_loads(f.p ?: "", 0, NULL);
    free(f.p);
    test_cond("SNAPSHOT gives the JSON-serializable globals",
              json_integer_value(
                  json_object_get(json_object_get(snap, "globals"), "kept")) == 6 &&
                  !json_object_get(json_object_get(snap, "globals"), "console"));
    json_decref(snap);
    send_frame(&k, SBX_CHAN_RESET, 0, NULL, 0);
    f = wait_for(&k, SBX_CHAN_HELLO);
    test_cond("RESET answers with a new HELLO", f.h.type == SBX_CHAN_HELLO);
    free(f.p);
    send_json(&k, SBX_CHAN_SPAWN, 3,
              json_pack("{s:s, s:b}", "code", "return typeof kept", "persistent", 1));
    r = exit_of(&k);
    test_cond("after RESET nothing of the old global is left",
              result_is(r, "\"undefined\""));
    json_decref(r);
    stop(&k);
}

/* A program that tampers with Promise still ends: its result is followed
 * through the then taken before it ran, and a then that throws ends the run
 * with the program's error, not its timeout. */
static void test_polluted_promise(void)
{
    struct wk k;
    start(&k);
    free(wait_for(&k, SBX_CHAN_HELLO).p);
    static const struct {
        const char *what, *code, *want;
    } cases[] = {
        {"a replaced Promise.prototype.then, then await: the result",
         "Promise.prototype.then = function () { return 7 };\nawait 0; return {x: 1}",
         "{\"x\":1}"},
        {"a throwing Promise.prototype.then, no await: the result",
         "Promise.prototype.then = function () { throw new Error('no') };\nreturn {x: 2}",
         "{\"x\":2}"},
    };
    json_t *r;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        r = run(&k, (uint32_t)i + 1, cases[i].code);
        test_cond(cases[i].what, result_is(r, cases[i].want));
        json_decref(r);
    }
    r = run(&k, 3,
            "Object.defineProperty(Promise.prototype, 'constructor',\n"
            "  {get() { throw new Error('ctor') }});\nawait 0; return 1");
    const char *msg =
        json_string_value(json_object_get(json_object_get(r, "exception"), "message"));
    test_cond("a throwing Promise constructor getter ends the run with its error",
              r && msg && strstr(msg, "ctor"));
    if (!(msg && strstr(msg, "ctor"))) {
        char *d = r ? json_dumps(r, JSON_COMPACT) : NULL;
        printf("      got %s\n", d ? d : "(no exit)");
        free(d);
    }
    json_decref(r);
    r = run(&k, 4, "return typeof Promise.prototype.then === 'function' && 1 + 1");
    test_cond("... and the next program's global is clean", result_is(r, "2"));
    json_decref(r);

    /* The prelude walks arguments and results with indexed loops: a program
     * that broke array iteration still calls its tools and returns objects. */
    send_json(
        &k, SBX_CHAN_SPAWN, 5,
        json_pack(
            "{s:s, s:[s]}", "code",
            "Array.prototype[Symbol.iterator] = function () { throw new Error('iter') };\n"
            "const r = await external_echo({a: 1, b: [2]}); return {got: r}",
            "tools", "echo"));
    struct frame f = wait_for(&k, SBX_CHAN_TOOL_CALL);
    json_t *c = json_loads(f.p ?: "", 0, NULL);
    json_t *args = json_object_get(c, "args");
    test_cond("a replaced array iterator: the tool call's arguments go whole",
              json_integer_value(json_object_get(args, "a")) == 1 &&
                  json_integer_value(json_array_get(json_object_get(args, "b"), 0)) == 2);
    send_json(&k, SBX_CHAN_TOOL_RESULT, 5,
              json_pack("{s:O, s:{s:b}}", "call", json_object_get(c, "call"), "result",
                        "ok", 1));
    json_decref(c);
    free(f.p);
    r = exit_of(&k);
    test_cond("... and an object result comes back",
              result_is(r, "{\"got\":{\"ok\":true}}"));
    json_decref(r);
    stop(&k);
}

static void test_nojit(void)
{
    struct wk k;
    start_env(&k, 0, "JSC_useJIT=false");
    free(wait_for(&k, SBX_CHAN_HELLO).p);
    json_t *r =
        run(&k, 1, "let s = 0; for (let i = 0; i < 100000; i++) s += i; return s");
    test_cond("JSC_useJIT=false (jit: false) runs programs", result_is(r, "4999950000"));
    json_decref(r);
    char v[64];
    if (getenv("SBX_NO_SECCOMP") || getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND"))
        test_skip("jit: false stacks a second filter (nothing may become executable)",
                  "SBX_NO_SECCOMP / sanitizer / valgrind run");
    else if (status_field(k.pid, "Seccomp_filters:", v, sizeof(v)) < 0)
        test_skip("jit: false stacks a second filter (nothing may become executable)",
                  "this kernel does not show Seccomp_filters");
    else
        test_cond("jit: false stacks a second filter (nothing may become executable)",
                  atoi(v) == 2);
    stop(&k);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1) {
        snprintf(worker, sizeof(worker), "%s", argv[1]);
    } else {
        char self[4096];
        snprintf(self, sizeof(self), "%s", argv[0]);
        snprintf(worker, sizeof(worker), "%s/../sbxd-jsworker", dirname(self));
    }
    if (access(worker, X_OK) != 0) {
        printf("no js worker at %s\n", worker);
        test_cond("the js worker binary exists", 0);
        return test_report();
    }
    if (getenv("SBX_VALGRIND"))
        /* this test runs under valgrind, the worker it execs does not */
        test_skip("sbxd-jsworker itself under valgrind",
                  "JavaScriptCore does not run under valgrind (JIT code, GC thread "
                  "suspension by signals); its C code is checked by make asan");
    test_hello_and_hardening();
    test_worker_uid();
    test_bad_frames();
    test_credit();
    test_tools_and_more();
    test_state();
    test_polluted_promise();
    test_nojit();
    return test_report();
}
