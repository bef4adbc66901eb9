/* log.c - stderr logging with syslog priority prefixes (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

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
    fprintf(stderr, "<%d>sbxd: %s\n", prio[lvl], line);
}
