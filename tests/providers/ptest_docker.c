/*
 * ptest_docker.c - the Docker provider against a real engine: what the daemon
 * reports, sandbox options, the lifecycle, lifetimes, snapshots that last.
 *
 *   ptest_docker SBXD BUILD_DIR TMPDIR
 *
 * Environment (from tests/providers/docker.sh):
 *   DOCKER_HOST            unix:///path of the engine (required)
 *   DOCKER_TLS_HOST, DOCKER_TLS_CA, DOCKER_TLS_CERT, DOCKER_TLS_KEY
 *                          the same engine over TCP + TLS (optional)
 *   SBX_DOCKERD_PRIVATE=1  the engine is ours: it may be stopped (last test)
 *   SBX_STREAM_MB          size of the slow-reader stream test (default 256)
 *
 * It starts its own sbxd instances (so it can SIGKILL and restart them),
 * talks JSON-RPC with tests/itest.h, and checks what sbxd did by asking the
 * engine directly (container inspect, top, kill) with libcurl.
 *
 * The rest of the suite is in parts by feature, each its own binary sharing
 * dk_suite.h: ptest_docker_proc.c, ptest_docker_policy.c,
 * ptest_docker_restart.c, ptest_docker_stream.c, ptest_docker_engine.c
 * (docker.sh runs them all).
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

/* ---- tests
 * ----------------------------------------------------------------------------- */

static void test_info(conn *c)
{
    json_t *r = cn_call(c, "daemon.info", NULL);
    json_t *dk = pt_provider_of(r, "docker");
    test_cond("info: docker is available",
              dk && json_is_true(json_object_get(dk, "available")));
    const char *av =
        json_string_value(json_object_get(json_object_get(dk, "info"), "api_version"));
    test_cond("info: API version negotiated (config asks 1.43, engine may be older)",
              av && strncmp(av, "1.", 2) == 0 && atoi(av + 2) >= 41 &&
                  atoi(av + 2) <= 43);
    test_cond(
        "info: a local engine offers the direct channel",
        json_is_true(json_object_get(json_object_get(dk, "info"), "direct_channel")));
    json_decref(r);
}

/* What the engine shows of the container options_every made with every option. */
static void options_inspected(json_t *in)
{
    json_t *hc = json_object_get(in, "HostConfig"), *cf = json_object_get(in, "Config");
    test_cond("options: memory 200m -> HostConfig.Memory",
              json_integer_value(json_object_get(hc, "Memory")) == 200 * 1024 * 1024);
    test_cond("options: memory_swap -> MemorySwap",
              json_integer_value(json_object_get(hc, "MemorySwap")) == 300 * 1024 * 1024);
    test_cond("options: cpu_shares/quota/period",
              json_integer_value(json_object_get(hc, "CpuShares")) == 512 &&
                  json_integer_value(json_object_get(hc, "CpuQuota")) == 50000 &&
                  json_integer_value(json_object_get(hc, "CpuPeriod")) == 100000);
    test_eq_int("options: pids_limit",
                json_integer_value(json_object_get(hc, "PidsLimit")), 64);
    test_cond("options: readonly_rootfs",
              json_is_true(json_object_get(hc, "ReadonlyRootfs")));
    test_cond("options: cap_drop / cap_add",
              json_array_size(json_object_get(hc, "CapDrop")) == 1 &&
                  json_array_size(json_object_get(hc, "CapAdd")) == 2);
    test_cond(
        "options: security_opt",
        strcmp(json_string_value(json_array_get(json_object_get(hc, "SecurityOpt"), 0))
                   ?: "",
               "no-new-privileges") == 0);
    json_t *ul = json_array_get(json_object_get(hc, "Ulimits"), 0);
    test_cond("options: ulimits {nofile: {soft, hard}}",
              strcmp(json_string_value(json_object_get(ul, "Name")) ?: "", "nofile") ==
                      0 &&
                  json_integer_value(json_object_get(ul, "Soft")) == 100 &&
                  json_integer_value(json_object_get(ul, "Hard")) == 200);
    test_cond("options: tmpfs",
              json_object_get(json_object_get(hc, "Tmpfs"), "/scratch") != NULL);
    test_eq_int("options: volumes -> Binds (beside the agent's read-only bind)",
                json_array_size(json_object_get(hc, "Binds")), 2);
    test_cond(
        "options: network none",
        strcmp(json_string_value(json_object_get(hc, "NetworkMode")) ?: "", "none") == 0);
    test_cond("options: privileged false",
              json_is_false(json_object_get(hc, "Privileged")));
    test_cond(
        "options: working_dir, user",
        strcmp(json_string_value(json_object_get(cf, "WorkingDir")) ?: "", "/work/dir") ==
                0 &&
            strcmp(json_string_value(json_object_get(cf, "User")) ?: "", "0:0") == 0);
    json_t *lb = json_object_get(cf, "Labels");
    test_cond(
        "options: labels, plus sbxd.id and sbxd.owner and config labels",
        json_object_get(lb, "test.label") && json_object_get(lb, "org.sbxd.managed") &&
            strcmp(json_string_value(json_object_get(lb, "sbxd.id")) ?: "", "opts1") ==
                0 &&
            strcmp(json_string_value(json_object_get(lb, "sbxd.owner")) ?: "", "0") == 0);
    const char *nm = json_string_value(json_object_get(in, "Name"));
    test_cond("options: name sanitised", nm && strcmp(nm, "/my_sandbox_") == 0);
    test_cond("options: OpenStdin, not StdinOnce, no Tty",
              json_is_true(json_object_get(cf, "OpenStdin")) &&
                  json_is_false(json_object_get(cf, "StdinOnce")) &&
                  json_is_false(json_object_get(cf, "Tty")));
}

static void options_every(conn *c)
{
    char vol[600];
    snprintf(vol, sizeof(vol), "%s/vol", tmpdir);
    mkdir(vol, 0755);
    char f[700];
    snprintf(f, sizeof(f), "%s/host.txt", vol);
    FILE *fp = fopen(f, "w");
    fputs("from the host\n", fp);
    fclose(fp);
    char bind[700];
    snprintf(bind, sizeof(bind), "%s:/data:ro", vol);
    json_t *opts = json_pack(
        "{s:s, s:s, s:i, s:i, s:i, s:i, s:b, s:[s], s:[s,s], s:[s], s:{s:{s:i, s:i}}, "
        "s:{s:s}, s:s, s:s, s:{s:s}, s:{s:s}, s:[s], s:s, s:b, s:s}",
        "memory", "200m", "memory_swap", "300m", "cpu_shares", 512, "cpu_quota", 50000,
        "cpu_period", 100000, "pids_limit", 64, "readonly_rootfs", 1, "cap_drop", "ALL",
        "cap_add", "CHOWN", "KILL", "security_opt", "no-new-privileges", "ulimits",
        "nofile", "soft", 100, "hard", 200, "tmpfs", "/scratch", "rw,size=8m",
        "working_dir", "/work/dir", "user", "0:0", "labels", "test.label", "yes", "env",
        "OPT_ENV", "from-options", "volumes", bind, "network", "none", "privileged", 0,
        "name", "my sandbox!");
    json_t *r =
        create(c, "opts1",
               json_pack("{s:o, s:{s:s}}", "options", opts, "env", "TOP_ENV", "top"));
    test_cond("options: create with every option",
              res_of(r) && strcmp(res_str(r, "status"), "running") == 0);
    if (!res_of(r)) {
        char *s = json_dumps(r, 0);
        printf("      %.800s\n", s);
        free(s);
    }
    json_t *in = dk_inspect(cid_of(r));
    options_inspected(in);
    json_decref(in);
    test_cond("options: env, volume, cwd, ulimit and read-only root inside",
              exec_ok(c, "opts1",
                      "echo $OPT_ENV $TOP_ENV; cat /data/host.txt; pwd; ulimit -n; "
                      "touch /x 2>/dev/null || echo ro; touch /scratch/y && echo tmpfs",
                      "from-options top\nfrom the host\n/work/dir\n100\nro\ntmpfs\n"));
    json_decref(r);
    destroy(c, "opts1");
}

static void options_privileged(conn *c)
{
    json_t *r, *in;
    /* privileged true maps too (root may loosen); some engines (in VMs
     * without every capability) cannot start privileged containers: then
     * the engine's own message must come back. */
    r = create(c, "priv1", json_pack("{s:{s:b}}", "options", "privileged", 1));
    in = res_of(r) ? dk_inspect(cid_of(r)) : NULL;
    const char *em =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    if (!res_of(r) && err_code(r) == -32006 && em && strstr(em, "start container"))
        printf("      (this engine cannot start privileged containers: %.120s)\n", em);
    test_cond(
        "options: privileged true -> HostConfig.Privileged (or the engine's refusal)",
        json_is_true(json_object_get(json_object_get(in, "HostConfig"), "Privileged")) ||
            (err_code(r) == -32006 && em && strstr(em, "start container")));
    json_decref(in);
    json_decref(r);
    destroy(c, "priv1");
}

static void options_defaults(conn *c)
{
    json_t *r, *in, *hc;
    /* config defaults apply when the request says nothing */
    r = create(c, "dflt1", NULL);
    in = dk_inspect(cid_of(r));
    hc = json_object_get(in, "HostConfig");
    test_cond(
        "defaults: config hardening applied (memory, pids, cap_drop, tmpfs, ulimits)",
        json_integer_value(json_object_get(hc, "Memory")) == 512 * 1024 * 1024 &&
            json_integer_value(json_object_get(hc, "PidsLimit")) == 256 &&
            json_array_size(json_object_get(hc, "CapDrop")) == 1 &&
            json_object_get(json_object_get(hc, "Tmpfs"), "/tmp") &&
            json_array_size(json_object_get(hc, "Ulimits")) == 1);
    test_cond(
        "defaults: name sbx-<id>, working dir /workspace",
        strcmp(json_string_value(json_object_get(in, "Name")) ?: "", "/sbx-dflt1") == 0 &&
            exec_ok(c, "dflt1", "pwd", "/workspace\n"));
    json_decref(in);
    json_decref(r);
    destroy(c, "dflt1");
}

static void options_command(conn *c)
{
    json_t *r, *in;
    /* options.command: the sandbox's main process, a child of the agent */
    r = create(c, "cmd1",
               json_pack("{s:{s:[s,s]}}", "options", "command", "sleep", "100042"));
    char ccid[100];
    snprintf(ccid, sizeof(ccid), "%s", cid_of(r));
    in = dk_inspect(ccid);
    json_t *ep = json_object_get(json_object_get(in, "Config"), "Entrypoint");
    test_cond("options.command: sbx-init -- CMD, running beside the agent",
              json_array_size(ep) == 4 &&
                  strcmp(json_string_value(json_array_get(ep, 1)) ?: "", "--") == 0 &&
                  top_has(ccid, "sleep 100042") == 1 &&
                  exec_ok(c, "cmd1", "echo ok", "ok\n"));
    json_decref(in);
    json_decref(r);
    destroy(c, "cmd1");
}

static void options_refused(conn *c)
{
    json_t *r;
    r = create(c, "bad1",
               json_pack("{s:{s:s}}", "options", "volumes", "/nonexistent/sbx:/x"));
    test_cond("options: a missing host path is a clear error (-32602)",
              err_code(r) == -32602 && strstr(json_string_value(json_object_get(
                                                  json_object_get(r, "error"), "message"))
                                                  ?: "",
                                              "/nonexistent/sbx"));
    json_decref(r);
    r = create(c, "bad2", json_pack("{s:{s:s}}", "options", "memroy", "1g"));
    test_eq_int("options: an unknown option is -32602", err_code(r), -32602);
    json_decref(r);
    r = create(c, "bad3", json_pack("{s:s}", "image", "sbx-test/missing:nope"));
    test_cond("image: a missing image is pulled (progress) and the failure is -32006",
              err_code(r) == -32006 && has_note(c, "sandbox.progress", "stage", "pull"));
    json_decref(r);
    json_t *l = cn_call(c, "sandbox.list", NULL);
    int leaked = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(res_of(l), "sandboxes"), i, s) {
        const char *id = json_string_value(json_object_get(s, "id"));
        if (id && strncmp(id, "bad", 3) == 0)
            leaked = 1;
    }
    test_cond("a failed create leaves no sandbox", !leaked);
    json_decref(l);
}

static void test_options(conn *c)
{
    options_every(c);
    options_privileged(c);
    options_defaults(c);
    options_command(c);
    options_refused(c);
}

static void test_lifecycle(conn *c)
{
    json_t *r = create(c, "life1", NULL);
    char cid[100];
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    exec_ok(c, "life1", "echo kept > /workspace/f.txt", NULL);

    r = cn_call_t(c, 60000, "sandbox.stop", json_pack("{s:s}", "id", "life1"));
    json_t *in = dk_inspect(cid);
    test_cond(
        "stop: status stopped, container stopped (kept)",
        strcmp(res_str(r, "status"), "stopped") == 0 &&
            json_is_false(json_object_get(json_object_get(in, "State"), "Running")));
    json_decref(in);
    json_decref(r);
    r = exec(c, "life1", "true");
    test_eq_int("stop: exec in a stopped sandbox is -32001", err_code(r), -32001);
    json_decref(r);
    r = cn_call_t(c, 60000, "sandbox.start", json_pack("{s:s}", "id", "life1"));
    test_eq_str("start: running again", res_str(r, "status"), "running");
    json_decref(r);
    test_cond("start: the file system was kept",
              exec_ok(c, "life1", "cat /workspace/f.txt", "kept\n"));

    r = cn_call_t(c, 120000, "sandbox.snapshot", json_pack("{s:s}", "id", "life1"));
    const char *snap = res_str(r, "snapshot");
    char snapid[100];
    snprintf(snapid, sizeof(snapid), "%s", snap);
    test_cond("snapshot: committed", snapid[0] != '\0');
    json_decref(r);
    r = create(c, "life2", json_pack("{s:s}", "snapshot", snapid));
    test_eq_str("snapshot: create from it", res_str(r, "status"), "running");
    json_decref(r);
    test_cond("snapshot: the file is there",
              exec_ok(c, "life2", "cat /workspace/f.txt", "kept\n"));

    r = cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "life1"));
    test_eq_str("destroy: destroyed", res_str(r, "status"), "destroyed");
    json_decref(r);
    char p[256];
    snprintf(p, sizeof(p), "/containers/%s/json", cid);
    test_cond("destroy: the container is gone", dk_engine("GET", p, NULL, NULL) == 404);
    destroy(c, "life2");
    /* A user snapshot outlives its sandbox by design: delete it, or every run
     * of the suite leaves an image on a shared engine. */
    r = cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snapid));
    test_cond("snapshot.delete: the test's snapshot is deleted",
              json_is_true(json_object_get(json_object_get(r, "result"), "deleted")));
    json_decref(r);
}

/* ---- issue 10: lifetime, env null, reconnect warnings, snapshots that last -------- */

static int warnings_mention(json_t *resp, const char *what)
{
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(res_of(resp), "warnings"), i, w)
        if (json_string_value(w) && strstr(json_string_value(w), what))
            return 1;
    return 0;
}

static void test_lifetime_env(conn *c)
{
    /* No timeout_ms: no lifetime, no expires_at. */
    json_t *r = cn_call_t(c, 120000, "sandbox.create",
                          json_pack("{s:s, s:s, s:{s:s, s:s}, s:i}", "id", "life1",
                                    "provider", "docker", "env", "A", "create", "B",
                                    "keep", "command_timeout_ms", 1500));
    test_cond(
        "lifetime: docker without timeout_ms has none (timeout_ms 0, no expires_at)",
        res_of(r) && res_int(r, "timeout_ms") == 0 &&
            !json_object_get(res_of(r), "expires_at"));
    json_decref(r);
    r = exec_t(c, "life1", "sleep 5", 10000);
    test_cond("lifetime: command_timeout_ms is the commands' default timeout (124)",
              res_int(r, "exit_code") == 124 &&
                  json_is_true(json_object_get(res_of(r), "timed_out")));
    json_decref(r);
    r = cn_call_t(c, 30000, "process.exec",
                  json_pack("{s:s, s:s, s:{s:n}}", "sandbox", "life1", "command",
                            "echo ${A-unset} $B", "env", "A"));
    test_eq_str("env null: exec env {A: null} removes a create-time A",
                res_str(r, "stdout"), "unset keep\n");
    json_decref(r);
    test_cond("env null: the next exec sees A again",
              exec_ok(c, "life1", "echo $A", "create\n"));
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:n}}", "id", "life1", "env", "A"));
    test_cond("env null: set_env {A: null} answers the env without A",
              res_of(r) && !json_object_get(json_object_get(res_of(r), "env"), "A"));
    json_decref(r);
    test_cond("env null: after set_env {A: null} A is unset in commands",
              exec_ok(c, "life1", "echo ${A-unset} $B", "unset keep\n"));
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:s}}", "id", "life1", "env", "A", "again"));
    json_decref(r);
    test_cond("env null: set_env sets it again",
              exec_ok(c, "life1", "echo $A", "again\n"));
    r = cn_call_t(c, 30000, "process.exec",
                  json_pack("{s:s, s:s, s:{s:n, s:n}}", "sandbox", "life1", "command",
                            "echo ${A-unset} ${B-unset}", "env", "A", "B"));
    test_eq_str(
        "env null: exec env null removes a set_env value and a create value at once",
        res_str(r, "stdout"), "unset unset\n");
    json_decref(r);

    /* Reconnect honesty: the same id with other options. */
    r = cn_call_t(c, 120000, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "id", "life1", "provider",
                            "docker", "options", "memory", "1g", "env", "NEW", "1"));
    test_cond("reconnect: reconnected with warnings for options.memory and env.NEW",
              json_is_true(json_object_get(res_of(r), "reconnected")) &&
                  warnings_mention(r, "options.memory") &&
                  warnings_mention(r, "env.NEW"));
    json_decref(r);
    r = cn_call_t(c, 120000, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "life1", "provider", "docker"));
    test_cond("reconnect: nothing asked, no warnings",
              json_is_true(json_object_get(res_of(r), "reconnected")) &&
                  !json_object_get(res_of(r), "warnings"));
    json_decref(r);
    destroy(c, "life1");
}

static int snapshot_listed(conn *c, const char *snap)
{
    json_t *r =
        cn_call_t(c, 60000, "snapshot.list", json_pack("{s:s}", "provider", "docker"));
    size_t i;
    json_t *s;
    int found = 0;
    json_array_foreach(json_object_get(res_of(r), "snapshots"), i, s)
        found |= strcmp(json_string_value(json_object_get(s, "snapshot")), snap) == 0;
    json_decref(r);
    return found;
}

static void test_snapshots_last(void)
{
    pid_t pid = 0;
    conn *c = start_other("snaps", docker_host, NULL, &pid);
    if (!c) {
        test_cond("snapshots: the second sbxd answers", 0);
        stop_sbxd(pid, SIGKILL);
        return;
    }
    dk_docker_up(c, 5000);
    json_decref(create(c, "snapsrc", NULL));
    json_decref(cn_call_t(c, 120000, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "keep1", "provider", "docker")));
    exec_ok(c, "snapsrc", "echo kept > /workspace/kept.txt", NULL);
    json_t *r =
        cn_call_t(c, 120000, "sandbox.snapshot", json_pack("{s:s}", "id", "snapsrc"));
    char snap[64];
    snprintf(snap, sizeof(snap), "%s", res_str(r, "snapshot"));
    json_decref(r);
    destroy(c, "snapsrc");
    test_cond("snapshots: snapshot.list shows the new snapshot",
              snap[0] && snapshot_listed(c, snap));
    /* sbxd restarts: the registry comes back from the image labels. */
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
    c = start_other("snaps", docker_host, NULL, &pid);
    for (int i = 0; c && i < 50 && !snapshot_listed(c, snap); i++)
        usleep(100000);
    test_cond("snapshots: listed again after an sbxd restart",
              c && snapshot_listed(c, snap));
    r = c ? cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "keep1")) : NULL;
    test_cond(
        "lifetime: a docker sandbox without timeout_ms is adopted after an sbxd restart "
        "still without one",
        r && !strcmp(res_str(r, "status"), "running") && res_int(r, "timeout_ms") == 0 &&
            !json_object_get(res_of(r), "expires_at"));
    json_decref(r);
    if (c)
        destroy(c, "keep1");
    r = create(c, "snapuse", json_pack("{s:s}", "snapshot", snap));
    test_eq_str("snapshots: create --snapshot works after the restart",
                res_str(r, "status"), "running");
    json_t *img = json_object_get(json_object_get(res_of(r), "metadata"), "image_id");
    char image[128];
    snprintf(image, sizeof(image), "%s",
             json_string_value(img) ? json_string_value(img) : "");
    json_decref(r);
    test_cond("snapshots: its files are there",
              exec_ok(c, "snapuse", "cat /workspace/kept.txt", "kept\n"));
    r = cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    test_eq_int("snapshots: delete while a sandbox uses it is -32001", err_code(r),
                -32001);
    json_decref(r);
    destroy(c, "snapuse");
    r = cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    test_cond("snapshots: delete", json_is_true(json_object_get(res_of(r), "deleted")));
    json_decref(r);
    char path[256];
    snprintf(path, sizeof(path), "/images/%s/json", image);
    test_cond("snapshots: the image is removed from the engine",
              image[0] && dk_engine("GET", path, NULL, NULL) == 404);
    test_cond("snapshots: no longer listed", !snapshot_listed(c, snap));
    r = cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    test_eq_int("snapshots: deleting it again is -32000", err_code(r), -32000);
    json_decref(r);
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
}

int main(int argc, char **argv)
{
    conn *c;
    int st = dk_suite_start(argc, argv, "main", &c);
    if (st)
        return st;
    DK_STEP(test_info(c));
    DK_STEP(test_options(c));
    DK_STEP(test_lifecycle(c));
    DK_STEP(test_lifetime_env(c));
    DK_STEP(test_snapshots_last());
    dk_suite_end(c);
    return test_report();
}
