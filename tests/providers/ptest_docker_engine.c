/*
 * ptest_docker_engine.c - sbxd and the engine: over TCP + TLS, the
 * no engine, a misbehaving engine, and (last, a private
 * engine only) the engine stopping while a command runs.
 *
 *   ptest_docker_engine SBXD BUILD_DIR TMPDIR
 *
 * One part of the main Docker suite (dk_suite.h: its sbxd, config and calls;
 * the environment is docker.sh's, see ptest_docker.c), run by
 * tests/providers/docker.sh.
 *   SBX_DOCKERD_PRIVATE=1  the engine is ours: it may be stopped (last test)
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

static void tls_remote_agent(conn *c)
{
    json_t *r;
    /* A remote engine gets the agent by one upload into a holder's volume,
     * shared read-only with every container. */
    int shared = 0;
    for (int i = 0; i < 50 && !shared; i++) {
        json_t *info = cn_call(c, "daemon.info", NULL);
        char *t = json_dumps(info, 0);
        shared = t && strstr(t, "\"agent_mount\": \"shared\"");
        free(t);
        json_decref(info);
        if (!shared)
            usleep(100000);
    }
    test_cond("remote engine: the agent holder is made once (agent_mount shared)",
              shared);
    r = create(c, "tls2", NULL);
    json_t *ins = dk_inspect(cid_of(r));
    json_decref(r);
    json_t *vf = json_object_get(json_object_get(ins, "HostConfig"), "VolumesFrom");
    const char *v0 = json_string_value(json_array_get(vf, 0));
    int ro_volume = 0;
    size_t k;
    json_t *m;
    json_array_foreach(json_object_get(ins, "Mounts"), k, m)
        if (!strcmp(json_string_value(json_object_get(m, "Destination")) ?: "",
                    "/.sbx") &&
            json_is_false(json_object_get(m, "RW")))
            ro_volume = 1;
    test_cond("remote engine: a new container mounts the holder's agent read-only, no "
              "upload",
              v0 && !strncmp(v0, "sbxd-agent-", 11) && strstr(v0, ":ro") && ro_volume);
    json_decref(ins);
    json_t *x = exec(c, "tls2",
                     "cp /bin/busybox /.sbx/sbx-init 2>/dev/null && echo "
                     "replaced; echo ok");
    test_cond("remote engine: the shared agent runs and cannot be replaced",
              !strcmp(res_str(x, "stdout"), "ok\n"));
    json_decref(x);
}

static void test_tls(void)
{
    if (!tls_host || !tls_host[0]) {
        test_skip("TLS: the engine over tcp:// with TLS",
                  "no TLS endpoint: the engine is not private");
        return;
    }
    char extra[2048];
    snprintf(extra, sizeof(extra),
             "    tls_ca: %s\n    tls_cert: %s\n    tls_key: %s\n    tls_verify: true\n",
             tls_ca, tls_cert, tls_key);
    pid_t pid;
    conn *c = start_other("tls", tls_host, extra, &pid);
    test_cond("TLS: the engine over tcp:// with TLS is available", docker_up(c));
    json_t *r = c ? create(c, "tls1", NULL) : NULL;
    test_cond("TLS: create (attach over TLS)",
              c && strcmp(res_str(r, "status"), "running") == 0);
    json_decref(r);
    test_cond("TLS: exec",
              c && exec_ok(c, "tls1", "echo over tls; echo e >&2", "over tls\n"));
    if (c) {
        r = cn_call(c, "process.exec",
                    json_pack("{s:s, s:s, s:s}", "sandbox", "tls1", "command",
                              "cat | wc -c", "stdin", "12345"));
        test_eq_str("TLS: stdin", res_str(r, "stdout"), "5\n");
        json_decref(r);
        /* The same id at another sbxd (another socket) is another sandbox: a
         * container of the main sbxd is never taken over by a second daemon (two
         * daemons on one agent's stdin would interleave their frames). */
        r = create(c, "shared1", json_pack("{s:{s:s}}", "options", "memory", "128m"));
        test_cond("same id at another sbxd: a sandbox of its own, not a reconnect",
                  res_of(r) && !strcmp(res_str(r, "status"), "running") &&
                      !json_is_true(json_object_get(
                          json_object_get(res_of(r), "metadata"), "reconnected")));
        json_decref(r);
        test_cond("same id at another sbxd: the first sbxd's files are not in it",
                  exec_ok(c, "shared1", "cat /workspace/shared.txt 2>/dev/null; echo end",
                          "end\n"));
        tls_remote_agent(c);
        destroy(c, "tls2");
        destroy(c, "tls1");
        destroy(c, "shared1");
        cn_close(c);
    }
    stop_sbxd(pid, SIGTERM);
}

/* An engine that does not answer: unavailable with a reason, -32002, duktape still fine.
 */
static void test_no_engine(void)
{
    char host[700];
    snprintf(host, sizeof(host), "unix://%s/no-engine.sock", tmpdir);
    pid_t pid;
    conn *c = start_other("none", host, NULL, &pid);
    usleep(300000);
    json_t *r = c ? cn_call(c, "daemon.info", NULL) : NULL;
    json_t *dk = pt_provider_of(r, "docker");
    test_cond("no engine: daemon.info says unavailable, with the reason",
              dk && json_is_false(json_object_get(dk, "available")) &&
                  strstr(json_string_value(json_object_get(dk, "reason")) ?: "",
                         "no-engine.sock"));
    json_decref(r);
    double t = now_ms();
    r = c ? create(c, "ne1", NULL) : NULL;
    test_cond("no engine: sandbox.create fails at once with -32002",
              err_code(r) == -32002 && now_ms() - t < 2000);
    json_decref(r);
    r = c ? cn_call(c, "process.exec",
                    json_pack("{s:s, s:s}", "sandbox", "x", "command", "1"))
          : NULL;
    json_decref(r);
    r = c ? cn_call(c, "sandbox.create",
                    json_pack("{s:s, s:s}", "id", "duk1", "provider", "duktape"))
          : NULL;
    json_decref(r);
    r = c ? cn_call(c, "process.exec",
                    json_pack("{s:s, s:s}", "sandbox", "duk1", "command", "6*7"))
          : NULL;
    test_eq_int("no engine: the duktape provider still serves",
                json_integer_value(json_object_get(res_of(r), "result")), 42);
    json_decref(r);
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
}

/* ---- a misbehaving engine -----------------------------------------------------------
 */

/* Faults a real engine does not produce on demand: the attach stream of
 * container "fake-garbage" sends an invalid frame header, "fake-trunc" a cut
 * frame then EOF, "fake-stall" nothing at all. Everything else is a
 * minimal, well-behaved engine. One process, one connection at a time. */
static void fake_reply(int fd, int status, const char *body)
{
    char h[512];
    int n = snprintf(
        h, sizeof(h),
        "HTTP/1.1 %d X\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\n"
        "Content-Length: %zu\r\n\r\n",
        status, strlen(body));
    if (write(fd, h, (size_t)n) < 0 || write(fd, body, strlen(body)) < 0)
        return;
}

static void fake_conn(int fd)
{
    static char buf[1 << 20];
    size_t have = 0;
    for (;;) {
        char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
        if (!end) {
            ssize_t k = read(fd, buf + have, sizeof(buf) - have);
            if (k <= 0)
                return;
            have += (size_t)k;
            continue;
        }
        size_t hl = (size_t)(end + 4 - buf);
        long clen = 0;
        char *cl = strcasestr(buf, "Content-Length:");
        if (cl && cl < end)
            clen = atol(cl + 15);
        while (have < hl + (size_t)clen) {
            ssize_t k = read(fd, buf + have, sizeof(buf) - have);
            if (k <= 0)
                return;
            have += (size_t)k;
        }
        char method[16] = "", path[512] = "";
        sscanf(buf, "%15s %511s", method, path);
        memmove(buf, buf + hl + clen, have - hl - (size_t)clen);
        have -= hl + (size_t)clen;
        if (strstr(path, "/attach")) {
            const char *up =
                "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n";
            if (write(fd, up, strlen(up)) < 0)
                return;
            if (strstr(path, "garbage")) {
                const uint8_t bad[] = {9, 1, 2, 3, 0, 0, 0, 4, 'x', 'x', 'x', 'x'};
                if (write(fd, bad, sizeof(bad)) < 0)
                    return;
            } else if (strstr(path, "trunc")) {
                const uint8_t cut[] = {1, 0, 0, 0, 0, 0, 0, 100, 'a', 'b', 'c'};
                if (write(fd, cut, sizeof(cut)) < 0)
                    return;
                return; /* EOF in the middle of a frame */
            }
            /* stall: keep the connection, say nothing */
            while (read(fd, buf, sizeof(buf)) > 0)
                ;
            return;
        }
        if (strcmp(path, "/_ping") == 0)
            fake_reply(fd, 200, "OK");
        else if (strcmp(path, "/version") == 0)
            fake_reply(fd, 200,
                       "{\"ApiVersion\":\"1.41\",\"MinAPIVersion\":\"1.12\",\"Version\":"
                       "\"fake\"}");
        else if (strstr(path, "/containers/json"))
            fake_reply(fd, 200, "[]");
        else if (strstr(path, "/images/"))
            fake_reply(fd, 200,
                       "{\"Id\":\"sha256:fake\",\"Config\":{\"Env\":[\"PATH=/bin\"]}}");
        else if (strstr(path, "/containers/create")) {
            char body[128];
            const char *n = strstr(path, "name=");
            snprintf(body, sizeof(body), "{\"Id\":\"fake-%s\",\"Warnings\":[]}",
                     n ? n + 5 + 4 : "x"); /* skip "sbx-" */
            fake_reply(fd, 201, body);
        } else if (strstr(path, "/archive"))
            fake_reply(fd, 200, "");
        else if (strstr(path, "/start") || strcmp(method, "DELETE") == 0)
            fake_reply(fd, 204, "");
        else
            fake_reply(fd, 404, "{\"message\":\"fake engine: no such thing\"}");
    }
}

static pid_t fake_engine(const char *path)
{
    unlink(path);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 16) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        for (;;) {
            int fd = accept(ls, NULL, NULL);
            if (fd < 0)
                _exit(0);
            if (fork() == 0) {
                fake_conn(fd);
                _exit(0);
            }
            close(fd);
            while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
        }
    }
    close(ls);
    return pid;
}

static void test_fake_engine(void)
{
    char fsock[108], cfg[600], sock[108], log[600], host[200];
    snprintf(fsock, sizeof(fsock), "%.90s/fake.sock", tmpdir);
    snprintf(cfg, sizeof(cfg), "%s/fake.yaml", tmpdir);
    snprintf(sock, sizeof(sock), "%.90s/fk.sock", tmpdir);
    snprintf(log, sizeof(log), "%s/sbxd-fake.log", tmpdir);
    snprintf(host, sizeof(host), "unix://%s", fsock);
    pid_t fpid = fake_engine(fsock);
    write_config(cfg, host, NULL);
    pid_t pid = start_sbxd(cfg, sock, log);
    conn *c = cn_open(sock);
    dk_docker_up(c, 5000);
    double t = now_ms();
    json_t *r = c ? create(c, "garbage", NULL) : NULL;
    const char *m =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    test_cond("broken engine: an invalid attach frame fails the create clearly",
              err_code(r) == -32006 && m && strstr(m, "invalid stream frame") &&
                  now_ms() - t < 5000);
    json_decref(r);
    r = c ? create(c, "trunc", NULL) : NULL;
    m = json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    test_cond("broken engine: a frame cut by EOF fails the create clearly",
              err_code(r) == -32006 && m && strstr(m, "attach stream ended"));
    json_decref(r);
    /* a stalled agent: the create waits for the handshake; the daemon does not */
    int id = c ? ++c->next_id : 0;
    char req[200];
    snprintf(req, sizeof(req),
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"sandbox.create\",\"params\":"
             "{\"id\":\"stall\",\"provider\":\"docker\"}}\n",
             id);
    t = now_ms();
    if (c)
        cn_send_raw(c, req, strlen(req));
    usleep(500000);
    double worst = 0;
    for (int i = 0; i < 20 && c; i++) {
        double t1 = now_ms();
        json_decref(cn_call(c, "daemon.ping", NULL));
        if (now_ms() - t1 > worst)
            worst = now_ms() - t1;
    }
    test_cond("stalled engine: other calls are served meanwhile (ping < 500 ms)",
              c && worst < 500);
    json_t *ans = NULL;
    while (c && !ans && now_ms() - t < 30000) {
        json_t *x = cn_read(c, 1000);
        if (x && json_integer_value(json_object_get(x, "id")) == id)
            ans = x;
        else
            json_decref(x);
    }
    m = json_string_value(json_object_get(json_object_get(ans, "error"), "message"));
    test_cond("stalled agent: the create fails after the handshake timeout",
              err_code(ans) == -32006 && m && strstr(m, "does not answer") &&
                  now_ms() - t < 20000);
    json_decref(ans);
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
    if (fpid > 0) {
        kill(fpid, SIGKILL);
        waitpid(fpid, NULL, 0);
    }
}

/* The pid of the private dockerd of dir (tests/docker/dockerd.sh), or 0. */
static int dockerd_pid(const char *dir)
{
    char pidf[600];
    snprintf(pidf, sizeof(pidf), "%s/dockerd.pid", dir ? dir : "");
    FILE *f = fopen(pidf, "r");
    int dpid = 0;
    if (f) {
        if (fscanf(f, "%d", &dpid) != 1)
            dpid = 0;
        fclose(f);
    }
    return dpid;
}

/* Starts the private engine of dir again; 1 once sbxd sees it available. */
static int engine_restart(conn *c, const char *dir)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd),
             "sh tests/docker/dockerd.sh start '%s' --tls >/dev/null 2>&1",
             dir ? dir : "");
    int st = system(cmd);
    int up = 0;
    for (int i = 0; st == 0 && i < 100 && !up; i++) {
        json_t *info = cn_call(c, "daemon.info", NULL);
        size_t k;
        json_t *pv;
        json_array_foreach(json_object_get(res_of(info), "providers"), k, pv)
            if (!strcmp(json_string_value(json_object_get(pv, "name")), "docker"))
                up = json_is_true(json_object_get(pv, "available"));
        json_decref(info);
        if (!up)
            usleep(200000);
    }
    return up;
}

/* The engine stopped: duktape still serves; Docker creates and execs fail promptly. */
static void engine_gone(conn *c, int dpid)
{
    json_t *r;
    double t;
    r = cn_call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", "duk2", "command", "1+1"));
    test_eq_int("engine stopped: the duktape provider still serves",
                json_integer_value(json_object_get(res_of(r), "result")), 2);
    json_decref(r);
    /* wait until the engine is really gone */
    for (int i = 0; i < 150 && kill(dpid, 0) == 0; i++)
        usleep(100000);
    t = now_ms();
    r = create(c, "es2", NULL);
    test_cond("engine stopped: create fails promptly with -32002",
              err_code(r) == -32002 && now_ms() - t < 8000);
    json_decref(r);
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "es1"));
    test_eq_str("engine stopped: the sandbox is in error", res_str(r, "status"), "error");
    json_decref(r);
    r = exec_t(c, "es1", "echo x", 5000);
    test_eq_int("engine stopped: an exec on it fails promptly with -32001 (engine away)",
                err_code(r), -32001);
    json_decref(r);
}

static void engine_back(conn *c, const char *dir)
{
    json_t *r;
    /* The engine comes back (same data root): the next call restarts the
     * stopped container and runs. */
    test_cond("engine restarted: sbxd sees it again", engine_restart(c, dir));
    r = exec_t(c, "es1", "echo back", 60000);
    test_cond("engine restart: the next exec restarts the container and runs "
              "(retried, sandbox_restarted)",
              restarted_ok(r, "back\n"));
    json_decref(r);
}

static void engine_killed(conn *c, const char *dir)
{
    json_t *r;
    double t;
    int dpid;
    /* SIGKILL in the middle of a commit: the engine's connection dies under
     * the op, which fails at once with a provider error (issue 11). A big
     * layer keeps the commit busy for a second or more (vfs copies it). */
    json_decref(create(c, "es4", NULL));
    exec_ok(c, "es4", "dd if=/dev/zero of=/big bs=1M count=400 2>/dev/null && echo ok",
            "ok\n");
    int sid = send_call(c, "sandbox.snapshot", json_pack("{s:s}", "id", "es4"));
    usleep(300000);
    dpid = dockerd_pid(dir);
    t = now_ms();
    if (dpid > 0)
        kill(dpid, SIGKILL);
    json_t *kans = await_id(c, sid, 60000);
    double kms = now_ms() - t;
    print_answer("snapshot, engine killed meanwhile", kans, kms);
    test_cond(
        "engine killed mid-snapshot: the snapshot fails at once with a provider error, "
        "not at op_timeout_ms",
        op_answer_clear(kans) && json_object_get(kans, "error") && kms < 10000);
    json_decref(kans);
    t = now_ms();
    r = cn_call_t(c, 30000, "sandbox.stop", json_pack("{s:s}", "id", "es4"));
    test_cond("engine killed: a stop fails at once with -32002",
              err_code(r) == -32002 && now_ms() - t < 10000);
    json_decref(r);
    for (int i = 0; i < 50 && kill(dpid, 0) == 0; i++)
        usleep(100000);
    test_cond("engine killed, started again: sbxd sees it", engine_restart(c, dir));
    t = now_ms();
    r = cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "es4"));
    test_cond("engine killed, started again: destroy finishes",
              res_of(r) && now_ms() - t < 30000);
    json_decref(r);
}

/* Last: the private engine goes away while a command runs. */
static void test_engine_stops(conn *c)
{
    if (!private_engine) {
        test_skip("engine stopped: mid-exec error, duktape serves, create fails",
                  "shared engine: needs the private dockerd");
        return;
    }
    const char *dir = getenv("SBX_DOCKERD_DIR");
    json_t *r = create(c, "es1", NULL);
    json_decref(r);
    json_decref(create(c, "es3", NULL));
    exec_ok(c, "es3", "dd if=/dev/zero of=/big bs=1M count=200 2>/dev/null && echo ok",
            "ok\n");
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", "duk2", "provider", "duktape")));
    int id = ++c->next_id;
    char req[256];
    snprintf(req, sizeof(req),
             "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"process.exec\",\"params\":{"
             "\"sandbox\":"
             "\"es1\",\"command\":\"echo before; sleep 60\"}}\n",
             id);
    cn_send_raw(c, req, strlen(req));
    /* and a commit of a big layer (issue 11: losing the engine fails it at once) */
    int snap_id = send_call(c, "sandbox.snapshot", json_pack("{s:s}", "id", "es3"));
    usleep(500000);
    int dpid = dockerd_pid(dir);
    double t = now_ms();
    /* SIGTERM: the engine stops its containers and goes (SIGKILL would leave
     * containerd shims and containers behind). */
    if (dpid > 0)
        kill(dpid, SIGTERM);
    json_t *ans = NULL, *snap_ans = NULL;
    double snap_ms = 0;
    while ((!ans || !snap_ans) && now_ms() - t < 30000) {
        json_t *m = cn_read(c, 1000);
        if (m && json_integer_value(json_object_get(m, "id")) == id) {
            ans = m;
        } else if (m && json_integer_value(json_object_get(m, "id")) == snap_id) {
            snap_ans = m;
            snap_ms = now_ms() - t;
        } else if (m) {
            json_array_append_new(c->notes, m);
        }
    }
    print_answer("snapshot, engine stopped meanwhile", snap_ans, snap_ms);
    test_cond(
        "engine stopped mid-snapshot: the snapshot answers at once (a provider error, "
        "or done if it finished first), not at op_timeout_ms",
        op_answer_clear(snap_ans) && snap_ms < 15000);
    const char *snap = json_string_value(json_object_get(res_of(snap_ans), "snapshot"));
    char snap_name[80] = "";
    if (snap)
        snprintf(snap_name, sizeof(snap_name), "%s", snap);
    json_decref(snap_ans);
    test_cond("engine stopped mid-exec: the exec ends with a clear error, no hang",
              ans && !json_is_null(json_object_get(res_of(ans), "error")) &&
                  now_ms() - t < 15000);
    if (ans) {
        printf("      after %.0f ms: %s\n", now_ms() - t,
               json_string_value(json_object_get(res_of(ans), "error")) ?: "?");
    }
    json_decref(ans);
    engine_gone(c, dpid);
    engine_back(c, dir);
    engine_killed(c, dir);
    destroy(c, "es1");
    t = now_ms();
    r = cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "es3"));
    test_cond("engine restarted: the sandbox whose snapshot failed is destroyed",
              res_of(r) && now_ms() - t < 30000);
    json_decref(r);
    if (snap_name[0])
        json_decref(cn_call_t(c, 60000, "snapshot.delete",
                              json_pack("{s:s}", "snapshot", snap_name)));
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "duk2")));
}

int main(int argc, char **argv)
{
    conn *c;
    int st = dk_suite_start(argc, argv, "main-engine", &c);
    if (st)
        return st;
    const char *only = getenv("SBX_PTEST_ONLY"); /* as DK_STEP reads it */
    /* the TLS pass (a private engine only) uses the same id from a second sbxd */
    if (c && tls_host && tls_host[0] && (!only || strstr("test_tls", only))) {
        /* a container of the main sbxd that the TLS sbxd must leave alone */
        json_decref(create(c, "shared1", NULL));
        exec_ok(c, "shared1", "echo shared > /workspace/shared.txt", NULL);
    }
    DK_STEP(test_tls());
    /* the TLS pass's second sbxd made and destroyed its own shared1 */
    if (c && tls_host && tls_host[0] && (!only || strstr("test_tls", only))) {
        test_cond("same id at another sbxd: ours keeps running with its files",
                  exec_ok(c, "shared1", "cat /workspace/shared.txt", "shared\n"));
        destroy(c, "shared1");
    }
    DK_STEP(test_no_engine());
    DK_STEP(test_fake_engine());
    if (c)
        DK_STEP(test_engine_stops(c));
    dk_suite_end(c);
    return test_report();
}
