/*
 * ptest_modal_ws.c - terminals, tunnels, egress and stats (issue 18) on the
 * Modal provider against the local fake (tests/modal/fake, its workspace.js).
 *
 *   ptest_modal_ws SOCKET CONTROL_PORT CA_FILE
 *
 * sbxd's answers are checked through its socket and against the fake's side:
 * GET /execs (the PTYInfo each exec got, which path it took), GET /sandboxes
 * (the NetworkAccess and tunnels each sandbox got), GET /calls (which client
 * made which RPC). The tunnels are the fake's real listeners, so an exposed
 * port is fetched through them from a server the test starts in the sandbox.
 * The config (modal.sh, main.yaml) has providers.modal.egress.allow =
 * [pypi.org, *.example.com, 203.0.113.0/24, 10.1.0.0/16]. With
 * PTEST_WS_SBXD (a command prefix that runs sbxd), PTEST_WS_CFG (main.yaml)
 * and PTEST_TMP, a second sbxd with a state file is restarted with a
 * narrower ceiling to check what adoption keeps.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "itest.h"
#include "testhelp.h"

#define LONG_MS 120000 /* before md_kit.h, which keeps it */
#include "md_kit.h"
#define SB "mws"

static const char *CA;

/* ---- plain TCP and the fake's control port ------------------------------------- */

/* A loopback port nothing listens on now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    int port = 0;
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static const char *err_msg(json_t *r)
{
    const char *s =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    return s ? s : "";
}

static json_t *err_data(json_t *r)
{
    return json_object_get(json_object_get(r, "error"), "data");
}

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, LONG_MS, m, p);
}

/* ---- terminals ------------------------------------------------------------------ */

static void test_pty_exec(conn *c)
{
    json_t *r =
        call(c, "process.exec",
             json_pack("{s:s, s:s, s:{s:i, s:i}}", "sandbox", SB, "command",
                       "tty; stty size; echo err >&2", "pty", "cols", 100, "rows", 30));
    const char *out = res_str(r, "stdout");
    int pts = !strncmp(out, "/dev/pts/", 9);
    test_cond("pty: `tty` names a terminal", pts);
    test_cond("pty: `stty size` is the size asked for (30 100)",
              strstr(out, "\r\n30 100\r\n") != NULL);
    test_cond("pty: stderr comes on the one stream (stdout), stderr stays empty",
              strstr(out, "err\r\n") && !strcmp(res_str(r, "stderr"), ""));
    if (!pts)
        printf("      %s\n", json_dumps(r, JSON_COMPACT));
    json_decref(r);
    json_t *all = pt_http_json(CPORT, "GET", "/execs", NULL), *e, *last = NULL;
    size_t i;
    json_array_foreach(all, i, e)
        if (json_is_true(json_object_get(e, "pty")))
            last = e;
    json_t *pi = json_object_get(last, "pty_info");
    test_cond(
        "pty: the fake got TaskExecStart.pty_info {enabled, 100x30, SHELL} on the router",
        json_is_true(json_object_get(pi, "enabled")) &&
            json_integer_value(json_object_get(pi, "winsz_cols")) == 100 &&
            json_integer_value(json_object_get(pi, "winsz_rows")) == 30 &&
            json_integer_value(json_object_get(pi, "pty_type")) == 2 &&
            !strcmp(json_string_value(json_object_get(last, "via")), "router"));
    json_decref(all);
}

static void test_pty_spawn(conn *c)
{
    json_t *r = call(c, "process.spawn",
                     json_pack("{s:s, s:s, s:{s:i, s:i}}", "sandbox", SB, "command",
                               "read x; echo got:$x", "pty", "cols", 80, "rows", 24));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    r = call(c, "process.resize",
             json_pack("{s:s, s:i, s:i, s:i}", "sandbox", SB, "pid", pid, "cols", 120,
                       "rows", 40));
    test_cond("pty: process.resize is -32011 {feature: resize} (Modal has no resize)",
              err_code(r) == -32011 &&
                  !strcmp(json_string_value(json_object_get(err_data(r), "feature")),
                          "resize"));
    json_decref(r);
    json_decref(
        call(c, "process.write",
             json_pack("{s:s, s:i, s:s}", "sandbox", SB, "pid", pid, "data", "abc\r")));
    r = call(c, "process.wait", json_pack("{s:s, s:i}", "sandbox", SB, "pid", pid));
    char buf[256] = "";
    notes_output(c, pid, "stdout", buf, sizeof(buf));
    test_cond(
        "pty: raw input reaches the program through the terminal (echo, \\r -> \\n)",
        res_int(r, "exit_code") == 0 && strstr(buf, "abc\r\n") &&
            strstr(buf, "got:abc\r\n"));
    json_decref(r);
}

/* ---- tunnels --------------------------------------------------------------------- */

/* A server in the sandbox answering "port N" on both ports; its pid. */
static int start_server(conn *c, int p1, int p2)
{
    char js[300];
    snprintf(js, sizeof(js),
             "const h=require('http');for(const p of [%d,%d])h.createServer((q,r)=>"
             "r.end('port '+p)).listen(p,'127.0.0.1')",
             p1, p2);
    json_t *r =
        call(c, "process.spawn",
             json_pack("{s:s, s:[s, s, s]}", "sandbox", SB, "command", "node", "-e", js));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    return pid;
}

/* GET / through 127.0.0.1:port until the server answers; the body or "". */
static void http_get(int port, char *out, size_t n)
{
    out[0] = '\0';
    for (int i = 0; i < 100 && !out[0]; i++) {
        static const char get[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
        char *b = pt_tcp_talk(port, get, sizeof(get) - 1);
        char *sep = b ? strstr(b, "\r\n\r\n") : NULL;
        if (sep)
            snprintf(out, n, "%s", sep + 4);
        free(b);
        if (!out[0])
            usleep(50000);
    }
}

static void test_expose_tcp(conn *c, int tport)
{
    json_t *r =
        call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", SB, "port", tport));
    int hp = (int)res_int(r, "host_port");
    char want_url[64], want[32], body[64];
    snprintf(want_url, sizeof(want_url), "tcp://127.0.0.1:%d", hp);
    snprintf(want, sizeof(want), "port %d", tport);
    test_cond("expose (unencrypted): {port, host, host_port, url: tcp://...}, no TLS",
              res_int(r, "port") == tport && !strcmp(res_str(r, "host"), "127.0.0.1") &&
                  hp > 0 && hp != tport && !strcmp(res_str(r, "url"), want_url) &&
                  json_is_false(json_object_get(res_of(r), "tls")));
    json_decref(r);
    http_get(hp, body, sizeof(body));
    test_eq_str(
        "expose: a server in the sandbox fetched through Modal's (the fake's) tunnel",
        body, want);
}

static void test_expose_tls(conn *c, conn *c0, int eport)
{
    json_t *r =
        call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", SB, "port", eport));
    int hp = (int)res_int(r, "host_port");
    char url[96];
    snprintf(url, sizeof(url), "%s", res_str(r, "url"));
    json_decref(r);
    json_t *fs = fake_sandbox_of(c0, SB), *t;
    size_t i;
    int same = 0;
    json_array_foreach(json_object_get(fs, "tunnels"), i, t)
        same |= json_integer_value(json_object_get(t, "container_port")) == eport &&
                json_integer_value(json_object_get(t, "port")) == hp;
    json_decref(fs);
    test_cond("expose (TLS): host_port and https url are the fake's TunnelData",
              same && !strncmp(url, "https://127.0.0.1:", 18));
    if (access("/usr/bin/curl", X_OK) != 0) {
        test_skip("expose (TLS): fetched with curl --cacert", "no curl here");
        return;
    }
    char cmd[512], want[32], body[64] = "";
    snprintf(cmd, sizeof(cmd), "curl -s --max-time 10 --cacert '%s' '%s/'", CA, url);
    snprintf(want, sizeof(want), "port %d", eport);
    FILE *f = popen(cmd, "r");
    if (f) {
        if (!fgets(body, sizeof(body), f))
            body[0] = '\0';
        pclose(f);
    }
    test_eq_str("expose (TLS): fetched through the tunnel, certificate verified", body,
                want);
}

static void test_expose_refusals(conn *c, int tport)
{
    json_t *r = call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", SB, "port", 9));
    test_cond("expose: a port not declared at create is -32602 saying it must be",
              err_code(r) == -32602 && strstr(err_msg(r), "options.ports"));
    json_decref(r);
    r = call(c, "sandbox.expose",
             json_pack("{s:s, s:i, s:i}", "id", SB, "port", tport, "host_port", 1));
    test_cond("expose: another host_port is -32602 (Modal chooses it)",
              err_code(r) == -32602);
    json_decref(r);
    r = call(c, "sandbox.unexpose", json_pack("{s:s, s:i}", "id", SB, "port", tport));
    test_cond("unexpose: -32011 {feature: unexpose} (a tunnel lives with its sandbox)",
              err_code(r) == -32011);
    json_decref(r);
    r = call(c, "sandbox.get", json_pack("{s:s}", "id", SB));
    json_t *ports = json_object_get(json_object_get(res_of(r), "metadata"), "ports");
    test_cond("sandbox.get lists both declared ports, the exposed ones marked",
              json_array_size(ports) == 2 &&
                  json_is_true(json_object_get(json_array_get(ports, 0), "exposed")));
    json_decref(r);
}

/* stop + start runs a new Modal sandbox: expose answers its new tunnel. */
static void test_expose_after_restart(conn *c, int tport)
{
    json_t *r =
        call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", SB, "port", tport));
    int before = (int)res_int(r, "host_port");
    json_decref(r);
    json_decref(call(c, "sandbox.stop", json_pack("{s:s}", "id", SB)));
    r = call(c, "sandbox.start", json_pack("{s:s}", "id", SB));
    int started = res_of(r) != NULL;
    json_decref(r);
    r = call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", SB, "port", tport));
    int after = (int)res_int(r, "host_port");
    json_decref(r);
    json_t *fs = fake_sandbox_of(c, SB), *t;
    size_t i;
    int same = 0;
    json_array_foreach(json_object_get(fs, "tunnels"), i, t)
        same |= json_integer_value(json_object_get(t, "container_port")) == tport &&
                json_integer_value(json_object_get(t, "unencrypted_port")) == after;
    json_decref(fs);
    test_cond("expose after stop/start: the new Modal sandbox's tunnel, not the old one",
              started && before > 0 && after > 0 && after != before && same);
}

/* ---- stats ---------------------------------------------------------------------- */

static void test_stats(conn *c)
{
    json_t *r1 = call(c, "sandbox.stats", json_pack("{s:s}", "id", SB));
    usleep(600000);
    json_t *r2 = call(c, "sandbox.stats", json_pack("{s:s}", "id", SB));
    json_t *cpu = json_object_get(res_of(r2), "cpu"),
           *mem = json_object_get(res_of(r2), "memory");
    double u1 =
        json_number_value(json_object_get(json_object_get(res_of(r1), "cpu"), "usage_s"));
    double u2 = json_number_value(json_object_get(cpu, "usage_s"));
    double pct = json_number_value(json_object_get(cpu, "percent"));
    printf("      usage_s %.3f -> %.3f, percent %.1f\n", u1, u2, pct);
    test_cond("stats: cpu.usage_s from SandboxGetResourceUsage, growing",
              u1 > 0 && u2 > u1 && !strcmp(res_str(r2, "id"), SB));
    test_cond("stats: cpu.percent over the window is the billed 0.5 core (about 50)",
              pct > 40 && pct < 60);
    test_cond("stats: memory.limit is 256 MiB, memory.current null (Modal has none)",
              json_integer_value(json_object_get(mem, "limit")) == 256 * 1048576 &&
                  json_is_null(json_object_get(mem, "current")));
    test_cond(
        "stats: modal.memory_gib_seconds is half the core-seconds (0.25 GiB, 0.5 core)",
        fabs(json_number_value(json_object_get(json_object_get(res_of(r2), "modal"),
                                               "memory_gib_seconds")) /
                 u2 -
             0.5) < 0.01);
    json_decref(r1);
    json_decref(r2);
}

static void test_stats_stream(conn *c)
{
    json_t *r = call(c, "sandbox.stats", json_pack("{s:s, s:b}", "id", SB, "stream", 1));
    json_decref(r);
    int got = 0;
    for (double end = now_ms() + 12000; !got && now_ms() < end;) {
        json_t *m = cn_read(c, 1000);
        const char *meth = json_string_value(json_object_get(m, "method"));
        got = meth && !strcmp(meth, "sandbox.stats") &&
              json_number_value(json_object_get(
                  json_object_get(json_object_get(m, "params"), "cpu"), "usage_s")) > 0;
        json_decref(m);
    }
    test_cond("stats: stream sends sandbox.stats notifications with Modal's figures",
              got);
    json_decref(call(c, "sandbox.stats", json_pack("{s:s, s:b}", "id", SB, "stream", 0)));
}

/* ---- egress -------------------------------------------------------------------- */

/* sandbox.create of id with options.egress.allow = allow (stolen). */
static json_t *create_egress(conn *c, const char *id, json_t *allow)
{
    return call(c, "sandbox.create",
                json_pack("{s:s, s:s, s:{s:{s:o}}}", "id", id, "provider", "modal",
                          "options", "egress", "allow", allow));
}

static void test_egress_mapped(conn *c)
{
    json_t *r = create_egress(c, "mwe1",
                              json_pack("[s, s, s, s]", "pypi.org", "*.example.com",
                                        "203.0.113.0/25", "203.0.113.7"));
    test_cond("egress: an allow list inside the ceiling creates the sandbox",
              res_of(r) != NULL);
    json_decref(r);
    json_t *fs = fake_sandbox_of(c, "mwe1");
    json_t *na = json_object_get(fs, "network_access");
    json_t *want = json_pack("{s:i, s:[s, s], s:[s, s]}", "network_access_type", 3,
                             "allowed_cidrs", "203.0.113.0/25", "203.0.113.7",
                             "allowed_domains", "pypi.org", "*.example.com");
    test_cond("egress: Modal got NetworkAccess ALLOWLIST, CIDRs and domains apart",
              json_equal(na, want));
    if (!json_equal(na, want))
        printf("      got %s\n", json_dumps(na, JSON_COMPACT));
    json_decref(want);
    json_decref(fs);
    r = call(c, "sandbox.get", json_pack("{s:s}", "id", "mwe1"));
    json_t *m = json_object_get(json_object_get(res_of(r), "metadata"), "network_access");
    test_cond("egress: sandbox.get shows the network access",
              !strcmp(json_string_value(json_object_get(m, "type")), "allowlist"));
    json_decref(r);
    r = create_egress(c, "mwe2", json_array());
    fs = fake_sandbox_of(c, "mwe2");
    test_cond("egress: allow [] is NetworkAccess BLOCKED",
              res_of(r) && json_integer_value(
                               json_object_get(json_object_get(fs, "network_access"),
                                               "network_access_type")) == 2);
    json_decref(fs);
    json_decref(r);
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mwe1")));
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mwe2")));
}

static void test_egress_refused(conn *c)
{
    static const struct {
        const char *entry;
        int code;
        const char *reason; /* data.reason of a -32003 */
        const char *what;
    } cases[] = {
        {"pypi.org:443", -32602, NULL, "host:port (Modal filters no ports) is -32602"},
        {"evil.example.org", -32003, "ceiling", "a name beyond the ceiling is -32003"},
        {"203.0.0.0/16", -32003, "ceiling", "a CIDR wider than the ceiling's is -32003"},
        {"10.1.2.0/24", -32003, "private",
         "a private range inside the ceiling is -32003 (private)"},
        {"not a host!", -32602, NULL, "a malformed entry is -32602"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *r = create_egress(c, "mwe3", json_pack("[s]", cases[i].entry));
        char name[128];
        snprintf(name, sizeof(name), "egress: %s", cases[i].what);
        const char *why = json_string_value(json_object_get(err_data(r), "reason"));
        int ok = err_code(r) == cases[i].code &&
                 (!cases[i].reason || (why && !strcmp(why, cases[i].reason)));
        test_cond(name, ok);
        if (!ok)
            printf("      %s: %d %s\n", cases[i].entry, err_code(r), err_msg(r));
        json_decref(r);
    }
    json_t *many = json_array();
    for (int i = 0; i < 101; i++)
        json_array_append_new(many, json_string("pypi.org"));
    json_t *r = create_egress(c, "mwe3", many);
    test_cond("egress: more than 100 entries is -32005 (Modal's limit)",
              err_code(r) == -32005);
    json_decref(r);
}

/* ---- ownership and the fake's log ------------------------------------------------- */

static void test_cross_uid(int pid, int port)
{
    if (getuid() != 0) {
        test_skip("another uid's Modal sandbox is -32000 for every issue 18 method",
                  "needs root to switch uid");
        return;
    }
    int a = pt_code_as_uid(4321, SOCK, "process.resize",
                           json_pack("{s:s, s:i, s:i, s:i}", "sandbox", SB, "pid", pid,
                                     "cols", 90, "rows", 20));
    int b = pt_code_as_uid(4321, SOCK, "sandbox.stats", json_pack("{s:s}", "id", SB));
    int d = pt_code_as_uid(4321, SOCK, "sandbox.expose",
                           json_pack("{s:s, s:i}", "id", SB, "port", port));
    int e = pt_code_as_uid(4321, SOCK, "sandbox.unexpose",
                           json_pack("{s:s, s:i}", "id", SB, "port", port));
    int f = pt_code_as_uid(
        4321, SOCK, "process.exec",
        json_pack("{s:s, s:s, s:b}", "sandbox", SB, "command", "tty", "pty", 1));
    printf("      resize %d, stats %d, expose %d, unexpose %d, exec pty %d\n", a, b, d, e,
           f);
    test_cond("another uid: resize, stats, expose, unexpose, pty exec are all -32000",
              a == -32000 && b == -32000 && d == -32000 && e == -32000 && f == -32000);
}

/* Every call of method in the fake's log came from sbxd (its user-agent). */
static int calls_by_sbxd(const char *method)
{
    char path[128];
    snprintf(path, sizeof(path), "/calls?method=%s", method);
    json_t *all = pt_http_json(CPORT, "GET", path, NULL), *e;
    size_t i;
    int n = 0, ok = 1;
    json_array_foreach(all, i, e) {
        const char *cl = json_string_value(json_object_get(e, "client"));
        n++;
        ok &= cl && !strncmp(cl, "sbxd/", 5) &&
              json_integer_value(json_object_get(e, "code")) == 0;
    }
    json_decref(all);
    return n > 0 && ok ? n : 0;
}

static void test_log(void)
{
    int t = calls_by_sbxd("SandboxGetTunnelsV2") + calls_by_sbxd("SandboxGetTunnels");
    int u = calls_by_sbxd("SandboxGetResourceUsage");
    printf("      the fake saw %d tunnel lookups and %d resource usage calls from sbxd\n",
           t, u);
    test_cond("the fake's log: sbxd asked SandboxGetTunnels and SandboxGetResourceUsage",
              t > 0 && u >= 2);
}

/* ---- adoption by a restarted sbxd --------------------------------------------- */

/* base's lines but its egress and state_file, then state_file and egress_line, into out.
 */
static int adopt_cfg(const char *base, const char *out, const char *state,
                     const char *egress_line)
{
    FILE *in = fopen(base, "r"), *o = fopen(out, "w");
    char line[1024];
    while (in && o && fgets(line, sizeof(line), in))
        if (strncmp(line, "    egress:", 11) != 0 &&
            strncmp(line, "    state_file:", 15) != 0)
            fputs(line, o);
    if (o)
        fprintf(o, "    state_file: %s\n    %s\n", state, egress_line);
    int ok = in && o;
    if (in)
        fclose(in);
    if (o)
        fclose(o);
    return ok ? 0 : -1;
}

static pid_t adopt_sbxd(const char *prefix, const char *cfg, const char *sock)
{
    char cmd[1024], logp[600];
    snprintf(cmd, sizeof(cmd), "exec %s -c %s --log-level debug", prefix, cfg);
    snprintf(logp, sizeof(logp), "%s.log", sock);
    unlink(sock);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("SBXD_SOCKET", sock, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 400 && stat(sock, &st) != 0; i++)
        usleep(50000);
    return pid;
}

static void adopt_stop(pid_t pid)
{
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* sandbox.expose until the tunnels are known (an adoption fetches them). */
static json_t *expose_retry(conn *c, const char *id, int port)
{
    json_t *r = NULL;
    for (int i = 0; i < 100; i++) {
        json_decref(r);
        r = call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", id, "port", port));
        if (err_code(r) != -32006 && err_code(r) != -32000)
            break;
        usleep(100000);
    }
    return r;
}

static void test_adopt(const char *prefix, const char *base, const char *tmp, int port)
{
    char cfg1[600], cfg2[600], state[600], sock[200];
    snprintf(cfg1, sizeof(cfg1), "%s/ws-adopt1.yaml", tmp);
    snprintf(cfg2, sizeof(cfg2), "%s/ws-adopt2.yaml", tmp);
    snprintf(state, sizeof(state), "%s/ws-adopt.state.json", tmp);
    snprintf(sock, sizeof(sock), "%s/ws-adopt.sock", tmp);
    adopt_cfg(base, cfg1, state, "egress: {allow: [\"203.0.113.0/24\"]}");
    adopt_cfg(base, cfg2, state, "egress: {allow: [\"pypi.org\"]}");
    pid_t pid = adopt_sbxd(prefix, cfg1, sock);
    conn *c = cn_open(sock);
    json_t *r =
        c ? call(c, "sandbox.create",
                 json_pack("{s:s, s:s, s:{s:[{s:i, s:b}], s:{s:[s]}}}", "id", "mwa",
                           "provider", "modal", "options", "ports", "port", port,
                           "unencrypted", 1, "egress", "allow", "203.0.113.0/24"))
          : NULL;
    json_decref(r);
    r = c ? call(c, "sandbox.expose", json_pack("{s:s, s:i}", "id", "mwa", "port", port))
          : NULL;
    int before = (int)res_int(r, "host_port");
    json_decref(r);
    if (c)
        cn_close(c);
    adopt_stop(pid);
    pid = adopt_sbxd(prefix, cfg2, sock); /* the ceiling no longer covers it */
    c = cn_open(sock);
    r = c ? expose_retry(c, "mwa", port) : NULL;
    int after = (int)res_int(r, "host_port");
    json_decref(r);
    r = c ? call(c, "sandbox.get", json_pack("{s:s}", "id", "mwa")) : NULL;
    json_t *na =
        json_object_get(json_object_get(res_of(r), "metadata"), "network_access");
    printf("      tunnel port %d before, %d after the restart\n", before, after);
    test_cond("adoption: a restarted sbxd (narrower ceiling) keeps the sandbox, its "
              "tunnel and egress list",
              before > 0 && after == before &&
                  !strcmp(json_string_value(
                              json_array_get(json_object_get(na, "allowed_cidrs"), 0)),
                          "203.0.113.0/24"));
    json_decref(r);
    if (c) {
        json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mwa")));
        cn_close(c);
    }
    adopt_stop(pid);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ptest_modal_ws SOCKET CONTROL_PORT CA_FILE\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    SOCK = argv[1];
    CPORT = atoi(argv[2]);
    CA = argv[3];
    conn *c = cn_open(SOCK), *c2 = cn_open(SOCK);
    test_cond("sbxd answers", c && c2);
    if (!c || !c2)
        return test_report();
    int eport = free_port(), tport = free_port();
    json_t *r = call(c, "sandbox.create",
                     json_pack("{s:s, s:s, s:{s:[i, {s:i, s:b}], s:f, s:i}}", "id", SB,
                               "provider", "modal", "options", "ports", eport, "port",
                               tport, "unencrypted", 1, "cpu", 0.5, "memory_mb", 256));
    test_cond("a Modal sandbox with two declared ports", res_of(r) != NULL);
    if (!res_of(r))
        printf("      %s\n", err_msg(r));
    json_decref(r);
    test_pty_exec(c);
    test_pty_spawn(c);
    int spid = start_server(c, eport, tport);
    test_expose_tcp(c, tport);
    test_expose_tls(c, c2, eport);
    test_expose_refusals(c, tport);
    test_expose_after_restart(c, tport);
    test_stats(c);
    test_stats_stream(c2);
    test_egress_mapped(c);
    test_egress_refused(c);
    test_cross_uid(spid, tport);
    test_log();
    const char *prefix = getenv("PTEST_WS_SBXD"), *base = getenv("PTEST_WS_CFG"),
               *tmp = getenv("PTEST_TMP");
    if (prefix && base && tmp)
        test_adopt(prefix, base, tmp, free_port());
    else
        test_skip("adoption keeps tunnels and egress", "PTEST_WS_SBXD/CFG/TMP not set");
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", SB)));
    cn_close(c);
    cn_close(c2);
    return test_report();
}
