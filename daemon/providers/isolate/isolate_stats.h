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

/* duktape.c: the worker of sb (0, *pid and its memory limit in MiB), or -1. */
int iso_worker_of(void *cookie, struct sandbox *sb, pid_t *pid, int64_t *mem_mb);

/* The provider op sb_stats (provider.h). */
int iso_sb_stats(void *cookie, struct sandbox *sb, int with_size,
                 void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                 sbx_err_t *err);

#endif
