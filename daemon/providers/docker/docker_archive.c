/*
 * docker_archive.c - tar streams of Docker sandboxes (PROTOCOL.md
 * "Archives"). A running sandbox's archives are made and extracted by
 * sbx-init (proto/CHANNEL.md "Files", tar_get/tar_more/tar_put), driven by
 * docker_fs.c like its reads and writes: this file only shapes the
 * requests.
 */
#include "docker_archive.h"

#include <string.h>

#include "fs.h"

static int is_tar(const struct fs_call *fc)
{
    const char *f = json_string_value(json_object_get(fc->args, "format"));
    return f && !strcmp(f, "tar");
}

json_t *dkf_tar_req(const struct fs_call *fc)
{
    if (!is_tar(fc))
        return NULL;
    json_t *path = json_object_get(fc->args, "path");
    if (fc->op == FS_OP_WRITE)
        return json_pack("{s:s, s:O}", "op", "tar_put", "path", path);
    if (fc->op != FS_OP_READ)
        return NULL;
    json_t *len = json_object_get(fc->args, "length");
    if (!fc->first)
        return json_pack("{s:s, s:O}", "op", "tar_more", "length", len);
    json_t *q = json_pack("{s:s, s:O, s:O, s:b}", "op", "tar_get", "path", path, "length",
                          len, "follow", json_is_true(json_object_get(fc->args, "follow")));
    json_t *name = json_object_get(fc->args, "name");
    if (json_is_string(name))
        json_object_set(q, "name", name);
    return q;
}
