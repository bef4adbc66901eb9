/*
 * own_kit.h - an sbxd of the test's own, for the integration tests that need
 * limits the suite's shared sbxd does not have (itest_bounds, itest_limits16):
 * a temporary folder reachable by a second uid, sbxd started there with a base
 * config plus the test's limits, stopped and checked for a clean exit, its
 * memory read from /proc, and code run as another uid in a child.
 *
 * The kit's functions count no tests (testhelp.h's counters are per file):
 * they return what happened. The two checks below are macros, so that they
 * count in the tally of the test file that uses them.
 */
#ifndef SBX_OWN_KIT_H
#define SBX_OWN_KIT_H

#include <sys/types.h>

#include "itest.h"

struct own_sbxd {
    const char *bdir; /* the build dir holding sbxd */
    char dir[64], sock[100], cfg[128], log[128];
    pid_t pid; /* the running sbxd, or 0 */
};
extern struct own_sbxd own;

/*
 * Makes the temporary folder /tmp/sbx-TAG.XXXXXX (mode 0755: the second uid
 * must reach the socket) and the paths in it. 0, 1 when no folder could be
 * made, 2 when not run as root (printed as "itest_TAG: needs root").
 */
int own_init(const char *bdir, const char *tag);

/* Removes the folder's files and the folder (SBX_KEEP_TMP: keeps them and
 * prints where the log is). */
void own_cleanup(void);

/* The config own_start() writes before the test's limits (it ends in
 * "limits:\n"). */
extern const char own_base_yaml[];

/*
 * Starts sbxd (--log-level debug, output into own.log) with a config of the
 * socket's mode 0666, one duktape worker, docker and modal off, then "limits:"
 * followed by `limits` (indented key lines). Waits up to 20 s for the socket
 * (a loaded machine starts slowly). 0, or -1 when it did not come up.
 */
int own_start(const char *limits);

/* SIGTERM and wait: 0 when sbxd exited 0 (or none ran), else -1 with its
 * status printed. */
int own_stop(void);

/* A field of /proc/PID/status in kB ("VmRSS:" now, "VmHWM:" the peak), -1. */
long own_status_kb(const char *field);
long own_rss_kb(void);

/* RSS says nothing under ASan (its quarantine keeps freed memory) or valgrind. */
int own_rss_meaningful(void);

/* An error's data.limit ("" when none). */
const char *own_limit_of(json_t *resp);

/* daemon.info's usage.<limit>.used. */
json_int_t own_usage_used(json_t *info, const char *limit);

/* Runs fn as uid in a child; fn fills res (at most n bytes, 256 at most),
 * which comes back. */
void own_as_uid(uid_t uid, void (*fn)(char *res, size_t n), char *res, size_t n);

/* Stops sbxd; an unclean exit is a failed check. */
#define own_stop_check()                                                                 \
    do {                                                                                 \
        if (own_stop() < 0)                                                              \
            test_cond("sbxd exits cleanly", 0);                                          \
    } while (0)

/* A check of sbxd's RSS, or a counted skip where RSS says nothing. */
#define own_rss_cond(name, ok)                                                           \
    do {                                                                                 \
        if (own_rss_meaningful())                                                        \
            test_cond(name, ok);                                                         \
        else                                                                             \
            test_skip(name, "RSS is not meaningful under ASan or valgrind");             \
    } while (0)

#endif
