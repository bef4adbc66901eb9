/*
 * ptest_modal_outage.c - outages of the Modal control plane through a
 * real sbxd (short, long, a lost exec reply), the headers sbxd sends, the
 * backend v1, and daemons with no or wrong credentials or no server.
 *
 * usage: ptest_modal_outage SOCKET CONTROL_PORT
 * One part of the main Modal suite (md_kit.h), run by tests/providers/modal.sh
 * against the same sbxd and fake as ptest_modal.c.
 * Optional environment (set by modal.sh):
 *   PTEST_NOCRED_SOCK   sbxd whose modal section has no credentials
 *   PTEST_BADCRED_SOCK  sbxd with wrong credentials for a fake that checks them
 *   PTEST_DOWN_SOCK     sbxd whose server URL has nothing listening
 *   PTEST_SHORT_SOCK    sbxd on the same fake with retry_budget_ms 5000 (outages)
 */

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "md_kit.h"
#include "testhelp.h"

/* ---- outages of the control plane ------------------------------------------------- */

static int lines_ok(const char *got, int lines)
{
    char want[4096] = "";
    size_t o = 0;
    for (int i = 1; i <= lines && o < sizeof(want); i++)
        o += (size_t)snprintf(want + o, sizeof(want) - o, "line%d\n", i);
    int ok = strcmp(got, want) == 0;
    if (!ok)
        printf("      got %zu bytes of output, want %zu: \"%.200s\"\n", strlen(got), o,
               got);
    return ok;
}

/* An outage of secs seconds while a process prints 30 lines: with the default
 * budget every line arrives and the exit is the real one. A command started
 * during the outage (its calls are refused: they never reach Modal) runs once
 * the outage is over. */
static void test_outage(conn *c, double secs)
{
    char cmd[256], name[160];
    lines_cmd(cmd, sizeof(cmd), 30, secs + 4.0);
    json_t *r = spawn_sh(c, "mo", cmd);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    await_output(c, "mo", pid, 30000);
    double t0 = now_ms();
    outage_start(secs, "refuse");
    usleep(300000); /* sbxd has seen its connection reset */
    r = sh(c, "mo", "echo during");
    snprintf(name, sizeof(name),
             "outage %.0f s: a command started during it runs once it is over", secs);
    test_cond(name, res_int(r, "exit_code") == 0 && out_is(r, "during\n") &&
                        now_ms() - t0 >= secs * 1000.0 - 300);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "mo", "pid", pid));
    errmsg(r);
    snprintf(name, sizeof(name),
             "outage %.0f s: the running process exits cleanly (exit 0, no error)", secs);
    test_cond(name, res_int(r, "exit_code") == 0 &&
                        json_is_null(json_object_get(res_of(r), "error")) &&
                        !json_object_get(res_of(r), "output_incomplete"));
    json_decref(r);
    char got[4096] = "";
    sb_output(c, "mo", pid, got, sizeof(got));
    snprintf(name, sizeof(name), "outage %.0f s: all 30 lines arrived, in order, once",
             secs);
    test_cond(name, lines_ok(got, 30));
    json_t *o = ctl("GET", "/outage", NULL);
    snprintf(name, sizeof(name), "outage %.0f s: the fake really cut the connections",
             secs);
    test_cond(name, json_integer_value(json_object_get(o, "resets")) > 0);
    json_decref(o);
}

/* The reply of a TaskExecStart that Modal carried out is lost in an outage:
 * sbxd starts it again with the same exec id once Modal is back, which the
 * router does not run a second time: the command runs once and is followed. */
static void test_outage_exec_unknown(conn *c)
{
    json_t *before = ctl("GET", "/calls?method=TaskExecStart", NULL);
    size_t nb = json_array_size(before);
    json_decref(before);
    json_decref(
        ctl("POST", "/fault",
            json_pack("{s:s, s:f}", "outage_after", "TaskExecStart", "seconds", 2.0)));
    json_t *r = sh(c, "mo", "echo once-9f3 >> once.txt; echo done");
    errmsg(r);
    test_cond("lost TaskExecStart reply: the command's own result arrives",
              res_int(r, "exit_code") == 0 && out_is(r, "done\n"));
    json_decref(r);
    int n = 0;
    json_t *all = ctl("GET", "/execs", NULL);
    size_t i;
    json_t *x;
    json_array_foreach(all, i, x) {
        char *line = json_dumps(json_object_get(x, "command"), JSON_COMPACT);
        if (line && strstr(line, "once-9f3") && !strstr(line, "grep"))
            n++;
        free(line);
    }
    json_decref(all);
    test_cond("lost TaskExecStart reply: the command was started exactly once", n == 1);
    json_t *st = ctl("GET", "/calls?method=TaskExecStart", NULL);
    const char *id0 = NULL;
    int same = 0, total = 0;
    json_array_foreach(st, i, x) {
        if (i < nb)
            continue;
        const char *id =
            json_string_value(json_object_get(json_object_get(x, "request"), "exec_id"));
        total++;
        if (!id0)
            id0 = id;
        same += id && id0 && strcmp(id, id0) == 0;
    }
    test_cond("lost TaskExecStart reply: started again with the same exec id",
              total >= 2 && same == total);
    json_decref(st);
    r = sh(c, "mo", "cat once.txt");
    test_cond("lost TaskExecStart reply: it ran once", out_is(r, "once-9f3\n"));
    json_decref(r);
}

static void test_headers(void)
{
    json_t *all = ctl("GET", "/calls", NULL);
    size_t i;
    json_t *c;
    int n = 0, ids = 0, auth = 0, idem_ok = 0, unary = 0, client = 0;
    json_array_foreach(all, i, c) {
        json_t *md = json_object_get(c, "metadata");
        const char *m = json_string_value(json_object_get(c, "method"));
        const char *tid = json_string_value(json_object_get(md, "x-modal-token-id"));
        if (!tid || strcmp(tid, "ak-test") != 0)
            continue; /* the SDK test's own calls */
        n++;
        ids++;
        if (strcmp(m, "AuthTokenGet") == 0 ||
            json_is_true(json_object_get(md, "has-auth-token")))
            auth++;
        const char *ct = json_string_value(json_object_get(md, "x-modal-client-type"));
        if (ct && strcmp(ct, "8") == 0)
            client++;
        if (strcmp(m, "ContainerExec") == 0 || strcmp(m, "SandboxCreate") == 0 ||
            strcmp(m, "SandboxCreateV2") == 0 ||
            strcmp(m, "SandboxGetCommandRouterAccess") == 0) {
            unary++;
            const char *k = json_string_value(json_object_get(md, "x-idempotency-key"));
            if (k && strlen(k) == 36 && json_object_get(md, "x-retry-attempt"))
                idem_ok++;
        }
    }
    test_cond("headers: token id on every call, auth token on all but AuthTokenGet",
              n > 10 && ids == n && auth == n);
    test_cond("headers: client type", client == n);
    test_cond("headers: idempotency key + retry attempt on unary calls",
              unary > 0 && idem_ok == unary);
    int tokens = 0, rejected = 0;
    json_array_foreach(all, i, c) {
        json_t *md = json_object_get(c, "metadata");
        const char *tid = json_string_value(json_object_get(md, "x-modal-token-id"));
        if (!tid || strcmp(tid, "ak-test") != 0)
            continue;
        if (strcmp(json_string_value(json_object_get(c, "method")), "AuthTokenGet") == 0)
            tokens++;
        if (json_integer_value(json_object_get(c, "code")) == 16)
            rejected++;
    }
    /* The fake's tokens live 8 s (modal.sh): sbxd renews them before they expire. */
    test_cond("auth: the token is refreshed before it expires (never rejected)",
              tokens >= 2 && rejected == 0);
    json_decref(all);
}

/* ---- other daemons
 * ------------------------------------------------------------------------- */

static json_t *modal_info(conn *c)
{
    json_t *r = cn_call(c, "daemon.info", NULL);
    json_t *found = json_incref(pt_provider_of(r, "modal"));
    json_decref(r);
    return found;
}

static void test_nocred(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("no credentials: daemon reachable", 0);
        return;
    }
    json_t *p = modal_info(c);
    const char *reason = json_string_value(json_object_get(p, "reason"));
    test_cond("no credentials: daemon.info shows modal unavailable with the reason",
              p && json_is_false(json_object_get(p, "available")) && reason &&
                  strstr(reason, "MODAL_TOKEN_ID"));
    json_decref(p);
    json_t *r = cn_call(c, "sandbox.create", json_pack("{s:s}", "provider", "modal"));
    test_eq_int("no credentials: create -> -32002", err_code(r), -32002);
    json_decref(r);
    cn_close(c);
}

static void test_badcred(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("bad credentials: daemon reachable", 0);
        return;
    }
    json_t *r =
        cn_call_t(c, LONG_MS, "sandbox.create", json_pack("{s:s}", "provider", "modal"));
    json_t *e = json_object_get(r, "error");
    json_t *d = json_object_get(e, "data");
    const char *msg = json_string_value(json_object_get(d, "message"));
    test_cond(
        "bad credentials: create fails with -32006 UNAUTHENTICATED and Modal's message",
        err_code(r) == -32006 &&
            json_integer_value(json_object_get(d, "grpc_status")) == 16 && msg &&
            strstr(msg, "invalid") &&
            strstr(json_string_value(json_object_get(e, "message")), "UNAUTHENTICATED"));
    if (err_code(r) != -32006)
        errmsg(r);
    json_decref(r);
    r = cn_call(c, "sandbox.list", NULL);
    test_eq_int("bad credentials: nothing left behind",
                json_array_size(json_object_get(res_of(r), "sandboxes")), 0);
    json_decref(r);
    cn_close(c);
}

static void test_down(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("server down: daemon reachable", 0);
        return;
    }
    json_t *p = modal_info(c);
    test_cond("server down: daemon.info still answers", p != NULL);
    json_decref(p);
    double t0 = now_ms();
    json_t *r =
        cn_call_t(c, LONG_MS, "sandbox.create", json_pack("{s:s}", "provider", "modal"));
    const char *reason = json_string_value(
        json_object_get(json_object_get(json_object_get(r, "error"), "data"), "reason"));
    test_cond("server down: create -> -32002 with the reason, quickly",
              err_code(r) == -32002 && reason && strstr(reason, "127.0.0.1:1") &&
                  now_ms() - t0 < 10000);
    if (err_code(r) != -32002)
        errmsg(r);
    json_decref(r);
    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s}", "id", "d1", "provider", "duktape"));
    json_t *x = cn_call(c, "process.exec",
                        json_pack("{s:s, s:s}", "sandbox", "d1", "command", "1+1"));
    test_cond("server down: duktape keeps serving",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  json_integer_value(json_object_get(res_of(x), "result")) == 2);
    json_decref(x);
    json_decref(r);
    r = cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "d1"));
    json_decref(r);
    cn_close(c);
}

/* A daemon with backend v1 (the short-budget one): V1 sandboxes through the V1
 * calls, TaskGetCommandRouterAccess, and the ContainerExec fallback when the
 * router is refused (V2 sandboxes have none). */
static void test_v1_backend(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("backend v1: the sbxd answers", 0);
        return;
    }
    int acc = calls_count("TaskGetCommandRouterAccess", 0);
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mv1", "provider", "modal"));
    errmsg(r);
    const char *id = meta_str(r, "sandbox_id");
    test_cond("backend v1: a V1 sandbox (sb- and 22 characters)",
              strncmp(id, "sb-", 3) == 0 && strlen(id) == 25);
    json_decref(r);
    r = sh(c, "mv1", "echo v1");
    test_cond("backend v1: exec on the router, access by TaskGetCommandRouterAccess",
              out_is(r, "v1\n") && calls_count("TaskGetCommandRouterAccess", 0) > acc);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mv1")));
    /* Router refused: ContainerExec, said in the metadata. */
    json_decref(ctl("POST", "/fault", json_pack("{s:i}", "refuse_router", 1)));
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "mf", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    int ce = calls_count("ContainerExec", 0);
    r = sh(c, "mf", "echo fallback");
    test_cond("router refused: exec works through ContainerExec",
              out_is(r, "fallback\n") && calls_count("ContainerExec", 0) > ce);
    json_decref(r);
    r = sb_get(c, "mf");
    const char *why = meta_str(r, "exec_fallback_reason");
    test_cond("router refused: sandbox.get says container_exec and why",
              strcmp(meta_str(r, "exec_transport"), "container_exec") == 0 &&
                  strstr(why, "FAILED_PRECONDITION"));
    json_decref(r);
    json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mf")));

    cn_close(c);
}

static int outage_active(void)
{
    json_t *o = ctl("GET", "/outage", NULL);
    int a = json_is_true(json_object_get(o, "active"));
    json_decref(o);
    return a;
}

/* An outage longer than the retry budget (a daemon with a 5 s budget): the
 * process ends with output_incomplete and an error, never as a clean exit;
 * once the outage is over the sandbox works again. */
static void test_outage_long(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("long outage: the small-budget sbxd answers", 0);
        return;
    }
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mshort", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    char cmd[256];
    lines_cmd(cmd, sizeof(cmd), 30, 40.0);
    r = spawn_sh(c, "mshort", cmd);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    await_output(c, "mshort", pid, 30000);
    double t0 = now_ms();
    outage_start(30.0, "refuse");
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "mshort", "pid", pid));
    double took = now_ms() - t0;
    errmsg(r);
    const char *e = json_string_value(json_object_get(res_of(r), "error"));
    test_cond("outage 30 s, budget 5 s: the process ends with output_incomplete",
              json_is_true(json_object_get(res_of(r), "output_incomplete")));
    test_cond("outage 30 s, budget 5 s: ... an error and exit_code -1, not a clean exit",
              e && e[0] && res_int(r, "exit_code") == -1);
    test_cond("outage 30 s, budget 5 s: ... after the budget, during the outage",
              took >= 4000 && took < 25000 && outage_active());
    if (!(took >= 4000 && took < 25000))
        printf("      took %.0f ms\n", took);
    json_decref(r);
    int exit_note_incomplete = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m)
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.exit") ==
                0 &&
            json_integer_value(json_object_get(json_object_get(m, "params"), "pid")) ==
                pid)
            exit_note_incomplete = json_is_true(
                json_object_get(json_object_get(m, "params"), "output_incomplete"));
    test_cond("outage 30 s: the process.exit notification says output_incomplete",
              exit_note_incomplete);
    while (outage_active() && now_ms() - t0 < 40000)
        usleep(250000);
    r = sh(c, "mshort", "echo back");
    test_cond("outage 30 s: after it, the sandbox works again", out_is(r, "back\n"));
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mshort")));
    cn_close(c);
}

int main(int argc, char **argv)
{
    int st = md_main_args(argc, argv);
    if (st)
        return st;
    conn *c = md_connect();
    if (!c)
        return 1;
    json_t *mo = cn_call_t(c, LONG_MS, "sandbox.create",
                           json_pack("{s:s, s:s}", "id", "mo", "provider", "modal"));
    errmsg(mo);
    json_decref(mo);
    test_outage(c, 2.0);
    test_outage(c, 7.0);
    test_outage_exec_unknown(c);
    json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mo")));
    test_headers();
    cn_close(c);

    const char *s;
    if ((s = getenv("PTEST_NOCRED_SOCK")))
        test_nocred(s);
    if ((s = getenv("PTEST_BADCRED_SOCK")))
        test_badcred(s);
    if ((s = getenv("PTEST_DOWN_SOCK")))
        test_down(s);
    if ((s = getenv("PTEST_SHORT_SOCK"))) {
        test_v1_backend(s);
        test_outage_long(s);
    }
    return test_report();
}
