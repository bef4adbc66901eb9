/*
 * ptest_docker_proc.c - processes of Docker sandboxes: exec, spawn,
 * stdin, kill, images without a shell, docker-exec mode, a misbehaving agent,
 * and a large stream to a slow reader.
 *
 *   ptest_docker_proc SBXD BUILD_DIR TMPDIR
 *
 * One part of the main Docker suite (dk_suite.h: its sbxd, config and calls;
 * the environment is docker.sh's, see ptest_docker.c), run by
 * tests/providers/docker.sh.
 *   SBX_STREAM_MB          size of the slow-reader stream test (default 256)
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

/* stdin to exec and to spawn (write, close_stdin); a background child does not
 * hold exec. */
static void processes_stdin(conn *c)
{
    json_t *r;
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "proc1", "command", "cat",
                          "stdin", "round trip\n"));
    test_eq_str("stdin round trip through cat", res_str(r, "stdout"), "round trip\n");
    json_decref(r);

    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "proc1", "command", "cat"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    json_decref(cn_call(
        c, "process.write",
        json_pack("{s:s, s:I, s:s}", "sandbox", "proc1", "pid", pid, "data", "abc\n")));
    json_decref(cn_call(c, "process.close_stdin",
                        json_pack("{s:s, s:I}", "sandbox", "proc1", "pid", pid)));
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:I}", "sandbox", "proc1", "pid", pid));
    char out[256] = "";
    notes_output(c, (int)pid, "stdout", out, sizeof(out));
    test_cond("spawn + write + close_stdin",
              res_int(r, "exit_code") == 0 && strcmp(out, "abc\n") == 0);
    json_decref(r);

    double t = now_ms();
    r = exec(c, "proc1", "sleep 300 & echo started");
    test_cond("`sleep 300 & echo started` returns at once",
              now_ms() - t < 3000 && strcmp(res_str(r, "stdout"), "started\n") == 0);
    json_decref(r);
}

/* kill ends the process and its children. */
static void processes_kill(conn *c, const char *cid)
{
    json_t *r;
    json_int_t pid;
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "proc1", "command",
                          "sleep 1001 & sleep 1002 & echo up; wait"));
    pid = res_int(r, "pid");
    json_decref(r);
    usleep(300000);
    test_cond("kill: children run before", top_has(cid, "sleep 1001") == 1);
    r = cn_call(
        c, "process.kill",
        json_pack("{s:s, s:I, s:s}", "sandbox", "proc1", "pid", pid, "signal", "KILL"));
    json_decref(r);
    r = cn_call(c, "process.wait",
                json_pack("{s:s, s:I}", "sandbox", "proc1", "pid", pid));
    test_cond("kill: exit 137, killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);
    usleep(200000);
    test_cond("kill: the process and its children left the container (docker top)",
              top_has(cid, "sleep 1001") == 0 && top_has(cid, "sleep 1002") == 0);
}

static void test_processes(conn *c)
{
    json_t *r = create(c, "proc1", NULL);
    const char *cid0 = cid_of(r);
    char cid[100];
    snprintf(cid, sizeof(cid), "%s", cid0);
    json_decref(r);

    processes_stdin(c);
    processes_kill(c, cid);
    double t = now_ms();
    r = cn_call_t(c, 30000, "process.exec",
                  json_pack("{s:s, s:s, s:i}", "sandbox", "proc1", "command",
                            "sleep 1003 & sleep 1004; echo never", "timeout_ms", 1000));
    test_cond("timeout: exit 124, timed_out, about on time",
              res_int(r, "exit_code") == 124 &&
                  json_is_true(json_object_get(res_of(r), "timed_out")) &&
                  now_ms() - t < 5000);
    json_decref(r);
    usleep(200000);
    test_cond("timeout: the process and its children left the container",
              top_has(cid, "sleep 1003") == 0 && top_has(cid, "sleep 1004") == 0);
    r = exec(c, "proc1", "ps -o pid,args | grep -c 'sleep 100[1-4]' || true");
    test_eq_str("ps inside agrees", res_str(r, "stdout"), "0\n");
    json_decref(r);

    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:[s,s,s], s:{s:s}, s:s}", "sandbox", "proc1", "command",
                          "sh", "-c", "echo $A; pwd; exit 3", "env", "A", "argv-env",
                          "cwd", "/tmp/new/dir"));
    test_cond("argv command, env, cwd created, exit code",
              res_int(r, "exit_code") == 3 &&
                  strcmp(res_str(r, "stdout"), "argv-env\n/tmp/new/dir\n") == 0);
    json_decref(r);
    r = exec(c, "proc1", "/does/not/exist");
    test_eq_int("a command that does not exist: 127", res_int(r, "exit_code"), 127);
    json_decref(r);
    destroy(c, "proc1");
}

/* Code in the sandbox can write to PID 1's stdout, i.e. forge agent frames:
 * a frame for a pid sbxd never spawned is ignored, garbage breaks only
 * that sandbox. */
/*
 * On the attach stream (direct socket refused by planting a file where the
 * agent wants its directory), garbage on PID 1's stdout breaks that
 * sandbox's channel: the call fails at once, the sandbox is in error, the
 * others are fine, sandbox.start recovers it.
 */
static void garbage_breaks_only_its_sandbox(conn *c, const char *sb, const char *other,
                                            const char *rundir)
{
    char host_file[600], bind[700];
    snprintf(host_file, sizeof(host_file), "%s/not-a-dir", tmpdir);
    FILE *f = fopen(host_file, "w");
    if (f)
        fclose(f);
    snprintf(bind, sizeof(bind), "%s:%s:ro", host_file, rundir);
    destroy(c, sb);
    /* SYS_PTRACE: the agent is non-dumpable, so only a sandbox given it can
     * open PID 1's stdout to inject garbage. */
    json_t *r = create(c, sb,
                       json_pack("{s:{s:s, s:[s]}}", "options", "volumes", bind,
                                 "cap_add", "SYS_PTRACE"));
    test_cond(
        "no direct socket (the agent cannot listen): the attach stream is the channel",
        strcmp(res_str(r, "status"), "running") == 0 &&
            strcmp(channel_of(r), "attach") == 0 &&
            exec_ok(c, sb, "echo over attach", "over attach\n"));
    json_decref(r);
    r = exec(c, sb, "printf '\\377\\377\\377\\377garbage.....' > /proc/1/fd/1; sleep 2");
    test_cond("garbage on the channel: the call ends with an error at once",
              res_of(r) && !json_is_null(json_object_get(res_of(r), "error")));
    json_decref(r);
    test_cond("garbage on the channel: that sandbox is in error",
              wait_status(c, sb, "error", 5000));
    test_cond("garbage on the channel: other sandboxes are fine",
              exec_ok(c, other, "echo ok", "ok\n"));
    r = cn_call_t(c, 60000, "sandbox.start", json_pack("{s:s}", "id", sb));
    test_cond("garbage on the channel: sandbox.start recovers it",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  exec_ok(c, sb, "echo back", "back\n"));
    json_decref(r);
}

/*
 * A second client attaches to the container's stdin and pings the agent, as
 * another sbxd would: the agent leaves the direct socket (telling sbxd it
 * moved) and answers on the attach stream, where sbxd listens from then on
 * instead of taking the agent back.
 */
static void another_client_pings(conn *c, const char *sb)
{
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", sb));
    char req[400];
    snprintf(req, sizeof(req),
             "POST /v1.41/containers/%s/attach?stream=1&stdin=1 HTTP/1.1\r\n"
             "Host: docker\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n",
             json_string_value(
                 json_object_get(json_object_get(res_of(r), "metadata"), "container_id"))
                 ?: "none");
    json_decref(r);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", docker_host + 7);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    char resp[512] = "";
    int upgraded = 0;
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        write(fd, req, strlen(req)) == (ssize_t)strlen(req)) {
        struct timeval tv = {5, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t n = read(fd, resp, sizeof(resp) - 1);
        resp[n > 0 ? n : 0] = '\0';
        upgraded = strstr(resp, " 101 ") != NULL;
        static const unsigned char ping[12] = {0x50};
        upgraded = upgraded && write(fd, ping, sizeof(ping)) == sizeof(ping);
        usleep(500000);
    }
    if (fd >= 0)
        close(fd);
    test_cond("takeover: another client attaches and pings the agent", upgraded);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", sb));
    test_cond("takeover: sbxd leaves the direct socket to listen on the attach stream",
              strcmp(channel_of(r), "attach") == 0 &&
                  strcmp(res_str(r, "status"), "running") == 0);
    json_decref(r);
    test_cond("takeover: and the sandbox still runs commands",
              exec_ok(c, sb, "echo still here", "still here\n"));
}

/* Lines of the main sbxd's log that contain needle. */
static int log_lines_with(const char *needle)
{
    FILE *f = fopen(main_log, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* Issue 11, reproduction 7: an agent that floods LOG frames (forged here on
 * PID 1's stdout, which takes SYS_PTRACE now that the agent is non-dumpable)
 * gets agent_log_lines_per_s lines a second and a summary. */
static void agent_log_flood(conn *c, const char *sb)
{
    int before = log_lines_with("docker mislog agent: flood");
    json_t *r =
        exec_t(c, sb,
               "printf '\\176\\000\\000\\000\\000\\000\\000\\000\\000\\000"
               "\\000\\005flood' > /tmp/f && for i in 1 2 3 4 5 6 7 8 9 10 11 12; do "
               "cat /tmp/f /tmp/f > /tmp/g && mv /tmp/g /tmp/f; done && "
               "cat /tmp/f > /proc/1/fd/1 && sleep 1.2 && "
               "head -c 17 /tmp/f > /proc/1/fd/1 && echo sent",
               30000);
    test_eq_str("agent flood: 4096 LOG frames reach the channel", res_str(r, "stdout"),
                "sent\n");
    json_decref(r);
    usleep(300000);
    int logged = log_lines_with("docker mislog agent: flood") - before;
    printf("      %d of 4097 agent lines logged\n", logged);
    test_cond("agent flood: at most agent_log_lines_per_s lines a second reach the log",
              logged > 0 && logged <= 2 * 50 + 1);
    test_cond("agent flood: a summary says how many were suppressed",
              log_lines_with("mislog: ") > 0 &&
                  log_lines_with("log lines suppressed") > 0);
    test_cond("agent flood: the sandbox still runs commands",
              exec_ok(c, sb, "echo ok", "ok\n"));
}

static void test_misbehaving(conn *c)
{
    /* SYS_PTRACE: the forged frames below go through PID 1's stdout. */
    json_decref(
        create(c, "mis1", json_pack("{s:{s:[s]}}", "options", "cap_add", "SYS_PTRACE")));
    json_decref(create(c, "mis2", NULL));
    json_t *nd = exec(c, "mis2",
                      "printf x > /proc/1/fd/1 && echo wrote; "
                      "cat /proc/1/environ >/dev/null 2>&1 && echo read; echo end");
    test_eq_str("non-dumpable agent: container code cannot open PID 1's fds or memory",
                res_str(nd, "stdout"), "end\n");
    json_decref(nd);
    test_cond("forged frame for an unknown pid: ignored",
              exec_ok(c, "mis1",
                      "printf '\\020\\000\\000\\000\\000\\000\\003\\347\\000\\000"
                      "\\000\\005hello' > /proc/1/fd/1 && echo sent",
                      "sent\n") &&
                  exec_ok(c, "mis1", "echo still fine", "still fine\n"));
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "mis1"));
    test_cond("direct socket: a local engine's sandbox talks to its agent through it",
              strcmp(channel_of(r), "direct") == 0);
    json_decref(r);
    test_cond("direct socket: the agent stops listening once sbxd has connected",
              exec_ok(c, "mis1", "ls -A /.sbx/run | wc -l", "0\n"));
    r = exec(c, "mis1",
             "printf '\\377\\377\\377\\377garbage.....' > /proc/1/fd/1; echo done");
    test_cond("direct socket: garbage on PID 1's stdout is not the channel any more",
              strcmp(res_str(r, "stdout"), "done\n") == 0 &&
                  exec_ok(c, "mis1", "echo still fine", "still fine\n") &&
                  strcmp(status_of(c, "mis1"), "running") == 0);
    json_decref(r);
    another_client_pings(c, "mis2");
    {
        /* An attach-only sandbox (a file where the agent wants its directory) for the
         * flood. */
        char host_file[600], bind[700];
        snprintf(host_file, sizeof(host_file), "%s/not-a-dir", tmpdir);
        FILE *f = fopen(host_file, "w");
        if (f)
            fclose(f);
        snprintf(bind, sizeof(bind), "%s:/.sbx/run:ro", host_file);
        json_decref(create(c, "mislog",
                           json_pack("{s:{s:s, s:[s]}}", "options", "volumes", bind,
                                     "cap_add", "SYS_PTRACE")));
        agent_log_flood(c, "mislog");
        destroy(c, "mislog");
    }
    garbage_breaks_only_its_sandbox(c, "mis1", "mis2", "/.sbx/run");
    destroy(c, "mis1");
    destroy(c, "mis2");
}

static void test_noshell(conn *c)
{
    json_t *r = create(c, "nosh1", json_pack("{s:s}", "image", "sbx-test/noshell"));
    test_eq_str("no-shell image: created", res_str(r, "status"), "running");
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:[s,s,s], s:{s:s}}", "sandbox", "nosh1", "command",
                          "/hello", "a", "b c", "env", "X", "y"));
    const char *o = res_str(r, "stdout");
    test_cond("no-shell image: an argv command runs through the agent",
              res_int(r, "exit_code") == 0 && strstr(o, "argv[1]=a\n") &&
                  strstr(o, "argv[2]=b c\n") && strstr(o, "cwd=/workspace\n") &&
                  strstr(o, "env X=y\n"));
    json_decref(r);
    r = exec(c, "nosh1", "echo needs a shell");
    test_eq_int("no-shell image: a shell command fails with 127", res_int(r, "exit_code"),
                127);
    json_decref(r);
    destroy(c, "nosh1");
}

static void test_exec_mode(conn *c)
{
    json_t *r = create(c, "xm1",
                       json_pack("{s:{s:s}, s:{s:s, s:s}}", "options", "exec_mode",
                                 "docker-exec", "env", "XA", "create", "XB", "keep"));
    test_cond("docker-exec: created",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  strcmp(json_string_value(json_object_get(
                             json_object_get(res_of(r), "metadata"), "exec_mode"))
                             ?: "",
                         "docker-exec") == 0);
    char cid[100];
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:{s:s}}", "sandbox", "xm1", "command",
                          "echo $E; pwd; echo err >&2; exit 5", "env", "E", "v"));
    test_cond("docker-exec: output, env, cwd, exit code",
              res_int(r, "exit_code") == 5 &&
                  strcmp(res_str(r, "stdout"), "v\n/workspace\n") == 0 &&
                  strcmp(res_str(r, "stderr"), "err\n") == 0);
    json_decref(r);
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:s}", "sandbox", "xm1", "command", "cat", "stdin",
                          "via exec\n"));
    test_eq_str("docker-exec: stdin through cat", res_str(r, "stdout"), "via exec\n");
    json_decref(r);
    /* env null removes a create-time key here too (issue 10, item 4): the
     * container's env holds it, an exec can only add */
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s, s:{s:n}}", "sandbox", "xm1", "command",
                          "echo ${XA-unset} $XB", "env", "XA"));
    test_cond("docker-exec: exec env {XA: null} removes a create-time XA, keeps the rest",
              strcmp(res_str(r, "stdout"), "unset keep\n") == 0);
    json_decref(r);
    test_cond("docker-exec: the next exec sees XA again",
              exec_ok(c, "xm1", "echo $XA", "create\n"));
    json_decref(cn_call(c, "sandbox.set_env",
                        json_pack("{s:s, s:{s:n}}", "id", "xm1", "env", "XA")));
    test_cond("docker-exec: set_env {XA: null} removes it from later commands",
              exec_ok(c, "xm1", "echo ${XA-unset} $XB", "unset keep\n"));
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "xm1", "command",
                          "sleep 1005 & sleep 1006; echo no"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    usleep(500000);
    json_decref(cn_call(c, "process.kill",
                        json_pack("{s:s, s:I}", "sandbox", "xm1", "pid", pid)));
    r = cn_call_t(c, 20000, "process.wait",
                  json_pack("{s:s, s:I}", "sandbox", "xm1", "pid", pid));
    test_eq_int("docker-exec: kill (an exec'd kill inside) ends it",
                res_int(r, "exit_code"), 137);
    json_decref(r);
    usleep(300000);
    test_cond("docker-exec: children gone too", top_has(cid, "sleep 1005") == 0);
    r = cn_call_t(c, 30000, "process.exec",
                  json_pack("{s:s, s:s, s:i}", "sandbox", "xm1", "command", "sleep 1007",
                            "timeout_ms", 800));
    test_eq_int("docker-exec: timeout 124", res_int(r, "exit_code"), 124);
    json_decref(r);
    /* the container dies; the next exec restarts it and says so */
    char p[256];
    snprintf(p, sizeof(p), "/containers/%s/kill", cid);
    dk_engine("POST", p, NULL, NULL);
    usleep(300000);
    r = exec(c, "xm1", "echo again");
    test_cond("docker-exec: an exec into a dead container restarts it, retries, says so",
              strcmp(res_str(r, "stdout"), "again\n") == 0 &&
                  json_is_true(json_object_get(res_of(r), "retried")));
    json_decref(r);
    destroy(c, "xm1");
}

int main(int argc, char **argv)
{
    conn *c;
    int st = dk_suite_start(argc, argv, "main-proc", &c);
    if (st)
        return st;
    DK_STEP(test_processes(c));
    DK_STEP(test_noshell(c));
    DK_STEP(test_exec_mode(c));
    DK_STEP(test_misbehaving(c));
    dk_suite_end(c);
    return test_report();
}
