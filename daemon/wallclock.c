/*
 * wallclock.c - RFC 3339 times in nanoseconds (wallclock.h). Hand-written
 * rather than strptime/timegm: strptime has no fraction or numeric-offset
 * form that every libc shares, and the parser takes a client's bytes, so it
 * must read exactly len of them and reject everything else.
 */
#include "wallclock.h"

#include <stdint.h>
#include <time.h>

int64_t wallclock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
 * days_from_civil), so no timegm and no TZ are involved. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static char *put(char *p, unsigned v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + n;
}

size_t wallclock_format(char *buf, int64_t ns)
{
    int64_t s = ns / 1000000000, frac = ns % 1000000000;
    if (frac < 0) {
        frac += 1000000000;
        s--;
    }
    int64_t days = s / 86400, sod = s % 86400;
    if (sod < 0) {
        sod += 86400;
        days--;
    }
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    if (y < 0)
        y = 0, m = 1, d = 1, sod = 0, frac = 0;
    if (y > 9999)
        y = 9999, m = 12, d = 31, sod = 86399, frac = 999999999;
    char *p = put(buf, (unsigned)y, 4);
    *p++ = '-';
    p = put(p, m, 2);
    *p++ = '-';
    p = put(p, d, 2);
    *p++ = 'T';
    p = put(p, (unsigned)(sod / 3600), 2);
    *p++ = ':';
    p = put(p, (unsigned)(sod / 60 % 60), 2);
    *p++ = ':';
    p = put(p, (unsigned)(sod % 60), 2);
    *p++ = '.';
    p = put(p, (unsigned)frac, 9);
    *p++ = 'Z';
    *p = '\0';
    return (size_t)(p - buf);
}

/* n digits at s[*i] as a number; -1 when they are not all digits. */
static int digits(const char *s, size_t len, size_t *i, int n)
{
    int v = 0;
    if (*i + (size_t)n > len)
        return -1;
    for (int k = 0; k < n; k++) {
        char c = s[*i + (size_t)k];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    *i += (size_t)n;
    return v;
}

static int lit(const char *s, size_t len, size_t *i, const char *alts)
{
    if (*i >= len)
        return -1;
    for (; *alts; alts++)
        if (s[*i] == *alts) {
            (*i)++;
            return 0;
        }
    return -1;
}

int wallclock_parse(int64_t *out, const char *s, size_t len)
{
    static const unsigned mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    size_t i = 0;
    int y = digits(s, len, &i, 4);
    if (y < 0 || lit(s, len, &i, "-") < 0)
        return -1;
    int mo = digits(s, len, &i, 2);
    if (mo < 1 || mo > 12 || lit(s, len, &i, "-") < 0)
        return -1;
    int d = digits(s, len, &i, 2);
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d < 1 || (unsigned)d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap))
        return -1;
    if (lit(s, len, &i, "Tt ") < 0)
        return -1;
    int h = digits(s, len, &i, 2);
    if (h < 0 || h > 23 || lit(s, len, &i, ":") < 0)
        return -1;
    int mi = digits(s, len, &i, 2);
    if (mi < 0 || mi > 59 || lit(s, len, &i, ":") < 0)
        return -1;
    int sec = digits(s, len, &i, 2);
    if (sec < 0 || sec > 60) /* 60: a leap second, read as the next one's start */
        return -1;
    int64_t frac = 0;
    if (i < len && s[i] == '.') {
        i++;
        int nd = 0;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (nd < 9)
                frac = frac * 10 + (s[i] - '0');
            nd++;
            i++;
        }
        if (nd == 0)
            return -1;
        for (; nd < 9; nd++)
            frac *= 10;
    }
    int64_t off = 0;
    if (lit(s, len, &i, "Zz") < 0) {
        if (i >= len || (s[i] != '+' && s[i] != '-'))
            return -1;
        int sign = s[i++] == '-' ? -1 : 1;
        int oh = digits(s, len, &i, 2);
        if (oh < 0 || oh > 23 || lit(s, len, &i, ":") < 0)
            return -1;
        int om = digits(s, len, &i, 2);
        if (om < 0 || om > 59)
            return -1;
        off = sign * (oh * 3600 + om * 60);
    }
    if (i != len)
        return -1;
    int64_t t = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 +
                mi * 60 + sec - off;
    /* ns since the epoch fit in int64 only from 1677 to 2262. */
    int64_t ns;
    if (__builtin_mul_overflow(t, (int64_t)1000000000, &ns) ||
        __builtin_add_overflow(ns, frac, &ns))
        return -1;
    *out = ns;
    return 0;
}
