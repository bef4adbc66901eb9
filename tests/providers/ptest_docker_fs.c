/*
 * ptest_docker_fs.c - fs.* (PROTOCOL.md "Files") on a real Docker engine.
 *
 *   ptest_docker_fs SBXD BUILD_DIR TMPDIR
 *
 * Environment (from tests/providers/docker_fs.sh): DOCKER_HOST unix://...;
 * SBX_SANITIZED / SBX_VALGRIND set: the 1 GiB transfer is a counted skip.
 *
 * Starts its own sbxd (so it can read that process's RSS), checks each
 * behaviour through the socket and, where the claim is about the sandbox,
 * inside it with a command (digests, owners, temp files left behind).
 */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "sbx/sbx.h"
#include "testhelp.h"

#define CHUNK (4u << 20)

static const char *sbxd_bin, *bdir, *tmpdir;
static char sock[108];
/* Sandbox ids carry our pid: other runs of this test on a shared engine use
 * the same names, and an sbxd without the lookup by socket would take ours. */
static char FS1[32], FSU[32];
static pid_t sbxd_pid;

/* ---- helpers ------------------------------------------------------------------ */

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, 120000, m, p);
}

static const char *errno_of(json_t *r)
{
    const char *s = json_string_value(
        json_object_get(json_object_get(json_object_get(r, "error"), "data"), "errno"));
    return s ? s : "";
}

/* stdout of a shell command in sandbox sb (malloc'd), or NULL. */
static char *sh(conn *c, const char *sb, const char *cmd)
{
    json_t *r =
        call(c, "process.exec", json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
    const char *o = json_string_value(json_object_get(res_of(r), "stdout"));
    char *s = o ? strdup(o) : NULL;
    json_decref(r);
    if (s) {
        size_t n = strlen(s);
        while (n && s[n - 1] == '\n')
            s[--n] = '\0';
    }
    return s;
}

static int sh_eq(conn *c, const char *sb, const char *cmd, const char *want)
{
    char *s = sh(c, sb, cmd);
    int ok = s && !strcmp(s, want);
    if (!ok)
        printf("      %s -> \"%s\" (want \"%s\")\n", cmd, s ? s : "(null)", want);
    free(s);
    return ok;
}

/* Writes n bytes of d to sb:path in chunks. Returns the last answer. */
static json_t *put(conn *c, const char *sb, const char *path, const uint8_t *d, size_t n)
{
    json_int_t h = 0;
    size_t off = 0;
    char *b64 = malloc(sbx_base64_encoded_len(CHUNK) + 1);
    json_t *r = NULL;
    do {
        size_t k = n - off > CHUNK ? CHUNK : n - off;
        sbx_base64_encode(b64, d + off, k);
        int more = off + k < n;
        json_t *p =
            json_pack("{s:s, s:s, s:b}", "sandbox", sb, "data_b64", b64, "more", more);
        if (h)
            json_object_set_new(p, "handle", json_integer(h));
        else
            json_object_set_new(p, "path", json_string(path));
        json_decref(r);
        r = call(c, "fs.write", p);
        if (!res_of(r))
            break;
        h = json_integer_value(json_object_get(res_of(r), "handle"));
        off += k;
    } while (off < n);
    free(b64);
    return r;
}

/* Reads sb:path whole into *out (malloc'd). -1 on an error answer. */
static int get(conn *c, const char *sb, const char *path, uint8_t **out, size_t *n)
{
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        json_t *r = call(c, "fs.read",
                         json_pack("{s:s, s:s, s:I}", "sandbox", sb, "path", path,
                                   "offset", (json_int_t)len));
        char *d;
        size_t k;
        if (!res_of(r) || sbx_json_get_bytes(&d, &k, res_of(r), "data") != SBX_OK) {
            json_decref(r);
            free(buf);
            return -1;
        }
        while (len + k > cap)
            buf = realloc(buf, cap *= 2);
        memcpy(buf + len, d, k);
        len += k;
        free(d);
        int eof = json_is_true(json_object_get(res_of(r), "eof"));
        json_decref(r);
        if (eof || k == 0)
            break;
    }
    *out = buf;
    *n = len;
    return 0;
}

static void write_local(const char *file, const uint8_t *d, size_t n)
{
    FILE *f = fopen(file, "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
    }
}

static json_t *create(conn *c, const char *id, json_t *opts)
{
    return dk_create(c, id, opts ? json_pack("{s:o}", "options", opts) : NULL, 120000);
}

static void destroy(conn *c, const char *id)
{
    dk_destroy(c, id, 120000);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_text(conn *c)
{
    json_t *r = call(c, "fs.write",
                     json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "hello.txt",
                               "data", "héllo wörld\n"));
    test_cond("fs.write text answers size", res_int(r, "size") == 14);
    test_eq_str("a relative path joins the working dir", res_str(r, "path"),
                "/workspace/hello.txt");
    json_decref(r);
    test_cond("the command sees the same bytes",
              sh_eq(c, FS1, "cat /workspace/hello.txt", "héllo wörld"));
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "hello.txt"));
    test_eq_str("fs.read gives the text back", res_str(r, "data"), "héllo wörld\n");
    test_cond("eof and size", json_is_true(json_object_get(res_of(r), "eof")) &&
                                  res_int(r, "size") == 14);
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:i, s:i}", "sandbox", FS1, "path", "hello.txt",
                       "offset", 7, "length", 4));
    test_eq_str("offset and length (in bytes)", res_str(r, "data"), "wör");
    test_cond("not eof in the middle", json_is_false(json_object_get(res_of(r), "eof")));
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "hello.txt", "encoding",
                       "base64"));
    test_cond("encoding base64 gives data_b64", json_object_get(res_of(r), "data_b64") &&
                                                    !json_object_get(res_of(r), "data"));
    json_decref(r);
}

static void test_binary_50mb(conn *c)
{
    size_t n = 50u << 20;
    uint8_t *d = malloc(n);
    int fd = open("/dev/urandom", O_RDONLY);
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, d + got, n - got);
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(fd);
    char lf[600], want[65], have[65];
    snprintf(lf, sizeof(lf), "%s/up.bin", tmpdir);
    write_local(lf, d, n);
    pt_sha256_file(lf, want);
    double t = now_ms();
    json_t *r = put(c, FS1, "/workspace/up.bin", d, n);
    double up = now_ms() - t;
    test_cond("50 MB random upload answers its size",
              res_of(r) && res_int(r, "size") == (json_int_t)n);
    json_decref(r);
    char *s = sh(c, FS1, "sha256sum /workspace/up.bin");
    test_cond("upload: the digest inside the sandbox is the local one",
              s && strncmp(s, want, 64) == 0);
    free(s);
    free(d);
    /* the other way: bytes the sandbox made, read out by fs.read */
    s = sh(c, FS1,
           "head -c 52428800 /dev/urandom > /workspace/down.bin && "
           "sha256sum /workspace/down.bin");
    uint8_t *back = NULL;
    size_t bn = 0;
    t = now_ms();
    int rc = get(c, FS1, "/workspace/down.bin", &back, &bn);
    double down = now_ms() - t;
    test_cond("50 MB download reads every byte", rc == 0 && bn == n);
    snprintf(lf, sizeof(lf), "%s/down.bin", tmpdir);
    write_local(lf, back, bn);
    pt_sha256_file(lf, have);
    test_cond("download: the local digest is the sandbox's",
              s && strncmp(s, have, 64) == 0);
    free(s);
    free(back);
    printf("      (50 MB: upload %.0f MB/s, download %.0f MB/s)\n", 50e3 / up * 1.048576,
           50e3 / down * 1.048576);
}

static void test_gib_rss(conn *c)
{
    if (getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND")) {
        test_skip("1 GiB transfer keeps sbxd's RSS flat", "under sanitizers");
        return;
    }
    size_t total = 1u << 30;
    uint8_t *chunk = malloc(CHUNK);
    for (size_t i = 0; i < CHUNK; i++)
        chunk[i] = (uint8_t)(i * 2654435761u >> 13);
    char *b64 = malloc(sbx_base64_encoded_len(CHUNK) + 1);
    sbx_base64_encode(b64, chunk, CHUNK);
    long base = pt_rss_kb(sbxd_pid), peak = base;
    json_int_t h = 0;
    int ok = 1;
    for (size_t off = 0; off < total && ok; off += CHUNK) {
        int more = off + CHUNK < total;
        json_t *p =
            json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "data_b64", b64, "more", more);
        if (h)
            json_object_set_new(p, "handle", json_integer(h));
        else
            json_object_set_new(p, "path", json_string("/workspace/gib.bin"));
        json_t *r = call(c, "fs.write", p);
        ok = res_of(r) != NULL;
        h = json_integer_value(json_object_get(res_of(r), "handle"));
        json_decref(r);
        long now = pt_rss_kb(sbxd_pid);
        peak = now > peak ? now : peak;
    }
    test_cond("1 GiB written in chunks", ok);
    test_cond("the file inside has 1 GiB",
              sh_eq(c, FS1, "stat -c %s /workspace/gib.bin", "1073741824"));
    size_t off = 0;
    for (; off < total && ok; off += CHUNK) {
        json_t *r = call(c, "fs.read",
                         json_pack("{s:s, s:s, s:I, s:s}", "sandbox", FS1, "path",
                                   "/workspace/gib.bin", "offset", (json_int_t)off,
                                   "encoding", "base64"));
        const char *d = json_string_value(json_object_get(res_of(r), "data_b64"));
        ok = d && strcmp(d, b64) == 0;
        json_decref(r);
        long now = pt_rss_kb(sbxd_pid);
        peak = now > peak ? now : peak;
    }
    test_cond("1 GiB read back, every chunk exact", ok && off == total);
    printf("      (sbxd RSS %ld kB before, peak %ld kB)\n", base, peak);
    test_cond("sbxd's RSS stays flat (under 64 MiB of growth)", peak - base < 64 * 1024);
    json_decref(
        call(c, "fs.remove",
             json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/workspace/gib.bin")));
    free(chunk);
    free(b64);
}

static void test_paths(conn *c)
{
    const char *names[] = {"/workspace/with space/a b.txt", "/workspace/ünï/çødé ✓.txt"};
    for (int i = 0; i < 2; i++) {
        json_t *r = call(c, "fs.write",
                         json_pack("{s:s, s:s, s:s, s:b}", "sandbox", FS1, "path",
                                   names[i], "data", names[i], "mkdir_parents", 1));
        test_cond(i ? "unicode path written" : "path with spaces written", res_of(r));
        json_decref(r);
        r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", names[i]));
        test_eq_str("and read back", res_str(r, "data"), names[i]);
        json_decref(r);
    }
    json_t *r = call(c, "fs.list",
                     json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/workspace/ünï"));
    json_t *e = json_array_get(json_object_get(res_of(r), "entries"), 0);
    test_eq_str("the listing names it", json_string_value(json_object_get(e, "name")),
                "çødé ✓.txt");
    json_decref(r);
    /* symlinks */
    free(sh(c, FS1,
            "ln -sf hello.txt /workspace/link && ln -sf /nowhere /workspace/dangling"));
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "link"));
    test_eq_str("a read follows a symlink", res_str(r, "data"), "héllo wörld\n");
    json_decref(r);
    r = call(c, "fs.stat",
             json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "path", "link", "follow", 0));
    test_eq_str("stat follow:false sees the link", res_str(r, "type"), "symlink");
    test_eq_str("and its target", res_str(r, "target"), "hello.txt");
    json_decref(r);
    r = call(c, "fs.stat", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "link"));
    test_eq_str("stat follows by default", res_str(r, "type"), "file");
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "dangling"));
    test_cond("a dangling link reads as ENOENT",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT"));
    json_decref(r);
    /* .. and relative forms, resolved inside the sandbox */
    r = call(c, "fs.read",
             json_pack("{s:s, s:s}", "sandbox", FS1, "path", "with space/../hello.txt"));
    test_eq_str("a relative path with ..", res_str(r, "data"), "héllo wörld\n");
    json_decref(r);
    r = call(
        c, "fs.read",
        json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/../../workspace/./hello.txt"));
    test_eq_str(".. above / stays at the sandbox's root", res_str(r, "data"),
                "héllo wörld\n");
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/etc/hostname"));
    test_cond("an absolute path is the container's, not the host's",
              res_of(r) && strlen(res_str(r, "data")) > 0);
    json_decref(r);
}

static void test_errors(conn *c)
{
    struct {
        const char *m, *path, *want;
    } cases[] = {
        {"fs.read", "nope.txt", "ENOENT"},    {"fs.read", "/workspace", "EISDIR"},
        {"fs.list", "hello.txt", "ENOTDIR"},  {"fs.list", "hello.txt/x", "ENOTDIR"},
        {"fs.mkdir", "/workspace", "EEXIST"}, {"fs.mkdir", "a/b/c", "ENOENT"},
        {"fs.remove", "gone", "ENOENT"},      {"fs.stat", "nope", "ENOENT"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *r = call(c, cases[i].m,
                         json_pack("{s:s, s:s}", "sandbox", FS1, "path", cases[i].path));
        char d[200];
        snprintf(d, sizeof(d), "%s %s: -32010 %s", cases[i].m, cases[i].path,
                 cases[i].want);
        test_cond(d, err_code(r) == -32010 && !strcmp(errno_of(r), cases[i].want));
        json_decref(r);
    }
    json_t *r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", ""));
    test_cond("an empty path is -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:i}", "sandbox", FS1, "path", 3));
    test_cond("a path of the wrong type is -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s, s:s}", "sandbox", FS1, "path", "x", "data", "a",
                       "data_b64", "YQ=="));
    test_cond("data and data_b64 together are -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(
        c, "fs.write",
        json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "x", "data_b64", "@@@"));
    test_cond("bad base64 is -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(c, "fs.write",
             json_pack("{s:s, s:I, s:s}", "sandbox", FS1, "handle", (json_int_t)999999,
                       "data", "x"));
    test_cond("an unknown handle is -32602", err_code(r) == -32602);
    json_decref(r);
    char *big = malloc(CHUNK + 2);
    memset(big, 'a', CHUNK + 1);
    big[CHUNK + 1] = '\0';
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "big", "data", big));
    free(big);
    test_cond(
        "a chunk over fs_chunk_bytes is -32005",
        err_code(r) == -32005 &&
            !strcmp(json_string_value(json_object_get(
                        json_object_get(json_object_get(r, "error"), "data"), "limit")),
                    "fs_chunk_bytes"));
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", "nosuch", "path", "/x"));
    test_cond("an unknown sandbox is -32000", err_code(r) == -32000);
    json_decref(r);
}

static void test_ops(conn *c)
{
    json_t *r = call(
        c, "fs.mkdir",
        json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "path", "tree/a/b", "parents", 1));
    test_cond("mkdir parents", json_is_true(json_object_get(res_of(r), "created")));
    json_decref(r);
    r = call(
        c, "fs.mkdir",
        json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "path", "tree/a/b", "parents", 1));
    test_cond("mkdir -p of an existing dir: created false",
              res_of(r) && json_is_false(json_object_get(res_of(r), "created")));
    json_decref(r);
    for (int i = 0; i < 25; i++) {
        char p[64];
        snprintf(p, sizeof(p), "tree/f%02d", i);
        json_decref(
            call(c, "fs.write",
                 json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", p, "data", "x")));
    }
    /* pages of 10: 26 entries (25 files and a), then b under a at depth 3 */
    int seen = 0, pages = 0;
    const char *cursor = NULL;
    json_t *last = NULL;
    do {
        json_t *p = json_pack("{s:s, s:s, s:i, s:i}", "sandbox", FS1, "path", "tree",
                              "limit", 10, "depth", 3);
        if (cursor)
            json_object_set_new(p, "cursor", json_string(cursor));
        json_decref(last);
        last = call(c, "fs.list", p);
        seen += (int)json_array_size(json_object_get(res_of(last), "entries"));
        cursor = json_string_value(json_object_get(res_of(last), "cursor"));
        pages++;
    } while (cursor && pages < 10);
    json_decref(last);
    test_cond("fs.list pages with a cursor reach every entry", seen == 27 && pages == 3);
    r = call(c, "fs.list", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "tree"));
    json_t *e0 = json_array_get(json_object_get(res_of(r), "entries"), 0);
    test_cond("entries are sorted and typed",
              !strcmp(json_string_value(json_object_get(e0, "name")), "a") &&
                  !strcmp(json_string_value(json_object_get(e0, "type")), "dir") &&
                  json_is_string(json_object_get(e0, "mtime")));
    json_decref(r);
    r = call(c, "fs.rename",
             json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "tree/f00", "to",
                       "tree/a/moved"));
    test_cond("rename", res_of(r) && sh_eq(c, FS1, "cat /workspace/tree/a/moved", "x"));
    json_decref(r);
    r = call(c, "fs.rename",
             json_pack("{s:s, s:s, s:s, s:b}", "sandbox", FS1, "path", "tree/f01", "to",
                       "tree/f02", "overwrite", 0));
    test_cond("rename overwrite:false refuses an existing target",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EEXIST"));
    json_decref(r);
    r = call(c, "fs.remove", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "tree"));
    test_cond("remove of a full dir without recursive: ENOTEMPTY",
              !strcmp(errno_of(r), "ENOTEMPTY"));
    json_decref(r);
    r = call(
        c, "fs.remove",
        json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "path", "tree", "recursive", 1));
    test_cond("remove recursive",
              res_of(r) && sh_eq(c, FS1, "test -e /workspace/tree || echo gone", "gone"));
    json_decref(r);
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s, s:i}", "sandbox", FS1, "path", "mode.sh", "data",
                       "#!/bin/sh\necho run\n", "mode", 0755));
    test_cond("mode applies", res_of(r) && sh_eq(c, FS1, "/workspace/mode.sh", "run"));
    json_decref(r);
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s, s:b}", "sandbox", FS1, "path", "mode.sh", "data",
                       "echo more\n", "append", 1));
    test_cond("append adds to the end",
              res_int(r, "size") == 29 &&
                  sh_eq(c, FS1, "tail -n 1 /workspace/mode.sh", "echo more"));
    json_decref(r);
    test_cond("no temporary files are left",
              sh_eq(c, FS1, "ls -a /workspace | grep -c '\\.sbx-' || true", "0"));
}

static void test_owner(conn *c)
{
    json_t *r = create(c, FSU, json_pack("{s:s}", "user", "1234:2345"));
    if (!res_of(r)) {
        test_cond("a sandbox with user 1234:2345 starts", 0);
        json_decref(r);
        return;
    }
    json_decref(r);
    r = call(
        c, "fs.write",
        json_pack("{s:s, s:s, s:s}", "sandbox", FSU, "path", "/tmp/mine", "data", "m"));
    test_cond("the command user writes /tmp", res_of(r));
    json_decref(r);
    test_cond("its file belongs to the command's uid:gid",
              sh_eq(c, FSU, "echo $(stat -c %u:%g /tmp/mine) $(id -u):$(id -g)",
                    "1234:2345 1234:2345"));
    r = call(c, "fs.stat", json_pack("{s:s, s:s}", "sandbox", FSU, "path", "/tmp/mine"));
    test_cond("fs.stat says so too",
              res_int(r, "uid") == 1234 && res_int(r, "gid") == 2345);
    json_decref(r);
    r = call(
        c, "fs.write",
        json_pack("{s:s, s:s, s:s}", "sandbox", FSU, "path", "/etc/passwd", "data", "x"));
    test_cond("what the user may not write is EACCES",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EACCES"));
    json_decref(r);
    destroy(c, FSU);
}

static void test_enospc(conn *c)
{
    /* /tmp is a 16 MiB tmpfs in this config */
    size_t n = 24u << 20;
    uint8_t *d = calloc(1, n);
    json_t *r = put(c, FS1, "/tmp/full.bin", d, n);
    test_cond("a write past a full tmpfs is -32010 ENOSPC",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOSPC"));
    json_decref(r);
    free(d);
    test_cond("nothing is left of it",
              sh_eq(c, FS1, "ls -a /tmp | grep -c 'full' || true", "0"));
    r = call(
        c, "fs.write",
        json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "/tmp/small", "data", "ok"));
    test_cond("the space is back afterwards", res_of(r) != NULL);
    json_decref(r);
}

/* Two sessions writing one path in 3 chunks each, interleaved: the file is
 * one whole version or the other, never a mix. */
static void test_concurrent(void)
{
    conn *a = cn_open(sock), *b = cn_open(sock);
    size_t k = 1u << 20;
    char *da = malloc(k + 1), *db = malloc(k + 1);
    memset(da, 'A', k);
    memset(db, 'B', k);
    da[k] = db[k] = '\0';
    json_int_t ha = 0, hb = 0;
    for (int i = 0; i < 3; i++) {
        for (int w = 0; w < 2; w++) {
            conn *c = w ? b : a;
            json_int_t *h = w ? &hb : &ha;
            json_t *p = json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "data", w ? db : da,
                                  "more", i < 2);
            if (*h)
                json_object_set_new(p, "handle", json_integer(*h));
            else
                json_object_set_new(p, "path", json_string("/workspace/race.txt"));
            json_t *r = call(c, "fs.write", p);
            if (i < 2)
                *h = json_integer_value(json_object_get(res_of(r), "handle"));
            json_decref(r);
        }
    }
    test_cond("concurrent writers: the file is one writer's whole",
              sh_eq(a, FS1, "tr -d A < /workspace/race.txt | wc -c", "0") ||
                  sh_eq(a, FS1, "tr -d B < /workspace/race.txt | wc -c", "0"));
    test_cond("and has one writer's size",
              sh_eq(a, FS1, "stat -c %s /workspace/race.txt", "3145728"));
    /* a handle is its session's */
    json_t *p = json_pack("{s:s, s:s, s:s, s:b}", "sandbox", FS1, "path", "mine", "data",
                          "x", "more", 1);
    json_t *r = call(a, "fs.write", p);
    json_int_t h = res_int(r, "handle");
    json_decref(r);
    r = call(b, "fs.write",
             json_pack("{s:s, s:I, s:s}", "sandbox", FS1, "handle", h, "data", "y"));
    test_cond("another session cannot use a write handle", err_code(r) == -32602);
    json_decref(r);
    cn_close(a);
    usleep(300000);
    test_cond("a session that leaves aborts its write (no file, no temporary)",
              sh_eq(b, FS1, "ls -a /workspace | grep -c mine || true", "0"));
    cn_close(b);
    free(da);
    free(db);
}

static int count_events(conn *c, const char *path, const char *kind)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "fs.event") != 0)
            continue;
        if (!strcmp(json_string_value(json_object_get(p, "path")), path) &&
            !strcmp(json_string_value(json_object_get(p, "kind")), kind))
            n++;
    }
    return n;
}

static void test_watch(conn *c)
{
    conn *w = cn_open(sock);
    free(sh(c, FS1, "mkdir -p /workspace/w/sub"));
    json_t *r = call(w, "fs.watch",
                     json_pack("{s:s, s:s, s:b}", "sandbox", FS1, "path", "/workspace/w",
                               "recursive", 1));
    json_int_t id = res_int(r, "watch");
    test_cond("fs.watch answers a watch id", id > 0);
    json_decref(r);
    free(sh(
        c, FS1,
        "echo 1 > /workspace/w/new; echo 2 >> /workspace/w/new; "
        "mkdir /workspace/w/sub/deeper; sleep 0.2; echo x > /workspace/w/sub/deeper/f; "
        "rm /workspace/w/new"));
    json_decref(call(w, "fs.write",
                     json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path",
                               "/workspace/w/api.txt", "data", "via fs.write")));
    /* events come within 50 ms batches: wait for them with a ping loop */
    for (int i = 0; i < 20 && count_events(w, "/workspace/w/api.txt", "create") == 0;
         i++) {
        usleep(100000);
        json_decref(call(w, "daemon.ping", NULL));
    }
    test_cond("create", count_events(w, "/workspace/w/new", "create") >= 1);
    test_cond("modify", count_events(w, "/workspace/w/new", "modify") >= 1);
    test_cond("delete", count_events(w, "/workspace/w/new", "delete") == 1);
    test_cond("recursive: a new subdirectory is watched too",
              count_events(w, "/workspace/w/sub/deeper/f", "create") == 1);
    test_cond("an atomic fs.write shows as one create of its name, no temporary",
              count_events(w, "/workspace/w/api.txt", "create") == 1);
    int tmp = 0;
    size_t i;
    json_t *m;
    json_array_foreach(w->notes, i, m) {
        const char *p =
            json_string_value(json_object_get(json_object_get(m, "params"), "path"));
        if (p && strstr(p, ".sbx-"))
            tmp++;
    }
    test_cond("no temporary names in events", tmp == 0);
    r = call(w, "fs.unwatch", json_pack("{s:s, s:I}", "sandbox", FS1, "watch", id));
    test_cond("unwatch", res_of(r) != NULL);
    json_decref(r);
    size_t before = json_array_size(w->notes);
    free(sh(c, FS1, "echo late > /workspace/w/late"));
    usleep(200000);
    json_decref(call(w, "daemon.ping", NULL));
    test_cond("no events after unwatch", json_array_size(w->notes) == before);
    r = call(w, "fs.unwatch", json_pack("{s:s, s:I}", "sandbox", FS1, "watch", id));
    test_cond("a second unwatch is -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(w, "fs.watch", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "nope"));
    test_cond("watching a missing dir is ENOENT", !strcmp(errno_of(r), "ENOENT"));
    json_decref(r);
    /* the per-sandbox cap (fs_watches_per_sandbox: 2 in this config) */
    json_t *r1 =
        call(w, "fs.watch", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/"));
    json_t *r2 =
        call(w, "fs.watch", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/tmp"));
    json_t *r3 =
        call(w, "fs.watch", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "/etc"));
    test_cond("watches past fs_watches_per_sandbox are -32005",
              res_of(r1) && res_of(r2) && err_code(r3) == -32005);
    json_decref(r1);
    json_decref(r2);
    json_decref(r3);
    cn_close(w);
}

/* One call as another uid (a forked child that drops to it). */
static int code_as_uid(uid_t uid, const char *method, json_t *params)
{
    return pt_code_as_uid(uid, sock, method, params);
}

static void test_cross_uid(void)
{
    if (getuid() != 0) {
        test_skip("another uid's sandbox is -32000 for fs.*", "needs root to switch uid");
        return;
    }
    const char *methods[] = {"fs.read",  "fs.write",  "fs.list",   "fs.stat",
                             "fs.mkdir", "fs.remove", "fs.rename", "fs.watch"};
    int all = 1;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        int code =
            code_as_uid(4321, methods[i],
                        json_pack("{s:s, s:s, s:s, s:s}", "sandbox", FS1, "path",
                                  "/workspace/hello.txt", "data", "x", "to", "/y"));
        if (code != -32000) {
            printf("      %s as uid 4321: %d\n", methods[i], code);
            all = 0;
        }
    }
    test_cond("every fs.* on another uid's sandbox is -32000", all);
}

static void test_isolates(conn *c)
{
    const char *provs[] = {"duktape", "js"};
    for (int i = 0; i < 2; i++) {
        json_t *r = call(c, "sandbox.create",
                         json_pack("{s:s, s:s}", "id", provs[i], "provider", provs[i]));
        char d[120];
        snprintf(d, sizeof(d), "%s: fs.* is -32011 naming the provider", provs[i]);
        if (!res_of(r)) {
            test_skip(d, "provider unavailable here");
            json_decref(r);
            continue;
        }
        json_decref(r);
        const char *methods[] = {"fs.read", "fs.write", "fs.list", "fs.watch"};
        int ok = 1;
        for (int k = 0; k < 4; k++) {
            r = call(c, methods[k],
                     json_pack("{s:s, s:s, s:s}", "sandbox", provs[i], "path", "/x",
                               "data", "y"));
            json_t *dt = json_object_get(json_object_get(r, "error"), "data");
            ok &= err_code(r) == -32011 &&
                  !strcmp(json_string_value(json_object_get(dt, "provider")), provs[i]);
            json_decref(r);
        }
        test_cond(d, ok);
        destroy(c, provs[i]);
    }
}

static void test_stopped(conn *c)
{
    json_decref(call(c, "sandbox.stop", json_pack("{s:s}", "id", FS1)));
    /* reads come from the engine then (ptest_docker_archive.c); writes wait */
    json_t *r =
        call(c, "fs.write",
             json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "x.txt", "data", "x"));
    test_cond("a write to a stopped sandbox is -32001", err_code(r) == -32001);
    json_decref(r);
    json_decref(call(c, "sandbox.start", json_pack("{s:s}", "id", FS1)));
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "hello.txt"));
    test_eq_str("started again, the files are there", res_str(r, "data"),
                "héllo wörld\n");
    json_decref(r);
}

/* metadata.<key> of sandbox.get on c, copied into out ("" when absent). */
static void meta_of(conn *c, const char *id, const char *key, char *out, size_t n)
{
    json_t *r = call(c, "sandbox.get", json_pack("{s:s}", "id", id));
    const char *v =
        json_string_value(json_object_get(json_object_get(res_of(r), "metadata"), key));
    snprintf(out, n, "%s", v ? v : "");
    json_decref(r);
}

/*
 * A second sbxd on the same engine (its own socket) with a sandbox of the
 * same id: it gets a container of its own, and ours keeps its agent. Before
 * the lookup by id was limited to this sbxd's containers, the second one
 * attached to ours: two daemons wrote frames into one agent's stdin, each
 * PING took the agent from the other, and fs transfers came out misaligned
 * (what concurrent runs of this test on a shared engine did to each other).
 */
static void test_two_daemons(conn *c)
{
    char sock2[108], log2[600], cfg[600];
    snprintf(sock2, sizeof(sock2), "%.90s/fs2.sock", tmpdir);
    snprintf(log2, sizeof(log2), "%s/sbxd-fs2.log", tmpdir);
    snprintf(cfg, sizeof(cfg), "%s/fs.yaml", tmpdir);
    pid_t pid = dk_sbxd_start(cfg, sock2, log2, NULL);
    conn *c2 = dk_connect(sock2, 5000);
    dk_docker_up(c2, 10000);
    char cid1[80], cid2[80] = "", ch1[16], ch_after[16];
    json_decref(call(c, "fs.write",
                     json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "two.txt",
                               "data", "ours\n")));
    meta_of(c, FS1, "container_id", cid1, sizeof(cid1));
    meta_of(c, FS1, "channel", ch1, sizeof(ch1));
    json_t *r = c2 ? create(c2, FS1, NULL) : NULL;
    test_cond("a second sbxd creates a sandbox of the same id", res_of(r) != NULL);
    if (!res_of(r)) {
        char *t = json_dumps(r, 0);
        printf("      create on the second sbxd: %s (log %s)\n", t ? t : "(none)", log2);
        free(t);
    }
    json_decref(r);
    if (c2)
        meta_of(c2, FS1, "container_id", cid2, sizeof(cid2));
    test_cond("in a container of its own, not ours",
              cid1[0] && cid2[0] && strcmp(cid1, cid2) != 0);
    test_cond("whose commands run there",
              c2 && sh_eq(c2, FS1, "test -e /workspace/two.txt || echo none", "none"));
    if (c2)
        destroy(c2, FS1);
    meta_of(c, FS1, "container_id", cid2, sizeof(cid2));
    meta_of(c, FS1, "channel", ch_after, sizeof(ch_after));
    test_cond("ours keeps its container and its channel",
              !strcmp(cid1, cid2) && !strcmp(ch1, ch_after));
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", FS1, "path", "two.txt"));
    test_eq_str("and its files", res_str(r, "data"), "ours\n");
    json_decref(r);
    if (c2)
        cn_close(c2);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* sbxctl cp and fs against this sbxd: shell commands, checked by exit status. */
static int run_ok(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run_ok(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st != 0)
        printf("      `%s` -> %d\n", cmd, st);
    return st == 0;
}

static void test_sbxctl(conn *c)
{
    char x[700], d[700];
    snprintf(x, sizeof(x), "%s/sbxctl -s %s", bdir, sock);
    snprintf(d, sizeof(d), "%s/ctl", tmpdir);
    test_cond("a local tree to copy",
              run_ok("rm -rf %s && mkdir -p '%s/up/sub dir' && echo one > %s/up/a.txt && "
                     "head -c 300000 /dev/urandom > '%s/up/sub dir/bin'",
                     d, d, d, d));
    test_cond("sbxctl cp DIR ID:PATH and back: the same tree",
              run_ok("%s cp %s/up %s:/workspace && %s cp %s:/workspace/up %s/down && "
                     "diff -r %s/up %s/down",
                     x, d, FS1, x, FS1, d, d, d));
    test_cond("sbxctl cp ID:PATH - writes a tar that tar reads",
              run_ok("%s cp %s:/workspace/up - | tar tf - | grep -q '^up/sub dir/bin$'",
                     x, FS1));
    test_cond("sbxctl cp - ID:DIR extracts a tar",
              run_ok("%s fs mkdir %s /workspace/fromtar && tar cf - -C %s/up . | %s cp - "
                     "%s:/workspace/fromtar && %s fs cat %s /workspace/fromtar/a.txt | "
                     "grep -qx one",
                     x, FS1, d, x, FS1, x, FS1));
    test_cond(
        "sbxctl fs write/cat/stat/mv/rm",
        run_ok("echo hi | %s fs write %s ctl.txt && %s fs cat %s ctl.txt | grep -qx hi "
               "&& %s fs stat %s ctl.txt | grep -q '\"size\":3' && %s fs mv %s "
               "ctl.txt ctl2.txt && %s fs rm %s ctl2.txt && ! %s fs cat %s ctl2.txt "
               "2>/dev/null",
               x, FS1, x, FS1, x, FS1, x, FS1, x, FS1, x, FS1));
    test_cond("sbxctl fs ls lists",
              run_ok("%s fs ls %s /workspace/up | grep -q 'a.txt'", x, FS1));
    (void)c;
}

/* Past the per-uid bounds: -32005 naming the limit, and the daemon serves on. */
static const char *limit_of(json_t *r)
{
    const char *s = json_string_value(
        json_object_get(json_object_get(json_object_get(r, "error"), "data"), "limit"));
    return s ? s : "";
}

static void test_bounds(conn *c)
{
    /* fs_transfers_per_uid (16): open writes hold a slot each */
    json_int_t hs[17] = {0};
    int refused = 0;
    for (int i = 0; i < 17; i++) {
        char p[64];
        snprintf(p, sizeof(p), "/workspace/open%d", i);
        json_t *r = call(c, "fs.write",
                         json_pack("{s:s, s:s, s:s, s:b}", "sandbox", FS1, "path", p,
                                   "data", "x", "more", 1));
        hs[i] = res_int(r, "handle");
        if (i == 16)
            refused =
                err_code(r) == -32005 && !strcmp(limit_of(r), "fs_transfers_per_uid");
        json_decref(r);
    }
    test_cond("the 17th open write is -32005 fs_transfers_per_uid", refused && !hs[16]);
    for (int i = 0; i < 16; i++)
        json_decref(call(
            c, "fs.write",
            json_pack("{s:s, s:I, s:b}", "sandbox", FS1, "handle", hs[i], "abort", 1)));
    json_t *r =
        call(c, "fs.write",
             json_pack("{s:s, s:s, s:s}", "sandbox", FS1, "path", "after", "data", "y"));
    test_cond("aborting them gives the slots back", res_of(r) != NULL);
    json_decref(r);
    /* fs_bytes_in_flight_per_uid (8M here): three 4 MiB reads in one batch */
    free(sh(c, FS1, "head -c 12582912 /dev/zero > /workspace/z12"));
    char batch[600];
    snprintf(batch, sizeof(batch),
             "[{\"jsonrpc\":\"2.0\",\"id\":901,\"method\":\"fs.read\",\"params\":{"
             "\"sandbox\":\"%s\",\"path\":\"/workspace/z12\"}},"
             "{\"jsonrpc\":\"2.0\",\"id\":902,\"method\":\"fs.read\",\"params\":{"
             "\"sandbox\":\"%s\",\"path\":\"/workspace/z12\",\"offset\":4194304}},"
             "{\"jsonrpc\":\"2.0\",\"id\":903,\"method\":\"fs.read\",\"params\":{"
             "\"sandbox\":\"%s\",\"path\":\"/workspace/z12\",\"offset\":8388608}}]\n",
             FS1, FS1, FS1);
    cn_send_raw(c, batch, strlen(batch));
    json_t *arr = NULL;
    for (int i = 0; i < 100 && !json_is_array(arr); i++) {
        json_decref(arr);
        arr = cn_read(c, 30000);
        if (arr && !json_is_array(arr) && json_object_get(arr, "method"))
            json_array_append(c->notes, arr);
    }
    int ok = 0, over = 0;
    size_t i;
    json_t *m;
    json_array_foreach(arr, i, m) {
        ok += res_of(m) != NULL;
        over +=
            err_code(m) == -32005 && !strcmp(limit_of(m), "fs_bytes_in_flight_per_uid");
    }
    json_decref(arr);
    test_cond("reads past fs_bytes_in_flight_per_uid are -32005, the others answered",
              ok == 2 && over == 1);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:I}", "sandbox", FS1, "path", "/workspace/z12",
                       "offset", (json_int_t)8388608));
    test_cond("and the bytes are free again afterwards", res_int(r, "length") == 4194304);
    json_decref(r);
}

/* ---- main ----------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *host;
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &host);
    if (st)
        return st;
    snprintf(FS1, sizeof(FS1), "fs1-%d", (int)getpid());
    snprintf(FSU, sizeof(FSU), "fsu-%d", (int)getpid());
    char cfg[600], log[600];
    snprintf(cfg, sizeof(cfg), "%s/fs.yaml", tmpdir);
    snprintf(log, sizeof(log), "%s/sbxd-fs.log", tmpdir);
    snprintf(sock, sizeof(sock), "%.90s/fs.sock", tmpdir);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "limits:\n  fs_watches_per_sandbox: 2\n  fs_bytes_in_flight_per_uid: 8M\n"
            "providers:\n"
            "  duktape:\n    pool_size: 1\n"
            "  docker:\n"
            "    host: %s\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    network: none\n"
            "    memory: 1g\n"
            "    memory_swap: 1g\n"
            "    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n"
            "    tmpfs:\n      /tmp: \"rw,nosuid,nodev,size=16m\"\n",
            host, bdir);
    fclose(f);
    sbxd_pid = dk_sbxd_start(cfg, sock, log, NULL);
    conn *c = dk_connect(sock, 5000);
    /* The engine is pinged asynchronously: wait until daemon.info shows it. */
    dk_docker_up(c, 10000);
    json_t *r = c ? create(c, FS1, NULL) : NULL;
    if (!res_of(r)) {
        char *t = json_dumps(r, 0);
        printf("create: %s\n", t ? t : "(no answer)");
        free(t);
        printf("no docker sandbox (log %s)\n0 passed, 1 failed\n", log);
        if (sbxd_pid > 0)
            kill(sbxd_pid, SIGTERM);
        return 1;
    }
    json_decref(r);
    DK_STEP(test_text(c));
    DK_STEP(test_paths(c));
    DK_STEP(test_errors(c));
    DK_STEP(test_ops(c));
    DK_STEP(test_binary_50mb(c));
    DK_STEP(test_gib_rss(c));
    DK_STEP(test_owner(c));
    DK_STEP(test_enospc(c));
    DK_STEP(test_concurrent());
    DK_STEP(test_bounds(c));
    DK_STEP(test_watch(c));
    DK_STEP(test_cross_uid());
    DK_STEP(test_isolates(c));
    DK_STEP(test_sbxctl(c));
    DK_STEP(test_stopped(c));
    DK_STEP(test_two_daemons(c));
    destroy(c, FS1);
    cn_close(c);
    kill(sbxd_pid, SIGTERM);
    waitpid(sbxd_pid, NULL, 0);
    return test_report();
}
