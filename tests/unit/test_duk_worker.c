/*
 * test_duk_worker.c - the Duktape isolate worker, driven over a real
 * socketpair: each test forks a child that runs duk_worker_main() on one end
 * and plays the daemon on the other with raw channel frames.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "sbx_chan.h"
#include "testhelp.h"
#include "workers/duktape/duk_worker.h"
#include "workers/duktape/duk_worker_int.h"

#define TIMEOUT_MS (RUNNING_ON_VALGRIND ? 60000 : 10000)

struct wk {
    pid_t pid;
    int fd;
};

struct frame {
    struct sbx_chan_hdr h;
    uint8_t *p; /* NUL-terminated */
};

/* ---- the fake daemon -------------------------------------------------------- */

/* Forks a worker on sv[1]; we keep sv[0]. */
static int start_on(struct wk *k, int sv[2], const char *const *extra)
{
    fflush(stdout);
    fflush(stderr);
    k->pid = fork();
    if (k->pid < 0)
        return -1;
    if (k->pid == 0) {
        char fdbuf[16];
        char *argv[16];
        int argc = 0;

        close(sv[0]);
        snprintf(fdbuf, sizeof(fdbuf), "%d", sv[1]);
        argv[argc++] = (char *)"sbxd";
        argv[argc++] = (char *)"--worker";
        argv[argc++] = (char *)"--fd";
        argv[argc++] = fdbuf;
        while (extra && *extra && argc < 15)
            argv[argc++] = (char *)*extra++;
        argv[argc] = NULL;
        _exit(duk_worker_main(argc, argv));
    }
    close(sv[1]);
    k->fd = sv[0];
    return 0;
}

static int start_args(struct wk *k, const char *const *extra)
{
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return -1;
    return start_on(k, sv, extra);
}

static int start(struct wk *k)
{
    static const char *const nodrop[] = {"--no-drop", NULL};

    return start_args(k, nodrop);
}

/* Closes the channel and reaps the child; returns its wait status. */
static int stop(struct wk *k)
{
    int st = -1;

    if (k->fd >= 0)
        close(k->fd);
    k->fd = -1;
    if (waitpid(k->pid, &st, 0) < 0)
        return -1;
    return st;
}

static int read_timed(int fd, uint8_t *buf, size_t len, int timeout_ms)
{
    size_t got = 0;

    while (got < len) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        if (poll(&p, 1, timeout_ms) <= 0)
            return -1;
        r = read(fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return got == 0 && r == 0 ? 1 : -1;
        got += (size_t)r;
    }
    return 0;
}

/* 0 = frame, 1 = EOF, -1 = timeout or garbage. */
static int recv_frame(struct wk *k, struct frame *f, int timeout_ms)
{
    uint8_t hdr[SBX_CHAN_HDR];
    int r = read_timed(k->fd, hdr, sizeof(hdr), timeout_ms);

    f->p = NULL;
    if (r != 0)
        return r;
    if (sbx_chan_hdr_decode(&f->h, hdr) < 0)
        return -1;
    f->p = malloc(f->h.len + 1);
    if (f->h.len && read_timed(k->fd, f->p, f->h.len, timeout_ms) != 0) {
        free(f->p);
        f->p = NULL;
        return -1;
    }
    f->p[f->h.len] = '\0';
    return 0;
}

static void send_frame(struct wk *k, uint8_t type, uint32_t proc, const void *data,
                       size_t len)
{
    uint8_t hdr[SBX_CHAN_HDR];

    sbx_chan_hdr_encode(hdr, type, proc, (uint32_t)len);
    if (write(k->fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) ||
        (len && write(k->fd, data, len) != (ssize_t)len))
        perror("send_frame");
}

static void send_u32(struct wk *k, uint8_t type, uint32_t proc, uint32_t v)
{
    uint8_t b[4];

    sbx_chan_put_u32(b, v);
    send_frame(k, type, proc, b, 4);
}

static void send_str(struct wk *k, uint8_t type, uint32_t proc, const char *s)
{
    send_frame(k, type, proc, s, strlen(s));
}

/* SPAWN {"code": code, ...extra (a JSON object text or NULL)} */
static void spawn(struct wk *k, uint32_t proc, const char *code, const char *extra)
{
    json_t *req = extra ? json_loads(extra, 0, NULL) : json_object();
    char *s;

    if (!req) {
        fprintf(stderr, "bad extra JSON in test: %s\n", extra);
        abort();
    }
    json_object_set_new(req, "code", json_string(code));
    s = json_dumps(req, JSON_COMPACT);
    send_str(k, SBX_CHAN_SPAWN, proc, s);
    free(s);
    json_decref(req);
}

/* Expects the HELLO frame; returns its JSON (caller decrefs) or NULL. */
static json_t *hello(struct wk *k)
{
    struct frame f;
    json_t *j = NULL;

    if (recv_frame(k, &f, TIMEOUT_MS) == 0 && f.h.type == SBX_CHAN_HELLO && f.h.proc == 0)
        j = json_loads((const char *)f.p, 0, NULL);
    free(f.p);
    return j;
}

typedef void (*tool_cb)(struct wk *k, uint32_t proc, json_t *call);

struct run {
    char *out, *err; /* NUL-terminated */
    size_t outlen, errlen;
    size_t max_frame; /* largest STDOUT/STDERR payload */
    json_t *started, *exit;
    int logs, other;
};

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    json_decref(r->started);
    json_decref(r->exit);
    memset(r, 0, sizeof(*r));
}

static void append(char **buf, size_t *len, const uint8_t *p, size_t n)
{
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

/*
 * Reads frames for proc until its EXIT, returning credit for every output
 * byte as the daemon does and answering TOOL_CALLs with `tool`.
 * Returns 0, or -1 on timeout/EOF.
 */
static int collect(struct wk *k, uint32_t proc, struct run *r, tool_cb tool)
{
    memset(r, 0, sizeof(*r));
    r->out = calloc(1, 1);
    r->err = calloc(1, 1);
    for (;;) {
        struct frame f;

        if (recv_frame(k, &f, TIMEOUT_MS) != 0)
            return -1;
        if (f.h.proc == proc &&
            (f.h.type == SBX_CHAN_STDOUT || f.h.type == SBX_CHAN_STDERR)) {
            if (f.h.type == SBX_CHAN_STDOUT)
                append(&r->out, &r->outlen, f.p, f.h.len);
            else
                append(&r->err, &r->errlen, f.p, f.h.len);
            if (f.h.len > r->max_frame)
                r->max_frame = f.h.len;
            send_u32(k, SBX_CHAN_CREDIT, proc, f.h.len);
        } else if (f.h.proc == proc && f.h.type == SBX_CHAN_STARTED) {
            r->started = json_loads((const char *)f.p, 0, NULL);
        } else if (f.h.proc == proc && f.h.type == SBX_CHAN_EXIT) {
            r->exit = json_loads((const char *)f.p, 0, NULL);
            free(f.p);
            return r->exit ? 0 : -1;
        } else if (f.h.proc == proc && f.h.type == SBX_CHAN_TOOL_CALL && tool) {
            json_t *c = json_loads((const char *)f.p, 0, NULL);
            tool(k, proc, c);
            json_decref(c);
        } else if (f.h.type == SBX_CHAN_LOG) {
            r->logs++;
        } else {
            r->other++;
        }
        free(f.p);
    }
}

/* Runs code as proc and collects it. */
static int run_code(struct wk *k, uint32_t proc, const char *code, const char *extra,
                    struct run *r, tool_cb tool)
{
    spawn(k, proc, code, extra);
    return collect(k, proc, r, tool);
}

/* json_string_value that never returns NULL, for strcmp. */
static const char *jstr(const json_t *j)
{
    const char *s = json_string_value(j);

    return s ? s : "";
}

static json_int_t exit_code(const struct run *r)
{
    return json_integer_value(json_object_get(r->exit, "exit_code"));
}

static int result_is_int(const struct run *r, json_int_t v)
{
    json_t *res = json_object_get(r->exit, "result");

    return json_is_integer(res) && json_integer_value(res) == v;
}

static int result_is_str(const struct run *r, const char *s)
{
    json_t *res = json_object_get(r->exit, "result");

    return json_is_string(res) && strcmp(jstr(res), s) == 0;
}

static int is_reset(const struct run *r)
{
    return json_is_true(json_object_get(r->exit, "reset"));
}

static const char *exit_str(const struct run *r, const char *key)
{
    const char *s = json_string_value(json_object_get(r->exit, key));

    return s ? s : "";
}

static const char *exc_str(const struct run *r, const char *key)
{
    const char *s =
        json_string_value(json_object_get(json_object_get(r->exit, "exception"), key));

    return s ? s : "";
}

/* A line of /proc/<pid>/<file> starting with prefix, or "" (static buffer). */
static const char *proc_line(pid_t pid, const char *file, const char *prefix)
{
    static char line[512];
    char path[64];
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
    f = fopen(path, "r");
    line[0] = '\0';
    if (!f)
        return line;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, prefix, strlen(prefix)) == 0) {
            fclose(f);
            return line;
        }
    fclose(f);
    line[0] = '\0';
    return line;
}

static int under_valgrind(void)
{
    return getenv("SBX_VALGRIND") || RUNNING_ON_VALGRIND;
}

/* Mirrors the worker's own switch for seccomp and RLIMIT_AS. */
static int seccomp_expected(void)
{
    const char *v = getenv("SBX_NO_SECCOMP");

#if defined(__SANITIZE_ADDRESS__)
    return 0;
#endif
    return !(v && strcmp(v, "1") == 0) && !under_valgrind() && !getenv("SBX_SANITIZED");
}

/* ---- tests: text conversion --------------------------------------------------- */

static int utf8_is(const char *cesu, size_t len, const char *want)
{
    size_t n;
    char *s = dukw_utf8_dup((const uint8_t *)cesu, len, &n);
    int ok = s && n == strlen(want) && memcmp(s, want, n) == 0;

    free(s);
    return ok;
}

static int cesu_is(const char *utf8, size_t len, int final, const char *want,
                   size_t consumed)
{
    uint8_t out[64];
    size_t pos = 0, n = dukw_cesu8_from_utf8(out, sizeof(out), (const uint8_t *)utf8, len,
                                             &pos, final);

    return pos == consumed && n == strlen(want) && memcmp(out, want, n) == 0;
}

static void test_text(void)
{
    size_t pos = 0;
    uint8_t small[5];

    test_cond("text: ASCII and 2/3-byte UTF-8 pass through",
              utf8_is("a\xc3\xa9\xe2\x82\xac", 6, "a\xc3\xa9\xe2\x82\xac"));
    test_cond("text: CESU-8 surrogate pair becomes 4-byte UTF-8",
              utf8_is("\xed\xa0\xbd\xed\xb8\x80", 6, "\xf0\x9f\x98\x80"));
    test_cond("text: 4-byte UTF-8 passes through",
              utf8_is("\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"));
    test_cond("text: lone surrogates become U+FFFD",
              utf8_is("\xed\xa0\xbdx\xed\xb8\x80", 7, "\xef\xbf\xbdx\xef\xbf\xbd"));
    test_cond("text: invalid bytes and truncation become U+FFFD",
              utf8_is("\xff\x80\xe2\x82", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
    {
        size_t n;
        char *z = dukw_utf8_dup((const uint8_t *)"a\0b", 3, &n);
        test_cond("text: NUL survives", z && n == 3 && memcmp(z, "a\0b", 3) == 0);
        free(z);
    }
    pos = 0;
    test_cond("text: conversion stops before a character that does not fit",
              dukw_utf8_from_cesu8(small, sizeof(small),
                                   (const uint8_t *)"ab\xf0\x9f\x98\x80", 6, &pos) == 2 &&
                  pos == 2);
    {
        /* ASCII runs go eight bytes at a time: a non-ASCII character at every
         * offset of the word, and a run cut by the room left. */
        uint8_t in[40], out[64];
        int ok = 1;
        for (size_t k = 0; k < 18; k++) {
            memset(in, 'a', k);
            memcpy(in + k, "\xc3\xa9", 2);
            memset(in + k + 2, 'b', 9);
            pos = 0;
            size_t n = dukw_utf8_from_cesu8(out, sizeof(out), in, k + 11, &pos);
            ok &= n == k + 11 && pos == k + 11 && memcmp(out, in, n) == 0;
        }
        test_cond("text: a non-ASCII character anywhere in an ASCII run", ok);
        memset(in, 'a', 20);
        pos = 0;
        test_cond("text: an ASCII run stops at the room left",
                  dukw_utf8_from_cesu8(out, 11, in, 20, &pos) == 11 && pos == 11);
    }
    test_cond("text: UTF-8 non-BMP becomes a surrogate pair for Duktape",
              cesu_is("\xf0\x9f\x98\x80", 4, 1, "\xed\xa0\xbd\xed\xb8\x80", 4));
    test_cond("text: an incomplete sequence waits for more input",
              cesu_is("h\xc3", 2, 0, "h", 1));
    test_cond("text: ... and becomes U+FFFD at EOF",
              cesu_is("h\xc3", 2, 1, "h\xef\xbf\xbd", 2));
    test_cond("text: encoded surrogates in UTF-8 input are invalid",
              cesu_is("\xed\xa0\xbd", 3, 1, "\xef\xbf\xbd", 3));
}

/* ---- tests: the worker ------------------------------------------------------------- */

/* process.*, the globals a script sees, Date and Math.random. */
static void basic_process_and_globals(struct wk *k)
{
    struct run r;
    run_code(k, 7,
             "[process.pid, process.env.K, process.cwd, process.argv.length].join()",
             "{\"env\": {\"K\": \"V\"}, \"cwd\": \"/w\"}", &r, NULL);
    test_cond("process: pid, env, cwd, argv", result_is_str(&r, "7,V,/w,0"));
    run_free(&r);
    run_code(k, 8, "process.cwd + ',' + typeof process.env.K", NULL, &r, NULL);
    test_cond("process: replaced by each run", result_is_str(&r, "/,undefined"));
    run_free(&r);

    run_code(k, 9,
             "[typeof print, typeof alert, typeof require, typeof Duktape,"
             " typeof this.Duktape, Object.getOwnPropertyNames(this).filter("
             "function (n) { return /^duk/i.test(n); }).length].join()",
             NULL, &r, NULL);
    test_cond("globals: no print/alert/require, no Duktape object (Pointer, act, info)",
              result_is_str(&r, "undefined,undefined,undefined,undefined,undefined,0"));
    run_free(&r);
    run_code(k, 19,
             "var e = ''; try { Duktape.Pointer('x') } catch (x) { e = x.name }"
             " [e, typeof Object.getPrototypeOf(function(){}).constructor].join()",
             NULL, &r, NULL);
    test_cond("globals: Duktape.Pointer('x') is a ReferenceError, no address",
              result_is_str(&r, "ReferenceError,function"));
    run_free(&r);

    run_code(k, 10,
             "new Date(0).toISOString() + ',' + typeof new Date().toString() + ',' +"
             " (Math.random() < 1)",
             NULL, &r, NULL);
    test_cond("run: Date and Math.random work (allowed by the seccomp filter)",
              result_is_str(&r, "1970-01-01T00:00:00.000Z,string,true"));
    run_free(&r);
}

static void test_hello_and_basic_run(void)
{
    struct wk k;
    struct run r;
    json_t *h;
    int st;

    start(&k);
    h = hello(&k);
    test_cond("HELLO: first frame, version 1, agent duk, no procs",
              h && json_integer_value(json_object_get(h, "version")) == 1 &&
                  strcmp(jstr(json_object_get(h, "agent")), "duk") == 0 &&
                  json_array_size(json_object_get(h, "procs")) == 0 &&
                  json_is_array(json_object_get(h, "procs")));
    json_decref(h);

    test_cond("run: console.log + completion value",
              run_code(&k, 1, "console.log(\"hi\"); 6*7", NULL, &r, NULL) == 0 &&
                  strcmp(r.out, "hi\n") == 0 && r.errlen == 0 && exit_code(&r) == 0 &&
                  result_is_int(&r, 42) && !is_reset(&r));
    test_cond("run: STARTED carries the worker's os_pid",
              json_integer_value(json_object_get(r.started, "os_pid")) == k.pid);
    test_cond("run: EXIT has signal 0, timed_out/killed false",
              json_integer_value(json_object_get(r.exit, "signal")) == 0 &&
                  json_is_false(json_object_get(r.exit, "timed_out")) &&
                  json_is_false(json_object_get(r.exit, "killed")));
    run_free(&r);

    run_code(&k, 2, "var x = 5", NULL, &r, NULL);
    test_cond("state: undefined completion value has no result key",
              exit_code(&r) == 0 && json_object_get(r.exit, "result") == NULL);
    run_free(&r);
    run_code(&k, 3, "x + 1", NULL, &r, NULL);
    test_cond("state: globals persist across SPAWNs", result_is_int(&r, 6));
    run_free(&r);
    run_code(&k, 4, "typeof x", "{\"fresh\": true}", &r, NULL);
    test_cond("state: fresh:true starts a new isolate (no reset flag)",
              result_is_str(&r, "undefined") && !is_reset(&r));
    run_free(&r);

    run_code(&k, 5, "({a: 0.1, b: [1, \"two\", null], c: true})", NULL, &r, NULL);
    {
        json_t *res = json_object_get(r.exit, "result");
        test_cond("run: object completion value is embedded as JSON",
                  json_is_object(res) &&
                      json_real_value(json_object_get(res, "a")) == 0.1 &&
                      json_array_size(json_object_get(res, "b")) == 3 &&
                      json_is_true(json_object_get(res, "c")));
    }
    run_free(&r);
    run_code(&k, 6, "(function () {})", NULL, &r, NULL);
    test_cond("run: a function completion value has no result key",
              exit_code(&r) == 0 && json_object_get(r.exit, "result") == NULL);
    run_free(&r);

    basic_process_and_globals(&k);
    send_frame(&k, SBX_CHAN_PING, 0, NULL, 0);
    {
        struct frame f;
        test_cond("PING -> PONG", recv_frame(&k, &f, TIMEOUT_MS) == 0 &&
                                      f.h.type == SBX_CHAN_PONG && f.h.len == 0);
        free(f.p);
    }

    send_u32(&k, SBX_CHAN_KILL, 99, 9);
    send_frame(&k, SBX_CHAN_FORGET, 5, NULL, 0);
    run_code(&k, 11, "1", NULL, &r, NULL);
    test_cond("KILL/FORGET for a proc not running are ignored", result_is_int(&r, 1));
    run_free(&r);

    st = stop(&k);
    test_cond("channel EOF -> worker exits 0", WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_errors_and_console(void)
{
    struct wk k;
    struct run r;

    start(&k);
    json_decref(hello(&k));

    run_code(&k, 1, "throw new TypeError(\"bad\")", NULL, &r, NULL);
    test_cond("uncaught: exit_code 1, exception name/message/stack",
              exit_code(&r) == 1 && strcmp(exc_str(&r, "name"), "TypeError") == 0 &&
                  strcmp(exc_str(&r, "message"), "bad") == 0 &&
                  strstr(exc_str(&r, "stack"), "<sandbox>") != NULL);
    test_cond("uncaught: \"Uncaught TypeError: bad\" on stderr",
              strncmp(r.err, "Uncaught TypeError: bad", 23) == 0 &&
                  r.err[r.errlen - 1] == '\n' && r.outlen == 0);
    test_cond("uncaught: the isolate survives (no reset)", !is_reset(&r));
    run_free(&r);

    run_code(&k, 2, "throw \"oops\"", NULL, &r, NULL);
    test_cond("uncaught: a thrown string",
              exit_code(&r) == 1 && strcmp(exc_str(&r, "message"), "oops") == 0 &&
                  strcmp(r.err, "Uncaught oops\n") == 0);
    run_free(&r);

    run_code(&k, 3, "var = ;", NULL, &r, NULL);
    test_cond("syntax error: exception SyntaxError",
              exit_code(&r) == 1 && strcmp(exc_str(&r, "name"), "SyntaxError") == 0 &&
                  r.started != NULL);
    run_free(&r);

    run_code(&k, 4, "console.error(\"e\"); console.warn(\"w\"); console.info(\"i\")",
             NULL, &r, NULL);
    test_cond("console.error/warn -> STDERR, info -> STDOUT",
              strcmp(r.err, "e\nw\n") == 0 && strcmp(r.out, "i\n") == 0);
    run_free(&r);

    run_code(&k, 5,
             "console.log(\"a\", 1, true, null, undefined, {b: [1]}, [1, \"x\"]);"
             "var c = {}; c.c = c; console.log(c); console.log(); console.log(1.5, -0)",
             NULL, &r, NULL);
    test_cond("console: node-like formatting, cycles fall back to String()",
              strcmp(r.out, "a 1 true null undefined {\"b\":[1]} [1,\"x\"]\n"
                            "[object Object]\n\n1.5 0\n") == 0);
    run_free(&r);

    run_code(&k, 6, "console.log(new RangeError(\"r\"))", NULL, &r, NULL);
    test_cond("console: an Error prints its stack",
              strncmp(r.out, "RangeError: r", 13) == 0);
    run_free(&r);

    send_str(&k, SBX_CHAN_SPAWN, 7, "{\"argv\": [\"ls\"]}");
    collect(&k, 7, &r, NULL);
    test_cond("SPAWN without code: EXIT 126 with error, no STARTED",
              exit_code(&r) == 126 && strstr(exit_str(&r, "error"), "code") != NULL &&
                  r.started == NULL);
    run_free(&r);
    send_str(&k, SBX_CHAN_SPAWN, 8, "not json");
    collect(&k, 8, &r, NULL);
    test_cond("SPAWN with bad JSON: EXIT 126", exit_code(&r) == 126);
    run_free(&r);
    run_code(&k, 9, "1", "{\"tools\": [1]}", &r, NULL);
    test_cond("SPAWN with bad tools: EXIT 126", exit_code(&r) == 126);
    run_free(&r);

    stop(&k);
}

static void test_utf8_output(void)
{
    struct wk k;
    struct run r;

    start(&k);
    json_decref(hello(&k));
    run_code(&k, 1, "console.log(\"\\u00e9\\ud83d\\ude00\")", NULL, &r, NULL);
    test_cond("utf8: surrogate pair -> c3 a9 f0 9f 98 80 0a",
              r.outlen == 7 && memcmp(r.out, "\xc3\xa9\xf0\x9f\x98\x80\n", 7) == 0);
    run_free(&r);
    run_code(&k, 2, "console.log(\"\\ud800a\")", NULL, &r, NULL);
    test_cond("utf8: lone surrogate -> U+FFFD", r.outlen == 5 && memcmp(r.out,
                                                                        "\xef\xbf\xbd"
                                                                        "a\n",
                                                                        5) == 0);
    run_free(&r);
    run_code(&k, 3, "var e = \"\xc3\xa9\xf0\x9f\x98\x80\"; console.log(e.length, e); e",
             NULL, &r, NULL);
    test_cond("utf8: UTF-8 source text: JS sees UTF-16 (length 3), output is UTF-8",
              strcmp(r.out, "3 \xc3\xa9\xf0\x9f\x98\x80\n") == 0 &&
                  result_is_str(&r, "\xc3\xa9\xf0\x9f\x98\x80"));
    run_free(&r);
    run_code(&k, 4, "[\"\\ud83d\\ude00\", process.env.E, process.env.E.length]",
             "{\"env\": {\"E\": \"\\ud83d\\ude00\"}}", &r, NULL);
    {
        json_t *res = json_object_get(r.exit, "result");
        test_cond("utf8: result JSON and env round-trip non-BMP characters",
                  json_array_size(res) == 3 &&
                      strcmp(jstr(json_array_get(res, 0)), "\xf0\x9f\x98\x80") == 0 &&
                      strcmp(jstr(json_array_get(res, 1)), "\xf0\x9f\x98\x80") == 0 &&
                      json_integer_value(json_array_get(res, 2)) == 2);
    }
    run_free(&r);
    stop(&k);
}

static void tool_add(struct wk *k, uint32_t proc, json_t *call)
{
    json_t *args = json_object_get(call, "args");
    json_int_t id = json_integer_value(json_object_get(call, "call"));
    const char *name = json_string_value(json_object_get(call, "name"));
    json_t *rep;
    char *s;

    if (name && strcmp(name, "add") == 0 && json_is_object(args))
        rep = json_pack("{s:I,s:{s:I}}", "call", id, "result", "sum",
                        json_integer_value(json_object_get(args, "a")) +
                            json_integer_value(json_object_get(args, "b")));
    else
        rep = json_pack("{s:I,s:{s:i,s:s}}", "call", id, "error", "code", -32009,
                        "message", "nope");
    s = json_dumps(rep, JSON_COMPACT);
    send_str(k, SBX_CHAN_TOOL_RESULT, proc, s);
    free(s);
    json_decref(rep);
}

static json_t *last_call;

static void tool_record(struct wk *k, uint32_t proc, json_t *call)
{
    json_decref(last_call);
    last_call = json_incref(call);
    tool_add(k, proc, call);
}

static void test_tools(void)
{
    struct wk k;
    struct run r;

    start(&k);
    json_decref(hello(&k));
    run_code(&k, 1, "external_add({a: 1, b: 2}).sum", "{\"tools\": [\"add\", \"other\"]}",
             &r, tool_record);
    test_cond("tool: round trip returns the result as a JS value", result_is_int(&r, 3));
    test_cond("tool: TOOL_CALL carries call id, name and args as JSON",
              last_call && json_integer_value(json_object_get(last_call, "call")) > 0 &&
                  strcmp(jstr(json_object_get(last_call, "name")), "add") == 0 &&
                  json_integer_value(
                      json_object_get(json_object_get(last_call, "args"), "b")) == 2);
    run_free(&r);

    run_code(&k, 2,
             "try { external_other(1); \"no\" } catch (e) {"
             " e.message + \"/\" + e.code + \"/\" + (e instanceof Error) }",
             "{\"tools\": [\"add\", \"other\"]}", &r, tool_record);
    test_cond("tool: an error reply is a catchable Error with message and code",
              result_is_str(&r, "nope/-32009/true"));
    test_cond("tool: a number argument is sent as JSON",
              json_integer_value(json_object_get(last_call, "args")) == 1);
    run_free(&r);

    run_code(&k, 3, "external_add()", "{\"tools\": [\"add\"]}", &r, tool_record);
    test_cond("tool: no argument is sent as null",
              json_is_null(json_object_get(last_call, "args")) && exit_code(&r) == 1 &&
                  strcmp(exc_str(&r, "message"), "nope") == 0);
    run_free(&r);

    run_code(&k, 4, "typeof external_add + typeof external_other", NULL, &r, NULL);
    test_cond("tool: a SPAWN without tools removes the previous ones",
              result_is_str(&r, "undefinedundefined"));
    run_free(&r);
    json_decref(last_call);
    last_call = NULL;
    stop(&k);
}

static void test_credit(void)
{
    struct wk k;
    struct frame f;
    size_t got = 0, outlen = 0;
    char *out = calloc(1, 1);
    char want[101];
    int r, early_ok = 1, exited = 0, pong = 0;
    struct run big;

    start(&k);
    json_decref(hello(&k));
    spawn(&k, 1, "console.log(\"a\".repeat(50) + \"b\".repeat(49)); 'done'",
          "{\"window\": 16}");
    /* The first 16 bytes, then nothing more for a while: no credit left. */
    while (got < 16 && early_ok && recv_frame(&k, &f, TIMEOUT_MS) == 0) {
        if (f.h.type == SBX_CHAN_STDOUT) {
            got += f.h.len;
            append(&out, &outlen, f.p, f.h.len);
        } else if (f.h.type == SBX_CHAN_EXIT) {
            early_ok = 0;
        }
        free(f.p);
    }
    while ((r = recv_frame(&k, &f, RUNNING_ON_VALGRIND ? 2000 : 300)) == 0) {
        if (f.h.type == SBX_CHAN_STDOUT)
            got += f.h.len;
        early_ok = 0;
        free(f.p);
    }
    test_cond("credit: with window 16 the worker sends at most 16 bytes",
              got == 16 && early_ok);

    /* Blocked in console.log, it still serves other frames. */
    send_frame(&k, SBX_CHAN_PING, 0, NULL, 0);
    if (recv_frame(&k, &f, TIMEOUT_MS) == 0 && f.h.type == SBX_CHAN_PONG)
        pong = 1;
    free(f.p);
    test_cond("credit: a worker waiting for credit answers PING", pong);

    send_u32(&k, SBX_CHAN_CREDIT, 2, 1000); /* another proc's credit changes nothing */
    send_u32(&k, SBX_CHAN_CREDIT, 1, 40);
    send_u32(&k, SBX_CHAN_CREDIT, 1, 1000);
    while (!exited && recv_frame(&k, &f, TIMEOUT_MS) == 0) {
        if (f.h.type == SBX_CHAN_STDOUT)
            append(&out, &outlen, f.p, f.h.len);
        else if (f.h.type == SBX_CHAN_EXIT)
            exited = strstr((const char *)f.p, "\"result\":\"done\"") != NULL;
        free(f.p);
    }
    memset(want, 'a', 50);
    memset(want + 50, 'b', 49);
    want[99] = '\n';
    want[100] = '\0';
    test_cond("credit: after CREDIT the rest arrives, all 100 bytes in order, then EXIT",
              exited && outlen == 100 && memcmp(out, want, 100) == 0);
    free(out);

    run_code(&k, 3, "console.log(\"x\".repeat(3 * 1024 * 1024)); 1",
             "{\"window\": 8388608}", &big, NULL);
    test_cond("output: a 3 MiB console.log arrives whole, in frames <= 1 MiB",
              big.outlen == 3 * 1024 * 1024 + 1 &&
                  big.max_frame <= SBX_CHAN_MAX_PAYLOAD && big.max_frame > 0 &&
                  big.out[big.outlen - 1] == '\n' && result_is_int(&big, 1));
    run_free(&big);
    stop(&k);
}

static void test_memory_limit(void)
{
    static const char *const args[] = {"--no-drop", "--memory-limit-mb", "32", NULL};
    struct wk k;
    struct run r;

    start_args(&k, args);
    json_decref(hello(&k));
    run_code(&k, 1, "var keep = 1", NULL, &r, NULL);
    run_free(&r);
    /* Duktape interns strings: pushing the same string again costs one array
     * slot, so each one is made distinct with "+ a.length". */
    run_code(&k, 2, "var a = []; while (true) a.push(\"x\".repeat(1 << 20) + a.length)",
             NULL, &r, NULL);
    test_cond("memory: a bomb ends with exit 1, a memory error and reset:true",
              exit_code(&r) == 1 && strstr(exit_str(&r, "error"), "memory") != NULL &&
                  strstr(exit_str(&r, "error"), "32 MiB") != NULL && is_reset(&r));
    run_free(&r);
    run_code(&k, 3, "typeof a + typeof keep", NULL, &r, NULL);
    test_cond("memory: the next SPAWN runs on a fresh isolate",
              result_is_str(&r, "undefinedundefined") && exit_code(&r) == 0 &&
                  !is_reset(&r));
    run_free(&r);
    run_code(&k, 4, "try { var s = 'x'.repeat(64 * 1024 * 1024); 1 } catch (e) { 2 }",
             NULL, &r, NULL);
    test_cond("memory: even a caught allocation failure resets the isolate",
              exit_code(&r) == 1 && is_reset(&r));
    run_free(&r);
    stop(&k);
}

static void test_snapshot(void)
{
    struct wk a, b;
    struct run r;
    struct frame f;
    json_t *snap = NULL, *g;
    char *state = NULL;

    start(&a);
    json_decref(hello(&a));
    run_code(
        &a, 1,
        "var s = {a: [1, 2]}; var n = 3; var u; function f() {}; var t = \"\\u00e9\";"
        "var cyc = {}; cyc.c = cyc; globalThis.JSON_like = null",
        "{\"tools\": [\"add\"]}", &r, NULL);
    run_free(&r);
    send_frame(&a, SBX_CHAN_SNAPSHOT, 0, NULL, 0);
    if (recv_frame(&a, &f, TIMEOUT_MS) == 0 && f.h.type == SBX_CHAN_SNAP_DATA) {
        state = strdup((const char *)f.p);
        snap = json_loads(state, 0, NULL);
    }
    free(f.p);
    g = json_object_get(snap, "globals");
    test_cond("snapshot: SNAP_DATA {globals} holds s, n, t and JSON_like",
              json_is_object(g) &&
                  json_array_size(json_object_get(json_object_get(g, "s"), "a")) == 2 &&
                  json_integer_value(json_object_get(g, "n")) == 3 &&
                  strcmp(jstr(json_object_get(g, "t")), "\xc3\xa9") == 0 &&
                  json_is_null(json_object_get(g, "JSON_like")));
    test_cond("snapshot: skips builtins, process, functions, undefined, cycles",
              g && !json_object_get(g, "f") && !json_object_get(g, "u") &&
                  !json_object_get(g, "cyc") && !json_object_get(g, "process") &&
                  !json_object_get(g, "console") && !json_object_get(g, "JSON") &&
                  !json_object_get(g, "external_add") && json_object_size(g) == 4);
    json_decref(snap);

    run_code(&a, 2, "var big = \"x\".repeat(2 * 1024 * 1024); 1", NULL, &r, NULL);
    run_free(&r);
    send_frame(&a, SBX_CHAN_SNAPSHOT, 0, NULL, 0);
    snap = NULL;
    if (recv_frame(&a, &f, TIMEOUT_MS) == 0 && f.h.type == SBX_CHAN_SNAP_DATA)
        snap = json_loads((const char *)f.p, 0, NULL);
    free(f.p);
    test_cond(
        "snapshot: over 1 MiB answers {error: snapshot too large}",
        snap && strcmp(jstr(json_object_get(snap, "error")), "snapshot too large") == 0);
    json_decref(snap);
    stop(&a);

    start(&b);
    json_decref(hello(&b));
    if (state)
        send_str(&b, SBX_CHAN_RESTORE, 0, state);
    send_str(&b, SBX_CHAN_RESTORE, 0,
             "{\"globals\": {\"JSON\": 1, \"__proto__\": {\"p\": 1}}}");
    run_code(&b, 1, "JSON.stringify(s) + n + t + typeof JSON.parse + typeof p", NULL, &r,
             NULL);
    test_cond("restore: a new worker gets the globals back",
              result_is_str(&r, "{\"a\":[1,2]}3\xc3\xa9"
                                "functionundefined"));
    test_cond("restore: builtins and __proto__ are never overwritten", r.logs == 0);
    run_free(&r);
    free(state);
    stop(&b);
}

static void test_stdin(void)
{
    struct wk k;
    struct run r;
    json_t *res;

    start(&k);
    json_decref(hello(&k));
    spawn(&k, 1,
          "var s = '', c, n = 0; while ((c = read_stdin()) !== null) { s += c; n++ }"
          " [s, s.length, read_stdin()]",
          NULL);
    send_str(&k, SBX_CHAN_STDIN, 1, "h\xc3");
    send_str(&k, SBX_CHAN_STDIN, 1, "\xa9llo\xf0\x9f");
    send_str(&k, SBX_CHAN_STDIN, 1, "\x98\x80");
    send_frame(&k, SBX_CHAN_STDIN_EOF, 1, NULL, 0);
    collect(&k, 1, &r, NULL);
    res = json_object_get(r.exit, "result");
    test_cond("stdin: read_stdin round trip, characters split across frames",
              json_array_size(res) == 3 &&
                  strcmp(jstr(json_array_get(res, 0)), "h\xc3\xa9llo\xf0\x9f\x98\x80") ==
                      0 &&
                  json_integer_value(json_array_get(res, 1)) == 7 &&
                  json_is_null(json_array_get(res, 2)));
    run_free(&r);

    /* SPAWN while busy: the second gets an EXIT error, the first goes on. */
    spawn(&k, 2, "read_stdin()", NULL);
    spawn(&k, 3, "1", NULL);
    collect(&k, 3, &r, NULL);
    test_cond("busy: a SPAWN while a process runs gets EXIT 126",
              exit_code(&r) == 126 && strstr(exit_str(&r, "error"), "busy") != NULL);
    run_free(&r);
    send_str(&k, SBX_CHAN_STDIN, 2, "abc");
    collect(&k, 2, &r, NULL);
    test_cond("busy: the first process is unaffected", result_is_str(&r, "abc"));
    run_free(&r);

    send_str(&k, SBX_CHAN_STDIN, 9, "late");
    spawn(&k, 4, "read_stdin()", NULL);
    send_frame(&k, SBX_CHAN_STDIN_EOF, 4, NULL, 0);
    collect(&k, 4, &r, NULL);
    test_cond("stdin: data for another proc is not seen",
              json_is_null(json_object_get(r.exit, "result")));
    run_free(&r);
    stop(&k);
}

static void test_invalid_frame(void)
{
    struct wk k;
    struct frame f;
    uint8_t bad[SBX_CHAN_HDR];
    int st, got_error = 0;

    start(&k);
    json_decref(hello(&k));
    sbx_chan_hdr_encode(bad, SBX_CHAN_PING, 0, 0);
    bad[2] = 1; /* reserved byte */
    if (write(k.fd, bad, sizeof(bad)) != (ssize_t)sizeof(bad))
        perror("write");
    while (recv_frame(&k, &f, TIMEOUT_MS) == 0) {
        if (f.h.type == SBX_CHAN_ERROR)
            got_error = 1;
        free(f.p);
    }
    st = stop(&k);
    test_cond("invalid frame: ERROR sent, then the worker exits 1",
              got_error && WIFEXITED(st) && WEXITSTATUS(st) == 1);

    start(&k);
    json_decref(hello(&k));
    sbx_chan_hdr_encode(bad, SBX_CHAN_STDIN, 1, SBX_CHAN_MAX_PAYLOAD + 1);
    if (write(k.fd, bad, sizeof(bad)) != (ssize_t)sizeof(bad))
        perror("write");
    while (recv_frame(&k, &f, TIMEOUT_MS) == 0)
        free(f.p);
    st = stop(&k);
    test_cond("invalid frame: oversized length -> exit 1",
              WIFEXITED(st) && WEXITSTATUS(st) == 1);
}

static void test_hardening(void)
{
    struct wk k;
    struct run r;
    struct passwd *pw;
    uid_t want = 65534;

    if (getuid() != 0) {
        printf("    (not root: privilege drop not tested)\n");
        return;
    }
    pw = getpwnam("nobody");
    if (pw)
        want = pw->pw_uid;
    start_args(&k, NULL);
    json_decref(hello(&k));
    run_code(&k, 1, "6*7", NULL, &r, NULL);
    test_cond("drop: as root the worker runs as nobody and still works",
              json_integer_value(json_object_get(r.started, "uid")) == (json_int_t)want &&
                  result_is_int(&r, 42));
    run_free(&r);
    test_cond("hardening: no_new_privs set",
              strstr(proc_line(k.pid, "status", "NoNewPrivs:"), "1") != NULL);
    if (!under_valgrind()) /* valgrind virtualizes the fd limit */
        test_cond("hardening: RLIMIT_NOFILE 16, RLIMIT_CORE 0",
                  strstr(proc_line(k.pid, "limits", "Max open files"), " 16 ") != NULL &&
                      strstr(proc_line(k.pid, "limits", "Max core file size"), " 0 ") !=
                          NULL);
    if (seccomp_expected())
        test_cond("hardening: RLIMIT_AS set",
                  strstr(proc_line(k.pid, "limits", "Max address space"), "unlimited") ==
                      NULL);
    if (seccomp_expected())
        test_cond("hardening: seccomp filter mode",
                  strstr(proc_line(k.pid, "status", "Seccomp:"), "2") != NULL);
    stop(&k);

    /* --uid N: the socket user's own worker uid, gid the same, no groups */
    static const char *const byuid[] = {"--uid", "1879048197", NULL};
    start_args(&k, byuid);
    json_decref(hello(&k));
    run_code(&k, 1, "6*7", NULL, &r, NULL);
    int gid_ok = strstr(proc_line(k.pid, "status", "Gid:"), "1879048197") != NULL;
    const char *groups = proc_line(k.pid, "status", "Groups:");
    int no_groups = groups[0] && strspn(groups + 7, " \t\n") == strlen(groups + 7);
    test_cond("drop: --uid N runs the worker as uid and gid N, no groups",
              json_integer_value(json_object_get(r.started, "uid")) == 1879048197 &&
                  gid_ok && no_groups && result_is_int(&r, 42));
    run_free(&r);
    stop(&k);
    static const char *const root[] = {"--uid", "0", NULL};
    start_args(&k, root);
    struct frame f = {0};
    int got = recv_frame(&k, &f, 5000);
    test_cond("drop: --uid 0 is refused with an ERROR frame saying so",
              got == 0 && f.h.type == SBX_CHAN_ERROR && f.p &&
                  strstr((const char *)f.p, "uid 0") != NULL);
    free(f.p);
    stop(&k);
}

/* The worker dies with its parent (PR_SET_PDEATHSIG): a middle process starts
 * it and exits; we are the subreaper, so we reap the worker and see SIGKILL.
 * We hold a copy of the channel so the worker cannot leave on EOF instead. */
static void test_parent_death(void)
{
    static const char *const nodrop[] = {"--no-drop", NULL};
    int pfd[2], sv[2], keep, st = 0;
    pid_t mid, worker = -1;

    if (pipe(pfd) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 ||
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
        return;
    keep = dup(sv[0]);
    fflush(stdout);
    mid = fork();
    if (mid == 0) {
        struct wk k;
        json_t *h;

        close(pfd[0]);
        start_on(&k, sv, nodrop);
        h = hello(&k); /* the worker is hardened once it said HELLO */
        if (write(pfd[1], &k.pid, sizeof(k.pid)) < 0)
            _exit(2);
        _exit(h ? 0 : 1);
    }
    close(sv[0]);
    close(sv[1]);
    close(pfd[1]);
    if (read(pfd[0], &worker, sizeof(worker)) != (ssize_t)sizeof(worker))
        worker = -1;
    close(pfd[0]);
    waitpid(mid, NULL, 0);
    test_cond("pdeathsig: the worker is killed when its parent dies",
              worker > 0 && waitpid(worker, &st, 0) == worker && WIFSIGNALED(st) &&
                  WTERMSIG(st) == SIGKILL);
    close(keep);
    prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_text();
    test_hello_and_basic_run();
    test_errors_and_console();
    test_utf8_output();
    test_tools();
    test_credit();
    test_memory_limit();
    test_snapshot();
    test_stdin();
    test_invalid_frame();
    test_hardening();
    test_parent_death();
    return test_report();
}
