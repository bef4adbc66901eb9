/*
 * ptest_docker_recovery.c - issue 16 on a real Docker engine: the window
 * after an sbxd restart (item 12) and the per-uid memory total (item 6).
 *
 *   ptest_docker_recovery SBXD BUILD_DIR TMPDIR
 *
 * DOCKER_HOST (unix://) names the engine (tests/providers/docker_recovery.sh
 * finds it and builds the test images). The sbxd here is its own: it is
 * SIGKILLed and started again while a process runs in its container.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "testhelp.h"

static const char *sbxd_bin, *bdir, *tmpdir, *docker_host;
/* Ids carry the test's pid: a container another run left behind with the
 * same id must not be found instead (another sbxd's, by label). */
static char id_rw1[64], id_rw2[64], id_m1[64], id_m2[64], id_m3[64];
static char sockp[108], cfgp[512], logp[512], notifyp[108];
static pid_t sbxd_pid;

static void write_config(const char *extra)
{
    FILE *f = fopen(cfgp, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "defaults:\n  provider: docker\n"
            "limits:\n  memory_per_uid: 1G\n  adopt_wait_ms: 20000\n%s"
            "providers:\n"
            "  duktape:\n    enabled: false\n"
            "  js:\n    enabled: false\n"
            "  modal:\n    enabled: false\n"
            "  docker:\n"
            "    host: %s\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    network: none\n"
            "    memory: 512m\n"
            "    memory_swap: 512m\n"
            "    pids_limit: 256\n"
            "    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n",
            extra ? extra : "", docker_host, bdir);
    fclose(f);
}

/* Starts sbxd with NOTIFY_SOCKET at notifyp; returns when its socket is
 * there (the moment a reconnecting client would call). */
static void start_sbxd(void)
{
    unlink(sockp);
    sbxd_pid = fork();
    if (sbxd_pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("SBXD_SOCKET", sockp, 1);
        setenv("NOTIFY_SOCKET", notifyp, 1);
        execl(sbxd_bin, "sbxd", "-c", cfgp, "--log-level", "debug", (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 2000 && stat(sockp, &st) != 0; i++)
        usleep(5000);
}

static void stop_sbxd(int sig)
{
    if (sbxd_pid <= 0)
        return;
    kill(sbxd_pid, sig);
    waitpid(sbxd_pid, NULL, 0);
    sbxd_pid = 0;
}

/* The datagram socket sbxd sends READY=1 to. */
static int notify_listen(void)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", notifyp);
    unlink(notifyp);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    return fd;
}

/* ms until a READY=1 datagram arrives on fd (-1: none within timeout_ms). */
static double wait_ready(int fd, int timeout_ms)
{
    double t0 = now_ms();
    while (now_ms() - t0 < timeout_ms) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        char buf[256];
        ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
        if (n > 0) {
            buf[n] = '\0';
            if (strstr(buf, "READY=1"))
                return now_ms() - t0;
        }
    }
    return -1;
}

static conn *connect_now(void)
{
    for (int i = 0; i < 400; i++) {
        conn *c = cn_open(sockp);
        if (c)
            return c;
        usleep(5000);
    }
    return NULL;
}

static json_t *create(conn *c, const char *id)
{
    return cn_call_t(c, 120000, "sandbox.create",
                     json_pack("{s:s, s:s}", "id", id, "provider", "docker"));
}

static void destroy(conn *c, const char *id)
{
    json_decref(cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", id)));
}

static json_int_t memory_used(conn *c)
{
    json_t *r = cn_call(c, "daemon.info", NULL);
    json_int_t v = json_integer_value(json_object_get(
        json_object_get(json_object_get(res_of(r), "usage"), "memory_per_uid"), "used"));
    json_decref(r);
    return v;
}

/* ---- the restart window (item 12) ------------------------------------------------- */

static void test_restart_window(void)
{
    conn *c = connect_now();
    if (!c) {
        test_cond("window: sbxd answers", 0);
        return;
    }
    json_t *r = create(c, id_rw1);
    int made = res_of(r) != NULL;
    json_decref(r);
    test_cond("window: a docker sandbox is created", made);
    if (!made) {
        cn_close(c);
        return;
    }
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", id_rw1, "command",
                          "sleep 4; echo done; exit 5"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    usleep(500000);
    cn_close(c);
    stop_sbxd(SIGKILL);

    int nfd = notify_listen();
    start_sbxd();
    double t0 = now_ms();
    c = connect_now();
    if (!c) {
        test_cond("window: sbxd answers after the restart", 0);
        return;
    }
    /* At once, as a reconnecting client does on seeing the socket. */
    r = cn_call_t(c, 30000, "sandbox.get", json_pack("{s:s}", "id", id_rw1));
    double took = now_ms() - t0;
    printf("      sandbox.get right after the restart: %s in %.0f ms\n",
           res_of(r) ? res_str(r, "status") : "error", took);
    test_cond("window: sandbox.get right after a restart finds the sandbox, running",
              res_of(r) && strcmp(res_str(r, "status"), "running") == 0);
    test_cond("window: ... within 10 s (the adoption's time, not adopt_wait_ms)",
              took < 10000);
    json_decref(r);
    r = cn_call_t(
        c, 30000, "process.wait",
        json_pack("{s:s, s:I, s:i}", "sandbox", id_rw1, "pid", pid, "timeout_ms", 20000));
    printf("      process.wait: %s\n", res_of(r) ? "exit record" : "error");
    test_eq_int("window: process.wait on the adopted process gets its exit", 5,
                res_int(r, "exit_code"));
    json_decref(r);
    double ready = nfd >= 0 ? wait_ready(nfd, 15000) : -1;
    test_cond("window: READY=1 is sent (after the adoption)", ready >= 0);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "nope"));
    test_eq_int("window: afterwards an unknown id is not found at once", err_code(r),
                -32000);
    json_decref(r);
    test_eq_int("memory: the adopted running container counts 512m again", memory_used(c),
                512LL * 1024 * 1024);
    destroy(c, id_rw1);
    if (nfd >= 0)
        close(nfd);
    cn_close(c);
}

/* READY=1 comes only once the adoption is done: the sandbox is there at once. */
static void test_ready_after_adoption(void)
{
    conn *c = connect_now();
    if (!c) {
        test_cond("ready: sbxd answers", 0);
        return;
    }
    json_t *r = create(c, id_rw2);
    json_decref(r);
    cn_close(c);
    stop_sbxd(SIGKILL);
    int nfd = notify_listen();
    start_sbxd();
    double ready = nfd >= 0 ? wait_ready(nfd, 15000) : -1;
    c = connect_now();
    if (!c) {
        test_cond("ready: sbxd answers after the restart", 0);
        return;
    }
    double t0 = now_ms();
    r = cn_call_t(c, 30000, "process.list", json_pack("{s:s}", "sandbox", id_rw2));
    double took = now_ms() - t0;
    test_cond("ready: READY=1 is sent", ready >= 0);
    test_cond("ready: after READY=1 the adopted sandbox answers at once (< 1 s)",
              res_of(r) != NULL && took < 1000);
    json_decref(r);
    destroy(c, id_rw2);
    if (nfd >= 0)
        close(nfd);
    cn_close(c);
}

/* ---- memory per uid on Docker (item 6) -------------------------------------------- */

static void test_memory_total(void)
{
    conn *c = connect_now();
    if (!c) {
        test_cond("memory: sbxd answers", 0);
        return;
    }
    json_t *a = create(c, id_m1), *b = create(c, id_m2), *d = create(c, id_m3);
    test_cond("memory: two containers of 512m fit in memory_per_uid 1G",
              res_of(a) && res_of(b));
    const char *lim = json_string_value(
        json_object_get(json_object_get(json_object_get(d, "error"), "data"), "limit"));
    test_cond("memory: a third is -32005 {limit: memory_per_uid}",
              err_code(d) == -32005 && lim && strcmp(lim, "memory_per_uid") == 0);
    json_decref(a);
    json_decref(b);
    json_decref(d);
    json_t *l = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", id_m3));
    test_cond("memory: the refused create left no sandbox", err_code(l) == -32000);
    json_decref(l);
    destroy(c, id_m1);
    destroy(c, id_m2);
    test_eq_int("memory: destroyed containers give their share back", memory_used(c), 0);
    cn_close(c);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ptest_docker_recovery SBXD BUILD_DIR TMPDIR\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    sbxd_bin = argv[1];
    bdir = argv[2];
    tmpdir = argv[3];
    docker_host = getenv("DOCKER_HOST");
    if (!docker_host || strncmp(docker_host, "unix://", 7) != 0) {
        printf("DOCKER_HOST must be unix://...\n0 passed, 1 failed\n");
        return 1;
    }
    snprintf(sockp, sizeof(sockp), "%.90s/rec.sock", tmpdir);
    snprintf(notifyp, sizeof(notifyp), "%.90s/notify", tmpdir);
    snprintf(cfgp, sizeof(cfgp), "%s/rec.yaml", tmpdir);
    snprintf(logp, sizeof(logp), "%s/sbxd-rec.log", tmpdir);
    snprintf(id_rw1, sizeof(id_rw1), "rw1-%d", (int)getpid());
    snprintf(id_rw2, sizeof(id_rw2), "rw2-%d", (int)getpid());
    snprintf(id_m1, sizeof(id_m1), "mem1-%d", (int)getpid());
    snprintf(id_m2, sizeof(id_m2), "mem2-%d", (int)getpid());
    snprintf(id_m3, sizeof(id_m3), "mem3-%d", (int)getpid());
    write_config(NULL);
    start_sbxd();
    /* The engine's first ping is asynchronous. */
    conn *c = connect_now();
    dk_docker_up(c, 10000);
    cn_close(c);
    test_memory_total();
    test_restart_window();
    test_ready_after_adoption();
    stop_sbxd(SIGTERM);
    unlink(notifyp);
    return test_report();
}
