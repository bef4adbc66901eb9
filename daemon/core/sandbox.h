/*
 * sandbox.h - provider-independent sandbox semantics: the registry,
 * ownership, the status machine, lifetimes, env and cwd precedence, hooks.
 */
#ifndef SBXD_SANDBOX_H
#define SBXD_SANDBOX_H

#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "log.h"
#include "core/sandbox_env.h"
#include "core/sandbox_obj.h"

/* Lookup honouring ownership: another uid's sandbox is "not found" (admin
 * sees every uid's). */
struct sandbox *sandbox_find(uid_t uid, int admin, const char *id);
struct sandbox *sandbox_find_any(const char *id);
int sandbox_visible(uid_t uid, int admin, struct sandbox *sb);

/* Creates from normalised conf (stolen). Status pending. */
int sandbox_new(struct sandbox **out, const char *id, struct provider_inst *prov,
                uid_t owner, json_t *conf, sbx_err_t *err);
/*
 * Registers a sandbox that already exists in a provider's backend (found at
 * load, e.g. Docker containers labelled with an sbxd id after a restart).
 * conf stolen (normalised create params as far as known); status is what the
 * backend says (SB_RUNNING or SB_STOPPED). No provider op is called. The
 * lifetime timer starts now with conf.timeout_ms (the old deadline is not
 * known). Fails if the id is taken.
 */
int sandbox_adopt(struct sandbox **out, const char *id, struct provider_inst *prov,
                  uid_t owner, json_t *conf, enum sb_status status, sbx_err_t *err);
/* The sandbox object for replies; new reference. */
json_t *sandbox_to_json(struct sandbox *sb);

/* Lifecycle. Each calls cb (may be NULL: nobody waits) once when done;
 * the answer is the sandbox object, or for a snapshot {snapshot, provider,
 * sandbox, created_at}, or for a destroy {id, status}. */
void sandbox_start(struct sandbox *sb, sbx_result_cb cb, void *privdata);
void sandbox_stop(struct sandbox *sb, sbx_result_cb cb, void *privdata);
void sandbox_destroy(struct sandbox *sb, sbx_result_cb cb, void *privdata);
void sandbox_snapshot(struct sandbox *sb, sbx_result_cb cb, void *privdata);
/* sandbox.snapshot with a ttl (seconds, -1 never, 0 the provider's default):
 * a provider without snapshot_ttl takes only -1 (its snapshots never expire)
 * and answers anything else -32011 {provider, feature: "snapshot ttl"}. */
void sandbox_snapshot_ttl(struct sandbox *sb, int64_t ttl, sbx_result_cb cb,
                          void *privdata);
/* The text for sandbox.instructions; malloc'd. */
char *sandbox_instructions(struct sandbox *sb);
/* Frees the sandboxes removed during this loop iteration. ev_prepare. */
void sandboxes_before_sleep(void);
/* Frees every sandbox at shutdown (providers' sb_release called). */
void sandbox_free_all(void);
/* 1 when a process.exec/spawn on sb should first restart it: it is in error
 * with no op running, and its provider restarts on a call (restart_on_call)
 * and is available. */
int sandbox_restarts_on_call(struct sandbox *sb);
/* The sandbox lifetime for a create without timeout_ms (0 = none). */
int64_t sandbox_default_timeout(struct provider_inst *prov);
/* What a sandbox.create on the existing sandbox sb asks for that sb does not
 * have (params borrowed): a new array of strings, or NULL when nothing differs. */
json_t *sandbox_reconnect_warnings(struct sandbox *sb, json_t *params);
/* Count of sandboxes owned by uid. */
int sandbox_count_owned(uid_t uid);

#endif
