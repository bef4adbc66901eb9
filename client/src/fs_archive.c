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
        struct sbx__fs_chunk ch = {0};
        if (sbx__fs_read_call(c, &ch, err_out, p, sink, privdata) != SBX_OK) {
            /* The sink stopped it: the archive is let go now, not when this
             * session ends or its handle idles out (a failed call's handle is
             * gone already). The sink's error stays the one reported. */
            if (ch.handle && !ch.eof) {
                char keep[sizeof(c->errstr)];
                int kerr = c->err;
                memcpy(keep, c->errstr, sizeof(keep));
                sbx_call_new(c, NULL, NULL, SBX_M_FS_READ,
                             json_pack("{s:s, s:I, s:b}", "sandbox", sandbox, "handle",
                                       ch.handle, "abort", 1));
                c->err = kerr;
                memcpy(c->errstr, keep, sizeof(keep));
            }
            return SBX_ERR;
        }
        if (!ch.eof && !ch.handle) {
            sbx__ctx_seterr(c, SBX_ERR_USAGE, "%s", "an archive without handle");
            return SBX_ERR;
        }
        if (ch.eof)
            return SBX_OK;
        p = json_pack("{s:s, s:I}", "sandbox", sandbox, "handle", ch.handle);
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
