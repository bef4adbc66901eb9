/*
 * jdepth.h - how deep a parsed JSON value nests, checked against a limit
 * the caller passes in (the protocol's SBX_MAX_JSON_DEPTH for client lines
 * in rpc/parse.c and for channel frames in io/chan.c).
 */
#ifndef SBXD_JDEPTH_H
#define SBXD_JDEPTH_H

#include <jansson.h>

/* 1 if v (borrowed) nests no deeper than max, counting v itself at depth. */
int jdepth_ok(json_t *v, int depth, int max);

#endif
