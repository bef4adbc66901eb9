/*
 * api.h - the method table (api.c), on top of the method files: each
 * JSON-RPC method's handler, which parses its params, checks ownership and
 * limits, and hands over to the core (sandbox.h, process.h, snapshot.h) with
 * a completion that answers the call (rpc.h: call_reply, call_fail). api.c
 * looks a method up in its own table, then in api_process.c's, api_ws.c's
 * and api_mount.c's; they share api_args.c's helpers.
 */
#ifndef SBXD_API_H
#define SBXD_API_H

#include "rpc/api_args.h"

/* The handler of method, or NULL when there is none. */
method_fn api_lookup(const char *method);

#endif
