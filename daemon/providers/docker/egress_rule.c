/*
 * egress_rule.c - allow-list entries (names, wildcards, IPv4 and IPv6
 * literals, ports) and the address classes the egress proxy refuses.
 */
#include "providers/docker/egress_rule.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int parse_port(const char *s, int *port)
{
    char *end;
    if (!s[0] || strlen(s) > 5)
        return -1;
    long v = strtol(s, &end, 10);
    if (*end || v < 1 || v > 65535)
        return -1;
    *port = (int)v;
    return 0;
}

int egress_rule_split(const char *e, char *host, size_t cap, int *port)
{
    const char *hs = e, *colon;
    size_t hl;
    *port = 0;
    if (e[0] == '[') {
        const char *rb = strchr(e, ']');
        if (!rb || (rb[1] && rb[1] != ':'))
            return -1;
        hs = e + 1;
        hl = (size_t)(rb - hs);
        colon = rb[1] ? rb + 1 : NULL;
    } else {
        colon = strchr(e, ':');
        if (colon && strchr(colon + 1, ':'))
            colon = NULL; /* a bare IPv6 literal: no port */
        hl = colon ? (size_t)(colon - e) : strlen(e);
    }
    if (hl == 0 || hl >= cap)
        return -1;
    memcpy(host, hs, hl);
    host[hl] = '\0';
    if (colon && parse_port(colon + 1, port) < 0)
        return -1;
    return 0;
}

/* 16 bytes of an address literal (IPv4 as v4-mapped); 0 if host is a name. */
static int literal(const char *host, unsigned char out[16])
{
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) {
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &a4, 4);
        return 1;
    }
    return inet_pton(AF_INET6, host, out) == 1;
}

static int name_chars(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '.' || *s == '-'))
            return 0;
    return 1;
}

int egress_rule_valid(const char *e)
{
    char h[262];
    unsigned char a[16];
    int port;
    if (strlen(e) > 260 || egress_rule_split(e, h, sizeof(h), &port) < 0)
        return 0;
    if (e[0] == '[' || strchr(h, ':'))
        return inet_pton(AF_INET6, h, a) == 1; /* brackets hold IPv6 only */
    if (strcmp(h, "*") == 0)
        return 1;
    if (h[0] == '*')
        return h[1] == '.' && h[2] && name_chars(h + 2);
    return name_chars(h);
}

/* host equal to the entry's host part, or under its wildcard. */
static int host_match(const char *ph, const char *host)
{
    unsigned char a[16], b[16];
    if (strcmp(ph, "*") == 0)
        return 1;
    if (ph[0] == '*' && ph[1] == '.') {
        size_t n = strlen(host), m = strlen(ph + 1);
        return n > m && strcasecmp(host + n - m, ph + 1) == 0 && !literal(host, a);
    }
    int la = literal(ph, a), lb = literal(host, b);
    if (la || lb)
        return la && lb && memcmp(a, b, 16) == 0;
    return strcasecmp(ph, host) == 0;
}

int egress_rule_match(const char *e, const char *host, int port)
{
    char ph[262];
    int pport;
    if (egress_rule_split(e, ph, sizeof(ph), &pport) < 0)
        return 0;
    if (pport ? port != pport : port != 80 && port != 443)
        return 0;
    return host_match(ph, host);
}

int egress_rule_covers(const char *ceil, const char *want)
{
    char ch[262], wh[262];
    int cp, wp;
    if (egress_rule_split(ceil, ch, sizeof(ch), &cp) < 0 ||
        egress_rule_split(want, wh, sizeof(wh), &wp) < 0)
        return 0;
    if (cp && cp != wp)
        return 0;
    if (ch[0] == '*' && ch[1] == '.' && wh[0] == '*' && wh[1] == '.')
        return host_match(ch, wh + 1) || strcasecmp(ch, wh) == 0;
    return host_match(ch, wh);
}

/* ---- address classes -------------------------------------------------------------- */

static int private_v4(uint32_t a)
{
    return (a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 ||
           (a >> 16) == 0xa9fe ||          /* 169.254/16 link-local */
           (a >> 20) == 0xac1 ||           /* 172.16/12 */
           (a >> 16) == 0xc0a8 ||          /* 192.168/16 */
           (a >> 22) == (100u << 2 | 1) || /* 100.64/10 CGNAT */
           (a >> 8) == 0xc00000 ||         /* 192.0.0/24 IETF */
           (a >> 17) == (0xc612u >> 1) ||  /* 198.18/15 benchmark */
           (a >> 28) >= 0xe;               /* multicast, reserved, broadcast */
}

static uint32_t v4_at(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int private_v6(const unsigned char *a)
{
    static const unsigned char zero[12] = {0};
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char xlated[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0};
    static const unsigned char nat64[12] = {0, 0x64, 0xff, 0x9b};
    if (!memcmp(a, zero, 12))
        return 1; /* ::, ::1 and the v4-compatible ::a.b.c.d (deprecated) */
    if (!memcmp(a, mapped, 12) || !memcmp(a, xlated, 12) || !memcmp(a, nat64, 12))
        return private_v4(v4_at(a + 12));
    if (a[0] == 0x20 && a[1] == 0x02) /* 6to4 2002:V4ADDR::/48 */
        return private_v4(v4_at(a + 2));
    if (a[0] == 0 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4] == 0 &&
        a[5] == 1)
        return 1; /* 64:ff9b:1::/48, local-use NAT64 */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0 && a[3] == 0)
        return 1; /* 2001::/32 Teredo */
    if (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8)
        return 1; /* 2001:db8::/32 documentation */
    if (a[0] == 0x01 && a[1] == 0 && !memcmp(a + 2, zero, 6))
        return 1;                                     /* 100::/64 discard */
    return (a[0] & 0xfe) == 0xfc ||                   /* fc00::/7 ULA */
           (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) || /* fe80::/10 link-local */
           (a[0] == 0xfe && (a[1] & 0xc0) == 0xc0) || /* fec0::/10 site-local */
           a[0] == 0xff;                              /* multicast */
}

int egress_rule_addr_private(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return private_v4(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family == AF_INET6)
        return private_v6(((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr);
    return 1;
}
