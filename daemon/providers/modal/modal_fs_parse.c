/*
 * modal_fs_parse.c - the parsers of what modal-sandbox-fs-tools prints (the
 * tool's JSON: errors, stat records, directory listings), untrusted bytes
 * from inside the sandbox, and fs.watch's event lines. A leaf: fs.* (modal_fs.c) and
 * fs.watch (modal_fswatch.c) both call it; it calls nothing of theirs.
 * tests/fuzz/fuzz_modal_fs.c drives it.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "log.h"
#include "providers/modal/modal_int.h"
#include "xalloc.h"

#define MW_PATHS 16 /* paths taken from one event */

#define MFS_LIST_MAX 100000 /* entries taken from one ListFiles */

/* -- the parsers of the tool's output (untrusted) ----------------------------------- */

const char *modal_fs_errno(const char *kind)
{
    static const char *const map[][2] = {
        {"NotFound", "ENOENT"},          {"IsDirectory", "EISDIR"},
        {"NotDirectory", "ENOTDIR"},     {"IsFile", "ENOTDIR"},
        {"AlreadyExists", "ENOTDIR"}, /* WriteFile: a parent is a file (the SDK's reading)
                                       */
        {"PathAlreadyExists", "EEXIST"}, {"DirectoryNotEmpty", "ENOTEMPTY"},
        {"PermissionDenied", "EACCES"},  {"FileTooLarge", "EFBIG"},
        {"NotSupported", "ENOTSUP"},     {"NoSpace", "ENOSPC"},
        {"StorageFull", "ENOSPC"},
    };
    for (size_t i = 0; kind && i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(kind, map[i][0]))
            return map[i][1];
    return "EIO";
}

int modal_fs_parse_error(const uint8_t *buf, size_t len, const char **errno_name,
                         char *msg, size_t msgsz)
{
    *errno_name = "EIO";
    msg[0] = 0;
    json_t *v =
        len ? json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const char *kind = json_string_value(json_object_get(v, "error_kind"));
    const char *m = json_string_value(json_object_get(v, "message"));
    if (!json_is_object(v) || !kind || !m || !m[0]) {
        json_decref(v);
        return -1;
    }
    *errno_name = modal_fs_errno(kind);
    snprintf(msg, msgsz, "%s", m);
    json_decref(v);
    return 0;
}

/* One tool entry as the agent's shape {name, path, type, size, mode,
 * mtime_ms, uid?, gid?, target?}; NULL when it is not one. */
static json_t *entry_of(json_t *e)
{
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *path = json_string_value(json_object_get(e, "path"));
    const char *type = json_string_value(json_object_get(e, "type"));
    json_t *size = json_object_get(e, "size"), *mode = json_object_get(e, "mode");
    json_t *mt = json_object_get(e, "modified_time");
    if (!json_is_object(e) || !name || !path || path[0] != '/' || !type ||
        !json_is_integer(size) || json_integer_value(size) < 0)
        return NULL;
    /* the protocol's names (PROTOCOL.md fs.list: file, dir, symlink, ...) */
    if (!strcmp(type, "directory"))
        type = "dir";
    else if (strcmp(type, "file") && strcmp(type, "symlink"))
        type = "other";
    json_t *o = json_pack("{s:s, s:s, s:s, s:I}", "name", name, "path", path, "type",
                          type, "size", (json_int_t)json_integer_value(size));
    if (!o)
        return NULL; /* a string that is not UTF-8 */
    json_object_set_new(
        o, "mode",
        json_integer(json_is_integer(mode) ? json_integer_value(mode) & 07777 : 0));
    if (json_is_number(mt)) {
        double s = json_number_value(mt);
        if (s >= 0 && s < 1e11)
            json_object_set_new(o, "mtime_ms", json_integer((json_int_t)(s * 1000)));
    }
    const char *ids[][2] = {{"owner", "uid"}, {"group", "gid"}};
    for (int i = 0; i < 2; i++) {
        const char *s = json_string_value(json_object_get(e, ids[i][0]));
        char *end;
        long long n = s && *s ? strtoll(s, &end, 10) : -1;
        if (s && *s && !*end && n >= 0 && n <= 0xffffffffLL)
            json_object_set_new(o, ids[i][1], json_integer(n));
    }
    const char *tg = json_string_value(json_object_get(e, "symlink_target"));
    if (tg && !strcmp(type, "symlink"))
        json_object_set_new(o, "target", json_string(tg));
    return o;
}

json_t *modal_fs_parse_stat(const uint8_t *buf, size_t len)
{
    json_t *v = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, NULL);
    json_t *o = entry_of(v);
    json_decref(v);
    if (o) {
        json_object_del(o, "name");
        json_object_del(o, "path");
    }
    return o;
}

json_t *modal_fs_parse_list(const uint8_t *buf, size_t len, int64_t skip, int64_t limit)
{
    json_t *v = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_array(v)) {
        json_decref(v);
        return NULL;
    }
    json_t *ents = json_array();
    int more = 0;
    int64_t seen = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (i >= MFS_LIST_MAX)
            break;
        json_t *o = entry_of(e);
        if (!o)
            continue; /* a malformed entry is left out, as the agent's unreadable ones */
        if (seen++ < skip) {
            json_decref(o);
            continue;
        }
        if ((int64_t)json_array_size(ents) >= limit) {
            json_decref(o);
            more = 1;
            break;
        }
        json_array_append_new(ents, o);
    }
    json_decref(v);
    return json_pack("{s:o, s:b}", "entries", ents, "more", more);
}

/* ---- the tool's event lines (untrusted; tests/fuzz/fuzz_modal_fs.c) --------------- */

json_t *modal_fs_parse_watch(const uint8_t *buf, size_t len)
{
    json_t *v = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, NULL);
    const char *type = json_string_value(json_object_get(v, "event_type"));
    json_t *paths = json_object_get(v, "paths");
    if (!type || !json_is_array(paths)) {
        json_decref(v);
        return NULL;
    }
    static const char *const map[][2] = {
        {"Create", "create"},     {"Modify", "modify"},   {"Remove", "delete"},
        {"RenameFrom", "rename"}, {"RenameTo", "create"}, {"Rename", "rename"},
        {"Unknown", "overflow"},
    };
    const char *kind = NULL;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcmp(type, map[i][0]))
            kind = map[i][1];
    json_t *out = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p) {
        const char *s = json_string_value(p);
        if (!kind || i >= MW_PATHS)
            break; /* Access (reads) is not news */
        if (!s || s[0] != '/' || strlen(s) > 4096)
            continue;
        /* Rename with both names (notify's RenameMode::Both): the old one is
         * a rename, the new one a create, as Docker reports a move. */
        const char *k = !strcmp(type, "Rename") && i == 1 ? "create" : kind;
        json_array_append_new(out, json_pack("{s:s, s:s}", "path", s, "kind", k));
    }
    json_decref(v);
    return out;
}
