/*
 * ptest_docker_net.c - who may expose what, and the egress proxy's IPv6 and
 * lookup bounds (issue 18, part 2), on a real Docker engine:
 *   - policy grants for sandbox.expose: host addresses (127.0.0.2, ::1),
 *     host ports below 1024, a rule's expose: false, per-sandbox connection
 *     and byte bounds counted in sandbox.stats;
 *   - expose on a Unix socket only the owner can open, listed, removed;
 *   - IPv6 literals through the proxy (CONNECT [..], http://[::1]:P/) and
 *     every spelling of loopback/private refused;
 *   - lookups bounded per uid: uid A floods slow names, uid B still
 *     resolves (sbxd in a network namespace of ours whose DNS server is a
 *     black hole on a dummy interface: nothing leaves the machine).
 * Every new param is also tried by another uid on a sandbox not its own.
 *
 *   ptest_docker_net SBXD BUILD_DIR TMPDIR     (tests/providers/docker_net.sh)
 */
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "dk_kit.h"
#include "itest.h"
#include "testhelp.h"

#define UA 4242 /* granted addresses, low host ports, more bytes */
#define UB 4444 /* no rule: the config's defaults */
#define UC 4343 /* a rule's expose: false */

static const char *sbxd_bin, *bdir, *tmpdir, *docker_host;
static char sock[108], cfg[512], log_path[512];
static char sa[32], sbb[32], sc[32]; /* the sandboxes of UA, UB, UC */

/* ---- helpers ---------------------------------------------------------------------- */

static void show(const char *what, json_t *r)
{
    char *s = json_dumps(r, JSON_COMPACT);
    printf("      %s -> %.600s\n", what, s ? s : "(null)");
    free(s);
}

static json_t *as(uid_t uid, const char *method, json_t *params)
{
    return pt_as_uid(uid, uid, sock, method, params, 120000);
}

static int code_as(uid_t uid, const char *method, json_t *params)
{
    json_t *r = as(uid, method, params);
    int code = r ? err_code(r) : 2;
    json_decref(r);
    return code;
}

static const char *err_option(json_t *r)
{
    const char *o = json_string_value(
        json_object_get(json_object_get(json_object_get(r, "error"), "data"), "option"));
    return o ? o : "";
}

/* Shell text cmd as uid (0: as we are); its stdout into out. The status. */
static int run_as(uid_t uid, const char *cmd, char *out, size_t max)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        if (uid && (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0))
            _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < max && (r = read(fds[0], out + n, max - n - 1)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static json_t *expose_as(uid_t uid, const char *id, const char *host, int host_port,
                         int unix_sock)
{
    json_t *p = json_pack("{s:s, s:i}", "id", id, "port", 8080);
    if (host)
        json_object_set_new(p, "host", json_string(host));
    if (host_port)
        json_object_set_new(p, "host_port", json_integer(host_port));
    if (unix_sock)
        json_object_set_new(p, "unix", json_true());
    return as(uid, "sandbox.expose", p);
}

static void unexpose_as(uid_t uid, const char *id)
{
    json_decref(
        as(uid, "sandbox.unexpose", json_pack("{s:s, s:i}", "id", id, "port", 8080)));
}

static json_t *ports_stats(uid_t uid, const char *id)
{
    json_t *r = as(uid, "sandbox.stats", json_pack("{s:s}", "id", id));
    json_t *p = json_incref(json_object_get(res_of(r), "ports"));
    json_decref(r);
    return p;
}

/* A sandbox of uid serving /www on 127.0.0.1:8080 inside (index + 3 MiB). */
static int web_sandbox(uid_t uid, const char *id)
{
    json_t *r = as(uid, "sandbox.create",
                   json_pack("{s:s, s:s}", "id", id, "provider", "docker"));
    int up = res_of(r) != NULL;
    if (!up)
        show("sandbox.create", r);
    json_decref(r);
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p /www && echo page-of-%s > /www/index.html && "
             "head -c 3145728 /dev/zero > /www/big",
             id);
    r = as(uid, "process.exec", json_pack("{s:s, s:s}", "sandbox", id, "command", cmd));
    up &= res_int(r, "exit_code") == 0;
    json_decref(r);
    r = as(uid, "process.spawn",
           json_pack("{s:s, s:s}", "sandbox", id, "command",
                     "exec httpd -f -p 127.0.0.1:8080 -h /www"));
    up &= res_int(r, "pid") > 0;
    json_decref(r);
    return up;
}

static int fetch_has(uid_t uid, const char *url_args, const char *want)
{
    char cmd[700], buf[4096];
    snprintf(cmd, sizeof(cmd), "curl -s -g --max-time 20 %s", url_args);
    run_as(uid, cmd, buf, sizeof(buf));
    return strstr(buf, want) != NULL;
}

/* ---- sbxd ------------------------------------------------------------------------- */

static void write_config(void)
{
    FILE *f = fopen(cfg, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "providers:\n"
            "  docker:\n"
            "    host: %s\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    network: none\n"
            "    memory: 256m\n"
            "    pids_limit: 128\n"
            "    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n"
            "    labels:\n      org.sbxd.managed: \"true\"\n"
            "    expose_max_connections: 3\n"
            "    expose_max_bytes: 1m\n"
            "    policy:\n"
            "      rules:\n"
            "        - users: [%d]\n"
            "          expose: {addresses: [\"127.0.0.2\", \"::1\"], host_ports: "
            "[\"1000-1023\"], max_bytes: 64m}\n"
            "        - users: [%d]\n"
            "          expose: false\n",
            docker_host, bdir, UA, UC);
    fclose(f);
}

/* ---- expose: addresses and host ports ------------------------------------------- */

static void test_expose_addresses(void)
{
    char url[200], want[64];
    snprintf(want, sizeof(want), "page-of-%s", sa);
    json_t *r = expose_as(UA, sa, "127.0.0.2", 0, 0);
    int hp = (int)res_int(r, "host_port");
    test_cond("grants: uid A exposes on its granted 127.0.0.2",
              hp > 0 && !strcmp(res_str(r, "host"), "127.0.0.2"));
    if (hp <= 0)
        show("expose 127.0.0.2", r);
    json_decref(r);
    snprintf(url, sizeof(url), "http://127.0.0.2:%d/", hp);
    test_cond("grants: the page comes through 127.0.0.2", fetch_has(0, url, want));
    r = expose_as(UB, sbb, "127.0.0.2", 0, 0);
    test_cond("grants: uid B (no rule) may not use 127.0.0.2 (-32003 expose.host)",
              err_code(r) == -32003 && !strcmp(err_option(r), "expose.host"));
    json_decref(r);
    unexpose_as(UA, sa);

    r = expose_as(UA, sa, "::1", 0, 0);
    hp = (int)res_int(r, "host_port");
    test_cond("grants: uid A exposes on ::1, url in brackets",
              hp > 0 && strstr(res_str(r, "url"), "http://[::1]:") != NULL);
    json_decref(r);
    snprintf(url, sizeof(url), "http://[::1]:%d/", hp);
    test_cond("grants: the page comes through [::1]", fetch_has(0, url, want));
    unexpose_as(UA, sa);
    test_eq_int("grants: a host name instead of an address is -32602",
                code_as(UA, "sandbox.expose",
                        json_pack("{s:s, s:i, s:s}", "id", sa, "port", 8080, "host",
                                  "localhost")),
                -32602);

    int low = 1000 + (int)(getpid() % 24);
    r = expose_as(UA, sa, NULL, low, 0);
    test_eq_int("grants: uid A gets a host port below 1024 (granted range)",
                (int)res_int(r, "host_port"), low);
    json_decref(r);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", low);
    test_cond("grants: the page comes through the low port", fetch_has(0, url, want));
    unexpose_as(UA, sa);
    r = expose_as(UB, sbb, NULL, low, 0);
    test_cond("grants: uid B may not ask for a port below 1024 (expose.host_port)",
              err_code(r) == -32003 && !strcmp(err_option(r), "expose.host_port"));
    json_decref(r);
    r = expose_as(UC, sc, NULL, 0, 0);
    test_cond("grants: a rule's expose: false refuses uid C (-32003 expose)",
              err_code(r) == -32003 && !strcmp(err_option(r), "expose"));
    json_decref(r);
    r = expose_as(UC, sc, NULL, 0, 1);
    test_eq_int("grants: ... a Unix socket too", err_code(r), -32003);
    json_decref(r);
}

static void test_cross_uid(void)
{
    json_t *r = expose_as(UB, sa, "127.0.0.2", 0, 0);
    test_eq_int("cross-uid: expose {host} on another uid's sandbox is -32000",
                err_code(r), -32000);
    json_decref(r);
    r = expose_as(UB, sa, NULL, 0, 1);
    test_eq_int("cross-uid: expose {unix} on another uid's sandbox is -32000",
                err_code(r), -32000);
    json_decref(r);
    r = expose_as(UB, sa, NULL, 1001, 0);
    test_eq_int("cross-uid: expose {host_port} on another uid's sandbox is -32000",
                err_code(r), -32000);
    json_decref(r);
    test_eq_int(
        "cross-uid: unexpose of another uid's port is -32000",
        code_as(UB, "sandbox.unexpose", json_pack("{s:s, s:i}", "id", sa, "port", 8080)),
        -32000);
    test_eq_int("cross-uid: stats (ports) of another uid's sandbox is -32000",
                code_as(UB, "sandbox.stats", json_pack("{s:s}", "id", sa)), -32000);
}

/* ---- expose on a Unix socket ------------------------------------------------------ */

static int listed_unix(uid_t uid, const char *id, const char *path)
{
    json_t *r = as(uid, "sandbox.get", json_pack("{s:s}", "id", id));
    int found = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(json_object_get(res_of(r), "metadata"), "ports"),
                       i, e)
        found |= json_is_string(json_object_get(e, "unix")) &&
                 !strcmp(json_string_value(json_object_get(e, "unix")), path);
    json_decref(r);
    return found;
}

/* sbxctl port-forward --keep --unix, as the owner: the path it prints serves. */
static void test_sbxctl_unix(void)
{
    char cmd[700], out[1024], path[300] = "", args[400], want[64];
    snprintf(want, sizeof(want), "page-of-%s", sa);
    snprintf(cmd, sizeof(cmd), "%s/sbxctl -s %s port-forward --keep --unix %s 8080", bdir,
             sock, sa);
    int st = run_as(UA, cmd, out, sizeof(out));
    const char *q = strstr(out, "Forwarding from ");
    if (q)
        sscanf(q + 16, "%299s", path);
    test_cond("sbxctl port-forward --unix: prints the socket's path",
              st == 0 && path[0] == '/' && strstr(out, "unix://"));
    if (!path[0])
        printf("      sbxctl said: %.300s\n", out);
    snprintf(args, sizeof(args), "--unix-socket %s http://sandbox/", path);
    test_cond("sbxctl port-forward --unix: the page comes through it",
              path[0] && fetch_has(UA, args, want));
    unexpose_as(UA, sa);
}

static void test_expose_unix(void)
{
    char path[256] = "", args[400], want[64], dir[256];
    snprintf(want, sizeof(want), "page-of-%s", sa);
    json_t *r = expose_as(UA, sa, NULL, 0, 1);
    const char *p = json_string_value(json_object_get(res_of(r), "unix"));
    if (p)
        snprintf(path, sizeof(path), "%s", p);
    test_cond("unix: expose {unix: true} answers a path, url unix://",
              p && strstr(res_str(r, "url"), "unix://") &&
                  !strcmp(res_str(r, "host"), "unix"));
    if (!p)
        show("expose unix", r);
    json_decref(r);
    struct stat st = {0}, dst = {0};
    snprintf(dir, sizeof(dir), "%s", path);
    if (strrchr(dir, '/'))
        *strrchr(dir, '/') = '\0';
    test_cond("unix: the socket is the owner's, mode 0600",
              lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == UA &&
                  (st.st_mode & 0777) == 0600);
    test_cond("unix: its directory is the owner's, mode 0700",
              lstat(dir, &dst) == 0 && dst.st_uid == UA && (dst.st_mode & 0777) == 0700);
    snprintf(args, sizeof(args), "--unix-socket %s http://sandbox/", path);
    test_cond("unix: the owner fetches the page through it", fetch_has(UA, args, want));
    test_cond("unix: another uid cannot connect", !fetch_has(UB, args, want));
    test_cond("unix: sandbox.get lists it", listed_unix(UA, sa, path));
    r = expose_as(UA, sa, "127.0.0.1", 0, 1);
    test_eq_int("unix: with a host it is -32602", err_code(r), -32602);
    json_decref(r);
    unexpose_as(UA, sa);
    test_cond("unix: unexpose removes the socket file", access(path, F_OK) != 0);
    r = expose_as(UA, sa, NULL, 0, 1);
    json_decref(r);
    test_cond("unix: exposed again for the destroy check", access(path, F_OK) == 0);
    json_decref(as(UA, "sandbox.destroy", json_pack("{s:s}", "id", sa)));
    test_cond("unix: destroying the sandbox removes the socket file",
              access(path, F_OK) != 0);
}

/* ---- expose: per-sandbox bounds (uid B: the config's 3 connections, 1 MiB) -------- */

static int tcp_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when the peer closes fd within ms without a byte. */
static int closed_at_once(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char b;
    return poll(&p, 1, ms) == 1 && read(fd, &b, 1) <= 0;
}

static void test_expose_bounds(void)
{
    char url[200], cmd[300], buf[256], want[64];
    snprintf(want, sizeof(want), "page-of-%s", sbb);
    json_t *r = expose_as(UB, sbb, NULL, 0, 0);
    int hp = (int)res_int(r, "host_port");
    json_decref(r);
    int held[3];
    for (int i = 0; i < 3; i++)
        held[i] = tcp_to(hp);
    usleep(500000);
    int fourth = tcp_to(hp);
    test_cond("bounds: a 4th connection past expose_max_connections 3 is closed at once",
              fourth >= 0 && closed_at_once(fourth, 3000));
    close(fourth);
    for (int i = 0; i < 3; i++)
        close(held[i]);
    usleep(500000);
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", hp);
    test_cond("bounds: once they close a new client is served", fetch_has(0, url, want));
    json_t *ps = ports_stats(UB, sbb);
    test_cond("bounds: stats count the refusal and show max_connections 3",
              json_integer_value(json_object_get(ps, "refused")) >= 1 &&
                  json_integer_value(json_object_get(ps, "max_connections")) == 3);
    json_decref(ps);

    snprintf(cmd, sizeof(cmd),
             "curl -s --max-time 20 -o /dev/null -w '%%{size_download}' "
             "http://127.0.0.1:%d/big",
             hp);
    run_as(0, cmd, buf, sizeof(buf));
    long got = atol(buf);
    test_cond("bounds: a 3 MiB download stops near expose_max_bytes 1 MiB",
              got > 0 && got < 3145728 && got <= (2 << 20));
    if (!(got > 0 && got < 3145728))
        printf("      downloaded %ld bytes\n", got);
    test_cond("bounds: past the bytes a new client is refused", !fetch_has(0, url, want));
    ps = ports_stats(UB, sbb);
    test_cond("bounds: stats count the bytes (>= 1 MiB) and the refusals",
              json_integer_value(json_object_get(ps, "bytes")) >= (1 << 20) &&
                  json_integer_value(json_object_get(ps, "refused")) >= 2 &&
                  json_integer_value(json_object_get(ps, "max_bytes")) == (1 << 20));
    if (!ps)
        printf("      no ports in stats\n");
    json_decref(ps);
    unexpose_as(UB, sbb);
}

/* ---- egress: IPv6 literals -------------------------------------------------------- */

static json_t *egress_sandbox(conn *c, const char *id, const char *allow_json)
{
    char opts[300];
    snprintf(opts, sizeof(opts), "{\"egress\": {\"allow\": %s}}", allow_json);
    return cn_call_t(c, 120000, "sandbox.create",
                     json_pack("{s:s, s:s, s:o}", "id", id, "provider", "docker",
                               "options", json_loads(opts, 0, NULL)));
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *q = hay; (q = strstr(q, needle)); q++)
        n++;
    return n;
}

static void test_egress_v6_refused(void)
{
    char osock[108], id[32], cmd[1200];
    pid_t e = dk_start_other(tmpdir, bdir, docker_host, "v6a",
                             "    egress:\n      allow: [\"*\"]\n", osock, sizeof(osock));
    conn *c = dk_connect_ready(osock);
    snprintf(id, sizeof(id), "v6a%d", (int)getpid());
    json_t *r = egress_sandbox(c, id, "[\"*\", \"[::1]:8443\"]");
    test_cond("egress v6: a sandbox allowing * and [::1]:8443 starts", res_of(r) != NULL);
    if (!res_of(r))
        show("create", r);
    json_decref(r);
    /* Nine spellings of loopback or private networks, all allowed by the list:
     * each resolves to an address sbxd refuses (no connection is made). */
    snprintf(
        cmd, sizeof(cmd),
        "for t in '[::1]:443' '[::ffff:127.0.0.1]:443' '[::ffff:7f00:1]:443' "
        "'[64:ff9b::7f00:1]:443' '[fe80::1]:443' '[fd00::1]:443' "
        "'[::127.0.0.1]:443' '[2002:7f00:1::1]:443' '[::1]:8443'; do "
        "printf \"CONNECT $t HTTP/1.1\\r\\n\\r\\n\" | nc 127.0.0.1 3128 | head -1; done; "
        "printf 'CONNECT ::1:443 HTTP/1.1\\r\\n\\r\\n' | nc 127.0.0.1 3128 | head -1");
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", id, "command", cmd));
    const char *out = res_str(r, "stdout");
    test_eq_int("egress v6: loopback, v4-mapped, NAT64, link-local, ULA, 6to4 all 403",
                count_of(out, " 403 "), 9);
    test_eq_int("egress v6: an IPv6 literal without brackets is a 400",
                count_of(out, " 400 "), 1);
    if (count_of(out, " 403 ") != 9)
        show("CONNECTs", r);
    json_decref(r);
    usleep(300000);
    int notes = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        const char *h =
            json_string_value(json_object_get(json_object_get(m, "params"), "host"));
        notes += h && !strcmp(h, "::ffff:127.0.0.1");
    }
    test_cond("egress v6: the refusal of ::ffff:127.0.0.1 is a sandbox.egress note",
              notes >= 1);
    json_decref(cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", id)));
    cn_close(c);
    dk_sbxd_stop(e, SIGTERM, 10000);
}

static void test_egress_v6_allowed(void)
{
    char www[600], cmd[700], extra[400], osock[108], id[32], allow[80];
    snprintf(www, sizeof(www), "%s/v6-www", tmpdir);
    mkdir(www, 0755);
    snprintf(cmd, sizeof(cmd), "echo egress-v6-ok > %s/index.html", www);
    int port = 20000 + (int)(getpid() % 20000);
    if (system(cmd) != 0 || access("/usr/bin/busybox", X_OK) != 0) {
        test_skip("egress v6 to [::1]", "no busybox on the host for the server");
        return;
    }
    pid_t h = fork();
    if (h == 0) {
        char addr[40];
        snprintf(addr, sizeof(addr), "[::1]:%d", port);
        execl("/usr/bin/busybox", "busybox", "httpd", "-f", "-p", addr, "-h", www,
              (char *)NULL);
        _exit(127);
    }
    snprintf(
        extra, sizeof(extra),
        "    egress:\n      allow: [\"[::1]:%d\"]\n      allow_private_addresses: true\n",
        port);
    pid_t e =
        dk_start_other(tmpdir, bdir, docker_host, "v6b", extra, osock, sizeof(osock));
    conn *c = dk_connect_ready(osock);
    snprintf(id, sizeof(id), "v6b%d", (int)getpid());
    json_t *r = egress_sandbox(c, id, "[\"[::2]:80\"]");
    test_eq_int("egress v6: [::2]:80 beyond a [::1]:P ceiling is -32003", err_code(r),
                -32003);
    json_decref(r);
    snprintf(allow, sizeof(allow), "[\"[0::1]:%d\"]", port);
    r = egress_sandbox(c, id, allow);
    json_decref(r);
    snprintf(
        cmd, sizeof(cmd),
        "printf 'GET http://[::1]:%d/index.html HTTP/1.0\\r\\n\\r\\n' | "
        "nc 127.0.0.1 3128; "
        "printf 'CONNECT [::1]:%d HTTP/1.1\\r\\n\\r\\nGET /index.html HTTP/1.0\\r\\n\\r\\n'"
        " | nc 127.0.0.1 3128; "
        "printf 'CONNECT [::1]:%d HTTP/1.1\\r\\n\\r\\n' | nc 127.0.0.1 3128 | head -1",
        port, port, port + 1);
    r = cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", id, "command", cmd));
    const char *out = res_str(r, "stdout");
    test_eq_int("egress v6: GET http://[::1]:P/ and CONNECT [::1]:P both reach the "
                "host server (allowed as [0::1]:P)",
                count_of(out, "egress-v6-ok"), 2);
    test_cond("egress v6: another port of ::1 is 403", strstr(out, " 403 ") != NULL);
    if (count_of(out, "egress-v6-ok") != 2)
        show("v6 fetch", r);
    json_decref(r);
    json_decref(cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", id)));
    cn_close(c);
    dk_sbxd_stop(e, SIGTERM, 10000);
    kill(h, SIGTERM);
    waitpid(h, NULL, 0);
}

/* ---- egress: lookups bounded per uid, in a network namespace of ours ----------- */

static const char *self_exe;

/* The DNS server of the namespace: takes queries, answers none. */
static int dns_black_hole(void)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(53)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        return 1;
    char b[1500];
    for (;;)
        if (recv(fd, b, sizeof(b), 0) < 0)
            return 0;
}

/* sbxd in a new network and mount namespace: lo only, the black hole as its
 * resolver (3 s timeout), fast.test -> 127.0.0.1 in its /etc/hosts and a
 * web server there. Written as scripts the kit runs instead of sbxd. */
static int write_netns_wrapper(char *wrapper, size_t cap, int web_port)
{
    char p[700], www[400];
    FILE *f;
    snprintf(www, sizeof(www), "%s/lk-www", tmpdir);
    mkdir(www, 0755);
    snprintf(p, sizeof(p), "%s/index.html", www);
    if (!(f = fopen(p, "w")))
        return -1;
    fputs("lookups-ok\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/lk-resolv.conf", tmpdir);
    f = fopen(p, "w");
    fputs("nameserver 127.0.0.1\noptions timeout:3 attempts:1\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/lk-hosts", tmpdir);
    f = fopen(p, "w");
    fputs("127.0.0.1 localhost fast.test\n", f);
    fclose(f);
    snprintf(p, sizeof(p), "%s/lk-inner.sh", tmpdir);
    f = fopen(p, "w");
    fprintf(f,
            "ip link set lo up || exit 97\n"
            "mount --bind %s/lk-resolv.conf /etc/resolv.conf || exit 98\n"
            "mount --bind %s/lk-hosts /etc/hosts || exit 98\n"
            "%s --dns-black-hole & d=$!\n"
            "busybox httpd -f -p 127.0.0.1:%d -h %s & h=$!\n"
            "%s \"$@\" & s=$!\n"
            "trap 'kill -TERM $s; wait $s; kill $h $d' TERM INT\n"
            "wait $s\nkill $h $d 2>/dev/null\n",
            tmpdir, tmpdir, self_exe, web_port, www, sbxd_bin);
    fclose(f);
    snprintf(wrapper, cap, "%s/lk-sbxd.sh", tmpdir);
    f = fopen(wrapper, "w");
    fprintf(f, "#!/bin/sh\nexec unshare --net --mount /bin/sh %s \"$@\"\n", p);
    fclose(f);
    return chmod(wrapper, 0755);
}

/* As uid A (a child): floods sandbox id with 10 slow names at once; writes
 * "503s notes" to fd: the 503 answers and the notifications naming the
 * per-uid bound. */
static void flood_as_a(const char *osock, const char *id, int fd)
{
    if (setgroups(0, NULL) < 0 || setgid(UA) < 0 || setuid(UA) < 0)
        _exit(3);
    conn *c = cn_open(osock);
    if (!c)
        _exit(2);
    json_t *r = cn_call_t(
        c, 60000, "process.exec",
        json_pack("{s:s, s:s}", "sandbox", id, "command",
                  "for i in 1 2 3 4 5 6 7 8 9 10; do (printf \"CONNECT n$i.slow.test:443 "
                  "HTTP/1.1\\r\\n\\r\\n\" | nc 127.0.0.1 3128 >/tmp/f$i 2>&1 &); done; "
                  "sleep 2; cat /tmp/f* | grep -c ' 503 '"));
    int n503 = atoi(res_str(r, "stdout")), notes = 0;
    json_decref(r);
    double end = now_ms() + 500;
    for (int left; (left = (int)(end - now_ms())) > 0;) {
        json_t *m = cn_read(c, left);
        if (!m)
            break;
        json_array_append_new(c->notes, m);
    }
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        const char *l =
            json_string_value(json_object_get(json_object_get(m, "params"), "limit"));
        notes += l && !strcmp(l, "providers.docker.egress.lookups_per_uid");
    }
    dprintf(fd, "%d %d", n503, notes);
    _exit(0);
}

/* A's sandbox may ask for *.slow.test, B's for fast.test:web. 1 if both run. */
static int lk_sandboxes(const char *osock, const char *ida, const char *idb, int web)
{
    char cmd[64];
    json_t *ra =
        pt_as_uid(UA, UA, osock, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:{s:[s]}}}", "id", ida, "provider", "docker",
                            "options", "egress", "allow", "*.slow.test"),
                  120000);
    snprintf(cmd, sizeof(cmd), "fast.test:%d", web);
    json_t *rb = pt_as_uid(UB, UB, osock, "sandbox.create",
                           json_pack("{s:s, s:s, s:{s:{s:[s]}}}", "id", idb, "provider",
                                     "docker", "options", "egress", "allow", cmd),
                           120000);
    int up = res_of(ra) && res_of(rb);
    test_cond("lookups: sbxd in its own network namespace, a sandbox each for A and B",
              up);
    if (!up) {
        show("A's create", ra);
        show("B's create", rb);
    }
    json_decref(ra);
    json_decref(rb);
    return up;
}

static void test_egress_lookups(void)
{
    char wrapper[600], extra[500], osock[108], ida[32], idb[32], cmd[300], buf[64] = "";
    int web = 30000 + (int)(getpid() % 20000);
    if (getuid() != 0 || write_netns_wrapper(wrapper, sizeof(wrapper), web) < 0) {
        test_skip("egress lookups per uid", "needs root for a network namespace");
        return;
    }
    snprintf(extra, sizeof(extra),
             "    egress:\n      allow: [\"*.slow.test\", \"fast.test:%d\"]\n"
             "      allow_private_addresses: true\n      lookups_max: 8\n"
             "      lookups_per_uid: 4\n",
             web);
    dk_kit_init(wrapper, docker_host);
    pid_t e =
        dk_start_other(tmpdir, bdir, docker_host, "lk", extra, osock, sizeof(osock));
    dk_kit_init(sbxd_bin, docker_host);
    conn *c = dk_connect_ready(osock);
    snprintf(ida, sizeof(ida), "lka%d", (int)getpid());
    snprintf(idb, sizeof(idb), "lkb%d", (int)getpid());
    int up = c && lk_sandboxes(osock, ida, idb, web);
    int fds[2] = {-1, -1};
    pid_t fl = up && pipe(fds) == 0 ? fork() : -1;
    if (fl == 0) {
        close(fds[0]);
        flood_as_a(osock, ida, fds[1]);
    }
    if (fl > 0) {
        close(fds[1]);
        usleep(1000000); /* A's four lookups now wait on the black hole */
        snprintf(cmd, sizeof(cmd),
                 "printf 'GET http://fast.test:%d/index.html HTTP/1.0\\r\\n\\r\\n' | "
                 "nc 127.0.0.1 3128",
                 web);
        json_t *r =
            pt_as_uid(UB, UB, osock, "process.exec",
                      json_pack("{s:s, s:s}", "sandbox", idb, "command", cmd), 60000);
        test_cond("lookups: while uid A floods, uid B's name still resolves and loads",
                  strstr(res_str(r, "stdout"), "lookups-ok") != NULL);
        if (!strstr(res_str(r, "stdout"), "lookups-ok"))
            show("B's wget", r);
        json_decref(r);
        ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
        buf[n > 0 ? n : 0] = '\0';
        close(fds[0]);
        waitpid(fl, NULL, 0);
        int n503 = 0, notes = 0;
        sscanf(buf, "%d %d", &n503, &notes);
        test_eq_int(
            "lookups: A's 10 names: 4 resolve at once (lookups_per_uid), 6 get 503", n503,
            6);
        test_cond("lookups: A gets a sandbox.egress note naming lookups_per_uid",
                  notes >= 1);
        r = pt_as_uid(UA, UA, osock, "sandbox.stats", json_pack("{s:s}", "id", ida),
                      30000);
        test_eq_int("lookups: A's stats count the 6 limited requests",
                    (int)json_integer_value(
                        json_object_get(json_object_get(res_of(r), "egress"), "limited")),
                    6);
        json_decref(r);
    }
    json_decref(pt_as_uid(UA, UA, osock, "sandbox.destroy", json_pack("{s:s}", "id", ida),
                          60000));
    json_decref(pt_as_uid(UB, UB, osock, "sandbox.destroy", json_pack("{s:s}", "id", idb),
                          60000));
    if (c)
        cn_close(c);
    dk_sbxd_stop(e, SIGTERM, 10000);
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--dns-black-hole"))
        return dns_black_hole();
    static char exe[600];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    exe[n > 0 ? n : 0] = '\0';
    self_exe = exe;
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &docker_host);
    if (st)
        return st;
    chmod(tmpdir, 0755); /* the other uids reach the sockets */
    snprintf(sock, sizeof(sock), "%.90s/net.sock", tmpdir);
    snprintf(cfg, sizeof(cfg), "%s/net.yaml", tmpdir);
    snprintf(log_path, sizeof(log_path), "%s/sbxd-main.log", tmpdir);
    snprintf(sa, sizeof(sa), "na%d", (int)getpid());
    snprintf(sbb, sizeof(sbb), "nb%d", (int)getpid());
    snprintf(sc, sizeof(sc), "nc%d", (int)getpid());
    write_config();
    pid_t sbxd = dk_sbxd_start(cfg, sock, log_path, "debug");
    conn *c = dk_connect(sock, 5000);
    if (!c) {
        printf("sbxd did not start (log %s)\n0 passed, 1 failed\n", log_path);
        return 1;
    }
    dk_docker_up(c, 10000);
    int up = web_sandbox(UA, sa) && web_sandbox(UB, sbb) && web_sandbox(UC, sc);
    test_cond("three docker sandboxes (uids A, B, C) serve a page inside", up);
    usleep(300000);
    if (up) {
        DK_STEP(test_expose_addresses());
        DK_STEP(test_cross_uid());
        DK_STEP(test_expose_bounds());
        DK_STEP(test_sbxctl_unix());
        DK_STEP(test_expose_unix());
    }
    json_decref(as(UA, "sandbox.destroy", json_pack("{s:s}", "id", sa)));
    json_decref(as(UB, "sandbox.destroy", json_pack("{s:s}", "id", sbb)));
    json_decref(as(UC, "sandbox.destroy", json_pack("{s:s}", "id", sc)));
    cn_close(c);
    dk_sbxd_stop(sbxd, SIGTERM, 10000);
    DK_STEP(test_egress_v6_refused());
    DK_STEP(test_egress_v6_allowed());
    DK_STEP(test_egress_lookups());
    return test_report();
}
