/*
 * log.h - logging to stderr in a journald-friendly form: each line starts
 * with a "<N>" syslog priority prefix that journald turns into the entry's
 * priority (SyslogLevelPrefix), then "sbxd: " and the message. When
 * stderr is a terminal (and JOURNAL_STREAM is unset) the prefix is left out
 * and errors and warnings say "error: " / "warning: " instead.
 */
#ifndef SBXD_LOG_H
#define SBXD_LOG_H

#include "config.h"

void log_set_level(enum log_level lvl);
int log_enabled(enum log_level lvl);
void log_msg(enum log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * A per-source budget of log lines per second (limits.agent_log_lines_per_s):
 * a hostile agent or worker that floods LOG/ERROR frames gets that many lines
 * a second, then one summary line per second saying how many were dropped.
 * Embed one per source, zeroed.
 */
struct log_limit {
    double window; /* start of the current second (monotonic) */
    long lines, dropped;
};
/* 1 if a line from src (named `who` in the summary) may be logged now. */
int log_limit_take(struct log_limit *l, const char *who);

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)                                                                   \
    do {                                                                                 \
        if (log_enabled(LOG_LVL_DEBUG))                                                  \
            log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                                         \
    } while (0)

#endif
