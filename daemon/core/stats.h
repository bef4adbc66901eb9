/*
 * stats.h - a sandbox's resource use (sandbox.stats): the provider samples,
 * the core checks state and support and stamps the answer.
 */
#ifndef SBXD_STATS_H
#define SBXD_STATS_H

#include <jansson.h>

#include "err.h"

struct sandbox;

/* stats stolen (NULL on error); err borrowed, NULL on success. */
typedef void (*stats_done_fn)(void *data, json_t *stats, sbx_err_t *err);

/*
 * Samples sb (running: else -32001; a provider without sb_stats: -32011,
 * feature "stats"). done runs once, maybe before this returns 0; <0 means
 * it will not run and err says why. The stats carry "id" and "time".
 */
int sandbox_stats(struct sandbox *sb, int with_size, stats_done_fn done, void *data,
                  sbx_err_t *err);

#endif
