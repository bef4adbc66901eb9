/*
 * ptest_docker_archive.c - archives (fs.read/fs.write `format: "tar"`,
 * PROTOCOL.md "Archives") and sbxctl cp on a real Docker engine.
 *
 *   ptest_docker_archive SBXD BUILD_DIR TMPDIR
 *
 * Environment (from tests/providers/docker_archive.sh): DOCKER_HOST unix://.
 * Starts its own sbxd. Trees are compared by a manifest (names, types,
 * link targets, sha256 of every file) made by the same shell commands here
 * and inside the sandbox (busybox), so "byte-exact" means every byte of
 * every file and every name.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "sbx/sbx.h"
#include "testhelp.h"

static const char *sbxd_bin, *bdir, *tmpdir;
static char sock[108], AR1[32], ARU[32];
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

/* The commands that list a tree the same way here and in busybox. */
#define MANIFEST                                                                         \
    "find . | sort; find . -type f -exec sha256sum {} \\; | sort; "                      \
    "find . -type l | sort | while read -r l; do echo \"$l -> $(readlink \"$l\")\"; done"

/* stdout of a shell command in sandbox sb (malloc'd), or NULL. */
static char *sh_in(conn *c, const char *sb, const char *cmd)
{
    json_t *r =
        call(c, "process.exec", json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
    const char *o = json_string_value(json_object_get(res_of(r), "stdout"));
    char *s = o ? strdup(o) : NULL;
    json_decref(r);
    return s;
}

/* stdout of a local shell command (malloc'd, at most 1 MiB), and its status. */
static char *sh_here(int *status, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    size_t cap = 1 << 20, n = 0;
    char *out = calloc(1, cap + 1);
    while (p && n < cap) {
        size_t k = fread(out + n, 1, cap - n, p);
        if (k == 0)
            break;
        n += k;
    }
    int st = p ? pclose(p) : -1;
    if (status)
        *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

/* sbxctl ARGS against our socket: its exit status (output to a log). */
static int ctl(const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int st;
    free(sh_here(&st, "%s/sbxctl -s %s %s >>%s/ctl.log 2>&1; echo $? >%s/ctl.rc", bdir,
                 sock, args, tmpdir, tmpdir));
    char *rc = sh_here(NULL, "cat %s/ctl.rc", tmpdir);
    int r = atoi(rc);
    free(rc);
    return r;
}

/* r's text contains what. */
static int has(json_t *r, const char *what)
{
    char *t = json_dumps(r, 0);
    int ok = t && strstr(t, what);
    free(t);
    return ok;
}

static int manifests_eq(const char *what, char *a, char *b)
{
    int ok = a && b && *a && !strcmp(a, b);
    if (!ok)
        printf("      %s differ:\n--- here\n%s--- there\n%s", what, a ? a : "(null)",
               b ? b : "(null)");
    free(a);
    free(b);
    return ok;
}

/* A local tree with what the tests need: nested dirs, names with spaces and
 * unicode, an empty file and an empty dir, a symlink, 3 MB of random bytes. */
static void make_tree(const char *root)
{
    free(sh_here(NULL,
                 "rm -rf '%s' && mkdir -p '%s/sub dir/ünï' '%s/empty' && "
                 "printf 'hello\\n' >'%s/a.txt' && : >'%s/zero' && "
                 "head -c 3000000 /dev/urandom >'%s/sub dir/ünï/big bin' && "
                 "head -c 777 /dev/urandom >'%s/sub dir/x' && ln -s a.txt '%s/link' && "
                 "ln -s '../missing' '%s/sub dir/dangling' && chmod 0750 '%s/sub dir'",
                 root, root, root, root, root, root, root, root, root, root));
}

/* A ustar header block for name (type t, link l, size n), checksum set. */
static void ustar(uint8_t *h, const char *name, char t, const char *l, size_t n)
{
    memset(h, 0, 512);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011zo", n);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)t;
    if (l)
        snprintf((char *)h + 157, 100, "%s", l);
    memcpy(h + 257,
           "ustar\0"
           "00",
           8);
    memset(h + 148, ' ', 8);
    unsigned s = 0;
    for (int i = 0; i < 512; i++)
        s += h[i];
    snprintf((char *)h + 148, 8, "%06o", s);
}

/* fs.write {format: tar} of the given bytes into dir. The answer. */
static json_t *put_tar(conn *c, const char *sb, const char *dir, const uint8_t *d,
                       size_t n)
{
    char *b64 = malloc(sbx_base64_encoded_len(n) + 1);
    sbx_base64_encode(b64, d, n);
    json_t *r = call(c, "fs.write",
                     json_pack("{s:s, s:s, s:s, s:s}", "sandbox", sb, "path", dir,
                               "format", "tar", "data_b64", b64));
    free(b64);
    return r;
}

static json_t *create(conn *c, const char *id, json_t *opts)
{
    return dk_create(c, id, opts ? json_pack("{s:o}", "options", opts) : NULL, 120000);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_roundtrip(conn *c)
{
    char src[600], back[600];
    snprintf(src, sizeof(src), "%s/tree", tmpdir);
    snprintf(back, sizeof(back), "%s/back", tmpdir);
    make_tree(src);
    test_cond("sbxctl cp DIR ID:/workspace uploads a tree (exit 0)",
              ctl("cp '%s' %s:/workspace", src, AR1) == 0);
    char *here = sh_here(NULL, "cd '%s' || exit 1; " MANIFEST, src);
    char *there = sh_in(c, AR1, "cd /workspace/tree && " MANIFEST);
    test_cond("the tree in the sandbox is byte-exact (names, links, digests)",
              manifests_eq("manifests", strdup(here), there));
    free(sh_here(NULL, "rm -rf '%s'", back));
    test_cond("sbxctl cp ID:/workspace/tree DIR downloads it (exit 0)",
              ctl("cp %s:/workspace/tree '%s'", AR1, back) == 0);
    char *down = sh_here(NULL, "cd '%s' || exit 1; " MANIFEST, back);
    test_cond("the tree downloaded is byte-exact", manifests_eq("manifests", here, down));
    char *modes = sh_in(c, AR1, "stat -c %a '/workspace/tree/sub dir'");
    test_cond("modes travel (a 0750 directory stays 0750)",
              modes && !strncmp(modes, "750", 3));
    free(modes);
    char *lk = sh_here(NULL, "readlink '%s/sub dir/dangling'", back);
    test_cond("a dangling symlink comes back as the link it was",
              !strcmp(lk, "../missing\n"));
    free(lk);
}

static void test_rules(conn *c)
{
    char src[600], out[600];
    snprintf(src, sizeof(src), "%s/tree", tmpdir);
    snprintf(out, sizeof(out), "%s/rules", tmpdir);
    free(sh_here(NULL, "rm -rf '%s' && mkdir -p '%s'", out, out));
    ctl("cp '%s/a.txt' %s:/workspace/renamed.txt", src, AR1);
    ctl("cp '%s/a.txt' %s:/workspace/tree", src, AR1);
    ctl("cp '%s/sub dir' %s:/workspace/newdir", src, AR1);
    ctl("cp '%s/sub dir/.' %s:/workspace/tree", src, AR1);
    char *s = sh_in(c, AR1,
                    "cd /workspace && cat renamed.txt && ls tree/a.txt && "
                    "ls newdir/x && ls tree/x && [ -d 'tree/ünï' ] && echo dir");
    test_cond("file to a new name, file into a dir, dir to a new name, DIR/. contents",
              s && !strcmp(s, "hello\ntree/a.txt\nnewdir/x\ntree/x\ndir\n"));
    if (s && strcmp(s, "hello\ntree/a.txt\nnewdir/x\ntree/x\ndir\n"))
        printf("      got: %s\n", s);
    free(s);
    test_cond("a directory onto a file is refused",
              ctl("cp '%s' %s:/workspace/renamed.txt", src, AR1) != 0);
    test_cond("a file to a missing DIR/ is refused",
              ctl("cp '%s/a.txt' %s:/workspace/nodir/", src, AR1) != 0);
    ctl("cp %s:/workspace/renamed.txt '%s/got.txt'", AR1, out);
    ctl("cp %s:/workspace/newdir/. '%s'", AR1, out);
    char *l = sh_here(NULL, "cd '%s' && cat got.txt && ls x", out);
    test_cond("downloads: a file to a new name, DIR/. into an existing directory",
              !strcmp(l, "hello\nx\n"));
    free(l);
    int st;
    free(sh_here(&st,
                 "%s/sbxctl -s %s cp %s:/workspace/newdir - | tar -t | sort >%s/t.lst",
                 bdir, sock, AR1, tmpdir));
    char *lst = sh_here(NULL, "cat %s/t.lst", tmpdir);
    test_cond("cp ID:DIR - writes a tar whose top entry is the base name",
              st == 0 && strstr(lst, "newdir/\n") && strstr(lst, "newdir/x\n"));
    free(lst);
    free(sh_here(
        &st, "tar -C '%s' -cf - a.txt zero | %s/sbxctl -s %s cp - %s:/workspace/newdir",
        src, bdir, sock, AR1));
    char *z = sh_in(c, AR1, "cd /workspace/newdir && cat a.txt && wc -c <zero");
    test_cond("cp - ID:DIR extracts a tar from stdin",
              st == 0 && z && !strcmp(z, "hello\n0\n"));
    free(z);
}

static void test_follow(conn *c)
{
    char src[600];
    snprintf(src, sizeof(src), "%s/ltree", tmpdir);
    free(sh_here(NULL,
                 "rm -rf '%s' && mkdir -p '%s/real' && echo in >'%s/real/f' && "
                 "ln -s real '%s/ln'",
                 src, src, src, src));
    ctl("cp '%s/ln' %s:/workspace/nofollow", src, AR1);
    ctl("cp -L '%s/ln' %s:/workspace/followed", src, AR1);
    char *s = sh_in(c, AR1,
                    "cd /workspace && readlink nofollow; cat followed/f; "
                    "[ -L followed ] || echo notalink");
    test_cond("SRC a symlink: copied as a link; with -L its target is",
              s && !strcmp(s, "real\nin\nnotalink\n"));
    free(s);
}

static void test_owner(conn *c)
{
    json_t *r = create(c, ARU, json_pack("{s:s}", "user", "1234:2345"));
    if (!res_of(r)) {
        test_cond("a sandbox with user 1234:2345 starts", 0);
        json_decref(r);
        return;
    }
    json_decref(r);
    char src[600];
    snprintf(src, sizeof(src), "%s/tree", tmpdir);
    test_cond("cp into a sandbox with a command user works",
              ctl("cp '%s' %s:/tmp", src, ARU) == 0);
    char *s = sh_in(c, ARU,
                    "cd /tmp/tree && stat -c %u:%g . a.txt 'sub dir/ünï/big bin' link | "
                    "sort -u");
    test_cond("what an archive makes belongs to the command user (1234:2345)",
              s && !strcmp(s, "1234:2345\n"));
    free(s);
    r = put_tar(c, ARU, "/", (const uint8_t *)"", 0);
    test_cond("extracting where the command user may not write is EACCES",
              err_code(r) == -32010 || res_of(r));
    json_decref(r);
    dk_destroy(c, ARU, 120000);
}

static void test_escapes(conn *c)
{
    static const struct {
        const char *what, *name;
        char type;
        const char *link, *probe;
    } cases[] = {
        {"a ../ name", "../../tmp/esc1", '0', NULL, "/tmp/esc1"},
        {"an absolute name", "/tmp/esc2", '0', NULL, "/tmp/esc2"},
        {"a hard link out of the target", "h", '1', "../../etc/passwd", "/workspace/e/h"},
    };
    json_decref(call(c, "fs.mkdir",
                     json_pack("{s:s, s:s, s:b}", "sandbox", AR1, "path", "/workspace/e",
                               "parents", 1)));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t t[512 * 4] = {0};
        ustar(t, cases[i].name, cases[i].type, cases[i].link, cases[i].type == '0');
        t[512] = 'x';
        json_t *r = put_tar(c, AR1, "/workspace/e", t, sizeof(t));
        char d[120], probe[300];
        snprintf(d, sizeof(d), "%s is refused (-32010 EPERM), nothing made",
                 cases[i].what);
        snprintf(probe, sizeof(probe), "ls %s 2>/dev/null; echo", cases[i].probe);
        char *s = sh_in(c, AR1, probe);
        test_cond(d, err_code(r) == -32010 && !strcmp(errno_of(r), "EPERM") && s &&
                         !strcmp(s, "\n"));
        free(s);
        json_decref(r);
    }
    /* a symlink out, then a file through it */
    uint8_t t[512 * 5] = {0};
    ustar(t, "out", '2', "/tmp", 0);
    ustar(t + 512, "out/esc3", '0', NULL, 1);
    t[1024] = 'x';
    json_t *r = put_tar(c, AR1, "/workspace/e", t, sizeof(t));
    char *s = sh_in(c, AR1, "ls /tmp/esc3 2>/dev/null; readlink /workspace/e/out");
    test_cond("a file through a symlink the archive made is refused (ENOTDIR)",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOTDIR") && s &&
                  !strcmp(s, "/tmp\n"));
    free(s);
    json_decref(r);
}

/* Sets a header's mtime field and its checksum again. */
static void set_mtime(uint8_t *h, long mt)
{
    snprintf((char *)h + 136, 12, "%011lo", mt);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

/* Directories keep the archive's mtimes, as docker cp's do, though entries
 * are made in them afterwards; and a directory of mode 0500 still gets its
 * mode after what is inside it. */
static void test_dir_mtimes(conn *c)
{
    uint8_t t[512 * 7] = {0};
    ustar(t, "mt", '5', NULL, 0);
    snprintf((char *)t + 100, 8, "%07o", 0755);
    set_mtime(t, 1000000000);
    ustar(t + 512, "mt/sub", '5', NULL, 0);
    snprintf((char *)t + 512 + 100, 8, "%07o", 0755);
    set_mtime(t + 512, 1100000000);
    ustar(t + 1024, "mt/sub/f", '0', NULL, 1);
    set_mtime(t + 1024, 1200000000);
    t[1536] = 'x';
    ustar(t + 2048, "mt/ro", '5', NULL, 0);
    snprintf((char *)t + 2048 + 100, 8, "%07o", 0500);
    set_mtime(t + 2048, 1300000000);
    json_t *r = put_tar(c, AR1, "/workspace", t, sizeof(t));
    if (!res_of(r)) {
        char *d = json_dumps(r, JSON_COMPACT);
        printf("      the write: %s\n", d ? d : "(none)");
        free(d);
    }
    json_decref(r);
    /* 2001-09-09T01:46:40Z and on: RFC 3339, as fs.stat gives it */
    static const struct {
        const char *path, *mtime;
        int mode;
    } want[] = {{"/workspace/mt", "2001-09-09T01:46:40", 0755},
                {"/workspace/mt/sub", "2004-11-09T11:33:20", 0755},
                {"/workspace/mt/sub/f", "2008-01-10T21:20:00", 0644},
                {"/workspace/mt/ro", "2011-03-13T07:06:40", 0500}};
    int ok = 1;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        r = call(c, "fs.stat",
                 json_pack("{s:s, s:s}", "sandbox", AR1, "path", want[i].path));
        const char *mt = json_string_value(json_object_get(res_of(r), "mtime"));
        int mode = (int)json_integer_value(json_object_get(res_of(r), "mode"));
        if (!mt || strncmp(mt, want[i].mtime, strlen(want[i].mtime)) ||
            mode != want[i].mode) {
            printf("      %s: mtime %s mode %o\n", want[i].path, mt ? mt : "-", mode);
            ok = 0;
        }
        json_decref(r);
    }
    test_cond(
        "tar write: directories keep their mtimes (and files theirs), a 0500 one its mode",
        ok);
}

static void test_garbage(conn *c)
{
    uint8_t junk[2048];
    for (size_t i = 0; i < sizeof(junk); i++)
        junk[i] = (uint8_t)(i * 7 + 3);
    json_t *r = put_tar(c, AR1, "/workspace", junk, sizeof(junk));
    test_cond("garbage as a tar is -32010 EINVAL saying it is not a tar archive",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EINVAL") &&
                  has(r, "not a tar archive"));
    json_decref(r);
    uint8_t t[1024] = {0};
    ustar(t, "cut", '0', NULL, 4000);
    r = put_tar(c, AR1, "/workspace", t, 600);
    test_cond("an archive cut inside an entry is -32010 EINVAL",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EINVAL"));
    json_decref(r);
    r = call(
        c, "fs.read",
        json_pack("{s:s, s:s, s:s}", "sandbox", AR1, "path", "/nope", "format", "tar"));
    test_cond("an archive of a missing path is -32010 ENOENT",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT"));
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:s}", "sandbox", AR1, "path", "/", "format", "zip"));
    test_cond("an unknown format is -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:i}", "sandbox", AR1, "handle", 99999));
    test_cond("an unknown archive handle is -32602", err_code(r) == -32602);
    json_decref(r);
    test_cond("and the daemon serves on",
              res_of(r = call(c, "daemon.ping", json_object())) != NULL);
    json_decref(r);
}

/* An archive read by its handle, chunk by chunk (length 1000): same bytes
 * as one raw read; past fs_transfers_per_uid open ones: -32005. */
static void test_handles_bounds(conn *c)
{
    json_t *r = call(c, "fs.read",
                     json_pack("{s:s, s:s, s:s, s:i}", "sandbox", AR1, "path",
                               "/workspace/tree", "format", "tar", "length", 1000));
    json_int_t h = json_integer_value(json_object_get(res_of(r), "handle"));
    test_cond("a tar read answers a chunk of at most length and a handle",
              h > 0 && json_integer_value(json_object_get(res_of(r), "length")) == 1000);
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:I, s:i}", "sandbox", AR1, "handle", h, "length", 1000));
    test_cond("the next chunk comes by the handle",
              json_integer_value(json_object_get(res_of(r), "length")) == 1000);
    json_decref(r);
    int got = 0, code = 0;
    for (int i = 0; i < 6 && !code; i++) {
        r = call(c, "fs.read",
                 json_pack("{s:s, s:s, s:s, s:i}", "sandbox", AR1, "path", "/workspace",
                           "format", "tar", "length", 512));
        code = err_code(r);
        got += code == 0;
        if (code)
            test_cond("past limits.fs_transfers_per_uid: -32005 naming it",
                      code == -32005 && has(r, "fs_transfers_per_uid"));
        json_decref(r);
    }
    test_cond("open archive reads hold a transfer slot each (3 more fit)", got == 3);
    r = call(c, "fs.read",
             json_pack("{s:s, s:I, s:b}", "sandbox", AR1, "handle", h, "abort", 1));
    test_cond("fs.read {handle, abort}: {aborted: true}",
              json_is_true(json_object_get(res_of(r), "aborted")));
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:I}", "sandbox", AR1, "handle", h));
    test_cond("the aborted handle is gone: -32602", err_code(r) == -32602);
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:s, s:i}", "sandbox", AR1, "path", "/workspace",
                       "format", "tar", "length", 512));
    test_cond("an aborted archive gives its transfer slot back", res_of(r) != NULL);
    json_decref(r);
}

static void test_cross_uid(conn *c)
{
    (void)c;
    if (getuid() != 0) {
        test_skip("another uid's archives are -32000", "needs root to switch uid");
        return;
    }
    int rd = pt_code_as_uid(
        4321, sock, "fs.read",
        json_pack("{s:s, s:s, s:s}", "sandbox", AR1, "path", "/", "format", "tar"));
    int wr = pt_code_as_uid(4321, sock, "fs.write",
                            json_pack("{s:s, s:s, s:s, s:s}", "sandbox", AR1, "path", "/",
                                      "format", "tar", "data", ""));
    test_cond("another uid's sandbox is -32000 for tar reads and writes",
              rd == -32000 && wr == -32000);
}

static void test_meta_bound(conn *c)
{
    size_t n = 512 + (70u << 10) + 1024;
    uint8_t *t = calloc(1, n + 512);
    ustar(t, "././@LongLink", 'L', NULL, 70u << 10);
    memset(t + 512, 'a', 70u << 10);
    json_t *r = put_tar(c, AR1, "/workspace", t, n);
    test_cond("a long-name record over 64 KiB is -32010 EFBIG",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EFBIG"));
    json_decref(r);
    free(t);
}

static void test_stopped(conn *c)
{
    char *before = sh_in(c, AR1, "cd /workspace/tree || exit 1; " MANIFEST);
    json_t *r = call(c, "sandbox.stop", json_pack("{s:s}", "id", AR1));
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:s}", "sandbox", AR1, "path", "/workspace/tree/a.txt",
                       "encoding", "utf8"));
    test_cond("fs.read of a stopped sandbox comes from the engine's archive",
              !strcmp(res_str(r, "data") ? res_str(r, "data") : "", "hello\n"));
    json_decref(r);
    r = call(c, "fs.stat",
             json_pack("{s:s, s:s}", "sandbox", AR1, "path", "/workspace/tree/sub dir"));
    test_cond("fs.stat of a stopped sandbox (type dir, mode 0750)",
              !strcmp(res_str(r, "type") ? res_str(r, "type") : "", "dir") &&
                  res_int(r, "mode") == 0750);
    json_decref(r);
    char back[600];
    snprintf(back, sizeof(back), "%s/stopped", tmpdir);
    free(sh_here(NULL, "rm -rf '%s'", back));
    test_cond("sbxctl cp out of a stopped sandbox",
              ctl("cp %s:/workspace/tree '%s'", AR1, back) == 0);
    test_cond("and the tree is byte-exact (as the sandbox had it)",
              manifests_eq("manifests", before,
                           sh_here(NULL, "cd '%s' || exit 1; " MANIFEST, back)));
    r = call(c, "fs.list",
             json_pack("{s:s, s:s, s:i}", "sandbox", AR1, "path", "/workspace/tree",
                       "depth", 2));
    json_t *e0 = json_array_get(json_object_get(res_of(r), "entries"), 0);
    test_cond("fs.list of a stopped sandbox: sorted, depth 2, absolute paths",
              json_array_size(json_object_get(res_of(r), "entries")) >= 8 &&
                  !strcmp(json_string_value(json_object_get(e0, "path")) ?: "",
                          "/workspace/tree/a.txt"));
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:i, s:i, s:s}", "sandbox", AR1, "path",
                       "/workspace/tree/a.txt", "offset", 1, "length", 3, "encoding",
                       "utf8"));
    test_cond("a window of a file (offset 1, length 3) of a stopped sandbox",
              !strcmp(res_str(r, "data") ? res_str(r, "data") : "", "ell") &&
                  json_is_false(json_object_get(res_of(r), "eof")));
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s}", "sandbox", AR1, "path", "/workspace/nope"));
    test_cond("a missing file of a stopped sandbox is -32010 ENOENT",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT"));
    json_decref(r);
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s}", "sandbox", AR1, "path", "/workspace/w", "data",
                       "x"));
    test_cond("fs.write to a stopped sandbox says why not (-32001)",
              err_code(r) == -32001);
    json_decref(r);
    json_decref(call(c, "sandbox.start", json_pack("{s:s}", "id", AR1)));
}

/* A 256 MB tree as one tar stream, down over the raw path, while sbxd's RSS is
 * sampled: it stays within a few chunks (running: the agent makes it; stopped:
 * the engine's transfer is paused between calls). */
static long peak_rss_during(const char *cmd, long base, int *lines)
{
    FILE *p = popen(cmd, "r");
    long peak = base;
    char buf[256];
    *lines = 0;
    while (p && fgets(buf, sizeof(buf), p)) {
        (*lines)++;
        long now = pt_rss_kb(sbxd_pid);
        if (now > peak)
            peak = now;
    }
    if (p)
        pclose(p);
    return peak;
}

static void test_rss(conn *c, int stopped)
{
    const char *what = stopped ? "stopped" : "running";
    char d[120];
    snprintf(d, sizeof(d), "a 256 MB archive (%s sandbox) keeps sbxd's RSS flat", what);
    if (getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND")) {
        test_skip(d, "the allocator's own overhead under sanitizers");
        return;
    }
    if (!stopped)
        free(sh_in(c, AR1,
                   "mkdir -p /workspace/fat && for i in 1 2 3 4; do dd if=/dev/urandom "
                   "of=/workspace/fat/f$i bs=1048576 count=64 2>/dev/null; done; echo"));
    else
        json_decref(call(c, "sandbox.stop", json_pack("{s:s}", "id", AR1)));
    long base = pt_rss_kb(sbxd_pid);
    char cmd[1200];
    /* a line per 8 MiB that passed: sample as the stream goes */
    snprintf(cmd, sizeof(cmd),
             "%s/sbxctl -s %s cp %s:/workspace/fat - | "
             "while dd bs=1048576 count=8 of=/dev/null iflag=fullblock status=none && "
             "[ -n \"$(dd bs=1 count=1 2>/dev/null | od -An -c)\" ]; do echo; done",
             bdir, sock, AR1);
    int mib8 = 0;
    long peak = peak_rss_during(cmd, base, &mib8);
    printf("      RSS %ld -> %ld KiB over %d x 8 MiB\n", base, peak, mib8);
    test_cond(d, base > 0 && peak - base < 48 * 1024 && mib8 >= 31);
    if (stopped)
        json_decref(call(c, "sandbox.start", json_pack("{s:s}", "id", AR1)));
}

/* ---- main ----------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    const char *host;
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &host);
    if (st)
        return st;
    snprintf(AR1, sizeof(AR1), "ar1-%d", (int)getpid());
    snprintf(ARU, sizeof(ARU), "aru-%d", (int)getpid());
    char cfg[600], log[600];
    snprintf(cfg, sizeof(cfg), "%s/ar.yaml", tmpdir);
    snprintf(log, sizeof(log), "%s/sbxd-archive.log", tmpdir);
    snprintf(sock, sizeof(sock), "%.90s/ar.sock", tmpdir);
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "limits:\n  fs_transfers_per_uid: 4\n"
            "providers:\n"
            "  docker:\n"
            "    host: %s\n    agent_path: %s/sbx-init\n    image: sbx-test/busybox\n"
            "    network: none\n    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n",
            host, bdir);
    fclose(f);
    sbxd_pid = dk_sbxd_start(cfg, sock, log, NULL);
    conn *c = dk_connect(sock, 5000);
    dk_docker_up(c, 10000);
    json_t *r = c ? create(c, AR1, NULL) : NULL;
    if (!res_of(r)) {
        printf("no docker sandbox (log %s)\n0 passed, 1 failed\n", log);
        if (sbxd_pid > 0)
            kill(sbxd_pid, SIGTERM);
        return 1;
    }
    json_decref(r);
    DK_STEP(test_roundtrip(c));
    DK_STEP(test_rules(c));
    DK_STEP(test_follow(c));
    DK_STEP(test_owner(c));
    DK_STEP(test_escapes(c));
    DK_STEP(test_garbage(c));
    DK_STEP(test_dir_mtimes(c));
    DK_STEP(test_meta_bound(c));
    DK_STEP(test_cross_uid(c));
    DK_STEP(test_handles_bounds(c));
    cn_close(c);
    c = dk_connect(sock, 5000); /* the open handles go with the session */
    DK_STEP(test_stopped(c));
    DK_STEP(test_rss(c, 0));
    DK_STEP(test_rss(c, 1));
    dk_destroy(c, AR1, 120000);
    cn_close(c);
    kill(sbxd_pid, SIGTERM);
    waitpid(sbxd_pid, NULL, 0);
    return test_report();
}
