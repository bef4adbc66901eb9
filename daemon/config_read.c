/*
 * config_read.c - the loader's readers, below both config.c (the core keys,
 * files, the top level) and config_provider.c (providers.<name>): errors
 * with their file positions, node and scalar helpers, numbers, booleans and
 * byte sizes, mappings walked pair by pair with did-you-mean suggestions.
 * It calls neither of them (config_int.h).
 */
#include "config_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "sbx_proto.h"

/* ---- the loader's state and its errors ------------------------------------ */

#define MAX_ERRORS 32

/* Sets ld->err to msg (malloc'd, taken), after the earlier errors. */
static int add_error(struct ld *ld, char *msg)
{
    if (ld->nerr > 0 && ld->err && ld->err->msg) {
        char *joined = NULL;
        if (asprintf(&joined, "%s\n%s", ld->err->msg, msg) >= 0) {
            free(ld->err->msg);
            ld->err->msg = joined;
        }
        free(msg);
    } else {
        err_make(ld->err, SBX_E_PARAMS, "%s", msg);
        free(msg);
    }
    ld->nerr++;
    return -1;
}

int cfg_oom(struct ld *ld)
{
    ld->fatal = 1;
    return err_make(ld->err, SBX_E_PARAMS, "%s: out of memory", ld->file);
}

/* "FILE:LINE:COL: message" at mark m (libyaml marks are 0-based), or
 * "FILE: message" without one. */
__attribute__((format(printf, 3, 0))) static int
fail_v(struct ld *ld, const yaml_mark_t *m, const char *fmt, va_list ap)
{
    char *msg = NULL;
    if (vasprintf(&msg, fmt, ap) < 0)
        return cfg_oom(ld);
    char *full = NULL;
    int n =
        m ? asprintf(&full, "%s:%zu:%zu: %s", ld->file, m->line + 1, m->column + 1, msg)
          : asprintf(&full, "%s: %s", ld->file, msg);
    free(msg);
    if (n < 0)
        return cfg_oom(ld);
    return add_error(ld, full);
}

__attribute__((format(printf, 3, 4))) int cfg_fail_at(struct ld *ld, yaml_mark_t m,
                                                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_v(ld, &m, fmt, ap);
    va_end(ap);
    return rc;
}

/* For checks that span several keys and may have no position in the file. */
int cfg_fail_file(struct ld *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = fail_v(ld, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- node helpers ------------------------------------------------------- */

const char *cfg_sval(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

int cfg_is_plain(const yaml_node_t *n)
{
    return n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
}

/* A plain empty, ~ or null scalar (YAML 1.2 core schema). Quoted "null" is a string. */
int cfg_is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || !cfg_is_plain(n))
        return 0;
    const char *s = cfg_sval(n);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

/* What a node is, for "expected X, got Y": 'text' (shortened), null, a mapping... */
void cfg_describe(const yaml_node_t *n, char *buf, size_t size)
{
    if (n->type == YAML_MAPPING_NODE) {
        snprintf(buf, size, "a mapping");
    } else if (n->type == YAML_SEQUENCE_NODE) {
        snprintf(buf, size, "a sequence");
    } else if (cfg_is_null(n)) {
        snprintf(buf, size, "null");
    } else {
        char text[48];
        size_t len = n->data.scalar.length, i, o = 0;
        for (i = 0; i < len && o < 40; i++, o++) {
            unsigned char c = n->data.scalar.value[i];
            text[o] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        }
        text[o] = '\0';
        snprintf(buf, size, "'%s%s'", text, i < len ? "..." : "");
    }
}

/* Key paths are for messages only: truncating a silly long one is fine. */
__attribute__((format(printf, 2, 3))) void cfg_path_fmt(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, PATH_BUF, fmt, ap);
    va_end(ap);
}

static void join_path(char *buf, const char *path, const char *key)
{
    if (path && *path)
        cfg_path_fmt(buf, "%s.%s", path, key);
    else
        cfg_path_fmt(buf, "%s", key);
}

int cfg_expected(struct ld *ld, const char *path, const yaml_node_t *n, const char *what)
{
    char got[64];
    cfg_describe(n, got, sizeof(got));
    return cfg_fail_at(ld, n->start_mark, "key '%s': expected %s, got %s", path, what,
                       got);
}

/* Scalars may carry NUL through "\0" escapes; we hand out C strings, so refuse. */
int cfg_check_nul(struct ld *ld, const char *path, const yaml_node_t *n)
{
    if (strlen(cfg_sval(n)) != n->data.scalar.length)
        return cfg_fail_at(ld, n->start_mark, "key '%s': contains a NUL character", path);
    return 0;
}

/* "16M" for 16777216: bounds in messages read better in the units users write. */
void cfg_fmt_size(int64_t v, char *buf, size_t size)
{
    if (v != 0 && v % GIB == 0)
        snprintf(buf, size, "%" PRId64 "G", v / GIB);
    else if (v != 0 && v % MIB == 0)
        snprintf(buf, size, "%" PRId64 "M", v / MIB);
    else if (v != 0 && v % KIB == 0)
        snprintf(buf, size, "%" PRId64 "k", v / KIB);
    else
        snprintf(buf, size, "%" PRId64, v);
}

/* ---- "did you mean" ---------------------------------------------------------- */

/* Optimal string alignment distance, for short keys only (SIZE_MAX past 63
 * characters). Also the daemon's provider-name suggestions (api.c). */
size_t config_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return SIZE_MAX;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] != b[j - 1];
            size_t v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[la][lb];
}

void cfg_suggest_try(struct suggest *s, const char *cand)
{
    size_t limit = strlen(cand) >= 6 ? 2 : 1;
    size_t d = config_edit_distance(s->key, cand);
    if (d <= limit && d < s->dist) {
        s->dist = d;
        s->best = cand;
    }
}

int cfg_unknown_key(struct ld *ld, const yaml_node_t *k, const char *path,
                    const struct suggest *s)
{
    if (s && s->best)
        return cfg_fail_at(ld, k->start_mark, "unknown key '%s' (did you mean '%s'?)",
                           path, s->best);
    return cfg_fail_at(ld, k->start_mark, "unknown key '%s'", path);
}

/* ---- mappings ------------------------------------------------------------- */

/*
 * Calls fn for each pair of `map` (a mapping node at `path`), after checking
 * that the key is a scalar and not a duplicate.
 */
int cfg_each_pair(struct ld *ld, yaml_node_t *map, const char *path, pair_fn fn,
                  void *privdata)
{
    json_t *seen = json_object(); /* key -> index of its first pair */
    if (!seen)
        return cfg_oom(ld);
    int ret = 0, failed = 0;
    yaml_node_pair_t *start = map->data.mapping.pairs.start;
    for (yaml_node_pair_t *p = start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(ld->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(ld->doc, p->value);
        char kpath[PATH_BUF];
        if (k->type != YAML_SCALAR_NODE) {
            ret = cfg_fail_at(ld, k->start_mark, "%s%s%smapping keys must be scalars",
                              path ? "key '" : "", path ? path : "", path ? "': " : "");
            break;
        }
        const char *key = cfg_sval(k);
        join_path(kpath, path, key);
        if ((ret = cfg_check_nul(ld, kpath, k)) < 0)
            break;
        json_t *first = json_object_get(seen, key);
        if (first) {
            yaml_node_t *fk =
                yaml_document_get_node(ld->doc, start[json_integer_value(first)].key);
            ret = cfg_fail_at(ld, k->start_mark,
                              "duplicate key '%s' (first defined at %zu:%zu)", kpath,
                              fk->start_mark.line + 1, fk->start_mark.column + 1);
            break;
        }
        if (json_object_set_new(seen, key, json_integer(p - start)) < 0) {
            ret = cfg_oom(ld);
            break;
        }
        if (fn(ld, kpath, key, k, v, privdata) < 0) {
            failed = 1;
            /* A bad value: go on with the next key, to report them all. */
            if (ld->fatal || ld->nerr == 0 || ld->nerr >= MAX_ERRORS)
                break;
        }
    }
    json_decref(seen);
    return failed ? -1 : ret;
}

/* ---- scalar parsing -------------------------------------------------------- */

/*
 * Integers: [+-]digits, 0x hex, 0o octal; with `suffix`, decimal may end in
 * k/K/m/M/g/G (powers of 1024). A leading 0 on a decimal is refused: YAML 1.1
 * reads 010 as 8, YAML 1.2 as 10, and a config must not depend on which.
 */
int cfg_parse_int(const char *s, int suffix, int64_t *out)
{
    const char *p = s;
    int neg = 0, base = 10, leading_zero = 0;
    uint64_t v = 0;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    } else if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O')) {
        base = 8;
        p += 2;
    } else if (p[0] == '0' && p[1] >= '0' && p[1] <= '9') {
        leading_zero = 1; /* only reported if the rest is a number */
    }
    const char *digits = p;
    for (;; p++) {
        int d;
        if (*p >= '0' && *p <= '9')
            d = *p - '0';
        else if (base == 16 && *p >= 'a' && *p <= 'f')
            d = *p - 'a' + 10;
        else if (base == 16 && *p >= 'A' && *p <= 'F')
            d = *p - 'A' + 10;
        else
            break;
        if (d >= base)
            return NUM_SYNTAX;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base)
            return NUM_RANGE;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (p == digits)
        return NUM_SYNTAX;
    if (*p && suffix && base == 10) {
        uint64_t mult;
        char c = *p++;
        if (c == 'k' || c == 'K')
            mult = (uint64_t)KIB;
        else if (c == 'm' || c == 'M')
            mult = (uint64_t)MIB;
        else if (c == 'g' || c == 'G')
            mult = (uint64_t)GIB;
        else
            return NUM_SYNTAX;
        if (v > (uint64_t)INT64_MAX / mult)
            return NUM_RANGE;
        v *= mult;
    }
    if (*p)
        return NUM_SYNTAX;
    if (leading_zero)
        return NUM_LEADING_ZERO;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return NUM_OK;
}

int cfg_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off"};
    for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
        if (!strcasecmp(s, yes[i]))
            return *out = 1, NUM_OK;
        if (!strcasecmp(s, no[i]))
            return *out = 0, NUM_OK;
    }
    return NUM_SYNTAX;
}

/* YAML 1.2 core floats with a '.' or an exponent: 1.5, .5, 1e3, -2.5E-3. */
int cfg_looks_float(const char *s)
{
    const char *p = s;
    int mant = 0, dot = 0, exp = 0;
    if (*p == '+' || *p == '-')
        p++;
    while (*p >= '0' && *p <= '9')
        p++, mant = 1;
    if (*p == '.') {
        dot = 1;
        p++;
        while (*p >= '0' && *p <= '9')
            p++, mant = 1;
    }
    if (!mant)
        return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return 0;
        while (*p >= '0' && *p <= '9')
            p++;
        exp = 1;
    }
    return !*p && (dot || exp);
}

/* An integer (or byte size) scalar, range-checked. */
int cfg_get_int(struct ld *ld, const char *path, const yaml_node_t *n, int size,
                int64_t min, int64_t max, int64_t *out)
{
    const char *what = size ? "a byte size (e.g. 65536, 512k, 16M, 1G)" : "an integer";
    if (n->type != YAML_SCALAR_NODE || cfg_is_null(n))
        return cfg_expected(ld, path, n, what);
    int64_t v = 0;
    char got[64];
    switch (cfg_parse_int(cfg_sval(n), size, &v)) {
    case NUM_OK:
        break;
    case NUM_RANGE:
        cfg_describe(n, got, sizeof(got));
        return cfg_fail_at(ld, n->start_mark, "key '%s': %s is too large", path, got);
    case NUM_LEADING_ZERO:
        cfg_describe(n, got, sizeof(got));
        return cfg_fail_at(
            ld, n->start_mark,
            "key '%s': expected %s, got %s (a leading zero is ambiguous in YAML; "
            "drop it, or write 0o for octal)",
            path, what, got);
    default:
        return cfg_expected(ld, path, n, what);
    }
    if (v < min || v > max) {
        cfg_describe(n, got, sizeof(got));
        if (max == INT64_MAX)
            return cfg_fail_at(ld, n->start_mark,
                               "key '%s': %s is out of range (must be >= %" PRId64 ")",
                               path, got, min);
        char lo[32], hi[32];
        if (size) {
            cfg_fmt_size(min, lo, sizeof(lo));
            cfg_fmt_size(max, hi, sizeof(hi));
        } else {
            snprintf(lo, sizeof(lo), "%" PRId64, min);
            snprintf(hi, sizeof(hi), "%" PRId64, max);
        }
        return cfg_fail_at(ld, n->start_mark, "key '%s': %s is out of range (%s..%s)",
                           path, got, lo, hi);
    }
    *out = v;
    return 0;
}
