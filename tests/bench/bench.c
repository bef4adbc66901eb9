/*
 * bench.c - sbxd figures over a real socket. A benchmark, not a test: it
 * prints numbers and never fails on them.
 * usage: bench SOCKET [quick]
 */
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "itest.h"

static const char *sock;
static int quick;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n, double ref_p50)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    double p50 = v[n / 2], p99 = v[(int)(n * 0.99)];
    printf("%-44s p50 %8.1f us   p99 %8.1f us", what, p50 * 1000, p99 * 1000);
    if (ref_p50 > 0)
        printf("   (%.2fx the raw socket round trip)", p50 / ref_p50);
    printf("\n");
}

/* The floor: a two-process Unix-socket echo round trip, measured here. */
static double raw_roundtrip(int n, double *v)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        char b[256];
        ssize_t r;
        while ((r = read(sv[1], b, sizeof(b))) > 0)
            if (write(sv[1], b, (size_t)r) != r)
                break;
        _exit(0);
    }
    close(sv[1]);
    const char *msg = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\"}\n";
    char b[256];
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        if (write(sv[0], msg, strlen(msg)) < 0 || read(sv[0], b, sizeof(b)) <= 0)
            break;
        v[i] = now_ms() - t;
    }
    close(sv[0]);
    waitpid(pid, NULL, 0);
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    printf("%-44s p50 %8.1f us   p99 %8.1f us\n", "raw two-process socket round trip",
           v[n / 2] * 1000, v[(int)(n * 0.99)] * 1000);
    return v[n / 2];
}

static void bench_ping(conn *c, double *v, int n, double ref)
{
    for (int i = 0; i < 100; i++)
        json_decref(cn_call(c, "daemon.ping", NULL));
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        json_decref(cn_call(c, "daemon.ping", NULL));
        v[i] = now_ms() - t;
    }
    report("daemon.ping round trip", v, n, ref);
}

/* The same round trip with the client's JSON work taken out: the request
 * pre-encoded, the reply read to its newline and checked for its id, not
 * parsed. What is left over the raw round trip is the daemon's. */
static void bench_ping_bare(double *v, int n, double ref)
{
    conn *c = cn_open(sock);
    char req[96], want[32], b[512];
    int bad = 0;
    for (int i = 0; i < n + 100; i++) {
        int rl = snprintf(req, sizeof(req),
                          "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.ping\"}\n",
                          i + 1);
        snprintf(want, sizeof(want), "\"id\":%d,", i + 1);
        double t = now_ms();
        if (cn_send_raw(c, req, (size_t)rl) < 0)
            break;
        size_t got = 0;
        while (got == 0 || b[got - 1] != '\n') {
            ssize_t r = recv(c->fd, b + got, sizeof(b) - 1 - got, 0);
            if (r <= 0 || got + (size_t)r >= sizeof(b) - 1) {
                got = 0;
                break;
            }
            got += (size_t)r;
        }
        if (got == 0)
            break;
        b[got] = '\0';
        if (!strstr(b, want) || !strstr(b, "\"pong\":true"))
            bad++;
        if (i >= 100)
            v[i - 100] = now_ms() - t;
    }
    cn_close(c);
    report("daemon.ping round trip, bare client", v, n, ref);
    if (bad)
        printf("  (%d replies without their id or pong)\n", bad);
}

static void bench_latency(double ref)
{
    int n = quick ? 500 : 5000;
    double *v = calloc((size_t)n, sizeof(double));
    bench_ping_bare(v, n, ref);
    conn *c = cn_open(sock);
    bench_ping(c, v, n, ref);

    int m = quick ? 100 : 1000;
    for (int i = 0; i < m; i++) {
        char id[32];
        snprintf(id, sizeof(id), "b%d", i);
        double t = now_ms();
        json_decref(cn_call(c, "sandbox.create",
                            json_pack("{s:s, s:s}", "provider", "duktape", "id", id)));
        json_decref(cn_call(
            c, "process.exec",
            json_pack("{s:s, s:s, s:b}", "sandbox", id, "command", "1+1", "stream", 0)));
        json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
        v[i] = now_ms() - t;
        /* pace to the warm pool's refill, as a steady client would */
    }
    report("duktape create + exec(1+1) + destroy", v, m, 0);

    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "hot")));
    for (int i = 0; i < 200; i++)
        json_decref(cn_call(c, "process.exec",
                            json_pack("{s:s, s:s, s:b}", "sandbox", "hot", "command",
                                      "1+1", "stream", 0)));
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        json_decref(cn_call(c, "process.exec",
                            json_pack("{s:s, s:s, s:b}", "sandbox", "hot", "command",
                                      "1+1", "stream", 0)));
        v[i] = now_ms() - t;
    }
    report("exec(1+1) on an existing duktape sandbox", v, n, 0);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "hot")));
    cn_close(c);
    free(v);
}

/* 64 clients, each with its own sandbox, each keeping one exec in flight. */
static void bench_concurrent(void)
{
    enum { N = 64 };
    conn *cs[N];
    char id[N][8];
    for (int i = 0; i < N; i++) {
        cs[i] = cn_open(sock);
        snprintf(id[i], sizeof(id[i]), "c%d", i);
        json_decref(cn_call(cs[i], "sandbox.create",
                            json_pack("{s:s, s:s}", "provider", "duktape", "id", id[i])));
    }
    char req[N][256];
    for (int i = 0; i < N; i++)
        snprintf(
            req[i], sizeof(req[i]),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"process.exec\",\"params\":{\"sandbox\":\"%.7s\","
            "\"command\":\"1+1\",\"stream\":false}}\n",
            id[i]);
    for (int i = 0; i < N; i++)
        cn_send_raw(cs[i], req[i], strlen(req[i]));
    long done = 0;
    double t0 = now_ms(), dur = quick ? 1000 : 3000;
    struct pollfd pf[N];
    while (now_ms() - t0 < dur) {
        for (int i = 0; i < N; i++)
            pf[i] = (struct pollfd){.fd = cs[i]->fd, .events = POLLIN};
        if (poll(pf, N, 100) <= 0)
            continue;
        for (int i = 0; i < N; i++) {
            if (!(pf[i].revents & POLLIN))
                continue;
            json_t *m = cn_read(cs[i], 0);
            while (m) {
                if (json_object_get(m, "id")) {
                    done++;
                    cn_send_raw(cs[i], req[i], strlen(req[i]));
                }
                json_decref(m);
                m = cn_read(cs[i], 0);
            }
        }
    }
    double secs = (now_ms() - t0) / 1000.0;
    printf("%-44s %8.0f execs/s\n", "64 concurrent clients, exec(1+1)", done / secs);
    for (int i = 0; i < N; i++) {
        /* drain the last in-flight answer */
        json_t *m = cn_read(cs[i], 2000);
        json_decref(m);
        json_decref(cn_call(cs[i], "sandbox.destroy", json_pack("{s:s}", "id", id[i])));
        cn_close(cs[i]);
    }
}

static void bench_stream(void)
{
    conn *c = cn_open(sock);
    json_decref(cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "provider", "duktape", "id", "stream")));
    long mb = quick ? 64 : 256;
    char code[200];
    snprintf(
        code, sizeof(code),
        "var s = new Array(65536).join('z'); for (var i = 0; i < %ld; i++) console.log(s); 0",
        mb * 16);
    json_t *req =
        json_pack("{s:s, s:i, s:s, s:{s:s, s:s}}", "jsonrpc", "2.0", "id", 99, "method",
                  "process.exec", "params", "sandbox", "stream", "command", code);
    char *s = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    double t0 = now_ms();
    cn_send_raw(c, s, strlen(s));
    cn_send_raw(c, "\n", 1);
    free(s);
    /* Lines are scanned, not parsed: a JSON parser on the client side would
     * measure the client. Payload bytes are the unescaped "data" lengths. */
    long bytes = 0;
    size_t cap = 1 << 22, len = 0;
    char *buf = malloc(cap);
    int done = 0;
    while (!done) {
        ssize_t r = recv(c->fd, buf + len, cap - len, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
        char *p = buf, *end = buf + len, *nl;
        while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
            char *d = memmem(p, (size_t)(nl - p), "\"data\":\"", 8);
            if (d) {
                long esc = 0;
                for (char *q = d + 8; q < nl - 3; q++)
                    if (*q == '\\') {
                        esc++;
                        q++;
                    }
                bytes += (long)(nl - 3 - (d + 8)) - esc;
            } else if (memmem(p, (size_t)(nl - p), "\"id\":99", 7)) {
                done = 1;
            }
            p = nl + 1;
        }
        memmove(buf, p, (size_t)(end - p));
        len = (size_t)(end - p);
    }
    free(buf);
    double secs = (now_ms() - t0) / 1000.0;
    printf("%-44s %8.1f MB/s (%ld MB)\n", "stdout streaming, duktape -> client",
           bytes / 1e6 / secs, bytes / 1000000);
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", "stream")));
    cn_close(c);
}

static long rss_kb(int pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

static void bench_idle_sessions(void)
{
    struct rlimit rl = {4096, 4096};
    setrlimit(RLIMIT_NOFILE, &rl);
    conn *c = cn_open(sock);
    json_t *r = cn_call(c, "daemon.info", NULL);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    long before = rss_kb(pid);
    enum { N = 1000 };
    static conn *cs[N];
    int opened = 0;
    for (int i = 0; i < N; i++) {
        cs[i] = cn_open(sock);
        if (!cs[i])
            break;
        opened++;
    }
    /* one round trip each, so the daemon has really accepted them all */
    for (int i = 0; i < opened; i++)
        json_decref(cn_call(cs[i], "daemon.ping", NULL));
    long after = rss_kb(pid);
    printf("%-44s %8ld kB (%ld kB before, %d sessions, %.1f kB each)\n",
           "daemon RSS with 1000 idle sessions", after, before, opened,
           opened ? (after - before) / (double)opened : 0.0);
    for (int i = 0; i < opened; i++)
        cn_close(cs[i]);
    cn_close(c);
}

/* Issue 11's fairness figure: one client's daemon.ping while another sends
 * 3 MB batches (50,000 pings each) back to back and reads the answers. */
/* The other client of bench_fairness: batches of 50,000 pings on its own
 * connection, each answer read without parsing, until stopfd is readable. */
static void flood_batches(int stopfd)
{
    enum { B = 50000 };
    size_t cap = (size_t)B * 64 + 16;
    char *line = malloc(cap), *o = line;
    *o++ = '[';
    for (int i = 0; i < B; i++)
        o += snprintf(o, cap - (size_t)(o - line),
                      "%s{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.ping\"}",
                      i ? "," : "", i + 1);
    *o++ = ']';
    *o++ = '\n';
    conn *f = cn_open(sock);
    char *buf = malloc(1 << 20);
    for (;;) {
        struct pollfd p = {.fd = stopfd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0)
            break;
        if (cn_send_raw(f, line, (size_t)(o - line)) < 0)
            break;
        /* read the answer (one line) without parsing it */
        int done = 0;
        while (!done) {
            ssize_t r = recv(f->fd, buf, 1 << 20, 0);
            if (r <= 0)
                _exit(0);
            done = memchr(buf, '\n', (size_t)r) != NULL;
        }
    }
    _exit(0);
}

static void bench_fairness(void)
{
    int n = quick ? 300 : 2000;
    double *quiet = calloc((size_t)n, sizeof(double)),
           *loaded = calloc((size_t)n, sizeof(double));
    conn *c = cn_open(sock);
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        json_decref(cn_call(c, "daemon.ping", NULL));
        quiet[i] = now_ms() - t;
    }
    int stop[2];
    if (pipe(stop) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(stop[1]);
        flood_batches(stop[0]);
    }
    close(stop[0]);
    usleep(300000); /* the flood is under way */
    json_t *info0 = cn_call(c, "daemon.info", NULL);
    json_t *before = json_object_get(res_of(info0), "loop");
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        json_decref(cn_call(c, "daemon.ping", NULL));
        loaded[i] = now_ms() - t;
        usleep(1000);
    }
    json_t *info = cn_call(c, "daemon.info", NULL);
    json_t *after = json_object_get(res_of(info), "loop");
    close(stop[1]);
    waitpid(pid, NULL, 0);
    qsort(quiet, (size_t)n, sizeof(double), cmp_d);
    qsort(loaded, (size_t)n, sizeof(double), cmp_d);
    printf("%-44s p50 %8.1f us   p99 %8.1f us   (quiet: p50 %.1f us, p99 %.1f us)\n",
           "ping while another client floods 3 MB batches", loaded[n / 2] * 1000,
           loaded[(int)(n * 0.99)] * 1000, quiet[n / 2] * 1000,
           quiet[(int)(n * 0.99)] * 1000);
    /* The same flood seen from inside: the loop's turns in its own CPU time,
     * which the host's other load (and this machine's 2 cores shared by
     * three busy processes) does not inflate. */
#define LOOPD(k)                                                                         \
    (json_integer_value(json_object_get(json_object_get(after, "turns_over_ms"), k)) -   \
     json_integer_value(json_object_get(json_object_get(before, "turns_over_ms"), k)))
    printf(
        "%-44s %lld turns: %lld over 1 ms, %lld over 2 ms, %lld over 4 ms, %lld over 8 ms;"
        " longest since start %.2f ms\n",
        "  the daemon's loop during that flood",
        (long long)(json_integer_value(json_object_get(after, "turns")) -
                    json_integer_value(json_object_get(before, "turns"))),
        (long long)LOOPD("1"), (long long)LOOPD("2"), (long long)LOOPD("4"),
        (long long)LOOPD("8"),
        json_real_value(json_object_get(after, "longest_turn_ms")));
#undef LOOPD
    json_decref(info0);
    json_decref(info);
    cn_close(c);
    free(quiet);
    free(loaded);
}

/* Issue 11: RSS after 10,000 processes printing 1 MB each stays flat (replay
 * and results are bounded by limits.retained_bytes_*). spawn + wait, so the
 * output stays in the daemon's replay rings instead of going to the client. */
static void bench_exec_rss(void)
{
    int n = quick ? 1000 : 10000;
    conn *c = cn_open(sock);
    json_t *r = cn_call(c, "daemon.info", NULL);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    enum { S = 8 };
    char ids[S][16];
    const char *prov =
        getenv("SBX_BENCH_PROVIDER") ? getenv("SBX_BENCH_PROVIDER") : "duktape";
    for (int i = 0; i < S; i++) {
        snprintf(ids[i], sizeof(ids[i]), "rss%d", i);
        json_decref(cn_call(c, "sandbox.create",
                            json_pack("{s:s, s:s}", "id", ids[i], "provider", prov)));
    }
    const char *cmd = "var s = '0123456789abcdef'; while (s.length < 1000000) s += s; "
                      "console.log(s.slice(0, 999999)); 1";
    long first = 0, mid = 0;
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        const char *sb = ids[i % S];
        r = cn_call(
            c, "process.spawn",
            json_pack("{s:s, s:s, s:b}", "sandbox", sb, "command", cmd, "stream", 0));
        json_int_t p = res_int(r, "pid");
        json_decref(r);
        json_decref(
            cn_call(c, "process.wait", json_pack("{s:s, s:I}", "sandbox", sb, "pid", p)));
        if (i == n / 10)
            first = rss_kb(pid);
        if (i == n / 2)
            mid = rss_kb(pid);
    }
    double secs = (now_ms() - t0) / 1000.0;
    long last = rss_kb(pid);
    char what[80];
    snprintf(what, sizeof(what), "daemon RSS, %s processes printing 1 MB each", prov);
    printf("%-44s %8ld kB after %d (%ld kB after %d, %ld kB after %d; %.0f s)\n", what,
           last, n, first, n / 10, mid, n / 2, secs);
    for (int i = 0; i < S; i++)
        json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", ids[i])));
    cn_close(c);
}

static int run_only(const char *only);

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET [quick]\n", argv[0]);
        return 2;
    }
    sock = argv[1];
    quick = argc > 2;
    signal(SIGPIPE, SIG_IGN);
    /* SBX_BENCH_ONLY=fairness|ping|exec_rss|stream: one figure, for working on it. */
    if (getenv("SBX_BENCH_ONLY"))
        return run_only(getenv("SBX_BENCH_ONLY"));
    double *v = calloc(5000, sizeof(double));
    double ref = raw_roundtrip(quick ? 500 : 5000, v);
    free(v);
    /* First, while the daemon's heap is fresh: later runs leave freed memory
     * that malloc keeps, and sessions would reuse it unseen. */
    bench_idle_sessions();
    bench_latency(ref);
    bench_concurrent();
    bench_stream();
    bench_fairness();
    bench_exec_rss();
    return 0;
}

static int run_only(const char *only)
{
    if (strcmp(only, "fairness") == 0) {
        bench_fairness();
    } else if (strcmp(only, "ping") == 0) {
        /* The round trip and its floor alone, for comparing two daemons. */
        double *v = calloc(5000, sizeof(double));
        int n = quick ? 500 : 5000;
        double ref = raw_roundtrip(n, v);
        conn *c = cn_open(sock);
        bench_ping(c, v, n, ref);
        cn_close(c);
        bench_ping_bare(v, n, ref);
        free(v);
    } else if (strcmp(only, "stream") == 0)
        bench_stream();
    else if (strcmp(only, "exec_rss") == 0)
        bench_exec_rss();
    else
        return 2;
    return 0;
}
