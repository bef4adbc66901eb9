/* log.c - stderr logging with syslog priority prefixes (see log.h); on a
 * terminal, plain lines (issue 19). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon.h"

static enum log_level cur_level = LOG_LVL_INFO;

void log_set_level(enum log_level lvl)
{
    cur_level = lvl;
}

int log_enabled(enum log_level lvl)
{
    return lvl <= cur_level;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    /* syslog priorities: 3 err, 4 warning, 6 info, 7 debug */
    static const int prio[] = {3, 4, 6, 7};
    if (!log_enabled(lvl))
        return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* "<N>" is for journald (or a log collector reading a pipe); a person at
     * a terminal gets the level spelt out where it matters. Decided once:
     * stderr does not change under a running daemon. */
    static int prefixed = -1;
    if (prefixed < 0)
        prefixed = getenv("JOURNAL_STREAM") || !isatty(2);
    static const char *const word[] = {"error: ", "warning: ", "", ""};
    if (prefixed)
        fprintf(stderr, "<%d>sbxd: %s\n", prio[lvl], line);
    else
        fprintf(stderr, "sbxd: %s%s\n", word[lvl], line);
}

int log_limit_take(struct log_limit *l, const char *who)
{
    double now = ev_now(D->loop);
    if (now - l->window >= 1.0) {
        if (l->dropped > 0)
            log_warn(
                "%s: %ld log lines suppressed in %.0f s (limits.agent_log_lines_per_s = %lld)",
                who, l->dropped, now - l->window,
                (long long)D->cfg.agent_log_lines_per_s);
        l->window = now;
        l->lines = 0;
        l->dropped = 0;
    }
    if (l->lines >= D->cfg.agent_log_lines_per_s) {
        l->dropped++;
        return 0;
    }
    l->lines++;
    return 1;
}
