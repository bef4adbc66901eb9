/*
 * api_args.c - what every method file needs of a call, below them all
 * (api.c, api_process.c, api_ws.c, api_mount.c): the caller's identity, the
 * sandbox and process a call names (visible to the caller, or the call
 * answered with an error), the wait for the restart's adoption, and the core
 * completion that answers a call. It calls no method file.
 */
#include "rpc/api_args.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/adoption.h"
#include "rpc/call.h"
#include "rpc/conn.h"
#include "rpc/params.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* The caller's identity for the core's ownership checks: no session (a
 * call whose client left) sees everything, as an administrator does. */
uid_t api_caller_uid(struct call *c)
{
    return c->conn ? c->conn->uid : 0;
}

int api_caller_admin(struct call *c)
{
    return !c->conn || c->conn->admin;
}

static int not_found(struct call *c, const char *id)
{
    call_error(c, SBX_E_NOT_FOUND, json_pack("{s:s}", "sandbox", id ? id : ""),
               "sandbox not found: %s", id ? id : "");
    return -1;
}

/* -- the restart window (issue 16, item 12) ------------------------------------- */

/* A call that found nothing while providers still adopt what they had
 * before a restart: it runs again, whole, once they are done (or after
 * limits.adopt_wait_ms), instead of telling a reconnecting client that its
 * sandbox is gone. Handlers park before any side effect. */
struct parked {
    struct call *c;
    method_fn fn;
    json_t *params; /* a reference of its own */
};

static void parked_run(void *data)
{
    struct parked *pk = data;
    pk->fn(pk->c, pk->params);
    json_decref(pk->params);
    free(pk);
}

/* 1 = c waits for the adoption (answered later); 0 = answer it now. */
int api_park(struct call *c, json_t *params)
{
    method_fn fn = adoption_pending() ? c->fn : NULL;
    if (!fn)
        return 0;
    struct parked *pk = xcalloc(1, sizeof(*pk));
    pk->c = c;
    pk->fn = fn;
    pk->params = json_incref(params);
    adoption_wait(parked_run, pk);
    return 1;
}

/* The sandbox named by params[key], visible to the caller; NULL = answered. */
struct sandbox *api_sandbox_arg(struct call *c, json_t *params, const char *key)
{
    const char *id;
    if (param_req_str(c, params, key, &id) < 0)
        return NULL;
    struct sandbox *sb = sandbox_find(api_caller_uid(c), api_caller_admin(c), id);
    if (!sb) {
        if (!api_park(c, params))
            not_found(c, id);
        return NULL;
    }
    return sb;
}

struct process *api_process_arg(struct call *c, json_t *params, struct sandbox **sb_out)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "sandbox");
    if (!sb)
        return NULL;
    json_t *pid = json_object_get(params, "pid");
    if (!json_is_integer(pid) || json_integer_value(pid) < 1 ||
        json_integer_value(pid) > (json_int_t)UINT32_MAX) {
        /* Out of range is not "not found": 2^32+1 must not alias pid 1. */
        param_bad(c, "pid", "must be an integer in 1..4294967295");
        return NULL;
    }
    struct process *p = process_find(sb, (uint32_t)json_integer_value(pid));
    if (!p && sb->adopting && api_park(c, params))
        return NULL;
    if (!p || json_integer_value(pid) <= 0) {
        call_error(c, SBX_E_NO_PROCESS,
                   json_pack("{s:s, s:O}", "sandbox", sb->id, "pid", pid),
                   "process %lld not found in sandbox %s",
                   (long long)json_integer_value(pid), sb->id);
        return NULL;
    }
    sandbox_touch(sb);
    if (sb_out)
        *sb_out = sb;
    return p;
}

void api_call_answer(struct call *c, sbx_err_t *err, json_t *result, const char *what)
{
    if (err) {
        sbx_err_t copy = {0};
        err_make_data(&copy, err->code, err->data ? json_incref(err->data) : NULL, "%s",
                      err->msg ? err->msg : what);
        call_fail(c, &copy);
        return;
    }
    call_reply(c, result ? json_incref(result) : NULL);
}

/* A core completion (sandbox.h, sbx_result_cb) answering the call c. */
void api_call_done(sbx_err_t *err, json_t *result, void *c)
{
    api_call_answer(c, err, result, "internal error");
}
