/*
 * ptest_modal.c - the Modal provider through a real sbxd, against the fake
 * Modal control plane (tests/modal/fake/server.js), whose HTTP control port
 * shows what the provider really did (sandboxes, execs, calls) and injects
 * faults: the basics, processes (stdin, output, kill, timeouts, flow control)
 * and the command router.
 *
 * The rest of the suite is in parts by feature, each its own binary sharing
 * md_kit.h: ptest_modal_life.c, ptest_modal_outage.c, ptest_modal_restart.c
 * (modal.sh runs them in turn, after this one).
 *
 * usage: ptest_modal SOCKET CONTROL_PORT
 * Optional environment (set by tests/providers/modal.sh):
 *   PTEST_SBXD_CMD      shell command that execs an sbxd on the same fake
 *                       (SBXD_SOCKET is set by the test): reconnect after restart
 *   PTEST_TMP           a scratch folder
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

/* ---- the tests
 * ---------------------------------------------------------------------------- */

static void test_info(void)
{
    conn *c = cn_open(SOCK);
    json_t *r = cn_call(c, "daemon.info", NULL);
    int avail = json_is_true(json_object_get(pt_provider_of(r, "modal"), "available"));
    test_cond("daemon.info: modal is available with credentials", avail);
    json_decref(r);
    cn_close(c);
}

/* Commands in m1: output, exit codes, argv, cwd and env. */
static void basics_exec(conn *c)
{
    json_t *r;
    size_t before = json_array_size(c->notes);
    r = sh(c, "m1", "echo hi");
    test_cond("exec echo hi: exit 0, stdout",
              res_int(r, "exit_code") == 0 && out_is(r, "hi\n"));
    int pid = (int)res_int(r, "pid");
    char buf[64];
    test_cond("exec: process.output notification",
              notes_output(c, pid, "stdout", buf, sizeof(buf)) == 3 &&
                  strcmp(buf, "hi\n") == 0 && json_array_size(c->notes) > before);
    json_decref(r);

    r = sh(c, "m1", "echo err >&2; printf out; exit 3");
    test_cond("exec: exit code and stderr",
              res_int(r, "exit_code") == 3 &&
                  strcmp(res_str(r, "stderr"), "err\n") == 0 && out_is(r, "out"));
    json_decref(r);

    r = run(c, "m1", json_pack("[s,s,s,s]", "printf", "%s-%s", "a b", "c"), NULL);
    test_cond("exec argv: no shell", res_int(r, "exit_code") == 0 && out_is(r, "a b-c"));
    json_decref(r);

    r = sh(c, "m1", "pwd");
    test_cond("cwd: the sandbox working_dir by default",
              ends_with(res_str(r, "stdout"), "/work\n"));
    json_decref(r);
    r = run(c, "m1", json_string("pwd"), json_pack("{s:s}", "cwd", "/tmp/x"));
    test_cond("cwd: the command's cwd wins", ends_with(res_str(r, "stdout"), "/tmp/x\n"));
    json_decref(r);

    r = sh(c, "m1", "echo \"$A|$B\"");
    test_cond("env: create-time env", out_is(r, "1|b\n"));
    json_decref(r);
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:s, s:n, s:s}}", "id", "m1", "env", "A", "2", "B",
                          "D", "d"));
    json_decref(r);
    r = run(c, "m1", json_string("echo \"$A|${B-unset}|$C|$D\""),
            json_pack("{s:{s:s}}", "env", "C", "3"));
    test_cond("env: runtime set_env over create env, null removes, command env on top",
              out_is(r, "2|unset|3|d\n"));
    json_decref(r);
    r = run(c, "m1", json_string("echo \"$A\""), json_pack("{s:{s:s}}", "env", "A", "4"));
    test_cond("env: the command's env wins", out_is(r, "4\n"));
    json_decref(r);
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:n, s:n}}", "id", "m1", "env", "A", "D"));
    json_decref(r);
}

static void test_basics(conn *c)
{
    json_t *r =
        cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:{s:f, s:i}}", "id", "m1",
                            "provider", "modal", "env", "A", "1", "B", "b", "working_dir",
                            "/work", "options", "cpu", 0.5, "memory_mb", 256));
    errmsg(r);
    test_eq_str("create: running", res_str(r, "status"), "running");
    test_cond("create: metadata has Modal's sandbox id, a V2 one (backend auto)",
              strncmp(meta_str(r, "sandbox_id"), "sbv2-", 5) == 0);
    test_cond("create: metadata app, image, timeout",
              strcmp(meta_str(r, "app"), "sbxd-test") == 0 &&
                  strcmp(meta_str(r, "image"), "ubuntu:22.04") == 0 &&
                  meta_int(r, "timeout_secs") == 300 &&
                  strncmp(meta_str(r, "image_id"), "im-", 3) == 0);
    test_cond("create: not a reconnect",
              !meta_true(r, "reconnected") &&
                  !json_is_true(json_object_get(res_of(r), "reconnected")));
    test_cond("create: image build progress notifications",
              count_notes(c, "sandbox.progress", "m1") >= 2);
    json_t *fs = fake_sandbox(meta_str(r, "sandbox_id"));
    json_t *res = json_object_get(fs, "resources");
    test_cond(
        "fake: named after the sbxd id, in app sbxd-test",
        strcmp(json_string_value(json_object_get(fs, "name")), "m1") == 0 &&
            strcmp(json_string_value(json_object_get(fs, "app_name")), "sbxd-test") == 0);
    test_cond("fake: workdir, cpu and memory requests, timeout",
              strcmp(json_string_value(json_object_get(fs, "workdir")), "/work") == 0 &&
                  json_integer_value(json_object_get(res, "milli_cpu")) == 500 &&
                  json_integer_value(json_object_get(res, "memory_mb")) == 256 &&
                  json_integer_value(json_object_get(fs, "timeout_secs")) == 300);
    test_cond("fake: env baked in as a secret",
              strcmp(json_string_value(json_object_get(json_object_get(fs, "env"), "A")),
                     "1") == 0 &&
                  json_array_size(json_object_get(fs, "secret_ids")) == 1);
    json_decref(fs);
    json_decref(r);

    basics_exec(c);
}

static void test_stdin(conn *c)
{
    json_t *r = run(c, "m1", json_string("cat; echo ."),
                    json_pack("{s:s}", "stdin", "hello\nworld"));
    test_cond("stdin: exec with stdin, then EOF", out_is(r, "hello\nworld.\n"));
    json_decref(r);

    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "m1", "command", "cat"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    r = cn_call(c, "process.write",
                json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "data", "abc"));
    json_decref(r);
    r = cn_call(
        c, "process.write",
        json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "data_b64", "ZGVm"));
    json_decref(r);
    r = cn_call(c, "process.close_stdin",
                json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid));
    char buf[64] = "";
    notes_output(c, pid, "stdout", buf, sizeof(buf));
    test_cond("stdin: process.write + close_stdin reach the remote process",
              res_int(r, "exit_code") == 0 && strcmp(buf, "abcdef") == 0);
    json_decref(r);
}

static void test_output(conn *c)
{
    json_t *r = sh(c, "m1", "head -c 300000 /dev/zero | tr '\\0' a");
    const char *s = res_str(r, "stdout");
    size_t n = strlen(s), bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += s[i] != 'a';
    test_cond("output: 300 kB arrive intact", n == 300000 && bad == 0);
    json_decref(r);

    /* A stdio stream dropped mid-output (mid-line: after 200 bytes) resumes at its
     * byte offset: every line once, in order. */
    json_t *f = ctl("POST", "/fault",
                    json_pack("{s:i, s:i}", "drop_stdio_after_bytes", 200, "fd", 1));
    json_decref(f);
    int broken_before = calls_count("TaskExecStdioRead", 14);
    r = sh(c, "m1",
           "i=1; while [ $i -le 120 ]; do echo line$i; "
           "[ $((i % 8)) = 0 ] && sleep 0.03; i=$((i+1)); done");
    char want[4096] = "";
    size_t o = 0;
    for (int i = 1; i <= 120; i++)
        o += (size_t)snprintf(want + o, sizeof(want) - o, "line%d\n", i);
    test_cond("output: broken stream resumed without loss or duplication",
              res_int(r, "exit_code") == 0 && out_is(r, want));
    test_cond("output: the stream really broke (UNAVAILABLE) and was reopened",
              calls_count("TaskExecStdioRead", 14) > broken_before);
    json_t *reads = ctl("GET", "/calls?method=TaskExecStdioRead", NULL);
    int at200 = 0;
    size_t ri;
    json_t *rc;
    json_array_foreach(reads, ri, rc)
        at200 += json_integer_value(
                     json_object_get(json_object_get(rc, "request"), "offset")) == 200;
    json_decref(reads);
    test_cond("output: ... at the byte after the last one received (offset 200)",
              at200 == 1);
    json_decref(r);
    json_decref(ctl("DELETE", "/faults", NULL));
}

static json_t *wait_pid(conn *c, const char *sb, int pid)
{
    return cn_call_t(c, LONG_MS, "process.wait",
                     json_pack("{s:s, s:i}", "sandbox", sb, "pid", pid));
}

static void kill_at_once(conn *c)
{
    json_t *r, *e;
    int pid;
    /* Killed before Modal even answered the exec: it still ends remotely. */
    r = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s}", "sandbox", "m1", "command", "sleep 31; echo early"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    json_decref(
        cn_call(c, "process.kill", json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid)));
    r = wait_pid(c, "m1", pid);
    test_cond("kill at once: exit 137, killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);
    e = NULL;
    for (int i = 0; i < 60; i++) {
        json_decref(e);
        e = fake_exec("sleep 31; echo early");
        if (!e || json_is_integer(json_object_get(e, "exit_code")))
            break;
        usleep(50000);
    }
    test_cond("kill at once: the remote process ended too",
              !e || json_is_integer(json_object_get(e, "exit_code")));
    json_decref(e);
}

static void kill_term(conn *c)
{
    json_t *r;
    int pid;
    double t0;
    /* SIGTERM reaches the command, which dies of it: 143. */
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "m1", "command", "echo up; sleep 32"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    usleep(400000);
    json_decref(cn_call(
        c, "process.kill",
        json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "signal", "TERM")));
    r = wait_pid(c, "m1", pid);
    test_cond("kill TERM: exit 143, killed",
              res_int(r, "exit_code") == 143 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);

    /* A command that ignores SIGTERM still ends (escalated to SIGKILL). */
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "m1", "command",
                          "trap '' TERM; sleep 33; echo survived"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    usleep(400000);
    t0 = now_ms();
    json_decref(cn_call(
        c, "process.kill",
        json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "signal", "TERM")));
    r = wait_pid(c, "m1", pid);
    char out[256] = "";
    notes_output(c, pid, "stdout", out, sizeof(out));
    test_cond("kill TERM ignored: escalated to KILL, the process really ends",
              json_is_true(json_object_get(res_of(r), "killed")) &&
                  res_int(r, "exit_code") == 137 && !strstr(out, "survived") &&
                  now_ms() - t0 < 10000);
    json_decref(r);
}

/* timeout_ms ends the command at the deadline, remotely too. */
static void kill_timeout_ms(conn *c)
{
    json_t *r, *e;
    double t0;
    t0 = now_ms();
    r = run(c, "m1", json_string("echo tick; sleep 30; echo never"),
            json_pack("{s:i}", "timeout_ms", 1500));
    double took = now_ms() - t0;
    test_cond("timeout: exit 124, timed_out, killed",
              res_int(r, "exit_code") == 124 &&
                  json_is_true(json_object_get(res_of(r), "timed_out")) &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    test_cond("timeout: at the deadline", took >= 1400 && took < 5000);
    test_cond("timeout: output before the deadline kept", out_is(r, "tick\n"));
    json_decref(r);
    e = fake_exec("sleep 30; echo never");
    int ended = 0;
    for (int i = 0; i < 40; i++) {
        json_decref(e);
        e = fake_exec("sleep 30; echo never");
        if ((ended = json_is_integer(json_object_get(e, "exit_code"))))
            break;
        usleep(50000);
    }
    test_cond("timeout: the remote process ended too",
              ended && !pid_alive(json_integer_value(json_object_get(e, "pid"))));
    test_eq_int("timeout: Modal got the per-command timeout",
                json_integer_value(json_object_get(e, "timeout_secs")), 2);
    json_decref(e);
}

static void test_kill_timeout(conn *c)
{
    char *mid = modal_id_of(c, "m1");
    json_t *fs = fake_sandbox(mid);
    char kidfile[1024];
    snprintf(kidfile, sizeof(kidfile), "%s/work/kid.pid",
             json_string_value(json_object_get(fs, "root")));
    json_decref(fs);
    unlink(kidfile);
    json_t *r = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s}", "sandbox", "m1", "command",
                  "sleep 60 & echo $! > kid.pid; echo started; sleep 61; echo no"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    long kid = 0;
    for (int i = 0; i < 200 && !(kid = read_long_file(kidfile)); i++)
        usleep(25000);
    test_cond("kill: the remote command runs (child pid recorded)",
              kid > 0 && pid_alive(kid));
    double t0 = now_ms();
    r = cn_call(c, "process.kill", json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid));
    json_decref(r);
    r = wait_pid(c, "m1", pid);
    test_cond("kill: exit 137, killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    test_cond("kill: quick", now_ms() - t0 < 4000);
    json_decref(r);
    int gone = 0;
    for (int i = 0; i < 40 && !(gone = !pid_alive(kid)); i++)
        usleep(50000);
    test_cond("kill: the remote process group is really gone (child too)", gone);
    json_t *e = fake_exec("kid.pid");
    test_eq_int("kill: the fake saw the exec end with 137",
                json_integer_value(json_object_get(e, "exit_code")), 137);
    json_decref(e);
    json_t *k = fake_exec("sbx[d]-$0");
    test_cond("kill: done by a second exec (the killer)", k != NULL);
    json_decref(k);

    kill_at_once(c);
    kill_term(c);
    kill_timeout_ms(c);
    free(mid);
}

/* What today's SDKs send at create, sbxd sends too: the owner tags in the
 * create itself, its limits as ceilings, the workspace's image builder version. */
static void test_create_drifts(conn *c)
{
    json_t *cs = ctl("GET", "/calls?method=SandboxCreateV2", NULL);
    json_t *last = NULL;
    size_t i;
    json_t *x;
    json_array_foreach(cs, i, x) {
        const char *tid = json_string_value(
            json_object_get(json_object_get(x, "metadata"), "x-modal-token-id"));
        if (tid && strcmp(tid, "ak-test") == 0)
            last = x;
    }
    json_t *req = json_object_get(last, "request");
    int owner = 0;
    json_array_foreach(json_object_get(req, "tags"), i, x)
        owner += strcmp(json_string_value(json_object_get(x, "tag_name")),
                        "sbxd_owner_uid") == 0;
    test_cond("create: the owner tag is in SandboxCreateV2 itself", owner == 1);
    json_t *res = json_object_get(json_object_get(req, "definition"), "resources");
    test_cond("create: memory and cpu are ceilings too (memory_mb_max, milli_cpu_max)",
              json_integer_value(json_object_get(res, "memory_mb_max")) ==
                      json_integer_value(json_object_get(res, "memory_mb")) &&
                  json_integer_value(json_object_get(res, "milli_cpu_max")) ==
                      json_integer_value(json_object_get(res, "milli_cpu")) &&
                  json_integer_value(json_object_get(res, "milli_cpu")) > 0);
    json_decref(cs);
    json_t *imgs = ctl("GET", "/images", NULL);
    int ours = 0;
    json_array_foreach(imgs, i, x) {
        const char *bv = json_string_value(json_object_get(x, "builder_version"));
        ours += bv && strcmp(bv, "2025.06") == 0;
    }
    json_decref(imgs);
    test_cond("create: images are built with the workspace's builder version "
              "(EnvironmentGetOrCreate)",
              ours > 0 && calls_count("EnvironmentGetOrCreate", 0) > 0);
}

/* The command router: sbxd's processes went through it (the fake's log per
 * client), a lost start reply is not run twice, a refused router falls back
 * to ContainerExec and sandbox.get says so, and a server retry policy is obeyed. */
static int client_calls(json_t *per, const char *svc, const char *method)
{
    return (int)json_integer_value(json_object_get(
        json_object_get(json_object_get(per, "sbxd/" SBX_VERSION), svc), method));
}

static void test_router(conn *c)
{
    json_t *per = ctl("GET", "/clients", NULL);
    test_cond("router: sbxd's processes used TaskExecStart, TaskExecStdioRead, "
              "TaskExecStdinWrite, TaskExecWait",
              client_calls(per, "router", "TaskExecStart") > 0 &&
                  client_calls(per, "router", "TaskExecStdioRead") > 0 &&
                  client_calls(per, "router", "TaskExecStdinWrite") > 0 &&
                  client_calls(per, "router", "TaskExecWait") > 0 &&
                  client_calls(per, "control", "SandboxGetCommandRouterAccess") > 0);
    test_cond("router: ... and never ContainerExec (exec, output, input, wait, kill)",
              client_calls(per, "control", "ContainerExec") == 0 &&
                  client_calls(per, "control", "ContainerExecGetOutput") == 0 &&
                  client_calls(per, "control", "ContainerExecPutInput") == 0 &&
                  client_calls(per, "control", "ContainerExecWait") == 0);
    json_decref(per);
    json_t *r = sb_get(c, "m1");
    test_eq_str("router: sandbox.get says exec_transport task_command_router",
                meta_str(r, "exec_transport"), "task_command_router");
    json_decref(r);

    /* The fake's router tokens live 8 s: a command that runs longer gets its
     * access fetched again before the token expires, and no router call is
     * turned away for an expired one. */
    int acc0 = calls_count("SandboxGetCommandRouterAccess", 0);
    int unauth0 = calls_count("TaskExecWait", 16) + calls_count("TaskExecStdioRead", 16) +
                  calls_count("TaskExecStart", 16);
    r = sh(c, "m1", "sleep 12; echo late");
    int unauth1 = calls_count("TaskExecWait", 16) + calls_count("TaskExecStdioRead", 16) +
                  calls_count("TaskExecStart", 16);
    test_cond("router: a 12 s command under 8 s tokens: access fetched again in time, "
              "no call rejected",
              out_is(r, "late\n") &&
                  calls_count("SandboxGetCommandRouterAccess", 0) >= acc0 + 2 &&
                  unauth1 == unauth0);
    json_decref(r);

    /* A start whose reply is lost (the call was carried out) is retried with the same
     * exec id and does not run twice. */
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i}}", "fail_after", "method", "TaskExecStart",
                              "code", 14)));
    r = sh(c, "m1", "echo x >> twice.txt; wc -l < twice.txt");
    test_cond("router: a retried TaskExecStart ran the command once",
              res_int(r, "exit_code") == 0 && out_is(r, "1\n"));
    json_decref(r);

    /* RPCRetryPolicy: a code sbxd never retries on its own (RESOURCE_EXHAUSTED) is
     * retried after the delay the server names, with the throttle headers. */
    int before = calls_count("SandboxCreateV2", -1);
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i, s:s, s:f}}", "fail_next", "method",
                              "SandboxCreateV2", "code", 8, "message", "slow down",
                              "retry_after_secs", 0.6)));
    double t0 = now_ms();
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "mr", "provider", "modal"));
    double took = now_ms() - t0;
    errmsg(r);
    test_cond("retry policy: the create succeeds after the server's delay",
              err_code(r) == 0 && took >= 550);
    json_decref(r);
    json_t *cs = ctl("GET", "/calls?method=SandboxCreateV2", NULL);
    json_t *a = json_array_get(cs, (size_t)before),
           *b2 = json_array_get(cs, (size_t)before + 1);
    json_t *mda = json_object_get(a, "metadata"), *mdb = json_object_get(b2, "metadata");
    const char *ta = json_string_value(json_object_get(mda, "x-throttle-retry-attempt"));
    const char *tb = json_string_value(json_object_get(mdb, "x-throttle-retry-attempt"));
    const char *host = json_string_value(json_object_get(mda, "x-modal-host"));
    test_cond("retry policy: codes 8 then 0; throttle attempt 0 then 1 (with a delay); "
              "x-modal-host",
              json_integer_value(json_object_get(a, "code")) == 8 &&
                  json_integer_value(json_object_get(b2, "code")) == 0 && ta &&
                  strcmp(ta, "0") == 0 && tb && strcmp(tb, "1") == 0 &&
                  json_object_get(mdb, "x-throttle-retry-delay") && host &&
                  strcmp(host, "127.0.0.1") == 0);
    json_decref(cs);
    json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mr")));
    json_decref(ctl("DELETE", "/faults", NULL));
}

static void test_flow_control(void)
{
    /* A follower that does not read: output must stop flowing from Modal
     * (CURL_WRITEFUNC_PAUSE), not pile up in sbxd, then resume losslessly. */
    conn *slow = cn_open(SOCK), *c = cn_open(SOCK);
    const int total = 40 * 1024 * 1024;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "head -c %d /dev/zero | tr '\\0' z", total);
    json_t *r = cn_call(slow, "process.spawn",
                        json_pack("{s:s, s:s}", "sandbox", "m1", "command", cmd));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    json_int_t seen = 0, prev = -1;
    /* Let it run until sbxd stops taking more (or everything arrived). */
    for (int i = 0; i < 60; i++) {
        usleep(100000);
        r = cn_call(c, "process.list", json_pack("{s:s}", "sandbox", "m1"));
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(res_of(r), "processes"), k, p)
            if (json_integer_value(json_object_get(p, "pid")) == pid)
                seen = json_integer_value(json_object_get(p, "stdout_bytes"));
        json_decref(r);
        if (seen == prev && seen > 0)
            break;
        prev = seen;
    }
    test_cond("flow control: output stops while the follower does not read",
              seen > 0 && seen < total);
    /* Now read everything. */
    size_t got = 0;
    int exited = 0;
    double deadline = now_ms() + 60000;
    while (!exited && now_ms() < deadline) {
        json_t *m = cn_read(slow, 1000);
        if (!m)
            continue;
        const char *meth = json_string_value(json_object_get(m, "method"));
        json_t *p = json_object_get(m, "params");
        if (meth && strcmp(meth, "process.output") == 0 &&
            json_integer_value(json_object_get(p, "pid")) == pid)
            got += json_string_length(json_object_get(p, "data"));
        if (meth && strcmp(meth, "process.exit") == 0 &&
            json_integer_value(json_object_get(p, "pid")) == pid)
            exited = 1;
        json_decref(m);
    }
    test_cond("flow control: resumed, every byte delivered",
              exited && got == (size_t)total);
    if (!exited || got != (size_t)total)
        printf("      exited %d, got %zu of %d (seen %lld while blocked)\n", exited, got,
               total, (long long)seen);
    cn_close(slow);
    cn_close(c);
}

int main(int argc, char **argv)
{
    int st = md_main_args(argc, argv);
    if (st)
        return st;
    json_t *h = ctl("GET", "/health", NULL);
    test_cond("the fake's control port answers", json_is_true(json_object_get(h, "ok")));
    json_decref(h);
    conn *c = cn_open(SOCK);
    test_cond("sbxd answers", c != NULL);
    if (!c)
        return test_report();
    test_info();
    test_basics(c);
    test_stdin(c);
    test_output(c);
    test_kill_timeout(c);
    test_create_drifts(c);
    test_router(c);
    test_flow_control();
    cn_close(c);
    return test_report();
}
