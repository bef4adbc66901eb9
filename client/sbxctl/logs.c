/*
 * logs.c - sbxctl logs: a process's buffered output, as docker logs prints
 * a container's: --tail N, --since T, -t/--timestamps, -f.
 *
 * The daemon does the time part (process.attach since/timestamps: it
 * starts the replay at the first output that arrived at or after since
 * and gives each piece its time, stdout and stderr in arrival order);
 * --tail is counted here over what it replays, so the three combine as
 * docker's do: the last N lines of the output since T.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbxctl.h"

struct logs_state {
    const char *sandbox;
    json_int_t pid;
    json_int_t end[3]; /* per stream: offset after the last byte received */
    int exited;
    int status; /* the exit status from process.exit */
    /* --tail N: the replay is held (as chunks in arrival order, bounded by
     * what sbxd replays) and only its last N lines printed. */
    long tail; /* -1: all */
    int holding;
    struct chunk {
        int stream;
        char *data;
        size_t len;
        char *time; /* -t: the piece's "time", or NULL */
    } * held;
    size_t nheld, capheld;
    int timestamps;
    int mid_line[3]; /* per stream: the last byte printed was not a newline */
};

/* Prints data of stream; with -t each line that starts here is prefixed by
 * the piece's time, as docker logs -t prints it. */
static void logs_write(struct logs_state *s, int stream, const char *data, size_t len,
                       const char *time)
{
    FILE *f = stream == SBX_STDERR ? stderr : stdout;
    if (!s->timestamps || !time) {
        fwrite(data, 1, len, f);
    } else {
        size_t i = 0;
        while (i < len) {
            const char *nl = memchr(data + i, '\n', len - i);
            size_t k = nl ? (size_t)(nl - (data + i)) + 1 : len - i;
            if (!s->mid_line[stream])
                fprintf(f, "%s ", time);
            fwrite(data + i, 1, k, f);
            s->mid_line[stream] = data[i + k - 1] != '\n';
            i += k;
        }
    }
    fflush(f);
}

/* Prints the held replay's last s->tail lines (counted over both streams,
 * in the order they arrived), then stops holding. */
static void logs_flush(struct logs_state *s)
{
    size_t from_chunk = 0, from_off = 0;
    long need = s->tail;
    int first = 1, found = 0;
    if (need == 0) {
        from_chunk = s->nheld;
        found = 1;
    }
    /* Back from the end: the tail-th newline before the last byte starts it. */
    for (size_t ci = s->nheld; !found && ci-- > 0;) {
        const struct chunk *k = &s->held[ci];
        for (size_t j = k->len; j-- > 0;) {
            int nl = k->data[j] == '\n';
            if (first) {
                first = 0;
                if (nl)
                    continue; /* the newline that ends the last line */
            }
            if (nl && --need == 0) {
                from_chunk = ci;
                from_off = j + 1;
                found = 1;
                break;
            }
        }
    }
    for (size_t i = from_chunk; i < s->nheld; i++) {
        const struct chunk *k = &s->held[i];
        size_t off = i == from_chunk ? from_off : 0;
        logs_write(s, k->stream, k->data + off, k->len - off, k->time);
    }
    for (size_t i = 0; i < s->nheld; i++) {
        free(s->held[i].data);
        free(s->held[i].time);
    }
    free(s->held);
    s->held = NULL;
    s->nheld = s->capheld = 0;
    s->holding = 0;
}

static void logs_note(struct logs_state *s, const char *method, json_t *params)
{
    const char *sb = json_string_value(json_object_get(params, "sandbox"));
    json_t *pid = json_object_get(params, "pid");

    if (!sb || strcmp(sb, s->sandbox) != 0 || !json_is_integer(pid) ||
        json_integer_value(pid) != s->pid)
        return;
    if (strcmp(method, SBX_N_EXIT) == 0) {
        s->exited = 1;
        s->status = exit_status(params);
        return;
    }
    if (strcmp(method, SBX_N_OUTPUT) != 0)
        return;
    int stream;
    char *data;
    size_t len;
    if (sbx_output_decode(&stream, &data, &len, params) != SBX_OK)
        return;
    const char *time = json_string_value(json_object_get(params, "time"));
    if (s->holding) {
        if (s->nheld == s->capheld) {
            s->capheld = s->capheld ? 2 * s->capheld : 64;
            s->held = ctl_nonnull(realloc(s->held, s->capheld * sizeof(*s->held)));
        }
        s->held[s->nheld++] =
            (struct chunk){stream, data, len, time ? ctl_nonnull(strdup(time)) : NULL};
    } else {
        logs_write(s, stream, data, len, time);
        free(data);
    }
    json_int_t end =
        json_integer_value(json_object_get(params, "offset")) + (json_int_t)len;
    if (end > s->end[stream])
        s->end[stream] = end;
}

static void logs_cb(sbx_ctx *c, const char *method, json_t *params, void *privdata)
{
    (void)c;
    logs_note(privdata, method, params);
}

/* ---- --since ----------------------------------------------------------------------- */

/* A Go duration as docker reads one ("10m", "1h30m", "1.5h", "250ms") into
 * *out in ns; -1 when s is not one. */
static int go_duration_ns(const char *s, double *out)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {{"ns", 1},  {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"ms", 1e6},
                 {"s", 1e9}, {"m", 60e9}, {"h", 3600e9},      {NULL, 0}};
    double total = 0;
    int sign = 1;
    if (*s == '+' || *s == '-')
        sign = *s++ == '-' ? -1 : 1;
    if (!*s)
        return -1;
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    while (*s) {
        char *e;
        if (!isdigit((unsigned char)*s) && *s != '.')
            return -1;
        double v = strtod(s, &e);
        if (e == s)
            return -1;
        s = e;
        size_t best = 0;
        double mult = 0;
        for (size_t i = 0; units[i].unit; i++) {
            size_t n = strlen(units[i].unit);
            if (n > best && strncmp(s, units[i].unit, n) == 0) {
                best = n;
                mult = units[i].ns;
            }
        }
        if (!best)
            return -1;
        total += v * mult;
        s += best;
    }
    *out = sign * total;
    return 0;
}

/* n digits of s as a number, advancing s; -1 when they are not digits. */
static int take_digits(const char **s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*s)[i]))
            return -1;
        v = v * 10 + ((*s)[i] - '0');
    }
    *s += n;
    return v;
}

/* The date-time forms docker's --since takes: YYYY-MM-DD, then optionally
 * THH, THH:MM, THH:MM:SS[.frac], then optionally Z or +HH:MM / -HH:MM;
 * without a zone it is local time. Returns 0 with *sec_out and *ns_out. */
static int parse_datetime(const char *s, long long *sec_out, long *ns_out)
{
    struct tm tm = {0};
    long ns = 0;
    int y = take_digits(&s, 4), mo, d, h = 0, mi = 0, sec = 0;
    if (y < 0 || *s++ != '-' || (mo = take_digits(&s, 2)) < 1 || mo > 12 || *s++ != '-' ||
        (d = take_digits(&s, 2)) < 1 || d > 31)
        return -1;
    if (*s == 'T' || *s == 't') {
        s++;
        if ((h = take_digits(&s, 2)) < 0 || h > 23)
            return -1;
        if (*s == ':' && (s++, (mi = take_digits(&s, 2)) < 0 || mi > 59))
            return -1;
        if (*s == ':' && (s++, (sec = take_digits(&s, 2)) < 0 || sec > 60))
            return -1;
        if (*s == '.') {
            int nd = 0;
            for (s++; isdigit((unsigned char)*s); s++, nd++)
                if (nd < 9)
                    ns = ns * 10 + (*s - '0');
            if (nd == 0)
                return -1;
            for (; nd < 9; nd++)
                ns *= 10;
        }
    }
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t;
    if (*s == '\0') {
        tm.tm_isdst = -1;
        t = mktime(&tm); /* no zone: the local time, as docker reads it */
    } else if ((*s == 'Z' || *s == 'z') && s[1] == '\0') {
        t = timegm(&tm);
    } else if ((*s == '+' || *s == '-') && strlen(s) == 6 && s[3] == ':') {
        int sign = *s == '-' ? -1 : 1;
        const char *z = s + 1;
        int oh = take_digits(&z, 2);
        z++;
        int om = take_digits(&z, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return -1;
        t = timegm(&tm) - sign * (oh * 3600 + om * 60);
    } else {
        return -1;
    }
    *sec_out = (long long)t;
    *ns_out = ns;
    return 0;
}

/* --since as docker takes it (a duration back from now, a date-time, or a
 * Unix time "SECONDS[.FRACTION]"), as the UTC RFC 3339 string that
 * process.attach takes, into buf. */
static void since_param(const char *arg, char *buf, size_t size)
{
    long long sec;
    long ns = 0;
    double dur;
    if (go_duration_ns(arg, &dur) == 0) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        double t = (double)now.tv_sec * 1e9 + (double)now.tv_nsec - dur;
        sec = (long long)(t / 1e9);
        ns = (long)(t - (double)sec * 1e9);
        if (ns < 0)
            ns = 0;
    } else if (parse_datetime(arg, &sec, &ns) < 0) {
        char *e;
        double v = strtod(arg, &e);
        if (e == arg || *e || !isdigit((unsigned char)*arg) || v < 0)
            usage_error("--since: %s is not a duration (10m, 2h), a date-time "
                        "(2026-12-01T16:25:00Z) or a Unix time",
                        arg);
        const char *dot = strchr(arg, '.');
        sec = strtoll(arg, NULL, 10);
        if (dot) {
            int nd = 0;
            for (const char *q = dot + 1; isdigit((unsigned char)*q) && nd < 9; q++, nd++)
                ns = ns * 10 + (*q - '0');
            for (; nd < 9; nd++)
                ns *= 10;
        }
    }
    if (sec < 0)
        sec = 0, ns = 0;
    time_t t = (time_t)sec;
    struct tm tm;
    gmtime_r(&t, &tm);
    char day[32];
    strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, size, "%s.%09ldZ", day, ns);
}

/* ---- the verb ---------------------------------------------------------------------- */

static const struct opt logs_opts[] = {
    {"follow", 'f', 0, 1}, {"tail", 'n', 1, 2}, {"timestamps", 't', 0, 3},
    {"since", 0, 1, 4},    {NULL, 0, 0, 0},
};

int cmd_logs(int argc, char **argv)
{
    struct parser p;
    const char *id = NULL, *pid = NULL, *since = NULL;
    int follow = 0, timestamps = 0, o;
    long tail = -1;
    json_t *r;

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, logs_opts)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (o == OPT_ARG)
            args_id_pid(p.arg, &id, &pid);
        else if (o == 1)
            follow = 1;
        else if (o == 3)
            timestamps = 1;
        else if (o == 4)
            since = p.arg;
        else if (strcmp(p.arg, "all") != 0 && (tail = (long)arg_int("--tail", p.arg)) < 0)
            usage_error("--tail: a number of lines, or all");
    }
    if (!id || !pid)
        usage_error("missing %s", id ? "PID" : "sandbox ID");

    struct logs_state s = {.sandbox = id,
                           .pid = arg_int("PID", pid),
                           .tail = tail,
                           .holding = tail >= 0,
                           .timestamps = timestamps};
    json_t *params =
        json_pack("{s:s, s:I, s:b}", "sandbox", id, "pid", s.pid, "follow", follow);
    if (since) {
        char t[64];
        since_param(since, t, sizeof(t));
        json_object_set_new(params, "since", json_string(t));
    }
    /* Always timed, printed or not: the replay then comes in the order it was
     * printed over both streams, so --tail's last N lines are docker's. */
    json_object_set_new(params, "timestamps", json_true());
    sbx_ctx *c = ctl_connect();
    sbx_set_notify_cb(c, logs_cb, &s);
    int rc = ctl_call(c, SBX_M_ATTACH, params, &r);
    if (rc) {
        sbx_free(c);
        return rc;
    }
    int running = json_is_true(json_object_get(r, "running"));
    json_int_t want[3] = {0, json_integer_value(json_object_get(r, "stdout_offset")),
                          json_integer_value(json_object_get(r, "stderr_offset"))};
    json_int_t start[3] = {0, json_integer_value(json_object_get(r, "stdout_start")),
                           json_integer_value(json_object_get(r, "stderr_start"))};
    if (g.json)
        print_json(r);
    json_decref(r);

    /* A finished process: the replay ends with its process.exit. A running one
     * without -f: the replay ends at the offsets of the attach result. */
    for (;;) {
        int replayed = (s.end[1] >= want[1] || want[1] <= start[1]) &&
                       (s.end[2] >= want[2] || want[2] <= start[2]);
        if (s.holding && (s.exited || replayed))
            logs_flush(&s); /* --tail: the replay is complete, live output follows */
        if (s.exited)
            break;
        if (running && !follow && replayed)
            break;
        json_t *n;
        if (sbx_read_notification(c, &n, follow || !running ? -1 : 5000) != SBX_OK) {
            if (c->err == SBX_ERR_TIMEOUT)
                break;
            warnx_("%s", c->errstr);
            sbx_free(c);
            return EXIT_RPC;
        }
        logs_note(&s, json_string_value(json_object_get(n, "method")),
                  json_object_get(n, "params"));
        json_decref(n);
    }
    if (s.holding)
        logs_flush(&s);
    sbx_free(c);
    /* -f follows to the end: exit with the process's status, as wait does. */
    return follow && s.exited ? s.status : 0;
}
