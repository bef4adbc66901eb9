/*
 * testhelp.h - the smallest test harness that works (after redis/hiredis).
 *
 *   test_cond("name of the behaviour", expr);
 *   test_eq_int("name", actual, expected);   // on failure also prints both values
 *   test_eq_str("name", actual, expected);   // NULL-safe
 *   test_skip("name of the behaviour", "why it cannot run here");
 *   ...
 *   test_report();   // prints "N passed, N failed, N skipped", returns exit status
 *
 * Every binary prints its own tally; tests/run.sh adds them up.
 */
#ifndef SBX_TESTHELP_H
#define SBX_TESTHELP_H

#include <stdio.h>
#include <string.h>

static int __test_num = 0, __test_failed = 0, __test_passed = 0, __test_skipped = 0;

#define test_cond(descr, _c) __test_check(descr, (_c) ? 1 : 0, #_c)

#define __test_check(descr, _ok, text)                                                   \
    do {                                                                                 \
        __test_num++;                                                                    \
        int __ok = (_ok);                                                                \
        printf("%3d - %-60s %s\n", __test_num, descr, __ok ? "PASSED" : "FAILED");       \
        if (__ok)                                                                        \
            __test_passed++;                                                             \
        else {                                                                           \
            __test_failed++;                                                             \
            printf("      at %s:%d: %s\n", __FILE__, __LINE__, text);                    \
        }                                                                                \
        fflush(stdout);                                                                  \
    } while (0)

/* test_cond for a value: a failure prints what came and what was expected. */
#define test_eq_int(descr, _a, _e)                                                       \
    do {                                                                                 \
        long long __a = (long long)(_a), __e = (long long)(_e);                          \
        __test_check(descr, __a == __e, #_a " == " #_e);                                 \
        if (__a != __e)                                                                  \
            printf("      got %lld, expected %lld\n", __a, __e);                         \
    } while (0)

#define test_eq_str(descr, _a, _e)                                                       \
    do {                                                                                 \
        const char *__a = (_a), *__e = (_e);                                             \
        int __same = __a && __e ? strcmp(__a, __e) == 0 : __a == __e;                    \
        __test_check(descr, __same, #_a " equals " #_e);                                 \
        if (!__same)                                                                     \
            printf("      got \"%s\", expected \"%s\"\n", __a ? __a : "(null)",          \
                   __e ? __e : "(null)");                                                \
    } while (0)

/* A behaviour that cannot be checked on this machine: counted and shown, never
 * hidden, so a suite that silently stopped testing something is visible. */
#define test_skip(descr, why)                                                            \
    do {                                                                                 \
        __test_num++;                                                                    \
        __test_skipped++;                                                                \
        printf("%3d - %-60s SKIPPED (%s)\n", __test_num, descr, why);                    \
        fflush(stdout);                                                                  \
    } while (0)

#define test_report()                                                                    \
    (printf("%d passed, %d failed, %d skipped\n", __test_passed, __test_failed,          \
            __test_skipped),                                                             \
     fflush(stdout), __test_failed ? 1 : 0)

#endif
