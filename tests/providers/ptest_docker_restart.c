/*
 * ptest_docker_restart.c - sbxd and its Docker sandboxes when something
 * goes away: a container killed or removed behind sbxd's back (also mid-op),
 * sbxd SIGKILLed and started again (adoption, replay), the created label of
 * an adopted container.
 *
 *   ptest_docker_restart SBXD BUILD_DIR TMPDIR
 *
 * One part of the main Docker suite (dk_suite.h: its sbxd, config and calls;
 * the environment is docker.sh's, see ptest_docker.c), run by
 * tests/providers/docker.sh.
 */

#include <curl/curl.h>
#include <fcntl.h>
#include <grp.h>
#include <stdint.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "dk_suite.h"
#include "testhelp.h"

/* After the restart: create reconnects, new execs get pids above the adopted
 * one. */
static void restart_after(conn *c, json_int_t pid)
{
    json_t *r;
    r = create(c, "rs1", NULL);
    test_cond("restart: sandbox.create with the id reconnects",
              json_is_true(json_object_get(res_of(r), "reconnected")));
    json_decref(r);
    test_cond("restart: new execs work", exec_ok(c, "rs1", "echo after", "after\n"));
    r = exec(c, "rs1", "echo pid");
    test_cond("restart: new pids are higher than the adopted one",
              res_int(r, "pid") > pid);
    json_decref(r);
    destroy(c, "rs1");
}

/* SIGKILL sbxd while a process runs; the new sbxd adopts the container and the process.
 */
static void test_restart(conn **cp)
{
    conn *c = *cp;
    json_t *r = create(c, "rs1", NULL);
    json_decref(r);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "rs1", "command",
                          "i=0; while [ $i -lt 30 ]; do echo line$i; i=$((i+1)); sleep "
                          "0.1; done; exit 7"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    usleep(600000);
    stop_sbxd(main_pid, SIGKILL);
    cn_close(c);
    main_pid = start_sbxd(main_cfg, main_sock, main_log);
    c = *cp = connect_main();
    test_cond("restart: sbxd is back", c != NULL);
    if (!c)
        return;
    int back = 0;
    for (int i = 0; i < 100 && !back; i++) {
        json_t *l = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "rs1"));
        back = res_of(l) && strcmp(res_str(l, "status"), "running") == 0 &&
               json_is_true(json_object_get(json_object_get(res_of(l), "metadata"),
                                            "agent_ready"));
        json_decref(l);
        if (!back)
            usleep(100000);
    }
    test_cond("restart: the sandbox is listed again, running", back);
    r = cn_call(c, "process.list", json_pack("{s:s}", "sandbox", "rs1"));
    json_t *pl = json_array_get(json_object_get(res_of(r), "processes"), 0);
    test_cond("restart: its process is adopted with the same pid",
              pl && json_integer_value(json_object_get(pl, "pid")) == pid);
    test_cond("restart: ... and listed with its command",
              pl && strncmp(json_string_value(json_object_get(pl, "command")) ?: "",
                            "i=0; while [ $i -lt 30 ]", 24) == 0);
    json_decref(r);
    json_array_clear(c->notes);
    r = cn_call(c, "process.attach",
                json_pack("{s:s, s:I}", "sandbox", "rs1", "pid", pid));
    json_decref(r);
    /* wait for the exit notification */
    int exited = 0, code = -1;
    double until = now_ms() + 20000;
    while (!exited && now_ms() < until) {
        json_t *m = cn_read(c, 1000);
        if (!m)
            continue;
        const char *meth = json_string_value(json_object_get(m, "method"));
        if (meth && strcmp(meth, "process.exit") == 0) {
            exited = 1;
            code = (int)json_integer_value(
                json_object_get(json_object_get(m, "params"), "exit_code"));
        }
        if (meth)
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    static char out[4096];
    out[0] = '\0';
    notes_output(c, (int)pid, "stdout", out, sizeof(out));
    char want[4096];
    size_t o = 0;
    for (int i = 0; i < 30; i++)
        o += (size_t)snprintf(want + o, sizeof(want) - o, "line%d\n", i);
    test_cond("restart: the whole output replayed, in order", strcmp(out, want) == 0);
    if (strcmp(out, want) != 0)
        printf("      got: %.300s\n", out);
    test_cond("restart: its exit is seen", exited && code == 7);
    restart_after(c, pid);
}

static int count_status(conn *c, const char *id, const char *status)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *pa = json_object_get(m, "params");
        if (!strcmp(json_string_value(json_object_get(m, "method")), "sandbox.status") &&
            !strcmp(json_string_value(json_object_get(pa, "sandbox")), id) &&
            !strcmp(json_string_value(json_object_get(pa, "status")), status))
            n++;
    }
    return n;
}

/* docker kill behind sbxd's back: error, then the next exec restarts it. */
static void killed_kill(conn *c, const char *cid)
{
    json_t *r;
    exec_ok(c, "kill1", "echo mark > /workspace/mark", NULL);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "kill1", "command", "sleep 100"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    char p[256];
    snprintf(p, sizeof(p), "/containers/%s/kill", cid);
    dk_engine("POST", p, NULL, NULL);
    test_cond("killed outside: status error", wait_status(c, "kill1", "error", 10000));
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "kill1"));
    test_cond("killed outside: the error says why",
              strstr(res_str(r, "error"), "behind sbxd's back") != NULL);
    json_decref(r);
    r = cn_call_t(c, 5000, "process.wait",
                  json_pack("{s:s, s:I}", "sandbox", "kill1", "pid", pid));
    test_cond("killed outside: the running process ended with an error",
              res_of(r) && !json_is_null(json_object_get(res_of(r), "error")));
    json_decref(r);
    r = exec_t(c, "kill1", "cat /workspace/mark", 60000);
    test_cond("docker kill: the next exec restarts the container and runs (retried, "
              "sandbox_restarted, files kept)",
              restarted_ok(r, "mark\n"));
    json_decref(r);
    test_cond("docker kill: running again, same container",
              !strcmp(status_of(c, "kill1"), "running"));
    r = exec(c, "kill1", "echo again");
    test_cond("docker kill: later calls are plain (no retried)",
              !strcmp(res_str(r, "stdout"), "again\n") &&
                  !json_object_get(res_of(r), "retried"));
    json_decref(r);

    /* sandbox.create on an errored id restarts it */
    dk_engine("POST", p, NULL, NULL);
    wait_status(c, "kill1", "error", 10000);
    r = create(c, "kill1", NULL);
    test_cond("docker kill: sandbox.create on the errored id reconnects and restarts it",
              json_is_true(json_object_get(res_of(r), "reconnected")) &&
                  wait_status(c, "kill1", "running", 30000) &&
                  exec_ok(c, "kill1", "cat /workspace/mark", "mark\n"));
    json_decref(r);
}

/* docker rm -f behind sbxd's back: error, then the next exec recreates it. */
static void killed_removed(conn *c, const char *cid)
{
    json_t *r;
    char p[256];
    /* removed behind our back */
    snprintf(p, sizeof(p), "/containers/%s?force=1", cid);
    dk_engine("DELETE", p, NULL, NULL);
    test_cond("removed outside: status error", wait_status(c, "kill1", "error", 10000));
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "kill1"));
    test_cond("removed outside: the error says so",
              strstr(res_str(r, "error"), "removed") != NULL);
    if (!strstr(res_str(r, "error"), "removed"))
        printf("      error: %s\n", res_str(r, "error"));
    json_decref(r);
    r = exec_t(c, "kill1", "test -e /workspace/mark && echo kept || echo fresh", 60000);
    test_cond("docker rm -f: the next exec recreates the container from the sandbox's "
              "config and runs (retried, sandbox_restarted)",
              restarted_ok(r, "fresh\n"));
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "kill1"));
    test_cond("docker rm -f: a new container, metadata.recreated 1",
              strcmp(cid_of(r), cid) != 0 && cid_of(r)[0] &&
                  json_integer_value(json_object_get(
                      json_object_get(res_of(r), "metadata"), "recreated")) == 1);
    json_decref(r);
    destroy(c, "kill1");
}

static void killed_retry_once(conn *c)
{
    json_t *r;
    char cid[100], p[256];
    /* one retry only: a restart that cannot work fails the call once */
    dk_engine("POST", "/images/sbx-test%2Fbusybox/tag?repo=sbx-test%2Fretry2&tag=latest",
              NULL, NULL);
    r = create(c, "retry2", json_pack("{s:s}", "image", "sbx-test/retry2"));
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    snprintf(p, sizeof(p), "/containers/%s?force=1", cid);
    dk_engine("DELETE", p, NULL, NULL);
    dk_engine("DELETE", "/images/sbx-test%2Fretry2:latest", NULL, NULL);
    wait_status(c, "retry2", "error", 10000);
    json_array_clear(c->notes);
    r = exec_t(c, "retry2", "echo never", 60000);
    test_cond("one retry only: a failed restart ends the call with its error (retried, "
              "not sandbox_restarted)",
              res_of(r) && json_is_string(json_object_get(res_of(r), "error")) &&
                  json_is_true(json_object_get(res_of(r), "retried")) &&
                  json_is_false(json_object_get(res_of(r), "sandbox_restarted")));
    json_decref(r);
    test_cond("one retry only: one restart attempt, then error again",
              count_status(c, "retry2", "starting") == 1 &&
                  !strcmp(status_of(c, "retry2"), "error"));
    destroy(c, "retry2");
}

static void killed_mid_call(conn *c)
{
    json_t *r;
    char cid[100], p[256];
    /* a call that failed because the container died is retried after a restart */
    r = create(c, "retry1", NULL);
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    snprintf(p, sizeof(p), "/containers/%s/pause", cid);
    dk_engine("POST", p, NULL, NULL);
    /* the SPAWN reaches a frozen agent; then the container dies */
    int id = ++c->next_id;
    char req[256];
    snprintf(req, sizeof(req),
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"process.exec\",\"params\":{"
             "\"sandbox\":"
             "\"retry1\",\"command\":\"echo retried\"}}\n",
             id);
    cn_send_raw(c, req, strlen(req));
    usleep(300000);
    snprintf(p, sizeof(p), "/containers/%s/kill", cid);
    dk_engine("POST", p, NULL, NULL);
    json_t *ans = NULL;
    double until = now_ms() + 30000;
    while (!ans && now_ms() < until) {
        json_t *m = cn_read(c, 1000);
        if (m && json_integer_value(json_object_get(m, "id")) == id)
            ans = m;
        else if (m)
            json_array_append_new(c->notes, m);
    }
    test_cond("died during a call: retried once after a restart, and the result says so",
              ans && json_integer_value(json_object_get(res_of(ans), "exit_code")) == 0 &&
                  strcmp(res_str(ans, "stdout"), "retried\n") == 0 &&
                  json_is_true(json_object_get(res_of(ans), "retried")));
    if (ans && !json_is_true(json_object_get(res_of(ans), "retried"))) {
        char *s = json_dumps(ans, 0);
        printf("      %.500s\n", s);
        free(s);
    }
    json_decref(ans);
    destroy(c, "retry1");
}

static void test_killed_outside(conn *c)
{
    json_t *r = create(c, "kill1", NULL);
    char cid[100];
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    killed_kill(c, cid);
    killed_removed(c, cid);
    killed_retry_once(c);
    killed_mid_call(c);
}

/* ---- issue 11: losing the backend ends the pending op at once ---------------------- */

/* A snapshot or stop in flight while the container is removed behind sbxd's
 * back answers at once (done, or a provider error), not at
 * limits.op_timeout_ms (300 s by default here); destroy then finishes. */
static void test_lost_mid_op(conn *c)
{
    json_t *r = create(c, "lm1", NULL);
    char cid[100], p[256];
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    /* A big layer: the commit takes a while (vfs copies it). */
    exec_ok(c, "lm1", "dd if=/dev/zero of=/big bs=1M count=200 2>/dev/null && echo ok",
            "ok\n");
    int id = send_call(c, "sandbox.snapshot", json_pack("{s:s}", "id", "lm1"));
    usleep(300000);
    double t = now_ms();
    snprintf(p, sizeof(p), "/containers/%s?force=1", cid);
    dk_engine("DELETE", p, NULL, NULL);
    json_t *ans = await_id(c, id, 120000);
    double took = now_ms() - t;
    print_answer("snapshot, container removed meanwhile", ans, took);
    test_cond("removed mid-snapshot: the snapshot answers at once (done or a provider "
              "error), not at op_timeout_ms",
              op_answer_clear(ans) && took < 20000);
    const char *snap = json_string_value(json_object_get(res_of(ans), "snapshot"));
    if (snap)
        json_decref(
            cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snap)));
    json_decref(ans);
    test_cond("removed mid-snapshot: the sandbox is in error",
              wait_status(c, "lm1", "error", 10000));
    t = now_ms();
    r = cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "lm1"));
    test_cond("removed mid-snapshot: destroy finishes",
              res_of(r) && now_ms() - t < 20000);
    json_decref(r);

    r = create(c, "lm2", NULL);
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    json_decref(
        cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "lm2", "command", "sleep 100")));
    id = send_call(c, "sandbox.stop", json_pack("{s:s}", "id", "lm2"));
    usleep(100000);
    t = now_ms();
    snprintf(p, sizeof(p), "/containers/%s?force=1", cid);
    dk_engine("DELETE", p, NULL, NULL);
    ans = await_id(c, id, 120000);
    took = now_ms() - t;
    print_answer("stop, container removed meanwhile", ans, took);
    test_cond("removed mid-stop: the stop answers at once (done or a provider error)",
              op_answer_clear(ans) && took < 20000);
    json_decref(ans);
    t = now_ms();
    r = cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "lm2"));
    test_cond("removed mid-stop: destroy finishes", res_of(r) && now_ms() - t < 20000);
    json_decref(r);
}

/* Issue 11: an adopted container's sbxd.created label is the container's to
 * say; "inf" or "1e300" overflowed a float-to-integer conversion (UB; on
 * x86 the lifetime became INT64_MIN). */
static void test_created_label(void)
{
    static const char *vals[] = {"inf", "1e300", "nan", "-inf"};
    char sock[108], body[1024], name[64];
    snprintf(sock, sizeof(sock), "%.80s/%.10s.sock", tmpdir, "lbl");
    int made = 1;
    for (int i = 0; i < 4; i++) {
        snprintf(body, sizeof(body),
                 "{\"Image\":\"sbx-test/busybox\",\"Cmd\":[\"true\"],\"Labels\":{"
                 "\"sbxd.id\":\"lbl%d\",\"sbxd.owner\":\"0\",\"sbxd.socket\":\"%s\","
                 "\"sbxd.created\":\"%s\"}}",
                 i, sock, vals[i]);
        snprintf(name, sizeof(name), "/containers/create?name=sbx-lbl%d-%d", i,
                 (int)getpid());
        made &= dk_engine("POST", name, body, NULL) == 201;
    }
    test_cond("created label: four containers labelled inf, 1e300, nan, -inf", made);
    pid_t pid;
    conn *c = start_other("lbl", docker_host, "", &pid);
    int sane = c != NULL;
    for (int i = 0; i < 4 && c; i++) {
        char id[16];
        snprintf(id, sizeof(id), "lbl%d", i);
        json_t *r = NULL;
        for (int k = 0; k < 100; k++) {
            json_decref(r);
            r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", id));
            if (res_of(r))
                break;
            usleep(50000);
        }
        json_int_t t = res_int(r, "timeout_ms");
        if (!res_of(r) || t < 0 || t > 86400000) {
            printf("      %s (%s): timeout_ms %lld\n", id, vals[i], (long long)t);
            sane = 0;
        }
        json_decref(r);
        json_decref(cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", id)));
    }
    test_cond("created label: each is adopted with a lifetime in range", sane);
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
}

int main(int argc, char **argv)
{
    conn *c;
    int st = dk_suite_start(argc, argv, "main-restart", &c);
    if (st)
        return st;
    DK_STEP(test_killed_outside(c));
    DK_STEP(test_lost_mid_op(c));
    DK_STEP(test_restart(&c));
    DK_STEP(test_created_label());
    dk_suite_end(c);
    return test_report();
}
