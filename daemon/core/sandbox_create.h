/*
 * sandbox_create.h - the rules of sandbox.create, typed: an id the caller
 * already owns reconnects (the sandbox comes back started, with warnings
 * for what the request asks that it does not have), another uid's id is
 * refused, a snapshot is usable only by its owner (or an admin) and only
 * with its own provider, the provider must be loaded, and a uid holds at
 * most limits.max_sandboxes_per_uid. The protocol floor (rpc/api.c
 * m_create) parses the params, calls these in order and encodes the answer.
 */
#ifndef SBXD_SANDBOX_CREATE_H
#define SBXD_SANDBOX_CREATE_H

#include <jansson.h>
#include <sys/types.h>

#include "err.h"
#include "core/sandbox.h"

struct provider_inst;

/*
 * The id the request names. Returns 0 when it is free (go on creating), 1
 * when it is uid's own sandbox: cb answers later (or before this returns)
 * with the sandbox object plus "reconnected": true and "warnings" (what
 * params, borrowed, asks that it does not have), once it runs or with why
 * it cannot start; <0 with err (-32003 {sandbox}) when another uid holds it.
 */
int sandbox_create_claim(uid_t uid, const char *id, json_t *params, sbx_result_cb cb,
                         void *privdata, sbx_err_t *err);
/*
 * The snapshot the request names: visible to uid (an admin sees all), and
 * of *provider_io when that is set. Sets *provider_io to its provider
 * (borrowed from the registry). <0 with err (-32602 {param: "snapshot"}).
 */
int sandbox_create_snapshot(uid_t uid, int admin, const char *snapshot,
                            const char **provider_io, sbx_err_t *err);
/* pi may be created on by uid now: loaded and enabled (-32001 {provider,
 * reason}), and uid below its sandbox cap (-32005 {limit, max}). */
int sandbox_create_check(struct provider_inst *pi, const char *name, uid_t uid,
                         sbx_err_t *err);
/*
 * Creates sandbox id (NULL: a generated "sb-…") of pi for uid from conf
 * (stolen, normalised) and, with start, starts it. cb answers: without
 * start at once with the sandbox object and "reconnected": false; with it
 * once started, adding what the provider reported ("reconnected": the
 * backend was there already, "warnings"), or with the start's error (the
 * sandbox then goes). <0 with err when it cannot be made at all (cb is not
 * called).
 */
int sandbox_create(const char *id, struct provider_inst *pi, uid_t uid, json_t *conf,
                   int start, sbx_result_cb cb, void *privdata, sbx_err_t *err);

#endif
