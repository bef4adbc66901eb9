/*
 * test_agent_init.c - build/sbx-init in its other roles: the direct socket
 * (CHANNEL.md, Direct socket), SIGTERM without a main child, tini mode
 * (sbx-init -- CMD) and PID 1 in a fresh PID namespace. The channel itself is
 * test_agent.c; both share tests/unit/agent_kit.h.
 *
 *   test_agent_init [-v] [path/to/sbx-init]
 *
 * The PID-1 part runs the agent under `unshare --pid --fork --mount-proc` and
 * is skipped, with the reason printed, when that is not possible.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent_kit.h"
#include "sbx_chan.h"
#include "testhelp.h"

/* ---- tests --------------------------------------------------------------- */

/* SIGTERM without a main child kills every group and exits 0. */
static void test_sigterm(void)
{
    struct agent a;
    struct frame f;
    agent_start_plain(&a);
    expect(&a, SBX_CHAN_HELLO, 0, &f, 3000);
    send_str(&a, SBX_CHAN_SPAWN, 1, "{\"shell\":\"sleep 100 & sleep 100\"}");
    json_t *j = expect(&a, SBX_CHAN_STARTED, 1, &f, 3000) == 1 ? frame_json(&f) : NULL;
    int pid = j ? (int)jint(j, "os_pid") : -1;
    json_decref(j);
    wait_group_size(pid, 3, 3000);
    kill(a.pid, SIGTERM);
    int st = agent_wait(&a, 3000);
    test_cond("SIGTERM without a main child: exit 0",
              st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    test_cond("... after killing its process groups",
              pid > 0 && wait_group_size(pid, 0, 3000));
    agent_close(&a);

    agent_start_plain(&a);
    expect(&a, SBX_CHAN_HELLO, 0, &f, 3000);
    close(a.in);
    a.in = -1;
    st = agent_wait(&a, 3000);
    test_cond("EOF on the channel without a main child: exit 0",
              st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    agent_close(&a);
}

/* tini mode: sbx-init -- CMD. */
static void test_main_child(void)
{
    struct agent a;
    struct frame f;
    const char *argv1[] = {agent_path, "--", "sh", "-c", "exit 3", NULL};
    agent_start(&a, argv1);
    int st = agent_wait(&a, 3000);
    test_cond("main child: sbx-init exits with its status (3)",
              st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 3);
    agent_close(&a);

    const char *argv2[] = {agent_path, "sleep", "100", NULL};
    agent_start(&a, argv2);
    expect(&a, SBX_CHAN_HELLO, 0, &f, 3000);
    struct run run;
    spawn_run(&a, 1, "{\"shell\":\"echo channel works\"}", &run, 3000);
    test_cond("main child: the channel is served meanwhile",
              run.out.data && strcmp((char *)run.out.data, "channel works\n") == 0);
    run_free(&run);
    close(a.in);
    a.in = -1;
    sleep_ms(100);
    test_cond("main child: channel EOF does not end sbx-init", agent_wait(&a, 0) < 0);
    kill(a.pid, SIGTERM);
    st = agent_wait(&a, 3000);
    test_cond("main child: SIGTERM is forwarded, exit 128+15",
              st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 143);
    agent_close(&a);

    const char *argv3[] = {agent_path, "no-such-main-child", NULL};
    agent_start(&a, argv3);
    st = agent_wait(&a, 3000);
    test_cond("main child that does not exist: exit 127",
              st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 127);
    agent_close(&a);
}

/* PID 1 in a fresh PID namespace, as in a container. */
static void test_pid1(void)
{
    const char *unshare = access("/usr/bin/unshare", X_OK) == 0 ? "/usr/bin/unshare"
                          : access("/bin/unshare", X_OK) == 0   ? "/bin/unshare"
                                                                : NULL;
    if (geteuid() != 0 || !unshare) {
        test_skip("PID 1 in a fresh PID namespace",
                  geteuid() != 0 ? "not root" : "no unshare(1)");
        return;
    }
    const char *argv[] = {unshare, "--pid", "--fork", "--mount-proc", agent_path, NULL};
    struct agent a;
    struct frame f;
    agent_start(&a, argv);
    if (expect(&a, SBX_CHAN_HELLO, 0, &f, 3000) != 1) {
        test_skip("PID 1 in a fresh PID namespace",
                  "unshare --pid --fork --mount-proc failed");
        agent_close(&a);
        return;
    }
    struct run run;
    spawn_run(&a, 1, "{\"shell\":\"echo $$\"}", &run, 3000);
    test_cond("PID 1: children get small pids in the namespace",
              run.os_pid > 1 && run.os_pid < 100 && run.out.data &&
                  atoi((char *)run.out.data) == run.os_pid);
    run_free(&run);
    spawn_run(&a, 2, "{\"shell\":\"sleep 0.1 & sleep 0.1 & exit 0\"}", &run, 3000);
    test_cond("PID 1: shell leaving orphans exits 0",
              run.exit && jint(run.exit, "exit_code") == 0);
    run_free(&run);
    sleep_ms(400);
    /* Look from inside: no zombie anywhere in the namespace. */
    spawn_run(
        &a, 3,
        "{\"shell\":\"for f in /proc/[0-9]*/stat; do read l < $f && echo \\\"$l\\\"; "
        "done 2>/dev/null\"}",
        &run, 3000);
    bool zombie = false;
    int nprocs = 0;
    static char empty[1];
    for (char *line = run.out.data ? (char *)run.out.data : empty; *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *rp = strrchr(line, ')');
        if (rp && rp[1] == ' ') {
            nprocs++;
            if (rp[2] == 'Z')
                zombie = true;
        }
        if (!nl)
            break;
        line = nl + 1;
    }
    test_cond("PID 1: orphans are reaped (no zombie in the namespace)",
              nprocs >= 2 && !zombie);
    run_free(&run);
    /* SIGTERM to PID 1: unshare forwards nothing, so find the agent by ppid. */
    int inner = -1;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        char st;
        int ppid, pg;
        if (pid > 0 && proc_stat(pid, &st, &ppid, &pg) == 0 && ppid == a.pid)
            inner = pid;
    }
    if (d)
        closedir(d);
    send_str(&a, SBX_CHAN_SPAWN, 4, "{\"argv\":[\"sleep\",\"100\"]}");
    expect(&a, SBX_CHAN_STARTED, 4, &f, 3000);
    if (inner > 0)
        kill(inner, SIGTERM);
    int st = agent_wait(&a, 3000);
    test_cond("PID 1: SIGTERM ends the namespace cleanly (exit 0)",
              inner > 0 && st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    agent_close(&a);
}

/* ---- the direct socket (CHANNEL.md, Direct socket) ---------------------- */

static const char key_hex[] = "00112233445566778899aabbccddeeff";
static const char answer_hex[] = "ffeeddccbbaa99887766554433221100";

static int unix_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The same agent seen through a socket: frames in and out over fd. */
static void view_socket(struct agent *d, const struct agent *a, int fd)
{
    memset(d, 0, sizeof(*d));
    d->pid = a->pid;
    d->in = d->out = fd;
    fcntl(fd, F_SETFL, O_NONBLOCK);
}

/* Asks for the socket over stdin; its path, or "" when the agent refused. */
static const char *ask_direct(struct agent *a, char *path, size_t len)
{
    char req[200];
    snprintf(req, sizeof(req), "{\"key\":\"%s\",\"answer\":\"%s\"}", key_hex, answer_hex);
    send_str(a, SBX_CHAN_DIRECT, 0, req);
    struct frame f;
    path[0] = '\0';
    if (expect(a, SBX_CHAN_DIRECT, 0, &f, 3000) == 1) {
        json_t *j = frame_json(&f);
        snprintf(path, len, "%s", jstr(j, "path"));
        json_decref(j);
    }
    return path;
}

/* Connects and proves the key; the socket fd once the agent answered right. */
static int open_direct(const char *path, const struct agent *a)
{
    int fd = unix_connect(path);
    if (fd < 0)
        return -1;
    struct agent d;
    view_socket(&d, a, fd);
    char hello[100];
    snprintf(hello, sizeof(hello), "{\"key\":\"%s\"}", key_hex);
    send_str(&d, SBX_CHAN_DIRECT, 0, hello);
    struct frame f;
    int ok = recv_frame(&d, &f, 3000) == 1 && f.type == SBX_CHAN_DIRECT;
    json_t *j = ok ? frame_json(&f) : NULL;
    ok = ok && strcmp(jstr(j, "answer"), answer_hex) == 0;
    json_decref(j);
    dbuf_free(&d.rx);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Nothing arrives on a's output within ms. */
static bool quiet(struct agent *a, int ms)
{
    struct frame f;
    return recv_frame(a, &f, ms) == 0;
}

static void direct_daemon_gone(struct agent *a)
{
    char path[300];
    struct run run;
    int fd;
    /* the daemon goes away: stdout is the channel again */
    ask_direct(a, path, sizeof(path));
    fd = open_direct(path, a);
    test_cond("direct: a second key opens the socket again", fd >= 0);
    if (fd >= 0)
        close(fd);
    sleep_ms(100);
    spawn_run(a, 2, "{\"shell\":\"echo back on stdout\"}", &run, 5000);
    test_cond("direct: the socket closed by the daemon: frames on stdout again",
              run.exit && run.out.len == 15 &&
                  memcmp(run.out.data, "back on stdout\n", 15) == 0);
    run_free(&run);
}

static void test_direct(void)
{
    char rundir[300], path[300];
    snprintf(rundir, sizeof(rundir), "%s/run", tmpdir);
    setenv("SBX_INIT_RUNDIR", rundir, 1);
    struct agent a;
    int started = agent_start_plain(&a);
    unsetenv("SBX_INIT_RUNDIR");
    struct frame f;
    test_cond("direct: the agent starts (HELLO)",
              started == 0 && expect(&a, SBX_CHAN_HELLO, 0, &f, 3000) == 1);

    send_str(&a, SBX_CHAN_DIRECT, 0, "{\"key\":\"short\",\"answer\":\"x\"}");
    json_t *j = expect(&a, SBX_CHAN_DIRECT, 0, &f, 3000) == 1 ? frame_json(&f) : NULL;
    test_cond("direct: a request without proper keys gets {error}, no socket",
              j && jstr(j, "error")[0] && !json_object_get(j, "path") &&
                  access(rundir, F_OK) != 0);
    json_decref(j);

    ask_direct(&a, path, sizeof(path));
    struct stat st, dst;
    test_cond("direct: the agent listens on a socket in a 0700 directory",
              path[0] && stat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
                  stat(rundir, &dst) == 0 && (dst.st_mode & 0777) == 0700);

    int bad = unix_connect(path);
    char wrong[100];
    snprintf(wrong, sizeof(wrong), "{\"key\":\"%s\"}", answer_hex);
    struct agent d;
    view_socket(&d, &a, bad);
    send_str(&d, SBX_CHAN_DIRECT, 0, wrong);
    test_cond("direct: a peer with the wrong key is disconnected",
              bad >= 0 && recv_frame(&d, &f, 3000) == -1);
    dbuf_free(&d.rx);
    if (bad >= 0)
        close(bad);

    int fd = open_direct(path, &a);
    test_cond("direct: the right key is answered with the answer on the socket", fd >= 0);
    test_cond("direct: the listener is gone once the channel is taken",
              access(path, F_OK) != 0 && unix_connect(path) < 0);
    view_socket(&d, &a, fd);
    send_frame(&d, SBX_CHAN_PING, 0, NULL, 0);
    test_cond("direct: PING on the socket is answered there (PONG, HELLO)",
              recv_frame(&d, &f, 3000) == 1 && f.type == SBX_CHAN_PONG &&
                  recv_frame(&d, &f, 3000) == 1 && f.type == SBX_CHAN_HELLO);
    struct run run;
    spawn_run(&d, 1, "{\"shell\":\"echo over the socket\"}", &run, 5000);
    test_cond("direct: SPAWN, output and EXIT go through the socket",
              run.started && run.exit && jint(run.exit, "exit_code") == 0 &&
                  run.out.len == 16 &&
                  memcmp(run.out.data, "over the socket\n", 16) == 0);
    run_free(&run);
    test_cond("direct: nothing goes to stdout meanwhile", quiet(&a, 200));

    /* another client attaches: it pings on stdin */
    send_frame(&a, SBX_CHAN_PING, 0, NULL, 0);
    j = recv_frame(&d, &f, 3000) == 1 && f.type == SBX_CHAN_DIRECT ? frame_json(&f)
                                                                   : NULL;
    test_cond("direct: a PING on stdin tells the socket {moved}, then closes it",
              j && jtrue(j, "moved") && recv_frame(&d, &f, 3000) == -1);
    json_decref(j);
    test_cond("direct: ... and is answered on stdout (PONG, HELLO)",
              expect(&a, SBX_CHAN_PONG, 0, &f, 3000) == 1 &&
                  expect(&a, SBX_CHAN_HELLO, 0, &f, 3000) == 1);
    dbuf_free(&d.rx);
    close(fd);

    direct_daemon_gone(&a);
    agent_close(&a);
}

int main(int argc, char **argv)
{
    int st = agent_kit_main(argc, argv);
    if (st < 0) {
        test_cond("sbx-init binary exists", 0);
        return test_report();
    }
    if (st)
        return st;
    test_direct();
    test_sigterm();
    test_main_child();
    test_pid1();
    agent_kit_end();
    return test_report();
}
