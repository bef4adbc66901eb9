/*
 * stats.c - sbxctl stats [--no-stream] [ID...]: sandboxes' resource use as
 * `docker stats` shows it (sandbox.stats; PROTOCOL.md, Resource stats).
 *
 * Without IDs: every running sandbox of the caller. Streaming (the
 * default) asks sandbox.stats {stream: true} for each and redraws the table
 * as the daemon's sandbox.stats notifications come, until Ctrl-C; on a
 * terminal the screen is cleared for each table, elsewhere the tables
 * follow each other. --no-stream prints one table (with --json: the
 * samples as a JSON array) and exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxctl.h"

struct row {
    char *id;
    json_t *st; /* the last sample, or NULL */
    int fresh;  /* updated since the last table */
};

static double num(json_t *o, const char *obj, const char *key)
{
    json_t *v = json_object_get(obj ? json_object_get(o, obj) : o, key);
    return json_is_number(v) ? json_number_value(v) : 0;
}

/* 1.5KiB, 63.2MiB, as docker stats (binary units, one decimal). */
static void human(char *out, size_t cap, double b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%.0f%s", b, units[u]);
    else
        snprintf(out, cap, "%.4g%s", b, units[u]);
}

static void pair(char *out, size_t cap, double a, double b)
{
    char x[32], y[32];
    human(x, sizeof(x), a);
    human(y, sizeof(y), b);
    snprintf(out, cap, "%s / %s", x, y);
}

static void print_table(struct row *rows, size_t n, int clear)
{
    if (clear)
        fputs("\033[H\033[2J", stdout);
    int wid = 12;
    for (size_t i = 0; i < n; i++)
        if ((int)strlen(rows[i].id) > wid)
            wid = (int)strlen(rows[i].id);
    printf("%-*s  %-8s  %-22s  %-7s  %-20s  %-20s  %s\n", wid, "ID", "CPU %",
           "MEM USAGE / LIMIT", "MEM %", "NET I/O", "BLOCK I/O", "PIDS");
    for (size_t i = 0; i < n; i++) {
        json_t *s = rows[i].st;
        if (!s) {
            printf("%-*s  %-8s  %-22s  %-7s  %-20s  %-20s  %s\n", wid, rows[i].id, "--",
                   "-- / --", "--", "--", "--", "--");
            continue;
        }
        char cpu[16], mem[72], memp[16], net[72], blk[72];
        snprintf(cpu, sizeof(cpu), "%.2f%%", num(s, "cpu", "percent"));
        double cur = num(s, "memory", "current"), lim = num(s, "memory", "limit");
        if (lim > 0) {
            pair(mem, sizeof(mem), cur, lim);
            snprintf(memp, sizeof(memp), "%.2f%%", cur / lim * 100);
        } else {
            human(mem, sizeof(mem), cur);
            snprintf(memp, sizeof(memp), "--");
        }
        if (json_is_object(json_object_get(s, "network")))
            pair(net, sizeof(net), num(s, "network", "rx_bytes"),
                 num(s, "network", "tx_bytes"));
        else
            snprintf(net, sizeof(net), "--");
        if (json_is_object(json_object_get(s, "block_io")))
            pair(blk, sizeof(blk), num(s, "block_io", "read_bytes"),
                 num(s, "block_io", "write_bytes"));
        else
            snprintf(blk, sizeof(blk), "--");
        printf("%-*s  %-8s  %-22s  %-7s  %-20s  %-20s  %.0f\n", wid, rows[i].id, cpu, mem,
               memp, net, blk, num(s, "pids", "current"));
        rows[i].fresh = 0;
    }
    if (!clear)
        putchar('\n');
    fflush(stdout);
}

static const struct opt stats_opts[] = {
    {"no-stream", 0, 0, 1},
    {NULL, 0, 0, 0},
};

int cmd_stats(int argc, char **argv)
{
    struct parser p;
    int o, stream = 1, rc = 0;
    json_t *ids = json_array();

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, stats_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            json_array_append_new(ids, json_string(p.arg));
        else if (o == 1)
            stream = 0;
    }
    sbx_ctx *c = ctl_connect();
    if (json_array_size(ids) == 0) {
        json_t *r;
        rc = ctl_call(c, SBX_M_LIST, json_pack("{s:s}", "status", "running"), &r);
        if (rc)
            goto out;
        size_t i;
        json_t *sb;
        json_array_foreach(json_object_get(r, "sandboxes"), i, sb)
            json_array_append(ids, json_object_get(sb, "id"));
        json_decref(r);
    }
    size_t n = json_array_size(ids);
    struct row *rows = ctl_nonnull(calloc(n ? n : 1, sizeof(*rows)));
    for (size_t i = 0; i < n; i++) {
        rows[i].id = ctl_nonnull(strdup(json_string_value(json_array_get(ids, i))));
        json_t *r = NULL;
        if (ctl_call(c, SBX_M_STATS,
                     json_pack("{s:s, s:b}", "id", rows[i].id, "stream", stream), &r)) {
            rc = EXIT_RPC;
            continue;
        }
        rows[i].st = r;
    }
    if (!stream) {
        if (g.json) {
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++)
                if (rows[i].st)
                    json_array_append(arr, rows[i].st);
            print_json(arr);
            json_decref(arr);
        } else {
            print_table(rows, n, 0);
        }
    } else if (n > 0) {
        int clear = isatty(1);
        print_table(rows, n, clear);
        for (;;) {
            json_t *m = NULL;
            if (sbx_read_notification(c, &m, -1) != SBX_OK) {
                warnx_("connection to sbxd lost: %s", c->errstr);
                rc = EXIT_RPC;
                break;
            }
            const char *meth = json_string_value(json_object_get(m, "method"));
            json_t *params = json_object_get(m, "params");
            const char *id = json_string_value(json_object_get(params, "id"));
            if (meth && id && strcmp(meth, SBX_N_STATS) == 0) {
                /* A table once every sandbox has a new sample, or when one
                 * comes round again before the others (a slow one). */
                int again = 0, all = 1;
                for (size_t i = 0; i < n; i++)
                    if (strcmp(rows[i].id, id) == 0) {
                        again = rows[i].fresh;
                        json_decref(rows[i].st);
                        rows[i].st = json_incref(params);
                        rows[i].fresh = 1;
                    }
                for (size_t i = 0; i < n; i++)
                    all &= rows[i].fresh || !rows[i].st;
                if (all || again) {
                    if (g.json)
                        print_json(params);
                    else
                        print_table(rows, n, clear);
                }
            }
            json_decref(m);
        }
    }
    for (size_t i = 0; i < n; i++) {
        free(rows[i].id);
        json_decref(rows[i].st);
    }
    free(rows);
out:
    json_decref(ids);
    sbx_free(c);
    return rc;
}
