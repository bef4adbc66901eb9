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
#include <stdint.h>
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

/* ---- secdock (issue 16): reserved names, users as the runtime resolves them ---- */

/*
 * The request's own options (borrowed, may be NULL) must not name what only
 * sbxd sets: a label key "sbxd.*" (any case) or a container name with a prefix
 * sbxd uses for its own containers (sbx-, sbxp., sbxpool-, sbxd-). For every
 * uid, root included. -1 with -32003 {option, reason "reserved"}.
 */
int policy_reserved(json_t *req_options, sbx_err_t *err);

/* A user spec ("user[:group]") and what the runtime makes of it. */
struct policy_user {
    char user[128], group[128]; /* the parts as written */
    int uid_numeric, gid_numeric;
    long long uid, gid;   /* the parts as numbers (Go's Atoi: "+0", "00") */
    long long ruid, rgid; /* resolved (policy_user_resolve) */
    long long sgids[32];  /* supplementary groups (implicit group form) */
    int nsgids;
};

/* Parses spec; 1 when the spelling alone decides the ids (both parts numbers),
 * 0 when the image's /etc/passwd and /etc/group must be read. */
int policy_user_spell(const char *spec, struct policy_user *u);
/* Resolves u against the image's passwd and group texts (either may be NULL:
 * absent) the way libcontainer/user does: an empty user is uid 0, a numeric
 * user without a group takes its passwd entry's gid or 0, the implicit group
 * form adds the groups listing the user. -1 with why filled when the runtime
 * would refuse it (unknown name). */
int policy_user_resolve(struct policy_user *u, const char *passwd, size_t plen,
                        const char *group, size_t glen, char *why, size_t whylen);
/* 1 when uid may not run as root in a container made from eff: the config
 * names a user, eff asks for another, and uid is not 0. */
int policy_root_forbidden(uid_t uid, json_t *pconf, json_t *eff);
/* After policy_user_resolve: -1 with -32003 {option "user"} when the uid, gid
 * or a supplementary gid is 0. */
int policy_user_ids_check(const char *spec, const struct policy_user *u, sbx_err_t *err);
/* The runtime a rule requires for uid (runtime_required), or NULL; borrowed
 * from the policy. */
const char *policy_required_runtime(const struct policy *pol, uid_t uid);

/* The expose grants of the rules (policy_expose.c, a leaf below this file):
 * policy_expose.h. */

#endif
