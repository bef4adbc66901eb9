/*
 * sandbox_env.c - a sandbox's environment and working directory for a
 * command: the precedence (conf.env < runtime_env < the command's own) and
 * the checks of an env patch (names, types, NUL, limits.env_bytes).
 */
#include "core/sandbox_env.h"

#include <string.h>

#include "daemon.h"
#include "core/provider.h"
#include "sbx_proto.h"

/* -- env and cwd ------------------------------------------------------------- */

/* A params error naming env. A macro so that each literal format is checked. */
#define env_param(err, fmt, k)                                                           \
    err_make_data((err), SBX_E_PARAMS, json_pack("{s:s}", "param", "env"), fmt, (k))

/* Bytes an env takes: every "K=V\0". */
static size_t env_size(json_t *env)
{
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(env, k, v)
        n += strlen(k) + json_string_length(v) + 2;
    return n;
}

int env_check(json_t *patch, sbx_err_t *err)
{
    if (!patch || json_is_null(patch))
        return 0;
    if (!json_is_object(patch))
        return env_param(err, "env must be an object%s", "");
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v) {
        if (k[0] == '\0' || strchr(k, '='))
            return env_param(err, "invalid env name '%s'", k);
        if (!json_is_string(v) && !json_is_null(v))
            return env_param(err, "env value of '%s' must be a string or null", k);
        /* An environment cannot hold NUL: "A\u0000B" would silently become "A". */
        if (json_is_string(v) && strlen(json_string_value(v)) != json_string_length(v))
            return env_param(err, "env value of '%s' contains a NUL byte", k);
    }
    size_t n = env_size(patch);
    if (n > (size_t)D->cfg.env_bytes)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:I, s:I}", "limit", "env_bytes", "max",
                      (json_int_t)D->cfg.env_bytes, "size", (json_int_t)n),
            "env too large: %zu bytes (limit %lld)", n, (long long)D->cfg.env_bytes);
    return 0;
}

int env_merge(json_t *env, json_t *patch, sbx_err_t *err)
{
    if (err && env_check(patch, err) < 0)
        return -1;
    if (!json_is_object(patch))
        return 0;
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v) {
        if (json_is_null(v))
            json_object_del(env, k);
        else if (json_is_string(v))
            json_object_set(env, k, v);
    }
    if (err && env_size(env) > (size_t)D->cfg.env_bytes) {
        size_t n = env_size(env);
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:I, s:I}", "limit", "env_bytes", "max",
                      (json_int_t)D->cfg.env_bytes, "size", (json_int_t)n),
            "env too large: %zu bytes (limit %lld)", n, (long long)D->cfg.env_bytes);
    }
    return 0;
}

json_t *sandbox_env_for(struct sandbox *sb, json_t *cmd_env)
{
    json_t *env = json_object();
    env_merge(env, json_object_get(sb->conf, "env"), NULL);
    env_merge(env, sb->runtime_env, NULL);
    if (cmd_env)
        env_merge(env, cmd_env, NULL);
    return env;
}

const char *sandbox_cwd_for(struct sandbox *sb, const char *cmd_cwd)
{
    if (cmd_cwd)
        return cmd_cwd;
    const char *wd = json_string_value(json_object_get(sb->conf, "working_dir"));
    if (wd)
        return wd;
    return sb->prov->ops->default_cwd;
}
