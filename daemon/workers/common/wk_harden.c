/*
 * wk_harden.c - the self-hardening steps both workers take before they run
 * any JS: fds, resource limits, privileges, and the seccomp installer. The
 * order and the allow-lists are each worker's own.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#include "workers/common/wk.h"

/*
 * Valgrind runs its own syscalls inside our filter and needs address space
 * (SBX_VALGRIND is what `make valgrind` sets); ASan reserves terabytes of
 * shadow memory (`make asan` sets SBX_SANITIZED).
 */
int wk_no_sandbox_extras(void)
{
    const char *v = getenv("SBX_NO_SECCOMP");

#if defined(__SANITIZE_ADDRESS__)
    return 1;
#endif
    return (v && strcmp(v, "1") == 0) || getenv("SBX_VALGRIND") ||
           getenv("SBX_SANITIZED") || RUNNING_ON_VALGRIND;
}

/* stderr stays: it is the daemon's, useful when debugging a worker. */
int wk_isolate_fds(int *fd, const char **why)
{
    int nul;

    if (*fd <= 2) {
        int nfd = fcntl(*fd, F_DUPFD, 3);
        if (nfd < 0) {
            *why = "cannot move the channel fd";
            return -1;
        }
        close(*fd);
        *fd = nfd;
    }
    if (*fd > 3)
        close_range(3, (unsigned)*fd - 1, 0);
    if (close_range((unsigned)*fd + 1, ~0u, 0) < 0) {
        long max = sysconf(_SC_OPEN_MAX);
        for (long f = *fd + 1; f < max && f < 65536; f++)
            close((int)f);
    }
    nul = open("/dev/null", O_RDWR);
    if (nul < 0) {
        *why = "cannot open /dev/null";
        return -1;
    }
    if ((nul != 0 && dup2(nul, 0) < 0) || (nul != 1 && dup2(nul, 1) < 0)) {
        *why = "cannot redirect stdin/stdout";
        return -1;
    }
    if (nul > 2)
        close(nul);
    /* The daemon may have made its socketpair non-blocking. */
    fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
    fcntl(*fd, F_SETFD, FD_CLOEXEC);
    return 0;
}

int wk_set_limit(int res, rlim_t v)
{
    struct rlimit rl = {v, v};

    return setrlimit(res, &rl);
}

int wk_soft_limit(int res, rlim_t v)
{
    struct rlimit rl;

    if (getrlimit(res, &rl) < 0)
        return -1;
    rl.rlim_cur = v;
    return setrlimit(res, &rl);
}

int wk_lookup_user(const char *name, uid_t *uid, gid_t *gid, const char **why)
{
    struct passwd *pw = getpwnam(name);

    if (pw) {
        *uid = pw->pw_uid;
        *gid = pw->pw_gid;
    } else if (strcmp(name, "nobody") == 0) {
        *uid = WK_NOBODY_ID;
        *gid = WK_NOBODY_ID;
    } else {
        *why = "unknown --user";
        return -1;
    }
    if (*uid == 0) {
        *why = "refusing to run the worker as uid 0";
        return -1;
    }
    return 0;
}

int wk_parse_uid(const char *s, uid_t *uid, gid_t *gid, const char **why)
{
    char *end;
    unsigned long v;

    if (!s || *s < '0' || *s > '9') {
        *why = "bad --uid";
        return -1;
    }
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v == 0 || v >= (unsigned long)(uid_t)-1 ||
        v != (unsigned long)(uid_t)v) {
        *why = v == 0 && !errno && !*end ? "refusing to run the worker as uid 0"
                                         : "bad --uid";
        return -1;
    }
    *uid = (uid_t)v;
    *gid = (gid_t)v;
    return 0;
}

int wk_drop_privileges(uid_t uid, gid_t gid, const char **why)
{
    uid_t r, e, s;
    gid_t rg, eg, sg;

    if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
        setresuid(uid, uid, uid) < 0) {
        *why = "cannot drop privileges";
        return -1;
    }
    if (getresuid(&r, &e, &s) < 0 || r != uid || e != uid || s != uid ||
        getresgid(&rg, &eg, &sg) < 0 || rg != gid || eg != gid || sg != gid ||
        getgroups(0, NULL) != 0 || setuid(0) == 0) {
        *why = "privilege drop did not stick";
        return -1;
    }
    return 0;
}

int wk_seccomp_install(const struct sock_filter *f, size_t n, const char *fail_msg,
                       const char **why)
{
    struct sock_fprog prog = {(unsigned short)n, (struct sock_filter *)f};

    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) {
        *why = fail_msg;
        return -1;
    }
    return 0;
}
