/*
 * itest_limits16.c - issue 16's reproductions for the core (items 3, 6 and
 * 11): queued processes measured in bytes per uid, memory limits summed per
 * uid, and lifecycle calls that wait for a start instead of failing. A second
 * uid (65534) is the other user where one matters.
 *
 *   itest_limits16 SOCKET BUILD_DIR
 *
 * SOCKET (the suite's shared sbxd) is not used: each scenario starts its own
 * sbxd with the limits it needs.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "itest.h"
#include "own_kit.h"
#include "sbx_proto.h"
#include "testhelp.h"

/* ---- queued processes in bytes (item 3) ------------------------------------------- */

#define BIG_STDIN (8u * 1024 * 1024)

/* The other uid queues one spawn with 1 MiB of stdin behind a busy program. */
static conn *parent_conn; /* the forked child frees its copy (valgrind counts it) */

static void other_queues(char *res, size_t n)
{
    cn_close(parent_conn);
    conn *c = cn_open(own.sock);
    if (!c)
        return;
    json_t *r = cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", "q2", "provider", "duktape"));
    json_decref(r);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s, s:I}", "sandbox", "q2", "command", "for(;;){}",
                          "timeout_ms", (json_int_t)30000));
    json_decref(r);
    char *in = malloc(1024 * 1024);
    memset(in, 'b', 1024 * 1024);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s, s:s%}", "sandbox", "q2", "command", "1", "stdin",
                          in, (size_t)1024 * 1024));
    free(in);
    snprintf(res, n, "%d", res_of(r) ? 1 : err_code(r));
    json_decref(r);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "q2")));
    cn_close(c);
}

/* Another uid still queues; once the slot is free the queue drains and gives its bytes
 * back. */
static void queued_drain(conn *c, json_int_t busy, json_int_t last)
{
    json_t *r;
    json_int_t used;
    char res[8];
    parent_conn = c;
    own_as_uid(65534, other_queues, res, sizeof(res));
    test_cond("queued: another uid still queues meanwhile", strcmp(res, "1") == 0);

    json_decref(
        cn_call(c, "process.kill", json_pack("{s:s, s:I}", "sandbox", "q", "pid", busy)));
    r = cn_call_t(
        c, 30000, "process.wait",
        json_pack("{s:s, s:I, s:i}", "sandbox", "q", "pid", last, "timeout_ms", 25000));
    int ran = res_int(r, "exit_code") == 0;
    json_decref(r);
    r = cn_call(c, "daemon.info", NULL);
    used = own_usage_used(r, "queued_bytes_per_uid");
    json_decref(r);
    test_cond("queued: the queued ones run once the slot is free", ran);
    test_eq_int("queued: their bytes are given back when they leave the queue", used, 0);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "q", "command", "1"));
    test_cond("queued: the uid spawns again afterwards", res_of(r) != NULL);
    json_decref(r);
}

static void test_queued_bytes(void)
{
    if (own_start("  max_processes_per_sandbox: 1\n  queued_bytes_per_uid: 64M\n") < 0) {
        test_cond("queued: sbxd starts", 0);
        return;
    }
    conn *c = cn_open(own.sock);
    if (!c) {
        test_cond("queued: sbxd answers", 0);
        own_stop_check();
        return;
    }
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s, s:i}", "id", "q", "provider", "duktape",
                                  "timeout_ms", 1800000)));
    /* The one running slot is held, so every spawn after it queues. */
    json_t *r = cn_call(c, "process.spawn",
                        json_pack("{s:s, s:s, s:I}", "sandbox", "q", "command",
                                  "for(;;){}", "timeout_ms", (json_int_t)900000));
    json_int_t busy = res_int(r, "pid");
    json_decref(r);
    char *in = malloc(BIG_STDIN);
    memset(in, 'a', BIG_STDIN);
    long before = own_rss_kb();
    int ok = 0, refused = 0, other = 0, max_ok = 0;
    json_int_t last = 0;
    for (int i = 0; i < 48; i++) {
        r = cn_call_t(c, 60000, "process.spawn",
                      json_pack("{s:s, s:s, s:s%}", "sandbox", "q", "command", "1",
                                "stdin", in, (size_t)BIG_STDIN));
        if (res_of(r)) {
            ok++;
            last = res_int(r, "pid");
        } else if (err_code(r) == SBX_E_LIMIT &&
                   strcmp(own_limit_of(r), "queued_bytes_per_uid") == 0) {
            refused++;
            max_ok = json_integer_value(json_object_get(
                         json_object_get(json_object_get(r, "error"), "data"), "max")) ==
                     64 * 1024 * 1024;
        } else {
            if (!other++)
                printf("      unexpected answer: %s\n",
                       json_string_value(
                           json_object_get(json_object_get(r, "error"), "message")));
        }
        json_decref(r);
    }
    free(in);
    long after = own_rss_kb();
    printf("      %d queued, %d refused, %d other; RSS %ld kB -> %ld kB\n", ok, refused,
           other, before, after);
    test_cond("queued: 48 spawns with 8 MiB stdin are refused past 64 MiB per uid",
              ok >= 1 && ok <= 8 && refused == 48 - ok && other == 0);
    test_cond("queued: the -32005 says {limit: queued_bytes_per_uid, max}", max_ok);
    own_rss_cond("queued: sbxd's RSS stays bounded (grows < 160 MB; it grew 433 MB)",
                 after - before < 160 * 1024);
    r = cn_call(c, "daemon.info", NULL);
    json_int_t used = own_usage_used(r, "queued_bytes_per_uid");
    json_decref(r);
    test_cond("queued: daemon.info counts the queued bytes",
              used > (json_int_t)ok * BIG_STDIN && used <= 64 * 1024 * 1024);

    queued_drain(c, busy, last);
    cn_close(c);
    own_stop_check();
}

/* ---- memory limits summed per uid (item 6) ---------------------------------------- */

static json_t *create_mem(conn *c, const char *id, int mb)
{
    return cn_call(c, "sandbox.create",
                   json_pack("{s:s, s:s, s:i}", "id", id, "provider", "duktape",
                             "memory_limit_mb", mb));
}

/* The other uid: two sandboxes of 100 MiB fit in 256M, a third does not;
 * stopping one gives its share back, and starting it again is refused while
 * the other two hold the room. res: one digit per check. */
static void other_fills_memory(char *res, size_t n)
{
    conn *c = cn_open(own.sock);
    if (!c)
        return;
    json_t *r1 = create_mem(c, "m1", 100), *r2 = create_mem(c, "m2", 100);
    json_t *r3 = create_mem(c, "m3", 100);
    int first_two = res_of(r1) && res_of(r2);
    int third =
        err_code(r3) == SBX_E_LIMIT && strcmp(own_limit_of(r3), "memory_per_uid") == 0;
    json_t *g = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "m3"));
    int gone = err_code(g) == SBX_E_NOT_FOUND;
    json_decref(g);
    json_t *info = cn_call(c, "daemon.info", NULL);
    int counted = own_usage_used(info, "memory_per_uid") == 200 * 1024 * 1024;
    json_decref(info);
    json_decref(cn_call(c, "sandbox.stop", json_pack("{s:s}", "id", "m1")));
    json_t *r4 = create_mem(c, "m4", 100);
    json_t *r5 = cn_call(c, "sandbox.start", json_pack("{s:s}", "id", "m1"));
    int again = res_of(r4) != NULL;
    int restart = err_code(r5) == SBX_E_LIMIT;
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "m2")));
    json_t *r6 = cn_call(c, "sandbox.start", json_pack("{s:s}", "id", "m1"));
    int after_destroy = res_of(r6) != NULL;
    snprintf(res, n, "%d%d%d%d%d%d%d", first_two, third, gone, counted, again, restart,
             after_destroy);
    json_t *rs[] = {r1, r2, r3, r4, r5, r6};
    for (size_t i = 0; i < sizeof(rs) / sizeof(rs[0]); i++)
        json_decref(rs[i]);
    cn_close(c);
}

static void test_memory_per_uid(void)
{
    if (own_start("  memory_per_uid: 256M\n  max_memory_limit_mb: 128\n") < 0) {
        test_cond("memory: sbxd starts", 0);
        return;
    }
    char res[16];
    own_as_uid(65534, other_fills_memory, res, sizeof(res));
    printf("      checks: %s\n", res);
    test_cond("memory: two sandboxes of 100 MiB fit in memory_per_uid 256M",
              res[0] == '1');
    test_cond("memory: a third is -32005 {limit: memory_per_uid}", res[1] == '1');
    test_cond("memory: and leaves nothing behind", res[2] == '1');
    test_cond("memory: daemon.info counts 200 MiB for the uid", res[3] == '1');
    test_cond("memory: a stopped sandbox gives its share back", res[4] == '1');
    test_cond("memory: starting it again past the total is refused", res[5] == '1');
    test_cond("memory: a destroyed one gives its share back", res[6] == '1');
    conn *c = cn_open(own.sock);
    json_t *r = c ? create_mem(c, "root-m", 100) : NULL;
    test_cond("memory: another uid is not affected", res_of(r) != NULL);
    json_decref(r);
    cn_close(c);
    own_stop_check();
}

/* ---- lifecycle calls wait for a start (item 11) ---------------------------------- */

/* Sends a request without waiting; returns its id. params stolen. */
static int send_req(conn *c, const char *method, json_t *params)
{
    int id = ++c->next_id;
    json_t *req = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method",
                            method, "params", params);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    cn_send_raw(c, s, strlen(s));
    cn_send_raw(c, "\n", 1);
    free(s);
    return id;
}

/* The response to id (new ref), or NULL after timeout_ms. */
static json_t *wait_resp(conn *c, int id, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - now_ms());
        json_t *m = cn_read(c, left > 0 ? left : 0);
        if (!m)
            return NULL;
        json_t *mid = json_object_get(m, "id");
        if (!json_object_get(m, "method") && json_is_integer(mid) &&
            json_integer_value(mid) == id)
            return m;
        json_decref(m);
    }
}

static const char *status_of(json_t *resp)
{
    const char *s = json_string_value(json_object_get(res_of(resp), "status"));
    return s ? s
             : (resp ? json_string_value(
                           json_object_get(json_object_get(resp, "error"), "message"))
                     : "no answer");
}

static int cn_call_ok(conn *c)
{
    json_t *r = cn_call_t(c, 5000, "daemon.ping", NULL);
    int ok = json_is_true(json_object_get(res_of(r), "pong"));
    json_decref(r);
    return ok;
}

#define SPIN "var t = Date.now(); while (Date.now() - t < 800) {}"

/* A destroy during a start waits for it, with and without an on_destroy hook. */
static void waiting_destroys(conn *a, conn *b)
{
    json_t *r, *ra, *rb;
    int ida, idb;
    /* A destroy during a start waits for it. */
    json_decref(cn_call(a, "sandbox.stop", json_pack("{s:s}", "id", "r")));
    ida = send_req(a, "sandbox.start", json_pack("{s:s}", "id", "r"));
    usleep(150000);
    idb = send_req(b, "sandbox.destroy", json_pack("{s:s}", "id", "r"));
    ra = wait_resp(a, ida, 15000);
    rb = wait_resp(b, idb, 15000);
    test_cond("lifecycle: a destroy during a start waits for it and destroys",
              strcmp(status_of(ra), "running") == 0 &&
                  strcmp(status_of(rb), "destroyed") == 0);
    json_decref(ra);
    json_decref(rb);
    r = cn_call(a, "sandbox.get", json_pack("{s:s}", "id", "r"));
    test_eq_int("lifecycle: and it is gone afterwards", err_code(r), SBX_E_NOT_FOUND);
    json_decref(r);

    /* The same with an on_destroy hook: it runs from the end of the on_start
     * hook's process (ASan found that record freed under it). */
    json_decref(
        cn_call(a, "sandbox.create",
                json_pack("{s:s, s:s, s:s, s:s, s:b}", "id", "r2", "provider", "duktape",
                          "on_start", SPIN, "on_destroy", "1", "start", 0)));
    ida = send_req(a, "sandbox.start", json_pack("{s:s}", "id", "r2"));
    usleep(150000);
    idb = send_req(b, "sandbox.destroy", json_pack("{s:s}", "id", "r2"));
    ra = wait_resp(a, ida, 15000);
    rb = wait_resp(b, idb, 15000);
    test_cond("lifecycle: with on_destroy too, the start answers and the destroy runs",
              strcmp(status_of(ra), "running") == 0 &&
                  strcmp(status_of(rb), "destroyed") == 0);
    json_decref(ra);
    json_decref(rb);
}

static void test_waiting_ops(void)
{
    if (own_start("  op_timeout_ms: 20000\n") < 0) {
        test_cond("lifecycle: sbxd starts", 0);
        return;
    }
    conn *a = cn_open(own.sock), *b = cn_open(own.sock);
    if (!a || !b) {
        test_cond("lifecycle: sbxd answers", 0);
        cn_close(a);
        cn_close(b);
        own_stop_check();
        return;
    }
    double t0 = now_ms();
    json_t *r = cn_call(a, "sandbox.create",
                        json_pack("{s:s, s:s, s:s, s:s}", "id", "r", "provider",
                                  "duktape", "on_start", SPIN, "on_stop", SPIN));
    double took = now_ms() - t0;
    test_cond("lifecycle: create answers after its on_start hook, running",
              strcmp(status_of(r), "running") == 0 && took >= 700);
    json_decref(r);
    json_decref(cn_call(a, "sandbox.stop", json_pack("{s:s}", "id", "r")));

    /* Reconnect to the stopped sandbox, and stop it again from another
     * connection while it starts. */
    t0 = now_ms();
    int ida = send_req(a, "sandbox.create", json_pack("{s:s}", "id", "r"));
    usleep(150000);
    int idb = send_req(b, "sandbox.stop", json_pack("{s:s}", "id", "r"));
    json_t *ra = wait_resp(a, ida, 15000);
    double ta = now_ms() - t0;
    json_t *rb = wait_resp(b, idb, 15000);
    double tb = now_ms() - t0;
    printf("      reconnect: %s after %.0f ms; stop: %s after %.0f ms\n", status_of(ra),
           ta, status_of(rb), tb);
    test_cond("lifecycle: a reconnecting create answers when it runs, not \"starting\"",
              strcmp(status_of(ra), "running") == 0 && ta >= 600 &&
                  json_is_true(json_object_get(res_of(ra), "reconnected")));
    test_cond("lifecycle: a stop during that start waits for it and stops (< 10 s)",
              strcmp(status_of(rb), "stopped") == 0 && err_code(rb) == 0 && tb < 10000);
    json_decref(ra);
    json_decref(rb);

    /* A start during the stop (its on_stop hook runs) waits and starts. */
    json_decref(cn_call(a, "sandbox.start", json_pack("{s:s}", "id", "r")));
    t0 = now_ms();
    ida = send_req(a, "sandbox.stop", json_pack("{s:s}", "id", "r"));
    usleep(150000);
    idb = send_req(b, "sandbox.start", json_pack("{s:s}", "id", "r"));
    ra = wait_resp(a, ida, 15000);
    rb = wait_resp(b, idb, 15000);
    tb = now_ms() - t0;
    test_cond("lifecycle: a start during a stop waits for it, then starts (< 10 s)",
              strcmp(status_of(ra), "stopped") == 0 &&
                  strcmp(status_of(rb), "running") == 0 && tb >= 1400 && tb < 10000);
    json_decref(ra);
    json_decref(rb);

    waiting_destroys(a, b);
    test_cond("lifecycle: sbxd still serves", cn_call_ok(a));
    cn_close(a);
    cn_close(b);
    own_stop_check();
}

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    int r = own_init(argc > 2 ? argv[2] : "build", "lim16");
    if (r) {
        test_cond(r == 1 ? "a temporary directory" : "runs as root", 0);
        return test_report();
    }
    test_queued_bytes();
    test_waiting_ops();
    test_memory_per_uid();

    own_cleanup();
    return test_report();
}
