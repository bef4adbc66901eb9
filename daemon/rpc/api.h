/*
 * api.h - the method table (api.c): each JSON-RPC method's handler, which
 * parses its params, checks ownership and limits, and hands over to the
 * core (sandbox.h, process.h, snapshot.h) with a completion that answers
 * the call (rpc.h: call_reply, call_fail).
 */
#ifndef SBXD_API_H
#define SBXD_API_H

#include <jansson.h>

#include "err.h"

struct call;

/* A method handler: answers c exactly once, now or later. params: a
 * borrowed object. */
typedef void (*method_fn)(struct call *c, json_t *params);
/* The handler of method, or NULL when there is none. */
method_fn api_lookup(const char *method);

/* A core completion (sandbox.h, sbx_result_cb) answering the call c (the
 * result borrowed). */
void api_call_done(sbx_err_t *err, json_t *result, void *c);
/* The handler of a process.* method (api_process.c), or NULL. */
method_fn api_process_lookup(const char *method);

/* ---- issue 18 (api_ws.c): terminals, ports, stats ---- */
struct sandbox;
struct process;
struct proc_opts;
/* api.c's argument checks for other method files: the sandbox params[key]
 * / the process params {sandbox, pid} visible to the caller, or NULL when
 * the call was answered with an error. */
struct sandbox *api_sandbox_arg(struct call *c, json_t *params, const char *key);
struct process *api_process_arg(struct call *c, json_t *params, struct sandbox **sb_out);
/* process.exec/spawn's "pty" into o (0), or the call answered (-1). */
int api_ws_pty_param(struct call *c, json_t *params, struct sandbox *sb,
                     struct proc_opts *o);
/* The handler of an issue-18 method, or NULL. */
method_fn api_ws_lookup(const char *method);
/* sandbox.mount / sandbox.unmount (api_mount.c), or NULL. */
method_fn api_mount_lookup(const char *method);

#endif
