/*
 * ptest_modal_tar.c - tar archives (fs.read/fs.write with `format: "tar"`,
 * PROTOCOL.md "Archives") on the Modal provider against the local fake
 * (tests/modal/fake), whose sandboxes are folders on this host: what went in
 * is checked there, by digest.
 *
 *   ptest_modal_tar SOCKET CONTROL_PORT SBXCTL SBXD_PID
 *
 * The fake runs with --stdio-window (a router with backpressure), so a slow
 * reader's tar waits. PTEST_TAR_BIG_MB (default 1024) sizes the transfers
 * whose daemon RSS must stay flat.
 */
#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "itest.h"
#include "pt_kit.h"
#include "sbx/sbx.h"
#include "testhelp.h"

#define LONG_MS 300000
#define SB "mtar"

static const char *SOCK, *SBXCTL;
static int CPORT, DPID;
static char TMP[256], ROOT[1024];

/* ---- helpers ------------------------------------------------------------------- */

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, LONG_MS, m, p);
}

/* fmt's text with ap (malloc'd), or NULL. */
static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    return vasprintf(&s, fmt, ap) < 0 ? NULL : s;
}

/* Runs a shell command line (printf-style) here; its exit status. */
__attribute__((format(printf, 1, 2))) static int run(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    int st = cmd ? system(cmd) : -1;
    free(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The first line a shell command prints (printf-style) into out. */
__attribute__((format(printf, 3, 4))) static void line_of(char *out, size_t cap,
                                                          const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    out[0] = '\0';
    FILE *f = cmd ? popen(cmd, "r") : NULL;
    free(cmd);
    if (!f)
        return;
    if (fgets(out, (int)cap, f))
        out[strcspn(out, "\n")] = '\0';
    pclose(f);
}

/* One digest of a tree: names, types, link targets, modes and contents. */
static void tree_sum(const char *dir, char out[80])
{
    line_of(out, 80,
            "cd '%s' && { find . -printf '%%p %%y %%l %%m\\n' | LC_ALL=C sort; "
            "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum; } | "
            "sha256sum | cut -c1-64",
            dir);
}

static long rss_kb(void)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", DPID);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* The file's bytes in base64 (malloc'd), or NULL. */
static char *file_b64(const char *path)
{
    FILE *f = fopen(path, "rb");
    static uint8_t d[1 << 16];
    size_t n = f ? fread(d, 1, sizeof(d), f) : 0;
    if (f)
        fclose(f);
    char *b = n ? malloc(sbx_base64_encoded_len(n) + 1) : NULL;
    if (b)
        sbx_base64_encode(b, d, n);
    return b;
}

/* An archive made by GNU tar of `ok.txt` and then `bad` (kept as given: -P),
 * from TMP/mk, in base64. */
static char *two_entries_b64(const char *bad)
{
    run("rm -rf %s/mk && mkdir -p %s/mk && echo x > %s/mk/ok.txt && echo y > %s/evil",
        TMP, TMP, TMP, TMP);
    run("tar -c -P -f %s/two.tar -C %s/mk ok.txt '%s' 2>/dev/null", TMP, TMP, bad);
    char p[300];
    snprintf(p, sizeof(p), "%s/two.tar", TMP);
    return file_b64(p);
}

/* ---- tests --------------------------------------------------------------------- */

static void test_round_trip(void)
{
    run("rm -rf %s/src %s/out && mkdir -p '%s/src/a dir/ünï cödé' %s/src/empty %s/out",
        TMP, TMP, TMP, TMP, TMP);
    run("cd %s/src && echo hello > 'a dir/ünï cödé/f i.txt' && ln -s 'a dir' link && "
        "ln -s /nowhere dangling && head -c 5000000 /dev/urandom > bin.dat && "
        "chmod 0750 'a dir' && chmod 0600 bin.dat",
        TMP);
    char want[80], up[80], down[80];
    char p[1400];
    snprintf(p, sizeof(p), "%s/src", TMP);
    tree_sum(p, want);
    int rc_up = run("%s -s %s cp %s/src %s:/w/ >/dev/null", SBXCTL, SOCK, TMP, SB);
    snprintf(p, sizeof(p), "%s/w/src", ROOT);
    tree_sum(p, up);
    test_cond("sbxctl cp DIR ID:/w/: the tree (spaces, unicode, symlinks, modes) arrives "
              "whole, by digest",
              rc_up == 0 && want[0] && !strcmp(want, up));
    int rc_down = run("%s -s %s cp %s:/w/src %s/out/ >/dev/null", SBXCTL, SOCK, SB, TMP);
    snprintf(p, sizeof(p), "%s/out/src", TMP);
    tree_sum(p, down);
    test_cond("sbxctl cp ID:/w/src DIR: the same tree comes back, by digest",
              rc_down == 0 && !strcmp(want, down));
    /* -L: the link itself resolved, archived under the link's name */
    int rc_l =
        run("%s -s %s cp -L %s:/w/src/link %s/out/ >/dev/null", SBXCTL, SOCK, SB, TMP);
    char ln[64];
    line_of(ln, sizeof(ln), "cd %s/out && test -d link && ! test -L link && ls link",
            TMP);
    test_cond(
        "sbxctl cp -L ID:LINK DIR: the directory it points to, named after the link",
        rc_l == 0 && !strcmp(ln, "ünï cödé"));
    char left[64];
    line_of(left, sizeof(left), "find %s/w -name '.sbx-tar-*' | wc -l", ROOT);
    test_cond("no temporary directory is left beside the entries", !strcmp(left, "0"));
    /* SRC/. into an existing directory, twice: contents merged, not nested */
    run("%s -s %s fs mkdir %s /w/into >/dev/null 2>&1", SBXCTL, SOCK, SB);
    int a = run("%s -s %s cp %s/src/. %s:/w/into >/dev/null", SBXCTL, SOCK, TMP, SB);
    run("echo more > %s/src/empty/new.txt", TMP);
    int b = run("%s -s %s cp %s/src/. %s:/w/into >/dev/null", SBXCTL, SOCK, TMP, SB);
    snprintf(p, sizeof(p), "%s/src", TMP);
    tree_sum(p, want);
    snprintf(p, sizeof(p), "%s/w/into", ROOT);
    tree_sum(p, up);
    test_cond(
        "SRC/. copies the contents; a second copy merges into the directories there",
        a == 0 && b == 0 && !strcmp(want, up));
}

static void test_refusals(conn *c)
{
    char abs[300];
    snprintf(abs, sizeof(abs), "%s/evil", TMP);
    const char *bad[][2] = {{"../evil", "a `..` name"}, {abs, "an absolute name"}};
    for (int i = 0; i < 2; i++) {
        run("rm -rf %s/w/ref && mkdir -p %s/w/ref", ROOT, ROOT);
        char *b = two_entries_b64(bad[i][0]);
        json_t *r = call(c, "fs.write",
                         json_pack("{s:s, s:s, s:s, s:s}", "sandbox", SB, "path",
                                   "/w/ref", "format", "tar", "data_b64", b));
        free(b);
        char n[64];
        line_of(n, sizeof(n), "ls -A %s/w/ref | wc -l; ls %s/w/evil %s/evil 2>/dev/null",
                ROOT, ROOT, ROOT);
        char msg[160];
        snprintf(
            msg, sizeof(msg),
            "%s in an archive: -32010 EPERM, and nothing of it appears (not even the "
            "entry before it)",
            bad[i][1]);
        test_cond(msg, err_code(r) == -32010 && !strcmp(err_errno(r), "EPERM") &&
                           !strcmp(n, "0"));
        json_decref(r);
    }
    json_t *r = call(c, "fs.write",
                     json_pack("{s:s, s:s, s:s, s:s}", "sandbox", SB, "path", "/w/ref",
                               "format", "tar", "data", "this is no tar archive at all"));
    test_cond("a stream that is no archive: -32010 EINVAL in tar's words",
              err_code(r) == -32010 && !strcmp(err_errno(r), "EINVAL"));
    json_decref(r);
}

static void test_errors(conn *c)
{
    static const struct {
        const char *method, *path, *errno_name, *what;
    } cases[] = {
        {"fs.read", "/w/missing", "ENOENT",
         "an archive of a missing path: -32010 ENOENT"},
        {"fs.write", "/w/missing", "ENOENT",
         "extracting into a missing directory: -32010 ENOENT"},
        {"fs.write", "/w/src/bin.dat", "ENOTDIR",
         "extracting into a file: -32010 ENOTDIR"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *p = json_pack("{s:s, s:s, s:s}", "sandbox", SB, "path", cases[i].path,
                              "format", "tar");
        if (!strcmp(cases[i].method, "fs.write"))
            json_object_set_new(p, "data", json_string(""));
        json_t *r = call(c, cases[i].method, p);
        test_cond(cases[i].what,
                  err_code(r) == -32010 && !strcmp(err_errno(r), cases[i].errno_name));
        json_decref(r);
    }
    /* a directory in the archive where a file is: refused before anything moves */
    run("rm -rf %s/w/clash && mkdir -p %s/w/clash/src && : > %s/w/clash/src/bin.dat",
        ROOT, ROOT, ROOT);
    run("rm -f %s/w/clash/src/bin.dat && mkdir %s/w/clash/src/bin.dat", ROOT, ROOT);
    int rc = run("%s -s %s cp %s/src %s:/w/clash 2>/dev/null", SBXCTL, SOCK, TMP, SB);
    char n[64];
    line_of(n, sizeof(n), "ls -A %s/w/clash/src | tr '\\n' ' '", ROOT);
    test_cond("a file of the archive onto a directory there: refused, nothing moved",
              rc != 0 && !strcmp(n, "bin.dat "));
}

/* Chunks by handle: each at most its length (the credit), and the reader's
 * pause holds the sandbox's tar back (the fake's window), not sbxd. */
static void test_credit(conn *c)
{
    run("head -c 134217728 /dev/zero > %s/w/zero128", ROOT);
    json_t *r = call(c, "fs.read",
                     json_pack("{s:s, s:s, s:s, s:i}", "sandbox", SB, "path",
                               "/w/zero128", "format", "tar", "length", 65536));
    json_int_t h = json_integer_value(json_object_get(res_of(r), "handle"));
    json_int_t len = json_integer_value(json_object_get(res_of(r), "length"));
    json_decref(r);
    test_cond("an archive read by handle: the first chunk is the length asked",
              h > 0 && len == 65536);
    usleep(1500 * 1000);
    char made[64];
    line_of(made, sizeof(made),
            "curl -s 127.0.0.1:%d/execs | grep -o '\"bytes\": *[0-9]*' | "
            "tr -dc '0-9\\n' | sort -n | tail -n 1",
            CPORT);
    long long m = atoll(made);
    printf("      tar had written %lld bytes while the reader held 64 KiB\n", m);
    /* what the fake streamed counts from when its HTTP/2 stream took it: the
     * transport's windows come on top of the fake's 8 MiB */
    test_cond("a paused reader holds the sandbox's tar back (< 64 MiB of 128 written)",
              m > 0 && m < 64ll << 20);
    json_int_t total = len, entries = 0;
    int eof = 0, ok = 1;
    while (!eof && ok) {
        r = call(c, "fs.read", json_pack("{s:s, s:I}", "sandbox", SB, "handle", h));
        json_t *res = res_of(r);
        ok = res && json_integer_value(json_object_get(res, "length")) <= 4 << 20;
        total += json_integer_value(json_object_get(res, "length"));
        eof = json_is_true(json_object_get(res, "eof"));
        entries = json_integer_value(json_object_get(res, "entries"));
        json_decref(r);
    }
    test_cond("the rest comes chunk by chunk to eof: one entry, the whole archive",
              ok && eof && entries == 1 && total >= 134217728 + 1024);
    run("rm -f %s/w/zero128", ROOT);
}

/* Starts an archive write of two entries into the fresh directory /w/name,
 * more to come: its handle (0 if none). */
static json_int_t write_open(conn *c, const char *name)
{
    run("rm -rf %s/w/%s && mkdir -p %s/w/%s", ROOT, name, ROOT, name);
    char *b = two_entries_b64("ok.txt"), path[64];
    snprintf(path, sizeof(path), "/w/%s", name);
    json_t *r = call(c, "fs.write",
                     json_pack("{s:s, s:s, s:s, s:s, s:b}", "sandbox", SB, "path", path,
                               "format", "tar", "data_b64", b, "more", 1));
    free(b);
    json_int_t h = json_integer_value(json_object_get(res_of(r), "handle"));
    json_decref(r);
    return h;
}

/* Waits up to 10 s for /w/name to be empty; what it holds then ("0": empty)
 * into n. */
static void wait_empty(const char *name, char n[64])
{
    n[0] = '\0';
    for (int i = 0; i < 100; i++) {
        line_of(n, 64, "ls -A %s/w/%s | wc -l", ROOT, name);
        if (!strcmp(n, "0"))
            return;
        usleep(100 * 1000);
    }
}

static void test_abort(conn *c)
{
    json_int_t h = write_open(c, "ab");
    json_decref(
        call(c, "fs.write",
             json_pack("{s:s, s:I, s:b}", "sandbox", SB, "handle", h, "abort", 1)));
    char n[64];
    wait_empty("ab", n);
    test_cond(
        "an aborted archive write leaves nothing (not even its temporary directory)",
        h > 0 && !strcmp(n, "0"));
}

/* The fake's last exec of an archive script for path (argv "/bin/sh -c
 * SCRIPT sbxd-tar-… PATH …"; a new reference), or NULL. */
static json_t *tar_exec(const char *path)
{
    json_t *all = pt_http_json(CPORT, "GET", "/execs", NULL), *found = NULL, *e;
    size_t i;
    json_array_foreach(all, i, e) {
        json_t *cmd = json_object_get(e, "command");
        const char *a3 = json_string_value(json_array_get(cmd, 3));
        const char *a4 = json_string_value(json_array_get(cmd, 4));
        if (a3 && !strncmp(a3, "sbxd-tar", 8) && a4 && !strcmp(a4, path)) {
            json_decref(found);
            found = json_incref(e);
        }
    }
    json_decref(all);
    return found;
}

/* Waits up to 10 s for that exec to end: its exit code, or -1. */
static int tar_exit(const char *path)
{
    for (int i = 0; i < 100; i++) {
        json_t *e = tar_exec(path);
        json_t *code = json_object_get(e, "exit_code");
        int ended = json_is_integer(code), v = (int)json_integer_value(code);
        json_decref(e);
        if (ended)
            return v;
        usleep(100 * 1000);
    }
    return -1;
}

/* An archive read abandoned before its eof (its session closed while tar
 * waits for the reader) has its tar killed, not left to its exec's hour. */
static void test_abandon_read(void)
{
    run("head -c 134217728 /dev/zero > %s/w/zab", ROOT);
    conn *c2 = cn_open(SOCK);
    json_t *r = c2 ? call(c2, "fs.read",
                          json_pack("{s:s, s:s, s:s, s:i}", "sandbox", SB, "path",
                                    "/w/zab", "format", "tar", "length", 65536))
                   : NULL;
    json_int_t h = json_integer_value(json_object_get(res_of(r), "handle"));
    json_decref(r);
    usleep(1000 * 1000);
    json_t *e = tar_exec("/w/zab");
    int waiting = e && json_is_null(json_object_get(e, "exit_code"));
    json_decref(e);
    test_cond("an archive read by handle: its tar waits for the reader",
              h > 0 && waiting);
    cn_close(c2);
    int code = tar_exit("/w/zab");
    printf("      the abandoned archive's script exited %d\n", code);
    test_cond(
        "its session gone before eof: the sandbox's tar is killed (137 within 10 s)",
        code == 137);
    run("rm -f %s/w/zab", ROOT);
}

/* fs.read {handle, abort: true}: the client lets an archive go before its
 * eof; the sandbox's tar is killed then, and the handle is gone. */
static void test_abort_read(conn *c)
{
    run("head -c 134217728 /dev/zero > %s/w/zabort", ROOT);
    json_t *r = call(c, "fs.read",
                     json_pack("{s:s, s:s, s:s, s:i}", "sandbox", SB, "path", "/w/zabort",
                               "format", "tar", "length", 65536));
    json_int_t h = json_integer_value(json_object_get(res_of(r), "handle"));
    json_decref(r);
    r = call(c, "fs.read", json_pack("{s:s, s:b}", "sandbox", SB, "abort", 1));
    test_cond(
        "abort without a handle: -32602 naming abort",
        err_code(r) == -32602 &&
            !strcmp(json_string_value(json_object_get(
                        json_object_get(json_object_get(r, "error"), "data"), "param"))
                        ?: "",
                    "abort"));
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:I, s:b}", "sandbox", SB, "handle", h, "abort", 1));
    test_cond("fs.read {handle, abort}: {aborted: true}",
              h > 0 && json_is_true(json_object_get(res_of(r), "aborted")));
    json_decref(r);
    int code = tar_exit("/w/zabort");
    printf("      the aborted archive's script exited %d\n", code);
    test_cond("an aborted archive read: the sandbox's tar is killed (137 within 10 s)",
              code == 137);
    r = call(c, "fs.read", json_pack("{s:s, s:I}", "sandbox", SB, "handle", h));
    test_cond("the aborted handle is gone: -32602", err_code(r) == -32602);
    json_decref(r);
    run("rm -f %s/w/zabort", ROOT);
}

/* An archive write whose next chunk fails (a router error, not an abort) has
 * its tar terminated: the script still removes what it extracted. */
static void test_abandon_write(conn *c)
{
    json_int_t h = write_open(c, "wab");
    json_decref(pt_http_json(CPORT, "POST", "/fault",
                             json_pack("{s:{s:s, s:i, s:i}}", "fail_next", "method",
                                       "TaskExecStdinWrite", "code", 3, "times", 1)));
    json_t *r = call(c, "fs.write",
                     json_pack("{s:s, s:I, s:s, s:b}", "sandbox", SB, "handle", h, "data",
                               "more bytes", "more", 1));
    int failed = err_code(r) != 0;
    json_decref(r);
    int code = tar_exit("/w/wab");
    char n[64];
    wait_empty("wab", n);
    printf("      the failed write's script exited %d, %s entries left\n", code, n);
    test_cond("an archive write whose chunk failed: its tar ends and leaves nothing (not "
              "even its temporary directory)",
              h > 0 && failed && code >= 0 && !strcmp(n, "0"));
    json_decref(pt_http_json(CPORT, "DELETE", "/faults", NULL));
}

static void test_big(void)
{
    const char *e = getenv("PTEST_TAR_BIG_MB");
    long mb = e ? atol(e) : 1024;
    if (getenv("SBX_SANITIZED") || getenv("SBX_VALGRIND") || mb <= 0) {
        test_skip("a big archive each way keeps sbxd's RSS flat",
                  "under sanitizers or valgrind (or PTEST_TAR_BIG_MB=0)");
        return;
    }
    run("head -c %ldM /dev/urandom > %s/big.bin", mb, TMP);
    long before = rss_kb(), peak = before;
    pid_t pid = fork();
    if (pid == 0) {
        int st = run("%s -s %s cp %s/big.bin %s:/w/ && %s -s %s cp %s:/w/big.bin - "
                     "> %s/big.tar",
                     SBXCTL, SOCK, TMP, SB, SBXCTL, SOCK, SB, TMP);
        _exit(st);
    }
    int st = 0;
    double t0 = now_ms();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        long kb = rss_kb();
        if (kb > peak)
            peak = kb;
        usleep(200 * 1000);
    }
    double secs = (now_ms() - t0) / 1000.0;
    char a[80], b[80];
    line_of(a, sizeof(a), "sha256sum < %s/big.bin | cut -c1-64", TMP);
    line_of(b, sizeof(b), "tar -xOf %s/big.tar | sha256sum | cut -c1-64", TMP);
    printf("      %ld MiB up and down in %.1f s; sbxd RSS %ld kB before, peak %ld kB\n",
           mb, secs, before, peak);
    char msg[200];
    snprintf(msg, sizeof(msg),
             "%ld MiB up and back down as archives: same digest, sbxd's RSS flat "
             "(peak < before + 32 MiB)",
             mb);
    test_cond(msg, WIFEXITED(st) && WEXITSTATUS(st) == 0 && a[0] && !strcmp(a, b) &&
                       before > 0 && peak < before + 32 * 1024);
    run("rm -f %s/big.bin %s/big.tar %s/w/big.bin", TMP, TMP, ROOT);
}

static void test_cross_uid(void)
{
    if (getuid() != 0) {
        test_skip("another uid's archives are -32000", "needs root to switch uid");
        return;
    }
    int rd = pt_code_as_uid(
        4321, SOCK, "fs.read",
        json_pack("{s:s, s:s, s:s}", "sandbox", SB, "path", "/w", "format", "tar"));
    int wr = pt_code_as_uid(4321, SOCK, "fs.write",
                            json_pack("{s:s, s:s, s:s, s:s}", "sandbox", SB, "path", "/w",
                                      "format", "tar", "data", ""));
    test_cond("an archive read or write of another uid's Modal sandbox is -32000",
              rd == -32000 && wr == -32000);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: ptest_modal_tar SOCKET CONTROL_PORT SBXCTL SBXD_PID\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    SOCK = argv[1];
    CPORT = atoi(argv[2]);
    SBXCTL = argv[3];
    DPID = atoi(argv[4]);
    snprintf(TMP, sizeof(TMP), "%s/mtar",
             getenv("PTEST_TMP") ? getenv("PTEST_TMP") : "/tmp");
    run("rm -rf %s && mkdir -p %s", TMP, TMP);
    conn *c = cn_open(SOCK);
    test_cond("sbxd answers", c != NULL);
    if (!c)
        return test_report();
    json_t *r =
        call(c, "sandbox.create", json_pack("{s:s, s:s}", "id", SB, "provider", "modal"));
    test_cond("a Modal sandbox", res_of(r) != NULL);
    json_decref(r);
    r = call(
        c, "process.exec",
        json_pack("{s:s, s:s}", "sandbox", SB, "command",
                  "mkdir -p \"$MODAL_SANDBOX_ROOT/w\" && echo \"$MODAL_SANDBOX_ROOT\""));
    snprintf(ROOT, sizeof(ROOT), "%s", res_str(r, "stdout") ? res_str(r, "stdout") : "");
    ROOT[strcspn(ROOT, "\n")] = '\0';
    json_decref(r);
    test_cond("the fake says where the sandbox's files are", ROOT[0] == '/');
    test_round_trip();
    test_refusals(c);
    test_errors(c);
    test_credit(c);
    test_abort(c);
    test_abandon_read();
    test_abort_read(c);
    test_abandon_write(c);
    test_cross_uid();
    test_big();
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", SB)));
    cn_close(c);
    run("rm -rf %s", TMP);
    return test_report();
}
