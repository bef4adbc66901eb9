/*
 * fuzz_egress_rule.c - the egress allow-list entries and host names
 * (egress_rule.c): an entry comes from a client's options.egress (checked by
 * egress_rule_valid first), the host from the sandbox's proxy (any bytes the
 * agent relays). Input: entry NUL host NUL port-byte-pair.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "providers/docker/egress_rule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char entry[300], host[300];
    const char *d = (const char *)data;
    const char *z1 = memchr(d, 0, size);
    size_t el = z1 ? (size_t)(z1 - d) : size;
    snprintf(entry, sizeof(entry), "%.*s", (int)(el < 299 ? el : 299), d);
    const char *rest = z1 ? z1 + 1 : d + size;
    size_t rl = (size_t)(d + size - rest);
    const char *z2 = memchr(rest, 0, rl);
    size_t hl = z2 ? (size_t)(z2 - rest) : rl;
    snprintf(host, sizeof(host), "%.*s", (int)(hl < 299 ? hl : 299), rest);
    int port = z2 && rl - hl >= 3 ? (uint8_t)z2[1] << 8 | (uint8_t)z2[2] : 443;

    char h[64];
    int p;
    egress_rule_split(entry, h, sizeof(h), &p);
    int valid = egress_rule_valid(entry);
    int m = egress_rule_match(entry, host, port);
    /* an entry covers itself when it is one */
    if (valid && !egress_rule_covers(entry, entry))
        __builtin_trap();
    egress_rule_covers(entry, host);
    (void)m;
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    if (inet_pton(AF_INET6, host, &s6.sin6_addr) == 1)
        egress_rule_addr_private((struct sockaddr *)&s6);
    return 0;
}
