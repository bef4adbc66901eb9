/*
 * modal_bench.c - exec round trips through sbxd's Modal provider: create one
 * sandbox, then run `echo hi` N times one after another (process.exec, reply
 * includes the output and the exit code). Prints one line:
 *   modal_bench: N execs, median X ms, mean Y ms, p90 Z ms
 * usage: modal_bench SOCKET [N]
 */
#include "itest.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: modal_bench SOCKET [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 30;
    if (n < 1 || n > 10000)
        n = 30;
    conn *c = cn_open(argv[1]);
    if (!c) {
        fprintf(stderr, "modal_bench: cannot connect to %s\n", argv[1]);
        return 1;
    }
    json_t *r = cn_call_t(c, 120000, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "bench-1", "provider", "modal"));
    if (strcmp(res_str(r, "status"), "running") != 0) {
        char *s = json_dumps(r, JSON_COMPACT);
        fprintf(stderr, "modal_bench: create failed: %s\n", s);
        free(s);
        return 1;
    }
    json_decref(r);
    /* One warm-up exec (auth token, connection). */
    json_decref(
        cn_call_t(c, 60000, "process.exec",
                  json_pack("{s:s, s:s}", "sandbox", "bench-1", "command", "true")));
    double *t = calloc((size_t)n, sizeof(double)), sum = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double t0 = now_ms();
        r = cn_call_t(c, 60000, "process.exec",
                      json_pack("{s:s, s:[s,s], s:b}", "sandbox", "bench-1", "command",
                                "echo", "hi", "stream", 0));
        t[i] = now_ms() - t0;
        sum += t[i];
        if (res_int(r, "exit_code") != 0 || strcmp(res_str(r, "stdout"), "hi\n") != 0)
            bad++;
        json_decref(r);
    }
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    printf("modal_bench: %d execs, median %.2f ms, mean %.2f ms, p90 %.2f ms%s\n", n,
           t[n / 2], sum / n, t[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1],
           bad ? " (SOME FAILED)" : "");
    json_decref(
        cn_call_t(c, 60000, "sandbox.destroy", json_pack("{s:s}", "id", "bench-1")));
    free(t);
    cn_close(c);
    return bad ? 1 : 0;
}
