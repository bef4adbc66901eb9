/*
 * ptest_modal_fs.c - fs.* (PROTOCOL.md "Files") on the Modal provider against
 * the local fake (tests/modal/fake), whose filesystem tool fs-tools.js plays
 * /__modal/.bin/modal-sandbox-fs-tools.
 *
 *   ptest_modal_fs SOCKET CONTROL_PORT
 *
 * Every claim is checked through sbxd's socket and, where it is about the
 * sandbox's files, on the fake's side too: the fake keeps a sandbox's files
 * under its root on this host (GET /sandboxes), so digests are taken there;
 * GET /execs says which exec path each tool run took.
 */
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "itest.h"
#include "sbx/sbx.h"
#include "testhelp.h"

#define LONG_MS 120000 /* before md_kit.h, which keeps it */
#include "md_kit.h"
#define CHUNK (1u << 20)
#define TOOL "/__modal/.bin/modal-sandbox-fs-tools"

/* ---- the fake's control port (HTTP/1.1, Connection: close) ---------------------- */

/* ---- sbxd helpers ------------------------------------------------------------ */

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, LONG_MS, m, p);
}

static json_t *err_data(json_t *r)
{
    return json_object_get(json_object_get(r, "error"), "data");
}

static const char *errno_of(json_t *r)
{
    const char *s = json_string_value(json_object_get(err_data(r), "errno"));
    return s ? s : "";
}

static json_t *fs(conn *c, const char *m, const char *path, json_t *extra)
{
    json_t *p = json_pack("{s:s, s:s}", "sandbox", "mfs", "path", path);
    if (extra) {
        json_object_update(p, extra);
        json_decref(extra);
    }
    json_t *r = call(c, m, p);
    if (!res_of(r))
        printf(
            "      %s %s: %s\n", m, path,
            json_string_value(json_object_get(json_object_get(r, "error"), "message")));
    return r;
}

/* Writes n bytes of d to path in CHUNK pieces. Returns the last answer. */
static json_t *put(conn *c, const char *path, const uint8_t *d, size_t n)
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
            json_pack("{s:s, s:s, s:b}", "sandbox", "mfs", "data_b64", b64, "more", more);
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

/* Reads path whole in CHUNK windows into *out (malloc'd). -1 on an error. */
static int get(conn *c, const char *path, uint8_t **out, size_t *n)
{
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        json_t *r =
            call(c, "fs.read",
                 json_pack("{s:s, s:s, s:I, s:I}", "sandbox", "mfs", "path", path,
                           "offset", (json_int_t)len, "length", (json_int_t)CHUNK));
        char *d = NULL;
        size_t k = 0;
        json_t *res = res_of(r);
        int ok = res && (sbx_json_get_bytes(&d, &k, res, "data") == SBX_OK ||
                         sbx_json_get_bytes(&d, &k, res, "data_b64") == SBX_OK);
        if (!ok) {
            json_decref(r);
            free(buf);
            return -1;
        }
        while (len + k > cap)
            buf = realloc(buf, cap *= 2);
        memcpy(buf + len, d, k);
        len += k;
        free(d);
        int eof = json_is_true(json_object_get(res, "eof"));
        json_decref(r);
        if (eof || k == 0)
            break;
    }
    *out = buf;
    *n = len;
    return 0;
}

static void sha_mem(const uint8_t *d, size_t n, const char *tmp, char out[65])
{
    FILE *f = fopen(tmp, "wb");
    if (f) {
        fwrite(d, 1, n, f);
        fclose(f);
    }
    pt_sha256_file(tmp, out);
    unlink(tmp);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_text_binary(conn *c, const char *root)
{
    json_t *r = fs(c, "fs.write", "/work/a dir/hello.txt",
                   json_pack("{s:s, s:b}", "data", "héllo\n", "mkdir_parents", 1));
    test_cond("fs.write text (parents made): size 7", res_int(r, "size") == 7);
    json_decref(r);
    r = fs(c, "fs.read", "/work/a dir/hello.txt", NULL);
    test_cond("fs.read text: the same string, eof, size",
              !strcmp(res_str(r, "data"), "héllo\n") &&
                  json_is_true(json_object_get(res_of(r), "eof")) &&
                  res_int(r, "size") == 7);
    json_decref(r);
    r = fs(c, "fs.read", "/work/a dir/hello.txt",
           json_pack("{s:i, s:i}", "offset", 3, "length", 3));
    test_cond("fs.read offset 3 length 3: \"llo\", not eof, size 7",
              !strcmp(res_str(r, "data"), "llo") &&
                  json_is_false(json_object_get(res_of(r), "eof")) &&
                  res_int(r, "size") == 7);
    json_decref(r);

    /* 3 MiB + 77 of random bytes, every byte value: in 4 chunks, out in 4 windows. */
    size_t n = 3 * CHUNK + 77;
    uint8_t *d = malloc(n);
    srand(17);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(i < 256 ? (int)i : rand());
    r = put(c, "/work/bin.dat", d, n);
    test_cond("fs.write binary in 4 chunks: size says every byte",
              res_int(r, "size") == (json_int_t)n);
    json_decref(r);
    char want[65], host[65], tmp[300], hp[1200];
    snprintf(tmp, sizeof(tmp), "/tmp/ptest_modal_fs.%d", (int)getpid());
    sha_mem(d, n, tmp, want);
    snprintf(hp, sizeof(hp), "%s/work/bin.dat", root ? root : "/nonexistent");
    pt_sha256_file(hp, host);
    test_cond("... the sandbox's file has the same sha256",
              want[0] && !strcmp(want, host));
    uint8_t *back = NULL;
    size_t bn = 0;
    int g = get(c, "/work/bin.dat", &back, &bn);
    test_cond("fs.read binary back in windows: byte-exact",
              g == 0 && bn == n && !memcmp(back, d, n));
    free(back);
    /* A write becomes visible whole: mid-write, the old file stays. */
    char *b64 = malloc(sbx_base64_encoded_len(1000) + 1);
    sbx_base64_encode(b64, d, 1000);
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s, s:b}", "sandbox", "mfs", "path", "/work/bin.dat",
                       "data_b64", b64, "more", 1));
    json_int_t h = json_integer_value(json_object_get(res_of(r), "handle"));
    json_decref(r);
    pt_sha256_file(hp, host);
    test_cond("an open write leaves the old file in place", h > 0 && !strcmp(want, host));
    r = call(c, "fs.write",
             json_pack("{s:s, s:I, s:b}", "sandbox", "mfs", "handle", h, "abort", 1));
    json_decref(r);
    pt_sha256_file(hp, host);
    test_cond("... and an aborted one too", !strcmp(want, host));
    free(b64);
    free(d);
}

/* fs.mkdir with and without parents, fs.write under what is missing, fs.remove. */
static void meta_mkdir_remove(conn *c)
{
    json_t *r;
    r = fs(c, "fs.mkdir", "/work/m/n/o", json_pack("{s:b}", "parents", 1));
    json_t *s = fs(c, "fs.stat", "/work/m/n/o", NULL);
    test_cond("fs.mkdir parents: the tree is there, created",
              json_is_true(json_object_get(res_of(r), "created")) &&
                  !strcmp(res_str(s, "type"), "dir"));
    json_decref(r);
    json_decref(s);
    r = fs(c, "fs.mkdir", "/work/m/n", json_pack("{s:b}", "parents", 1));
    test_cond("fs.mkdir parents of an existing directory: created false",
              json_is_false(json_object_get(res_of(r), "created")));
    json_decref(r);
    r = call(c, "fs.mkdir",
             json_pack("{s:s, s:s, s:b}", "sandbox", "mfs", "path", "/work/bin.dat",
                       "parents", 1));
    test_cond("fs.mkdir parents over a file: EEXIST",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EEXIST"));
    json_decref(r);
    r = call(c, "fs.mkdir",
             json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/x/y"));
    test_cond("fs.mkdir without parents under a missing one: ENOENT",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT"));
    json_decref(r);
    r = call(
        c, "fs.write",
        json_pack("{s:s, s:s, s:s}", "sandbox", "mfs", "path", "/work/x/f", "data", "x"));
    s = call(c, "fs.stat", json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/x"));
    test_cond(
        "fs.write without mkdir_parents under a missing directory: ENOENT, nothing made",
        err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT") &&
            !strcmp(errno_of(s), "ENOENT"));
    json_decref(r);
    json_decref(s);
    r = call(c, "fs.write",
             json_pack("{s:s, s:s, s:s}", "sandbox", "mfs", "path", "/work/bin.dat/f",
                       "data", "x"));
    test_cond("fs.write under a file: ENOTDIR",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOTDIR"));
    json_decref(r);
    r = call(c, "fs.mkdir",
             json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/m/n/o"));
    test_cond("fs.mkdir of an existing one without parents: -32010 EEXIST",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EEXIST"));
    json_decref(r);
    json_decref(fs(c, "fs.write", "/work/m/n/o/f", json_pack("{s:s}", "data", "x")));
    r = call(c, "fs.remove",
             json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/m"));
    test_cond("fs.remove of a full directory, not recursive: ENOTEMPTY",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOTEMPTY"));
    json_decref(r);
    r = fs(c, "fs.remove", "/work/m", json_pack("{s:b}", "recursive", 1));
    s = call(c, "fs.stat", json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/m"));
    test_cond("fs.remove recursive: gone (stat is ENOENT)",
              res_of(r) && err_code(s) == -32010 && !strcmp(errno_of(s), "ENOENT"));
    json_decref(r);
    json_decref(s);
}

static void test_meta(conn *c)
{
    json_t *r = fs(c, "fs.list", "/work", NULL);
    json_t *ents = json_object_get(res_of(r), "entries");
    int saw_dir = 0, saw_bin = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ents, i, e) {
        const char *nm = json_string_value(json_object_get(e, "name"));
        const char *ty = json_string_value(json_object_get(e, "type"));
        if (nm && !strcmp(nm, "a dir") && ty && !strcmp(ty, "dir"))
            saw_dir = 1;
        if (nm && !strcmp(nm, "bin.dat") && ty && !strcmp(ty, "file") &&
            json_integer_value(json_object_get(e, "size")) ==
                (json_int_t)(3 * CHUNK + 77) &&
            !strcmp(json_string_value(json_object_get(e, "path")), "/work/bin.dat") &&
            json_is_string(json_object_get(e, "mtime")))
            saw_bin = 1;
    }
    test_cond("fs.list: the directory and the file with type, size, path, mtime",
              saw_dir && saw_bin);
    json_decref(r);
    r = fs(c, "fs.list", "/work", json_pack("{s:i}", "limit", 1));
    test_cond("fs.list limit 1: one entry and a cursor",
              json_array_size(json_object_get(res_of(r), "entries")) == 1 &&
                  json_is_string(json_object_get(res_of(r), "cursor")));
    json_decref(r);
    r = fs(c, "fs.stat", "/work/a dir/hello.txt", NULL);
    test_cond("fs.stat: file, size 7, name, mode, mtime",
              !strcmp(res_str(r, "type"), "file") && res_int(r, "size") == 7 &&
                  !strcmp(res_str(r, "name"), "hello.txt") &&
                  json_is_integer(json_object_get(res_of(r), "mode")) &&
                  json_is_string(json_object_get(res_of(r), "mtime")));
    json_decref(r);

    meta_mkdir_remove(c);
}

static void test_links(conn *c)
{
    json_t *x =
        call(c, "process.exec",
             json_pack("{s:s, s:s, s:s}", "sandbox", "mfs", "cwd", "/work/a dir",
                       "command", "ln -s hello.txt link && ln -s nowhere dangling"));
    json_decref(x);
    json_t *r = fs(c, "fs.stat", "/work/a dir/link", NULL);
    test_cond("fs.stat follows a symlink by default: the file, size 7",
              !strcmp(res_str(r, "type"), "file") && res_int(r, "size") == 7);
    json_decref(r);
    r = fs(c, "fs.stat", "/work/a dir/link", json_pack("{s:b}", "follow", 0));
    test_cond("fs.stat follow false: the link itself with its target",
              !strcmp(res_str(r, "type"), "symlink") &&
                  !strcmp(res_str(r, "target"), "hello.txt"));
    json_decref(r);
    r = call(c, "fs.stat",
             json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/a dir/dangling"));
    test_cond("fs.stat of a dangling link: ENOENT",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT"));
    json_decref(r);
    r = fs(c, "fs.read", "/work/a dir/link", NULL);
    test_cond("fs.read through a symlink", !strcmp(res_str(r, "data"), "héllo\n"));
    json_decref(r);
}

static void test_errors(conn *c)
{
    json_t *r = call(c, "fs.read",
                     json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/nope"));
    test_cond("fs.read of a missing file: -32010 ENOENT with its path",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOENT") &&
                  !strcmp(json_string_value(json_object_get(err_data(r), "path")),
                          "/work/nope"));
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work"));
    test_cond("fs.read of a directory: EISDIR",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EISDIR"));
    json_decref(r);
    r = call(
        c, "fs.write",
        json_pack("{s:s, s:s, s:s}", "sandbox", "mfs", "path", "/work", "data", "x"));
    test_cond("fs.write onto a directory: EISDIR",
              err_code(r) == -32010 && !strcmp(errno_of(r), "EISDIR"));
    json_decref(r);
    r = call(c, "fs.list",
             json_pack("{s:s, s:s}", "sandbox", "mfs", "path", "/work/bin.dat"));
    test_cond("fs.list of a file: ENOTDIR",
              err_code(r) == -32010 && !strcmp(errno_of(r), "ENOTDIR"));
    json_decref(r);
    /* fs.rename and fs.watch are served now: tests/providers/ptest_modal_misc.c. */
    r = call(c, "process.exec",
             json_pack("{s:s, s:s}", "sandbox", "mfs", "command", "echo still"));
    test_cond("the sandbox still runs commands after the errors",
              !strcmp(res_str(r, "stdout"), "still\n"));
    json_decref(r);
}

static void test_cross_uid(void)
{
    if (getuid() != 0) {
        test_skip("another uid's Modal sandbox is -32000 for fs.*",
                  "needs root to switch uid");
        return;
    }
    const char *methods[] = {"fs.read",  "fs.write",  "fs.list",   "fs.stat",
                             "fs.mkdir", "fs.remove", "fs.rename", "fs.watch"};
    int all = 1;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        int code =
            pt_code_as_uid(4321, SOCK, methods[i],
                           json_pack("{s:s, s:s, s:s, s:s}", "sandbox", "mfs", "path",
                                     "/work/bin.dat", "data", "x", "to", "/y"));
        if (code != -32000) {
            printf("      %s as uid 4321: %d\n", methods[i], code);
            all = 0;
        }
    }
    test_cond("every fs.* on another uid's Modal sandbox is -32000", all);
}

static void test_transport(void)
{
    json_t *all = pt_http_json(CPORT, "GET", "/execs", NULL);
    int tool = 0, router = 0, cmds = 0;
    size_t i;
    json_t *e;
    json_array_foreach(all, i, e) {
        json_t *cmd = json_object_get(e, "command");
        const char *a0 = json_string_value(json_array_get(cmd, 0));
        if (!a0 || strcmp(a0, TOOL))
            continue;
        tool++;
        const char *via = json_string_value(json_object_get(e, "via"));
        if (via && !strcmp(via, "router"))
            router++;
        json_t *j = json_loads(json_string_value(json_array_get(cmd, 1)), 0, NULL);
        if (json_object_size(j) == 1 && json_array_size(cmd) == 2)
            cmds++;
        json_decref(j);
    }
    json_decref(all);
    printf("      the fake ran %d tool execs, %d on the router\n", tool, router);
    test_cond("the fake's log: fs ops ran " TOOL " with one JSON command, via the router",
              tool >= 20 && router == tool && cmds == tool);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ptest_modal_fs SOCKET CONTROL_PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    SOCK = argv[1];
    CPORT = atoi(argv[2]);
    conn *c = cn_open(SOCK);
    test_cond("sbxd answers", c != NULL);
    if (!c)
        return test_report();
    json_t *r = call(c, "sandbox.create",
                     json_pack("{s:s, s:s}", "id", "mfs", "provider", "modal"));
    test_cond("a Modal sandbox", res_of(r) != NULL);
    json_decref(r);
    char *root = fake_root(c, "mfs");
    test_cond("the fake says where its files are", root != NULL);
    test_text_binary(c, root);
    test_meta(c);
    test_links(c);
    test_errors(c);
    test_cross_uid();
    test_transport();
    free(root);
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mfs")));
    cn_close(c);
    return test_report();
}
