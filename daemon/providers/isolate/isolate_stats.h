/*
 * isolate_stats.h - sandbox.stats for the isolate providers (duktape, js):
 * the worker process's CPU, memory and I/O from /proc.
 */
#ifndef SBXD_ISOLATE_STATS_H
#define SBXD_ISOLATE_STATS_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

struct sandbox;

/* The provider op sb_stats (provider.h). */
int iso_sb_stats(void *cookie, struct sandbox *sb, int with_size,
                 void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                 sbx_err_t *err);

#endif
