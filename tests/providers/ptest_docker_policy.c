/*
 * ptest_docker_policy.c - the policy of Docker sandboxes proven by a
 * second uid, the agent mounted into images, warm pools.
 *
 *   ptest_docker_policy SBXD BUILD_DIR TMPDIR
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

/* ---- issue 10: the policy, proven by a second uid ---------------------------------- */

/* A create as uid with options (JSON text) that must be refused by the policy. */
static int refused(uid_t uid, const char *sock, const char *id, const char *opts_json,
                   const char *want_reason)
{
    json_t *o = json_loads(opts_json, 0, NULL);
    if (!o) {
        printf("      bad test options: %s\n", opts_json);
        return 0;
    }
    json_t *r = pt_as_uid(
        uid, uid, sock, "sandbox.create",
        json_pack("{s:s, s:s, s:o}", "id", id, "provider", "docker", "options", o),
        60000);
    json_t *data = json_object_get(json_object_get(r, "error"), "data");
    const char *reason = json_string_value(json_object_get(data, "reason"));
    int ok = err_code(r) == -32003 &&
             (!want_reason || (reason && !strcmp(reason, want_reason)));
    if (!ok) {
        char *t = json_dumps(r, JSON_COMPACT);
        printf("      %s -> %.400s\n", opts_json, t ? t : "(no answer)");
        free(t);
    }
    if (res_of(r)) /* it must not exist: clean up what slipped through */
        json_decref(pt_as_uid(uid, uid, sock, "sandbox.destroy",
                              json_pack("{s:s}", "id", id), 60000));
    json_decref(r);
    return ok;
}

/* What the steps of test_policy_uid share: A (nobody, in group nogroup, whom a
 * rule grants more) and B (no rule), the sbxd with that policy, the granted
 * project dir and network, and A's snapshot. */
static const uid_t A = 65534, B = 65533;
struct pol {
    char proj[512], net[64], sock[200];
    int have_net, have_bridge;
    conn *c;
    pid_t pid;
    char snap[64], image[128], tag[256];
};

/* The sbxd with the policy's rule for group nogroup; the second uid is itself. */
static void policy_start(struct pol *p)
{
    char extra[1500];
    const char *proj = p->proj, *net = p->net;
    json_t *r;
    chmod(tmpdir, 0755);
    snprintf(p->proj, sizeof(p->proj), "%s/proj", tmpdir);
    mkdir(proj, 0777);
    chmod(proj, 0777);
    snprintf(p->net, sizeof(p->net), "sbxnet-%d", (int)getpid());
    char body[200];
    snprintf(body, sizeof(body), "{\"Name\":\"%s\",\"Driver\":\"bridge\"}", net);
    p->have_net = dk_engine("POST", "/networks/create", body, NULL) == 201;
    p->have_bridge = dk_engine("GET", "/networks/bridge", NULL, NULL) == 200;
    snprintf(extra, sizeof(extra),
             "    cpu_quota: 100000\n"
             "    policy:\n"
             "      rules:\n"
             "        - groups: [nogroup]\n"
             "          network: [bridge, %s]\n"
             "          volumes: [\"%s:rw\"]\n"
             "          memory: 1g\n"
             "          pids_limit: 512\n",
             net, proj);
    p->c = start_other("policy", docker_host, extra, &p->pid);
    snprintf(p->sock, sizeof(p->sock), "%.80s/policy.sock", tmpdir);
    dk_docker_up(p->c, 5000);
    r = pt_as_uid(A, A, p->sock, "daemon.info", NULL, 10000);
    test_cond("policy: the second uid is served as itself (uid 65534, not admin)",
              res_int(r, "uid") == (json_int_t)A &&
                  !json_is_true(json_object_get(res_of(r), "admin")));
    json_decref(r);
}

/* Hole 1: additive options that loosen, refused or held to the ceilings. */
static void policy_loosening(struct pol *p)
{
    const char *proj = p->proj, *net = p->net, *sock = p->sock;
    test_cond(
        "policy: security_opt seccomp=unconfined refused",
        refused(A, sock, "pd1",
                "{\"security_opt\": [\"no-new-privileges\", \"seccomp=unconfined\"]}",
                "denied"));
    test_cond(
        "policy: security_opt apparmor=unconfined refused",
        refused(A, sock, "pd2",
                "{\"security_opt\": [\"no-new-privileges\", \"apparmor=unconfined\"]}",
                "denied"));
    test_cond("policy: security_opt label=disable refused",
              refused(A, sock, "pd3",
                      "{\"security_opt\": [\"no-new-privileges\", \"label=disable\"]}",
                      "denied"));
    test_cond("policy: pids_limit -1 refused (ceiling)",
              refused(A, sock, "pd4", "{\"pids_limit\": -1}", "ceiling"));
    test_cond("policy: memory 0 refused (ceiling)",
              refused(A, sock, "pd5", "{\"memory\": 0}", "ceiling"));
    test_cond("policy: memory_swap -1 refused (ceiling)",
              refused(A, sock, "pd6", "{\"memory_swap\": -1}", "ceiling"));
    test_cond("policy: cpu_quota -1 refused (ceiling)",
              refused(A, sock, "pd7", "{\"cpu_quota\": -1}", "ceiling"));
    test_cond("policy: tmpfs rw,exec,suid,size=100g refused",
              refused(A, sock, "pd8",
                      "{\"tmpfs\": {\"/tmp\": \"rw,exec,suid,size=100g\"}}", "denied"));
    test_cond(
        "policy: tmpfs size=100g refused (ceiling)",
        refused(A, sock, "pd9", "{\"tmpfs\": {\"/tmp\": \"rw,size=100g\"}}", "ceiling"));
    test_cond("policy: memory 2g above the rule's 1g refused (ceiling)",
              refused(A, sock, "pd10", "{\"memory\": \"2g\"}", "ceiling"));
    test_cond("policy: memory 1g refused for a uid with no rule (ceiling 512m)",
              refused(B, sock, "pd11", "{\"memory\": \"1g\"}", "ceiling"));
    test_cond("policy: privileged refused",
              refused(A, sock, "pd12", "{\"privileged\": true}", "denied"));
    test_cond("policy: network host refused",
              refused(A, sock, "pd13", "{\"network\": \"host\"}", "denied"));
    test_cond("policy: cap_add SYS_ADMIN refused",
              refused(A, sock, "pd14", "{\"cap_add\": [\"SYS_ADMIN\"]}", "denied"));
    char o[700];
    snprintf(o, sizeof(o), "{\"volumes\": [\"%s:/h:ro\"]}", tmpdir);
    test_cond("policy: a bind mount outside the granted prefix refused",
              refused(A, sock, "pd15", o, "denied"));
    snprintf(o, sizeof(o), "{\"volumes\": [\"%s:/w\"]}", proj);
    test_cond("policy: the granted bind mount refused to a uid with no rule",
              refused(B, sock, "pd16", o, "denied"));
    snprintf(o, sizeof(o), "{\"network\": \"%s\"}", net);
    test_cond("policy: the named network refused to a uid with no rule",
              refused(B, sock, "pd17", o, "denied"));
}

/* Allowed by the rule: the project dir read-write, memory and pids up to the
 * ceilings. */
static void policy_granted(struct pol *p)
{
    const char *proj = p->proj, *sock = p->sock;
    char o[700];
    json_t *r;
    snprintf(
        o, sizeof(o),
        "{\"volumes\": [\"%s:/project\"], \"memory\": \"1g\", \"memory_swap\": \"1g\", \"pids_limit\": 512}",
        proj);
    json_t *opts = json_loads(o, 0, NULL);
    r = pt_as_uid(
        A, A, sock, "sandbox.create",
        json_pack("{s:s, s:s, s:o}", "id", "pa", "provider", "docker", "options", opts),
        120000);
    test_eq_str("policy: the granted bind mount, memory 1g and pids 512 are allowed",
                res_str(r, "status"), "running");
    json_decref(r);
    r = pt_as_uid(
        A, A, sock, "process.exec",
        json_pack(
            "{s:s, s:s}", "sandbox", "pa", "command",
            "echo hi > /project/from-sandbox && echo secret > /workspace/secret && "
            "grep Seccomp: /proc/self/status | tr -d '\\t ' && cat "
            "/sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; "
            "unshare -U -n true 2>/dev/null && echo unshared || echo no-unshare"),
        30000);
    char hostfile[600];
    snprintf(hostfile, sizeof(hostfile), "%s/from-sandbox", proj);
    struct stat st;
    test_cond("policy: the sandbox wrote into the project dir on the host",
              stat(hostfile, &st) == 0);
    test_eq_str(
        "policy: inside, seccomp is on, pids.max is 512 and unshare(USER|NET) fails",
        res_str(r, "stdout"), "Seccomp:2\n512\nno-unshare\n");
    if (strcmp(res_str(r, "stdout"), "Seccomp:2\n512\nno-unshare\n") != 0)
        printf("      stdout: %s\n", res_str(r, "stdout"));
    json_decref(r);
}

/* Hole 2: another user's snapshot image by any name. */
static void policy_snapshot_owner(struct pol *p)
{
    const char *snap = p->snap, *image = p->image, *tag = p->tag, *sock = p->sock;
    json_t *r;
    r = pt_as_uid(A, A, sock, "sandbox.snapshot", json_pack("{s:s}", "id", "pa"), 120000);
    snprintf(p->snap, sizeof(p->snap), "%s", res_str(r, "snapshot"));
    json_decref(r);
    json_t *list = NULL;
    char path[300];
    snprintf(
        path, sizeof(path),
        "/images/json?filters=%%7B%%22label%%22%%3A%%5B%%22sbxd.snapshot%%3D%s%%22%%5D%%7D",
        snap);
    if (dk_engine("GET", path, NULL, &list) == 200 && json_array_size(list) == 1) {
        json_t *im = json_array_get(list, 0);
        snprintf(p->image, sizeof(p->image), "%s",
                 json_string_value(json_object_get(im, "Id")));
        snprintf(p->tag, sizeof(p->tag), "%s",
                 json_string_value(json_array_get(json_object_get(im, "RepoTags"), 0)));
    }
    json_decref(list);
    test_cond("policy: the snapshot image carries its owner", image[0] && tag[0]);
    r = pt_as_uid(
        B, B, sock, "sandbox.create",
        json_pack("{s:s, s:s, s:s}", "id", "pb1", "provider", "docker", "snapshot", snap),
        60000);
    test_eq_int(
        "policy: another uid cannot create from the snapshot id (-32602 no such snapshot)",
        err_code(r), -32602);
    json_decref(r);
    r = pt_as_uid(
        B, B, sock, "sandbox.create",
        json_pack("{s:s, s:s, s:s}", "id", "pb2", "provider", "docker", "image", tag),
        60000);
    test_eq_int("policy: another uid cannot use the snapshot image by its tag (-32003)",
                err_code(r), -32003);
    if (res_of(r))
        json_decref(pt_as_uid(B, B, sock, "sandbox.destroy",
                              json_pack("{s:s}", "id", "pb2"), 60000));
    json_decref(r);
    char ref[200];
    snprintf(ref, sizeof(ref), "{\"image\": \"sha256:%.1s\"}",
             image[0] ? image + 7 : "e");
    test_cond("policy: image sha256:<one hex digit> refused",
              refused(B, sock, "pb3", ref, "denied"));
    snprintf(ref, sizeof(ref), "{\"image\": \"%.12s\"}", image[0] ? image + 7 : "e");
    test_cond("policy: image by bare id prefix refused",
              refused(B, sock, "pb4", ref, "denied"));
    snprintf(ref, sizeof(ref), "{\"image\": \"%s\"}", image);
    test_cond("policy: image by full id refused", refused(B, sock, "pb5", ref, "denied"));
    r = pt_as_uid(A, A, sock, "snapshot.list", NULL, 60000);
    test_eq_int("policy: the owner lists its snapshot",
                json_array_size(json_object_get(res_of(r), "snapshots")), 1);
    json_decref(r);
    r = pt_as_uid(B, B, sock, "snapshot.list", NULL, 60000);
    test_cond("policy: another uid does not see it",
              res_of(r) && json_array_size(json_object_get(res_of(r), "snapshots")) == 0);
    json_decref(r);
    r = pt_as_uid(B, B, sock, "snapshot.delete", json_pack("{s:s}", "snapshot", snap),
                  60000);
    test_eq_int("policy: another uid cannot delete it (-32000)", err_code(r), -32000);
    json_decref(r);
}

/* Networks the engine can run, granted by a group rule. */
static void policy_networks(struct pol *p)
{
    const char *net = p->net, *sock = p->sock;
    int have_net = p->have_net, have_bridge = p->have_bridge;
    char o[700];
    json_t *r, *opts;
    if (have_net) {
        snprintf(o, sizeof(o), "{\"network\": \"%s\"}", net);
        opts = json_loads(o, 0, NULL);
        r = pt_as_uid(A, A, sock, "sandbox.create",
                      json_pack("{s:s, s:s, s:o}", "id", "pn", "provider", "docker",
                                "options", opts),
                      120000);
        test_eq_str("policy: a named network granted by a group rule",
                    res_str(r, "status"), "running");
        json_decref(r);
        r = pt_as_uid(A, A, sock, "process.exec",
                      json_pack("{s:s, s:s}", "sandbox", "pn", "command",
                                "ip -4 addr show eth0 | grep -c inet"),
                      30000);
        test_eq_str("policy: the sandbox has an address on it (eth0)",
                    res_str(r, "stdout"), "1\n");
        json_decref(r);
        json_decref(pt_as_uid(A, A, sock, "sandbox.destroy",
                              json_pack("{s:s}", "id", "pn"), 60000));
    } else {
        test_skip("policy: a named network granted by a group rule",
                  "the engine cannot create a network");
    }
    if (have_bridge) {
        r = pt_as_uid(A, A, sock, "sandbox.create",
                      json_pack("{s:s, s:s, s:{s:s}}", "id", "pbr", "provider", "docker",
                                "options", "network", "bridge"),
                      120000);
        test_eq_str("policy: network bridge granted by a group rule",
                    res_str(r, "status"), "running");
        json_decref(r);
        json_decref(pt_as_uid(A, A, sock, "sandbox.destroy",
                              json_pack("{s:s}", "id", "pbr"), 60000));
    } else {
        test_skip("policy: network bridge granted by a group rule",
                  "the private engine runs --bridge=none: no default bridge network");
    }
}

static void policy_stop(struct pol *p)
{
    const char *snap = p->snap, *net = p->net, *sock = p->sock;
    char path[300];
    json_decref(
        pt_as_uid(A, A, sock, "sandbox.destroy", json_pack("{s:s}", "id", "pa"), 60000));
    json_decref(pt_as_uid(A, A, sock, "snapshot.delete",
                          json_pack("{s:s}", "snapshot", snap), 60000));
    if (p->have_net) {
        snprintf(path, sizeof(path), "/networks/%s", net);
        dk_engine("DELETE", path, NULL, NULL);
    }
    cn_close(p->c);
    stop_sbxd(p->pid, SIGTERM);
}

static void test_policy_uid(void)
{
    struct pol p = {0};
    policy_start(&p);
    policy_loosening(&p);
    policy_granted(&p);
    policy_snapshot_owner(&p);
    policy_networks(&p);
    policy_stop(&p);
}

/* ---- issue 10: warm starts --------------------------------------------------------- */

static void test_agent_mount(conn *c)
{
    json_t *r = create(c, "am1", NULL);
    char cid[100];
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    json_decref(r);
    json_t *ins = dk_inspect(cid);
    json_t *mounts = json_object_get(ins, "Mounts");
    int agent_ro = 0, volumes = 0;
    size_t i;
    json_t *m;
    json_array_foreach(mounts, i, m) {
        const char *type = json_string_value(json_object_get(m, "Type"));
        const char *dst = json_string_value(json_object_get(m, "Destination"));
        if (type && !strcmp(type, "volume"))
            volumes++;
        if (type && !strcmp(type, "bind") && dst && !strcmp(dst, "/.sbx/sbx-init") &&
            json_is_false(json_object_get(m, "RW")))
            agent_ro = 1;
    }
    test_cond("agent mount: sbx-init is a read-only bind of the installed agent",
              agent_ro);
    test_cond("agent mount: no anonymous volume per create", volumes == 0);
    json_decref(ins);
    r = exec(
        c, "am1",
        "id -u; cp /bin/busybox /.sbx/sbx-init 2>/dev/null && echo replaced; "
        "rm -f /.sbx/sbx-init 2>/dev/null && echo removed; "
        "mount -o remount,rw /.sbx/sbx-init 2>/dev/null && echo remounted; "
        "umount /.sbx/sbx-init 2>/dev/null && echo unmounted; "
        "echo x >> /.sbx/sbx-init 2>/dev/null && echo appended; md5sum /.sbx/sbx-init");
    char want[200] = "";
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "md5sum '%s/sbx-init'", bdir);
    FILE *f = popen(cmd, "r");
    if (f) {
        if (!fgets(want, 33, f))
            want[0] = '\0';
        pclose(f);
    }
    const char *out = res_str(r, "stdout");
    test_cond(
        "agent mount: container root cannot replace, remove, remount or append to it",
        !strncmp(out, "0\n", 2) && !strstr(out, "replaced") && !strstr(out, "removed") &&
            !strstr(out, "remounted") && !strstr(out, "unmounted") &&
            !strstr(out, "appended") && want[0] && strstr(out, want));
    if (!want[0] || !strstr(out, want))
        printf("      stdout: %s (host md5 %s)\n", out, want);
    json_decref(r);
    test_cond("agent mount: the direct channel still works (its socket dir is a tmpfs)",
              exec_ok(c, "am1", "echo ok", "ok\n"));
    r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "am1"));
    test_cond("agent mount: channel direct", !strcmp(channel_of(r), "direct"));
    json_decref(r);
    /* a snapshot of it starts with the agent mounted again */
    r = cn_call_t(c, 120000, "sandbox.snapshot", json_pack("{s:s}", "id", "am1"));
    char snap[64];
    snprintf(snap, sizeof(snap), "%s", res_str(r, "snapshot"));
    json_decref(r);
    r = create(c, "am2", json_pack("{s:s}", "snapshot", snap));
    test_cond("agent mount: a sandbox from its snapshot runs",
              exec_ok(c, "am2", "echo ok", "ok\n"));
    json_decref(r);
    destroy(c, "am2");
    destroy(c, "am1");
    json_decref(
        cn_call_t(c, 60000, "snapshot.delete", json_pack("{s:s}", "snapshot", snap)));
    r = cn_call(c, "daemon.info", NULL);
    char *t = json_dumps(r, 0);
    test_cond("agent mount: daemon.info says bind",
              t && strstr(t, "\"agent_mount\": \"bind\""));
    free(t);
    json_decref(r);
}

/* daemon.info's docker pools entry named name: ready count, or -1. */
static int pool_ready(conn *c, const char *name)
{
    json_t *info = cn_call(c, "daemon.info", NULL);
    int ready = -1;
    size_t i, j;
    json_t *pv, *pl;
    json_array_foreach(json_object_get(res_of(info), "providers"), i, pv) {
        json_array_foreach(json_object_get(json_object_get(pv, "info"), "pools"), j, pl)
            if (!strcmp(json_string_value(json_object_get(pl, "name")), name))
                ready = (int)json_integer_value(json_object_get(pl, "ready"));
    }
    json_decref(info);
    return ready;
}

static int wait_pool(conn *c, const char *name, int want, int ms)
{
    double until = now_ms() + ms;
    while (now_ms() < until) {
        if (pool_ready(c, name) == want)
            return 1;
        usleep(100000);
    }
    return 0;
}

/* Ids of the containers labelled sbxd.pool=name, into ids (a JSON array). */
static json_t *pool_ids(const char *name)
{
    char path[300];
    snprintf(
        path, sizeof(path),
        "/containers/json?filters=%%7B%%22label%%22%%3A%%5B%%22sbxd.pool%%3D%s%%22%%5D%%7D",
        name);
    json_t *l = NULL, *ids = json_array();
    dk_engine("GET", path, NULL, &l);
    /* only this run's pool sbxd's: other runs on a shared engine have pools
     * of the same name */
    char sock[200];
    snprintf(sock, sizeof(sock), "%.80s/pool.sock", tmpdir);
    size_t i;
    json_t *c;
    json_array_foreach(l, i, c) {
        const char *cs = json_string_value(
            json_object_get(json_object_get(c, "Labels"), "sbxd.socket"));
        if (!cs || strcmp(cs, sock) != 0)
            continue;
        /* taken ones are renamed sbxp.<owner>.<id>: no longer the pool's */
        const char *nm =
            json_string_value(json_array_get(json_object_get(c, "Names"), 0));
        if (!nm || strncmp(nm, "/sbxp.", 6) != 0)
            json_array_append(ids, json_object_get(c, "Id"));
    }
    json_decref(l);
    return ids;
}

static int in_ids(json_t *ids, const char *id)
{
    size_t i;
    json_t *x;
    json_array_foreach(ids, i, x)
        if (!strcmp(json_string_value(x), id))
            return 1;
    return 0;
}

/* A create with the pool's options takes a pooled container; other options do
 * not; a used container is never pooled again. */
static void pools_take(conn *c)
{
    json_t *before = pool_ids("warm");
    double t = now_ms();
    json_t *r = create(c, "pw1", NULL);
    double took = now_ms() - t;
    char cid[100];
    snprintf(cid, sizeof(cid), "%s", cid_of(r));
    test_cond("pools: a create with the pool's options takes a pooled container",
              !strcmp(res_str(r, "status"), "running") &&
                  !strcmp(json_string_value(json_object_get(
                              json_object_get(res_of(r), "metadata"), "pool"))
                              ?: "",
                          "warm") &&
                  in_ids(before, cid));
    printf("      create from the pool answered in %.1f ms\n", took);
    json_decref(r);
    test_cond("pools: the first exec runs once the agent is reached",
              exec_ok(c, "pw1", "echo warm", "warm\n"));
    test_cond("pools: refilled in the background", wait_pool(c, "warm", 2, 60000));
    r = create(c, "pw2", json_pack("{s:{s:s}}", "options", "memory", "128m"));
    test_cond("pools: other options do not take from a pool",
              !strcmp(res_str(r, "status"), "running") &&
                  !json_object_get(json_object_get(res_of(r), "metadata"), "pool"));
    json_decref(r);
    destroy(c, "pw2");
    destroy(c, "pw1");
    char path[256];
    snprintf(path, sizeof(path), "/containers/%s/json", cid);
    json_t *after = pool_ids("warm");
    test_cond("pools: a used container is removed with its sandbox, never pooled again",
              dk_engine("GET", path, NULL, NULL) == 404 && !in_ids(after, cid));
    json_decref(after);

    json_decref(before);
}

/* Two owners: never the same container. */
static void pools_owners(conn *c, const char *sock)
{
    json_t *r;
    r = pt_as_uid(65534, 65534, sock, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "pa1", "provider", "docker"), 60000);
    char cida[100];
    snprintf(cida, sizeof(cida), "%s", cid_of(r));
    int froma = json_object_get(json_object_get(res_of(r), "metadata"), "pool") != NULL;
    json_decref(r);
    json_t *x = pt_as_uid(65534, 65534, sock, "process.exec",
                          json_pack("{s:s, s:s}", "sandbox", "pa1", "command",
                                    "echo secret > /workspace/a"),
                          30000);
    json_decref(x);
    json_decref(pt_as_uid(65534, 65534, sock, "sandbox.destroy",
                          json_pack("{s:s}", "id", "pa1"), 60000));
    wait_pool(c, "warm", 2, 60000);
    r = pt_as_uid(65533, 65533, sock, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "pb1", "provider", "docker"), 60000);
    char cidb[100];
    snprintf(cidb, sizeof(cidb), "%s", cid_of(r));
    int fromb = json_object_get(json_object_get(res_of(r), "metadata"), "pool") != NULL;
    json_decref(r);
    x = pt_as_uid(65533, 65533, sock, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "pb1", "command",
                            "cat /workspace/a 2>/dev/null || echo clean"),
                  30000);
    test_cond("pools: two owners get different fresh containers, nothing of the first",
              froma && fromb && cida[0] && cidb[0] && strcmp(cida, cidb) != 0 &&
                  !strcmp(res_str(x, "stdout"), "clean\n"));
    json_decref(x);
    json_decref(pt_as_uid(65533, 65533, sock, "sandbox.destroy",
                          json_pack("{s:s}", "id", "pb1"), 60000));
}

/* The policy applies to what a pool holds. */
static void pools_policy(conn *c, const char *sock)
{
    json_t *r;
    test_cond("pools: a pool's options above the taker's ceiling are refused (-32003)",
              refused(65533, sock, "pb2", "{\"pids_limit\": 512}", "ceiling"));
    test_cond("pools: the pool still holds its container", pool_ready(c, "big") == 1);
    r = create(c, "pbig", json_pack("{s:{s:i}}", "options", "pids_limit", 512));
    test_cond("pools: root takes it",
              !strcmp(json_string_value(
                          json_object_get(json_object_get(res_of(r), "metadata"), "pool"))
                          ?: "",
                      "big"));
    json_decref(r);
    destroy(c, "pbig");
}

/* sbxd restarts: unused pool containers of the old one go, new ones come, a
 * sandbox taken from the pool is found again with its config. */
static void pools_restart(conn **cp, pid_t *pid, const char *extra)
{
    json_t *r;
    size_t i;
    json_t *id;
    conn *c = *cp;
    wait_pool(c, "warm", 2, 60000);
    r = create(c, "pkeep", json_pack("{s:{s:s}}", "env", "K", "kept"));
    test_cond(
        "pools: pkeep from the pool",
        json_object_get(json_object_get(res_of(r), "metadata"), "pool") != NULL &&
            exec_ok(c, "pkeep", "echo $K > /workspace/f; cat /workspace/f", "kept\n"));
    json_decref(r);
    wait_pool(c, "warm", 2, 60000);
    json_t *old = pool_ids("warm");
    cn_close(c);
    stop_sbxd(*pid, SIGTERM);
    c = *cp = start_other("pool", docker_host, extra, pid);
    int ok = c && wait_pool(c, "warm", 2, 60000);
    json_t *fresh = pool_ids("warm");
    int overlap = 0;
    json_array_foreach(old, i, id)
        overlap |= in_ids(fresh, json_string_value(id));
    test_cond(
        "pools: after an sbxd restart the old unused containers are removed and the "
        "pool is filled again",
        ok && json_array_size(fresh) == 2 && !overlap);
    int found = 0;
    for (int k = 0; c && k < 100 && !found; k++) {
        found = !strcmp(status_of(c, "pkeep"), "running");
        if (!found)
            usleep(100000);
    }
    r = c ? cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "pkeep")) : NULL;
    test_cond(
        "pools: a sandbox taken from a pool is adopted after an sbxd restart, with its "
        "env and its lifetime counted from its creation",
        found &&
            !strcmp(
                json_string_value(json_object_get(json_object_get(res_of(r), "env"), "K"))
                    ?: "",
                "kept") &&
            res_int(r, "timeout_ms") > 0 && res_int(r, "timeout_ms") < 1800000 &&
            exec_ok(c, "pkeep", "cat /workspace/f; echo $K", "kept\nkept\n"));
    if (!found ||
        strcmp(json_string_value(json_object_get(json_object_get(res_of(r), "env"), "K"))
                   ?: "",
               "kept")) {
        char *txt = json_dumps(r, JSON_COMPACT);
        printf("      %.600s\n", txt ? txt : "?");
        free(txt);
    }
    json_decref(r);
    json_decref(old);
    json_decref(fresh);
}

/* Removes what the last sbxd left in its pools. */
static void pools_leftovers(void)
{
    char path[256];
    size_t i;
    json_t *id;
    json_t *rest = pool_ids("warm"), *rest2 = pool_ids("big");
    json_array_extend(rest, rest2);
    json_array_foreach(rest, i, id) {
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", json_string_value(id));
        dk_engine("DELETE", path, NULL, NULL);
    }
    json_decref(rest);
    json_decref(rest2);
}

static void test_pools(void)
{
    pid_t pid = 0;
    char sock[200];
    const char *extra = "    pools:\n"
                        "      - {name: warm, size: 2}\n"
                        "      - {name: big, size: 1, options: {pids_limit: 512}}\n";
    conn *c = start_other("pool", docker_host, extra, &pid);
    snprintf(sock, sizeof(sock), "%.80s/pool.sock", tmpdir);
    chmod(tmpdir, 0755);
    test_cond("pools: filled (2 + 1 started containers ready)",
              c && wait_pool(c, "warm", 2, 60000) && wait_pool(c, "big", 1, 60000));
    if (!c) {
        stop_sbxd(pid, SIGKILL);
        return;
    }
    pools_take(c);
    pools_owners(c, sock);
    pools_policy(c, sock);
    pools_restart(&c, &pid, extra);
    if (c)
        destroy(c, "pkeep");
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
    pools_leftovers();
}

int main(int argc, char **argv)
{
    conn *c;
    int st = dk_suite_start(argc, argv, "main-policy", &c);
    if (st)
        return st;
    DK_STEP(test_policy_uid());
    DK_STEP(test_agent_mount(c));
    DK_STEP(test_pools());
    dk_suite_end(c);
    return test_report();
}
