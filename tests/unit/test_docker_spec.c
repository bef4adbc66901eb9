/*
 * test_docker_spec.c - daemon/providers/docker/docker_spec.c, the Docker
 * provider's pure part: options in three layers (config, request, top-level
 * create params) normalised into one object, each malformed option refused
 * with -32602 naming options.<key>, the container create body built from
 * them (owner labels sbxd writes last, engine logging off, limits only when
 * set), reconnect warnings from an inspect, names, image refs, sizes, env
 * conversion and the in-memory tar the agent is uploaded with.
 */
#include <stdlib.h>
#include <string.h>

#include "providers/docker/docker_int.h"
#include "sbx_proto.h"
#include "testhelp.h"

static json_t *J(const char *text)
{
    json_t *v = text ? json_loads(text, 0, NULL) : json_object();
    if (!v)
        printf("      bad test JSON: %s\n", text);
    return v;
}

/* dkspec_options of sbconf under config pconf (JSON texts; NULL = {}). */
static json_t *opts(const char *pconf, const char *sbconf, sbx_err_t *err)
{
    json_t *p = J(pconf), *s = J(sbconf), *o = NULL;
    if (dkspec_options(&o, p, s, err) < 0)
        o = NULL;
    json_decref(p);
    json_decref(s);
    return o;
}

/* 1 if sbconf is refused with code, its data naming param (NULL: any). */
static int refused(const char *pconf, const char *sbconf, int code, const char *param)
{
    sbx_err_t err = {0};
    json_t *o = opts(pconf, sbconf, &err);
    const char *p = json_string_value(json_object_get(err.data, "param"));
    int ok = !o && err.code == code && err.msg && (!param || (p && !strcmp(p, param)));
    if (!ok)
        printf("      %s: code %d, param %s, msg %s\n", sbconf, err.code, p ? p : "-",
               err.msg ? err.msg : "-");
    json_decref(o);
    err_clear(&err);
    return ok;
}

static const char *S(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}
static long long I(json_t *o, const char *k)
{
    return json_integer_value(json_object_get(o, k));
}

static void test_defaults_and_layers(void)
{
    sbx_err_t err = {0};
    json_t *o = opts(NULL, NULL, &err);
    test_cond("no options: the safe defaults",
              o && !strcmp(S(o, "image"), DK_DEFAULT_IMAGE) &&
                  !strcmp(S(o, "network"), "none") &&
                  json_is_false(json_object_get(o, "privileged")) &&
                  json_is_false(json_object_get(o, "readonly_rootfs")) &&
                  !strcmp(S(o, "working_dir"), "/workspace") &&
                  json_array_size(json_object_get(o, "volumes")) == 0 &&
                  !json_object_get(o, "user") && !json_object_get(o, "command"));
    json_decref(o);
    o = opts("{\"image\":\"cfg:1\",\"network\":\"bridge\",\"memory\":\"1g\","
             "\"user\":\"1000:1000\"}",
             "{\"options\":{\"memory\":\"512m\",\"image\":\"opt:1\"}}", &err);
    test_cond("a request option beats the config's, the config fills the rest",
              o && !strcmp(S(o, "image"), "opt:1") && I(o, "memory") == 512 << 20 &&
                  !strcmp(S(o, "network"), "bridge") &&
                  !strcmp(S(o, "user"), "1000:1000"));
    json_decref(o);
    o = opts("{\"image\":\"cfg:1\"}",
             "{\"image\":\"top:2\",\"working_dir\":\"/top\",\"env\":{\"A\":\"top\"},"
             "\"options\":{\"image\":\"opt:1\",\"working_dir\":\"/opt\","
             "\"env\":[\"A=opt\",\"B=opt\"]}}",
             &err);
    json_t *env = json_object_get(o, "env");
    test_cond("top-level image, working_dir and env beat options",
              o && !strcmp(S(o, "image"), "top:2") &&
                  !strcmp(S(o, "working_dir"), "/top") && !strcmp(S(env, "A"), "top") &&
                  !strcmp(S(env, "B"), "opt"));
    json_decref(o);
    o = opts("{\"labels\":{\"site\":\"x\"}}", "{\"options\":{\"labels\":\"team=y\"}}",
             &err);
    json_t *l = json_object_get(o, "labels");
    test_cond("labels add up: the config's and the request's",
              o && !strcmp(S(l, "site"), "x") && !strcmp(S(l, "team"), "y"));
    json_decref(o);
    o = opts("{\"user\":\"1000\"}", "{\"options\":{\"user\":\"2000\"}}", &err);
    test_eq_str("a request's user beats the config's", S(o, "user"), "2000");
    json_decref(o);
}

static void test_shapes(void)
{
    sbx_err_t err = {0};
    json_t *o = opts(NULL,
                     "{\"options\":{\"command\":\"sleep 1\",\"privileged\":\"yes\","
                     "\"cap_drop\":\"ALL,NET_RAW\",\"pids_limit\":\"100\","
                     "\"memory_swap\":\"-1\",\"ulimits\":\"nofile=1024:2048\","
                     "\"tmpfs\":\"/tmp:size=64m\",\"volumes\":{\"named\":\"/data\"},"
                     "\"exec_mode\":\"docker-exec\"}}",
                     &err);
    json_t *cmd = json_object_get(o, "command"), *ul = json_object_get(o, "ulimits");
    test_cond("a command string runs through /bin/sh -c",
              json_array_size(cmd) == 3 &&
                  !strcmp(json_string_value(json_array_get(cmd, 2)), "sleep 1"));
    test_cond("command-line shapes: yes, a,b lists, numbers in strings, -1 swap",
              o && json_is_true(json_object_get(o, "privileged")) &&
                  json_array_size(json_object_get(o, "cap_drop")) == 2 &&
                  I(o, "pids_limit") == 100 && I(o, "memory_swap") == -1);
    test_cond("ulimits name=soft:hard become {Name, Soft, Hard}",
              json_array_size(ul) == 1 &&
                  !strcmp(S(json_array_get(ul, 0), "Name"), "nofile") &&
                  I(json_array_get(ul, 0), "Soft") == 1024 &&
                  I(json_array_get(ul, 0), "Hard") == 2048);
    test_eq_str("tmpfs path:opts becomes {path: opts}",
                S(json_object_get(o, "tmpfs"), "/tmp"), "size=64m");
    test_eq_str("a volumes map becomes SRC:DST",
                json_string_value(json_array_get(json_object_get(o, "volumes"), 0)),
                "named:/data");
    test_eq_str("exec_mode docker-exec is kept", S(o, "exec_mode"), "docker-exec");
    json_decref(o);
    o = opts(NULL, "{\"env\":{\"A\":\"1\",\"GONE\":null}}", &err);
    test_cond("env nulls (sandbox.set_env removals) do not reach the container",
              o && S(json_object_get(o, "env"), "A") &&
                  !json_object_get(json_object_get(o, "env"), "GONE"));
    json_decref(o);
}

static void test_refusals(void)
{
    test_cond("options that is not an object: -32602 options",
              refused(NULL, "{\"options\":[1]}", SBX_E_PARAMS, "options"));
    test_cond("an unknown option: -32602 naming it",
              refused(NULL, "{\"options\":{\"nope\":1}}", SBX_E_PARAMS, "options.nope"));
    test_cond("an empty command string is refused",
              refused(NULL, "{\"options\":{\"command\":\"\"}}", SBX_E_PARAMS,
                      "options.command"));
    test_cond("a command list of non-strings is refused",
              refused(NULL, "{\"options\":{\"command\":[1]}}", SBX_E_PARAMS,
                      "options.command"));
    test_cond("privileged: maybe is refused",
              refused(NULL, "{\"options\":{\"privileged\":\"maybe\"}}", SBX_E_PARAMS,
                      "options.privileged"));
    test_cond("memory -1 is refused (only memory_swap may be unlimited)",
              refused(NULL, "{\"options\":{\"memory\":\"-1\"}}", SBX_E_PARAMS,
                      "options.memory"));
    test_cond(
        "a size with an unknown unit is refused",
        refused(NULL, "{\"options\":{\"disk\":\"10x\"}}", SBX_E_PARAMS, "options.disk"));
    test_cond("an integer option that is not one is refused",
              refused(NULL, "{\"options\":{\"cpu_quota\":\"abc\"}}", SBX_E_PARAMS,
                      "options.cpu_quota"));
    test_cond("an integer below -1 is refused",
              refused(NULL, "{\"options\":{\"pids_limit\":-2}}", SBX_E_PARAMS,
                      "options.pids_limit"));
    test_cond("a list with a non-string is refused",
              refused(NULL, "{\"options\":{\"cap_add\":[1]}}", SBX_E_PARAMS,
                      "options.cap_add"));
    test_cond("a ulimit that is not a number is refused",
              refused(NULL, "{\"options\":{\"ulimits\":\"nofile=abc\"}}", SBX_E_PARAMS,
                      "options.ulimits"));
    test_cond("a tmpfs path that is not absolute is refused",
              refused(NULL, "{\"options\":{\"tmpfs\":\"tmp\"}}", SBX_E_PARAMS,
                      "options.tmpfs"));
    test_cond("a volume with a relative destination is refused",
              refused(NULL, "{\"options\":{\"volumes\":[\"a:b\"]}}", SBX_E_PARAMS,
                      "options.volumes"));
    test_cond("a missing host path on a local engine is refused",
              refused(NULL, "{\"options\":{\"volumes\":[\"/nonexistent-sbx-22:/d\"]}}",
                      SBX_E_PARAMS, "options.volumes"));
    sbx_err_t err = {0};
    json_t *o = opts("{\"host\":\"tcp://127.0.0.1:2375\"}",
                     "{\"options\":{\"volumes\":[\"/nonexistent-sbx-22:/d\"]}}", &err);
    test_cond("on a remote engine the host path is the engine's to check", o != NULL);
    json_decref(o);
    test_cond(
        "a relative working_dir is refused",
        refused(NULL, "{\"working_dir\":\"rel\"}", SBX_E_PARAMS, "options.working_dir"));
    test_cond(
        "a user that is not a string is refused",
        refused(NULL, "{\"options\":{\"user\":1000}}", SBX_E_PARAMS, "options.user"));
    test_cond("a label that is not k=v is refused",
              refused(NULL, "{\"options\":{\"labels\":[\"novalue\"]}}", SBX_E_PARAMS,
                      "options.labels"));
    test_cond("an unknown exec_mode is refused",
              refused(NULL, "{\"options\":{\"exec_mode\":\"ssh\"}}", SBX_E_PARAMS,
                      "options.exec_mode"));
    test_cond("a malformed egress is refused",
              refused(NULL, "{\"options\":{\"egress\":[\"x\"]}}", SBX_E_PARAMS,
                      "options.egress"));
    test_cond("egress beyond the config's ceiling is -32003",
              refused(NULL, "{\"options\":{\"egress\":{\"allow\":[\"example.com\"]}}}",
                      SBX_E_PERMISSION, NULL));
}

static void test_create_body(void)
{
    sbx_err_t err = {0};
    json_t *o = opts(
        NULL,
        "{\"env\":{\"K\":\"V\"},\"options\":{\"command\":[\"run\",\"x\"],"
        "\"memory\":\"256m\",\"cpu_quota\":0,\"cpu_shares\":0,\"labels\":{\"sbxd.owner\":\"0\","
        "\"sbxd.id\":\"forged\",\"mine\":\"1\"}}}",
        &err);
    json_t *b = NULL, *extra = json_pack("{s:s}", "sbxd.socket", "/run/s");
    test_eq_int("a create body is built",
                dkspec_create_body(&b, o, "sb-1", 1234, "/.sbx/sbx-init", extra, &err),
                0);
    json_t *ep = json_object_get(b, "Entrypoint"), *lab = json_object_get(b, "Labels");
    json_t *hc = json_object_get(b, "HostConfig");
    test_cond("the agent is the entrypoint, the command after --",
              json_array_size(ep) == 4 &&
                  !strcmp(json_string_value(json_array_get(ep, 0)), "/.sbx/sbx-init") &&
                  !strcmp(json_string_value(json_array_get(ep, 1)), "--") &&
                  !json_object_get(b, "Cmd"));
    test_cond("ownership labels are sbxd's: a request cannot forge them",
              !strcmp(S(lab, "sbxd.owner"), "1234") &&
                  !strcmp(S(lab, "sbxd.id"), "sb-1") && !strcmp(S(lab, "mine"), "1") &&
                  !strcmp(S(lab, "sbxd.socket"), "/run/s"));
    test_eq_str("env goes as K=V",
                json_string_value(json_array_get(json_object_get(b, "Env"), 0)), "K=V");
    test_cond("limits set are passed; unset or 0 left out, but a CpuQuota of 0 is sent",
              I(hc, "Memory") == 256 << 20 && !json_object_get(hc, "PidsLimit") &&
                  !json_object_get(hc, "CpuShares") &&
                  json_is_integer(json_object_get(hc, "CpuQuota")) &&
                  !json_object_get(hc, "Runtime"));
    test_cond("no engine logs, no docker init, stdin open, no tty",
              !strcmp(S(json_object_get(hc, "LogConfig"), "Type"), "none") &&
                  json_is_false(json_object_get(hc, "Init")) &&
                  json_is_true(json_object_get(b, "OpenStdin")) &&
                  json_is_false(json_object_get(b, "Tty")) &&
                  !strcmp(S(hc, "NetworkMode"), "none"));
    json_decref(b);
    dkspec_create_body(&b, o, "sb-1", 1234, NULL, NULL, &err);
    test_cond("without the agent the command is Cmd",
              !json_object_get(b, "Entrypoint") &&
                  json_array_size(json_object_get(b, "Cmd")) == 2);
    json_decref(b);
    json_decref(extra);
    json_decref(o);
}

static void test_warnings(void)
{
    sbx_err_t err = {0};
    json_t *o =
        opts(NULL, "{\"options\":{\"cap_drop\":[\"ALL\"],\"user\":\"1000\"}}", &err);
    json_t *same = J("{\"HostConfig\":{\"Privileged\":false,\"ReadonlyRootfs\":false,"
                     "\"NetworkMode\":\"none\",\"CapDrop\":[\"CAP_all\"],\"CapAdd\":null,"
                     "\"SecurityOpt\":null},\"Config\":{\"User\":\"1000\"}}");
    json_t *w = dkspec_warnings(o, same);
    test_cond("a container as asked: no warnings (CAP_ prefix and case aside)",
              w == NULL);
    json_decref(w);
    json_object_set_new(json_object_get(same, "HostConfig"), "Privileged", json_true());
    json_object_set_new(json_object_get(same, "Config"), "User", json_string("root"));
    w = dkspec_warnings(o, same);
    char *t = w ? json_dumps(w, 0) : NULL;
    test_cond("a privileged container and another user are both reported",
              json_array_size(w) == 2 && t && strstr(t, "privileged") &&
                  strstr(t, "user"));
    free(t);
    json_decref(w);
    json_decref(same);
    json_decref(o);
}

static void test_small_parts(void)
{
    json_t *v = json_string("512m");
    test_eq_int("512m", dkspec_parse_size(v), 512 << 20);
    json_decref(v);
    v = json_string("1.5gb");
    test_eq_int("1.5gb", dkspec_parse_size(v), 3LL << 29);
    json_decref(v);
    static const char *bad[] = {"", "abc", "5q", "-3", "1mx"};
    int all_bad = 1;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = json_string(bad[i]);
        all_bad &= dkspec_parse_size(v) == -2;
        json_decref(v);
    }
    test_cond("sizes that are not sizes are -2", all_bad);
    v = json_integer(-5);
    test_eq_int("an integer below -1 is -2", dkspec_parse_size(v), -2);
    json_decref(v);

    char *n = dkspec_name(NULL, "sb-1");
    test_eq_str("no name: sbx-<id>", n, "sbx-sb-1");
    free(n);
    n = dkspec_name("my box/1", "x");
    test_eq_str("a name keeps only what Docker allows", n, "my_box_1");
    free(n);
    n = dkspec_name("-lead", "x");
    test_eq_str("a name must start alphanumeric", n, "sbx--lead");
    free(n);
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[299] = 0;
    n = dkspec_name(longname, "x");
    test_eq_int("a name is at most 100 characters", strlen(n), 100);
    free(n);

    static const char *refs[][2] = {{"alpine", "alpine:latest"},
                                    {"alpine:3", "alpine:3"},
                                    {"localhost:5000/img", "localhost:5000/img:latest"},
                                    {"img@sha256:ab", "img@sha256:ab"}};
    int refs_ok = 1;
    for (size_t i = 0; i < 4; i++) {
        char *r = dkspec_image_ref(refs[i][0]);
        refs_ok &= strcmp(r, refs[i][1]) == 0;
        free(r);
    }
    test_cond("image refs get :latest unless tagged or pinned", refs_ok);
}

static void test_env_and_tar(void)
{
    json_t *arr = J("[\"A=1\",\"B=x=y\",\"=bad\",\"NOEQ\"]");
    json_t *obj = dkspec_env_to_obj(arr);
    test_cond("env K=V to an object: the first = splits, malformed entries dropped",
              json_object_size(obj) == 2 && !strcmp(S(obj, "B"), "x=y"));
    json_t *back = dkspec_env_to_arr(obj);
    test_eq_int("and back", json_array_size(back), 2);
    json_decref(back);
    json_decref(obj);
    json_decref(arr);
    json_t *b = J("{\"a\":\"on\",\"b\":\"OFF\",\"c\":1,\"d\":\"maybe\"}");
    test_cond("lenient booleans: on/OFF/1, anything else the default",
              dkspec_opt_bool(b, "a", 0) == 1 && dkspec_opt_bool(b, "b", 1) == 0 &&
                  dkspec_opt_bool(b, "c", 0) == 1 && dkspec_opt_bool(b, "d", 7) == 7 &&
                  dkspec_opt_bool(b, "none", 5) == 5);
    json_decref(b);

    uint8_t *t = NULL;
    size_t tl = 0;
    dkspec_tar_one(&t, &tl, "f.txt", 0644, (const uint8_t *)"hello", 5);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += i >= 148 && i < 156 ? ' ' : t[i];
    test_cond("a one-file tar: header, one padded block, two zero blocks",
              tl == 512 + 512 + 1024 && !strcmp((char *)t, "f.txt") &&
                  !memcmp(t + 257, "ustar", 5) && !memcmp(t + 512, "hello", 5) &&
                  strtoul((char *)t + 124, NULL, 8) == 5);
    test_eq_int("its header checksum is right", strtoul((char *)t + 148, NULL, 8), sum);
    free(t);
    dkspec_tar_agent_tree(&t, &tl, (const uint8_t *)"ELF", 3);
    test_cond("the agent tree: .sbx/, .sbx/run/ (0700), .sbx/sbx-init",
              tl == 3 * 512 + 512 + 1024 && !strcmp((char *)t, ".sbx/") &&
                  t[156] == '5' && !strcmp((char *)t + 512, ".sbx/run/") &&
                  strtoul((char *)t + 512 + 100, NULL, 8) == 0700 &&
                  !strcmp((char *)t + 1024, ".sbx/sbx-init") && t[1024 + 156] == '0');
    free(t);
}

int main(void)
{
    test_defaults_and_layers();
    test_shapes();
    test_refusals();
    test_create_body();
    test_warnings();
    test_small_parts();
    test_env_and_tar();
    return test_report();
}
