/*
 * policy_expose.h - who may expose ports, where (net18, issue 18): the
 * expose grants of providers.docker.policy's rules and the check of a
 * sandbox.expose request against them.
 *
 * A leaf: policy.c parses and merges the rules' grants with these functions,
 * and hands the merged grants of a uid (policy_grants) to the check; nothing
 * here calls back into policy.c.
 */
#ifndef SBXD_POLICY_EXPOSE_H
#define SBXD_POLICY_EXPOSE_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

/* A rule's "expose" value (borrowed): true | false | {allow?, addresses?,
 * host_ports?, max_connections?, max_bytes?}, normalised into *out (new).
 * -1 with *why (static text) when malformed. */
int policy_expose_parse(json_t *v, json_t **out, const char **why);
/* Folds a rule's normalised expose grant (borrowed) into have (the merged
 * grant so far, modified): a false allow wins, lists are joined, the larger
 * bound wins (-1 = unlimited). */
void policy_expose_merge(json_t *have, json_t *v);

/* What sandbox.expose may do for one uid: from providers.docker (pconf) and
 * the rules naming the uid. */
struct policy_expose {
    int64_t max_connections; /* open at once, per sandbox; -1 unlimited */
    int64_t max_bytes;       /* relayed both ways, per sandbox; -1 unlimited */
};
/* May uid expose on host (an IPv4/IPv6 literal; NULL: 127.0.0.1) and
 * host_port (0: the kernel picks one) — or on a Unix socket (unix_sock)?
 * grants: uid's merged grants (policy_grants, borrowed). 0 with *lim filled,
 * or -1 with err -32003 {option, reason, requested?} (-32602 {param "host"}
 * for a host that is not an address literal). Uid 0 is held to
 * providers.docker.expose only. */
int policy_expose_check(json_t *grants, uid_t uid, json_t *pconf, const char *host,
                        int host_port, int unix_sock, struct policy_expose *lim,
                        sbx_err_t *err);
/* providers.docker's expose_addresses, expose_host_ports, expose_max_bytes
 * and egress.lookups_* (pconf borrowed) well formed? 0, or -1 with -32602. */
int policy_expose_conf(json_t *pconf, sbx_err_t *err);

#endif
