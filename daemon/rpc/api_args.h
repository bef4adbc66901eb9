/*
 * api_args.h - the argument helpers every method file shares (api_args.c),
 * below the method files and api.c's dispatcher: a method handler's type,
 * the caller, the sandbox or process a call names, and the completion that
 * answers a call from the core.
 */
#ifndef SBXD_API_ARGS_H
#define SBXD_API_ARGS_H

#include <jansson.h>
#include <sys/types.h>

#include "err.h"

struct call;
struct sandbox;
struct process;

/* A method handler: answers c exactly once, now or later. params: a
 * borrowed object. */
typedef void (*method_fn)(struct call *c, json_t *params);

/* The caller's uid and whether it is an administrator, for the core's
 * ownership checks (a call whose client left: uid 0, admin). */
uid_t api_caller_uid(struct call *c);
int api_caller_admin(struct call *c);
/* While providers still adopt what they had before a restart, parks c to run
 * again, whole, once they are done: 1 (answered later), else 0 (answer now).
 * params borrowed. Call it before any side effect. */
int api_park(struct call *c, json_t *params);
/* The sandbox params[key] / the process params {sandbox, pid} visible to the
 * caller (touched), or NULL when the call was answered with an error (or
 * parked). */
struct sandbox *api_sandbox_arg(struct call *c, json_t *params, const char *key);
struct process *api_process_arg(struct call *c, json_t *params, struct sandbox **sb_out);
/* Answers c with a copy of err (its message, or what when it has none), else
 * with result (borrowed; NULL means {}). */
void api_call_answer(struct call *c, sbx_err_t *err, json_t *result, const char *what);
/* A core completion (sandbox.h, sbx_result_cb) answering the call c (the
 * result borrowed). */
void api_call_done(sbx_err_t *err, json_t *result, void *c);

#endif
