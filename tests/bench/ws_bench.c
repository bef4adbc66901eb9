/*
 * ws_bench.c - sandboxes as workspaces (issue 18), each figure beside a
 * peer measured in the same run:
 *   - keystroke echo through a terminal (process.write of one byte until
 *     its echo arrives as process.output) beside the same through a pipe
 *     to cat;
 *   - download throughput through sandbox.expose (busybox httpd inside a
 *     network: none container) beside the same busybox httpd on the host;
 *   - a download from that host server by wget inside a network: none
 *     sandbox through the egress proxy, beside the host's direct download.
 *
 *   ws_bench SOCKET HOST_HTTPD_PORT EXPOSE_FILE_MB
 *
 * Prints; never fails. Run by ws_bench.sh, which starts sbxd and the host
 * server.
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "itest.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Reads pid's output until *have bytes reach want (or 5 s): each keystroke
 * is echoed as exactly one byte (the pty's echo; cat's copy through the
 * pipe), so counting bytes pairs each echo with its keystroke. */
static int wait_bytes(conn *cn, int pid, size_t *have, size_t want)
{
    double end = now_ms() + 5000;
    while (*have < want) {
        int left = (int)(end - now_ms());
        if (left <= 0)
            return 0;
        json_t *m = cn_read(cn, left);
        if (!m)
            return 0;
        json_t *p = json_object_get(m, "params");
        json_t *d = json_object_get(p, "data");
        if (json_is_string(d) && json_integer_value(json_object_get(p, "pid")) == pid)
            *have += json_string_length(d);
        json_decref(m);
    }
    return 1;
}

static double echo_rtt(conn *cn, const char *sb, int pty, double *p99)
{
    json_t *prm = json_pack("{s:s, s:s}", "sandbox", sb, "command", "exec cat");
    if (pty)
        json_object_set_new(prm, "pty", json_pack("{s:i, s:i}", "cols", 80, "rows", 24));
    json_t *r = cn_call(cn, "process.spawn", prm);
    int pid = (int)res_int(r, "pid");
    json_decref(r);
    enum { N = 200 };
    static double t[N];
    int n = 0;
    size_t have = 0;
    usleep(200000);
    for (int i = 0; i < N; i++) {
        char key[2] = {(char)('a' + i % 26), 0};
        double t0 = now_ms();
        /* Fire and forget: the answer to process.write is skipped by wait_bytes. */
        json_t *req = json_pack("{s:s, s:i, s:s, s:{s:s, s:i, s:s}}", "jsonrpc", "2.0",
                                "id", 100000 + i, "method", "process.write", "params",
                                "sandbox", sb, "pid", pid, "data", key);
        char *s = json_dumps(req, JSON_COMPACT);
        cn_send_raw(cn, s, strlen(s));
        cn_send_raw(cn, "\n", 1);
        free(s);
        json_decref(req);
        if (!wait_bytes(cn, pid, &have, (size_t)i + 1))
            break;
        t[n++] = now_ms() - t0;
    }
    json_decref(
        cn_call(cn, "process.kill", json_pack("{s:s, s:i}", "sandbox", sb, "pid", pid)));
    if (n == 0)
        return -1;
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    *p99 = t[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1];
    return t[n / 2];
}

static void bench_egress(conn *cn, const char *port, double mb2, double host)
{
    json_t *r;
    char cmd[256];
    /* Egress: the same host download from inside a network: none sandbox
     * through sbx-init's proxy and sbxd (allow list: localhost:PORT). */
    char opts[128];
    snprintf(opts, sizeof(opts), "{\"egress\": {\"allow\": [\"localhost:%s\"]}}", port);
    r = cn_call_t(cn, 120000, "sandbox.create",
                  json_pack("{s:s, s:s, s:o}", "id", "wsbe", "provider", "docker",
                            "options", json_loads(opts, 0, NULL)));
    int eg_up = res_of(r) != NULL;
    json_decref(r);
    if (eg_up) {
        snprintf(cmd, sizeof(cmd), "wget -q -O /dev/null http://localhost:%s/big", port);
        double t0 = now_ms();
        r = cn_call_t(cn, 300000, "process.exec",
                      json_pack("{s:s, s:s}", "sandbox", "wsbe", "command", cmd));
        double secs = (now_ms() - t0) / 1000;
        int ok = res_int(r, "exit_code") == 0 && res_of(r);
        json_decref(r);
        double egress = ok && secs > 0 ? mb2 / secs : -1;
        printf("  %-44s %8.1f MB/s            host busybox httpd direct %8.1f MB/s",
               "egress proxy download (wget in the sandbox)", egress, host);
        if (egress > 0 && host > 0)
            printf("  -> %.2fx", egress / host);
        printf("\n");
        json_decref(
            cn_call_t(cn, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "wsbe")));
    } else {
        printf("  (egress: the sandbox did not start)\n");
    }
}

/* MB/s of a curl download of url (size_download / time_total). */
static double download(const char *url, double *mb)
{
    char cmd[512], out[256] = "";
    snprintf(
        cmd, sizeof(cmd),
        "curl -s --max-time 300 -o /dev/null -w '%%{size_download} %%{time_total}' %s",
        url);
    FILE *f = popen(cmd, "r");
    if (f) {
        if (!fgets(out, sizeof(out), f))
            out[0] = '\0';
        pclose(f);
    }
    double bytes = 0, secs = 0;
    if (sscanf(out, "%lf %lf", &bytes, &secs) != 2 || secs <= 0)
        return -1;
    *mb = bytes / 1e6;
    return bytes / 1e6 / secs;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ws_bench SOCKET HOST_HTTPD_PORT FILE_MB\n");
        return 0;
    }
    conn *cn = NULL;
    for (int i = 0; i < 100 && !cn; i++)
        if (!(cn = cn_open(argv[1])))
            usleep(50000);
    if (!cn) {
        printf("  (skipped: sbxd did not answer)\n");
        return 0;
    }
    for (int i = 0; i < 100; i++) {
        json_t *info = cn_call(cn, "daemon.info", NULL);
        char *s = json_dumps(info, 0);
        int up = s && strstr(s, "\"api_version\"");
        free(s);
        json_decref(info);
        if (up)
            break;
        usleep(100000);
    }
    json_t *r = cn_call_t(cn, 120000, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "wsb", "provider", "docker"));
    if (!res_of(r)) {
        printf("  (skipped: no docker sandbox)\n");
        json_decref(r);
        return 0;
    }
    json_decref(r);

    double p99_pty = 0, p99_pipe = 0;
    double pty = echo_rtt(cn, "wsb", 1, &p99_pty),
           pipe = echo_rtt(cn, "wsb", 0, &p99_pipe);
    printf("  %-44s %8.3f ms (p99 %.3f)   through a pipe to cat %8.3f ms (p99 %.3f)",
           "keystroke echo through a pty, median", pty, p99_pty, pipe, p99_pipe);
    if (pty > 0 && pipe > 0)
        printf("  -> %.2fx", pty / pipe);
    printf("\n");

    int mbs = atoi(argv[3]);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "mkdir -p /www && head -c %d /dev/zero > /www/big",
             mbs << 20);
    json_decref(cn_call_t(cn, 120000, "process.exec",
                          json_pack("{s:s, s:s}", "sandbox", "wsb", "command", cmd)));
    json_decref(cn_call(cn, "process.spawn",
                        json_pack("{s:s, s:s}", "sandbox", "wsb", "command",
                                  "exec httpd -f -p 127.0.0.1:8080 -h /www")));
    usleep(300000);
    r = cn_call(cn, "sandbox.expose", json_pack("{s:s, s:i}", "id", "wsb", "port", 8080));
    char url[128], direct[128];
    snprintf(url, sizeof(url), "%sbig", res_str(r, "url"));
    json_decref(r);
    snprintf(direct, sizeof(direct), "http://127.0.0.1:%s/big", argv[2]);
    double mb1 = 0, mb2 = 0;
    double fwd = download(url, &mb1), host = download(direct, &mb2);
    printf("  %-44s %8.1f MB/s            host busybox httpd direct %8.1f MB/s",
           "port-forward (sandbox.expose) download", fwd, host);
    if (fwd > 0 && host > 0)
        printf("  -> %.2fx", fwd / host);
    printf("  (%.0f MB each)\n", mb1);
    json_decref(cn_call_t(cn, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "wsb")));

    bench_egress(cn, argv[2], mb2, host);
    cn_close(cn);
    return 0;
}
