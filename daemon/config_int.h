/*
 * config_int.h - the configuration loader's insides, shared by config.c
 * (defaults, the core keys, files and libyaml, the top level), which calls
 * config_provider.c (the providers.<name> sections and their key tables),
 * and both call config_read.c (the readers: errors, nodes, numbers).
 * Not for anything outside the loader.
 */
#ifndef SBXD_CONFIG_INT_H
#define SBXD_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "config.h"
#include "err.h"

#define ANY_MAX_DEPTH 32     /* also stops recursive aliases (&a [*a]) */
#define ANY_MAX_NODES 100000 /* stops alias bombs ("billion laughs") */
#define PATH_BUF 256         /* dotted key paths in messages; truncation is harmless */

#define KIB INT64_C(1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The loader's state. */
struct ld {
    const char *file;
    yaml_document_t *doc;
    sbx_err_t *err;
    struct sbx_config *cfg; /* the working copy */
    const struct cfg_schema *schemas;
    size_t nschemas;
    size_t any_nodes;   /* CFG_ANY nodes converted so far */
    yaml_mark_t *mark;  /* where each core key was set (N_CORE of them) */
    unsigned char *set; /* which were (N_CORE) */
    /* Errors so far: each_pair goes on past a bad key so that --check-config
     * reports every one (issue 19), up to MAX_ERRORS, one per line of
     * err->msg; fatal (out of memory) stops at once. */
    int nerr;
    int fatal;
};

struct suggest {
    const char *key;
    const char *best;
    size_t dist;
};

typedef int (*pair_fn)(struct ld *ld, const char *path, const char *key, yaml_node_t *k,
                       yaml_node_t *v, void *privdata);

enum { NUM_OK = 0, NUM_SYNTAX = -1, NUM_RANGE = -2, NUM_LEADING_ZERO = -3 };

/* ---- config_read.c: errors, nodes, scalars, mappings ---- */
int cfg_check_nul(struct ld *ld, const char *path, const yaml_node_t *n);
int cfg_each_pair(struct ld *ld, yaml_node_t *map, const char *path, pair_fn fn,
                  void *privdata);
int cfg_expected(struct ld *ld, const char *path, const yaml_node_t *n, const char *what);
int cfg_fail_at(struct ld *ld, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "FILE: message", for checks that span keys and have no position. */
int cfg_fail_file(struct ld *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* What a node is, for "expected X, got Y". */
void cfg_describe(const yaml_node_t *n, char *buf, size_t size);
/* "16M" for 16777216. */
void cfg_fmt_size(int64_t v, char *buf, size_t size);
int cfg_get_int(struct ld *ld, const char *path, const yaml_node_t *n, int size,
                int64_t min, int64_t max, int64_t *out);
int cfg_is_null(const yaml_node_t *n);
int cfg_is_plain(const yaml_node_t *n);
int cfg_looks_float(const char *s);
int cfg_oom(struct ld *ld);
int cfg_parse_bool(const char *s, int *out);
int cfg_parse_int(const char *s, int suffix, int64_t *out);
void cfg_path_fmt(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cfg_suggest_try(struct suggest *s, const char *cand);
const char *cfg_sval(const yaml_node_t *n);
int cfg_unknown_key(struct ld *ld, const yaml_node_t *k, const char *path,
                    const struct suggest *s);

/* ---- config_provider.c: providers.<name> ---- */
const struct cfg_schema *cfg_find_schema(struct ld *ld, const char *name);
void cfg_known_providers(struct ld *ld, char *buf, size_t size);
int cfg_provider_obj(struct ld *ld, const char *name, json_t **out);
int cfg_on_provider(struct ld *ld, const char *path, const char *key, yaml_node_t *k,
                    yaml_node_t *v, void *privdata);

#endif
