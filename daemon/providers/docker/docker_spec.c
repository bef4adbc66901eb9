/*
 * docker_spec.c - from sandbox options to the Engine's container create body.
 *
 * Options come from three layers, lowest first: the config section
 * providers.docker.*, the request's `options` (`sbxctl --opt key=value`,
 * values that parse as JSON are JSON, anything else a string), and the
 * top-level create params image/env/working_dir. Each is normalised here
 * into one typed object, so the create body, the reconnect warnings and the
 * metadata all read the same values. Request options are lenient about
 * shapes (a list may be a comma-separated string, a map "k=v,k2=v2") because
 * they come from a command line.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "providers/docker/docker_int.h"
#include "providers/docker/egress_rule.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DEFAULT_WORKDIR "/workspace"
#define NAME_MAX_LEN 100

/* Keys a request may set in options. */
static const char *const option_keys[] = {
    "image",        "command",
    "name",         "env",
    "volumes",      "network",
    "privileged",   "memory",
    "memory_swap",  "cpu_shares",
    "cpu_quota",    "cpu_period",
    "pids_limit",   "readonly_rootfs",
    "cap_drop",     "cap_add",
    "security_opt", "ulimits",
    "tmpfs",        "working_dir",
    "user",         "labels",
    "exec_mode",    "runtime",
    "disk",         NULL,
};

static json_t *option_param(const char *key)
{
    char param[96];
    snprintf(param, sizeof(param), "options.%s", key);
    return json_pack("{s:s}", "param", param);
}

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

/* A params error naming options.<key>; fmt takes the key, then detail (or "").
 * A macro so that the compiler checks each literal format against them. */
#define bad(err, key, fmt, detail)                                                       \
    err_make_data((err), SBX_E_PARAMS, option_param(key), fmt, (key), or_empty(detail))

/* ---- lenient scalars ------------------------------------------------------------- */

int dkspec_opt_bool(json_t *opts, const char *key, int dflt)
{
    json_t *v = json_object_get(opts, key);
    if (json_is_boolean(v))
        return json_is_true(v);
    if (json_is_integer(v))
        return json_integer_value(v) != 0;
    const char *s = json_string_value(v);
    if (s) {
        if (!strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") ||
            !strcmp(s, "1"))
            return 1;
        if (!strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off") ||
            !strcmp(s, "0"))
            return 0;
    }
    return dflt;
}

const char *dkspec_opt_str(json_t *opts, const char *key)
{
    const char *s = json_string_value(json_object_get(opts, key));
    return s && s[0] ? s : NULL;
}

static int to_bool(json_t *v, int *out)
{
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    json_t *tmp = json_object();
    json_object_set(tmp, "v", v);
    int r = dkspec_opt_bool(tmp, "v", -1);
    json_decref(tmp);
    if (r < 0)
        return -1;
    *out = r;
    return 0;
}

static int to_int(json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s || !s[0])
        return -1;
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = n;
    return 0;
}

int64_t dkspec_parse_size(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) < -1 ? -2 : json_integer_value(v);
    const char *s = json_string_value(v);
    if (!s || !s[0])
        return -2;
    if (strcmp(s, "-1") == 0)
        return -1;
    char *end;
    errno = 0;
    double n = strtod(s, &end);
    if (errno || end == s || n < 0)
        return -2;
    int64_t mult = 1;
    switch (tolower((unsigned char)*end)) {
    case '\0':
        break;
    case 'b':
        mult = 1;
        end++;
        break;
    case 'k':
        mult = 1024;
        end++;
        break;
    case 'm':
        mult = 1024 * 1024;
        end++;
        break;
    case 'g':
        mult = INT64_C(1024) * 1024 * 1024;
        end++;
        break;
    case 't':
        mult = INT64_C(1024) * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        return -2;
    }
    if (mult > 1 && (*end == 'b' || *end == 'B'))
        end++;
    if (*end)
        return -2;
    return (int64_t)(n * (double)mult);
}

/* A list of strings from an array or "a,b,c". New ref or NULL. */
static json_t *to_list(json_t *v)
{
    if (!v || json_is_null(v))
        return json_array();
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
            if (!json_is_string(x))
                return NULL;
        return json_incref(v);
    }
    const char *s = json_string_value(v);
    if (!s)
        return NULL;
    json_t *a = json_array();
    while (*s) {
        size_t n = strcspn(s, ",");
        if (n > 0)
            json_array_append_new(a, json_stringn(s, n));
        s += n;
        if (*s == ',')
            s++;
    }
    return a;
}

/* {k: v} from an object of scalars, an array of "k=v", or "k=v,k2=v2". New ref or NULL.
 */
static json_t *to_map(json_t *v, char sep)
{
    json_t *o = json_object();
    if (!v || json_is_null(v))
        return o;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (json_is_string(x))
                json_object_set(o, k, x);
            else if (json_is_integer(x) || json_is_real(x) || json_is_boolean(x)) {
                char *t = json_dumps(x, JSON_ENCODE_ANY);
                json_object_set_new(o, k, json_string(t ? t : ""));
                free(t);
            } else {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    }
    json_t *l = to_list(v);
    if (!l) {
        json_decref(o);
        return NULL;
    }
    size_t i;
    json_t *x;
    json_array_foreach(l, i, x) {
        const char *s = json_string_value(x);
        const char *eq = strchr(s, sep);
        if (!eq || eq == s) {
            json_decref(l);
            json_decref(o);
            return NULL;
        }
        char *k = strndup(s, (size_t)(eq - s));
        json_object_set_new(o, k, json_string(eq + 1));
        free(k);
    }
    json_decref(l);
    return o;
}

json_t *dkspec_env_to_obj(json_t *arr)
{
    json_t *o = json_object();
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        const char *s = json_string_value(x);
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!eq || eq == s)
            continue;
        char *k = strndup(s, (size_t)(eq - s));
        json_object_set_new(o, k, json_string(eq + 1));
        free(k);
    }
    return o;
}

json_t *dkspec_env_to_arr(json_t *obj)
{
    json_t *a = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        if (!json_is_string(v))
            continue;
        char *s = xasprintf("%s=%s", k, json_string_value(v));
        json_array_append_new(a, json_string(s));
        free(s);
    }
    return a;
}

/* ---- normalising ------------------------------------------------------------------ */

/* ulimits: {name: {soft, hard}} | {name: N} | [{Name, Soft, Hard}] |
 * "name=soft[:hard],...". */
static json_t *to_ulimits(json_t *v)
{
    json_t *out = json_array();
    if (json_is_null(v))
        return out;
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            const char *n = json_string_value(json_object_get(x, "Name"));
            if (!n)
                n = json_string_value(json_object_get(x, "name"));
            json_t *so = json_object_get(x, "Soft") ? json_object_get(x, "Soft")
                                                    : json_object_get(x, "soft");
            json_t *ha = json_object_get(x, "Hard") ? json_object_get(x, "Hard")
                                                    : json_object_get(x, "hard");
            int64_t s, h;
            if (!n || to_int(so, &s) < 0) {
                json_decref(out);
                return NULL;
            }
            if (!ha || to_int(ha, &h) < 0)
                h = s;
            json_array_append_new(out, json_pack("{s:s, s:I, s:I}", "Name", n, "Soft",
                                                 (json_int_t)s, "Hard", (json_int_t)h));
        }
        return out;
    }
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            int64_t s, h;
            if (json_is_object(x)) {
                if (to_int(json_object_get(x, "soft"), &s) < 0) {
                    json_decref(out);
                    return NULL;
                }
                if (to_int(json_object_get(x, "hard"), &h) < 0)
                    h = s;
            } else if (to_int(x, &s) == 0) {
                h = s;
            } else {
                json_decref(out);
                return NULL;
            }
            json_array_append_new(out, json_pack("{s:s, s:I, s:I}", "Name", k, "Soft",
                                                 (json_int_t)s, "Hard", (json_int_t)h));
        }
        return out;
    }
    json_t *m = to_map(v, '=');
    if (!m) {
        json_decref(out);
        return NULL;
    }
    const char *k;
    json_t *x;
    json_object_foreach(m, k, x) {
        const char *s = json_string_value(x);
        char *end;
        long long so = strtoll(s, &end, 10), ha = so;
        if (end == s || (*end && *end != ':')) {
            json_decref(m);
            json_decref(out);
            return NULL;
        }
        if (*end == ':') {
            const char *h2 = end + 1;
            ha = strtoll(h2, &end, 10);
            if (end == h2 || *end) {
                json_decref(m);
                json_decref(out);
                return NULL;
            }
        }
        json_array_append_new(out, json_pack("{s:s, s:I, s:I}", "Name", k, "Soft",
                                             (json_int_t)so, "Hard", (json_int_t)ha));
    }
    json_decref(m);
    return out;
}

/* tmpfs: {path: opts} | ["path[:opts]"] | "path[:opts],..." -> {path: opts}. */
static json_t *to_tmpfs(json_t *v)
{
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (k[0] != '/' || !(json_is_string(x) || json_is_null(x))) {
                json_decref(o);
                return NULL;
            }
            json_object_set_new(
                o, k, json_string(json_is_string(x) ? json_string_value(x) : ""));
        }
        return o;
    }
    json_t *l = to_list(v);
    if (!l)
        return NULL;
    json_t *o = json_object();
    size_t i;
    json_t *x;
    json_array_foreach(l, i, x) {
        const char *s = json_string_value(x);
        const char *c = strchr(s, ':');
        char *p = c ? strndup(s, (size_t)(c - s)) : strdup(s);
        if (p[0] != '/') {
            free(p);
            json_decref(l);
            json_decref(o);
            return NULL;
        }
        json_object_set_new(o, p, json_string(c ? c + 1 : ""));
        free(p);
    }
    json_decref(l);
    return o;
}

/* volumes: ["src:dst[:opts]"] | {src: "dst[:opts]"} | "src:dst,..." ->
 * ["src:dst[:opts]"]. A host path source must exist (checked when the engine is on this
 * host). */
static json_t *to_binds(json_t *v, int local, sbx_err_t *err)
{
    json_t *l;
    if (json_is_object(v)) {
        l = json_array();
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            if (!json_is_string(x)) {
                json_decref(l);
                bad(err, "volumes", "%s: a map must give container paths as strings%s",
                    NULL);
                return NULL;
            }
            char *s = xasprintf("%s:%s", k, json_string_value(x));
            json_array_append_new(l, json_string(s));
            free(s);
        }
    } else {
        l = to_list(v);
        if (!l) {
            bad(err, "volumes", "%s: expected a list of SRC:DST[:OPTS]%s", NULL);
            return NULL;
        }
    }
    size_t i;
    json_t *x;
    json_array_foreach(l, i, x) {
        const char *s = json_string_value(x);
        const char *c = strchr(s, ':');
        if (!c || c == s || c[1] != '/') {
            json_decref(l);
            bad(err, "volumes", "%s: '%s' is not SRC:DST[:OPTS] with an absolute DST", s);
            return NULL;
        }
        if (s[0] == '/' && local) {
            char *src = strndup(s, (size_t)(c - s));
            struct stat st;
            int ok = stat(src, &st) == 0;
            int e = errno;
            if (!ok) {
                err_make_data(
                    err, SBX_E_PARAMS,
                    json_pack("{s:s, s:s}", "param", "options.volumes", "path", src),
                    "options.volumes: host path %s: %s", src, strerror(e));
                free(src);
                json_decref(l);
                return NULL;
            }
            free(src);
        }
    }
    return l;
}

static json_t *to_command(json_t *v)
{
    if (json_is_string(v))
        return json_string_length(v) ? json_pack("[s, s, O]", "/bin/sh", "-c", v) : NULL;
    if (json_is_array(v) && json_array_size(v) > 0) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
            if (!json_is_string(x))
                return NULL;
        return json_incref(v);
    }
    return NULL;
}

/* options.egress {allow} (req, borrowed) checked against providers.docker.egress
 * into o: its egress, and the proxy env added to o's env. 0, or -1 with err. */
static int egress_options(json_t *req, json_t *pconf, json_t *o, sbx_err_t *err)
{
    if (!req || json_is_null(req))
        return 0;
    json_t *allow = json_object_get(req, "allow");
    if (!json_is_object(req) || !json_is_array(allow) || json_object_size(req) != 1)
        return err_make_data(
            err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.egress"),
            "options.egress must be {\"allow\": [\"host\", \"*.domain\", "
            "\"host:port\", ...]}");
    json_t *ceil = json_object_get(json_object_get(pconf, "egress"), "allow");
    size_t i, j;
    json_t *v, *c;
    if (json_array_size(allow) > 100)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "options.egress.allow", "max", 100),
            "options.egress.allow has more than 100 entries");
    json_array_foreach(allow, i, v) {
        const char *w = json_string_value(v);
        if (!w || !egress_rule_valid(w))
            return err_make_data(
                err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.egress.allow"),
                "options.egress.allow: not a host pattern: %s", w ? w : "(not a string)");
        int ok = 0;
        json_array_foreach(ceil, j, c)
            ok |= json_is_string(c) && egress_rule_covers(json_string_value(c), w);
        if (!ok)
            return err_make_data(err, SBX_E_PERMISSION,
                                 json_pack("{s:s, s:s, s:s}", "option", "egress",
                                           "reason", "ceiling", "requested", w),
                                 "egress to %s is beyond providers.docker.egress.allow",
                                 w);
    }
    json_object_set_new(o, "egress", json_pack("{s:O}", "allow", allow));
    json_t *env = json_object_get(o, "env");
    static const char *const keys[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                                       "https_proxy"};
    for (size_t k = 0; env && k < 4; k++)
        json_object_set_new(env, keys[k], json_string("http://127.0.0.1:3128"));
    if (env) {
        json_object_set_new(env, "NO_PROXY", json_string("localhost,127.0.0.1"));
        json_object_set_new(env, "no_proxy", json_string("localhost,127.0.0.1"));
    }
    return 0;
}

int dkspec_options(json_t **out, json_t *pconf, json_t *sbconf, sbx_err_t *err)
{
    json_t *req = json_object_get(sbconf, "options");
    if (req && !json_is_object(req) && !json_is_null(req))
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options"),
                             "options must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(req, k, v) {
        int known = strcmp(k, "egress") == 0; /* docker_net.c's, not layered */
        for (size_t i = 0; option_keys[i]; i++)
            known |= strcmp(option_keys[i], k) == 0;
        if (!known)
            return bad(err, k, "options.%s: not a Docker option%s", NULL);
    }
    /* Layer: config, then request options. */
    json_t *raw = json_object();
    for (size_t i = 0; option_keys[i]; i++) {
        json_t *c = json_object_get(pconf, option_keys[i]);
        json_t *r = json_object_get(req, option_keys[i]);
        if (r && !json_is_null(r))
            json_object_set(raw, option_keys[i], r);
        else if (c && !json_is_null(c))
            json_object_set(raw, option_keys[i], c);
    }
    json_t *o = json_object();
    int local = !dkspec_opt_str(pconf, "host") ||
                strncmp(dkspec_opt_str(pconf, "host"), "unix://", 7) == 0;
    int ret = -1;

    /* image: create --image, then options, then config, then built-in. */
    const char *img = json_string_value(json_object_get(sbconf, "image"));
    if (!img || !img[0])
        img = dkspec_opt_str(raw, "image");
    json_object_set_new(o, "image", json_string(img ? img : DK_DEFAULT_IMAGE));

    json_t *cmd = json_object_get(raw, "command");
    if (cmd && !json_is_null(cmd)) {
        json_t *c = to_command(cmd);
        if (!c) {
            bad(err, "command",
                "options.%s: must be a string or a non-empty list of strings%s", NULL);
            goto out;
        }
        json_object_set_new(o, "command", c);
    }
    if (dkspec_opt_str(raw, "name"))
        json_object_set_new(o, "name", json_string(dkspec_opt_str(raw, "name")));

    json_t *env = to_map(json_object_get(raw, "env"), '=');
    if (!env) {
        bad(err, "env", "options.%s: must be an object or a list of K=V%s", NULL);
        goto out;
    }
    json_t *cenv = json_object_get(sbconf, "env");
    if (json_is_object(cenv))
        json_object_update(env, cenv);
    /* sandbox.set_env nulls do not apply to the container; drop non-strings. */
    const char *ek;
    json_t *ev;
    void *tmp;
    json_object_foreach_safe(env, tmp, ek, ev)
        if (!json_is_string(ev))
            json_object_del(env, ek);
    json_object_set_new(o, "env", env);
    if (egress_options(json_object_get(req, "egress"), pconf, o, err) < 0)
        goto out;

    json_t *vols = json_object_get(raw, "volumes");
    json_t *binds =
        vols && !json_is_null(vols) ? to_binds(vols, local, err) : json_array();
    if (!binds)
        goto out;
    json_object_set_new(o, "volumes", binds);

    const char *net = dkspec_opt_str(raw, "network");
    json_object_set_new(o, "network", json_string(net ? net : "none"));

    static const char *const bools[] = {"privileged", "readonly_rootfs", NULL};
    for (size_t i = 0; bools[i]; i++) {
        int b = 0;
        json_t *x = json_object_get(raw, bools[i]);
        if (x && !json_is_null(x) && to_bool(x, &b) < 0) {
            bad(err, bools[i], "options.%s: must be true or false%s", NULL);
            goto out;
        }
        json_object_set_new(o, bools[i], json_boolean(b));
    }
    /* disk: the writable layer's size (docker_disk.c); 0 = no limit */
    static const char *const sizes[] = {"memory", "memory_swap", "disk", NULL};
    for (size_t i = 0; sizes[i]; i++) {
        json_t *x = json_object_get(raw, sizes[i]);
        if (!x || json_is_null(x))
            continue;
        int64_t n = dkspec_parse_size(x);
        if (n < -1 || (n == -1 && i != 1)) {
            bad(err, sizes[i], "options.%s: must be a size like 512m or 2g%s", NULL);
            goto out;
        }
        json_object_set_new(o, sizes[i], json_integer(n));
    }
    static const char *const ints[] = {"cpu_shares", "cpu_quota", "cpu_period",
                                       "pids_limit", NULL};
    for (size_t i = 0; ints[i]; i++) {
        json_t *x = json_object_get(raw, ints[i]);
        if (!x || json_is_null(x))
            continue;
        int64_t n;
        if (to_int(x, &n) < 0 || n < -1) {
            bad(err, ints[i], "options.%s: must be an integer%s", NULL);
            goto out;
        }
        json_object_set_new(o, ints[i], json_integer(n));
    }
    static const char *const lists[] = {"cap_drop", "cap_add", "security_opt", NULL};
    for (size_t i = 0; lists[i]; i++) {
        json_t *l =
            to_list(json_object_get(raw, lists[i]) ? json_object_get(raw, lists[i])
                                                   : json_null());
        if (!l) {
            bad(err, lists[i], "options.%s: must be a list of strings%s", NULL);
            goto out;
        }
        json_object_set_new(o, lists[i], l);
    }
    json_t *ul = to_ulimits(
        json_object_get(raw, "ulimits") ? json_object_get(raw, "ulimits") : json_null());
    if (!ul) {
        bad(err, "ulimits",
            "options.%s: expected {name: {soft, hard}} or name=soft[:hard]%s", NULL);
        goto out;
    }
    json_object_set_new(o, "ulimits", ul);
    json_t *tf = json_object_get(raw, "tmpfs");
    json_t *tm = tf && !json_is_null(tf) ? to_tmpfs(tf) : json_object();
    if (!tm) {
        bad(err, "tmpfs", "options.%s: expected {path: options} or path[:options]%s",
            NULL);
        goto out;
    }
    json_object_set_new(o, "tmpfs", tm);

    const char *wd = json_string_value(json_object_get(sbconf, "working_dir"));
    if (!wd)
        wd = dkspec_opt_str(raw, "working_dir");
    if (wd && wd[0] != '/') {
        bad(err, "working_dir", "options.%s: must be an absolute path%s", NULL);
        goto out;
    }
    json_object_set_new(o, "working_dir", json_string(wd ? wd : DEFAULT_WORKDIR));
    /* An empty user is the configured one, never the image's USER: the
     * policy's view of who runs must be what runs. */
    json_t *ru = json_object_get(req, "user");
    if (ru && !json_is_null(ru) && !json_is_string(ru)) {
        bad(err, "user", "options.%s: must be a string (\"uid:gid\" or a name)%s", NULL);
        goto out;
    }
    const char *user = dkspec_opt_str(req, "user");
    if (!user)
        user = dkspec_opt_str(pconf, "user");
    if (user)
        json_object_set_new(o, "user", json_string(user));
    /* Labels add up: the config's (site markers) and the request's. */
    json_t *labels = to_map(json_object_get(pconf, "labels"), '=');
    json_t *rl = to_map(json_object_get(req, "labels"), '=');
    if (!labels || !rl) {
        json_decref(labels);
        json_decref(rl);
        bad(err, "labels", "options.%s: must be an object or a list of k=v%s", NULL);
        goto out;
    }
    json_object_update(labels, rl);
    json_decref(rl);
    json_object_set_new(o, "labels", labels);
    const char *mode = dkspec_opt_str(raw, "exec_mode");
    if (mode && strcmp(mode, "agent") != 0 && strcmp(mode, "docker-exec") != 0) {
        bad(err, "exec_mode", "options.%s: must be agent or docker-exec%s", NULL);
        goto out;
    }
    if (mode)
        json_object_set_new(o, "exec_mode", json_string(mode));

    if (dkspec_opt_str(raw, "runtime"))
        json_object_set_new(o, "runtime", json_string(dkspec_opt_str(raw, "runtime")));
    /* Whether the owner may have all this is policy_check's (policy.c). */
    *out = o;
    o = NULL;
    ret = 0;
out:
    json_decref(o);
    json_decref(raw);
    return ret;
}

/* ---- create body ----------------------------------------------------------------------
 */

int dkspec_create_body(json_t **out, json_t *opts, const char *sandbox_id, uid_t owner,
                       const char *entry, json_t *labels_extra, sbx_err_t *err)
{
    json_t *b = json_object();
    json_object_set(b, "Image", json_object_get(opts, "image"));
    json_t *cmd = json_object_get(opts, "command");
    if (entry) {
        json_t *ep = json_pack("[s]", entry);
        if (cmd) {
            json_array_append_new(ep, json_string("--"));
            json_array_extend(ep, cmd);
        }
        json_object_set_new(b, "Entrypoint", ep);
    } else if (cmd) {
        json_object_set(b, "Cmd", cmd);
    }
    json_object_set_new(b, "Env", dkspec_env_to_arr(json_object_get(opts, "env")));
    json_object_set(b, "WorkingDir", json_object_get(opts, "working_dir"));
    if (json_object_get(opts, "user"))
        json_object_set(b, "User", json_object_get(opts, "user"));
    json_t *labels = json_deep_copy(json_object_get(opts, "labels"));
    if (labels_extra)
        json_object_update(labels, labels_extra);
    char ownbuf[32];
    snprintf(ownbuf, sizeof(ownbuf), "%u", (unsigned)owner);
    json_object_set_new(labels, "sbxd.id", json_string(sandbox_id));
    json_object_set_new(labels, "sbxd.owner", json_string(ownbuf));
    json_object_set_new(b, "Labels", labels);
    json_object_set_new(b, "OpenStdin", json_true());
    json_object_set_new(b, "StdinOnce", json_false());
    json_object_set_new(b, "AttachStdin", json_true());
    json_object_set_new(b, "AttachStdout", json_true());
    json_object_set_new(b, "AttachStderr", json_true());
    json_object_set_new(b, "Tty", json_false());
    /* The agent lives in a volume: uploads there work on a read-only rootfs,
     * and commits (snapshots) leave it out. */
    json_object_set_new(b, "Volumes", json_pack("{s:{}}", DK_AGENT_DIR));

    json_t *hc = json_object();
    json_object_set(hc, "NetworkMode", json_object_get(opts, "network"));
    json_object_set(hc, "Privileged", json_object_get(opts, "privileged"));
    json_object_set(hc, "ReadonlyRootfs", json_object_get(opts, "readonly_rootfs"));
    static const struct {
        const char *opt, *field;
    } nums[] = {{"memory", "Memory"},        {"memory_swap", "MemorySwap"},
                {"cpu_shares", "CpuShares"}, {"cpu_quota", "CpuQuota"},
                {"cpu_period", "CpuPeriod"}, {"pids_limit", "PidsLimit"}};
    for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
        json_t *v = json_object_get(opts, nums[i].opt);
        if (v && (json_integer_value(v) != 0 || strcmp(nums[i].opt, "cpu_quota") == 0))
            json_object_set(hc, nums[i].field, v);
    }
    json_object_set(hc, "CapDrop", json_object_get(opts, "cap_drop"));
    json_object_set(hc, "CapAdd", json_object_get(opts, "cap_add"));
    json_object_set(hc, "SecurityOpt", json_object_get(opts, "security_opt"));
    json_object_set(hc, "Ulimits", json_object_get(opts, "ulimits"));
    json_object_set(hc, "Tmpfs", json_object_get(opts, "tmpfs"));
    json_object_set(hc, "Binds", json_object_get(opts, "volumes"));
    if (json_object_get(opts, "runtime"))
        json_object_set(hc, "Runtime", json_object_get(opts, "runtime"));
    json_object_set_new(hc, "Init", json_false());
    /* PID 1's stdout is the agent channel: every output byte of every
     * process would also land in the engine's log files. */
    json_object_set_new(hc, "LogConfig",
                        json_pack("{s:s, s:{}}", "Type", "none", "Config"));
    json_object_set_new(b, "HostConfig", hc);
    (void)err;
    *out = b;
    return 0;
}

/* ---- reconnect warnings
 * ------------------------------------------------------------------ */

static int same_set(json_t *a, json_t *b)
{
    size_t na = json_array_size(a), nb = json_array_size(b);
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++) {
        const char *x = json_string_value(json_array_get(a, i));
        int found = 0;
        for (size_t j = 0; j < nb && !found; j++) {
            const char *y = json_string_value(json_array_get(b, j));
            if (!x || !y)
                continue;
            if (!strncasecmp(x, "CAP_", 4))
                x += 4;
            if (!strncasecmp(y, "CAP_", 4))
                y += 4;
            found = strcasecmp(x, y) == 0;
        }
        if (!found)
            return 0;
    }
    return 1;
}

static void warn(json_t *w, const char *what, json_t *want, json_t *have)
{
    char *a = json_dumps(want ? want : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
    char *b = json_dumps(have ? have : json_null(), JSON_ENCODE_ANY | JSON_COMPACT);
    char *s = NULL;
    if (asprintf(&s, "%s: requested %s, the existing container has %s", what, a ? a : "?",
                 b ? b : "?") >= 0)
        json_array_append_new(w, json_string(s));
    free(s);
    free(a);
    free(b);
}

json_t *dkspec_warnings(json_t *opts, json_t *inspect)
{
    json_t *w = json_array();
    json_t *hc = json_object_get(inspect, "HostConfig");
    json_t *cfg = json_object_get(inspect, "Config");
    static const struct {
        const char *opt, *field;
    } scal[] = {{"privileged", "Privileged"},  {"readonly_rootfs", "ReadonlyRootfs"},
                {"network", "NetworkMode"},    {"memory", "Memory"},
                {"memory_swap", "MemorySwap"}, {"pids_limit", "PidsLimit"},
                {"cpu_shares", "CpuShares"},   {"cpu_quota", "CpuQuota"},
                {"cpu_period", "CpuPeriod"}};
    for (size_t i = 0; i < sizeof(scal) / sizeof(scal[0]); i++) {
        json_t *want = json_object_get(opts, scal[i].opt);
        json_t *have = json_object_get(hc, scal[i].field);
        if (!want)
            continue;
        if (json_is_integer(want) && json_is_integer(have) &&
            json_integer_value(want) == json_integer_value(have))
            continue;
        if (json_is_integer(want) && json_integer_value(want) == 0 &&
            (!have || json_is_null(have)))
            continue;
        if (!json_is_integer(want) && json_equal(want, have))
            continue;
        warn(w, scal[i].opt, want, have);
    }
    static const struct {
        const char *opt, *field;
    } sets[] = {
        {"cap_drop", "CapDrop"}, {"cap_add", "CapAdd"}, {"security_opt", "SecurityOpt"}};
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        json_t *want = json_object_get(opts, sets[i].opt);
        json_t *have = json_object_get(hc, sets[i].field);
        if (!same_set(want, json_is_array(have) ? have : NULL))
            warn(w, sets[i].opt, want, have);
    }
    json_t *wu = json_object_get(opts, "user");
    json_t *hu = json_object_get(cfg, "User");
    if ((wu && !json_equal(wu, hu)) ||
        (!wu && json_string_value(hu) && json_string_value(hu)[0]))
        warn(w, "user", wu, hu);
    if (json_array_size(w) == 0) {
        json_decref(w);
        return NULL;
    }
    return w;
}

/* ---- names, images, tar ---------------------------------------------------------------
 */

char *dkspec_name(const char *want, const char *sandbox_id)
{
    char buf[NAME_MAX_LEN + 8];
    const char *src = want && want[0] ? want : NULL;
    size_t o = 0;
    if (!src) {
        snprintf(buf, sizeof(buf), "sbx-%s", sandbox_id);
        return strdup(buf);
    }
    if (!isalnum((unsigned char)src[0])) {
        memcpy(buf, "sbx-", 4);
        o = 4;
    }
    for (const char *p = src; *p && o < NAME_MAX_LEN; p++) {
        unsigned char c = (unsigned char)*p;
        buf[o++] = (char)(isalnum(c) || c == '_' || c == '.' || c == '-' ? c : '_');
    }
    buf[o] = '\0';
    return strdup(buf);
}

char *dkspec_image_ref(const char *image)
{
    const char *slash = strrchr(image, '/');
    const char *last = slash ? slash + 1 : image;
    char *out = NULL;
    if (strchr(last, ':') || strchr(image, '@') || strncmp(image, "sha256:", 7) == 0)
        return strdup(image);
    out = xasprintf("%s:latest", image);
    return out;
}

/* width - 1 octal digits, zero-padded, then NUL (width includes it). */
static void octal(char *dst, size_t width, unsigned long long v)
{
    dst[width - 1] = '\0';
    for (size_t i = width - 1; i-- > 0; v >>= 3)
        dst[i] = (char)('0' + (v & 7));
}

/* One ustar header at h (512 bytes, zeroed): type '0' file or '5' directory. */
static void tar_header(char *h, const char *name, unsigned mode, char type, size_t len)
{
    snprintf(h, 100, "%s", name);
    octal(h + 100, 8, mode);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, len);
    octal(h + 136, 12, 0);
    memset(h + 148, ' ', 8);
    h[156] = type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    snprintf(h + 265, 32, "root");
    snprintf(h + 297, 32, "root");
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 7, "%06o", sum);
    h[155] = ' ';
}

int dkspec_tar_one(uint8_t **out, size_t *out_len, const char *name, unsigned mode,
                   const uint8_t *data, size_t len)
{
    size_t padded = (len + 511) / 512 * 512;
    size_t total = 512 + padded + 1024;
    uint8_t *t = calloc(1, total);
    if (!t)
        return -1;
    tar_header((char *)t, name, mode, '0', len);
    memcpy(t + 512, data, len);
    *out = t;
    *out_len = total;
    return 0;
}

int dkspec_tar_agent_tree(uint8_t **out, size_t *out_len, const uint8_t *data, size_t len)
{
    size_t padded = (len + 511) / 512 * 512;
    size_t total = 3 * 512 + padded + 1024;
    uint8_t *t = calloc(1, total);
    if (!t)
        return -1;
    tar_header((char *)t, ".sbx/", 0755, '5', 0);
    tar_header((char *)t + 512, ".sbx/run/", 0700, '5', 0);
    tar_header((char *)t + 1024, ".sbx/sbx-init", 0755, '0', len);
    memcpy(t + 1536, data, len);
    *out = t;
    *out_len = total;
    return 0;
}
