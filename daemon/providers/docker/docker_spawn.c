/*
 * docker_spawn.c - what sbxd adds to what the user asked for when a
 * container or a process is made: the agent's mount in a create body, a
 * process's environment and working directory. A leaf: the lifecycle, the
 * pool and both process transports use it; it calls none of them.
 */
#include <stdlib.h>
#include <string.h>

#include "providers/docker/docker_int.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "xalloc.h"

json_t *dkspawn_env(struct dk_sb *ds, struct process *p)
{
    json_t *env = ds->base_env ? json_deep_copy(ds->base_env) : json_object();
    /* The container's env holds the create-time env: the sandbox's layers
     * (create env, set_env) come back from the spec, so a key they set and
     * a null removed is absent from the spec and must go here too. */
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(ds->sb->conf, "env"), k, v)
        json_object_del(env, k);
    json_object_foreach(ds->sb->runtime_env, k, v)
        json_object_del(env, k);
    json_t *se = json_object_get(p->spec, "env");
    if (json_is_object(se))
        json_object_update(env, se);
    return env;
}

const char *dkspawn_cwd(struct dk_sb *ds, struct process *p)
{
    const char *c = json_string_value(json_object_get(p->spec, "cwd"));
    if (c)
        return c;
    c = json_string_value(json_object_get(ds->opts, "working_dir"));
    return c ? c : "/workspace";
}

/* ---- processes
 * ------------------------------------------------------------------------------ */

/* The agent reaches the container without an upload: on a local engine the
 * installed sbx-init is bind-mounted read-only (container root cannot
 * replace it: the mount is read-only and remounting needs CAP_SYS_ADMIN);
 * on a remote one the volume of a never-started holder container that got
 * the agent by one upload is shared read-only (VolumesFrom). No anonymous
 * volume is made per create; the direct socket's directory is a small tmpfs.
 * body's Binds/Tmpfs may be the options' own arrays: replaced, not changed. */
void dkspawn_agent_mount(struct dk_prov *dp, json_t *body)
{
    json_t *hc = json_object_get(body, "HostConfig");
    json_object_del(body, "Volumes");
    if (dp->agent_bind) {
        json_t *binds = json_is_array(json_object_get(hc, "Binds"))
                            ? json_copy(json_object_get(hc, "Binds"))
                            : json_array();
        char *b = xasprintf("%s:%s:ro", dp->agent_path, DK_AGENT_IN);
        json_array_append_new(binds, json_string(b));
        free(b);
        json_object_set_new(hc, "Binds", binds);
    } else {
        char *v = xasprintf("%s:ro", dp->agent_holder);
        json_object_set_new(hc, "VolumesFrom", json_pack("[s]", v));
        free(v);
    }
    /* The run directory is ours unless the options mount something there. */
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(hc, "Binds"), i, b) {
        const char *s = json_string_value(b), *c = s ? strchr(s, ':') : NULL;
        size_t n = strlen(DK_AGENT_DIR "/run");
        if (c && !strncmp(c + 1, DK_AGENT_DIR "/run", n) &&
            (c[1 + n] == '\0' || c[1 + n] == ':'))
            return;
    }
    if (dkd_run_volume(dp, body))
        return;
    json_t *tmpfs = json_is_object(json_object_get(hc, "Tmpfs"))
                        ? json_copy(json_object_get(hc, "Tmpfs"))
                        : json_object();
    if (!json_object_get(tmpfs, DK_AGENT_DIR "/run"))
        json_object_set_new(tmpfs, DK_AGENT_DIR "/run",
                            json_string("rw,nosuid,nodev,noexec,size=1m,mode=0700"));
    json_object_set_new(hc, "Tmpfs", tmpfs);
}
