/* daemon.c - small shared helpers around the global daemon state. */
#include "daemon.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct daemon *D;

struct provider_inst *daemon_provider(const char *name)
{
    for (int i = 0; i < D->nproviders; i++)
        if (strcmp(D->providers[i].ops->name, name) == 0)
            return &D->providers[i];
    return NULL;
}

double daemon_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Writes n decimal digits of v (v < 10^n). */
static char *put_digits(char *p, unsigned v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + n;
}

/* By hand, not snprintf: daemon.ping answers with one, and the format
 * string's interpretation was a tenth of the daemon's work for a ping. */
const char *daemon_timestamp(double t, char *buf)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    unsigned ms = (unsigned)((t - (double)s) * 1000.0) % 1000u;
    char *p = put_digits(buf, (unsigned)((tm.tm_year + 1900) % 10000), 4);
    *p++ = '-';
    p = put_digits(p, (unsigned)((tm.tm_mon + 1) % 100), 2);
    *p++ = '-';
    p = put_digits(p, (unsigned)(tm.tm_mday % 100), 2);
    *p++ = 'T';
    p = put_digits(p, (unsigned)(tm.tm_hour % 100), 2);
    *p++ = ':';
    p = put_digits(p, (unsigned)(tm.tm_min % 100), 2);
    *p++ = ':';
    p = put_digits(p, (unsigned)(tm.tm_sec % 100), 2);
    *p++ = '.';
    p = put_digits(p, ms, 3);
    *p++ = 'Z';
    *p = '\0';
    return buf;
}

void daemon_random_id(const char *prefix, char *buf, size_t n)
{
    unsigned char r[8];
    if (getrandom(r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) {
        /* Early boot without entropy: uniqueness is what matters here. */
        static unsigned long long ctr;
        unsigned long long v =
            (unsigned long long)time(NULL) ^ ((unsigned long long)getpid() << 32) ^ ++ctr;
        memcpy(r, &v, sizeof(r));
    }
    snprintf(buf, n, "%s%02x%02x%02x%02x%02x%02x%02x%02x", prefix, r[0], r[1], r[2], r[3],
             r[4], r[5], r[6], r[7]);
}
