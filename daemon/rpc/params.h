/*
 * params.h - the checks every method file makes of its params (api.c,
 * api_process.c): each answers the call with -32602 {"param": key} and
 * returns -1 when the value is wrong, else 0 with the value in *out (left
 * alone, or the default, when the key is absent or null).
 */
#ifndef SBXD_PARAMS_H
#define SBXD_PARAMS_H

#include <jansson.h>
#include <stdint.h>

#include "core/output.h"

struct call;

/* Answers c with -32602 "param: msg" {"param"}; returns -1. */
int param_bad(struct call *c, const char *param, const char *msg);
/* A string without NUL bytes (*out NULL when absent). */
int param_str(struct call *c, json_t *params, const char *key, const char **out);
/* The same, required. */
int param_req_str(struct call *c, json_t *params, const char *key, const char **out);
/* An integer in lo..hi. */
int param_int(struct call *c, json_t *params, const char *key, int64_t lo, int64_t hi,
              int64_t *out);
int param_bool(struct call *c, json_t *params, const char *key, int *out);
/* output_encoding: "utf8" (the default) or "auto". */
int param_encoding(struct call *c, json_t *params, enum out_enc *out);
/* since: a Unix time in seconds or an RFC 3339 string, as ns since the
 * epoch (0 when absent). */
int param_since(struct call *c, json_t *params, int64_t *out);
/* 1 for a JSON string with a NUL inside (JSON_ALLOW_NUL lets "\u0000" in). */
int param_has_nul(json_t *v);

#endif
