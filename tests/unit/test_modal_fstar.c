/*
 * test_modal_fstar.c - the pieces of Modal's tar archives that need no
 * sandbox (modal_fstar.c through modal_int.h): the entry count of a stream
 * cut anywhere (PAX and GNU records, data, end blocks, base-256 sizes), the
 * scripts' argv (the top entry's --transform escaped), the scripts' and GNU
 * tar's stderr as errno names (modal_fs_mv_error), and the tool's
 * "directory" given in the protocol's "dir".
 */
#include <stdlib.h>

#include "core/fs.h"
#include "providers/modal/modal_int.h"
#include "testhelp.h"

#define B(s) (const uint8_t *)(s), strlen(s)

static void hdr(uint8_t *h, char type, uint64_t size, int b256)
{
    memset(h, 0, 512);
    memcpy(h, "name", 4);
    h[156] = (uint8_t)type;
    if (b256) {
        h[124] = 0x80;
        for (int i = 0; i < 8; i++)
            h[135 - i] = (uint8_t)(size >> (8 * i));
    } else {
        snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)size);
    }
}

/* A stream: PAX record (100 bytes), file (700 bytes), dir, GNU long name
 * (10), symlink, a base-256 file of 513 bytes, end blocks. */
static size_t stream(uint8_t *s)
{
    size_t o = 0;
    hdr(s + o, 'x', 100, 0), o += 512 + 512;
    hdr(s + o, '0', 700, 0), o += 512 + 1024;
    hdr(s + o, '5', 0, 0), o += 512;
    hdr(s + o, 'L', 10, 0), o += 512 + 512;
    hdr(s + o, '2', 0, 0), o += 512;
    hdr(s + o, '0', 513, 1), o += 512 + 1024;
    memset(s + o, 0, 1024), o += 1024;
    return o;
}

static void test_count(void)
{
    static uint8_t s[16384];
    size_t n = stream(s);
    struct mtar_count c = {0};
    modal_fstar_count(&c, s, n);
    test_cond("entries of a whole stream: records describe, they are not counted",
              c.entries == 4);
    int all = 1;
    size_t cuts[] = {1, 7, 511, 512, 513, 1000};
    for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
        struct mtar_count d = {0};
        for (size_t i = 0; i < n; i += cuts[k])
            modal_fstar_count(&d, s + i, n - i < cuts[k] ? n - i : cuts[k]);
        all = all && d.entries == 4;
    }
    test_cond("the same count however the stream is cut", all);
}

static void test_argv(void)
{
    struct fs_call fc = {.op = FS_OP_READ};
    fc.args = json_pack("{s:s, s:s, s:s, s:b}", "path", "/w/a b", "format", "tar", "name",
                        "x&y|z\\", "follow", 1);
    size_t n = 0;
    char **a = modal_fstar_argv(&fc, "sbxd-tar-t1", &n);
    test_cond("a read: sh -c SCRIPT sbxd-tar-TAG PATH TRANSFORM FOLLOW",
              a && n == 7 && !strcmp(a[0], "/bin/sh") && !strcmp(a[3], "sbxd-tar-t1") &&
                  !strcmp(a[4], "/w/a b") && !strcmp(a[6], "1"));
    /* the tagged shell stays while tar runs, so modal_kill_send finds it */
    test_cond("a read's script runs tar as its child, not exec'd in its place",
              a && !strstr(a[2], "exec tar") && strstr(a[2], "\nexit $?\n"));
    test_eq_str("the top entry's name is escaped in the transform", a ? a[5] : "",
                "s|^[^/]*|x\\&y\\|z\\\\|rhS");
    modal_fs_mv_argv_free(a, n);
    json_decref(fc.args);
    fc.op = FS_OP_WRITE;
    fc.args = json_pack("{s:s, s:s}", "path", "/w", "format", "tar");
    a = modal_fstar_argv(&fc, "sbxd-tar-t2", &n);
    test_cond("a write: sh -c SCRIPT sbxd-tar-TAG DIR",
              a && n == 5 && !strcmp(a[3], "sbxd-tar-t2") && !strcmp(a[4], "/w"));
    test_cond("it is an archive", modal_fstar_is(&fc));
    modal_fs_mv_argv_free(a, n);
    json_decref(fc.args);
    fc.args = json_pack("{s:s}", "path", "w");
    test_cond("a relative path is refused",
              modal_fstar_argv(&fc, "sbxd-tar-t3", &n) == NULL);
    test_cond("no format: no archive", !modal_fstar_is(&fc));
    json_decref(fc.args);
}

static void test_errors(void)
{
    const char *en = NULL;
    char msg[128];
    test_cond("the script's refusal line gives its errno and text",
              modal_fs_mv_error(B("sbxd-tar: EPERM: outside the target directory\n"), &en,
                                msg, sizeof(msg)) == 0 &&
                  !strcmp(en, "EPERM") && !strcmp(msg, "outside the target directory"));
    test_cond("GNU tar's words: no archive is EINVAL",
              modal_fs_mv_error(B("tar: This does not look like a tar archive\ntar: ..."),
                                &en, msg, sizeof(msg)) == 0 &&
                  !strcmp(en, "EINVAL"));
    test_cond("GNU tar's words: ENOSPC",
              modal_fs_mv_error(B("tar: x: Cannot write: No space left on device"), &en,
                                msg, sizeof(msg)) == 0 &&
                  !strcmp(en, "ENOSPC"));
    test_cond(
        "no tar in the image: ENOENT",
        modal_fs_mv_error(B("sh: 1: exec: tar: not found"), &en, msg, sizeof(msg)) == 0 &&
            !strcmp(en, "ENOENT"));
    json_t *o = modal_fs_parse_stat(
        B("{\"name\":\"d\",\"path\":\"/d\",\"type\":\"directory\",\"size\":0}"));
    test_eq_str("the tool's directory is the protocol's dir",
                json_string_value(json_object_get(o, "type")), "dir");
    json_decref(o);
}

int main(void)
{
    test_count();
    test_argv();
    test_errors();
    return test_report();
}
