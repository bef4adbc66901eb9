/*
 * policy.h - who may loosen the Docker container hardening, and how far.
 *
 * The configured options (providers.docker) are the defaults and the
 * ceilings for everyone. Rules in providers.docker.policy grant named uids
 * and groups more: network modes and named networks, bind mounts under host
 * path prefixes (read-only or read-write), images or image prefixes, higher
 * resource ceilings, cap_add entries, runtimes, security_opt and tmpfs
 * options; privileged and host namespaces only when a rule names them. Root
 * (uid 0) may set anything.
 *
 * Rules are resolved to uids when the config is loaded (user and group names
 * go through NSS there, never on the event loop).
 */
#ifndef SBXD_POLICY_H
#define SBXD_POLICY_H

#include <jansson.h>
#include <sys/types.h>

#include "err.h"

struct policy;

/*
 * Parses the policy (conf: the providers.docker.policy value, borrowed; NULL
 * or null = no rules). *out is never NULL on success. Unknown keys, wrong
 * types and unknown users or groups are errors (-32602, a message naming the
 * rule and key).
 */
int policy_parse(struct policy **out, json_t *conf, sbx_err_t *err);
void policy_free(struct policy *pol);

/*
 * The one evaluation: may uid create a container with the effective options
 * eff (docker_spec.c's normalised form: config layered with the request),
 * given the configured options pconf (both borrowed)? Returns 0 when
 * allowed; otherwise -1 with err = -32003 and data {option, reason, ...}:
 * reason "denied" (no rule grants it) or "ceiling" (above the largest value
 * the config or a rule allows; data.ceiling says it).
 */
int policy_check(const struct policy *pol, uid_t uid, json_t *pconf, json_t *eff,
                 sbx_err_t *err);

/* The grants of uid merged over the rules naming it (new reference), for
 * daemon.info and tests. */
json_t *policy_grants(const struct policy *pol, uid_t uid);

#endif
