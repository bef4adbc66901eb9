/*
 * err.h - the daemon's error object (crun style).
 *
 * Functions that can fail return int (0 ok, <0 failure) and fill an
 * sbx_err_t out-object. `code` is the JSON-RPC error code (proto/sbx_proto.h),
 * `msg` a heap string, `data` an optional JSON object for error.data (owned).
 */
#ifndef SBXD_ERR_H
#define SBXD_ERR_H

#include <jansson.h>

typedef struct sbx_err {
    int code;
    char *msg;
    json_t *data;
} sbx_err_t;

/* Fills err (if not NULL) and returns -1. Any previous content is freed. */
int err_make(sbx_err_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Like err_make, and steals `data` (a JSON object, may be NULL). */
int err_make_data(sbx_err_t *err, int code, json_t *data, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefixes err->msg with context: "ctx: msg". Returns -1. */
int err_wrap(sbx_err_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees what err holds and zeroes it. */
void err_clear(sbx_err_t *err);

/* Moves src into dst (dst cleared first, src left empty). */
void err_move(sbx_err_t *dst, sbx_err_t *src);

#endif
