/*
 * policy.c - the Docker hardening policy: rules resolved to uids at load,
 * one evaluation function (policy_check) for every create.
 *
 * What counts as loosening, for a uid other than 0:
 *   - privileged, a network other than none or the configured one (host and
 *     container:… included), a bind mount, a cap_add entry, a runtime that the
 *     config does not set: each needs a rule that names it;
 *   - a resource limit (memory, memory_swap, pids_limit, cpu_quota,
 *     cpu_shares, the CPU fraction quota/period) above the configured value,
 *     or 0 / -1 (unlimited) where the config sets one: the ceiling is the
 *     larger of the config's value and the rules' (a rule's -1 = unlimited);
 *   - dropping a configured cap_drop or security_opt entry, adding a
 *     security_opt entry that neither the config nor a rule lists, turning
 *     readonly_rootfs off, running as root when the config names a user
 *     (uid or gid 0 in any spelling here; names and a missing group are
 *     resolved in the image's files before the start, docker_sec.c);
 *   - tmpfs options outside rw/ro/noexec/nosuid/nodev/mode=/size= (e.g.
 *     exec, suid) unless a rule lists them, a size above the ceiling;
 *   - ulimits above the configured ones, or ones the config does not set;
 *   - an image named by digest, by "sha256:" id or by a bare hex id prefix;
 *     images outside the rules' images when a rule for the uid lists any;
 *   - a disk above the configured one (or 0, unlimited), a runtime other
 *     than the one a rule requires (runtime_required).
 * Label keys sbxd.* and container names sbxd uses are refused to everyone
 * (policy_reserved): ownership is recorded by sbxd, never by a request.
 * Another user's snapshot image is refused where the image is inspected
 * (docker.c), whatever name reaches it.
 */
#include "providers/docker/policy.h"

#include <ctype.h>
#include <stdarg.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/docker/docker_int.h"
#include "providers/docker/policy_expose.h"
#include "sbx_proto.h"

struct rule {
    uid_t *uids;
    size_t nuids;
    json_t *grants; /* normalised: see parse_grant */
};

struct policy {
    struct rule *rules;
    size_t nrules;
};

/* ---- parsing -------------------------------------------------------------------- */

static const char *const list_keys[] = {
    "network", "images", "cap_add", "runtime", "security_opt", "tmpfs_options", NULL};
static const char *const size_keys[] = {"memory", "memory_swap", "tmpfs_size", "disk",
                                        NULL};
static const char *const int_keys[] = {"pids_limit", "cpu_quota", "cpu_shares", NULL};

static int in_list(const char *const *l, const char *k)
{
    for (size_t i = 0; l[i]; i++)
        if (strcmp(l[i], k) == 0)
            return 1;
    return 0;
}

static int add_uid(struct rule *r, uid_t u)
{
    for (size_t i = 0; i < r->nuids; i++)
        if (r->uids[i] == u)
            return 0;
    uid_t *n = realloc(r->uids, (r->nuids + 1) * sizeof(*n));
    if (!n)
        return -1;
    r->uids = n;
    r->uids[r->nuids++] = u;
    return 0;
}

static int numeric(const char *s, unsigned long *out)
{
    if (!s[0])
        return 0;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p))
            return 0;
    *out = strtoul(s, NULL, 10);
    return 1;
}

/* A scalar name or number as text. */
static const char *name_of(json_t *v, char *buf, size_t n)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
        return buf;
    }
    return json_string_value(v);
}

static int fail(sbx_err_t *err, size_t i, const char *key, const char *fmt, const char *x)
{
    return err_make_data(
        err, SBX_E_PARAMS, json_pack("{s:s}", "param", "providers.docker.policy"),
        "providers.docker.policy.rules[%zu].%s: %s%s", i, key, fmt, x ? x : "");
}

static int resolve_users(struct rule *r, json_t *v, size_t i, sbx_err_t *err)
{
    size_t k;
    json_t *x;
    json_array_foreach(v, k, x) {
        char buf[32];
        const char *s = name_of(x, buf, sizeof(buf));
        unsigned long n;
        if (!s)
            return fail(err, i, "users", "entries must be user names or uids", NULL);
        if (numeric(s, &n)) {
            add_uid(r, (uid_t)n);
            continue;
        }
        struct passwd *pw = getpwnam(s);
        if (!pw)
            return fail(err, i, "users", "unknown user ", s);
        add_uid(r, pw->pw_uid);
    }
    return 0;
}

static int resolve_groups(struct rule *r, json_t *v, size_t i, sbx_err_t *err)
{
    size_t k;
    json_t *x;
    json_array_foreach(v, k, x) {
        char buf[32];
        const char *s = name_of(x, buf, sizeof(buf));
        unsigned long n;
        struct group *gr;
        if (!s)
            return fail(err, i, "groups", "entries must be group names or gids", NULL);
        gr = numeric(s, &n) ? getgrgid((gid_t)n) : getgrnam(s);
        if (!gr)
            return fail(err, i, "groups", "unknown group ", s);
        gid_t gid = gr->gr_gid;
        /* Members listed in the group, then users whose primary group it is. */
        for (char **m = gr->gr_mem; m && *m; m++) {
            struct passwd *pw = getpwnam(*m);
            if (pw)
                add_uid(r, pw->pw_uid);
        }
        setpwent();
        struct passwd *pw;
        while ((pw = getpwent()))
            if (pw->pw_gid == gid)
                add_uid(r, pw->pw_uid);
        endpwent();
    }
    return 0;
}

/* "/srv/p" | "/srv/p:ro" | "/srv/p:rw" | {path, mode} -> {prefix, rw} */
static json_t *parse_volume(json_t *x)
{
    const char *path = NULL, *mode = "ro";
    char *own = NULL;
    if (json_is_string(x)) {
        own = strdup(json_string_value(x));
        char *c = strrchr(own, ':');
        if (c && (strcmp(c, ":ro") == 0 || strcmp(c, ":rw") == 0)) {
            mode = c + 1;
            *c = '\0';
        }
        path = own;
    } else if (json_is_object(x)) {
        path = json_string_value(json_object_get(x, "path"));
        if (json_object_get(x, "mode"))
            mode = json_string_value(json_object_get(x, "mode"));
    }
    json_t *out = NULL;
    if (path && path[0] == '/' && mode && (!strcmp(mode, "ro") || !strcmp(mode, "rw")) &&
        !strstr(path, "/../") && !strstr(path, "/./")) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/')
            n--;
        char *p = strndup(path, n);
        out = json_pack("{s:s, s:b}", "prefix", p, "rw", strcmp(mode, "rw") == 0);
        free(p);
    }
    free(own);
    return out;
}

static int parse_rule(struct rule *r, json_t *o, size_t i, sbx_err_t *err)
{
    if (!json_is_object(o))
        return fail(err, i, "", "a rule must be a mapping", NULL);
    r->grants = json_object();
    const char *k;
    json_t *v;
    int who = 0;
    json_object_foreach(o, k, v) {
        if (!strcmp(k, "users") || !strcmp(k, "groups")) {
            if (!json_is_array(v))
                return fail(err, i, k, "must be a list", NULL);
            int rc =
                k[0] == 'u' ? resolve_users(r, v, i, err) : resolve_groups(r, v, i, err);
            if (rc < 0)
                return -1;
            who = 1;
        } else if (in_list(list_keys, k)) {
            size_t j;
            json_t *x;
            if (!json_is_array(v))
                return fail(err, i, k, "must be a list of strings", NULL);
            json_t *l = json_array();
            json_array_foreach(v, j, x) {
                if (!json_is_string(x) || !json_string_value(x)[0]) {
                    json_decref(l);
                    return fail(err, i, k, "must be a list of strings", NULL);
                }
                const char *s = json_string_value(x);
                if (!strcmp(k, "cap_add") && !strncasecmp(s, "CAP_", 4))
                    s += 4;
                char up[128];
                snprintf(up, sizeof(up), "%s", s);
                if (!strcmp(k, "cap_add"))
                    for (char *c = up; *c; c++)
                        *c = (char)toupper((unsigned char)*c);
                json_array_append_new(l, json_string(up));
            }
            json_object_set_new(r->grants, k, l);
        } else if (!strcmp(k, "volumes")) {
            size_t j;
            json_t *x;
            if (!json_is_array(v))
                return fail(err, i, k, "must be a list of host path prefixes", NULL);
            json_t *l = json_array();
            json_array_foreach(v, j, x) {
                json_t *pv = parse_volume(x);
                if (!pv) {
                    json_decref(l);
                    return fail(
                        err, i, k,
                        "entries are \"/abs/prefix[:ro|:rw]\" or {path, mode: ro|rw}",
                        NULL);
                }
                json_array_append_new(l, pv);
            }
            json_object_set_new(r->grants, k, l);
        } else if (in_list(size_keys, k) || in_list(int_keys, k)) {
            int64_t n = in_list(size_keys, k) ? dkspec_parse_size(v)
                        : json_is_integer(v)  ? json_integer_value(v)
                                              : -2;
            if (n < -1 || n == 0)
                return fail(err, i, k,
                            "must be a positive size or number, or -1 (unlimited)", NULL);
            json_object_set_new(r->grants, k, json_integer(n));
        } else if (!strcmp(k, "runtime_required")) {
            if (!json_is_string(v) || !json_string_value(v)[0])
                return fail(err, i, k, "must be a runtime name (e.g. runsc)", NULL);
            json_object_set(r->grants, k, v);
        } else if (!strcmp(k, "expose")) { /* net18: policy_expose.c */
            json_t *g;
            const char *why;
            if (policy_expose_parse(v, &g, &why) < 0)
                return fail(err, i, k, why, NULL);
            json_object_set_new(r->grants, k, g);
        } else if (!strcmp(k, "privileged")) {
            if (!json_is_boolean(v))
                return fail(err, i, k, "must be true or false", NULL);
            json_object_set(r->grants, k, v);
        } else {
            return fail(err, i, k, "unknown key", NULL);
        }
    }
    if (!who)
        return fail(err, i, "users", "a rule needs users or groups", NULL);
    return 0;
}

int policy_parse(struct policy **out, json_t *conf, sbx_err_t *err)
{
    struct policy *pol = calloc(1, sizeof(*pol));
    if (!pol)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    *out = NULL;
    json_t *rules = NULL;
    if (conf && !json_is_null(conf)) {
        const char *k;
        json_t *v;
        if (!json_is_object(conf)) {
            policy_free(pol);
            return err_make(err, SBX_E_PARAMS,
                            "providers.docker.policy: expected a mapping with rules");
        }
        json_object_foreach(conf, k, v)
            if (strcmp(k, "rules") != 0) {
                policy_free(pol);
                return err_make(err, SBX_E_PARAMS,
                                "providers.docker.policy.%s: unknown key", k);
            }
        rules = json_object_get(conf, "rules");
        if (rules && !json_is_array(rules) && !json_is_null(rules)) {
            policy_free(pol);
            return err_make(err, SBX_E_PARAMS,
                            "providers.docker.policy.rules: expected a list");
        }
    }
    size_t n = json_array_size(rules);
    pol->rules = calloc(n ? n : 1, sizeof(*pol->rules));
    if (!pol->rules) {
        policy_free(pol);
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        pol->nrules = i + 1;
        if (parse_rule(&pol->rules[i], json_array_get(rules, i), i, err) < 0) {
            policy_free(pol);
            return -1;
        }
    }
    *out = pol;
    return 0;
}

void policy_free(struct policy *pol)
{
    if (!pol)
        return;
    for (size_t i = 0; i < pol->nrules; i++) {
        free(pol->rules[i].uids);
        json_decref(pol->rules[i].grants);
    }
    free(pol->rules);
    free(pol);
}

/* ---- grants of a uid --------------------------------------------------------------- */

json_t *policy_grants(const struct policy *pol, uid_t uid)
{
    json_t *g = json_object();
    for (size_t i = 0; pol && i < pol->nrules; i++) {
        const struct rule *r = &pol->rules[i];
        int match = 0;
        for (size_t j = 0; j < r->nuids && !match; j++)
            match = r->uids[j] == uid;
        if (!match)
            continue;
        const char *k;
        json_t *v;
        json_object_foreach(r->grants, k, v) {
            json_t *have = json_object_get(g, k);
            if (json_is_array(v)) {
                if (!have)
                    json_object_set_new(g, k, have = json_array());
                size_t a, b;
                json_t *x, *y;
                json_array_foreach(v, a, x) {
                    int dup = 0;
                    json_array_foreach(have, b, y)
                        dup |= json_equal(x, y);
                    if (!dup)
                        json_array_append(have, x);
                }
            } else if (json_is_integer(v)) {
                json_int_t n = json_integer_value(v), h = json_integer_value(have);
                /* -1 (unlimited) wins; else the larger */
                if (!have || n == -1 || (h != -1 && n > h))
                    json_object_set(g, k, v);
            } else if (json_is_object(v)) { /* expose: policy_expose.c */
                if (!have)
                    json_object_set_new(g, k, have = json_object());
                policy_expose_merge(have, v);
            } else if (json_is_true(v)) {
                json_object_set(g, k, v);
            } else if (json_is_string(v) && !have) {
                /* runtime_required: the first rule naming the uid decides */
                json_object_set(g, k, v);
            }
        }
    }
    return g;
}

/* ---- evaluation -------------------------------------------------------------------- */

/* The next comma-separated token of *p into buf (truncated); 0 at the end. */
static int next_tok(const char **p, char *buf, size_t n)
{
    if (!**p)
        return 0;
    size_t len = strcspn(*p, ",");
    snprintf(buf, n, "%.*s", (int)len, *p);
    *p += len;
    if (**p == ',')
        (*p)++;
    return 1;
}

__attribute__((format(printf, 6, 7))) static int deny(sbx_err_t *err, const char *option,
                                                      const char *reason,
                                                      json_t *requested, int64_t ceiling,
                                                      const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_t *data = json_pack("{s:s, s:s}", "option", option, "reason", reason);
    if (requested)
        json_object_set(data, "requested", requested);
    if (!strcmp(reason, "ceiling"))
        json_object_set_new(data, "ceiling", json_integer(ceiling));
    return err_make_data(err, SBX_E_PERMISSION, data, "docker: policy: options.%s: %s",
                         option, msg);
}

static int str_in(json_t *arr, const char *s, int nocase_cap)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        const char *y = json_string_value(x);
        if (!y)
            continue;
        if (nocase_cap) {
            const char *a = s, *b = y;
            if (!strncasecmp(a, "CAP_", 4))
                a += 4;
            if (!strncasecmp(b, "CAP_", 4))
                b += 4;
            if (!strcasecmp(a, b))
                return 1;
        } else if (!strcmp(s, y)) {
            return 1;
        }
    }
    return 0;
}

/* A configured list option as an array (config values may be one string). */
static json_t *conf_list(json_t *pconf, const char *key)
{
    json_t *v = json_object_get(pconf, key);
    if (json_is_array(v))
        return json_incref(v);
    json_t *a = json_array();
    if (json_is_string(v))
        json_array_append(a, v);
    return a;
}

static int64_t num_of(json_t *o, const char *key, int size)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return INT64_MIN; /* not set */
    if (size)
        return dkspec_parse_size(v);
    if (json_is_integer(v))
        return json_integer_value(v);
    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    return INT64_MIN;
}

/* Ceilings: memory, memory_swap, pids_limit, cpu_quota, cpu_shares. */
static int check_ceilings(json_t *g, json_t *pconf, json_t *eff, sbx_err_t *err)
{
    static const struct {
        const char *key;
        int size;
    } lim[] = {{"memory", 1},    {"memory_swap", 1}, {"pids_limit", 0},
               {"cpu_quota", 0}, {"cpu_shares", 0},  {"disk", 1}};
    for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
        int64_t c = num_of(pconf, lim[i].key, lim[i].size);
        json_t *gv = json_object_get(g, lim[i].key);
        if (json_integer_value(gv) == -1)
            continue; /* a rule: unlimited */
        int64_t ceil = c > 0 ? c : 0;
        if (gv && json_integer_value(gv) > ceil)
            ceil = json_integer_value(gv);
        /* memory + swap is at least memory: a higher memory grant lifts it too */
        json_t *gm = json_object_get(g, "memory");
        if (!strcmp(lim[i].key, "memory_swap") && json_integer_value(gm) > ceil)
            ceil = json_integer_value(gm);
        if (ceil <= 0)
            continue; /* nothing configured: nothing to loosen */
        int64_t v = num_of(eff, lim[i].key, 0);
        if (v == INT64_MIN)
            continue;
        if (v <= 0)
            return deny(err, lim[i].key, "ceiling", json_object_get(eff, lim[i].key),
                        ceil, "%lld means unlimited; the most you may ask for is %lld",
                        (long long)v, (long long)ceil);
        if (v > ceil)
            return deny(err, lim[i].key, "ceiling", json_object_get(eff, lim[i].key),
                        ceil, "%lld is above the ceiling %lld", (long long)v,
                        (long long)ceil);
    }
    /* The CPU fraction: a shorter period with the same quota is more CPU. */
    int64_t cq = num_of(pconf, "cpu_quota", 0);
    json_t *gq = json_object_get(g, "cpu_quota");
    if (json_integer_value(gq) != -1 && (cq > 0 || json_integer_value(gq) > 0)) {
        int64_t ceilq = cq > json_integer_value(gq) ? cq : json_integer_value(gq);
        int64_t cp = num_of(pconf, "cpu_period", 0);
        int64_t q = num_of(eff, "cpu_quota", 0), p = num_of(eff, "cpu_period", 0);
        if (cp <= 0)
            cp = 100000;
        if (p == INT64_MIN || p <= 0)
            p = 100000;
        if (q > 0 && (double)q / (double)p > (double)ceilq / (double)cp + 1e-9)
            return deny(err, "cpu_period", "ceiling", json_object_get(eff, "cpu_period"),
                        cp, "quota %lld per period %lld is more CPU than %lld per %lld",
                        (long long)q, (long long)p, (long long)ceilq, (long long)cp);
    }
    return 0;
}

/* The size a tmpfs gets from its options: the kernel takes the last size=
 * (and nr_blocks= sizes it too), so a second size= or any nr_blocks= is
 * refused (-3) rather than guessed; INT64_MIN = no size (unlimited), -2 =
 * not a byte count. */
static int64_t tmpfs_size_of(const char *opts)
{
    const char *cur = opts;
    char t[96];
    int64_t size = INT64_MIN;
    int seen = 0;
    while (next_tok(&cur, t, sizeof(t))) {
        if (!strncmp(t, "nr_blocks=", 10))
            return -3;
        if (strncmp(t, "size=", 5) != 0)
            continue;
        if (seen++)
            return -3;
        const char *v = t + 5;
        if (!v[0] || strchr(v, '%') || strlen(v) >= 64) {
            size = -2;
            continue;
        }
        json_t *j = json_string(v);
        size = dkspec_parse_size(j);
        json_decref(j);
        if (size < 0)
            size = -2;
    }
    return size;
}

static int check_tmpfs(json_t *g, json_t *pconf, json_t *eff, sbx_err_t *err)
{
    json_t *ct = json_object_get(pconf, "tmpfs");
    int64_t ceil = json_integer_value(json_object_get(g, "tmpfs_size"));
    const char *k;
    json_t *v;
    json_object_foreach(ct, k, v) {
        int64_t s = json_is_string(v) ? tmpfs_size_of(json_string_value(v)) : INT64_MIN;
        if (s > ceil)
            ceil = s;
    }
    json_t *allowed = json_object_get(g, "tmpfs_options");
    json_object_foreach(json_object_get(eff, "tmpfs"), k, v) {
        const char *opts = json_string_value(v);
        if (!opts)
            continue;
        json_t *same = json_object_get(ct, k);
        if (json_is_string(same) && !strcmp(json_string_value(same), opts))
            continue;
        const char *cur = opts;
        int bad = 0;
        char badtok[64] = "", t[64];
        while (!bad && next_tok(&cur, t, sizeof(t))) {
            int ok = !strcmp(t, "rw") || !strcmp(t, "ro") || !strcmp(t, "noexec") ||
                     !strcmp(t, "nosuid") || !strcmp(t, "nodev") ||
                     !strncmp(t, "size=", 5) || !strncmp(t, "mode=", 5) ||
                     str_in(allowed, t, 0);
            if (!ok) {
                bad = 1;
                snprintf(badtok, sizeof(badtok), "%s", t);
            }
        }
        if (bad)
            return deny(err, "tmpfs", "denied", v, 0,
                        "%s: mount option '%s' is not allowed (allowed: rw, ro, noexec, "
                        "nosuid, nodev, mode=, size= and what a rule lists)",
                        k, badtok);
        int64_t s = tmpfs_size_of(opts);
        if (s == -3)
            return deny(err, "tmpfs", "denied", v, 0,
                        "%s: size= given more than once (or nr_blocks=): the kernel "
                        "takes the last one; give one size=",
                        k);
        if (ceil > 0 && (s == INT64_MIN || s <= 0 || s > ceil))
            return deny(err, "tmpfs", "ceiling", v, ceil,
                        "%s: size=%s; at most %lld bytes may be asked for", k,
                        s == INT64_MIN ? "(none: unlimited)" : "(too large or invalid)",
                        (long long)ceil);
        if (s == -2)
            return deny(err, "tmpfs", "denied", v, 0, "%s: size must be a byte count", k);
    }
    return 0;
}

/* Normalised ulimits of the config: [{Name, Soft, Hard}] from any accepted form. */
static int ulimit_of(json_t *list, const char *name, int64_t *soft, int64_t *hard)
{
    if (json_is_object(list)) {
        json_t *x = json_object_get(list, name);
        if (!x)
            return 0;
        if (json_is_integer(x)) {
            *soft = *hard = json_integer_value(x);
            return 1;
        }
        *soft = json_integer_value(json_object_get(x, "soft"));
        *hard = json_object_get(x, "hard")
                    ? json_integer_value(json_object_get(x, "hard"))
                    : *soft;
        return 1;
    }
    size_t i;
    json_t *x;
    json_array_foreach(list, i, x) {
        const char *n = json_string_value(json_object_get(x, "Name"));
        if (n && !strcmp(n, name)) {
            *soft = json_integer_value(json_object_get(x, "Soft"));
            *hard = json_integer_value(json_object_get(x, "Hard"));
            return 1;
        }
        const char *s = json_string_value(x);
        size_t ln = strlen(name);
        if (s && !strncmp(s, name, ln) && s[ln] == '=') {
            char *end;
            *soft = strtoll(s + ln + 1, &end, 10);
            *hard = *end == ':' ? strtoll(end + 1, NULL, 10) : *soft;
            return 1;
        }
    }
    return 0;
}

static int check_ulimits(json_t *pconf, json_t *eff, sbx_err_t *err)
{
    json_t *cu = json_object_get(pconf, "ulimits");
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(eff, "ulimits"), i, x) {
        const char *n = json_string_value(json_object_get(x, "Name"));
        int64_t s = json_integer_value(json_object_get(x, "Soft"));
        int64_t h = json_integer_value(json_object_get(x, "Hard"));
        int64_t cs, ch;
        if (!n)
            continue;
        if (!ulimit_of(cu, n, &cs, &ch))
            return deny(err, "ulimits", "denied", x, 0, "%s is not set by the config", n);
        if ((cs >= 0 && (s < 0 || s > cs)) || (ch >= 0 && (h < 0 || h > ch)))
            return deny(err, "ulimits", "ceiling", x, ch,
                        "%s %lld:%lld is above %lld:%lld", n, (long long)s, (long long)h,
                        (long long)cs, (long long)ch);
    }
    return 0;
}

static int hex_only(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isxdigit((unsigned char)*s))
            return 0;
    return 1;
}

static int check_image(json_t *g, json_t *pconf, json_t *eff, sbx_err_t *err)
{
    const char *img = json_string_value(json_object_get(eff, "image"));
    const char *cimg = json_string_value(json_object_get(pconf, "image"));
    if (!img || (cimg && !strcmp(img, cimg)))
        return 0;
    /* An id (prefix) or digest reaches images nobody named for this user,
     * other users' snapshots among them: names only. */
    if (!strncasecmp(img, "sha256:", 7) || strchr(img, '@') || hex_only(img))
        return deny(
            err, "image", "denied", json_object_get(eff, "image"), 0,
            "%s: images must be named (repository[:tag]), not given by id or digest",
            img);
    json_t *ok = json_object_get(g, "images");
    if (json_array_size(ok) == 0)
        return 0;
    size_t i;
    json_t *x;
    json_array_foreach(ok, i, x) {
        const char *p = json_string_value(x);
        size_t n = strlen(p);
        if (!strcmp(p, "*") || !strcmp(img, p))
            return 0;
        if (n && (p[n - 1] == '*'
                      ? !strncmp(img, p, n - 1)
                      : (p[n - 1] == '/' || p[n - 1] == ':') && !strncmp(img, p, n)))
            return 0;
        /* "name" grants "name:latest" and the other way round */
        if (!strncmp(img, p, n) && !strcmp(img + n, ":latest"))
            return 0;
    }
    return deny(err, "image", "denied", json_object_get(eff, "image"), 0,
                "%s is not among the images a rule grants you", img);
}

static int check_volumes(json_t *g, json_t *pconf, json_t *eff, sbx_err_t *err)
{
    json_t *cv = json_object_get(pconf, "volumes");
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(eff, "volumes"), i, x) {
        const char *b = json_string_value(x);
        if (!b || (json_is_array(cv) && str_in(cv, b, 0)))
            continue; /* configured for everyone */
        const char *c = strchr(b, ':');
        if (b[0] != '/' || !c)
            return deny(err, "volumes", "denied", x, 0,
                        "%s: only bind mounts of granted host paths are allowed", b);
        char *src = strndup(b, (size_t)(c - b));
        const char *opts = strchr(c + 1, ':');
        int ro = 0, badopt = 0;
        if (opts) {
            const char *cur = opts + 1;
            char t[32];
            while (next_tok(&cur, t, sizeof(t))) {
                if (!strcmp(t, "ro"))
                    ro = 1;
                else if (strcmp(t, "rw") && strcmp(t, "private") &&
                         strcmp(t, "rprivate") && strcmp(t, "slave") &&
                         strcmp(t, "rslave"))
                    badopt = 1;
            }
        }
        /* The real path: no "..", no symlink out of the granted tree. */
        char real[PATH_MAX];
        int have = realpath(src, real) != NULL;
        free(src);
        if (badopt)
            return deny(err, "volumes", "denied", x, 0,
                        "%s: bind options other than ro/rw/private/slave are not allowed",
                        b);
        if (!have)
            return deny(err, "volumes", "denied", x, 0,
                        "%s: the host path does not resolve", b);
        int granted = 0, rw_ok = 0;
        size_t k;
        json_t *gv;
        json_array_foreach(json_object_get(g, "volumes"), k, gv) {
            const char *p = json_string_value(json_object_get(gv, "prefix"));
            size_t n = strlen(p);
            if (!strcmp(p, "/") ||
                (!strncmp(real, p, n) && (real[n] == '\0' || real[n] == '/'))) {
                granted = 1;
                rw_ok |= json_is_true(json_object_get(gv, "rw"));
            }
        }
        if (!granted)
            return deny(err, "volumes", "denied", x, 0,
                        "%s: host path %s is under no prefix a rule grants you", b, real);
        if (!ro && !rw_ok)
            return deny(err, "volumes", "denied", x, 0,
                        "%s: you may mount %s read-only only (add :ro)", b, real);
    }
    return 0;
}

/* ---- users, as the runtime resolves them ---------------------------------------- */

/* Go's strconv.Atoi, which the runtime (libcontainer/user) applies to each part
 * of a user spec: an optional sign and decimal digits. 1 = numeric. */
static int go_atoi(const char *s, size_t n, long long *out)
{
    size_t i = 0;
    int neg = 0;
    if (n > 0 && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return 0;
    long long v = 0;
    for (; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        if (v > (LLONG_MAX - 9) / 10)
            return 0; /* out of range: the runtime refuses it too */
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* Splits "user[:group]" as the runtime does (fields at ':'; a third is
 * ignored). */
static void split_spec(const char *spec, struct policy_user *u)
{
    memset(u, 0, sizeof(*u));
    const char *c = strchr(spec, ':');
    size_t ul = c ? (size_t)(c - spec) : strlen(spec);
    snprintf(u->user, sizeof(u->user), "%.*s", (int)ul, spec);
    if (c) {
        const char *g = c + 1;
        size_t gl = strcspn(g, ":");
        snprintf(u->group, sizeof(u->group), "%.*s", (int)gl, g);
    }
    u->uid_numeric = go_atoi(u->user, strlen(u->user), &u->uid);
    u->gid_numeric = u->group[0] && go_atoi(u->group, strlen(u->group), &u->gid);
}

int policy_user_spell(const char *spec, struct policy_user *u)
{
    split_spec(spec ? spec : "", u);
    /* Decided without the image only when both parts are numbers: a name, or
     * no group (the passwd entry's, or 0 when there is none; and the
     * supplementary groups), is read from the image's files. */
    return u->uid_numeric && u->gid_numeric;
}

/* One field of a passwd/group line: a span of the text. */
struct span {
    const char *p;
    size_t n;
};

static int span_is(struct span f, const char *s)
{
    return f.n == strlen(s) && !memcmp(f.p, s, f.n);
}

/* A number field as the runtime reads it (libcontainer/user parseLine): Go's
 * Atoi with the error ignored, so anything not a number (or empty, or a
 * field the line lacks) is 0. Out of range counts as 0 here too: the
 * cautious reading. */
static long long span_num(struct span f)
{
    long long v;
    return go_atoi(f.p, f.n, &v) ? v : 0;
}

/* The next line as the runtime splits it: at '\n', trimmed of white space
 * (Go's TrimSpace), empty lines skipped, no comments; fields at ':' into f
 * (missing ones empty). 0 at the end, -1 when a line starts or ends with a
 * non-ASCII byte (Unicode white space the runtime would trim: not guessed). */
static int next_line(const char **p, const char *end, struct span *f, int nf)
{
    for (;;) {
        if (*p >= end)
            return 0;
        const char *eol = memchr(*p, '\n', (size_t)(end - *p));
        if (!eol)
            eol = end;
        const char *s = *p, *e = eol;
        *p = eol < end ? eol + 1 : end;
        while (s < e && (*s == ' ' || (*s >= '\t' && *s <= '\r')))
            s++;
        while (e > s && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r')))
            e--;
        if (s == e)
            continue;
        if ((unsigned char)s[0] >= 0x80 || (unsigned char)e[-1] >= 0x80)
            return -1;
        for (int k = 0; k < nf; k++) {
            f[k].p = s;
            f[k].n = 0;
            if (s > e)
                continue;
            const char *c = memchr(s, ':', (size_t)(e - s));
            /* the last field takes the rest, as parseLine's does not matter:
             * only the first four are read */
            f[k].n = (size_t)((c ? c : e) - s);
            s = c ? c + 1 : e + 1;
        }
        return 1;
    }
}

int policy_user_resolve(struct policy_user *u, const char *passwd, size_t plen,
                        const char *group, size_t glen, char *why, size_t whylen)
{
    struct span f[7];
    const char *p = passwd ? passwd : "", *pend = p + (passwd ? plen : 0);
    int found = 0, r;
    struct span name = {"", 0};
    long long puid = 0, pgid = 0;
    /* the runtime's defaults: uid 0, gid 0 */
    u->ruid = 0;
    u->rgid = 0;
    u->nsgids = 0;
    while ((r = next_line(&p, pend, f, 7)) > 0) {
        long long x = span_num(f[2]);
        if (found)
            continue;
        if (u->user[0] == '\0' ? x == 0
            : u->uid_numeric   ? x == u->uid
                               : span_is(f[0], u->user)) {
            found = 1;
            name = f[0];
            puid = x;
            pgid = span_num(f[3]);
        }
    }
    if (r < 0) {
        snprintf(why, whylen,
                 "the image's /etc/passwd has a line starting or ending "
                 "in a non-ASCII byte; give the user as uid:gid numbers");
        return -1;
    }
    if (found) {
        u->ruid = puid;
        u->rgid = pgid;
    } else if (u->user[0] && !u->uid_numeric) {
        snprintf(why, whylen, "user %s is not in the image's /etc/passwd", u->user);
        return -1;
    } else if (u->uid_numeric) {
        u->ruid = u->uid;
    }
    const char *g = group ? group : "", *gend = g + (group ? glen : 0);
    int gfound = 0;
    while ((r = next_line(&g, gend, f, 4)) > 0) {
        long long x = span_num(f[2]);
        if (u->group[0]) {
            if (!gfound && (u->gid_numeric ? x == u->gid : span_is(f[0], u->group))) {
                gfound = 1;
                u->rgid = x;
            }
            continue;
        }
        /* implicit group: the groups that list the user are supplementary */
        if (!found)
            continue;
        const char *m = f[3].p, *me = f[3].p + f[3].n;
        while (m <= me) {
            const char *c = memchr(m, ',', (size_t)(me - m));
            size_t n = (size_t)((c ? c : me) - m);
            if (n == name.n && !memcmp(m, name.p, n)) {
                if (u->nsgids == (int)(sizeof(u->sgids) / sizeof(u->sgids[0]))) {
                    snprintf(why, whylen, "the user is in too many groups of the image");
                    return -1;
                }
                u->sgids[u->nsgids++] = x;
            }
            if (!c)
                break;
            m = c + 1;
        }
    }
    if (r < 0) {
        snprintf(why, whylen,
                 "the image's /etc/group has a line starting or ending in "
                 "a non-ASCII byte; give the user as uid:gid numbers");
        return -1;
    }
    if (u->group[0] && !gfound) {
        if (!u->gid_numeric) {
            snprintf(why, whylen, "group %s is not in the image's /etc/group", u->group);
            return -1;
        }
        u->rgid = u->gid;
    }
    return 0;
}

int policy_root_forbidden(uid_t uid, json_t *pconf, json_t *eff)
{
    const char *cu = dkspec_opt_str(pconf, "user"), *eu = dkspec_opt_str(eff, "user");
    /* root may; the configured user is the operator's own choice */
    return uid != 0 && cu && (!eu || strcmp(cu, eu) != 0);
}

int policy_user_ids_check(const char *spec, const struct policy_user *u, sbx_err_t *err)
{
    const char *what = NULL;
    if (u->ruid == 0)
        what = "uid";
    else if (u->rgid == 0)
        what = "gid";
    for (int i = 0; !what && i < u->nsgids; i++)
        if (u->sgids[i] == 0)
            what = "supplementary gid";
    if (!what)
        return 0;
    json_t *v = json_string(spec);
    deny(err, "user", "denied", v, 0,
         "%s runs with %s 0 (root) in this image; the configured user is not root "
         "and only root may run containers as root",
         spec[0] ? spec : "(empty)", what);
    json_decref(v);
    return -1;
}

/* What the spelling alone decides: uid 0, gid 0 or an empty user (the
 * runtime's uid 0) in any spelling ("00", "+0", "-0", "0000:0", ":x"). */
static int check_user(json_t *pconf, json_t *eff, sbx_err_t *err)
{
    if (!policy_root_forbidden(1, pconf, eff))
        return 0;
    const char *eu = dkspec_opt_str(eff, "user");
    struct policy_user u;
    policy_user_spell(eu ? eu : "", &u);
    const char *cu = dkspec_opt_str(pconf, "user");
    if (strlen(eu ? eu : "") >= sizeof(u.user) - 1)
        return deny(err, "user", "denied", json_object_get(eff, "user"), 0,
                    "at most %zu characters", sizeof(u.user) - 2);
    if (!u.user[0] || (u.uid_numeric && u.uid == 0) || (u.gid_numeric && u.gid == 0))
        return deny(err, "user", "denied", json_object_get(eff, "user"), 0,
                    "%s is root (uid or gid 0) instead of the configured user %s",
                    eu ? eu : "(empty)", cu);
    return 0;
}

int policy_check(const struct policy *pol, uid_t uid, json_t *pconf, json_t *eff,
                 sbx_err_t *err)
{
    if (uid == 0)
        return 0;
    json_t *g = policy_grants(pol, uid);
    json_t *cl = NULL;
    int ret = -1;
    size_t i;
    json_t *x;

    if (dkspec_opt_bool(eff, "privileged", 0) &&
        !dkspec_opt_bool(pconf, "privileged", 0) &&
        !json_is_true(json_object_get(g, "privileged"))) {
        deny(err, "privileged", "denied", json_true(), 0,
             "needs a rule with privileged: true");
        goto out;
    }
    const char *net = dkspec_opt_str(eff, "network");
    const char *cnet = dkspec_opt_str(pconf, "network");
    if (net && strcmp(net, "none") != 0 && strcmp(net, cnet ? cnet : "none") != 0 &&
        !str_in(json_object_get(g, "network"), net, 0)) {
        deny(err, "network", "denied", json_object_get(eff, "network"), 0,
             "network %s needs a rule that names it%s", net,
             !strcmp(net, "host") || !strncmp(net, "container:", 10)
                 ? " (host namespaces are root-only otherwise)"
                 : "");
        goto out;
    }
    if (dkspec_opt_bool(pconf, "readonly_rootfs", 0) &&
        !dkspec_opt_bool(eff, "readonly_rootfs", 0)) {
        deny(err, "readonly_rootfs", "denied", json_false(), 0,
             "the configured read-only root file system stays on");
        goto out;
    }
    if (check_user(pconf, eff, err) < 0)
        goto out;
    if (check_image(g, pconf, eff, err) < 0)
        goto out;
    if (check_volumes(g, pconf, eff, err) < 0)
        goto out;
    cl = conf_list(pconf, "cap_add");
    json_array_foreach(json_object_get(eff, "cap_add"), i, x) {
        const char *cap = json_string_value(x);
        if (cap && !str_in(cl, cap, 1) &&
            !str_in(json_object_get(g, "cap_add"), cap, 1)) {
            deny(err, "cap_add", "denied", x, 0, "%s needs a rule that lists it", cap);
            goto out;
        }
    }
    json_decref(cl);
    cl = conf_list(pconf, "cap_drop");
    json_array_foreach(cl, i, x) {
        const char *cap = json_string_value(x);
        if (cap && !str_in(json_object_get(eff, "cap_drop"), cap, 1)) {
            deny(err, "cap_drop", "denied", x, 0, "the configured drop of %s stays", cap);
            goto out;
        }
    }
    json_decref(cl);
    cl = conf_list(pconf, "security_opt");
    json_array_foreach(cl, i, x) {
        const char *so = json_string_value(x);
        if (so && !str_in(json_object_get(eff, "security_opt"), so, 0)) {
            deny(err, "security_opt", "denied", x, 0, "the configured %s stays", so);
            goto out;
        }
    }
    json_array_foreach(json_object_get(eff, "security_opt"), i, x) {
        const char *so = json_string_value(x);
        if (so && !str_in(cl, so, 0) &&
            !str_in(json_object_get(g, "security_opt"), so, 0)) {
            deny(err, "security_opt", "denied", x, 0,
                 "%s is not allowed (only the configured entries and what a rule lists)",
                 so);
            goto out;
        }
    }
    const char *rt = dkspec_opt_str(eff, "runtime"),
               *crt = dkspec_opt_str(pconf, "runtime");
    const char *req_rt = json_string_value(json_object_get(g, "runtime_required"));
    if (req_rt && (!rt || strcmp(rt, req_rt) != 0)) {
        deny(err, "runtime", "required", json_object_get(eff, "runtime"), 0,
             "a rule requires the runtime %s for you (asked: %s)", req_rt,
             rt ? rt : "the engine's default");
        json_object_set_new(err->data, "required", json_string(req_rt));
        goto out;
    }
    if (req_rt) {
        /* required, so granted */
    } else if (rt && (!crt || strcmp(rt, crt) != 0) &&
               !str_in(json_object_get(g, "runtime"), rt, 0)) {
        deny(err, "runtime", "denied", json_object_get(eff, "runtime"), 0,
             "runtime %s needs a rule that lists it", rt);
        goto out;
    }
    if (check_ceilings(g, pconf, eff, err) < 0 || check_tmpfs(g, pconf, eff, err) < 0 ||
        check_ulimits(pconf, eff, err) < 0)
        goto out;
    ret = 0;
out:
    json_decref(cl);
    json_decref(g);
    return ret;
}

const char *policy_required_runtime(const struct policy *pol, uid_t uid)
{
    if (uid == 0)
        return NULL;
    for (size_t i = 0; pol && i < pol->nrules; i++) {
        const struct rule *r = &pol->rules[i];
        const char *rt =
            json_string_value(json_object_get(r->grants, "runtime_required"));
        for (size_t j = 0; rt && j < r->nuids; j++)
            if (r->uids[j] == uid)
                return rt;
    }
    return NULL;
}
