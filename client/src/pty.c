/*
 * pty.c - terminals: the params of a process.spawn/exec "pty" and
 * process.resize (PROTOCOL.md, Terminals).
 */
#include "sbx_private.h"

json_t *sbx_pty_params(unsigned cols, unsigned rows)
{
    return json_pack("{s:i, s:i}", "cols", (int)cols, "rows", (int)rows);
}

int sbx_process_resize(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                       json_int_t pid, unsigned cols, unsigned rows)
{
    json_t *params = json_pack("{s:s, s:I, s:i, s:i}", "sandbox", sandbox ? sandbox : "",
                               "pid", pid, "cols", (int)cols, "rows", (int)rows);
    if (err_out)
        *err_out = NULL;
    if (!params) {
        sbx__ctx_seterr(c, SBX_ERR_OOM, "out of memory");
        return SBX_ERR;
    }
    return sbx_call_new(c, NULL, err_out, SBX_M_RESIZE, params);
}
