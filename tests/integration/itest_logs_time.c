/*
 * itest_logs_time.c - the times of a process's output (issue 19: docker's
 * logs --since and -t), against a real sbxd over its socket with the
 * duktape provider. A program prints "one" (stdout), waits, "two"
 * (stderr), waits, "three" (stdout); the test brackets each moment with
 * its own wall clock. process.attach with timestamps gives every piece an
 * RFC 3339 time inside its bracket, stdout and stderr in the order they
 * were printed; since (an RFC 3339 string or a Unix time) between two
 * lines replays only the later ones; live pieces of a timed follower carry
 * times too; a malformed since is -32602 naming the param.
 * usage: itest_logs_time SOCKET
 */
#include <stdint.h>
#include <time.h>

#include "itest.h"
#include "testhelp.h"

#define GAP_MS 700

static const char prog[] =
    "function wait(ms) { var t = Date.now(); while (Date.now() - t < ms) {} }\n"
    "console.log('one'); wait(700); console.error('two'); wait(700);\n"
    "console.log('three'); 0";

static int64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ" (exactly docker's fixed nine digits) to
 * ns; -1 when it is not that. */
static int64_t parse_time(const char *s)
{
    struct tm tm = {0};
    long ns;
    int used = 0;
    if (!s || strlen(s) != 30 || s[19] != '.' || s[29] != 'Z' ||
        sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%9ld%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ns, &used) != 7 ||
        used != 29)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm) * 1000000000 + ns;
}

static void format_time(char *buf, size_t n, int64_t ns)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char day[32];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%09lldZ", day, (long long)(ns % 1000000000));
}

/* The process.output notes of pid in c->notes, in order, then cleared. */
static json_t *take_outputs(conn *c, json_int_t pid)
{
    json_t *out = json_array(), *m;
    size_t i;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") ==
                0 &&
            json_integer_value(json_object_get(p, "pid")) == pid)
            json_array_append(out, p);
    }
    json_array_clear(c->notes);
    return out;
}

/* The pieces' data joined with "|" between pieces: "one\n|two\n|three\n". */
static void joined(json_t *outs, char *buf, size_t n)
{
    size_t i, o = 0;
    json_t *p;
    buf[0] = '\0';
    json_array_foreach(outs, i, p) {
        const char *d = json_string_value(json_object_get(p, "data"));
        o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s%s", i ? "|" : "",
                              d ? d : "?");
        if (o >= n)
            return;
    }
}

/* Attach (params stolen, sandbox and pid added) and collect its replay. */
static json_t *attach(conn *c, const char *sb, json_int_t pid, json_t *params,
                      json_t **res_out)
{
    json_object_set_new(params, "sandbox", json_string(sb));
    json_object_set_new(params, "pid", json_integer(pid));
    json_array_clear(c->notes);
    json_t *r = cn_call(c, "process.attach", params);
    /* The replay comes before the answer; an exited process's exit after it. */
    json_t *m = cn_read(c, 300);
    if (m) {
        if (json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    if (res_out)
        *res_out = r;
    else
        json_decref(r);
    return take_outputs(c, pid);
}

static int64_t ptime(json_t *outs, size_t i)
{
    return parse_time(
        json_string_value(json_object_get(json_array_get(outs, i), "time")));
}

static void test_timed_replay(conn *c, const char *sb, json_int_t pid, int64_t t0,
                              int64_t t1, int64_t *mid_out)
{
    char buf[256];
    json_t *outs = attach(c, sb, pid, json_pack("{s:b}", "timestamps", 1), NULL);
    joined(outs, buf, sizeof(buf));
    test_eq_str("timed replay: stdout and stderr in the order printed", buf,
                "one\n|two\n|three\n");
    int64_t a = ptime(outs, 0), b = ptime(outs, 1), d = ptime(outs, 2);
    test_cond("each piece's time is RFC 3339 with nine digits", a > 0 && b > 0 && d > 0);
    test_cond("the times lie between the spawn and the exit", a >= t0 && d <= t1);
    test_cond("the times are ordered and a wait apart",
              a < b && b < d && b - a >= (GAP_MS - 50) * 1000000LL &&
                  d - b >= (GAP_MS - 50) * 1000000LL);
    *mid_out = a + (b - a) / 2;
    json_decref(outs);

    outs = attach(c, sb, pid, json_object(), NULL);
    joined(outs, buf, sizeof(buf));
    test_cond("untimed replay: all of stdout, then stderr, no time",
              strcmp(buf, "one\nthree\n|two\n") == 0 &&
                  !json_object_get(json_array_get(outs, 0), "time"));
    json_decref(outs);
}

static void test_since(conn *c, const char *sb, json_int_t pid, int64_t mid, int64_t t1)
{
    char buf[256], ts[64];
    format_time(ts, sizeof(ts), mid);
    json_t *outs = attach(c, sb, pid, json_pack("{s:s}", "since", ts), NULL);
    joined(outs, buf, sizeof(buf));
    test_eq_str("since (RFC 3339) between one and two: only the later lines", buf,
                "three\n|two\n");
    json_decref(outs);

    outs = attach(c, sb, pid,
                  json_pack("{s:f, s:b}", "since", (double)mid / 1e9, "timestamps", 1),
                  NULL);
    joined(outs, buf, sizeof(buf));
    test_eq_str("since (a Unix time) with timestamps: the later lines in order", buf,
                "two\n|three\n");
    json_decref(outs);

    json_t *r;
    outs = attach(c, sb, pid,
                  json_pack("{s:I}", "since", (json_int_t)(t1 / 1000000000 + 5)), &r);
    test_cond("since after the last output: nothing, *_start at the end",
              json_array_size(outs) == 0 &&
                  res_int(r, "stdout_start") == res_int(r, "stdout_offset") &&
                  res_int(r, "stderr_start") == res_int(r, "stderr_offset"));
    json_decref(r);
    json_decref(outs);

    static const char *const bad[] = {"\"yesterday\"",
                                      "\"2026-13-01T00:00:00Z\"",
                                      "\"2026-12-01T16:25:00\"",
                                      "-1",
                                      "true",
                                      NULL};
    int all = 1;
    for (int i = 0; bad[i]; i++) {
        json_t *v = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        r = cn_call(c, "process.attach",
                    json_pack("{s:s, s:I, s:o}", "sandbox", sb, "pid", pid, "since", v));
        const char *param = json_string_value(json_object_get(
            json_object_get(json_object_get(r, "error"), "data"), "param"));
        if (err_code(r) != -32602 || !param || strcmp(param, "since") != 0) {
            printf("      since %s: code %d\n", bad[i], err_code(r));
            all = 0;
        }
        json_decref(r);
    }
    test_cond("a malformed since is -32602 naming the param", all);
}

/* A follower that asked for timestamps gets them on live output too. */
static void test_live(conn *c, const char *sb)
{
    json_t *r = cn_call(c, "process.spawn",
                        json_pack("{s:s, s:s, s:b}", "sandbox", sb, "command",
                                  "var t = Date.now(); while (Date.now() - t < 800) {}\n"
                                  "console.log('late'); 0",
                                  "stream", 0));
    json_int_t pid = res_int(r, "pid");
    json_decref(r);
    int64_t t0 = wall_ns();
    json_decref(attach(c, sb, pid, json_pack("{s:b}", "timestamps", 1), NULL));
    json_t *m;
    int64_t got = -1;
    while ((m = cn_read(c, 5000))) {
        json_t *p = json_object_get(m, "params");
        const char *meth = json_string_value(json_object_get(m, "method"));
        int out = meth && strcmp(meth, "process.output") == 0;
        if (out && json_integer_value(json_object_get(p, "pid")) == pid)
            got = parse_time(json_string_value(json_object_get(p, "time")));
        int done = meth && strcmp(meth, "process.exit") == 0;
        json_decref(m);
        if (done || got >= 0)
            break;
    }
    test_cond("live output to a timed follower carries its time",
              got >= t0 && got <= wall_ns());
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
        return 2;
    }
    conn *c = cn_open(argv[1]);
    if (!c) {
        printf("cannot connect to %s\n", argv[1]);
        return 1;
    }
    const char *sb = "logs-time";
    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", sb)));
    json_t *r = cn_call(c, "sandbox.create",
                        json_pack("{s:s, s:s}", "id", sb, "provider", "duktape"));
    test_cond("a duktape sandbox", !json_object_get(r, "error"));
    json_decref(r);

    int64_t t0 = wall_ns();
    r = cn_call(
        c, "process.exec",
        json_pack("{s:s, s:s, s:b}", "sandbox", sb, "command", prog, "stream", 0));
    int64_t t1 = wall_ns();
    json_int_t pid = res_int(r, "pid");
    test_cond("the program ran", res_int(r, "exit_code") == 0 && pid > 0);
    json_decref(r);

    int64_t mid = 0;
    test_timed_replay(c, sb, pid, t0, t1, &mid);
    test_since(c, sb, pid, mid, t1);
    test_live(c, sb);

    json_decref(cn_call(c, "sandbox.destroy", json_pack("{s:s}", "id", sb)));
    cn_close(c);
    return test_report();
}
