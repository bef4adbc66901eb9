/*
 * jsw_main.c - sbxd-jsworker: the js provider's isolate worker. Options,
 * self-hardening, and the frame loop. The daemon starts it as
 *
 *     sbxd-jsworker --fd N [--user NAME | --uid N] [--no-drop]
 *
 * with the channel (proto/CHANNEL.md) on fd N. JSC_* variables in its
 * environment are JavaScriptCore options (the daemon passes JSC_useJIT=false
 * for `jit: false`).
 *
 * Hardening, in order: a user lookup while files can still be read, every fd
 * but the channel and 0-2 closed (0 and 1 on /dev/null), no-new-privs, core
 * and file-size limits, the drop to an unprivileged user when started as
 * root, the parent-death signal, then a seccomp filter (skipped with
 * SBX_NO_SECCOMP=1, under valgrind and in sanitized builds) that allows what
 * JavaScriptCore needs: memory mappings (executable ones for the JIT),
 * threads (clone with CLONE_THREAD only: JSC's GC and JIT helpers), futexes,
 * and reads/writes on descriptors it already has. No open, no socket, no
 * fork or exec. With JSC_useJIT=false (jit: false) a second filter refuses
 * every executable mapping: no code is written at run time at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "workers/jsc/jsw.h"
#include "xalloc.h"

#define WORKER_NOFILE 64

struct opts {
    int fd;
    const char *user;
    const char *uid; /* --uid N: wins over --user */
    int no_drop;
};

/* ---- options ------------------------------------------------------------------- */

static int parse_args(int argc, char **argv, struct opts *o)
{
    o->fd = -1;
    o->user = "nobody";
    o->uid = NULL;
    o->no_drop = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--no-drop") == 0) {
            o->no_drop = 1;
        } else if (strcmp(a, "--fd") == 0 && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 0 || v > (1 << 20)) {
                fprintf(stderr, "sbxd-jsworker: bad --fd '%s'\n", argv[i]);
                return -1;
            }
            o->fd = (int)v;
        } else if (strcmp(a, "--user") == 0 && i + 1 < argc) {
            o->user = argv[++i];
        } else if (strcmp(a, "--uid") == 0 && i + 1 < argc) {
            o->uid = argv[++i];
        } else {
            fprintf(stderr, "sbxd-jsworker: unknown option '%s'\n", a);
            return -1;
        }
    }
    if (o->fd < 0 || fcntl(o->fd, F_GETFD) < 0) {
        fprintf(stderr, "sbxd-jsworker: --fd must name an open descriptor\n");
        return -1;
    }
    return 0;
}

/* ---- hardening ------------------------------------------------------------------ */

#ifdef WK_SECCOMP_ARCH
static int install_seccomp(const char **why)
{
    /* clone is allowed only for threads: CLONE_THREAD set in its flags. */
    struct sock_filter f[] = {
        WK_FILTER_HEAD(WK_SECCOMP_ARCH),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* glibc falls back to clone when clone3 is not there */
        WK_DENY(__NR_clone3, ENOSYS),
        WK_ALLOW(__NR_read),
        WK_ALLOW(__NR_write),
        WK_ALLOW(__NR_readv),
        WK_ALLOW(__NR_writev),
        WK_ALLOW(__NR_pread64),
        WK_ALLOW(__NR_close),
        WK_ALLOW(__NR_poll),
        WK_ALLOW(__NR_ppoll),
        WK_ALLOW(__NR_lseek),
        WK_ALLOW(__NR_mmap),
        WK_ALLOW(__NR_munmap),
        WK_ALLOW(__NR_mremap),
        WK_ALLOW(__NR_mprotect),
        WK_ALLOW(__NR_madvise),
        WK_ALLOW(__NR_brk),
        WK_ALLOW(__NR_futex),
        WK_ALLOW(__NR_set_robust_list),
        WK_ALLOW(__NR_rseq),
        WK_ALLOW(__NR_sched_yield),
        WK_ALLOW(__NR_sched_getaffinity),
        WK_ALLOW(__NR_sched_setaffinity),
        WK_ALLOW(__NR_sched_getparam),
        WK_ALLOW(__NR_sched_setscheduler),
        WK_ALLOW(__NR_sched_getscheduler),
        WK_ALLOW(__NR_setpriority),
        WK_ALLOW(__NR_getpriority),
        WK_ALLOW(__NR_prctl),
        WK_ALLOW(__NR_clock_gettime),
        WK_ALLOW(__NR_clock_getres),
        WK_ALLOW(__NR_clock_nanosleep),
        WK_ALLOW(__NR_nanosleep),
        WK_ALLOW(__NR_gettimeofday),
        WK_ALLOW(__NR_getpid),
        WK_ALLOW(__NR_gettid),
        WK_ALLOW(__NR_getuid),
        WK_ALLOW(__NR_geteuid),
        WK_ALLOW(__NR_getgid),
        WK_ALLOW(__NR_getegid),
        WK_ALLOW(__NR_getrandom),
        WK_ALLOW(__NR_getrusage),
        WK_ALLOW(__NR_sigaltstack),
        WK_ALLOW(__NR_rt_sigaction),
        WK_ALLOW(__NR_rt_sigreturn),
        WK_ALLOW(__NR_rt_sigsuspend),
        WK_ALLOW(__NR_rt_sigprocmask),
        WK_ALLOW(__NR_tgkill),
        WK_ALLOW(__NR_membarrier),
        WK_ALLOW(__NR_exit),
        WK_ALLOW(__NR_exit_group),
        WK_ALLOW(__NR_fstat),
        WK_ALLOW(__NR_newfstatat),
        WK_ALLOW(__NR_fcntl),
        WK_ALLOW(__NR_eventfd2),
        WK_ALLOW(__NR_epoll_create1),
        WK_ALLOW(__NR_epoll_ctl),
        WK_ALLOW(__NR_epoll_wait),
        WK_ALLOW(__NR_epoll_pwait),
        WK_ALLOW(__NR_pipe2),
        WK_DENY(__NR_openat, EACCES),
#ifdef __NR_open
        WK_DENY(__NR_open, EACCES),
#endif
#ifdef __NR_readlink
        WK_DENY(__NR_readlink, EACCES),
#endif
        WK_DENY(__NR_readlinkat, EACCES),
        WK_DENY(__NR_statx, EACCES),
#ifdef __NR_access
        WK_DENY(__NR_access, EACCES),
#endif
        WK_DENY(__NR_faccessat, EACCES),
        WK_DENY(__NR_faccessat2, EACCES),
        WK_DENY(__NR_sysinfo, EPERM),
        WK_DENY(__NR_uname, EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    return wk_seccomp_install(f, sizeof(f) / sizeof(f[0]),
                              "cannot install the seccomp filter", why);
}

/* jit: false. A second filter (filters stack; the stricter answer wins):
 * no mapping may become executable, so no code is ever written at run time.
 * JavaScriptCore's interpreter needs none once it started. */
static int install_no_exec(const char **why)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pkey_mprotect, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return wk_seccomp_install(f, sizeof(f) / sizeof(f[0]),
                              "cannot install the no-exec seccomp filter", why);
}
#else
static int install_no_exec(const char **why)
{
    (void)why;
    return 0;
}

static int install_seccomp(const char **why)
{
    (void)why;
    return 0;
}
#endif

static int harden(struct opts *o, int *fd, const char **why)
{
    int drop = geteuid() == 0 && !o->no_drop;
    pid_t parent = getppid();
    uid_t uid = 0;
    gid_t gid = 0;

    signal(SIGPIPE, SIG_IGN);
    if (wk_isolate_fds(fd, why) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        *why = "cannot set no_new_privs";
        return -1;
    }
    if (wk_set_limit(RLIMIT_CORE, 0) < 0 || wk_set_limit(RLIMIT_FSIZE, 0) < 0 ||
        wk_set_limit(RLIMIT_NOFILE, WORKER_NOFILE) < 0) {
        *why = "cannot set resource limits";
        return -1;
    }
    if (drop && ((o->uid ? wk_parse_uid(o->uid, &uid, &gid, why)
                         : wk_lookup_user(o->user, &uid, &gid, why)) < 0 ||
                 wk_drop_privileges(uid, gid, why) < 0))
        return -1;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || getppid() != parent) {
        *why = "the daemon is gone";
        return -1;
    }
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------- */

static void send_hello(struct jsw *w)
{
    json_t *hello =
        json_pack("{s:i,s:s,s:[]}", "version", SBX_CHAN_VERSION, "agent", "jsc", "procs");
    wk_send_json_big(w->fd, SBX_CHAN_HELLO, 0, hello);
    json_decref(hello);
}

static void on_spawn(struct jsw *w, uint32_t proc, const uint8_t *payload, uint32_t len)
{
    json_t *req = NULL;
    const char *why = NULL;

    if (proc == 0) {
        wk_log(w->fd, "SPAWN for proc 0 ignored");
        return;
    }
    if (w->proc != 0) {
        why = "the worker is busy with another process";
    } else {
        /* not inside json_is_object(): that macro evaluates its argument twice */
        req = json_loadb((const char *)payload, len, 0, NULL);
        if (!json_is_object(req))
            why = "SPAWN payload is not a JSON object";
    }
    if (why) {
        json_t *rec = json_pack("{s:i,s:i,s:b,s:b,s:s}", "exit_code", 126, "signal", 0,
                                "timed_out", 0, "killed", 0, "error", why);
        wk_send_json_big(w->fd, SBX_CHAN_EXIT, proc, rec);
        json_decref(rec);
        json_decref(req);
        return;
    }
    jsw_engine_spawn(w, proc, req);
    json_decref(req);
}

static void on_snapshot(struct jsw *w)
{
    size_t len = 0;
    char *s = jsw_engine_snapshot(w, &len);

    wk_send(w->fd, SBX_CHAN_SNAP_DATA, 0, s, len);
    free(s);
}

/* Whole messages: MORE frames are collected and prefixed to the next frame
 * of the same proc. Returns the full payload (malloc'd) or NULL when it was
 * a MORE frame, or too large (logged). */
static uint8_t *collect(struct jsw *w, const struct sbx_chan_hdr *h,
                        const uint8_t *payload, size_t *len_out)
{
    size_t need;
    uint8_t *out;

    if (w->more_len && w->more_proc != h->proc) {
        wk_log(w->fd, "MORE frames for proc %u dropped", (unsigned)w->more_proc);
        w->more_len = 0;
    }
    need = w->more_len + h->len;
    if (need > w->max_message || need > JSW_MESSAGE_MAX) {
        wk_log(w->fd, "a message over %zu bytes dropped", w->max_message);
        w->more_len = 0;
        w->more_proc = h->proc;
        return NULL;
    }
    if (need + 1 > w->more_cap) {
        size_t cap = w->more_cap ? w->more_cap : 65536;
        while (cap < need + 1)
            cap *= 2;
        w->more = xrealloc(w->more, cap);
        w->more_cap = cap;
    }
    memcpy(w->more + w->more_len, payload, h->len);
    w->more_len = need;
    w->more_proc = h->proc;
    if (h->type == SBX_CHAN_MORE)
        return NULL;
    out = xmalloc(need + 1);
    memcpy(out, w->more, need);
    out[need] = '\0';
    *len_out = need;
    w->more_len = 0;
    return out;
}

/* Handles one frame (worker is the struct jsw; payload borrowed). */
static void jsw_dispatch(void *worker, const struct sbx_chan_hdr *h,
                         const uint8_t *payload)
{
    struct jsw *w = worker;

    switch (h->type) {
    case SBX_CHAN_SPAWN:
        on_spawn(w, h->proc, payload, h->len);
        break;
    case SBX_CHAN_MORE:
    case SBX_CHAN_TOOL_RESULT: {
        size_t len = 0;
        uint8_t *msg = collect(w, h, payload, &len);
        if (msg)
            jsw_engine_tool_result(w, h->proc, (const char *)msg, len);
        free(msg);
        break;
    }
    case SBX_CHAN_CREDIT:
        if (h->len == 4 && h->proc != 0 && h->proc == w->proc)
            w->credit += sbx_chan_get_u32(payload);
        break;
    case SBX_CHAN_STDIN:
    case SBX_CHAN_STDIN_EOF:
    case SBX_CHAN_KILL:   /* the daemon ends the whole worker for a running program */
    case SBX_CHAN_FORGET: /* no exited processes are kept */
        break;
    case SBX_CHAN_SNAPSHOT:
        on_snapshot(w);
        break;
    case SBX_CHAN_RESTORE: {
        const char *why = NULL;
        if (jsw_engine_restore(w, (const char *)payload, h->len, &why) < 0)
            wk_log(w->fd, "RESTORE failed: %s", why);
        break;
    }
    case SBX_CHAN_RESET:
        if (w->proc != 0) {
            wk_log(w->fd, "RESET while a program runs ignored");
            break;
        }
        jsw_engine_reset(w);
        jsw_engine_prepare(w);
        send_hello(w);
        break;
    case SBX_CHAN_PING:
        wk_send(w->fd, SBX_CHAN_PONG, 0, NULL, 0);
        break;
    default:
        wk_log(w->fd, "unexpected %s frame (0x%02x) for proc %u ignored",
               sbx_chan_type_name(h->type), h->type, (unsigned)h->proc);
    }
}

int main(int argc, char **argv)
{
    struct opts o;
    struct jsw w;
    const char *why = NULL;
    int fd, rc;

    if (parse_args(argc, argv, &o) < 0)
        return 1;
    memset(&w, 0, sizeof(w));
    w.dispatch = jsw_dispatch;
    fd = o.fd;
    if (harden(&o, &fd, &why) < 0) {
        w.fd = fd;
        wk_send_error(w.fd, why);
        return 1;
    }
    w.fd = fd;
    w.statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    w.page_size = sysconf(_SC_PAGESIZE);
    /* Without a cap the JIT optimises the stripper bundle's one huge
     * top-level function in the background just after start: ~140 MB of
     * transient RSS for half a second, which the daemon's memory watchdog
     * would count against the first program. Programs' own functions are
     * far below this size. */
    setenv("JSC_maximumOptimizationCandidateBytecodeCost", "20000", 0);
    /* JSC starts its helper threads and reserves its regions here, before
     * the filter. */
    if (jsw_engine_init(&w, &why) < 0) {
        wk_send_error(w.fd, why);
        return 1;
    }
    if (!wk_no_sandbox_extras() && install_seccomp(&why) < 0) {
        wk_send_error(w.fd, why);
        return 1;
    }
    if (!wk_no_sandbox_extras() && getenv("JSC_useJIT") &&
        strcmp(getenv("JSC_useJIT"), "false") == 0 && install_no_exec(&why) < 0) {
        wk_send_error(w.fd, why);
        return 1;
    }
    jsw_engine_prepare(&w);
    send_hello(&w);
    rc = wk_serve_idle(w.fd, jsw_dispatch, jsw_engine_idle, &w);
    jsw_engine_deinit(&w);
    return rc;
}
