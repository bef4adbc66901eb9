/* tsclient_rt SOCKET N - daemon.ping round trips through libsbx's sync API
 * (sbx_call), printed as "libsbx_ping_us P50 P99": the peer of the
 * TypeScript client's round trip in tests/bench/tsclient_bench.sh. */
#include <sbx/sbx.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SOCKET N\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    if (n < 10)
        n = 10;
    sbx_ctx *c = sbx_connect_unix(argv[1], 5000);
    if (!c || c->err) {
        fprintf(stderr, "connect: %s\n", c ? c->errstr : "out of memory");
        sbx_free(c);
        return 1;
    }
    double *v = calloc((size_t)n, sizeof(double));
    for (int i = -n / 10; i < n; i++) { /* the first tenth warms up */
        json_t *r = NULL;
        double t0 = now_us();
        if (sbx_call(c, &r, NULL, "daemon.ping", NULL) != SBX_OK) {
            fprintf(stderr, "ping: %s\n", c->errstr);
            return 1;
        }
        if (i >= 0)
            v[i] = now_us() - t0;
        json_decref(r);
    }
    qsort(v, (size_t)n, sizeof(double), cmp);
    printf("libsbx_ping_us %.1f %.1f\n", v[n / 2], v[n * 99 / 100]);
    free(v);
    sbx_free(c);
    return 0;
}
