/*
 * ptest_docker_security.c - issue 16's Docker reproductions against a real
 * engine and a real sbxd, the attacker a second uid on a 0666 socket.
 *
 *   ptest_docker_security SBXD BUILD_DIR TMPDIR
 *
 * Environment (from tests/providers/docker_security.sh): DOCKER_HOST
 * (unix://). Each part starts its own sbxd (restarts included) and checks
 * what reached the engine by asking the engine itself.
 *
 *   owner    a planted sbxp.<uid>.<id> name and sbxd.* labels (item 1)
 *   user     root by spelling with a configured user (item 2)
 *   disk     a write past options.disk is stopped; the per-uid total (item 5)
 *   small    tmpfs size=1m,size=100g; the engine's words for pull/create/start (7)
 *   defaults no config file: the hardened ceilings (item 13)
 *   runsc    a rule's runtime_required (item 15, the policy part)
 */
#include <curl/curl.h>
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
static const uid_t A = 65534, B = 65533; /* two users without rules */

/* ---- the engine, directly (tests only: blocking) -------------------------------- */

static void engine_rm(const char *cid)
{
    char p[300];
    snprintf(p, sizeof(p), "/containers/%s?force=1&v=1", cid);
    dk_engine("DELETE", p, NULL, NULL);
}

/* ---- sbxd instances --------------------------------------------------------------- */

struct inst {
    char name[32], cfg[600], sock[108], log[600];
    pid_t pid;
};

static void inst_start(struct inst *in)
{
    in->pid = dk_sbxd_start(in->cfg[0] ? in->cfg : NULL, in->sock, in->log, "debug");
    chmod(in->sock, 0666);
}

static void inst_stop(struct inst *in)
{
    dk_sbxd_stop(in->pid, SIGTERM, 10000);
    in->pid = 0;
}

/* An sbxd named name with the test engine and extra providers.docker lines;
 * cfg NULL-like (extra == NULL and noconf) = no config file at all. */
static void inst_make(struct inst *in, const char *name, const char *extra, int noconf)
{
    memset(in, 0, sizeof(*in));
    snprintf(in->name, sizeof(in->name), "%s", name);
    snprintf(in->sock, sizeof(in->sock), "%.80s/%.10s.sock", tmpdir, name);
    snprintf(in->log, sizeof(in->log), "%s/sbxd-%s.log", tmpdir, name);
    if (!noconf) {
        snprintf(in->cfg, sizeof(in->cfg), "%s/%s.yaml", tmpdir, name);
        FILE *f = fopen(in->cfg, "w");
        fprintf(f,
                "socket:\n  mode: \"0666\"\n"
                "providers:\n"
                "  docker:\n"
                "    host: %s\n"
                "    agent_path: %s/sbx-init\n"
                "    image: sbx-test/busybox\n"
                "    command_timeout_ms: 60000\n"
                "%s",
                docker_host, bdir, extra ? extra : "");
        fclose(f);
    }
    inst_start(in);
}

/* Waits until the docker provider reports the engine (api_version known). */
static int inst_docker_up(struct inst *in)
{
    conn *c = dk_connect(in->sock, 10000);
    int up = dk_docker_up(c, 10000);
    cn_close(c);
    return up;
}

/* One call as uid (a forked child that drops to uid:uid); NULL if no answer. */
static json_t *as_uid(uid_t uid, const char *sock, const char *method, json_t *params,
                      int timeout_ms)
{
    return pt_as_uid(uid, uid, sock, method, params, timeout_ms);
}

static json_t *create_as(uid_t uid, struct inst *in, const char *id, const char *opts)
{
    json_t *p = json_pack("{s:s, s:s, s:i}", "id", id, "provider", "docker", "timeout_ms",
                          1800000);
    if (opts) {
        json_t *o = json_loads(opts, 0, NULL);
        if (o)
            json_object_set_new(p, "options", o);
    }
    return as_uid(uid, in->sock, "sandbox.create", p, 120000);
}

static void destroy_as(uid_t uid, struct inst *in, const char *id)
{
    json_decref(
        as_uid(uid, in->sock, "sandbox.destroy", json_pack("{s:s}", "id", id), 60000));
}

static json_t *err_data(json_t *r)
{
    return json_object_get(json_object_get(r, "error"), "data");
}

static const char *err_msg(json_t *r)
{
    const char *m =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    return m ? m : "";
}

static void show(const char *what, json_t *r)
{
    char *t = r ? json_dumps(r, JSON_COMPACT) : NULL;
    printf("      %s -> %.500s\n", what, t ? t : "(no answer)");
    free(t);
}

/* A create as uid that must be -32003 naming option (NULL: any). */
static int refused_as(uid_t uid, struct inst *in, const char *id, const char *opts,
                      const char *option)
{
    json_t *r = create_as(uid, in, id, opts);
    const char *o = json_string_value(json_object_get(err_data(r), "option"));
    int ok = err_code(r) == -32003 && (!option || (o && !strcmp(o, option)));
    if (!ok)
        show(opts, r);
    if (res_of(r))
        destroy_as(uid, in, id);
    json_decref(r);
    return ok;
}

static json_t *exec_as(uid_t uid, struct inst *in, const char *id, const char *cmd)
{
    return as_uid(uid, in->sock, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", id, "command", cmd), 90000);
}

static const char *cid_of(json_t *r)
{
    return dk_meta(r, "container_id");
}

/* ---- item 1: ownership ------------------------------------------------------------ */

/* A container that looks like a taken pool container of B's, made outside
 * sbxd (what an earlier sbxd let a user make through options.name and
 * options.labels), with the pool-conf file the old re-adoption read. */
static char *plant(const char *sock, const char *name, const char *owner_label)
{
    char body[1500];
    snprintf(body, sizeof(body),
             "{\"Image\": \"sbx-test/busybox\", \"Cmd\": [\"sleep\", \"3600\"],"
             " \"Labels\": {\"sbxd.pool\": \"x\", \"sbxd.socket\": \"%s\"%s},"
             " \"HostConfig\": {\"NetworkMode\": \"none\"}}",
             sock, owner_label ? owner_label : "");
    char path[300];
    snprintf(path, sizeof(path), "/containers/create?name=%s", name);
    json_t *j = NULL;
    long st = dk_engine("POST", path, body, &j);
    const char *id = json_string_value(json_object_get(j, "Id"));
    char *cid = st == 201 && id ? strdup(id) : NULL;
    json_decref(j);
    if (cid) {
        snprintf(path, sizeof(path), "/containers/%s/start", cid);
        dk_engine("POST", path, NULL, NULL);
    }
    return cid;
}

/* What the steps of test_owner share: the sbxd with a pool, B's pooled
 * sandbox (container, claim volume) and the containers planted outside sbxd. */
struct owner {
    struct inst in;
    char bcid[80], vpath[200], aid[64];
    char *c1, *c2;
};

/* The attack as filed: A names its container after B and labels it a pool's. */
static void owner_reserved(struct owner *o)
{
    char name[100];
    snprintf(name, sizeof(name), "sbxp.%u.planted", (unsigned)B);

    char opts[300];
    snprintf(opts, sizeof(opts), "{\"name\": \"%s\", \"labels\": {\"sbxd.pool\": \"x\"}}",
             name);
    json_t *r = create_as(A, &o->in, "aown", opts);
    test_cond("owner: A's create with name sbxp.<B>.planted + label sbxd.pool is -32003",
              err_code(r) == -32003);
    if (err_code(r) != -32003)
        show("create aown", r);
    if (res_of(r))
        destroy_as(A, &o->in, "aown");
    json_decref(r);
    snprintf(opts, sizeof(opts), "{\"labels\": {\"sbxd.pool\": \"x\"}}");
    test_cond("owner: label sbxd.pool alone is -32003 naming labels",
              refused_as(A, &o->in, "aown2", opts, "labels"));
    test_cond(
        "owner: label sbxd.owner is -32003 naming labels",
        refused_as(A, &o->in, "aown3", "{\"labels\": [\"sbxd.owner=0\"]}", "labels"));
    snprintf(opts, sizeof(opts), "{\"name\": \"%s\"}", name);
    test_cond("owner: name sbxp.<B>.planted alone is -32003 naming name",
              refused_as(A, &o->in, "aown4", opts, "name"));
    test_cond("owner: name sbxp.0.x (root's) is -32003",
              refused_as(A, &o->in, "aown5", "{\"name\": \"sbxp.0.x\"}", "name"));
    test_cond("owner: name sbx-<another id> is -32003",
              refused_as(A, &o->in, "aown6", "{\"name\": \"sbx-bsb\"}", "name"));
    test_cond(
        "owner: root is refused too (the labels are sbxd's bookkeeping)",
        refused_as(0, &o->in, "rown", "{\"labels\": {\"sbxd.id\": \"x\"}}", "labels"));
}

static void owner_pool_take(struct owner *o)
{
    json_t *r;
    /* a legitimate pool take by B: survives the restart through its claim */
    json_t *pooled = NULL;
    for (int i = 0; i < 300 && !pooled; i++) {
        r = as_uid(0, o->in.sock, "daemon.info", NULL, 10000);
        char *t = json_dumps(r, 0);
        if (t && strstr(t, "\"ready\": 1"))
            pooled = json_true();
        free(t);
        json_decref(r);
        if (!pooled)
            usleep(100000);
    }
    r = create_as(B, &o->in, "bpool", NULL);
    int from_pool =
        json_object_get(json_object_get(res_of(r), "metadata"), "pool") != NULL;
    snprintf(o->bcid, sizeof(o->bcid), "%s", cid_of(r));
    test_cond("owner: B's sandbox comes from the pool", from_pool);
    json_decref(r);
    r = exec_as(B, &o->in, "bpool", "echo mine > /workspace/b; cat /workspace/b");
    test_eq_str("owner: B writes its file", res_str(r, "stdout"), "mine\n");
    json_decref(r);
    /* wait for the claim */
    snprintf(o->vpath, sizeof(o->vpath), "/volumes/sbxd-claim-%s", o->bcid);
    json_t *vol = NULL;
    for (int i = 0; i < 100; i++) {
        json_decref(vol);
        vol = NULL;
        if (dk_engine("GET", o->vpath, NULL, &vol) == 200)
            break;
        usleep(100000);
    }
    const char *vown =
        json_string_value(json_object_get(json_object_get(vol, "Labels"), "sbxd.owner"));
    char bown[16];
    snprintf(bown, sizeof(bown), "%u", (unsigned)B);
    test_cond("owner: the take is claimed in a volume labelled by sbxd (owner B)",
              vown && !strcmp(vown, bown));
    json_decref(vol);
}

static void owner_plant(struct owner *o)
{
    /* planted outside sbxd: a B-named pool container (no owner label), and
     * one that also carries A's labels */
    char n1[100], n2[100];
    snprintf(n1, sizeof(n1), "sbxp.%u.planted%d", (unsigned)B, (int)getpid());
    snprintf(n2, sizeof(n2), "sbxp.%u.planted2%d", (unsigned)B, (int)getpid());
    char alab[200];
    snprintf(alab, sizeof(alab), ", \"sbxd.id\": \"aplant%d\", \"sbxd.owner\": \"%u\"",
             (int)getpid(), (unsigned)A);
    o->c1 = plant(o->in.sock, n1, NULL);
    o->c2 = plant(o->in.sock, n2, alab);
    test_cond("owner: the planted containers exist", o->c1 && o->c2);
}

/* sbxd restarted: what it adopts, from its labels and the claim, and what not. */
static void owner_restart_adopt(struct owner *o)
{
    json_t *r;
    inst_stop(&o->in);
    inst_start(&o->in);
    inst_docker_up(&o->in);
    /* The adoption pass is over once B's real pooled sandbox is back (the
     * planted ones come from the same listing): only then does "not found"
     * mean anything. */
    int found = 0;
    for (int k = 0; k < 100 && !found; k++) {
        r = as_uid(B, o->in.sock, "sandbox.get", json_pack("{s:s}", "id", "bpool"),
                   10000);
        found = !strcmp(res_str(r, "status"), "running");
        json_decref(r);
        if (!found)
            usleep(100000);
    }
    /* and A's labelled container, from the label listing beside it */
    char pid1[64], pid2[64];
    snprintf(pid1, sizeof(pid1), "planted%d", (int)getpid());
    snprintf(pid2, sizeof(pid2), "planted2%d", (int)getpid());
    snprintf(o->aid, sizeof(o->aid), "aplant%d", (int)getpid());
    int afound = 0;
    for (int k = 0; k < 100 && !afound; k++) {
        r = as_uid(A, o->in.sock, "sandbox.get", json_pack("{s:s}", "id", o->aid), 10000);
        afound = res_of(r) != NULL;
        json_decref(r);
        if (!afound)
            usleep(100000);
    }
    r = as_uid(B, o->in.sock, "sandbox.get", json_pack("{s:s}", "id", pid1), 10000);
    test_eq_int("owner: after a restart B has no sandbox from a planted name (-32000)",
                err_code(r), -32000);
    json_decref(r);
    r = as_uid(B, o->in.sock, "sandbox.get", json_pack("{s:s}", "id", pid2), 10000);
    test_eq_int("owner: nor from a planted name on A's container (-32000)", err_code(r),
                -32000);
    json_decref(r);
    r = as_uid(0, o->in.sock, "sandbox.list", NULL, 10000);
    int n_on_c2 = 0;
    size_t i;
    json_t *x;
    json_t *list = json_object_get(res_of(r), "sandboxes");
    if (!list)
        list = res_of(r);
    json_array_foreach(list, i, x) {
        const char *cid = json_string_value(
            json_object_get(json_object_get(x, "metadata"), "container_id"));
        if (cid && o->c2 && !strcmp(cid, o->c2))
            n_on_c2++;
    }
    test_eq_int("owner: the container with A's labels backs exactly one sandbox", n_on_c2,
                1);
    json_decref(r);
    r = as_uid(A, o->in.sock, "sandbox.get", json_pack("{s:s}", "id", o->aid), 10000);
    test_cond("owner: A's labelled container is A's (adopted from sbxd's labels)",
              res_of(r) != NULL);
    json_decref(r);
    test_cond("owner: B's pooled sandbox is adopted from its claim after the restart",
              found);
    r = exec_as(B, &o->in, "bpool", "cat /workspace/b");
    test_eq_str("owner: with B's file", res_str(r, "stdout"), "mine\n");
    json_decref(r);
    r = as_uid(A, o->in.sock, "sandbox.get", json_pack("{s:s}", "id", "bpool"), 10000);
    test_eq_int("owner: A cannot see B's pooled sandbox (-32000)", err_code(r), -32000);
    json_decref(r);
}

static void owner_cleanup(struct owner *o)
{
    json_t *j = NULL;
    char p1[200];
    snprintf(p1, sizeof(p1), "/containers/%s/json", o->c1 ? o->c1 : "none");
    long st = 0;
    for (int k = 0; k < 50 && (st = dk_engine("GET", p1, NULL, &j)) == 200; k++) {
        json_decref(j);
        j = NULL;
        usleep(100000);
    }
    json_decref(j);
    test_cond("owner: an unclaimed pool container is removed, not adopted", st == 404);
    destroy_as(B, &o->in, "bpool");
    long vst = 0;
    for (int k = 0; k < 50 && (vst = dk_engine("GET", o->vpath, NULL, NULL)) != 404; k++)
        usleep(100000);
    test_cond("owner: B's claim goes with its sandbox", vst == 404);
    destroy_as(A, &o->in, o->aid);
    if (o->c1)
        engine_rm(o->c1);
    if (o->c2)
        engine_rm(o->c2);
    free(o->c1);
    free(o->c2);
    inst_stop(&o->in);
}

static void owner_leftovers(struct owner *o)
{
    size_t i;
    json_t *x;
    /* the unused pool containers this sbxd leaves (the next one on its socket
     * would remove them) */
    json_t *left = NULL;
    dk_engine("GET",
              "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22sbxd.pool%22%5D%7D",
              NULL, &left);
    json_array_foreach(left, i, x) {
        const char *so = json_string_value(
            json_object_get(json_object_get(x, "Labels"), "sbxd.socket"));
        if (so && !strcmp(so, o->in.sock))
            engine_rm(json_string_value(json_object_get(x, "Id")));
    }
    json_decref(left);
}

static void test_owner(void)
{
    struct owner o = {0};
    inst_make(&o.in, "owner", "    pools:\n      - {name: warm, size: 1}\n", 0);
    int up = inst_docker_up(&o.in);
    test_cond("owner: sbxd with a pool is up", up);
    owner_reserved(&o);
    owner_pool_take(&o);
    owner_plant(&o);
    owner_restart_adopt(&o);
    owner_cleanup(&o);
    owner_leftovers(&o);
}

/* ---- item 2: root by spelling ------------------------------------------------------ */

static void test_user(void)
{
    struct inst in;
    inst_make(&in, "user", "    user: \"65534:65534\"\n", 0);
    test_cond("user: sbxd is up", inst_docker_up(&in));
    static const char *const roots[] = {"0", "00", "+0", "0000:0", "65534:0", ":65534"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
        char o[100], t[160], id[32];
        snprintf(o, sizeof(o), "{\"user\": \"%s\"}", roots[i]);
        snprintf(t, sizeof(t), "user: \"%s\" is refused (-32003, option user)", roots[i]);
        snprintf(id, sizeof(id), "u%zu", i);
        test_cond(t, refused_as(A, &in, id, o, "user"));
    }
    /* names and a missing group: from the image's own files (the test image
     * has only root in /etc/passwd) */
    test_cond("user: \"root\" (a name for uid 0 in the image) is refused",
              refused_as(A, &in, "un1", "{\"user\": \"root\"}", "user"));
    test_cond("user: \"65533\" (no passwd entry: gid 0) is refused",
              refused_as(A, &in, "un2", "{\"user\": \"65533\"}", "user"));
    test_cond("user: a name the image does not have is refused",
              refused_as(A, &in, "un3", "{\"user\": \"nobody\"}", "user"));
    json_t *r = create_as(A, &in, "uempty", "{\"user\": \"\"}");
    test_cond("user: \"\" creates a sandbox", res_of(r) != NULL);
    if (!res_of(r))
        show("user \"\"", r);
    json_decref(r);
    r = exec_as(A, &in, "uempty", "id -u; id -g");
    test_eq_str("user: \"\" runs as the configured 65534:65534, not the image's root",
                res_str(r, "stdout"), "65534\n65534\n");
    json_decref(r);
    destroy_as(A, &in, "uempty");
    r = create_as(A, &in, "unum", "{\"user\": \"1000:1000\"}");
    json_t *e = exec_as(A, &in, "unum", "id -u; id -g");
    test_eq_str("user: 1000:1000 runs as 1000:1000", res_str(e, "stdout"),
                "1000\n1000\n");
    json_decref(e);
    json_decref(r);
    destroy_as(A, &in, "unum");
    /* no container is left behind by a refusal after create */
    json_t *list = NULL;
    dk_engine(
        "GET",
        "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22sbxd.id%3Dun1%22%5D%7D",
        NULL, &list);
    test_cond("user: the container made before the image check is removed",
              json_array_size(list) == 0);
    json_decref(list);
    inst_stop(&in);
}

/* ---- item 5: disk --------------------------------------------------------------- */

static void disk_enforcement(void)
{
    json_t *r, *md;
    /* disk_enforcement: quota asks the engine first; where it refuses (vfs
     * or overlay2 without project quotas) the create goes on, measured */
    struct inst iq;
    inst_make(&iq, "diskq", "    disk: 64m\n    disk_enforcement: quota\n", 0);
    inst_docker_up(&iq);
    usleep(300000); /* /info answered */
    r = create_as(A, &iq, "dq1", NULL);
    md = json_object_get(json_object_get(res_of(r), "metadata"), "disk");
    const char *qe = json_string_value(json_object_get(md, "enforcement")) ?: "";
    printf("      disk_enforcement quota on this engine: %s\n", qe);
    test_cond("disk: with disk_enforcement quota a create succeeds (quota or the "
              "measured fallback)",
              res_of(r) && (!strcmp(qe, "quota") || !strcmp(qe, "measured")));
    if (!res_of(r))
        show("create dq1", r);
    if (!strcmp(qe, "measured")) {
        /* it was asked for, and the engine's refusal is in the log */
        FILE *lf = fopen(iq.log, "r");
        char line[600];
        int tried = 0;
        while (lf && fgets(line, sizeof(line), lf))
            tried |= strstr(line, "refused a disk quota") != NULL;
        if (lf)
            fclose(lf);
        test_cond("disk: the quota was tried and the engine's refusal logged", tried);
    }
    json_decref(r);
    destroy_as(A, &iq, "dq1");
    inst_stop(&iq);
    struct inst ib;
    inst_make(&ib, "diskbad", "    disk_enforcement: sometimes\n", 0);
    r = as_uid(0, ib.sock, "daemon.info", NULL, 10000);
    char *t = json_dumps(r, 0);
    test_cond("disk: an unknown disk_enforcement leaves the provider unavailable, "
              "saying why",
              t && strstr(t, "disk_enforcement must be"));
    free(t);
    json_decref(r);
    inst_stop(&ib);
}

/* daemon.info says how disk limits are enforced (once the engine answered). */
static void disk_info(struct inst *in)
{
    json_t *r = NULL;
    const char *enf = "";
    for (int i = 0; i < 50; i++) {
        json_decref(r);
        r = as_uid(0, in->sock, "daemon.info", NULL, 10000);
        json_t *pv = json_object_get(json_object_get(res_of(r), "providers"), "docker");
        if (!pv) {
            size_t k;
            json_t *x;
            json_array_foreach(json_object_get(res_of(r), "providers"), k, x)
                if (!strcmp(json_string_value(json_object_get(x, "name")) ?: "",
                            "docker"))
                    pv = x;
        }
        json_t *d = json_object_get(json_object_get(pv, "info"), "disk");
        enf = json_string_value(json_object_get(d, "enforcement")) ?: "";
        if (strcmp(enf, "unknown") != 0 && enf[0])
            break;
        usleep(100000);
    }
    printf("      daemon.info docker disk enforcement: %s\n", enf);
    test_cond("disk: daemon.info says how disk limits are enforced",
              !strcmp(enf, "measured") || !strcmp(enf, "quota"));
    json_decref(r);
}

static void test_disk(void)
{
    struct inst in;
    inst_make(&in, "disk",
              "    disk: 64m\n    disk_per_uid: 160m\n    disk_check_ms: 500\n", 0);
    test_cond("disk: sbxd is up", inst_docker_up(&in));
    disk_info(&in);
    json_t *r;
    test_cond("disk: above the 64m ceiling is -32003",
              refused_as(A, &in, "dbig", "{\"disk\": \"1g\"}", "disk"));
    r = create_as(A, &in, "d1", NULL);
    json_t *md = json_object_get(json_object_get(res_of(r), "metadata"), "disk");
    test_cond("disk: the create result says the limit and its enforcement",
              json_integer_value(json_object_get(md, "limit")) == 64 << 20 &&
                  json_string_value(json_object_get(md, "enforcement")));
    int quota =
        !strcmp(json_string_value(json_object_get(md, "enforcement")) ?: "", "quota");
    json_decref(r);
    json_t *r2 = create_as(A, &in, "d2", "{\"disk\": \"64m\"}");
    test_cond("disk: a second 64m sandbox fits the 160m per-uid total",
              res_of(r2) != NULL);
    json_decref(r2);
    r2 = create_as(A, &in, "d3", "{\"disk\": \"64m\"}");
    test_eq_int("disk: a third is past disk_per_uid (-32005)", err_code(r2), -32005);
    test_eq_str("disk: data.limit names disk_per_uid",
                json_string_value(json_object_get(err_data(r2), "limit")),
                "disk_per_uid");
    if (res_of(r2))
        destroy_as(A, &in, "d3");
    json_decref(r2);
    r2 = create_as(B, &in, "d3b", "{\"disk\": \"64m\"}");
    test_cond("disk: the total is per uid (B still may)", res_of(r2) != NULL);
    json_decref(r2);
    destroy_as(B, &in, "d3b");

    /* write past the limit */
    double t0 = now_ms();
    r = exec_as(A, &in, "d1",
                "dd if=/dev/zero of=/workspace/big bs=1M count=100 2>/dev/null; "
                "ls -l /workspace/big; sleep 30");
    double took = now_ms() - t0;
    show("the writing exec", r);
    json_t *g = NULL;
    if (quota) {
        /* the engine's quota: the write fails short of 100 MB */
        long long sz = 0;
        const char *sp = res_str(r, "stdout");
        for (int f = 0; f < 4 && sp && *sp; f++) {
            sp = strchr(sp, ' ');
            while (sp && *sp == ' ')
                sp++;
        }
        if (sp)
            sz = atoll(sp);
        test_cond("disk: the engine's quota stops the write at the limit",
                  sz > 0 && sz <= 64 << 20);
    } else {
        int err_state = 0;
        for (int i = 0; i < 200 && !err_state; i++) {
            json_decref(g);
            g = as_uid(A, in.sock, "sandbox.get", json_pack("{s:s}", "id", "d1"), 10000);
            err_state = !strcmp(res_str(g, "status"), "error");
            if (!err_state)
                usleep(100000);
        }
        const char *why = res_str(g, "error");
        printf("      measured; the exec ended after %.1f s: %s\n", took / 1000.0, why);
        test_cond("disk: writing 100 MB into a 64m sandbox ends it within 20 s",
                  err_state && took < 20000);
        test_cond("disk: its status is error with the reason",
                  strstr(why, "disk limit exceeded") != NULL);
    }
    json_decref(r);
    json_decref(g);
    destroy_as(A, &in, "d1");
    destroy_as(A, &in, "d2");
    inst_stop(&in);

    disk_enforcement();
}

/* ---- item 7: tmpfs sizes, the engine's words --------------------------------------- */

static void test_small(void)
{
    struct inst in;
    inst_make(&in, "small", "    tmpfs:\n      /tmp: \"rw,nosuid,nodev,size=64m\"\n", 0);
    test_cond("small: sbxd is up", inst_docker_up(&in));
    test_cond("small: tmpfs size=1m,size=100g is -32003 (the last size wins)",
              refused_as(A, &in, "t1",
                         "{\"tmpfs\": {\"/tmp\": \"rw,size=1m,size=100g\"}}", "tmpfs"));
    /* pull: the engine refuses a registry on a closed loopback port */
    json_t *r = create_as(0, &in, "e1", "{\"image\": \"localhost:1/sbx-nothere:x\"}");
    json_t *d = err_data(r);
    printf("      pull error: %.300s\n", err_msg(r));
    test_cond("small: a failed pull says the engine's words, not \"HTTP status\"",
              err_code(r) == -32006 && !strstr(err_msg(r), "HTTP status") &&
                  (strstr(err_msg(r), "localhost:1") || strstr(err_msg(r), "refused")));
    test_cond("small: with the engine's HTTP status in data",
              json_integer_value(json_object_get(d, "status")) >= 400);
    json_decref(r);
    r = create_as(0, &in, "e2", "{\"runtime\": \"sbx-no-such-runtime\"}");
    printf("      create error: %.300s\n", err_msg(r));
    test_cond("small: a failed create says the engine's words with its status",
              err_code(r) == -32006 && strstr(err_msg(r), "sbx-no-such-runtime") &&
                  json_integer_value(json_object_get(err_data(r), "status")) >= 400);
    json_decref(r);
    /* a file mounted over a directory: the runtime refuses it at start */
    r = create_as(0, &in, "e3", "{\"volumes\": [\"/etc/hostname:/bin:ro\"]}");
    printf("      start error: %.300s\n", err_msg(r));
    test_cond("small: a failed start says the engine's words with its status",
              err_code(r) == -32006 && strstr(err_msg(r), "start container") &&
                  strstr(err_msg(r), "not a directory") &&
                  json_integer_value(json_object_get(err_data(r), "status")) >= 400);
    if (res_of(r))
        destroy_as(0, &in, "e3");
    json_decref(r);
    inst_stop(&in);
}

/* ---- item 13: no config file ----------------------------------------------------- */

static void test_defaults(void)
{
    struct inst in;
    /* with no config file sbxd takes the engine from DOCKER_HOST (ours) */
    if (strncmp(docker_host, "unix://", 7) != 0) {
        test_skip("defaults: no config file", "the test engine is not on a unix socket");
        return;
    }
    inst_make(&in, "noconf", NULL, 1);
    /* the provider answers creates once the engine is contacted */
    test_cond("defaults: sbxd runs with no config file and reaches the engine",
              inst_docker_up(&in));
    test_cond("defaults: pids_limit -1 is refused for a non-root user (-32003)",
              refused_as(A, &in, "nd1", "{\"pids_limit\": -1}", "pids_limit"));
    test_cond("defaults: memory 0 is refused for a non-root user (-32003)",
              refused_as(A, &in, "nd2", "{\"memory\": 0}", "memory"));
    test_cond("defaults: network bridge is refused",
              refused_as(A, &in, "nd3", "{\"network\": \"bridge\"}", "network"));
    test_cond("defaults: cap_drop [] is refused",
              refused_as(A, &in, "nd4", "{\"cap_drop\": []}", "cap_drop"));
    test_cond(
        "defaults: a 1g /tmp is refused",
        refused_as(A, &in, "nd5", "{\"tmpfs\": {\"/tmp\": \"rw,size=1g\"}}", "tmpfs"));
    inst_stop(&in);
}

/* ---- item 15 (policy): runsc required -------------------------------------------- */

static void test_runsc(void)
{
    struct inst in;
    char extra[300];
    snprintf(extra, sizeof(extra),
             "    policy:\n      rules:\n        - users: [%u]\n"
             "          runtime_required: runsc\n",
             (unsigned)A);
    inst_make(&in, "runsc", extra, 0);
    test_cond("runsc: sbxd loads a runtime_required rule", inst_docker_up(&in));
    test_cond("runsc: asking for runc is -32003",
              refused_as(A, &in, "rs1", "{\"runtime\": \"runc\"}", "runtime"));
    json_t *r = create_as(A, &in, "rs2", NULL);
    const char *cid = cid_of(r);
    int used = 0;
    if (res_of(r) && cid[0]) {
        char p[200];
        snprintf(p, sizeof(p), "/containers/%s/json", cid);
        json_t *j = NULL;
        dk_engine("GET", p, NULL, &j);
        used = !strcmp(json_string_value(
                           json_object_get(json_object_get(j, "HostConfig"), "Runtime"))
                           ?: "",
                       "runsc");
        json_decref(j);
    } else {
        /* an engine without runsc says so in its own words */
        used = strstr(err_msg(r), "runsc") != NULL;
        show("create under runsc", r);
    }
    test_cond("runsc: a create without a runtime gets runsc", used);
    json_decref(r);
    destroy_as(A, &in, "rs2");
    r = create_as(B, &in, "rs3", "{\"runtime\": \"runsc\"}");
    test_eq_int("runsc: another user still needs a grant for runsc (-32003)", err_code(r),
                -32003);
    json_decref(r);
    inst_stop(&in);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ptest_docker_security SBXD BUILD_DIR TMPDIR\n");
        return 2;
    }
    sbxd_bin = argv[1];
    bdir = argv[2];
    tmpdir = argv[3];
    docker_host = getenv("DOCKER_HOST");
    signal(SIGPIPE, SIG_IGN);
    if (!docker_host || strncmp(docker_host, "unix://", 7) != 0 || getuid() != 0) {
        test_skip("docker security reproductions",
                  "need root and DOCKER_HOST=unix://...");
        return test_report();
    }
    chmod(tmpdir, 0755); /* the second uid must reach the sockets */
    curl_global_init(CURL_GLOBAL_ALL);
    dk_kit_init(sbxd_bin, docker_host);
    const char *only = getenv("SBX_PTEST_ONLY");
#define PART(name, fn)                                                                   \
    do {                                                                                 \
        if (!only || strstr(name, only))                                                 \
            fn();                                                                        \
    } while (0)
    PART("owner", test_owner);
    PART("user", test_user);
    PART("disk", test_disk);
    PART("small", test_small);
    PART("defaults", test_defaults);
    PART("runsc", test_runsc);
    curl_global_cleanup();
    return test_report();
}
