/*
 * fs_bench.c - small-file round trips through libsbx: fs.write then fs.read
 * of a 1 KiB file, N times, on one connection. Prints the mean in ms.
 *
 *   fs_bench SOCKET SANDBOX N
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sbx/sbx.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: fs_bench SOCKET SANDBOX N\n");
        return 2;
    }
    int n = atoi(argv[3]);
    sbx_ctx *c = sbx_connect_unix(argv[1], 5000);
    if (!c || c->err) {
        fprintf(stderr, "fs_bench: %s\n", c ? c->errstr : "out of memory");
        return 1;
    }
    char data[1024];
    memset(data, 'x', sizeof(data));
    double t = now_ms();
    for (int i = 0; i < n; i++) {
        sbx_rpc_error *e = NULL;
        char *back = NULL;
        size_t len = 0;
        if (sbx_fs_write(c, NULL, &e, argv[2], "/workspace/small.txt", data, sizeof(data),
                         NULL) != SBX_OK ||
            sbx_fs_read(c, &back, &len, &e, argv[2], "/workspace/small.txt") != SBX_OK ||
            len != sizeof(data)) {
            fprintf(stderr, "fs_bench: %s\n", e ? e->message : c->errstr);
            return 1;
        }
        free(back);
    }
    printf("%.3f\n", (now_ms() - t) / n);
    sbx_free(c);
    return 0;
}
