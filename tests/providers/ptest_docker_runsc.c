/*
 * ptest_docker_runsc.c - the Docker provider's pass on gVisor: lifecycle, exec,
 * stdin, kill, stream, snapshot and restart with `runtime: runsc`.
 *
 *   ptest_docker_runsc SBXD BUILD_DIR TMPDIR
 *
 * DOCKER_HOST (unix://...) names the engine, as for ptest_docker (run by
 * tests/providers/docker.sh after it, with the test images built). Where the
 * engine has no runtime "runsc", or a runsc container cannot run here, every
 * test is counted as skipped with the reason. Which agent channel to expect
 * comes from the engine's own word (GET /info, the runtime's runtimeArgs):
 * `direct` with --host-uds=create or =all, else `attach`.
 */
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "testhelp.h"

static const char *sbxd_bin, *bdir, *tmpdir, *docker_host;
static char sock[108], cfg[512], sbxd_log[512];
static pid_t spid;
static const char *want_channel = "attach";

/*
 * Can runsc run here? NULL when it can, else why not. Sets want_channel from
 * the runtime's runtimeArgs. The probe is a container of our own, removed.
 */
static const char *runsc_usable(void)
{
    static char why[300];
    json_t *info = NULL;
    if (dk_engine("GET", "/info", NULL, &info) != 200) {
        json_decref(info);
        return "GET /info failed";
    }
    json_t *rt = json_object_get(json_object_get(info, "Runtimes"), "runsc");
    if (!rt) {
        json_decref(info);
        return "the engine has no runtime runsc (tests/docker/dockerd.sh registers "
               "Debian's runsc in a private engine)";
    }
    size_t i;
    json_t *a;
    json_array_foreach(json_object_get(rt, "runtimeArgs"), i, a) {
        const char *s = json_string_value(a);
        if (s && (!strcmp(s, "--host-uds=create") || !strcmp(s, "--host-uds=all") ||
                  !strcmp(s, "-host-uds=create") || !strcmp(s, "-host-uds=all")))
            want_channel = "direct";
    }
    json_decref(info);
    json_t *r = NULL;
    long st =
        dk_engine("POST", "/containers/create",
                  "{\"Image\":\"sbx-test/busybox\",\"Cmd\":[\"true\"],"
                  "\"Labels\":{\"sbxtest.runsc_probe\":\"1\"},"
                  "\"HostConfig\":{\"Runtime\":\"runsc\",\"NetworkMode\":\"none\"}}",
                  &r);
    const char *id = json_string_value(json_object_get(r, "Id"));
    char cid[80] = "";
    if (st == 201 && id)
        snprintf(cid, sizeof(cid), "%s", id);
    json_decref(r);
    if (!cid[0])
        return "the engine cannot create a runsc container";
    char p[200];
    snprintf(p, sizeof(p), "/containers/%s/start", cid);
    json_t *e = NULL;
    st = dk_engine("POST", p, NULL, &e);
    const char *res = NULL;
    if (st != 204) {
        snprintf(why, sizeof(why), "a runsc container does not start here: %.200s",
                 json_string_value(json_object_get(e, "message"))
                     ? json_string_value(json_object_get(e, "message"))
                     : "no message");
        res = why;
    } else {
        snprintf(p, sizeof(p), "/containers/%s/wait", cid);
        json_t *w = NULL;
        dk_engine("POST", p, NULL, &w);
        if (json_integer_value(json_object_get(w, "StatusCode")) != 0)
            res = "`true` in a runsc container does not exit 0 here";
        json_decref(w);
    }
    json_decref(e);
    snprintf(p, sizeof(p), "/containers/%s?force=1&v=1", cid);
    dk_engine("DELETE", p, NULL, NULL);
    return res;
}

/* ---- sbxd -------------------------------------------------------------------------- */

static void write_config(void)
{
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "socket:\n  mode: \"0600\"\n"
            "providers:\n"
            "  docker:\n"
            "    host: %s\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    runtime: runsc\n"
            "    network: none\n"
            "    memory: 512m\n"
            "    pids_limit: 256\n"
            "    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n"
            "    command_timeout_ms: 120000\n",
            docker_host, bdir);
    fclose(f);
}

static conn *start_sbxd(void)
{
    spid = dk_sbxd_start(cfg, sock, sbxd_log, "debug");
    conn *c = dk_connect(sock, 10000);
    dk_docker_up(c, 10000);
    return c;
}

static void stop_sbxd(int sig)
{
    dk_sbxd_stop(spid, sig, 10000);
    spid = 0;
}

/* ---- helpers ----------------------------------------------------------------------- */

static json_t *create(conn *c, const char *id, json_t *extra)
{
    return dk_create(c, id, extra, 180000);
}

static json_t *exec(conn *c, const char *sb, const char *cmd)
{
    return dk_exec(c, sb, cmd, 150000);
}

static int exec_is(conn *c, const char *sb, const char *cmd, const char *want)
{
    return dk_exec_is(c, sb, cmd, want, 150000);
}

static void destroy(conn *c, const char *id)
{
    dk_destroy(c, id, 120000);
}

static const char *meta_str(json_t *resp, const char *k, char *out, size_t n)
{
    snprintf(out, n, "%s", dk_meta(resp, k));
    return out;
}

static json_t *get(conn *c, const char *id)
{
    return cn_call(c, "sandbox.get", json_pack("{s:s}", "id", id));
}

/* The Name of the volume at the agent's run directory in an inspect, or "". */
static void run_volume(json_t *ins, char *out, size_t n)
{
    size_t i;
    json_t *m;
    out[0] = '\0';
    json_array_foreach(json_object_get(ins, "Mounts"), i, m) {
        const char *d = json_string_value(json_object_get(m, "Destination"));
        const char *name = json_string_value(json_object_get(m, "Name"));
        if (d && name && !strcmp(d, "/.sbx/run"))
            snprintf(out, n, "%s", name);
    }
}

/* ---- the tests --------------------------------------------------------------------- */

static void test_lifecycle(conn *c)
{
    char cid[80], ch[16], vol[100] = "";
    json_t *r = create(c, "rs-life", NULL);
    test_eq_str("runsc lifecycle: create answers running", res_str(r, "status"),
                "running");
    meta_str(r, "container_id", cid, sizeof(cid));
    meta_str(r, "channel", ch, sizeof(ch));
    json_decref(r);
    json_t *ins = dk_inspect(cid);
    test_eq_str(
        "runsc lifecycle: the container runs under runsc",
        json_string_value(json_object_get(json_object_get(ins, "HostConfig"), "Runtime")),
        "runsc");
    run_volume(ins, vol, sizeof(vol));
    json_decref(ins);
    test_eq_str("runsc channel: metadata.channel as the runtime's --host-uds allows", ch,
                want_channel);
    /* The second kernel: gVisor answers uname itself. */
    struct utsname u;
    uname(&u);
    r = exec(c, "rs-life", "uname -r");
    test_cond("runsc lifecycle: the sandbox sees a kernel other than the host's",
              res_of(r) && res_int(r, "exit_code") == 0 && res_str(r, "stdout")[0] &&
                  strncmp(res_str(r, "stdout"), u.release, strlen(u.release)) != 0);
    json_decref(r);
    r = cn_call_t(c, 120000, "sandbox.stop", json_pack("{s:s}", "id", "rs-life"));
    json_decref(r);
    r = get(c, "rs-life");
    test_eq_str("runsc lifecycle: stop", res_str(r, "status"), "stopped");
    json_decref(r);
    r = cn_call_t(c, 180000, "sandbox.start", json_pack("{s:s}", "id", "rs-life"));
    json_decref(r);
    r = get(c, "rs-life");
    meta_str(r, "channel", ch, sizeof(ch));
    test_eq_str("runsc lifecycle: start again", res_str(r, "status"), "running");
    json_decref(r);
    test_eq_str("runsc channel: the same channel after a restart of the container", ch,
                want_channel);
    test_cond("runsc lifecycle: exec after the restart",
              exec_is(c, "rs-life", "echo again", "again\n"));
    destroy(c, "rs-life");
    char p[200];
    snprintf(p, sizeof(p), "/containers/%s/json", cid);
    test_eq_int("runsc lifecycle: destroy removes the container",
                dk_engine("GET", p, NULL, NULL), 404);
    if (vol[0]) {
        snprintf(p, sizeof(p), "/volumes/%s", vol);
        test_eq_int("runsc lifecycle: and the agent's run volume with it",
                    dk_engine("GET", p, NULL, NULL), 404);
    } else
        test_cond("runsc lifecycle: the agent's run directory is a volume", 0);
}

static void test_exec(conn *c)
{
    json_decref(create(c, "rs-exec", NULL));
    test_cond("runsc exec: stdout", exec_is(c, "rs-exec", "echo hello", "hello\n"));
    json_t *r =
        cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:[s,s,s], s:{s:s}, s:s}", "sandbox", "rs-exec",
                            "command", "sh", "-c", "echo $A; pwd; echo err >&2; exit 3",
                            "env", "A", "argv-env", "cwd", "/tmp/new/dir"));
    test_cond("runsc exec: argv, env, cwd created, stderr, exit code",
              res_int(r, "exit_code") == 3 &&
                  !strcmp(res_str(r, "stdout"), "argv-env\n/tmp/new/dir\n") &&
                  !strcmp(res_str(r, "stderr"), "err\n"));
    json_decref(r);
    r = exec(c, "rs-exec", "/does/not/exist");
    test_eq_int("runsc exec: a command that does not exist: 127", res_int(r, "exit_code"),
                127);
    json_decref(r);
    /* Descriptors above stderr are close-on-exec by close_range up to INT_MAX
     * (gVisor refuses ~0u): ls sees its own three and its directory. */
    test_cond("runsc exec: no agent descriptor leaks into a command",
              exec_is(c, "rs-exec", "ls /proc/self/fd | tr '\\n' ' '", "0 1 2 3 "));
    destroy(c, "rs-exec");
}

static void test_stdin_kill(conn *c)
{
    json_decref(create(c, "rs-io", NULL));
    json_t *r = cn_call(c, "process.exec",
                        json_pack("{s:s, s:s, s:s}", "sandbox", "rs-io", "command", "cat",
                                  "stdin", "round\n"));
    test_eq_str("runsc stdin: exec with stdin through cat", res_str(r, "stdout"),
                "round\n");
    json_decref(r);
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "rs-io", "command", "cat"));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    json_array_clear(c->notes); /* pids are per sandbox: only this one's output */
    json_decref(cn_call(
        c, "process.write",
        json_pack("{s:s, s:I, s:s}", "sandbox", "rs-io", "pid", pid, "data", "abc\n")));
    json_decref(cn_call(c, "process.close_stdin",
                        json_pack("{s:s, s:I}", "sandbox", "rs-io", "pid", pid)));
    r = cn_call_t(c, 60000, "process.wait",
                  json_pack("{s:s, s:I}", "sandbox", "rs-io", "pid", pid));
    char out[64] = "";
    notes_output(c, (int)pid, "stdout", out, sizeof(out));
    test_cond("runsc stdin: spawn + write + close_stdin",
              res_int(r, "exit_code") == 0 && !strcmp(out, "abc\n"));

    json_decref(r);

    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "rs-io", "command",
                          "sleep 1001 & sleep 1002 & echo up; wait"));
    pid = res_int(r, "pid");
    json_decref(r);
    usleep(500000);
    json_decref(cn_call(
        c, "process.kill",
        json_pack("{s:s, s:I, s:s}", "sandbox", "rs-io", "pid", pid, "signal", "KILL")));
    r = cn_call_t(c, 60000, "process.wait",
                  json_pack("{s:s, s:I}", "sandbox", "rs-io", "pid", pid));
    test_cond("runsc kill: exit 137, killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);
    usleep(300000);
    test_cond(
        "runsc kill: the group is gone inside (ps)",
        exec_is(c, "rs-io", "ps -o args | grep -c '^sleep 100[12]' || true", "0\n"));
    destroy(c, "rs-io");
}

/* seq 1 N, checked line by line as it arrives. */
static void test_stream(conn *c)
{
    const long n = 1000000; /* 6.9 MB */
    json_decref(create(c, "rs-big", NULL));
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "seq 1 %ld", n);
    json_t *r = cn_call(c, "process.spawn",
                        json_pack("{s:s, s:s}", "sandbox", "rs-big", "command", cmd));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    long next = 1, got = 0;
    char line[32];
    size_t ll = 0;
    int bad = 0, exited = 0, code = -1;
    double until = now_ms() + 300000;
    while (!exited && now_ms() < until) {
        json_t *m = cn_read(c, 10000);
        if (!m) {
            if (c->closed)
                break;
            continue;
        }
        const char *meth = json_string_value(json_object_get(m, "method"));
        json_t *p = json_object_get(m, "params");
        if (meth && json_integer_value(json_object_get(p, "pid")) == pid) {
            if (!strcmp(meth, "process.output")) {
                const char *d = json_string_value(json_object_get(p, "data"));
                size_t k = json_string_length(json_object_get(p, "data"));
                for (size_t i = 0; d && i < k && !bad; i++) {
                    got++;
                    if (d[i] != '\n') {
                        if (ll + 1 >= sizeof(line))
                            bad = 1;
                        else
                            line[ll++] = d[i];
                        continue;
                    }
                    line[ll] = '\0';
                    if (atol(line) != next)
                        bad = 1;
                    next++;
                    ll = 0;
                }
            } else if (!strcmp(meth, "process.exit")) {
                exited = 1;
                code = (int)json_integer_value(json_object_get(p, "exit_code"));
            }
        }
        json_decref(m);
    }
    test_cond("runsc stream: 1e6 lines, every byte in order", !bad && next == n + 1);
    test_cond("runsc stream: then the exit, 0", exited && code == 0);
    destroy(c, "rs-big");
}

static void test_snapshot(conn *c)
{
    json_decref(create(c, "rs-snap", NULL));
    exec_is(c, "rs-snap", "echo kept > /workspace/kept.txt", "");
    json_t *r =
        cn_call_t(c, 180000, "sandbox.snapshot", json_pack("{s:s}", "id", "rs-snap"));
    char snap[80];
    snprintf(snap, sizeof(snap), "%s", res_str(r, "snapshot"));
    json_decref(r);
    test_cond("runsc snapshot: a snapshot of a runsc sandbox", snap[0] != '\0');
    destroy(c, "rs-snap");
    r = create(c, "rs-snap2", json_pack("{s:s}", "snapshot", snap));
    char cid[80];
    meta_str(r, "container_id", cid, sizeof(cid));
    test_eq_str("runsc snapshot: create from it", res_str(r, "status"), "running");
    json_decref(r);
    json_t *ins = dk_inspect(cid);
    test_eq_str(
        "runsc snapshot: the new sandbox runs under runsc too",
        json_string_value(json_object_get(json_object_get(ins, "HostConfig"), "Runtime")),
        "runsc");
    json_decref(ins);
    test_cond("runsc snapshot: the file written under gVisor is in it",
              exec_is(c, "rs-snap2", "cat /workspace/kept.txt", "kept\n"));
    destroy(c, "rs-snap2");
    r = cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    test_cond("runsc snapshot: delete",
              json_is_true(json_object_get(res_of(r), "deleted")));
    json_decref(r);
}

/* sbxd is killed and started again: the runsc sandbox is adopted, its agent
 * reached again on the same kind of channel. */
static void test_restart(conn **cp)
{
    json_decref(create(*cp, "rs-keep", NULL));
    exec_is(*cp, "rs-keep", "echo before", "before\n");
    cn_close(*cp);
    stop_sbxd(SIGKILL);
    *cp = start_sbxd();
    conn *c = *cp;
    json_t *r = NULL;
    for (int i = 0; c && i < 100; i++) {
        json_decref(r);
        r = get(c, "rs-keep");
        if (!strcmp(res_str(r, "status"), "running") &&
            json_is_true(
                json_object_get(json_object_get(res_of(r), "metadata"), "agent_ready")))
            break;
        usleep(100000);
    }
    char ch[16];
    meta_str(r, "channel", ch, sizeof(ch));
    test_eq_str("runsc restart: adopted after sbxd was killed", res_str(r, "status"),
                "running");
    json_decref(r);
    test_eq_str("runsc restart: on the same channel", ch, want_channel);
    test_cond("runsc restart: exec in the adopted sandbox",
              c && exec_is(c, "rs-keep", "echo after", "after\n"));
    if (c)
        destroy(c, "rs-keep");
}

static const char *const names[] = {
    "runsc lifecycle", "runsc channel", "runsc exec",     "runsc stdin",
    "runsc kill",      "runsc stream",  "runsc snapshot", "runsc restart",
};

int main(int argc, char **argv)
{
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &docker_host);
    if (st)
        return st;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    dk_engine_timeout(120); /* runsc containers start slower */
    const char *why = runsc_usable();
    if (why) {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            test_skip(names[i], why);
        curl_global_cleanup();
        return test_report();
    }
    printf("    runsc: expecting the %s channel (from the runtime's runtimeArgs)\n",
           want_channel);
    mkdir(tmpdir, 0755);
    snprintf(sock, sizeof(sock), "%.90s/rs.sock", tmpdir);
    snprintf(cfg, sizeof(cfg), "%s/runsc.yaml", tmpdir);
    snprintf(sbxd_log, sizeof(sbxd_log), "%s/sbxd-runsc.log", tmpdir);
    write_config();
    conn *c = start_sbxd();
    if (!c) {
        printf("sbxd did not start (log %s)\n0 passed, 1 failed\n", sbxd_log);
        return 1;
    }
    double t0 = now_ms();
#define STEP(x)                                                                          \
    do {                                                                                 \
        double _t = now_ms();                                                            \
        if (c)                                                                           \
            x;                                                                           \
        printf("    (%s: %.1f s)\n", #x, (now_ms() - _t) / 1000);                        \
    } while (0)
    STEP(test_lifecycle(c));
    STEP(test_exec(c));
    STEP(test_stdin_kill(c));
    STEP(test_stream(c));
    STEP(test_snapshot(c));
    STEP(test_restart(&c));
    printf("    total %.1f s\n", (now_ms() - t0) / 1000);
    cn_close(c);
    stop_sbxd(SIGTERM);
    curl_global_cleanup();
    return test_report();
}
