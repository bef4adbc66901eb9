/*
 * config_provider.c - the providers.<name> sections of the configuration:
 * each provider's key table (struct cfg_schema, from its provider table)
 * checks its section, and the values become the JSON object the provider
 * is loaded with (config_provider()). Split from config.c, which calls
 * cfg_on_provider for the top-level key "providers".
 */
#include "config_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sbx_proto.h"

/* ---- provider sections ----------------------------------------------------- */

const struct cfg_schema *cfg_find_schema(struct ld *ld, const char *name)
{
    for (size_t i = 0; i < ld->nschemas; i++)
        if (ld->schemas[i].provider && !strcmp(ld->schemas[i].provider, name))
            return &ld->schemas[i];
    return NULL;
}

/* "duktape, docker, modal" (or "none"), shortened if absurdly long. */
void cfg_known_providers(struct ld *ld, char *buf, size_t size)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < ld->nschemas && o < size; i++) {
        int n =
            snprintf(buf + o, size - o, "%s%s", o ? ", " : "", ld->schemas[i].provider);
        if (n < 0)
            break;
        o += (size_t)n;
    }
    if (!buf[0])
        snprintf(buf, size, "none");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && !strcmp(s + ls - lx, suffix);
}

static int to_json(struct ld *ld, const char *path, yaml_node_t *n, int depth,
                   json_t **out);

/* Converts one item of a sequence (to_json, or a string for CFG_LIST). */
typedef int (*item_fn)(struct ld *ld, const char *path, yaml_node_t *n, int depth,
                       json_t **out);

/* The items of sequence node n as a JSON array in *out (caller owns), each
 * converted by fn at `depth`, with paths "path[i]". Nothing in *out on failure. */
static int seq_to_array(struct ld *ld, const char *path, const yaml_node_t *n, item_fn fn,
                        int depth, json_t **out)
{
    int ret = 0;
    json_t *arr = json_array();
    if (!arr)
        return cfg_oom(ld);
    yaml_node_item_t *start = n->data.sequence.items.start;
    for (yaml_node_item_t *it = start; it < n->data.sequence.items.top; it++) {
        char ipath[PATH_BUF];
        json_t *val = NULL;
        cfg_path_fmt(ipath, "%s[%td]", path, it - start);
        ret = fn(ld, ipath, yaml_document_get_node(ld->doc, *it), depth, &val);
        if (ret < 0)
            break;
        if (json_array_append_new(arr, val) < 0) {
            ret = cfg_oom(ld);
            break;
        }
    }
    if (ret < 0) {
        json_decref(arr);
        return ret;
    }
    *out = arr;
    return 0;
}

struct any_ctx {
    json_t *obj;
    int depth;
};

static int on_any_pair(struct ld *ld, const char *path, const char *key, yaml_node_t *k,
                       yaml_node_t *v, void *privdata)
{
    struct any_ctx *ac = privdata;
    json_t *val = NULL;
    (void)k;
    int ret = to_json(ld, path, v, ac->depth + 1, &val);
    if (ret < 0)
        return ret;
    if (json_object_set_new(ac->obj, key, val) < 0)
        return cfg_oom(ld);
    return 0;
}

/* Plain scalars are typed (null, bool, int, float); quoted ones stay strings. */
static json_t *scalar_to_json(const yaml_node_t *n)
{
    const char *s = cfg_sval(n);
    size_t len = n->data.scalar.length;
    int64_t iv;
    if (!cfg_is_plain(n))
        return json_stringn(s, len);
    if (cfg_is_null(n))
        return json_null();
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
        return json_true();
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
        return json_false();
    /* Leading-zero and overflowing numbers stay strings: lossless, and the
     * provider can decide what "0755" means. */
    if (cfg_parse_int(s, 0, &iv) == NUM_OK)
        return json_integer(iv);
    if (cfg_looks_float(s)) {
        double d = strtod(s, NULL);
        if (isfinite(d))
            return json_real(d);
    }
    return json_stringn(s, len);
}

static int to_json(struct ld *ld, const char *path, yaml_node_t *n, int depth,
                   json_t **out)
{
    int ret = 0;
    *out = NULL;
    if (depth > ANY_MAX_DEPTH)
        return cfg_fail_at(
            ld, n->start_mark,
            "key '%s': nested more than %d levels deep (a recursive alias?)", path,
            ANY_MAX_DEPTH);
    if (++ld->any_nodes > ANY_MAX_NODES)
        return cfg_fail_at(ld, n->start_mark,
                           "key '%s': more than %d nodes (aliases expanding too much?)",
                           path, ANY_MAX_NODES);

    switch (n->type) {
    case YAML_SCALAR_NODE:
        if ((ret = cfg_check_nul(ld, path, n)) < 0)
            return ret;
        *out = scalar_to_json(n);
        return *out ? 0 : cfg_oom(ld);
    case YAML_SEQUENCE_NODE:
        return seq_to_array(ld, path, n, to_json, depth + 1, out);
    case YAML_MAPPING_NODE: {
        struct any_ctx ac = {json_object(), depth};
        if (!ac.obj)
            return cfg_oom(ld);
        ret = cfg_each_pair(ld, n, path, on_any_pair, &ac);
        if (ret < 0) {
            json_decref(ac.obj);
            return ret;
        }
        *out = ac.obj;
        return 0;
    }
    default:
        return cfg_fail_at(ld, n->start_mark, "key '%s': empty YAML node", path);
    }
}

/* A scalar that must be a non-null string, for CFG_STR and the items of MAP and LIST. */
static int string_value(struct ld *ld, const char *path, const yaml_node_t *n,
                        json_t **out)
{
    int ret;
    if (n->type != YAML_SCALAR_NODE || cfg_is_null(n))
        return cfg_expected(ld, path, n, "a string");
    if ((ret = cfg_check_nul(ld, path, n)) < 0)
        return ret;
    *out = json_stringn(cfg_sval(n), n->data.scalar.length);
    return *out ? 0 : cfg_oom(ld);
}

static int string_item(struct ld *ld, const char *path, yaml_node_t *n, int depth,
                       json_t **out)
{
    return string_value(ld, path, n, out);
}

static int on_map_pair(struct ld *ld, const char *path, const char *key, yaml_node_t *k,
                       yaml_node_t *v, void *privdata)
{
    json_t *val = NULL;
    int ret = string_value(ld, path, v, &val);
    (void)k;
    if (ret < 0)
        return ret;
    if (json_object_set_new(privdata, key, val) < 0)
        return cfg_oom(ld);
    return 0;
}

/* Converts a provider value according to its type; *out is NULL for a null value. */
static int convert(struct ld *ld, const char *path, const char *key, enum cfg_type type,
                   yaml_node_t *v, json_t **out)
{
    int ret = 0;
    *out = NULL;
    if (cfg_is_null(v))
        return 0; /* "not set": the provider's default applies */

    switch (type) {
    case CFG_STR:
        return string_value(ld, path, v, out);
    case CFG_INT: {
        int64_t iv = 0;
        ret = cfg_get_int(ld, path, v, ends_with(key, "_bytes"), 0, INT64_MAX, &iv);
        if (ret < 0)
            return ret;
        *out = json_integer(iv);
        return *out ? 0 : cfg_oom(ld);
    }
    case CFG_BOOL: {
        int b = 0;
        if (v->type != YAML_SCALAR_NODE || cfg_parse_bool(cfg_sval(v), &b) != NUM_OK)
            return cfg_expected(ld, path, v, "a boolean (true or false)");
        *out = json_boolean(b);
        return 0;
    }
    case CFG_MAP: {
        if (v->type != YAML_MAPPING_NODE)
            return cfg_expected(ld, path, v, "a mapping of strings");
        json_t *obj = json_object();
        if (!obj)
            return cfg_oom(ld);
        if ((ret = cfg_each_pair(ld, v, path, on_map_pair, obj)) < 0) {
            json_decref(obj);
            return ret;
        }
        *out = obj;
        return 0;
    }
    case CFG_LIST: {
        if (v->type != YAML_SEQUENCE_NODE)
            return cfg_expected(ld, path, v, "a sequence of strings");
        return seq_to_array(ld, path, v, string_item, 0, out);
    }
    case CFG_ANY:
        return to_json(ld, path, v, 0, out);
    }
    return err_make(ld->err, SBX_E_INTERNAL,
                    "%s: key '%s': bad type %d in the provider schema", ld->file, path,
                    (int)type);
}

struct provider_ctx {
    const struct cfg_schema *schema;
    json_t *obj;
};

static int on_provider_key(struct ld *ld, const char *path, const char *key,
                           yaml_node_t *k, yaml_node_t *v, void *privdata)
{
    struct provider_ctx *pc = privdata;
    enum cfg_type type = CFG_BOOL;
    int found = !strcmp(key, "enabled");

    for (const struct cfg_key *ck = pc->schema->keys; !found && ck && ck->name; ck++) {
        if (!strcmp(ck->name, key)) {
            type = ck->type;
            found = 1;
        }
    }
    if (!found) {
        struct suggest s = {key, NULL, SIZE_MAX};
        cfg_suggest_try(&s, "enabled");
        for (const struct cfg_key *ck = pc->schema->keys; ck && ck->name; ck++)
            cfg_suggest_try(&s, ck->name);
        return cfg_unknown_key(ld, k, path, &s);
    }

    json_t *val = NULL;
    int ret = convert(ld, path, key, type, v, &val);
    if (ret < 0)
        return ret;
    if (!val) {
        json_object_del(pc->obj, key);
        return 0;
    }
    if (json_object_set_new(pc->obj, key, val) < 0)
        return cfg_oom(ld);
    return 0;
}

/* The providers object holds an entry for every known provider. */
int cfg_provider_obj(struct ld *ld, const char *name, json_t **out)
{
    json_t *obj = json_object_get(ld->cfg->providers, name);
    if (!json_is_object(obj)) {
        obj = json_object();
        if (!obj || json_object_set_new(ld->cfg->providers, name, obj) < 0)
            return cfg_oom(ld);
    }
    *out = obj;
    return 0;
}

int cfg_on_provider(struct ld *ld, const char *path, const char *key, yaml_node_t *k,
                    yaml_node_t *v, void *privdata)
{
    const struct cfg_schema *schema = cfg_find_schema(ld, key);
    (void)privdata;
    if (!schema) {
        char known[512];
        cfg_known_providers(ld, known, sizeof(known));
        struct suggest s = {key, NULL, SIZE_MAX};
        for (size_t i = 0; i < ld->nschemas; i++)
            cfg_suggest_try(&s, ld->schemas[i].provider);
        if (s.best)
            return cfg_fail_at(ld, k->start_mark,
                               "unknown provider '%s' (did you mean '%s'? known: %s)",
                               key, s.best, known);
        return cfg_fail_at(ld, k->start_mark, "unknown provider '%s' (known: %s)", key,
                           known);
    }
    struct provider_ctx pc = {schema, NULL};
    int ret = cfg_provider_obj(ld, key, &pc.obj);
    if (ret < 0)
        return ret;
    if (cfg_is_null(v))
        return 0;
    if (v->type != YAML_MAPPING_NODE)
        return cfg_expected(ld, path, v, "a mapping");
    return cfg_each_pair(ld, v, path, on_provider_key, &pc);
}
