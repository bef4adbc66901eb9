/*
 * itest_js_share.c - shared js workers (daemon/providers/isolate/js_share.c):
 * non-persistent js sandboxes of one uid take turns on a few worker
 * processes. Against a real sbxd over its socket: programs of other
 * sandboxes are not held up by long ones (more workers come when all are
 * busy), a timeout or a memory kill ends only the program that caused it,
 * and an idle sandbox still answers sandbox.get and sandbox.stats with the
 * worker of its last run.
 * usage: itest_js_share SOCKET
 */
#include <signal.h>
#include <unistd.h>

#include "itest.h"
#include "testhelp.h"

static const char *sock;

static void create(conn *c, const char *id, json_t *extra)
{
    json_t *p = extra ? extra : json_object();
    json_object_set_new(p, "id", json_string(id));
    json_object_set_new(p, "provider", json_string("js"));
    json_decref(cn_call(c, "sandbox.create", p));
}

static void destroy(conn *c, const char *id)
{
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
}

/* process.spawn of code; returns the pid (0 on failure). */
static int spawn(conn *c, const char *sb, const char *code, int timeout_ms)
{
    json_t *r = cn_call(c, "process.spawn",
                        json_pack("{s:s, s:s, s:i}", "sandbox", sb, "command", code,
                                  "timeout_ms", timeout_ms));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    return pid;
}

static json_t *wait_for(conn *c, const char *sb, int pid)
{
    return cn_call_t(c, 60000, "process.wait",
                     json_pack("{s:s, s:i}", "sandbox", sb, "pid", pid));
}

static const char *exc_name(json_t *r)
{
    const char *n = json_string_value(
        json_object_get(json_object_get(res_of(r), "exception"), "name"));
    return n ? n : "";
}

static int result_is_str(json_t *r, const char *want)
{
    const char *s = json_string_value(json_object_get(res_of(r), "result"));
    return s && strcmp(s, want) == 0;
}

/* Three endless programs (more than the one-per-core workers a uid gets
 * before its programs queue) and, beside them, short programs of a fourth
 * sandbox: those must all run long before the endless ones time out. */
static void test_long_neighbours(conn *c)
{
    const char *longs[] = {"jss-l1", "jss-l2", "jss-l3"};
    int pids[3];
    for (int i = 0; i < 3; i++) {
        create(c, longs[i], NULL);
        pids[i] = spawn(c, longs[i], "while (true) {}", 3000);
    }
    create(c, "jss-short", NULL);
    double t0 = now_ms();
    int ok = 1;
    for (int i = 0; i < 10; i++) {
        char code[32];
        snprintf(code, sizeof(code), "return %d", i);
        json_t *r =
            cn_call_t(c, 30000, "process.exec",
                      json_pack("{s:s, s:s}", "sandbox", "jss-short", "command", code));
        ok &= res_int(r, "exit_code") == 0 &&
              json_integer_value(json_object_get(res_of(r), "result")) == i;
        json_decref(r);
    }
    double dt = now_ms() - t0;
    test_cond("10 short programs beside 3 endless ones all run", ok);
    test_cond("and are not held up until the endless ones time out (3 s)", dt < 2500);
    if (dt >= 2500)
        printf("      the short programs took %.0f ms\n", dt);
    ok = 1;
    for (int i = 0; i < 3; i++) {
        json_t *r = wait_for(c, longs[i], pids[i]);
        ok &= strcmp(exc_name(r), "TimeoutError") == 0;
        json_decref(r);
        destroy(c, longs[i]);
    }
    test_cond("the endless programs end with their TimeoutError", ok);
    destroy(c, "jss-short");
}

/* A program killed for its timeout or its memory while another sandbox's
 * program runs at the same time: the other one finishes, with its result. */
static void test_kill_only_own(conn *c, int memory)
{
    char name[128];
    const char *busy =
        "const t = Date.now(); while (Date.now() - t < 800) {}; return 'b'";
    create(c, "jss-bad", memory ? json_pack("{s:i}", "memory_limit_mb", 64) : NULL);
    create(c, "jss-good", NULL);
    int good = spawn(c, "jss-good", busy, 20000);
    int bad = spawn(c, "jss-bad",
                    memory ? "const a = []; for (;;) a.push(new Array(1 << 16).fill(7))"
                           : "while (true) {}",
                    memory ? 20000 : 300);
    json_t *r = wait_for(c, "jss-bad", bad);
    const char *why = memory ? "memory limit" : "timeout";
    snprintf(name, sizeof(name), "a %s ends its own program", why);
    test_cond(name, memory ? strstr(res_str(r, "error"), "memory limit exceeded") != NULL
                           : strcmp(exc_name(r), "TimeoutError") == 0);
    json_decref(r);
    r = wait_for(c, "jss-good", good);
    snprintf(name, sizeof(name),
             "another sandbox's program running meanwhile finishes (%s)", why);
    test_cond(name, res_int(r, "exit_code") == 0 && result_is_str(r, "b") &&
                        !json_is_true(json_object_get(res_of(r), "isolate_reset")));
    json_decref(r);
    r = cn_call(
        c, "process.exec",
        json_pack("{s:s, s:s}", "sandbox", "jss-bad", "command", "return 'next'"));
    snprintf(name, sizeof(name), "the sandbox of the %s runs its next program", why);
    test_cond(name, result_is_str(r, "next"));
    json_decref(r);
    destroy(c, "jss-bad");
    destroy(c, "jss-good");
}

/* Between runs a shared sandbox holds no worker; get and stats still name
 * the worker of its last run. */
static void test_idle_metadata(conn *c)
{
    create(c, "jss-idle", NULL);
    json_decref(
        cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "jss-idle", "command", "return 1")));
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "jss-idle"));
    long pid = (long)json_integer_value(
        json_object_get(json_object_get(res_of(r), "metadata"), "worker_pid"));
    json_decref(r);
    test_cond("an idle shared sandbox names the worker of its last run",
              pid > 0 && kill((pid_t)pid, 0) == 0);
    r = cn_call(c, "sandbox.stats", json_pack("{s:s}", "id", "jss-idle"));
    test_cond("and sandbox.stats answers with that worker",
              json_integer_value(json_object_get(res_of(r), "worker_pid")) == pid);
    json_decref(r);
    destroy(c, "jss-idle");
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
    test_long_neighbours(c);
    test_kill_only_own(c, 0);
    test_kill_only_own(c, 1);
    test_idle_metadata(c);
    cn_close(c);
    return test_report();
}
