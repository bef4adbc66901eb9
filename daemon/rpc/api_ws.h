/*
 * api_ws.h - the issue-18 methods (api_ws.c): terminals, ports, stats,
 * looked up by api.c; and process.exec/spawn's "pty" check, which
 * api_process.c calls (api_ws.c calls nothing of api_process.c).
 */
#ifndef SBXD_API_WS_H
#define SBXD_API_WS_H

#include <jansson.h>

#include "rpc/api_args.h"

struct call;
struct sandbox;
struct proc_opts;

/* process.exec/spawn's "pty" into o (0), or the call answered (-1). */
int api_ws_pty_param(struct call *c, json_t *params, struct sandbox *sb,
                     struct proc_opts *o);
/* The handler of an issue-18 method, or NULL. */
method_fn api_ws_lookup(const char *method);

#endif
