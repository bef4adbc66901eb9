/*
 * ptest_docker_ws.c - sandboxes as workspaces (issue 18) on a real Docker
 * engine: terminals (process.spawn/exec "pty", process.resize, replay after
 * reattach, sbxctl exec --tty driven through script(1)).
 *
 *   ptest_docker_ws SBXD BUILD_DIR TMPDIR
 *
 * Run by tests/providers/docker_ws.sh (DOCKER_HOST=unix://..., the test
 * images built). It starts its own sbxd and talks JSON-RPC with itest.h.
 */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "testhelp.h"

static const char *sbxd_bin, *bdir, *tmpdir, *docker_host;
static char sock[108], cfg[512], log_path[512];
static pid_t sbxd_pid;

/* ---- sbxd ------------------------------------------------------------------------- */

static pid_t start_sbxd(void)
{
    return dk_sbxd_start(cfg, sock, log_path, "debug");
}

static void stop_sbxd(pid_t pid)
{
    dk_sbxd_stop(pid, SIGTERM, 10000);
}

static void write_config(void)
{
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "limits:\n  stats_interval_ms: 1000\n  stats_streams_per_session: 2\n"
            "providers:\n"
            "  duktape:\n    pool_size: 1\n"
            "  docker:\n"
            "    host: %s\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    network: none\n"
            "    memory: 256m\n"
            "    pids_limit: 128\n"
            "    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n"
            "    labels:\n      org.sbxd.managed: \"true\"\n",
            docker_host, bdir);
    fclose(f);
}

static conn *connect_sbxd(void)
{
    return dk_connect(sock, 5000);
}

/* ---- helpers ---------------------------------------------------------------------- */

static void show(const char *what, json_t *r)
{
    char *s = json_dumps(r, JSON_COMPACT);
    printf("      %s -> %.600s\n", what, s ? s : "(null)");
    free(s);
}

/* Reads c until pid's stdout so far contains want (or timeout): 1 if it does. */
static int wait_output(conn *c, int pid, const char *want, int timeout_ms)
{
    static char buf[1 << 16];
    double end = now_ms() + timeout_ms;
    for (;;) {
        notes_output(c, pid, "stdout", buf, sizeof(buf));
        if (strstr(buf, want))
            return 1;
        int left = (int)(end - now_ms());
        if (left <= 0)
            break;
        json_t *m = cn_read(c, left);
        if (!m)
            break;
        if (json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    printf("      waited for \"%s\" in the output of %d; have \"%.400s\"\n", want, pid,
           buf);
    return 0;
}

static int spawn_pty(conn *c, const char *sb, const char *cmd, int cols, int rows)
{
    json_t *r = cn_call(c, "process.spawn",
                        json_pack("{s:s, s:s, s:{s:i, s:i}}", "sandbox", sb, "command",
                                  cmd, "pty", "cols", cols, "rows", rows));
    int pid = (int)res_int(r, "pid");
    if (pid <= 0)
        show("process.spawn", r);
    json_decref(r);
    return pid;
}

static int write_str(conn *c, const char *sb, int pid, const char *s)
{
    json_t *r =
        cn_call(c, "process.write",
                json_pack("{s:s, s:i, s:s}", "sandbox", sb, "pid", pid, "data", s));
    int ok = res_of(r) != NULL;
    if (!ok)
        show("process.write", r);
    json_decref(r);
    return ok;
}

/* One call as another uid (a forked child that drops to it). */
static int code_as_uid(uid_t uid, const char *method, json_t *params)
{
    return pt_code_as_uid(uid, sock, method, params);
}

/* ---- terminals ------------------------------------------------------------------- */

static void test_pty_basics(conn *c)
{
    json_t *r = cn_call_t(c, 60000, "process.exec",
                          json_pack("{s:s, s:s, s:{s:i, s:i}}", "sandbox", "ws1",
                                    "command", "tty; stty size; echo to-stderr >&2",
                                    "pty", "cols", 100, "rows", 30));
    const char *out = res_str(r, "stdout");
    test_cond("pty: tty inside names a terminal", strstr(out, "/dev/pts/") != NULL);
    test_cond("pty: stty size is the size asked for (30 100)",
              strstr(out, "30 100\r\n") != NULL);
    test_cond("pty: stderr comes on the one output stream",
              strstr(out, "to-stderr") != NULL && strcmp(res_str(r, "stderr"), "") == 0);
    test_eq_int("pty: exit code 0", res_int(r, "exit_code"), 0);
    if (!strstr(out, "30 100"))
        show("exec", r);
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "ws1", "command", "tty || true"));
    test_cond("no pty: tty says not a tty", strstr(res_str(r, "stdout"), "not a tty"));
    json_decref(r);

    r = cn_call(
        c, "process.exec",
        json_pack("{s:s, s:s, s:b}", "sandbox", "ws1", "command", "stty size", "pty", 1));
    test_cond("pty: true is 80x24", strstr(res_str(r, "stdout"), "24 80") != NULL);
    json_decref(r);

    /* The line discipline: input is echoed and a read sees a line. */
    int pid = spawn_pty(c, "ws1", "read x; echo \"got [$x]\"", 80, 24);
    test_cond("pty: spawn answers a pid", pid > 0);
    write_str(c, "ws1", pid, "hello\r");
    test_cond("pty: a line typed is echoed and read",
              wait_output(c, pid, "got [hello]", 15000));
}

static void test_pty_resize(conn *c)
{
    int pid = spawn_pty(c, "ws1",
                        "trap 'echo; echo winch; stty size' WINCH; echo ready; "
                        "while :; do sleep 0.05; done",
                        80, 24);
    test_cond("resize: the program is ready", wait_output(c, pid, "ready", 15000));
    json_t *r = cn_call(c, "process.resize",
                        json_pack("{s:s, s:i, s:i, s:i}", "sandbox", "ws1", "pid", pid,
                                  "cols", 132, "rows", 43));
    test_cond("resize: answered with the size",
              res_int(r, "cols") == 132 && res_int(r, "rows") == 43);
    json_decref(r);
    test_cond("resize: the program sees SIGWINCH and the new size (43 132)",
              wait_output(c, pid, "43 132", 15000));

    r = cn_call(c, "process.resize",
                json_pack("{s:s, s:i, s:i, s:i}", "sandbox", "ws1", "pid", pid, "cols", 0,
                          "rows", 43));
    test_eq_int("resize: cols 0 is -32602", err_code(r), -32602);
    json_decref(r);
    r = cn_call(c, "process.resize",
                json_pack("{s:s, s:i, s:s, s:i}", "sandbox", "ws1", "pid", pid, "cols",
                          "wide", "rows", 43));
    test_eq_int("resize: cols as a string is -32602", err_code(r), -32602);
    json_decref(r);
    test_eq_int("resize: another uid's sandbox is not found (-32000)",
                code_as_uid(65534, "process.resize",
                            json_pack("{s:s, s:i, s:i, s:i}", "sandbox", "ws1", "pid",
                                      pid, "cols", 10, "rows", 10)),
                -32000);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "ws1", "pid", pid)));

    json_t *sp =
        cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "ws1", "command", "sleep 30"));
    int plain = (int)res_int(sp, "pid");
    json_decref(sp);
    r = cn_call(c, "process.resize",
                json_pack("{s:s, s:i, s:i, s:i}", "sandbox", "ws1", "pid", plain, "cols",
                          80, "rows", 24));
    test_eq_int("resize: a process without a terminal is -32602", err_code(r), -32602);
    json_decref(r);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "ws1", "pid", plain)));
    r = cn_call(c, "process.resize",
                json_pack("{s:s, s:i, s:i, s:i}", "sandbox", "ws1", "pid", 999999, "cols",
                          80, "rows", 24));
    test_eq_int("resize: an unknown pid is -32004", err_code(r), -32004);
    json_decref(r);
}

static void test_pty_ctrl_c(conn *c)
{
    /* ^C typed on the terminal becomes SIGINT for its foreground group (the
     * shell and its sleep; no job control in sh -c): sleep dies of it, the
     * shell, which traps it, survives and reports the job's status. */
    int pid =
        spawn_pty(c, "ws1",
                  "trap 'echo got-int' INT; echo started; sleep 100; echo status=$?; "
                  "read x; "
                  "echo \"still-here [$x]\"; exit 7",
                  80, 24);
    test_cond("ctrl-c: the job runs", wait_output(c, pid, "started", 15000));
    usleep(300000);
    write_str(c, "ws1", pid, "\x03");
    test_cond("ctrl-c: the foreground job got SIGINT (status=130)",
              wait_output(c, pid, "status=130", 15000));
    write_str(c, "ws1", pid, "ok\r");
    test_cond("ctrl-c: the session leader (the shell) survives",
              wait_output(c, pid, "still-here [ok]", 15000));
    json_t *w = cn_call_t(
        c, 20000, "process.wait",
        json_pack("{s:s, s:i, s:i}", "sandbox", "ws1", "pid", pid, "timeout_ms", 15000));
    test_eq_int("ctrl-c: the terminal's process ends with its own code",
                res_int(w, "exit_code"), 7);
    json_decref(w);
}

static void test_pty_replay(conn *c)
{
    conn *c1 = connect_sbxd();
    int pid =
        spawn_pty(c1, "ws1", "echo first-screen; read x; echo \"second [$x]\"", 80, 24);
    test_cond("replay: the first client sees the screen",
              wait_output(c1, pid, "first-screen", 15000));
    cn_close(c1); /* a client that went away: the terminal stays */
    conn *c2 = connect_sbxd();
    json_t *r =
        cn_call(c2, "process.attach",
                json_pack("{s:s, s:i, s:b}", "sandbox", "ws1", "pid", pid, "follow", 1));
    test_cond("replay: attach answers", res_of(r) != NULL);
    json_decref(r);
    test_cond("replay: a reattached client sees what is on the terminal",
              wait_output(c2, pid, "first-screen", 15000));
    write_str(c2, "ws1", pid, "again\r");
    test_cond("replay: and types into it", wait_output(c2, pid, "second [again]", 15000));
    json_t *l = cn_call(c2, "process.list", json_pack("{s:s}", "sandbox", "ws1"));
    int seen = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(res_of(l), "processes"), i, e)
        if (json_integer_value(json_object_get(e, "pid")) == pid &&
            json_is_true(json_object_get(e, "pty")))
            seen = 1;
    test_cond("replay: process.list marks the terminal (pty: true)", seen);
    json_decref(l);
    cn_close(c2);
}

static void test_pty_errors(conn *c)
{
    json_t *r = cn_call(c, "process.spawn",
                        json_pack("{s:s, s:s, s:{s:i}}", "sandbox", "ws1", "command",
                                  "true", "pty", "cols", 80));
    test_eq_int("pty: without rows is -32602", err_code(r), -32602);
    json_decref(r);
    r = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s, s:s}", "sandbox", "ws1", "command", "true", "pty", "yes"));
    test_eq_int("pty: a string is -32602", err_code(r), -32602);
    json_decref(r);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s, s:{s:i, s:i}}", "sandbox", "ws1", "command", "true",
                          "pty", "cols", 80, "rows", 100000));
    test_eq_int("pty: rows over 10000 is -32602", err_code(r), -32602);
    json_decref(r);
    test_eq_int("pty: another uid's sandbox is not found (-32000)",
                code_as_uid(65534, "process.spawn",
                            json_pack("{s:s, s:s, s:b}", "sandbox", "ws1", "command",
                                      "true", "pty", 1)),
                -32000);

    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s}", "id", "wsduk", "provider", "duktape"));
    json_decref(r);
    r = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s, s:b}", "sandbox", "wsduk", "command", "1", "pty", 1));
    json_t *d = json_object_get(json_object_get(r, "error"), "data");
    test_eq_int("pty: an isolate answers -32011", err_code(r), -32011);
    test_cond("pty: -32011 names provider and feature",
              json_is_string(json_object_get(d, "provider")) &&
                  strcmp(json_string_value(json_object_get(d, "feature")), "pty") == 0);
    json_decref(r);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "wsduk")));
}

/* sbxctl exec --tty inside script(1): a real terminal on our side. */
static void test_sbxctl_tty(void)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        test_skip("sbxctl exec --tty through script(1)", "no /usr/bin/script");
        return;
    }
    char cmd[2048], out[600];
    snprintf(out, sizeof(out), "%s/script.out", tmpdir);
    /* stty inside script's terminal sets the size sbxctl must pass on. */
    snprintf(
        cmd, sizeof(cmd),
        "printf 'typed-line\\r' | script -qfec \"stty cols 91 rows 17; %s/sbxctl -s %s "
        "exec -i --tty ws1 -- sh -c 'tty; stty size; read x; echo \\\"in:\\$x\\\"'\" "
        "/dev/null >%s 2>&1",
        bdir, sock, out);
    int st = system(cmd);
    FILE *f = fopen(out, "r");
    char buf[8192] = "";
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    test_cond("sbxctl --tty: the command runs on a terminal", strstr(buf, "/dev/pts/"));
    test_cond("sbxctl --tty: the local window size is passed on (17 91)",
              strstr(buf, "17 91"));
    test_cond("sbxctl --tty: keystrokes reach the program", strstr(buf, "in:typed-line"));
    test_cond("sbxctl --tty: exit status 0", WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (!strstr(buf, "in:typed-line"))
        printf("      script said: %.1000s\n", buf);
}

/* ---- stats ------------------------------------------------------------------------ */

static json_t *stats_of(conn *c, const char *id)
{
    return cn_call_t(c, 30000, "sandbox.stats", json_pack("{s:s}", "id", id));
}

static double num_at(json_t *r, const char *obj, const char *key)
{
    json_t *v = json_object_get(json_object_get(res_of(r), obj), key);
    return json_is_number(v) ? json_number_value(v) : -1;
}

static void test_stats(conn *c)
{
    json_t *r = stats_of(c, "ws1");
    test_cond("stats: answers for a running sandbox", res_of(r) != NULL);
    if (!res_of(r))
        show("sandbox.stats", r);
    test_eq_str("stats: carries the id", res_str(r, "id"), "ws1");
    test_cond("stats: cpu usage_s and percent are numbers",
              num_at(r, "cpu", "usage_s") >= 0 && num_at(r, "cpu", "percent") >= 0);
    test_eq_int("stats: memory limit is the configured 256m",
                (long long)num_at(r, "memory", "limit"), 256ll << 20);
    test_cond("stats: pids counts the agent", num_at(r, "pids", "current") >= 1);
    test_cond("stats: network is null on network none",
              json_is_null(json_object_get(res_of(r), "network")));
    test_cond("stats: block_io has read and write bytes",
              num_at(r, "block_io", "read_bytes") >= 0 &&
                  num_at(r, "block_io", "write_bytes") >= 0);
    double mem0 = num_at(r, "memory", "current");
    json_decref(r);

    /* A known load: 60 MB held by a shell variable, a busy loop. */
    json_t *sp =
        cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "ws1", "command",
                          "x=$(head -c 60000000 /dev/zero | tr '\\0' a); echo held; "
                          /* not the last command: ash would exec sleep and
                           * drop x */
                          "sleep 60; echo ${#x}"));
    int mpid = (int)res_int(sp, "pid");
    json_decref(sp);
    test_cond("stats: the 60 MB allocation is made", wait_output(c, mpid, "held", 30000));
    r = stats_of(c, "ws1");
    double mem1 = num_at(r, "memory", "current");
    test_cond("stats: memory shows the 60 MB allocation", mem1 - mem0 >= 55e6);
    test_cond("stats: peak is at least current", num_at(r, "memory", "peak") >= mem1);
    if (mem1 - mem0 < 55e6)
        printf("      memory before %.0f, after %.0f\n", mem0, mem1);
    json_decref(r);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "ws1", "pid", mpid)));

    r = stats_of(c, "ws1");
    double cpu0 = num_at(r, "cpu", "usage_s");
    json_decref(r);
    sp = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s}", "sandbox", "ws1", "command", "while :; do :; done"));
    int bpid = (int)res_int(sp, "pid");
    json_decref(sp);
    /* The machine may be shared: sample until the loop has had its share,
     * which on an idle core is at once. */
    double pct = 0, cpu1 = cpu0;
    for (int k = 0; k < 15 && (pct <= 20 || cpu1 - cpu0 < 0.5); k++) {
        r = stats_of(c, "ws1");
        pct = num_at(r, "cpu", "percent");
        cpu1 = num_at(r, "cpu", "usage_s");
        json_decref(r);
    }
    test_cond("stats: a busy loop shows in cpu percent (> 20)", pct > 20);
    test_cond("stats: and in cpu usage_s (+0.5 s)", cpu1 - cpu0 >= 0.5);
    if (pct <= 20 || cpu1 - cpu0 < 0.5)
        printf("      percent %.1f, usage %.2f -> %.2f\n", pct, cpu0, cpu1);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "ws1", "pid", bpid)));

    r = cn_call_t(c, 60000, "sandbox.stats",
                  json_pack("{s:s, s:b}", "id", "ws1", "size", 1));
    test_cond("stats: size adds the writable layer",
              num_at(r, "disk", "writable_bytes") >= 0);
    json_decref(r);

    test_eq_int("stats: another uid's sandbox is not found (-32000)",
                code_as_uid(65534, "sandbox.stats", json_pack("{s:s}", "id", "ws1")),
                -32000);
    r = cn_call(c, "sandbox.stats",
                json_pack("{s:s, s:s}", "id", "ws1", "stream", "yes"));
    test_eq_int("stats: stream must be a boolean (-32602)", err_code(r), -32602);
    json_decref(r);
}

/* A shell command's whole output (stdout and stderr). */
static void run_capture(const char *cmd, char *out, size_t max)
{
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(out, 1, max - 1, f) : 0;
    out[n] = '\0';
    if (f)
        pclose(f);
}

static void test_sbxctl_stats(void)
{
    char cmd[1024], buf[8192];
    snprintf(cmd, sizeof(cmd), "%s/sbxctl -s %s stats --no-stream ws1 2>&1", bdir, sock);
    run_capture(cmd, buf, sizeof(buf));
    test_cond("sbxctl stats --no-stream: a table with the sandbox and its limit",
              strstr(buf, "MEM USAGE / LIMIT") && strstr(buf, "ws1") &&
                  strstr(buf, " / 256MiB"));
    if (!strstr(buf, " / 256MiB"))
        printf("      sbxctl said: %.800s\n", buf);
    snprintf(cmd, sizeof(cmd), "%s/sbxctl -s %s --json stats --no-stream 2>&1", bdir,
             sock);
    run_capture(cmd, buf, sizeof(buf));
    json_t *j = json_loads(buf, 0, NULL);
    int found = 0;
    size_t i;
    json_t *e;
    json_array_foreach(j, i, e)
        found |= strcmp(json_string_value(json_object_get(e, "id")), "ws1") == 0;
    test_cond("sbxctl --json stats --no-stream: every running sandbox's sample", found);
    json_decref(j);
    snprintf(cmd, sizeof(cmd), "timeout 6 %s/sbxctl -s %s stats ws1 2>&1", bdir, sock);
    run_capture(cmd, buf, sizeof(buf));
    int tables = 0;
    for (const char *q = buf; (q = strstr(q, "MEM USAGE")); q++)
        tables++;
    test_cond("sbxctl stats: streams a new table per sample (1 s)", tables >= 3);
    if (tables < 3)
        printf("      %d tables: %.600s\n", tables, buf);
}

static int count_stats_notes(conn *c, const char *id)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        const char *meth = json_string_value(json_object_get(m, "method"));
        json_t *p = json_object_get(m, "params");
        if (meth && strcmp(meth, "sandbox.stats") == 0 &&
            strcmp(json_string_value(json_object_get(p, "id")), id) == 0)
            n++;
    }
    return n;
}

static void read_for(conn *c, int ms)
{
    double end = now_ms() + ms;
    for (int left; (left = (int)(end - now_ms())) > 0;) {
        json_t *m = cn_read(c, left);
        if (!m)
            break;
        if (json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
}

static void test_stats_stream(void)
{
    conn *c = connect_sbxd();
    json_t *r = cn_call_t(c, 30000, "sandbox.stats",
                          json_pack("{s:s, s:b}", "id", "ws1", "stream", 1));
    test_cond("stats stream: the first sample is the answer", res_of(r) != NULL);
    json_decref(r);
    read_for(c, 4500);
    int n = count_stats_notes(c, "ws1");
    test_cond("stats stream: sandbox.stats notifications every interval (1 s)",
              n >= 2 && n <= 5);
    if (n < 2 || n > 5)
        printf("      %d notifications in 4.5 s\n", n);

    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", "wsduk2", "provider", "duktape")));
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", "wsduk3", "provider", "duktape")));
    r = stats_of(c, "wsduk2");
    test_cond("stats: an isolate reports its worker's memory and cpu",
              num_at(r, "memory", "current") > 0 && num_at(r, "cpu", "usage_s") >= 0 &&
                  num_at(r, "memory", "limit") > 0);
    if (num_at(r, "memory", "current") <= 0)
        show("isolate stats", r);
    json_decref(r);
    r = cn_call(c, "sandbox.stats", json_pack("{s:s, s:b}", "id", "wsduk2", "stream", 1));
    json_t *r2 =
        cn_call(c, "sandbox.stats", json_pack("{s:s, s:b}", "id", "wsduk3", "stream", 1));
    test_eq_int("stats stream: past stats_streams_per_session (2) is -32005",
                err_code(r2), -32005);
    json_decref(r);
    json_decref(r2);

    r = cn_call(c, "sandbox.stats", json_pack("{s:s, s:b}", "id", "ws1", "stream", 0));
    json_decref(r);
    read_for(c, 300); /* a sample already out may still land */
    int before = count_stats_notes(c, "ws1");
    read_for(c, 2500);
    test_eq_int("stats stream: stream false ends it", count_stats_notes(c, "ws1"),
                before);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "wsduk2")));
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "wsduk3")));
    cn_close(c);
}

/* ---- ports in ---------------------------------------------------------------------- */

static json_t *expose(conn *c, const char *id, int port, int host_port)
{
    json_t *p = json_pack("{s:s, s:i}", "id", id, "port", port);
    if (host_port)
        json_object_set_new(p, "host_port", json_integer(host_port));
    return cn_call(c, "sandbox.expose", p);
}

/* sbxctl port-forward holds an exposure until Ctrl-C. */
static int port_listed(conn *c, int port)
{
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "ws1"));
    int listed = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(json_object_get(res_of(r), "metadata"), "ports"),
                       i, e)
        listed |= json_integer_value(json_object_get(e, "port")) == port;
    json_decref(r);
    return listed;
}

static void test_sbxctl_port_forward(conn *c, int old_hp)
{
    int fds[2];
    if (pipe(fds) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        char path[600];
        snprintf(path, sizeof(path), "%s/sbxctl", bdir);
        execl(path, "sbxctl", "-s", sock, "port-forward", "ws1", "8080", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char line[256] = "", cmd[256], buf[4096];
    FILE *f = fdopen(fds[0], "r");
    if (!fgets(line, sizeof(line), f))
        line[0] = '\0';
    const char *q = strstr(line, "127.0.0.1:");
    int hp = q ? atoi(q + 10) : 0;
    test_cond("sbxctl port-forward: says where it forwards from", hp > 0);
    snprintf(cmd, sizeof(cmd), "curl -s --max-time 20 http://127.0.0.1:%d/", hp);
    run_capture(cmd, buf, sizeof(buf));
    test_cond("sbxctl port-forward: the page comes through it",
              strstr(buf, "hello-from-inside") != NULL);
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    fclose(f);
    test_cond("sbxctl port-forward: Ctrl-C unexposes it and exits 0",
              !port_listed(c, 8080) && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* back on its old host port: the steps below unexpose it */
    json_t *r = expose(c, "ws1", 8080, old_hp);
    test_eq_int("expose: a chosen host_port is used", res_int(r, "host_port"), old_hp);
    json_decref(r);
}

/* Nothing listening inside, another uid, a bad port, a host port in use. */
static void expose_refusals(conn *c, int hp)
{
    json_t *r;
    char cmd[512], buf[4096];
    r = expose(c, "ws1", 9999, 0);
    int hp2 = (int)res_int(r, "host_port");
    json_decref(r);
    snprintf(cmd, sizeof(cmd), "curl -s --max-time 10 http://127.0.0.1:%d/; echo rc=$?",
             hp2);
    run_capture(cmd, buf, sizeof(buf));
    test_cond("expose: nothing listening inside: the host client sees the close",
              strstr(buf, "rc=52") || strstr(buf, "rc=56"));
    if (!strstr(buf, "rc=52") && !strstr(buf, "rc=56"))
        printf("      curl said: %.200s\n", buf);

    test_eq_int("expose: another uid's sandbox is not found (-32000)",
                code_as_uid(65534, "sandbox.expose",
                            json_pack("{s:s, s:i}", "id", "ws1", "port", 8081)),
                -32000);
    r = cn_call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", "ws1", "port", 70000));
    test_eq_int("expose: a port over 65535 is -32602", err_code(r), -32602);
    json_decref(r);
    r = expose(c, "ws1", 8081, hp);
    test_cond("expose: a host port in use is refused", err_code(r) != 0);
    json_decref(r);
}

/* unexpose closes the host port; an isolate answers -32011. */
static void expose_undo(conn *c, int hp, int hpid)
{
    json_t *r;
    char cmd[512], buf[4096];
    r = cn_call(c, "sandbox.unexpose",
                json_pack("{s:s, s:i}", "id", "ws1", "port", 8080));
    test_cond("unexpose: answers", res_of(r) != NULL);
    json_decref(r);
    snprintf(cmd, sizeof(cmd), "curl -s --max-time 5 http://127.0.0.1:%d/; echo rc=$?",
             hp);
    run_capture(cmd, buf, sizeof(buf));
    test_cond("unexpose: the host port is closed (connection refused)",
              strstr(buf, "rc=7"));
    r = cn_call(c, "sandbox.unexpose",
                json_pack("{s:s, s:i}", "id", "ws1", "port", 8080));
    test_eq_int("unexpose: a port not exposed is -32602", err_code(r), -32602);
    json_decref(r);
    json_decref(cn_call(c, "sandbox.unexpose",
                        json_pack("{s:s, s:i}", "id", "ws1", "port", 9999)));
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "ws1", "pid", hpid)));
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", "wsduk4", "provider", "duktape")));
    r = cn_call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", "wsduk4", "port", 80));
    test_eq_int("expose: an isolate answers -32011", err_code(r), -32011);
    json_decref(r);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "wsduk4")));
}

static void test_expose(conn *c)
{
    /* A web server inside a network: none container, 100 MB to serve. */
    json_t *r =
        cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "ws1", "command",
                            "mkdir -p /www && echo hello-from-inside > /www/index.html "
                            "&& head -c 104857600 /dev/zero > /www/big && "
                            "grep -c : /proc/net/dev"));
    test_eq_int("expose: the sandbox prepares its files", res_int(r, "exit_code"), 0);
    test_eq_str("expose: the sandbox has no network but lo", res_str(r, "stdout"), "1\n");
    json_decref(r);
    json_t *sp = cn_call(c, "process.spawn",
                         json_pack("{s:s, s:s}", "sandbox", "ws1", "command",
                                   "exec httpd -f -p 127.0.0.1:8080 -h /www"));
    int hpid = (int)res_int(sp, "pid");
    json_decref(sp);
    usleep(300000);

    r = expose(c, "ws1", 8080, 0);
    int hp = (int)res_int(r, "host_port");
    test_cond("expose: answers port, host, host_port and url",
              res_int(r, "port") == 8080 &&
                  strcmp(res_str(r, "host"), "127.0.0.1") == 0 && hp > 0 &&
                  strstr(res_str(r, "url"), "http://127.0.0.1:"));
    if (hp <= 0)
        show("sandbox.expose", r);
    json_decref(r);
    char cmd[512], buf[4096];
    snprintf(cmd, sizeof(cmd), "curl -s --max-time 20 http://127.0.0.1:%d/", hp);
    run_capture(cmd, buf, sizeof(buf));
    test_cond("expose: the host fetches a page from the network-none sandbox",
              strstr(buf, "hello-from-inside") != NULL);
    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 120 -o /dev/null -w '%%{size_download} %%{http_code}' "
             "http://127.0.0.1:%d/big",
             hp);
    run_capture(cmd, buf, sizeof(buf));
    test_eq_str("expose: 100 MB come through whole", buf, "104857600 200");

    /* Several at once: each connection has its own window. */
    snprintf(
        cmd, sizeof(cmd),
        "for i in 1 2 3 4; do curl -s --max-time 60 -o /dev/null -w '%%{size_download}\\n' "
        "http://127.0.0.1:%d/big & done; wait",
        hp);
    run_capture(cmd, buf, sizeof(buf));
    int whole = 0;
    for (const char *q = buf; (q = strstr(q, "104857600")); q++)
        whole++;
    test_eq_int("expose: four parallel downloads all complete", whole, 4);

    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "ws1"));
    json_t *ports = json_object_get(json_object_get(res_of(r), "metadata"), "ports");
    test_cond("expose: sandbox.get lists the exposed port",
              json_array_size(ports) == 1 &&
                  json_integer_value(
                      json_object_get(json_array_get(ports, 0), "host_port")) == hp);
    json_decref(r);
    r = expose(c, "ws1", 8080, 0);
    test_eq_int("expose: exposing it again answers the same host port",
                res_int(r, "host_port"), hp);
    json_decref(r);

    expose_refusals(c, hp);
    test_sbxctl_port_forward(c, hp);
    expose_undo(c, hp, hpid);
}

/* Runs shell text sh_cmd under script(1) with input_cmd's output as the
 * keyboard; the transcript goes to out (NUL-terminated). Returns the status. */
static int in_script(const char *input_cmd, const char *sh_cmd, char *out, size_t max)
{
    char cmd[3072], path[600];
    snprintf(path, sizeof(path), "%s/script2.out", tmpdir);
    snprintf(cmd, sizeof(cmd), "(%s) | script -qfec \"%s\" /dev/null >%s 2>&1", input_cmd,
             sh_cmd, path);
    int st = system(cmd);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, max - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return st;
}

/* Ctrl-P Ctrl-Q detaches and leaves the process running; attach --tty
 * shows its terminal again. */
static void test_sbxctl_detach(conn *c)
{
    if (access("/usr/bin/script", X_OK) != 0) {
        test_skip("sbxctl --tty: Ctrl-P Ctrl-Q detaches", "no /usr/bin/script");
        return;
    }
    char cmd[1024], buf[8192];
    snprintf(cmd, sizeof(cmd),
             "%s/sbxctl -s %s exec -i --tty ws1 -- sh -c 'echo detach-me; exec sleep 60'",
             bdir, sock);
    /* The keys come once sbxctl is in raw mode (before it, ^Q is XON). */
    int st = in_script("sleep 2; printf '\\020\\021'", cmd, buf, sizeof(buf));
    test_cond("sbxctl --tty: Ctrl-P Ctrl-Q detaches (exit 130)",
              WIFEXITED(st) && WEXITSTATUS(st) == 130 && strstr(buf, "detached"));
    if (!strstr(buf, "detached"))
        printf("      script said: %.1000s\n", buf);
    json_t *l = cn_call(c, "process.list", json_pack("{s:s}", "sandbox", "ws1"));
    int pid = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(res_of(l), "processes"), i, e) {
        const char *cm = json_string_value(json_object_get(e, "command"));
        const char *stt = json_string_value(json_object_get(e, "status"));
        if (cm && strstr(cm, "detach-me") && stt && strcmp(stt, "running") == 0)
            pid = (int)json_integer_value(json_object_get(e, "pid"));
    }
    json_decref(l);
    test_cond("sbxctl --tty: the detached process keeps running", pid > 0);
    if (pid <= 0)
        return;
    snprintf(cmd, sizeof(cmd), "%s/sbxctl -s %s attach --tty ws1 %d", bdir, sock, pid);
    st = in_script("sleep 2; printf '\\020\\021'", cmd, buf, sizeof(buf));
    test_cond("sbxctl attach --tty: replays the terminal and detaches again",
              strstr(buf, "detach-me") && WIFEXITED(st) && WEXITSTATUS(st) == 130);
    if (!strstr(buf, "detach-me"))
        printf("      script said: %.1000s\n", buf);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:i}", "sandbox", "ws1", "pid", pid)));
}

/* ---- egress by name --------------------------------------------------------------- */

static int egress_notes(conn *c, const char *host)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        const char *meth = json_string_value(json_object_get(m, "method"));
        const char *h = json_string_value(json_object_get(p, "host"));
        if (meth && strcmp(meth, "sandbox.egress") == 0 && h && strcmp(h, host) == 0)
            n++;
    }
    return n;
}

/* In eg1: CONNECT relayed; a host off the list, and going around the proxy, refused;
 * stats. */
static void egress_refusals(conn *c, int port)
{
    char cmd[1024];
    json_t *r;
    /* CONNECT (what HTTPS clients send), by hand through nc */
    snprintf(
        cmd, sizeof(cmd),
        "printf 'CONNECT localhost:%d HTTP/1.1\\r\\n\\r\\nGET /index.html HTTP/1.0\\r\\n"
        "\\r\\n' | nc 127.0.0.1 3128",
        port);
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "eg1", "command", cmd));
    test_cond("egress: CONNECT is answered 200 and relayed",
              strstr(res_str(r, "stdout"), "200 Connection established") &&
                  strstr(res_str(r, "stdout"), "egress-ok"));
    if (!strstr(res_str(r, "stdout"), "egress-ok"))
        show("CONNECT", r);
    json_decref(r);
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "eg1", "command",
                            "wget -S -O - http://blocked.example.invalid/ 2>&1; true"));
    test_cond("egress: a host outside the sandbox's list gets a 403",
              strstr(res_str(r, "stdout"), "403") != NULL);
    json_decref(r);
    read_for(c, 300);
    test_cond("egress: the refusal is a sandbox.egress notification",
              egress_notes(c, "blocked.example.invalid") >= 1);

    snprintf(cmd, sizeof(cmd),
             "wget -Y off -q -T 3 -O - http://127.0.0.1:%d/index.html 2>&1; echo rc=$?",
             port);
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "eg1", "command", cmd));
    test_cond("egress: nothing is reachable around the proxy",
              !strstr(res_str(r, "stdout"), "egress-ok") &&
                  !strstr(res_str(r, "stdout"), "rc=0"));
    json_decref(r);

    r = cn_call_t(c, 30000, "sandbox.stats", json_pack("{s:s}", "id", "eg1"));
    json_t *eg = json_object_get(res_of(r), "egress");
    test_cond("egress: stats count connections, refusals and bytes",
              json_integer_value(json_object_get(eg, "connections_total")) >= 1 &&
                  json_integer_value(json_object_get(eg, "refused")) >= 1 &&
                  json_integer_value(json_object_get(eg, "bytes_in")) > 0);
    if (!eg)
        show("stats", r);
    json_decref(r);
}

static void egress_rebinding(int port, const char *opts)
{
    char cmd[1024], extra[512], osock[108];
    conn *c;
    json_t *r;
    /* Without allow_private_addresses: an allowed name that resolves to a
     * loopback address ("vm", "localhost" here) is refused by resolution. */
    snprintf(extra, sizeof(extra), "    egress:\n      allow: [\"localhost:%d\"]\n",
             port);
    pid_t e2 =
        dk_start_other(tmpdir, bdir, docker_host, "eg2", extra, osock, sizeof(osock));
    c = dk_connect_ready(osock);
    r = cn_call_t(c, 120000, "sandbox.create",
                  json_pack("{s:s, s:s, s:o}", "id", "eg3", "provider", "docker",
                            "options", json_loads(opts, 0, NULL)));
    json_decref(r);
    snprintf(cmd, sizeof(cmd), "wget -S -O - http://localhost:%d/index.html 2>&1; true",
             port);
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "eg3", "command", cmd));
    test_cond("egress: an allowed name resolving to loopback is refused (403)",
              strstr(res_str(r, "stdout"), "403") &&
                  !strstr(res_str(r, "stdout"), "egress-ok"));
    if (!strstr(res_str(r, "stdout"), "403"))
        show("rebinding", r);
    json_decref(r);
    json_decref(cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "eg3")));
    cn_close(c);
    stop_sbxd(e2);
}

static void test_egress(void)
{
    /* The allowed destination: a server of ours on the host's loopback. */
    char www[600], cmd[1024], extra[512], osock[108];
    snprintf(www, sizeof(www), "%s/egress-www", tmpdir);
    mkdir(www, 0755);
    snprintf(cmd, sizeof(cmd), "echo egress-ok > %s/index.html", www);
    if (system(cmd) != 0 || access("/usr/bin/busybox", X_OK) != 0) {
        test_skip("egress through the proxy", "no busybox on the host for the server");
        return;
    }
    int port = 20000 + (int)(getpid() % 20000);
    pid_t hpid = fork();
    if (hpid == 0) {
        char addr[32];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        execl("/usr/bin/busybox", "busybox", "httpd", "-f", "-p", addr, "-h", www,
              (char *)NULL);
        _exit(127);
    }
    usleep(200000);

    snprintf(extra, sizeof(extra),
             "    egress:\n      allow: [\"localhost:%d\", \"*.example.invalid\"]\n"
             "      allow_private_addresses: true\n",
             port);
    pid_t e1 =
        dk_start_other(tmpdir, bdir, docker_host, "eg1", extra, osock, sizeof(osock));
    conn *c = dk_connect_ready(osock);
    char opts[256];
    snprintf(opts, sizeof(opts), "{\"egress\": {\"allow\": [\"localhost:%d\"]}}", port);
    json_t *r = cn_call_t(c, 120000, "sandbox.create",
                          json_pack("{s:s, s:s, s:o}", "id", "eg1", "provider", "docker",
                                    "options", json_loads(opts, 0, NULL)));
    int up = res_of(r) != NULL;
    if (!up)
        show("create with egress", r);
    json_decref(r);
    test_cond("egress: a network: none sandbox with an allow list starts", up);
    snprintf(cmd, sizeof(cmd),
             "env | grep -ci '^https*_proxy=http://127.0.0.1:3128' ; "
             "wget -q -O - http://localhost:%d/index.html",
             port);
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "eg1", "command", cmd));
    test_cond("egress: HTTP_PROXY/HTTPS_PROXY in both cases",
              strncmp(res_str(r, "stdout"), "4\n", 2) == 0);
    test_cond("egress: the allowed host is reached through the proxy",
              strstr(res_str(r, "stdout"), "egress-ok") != NULL);
    if (!strstr(res_str(r, "stdout"), "egress-ok"))
        show("wget through the proxy", r);
    json_decref(r);

    egress_refusals(c, port);
    r = cn_call_t(c, 60000, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:{s:[s]}}}", "id", "eg2", "provider",
                            "docker", "options", "egress", "allow", "pypi.org"));
    test_eq_int("egress: an entry beyond the config's ceiling is -32003", err_code(r),
                -32003);
    json_decref(r);
    json_decref(cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "eg1")));
    cn_close(c);
    stop_sbxd(e1);

    egress_rebinding(port, opts);
    kill(hpid, SIGTERM);
    waitpid(hpid, NULL, 0);
}

int main(int argc, char **argv)
{
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &docker_host);
    if (st)
        return st;
    chmod(tmpdir, 0755); /* the second uid reaches the socket */
    snprintf(sock, sizeof(sock), "%.90s/ws.sock", tmpdir);
    snprintf(cfg, sizeof(cfg), "%s/ws.yaml", tmpdir);
    snprintf(log_path, sizeof(log_path), "%s/sbxd-main.log", tmpdir);
    write_config();
    sbxd_pid = start_sbxd();
    conn *c = connect_sbxd();
    if (!c) {
        printf("sbxd did not start (log %s)\n0 passed, 1 failed\n", log_path);
        return 1;
    }
    /* The engine is contacted asynchronously: wait for its version. */
    dk_docker_up(c, 10000);
    json_t *r = dk_create(c, "ws1", NULL, 120000);
    int up = res_of(r) != NULL;
    if (!up)
        show("sandbox.create", r);
    json_decref(r);
    test_cond("a docker sandbox starts", up);
    if (up) {
        test_pty_basics(c);
        test_pty_resize(c);
        test_pty_ctrl_c(c);
        test_pty_replay(c);
        test_pty_errors(c);
        test_stats(c);
        test_stats_stream();
        test_sbxctl_stats();
        test_expose(c);
        test_egress();
        test_sbxctl_tty();
        test_sbxctl_detach(c);
        dk_destroy(c, "ws1", 60000);
    }
    cn_close(c);
    stop_sbxd(sbxd_pid);
    return test_report();
}
