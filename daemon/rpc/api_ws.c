/*
 * api_ws.c - the methods of sandboxes as workspaces (issue 18): terminals
 * (process.exec/spawn "pty", process.resize). Same rules as api.c: check
 * params, ownership and limits, hand over to the core, answer once.
 */
#include "api.h"

#include <string.h>

#include "call.h"
#include "process.h"
#include "sandbox.h"
#include "sbx_proto.h"
#include "terminal.h"

static int ws_param(struct call *c, const char *param, const char *msg)
{
    call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", param), "%s: %s", param, msg);
    return -1;
}

/* cols/rows of obj: integers 1..TERMINAL_MAX_DIM. */
static int get_dim(struct call *c, json_t *obj, const char *key, const char *param,
                   unsigned *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > TERMINAL_MAX_DIM)
        return ws_param(c, param, "cols and rows must be integers in 1..10000");
    *out = (unsigned)json_integer_value(v);
    return 0;
}

/* ---- terminals ----------------------------------------------------------------- */

int api_ws_pty_param(struct call *c, json_t *params, struct sandbox *sb,
                     struct proc_opts *o)
{
    json_t *pty = json_object_get(params, "pty");
    if (!pty || json_is_null(pty) || json_is_false(pty))
        return 0;
    if (json_is_true(pty)) {
        o->pty_cols = 80;
        o->pty_rows = 24;
    } else if (!json_is_object(pty) || get_dim(c, pty, "cols", "pty", &o->pty_cols) < 0 ||
               get_dim(c, pty, "rows", "pty", &o->pty_rows) < 0) {
        if (!json_is_object(pty))
            ws_param(c, "pty", "must be {\"cols\": N, \"rows\": N} or true");
        return -1;
    }
    sbx_err_t err = {0};
    if (terminal_supported(sb, &err) < 0) {
        call_fail(c, &err);
        return -1;
    }
    return 0;
}

static void m_resize(struct call *c, json_t *params)
{
    struct process *p = api_process_arg(c, params, NULL);
    if (!p)
        return;
    unsigned cols, rows;
    if (get_dim(c, params, "cols", "cols", &cols) < 0 ||
        get_dim(c, params, "rows", "rows", &rows) < 0)
        return;
    sbx_err_t err = {0};
    if (process_resize(p, cols, rows, &err) < 0)
        call_fail(c, &err);
    else
        call_reply(c, json_pack("{s:i, s:i}", "cols", (int)cols, "rows", (int)rows));
}

/* ---- table ----------------------------------------------------------------------- */

static const struct {
    const char *name;
    method_fn fn;
} ws_methods[] = {
    {SBX_M_RESIZE, m_resize},
};

method_fn api_ws_lookup(const char *method)
{
    for (size_t i = 0; i < sizeof(ws_methods) / sizeof(ws_methods[0]); i++)
        if (strcmp(ws_methods[i].name, method) == 0)
            return ws_methods[i].fn;
    return NULL;
}
