/*
 * api.h - the method table (api.c): each JSON-RPC method's handler, which
 * parses its params, checks ownership and limits, and hands over to the
 * core (sandbox.h, process.h, snapshot.h) with a completion that answers
 * the call (rpc.h: call_reply, call_fail).
 */
#ifndef SBXD_API_H
#define SBXD_API_H

#include <jansson.h>

struct call;

/* A method handler: answers c exactly once, now or later. params: a
 * borrowed object. */
typedef void (*method_fn)(struct call *c, json_t *params);
/* The handler of method, or NULL when there is none. */
method_fn api_lookup(const char *method);

#endif
