/*
 * test_egress_rule.c - egress allow-list entries with IPv6 literals and the
 * address classes the proxy refuses (egress_rule.c), and the expose grants
 * of the Docker policy (policy_expose.c) for a uid with and without rules.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "providers/docker/egress_rule.h"
#include "providers/docker/policy.h"
#include "providers/docker/policy_expose.h"
#include "sbx_proto.h"
#include "testhelp.h"

static int priv(const char *lit)
{
    struct sockaddr_in s4 = {.sin_family = AF_INET};
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    if (inet_pton(AF_INET, lit, &s4.sin_addr) == 1)
        return egress_rule_addr_private((struct sockaddr *)&s4);
    if (inet_pton(AF_INET6, lit, &s6.sin6_addr) == 1)
        return egress_rule_addr_private((struct sockaddr *)&s6);
    return -1;
}

static void test_entries(void)
{
    char h[64];
    int port;
    test_cond("split: [v6]:port",
              egress_rule_split("[2001:db8::1]:443", h, sizeof(h), &port) == 0 &&
                  !strcmp(h, "2001:db8::1") && port == 443);
    test_cond("split: a bare v6 literal takes no port",
              egress_rule_split("2001:db8::1", h, sizeof(h), &port) == 0 &&
                  !strcmp(h, "2001:db8::1") && port == 0);
    test_cond("split: junk after ] is refused",
              egress_rule_split("[::1]x", h, sizeof(h), &port) < 0);
    test_cond("valid: names, wildcards, literals",
              egress_rule_valid("pypi.org") && egress_rule_valid("*.github.com:8443") &&
                  egress_rule_valid("[::1]:8080") && egress_rule_valid("::1") &&
                  egress_rule_valid("10.0.0.1:80") && egress_rule_valid("*"));
    test_cond("valid: a name in brackets, a bad port, a mid wildcard are not",
              !egress_rule_valid("[pypi.org]") && !egress_rule_valid("a.b:99999") &&
                  !egress_rule_valid("a.*.b") && !egress_rule_valid("[::1") &&
                  !egress_rule_valid("[::g]"));
    test_cond("match: [::1]:8080 allows ::1 on 8080, spelled either way",
              egress_rule_match("[::1]:8080", "::1", 8080) &&
                  egress_rule_match("[::1]:8080", "0:0::1", 8080) &&
                  !egress_rule_match("[::1]:8080", "::1", 8081));
    test_cond("match: a bare literal allows 80 and 443 only",
              egress_rule_match("2001:db8::1", "2001:db8::1", 443) &&
                  !egress_rule_match("2001:db8::1", "2001:db8::1", 22));
    test_cond("match: a literal never matches a name or a wildcard",
              !egress_rule_match("*.example.com", "::1", 443) &&
                  !egress_rule_match("localhost", "::1", 443) &&
                  !egress_rule_match("::1", "localhost", 443));
    test_cond("match: names without case, wildcard not the domain itself",
              egress_rule_match("*.GitHub.com", "api.github.com", 443) &&
                  !egress_rule_match("*.github.com", "github.com", 443));
    test_cond("covers: IPv6 ceilings, ports, wildcards",
              egress_rule_covers("[::1]:8080", "::1:8080") == 0 &&
                  egress_rule_covers("[::1]:8080", "[0::1]:8080") &&
                  egress_rule_covers("::1", "[::1]:9000") &&
                  !egress_rule_covers("[::1]:8080", "[::2]:8080") &&
                  egress_rule_covers("*", "[2001:db8::1]:443") &&
                  egress_rule_covers("*.github.com", "*.api.github.com") &&
                  !egress_rule_covers("*.github.com", "[::1]"));
}

static void test_addresses(void)
{
    static const char *const refused[] = {"::1",
                                          "::",
                                          "::ffff:127.0.0.1",
                                          "::ffff:10.1.2.3",
                                          "::127.0.0.1",
                                          "::ffff:0:127.0.0.1",
                                          "64:ff9b::7f00:1",
                                          "64:ff9b::a00:1",
                                          "64:ff9b:1::1",
                                          "2002:7f00:1::1",
                                          "2002:c0a8:101::1",
                                          "2001:0:4136:e378::1",
                                          "fe80::1",
                                          "fec0::1",
                                          "fd00::1",
                                          "fc00::1",
                                          "ff02::1",
                                          "100::1",
                                          "2001:db8::1",
                                          "127.0.0.1",
                                          "10.0.0.1",
                                          "172.16.0.1",
                                          "192.168.1.1",
                                          "169.254.169.254",
                                          "100.64.0.1",
                                          "0.0.0.0",
                                          "224.0.0.1",
                                          "255.255.255.255",
                                          "192.0.0.1",
                                          "198.18.0.1",
                                          NULL};
    static const char *const allowed[] = {"2606:4700::1111",  "2a00:1450:4001::200e",
                                          "64:ff9b::808:808", "2002:808:808::1",
                                          "::ffff:8.8.8.8",   "8.8.8.8",
                                          "1.1.1.1",          NULL};
    int bad = 0;
    for (size_t i = 0; refused[i]; i++)
        if (priv(refused[i]) != 1) {
            printf("      not refused: %s\n", refused[i]);
            bad++;
        }
    test_cond("private: loopback, ULA, link-local, site-local, NAT64, 6to4, Teredo, "
              "v4-mapped/compatible/translated of private IPv4 are refused",
              bad == 0);
    bad = 0;
    for (size_t i = 0; allowed[i]; i++)
        if (priv(allowed[i]) != 0) {
            printf("      refused: %s\n", allowed[i]);
            bad++;
        }
    test_cond("private: public IPv6 and public IPv4 (also embedded) pass", bad == 0);
}

static int check(struct policy *pol, uid_t uid, json_t *pconf, const char *host, int hp,
                 int unix_sock, struct policy_expose *lim)
{
    sbx_err_t err = {0};
    json_t *grants = policy_grants(pol, uid);
    int rc = policy_expose_check(grants, uid, pconf, host, hp, unix_sock, lim, &err);
    json_decref(grants);
    int code = rc < 0 ? err.code : 0;
    err_clear(&err);
    return code;
}

static void test_grants(void)
{
    json_t *conf = json_loads(
        "{\"rules\": [{\"users\": [4242], \"expose\": {\"addresses\": [\"127.0.0.2\", "
        "\"::1\"], \"host_ports\": [\"80-90\", 443], \"max_connections\": 500, "
        "\"max_bytes\": \"32g\"}}, {\"users\": [4343], \"expose\": false}]}",
        0, NULL);
    struct policy *pol = NULL;
    sbx_err_t err = {0};
    test_cond("grants: the policy with expose rules parses",
              policy_parse(&pol, conf, &err) == 0);
    err_clear(&err);
    json_t *pconf = json_pack("{s:i}", "expose_max_connections", 10);
    struct policy_expose lim;
    test_eq_int("grants: 127.0.0.1 on a free port for anyone",
                check(pol, 1000, pconf, NULL, 0, 0, &lim), 0);
    test_cond("grants: anyone's bounds are the config's (16 GiB bytes by default)",
              lim.max_connections == 10 && lim.max_bytes == (int64_t)16 << 30);
    test_eq_int("grants: 127.0.0.2 needs a rule",
                check(pol, 1000, pconf, "127.0.0.2", 0, 0, &lim), SBX_E_PERMISSION);
    test_eq_int("grants: host port 80 needs a rule",
                check(pol, 1000, pconf, NULL, 80, 0, &lim), SBX_E_PERMISSION);
    test_eq_int("grants: the granted uid listens on 127.0.0.2 port 85",
                check(pol, 4242, pconf, "127.0.0.2", 85, 0, &lim), 0);
    test_cond("grants: the rule's larger bounds apply",
              lim.max_connections == 500 && lim.max_bytes == (int64_t)32 << 30);
    test_eq_int("grants: ::1 spelled 0::1 is the granted address",
                check(pol, 4242, pconf, "0::1", 443, 0, &lim), 0);
    test_eq_int("grants: 0.0.0.0 is granted to nobody",
                check(pol, 4242, pconf, "0.0.0.0", 0, 0, &lim), SBX_E_PERMISSION);
    test_eq_int("grants: a rule's expose: false denies even a Unix socket",
                check(pol, 4343, pconf, NULL, 0, 1, &lim), SBX_E_PERMISSION);
    test_eq_int("grants: a host that is no address literal is -32602",
                check(pol, 4242, pconf, "localhost", 0, 0, &lim), SBX_E_PARAMS);
    test_eq_int("grants: root listens anywhere",
                check(pol, 0, pconf, "0.0.0.0", 80, 0, &lim), 0);
    json_object_set_new(pconf, "expose", json_false());
    test_eq_int("grants: expose: false in the config is off for root too",
                check(pol, 0, pconf, NULL, 0, 0, &lim), SBX_E_PERMISSION);
    policy_free(pol);
    json_decref(conf);
    static const char *const bad[] = {
        "{\"rules\": [{\"users\": [1], \"expose\": 3}]}",
        "{\"rules\": [{\"users\": [1], \"expose\": {\"addresses\": [\"x\"]}}]}",
        "{\"rules\": [{\"users\": [1], \"expose\": {\"host_ports\": [\"9-2\"]}}]}",
        "{\"rules\": [{\"users\": [1], \"expose\": {\"max_bytes\": 0}}]}",
        "{\"rules\": [{\"users\": [1], \"expose\": {\"nope\": 1}}]}",
        NULL};
    int refused = 0, n = 0;
    for (; bad[n]; n++) {
        conf = json_loads(bad[n], 0, NULL);
        pol = NULL;
        refused += policy_parse(&pol, conf, &err) < 0 && err.code == SBX_E_PARAMS;
        err_clear(&err);
        policy_free(pol);
        json_decref(conf);
    }
    test_eq_int("grants: malformed expose grants are -32602 at load", refused, n);
    json_decref(pconf);
}

static void test_conf(void)
{
    static const char *const bad[] = {
        "{\"expose_addresses\": [\"localhost\"]}", "{\"expose_host_ports\": [\"0-10\"]}",
        "{\"expose_host_ports\": \"80\"}",         "{\"expose_max_bytes\": \"lots\"}",
        "{\"egress\": {\"lookups_per_uid\": 0}}",  NULL};
    int refused = 0, n = 0;
    sbx_err_t err = {0};
    for (; bad[n]; n++) {
        json_t *c = json_loads(bad[n], 0, NULL);
        refused += policy_expose_conf(c, &err) < 0 && err.code == SBX_E_PARAMS;
        err_clear(&err);
        json_decref(c);
    }
    test_eq_int("conf: malformed expose_* and egress.lookups_* keys are -32602", refused,
                n);
    json_t *ok = json_loads("{\"expose_addresses\": [\"127.0.0.1\", \"::1\"], "
                            "\"expose_host_ports\": [\"1024-65535\", 80], "
                            "\"expose_max_bytes\": \"16g\", \"egress\": "
                            "{\"lookups_max\": 64}}",
                            0, NULL);
    test_eq_int("conf: the documented keys load", policy_expose_conf(ok, &err), 0);
    err_clear(&err);
    json_decref(ok);
}

int main(void)
{
    test_entries();
    test_addresses();
    test_grants();
    test_conf();
    return test_report();
}
