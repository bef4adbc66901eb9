/*
 * sandbox_env.h - a sandbox's environment and working directory for a
 * command (sandbox_env.c), below sandbox.c: process.c takes a process's env
 * and cwd from here.
 */
#ifndef SBXD_SANDBOX_ENV_H
#define SBXD_SANDBOX_ENV_H

#include <jansson.h>

#include "err.h"
#include "core/sandbox_obj.h"

/* Final env of a process: provider defaults < conf.env < runtime_env < cmd_env (borrowed,
 * may be NULL). New ref. */
json_t *sandbox_env_for(struct sandbox *sb, json_t *cmd_env);
/* The cwd for a process (cmd_cwd may be NULL); borrowed string or NULL. */
const char *sandbox_cwd_for(struct sandbox *sb, const char *cmd_cwd);
/* Checks a {K: V|null} patch (names, types, no NUL, at most limits.env_bytes);
 * -32602 or -32005. */
int env_check(json_t *patch, sbx_err_t *err);
/* Applies a {K: V|null} patch to an env object. With err, the patch is
 * checked first and the result must fit limits.env_bytes (env is then
 * changed even on failure: merge into a copy). */
int env_merge(json_t *env, json_t *patch, sbx_err_t *err);

#endif
