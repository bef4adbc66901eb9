/*
 * test_wallclock.c - daemon/wallclock.c: RFC 3339 times in and out, as
 * process.attach's since takes them and its timestamps write them (issue
 * 19). Known instants both ways, every form the parser takes, the ones it
 * must refuse, and the clock itself. tests/fuzz/fuzz_wallclock.c checks the
 * round trip on random input.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "testhelp.h"
#include "wallclock.h"

static int64_t parsed(const char *s)
{
    int64_t v = -12345;
    return wallclock_parse(&v, s, strlen(s)) == 0 ? v : -12345;
}

static void test_format(void)
{
    char b[WALLCLOCK_TEXT];
    test_eq_int("the epoch is 30 bytes", wallclock_format(b, 0), 30);
    test_eq_str("the epoch", b, "1970-01-01T00:00:00.000000000Z");
    wallclock_format(b, 1796142300123456789LL);
    test_eq_str("nine fraction digits, UTC", b, "2026-12-01T16:25:00.123456789Z");
    wallclock_format(b, 951782400LL * 1000000000); /* a leap day */
    test_eq_str("29 February 2000", b, "2000-02-29T00:00:00.000000000Z");
    wallclock_format(b, -1);
    test_eq_str("a nanosecond before the epoch", b, "1969-12-31T23:59:59.999999999Z");
    wallclock_format(b, INT64_MAX);
    test_eq_str("the last instant int64 ns hold", b, "2262-04-11T23:47:16.854775807Z");
}

static void test_parse(void)
{
    test_eq_int("Z", parsed("1970-01-01T00:00:00Z"), 0);
    test_eq_int("fraction, nine digits", parsed("2026-12-01T16:25:00.123456789Z"),
                1796142300123456789LL);
    test_eq_int("a short fraction", parsed("2026-12-01T16:25:00.5Z"),
                1796142300500000000LL);
    test_eq_int("digits past nine are dropped", parsed("2026-12-01T16:25:00.1234567891Z"),
                1796142300123456789LL);
    test_eq_int("+01:00 is an hour earlier in UTC", parsed("2026-12-01T17:25:00+01:00"),
                1796142300LL * 1000000000);
    test_eq_int("-05:30", parsed("2026-12-01T10:55:00-05:30"), 1796142300LL * 1000000000);
    test_eq_int("lower case t and z, a space for T", parsed("2026-12-01 16:25:00z"),
                1796142300LL * 1000000000);
    test_eq_int("t", parsed("2026-12-01t16:25:00Z"), 1796142300LL * 1000000000);
    static const char *const bad[] = {"",
                                      "2026-12-01",
                                      "2026-12-01T16:25:00", /* no zone */
                                      "2026-12-01T16:25Z",
                                      "2026-13-01T00:00:00Z",
                                      "2026-02-29T00:00:00Z", /* not a leap year */
                                      "2026-04-31T00:00:00Z",
                                      "2026-12-01T24:00:00Z",
                                      "2026-12-01T16:60:00Z",
                                      "2026-12-01T16:25:00.Z",
                                      "2026-12-01T16:25:00+1:00",
                                      "2026-12-01T16:25:00+01:00 ",
                                      "2026-12-01T16:25:00ZZ",
                                      "1796142300",
                                      "10m",
                                      "9999-12-31T23:59:59Z", /* past int64 ns */
                                      "2262-04-12T00:00:00Z",
                                      "1677-09-21T00:00:00Z",
                                      NULL};
    int refused = 1;
    for (int i = 0; bad[i]; i++)
        if (parsed(bad[i]) != -12345) {
            printf("      accepted \"%s\"\n", bad[i]);
            refused = 0;
        }
    test_cond("everything else is refused", refused);
    int64_t v;
    test_cond("len is obeyed: a valid prefix is not a time",
              wallclock_parse(&v, "2026-12-01T16:25:00Zjunk", 20) == 0 &&
                  wallclock_parse(&v, "2026-12-01T16:25:00Z", 19) < 0);
    char b[WALLCLOCK_TEXT];
    wallclock_format(b, 1796142300123456789LL);
    test_eq_int("what format writes, parse reads back", parsed(b), 1796142300123456789LL);
    wallclock_format(b, INT64_MAX);
    test_eq_int("the last time int64 ns hold reads back", parsed(b), INT64_MAX);
    wallclock_format(b, INT64_MIN + 1000000000);
    test_eq_int("and the first (to the second)", parsed(b), INT64_MIN + 1000000000);
}

static void test_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t a = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, n = wallclock_now_ns();
    test_cond("now is the real-time clock", n >= a && n - a < 1000000000);
}

int main(void)
{
    test_format();
    test_parse();
    test_now();
    return test_report();
}
