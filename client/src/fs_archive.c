/*
 * fs_archive.c - tar streams of sandbox paths (fs.read with `format:
 * "tar"`, PROTOCOL.md "Archives"): over the raw path when the daemon
 * offers it, else by the archive's handle in base64 chunks. Writing one is
 * sbx_fs_write_stream/sbx_fs_write_fd with opts {"format": "tar"}.
 */
#include <stdlib.h>
#include <string.h>

#include "sbx/sbx.h"
#include "sbx_private.h"

int sbx_fs_archive_read(sbx_ctx *c, sbx_rpc_error **err_out, const char *sandbox,
                        const char *path, json_t *opts, sbx_fs_sink_cb sink,
                        void *privdata)
{
    if (err_out)
        *err_out = NULL;
    json_t *o = opts ? json_deep_copy(opts) : json_object();
    json_object_set_new(o, "format", json_string("tar"));
    if (sbx__fs_raw_wanted()) {
        int r = sbx__fs_read_raw(c, err_out, sandbox, path, o, sink, privdata);
        if (r != 1) {
            json_decref(o);
            return r;
        }
    }
    json_t *p = o;
    json_object_set_new(p, "sandbox", json_string(sandbox));
    json_object_set_new(p, "path", json_string(path));
    for (;;) {
        json_t *res = NULL;
        if (sbx_call_new(c, &res, err_out, SBX_M_FS_READ, p) != SBX_OK)
            return SBX_ERR;
        char *d = NULL;
        size_t n = 0;
        if (sbx_json_get_bytes(&d, &n, res, "data") != SBX_OK) {
            json_decref(res);
            sbx__ctx_seterr(c, SBX_ERR_PROTOCOL, "%s", "fs.read answer without data");
            return SBX_ERR;
        }
        json_int_t h = json_integer_value(json_object_get(res, "handle"));
        int eof = json_is_true(json_object_get(res, "eof"));
        json_decref(res);
        int r = n ? sink(d, n, privdata) : 0;
        free(d);
        if (r != 0 || (!eof && !h)) {
            sbx__ctx_seterr(c, SBX_ERR_USAGE, "%s",
                            r ? "the sink stopped the read"
                              : "an archive without handle");
            return SBX_ERR; /* the daemon drops the handle with the session */
        }
        if (eof)
            return SBX_OK;
        p = json_pack("{s:s, s:I}", "sandbox", sandbox, "handle", h);
    }
}

int sbx_fs_write_sized(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                       const char *sandbox, const char *path, json_t *opts, uint64_t size,
                       sbx_fs_source_cb source, void *privdata)
{
    if (result_out)
        *result_out = NULL;
    if (err_out)
        *err_out = NULL;
    if (size >= SBX_FS_RAW_MIN && sbx__fs_raw_wanted()) {
        int r = sbx__fs_write_raw(c, result_out, err_out, sandbox, path, opts, size,
                                  source, privdata);
        if (r != 1)
            return r;
    }
    return sbx_fs_write_stream(c, result_out, err_out, sandbox, path, opts, source,
                               privdata);
}
