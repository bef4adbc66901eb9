/*
 * policy_expose.c - who may expose a sandbox's ports, on which host addresses
 * and host ports, and how much each sandbox may relay (sandbox.expose).
 *
 * The config (providers.docker) is the default for everyone:
 *   expose: true            the method is on (false: off, root included,
 *                           unless a rule says true)
 *   expose_addresses:       host addresses anyone may listen on
 *       ["127.0.0.1"]       (a wider one, 0.0.0.0 or a LAN address, makes the
 *                           sandbox's server reachable from elsewhere)
 *   expose_host_ports:      host ports one may ask for ("lo-hi" or a port);
 *       ["1024-65535"]      host_port 0 (the kernel picks) is always fine
 *   expose_max_connections, expose_max_bytes: per sandbox bounds.
 * A rule of providers.docker.policy adds to that for its users and groups,
 * in the rules' style (more, never less, except a rule's expose: false):
 *   expose: false | true | {allow, addresses, host_ports, max_connections,
 *                           max_bytes}
 * A Unix socket (expose {unix: true}) is reachable by the owner only, so it
 * needs no address grant. Uid 0 may use any address and port.
 *
 * A leaf below policy.c: policy.c parses and merges the rules' expose grants
 * with the functions here; the check reads the merged grants it is handed
 * (policy_grants), so nothing here calls back into policy.c.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/docker/docker_int.h"
#include "providers/docker/policy_expose.h"
#include "sbx_proto.h"

#define DEFAULT_MAX_CONNS 64
#define DEFAULT_MAX_BYTES ((int64_t)16 << 30)

/* "8000", 8000 or "8000-8999" into [lo, hi]; 0 when malformed. */
static int port_range(json_t *v, int *lo, int *hi)
{
    if (json_is_integer(v)) {
        *lo = *hi = (int)json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        const char *s = json_string_value(v);
        long a = strtol(s, &end, 10), b = a;
        if (end == s)
            return 0;
        if (*end == '-') {
            const char *t = end + 1;
            b = strtol(t, &end, 10);
            if (end == t)
                return 0;
        }
        if (*end)
            return 0;
        *lo = (int)(a < 0 || a > 65535 ? -1 : a);
        *hi = (int)(b < 0 || b > 65535 ? -1 : b);
    } else {
        return 0;
    }
    return *lo >= 1 && *hi <= 65535 && *lo <= *hi;
}

/* An address literal into its 16-byte form (v4 as v4-mapped); 0 if not one. */
static int addr_of(const char *s, unsigned char out[16])
{
    struct in_addr a4;
    if (inet_pton(AF_INET, s, &a4) == 1) {
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &a4, 4);
        return 1;
    }
    return inet_pton(AF_INET6, s, out) == 1;
}

static int size_of(json_t *v, int64_t *out)
{
    int64_t n = dkspec_parse_size(v);
    if (n < -1 || n == 0)
        return 0;
    *out = n;
    return 1;
}

int policy_expose_parse(json_t *v, json_t **out, const char **why)
{
    *out = NULL;
    if (json_is_boolean(v)) {
        *out = json_pack("{s:O}", "allow", v);
        return 0;
    }
    *why = "must be true, false or {allow, addresses, host_ports, max_connections, "
           "max_bytes}";
    if (!json_is_object(v))
        return -1;
    json_t *g = json_object(), *x;
    const char *k;
    size_t i;
    json_object_foreach(v, k, x) {
        int64_t n = 0;
        unsigned char a[16];
        int lo, hi, ok = 1;
        if (!strcmp(k, "allow") && json_is_boolean(x)) {
            json_object_set(g, k, x);
        } else if ((!strcmp(k, "addresses") || !strcmp(k, "host_ports")) &&
                   json_is_array(x)) {
            json_t *e;
            json_array_foreach(x, i, e) {
                const char *s = json_string_value(e);
                ok &= k[0] == 'a' ? s && addr_of(s, a) : port_range(e, &lo, &hi);
            }
            if (!ok)
                *why = k[0] == 'a' ? "expose.addresses: entries are IPv4 or IPv6 literals"
                                   : "expose.host_ports: entries are ports or \"lo-hi\"";
            json_object_set(g, k, x);
        } else if (!strcmp(k, "max_connections") || !strcmp(k, "max_bytes")) {
            ok = k[4] == 'b' ? size_of(x, &n) : json_is_integer(x) && size_of(x, &n);
            json_object_set_new(g, k, json_integer(n));
            if (!ok)
                *why = "expose.max_*: a positive number or size, or -1 (unlimited)";
        } else {
            ok = 0;
        }
        if (!ok) {
            json_decref(g);
            return -1;
        }
    }
    if (!json_object_get(g, "allow"))
        json_object_set_new(g, "allow", json_true());
    *out = g;
    return 0;
}

static void join(json_t *have, const char *k, json_t *more)
{
    json_t *l = json_object_get(have, k), *x;
    size_t i;
    if (!l)
        json_object_set_new(have, k, l = json_array());
    json_array_foreach(more, i, x)
        json_array_append(l, x);
}

static void larger(json_t *have, const char *k, json_t *v)
{
    json_t *h = json_object_get(have, k);
    if (!v)
        return;
    json_int_t n = json_integer_value(v);
    if (!h || n == -1 || (json_integer_value(h) != -1 && n > json_integer_value(h)))
        json_object_set(have, k, v);
}

void policy_expose_merge(json_t *have, json_t *v)
{
    json_t *a = json_object_get(v, "allow"), *h = json_object_get(have, "allow");
    if (a && (!h || json_is_true(h)))
        json_object_set(have, "allow", a); /* a rule's false wins */
    if (json_is_true(a)) {
        join(have, "addresses", json_object_get(v, "addresses"));
        join(have, "host_ports", json_object_get(v, "host_ports"));
        larger(have, "max_connections", json_object_get(v, "max_connections"));
        larger(have, "max_bytes", json_object_get(v, "max_bytes"));
    }
}

/* ---- the check --------------------------------------------------------------------- */

static int addr_listed(json_t *l, const unsigned char want[16])
{
    size_t i;
    json_t *x;
    unsigned char a[16];
    json_array_foreach(l, i, x)
        if (json_is_string(x) && addr_of(json_string_value(x), a) && !memcmp(a, want, 16))
            return 1;
    return 0;
}

static int port_listed(json_t *l, int port)
{
    size_t i;
    json_t *x;
    int lo, hi;
    json_array_foreach(l, i, x)
        if (port_range(x, &lo, &hi) && port >= lo && port <= hi)
            return 1;
    return 0;
}

/* The config's bound or the grant's, the larger; -1 = unlimited. */
static int64_t bound(json_t *pconf, const char *ckey, json_t *g, const char *gkey,
                     int64_t def)
{
    json_t *cv = json_object_get(pconf, ckey);
    int64_t c = def, n;
    if (cv && size_of(cv, &n))
        c = n;
    json_t *gv = json_object_get(g, gkey);
    if (gv) {
        int64_t w = json_integer_value(gv);
        if (w == -1 || (c != -1 && w > c))
            c = w;
    }
    return c;
}

static int denied(sbx_err_t *err, const char *option, json_t *requested, const char *msg)
{
    json_t *d = json_pack("{s:s, s:s}", "option", option, "reason", "denied");
    if (requested)
        json_object_set_new(d, "requested", requested);
    return err_make_data(err, SBX_E_PERMISSION, d, "%s", msg);
}

int policy_expose_check(json_t *grants, uid_t uid, json_t *pconf, const char *host,
                        int host_port, int unix_sock, struct policy_expose *lim,
                        sbx_err_t *err)
{
    json_t *g = json_object_get(grants, "expose");
    json_t *ga = json_object_get(g, "allow");
    unsigned char want[16];
    if (json_is_false(ga) || (!ga && json_is_false(json_object_get(pconf, "expose")))) {
        denied(err, "expose", NULL,
               json_is_false(ga) ? "a providers.docker.policy rule denies you expose"
                                 : "providers.docker.expose is false: ports cannot be "
                                   "exposed");
        return -1;
    }
    if (!unix_sock && host && !addr_of(host, want)) {
        err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "host"),
                      "host must be an IPv4 or IPv6 address literal");
        return -1;
    }
    if (!unix_sock && uid != 0) {
        json_t *cl = json_object_get(pconf, "expose_addresses");
        json_t *def = json_pack("[s]", "127.0.0.1");
        addr_of(host ? host : "127.0.0.1", want);
        int ok = addr_listed(cl ? cl : def, want) ||
                 addr_listed(json_object_get(g, "addresses"), want);
        json_decref(def);
        if (!ok) {
            char msg[200];
            snprintf(msg, sizeof(msg),
                     "listening on %s needs providers.docker.expose_addresses or a "
                     "policy rule that lists it",
                     host);
            denied(err, "expose.host", json_string(host), msg);
            return -1;
        }
        json_t *cp = json_object_get(pconf, "expose_host_ports");
        json_t *dp = json_pack("[s]", "1024-65535");
        ok = host_port == 0 || port_listed(cp ? cp : dp, host_port) ||
             port_listed(json_object_get(g, "host_ports"), host_port);
        json_decref(dp);
        if (!ok) {
            char msg[200];
            snprintf(msg, sizeof(msg),
                     "host port %d is outside providers.docker.expose_host_ports and "
                     "the policy's grants",
                     host_port);
            denied(err, "expose.host_port", json_integer(host_port), msg);
            return -1;
        }
    }
    lim->max_connections =
        bound(pconf, "expose_max_connections", g, "max_connections", DEFAULT_MAX_CONNS);
    lim->max_bytes = bound(pconf, "expose_max_bytes", g, "max_bytes", DEFAULT_MAX_BYTES);
    return 0;
}

/* ---- the config's keys, checked at load ------------------------------------------- */

static int conf_bad(sbx_err_t *err, const char *key, const char *what)
{
    return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", key),
                         "providers.docker.%s: %s", key, what);
}

int policy_expose_conf(json_t *pconf, sbx_err_t *err)
{
    json_t *v, *x;
    size_t i;
    unsigned char a[16];
    int lo, hi;
    int64_t n;
    json_array_foreach(json_object_get(pconf, "expose_addresses"), i, x)
        if (!json_is_string(x) || !addr_of(json_string_value(x), a))
            return conf_bad(err, "expose_addresses", "entries are IPv4 or IPv6 literals");
    v = json_object_get(pconf, "expose_host_ports");
    if (v && !json_is_array(v))
        return conf_bad(err, "expose_host_ports", "a list of ports or \"lo-hi\"");
    json_array_foreach(v, i, x)
        if (!port_range(x, &lo, &hi))
            return conf_bad(err, "expose_host_ports", "a list of ports or \"lo-hi\"");
    v = json_object_get(pconf, "expose_max_bytes");
    if (v && !size_of(v, &n))
        return conf_bad(err, "expose_max_bytes", "a positive size, or -1 (unlimited)");
    static const char *const lk[] = {"lookups_max", "lookups_per_uid",
                                     "lookups_per_sandbox", NULL};
    json_t *eg = json_object_get(pconf, "egress");
    for (size_t k = 0; lk[k]; k++) {
        x = json_object_get(eg, lk[k]);
        if (x && (!json_is_integer(x) || json_integer_value(x) < 1))
            return conf_bad(err, "egress", "lookups_* are positive integers");
    }
    return 0;
}
