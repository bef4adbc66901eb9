/*
 * ptest_docker_fsraw.c - raw transfers (PROTOCOL.md "Files", "Raw
 * transfers") on a real Docker engine: fs.read/fs.write with transport
 * "raw", the token, the second connection (fs.stream) and its bounds.
 *
 *   ptest_docker_fsraw SBXD BUILD_DIR TMPDIR
 *
 * Starts its own sbxd (short token life, small per-uid bounds, so leaks
 * show) and speaks the raw framing itself, so the protocol is checked
 * apart from libsbx; libsbx's helpers are checked on top.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "sbx/sbx.h"
#include "testhelp.h"

#define MB50 (50u << 20)

static char sock[108];
static const char *tmpdir;
/* the sandbox; its id carries the pid, so another run's container on the
 * shared engine is never this one */
static char sbid[32];
static pid_t sbxd_pid;

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, 120000, m, p);
}

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

static long rss_kb(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

/* ---- the raw framing, spoken here ------------------------------------------------ */

static char *token_for(conn *c, const char *method, json_t *p)
{
    json_object_set_new(p, "transport", json_string("raw"));
    json_t *r = call(c, method, p);
    const char *t = json_string_value(json_object_get(res_of(r), "token"));
    char *s = t ? strdup(t) : NULL;
    if (!s) {
        char *d = json_dumps(r, 0);
        printf("      %s raw: %s\n", method, d ? d : "(none)");
        free(d);
    }
    json_decref(r);
    return s;
}

static int sock_open(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {30, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        ssize_t r = send(fd, s, n, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
    char *s = p;
    while (n) {
        ssize_t r = recv(fd, s, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        s += r;
        n -= (size_t)r;
    }
    return 0;
}

/* One line from fd (byte by byte: the raw bytes after it stay in the
 * socket) as JSON, or NULL. */
static json_t *line_in(int fd)
{
    char b[8192];
    size_t n = 0;
    while (n < sizeof(b) - 1) {
        if (recv(fd, b + n, 1, 0) != 1)
            return NULL;
        if (b[n] == '\n')
            break;
        n++;
    }
    return json_loadb(b, n, 0, NULL);
}

/* A stream connection presenting tok. */
static int stream_open(const char *tok)
{
    int fd = sock_open();
    char l[200];
    int n = snprintf(l, sizeof(l),
                     "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"fs.stream\","
                     "\"params\":{\"token\":\"%s\"}}\n",
                     tok);
    if (fd >= 0 && send_all(fd, l, (size_t)n) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int err_code_of(json_t *v)
{
    json_t *e = json_object_get(v, "error");
    return e ? (int)json_integer_value(json_object_get(e, "code")) : 0;
}

/* Reads a raw read's frames into buf (cap), *n bytes. 0 ok (trailer seen). */
static int read_frames(int fd, uint8_t *buf, size_t cap, size_t *n)
{
    *n = 0;
    for (;;) {
        uint32_t be;
        if (recv_all(fd, &be, 4) < 0)
            return -1;
        uint32_t k = ntohl(be);
        if (k == 0 || k == 0xffffffffu) {
            json_t *t = line_in(fd);
            int ok = k == 0 && t && json_integer_value(json_object_get(t, "length")) >= 0;
            json_decref(t);
            return ok ? 0 : -1;
        }
        if (*n + k > cap || recv_all(fd, buf + *n, k) < 0)
            return -1;
        *n += k;
    }
}

/* ---- tests ------------------------------------------------------------------------- */

static uint8_t *random_bytes(size_t n)
{
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
    return d;
}

static void sha_of(const uint8_t *d, size_t n, char out[65])
{
    char lf[600];
    snprintf(lf, sizeof(lf), "%s/sha.bin", tmpdir);
    FILE *f = fopen(lf, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
    pt_sha256_file(lf, out);
}

static void test_both_ways(conn *c)
{
    uint8_t *d = random_bytes(MB50);
    char want[65], have[65];
    sha_of(d, MB50, want);
    char *tok = token_for(c, "fs.write",
                          json_pack("{s:s, s:s, s:I}", "sandbox", sbid, "path",
                                    "/workspace/up.bin", "size", (json_int_t)MB50));
    int fd = tok ? stream_open(tok) : -1;
    double t = now_ms();
    int sent = fd >= 0 && send_all(fd, d, MB50) == 0;
    json_t *r = fd >= 0 ? line_in(fd) : NULL;
    double up = now_ms() - t;
    if (fd >= 0)
        close(fd);
    test_cond("raw write: 50 MB sent, answered {size} on the stream",
              sent && json_integer_value(json_object_get(json_object_get(r, "result"),
                                                         "size")) == (json_int_t)MB50);
    json_decref(r);
    free(tok);
    char *s = sh(c, sbid, "sha256sum /workspace/up.bin");
    test_cond("raw write: the digest inside the sandbox is the local one",
              s && strncmp(s, want, 64) == 0);
    free(s);
    s = sh(c, sbid,
           "head -c 52428800 /dev/urandom > /workspace/down.bin && "
           "sha256sum /workspace/down.bin");
    tok = token_for(
        c, "fs.read",
        json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/down.bin"));
    fd = tok ? stream_open(tok) : -1;
    t = now_ms();
    json_t *head = fd >= 0 ? line_in(fd) : NULL;
    size_t n = 0;
    int ok = head &&
             json_integer_value(json_object_get(json_object_get(head, "result"),
                                                "size")) == (json_int_t)MB50 &&
             read_frames(fd, d, MB50, &n) == 0;
    double down = now_ms() - t;
    if (fd >= 0)
        close(fd);
    json_decref(head);
    free(tok);
    test_cond("raw read: header {size}, frames, trailer; every byte", ok && n == MB50);
    sha_of(d, n, have);
    test_cond("raw read: the local digest is the sandbox's", s && !strncmp(s, have, 64));
    free(s);
    printf("      (50 MB raw: upload %.0f MB/s, download %.0f MB/s)\n",
           50e3 / up * 1.048576, 50e3 / down * 1.048576);
    free(d);
}

static void test_libsbx(void)
{
    sbx_ctx *x = sbx_connect_unix(sock, 5000);
    size_t n = 9u << 20;
    uint8_t *d = random_bytes(n);
    json_t *res = NULL;
    sbx_rpc_error *e = NULL;
    int rc = x ? sbx_fs_write(x, &res, &e, sbid, "/workspace/lib.bin", d, n, NULL) : -1;
    test_cond("libsbx sbx_fs_write of 9 MB (raw path) answers its size",
              rc == SBX_OK &&
                  json_integer_value(json_object_get(res, "size")) == (json_int_t)n);
    json_decref(res);
    sbx_rpc_error_free(e);
    char *back = NULL;
    size_t bn = 0;
    e = NULL;
    rc = x ? sbx_fs_read(x, &back, &bn, &e, sbid, "/workspace/lib.bin") : -1;
    test_cond("libsbx sbx_fs_read gives the same 9 MB back",
              rc == SBX_OK && bn == n && !memcmp(back, d, n));
    free(back);
    sbx_rpc_error_free(e);
    e = NULL;
    rc = x ? sbx_fs_read(x, &back, &bn, &e, sbid, "/workspace/missing") : -1;
    test_cond(
        "libsbx raw read of a missing file: -32010 ENOENT",
        rc != SBX_OK && e && e->code == -32010 &&
            !strcmp(json_string_value(json_object_get(e->data, "errno")), "ENOENT"));
    sbx_rpc_error_free(e);
    free(d);
    sbx_free(x);
}

static int sink_stop(const void *d, size_t n, void *priv)
{
    (void)d, (void)n, (void)priv;
    return -1;
}

/* libsbx: an archive whose sink stops it (base64 chunks, so a handle is open)
 * is let go at once: the session's transfer slot is back, the sink's error
 * is the one reported. */
static void test_libsbx_archive_stop(void)
{
    sbx_ctx *x = sbx_connect_unix(sock, 5000);
    sbx_rpc_error *e = NULL;
    setenv("SBX_FS_TRANSPORT", "json", 1);
    int rc =
        x ? sbx_fs_archive_read(x, &e, sbid, "/workspace/lib.bin", NULL, sink_stop, NULL)
          : SBX_OK;
    unsetenv("SBX_FS_TRANSPORT");
    test_cond("libsbx: a sink that stops an archive fails the read with its own error",
              rc != SBX_OK && x && strstr(x->errstr, "sink"));
    sbx_rpc_error_free(e);
    json_t *res = NULL;
    e = NULL;
    rc = x ? sbx_call_new(x, &res, &e, "daemon.info", NULL) : SBX_ERR;
    json_t *u = json_object_get(json_object_get(res, "usage"), "fs_transfers_per_uid");
    test_cond(
        "... and lets the archive go at once: no transfer slot held (daemon.info usage)",
        rc == SBX_OK && u && json_integer_value(json_object_get(u, "used")) == 0);
    json_decref(res);
    sbx_rpc_error_free(e);
    sbx_free(x);
}

/* A stream presented as another uid: the answer's code, 0 if none. */
static int present_as(uid_t uid, const char *tok)
{
    int fds[2];
    if (pipe(fds) < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
            _exit(3);
        int fd = stream_open(tok);
        json_t *r = fd >= 0 ? line_in(fd) : NULL;
        int code = r ? err_code_of(r) : 2;
        if (write(fds[1], &code, sizeof(code)) < 0)
            _exit(4);
        _exit(0);
    }
    close(fds[1]);
    int code = 0;
    if (read(fds[0], &code, sizeof(code)) != sizeof(code))
        code = 0;
    close(fds[0]);
    waitpid(pid, NULL, 0);
    return code;
}

static void test_tokens(conn *c)
{
    free(sh(c, sbid, "printf hello > /workspace/t.txt"));
    json_t *p = json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/t.txt");
    char *tok = token_for(c, "fs.read", p);
    if (getuid() == 0)
        test_eq_int("another uid's fs.stream with a token: -32602", present_as(4321, tok),
                    -32602);
    else
        test_skip("another uid's token is refused", "needs root to switch uid");
    int fd = stream_open(tok);
    json_t *h = line_in(fd);
    uint8_t b[16];
    size_t n = 0;
    int ok = h && json_object_get(h, "result") && read_frames(fd, b, sizeof(b), &n) == 0;
    close(fd);
    json_decref(h);
    test_cond("the owner's stream with the same token still works (5 bytes)",
              ok && n == 5 && !memcmp(b, "hello", 5));
    fd = stream_open(tok);
    h = line_in(fd);
    test_eq_int("a token used twice: -32602", err_code_of(h), -32602);
    json_decref(h);
    close(fd);
    free(tok);
    fd = stream_open("00000000000000000000000000000000");
    h = line_in(fd);
    test_eq_int("an unknown token: -32602", err_code_of(h), -32602);
    json_decref(h);
    close(fd);
    tok = token_for(c, "fs.read",
                    json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/t.txt"));
    usleep(1500 * 1000); /* fs_stream_token_ms: 1000 */
    fd = stream_open(tok);
    h = line_in(fd);
    test_eq_int("an expired token: -32602", err_code_of(h), -32602);
    json_decref(h);
    close(fd);
    free(tok);
    json_t *r = call(c, "fs.write",
                     json_pack("{s:s, s:s, s:s, s:s}", "sandbox", sbid, "path",
                               "/workspace/x", "transport", "raw", "data", "x"));
    test_eq_int("raw write with data instead of size: -32602", err_code(r), -32602);
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:s}", "sandbox", sbid, "path", "/workspace/t.txt",
                       "transport", "carrier-pigeon"));
    test_eq_int("an unknown transport: -32602", err_code(r), -32602);
    json_decref(r);
    r = call(c, "fs.read",
             json_pack("{s:s, s:s, s:s}", "sandbox", "nope", "path", "/workspace/t.txt",
                       "transport", "raw"));
    test_eq_int("raw read of a missing sandbox: -32000 (no token)", err_code(r), -32000);
    json_decref(r);
}

/* A client that stops reading a 50 MB raw read: sbxd holds a chunk, not the
 * file; others are served meanwhile; reading again gets every byte. */
static void test_backpressure(conn *c)
{
    char *want = sh(c, sbid, "sha256sum /workspace/down.bin");
    char *tok = token_for(
        c, "fs.read",
        json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/down.bin"));
    int fd = tok ? stream_open(tok) : -1;
    int rcv = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    json_t *h = fd >= 0 ? line_in(fd) : NULL;
    long before = rss_kb(sbxd_pid);
    usleep(1500 * 1000);
    long after = rss_kb(sbxd_pid);
    printf("      (sbxd RSS %ld -> %ld kB while the reader sleeps)\n", before, after);
    test_cond("a reader that stops: sbxd RSS grows < 12 MB (a chunk or two)",
              before > 0 && after - before < 12 * 1024);
    double t = now_ms();
    json_t *r =
        call(c, "fs.stat",
             json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/t.txt"));
    test_cond("meanwhile fs.stat on another connection answers within 2 s",
              res_of(r) && now_ms() - t < 2000);
    json_decref(r);
    /* another raw transfer goes through beside it */
    sbx_ctx *x = sbx_connect_unix(sock, 5000);
    uint8_t *d = random_bytes(5u << 20);
    sbx_rpc_error *e = NULL;
    t = now_ms();
    int rc = sbx_fs_write(x, NULL, &e, sbid, "/workspace/beside.bin", d, 5u << 20, NULL);
    test_cond("meanwhile a 5 MB raw write completes within 10 s",
              rc == SBX_OK && now_ms() - t < 10000);
    sbx_rpc_error_free(e);
    sbx_free(x);
    free(d);
    uint8_t *buf = malloc(MB50);
    size_t n = 0;
    int ok = h && read_frames(fd, buf, MB50, &n) == 0;
    char have[65];
    sha_of(buf, n, have);
    test_cond("reading again gets every byte (digest)",
              ok && n == MB50 && want && !strncmp(want, have, 64));
    free(buf);
    free(want);
    json_decref(h);
    if (fd >= 0)
        close(fd);
    free(tok);
}

/* A raw write the sandbox cannot take (a full tmpfs): the error comes on
 * the stream at once, with its errno, and nothing is left behind. */
static void test_enospc(conn *c)
{
    size_t size = 24u << 20;
    uint8_t *d = random_bytes(size);
    char *tok = token_for(c, "fs.write",
                          json_pack("{s:s, s:s, s:I}", "sandbox", sbid, "path",
                                    "/tmp/full.bin", "size", (json_int_t)size));
    int fd = tok ? stream_open(tok) : -1;
    if (fd >= 0)
        send_all(fd, d, size); /* may stop early: the daemon gave up */
    json_t *r = fd >= 0 ? line_in(fd) : NULL;
    const char *en = json_string_value(
        json_object_get(json_object_get(json_object_get(r, "error"), "data"), "errno"));
    test_cond("a raw write past a full tmpfs: -32010 ENOSPC on the stream",
              err_code_of(r) == -32010 && en && !strcmp(en, "ENOSPC"));
    json_decref(r);
    if (fd >= 0)
        close(fd);
    free(tok);
    free(d);
    usleep(300 * 1000);
    char *s = sh(c, sbid, "ls -a /tmp | grep -c full || true");
    test_cond("and leaves no file or temporary file", s && !strcmp(s, "0"));
    free(s);
}

/* Writes the config (small fs limits, to reach them) and starts sbxd (sbxd_pid)
 * on sock. */
static void start_fsraw_sbxd(const char *sbxd_bin, const char *bdir, const char *host,
                             const char *cfg, const char *log)
{
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "limits:\n  fs_stream_token_ms: 1000\n  fs_transfers_per_uid: 4\n"
            "  fs_bytes_in_flight_per_uid: 20M\n"
            "providers:\n"
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
    unlink(sock);
    sbxd_pid = fork();
    if (sbxd_pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("SBXD_SOCKET", sock, 1);
        execl(sbxd_bin, "sbxd", "-c", cfg, (char *)NULL);
        _exit(127);
    }
}

static void test_dropped(conn *c)
{
    size_t size = 20u << 20, half = 10u << 20;
    uint8_t *d = random_bytes(size);
    free(sh(c, sbid, "rm -f /workspace/half.bin"));
    for (int k = 0; k < 3; k++) {
        char *tok = token_for(c, "fs.write",
                              json_pack("{s:s, s:s, s:I}", "sandbox", sbid, "path",
                                        "/workspace/half.bin", "size", (json_int_t)size));
        int fd = tok ? stream_open(tok) : -1;
        if (fd >= 0) {
            send_all(fd, d, half);
            usleep(200 * 1000);
            close(fd);
        }
        free(tok);
    }
    /* and two reads dropped after the header */
    for (int k = 0; k < 2; k++) {
        char *tok = token_for(
            c, "fs.read",
            json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/down.bin"));
        int fd = tok ? stream_open(tok) : -1;
        json_decref(fd >= 0 ? line_in(fd) : NULL);
        if (fd >= 0)
            close(fd);
        free(tok);
    }
    usleep(500 * 1000);
    char *s = sh(c, sbid,
                 "ls -a /workspace | grep -c 'half' ; test -e /workspace/half.bin && "
                 "echo there || echo none");
    test_cond("writes dropped mid-way leave no file and no temporary file",
              s && !strcmp(s, "0\nnone"));
    if (s && strcmp(s, "0\nnone"))
        printf("      ls: %s\n", s);
    free(s);
    /* fs_transfers_per_uid 4: every slot must be free again */
    char *toks[4];
    int all = 1;
    for (int k = 0; k < 4; k++) {
        toks[k] = token_for(
            c, "fs.read",
            json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/t.txt"));
        all &= toks[k] != NULL;
    }
    test_cond("after 5 dropped streams all 4 fs_transfers_per_uid slots are free", all);
    char *fifth =
        token_for(c, "fs.read",
                  json_pack("{s:s, s:s}", "sandbox", sbid, "path", "/workspace/t.txt"));
    test_cond("a fifth token at once is refused (-32005)", fifth == NULL);
    free(fifth);
    for (int k = 0; k < 4; k++)
        free(toks[k]);
    usleep(1300 * 1000); /* the tokens expire and give their slots back */
    sbx_ctx *x = sbx_connect_unix(sock, 5000);
    sbx_rpc_error *e = NULL;
    int rc = sbx_fs_write(x, NULL, &e, sbid, "/workspace/half.bin", d, size, NULL);
    test_cond("then a 20 MB raw write fits fs_bytes_in_flight_per_uid (nothing leaked)",
              rc == SBX_OK);
    if (e)
        printf("      %s\n", e->message);
    sbx_rpc_error_free(e);
    sbx_free(x);
    free(d);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ptest_docker_fsraw SBXD BUILD_DIR TMPDIR\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(sbid, sizeof(sbid), "raw%d", (int)getpid());
    const char *sbxd_bin = argv[1], *bdir = argv[2];
    tmpdir = argv[3];
    const char *host = getenv("DOCKER_HOST");
    if (!host || strncmp(host, "unix://", 7) != 0) {
        printf("DOCKER_HOST must be unix://...\n0 passed, 1 failed\n");
        return 1;
    }
    char cfg[600], log[600];
    snprintf(cfg, sizeof(cfg), "%s/fsraw.yaml", tmpdir);
    snprintf(log, sizeof(log), "%s/sbxd-fsraw.log", tmpdir);
    snprintf(sock, sizeof(sock), "%.90s/fsraw.sock", tmpdir);
    start_fsraw_sbxd(sbxd_bin, bdir, host, cfg, log);
    conn *c = dk_connect(sock, 5000);
    dk_docker_up(c, 10000);
    json_t *r = c ? call(c, "sandbox.create",
                         json_pack("{s:s, s:s}", "id", sbid, "provider", "docker"))
                  : NULL;
    if (!res_of(r)) {
        printf("no docker sandbox (log %s)\n0 passed, 1 failed\n", log);
        if (sbxd_pid > 0)
            kill(sbxd_pid, SIGTERM);
        return 1;
    }
    json_decref(r);
    test_both_ways(c);
    test_libsbx();
    test_libsbx_archive_stop();
    test_tokens(c);
    test_backpressure(c);
    test_enospc(c);
    test_dropped(c);
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", sbid)));
    cn_close(c);
    kill(sbxd_pid, SIGTERM);
    waitpid(sbxd_pid, NULL, 0);
    return test_report();
}
