/*
 * fuzz_modal_fs.c - what Modal's filesystem tool (modal-sandbox-fs-tools)
 * prints, as modal_fs.c reads it: the first byte picks the parser (stderr's
 * error payload, a Stat entry, a ListFiles array with a skip and limit from
 * the second and third bytes; then a Watch event line, and the stderr of
 * fs.rename's shell helper), the rest is the tool's output. Whatever the
 * bytes, a parser returns NULL/-1 or a well-formed answer: checked here
 * (entries have string names and absolute paths, sizes >= 0, permission
 * bits only, at most limit entries; errno names come from the fixed table).
 */
#include "fuzz_daemon.h"

#include "providers/modal/modal_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_entry(json_t *e, int named)
{
    if (!json_is_object(e))
        abort();
    if (named) {
        const char *p = json_string_value(json_object_get(e, "path"));
        if (!json_is_string(json_object_get(e, "name")) || !p || p[0] != '/')
            abort();
    }
    json_t *sz = json_object_get(e, "size"), *mode = json_object_get(e, "mode");
    if (!json_is_integer(sz) || json_integer_value(sz) < 0)
        abort();
    if (!json_is_integer(mode) || json_integer_value(mode) & ~07777)
        abort();
    const char *t = json_string_value(json_object_get(e, "type"));
    if (!t || (strcmp(t, "file") && strcmp(t, "dir") && strcmp(t, "symlink") &&
               strcmp(t, "other")))
        abort();
}

/* A Watch line's events: absolute string paths, kinds from the fixed set. */
static void check_watch(json_t *evs)
{
    static const char *const kinds[] = {"create", "modify", "delete", "rename",
                                        "overflow"};
    size_t i;
    json_t *e;
    if (evs && !json_is_array(evs))
        abort();
    json_array_foreach(evs, i, e) {
        const char *p = json_string_value(json_object_get(e, "path"));
        const char *k = json_string_value(json_object_get(e, "kind"));
        int known = 0;
        for (size_t j = 0; k && j < 5; j++)
            known |= !strcmp(k, kinds[j]);
        if (!p || p[0] != '/' || strlen(p) > 4096 || !known || i >= 16)
            abort();
    }
    json_decref(evs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    int kind = data[0] % 5;
    int64_t skip = data[1] % 8, limit = 1 + data[2] % 8;
    const uint8_t *b = data + 3;
    size_t n = size - 3;
    if (kind == 0) {
        const char *en = NULL;
        char msg[256];
        int rc = modal_fs_parse_error(b, n, &en, msg, sizeof(msg));
        if (!en || en[0] != 'E' || strlen(msg) >= sizeof(msg) || (rc < 0 && msg[0]))
            abort();
    } else if (kind == 1) {
        json_t *o = modal_fs_parse_stat(b, n);
        if (o)
            check_entry(o, 0);
        json_decref(o);
    } else if (kind == 3) {
        check_watch(modal_fs_parse_watch(b, n));
    } else if (kind == 4) {
        const char *en = NULL;
        char msg[64];
        modal_fs_mv_error(b, n, &en, msg, sizeof(msg));
        if (!en || en[0] != 'E' || strlen(msg) >= sizeof(msg))
            abort();
        /* the same bytes as a tar stream (modal_fstar.c): whole or cut in
         * two, one count, never more entries than header blocks */
        struct mtar_count w = {0}, c = {0};
        modal_fstar_count(&w, b, n);
        size_t cut = n ? data[1] % n : 0;
        modal_fstar_count(&c, b, cut);
        modal_fstar_count(&c, b + cut, n - cut);
        if (w.entries != c.entries || w.entries > n / 512 || w.hlen >= 512)
            abort();
    } else {
        json_t *o = modal_fs_parse_list(b, n, skip, limit);
        if (o) {
            json_t *ents = json_object_get(o, "entries");
            if (!json_is_array(ents) || (int64_t)json_array_size(ents) > limit ||
                !json_is_boolean(json_object_get(o, "more")))
                abort();
            size_t i;
            json_t *e;
            json_array_foreach(ents, i, e)
                check_entry(e, 1);
        }
        json_decref(o);
    }
    return 0;
}
