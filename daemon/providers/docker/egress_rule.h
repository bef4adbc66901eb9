/*
 * egress_rule.h - the egress proxy's allow-list entries and the addresses it
 * never connects to (docker_net.c decides with these; pure functions, no
 * state, so the unit test and the fuzz harness reach them directly).
 *
 * An entry is "host", "*.domain", an IPv4 literal, an IPv6 literal (bare
 * "2001:db8::1" or "[2001:db8::1]"), each optionally with ":port"
 * ("[::1]:8080"; a bare IPv6 literal takes no port). Without a port an
 * entry allows 80 and 443. Literals compare as addresses (::1 = 0:0::1),
 * names without case.
 */
#ifndef SBXD_EGRESS_RULE_H
#define SBXD_EGRESS_RULE_H

#include <stddef.h>
#include <sys/socket.h>

/* An entry into its host part (brackets dropped; cap bytes) and *port (0:
 * none given). 0, or -1 when it is not an entry. */
int egress_rule_split(const char *entry, char *host, size_t cap, int *port);
/* 1 when entry is well formed (a name of [A-Za-z0-9.-], "*.name", "*", or
 * an address literal; a port 1..65535). */
int egress_rule_valid(const char *entry);
/* 1 when entry allows host (as the proxy got it: a name or a literal
 * without brackets) on port. */
int egress_rule_match(const char *entry, const char *host, int port);
/* 1 when the ceiling entry covers the requested entry: the same host (or
 * under the ceiling's wildcard, or "*"), the same port or none on both. */
int egress_rule_covers(const char *ceiling, const char *want);
/* 1 when sa is an address no sandbox may reach unless the config allows
 * private addresses: loopback, RFC 1918, CGNAT, link-local, multicast,
 * unspecified, benchmark and reserved IPv4; for IPv6 also ULA, site-local,
 * discard, documentation, Teredo, local-use NAT64, and any IPv4 embedded in
 * a v4-mapped, v4-compatible, v4-translated, NAT64 (64:ff9b::/96) or 6to4
 * address is judged as that IPv4. Unknown families are private. */
int egress_rule_addr_private(const struct sockaddr *sa);

#endif
