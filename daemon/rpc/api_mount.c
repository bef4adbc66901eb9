/*
 * api_mount.c - sandbox.mount / sandbox.unmount (PROTOCOL.md "Mounts"): a
 * host directory bound into a running sandbox. Params and ownership here;
 * the grant (the provider's policy) and the mount itself are the
 * provider's (provider.h sb_mount). Answered once, when the mount is made.
 */
#include "rpc/api_mount.h"

#include <stdlib.h>
#include <string.h>

#include "rpc/call.h"
#include "daemon.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "core/terminal.h"

#define MOUNT_PATH_MAX 4096

/* An absolute path without NUL, 1..4096 bytes, or the call answered (NULL). */
static const char *path_arg(struct call *c, json_t *params, const char *key)
{
    json_t *v = json_object_get(params, key);
    const char *s = json_string_value(v);
    size_t n = s ? json_string_length(v) : 0;
    if (!s || s[0] != '/' || n > MOUNT_PATH_MAX || strlen(s) != n) {
        call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", key),
                   "%s: must be an absolute path (1..4096 bytes, no NUL)", key);
        return NULL;
    }
    return s;
}

static void answered(void *data, json_t *result, sbx_err_t *err)
{
    struct call *c = data;
    if (err && err->code)
        call_fail(c, err);
    else
        call_reply(c, result);
}

/* The sandbox of params.id when it runs and its provider mounts; else answered. */
static struct sandbox *mount_sandbox(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (!sb)
        return NULL;
    sbx_err_t err = {0};
    if (!sb->prov->ops->sb_mount || !sb->prov->ops->sb_unmount)
        terminal_unsupported(&err, sb, "mount");
    else if (sb->status != SB_RUNNING)
        err_make_data(&err, SBX_E_STATE,
                      json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                                sandbox_status_name(sb->status)),
                      "sandbox %s is %s", sb->id, sandbox_status_name(sb->status));
    else
        return sb;
    call_fail(c, &err);
    return NULL;
}

static void m_mount(struct call *c, json_t *params)
{
    struct sandbox *sb = mount_sandbox(c, params);
    const char *src, *dst;
    if (!sb || !(src = path_arg(c, params, "source")) ||
        !(dst = path_arg(c, params, "target")))
        return;
    json_t *ro = json_object_get(params, "read_only");
    if (ro && !json_is_boolean(ro) && !json_is_null(ro)) {
        call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", "read_only"),
                   "read_only: must be a boolean");
        return;
    }
    sbx_err_t err = {0};
    if (sb->prov->ops->sb_mount(sb->prov->cookie, sb, src, dst, json_is_true(ro),
                                answered, c, &err) < 0)
        call_fail(c, &err);
    else
        sandbox_touch(sb);
}

static void m_unmount(struct call *c, json_t *params)
{
    struct sandbox *sb = mount_sandbox(c, params);
    const char *dst;
    if (!sb || !(dst = path_arg(c, params, "target")))
        return;
    sbx_err_t err = {0};
    if (sb->prov->ops->sb_unmount(sb->prov->cookie, sb, dst, answered, c, &err) < 0)
        call_fail(c, &err);
}

method_fn api_mount_lookup(const char *method)
{
    if (!strcmp(method, SBX_M_MOUNT))
        return m_mount;
    if (!strcmp(method, SBX_M_UNMOUNT))
        return m_unmount;
    return NULL;
}
