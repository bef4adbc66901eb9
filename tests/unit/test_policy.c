/*
 * test_policy.c - daemon/providers/docker/policy.c case by case: what a uid may ask for
 * (allowed), what needs a rule it does not have (denied), and what is above a ceiling.
 * The effective options come from the Docker provider's own normalisation
 * (dkspec_options), so the cases see what a real create would check.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "providers/docker/policy.h"
#include "core/provider.h"
#include "providers/docker/docker_int.h"
#include "sbx_proto.h"
#include "testhelp.h"

static char dir[64];
static json_t *pconf;
static struct policy *pol;

/* Evaluates options (a JSON text, may be NULL) for uid: 0 allowed, else the
 * reason ("denied"/"ceiling"), or "error: ..." when dkspec_options refused them. */
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
    if (dkspec_options(&eff, pconf, conf, &err) < 0) {
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

/* ---- secdock (issue 16): reserved names, users by resolution, tmpfs sizes,
 * a required runtime, disk ceilings, the built-in defaults ---------------------- */

static int reserved_refused(const char *opts_json, const char *want_option)
{
    json_t *o = json_loads(opts_json, 0, NULL);
    sbx_err_t err = {0};
    int r = policy_reserved(o, &err);
    const char *opt = json_string_value(json_object_get(err.data, "option"));
    const char *why = json_string_value(json_object_get(err.data, "reason"));
    int ok = r < 0 && err.code == SBX_E_PERMISSION && opt && !strcmp(opt, want_option) &&
             why && !strcmp(why, "reserved");
    if (!ok)
        printf("      %s -> %s\n", opts_json, err.msg ? err.msg : "(accepted)");
    err_clear(&err);
    json_decref(o);
    return ok;
}

static int reserved_ok(const char *opts_json)
{
    json_t *o = json_loads(opts_json, 0, NULL);
    sbx_err_t err = {0};
    int r = policy_reserved(o, &err);
    if (r < 0)
        printf("      %s -> %s\n", opts_json, err.msg);
    err_clear(&err);
    json_decref(o);
    return r == 0;
}

static const char test_passwd[] = "root:x:0:0:root:/root:/bin/sh\n"
                                  "daemon:x:1:1:daemon:/usr/sbin:/bin/sh\n"
                                  "nobody:x:65534:65534:nobody:/:/bin/false\n"
                                  "op:x:11:0:operator:/root:/bin/sh\n"
                                  "app:x:1000:1000::/home/app:/bin/sh\n";
static const char test_group[] = "root:x:0:daemon\n"
                                 "daemon:x:1:\n"
                                 "nogroup:x:65534:\n"
                                 "app:x:1000:\n"
                                 "wheel:x:10:app\n";

/* Resolved against the image files above: "uid:gid" and the supplementary
 * groups ("+g"), "error" when the runtime would refuse it, "refused" when
 * the policy would (root anywhere). */
static const char *resolved(const char *spec)
{
    static char buf[200];
    struct policy_user u;
    char why[200] = "";
    policy_user_spell(spec, &u);
    if (policy_user_resolve(&u, test_passwd, strlen(test_passwd), test_group,
                            strlen(test_group), why, sizeof(why)) < 0)
        return "error";
    sbx_err_t err = {0};
    int bad = policy_user_ids_check(spec, &u, &err) < 0;
    err_clear(&err);
    int n =
        snprintf(buf, sizeof(buf), "%s%lld:%lld", bad ? "refused " : "", u.ruid, u.rgid);
    for (int i = 0; i < u.nsgids && n < 180; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "+%lld", u.sgids[i]);
    return buf;
}

/* Item 1: reserved label keys and names, for everyone. */
static void secdock_reserved(void)
{
    test_cond("reserved: label sbxd.pool refused",
              reserved_refused("{\"labels\": {\"sbxd.pool\": \"x\"}}", "labels"));
    test_cond("reserved: label sbxd.owner as k=v list refused",
              reserved_refused("{\"labels\": [\"sbxd.owner=0\"]}", "labels"));
    test_cond("reserved: label sbxd.id in a k=v,k=v string refused",
              reserved_refused("{\"labels\": \"a=b,sbxd.id=x\"}", "labels"));
    test_cond("reserved: label SBXD.Claim (any case) refused",
              reserved_refused("{\"labels\": {\"SBXD.Claim\": \"x\"}}", "labels"));
    test_cond("reserved: name sbxp.<uid>.<id> refused",
              reserved_refused("{\"name\": \"sbxp.65533.planted\"}", "name"));
    test_cond("reserved: name /sbxp.0.x refused",
              reserved_refused("{\"name\": \"/sbxp.0.x\"}", "name"));
    test_cond("reserved: name sbxpool-warm-1 refused",
              reserved_refused("{\"name\": \"sbxpool-warm-1\"}", "name"));
    test_cond("reserved: name sbx-other (a default name) refused",
              reserved_refused("{\"name\": \"sbx-other\"}", "name"));
    test_cond("reserved: name sbxd-agent-x refused",
              reserved_refused("{\"name\": \"sbxd-agent-x\"}", "name"));
    test_cond("reserved: other labels and names pass",
              reserved_ok("{\"name\": \"mybox\", \"labels\": {\"org.x\": \"1\", "
                          "\"sbxdx\": \"2\"}}") &&
                  reserved_ok(NULL));
}

/* Item 2: root in every spelling, with a configured user (sets pol and pconf
 * for the steps up to secdock_ceilings). */
static void secdock_root_user(void)
{
    sbx_err_t err = {0};
    pconf = json_pack("{s:s, s:s, s:s, s:{s:s}}", "image", "sbx-test/busybox", "user",
                      "65534:65534", "disk", "1g", "tmpfs", "/tmp",
                      "rw,nosuid,nodev,size=64m");
    pol = NULL;
    json_t *pj = json_loads("{\"rules\": [{\"users\": [1200], \"runtime_required\": "
                            "\"runsc\"}, {\"users\": [1300], \"disk\": \"8g\"}]}",
                            0, NULL);
    test_cond("parse: runtime_required and disk in rules",
              policy_parse(&pol, pj, &err) == 0);
    err_clear(&err);
    json_decref(pj);
    static const char *const roots[] = {"0",       "00",      "+0",          "-0",
                                        "0000:0",  "65534:0", ":65534",      "0:65534",
                                        "1000:00", "1000:+0", "000000000000"};
    for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
        char o[100], name[120];
        snprintf(o, sizeof(o), "{\"user\": \"%s\"}", roots[i]);
        snprintf(name, sizeof(name), "user: \"%s\" refused (root by spelling)", roots[i]);
        test_cond(name, DENIED(2000, o));
    }
    test_cond("user: \"\" is the configured user, allowed",
              ALLOWED(2000, "{\"user\": \"\"}"));
    json_t *eff = NULL;
    json_t *conf = json_pack("{s:{s:s}}", "options", "user", "");
    dkspec_options(&eff, pconf, conf, &err);
    test_cond(
        "user: \"\" becomes 65534:65534, not the image's USER",
        !strcmp(json_string_value(json_object_get(eff, "user")) ?: "", "65534:65534"));
    json_decref(eff);
    json_decref(conf);
    test_cond("user: a number that is not a string is refused",
              strncmp(verdict(2000, "{\"user\": 0}"), "error", 5) == 0);
    test_cond("user: 1000:1000 allowed", ALLOWED(2000, "{\"user\": \"1000:1000\"}"));
    test_cond("user: root may be root", ALLOWED(0, "{\"user\": \"0\"}"));
}

/* Users resolved as the runtime resolves them from the image's files. */
static void secdock_resolve(void)
{
    struct policy_user u;
    test_cond("spell: \"1000:1000\" needs no image, \"app\" and \"1000\" do",
              policy_user_spell("1000:1000", &u) == 1 &&
                  policy_user_spell("app", &u) == 0 &&
                  policy_user_spell("1000", &u) == 0);
    test_eq_str("resolve: root is 0:0 (refused)", resolved("root"), "refused 0:0");
    test_eq_str("resolve: nobody is 65534:65534", resolved("nobody"), "65534:65534");
    test_eq_str("resolve: app is 1000:1000 + wheel", resolved("app"), "1000:1000+10");
    test_eq_str("resolve: 65533 (no passwd entry) gets gid 0 (refused)",
                resolved("65533"), "refused 65533:0");
    test_eq_str("resolve: op has primary gid 0 (refused)", resolved("op"),
                "refused 11:0");
    test_eq_str("resolve: daemon is in group root (supplementary 0, refused)",
                resolved("daemon"), "refused 1:1+0");
    test_eq_str("resolve: nobody:root is gid 0 (refused)", resolved("nobody:root"),
                "refused 65534:0");
    test_eq_str("resolve: 65534:nogroup", resolved("65534:nogroup"), "65534:65534");
    test_eq_str("resolve: an unknown name is the runtime's error", resolved("nosuch"),
                "error");
    test_eq_str("resolve: an unknown group name is the runtime's error",
                resolved("app:nosuch"), "error");
    test_eq_str("resolve: 1000:1000 explicit (no supplementary groups)",
                resolved("1000:1000"), "1000:1000");
    /* read as the runtime reads them: trimmed lines, no comments, a field
     * that is not a number is 0, missing fields are 0 */
    static const struct {
        const char *spec, *passwd, *group, *want;
    } odd[] = {
        {"app", "  app:x:0:0::/:/bin/sh\napp:x:1000:1000::/:/bin/sh\n", "",
         "refused 0:0"},
        {"app", "app:x:abc:1000\napp:x:1000:1000\n", "", "refused 0:1000"},
        {"app", "app\napp:x:1000:1000\n", "", "refused 0:0"},
        {"#x", "#x:x:1000:1000\n", "#g:x:zz:#x\n", "refused 1000:1000+0"},
        {"app", "app:x:1000:1000\n", "\twheel:x:0:app \r\n", "refused 1000:1000+0"},
        {"app", "app:x:1000:1000\n",
         "big:x:0:a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q,r,s,t,u,v,w,"
         "x,y,z,aa,bb,cc,dd,ee,ff,gg,hh,ii,jj,kk,ll,mm,nn,oo,pp,"
         "qq,rr,ss,tt,uu,vv,ww,xx,yy,zz,app\n",
         "refused 1000:1000+0"},
        {"app",
         "\xc2\xa0"
         "app:x:0:0\napp:x:1000:1000\n",
         "", "error"},
    };
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        struct policy_user o;
        char w[200], name[160], got[200];
        policy_user_spell(odd[i].spec, &o);
        if (policy_user_resolve(&o, odd[i].passwd, strlen(odd[i].passwd), odd[i].group,
                                strlen(odd[i].group), w, sizeof(w)) < 0) {
            snprintf(got, sizeof(got), "error");
        } else {
            sbx_err_t e2 = {0};
            int bad = policy_user_ids_check(odd[i].spec, &o, &e2) < 0;
            err_clear(&e2);
            int n = snprintf(got, sizeof(got), "%s%lld:%lld", bad ? "refused " : "",
                             o.ruid, o.rgid);
            for (int k = 0; k < o.nsgids && n < 180; k++)
                n += snprintf(got + n, sizeof(got) - (size_t)n, "+%lld", o.sgids[k]);
        }
        snprintf(name, sizeof(name), "resolve: odd image files, case %zu (%s)", i,
                 odd[i].want);
        test_eq_str(name, got, odd[i].want);
    }
    char longu[300];
    memset(longu, 'a', 200);
    longu[200] = '\0';
    char lo[400];
    snprintf(lo, sizeof(lo), "{\"user\": \"%s\"}", longu);
    test_cond("user: a 200-character user is refused", DENIED(2000, lo));
    struct policy_user e;
    policy_user_spell("app", &e);
    char why[100];
    test_cond("resolve: no /etc/passwd: a name is an error",
              policy_user_resolve(&e, NULL, 0, NULL, 0, why, sizeof(why)) < 0);
}

/* Items 7 (tmpfs), 15 (a required runtime) and 5 (disk); frees pol and pconf. */
static void secdock_ceilings(void)
{
    /* item 7 (tmpfs): every size= counts */
    test_cond("tmpfs: size=1m,size=100g refused (the last size wins in the kernel)",
              DENIED(2000, "{\"tmpfs\": {\"/tmp\": \"rw,size=1m,size=100g\"}}"));
    test_cond(
        "tmpfs: nr_blocks= refused",
        DENIED(2000, "{\"tmpfs\": {\"/tmp\": \"rw,size=1m,nr_blocks=100000000\"}}"));
    test_cond("tmpfs: size=100g above the ceiling",
              CEILING(2000, "{\"tmpfs\": {\"/tmp\": \"rw,size=100g\"}}"));
    test_cond("tmpfs: size=32m allowed",
              ALLOWED(2000, "{\"tmpfs\": {\"/tmp\": \"rw,nosuid,size=32m\"}}"));

    /* item 15 (policy): a required runtime */
    test_eq_str("runtime_required: the rule's runtime for uid 1200",
                policy_required_runtime(pol, 1200) ?: "(none)", "runsc");
    test_cond("runtime_required: none for other uids and root",
              !policy_required_runtime(pol, 2000) && !policy_required_runtime(pol, 0));
    test_eq_str(
        "runtime_required: no runtime is refused by the check (d_sb_start sets it)",
        verdict(1200, NULL), "required");
    test_eq_str("runtime_required: runc is refused",
                verdict(1200, "{\"runtime\": \"runc\"}"), "required");
    test_cond("runtime_required: runsc allowed (no other grant needed)",
              ALLOWED(1200, "{\"runtime\": \"runsc\"}"));
    test_cond("runtime_required: runsc still needs a grant for others",
              DENIED(2000, "{\"runtime\": \"runsc\"}"));

    /* item 5: disk ceilings */
    test_cond("disk: 512m allowed", ALLOWED(2000, "{\"disk\": \"512m\"}"));
    test_cond("disk: 2g above the configured 1g", CEILING(2000, "{\"disk\": \"2g\"}"));
    test_cond("disk: 0 (unlimited) above the ceiling", CEILING(2000, "{\"disk\": 0}"));
    test_cond("disk: a rule raises it to 8g", ALLOWED(1300, "{\"disk\": \"8g\"}"));
    test_cond("disk: not a size is a params error",
              strncmp(verdict(2000, "{\"disk\": \"lots\"}"), "error", 5) == 0);
    policy_free(pol);
    json_decref(pconf);
}

/* Item 13: no config at all = the hardened ceilings. */
static void secdock_no_config(void)
{
    sbx_err_t err = {0};
    pconf = json_object();
    dks_defaults(pconf);
    policy_parse(&pol, NULL, &err);
    test_cond("defaults: pids_limit -1 refused with no config",
              CEILING(2000, "{\"pids_limit\": -1}"));
    test_cond("defaults: memory 0 refused with no config",
              CEILING(2000, "{\"memory\": 0}"));
    test_cond("defaults: network bridge refused with no config",
              DENIED(2000, "{\"network\": \"bridge\"}"));
    test_cond("defaults: dropping cap_drop ALL refused with no config",
              DENIED(2000, "{\"cap_drop\": []}"));
    test_cond("defaults: dropping no-new-privileges refused with no config",
              DENIED(2000, "{\"security_opt\": []}"));
    test_cond("defaults: a 1g /tmp refused with no config",
              CEILING(2000, "{\"tmpfs\": {\"/tmp\": \"rw,size=1g\"}}"));
    test_cond("defaults: a disk of 100g refused with no config",
              CEILING(2000, "{\"disk\": \"100g\"}"));
    test_cond("defaults: no options at all allowed", ALLOWED(2000, NULL));
    json_t *o = json_object_get(pconf, "memory");
    test_cond("defaults: a value the file sets stays (memory 0 = the operator's)",
              json_is_string(o));
    json_t *own = json_pack("{s:s}", "memory", "0");
    dks_defaults(own);
    test_eq_str("defaults: the file's memory 0 is kept",
                json_string_value(json_object_get(own, "memory")) ?: "", "0");
    json_decref(own);
    policy_free(pol);
    json_decref(pconf);
}

/* The configured defaults and root, privileged and host namespaces, networks. */
static void rules_namespaces_networks(void)
{
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
}

/* Bind mounts. */
static void rules_binds(void)
{
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
}

/* Resource ceilings. */
static void rules_ceilings(void)
{
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
}

/* Capabilities, security options, tmpfs, ulimits. */
static void rules_caps_tmpfs_ulimits(void)
{
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
}

/* Images, the configured user, a uid's merged grants. */
static void rules_images_user(void)
{
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
}

/* Parse errors. */
static void rules_parse_errors(void)
{
    sbx_err_t err = {0};
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
}

static void test_secdock(void)
{
    struct policy *keep = pol;
    json_t *keepc = pconf;
    secdock_reserved();
    secdock_root_user();
    secdock_resolve();
    secdock_ceilings();
    secdock_no_config();
    pol = keep;
    pconf = keepc;
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

    rules_namespaces_networks();
    rules_binds();
    rules_ceilings();
    rules_caps_tmpfs_ulimits();
    rules_images_user();
    rules_parse_errors();
    test_example();
    test_secdock();
    policy_free(pol);
    json_decref(pconf);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        printf("      cleanup of %s failed\n", dir);
    return test_report();
}
