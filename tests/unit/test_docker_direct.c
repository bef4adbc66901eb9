/*
 * test_docker_direct.c - daemon/providers/docker/docker_direct.c's part of a
 * create body: which containers get the agent's run directory as a local
 * tmpfs volume the host can see (gVisor, proto/CHANNEL.md "Under gVisor"),
 * with which mount options, and what the options' own mounts keep.
 */
#include <stdlib.h>
#include <string.h>

#include "providers/docker/docker_int.h"
#include "testhelp.h"

static struct dk_prov dp;

/* A create body: {"User": user?, "HostConfig": {"Runtime": rt?, ...hc}}. */
static json_t *body(const char *rt, const char *user, const char *hc_json)
{
    json_t *hc = hc_json ? json_loads(hc_json, 0, NULL) : json_object();
    if (rt)
        json_object_set_new(hc, "Runtime", json_string(rt));
    json_t *b = json_pack("{s:o}", "HostConfig", hc);
    if (user)
        json_object_set_new(b, "User", json_string(user));
    return b;
}

/* The run directory's entry in the body's Mounts, or NULL (borrowed). */
static json_t *run_mount(json_t *b)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(json_object_get(b, "HostConfig"), "Mounts"), i,
                       m) {
        const char *t = json_string_value(json_object_get(m, "Target"));
        if (t && !strcmp(t, "/.sbx/run"))
            return m;
    }
    return NULL;
}

/* Its tmpfs mount options ("o"), or "". */
static const char *run_opts(json_t *b)
{
    json_t *dc =
        json_object_get(json_object_get(run_mount(b), "VolumeOptions"), "DriverConfig");
    const char *o =
        json_string_value(json_object_get(json_object_get(dc, "Options"), "o"));
    return o ? o : "";
}

static void test_which_runtimes(void)
{
    static const char *const runc[] = {NULL, "", "runc", "io.containerd.runc.v2",
                                       "io.containerd.runtime.v1.linux"};
    int none = 1;
    for (size_t i = 0; i < sizeof(runc) / sizeof(runc[0]); i++) {
        json_t *b = body(runc[i], NULL, NULL);
        none &= dkd_run_volume(&dp, b) == 0 && !run_mount(b);
        json_decref(b);
    }
    test_cond("runc by any name (or the default runtime): no volume, the tmpfs stays",
              none);

    json_t *b = body("runsc", NULL, NULL);
    int r = dkd_run_volume(&dp, b);
    json_t *m = run_mount(b);
    json_t *vo = json_object_get(m, "VolumeOptions");
    json_t *opts = json_object_get(json_object_get(vo, "DriverConfig"), "Options");
    test_cond("runsc: the run directory is an anonymous local volume",
              r == 1 && m &&
                  !strcmp(json_string_value(json_object_get(m, "Type")), "volume") &&
                  !json_object_get(m, "Source") &&
                  !strcmp(json_string_value(json_object_get(
                              json_object_get(vo, "DriverConfig"), "Name")),
                          "local"));
    test_cond("runsc: of tmpfs, not filled from the image (NoCopy)",
              !strcmp(json_string_value(json_object_get(opts, "type")), "tmpfs") &&
                  json_is_true(json_object_get(vo, "NoCopy")));
    test_eq_str("runsc: 1 MiB, 0700, nosuid, nodev, noexec, as the tmpfs was",
                run_opts(b), "size=1m,mode=0700,nosuid,nodev,noexec");
    json_decref(b);

    dp.direct = 0;
    b = body("runsc", NULL, NULL);
    test_cond("direct_channel: false: no volume",
              dkd_run_volume(&dp, b) == 0 && !run_mount(b));
    json_decref(b);
    dp.direct = 1;
    char *up = dp.eng.unix_path;
    dp.eng.unix_path = NULL;
    b = body("runsc", NULL, NULL);
    test_cond("a remote engine (no unix socket): no volume",
              dkd_run_volume(&dp, b) == 0 && !run_mount(b));
    json_decref(b);
    dp.eng.unix_path = up;
}

static void test_users(void)
{
    static const struct {
        const char *user, *want;
    } cases[] = {
        {"65534:100", "size=1m,mode=0700,nosuid,nodev,noexec,uid=65534,gid=100"},
        {"1000", "size=1m,mode=0700,nosuid,nodev,noexec,uid=1000,gid=1000"},
        {"0", "size=1m,mode=0700,nosuid,nodev,noexec,uid=0,gid=0"},
        /* names are the image's business: the agent then runs as root or
         * falls back to the attach stream */
        {"nobody", "size=1m,mode=0700,nosuid,nodev,noexec"},
        {"123:staff", "size=1m,mode=0700,nosuid,nodev,noexec"},
        {"12x", "size=1m,mode=0700,nosuid,nodev,noexec"},
        {"99999999999", "size=1m,mode=0700,nosuid,nodev,noexec"},
        {"", "size=1m,mode=0700,nosuid,nodev,noexec"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *b = body("runsc", cases[i].user, NULL);
        dkd_run_volume(&dp, b);
        char name[120];
        snprintf(name, sizeof(name), "user \"%s\": the volume's owner", cases[i].user);
        test_eq_str(name, run_opts(b), cases[i].want);
        json_decref(b);
    }
}

static void test_options_mounts(void)
{
    json_t *b = body(
        "runsc", NULL,
        "{\"Mounts\":[{\"Type\":\"bind\",\"Source\":\"/srv\",\"Target\":\"/srv\"}]}");
    json_t *theirs =
        json_incref(json_object_get(json_object_get(b, "HostConfig"), "Mounts"));
    dkd_run_volume(&dp, b);
    json_t *mounts = json_object_get(json_object_get(b, "HostConfig"), "Mounts");
    test_cond("the options' mounts are kept, the volume added",
              json_array_size(mounts) == 2 && run_mount(b));
    test_eq_int("the options' own array is not changed (replaced)",
                json_array_size(theirs), 1);
    json_decref(theirs);
    json_decref(b);

    b = body(
        "runsc", NULL,
        "{\"Mounts\":[{\"Type\":\"bind\",\"Source\":\"/x\",\"Target\":\"/.sbx/run\"}]}");
    int r = dkd_run_volume(&dp, b);
    test_cond(
        "a mount of the options at the run directory is theirs: nothing added",
        r == 1 &&
            json_array_size(
                json_object_get(json_object_get(b, "HostConfig"), "Mounts")) == 1 &&
            !strcmp(json_string_value(json_object_get(run_mount(b), "Type")), "bind"));
    json_decref(b);

    b = body("runsc", NULL, "{\"Tmpfs\":{\"/.sbx/run\":\"size=2m\"}}");
    test_cond("a tmpfs of the options there: left to the caller (0), no volume",
              dkd_run_volume(&dp, b) == 0 && !run_mount(b));
    json_decref(b);
}

int main(void)
{
    dp.direct = 1;
    dp.eng.unix_path = strdup("/var/run/docker.sock");
    test_which_runtimes();
    test_users();
    test_options_mounts();
    free(dp.eng.unix_path);
    return test_report();
}
