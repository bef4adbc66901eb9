/*
 * log.h - logging to stderr in a journald-friendly form: each line starts
 * with a "<N>" syslog priority prefix that journald turns into the entry's
 * priority (SyslogLevelPrefix), then "sbxd: " and the message.
 */
#ifndef SBXD_LOG_H
#define SBXD_LOG_H

#include "config.h"

void log_set_level(enum log_level lvl);
int log_enabled(enum log_level lvl);
void log_msg(enum log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)                                                                \
    do {                                                                              \
        if (log_enabled(LOG_LVL_DEBUG))                                               \
            log_msg(LOG_LVL_DEBUG, __VA_ARGS__);                                      \
    } while (0)

#endif
