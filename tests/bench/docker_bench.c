/*
 * docker_bench.c - Docker provider figures beside the same operations through
 * the docker CLI, in the same run. A benchmark: it prints and never fails.
 *
 *   docker_bench SBXD_SOCKET DOCKER_HOST IMAGE [quick]
 *
 * DOCKER_CLI (environment) names the docker binary (default: docker).
 */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/wait.h>

#include "itest.h"

extern char **environ;

static const char *sock, *host, *image, *cli;
static int quick;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* BENCH_VARIANT names another configuration of sbxd measured alone (no peers). */
static const char *variant;

static double pct(double *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    int i = (int)(n * p);
    return v[i < n ? i : n - 1];
}

/* Runs the docker CLI with args (NULL-terminated), stdout to /dev/null or to
 * out (first line kept). Returns the exit status. */
static int run_cli(char *const *args, char *out, size_t outlen)
{
    int pfd[2] = {-1, -1};
    if (out && pipe(pfd) < 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out)
        posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int r = posix_spawnp(&pid, cli, &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (out) {
        close(pfd[1]);
        ssize_t n = r == 0 ? read(pfd[0], out, outlen - 1) : -1;
        out[n > 0 ? n : 0] = '\0';
        char *nl = strchr(out, '\n');
        if (nl)
            *nl = '\0';
        close(pfd[0]);
    }
    if (r != 0)
        return -1;
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* argv for the docker CLI: "docker -H HOST" + the arguments; static storage,
 * valid until the next call. The strings are not written to (posix_spawn). */
static char **cli_argv(const char *first, ...)
{
    static char *v[32];
    int n = 0;
    v[n++] = (char *)(uintptr_t)cli;
    v[n++] = (char *)(uintptr_t) "-H";
    v[n++] = (char *)(uintptr_t)host;
    va_list ap;
    va_start(ap, first);
    for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
        v[n++] = (char *)(uintptr_t)a;
    va_end(ap);
    v[n] = NULL;
    return v;
}
#define CLI(...) cli_argv(__VA_ARGS__, (const char *)NULL)

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, 120000, m, p);
}

static void line(const char *what, double sbx, double dk, const char *unit,
                 int lower_better)
{
    printf("  %-40s sbxd %9.2f %-6s docker CLI %9.2f %-6s", what, sbx, unit, dk, unit);
    if (sbx > 0 && dk > 0)
        printf("  -> %.1fx %s", lower_better ? dk / sbx : sbx / dk,
               lower_better ? "faster" : "more");
    printf("\n");
}

/* ---- exec round trip
 * ------------------------------------------------------------------- */

/* The command of an exec: argv ["echo","hi"], or the string "echo hi" (sh -c). */
static json_t *echo_cmd(int shell)
{
    return shell ? json_string("echo hi") : json_pack("[s,s]", "echo", "hi");
}

/* p50/p99 of one command form in sandbox sb (container cid), beside the
 * docker CLI running the same form; the labels start with what. */
static void roundtrip_form(conn *c, const char *sb, const char *cid, int shell,
                           const char *what)
{
    int n = quick ? 50 : 300, nc = quick ? 10 : 30;
    double *v = calloc((size_t)n, sizeof(double)),
           *w = calloc((size_t)nc, sizeof(double));
    sleep(1); /* let the engine settle after what ran before */
    for (int i = 0; i < n + 10; i++) {
        double t = now_ms();
        /* stream false: the round trip is the call and its result, which
         * carries stdout; no process.output notifications on the side */
        json_decref(call(c, "process.exec",
                         json_pack("{s:s, s:o, s:b}", "sandbox", sb, "command",
                                   echo_cmd(shell), "stream", 0)));
        if (i >= 10) /* the first ten warm up */
            v[i - 10] = now_ms() - t;
    }
    char l50[80], l99[80];
    snprintf(l50, sizeof(l50), "%s%s", what,
             shell ? "exec `sh -c 'echo hi'` p50" : "exec `echo hi` round trip p50");
    snprintf(l99, sizeof(l99), "%s%s", what,
             shell ? "exec `sh -c 'echo hi'` p99" : "exec `echo hi` round trip p99");
    if (variant) { /* no peers */
        printf("  %-40s sbxd %9.2f ms\n", l50, pct(v, n, 0.5));
        printf("  %-40s sbxd %9.2f ms\n", l99, pct(v, n, 0.99));
    } else {
        for (int i = 0; i < nc; i++) {
            double t = now_ms();
            run_cli(shell ? CLI("exec", cid, "sh", "-c", "echo hi")
                          : CLI("exec", cid, "echo", "hi"),
                    NULL, 0);
            w[i] = now_ms() - t;
        }
        double s50 = pct(v, n, 0.5), s99 = pct(v, n, 0.99), d50 = pct(w, nc, 0.5),
               d99 = pct(w, nc, 0.99);
        line(l50, s50, d50, "ms", 1);
        line(l99, s99, d99, "ms", 1);
    }
    free(v);
    free(w);
}

static void bench_roundtrip(conn *c, const char *cid)
{
    roundtrip_form(c, "bench", cid, 0, "");
    roundtrip_form(c, "bench", cid, 1, "");
    if (variant)
        return;
    /* the floor here: starting any process */
    double f[20];
    for (int i = 0; i < 20; i++) {
        double t = now_ms();
        pid_t pid;
        char t0[] = "/bin/true";
        char *args[] = {t0, NULL};
        if (posix_spawn(&pid, "/bin/true", NULL, NULL, args, environ) == 0)
            waitpid(pid, NULL, 0);
        f[i] = now_ms() - t;
    }
    printf(
        "  %-40s %.2f ms (fork+exec of /bin/true on this host: the floor of any exec)\n",
        "process start on the host p50", pct(f, 20, 0.5));
}

/* ---- 16 concurrent execs
 * ---------------------------------------------------------------- */

static void bench_concurrent(const char *cid)
{
    enum { K = 16 };
    int total = quick ? 160 : 640;
    conn *cs[K];
    int sent = 0, done = 0;
    for (int i = 0; i < K; i++)
        cs[i] = cn_open(sock);
    double t = now_ms();
    const char *req =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"process.exec\",\"params\":"
        "{\"sandbox\":\"bench\",\"command\":[\"echo\",\"hi\"],\"stream\":false}}\n";
    for (int i = 0; i < K && sent < total; i++, sent++) {
        cn_send_raw(cs[i], req, strlen(req));
    }
    while (done < total && now_ms() - t < 120000) {
        struct pollfd p[K];
        for (int i = 0; i < K; i++)
            p[i] = (struct pollfd){.fd = cs[i]->fd, .events = POLLIN};
        poll(p, K, 1000);
        for (int i = 0; i < K; i++) {
            if (!(p[i].revents & POLLIN) && !(cs[i]->len > cs[i]->off))
                continue;
            json_t *m;
            while ((m = cn_read(cs[i], 0))) {
                if (json_object_get(m, "id")) {
                    done++;
                    if (sent < total) {
                        cn_send_raw(cs[i], req, strlen(req));
                        sent++;
                    }
                }
                json_decref(m);
            }
        }
    }
    double secs = (now_ms() - t) / 1000.0;
    double sbx = done / secs;
    for (int i = 0; i < K; i++)
        cn_close(cs[i]);

    /* the CLI: 16 at a time */
    int ctotal = quick ? 32 : 64;
    t = now_ms();
    int running = 0, started = 0, finished = 0;
    while (finished < ctotal) {
        while (running < K && started < ctotal) {
            pid_t pid;
            char *const *args = CLI("exec", cid, "echo", "hi");
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
            if (posix_spawnp(&pid, cli, &fa, NULL, args, environ) == 0)
                running++;
            posix_spawn_file_actions_destroy(&fa);
            started++;
        }
        if (wait(NULL) > 0) {
            running--;
            finished++;
        } else {
            break;
        }
    }
    double dk = finished / ((now_ms() - t) / 1000.0);
    line("16 concurrent execs, throughput", sbx, dk, "exec/s", 0);
}

/* ---- the engine's own API, no client library --------------------------------------- */

/* One HTTP/1.1 request on the engine's unix socket, read to EOF (Connection:
 * close). Returns the status; the body (after the headers) into out. */
static long raw_http(const char *method, const char *path, const char *body, char *out,
                     size_t outlen)
{
    const char *sp = strncmp(host, "unix://", 7) == 0 ? host + 7 : host;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sp);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[2048];
    int n =
        snprintf(req, sizeof(req),
                 "%s %s HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                 method, path, body ? strlen(body) : 0, body ? body : "");
    if (cn_send_raw(&(conn){.fd = fd}, req, (size_t)n) < 0) {
        close(fd);
        return -1;
    }
    char buf[65536];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof(buf) - 1 && (k = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)k;
    close(fd);
    buf[got] = '\0';
    long status = 0;
    if (sscanf(buf, "HTTP/1.%*d %ld", &status) != 1)
        return -1;
    const char *b = strstr(buf, "\r\n\r\n");
    if (out && outlen) {
        size_t bl = b ? got - (size_t)(b + 4 - buf) : 0;
        if (bl >= outlen)
            bl = outlen - 1;
        if (b)
            memcpy(out, b + 4, bl);
        out[bl] = '\0';
    }
    return status;
}

/* Create + start through the engine API, and create + start + first exec output. */
static void bench_engine(double *cs, double *cse, int n)
{
    for (int i = 0; i < n; i++) {
        char body[512], out[4096], path[256], id[80] = "";
        snprintf(body, sizeof(body),
                 "{\"Image\":\"%s\",\"Entrypoint\":[\"sleep\"],\"Cmd\":[\"3600\"],"
                 "\"HostConfig\":{\"NetworkMode\":\"none\"}}",
                 image);
        double t = now_ms();
        if (raw_http("POST", "/v1.41/containers/create", body, out, sizeof(out)) != 201)
            return;
        const char *p = strstr(out, "\"Id\":\"");
        if (p)
            snprintf(id, sizeof(id), "%.64s", p + 6);
        snprintf(path, sizeof(path), "/v1.41/containers/%s/start", id);
        raw_http("POST", path, NULL, NULL, 0);
        cs[i] = now_ms() - t;
        snprintf(path, sizeof(path), "/v1.41/containers/%s/exec", id);
        raw_http("POST", path, "{\"Cmd\":[\"echo\",\"hi\"],\"AttachStdout\":true}", out,
                 sizeof(out));
        char eid[80] = "";
        p = strstr(out, "\"Id\":\"");
        if (p)
            snprintf(eid, sizeof(eid), "%.64s", p + 6);
        snprintf(path, sizeof(path), "/v1.41/exec/%s/start", eid);
        raw_http("POST", path, "{\"Detach\":false}", out, sizeof(out));
        cse[i] = now_ms() - t;
        snprintf(path, sizeof(path), "/v1.41/containers/%s?force=1", id);
        raw_http("DELETE", path, NULL, NULL, 0);
    }
}

/* ---- create and destroy
 * ------------------------------------------------------------------ */

static void bench_lifecycle(conn *c)
{
    int n = quick ? 3 : 8;
    double cr[16], de[16], ccr[16], cde[16], ecs[16], ecse[16];
    memset(ecs, 0, sizeof(ecs));
    memset(ecse, 0, sizeof(ecse));
    for (int i = 0; i < n; i++) {
        char id[64];
        double t = now_ms();
        /* no id: sbxd makes one up, as most callers let it */
        json_t *cr0 = call(c, "sandbox.create", json_pack("{s:s}", "provider", "docker"));
        snprintf(id, sizeof(id), "%s", res_str(cr0, "id"));
        json_decref(cr0);
        json_decref(call(c, "process.exec",
                         json_pack("{s:s, s:o}", "sandbox", id, "command", echo_cmd(0))));
        cr[i] = now_ms() - t;
        t = now_ms();
        json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
        de[i] = now_ms() - t;
        /* interleaved, so that load on this shared machine hits all alike */
        bench_engine(ecs + i, ecse + i, 1);
        char cid[128] = "";
        t = now_ms();
        run_cli(
            CLI("run", "-d", "--network", "none", "--entrypoint", "sleep", image, "3600"),
            cid, sizeof(cid));
        run_cli(CLI("exec", cid, "echo", "hi"), NULL, 0);
        ccr[i] = now_ms() - t;
        t = now_ms();
        run_cli(CLI("rm", "-f", cid), NULL, 0);
        cde[i] = now_ms() - t;
    }
    line("create to first exec p50", pct(cr, n, 0.5), pct(ccr, n, 0.5), "ms", 1);
    line("destroy p50", pct(de, n, 0.5), pct(cde, n, 0.5), "ms", 1);
    printf("  %-40s engine API create+start p50 %.1f ms, + exec output p50 %.1f ms; "
           "sbxd create to first exec = %.2fx the engine's create+start\n",
           "the engine's own (raw HTTP, no client):", pct(ecs, n, 0.5), pct(ecse, n, 0.5),
           pct(ecs, n, 0.5) > 0 ? pct(cr, n, 0.5) / pct(ecs, n, 0.5) : 0);
    printf(
        "BENCHJSON {\"sbxd_create_exec_p50\": %.2f, \"sbxd_destroy_p50\": %.2f, "
        "\"cli_run_exec_p50\": %.2f, \"cli_rm_p50\": %.2f, \"engine_create_start_p50\": %.2f, "
        "\"engine_create_start_exec_p50\": %.2f}\n",
        pct(cr, n, 0.5), pct(de, n, 0.5), pct(ccr, n, 0.5), pct(cde, n, 0.5),
        pct(ecs, n, 0.5), pct(ecse, n, 0.5));
}

/* ---- a warm pool
 * ------------------------------------------------------------------------ */

static int pool_ready(conn *c)
{
    json_t *info = call(c, "daemon.info", NULL);
    int ready = -1;
    size_t i;
    json_t *pv;
    json_array_foreach(json_object_get(res_of(info), "providers"), i, pv) {
        json_t *pl =
            json_array_get(json_object_get(json_object_get(pv, "info"), "pools"), 0);
        if (pl)
            ready = (int)json_integer_value(json_object_get(pl, "ready"));
    }
    json_decref(info);
    return ready;
}

/* sbxd started with one pool of the bench image: create (from the pool) and
 * create to first exec output, each taken with the pool refilled first. */
static void bench_pool(conn *c, int size)
{
    int n = quick ? 5 : 20;
    double cr[64], ce[64], de[64];
    for (int i = 0; i < n; i++) {
        for (int w = 0; w < 600 && pool_ready(c) < size; w++)
            usleep(100000);
        char id[64];
        double t = now_ms();
        json_t *r = call(c, "sandbox.create", json_pack("{s:s}", "provider", "docker"));
        cr[i] = now_ms() - t;
        snprintf(id, sizeof(id), "%s", res_str(r, "id"));
        if (!json_object_get(json_object_get(res_of(r), "metadata"), "pool")) {
            char *s = json_dumps(r, 0);
            printf("  (the create did not take from the pool: %.300s)\n", s);
            free(s);
            json_decref(r);
            return;
        }
        json_decref(r);
        r = call(c, "process.exec",
                 json_pack("{s:s, s:o}", "sandbox", id, "command", echo_cmd(0)));
        ce[i] = now_ms() - t;
        json_decref(r);
        t = now_ms();
        json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", id)));
        de[i] = now_ms() - t;
    }
    printf(
        "  %-40s create p50 %.2f ms p99 %.2f ms; create to first exec output p50 %.2f ms "
        "p99 %.2f ms; destroy p50 %.1f ms (n=%d)\n",
        "warm pool (size 3, refilled between):", pct(cr, n, 0.5), pct(cr, n, 0.99),
        pct(ce, n, 0.5), pct(ce, n, 0.99), pct(de, n, 0.5), n);
    printf("BENCHJSON {\"pool_create_p50\": %.2f, \"pool_create_exec_p50\": %.2f, "
           "\"pool_create_exec_p99\": %.2f}\n",
           pct(cr, n, 0.5), pct(ce, n, 0.5), pct(ce, n, 0.99));
}

/* ---- streaming
 * ----------------------------------------------------------------------------- */

/* Counts payload bytes of process.output lines without a JSON parser (the data are
 * plain letters); returns at process.exit. */
static double stream_sbxd(conn *c, const char *sb, const char *cmd, uint64_t *bytes)
{
    json_t *r =
        call(c, "process.spawn", json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
    json_decref(r);
    double t = now_ms();
    uint64_t n = 0;
    char *buf = malloc(1 << 20);
    size_t have = 0;
    int exited = 0;
    while (!exited && now_ms() - t < 300000) {
        ssize_t k = recv(c->fd, buf + have, (1 << 20) - have, 0);
        if (k <= 0)
            break;
        have += (size_t)k;
        char *p = buf, *end = buf + have, *nl;
        while ((nl = memchr(p, '\n', (size_t)(end - p)))) {
            char *d = memmem(p, (size_t)(nl - p), "\"data\":\"", 8);
            if (d)
                n += (uint64_t)(nl - (d + 8) - 3); /* minus the closing "}} */
            else if (memmem(p, (size_t)(nl - p), "process.exit", 12))
                exited = 1;
            p = nl + 1;
        }
        have = (size_t)(end - p);
        memmove(buf, p, have);
    }
    free(buf);
    *bytes = n;
    return (now_ms() - t) / 1000.0;
}

/* MB/s of cmd's stdout through `docker exec` into cid, drained from a pipe. */
static double stream_cli(const char *cid, const char *cmd)
{
    double t = now_ms();
    int pfd[2];
    uint64_t got = 0;
    if (pipe(pfd) == 0) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
        pid_t pid;
        if (posix_spawnp(&pid, cli, &fa, NULL, CLI("exec", cid, "sh", "-c", cmd),
                         environ) == 0) {
            close(pfd[1]);
            char b[65536];
            ssize_t k;
            while ((k = read(pfd[0], b, sizeof(b))) > 0)
                got += (uint64_t)k;
            waitpid(pid, NULL, 0);
        } else {
            close(pfd[1]);
        }
        close(pfd[0]);
        posix_spawn_file_actions_destroy(&fa);
    }
    return got / 1048576.0 / ((now_ms() - t) / 1000.0);
}

static void bench_stream(conn *c, const char *cid)
{
    int mb = quick ? 100 : 500;
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "dd if=/dev/zero bs=64k count=%d 2>/dev/null | tr '\\0' x",
             mb * 16);
    /* The median of three runs (the first after a pause): the engine is still
     * cleaning up after the lifecycle section, and this VM's timing is noisy. */
    sleep(2);
    int runs = quick ? 1 : 3;
    double rates[3];
    uint64_t bytes = 0;
    for (int i = 0; i < runs; i++) {
        double s = stream_sbxd(c, "bench", cmd, &bytes);
        rates[i] = bytes / 1048576.0 / s;
    }
    double sbx = pct(rates, runs, 0.5);
    if (variant) { /* no peers */
        printf("  %-40s sbxd %9.2f MB/s\n", "stream, median of 3", sbx);
        return;
    }

    double dk = stream_cli(cid, cmd);
    double t;
    char what[80];
    snprintf(what, sizeof(what), "stream %d MB (dd bs=64k | tr), median of %d", mb, runs);
    line(what, sbx, dk, "MB/s", 0);
    if (bytes != (uint64_t)mb << 20)
        printf("  (sbxd delivered %llu bytes)\n", (unsigned long long)bytes);

    /* The ceiling of the engine's attach path: raw attach, read by curl. */
    char ccid[128] = "";
    char sh[300];
    snprintf(sh, sizeof(sh), "sleep 1; %s", cmd);
    run_cli(
        CLI("create", "--network", "none", "--log-driver", "none", image, "sh", "-c", sh),
        ccid, sizeof(ccid));
    if (!ccid[0])
        return;
    char url[300];
    snprintf(url, sizeof(url),
             "http://localhost/v1.41/containers/%s/attach?stream=1&stdout=1", ccid);
    pid_t cpid;
    char a0[] = "curl", a1[] = "-s", a2[] = "-o", a3[] = "/dev/null", a4[] = "-X",
         a5[] = "POST", a6[] = "--unix-socket";
    char *cargs[] = {a0,  a1,  a2, a3, a4, a5, a6, (char *)(uintptr_t)(host + 7),
                     url, NULL};
    if (strncmp(host, "unix://", 7) == 0 &&
        posix_spawnp(&cpid, "curl", NULL, NULL, cargs, environ) == 0) {
        usleep(300000);
        run_cli(CLI("start", ccid), NULL, 0);
        t = now_ms();
        waitpid(cpid, NULL, 0);
        double secs = (now_ms() - t) / 1000.0 - 1.0;
        printf("  %-40s %9.2f MB/s (docker's attach stream read by curl, no sbxd)\n",
               "raw attach ceiling", mb / (secs > 0.01 ? secs : 0.01));
    }
    run_cli(CLI("rm", "-f", ccid), NULL, 0);
}

/* ---- gVisor ------------------------------------------------------------------------ */

/* The same round trip in a sandbox with runtime runsc, beside docker exec into
 * that same container: what sbx-init and the agent channel add under gVisor. */
static void bench_runsc(conn *c)
{
    json_t *r =
        call(c, "sandbox.create",
             json_pack("{s:s, s:s, s:i, s:{s:s}}", "id", "bench-rs", "provider", "docker",
                       "timeout_ms", 3600000, "options", "runtime", "runsc"));
    json_t *md = json_object_get(res_of(r), "metadata");
    const char *cid = json_string_value(json_object_get(md, "container_id"));
    if (!cid) {
        const char *m =
            json_string_value(json_object_get(json_object_get(r, "error"), "message"));
        printf("  (runsc not measured: %.300s)\n", m ? m : "no sandbox");
        json_decref(r);
        return;
    }
    char id[128];
    snprintf(id, sizeof(id), "%s", cid);
    const char *ch = json_string_value(json_object_get(md, "channel"));
    printf("  gVisor: runtime runsc, agent channel %s (direct needs --host-uds=create in "
           "its runtimeArgs)\n",
           ch ? ch : "?");
    json_decref(r);
    roundtrip_form(c, "bench-rs", id, 0, "runsc ");
    if (!quick)
        roundtrip_form(c, "bench-rs", id, 1, "runsc ");
    int mb = quick ? 50 : 200;
    char cmd[160], what[80];
    snprintf(cmd, sizeof(cmd), "dd if=/dev/zero bs=64k count=%d 2>/dev/null | tr '\\0' x",
             mb * 16);
    uint64_t bytes = 0;
    double secs = stream_sbxd(c, "bench-rs", cmd, &bytes);
    snprintf(what, sizeof(what), "runsc stream %d MB (dd bs=64k | tr)", mb);
    line(what, bytes / 1048576.0 / secs, stream_cli(id, cmd), "MB/s", 0);
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "bench-rs")));
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: docker_bench SBXD_SOCKET DOCKER_HOST IMAGE [quick]\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    sock = argv[1];
    host = argv[2];
    image = argv[3];
    quick = argc > 4 && strcmp(argv[4], "quick") == 0;
    cli = getenv("DOCKER_CLI") ? getenv("DOCKER_CLI") : "docker";
    variant = getenv("BENCH_VARIANT");
    conn *c = NULL;
    for (int i = 0; i < 100 && !c; i++) {
        c = cn_open(sock);
        if (!c)
            usleep(50000);
    }
    if (!c) {
        printf("  (sbxd does not answer)\n");
        return 0;
    }
    /* the first engine ping is asynchronous */
    for (int i = 0; i < 100; i++) {
        json_t *info = call(c, "daemon.info", NULL);
        char *s = json_dumps(info, 0);
        int up = s && strstr(s, "\"api_version\"");
        free(s);
        json_decref(info);
        if (up)
            break;
        usleep(100000);
    }
    if (getenv("BENCH_POOL")) {
        bench_pool(c, 3);
        cn_close(c);
        return 0;
    }
    json_t *r = call(c, "sandbox.create",
                     json_pack("{s:s, s:s, s:i}", "id", "bench", "provider", "docker",
                               "timeout_ms", 3600000));
    const char *cid0 = json_string_value(
        json_object_get(json_object_get(res_of(r), "metadata"), "container_id"));
    if (!cid0) {
        char *s = json_dumps(r, 0);
        printf("  (cannot create a sandbox: %.300s)\n", s);
        free(s);
        return 0;
    }
    char cid[128];
    snprintf(cid, sizeof(cid), "%s", cid0);
    json_decref(r);
    /* BENCH_ONLY=roundtrip,concurrent,lifecycle,stream,runsc picks sections */
    const char *only = getenv("BENCH_ONLY");
#define WANT(s) (!only || strstr(only, s))
    if (WANT("roundtrip"))
        bench_roundtrip(c, cid);
    if (WANT("concurrent"))
        bench_concurrent(cid);
    if (WANT("lifecycle"))
        bench_lifecycle(c);
    if (WANT("stream"))
        bench_stream(c, cid);
    if (WANT("runsc"))
        bench_runsc(c);
#undef WANT
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "bench")));
    cn_close(c);
    return 0;
}
