/*
 * ptest_modal.c - the Modal provider through a real sbxd, against the fake
 * Modal control plane (tests/modal/fake/server.js), whose HTTP control port
 * shows what the provider really did (sandboxes, execs, calls) and injects
 * faults.
 *
 * usage: ptest_modal SOCKET CONTROL_PORT
 * Optional environment (set by tests/providers/modal.sh):
 *   PTEST_SBXD_CMD      shell command that execs an sbxd on the same fake
 *                       (SBXD_SOCKET is set by the test): reconnect after restart
 *   PTEST_TMP           a scratch folder
 *   PTEST_NOCRED_SOCK   sbxd whose modal section has no credentials
 *   PTEST_BADCRED_SOCK  sbxd with wrong credentials for a fake that checks them
 *   PTEST_DOWN_SOCK     sbxd whose server URL has nothing listening
 *   PTEST_SHORT_SOCK    sbxd on the same fake with retry_budget_ms 5000 (outages)
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "itest.h"
#include "testhelp.h"

#define LONG_MS 60000

static const char *SOCK;
static int CPORT;

/* ---- the fake's control endpoint (HTTP/1.1, one request per connection) ---- */

static char *dechunk(const char *b, size_t n, size_t *out_n)
{
    char *out = malloc(n + 1);
    size_t o = 0, i = 0;
    while (i < n) {
        size_t len = strtoul(b + i, NULL, 16);
        const char *nl = memchr(b + i, '\n', n - i);
        if (!nl || len == 0)
            break;
        i = (size_t)(nl - b) + 1;
        if (i + len > n)
            len = n - i;
        memcpy(out + o, b + i, len);
        o += len;
        i += len + 2;
    }
    out[o] = '\0';
    *out_n = o;
    return out;
}

/* Returns the parsed JSON body (new ref) or NULL. body is stolen. */
static json_t *ctl(const char *method, const char *path, json_t *body)
{
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)CPORT)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        free(b);
        return NULL;
    }
    char head[512];
    int hl = snprintf(head, sizeof(head),
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                      method, path, b ? strlen(b) : 0);
    if (send(fd, head, (size_t)hl, MSG_NOSIGNAL) < 0 ||
        (b && send(fd, b, strlen(b), MSG_NOSIGNAL) < 0)) {
        close(fd);
        free(b);
        return NULL;
    }
    free(b);
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    double deadline = now_ms() + 15000;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int left = (int)(deadline - now_ms());
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        if (cap - len < 4096)
            buf = realloc(buf, cap *= 2);
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    char *sep = strstr(buf, "\r\n\r\n");
    json_t *v = NULL;
    if (sep) {
        char *bodyp = sep + 4;
        size_t bl = len - (size_t)(bodyp - buf);
        if (strcasestr(buf, "transfer-encoding: chunked") &&
            strcasestr(buf, "transfer-encoding: chunked") < sep) {
            size_t n;
            char *d = dechunk(bodyp, bl, &n);
            v = json_loadb(d, n, 0, NULL);
            free(d);
        } else {
            v = json_loadb(bodyp, bl, 0, NULL);
        }
    }
    free(buf);
    return v;
}

static json_t *fake_sandbox(const char *modal_id)
{
    json_t *all = ctl("GET", "/sandboxes", NULL), *found = NULL;
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
        if (modal_id &&
            strcmp(json_string_value(json_object_get(s, "sandbox_id")), modal_id) == 0)
            found = json_incref(s);
    json_decref(all);
    return found;
}

/* The last exec whose argv, joined with spaces, contains needle. */
static json_t *fake_exec(const char *needle)
{
    json_t *all = ctl("GET", "/execs", NULL), *found = NULL;
    size_t i, j;
    json_t *e, *a;
    json_array_foreach(all, i, e) {
        char line[8192] = "";
        size_t o = 0;
        json_array_foreach(json_object_get(e, "command"), j, a) {
            o += (size_t)snprintf(line + o, o < sizeof(line) ? sizeof(line) - o : 0,
                                  "%s ", json_string_value(a));
            if (o >= sizeof(line))
                break;
        }
        if (strstr(line, needle)) {
            json_decref(found);
            found = json_incref(e);
        }
    }
    json_decref(all);
    return found;
}

static int calls_count(const char *method, int code)
{
    char path[128];
    snprintf(path, sizeof(path), "/calls?method=%s", method);
    json_t *all = ctl("GET", path, NULL);
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(all, i, c)
        if (code < 0 || json_integer_value(json_object_get(c, "code")) == code)
            n++;
    json_decref(all);
    return n;
}

/* ---- sbxd helpers ---------------------------------------------------------------- */

static const char *meta_str(json_t *resp, const char *k)
{
    const char *s =
        json_string_value(json_object_get(json_object_get(res_of(resp), "metadata"), k));
    return s ? s : "";
}

static json_int_t meta_int(json_t *resp, const char *k)
{
    return json_integer_value(
        json_object_get(json_object_get(res_of(resp), "metadata"), k));
}

static int meta_true(json_t *resp, const char *k)
{
    return json_is_true(json_object_get(json_object_get(res_of(resp), "metadata"), k));
}

static json_t *sb_get(conn *c, const char *id)
{
    return cn_call(c, "sandbox.get", json_pack("{s:s}", "id", id));
}

static char *modal_id_of(conn *c, const char *id)
{
    json_t *r = sb_get(c, id);
    char *s = strdup(meta_str(r, "sandbox_id"));
    json_decref(r);
    return s;
}

static json_t *run(conn *c, const char *sb, json_t *cmd, json_t *extra)
{
    json_t *p = json_pack("{s:s, s:o}", "sandbox", sb, "command", cmd);
    if (extra) {
        json_object_update(p, extra);
        json_decref(extra);
    }
    return cn_call_t(c, LONG_MS, "process.exec", p);
}

static json_t *sh(conn *c, const char *sb, const char *cmd)
{
    return run(c, sb, json_string(cmd), NULL);
}

static int out_is(json_t *resp, const char *want)
{
    const char *s = res_str(resp, "stdout");
    int ok = strcmp(s, want) == 0;
    if (!ok)
        printf("      stdout: \"%s\" (want \"%s\"), stderr: \"%s\", error: %s\n", s, want,
               res_str(resp, "stderr"),
               json_string_value(json_object_get(res_of(resp), "error"))
                   ? json_string_value(json_object_get(res_of(resp), "error"))
                   : (json_object_get(resp, "error")
                          ? json_dumps(json_object_get(resp, "error"), 0)
                          : "null"));
    return ok;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int pid_alive(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

static long read_long_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long v = 0;
    if (fscanf(f, "%ld", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

static void errmsg(json_t *resp)
{
    json_t *e = json_object_get(resp, "error");
    if (e) {
        char *s = json_dumps(e, JSON_COMPACT);
        printf("      error: %s\n", s);
        free(s);
    }
}

static int count_notes(conn *c, const char *method, const char *sandbox)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), method) == 0 &&
            (!sandbox ||
             strcmp(json_string_value(json_object_get(p, "sandbox")), sandbox) == 0))
            n++;
    }
    return n;
}

/* ---- the tests
 * ---------------------------------------------------------------------------- */

static void test_info(void)
{
    conn *c = cn_open(SOCK);
    json_t *r = cn_call(c, "daemon.info", NULL);
    int avail = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(res_of(r), "providers"), i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), "modal") == 0)
            avail = json_is_true(json_object_get(p, "available"));
    test_cond("daemon.info: modal is available with credentials", avail);
    json_decref(r);
    cn_close(c);
}

static void test_basics(conn *c)
{
    json_t *r =
        cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:s, s:s}, s:s, s:{s:f, s:i}}", "id", "m1",
                            "provider", "modal", "env", "A", "1", "B", "b", "working_dir",
                            "/work", "options", "cpu", 0.5, "memory_mb", 256));
    errmsg(r);
    test_eq_str("create: running", res_str(r, "status"), "running");
    test_cond("create: metadata has Modal's sandbox id, a V2 one (backend auto)",
              strncmp(meta_str(r, "sandbox_id"), "sbv2-", 5) == 0);
    test_cond("create: metadata app, image, timeout",
              strcmp(meta_str(r, "app"), "sbxd-test") == 0 &&
                  strcmp(meta_str(r, "image"), "ubuntu:22.04") == 0 &&
                  meta_int(r, "timeout_secs") == 300 &&
                  strncmp(meta_str(r, "image_id"), "im-", 3) == 0);
    test_cond("create: not a reconnect",
              !meta_true(r, "reconnected") &&
                  !json_is_true(json_object_get(res_of(r), "reconnected")));
    test_cond("create: image build progress notifications",
              count_notes(c, "sandbox.progress", "m1") >= 2);
    json_t *fs = fake_sandbox(meta_str(r, "sandbox_id"));
    json_t *res = json_object_get(fs, "resources");
    test_cond(
        "fake: named after the sbxd id, in app sbxd-test",
        strcmp(json_string_value(json_object_get(fs, "name")), "m1") == 0 &&
            strcmp(json_string_value(json_object_get(fs, "app_name")), "sbxd-test") == 0);
    test_cond("fake: workdir, cpu and memory requests, timeout",
              strcmp(json_string_value(json_object_get(fs, "workdir")), "/work") == 0 &&
                  json_integer_value(json_object_get(res, "milli_cpu")) == 500 &&
                  json_integer_value(json_object_get(res, "memory_mb")) == 256 &&
                  json_integer_value(json_object_get(fs, "timeout_secs")) == 300);
    test_cond("fake: env baked in as a secret",
              strcmp(json_string_value(json_object_get(json_object_get(fs, "env"), "A")),
                     "1") == 0 &&
                  json_array_size(json_object_get(fs, "secret_ids")) == 1);
    json_decref(fs);
    json_decref(r);

    size_t before = json_array_size(c->notes);
    r = sh(c, "m1", "echo hi");
    test_cond("exec echo hi: exit 0, stdout",
              res_int(r, "exit_code") == 0 && out_is(r, "hi\n"));
    int pid = (int)res_int(r, "pid");
    char buf[64];
    test_cond("exec: process.output notification",
              notes_output(c, pid, "stdout", buf, sizeof(buf)) == 3 &&
                  strcmp(buf, "hi\n") == 0 && json_array_size(c->notes) > before);
    json_decref(r);

    r = sh(c, "m1", "echo err >&2; printf out; exit 3");
    test_cond("exec: exit code and stderr",
              res_int(r, "exit_code") == 3 &&
                  strcmp(res_str(r, "stderr"), "err\n") == 0 && out_is(r, "out"));
    json_decref(r);

    r = run(c, "m1", json_pack("[s,s,s,s]", "printf", "%s-%s", "a b", "c"), NULL);
    test_cond("exec argv: no shell", res_int(r, "exit_code") == 0 && out_is(r, "a b-c"));
    json_decref(r);

    r = sh(c, "m1", "pwd");
    test_cond("cwd: the sandbox working_dir by default",
              ends_with(res_str(r, "stdout"), "/work\n"));
    json_decref(r);
    r = run(c, "m1", json_string("pwd"), json_pack("{s:s}", "cwd", "/tmp/x"));
    test_cond("cwd: the command's cwd wins", ends_with(res_str(r, "stdout"), "/tmp/x\n"));
    json_decref(r);

    r = sh(c, "m1", "echo \"$A|$B\"");
    test_cond("env: create-time env", out_is(r, "1|b\n"));
    json_decref(r);
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:s, s:n, s:s}}", "id", "m1", "env", "A", "2", "B",
                          "D", "d"));
    json_decref(r);
    r = run(c, "m1", json_string("echo \"$A|${B-unset}|$C|$D\""),
            json_pack("{s:{s:s}}", "env", "C", "3"));
    test_cond("env: runtime set_env over create env, null removes, command env on top",
              out_is(r, "2|unset|3|d\n"));
    json_decref(r);
    r = run(c, "m1", json_string("echo \"$A\""), json_pack("{s:{s:s}}", "env", "A", "4"));
    test_cond("env: the command's env wins", out_is(r, "4\n"));
    json_decref(r);
    r = cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:n, s:n}}", "id", "m1", "env", "A", "D"));
    json_decref(r);
}

static void test_stdin(conn *c)
{
    json_t *r = run(c, "m1", json_string("cat; echo ."),
                    json_pack("{s:s}", "stdin", "hello\nworld"));
    test_cond("stdin: exec with stdin, then EOF", out_is(r, "hello\nworld.\n"));
    json_decref(r);

    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "m1", "command", "cat"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    r = cn_call(c, "process.write",
                json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "data", "abc"));
    json_decref(r);
    r = cn_call(
        c, "process.write",
        json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "data_b64", "ZGVm"));
    json_decref(r);
    r = cn_call(c, "process.close_stdin",
                json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid));
    char buf[64] = "";
    notes_output(c, pid, "stdout", buf, sizeof(buf));
    test_cond("stdin: process.write + close_stdin reach the remote process",
              res_int(r, "exit_code") == 0 && strcmp(buf, "abcdef") == 0);
    json_decref(r);
}

static void test_output(conn *c)
{
    json_t *r = sh(c, "m1", "head -c 300000 /dev/zero | tr '\\0' a");
    const char *s = res_str(r, "stdout");
    size_t n = strlen(s), bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += s[i] != 'a';
    test_cond("output: 300 kB arrive intact", n == 300000 && bad == 0);
    json_decref(r);

    /* A stdio stream dropped mid-output (mid-line: after 200 bytes) resumes at its
     * byte offset: every line once, in order. */
    json_t *f = ctl("POST", "/fault",
                    json_pack("{s:i, s:i}", "drop_stdio_after_bytes", 200, "fd", 1));
    json_decref(f);
    int broken_before = calls_count("TaskExecStdioRead", 14);
    r = sh(c, "m1",
           "i=1; while [ $i -le 120 ]; do echo line$i; "
           "[ $((i % 8)) = 0 ] && sleep 0.03; i=$((i+1)); done");
    char want[4096] = "";
    size_t o = 0;
    for (int i = 1; i <= 120; i++)
        o += (size_t)snprintf(want + o, sizeof(want) - o, "line%d\n", i);
    test_cond("output: broken stream resumed without loss or duplication",
              res_int(r, "exit_code") == 0 && out_is(r, want));
    test_cond("output: the stream really broke (UNAVAILABLE) and was reopened",
              calls_count("TaskExecStdioRead", 14) > broken_before);
    json_t *reads = ctl("GET", "/calls?method=TaskExecStdioRead", NULL);
    int at200 = 0;
    size_t ri;
    json_t *rc;
    json_array_foreach(reads, ri, rc)
        at200 += json_integer_value(
                     json_object_get(json_object_get(rc, "request"), "offset")) == 200;
    json_decref(reads);
    test_cond("output: ... at the byte after the last one received (offset 200)",
              at200 == 1);
    json_decref(r);
    json_decref(ctl("DELETE", "/faults", NULL));
}

static json_t *wait_pid(conn *c, const char *sb, int pid)
{
    return cn_call_t(c, LONG_MS, "process.wait",
                     json_pack("{s:s, s:i}", "sandbox", sb, "pid", pid));
}

static void test_kill_timeout(conn *c)
{
    char *mid = modal_id_of(c, "m1");
    json_t *fs = fake_sandbox(mid);
    char kidfile[1024];
    snprintf(kidfile, sizeof(kidfile), "%s/work/kid.pid",
             json_string_value(json_object_get(fs, "root")));
    json_decref(fs);
    unlink(kidfile);
    json_t *r = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s}", "sandbox", "m1", "command",
                  "sleep 60 & echo $! > kid.pid; echo started; sleep 61; echo no"));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    long kid = 0;
    for (int i = 0; i < 200 && !(kid = read_long_file(kidfile)); i++)
        usleep(25000);
    test_cond("kill: the remote command runs (child pid recorded)",
              kid > 0 && pid_alive(kid));
    double t0 = now_ms();
    r = cn_call(c, "process.kill", json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid));
    json_decref(r);
    r = wait_pid(c, "m1", pid);
    test_cond("kill: exit 137, killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    test_cond("kill: quick", now_ms() - t0 < 4000);
    json_decref(r);
    int gone = 0;
    for (int i = 0; i < 40 && !(gone = !pid_alive(kid)); i++)
        usleep(50000);
    test_cond("kill: the remote process group is really gone (child too)", gone);
    json_t *e = fake_exec("kid.pid");
    test_eq_int("kill: the fake saw the exec end with 137",
                json_integer_value(json_object_get(e, "exit_code")), 137);
    json_decref(e);
    json_t *k = fake_exec("sbx[d]-$0");
    test_cond("kill: done by a second exec (the killer)", k != NULL);
    json_decref(k);

    /* Killed before Modal even answered the exec: it still ends remotely. */
    r = cn_call(
        c, "process.spawn",
        json_pack("{s:s, s:s}", "sandbox", "m1", "command", "sleep 31; echo early"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    json_decref(
        cn_call(c, "process.kill", json_pack("{s:s, s:i}", "sandbox", "m1", "pid", pid)));
    r = wait_pid(c, "m1", pid);
    test_cond("kill at once: exit 137, killed",
              res_int(r, "exit_code") == 137 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);
    e = NULL;
    for (int i = 0; i < 60; i++) {
        json_decref(e);
        e = fake_exec("sleep 31; echo early");
        if (!e || json_is_integer(json_object_get(e, "exit_code")))
            break;
        usleep(50000);
    }
    test_cond("kill at once: the remote process ended too",
              !e || json_is_integer(json_object_get(e, "exit_code")));
    json_decref(e);

    /* SIGTERM reaches the command, which dies of it: 143. */
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "m1", "command", "echo up; sleep 32"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    usleep(400000);
    json_decref(cn_call(
        c, "process.kill",
        json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "signal", "TERM")));
    r = wait_pid(c, "m1", pid);
    test_cond("kill TERM: exit 143, killed",
              res_int(r, "exit_code") == 143 &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    json_decref(r);

    /* A command that ignores SIGTERM still ends (escalated to SIGKILL). */
    r = cn_call(c, "process.spawn",
                json_pack("{s:s, s:s}", "sandbox", "m1", "command",
                          "trap '' TERM; sleep 33; echo survived"));
    pid = (int)res_int(r, "pid");
    json_decref(r);
    usleep(400000);
    t0 = now_ms();
    json_decref(cn_call(
        c, "process.kill",
        json_pack("{s:s, s:i, s:s}", "sandbox", "m1", "pid", pid, "signal", "TERM")));
    r = wait_pid(c, "m1", pid);
    char out[256] = "";
    notes_output(c, pid, "stdout", out, sizeof(out));
    test_cond("kill TERM ignored: escalated to KILL, the process really ends",
              json_is_true(json_object_get(res_of(r), "killed")) &&
                  res_int(r, "exit_code") == 137 && !strstr(out, "survived") &&
                  now_ms() - t0 < 10000);
    json_decref(r);

    t0 = now_ms();
    r = run(c, "m1", json_string("echo tick; sleep 30; echo never"),
            json_pack("{s:i}", "timeout_ms", 1500));
    double took = now_ms() - t0;
    test_cond("timeout: exit 124, timed_out, killed",
              res_int(r, "exit_code") == 124 &&
                  json_is_true(json_object_get(res_of(r), "timed_out")) &&
                  json_is_true(json_object_get(res_of(r), "killed")));
    test_cond("timeout: at the deadline", took >= 1400 && took < 5000);
    test_cond("timeout: output before the deadline kept", out_is(r, "tick\n"));
    json_decref(r);
    e = fake_exec("sleep 30; echo never");
    int ended = 0;
    for (int i = 0; i < 40; i++) {
        json_decref(e);
        e = fake_exec("sleep 30; echo never");
        if ((ended = json_is_integer(json_object_get(e, "exit_code"))))
            break;
        usleep(50000);
    }
    test_cond("timeout: the remote process ended too",
              ended && !pid_alive(json_integer_value(json_object_get(e, "pid"))));
    test_eq_int("timeout: Modal got the per-command timeout",
                json_integer_value(json_object_get(e, "timeout_secs")), 2);
    json_decref(e);
    free(mid);
}

static void test_flow_control(void)
{
    /* A follower that does not read: output must stop flowing from Modal
     * (CURL_WRITEFUNC_PAUSE), not pile up in sbxd, then resume losslessly. */
    conn *slow = cn_open(SOCK), *c = cn_open(SOCK);
    const int total = 40 * 1024 * 1024;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "head -c %d /dev/zero | tr '\\0' z", total);
    json_t *r = cn_call(slow, "process.spawn",
                        json_pack("{s:s, s:s}", "sandbox", "m1", "command", cmd));
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    json_int_t seen = 0, prev = -1;
    /* Let it run until sbxd stops taking more (or everything arrived). */
    for (int i = 0; i < 60; i++) {
        usleep(100000);
        r = cn_call(c, "process.list", json_pack("{s:s}", "sandbox", "m1"));
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(res_of(r), "processes"), k, p)
            if (json_integer_value(json_object_get(p, "pid")) == pid)
                seen = json_integer_value(json_object_get(p, "stdout_bytes"));
        json_decref(r);
        if (seen == prev && seen > 0)
            break;
        prev = seen;
    }
    test_cond("flow control: output stops while the follower does not read",
              seen > 0 && seen < total);
    /* Now read everything. */
    size_t got = 0;
    int exited = 0;
    double deadline = now_ms() + 60000;
    while (!exited && now_ms() < deadline) {
        json_t *m = cn_read(slow, 1000);
        if (!m)
            continue;
        const char *meth = json_string_value(json_object_get(m, "method"));
        json_t *p = json_object_get(m, "params");
        if (meth && strcmp(meth, "process.output") == 0 &&
            json_integer_value(json_object_get(p, "pid")) == pid)
            got += json_string_length(json_object_get(p, "data"));
        if (meth && strcmp(meth, "process.exit") == 0 &&
            json_integer_value(json_object_get(p, "pid")) == pid)
            exited = 1;
        json_decref(m);
    }
    test_cond("flow control: resumed, every byte delivered",
              exited && got == (size_t)total);
    if (!exited || got != (size_t)total)
        printf("      exited %d, got %zu of %d (seen %lld while blocked)\n", exited, got,
               total, (long long)seen);
    cn_close(slow);
    cn_close(c);
}

static void test_dead_sandbox(conn *c)
{
    char *old = modal_id_of(c, "m1");
    json_t *f = ctl("POST", "/fault", json_pack("{s:s}", "kill_sandbox", old));
    json_decref(f);
    json_t *r = sh(c, "m1", "echo ok");
    test_cond("dead sandbox: exec works after a restart",
              res_int(r, "exit_code") == 0 && out_is(r, "ok\n"));
    test_cond("dead sandbox: the result says retried",
              json_is_true(json_object_get(res_of(r), "retried")));
    json_decref(r);
    r = sb_get(c, "m1");
    test_cond("dead sandbox: metadata shows the restart and a new Modal sandbox",
              meta_int(r, "restarts") == 1 && meta_true(r, "retried") &&
                  strcmp(meta_str(r, "sandbox_id"), old) != 0 &&
                  strcmp(res_str(r, "status"), "running") == 0);
    json_decref(r);
    free(old);

    /* Two failures in a row: retried once, then reported. */
    f = ctl("POST", "/fault",
            json_pack("{s:{s:s, s:i, s:s, s:i}}", "fail_next", "method", "TaskExecStart",
                      "code", 5, "message", "fake: no such task (100% gone, über)",
                      "times", 2));
    json_decref(f);
    r = sh(c, "m1", "echo x");
    const char *e = json_string_value(json_object_get(res_of(r), "error"));
    test_cond(
        "second failure: reported (grpc-message percent-decoded), not retried again",
        e && strstr(e, "NOT_FOUND") &&
            strstr(e, "fake: no such task (100% gone, über)") &&
            res_int(r, "exit_code") != 0);
    test_cond("second failure: the result says it was retried",
              json_is_true(json_object_get(res_of(r), "retried")));
    json_decref(r);
    json_decref(ctl("DELETE", "/faults", NULL));
    r = sh(c, "m1", "echo y");
    test_cond("after the faults: exec works", out_is(r, "y\n"));
    json_decref(r);
}

/* The fake's record of image id, or NULL (the caller frees it). */
static json_t *fake_image(const char *image_id)
{
    json_t *imgs = ctl("GET", "/images", NULL), *found = NULL;
    size_t i;
    json_t *im;
    json_array_foreach(imgs, i, im)
        if (image_id &&
            strcmp(json_string_value(json_object_get(im, "image_id")), image_id) == 0)
            found = json_incref(im);
    json_decref(imgs);
    return found;
}

static void test_stop_start(conn *c)
{
    json_t *r = sh(c, "m1", "echo keep > f.txt");
    json_decref(r);
    char *old = modal_id_of(c, "m1");
    r = cn_call_t(c, LONG_MS, "sandbox.stop", json_pack("{s:s}", "id", "m1"));
    errmsg(r);
    test_eq_str("stop: stopped", res_str(r, "status"), "stopped");
    test_cond("stop: the filesystem was saved",
              strncmp(meta_str(r, "saved_image_id"), "im-", 3) == 0);
    json_t *im = fake_image(meta_str(r, "saved_image_id"));
    test_cond("stop: saved on the task (TaskSnapshotFilesystem), never expiring",
              im &&
                  strcmp(json_string_value(json_object_get(im, "via")),
                         "TaskSnapshotFilesystem") == 0 &&
                  json_integer_value(json_object_get(im, "ttl_seconds")) == -1);
    json_decref(im);
    json_decref(r);
    json_t *fs = fake_sandbox(old);
    test_cond("stop: the Modal sandbox was terminated",
              strcmp(json_string_value(json_object_get(fs, "status")), "terminated") ==
                  0);
    json_decref(fs);
    r = cn_call_t(c, LONG_MS, "sandbox.start", json_pack("{s:s}", "id", "m1"));
    errmsg(r);
    test_cond("start: running on a new Modal sandbox",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  strcmp(meta_str(r, "sandbox_id"), old) != 0);
    json_decref(r);
    r = sh(c, "m1", "cat f.txt");
    test_cond("start: the file survived stop/start", out_is(r, "keep\n"));
    json_decref(r);
    free(old);
}

static void test_snapshot(conn *c)
{
    json_t *r = sh(c, "m1", "echo snap > s.txt");
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.snapshot", json_pack("{s:s}", "id", "m1"));
    errmsg(r);
    char *snap = strdup(res_str(r, "snapshot"));
    test_cond("snapshot: an id", strncmp(snap, "snap-", 5) == 0);

    json_t *c2 = cn_call_t(c, LONG_MS, "sandbox.create",
                           json_pack("{s:s, s:s}", "id", "m2", "snapshot", snap));
    errmsg(c2);
    test_cond("create from snapshot: running",
              strcmp(res_str(c2, "status"), "running") == 0 &&
                  strcmp(res_str(c2, "provider"), "modal") == 0);
    json_t *fs = fake_sandbox(meta_str(c2, "sandbox_id"));
    const char *img = json_string_value(json_object_get(fs, "image_id"));
    char *snap_img = img ? strdup(img) : NULL;
    json_t *sim = fake_image(snap_img);
    test_cond("snapshot: taken on the task with Modal's default TTL",
              sim &&
                  strcmp(json_string_value(json_object_get(sim, "via")),
                         "TaskSnapshotFilesystem") == 0 &&
                  json_integer_value(json_object_get(sim, "ttl_seconds")) > 0);
    json_decref(sim);
    json_t *imgs = ctl("GET", "/images", NULL);
    int is_snap = 0;
    size_t i;
    json_t *im;
    json_array_foreach(imgs, i, im)
        if (strcmp(json_string_value(json_object_get(im, "image_id")),
                   json_string_value(json_object_get(fs, "image_id"))) == 0)
            is_snap =
                strcmp(json_string_value(json_object_get(im, "kind")), "snapshot") == 0;
    test_cond("create from snapshot: started on the snapshot image", is_snap);
    json_decref(imgs);
    json_decref(fs);
    json_decref(c2);
    json_decref(r);
    r = run(c, "m2", json_string("cat s.txt"), json_pack("{s:s}", "cwd", "/work"));
    test_cond("create from snapshot: the file is there", out_is(r, "snap\n"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "m2"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    errmsg(r);
    sim = fake_image(snap_img);
    test_cond("snapshot.delete: the Modal image is deleted (ImageDelete)",
              err_code(r) == 0 && snap_img && !sim && calls_count("ImageDelete", 0) > 0);
    json_decref(sim);
    json_decref(r);
    free(snap_img);
    free(snap);
}

/* Kills Modal sandbox modal_id from a child after delay_ms, while the parent
 * waits in a call. Returns the child's pid. */
static pid_t kill_later(const char *modal_id, int delay_ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        usleep((useconds_t)delay_ms * 1000);
        json_decref(ctl("POST", "/fault", json_pack("{s:s}", "kill_sandbox", modal_id)));
        _exit(0);
    }
    return pid;
}

/* Losing the backend fails the pending op at once (issue 11): a SnapshotFs
 * that the server holds for 30 s while the sandbox dies ends within seconds,
 * although limits.op_timeout_ms is 60 s; stop of a lost sandbox is done;
 * destroy finishes. */
static void test_lost_backend(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mlost", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    char *mid = modal_id_of(c, "mlost");
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i}}", "hold_next", "method",
                              "TaskSnapshotFilesystem", "ms", 30000)));
    double t0 = now_ms();
    pid_t k = kill_later(mid, 1000);
    r = cn_call_t(c, LONG_MS, "sandbox.snapshot", json_pack("{s:s}", "id", "mlost"));
    double took = now_ms() - t0;
    waitpid(k, NULL, 0);
    const char *msg =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    test_cond("lost backend: the held snapshot fails with a provider error (-32006)",
              err_code(r) == -32006 && msg && strstr(msg, "lost"));
    printf("    (snapshot failed after %.0f ms: %s)\n", took, msg ? msg : "?");
    test_cond("lost backend: the snapshot fails within seconds, not at op_timeout_ms",
              took < 10000);
    json_decref(r);
    free(mid);

    /* stop: a held SnapshotFs, then the sandbox dies: nothing left to save. */
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlost")));
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "mlost2", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    mid = modal_id_of(c, "mlost2");
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i}}", "hold_next", "method",
                              "TaskSnapshotFilesystem", "ms", 30000)));
    t0 = now_ms();
    k = kill_later(mid, 1000);
    r = cn_call_t(c, LONG_MS, "sandbox.stop", json_pack("{s:s}", "id", "mlost2"));
    took = now_ms() - t0;
    waitpid(k, NULL, 0);
    errmsg(r);
    test_cond("lost backend: stop of a sandbox lost mid-snapshot is done within seconds",
              strcmp(res_str(r, "status"), "stopped") == 0 && took < 10000);
    json_decref(r);
    t0 = now_ms();
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlost2"));
    test_cond("lost backend: destroy finishes",
              !json_object_get(r, "error") && now_ms() - t0 < 10000);
    json_decref(r);
    json_decref(ctl("DELETE", "/faults", NULL));
    free(mid);
}

static void test_clone_destroy(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.clone",
                          json_pack("{s:s, s:s, s:i, s:b}", "id", "m1", "new_id", "m1c",
                                    "idle_timeout_ms", 90000, "start", 1));
    errmsg(r);
    json_t *fs = fake_sandbox(meta_str(r, "sandbox_id"));
    test_cond("clone: idle_timeout_ms becomes Modal's idle_timeout_secs",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  json_integer_value(json_object_get(fs, "idle_timeout_secs")) == 90);
    json_decref(fs);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "m1c"));
    json_decref(r);

    char *mid = modal_id_of(c, "m1");
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "m1"));
    test_eq_str("destroy: destroyed", res_str(r, "status"), "destroyed");
    json_decref(r);
    fs = fake_sandbox(mid);
    test_cond("destroy: the Modal sandbox was terminated",
              strcmp(json_string_value(json_object_get(fs, "status")), "terminated") ==
                  0);
    json_decref(fs);
    free(mid);
}

/* Modal's own lifetime: 5 min by default (basics), 24 h at most. */
static void test_lifetime(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mlife", "provider", "modal"));
    errmsg(r);
    test_cond("lifetime: without timeout_ms a Modal sandbox gets 5 min (sbxd and Modal)",
              res_int(r, "timeout_ms") == 300000 && meta_int(r, "timeout_secs") == 300);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlife")));
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:i}", "id", "mlife", "provider", "modal",
                            "timeout_ms", 86400000));
    errmsg(r);
    test_cond("lifetime: 24 h, Modal's maximum, is accepted and reaches Modal",
              meta_int(r, "timeout_secs") == 86400);
    json_t *fs = fake_sandbox(meta_str(r, "sandbox_id"));
    test_eq_int("lifetime: ... the fake got timeout_secs 86400",
                json_integer_value(json_object_get(fs, "timeout_secs")), 86400);
    json_decref(fs);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlife")));
}

static void test_create_errors(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "provider", "modal", "image",
                                    "example.com/fake-build-fail:1"));
    const char *m =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    test_cond("image build failure: create fails with the build's error",
              err_code(r) == -32006 && m && strstr(m, "fake build failure"));
    json_decref(r);
    r = cn_call_t(
        c, LONG_MS, "sandbox.create",
        json_pack("{s:s, s:{s:s}}", "provider", "modal", "options", "cpu", "lots"));
    test_eq_int("bad options.cpu: -32602", err_code(r), -32602);
    json_decref(r);
    r = cn_call_t(
        c, LONG_MS, "sandbox.create",
        json_pack("{s:s, s:{s:s}}", "provider", "modal", "options", "memroy", "1g"));
    test_cond(
        "unknown option: -32602 naming options.memroy (as Docker)",
        err_code(r) == -32602 &&
            strcmp(json_string_value(json_object_get(
                       json_object_get(json_object_get(r, "error"), "data"), "param")),
                   "options.memroy") == 0);
    json_decref(r);
    r = cn_call(c, "sandbox.list", json_pack("{s:s}", "provider", "modal"));
    test_eq_int("failed creates leave nothing behind",
                json_array_size(json_object_get(res_of(r), "sandboxes")), 0);
    json_decref(r);
}

/* ---- outages of the control plane ------------------------------------------------- */

static json_t *spawn_sh(conn *c, const char *sb, const char *cmd)
{
    return cn_call_t(c, LONG_MS, "process.spawn",
                     json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
}

/* Lines "line1\n".."lineN\n" printed over secs seconds. */
static void lines_cmd(char *buf, size_t n, int lines, double secs)
{
    snprintf(buf, n,
             "i=1; while [ $i -le %d ]; do echo line$i; i=$((i+1)); sleep %.2f; done",
             lines, secs / lines);
}

static int lines_ok(const char *got, int lines)
{
    char want[4096] = "";
    size_t o = 0;
    for (int i = 1; i <= lines && o < sizeof(want); i++)
        o += (size_t)snprintf(want + o, sizeof(want) - o, "line%d\n", i);
    int ok = strcmp(got, want) == 0;
    if (!ok)
        printf("      got %zu bytes of output, want %zu: \"%.200s\"\n", strlen(got), o,
               got);
    return ok;
}

/* The stdout of sb's pid from the notifications seen so far (NUL-terminated). */
static size_t sb_output(conn *c, const char *sb, int pid, char *out, size_t max)
{
    size_t n = 0, i;
    json_t *m;
    if (out && max)
        out[0] = '\0';
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") !=
                0 ||
            json_integer_value(json_object_get(p, "pid")) != pid ||
            strcmp(json_string_value(json_object_get(p, "sandbox")), sb) != 0 ||
            strcmp(json_string_value(json_object_get(p, "stream")), "stdout") != 0)
            continue;
        const char *d = json_string_value(json_object_get(p, "data"));
        size_t l = json_string_length(json_object_get(p, "data"));
        if (out && d && n + l < max) {
            memcpy(out + n, d, l);
            out[n + l] = '\0';
        }
        n += d ? l : 0;
    }
    return n;
}

/* Reads notifications until sb's pid has printed something (the exec really runs). */
static int await_output(conn *c, const char *sb, int pid, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    while (sb_output(c, sb, pid, NULL, 0) == 0 && now_ms() < deadline) {
        json_t *m = cn_read(c, 200);
        if (m && json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    return sb_output(c, sb, pid, NULL, 0) > 0;
}

static void outage_start(double secs, const char *mode)
{
    json_decref(
        ctl("POST", "/outage", json_pack("{s:f, s:s}", "seconds", secs, "mode", mode)));
}

static int outage_active(void)
{
    json_t *o = ctl("GET", "/outage", NULL);
    int a = json_is_true(json_object_get(o, "active"));
    json_decref(o);
    return a;
}

/* An outage of secs seconds while a process prints 30 lines: with the default
 * budget every line arrives and the exit is the real one. A command started
 * during the outage (its calls are refused: they never reach Modal) runs once
 * the outage is over. */
static void test_outage(conn *c, double secs)
{
    char cmd[256], name[160];
    lines_cmd(cmd, sizeof(cmd), 30, secs + 4.0);
    json_t *r = spawn_sh(c, "mo", cmd);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    await_output(c, "mo", pid, 30000);
    double t0 = now_ms();
    outage_start(secs, "refuse");
    usleep(300000); /* sbxd has seen its connection reset */
    r = sh(c, "mo", "echo during");
    snprintf(name, sizeof(name),
             "outage %.0f s: a command started during it runs once it is over", secs);
    test_cond(name, res_int(r, "exit_code") == 0 && out_is(r, "during\n") &&
                        now_ms() - t0 >= secs * 1000.0 - 300);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "mo", "pid", pid));
    errmsg(r);
    snprintf(name, sizeof(name),
             "outage %.0f s: the running process exits cleanly (exit 0, no error)", secs);
    test_cond(name, res_int(r, "exit_code") == 0 &&
                        json_is_null(json_object_get(res_of(r), "error")) &&
                        !json_object_get(res_of(r), "output_incomplete"));
    json_decref(r);
    char got[4096] = "";
    sb_output(c, "mo", pid, got, sizeof(got));
    snprintf(name, sizeof(name), "outage %.0f s: all 30 lines arrived, in order, once",
             secs);
    test_cond(name, lines_ok(got, 30));
    json_t *o = ctl("GET", "/outage", NULL);
    snprintf(name, sizeof(name), "outage %.0f s: the fake really cut the connections",
             secs);
    test_cond(name, json_integer_value(json_object_get(o, "resets")) > 0);
    json_decref(o);
}

/* The reply of a TaskExecStart that Modal carried out is lost in an outage:
 * sbxd starts it again with the same exec id once Modal is back, which the
 * router does not run a second time: the command runs once and is followed. */
static void test_outage_exec_unknown(conn *c)
{
    json_t *before = ctl("GET", "/calls?method=TaskExecStart", NULL);
    size_t nb = json_array_size(before);
    json_decref(before);
    json_decref(
        ctl("POST", "/fault",
            json_pack("{s:s, s:f}", "outage_after", "TaskExecStart", "seconds", 2.0)));
    json_t *r = sh(c, "mo", "echo once-9f3 >> once.txt; echo done");
    errmsg(r);
    test_cond("lost TaskExecStart reply: the command's own result arrives",
              res_int(r, "exit_code") == 0 && out_is(r, "done\n"));
    json_decref(r);
    int n = 0;
    json_t *all = ctl("GET", "/execs", NULL);
    size_t i;
    json_t *x;
    json_array_foreach(all, i, x) {
        char *line = json_dumps(json_object_get(x, "command"), JSON_COMPACT);
        if (line && strstr(line, "once-9f3") && !strstr(line, "grep"))
            n++;
        free(line);
    }
    json_decref(all);
    test_cond("lost TaskExecStart reply: the command was started exactly once", n == 1);
    json_t *st = ctl("GET", "/calls?method=TaskExecStart", NULL);
    const char *id0 = NULL;
    int same = 0, total = 0;
    json_array_foreach(st, i, x) {
        if (i < nb)
            continue;
        const char *id =
            json_string_value(json_object_get(json_object_get(x, "request"), "exec_id"));
        total++;
        if (!id0)
            id0 = id;
        same += id && id0 && strcmp(id, id0) == 0;
    }
    test_cond("lost TaskExecStart reply: started again with the same exec id",
              total >= 2 && same == total);
    json_decref(st);
    r = sh(c, "mo", "cat once.txt");
    test_cond("lost TaskExecStart reply: it ran once", out_is(r, "once-9f3\n"));
    json_decref(r);
}

/* The command router: sbxd's processes went through it (the fake's log per
 * client), a lost start reply is not run twice, a refused router falls back
 * to ContainerExec and sandbox.get says so, and a server retry policy is obeyed. */
static int client_calls(json_t *per, const char *svc, const char *method)
{
    return (int)json_integer_value(json_object_get(
        json_object_get(json_object_get(per, "sbxd/" SBX_VERSION), svc), method));
}

/* What today's SDKs send at create, sbxd sends too: the owner tags in the
 * create itself, its limits as ceilings, the workspace's image builder version. */
static void test_create_drifts(conn *c)
{
    json_t *cs = ctl("GET", "/calls?method=SandboxCreateV2", NULL);
    json_t *last = NULL;
    size_t i;
    json_t *x;
    json_array_foreach(cs, i, x) {
        const char *tid = json_string_value(
            json_object_get(json_object_get(x, "metadata"), "x-modal-token-id"));
        if (tid && strcmp(tid, "ak-test") == 0)
            last = x;
    }
    json_t *req = json_object_get(last, "request");
    int owner = 0;
    json_array_foreach(json_object_get(req, "tags"), i, x)
        owner += strcmp(json_string_value(json_object_get(x, "tag_name")),
                        "sbxd_owner_uid") == 0;
    test_cond("create: the owner tag is in SandboxCreateV2 itself", owner == 1);
    json_t *res = json_object_get(json_object_get(req, "definition"), "resources");
    test_cond("create: memory and cpu are ceilings too (memory_mb_max, milli_cpu_max)",
              json_integer_value(json_object_get(res, "memory_mb_max")) ==
                      json_integer_value(json_object_get(res, "memory_mb")) &&
                  json_integer_value(json_object_get(res, "milli_cpu_max")) ==
                      json_integer_value(json_object_get(res, "milli_cpu")) &&
                  json_integer_value(json_object_get(res, "milli_cpu")) > 0);
    json_decref(cs);
    json_t *imgs = ctl("GET", "/images", NULL);
    int ours = 0;
    json_array_foreach(imgs, i, x) {
        const char *bv = json_string_value(json_object_get(x, "builder_version"));
        ours += bv && strcmp(bv, "2025.06") == 0;
    }
    json_decref(imgs);
    test_cond("create: images are built with the workspace's builder version "
              "(EnvironmentGetOrCreate)",
              ours > 0 && calls_count("EnvironmentGetOrCreate", 0) > 0);
}

/* A daemon with backend v1 (the short-budget one): V1 sandboxes through the V1
 * calls, TaskGetCommandRouterAccess, and the ContainerExec fallback when the
 * router is refused (V2 sandboxes have none). */
static void test_v1_backend(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("backend v1: the sbxd answers", 0);
        return;
    }
    int acc = calls_count("TaskGetCommandRouterAccess", 0);
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mv1", "provider", "modal"));
    errmsg(r);
    const char *id = meta_str(r, "sandbox_id");
    test_cond("backend v1: a V1 sandbox (sb- and 22 characters)",
              strncmp(id, "sb-", 3) == 0 && strlen(id) == 25);
    json_decref(r);
    r = sh(c, "mv1", "echo v1");
    test_cond("backend v1: exec on the router, access by TaskGetCommandRouterAccess",
              out_is(r, "v1\n") && calls_count("TaskGetCommandRouterAccess", 0) > acc);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mv1")));
    /* Router refused: ContainerExec, said in the metadata. */
    json_decref(ctl("POST", "/fault", json_pack("{s:i}", "refuse_router", 1)));
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "mf", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    int ce = calls_count("ContainerExec", 0);
    r = sh(c, "mf", "echo fallback");
    test_cond("router refused: exec works through ContainerExec",
              out_is(r, "fallback\n") && calls_count("ContainerExec", 0) > ce);
    json_decref(r);
    r = sb_get(c, "mf");
    const char *why = meta_str(r, "exec_fallback_reason");
    test_cond("router refused: sandbox.get says container_exec and why",
              strcmp(meta_str(r, "exec_transport"), "container_exec") == 0 &&
                  strstr(why, "FAILED_PRECONDITION"));
    json_decref(r);
    json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mf")));

    cn_close(c);
}

static void test_router(conn *c)
{
    json_t *per = ctl("GET", "/clients", NULL);
    test_cond("router: sbxd's processes used TaskExecStart, TaskExecStdioRead, "
              "TaskExecStdinWrite, TaskExecWait",
              client_calls(per, "router", "TaskExecStart") > 0 &&
                  client_calls(per, "router", "TaskExecStdioRead") > 0 &&
                  client_calls(per, "router", "TaskExecStdinWrite") > 0 &&
                  client_calls(per, "router", "TaskExecWait") > 0 &&
                  client_calls(per, "control", "SandboxGetCommandRouterAccess") > 0);
    test_cond("router: ... and never ContainerExec (exec, output, input, wait, kill)",
              client_calls(per, "control", "ContainerExec") == 0 &&
                  client_calls(per, "control", "ContainerExecGetOutput") == 0 &&
                  client_calls(per, "control", "ContainerExecPutInput") == 0 &&
                  client_calls(per, "control", "ContainerExecWait") == 0);
    json_decref(per);
    json_t *r = sb_get(c, "m1");
    test_eq_str("router: sandbox.get says exec_transport task_command_router",
                meta_str(r, "exec_transport"), "task_command_router");
    json_decref(r);

    /* The fake's router tokens live 8 s: a command that runs longer gets its
     * access fetched again before the token expires, and no router call is
     * turned away for an expired one. */
    int acc0 = calls_count("SandboxGetCommandRouterAccess", 0);
    int unauth0 = calls_count("TaskExecWait", 16) + calls_count("TaskExecStdioRead", 16) +
                  calls_count("TaskExecStart", 16);
    r = sh(c, "m1", "sleep 12; echo late");
    int unauth1 = calls_count("TaskExecWait", 16) + calls_count("TaskExecStdioRead", 16) +
                  calls_count("TaskExecStart", 16);
    test_cond("router: a 12 s command under 8 s tokens: access fetched again in time, "
              "no call rejected",
              out_is(r, "late\n") &&
                  calls_count("SandboxGetCommandRouterAccess", 0) >= acc0 + 2 &&
                  unauth1 == unauth0);
    json_decref(r);

    /* A start whose reply is lost (the call was carried out) is retried with the same
     * exec id and does not run twice. */
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i}}", "fail_after", "method", "TaskExecStart",
                              "code", 14)));
    r = sh(c, "m1", "echo x >> twice.txt; wc -l < twice.txt");
    test_cond("router: a retried TaskExecStart ran the command once",
              res_int(r, "exit_code") == 0 && out_is(r, "1\n"));
    json_decref(r);

    /* RPCRetryPolicy: a code sbxd never retries on its own (RESOURCE_EXHAUSTED) is
     * retried after the delay the server names, with the throttle headers. */
    int before = calls_count("SandboxCreateV2", -1);
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i, s:s, s:f}}", "fail_next", "method",
                              "SandboxCreateV2", "code", 8, "message", "slow down",
                              "retry_after_secs", 0.6)));
    double t0 = now_ms();
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "mr", "provider", "modal"));
    double took = now_ms() - t0;
    errmsg(r);
    test_cond("retry policy: the create succeeds after the server's delay",
              err_code(r) == 0 && took >= 550);
    json_decref(r);
    json_t *cs = ctl("GET", "/calls?method=SandboxCreateV2", NULL);
    json_t *a = json_array_get(cs, (size_t)before),
           *b2 = json_array_get(cs, (size_t)before + 1);
    json_t *mda = json_object_get(a, "metadata"), *mdb = json_object_get(b2, "metadata");
    const char *ta = json_string_value(json_object_get(mda, "x-throttle-retry-attempt"));
    const char *tb = json_string_value(json_object_get(mdb, "x-throttle-retry-attempt"));
    const char *host = json_string_value(json_object_get(mda, "x-modal-host"));
    test_cond("retry policy: codes 8 then 0; throttle attempt 0 then 1 (with a delay); "
              "x-modal-host",
              json_integer_value(json_object_get(a, "code")) == 8 &&
                  json_integer_value(json_object_get(b2, "code")) == 0 && ta &&
                  strcmp(ta, "0") == 0 && tb && strcmp(tb, "1") == 0 &&
                  json_object_get(mdb, "x-throttle-retry-delay") && host &&
                  strcmp(host, "127.0.0.1") == 0);
    json_decref(cs);
    json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mr")));
    json_decref(ctl("DELETE", "/faults", NULL));
}

/* An outage longer than the retry budget (a daemon with a 5 s budget): the
 * process ends with output_incomplete and an error, never as a clean exit;
 * once the outage is over the sandbox works again. */
static void test_outage_long(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("long outage: the small-budget sbxd answers", 0);
        return;
    }
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mshort", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    char cmd[256];
    lines_cmd(cmd, sizeof(cmd), 30, 40.0);
    r = spawn_sh(c, "mshort", cmd);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    await_output(c, "mshort", pid, 30000);
    double t0 = now_ms();
    outage_start(30.0, "refuse");
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "mshort", "pid", pid));
    double took = now_ms() - t0;
    errmsg(r);
    const char *e = json_string_value(json_object_get(res_of(r), "error"));
    test_cond("outage 30 s, budget 5 s: the process ends with output_incomplete",
              json_is_true(json_object_get(res_of(r), "output_incomplete")));
    test_cond("outage 30 s, budget 5 s: ... an error and exit_code -1, not a clean exit",
              e && e[0] && res_int(r, "exit_code") == -1);
    test_cond("outage 30 s, budget 5 s: ... after the budget, during the outage",
              took >= 4000 && took < 25000 && outage_active());
    if (!(took >= 4000 && took < 25000))
        printf("      took %.0f ms\n", took);
    json_decref(r);
    int exit_note_incomplete = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m)
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.exit") ==
                0 &&
            json_integer_value(json_object_get(json_object_get(m, "params"), "pid")) ==
                pid)
            exit_note_incomplete = json_is_true(
                json_object_get(json_object_get(m, "params"), "output_incomplete"));
    test_cond("outage 30 s: the process.exit notification says output_incomplete",
              exit_note_incomplete);
    while (outage_active() && now_ms() - t0 < 40000)
        usleep(250000);
    r = sh(c, "mshort", "echo back");
    test_cond("outage 30 s: after it, the sandbox works again", out_is(r, "back\n"));
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mshort")));
    cn_close(c);
}

static void test_headers(void)
{
    json_t *all = ctl("GET", "/calls", NULL);
    size_t i;
    json_t *c;
    int n = 0, ids = 0, auth = 0, idem_ok = 0, unary = 0, client = 0;
    json_array_foreach(all, i, c) {
        json_t *md = json_object_get(c, "metadata");
        const char *m = json_string_value(json_object_get(c, "method"));
        const char *tid = json_string_value(json_object_get(md, "x-modal-token-id"));
        if (!tid || strcmp(tid, "ak-test") != 0)
            continue; /* the SDK test's own calls */
        n++;
        ids++;
        if (strcmp(m, "AuthTokenGet") == 0 ||
            json_is_true(json_object_get(md, "has-auth-token")))
            auth++;
        const char *ct = json_string_value(json_object_get(md, "x-modal-client-type"));
        if (ct && strcmp(ct, "8") == 0)
            client++;
        if (strcmp(m, "ContainerExec") == 0 || strcmp(m, "SandboxCreate") == 0 ||
            strcmp(m, "SandboxCreateV2") == 0 ||
            strcmp(m, "SandboxGetCommandRouterAccess") == 0) {
            unary++;
            const char *k = json_string_value(json_object_get(md, "x-idempotency-key"));
            if (k && strlen(k) == 36 && json_object_get(md, "x-retry-attempt"))
                idem_ok++;
        }
    }
    test_cond("headers: token id on every call, auth token on all but AuthTokenGet",
              n > 10 && ids == n && auth == n);
    test_cond("headers: client type", client == n);
    test_cond("headers: idempotency key + retry attempt on unary calls",
              unary > 0 && idem_ok == unary);
    int tokens = 0, rejected = 0;
    json_array_foreach(all, i, c) {
        json_t *md = json_object_get(c, "metadata");
        const char *tid = json_string_value(json_object_get(md, "x-modal-token-id"));
        if (!tid || strcmp(tid, "ak-test") != 0)
            continue;
        if (strcmp(json_string_value(json_object_get(c, "method")), "AuthTokenGet") == 0)
            tokens++;
        if (json_integer_value(json_object_get(c, "code")) == 16)
            rejected++;
    }
    /* The fake's tokens live 8 s (modal.sh): sbxd renews them before they expire. */
    test_cond("auth: the token is refreshed before it expires (never rejected)",
              tokens >= 2 && rejected == 0);
    json_decref(all);
}

/* ---- other daemons
 * ------------------------------------------------------------------------- */

static json_t *modal_info(conn *c)
{
    json_t *r = cn_call(c, "daemon.info", NULL), *found = NULL;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(res_of(r), "providers"), i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), "modal") == 0)
            found = json_incref(p);
    json_decref(r);
    return found;
}

static void test_nocred(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("no credentials: daemon reachable", 0);
        return;
    }
    json_t *p = modal_info(c);
    const char *reason = json_string_value(json_object_get(p, "reason"));
    test_cond("no credentials: daemon.info shows modal unavailable with the reason",
              p && json_is_false(json_object_get(p, "available")) && reason &&
                  strstr(reason, "MODAL_TOKEN_ID"));
    json_decref(p);
    json_t *r = cn_call(c, "sandbox.create", json_pack("{s:s}", "provider", "modal"));
    test_eq_int("no credentials: create -> -32002", err_code(r), -32002);
    json_decref(r);
    cn_close(c);
}

static void test_badcred(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("bad credentials: daemon reachable", 0);
        return;
    }
    json_t *r =
        cn_call_t(c, LONG_MS, "sandbox.create", json_pack("{s:s}", "provider", "modal"));
    json_t *e = json_object_get(r, "error");
    json_t *d = json_object_get(e, "data");
    const char *msg = json_string_value(json_object_get(d, "message"));
    test_cond(
        "bad credentials: create fails with -32006 UNAUTHENTICATED and Modal's message",
        err_code(r) == -32006 &&
            json_integer_value(json_object_get(d, "grpc_status")) == 16 && msg &&
            strstr(msg, "invalid") &&
            strstr(json_string_value(json_object_get(e, "message")), "UNAUTHENTICATED"));
    if (err_code(r) != -32006)
        errmsg(r);
    json_decref(r);
    r = cn_call(c, "sandbox.list", NULL);
    test_eq_int("bad credentials: nothing left behind",
                json_array_size(json_object_get(res_of(r), "sandboxes")), 0);
    json_decref(r);
    cn_close(c);
}

static void test_down(const char *sock)
{
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("server down: daemon reachable", 0);
        return;
    }
    json_t *p = modal_info(c);
    test_cond("server down: daemon.info still answers", p != NULL);
    json_decref(p);
    double t0 = now_ms();
    json_t *r =
        cn_call_t(c, LONG_MS, "sandbox.create", json_pack("{s:s}", "provider", "modal"));
    const char *reason = json_string_value(
        json_object_get(json_object_get(json_object_get(r, "error"), "data"), "reason"));
    test_cond("server down: create -> -32002 with the reason, quickly",
              err_code(r) == -32002 && reason && strstr(reason, "127.0.0.1:1") &&
                  now_ms() - t0 < 10000);
    if (err_code(r) != -32002)
        errmsg(r);
    json_decref(r);
    r = cn_call(c, "sandbox.create",
                json_pack("{s:s, s:s}", "id", "d1", "provider", "duktape"));
    json_t *x = cn_call(c, "process.exec",
                        json_pack("{s:s, s:s}", "sandbox", "d1", "command", "1+1"));
    test_cond("server down: duktape keeps serving",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  json_integer_value(json_object_get(res_of(x), "result")) == 2);
    json_decref(x);
    json_decref(r);
    r = cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "d1"));
    json_decref(r);
    cn_close(c);
}

static pid_t spawn_sbxd(const char *cmd, const char *sock)
{
    unlink(sock);
    char logp[600];
    snprintf(logp, sizeof(logp), "%s.log", sock);
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
    /* Ready when it accepts a connection: the socket file exists a moment
     * before sbxd listens on it, and a test that connected in that moment
     * failed under load. */
    for (int i = 0; i < 400; i++) {
        conn *probe = cn_open(sock);
        if (probe) {
            cn_close(probe);
            return pid;
        }
        usleep(50000);
    }
    return pid;
}

static int stop_sbxd(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_reconnect(const char *cmd, const char *tmp)
{
    char sock[104];
    snprintf(sock, sizeof(sock), "%s/reco.sock", tmp);
    pid_t pid = spawn_sbxd(cmd, sock);
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("reconnect: second sbxd started", 0);
        stop_sbxd(pid);
        return;
    }
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s, s:s}", "id", "reco-1", "provider",
                                    "modal", "working_dir", "/w"));
    errmsg(r);
    char *first = strdup(meta_str(r, "sandbox_id"));
    json_decref(r);
    r = sh(c, "reco-1", "echo there > r.txt");
    json_decref(r);
    cn_close(c);
    int st = stop_sbxd(pid);
    test_cond("reconnect: sbxd stops cleanly (the Modal sandbox keeps running)", st == 0);
    /* Without its state file the restarted sbxd finds it by name (and tags). */
    char statef[600];
    snprintf(statef, sizeof(statef), "%s.modal.json", sock);
    unlink(statef);
    json_t *fs = fake_sandbox(first);
    test_cond("reconnect: still running in Modal",
              strcmp(json_string_value(json_object_get(fs, "status")), "running") == 0);
    json_decref(fs);

    pid = spawn_sbxd(cmd, sock);
    if (geteuid() == 0) {
        /* Another uid may not adopt it: the owner is tagged on the Modal sandbox. */
        int fds[2];
        char res[4] = "x";
        if (pipe(fds) == 0) {
            pid_t kid = fork();
            if (kid == 0) {
                close(fds[0]);
                char ok = '0';
                if (setgid(65534) == 0 && setuid(65534) == 0) {
                    conn *o = cn_open(sock);
                    json_t *x = o ? cn_call_t(o, LONG_MS, "sandbox.create",
                                              json_pack("{s:s, s:s}", "id", "reco-1",
                                                        "provider", "modal"))
                                  : NULL;
                    ok = err_code(x) == -32003 ? '1' : '0';
                    json_decref(x);
                    cn_close(o);
                }
                if (write(fds[1], &ok, 1) != 1)
                    _exit(1);
                _exit(0);
            }
            close(fds[1]);
            if (read(fds[0], res, 1) != 1)
                res[0] = 'x';
            close(fds[0]);
            waitpid(kid, NULL, 0);
        }
        test_cond("reconnect: another uid cannot adopt it (-32003)", res[0] == '1');
        fs = fake_sandbox(first);
        test_cond("reconnect: ... and that left it running",
                  strcmp(json_string_value(json_object_get(fs, "status")), "running") ==
                      0);
        json_decref(fs);
    }
    c = cn_open(sock);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:s, s:{s:s}, s:{s:i}}", "id", "reco-1",
                            "provider", "modal", "working_dir", "/w", "env", "NEW", "1",
                            "options", "memory_mb", 777));
    errmsg(r);
    test_cond("reconnect: the same id after a restart adopts the running Modal sandbox",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  meta_true(r, "reconnected") &&
                  strcmp(meta_str(r, "sandbox_id"), first) == 0);
    char *ws = json_dumps(json_object_get(res_of(r), "warnings"), JSON_COMPACT);
    test_cond("reconnect: differing options come back as warnings (memory, env), the "
              "same working dir does not",
              ws && strstr(ws, "options.memory_mb") && strstr(ws, "env") &&
                  !strstr(ws, "working_dir"));
    if (ws)
        printf("      warnings: %s\n", ws);
    free(ws);
    json_decref(r);
    r = sh(c, "reco-1", "echo $NEW");
    test_cond("reconnect: the requested env reaches commands anyway", out_is(r, "1\n"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:i}}", "id", "reco-1", "provider", "modal",
                            "options", "memory_mb", 778));
    ws = json_dumps(json_object_get(res_of(r), "warnings"), JSON_COMPACT);
    test_cond("reconnect: on a sandbox sbxd knows, changed options are warnings too",
              ws && strstr(ws, "options.memory_mb"));
    free(ws);
    json_decref(r);
    r = sh(c, "reco-1", "cat r.txt");
    test_cond("reconnect: files are still there", out_is(r, "there\n"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "reco-1"));
    json_decref(r);
    fs = fake_sandbox(first);
    test_cond("reconnect: destroy terminates it",
              strcmp(json_string_value(json_object_get(fs, "status")), "terminated") ==
                  0);
    json_decref(fs);
    cn_close(c);
    st = stop_sbxd(pid);
    test_cond("reconnect: restarted sbxd stops cleanly", st == 0);
    free(first);
}

/* An sbxd restart: the Modal sandboxes of the daemon are listed again at once
 * (env, working dir, lifetime from the state file), a process that ran
 * through the restart is re-adopted with its whole output and its real exit,
 * and the process of a sandbox that died meanwhile is reported lost. */
static void test_restart_recovery(const char *cmd, const char *tmp)
{
    char sock[104], state[600];
    snprintf(sock, sizeof(sock), "%s/recov.sock", tmp);
    snprintf(state, sizeof(state), "%s/recov.sock.modal.json", tmp);
    unlink(state);
    pid_t pid = spawn_sbxd(cmd, sock);
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("recovery: sbxd started", 0);
        stop_sbxd(pid);
        return;
    }
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s, s:{s:s}, s:s, s:i}", "id", "rec-1",
                                    "provider", "modal", "env", "R", "one", "working_dir",
                                    "/w2", "timeout_ms", 600000));
    errmsg(r);
    const char *exp1 = res_str(r, "expires_at");
    char expires[64];
    snprintf(expires, sizeof(expires), "%s", exp1);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "rec-2", "provider", "modal"));
    char *dead_id = strdup(meta_str(r, "sandbox_id"));
    json_decref(r);
    json_decref(
        cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:s}}", "id", "rec-1", "env", "LATE", "two")));
    r = spawn_sh(c, "rec-1", "echo a; sleep 4; echo b; echo $R$LATE; exit 3");
    int p1 = (int)res_int(r, "pid");
    json_decref(r);
    r = spawn_sh(c, "rec-2", "echo x; sleep 60");
    int p2 = (int)res_int(r, "pid");
    json_decref(r);
    await_output(c, "rec-1", p1, 30000);
    await_output(c, "rec-2", p2, 30000);
    json_decref(sh(c, "rec-1", "echo kept > snapfile"));
    r = cn_call_t(c, LONG_MS, "sandbox.snapshot", json_pack("{s:s}", "id", "rec-1"));
    errmsg(r);
    char snap[80];
    snprintf(snap, sizeof(snap), "%s", res_str(r, "snapshot"));
    json_decref(r);
    /* Started right before the stop: kept however far its start got. */
    r = spawn_sh(c, "rec-1", "sleep 1; echo late");
    int p3 = (int)res_int(r, "pid");
    json_decref(r);
    cn_close(c);
    int st = stop_sbxd(pid);
    struct stat sst;
    test_cond("recovery: sbxd stops cleanly and leaves its state file, mode 0600",
              st == 0 && stat(state, &sst) == 0 && (sst.st_mode & 0777) == 0600);
    json_decref(ctl("POST", "/fault", json_pack("{s:s}", "kill_sandbox", dead_id)));

    pid = spawn_sbxd(cmd, sock);
    c = cn_open(sock);
    usleep(300000); /* adoption runs on the first loop iteration */
    r = cn_call(c, "sandbox.list", json_pack("{s:s}", "provider", "modal"));
    json_t *got1 = NULL, *got2 = NULL;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(res_of(r), "sandboxes"), i, x) {
        if (strcmp(json_string_value(json_object_get(x, "id")), "rec-1") == 0)
            got1 = x;
        if (strcmp(json_string_value(json_object_get(x, "id")), "rec-2") == 0)
            got2 = x;
    }
    test_cond("recovery: both sandboxes are listed again without a create", got1 && got2);
    const char *renv =
        json_string_value(json_object_get(json_object_get(got1, "env"), "R"));
    test_cond(
        "recovery: ... with their env, working dir and lifetime",
        got1 && renv && strcmp(renv, "one") == 0 &&
            strcmp(json_string_value(json_object_get(got1, "working_dir")), "/w2") == 0 &&
            json_integer_value(json_object_get(got1, "timeout_ms")) == 600000 &&
            strcmp(json_string_value(json_object_get(got1, "expires_at")), expires) ==
                0 &&
            strcmp(json_string_value(json_object_get(got1, "status")), "running") == 0);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "rec-1", "pid", p1));
    errmsg(r);
    test_cond(
        "recovery: the running process is re-adopted and ends with its real exit (3)",
        res_int(r, "exit_code") == 3 &&
            json_is_null(json_object_get(res_of(r), "error")));
    json_decref(r);
    json_decref(cn_call(
        c, "process.attach",
        json_pack("{s:s, s:i, s:b}", "sandbox", "rec-1", "pid", p1, "follow", 0)));
    char out[256];
    for (int k = 0; k < 10 && sb_output(c, "rec-1", p1, out, sizeof(out)) < 11; k++) {
        json_t *m = cn_read(c, 200);
        if (m && json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    sb_output(c, "rec-1", p1, out, sizeof(out));
    test_cond("recovery: its whole output is replayed, from before and after the restart",
              strcmp(out, "a\nb\nonetwo\n") == 0);
    if (strcmp(out, "a\nb\nonetwo\n") != 0)
        printf("      output: \"%s\"\n", out);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "rec-1", "pid", p3));
    errmsg(r);
    const char *e3 = json_string_value(json_object_get(res_of(r), "error"));
    test_cond("recovery: a command started just before the stop is re-adopted or "
              "reported lost, never forgotten",
              p3 > 0 && err_code(r) == 0 &&
                  (res_int(r, "exit_code") == 0 || (e3 && strstr(e3, "lost"))));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "rec-2", "pid", p2));
    const char *e = json_string_value(json_object_get(res_of(r), "error"));
    test_cond("recovery: the process of a sandbox that died meanwhile is reported lost",
              e && strstr(e, "gone") && res_int(r, "exit_code") == -1);
    json_decref(r);
    r = cn_call(c, "snapshot.list", json_pack("{s:s}", "provider", "modal"));
    int listed = 0;
    json_array_foreach(json_object_get(res_of(r), "snapshots"), i, x)
        if (strcmp(json_string_value(json_object_get(x, "snapshot")), snap) == 0 &&
            json_integer_value(json_object_get(x, "owner_uid")) ==
                (json_int_t)geteuid() &&
            strcmp(json_string_value(json_object_get(x, "sandbox")), "rec-1") == 0)
            listed = 1;
    test_cond("recovery: a Modal snapshot survives the restart (snapshot.list, owner, "
              "sandbox)",
              snap[0] && listed);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:s, s:s}", "id", "rec-3", "provider", "modal",
                            "snapshot", snap, "working_dir", "/w2"));
    errmsg(r);
    json_decref(r);
    r = sh(c, "rec-3", "cat snapfile");
    test_cond("recovery: ... and a sandbox starts from it", out_is(r, "kept\n"));
    json_decref(r);
    if (geteuid() == 0) {
        int fds[2];
        char res[2] = "x";
        if (pipe(fds) == 0) {
            pid_t kid = fork();
            if (kid == 0) {
                close(fds[0]);
                char ok = '0';
                if (setgid(65534) == 0 && setuid(65534) == 0) {
                    conn *o = cn_open(sock);
                    json_t *l = o ? cn_call(o, "snapshot.list", NULL) : NULL;
                    json_t *d = o ? cn_call(o, "snapshot.delete",
                                            json_pack("{s:s}", "snapshot", snap))
                                  : NULL;
                    json_t *u = o ? cn_call_t(o, LONG_MS, "sandbox.create",
                                              json_pack("{s:s, s:s}", "provider", "modal",
                                                        "snapshot", snap))
                                  : NULL;
                    ok = l &&
                                 json_array_size(
                                     json_object_get(res_of(l), "snapshots")) == 0 &&
                                 err_code(d) == -32000 && err_code(u) != 0
                             ? '1'
                             : '0';
                    json_decref(l);
                    json_decref(d);
                    json_decref(u);
                    cn_close(o);
                }
                if (write(fds[1], &ok, 1) != 1)
                    _exit(1);
                _exit(0);
            }
            close(fds[1]);
            if (read(fds[0], res, 1) != 1)
                res[0] = 'x';
            close(fds[0]);
            waitpid(kid, NULL, 0);
        }
        test_cond("recovery: another uid neither sees, deletes nor uses the snapshot",
                  res[0] == '1');
    }
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "rec-3")));
    r = cn_call(c, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    errmsg(r);
    test_cond("recovery: snapshot.delete of a Modal snapshot",
              json_is_true(json_object_get(res_of(r), "deleted")));
    json_decref(r);
    r = sh(c, "rec-1", "echo $R; pwd");
    test_cond("recovery: the adopted sandbox runs new commands (env, working dir kept)",
              res_int(r, "exit_code") == 0 && ends_with(res_str(r, "stdout"), "/w2\n") &&
                  strncmp(res_str(r, "stdout"), "one\n", 4) == 0);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "rec-1")));
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "rec-2")));
    json_t *sf = NULL;
    for (int k = 0; k < 30; k++) { /* written within a second of a change */
        json_decref(sf);
        sf = json_load_file(state, 0, NULL);
        if (sf && json_object_size(json_object_get(sf, "sandboxes")) == 0 &&
            json_object_size(json_object_get(sf, "snapshots")) == 0)
            break;
        usleep(100000);
    }
    test_cond("recovery: destroyed sandboxes and deleted snapshots leave the state file",
              sf && json_object_size(json_object_get(sf, "sandboxes")) == 0 &&
                  json_object_size(json_object_get(sf, "snapshots")) == 0);
    json_decref(sf);
    cn_close(c);
    st = stop_sbxd(pid);
    test_cond("recovery: restarted sbxd stops cleanly", st == 0);
    free(dead_id);
}

/* The state file names owners: one that others could have written is ignored. */
static void test_state_guard(const char *cmd, const char *tmp)
{
    char sock[104], state[600];
    snprintf(sock, sizeof(sock), "%s/guard.sock", tmp);
    snprintf(state, sizeof(state), "%s/guard.sock.modal.json", tmp);
    conn *m = cn_open(SOCK);
    json_t *info = cn_call(m, "daemon.info", NULL);
    const char *url = "";
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(res_of(info), "providers"), i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), "modal") == 0 &&
            json_string_value(json_object_get(json_object_get(p, "info"), "server_url")))
            url = json_string_value(
                json_object_get(json_object_get(p, "info"), "server_url"));
    json_t *planted =
        json_pack("{s:i, s:s, s:{s:{s:i, s:{s:s}, s:{s:s, s:s}}}, s:{}}", "version", 1,
                  "server_url", url, "sandboxes", "planted", "owner", (int)geteuid(),
                  "conf", "provider", "modal", "modal", "sandbox_id", "sb-planted-nope",
                  "app_name", "sbxd-test", "snapshots");
    json_dump_file(planted, state, 0);
    json_decref(planted);
    json_decref(info);
    cn_close(m);
    for (int round = 0; round < 2; round++) {
        chmod(state, round == 0 ? 0666 : 0600);
        pid_t pid = spawn_sbxd(cmd, sock);
        conn *c = cn_open(sock);
        usleep(300000);
        json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "planted"));
        if (round == 0)
            test_eq_int("state file writable by others: ignored (nothing adopted)",
                        err_code(r), -32000);
        else
            test_eq_int(
                "... the same file, mode 0600: adopted (the check above means it)",
                err_code(r), 0);
        json_decref(r);
        if (round == 1)
            json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy",
                                  json_pack("{s:s}", "id", "planted")));
        cn_close(c);
        stop_sbxd(pid);
    }
    unlink(state);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ptest_modal SOCKET CONTROL_PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    SOCK = argv[1];
    CPORT = atoi(argv[2]);
    json_t *h = ctl("GET", "/health", NULL);
    test_cond("the fake's control port answers", json_is_true(json_object_get(h, "ok")));
    json_decref(h);
    conn *c = cn_open(SOCK);
    test_cond("sbxd answers", c != NULL);
    if (!c)
        return test_report();
    test_info();
    test_basics(c);
    test_stdin(c);
    test_output(c);
    test_kill_timeout(c);
    test_create_drifts(c);
    test_router(c);
    test_flow_control();
    test_dead_sandbox(c);
    test_stop_start(c);
    test_snapshot(c);
    test_lost_backend(c);
    test_clone_destroy(c);
    test_create_errors(c);
    test_lifetime(c);
    json_t *mo = cn_call_t(c, LONG_MS, "sandbox.create",
                           json_pack("{s:s, s:s}", "id", "mo", "provider", "modal"));
    errmsg(mo);
    json_decref(mo);
    test_outage(c, 2.0);
    test_outage(c, 7.0);
    test_outage_exec_unknown(c);
    json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mo")));
    test_headers();
    cn_close(c);

    const char *s;
    if ((s = getenv("PTEST_NOCRED_SOCK")))
        test_nocred(s);
    if ((s = getenv("PTEST_BADCRED_SOCK")))
        test_badcred(s);
    if ((s = getenv("PTEST_DOWN_SOCK")))
        test_down(s);
    if ((s = getenv("PTEST_SHORT_SOCK"))) {
        test_v1_backend(s);
        test_outage_long(s);
    }
    const char *cmd = getenv("PTEST_SBXD_CMD"), *tmp = getenv("PTEST_TMP");
    if (cmd && tmp) {
        test_reconnect(cmd, tmp);
        test_restart_recovery(cmd, tmp);
        test_state_guard(cmd, tmp);
    }
    return test_report();
}
