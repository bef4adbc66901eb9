/*
 * test_policy.c - daemon/providers/docker/policy.c case by case: what a uid may ask for
 * (allowed), what needs a rule it does not have (denied), and what is above a ceiling.
 * The effective options come from the Docker provider's own normalisation
 * (dk_options), so the cases see what a real create would check.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "providers/docker/policy.h"
#include "provider.h"
#include "providers/docker/docker_int.h"
#include "sbx_proto.h"
#include "testhelp.h"

static char dir[64];
static json_t *pconf;
static struct policy *pol;

/* Evaluates options (a JSON text, may be NULL) for uid: 0 allowed, else the
 * reason ("denied"/"ceiling"), or "error: ..." when dk_options refused them. */
static const char *verdict(uid_t uid, const char *options_json)
{
    static char buf[300];
    json_t *conf = json_object();
    if (options_json) {
        char *txt = NULL;
        /* @D in the text stands for the test directory */
        size_t n = strlen(options_json) + 1;
        for (const char *p = options_json; (p = strstr(p, "@D")); p += 2)
            n += strlen(dir);
        txt = calloc(1, n);
        size_t len = 0;
        for (const char *p = options_json; *p;) {
            if (p[0] == '@' && p[1] == 'D') {
                len += (size_t)snprintf(txt + len, n - len, "%s", dir);
                p += 2;
            } else {
                txt[len++] = *p++;
            }
        }
        json_t *o = json_loads(txt, 0, NULL);
        free(txt);
        if (!o)
            return "error: bad test json";
        json_object_set_new(conf, "options", o);
    }
    json_t *eff = NULL;
    sbx_err_t err = {0};
    if (dk_options(&eff, pconf, conf, &err) < 0) {
        snprintf(buf, sizeof(buf), "error: %s", err.msg);
        err_clear(&err);
        json_decref(conf);
        return buf;
    }
    json_decref(conf);
    int r = policy_check(pol, uid, pconf, eff, &err);
    json_decref(eff);
    if (r == 0)
        return "allowed";
    const char *reason = json_string_value(json_object_get(err.data, "reason"));
    snprintf(buf, sizeof(buf), "%s",
             err.code == SBX_E_PERMISSION && reason ? reason : "?");
    if (getenv("TEST_VERBOSE"))
        printf("      %s\n", err.msg);
    err_clear(&err);
    return buf;
}

#define ALLOWED(uid, o) (strcmp(verdict(uid, o), "allowed") == 0)
#define DENIED(uid, o) (strcmp(verdict(uid, o), "denied") == 0)
#define CEILING(uid, o) (strcmp(verdict(uid, o), "ceiling") == 0)

static int parse_fails(const char *yaml_json, const char *want)
{
    json_t *c = json_loads(yaml_json, 0, NULL);
    struct policy *p = NULL;
    sbx_err_t err = {0};
    int r = policy_parse(&p, c, &err);
    json_decref(c);
    int ok = r < 0 && err.code == SBX_E_PARAMS && err.msg && strstr(err.msg, want);
    if (!ok)
        printf("      parse: %s\n", err.msg ? err.msg : "(accepted)");
    err_clear(&err);
    policy_free(p);
    return ok;
}

/* config/examples/agent-service.yaml loads, and its policy (with the service
 * user "agents" replaced by nobody, who exists here) grants what it says. */
static void test_example(void)
{
    struct cfg_schema sch[8];
    size_t n = 0;
    for (size_t i = 0; sbx_providers[i] && n < 8; i++, n++) {
        sch[n].provider = sbx_providers[i]->name;
        sch[n].keys = sbx_providers[i]->config_keys;
    }
    struct sbx_config cfg;
    sbx_err_t err = {0};
    config_init_defaults(&cfg);
    int r = config_load_file(&cfg, "config/examples/agent-service.yaml", sch, n, &err);
    test_cond("example: agent-service.yaml loads", r == 0);
    if (r < 0) {
        printf("      %s\n", err.msg);
        err_clear(&err);
        config_deinit(&cfg);
        return;
    }
    json_t *dconf = config_provider(&cfg, "docker");
    json_t *pj = json_deep_copy(json_object_get(dconf, "policy"));
    json_t *rule = json_array_get(json_object_get(pj, "rules"), 0);
    json_object_set_new(rule, "users", json_pack("[s]", "nobody"));
    struct policy *ex = NULL;
    r = policy_parse(&ex, pj, &err);
    test_cond("example: its policy parses", r == 0);
    json_decref(pj);
    if (r == 0) {
        struct policy *keep = pol;
        json_t *keepc = pconf;
        pol = ex;
        pconf = dconf;
        test_cond("example: the service user may use the bridge network",
                  ALLOWED(65534, "{\"network\": \"bridge\"}"));
        test_cond(
            "example: memory 2g and pids 1024 for the service user",
            ALLOWED(
                65534,
                "{\"memory\": \"2g\", \"memory_swap\": \"2g\", \"pids_limit\": 1024}"));
        test_cond("example: memory 4g is above its ceiling",
                  CEILING(65534, "{\"memory\": \"4g\"}"));
        test_cond("example: another uid keeps network none",
                  DENIED(2000, "{\"network\": \"bridge\"}"));
        test_cond("example: the service user still cannot go privileged",
                  DENIED(65534, "{\"privileged\": true}"));
        pol = keep;
        pconf = keepc;
        policy_free(ex);
    }
    err_clear(&err);
    config_deinit(&cfg);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/sbx-policy.XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    char p[200], q[200];
    const char *subs[] = {"proj", "proj/sub", "ro", "other", "proj2"};
    for (size_t i = 0; i < 5; i++) {
        snprintf(p, sizeof(p), "%s/%s", dir, subs[i]);
        mkdir(p, 0755);
    }
    snprintf(p, sizeof(p), "%s/other", dir);
    snprintf(q, sizeof(q), "%s/proj/escape", dir);
    if (symlink(p, q) < 0)
        return 1;

    pconf = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:[s], s:[s], s:{s:s}, s:{s:{s:i, s:i}}}", "image",
        "sbx-test/busybox", "network", "none", "memory", "512m", "memory_swap", "512m",
        "pids_limit", 256, "cap_drop", "ALL", "security_opt", "no-new-privileges",
        "tmpfs", "/tmp", "rw,nosuid,nodev,size=64m", "ulimits", "nofile", "soft", 4096,
        "hard", 4096);
    json_object_set_new(pconf, "cpu_quota", json_integer(100000));
    char rules[2000];
    snprintf(rules, sizeof(rules),
             "{\"rules\": ["
             "{\"users\": [1000, \"root\"], \"network\": [\"bridge\", \"sbxnet\"],"
             " \"volumes\": [\"%s/proj:rw\", {\"path\": \"%s/ro\", \"mode\": \"ro\"}],"
             " \"memory\": \"1g\", \"pids_limit\": 512, \"images\": [\"sbx-test/\", "
             "\"python:3.12-slim\"], \"cap_add\": [\"NET_BIND_SERVICE\"],"
             " \"security_opt\": [\"seccomp=/etc/sbx-seccomp.json\"], \"tmpfs_options\": "
             "[\"exec\"], \"tmpfs_size\": \"256m\", \"cpu_quota\": 200000},"
             "{\"groups\": [\"nogroup\"], \"network\": [\"bridge\"]},"
             "{\"users\": [1001], \"privileged\": true, \"network\": [\"host\"],"
             " \"memory\": -1, \"runtime\": [\"runsc\"]}]}",
             dir, dir);
    json_t *pj = json_loads(rules, 0, NULL);
    sbx_err_t err = {0};
    int r = policy_parse(&pol, pj, &err);
    test_cond("parse: a policy with three rules", r == 0 && pol);
    if (r < 0) {
        printf("      %s\n", err.msg);
        return test_report();
    }
    json_decref(pj);

    /* the configured defaults and root */
    test_cond("allowed: no options at all (uid 2000, no rule)", ALLOWED(2000, NULL));
    test_cond("allowed: tightening (memory 256m, pids 100, cap_drop ALL+more)",
              ALLOWED(2000, "{\"memory\": \"256m\", \"pids_limit\": 100, \"cap_drop\": "
                            "[\"ALL\", \"NET_RAW\"]}"));
    test_cond("allowed: root may set anything (privileged, host, no limits)",
              ALLOWED(0,
                      "{\"privileged\": true, \"network\": \"host\", \"memory\": 0, "
                      "\"pids_limit\": -1, \"security_opt\": [\"seccomp=unconfined\"]}"));

    /* privileged and host namespaces */
    test_cond("denied: privileged without a rule",
              DENIED(1000, "{\"privileged\": true}"));
    test_cond("allowed: privileged for the uid a rule names",
              ALLOWED(1001, "{\"privileged\": true}"));
    test_cond("denied: network host without a rule",
              DENIED(1000, "{\"network\": \"host\"}"));
    test_cond("allowed: network host when a rule names it",
              ALLOWED(1001, "{\"network\": \"host\"}"));
    test_cond("denied: network container:x",
              DENIED(1000, "{\"network\": \"container:x\"}"));

    /* networks */
    test_cond("denied: network bridge for a uid with no rule",
              DENIED(2000, "{\"network\": \"bridge\"}"));
    test_cond("allowed: network bridge by a users rule",
              ALLOWED(1000, "{\"network\": \"bridge\"}"));
    test_cond("allowed: a named network by a rule",
              ALLOWED(1000, "{\"network\": \"sbxnet\"}"));
    test_cond("denied: a named network no rule lists",
              DENIED(1000, "{\"network\": \"othernet\"}"));
    test_cond("allowed: network bridge by a groups rule (nobody in nogroup)",
              ALLOWED(65534, "{\"network\": \"bridge\"}"));
    test_cond("allowed: a user named in a rule by name (root -> 0)", ALLOWED(0, NULL));

    /* bind mounts */
    test_cond("allowed: rw bind under a rw prefix",
              ALLOWED(1000, "{\"volumes\": [\"@D/proj/sub:/work\"]}"));
    test_cond("allowed: the rw prefix itself, read-only",
              ALLOWED(1000, "{\"volumes\": [\"@D/proj:/work:ro\"]}"));
    test_cond("allowed: ro bind under a ro prefix",
              ALLOWED(1000, "{\"volumes\": [\"@D/ro:/data:ro\"]}"));
    test_cond("denied: rw bind under a ro prefix",
              DENIED(1000, "{\"volumes\": [\"@D/ro:/data\"]}"));
    test_cond("denied: a host path under no prefix",
              DENIED(1000, "{\"volumes\": [\"@D/other:/x:ro\"]}"));
    test_cond("denied: .. out of the prefix",
              DENIED(1000, "{\"volumes\": [\"@D/proj/../other:/x:ro\"]}"));
    test_cond("denied: a symlink out of the prefix",
              DENIED(1000, "{\"volumes\": [\"@D/proj/escape:/x:ro\"]}"));
    test_cond("denied: a named volume", DENIED(1000, "{\"volumes\": [\"myvol:/data\"]}"));
    test_cond("denied: rshared propagation",
              DENIED(1000, "{\"volumes\": [\"@D/proj:/w:rshared\"]}"));
    test_cond("denied: any bind for a uid with no rule",
              DENIED(2000, "{\"volumes\": [\"@D/proj:/w:ro\"]}"));
    test_cond("denied: a prefix is a path, not a string prefix (proj2 is not under proj)",
              DENIED(1000, "{\"volumes\": [\"@D/proj2:/w:ro\"]}"));

    /* resource ceilings */
    test_cond("allowed: memory up to the rule's ceiling (1g)",
              ALLOWED(1000, "{\"memory\": \"1g\"}"));
    test_cond("ceiling: memory 2g above 1g", CEILING(1000, "{\"memory\": \"2g\"}"));
    test_cond("ceiling: memory above the configured 512m for a uid with no rule",
              CEILING(2000, "{\"memory\": \"1g\"}"));
    test_cond("ceiling: memory 0 (unlimited)", CEILING(2000, "{\"memory\": 0}"));
    test_cond("allowed: memory 0 itself where a rule says -1",
              ALLOWED(1001, "{\"memory\": 0}"));
    test_cond("ceiling: memory_swap -1", CEILING(2000, "{\"memory_swap\": -1}"));
    test_cond("allowed: memory_swap up to a rule's memory",
              ALLOWED(1000, "{\"memory\": \"1g\", \"memory_swap\": \"1g\"}"));
    test_cond("ceiling: memory_swap above it",
              CEILING(1000, "{\"memory\": \"1g\", \"memory_swap\": \"2g\"}"));
    test_cond("ceiling: pids_limit -1", CEILING(2000, "{\"pids_limit\": -1}"));
    test_cond("ceiling: pids_limit 0", CEILING(2000, "{\"pids_limit\": 0}"));
    test_cond("allowed: pids_limit 512 by a rule",
              ALLOWED(1000, "{\"pids_limit\": 512}"));
    test_cond("ceiling: pids_limit 300 with no rule",
              CEILING(2000, "{\"pids_limit\": 300}"));
    test_cond("ceiling: cpu_quota -1", CEILING(2000, "{\"cpu_quota\": -1}"));
    test_cond("ceiling: cpu_quota above the configured one",
              CEILING(2000, "{\"cpu_quota\": 150000}"));
    test_cond("allowed: cpu_quota up to a rule's",
              ALLOWED(1000, "{\"cpu_quota\": 200000}"));
    test_cond("ceiling: a shorter cpu_period is more CPU",
              CEILING(2000, "{\"cpu_period\": 50000}"));

    /* capabilities, security options */
    test_cond("allowed: cap_add a rule lists",
              ALLOWED(1000, "{\"cap_add\": [\"CAP_NET_BIND_SERVICE\"]}"));
    test_cond("denied: cap_add SYS_ADMIN",
              DENIED(1000, "{\"cap_add\": [\"SYS_ADMIN\"]}"));
    test_cond("denied: dropping the configured cap_drop",
              DENIED(1000, "{\"cap_drop\": []}"));
    test_cond(
        "denied: security_opt seccomp=unconfined",
        DENIED(2000,
               "{\"security_opt\": [\"no-new-privileges\", \"seccomp=unconfined\"]}"));
    test_cond(
        "denied: security_opt apparmor=unconfined",
        DENIED(2000,
               "{\"security_opt\": [\"no-new-privileges\", \"apparmor=unconfined\"]}"));
    test_cond(
        "denied: security_opt label=disable",
        DENIED(2000, "{\"security_opt\": [\"no-new-privileges\", \"label=disable\"]}"));
    test_cond("denied: dropping the configured no-new-privileges",
              DENIED(2000, "{\"security_opt\": []}"));
    test_cond("allowed: a security_opt entry a rule lists",
              ALLOWED(1000, "{\"security_opt\": [\"no-new-privileges\", "
                            "\"seccomp=/etc/sbx-seccomp.json\"]}"));
    test_cond("denied: runtime without a rule", DENIED(1000, "{\"runtime\": \"runsc\"}"));
    test_cond("allowed: runtime a rule lists", ALLOWED(1001, "{\"runtime\": \"runsc\"}"));

    /* tmpfs */
    test_cond("denied: tmpfs rw,exec,suid,size=100g",
              DENIED(2000, "{\"tmpfs\": {\"/tmp\": \"rw,exec,suid,size=100g\"}}"));
    test_cond("ceiling: tmpfs size=100g",
              CEILING(2000, "{\"tmpfs\": {\"/tmp\": \"rw,size=100g\"}}"));
    test_cond("ceiling: tmpfs without a size (unlimited)",
              CEILING(2000, "{\"tmpfs\": {\"/run\": \"rw\"}}"));
    test_cond("allowed: tmpfs rw,noexec,size=32m",
              ALLOWED(2000, "{\"tmpfs\": {\"/tmp\": \"rw,noexec,size=32m\"}}"));
    test_cond("allowed: tmpfs exec and a larger size by a rule",
              ALLOWED(1000, "{\"tmpfs\": {\"/tmp\": \"rw,exec,size=256m\"}}"));
    test_cond("denied: tmpfs suid even with a rule for exec",
              DENIED(1000, "{\"tmpfs\": {\"/tmp\": \"rw,suid,size=32m\"}}"));

    /* ulimits */
    test_cond(
        "allowed: nofile below the configured",
        ALLOWED(2000, "{\"ulimits\": {\"nofile\": {\"soft\": 1024, \"hard\": 2048}}}"));
    test_cond(
        "ceiling: nofile above the configured",
        CEILING(2000, "{\"ulimits\": {\"nofile\": {\"soft\": 8192, \"hard\": 8192}}}"));
    test_cond("denied: a ulimit the config does not set",
              DENIED(2000, "{\"ulimits\": {\"memlock\": {\"soft\": -1, \"hard\": -1}}}"));

    /* images */
    test_cond("denied: image sha256:e (an id prefix)",
              DENIED(2000, "{\"image\": \"sha256:e\"}"));
    test_cond("denied: image by bare hex id prefix",
              DENIED(2000, "{\"image\": \"9b5089ab\"}"));
    test_cond("denied: image by digest",
              DENIED(2000, "{\"image\": \"busybox@sha256:0123abcd\"}"));
    test_cond("allowed: any named image for a uid whose rules list none",
              ALLOWED(2000, "{\"image\": \"alpine:3\"}"));
    test_cond("allowed: an image under a granted prefix",
              ALLOWED(1000, "{\"image\": \"sbx-test/noshell\"}"));
    test_cond("allowed: a granted exact image",
              ALLOWED(1000, "{\"image\": \"python:3.12-slim\"}"));
    test_cond("denied: an image outside the uid's granted images",
              DENIED(1000, "{\"image\": \"alpine:3\"}"));

    /* the configured user */
    json_object_set_new(pconf, "user", json_string("65534:65534"));
    test_cond("denied: user root when the config names a user",
              DENIED(2000, "{\"user\": \"0\"}"));
    test_cond("allowed: another non-root user", ALLOWED(2000, "{\"user\": \"1000\"}"));
    json_object_del(pconf, "user");
    json_object_set_new(pconf, "readonly_rootfs", json_true());
    test_cond("denied: readonly_rootfs off when configured on",
              DENIED(2000, "{\"readonly_rootfs\": false}"));
    json_object_del(pconf, "readonly_rootfs");

    /* the grants of a uid, merged */
    json_t *g = policy_grants(pol, 1000);
    test_cond("grants: merged network list of uid 1000",
              json_array_size(json_object_get(g, "network")) == 2);
    json_decref(g);

    /* parse errors */
    test_cond(
        "parse: unknown key",
        parse_fails("{\"rules\": [{\"users\": [1], \"netwrk\": []}]}", "unknown key"));
    test_cond(
        "parse: unknown user",
        parse_fails("{\"rules\": [{\"users\": [\"no-such-user-x\"]}]}", "unknown user"));
    test_cond("parse: unknown group",
              parse_fails("{\"rules\": [{\"groups\": [\"no-such-group-x\"]}]}",
                          "unknown group"));
    test_cond("parse: a rule without users or groups",
              parse_fails("{\"rules\": [{\"network\": [\"bridge\"]}]}", "needs users"));
    test_cond("parse: a relative volume prefix",
              parse_fails("{\"rules\": [{\"users\": [1], \"volumes\": [\"srv\"]}]}",
                          "volumes"));
    test_cond("parse: a memory ceiling of 0",
              parse_fails("{\"rules\": [{\"users\": [1], \"memory\": 0}]}", "memory"));
    test_cond("parse: rules must be a list",
              parse_fails("{\"rules\": {}}", "expected a list"));
    test_cond("parse: unknown top-level key",
              parse_fails("{\"rulez\": []}", "unknown key"));
    struct policy *empty = NULL;
    test_cond("parse: no policy is no rules",
              policy_parse(&empty, NULL, &err) == 0 && empty);
    policy_free(empty);

    test_example();
    policy_free(pol);
    json_decref(pconf);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("      cleanup of %s failed\n", dir);
    return test_report();
}
