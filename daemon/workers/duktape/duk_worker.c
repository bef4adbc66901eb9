/*
 * duk_worker.c - `sbxd --worker`: the Duktape isolate worker process.
 *
 * Options, self-hardening (fds, rlimits, privileges, seccomp), and the frame
 * dispatcher. The heap lives in duk_isolate.c, frame I/O in duk_chan.c.
 *
 * The worker is single-threaded and blocking. The main loop reads a frame
 * and handles it; a SPAWN runs the program to completion inside the handler.
 * While the program waits (credit, a tool result, stdin), dukw_pump_nested()
 * (duk_chan.c) serves frames from inside the JS call, through the handler
 * this file puts in struct dukw.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
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

#include "workers/duktape/duk_worker.h"
#include "workers/duktape/duk_worker_int.h"

#define WORKER_NOFILE 16
#define AS_MARGIN (256ull * 1024 * 1024)

struct opts {
    int fd;
    unsigned memory_mb;
    const char *user;
    const char *uid; /* --uid N: wins over --user */
    int no_drop;
};

/* ---- options ------------------------------------------------------------------- */

static int parse_uint(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    unsigned long v;

    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || v > max)
        return -1;
    *out = v;
    return 0;
}

/* "--name V", "--name=V": returns V and advances *i, or NULL if no match. */
static const char *opt_value(int argc, char **argv, int *i, const char *name,
                             int *missing)
{
    size_t n = strlen(name);

    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    int i, missing = 0;

    o->fd = -1;
    o->memory_mb = DUKW_DEFAULT_MEMORY_MB;
    o->user = "nobody";
    o->uid = NULL;
    o->no_drop = 0;
    for (i = 1; i < argc; i++) {
        const char *v;
        unsigned long n;

        if (strcmp(argv[i], "--worker") == 0)
            continue;
        if (strcmp(argv[i], "--no-drop") == 0) {
            o->no_drop = 1;
        } else if ((v = opt_value(argc, argv, &i, "--fd", &missing))) {
            if (parse_uint(v, 1 << 20, &n) < 0) {
                fprintf(stderr, "sbxd --worker: bad --fd '%s'\n", v);
                return -1;
            }
            o->fd = (int)n;
        } else if ((v = opt_value(argc, argv, &i, "--memory-limit-mb", &missing))) {
            if (parse_uint(v, DUKW_MAX_MEMORY_MB, &n) < 0 || n == 0) {
                fprintf(stderr, "sbxd --worker: bad --memory-limit-mb '%s'\n", v);
                return -1;
            }
            o->memory_mb = (unsigned)n;
        } else if ((v = opt_value(argc, argv, &i, "--user", &missing))) {
            o->user = v;
        } else if ((v = opt_value(argc, argv, &i, "--uid", &missing))) {
            o->uid = v;
        } else {
            fprintf(stderr, "sbxd --worker: %s '%s'\n",
                    missing ? "missing value for" : "unknown option", argv[i]);
            return -1;
        }
    }
    if (o->fd < 0) {
        fprintf(stderr, "sbxd --worker: --fd is required\n");
        return -1;
    }
    if (fcntl(o->fd, F_GETFD) < 0) {
        fprintf(stderr, "sbxd --worker: fd %d is not open\n", o->fd);
        return -1;
    }
    return 0;
}

/* ---- hardening (steps in workers/common/wk_harden.c) ------------------------------- */

#ifdef WK_SECCOMP_ARCH
/* Low 32 bits of argument i (both supported arches are little-endian). */
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + (i) * sizeof(__u64))
/* Allowed unless argument 2 (prot) asks for executable memory: no JIT here. */
#define ALLOW_NOEXEC(nr)                                                                 \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4),                                     \
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2)),                                   \
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),                           \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),                             \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/*
 * What the worker does after setup: channel I/O, memory (never executable),
 * time, exit. Opening files fails with EACCES instead of killing (glibc's
 * localtime tries /etc/localtime and falls back to UTC); anything else kills
 * the process, which the daemon sees as EOF on the channel.
 */
static int install_seccomp(const char **why)
{
    struct sock_filter f[] = {
        WK_FILTER_HEAD(WK_SECCOMP_ARCH),
#if defined(__x86_64__)
        /* x32 syscalls share the arch value; they have bit 30 set. */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
#endif
        WK_ALLOW(__NR_read),
        WK_ALLOW(__NR_write),
        WK_ALLOW(__NR_writev),
        WK_ALLOW(__NR_close),
        WK_ALLOW(__NR_ppoll),
#ifdef __NR_poll
        WK_ALLOW(__NR_poll),
#endif
        ALLOW_NOEXEC(__NR_mmap),
        WK_ALLOW(__NR_munmap),
        WK_ALLOW(__NR_mremap),
        ALLOW_NOEXEC(__NR_mprotect),
        WK_ALLOW(__NR_madvise),
        WK_ALLOW(__NR_brk),
        WK_ALLOW(__NR_futex),
        WK_ALLOW(__NR_clock_gettime),
        WK_ALLOW(__NR_clock_getres),
        WK_ALLOW(__NR_gettimeofday),
#ifdef __NR_time
        WK_ALLOW(__NR_time),
#endif
        WK_ALLOW(__NR_getpid),
        WK_ALLOW(__NR_getuid),
        WK_ALLOW(__NR_getrandom),
        WK_ALLOW(__NR_rt_sigreturn),
        WK_ALLOW(__NR_rt_sigprocmask),
        WK_ALLOW(__NR_exit),
        WK_ALLOW(__NR_exit_group),
        WK_DENY(__NR_openat, EACCES),
#ifdef __NR_open
        WK_DENY(__NR_open, EACCES),
#endif
#ifdef __NR_stat
        WK_DENY(__NR_stat, EACCES),
#endif
        WK_DENY(__NR_newfstatat, EACCES),
        WK_DENY(__NR_fstat, EACCES),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    return wk_seccomp_install(f, sizeof(f) / sizeof(f[0]),
                              "cannot install the seccomp filter", why);
}
#else
static int install_seccomp(const char **why)
{
    (void)why;
    return 0; /* no filter written for this architecture */
}
#endif

/*
 * The order matters: the user lookup needs files (before the fd purge and
 * seccomp); NPROC 0 is only meaningful after setuid; PDEATHSIG is cleared by
 * credential changes, so it comes after the drop.
 */
static int harden(struct opts *o, const char **why)
{
    int extras = !wk_no_sandbox_extras();
    int drop = geteuid() == 0 && !o->no_drop;
    pid_t parent = getppid();
    uid_t uid = 0;
    gid_t gid = 0;

    signal(SIGPIPE, SIG_IGN);
    if (drop && (o->uid ? wk_parse_uid(o->uid, &uid, &gid, why)
                        : wk_lookup_user(o->user, &uid, &gid, why)) < 0)
        return -1;
    if (wk_isolate_fds(&o->fd, why) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
        *why = "cannot set no_new_privs";
        return -1;
    }
    if (wk_set_limit(RLIMIT_CORE, 0) < 0 || wk_set_limit(RLIMIT_FSIZE, 0) < 0 ||
        (wk_set_limit(RLIMIT_NOFILE, WORKER_NOFILE) < 0 &&
         (extras || wk_soft_limit(RLIMIT_NOFILE, WORKER_NOFILE) < 0))) {
        *why = "cannot set resource limits";
        return -1;
    }
    if (extras &&
        wk_set_limit(RLIMIT_AS, (rlim_t)o->memory_mb * 1024 * 1024 + AS_MARGIN) < 0) {
        *why = "cannot set the address-space limit";
        return -1;
    }
    if (drop && wk_drop_privileges(uid, gid, why) < 0)
        return -1;
    if (wk_set_limit(RLIMIT_NPROC, 0) < 0) {
        *why = "cannot set RLIMIT_NPROC";
        return -1;
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
        *why = "cannot set the parent-death signal";
        return -1;
    }
    if (getppid() != parent) {
        *why = "the daemon is gone";
        return -1;
    }
    if (extras && install_seccomp(why) < 0)
        return -1;
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------- */

static json_t *parse_json(const uint8_t *payload, uint32_t len)
{
    return json_loadb((const char *)payload, len, JSON_DECODE_ANY, NULL);
}

static void on_spawn(struct dukw *w, uint32_t proc, const uint8_t *payload, uint32_t len)
{
    json_t *req;
    const char *why = NULL;

    if (proc == 0) {
        wk_log(w->fd, "SPAWN for proc 0 ignored");
        return;
    }
    if (w->proc != 0) /* the daemon waits for EXIT; be graceful if it did not */
        why = "the worker is busy with another process";
    req = why ? NULL : parse_json(payload, len);
    if (!why && !json_is_object(req))
        why = "SPAWN payload is not a JSON object";
    if (why) {
        json_t *rec = json_pack("{s:i,s:i,s:b,s:b,s:s,s:b}", "exit_code", 126, "signal",
                                0, "timed_out", 0, "killed", 0, "error", why, "reset", 0);
        if (rec)
            wk_send_json(w->fd, SBX_CHAN_EXIT, proc, rec);
        json_decref(rec);
        json_decref(req);
        return;
    }
    dukw_isolate_run(w, proc, req);
    json_decref(req);
}

static void on_stdin(struct dukw *w, uint32_t proc, const uint8_t *data, uint32_t len)
{
    struct dukw_stdin *in = &w->in;

    if (proc == 0 || proc != w->proc || in->eof)
        return; /* not running (any more): nobody will read it */
    if (len > DUKW_STDIN_MAX - in->len) {
        wk_log(w->fd, "proc %u: stdin buffer full, %u bytes dropped", (unsigned)proc,
               (unsigned)len);
        return;
    }
    if (in->len + len > in->cap) {
        size_t cap = in->cap ? in->cap : 4096;
        uint8_t *p;
        while (cap < in->len + len)
            cap *= 2;
        p = realloc(in->buf, cap);
        if (!p) {
            wk_log(w->fd, "proc %u: out of memory, %u stdin bytes dropped",
                   (unsigned)proc, (unsigned)len);
            return;
        }
        in->buf = p;
        in->cap = cap;
    }
    memcpy(in->buf + in->len, data, len);
    in->len += len;
}

static void on_tool_result(struct dukw *w, uint32_t proc, const uint8_t *payload,
                           uint32_t len)
{
    json_t *j = parse_json(payload, len);
    json_t *call = json_object_get(j, "call");

    if (w->wait_call == 0 || proc != w->proc || w->tool_reply || !json_is_integer(call) ||
        json_integer_value(call) != (json_int_t)w->wait_call) {
        wk_log(w->fd, "unexpected TOOL_RESULT for proc %u ignored", (unsigned)proc);
        json_decref(j);
        return;
    }
    w->tool_reply = j;
}

static void on_snapshot(struct dukw *w)
{
    size_t len = 0;
    char *s = dukw_isolate_snapshot(w, &len);

    if (!s) {
        static const char oom[] = "{\"error\":\"out of memory\"}";
        wk_send(w->fd, SBX_CHAN_SNAP_DATA, 0, oom, sizeof(oom) - 1);
        return;
    }
    wk_send(w->fd, SBX_CHAN_SNAP_DATA, 0, s, len);
    free(s);
}

static void on_restore(struct dukw *w, const uint8_t *payload, uint32_t len)
{
    json_t *j = parse_json(payload, len);
    const char *why = "RESTORE payload is not JSON";

    if (!j || dukw_isolate_restore(w, j, &why) < 0)
        wk_log(w->fd, "RESTORE failed: %s", why);
    json_decref(j);
}

static void send_hello(struct dukw *w)
{
    json_t *hello =
        json_pack("{s:i,s:s,s:[]}", "version", SBX_CHAN_VERSION, "agent", "duk", "procs");
    if (hello)
        wk_send_json(w->fd, SBX_CHAN_HELLO, 0, hello);
    json_decref(hello);
}

/* The daemon recycles this worker for another sandbox of the same owner:
 * nothing of the old isolate may survive, so the heap is rebuilt from
 * scratch, exactly as at start. */
static void on_reset(struct dukw *w)
{
    if (w->proc != 0) {
        wk_log(w->fd, "RESET while a process runs ignored");
        return;
    }
    dukw_isolate_destroy(w);
    w->in.len = 0;
    w->in.eof = 0;
    w->reset_pending = 0;
    if (dukw_isolate_create(w) < 0) {
        wk_send_error(w->fd, "cannot create the Duktape heap");
        return;
    }
    send_hello(w);
}

/* Handles one frame (w is the struct dukw; payload borrowed). The floors
 * below reach it only through w->dispatch. */
static void dispatch(void *worker, const struct sbx_chan_hdr *h, const uint8_t *payload)
{
    struct dukw *w = worker;

    switch (h->type) {
    case SBX_CHAN_SPAWN:
        on_spawn(w, h->proc, payload, h->len);
        break;
    case SBX_CHAN_STDIN:
        on_stdin(w, h->proc, payload, h->len);
        break;
    case SBX_CHAN_STDIN_EOF:
        if (h->proc != 0 && h->proc == w->proc)
            w->in.eof = 1;
        break;
    case SBX_CHAN_CREDIT:
        if (h->len != 4) {
            wk_log(w->fd, "CREDIT with a %u-byte payload ignored", (unsigned)h->len);
        } else if (h->proc != 0 && h->proc == w->proc) {
            w->credit += sbx_chan_get_u32(payload);
        }
        break;
    case SBX_CHAN_KILL:
        /* JS cannot be interrupted here: for a running process the daemon
         * kills the whole worker. For any other proc there is nothing to do. */
        break;
    case SBX_CHAN_MORE: /* the start of a large TOOL_RESULT (CHANNEL.md) */
        if (w->more_len + h->len > DUKW_MESSAGE_MAX) {
            wk_log(w->fd, "a message over %u bytes dropped", DUKW_MESSAGE_MAX);
            w->more_len = 0;
            break;
        }
        if (w->more_len + h->len > w->more_cap) {
            size_t cap = w->more_cap ? w->more_cap : 65536;
            uint8_t *p;
            while (cap < w->more_len + h->len)
                cap *= 2;
            p = realloc(w->more, cap);
            if (!p) {
                wk_log(w->fd, "out of memory: a message dropped");
                w->more_len = 0;
                break;
            }
            w->more = p;
            w->more_cap = cap;
        }
        memcpy(w->more + w->more_len, payload, h->len);
        w->more_len += h->len;
        break;
    case SBX_CHAN_TOOL_RESULT:
        if (w->more_len) {
            uint8_t *all = malloc(w->more_len + h->len);
            size_t n = w->more_len;
            w->more_len = 0;
            if (!all) {
                wk_log(w->fd, "out of memory: a tool result dropped");
                break;
            }
            memcpy(all, w->more, n);
            memcpy(all + n, payload, h->len);
            on_tool_result(w, h->proc, all, (uint32_t)(n + h->len));
            free(all);
            break;
        }
        on_tool_result(w, h->proc, payload, h->len);
        break;
    case SBX_CHAN_SNAPSHOT:
        on_snapshot(w);
        break;
    case SBX_CHAN_RESTORE:
        on_restore(w, payload, h->len);
        break;
    case SBX_CHAN_RESET:
        on_reset(w);
        break;
    case SBX_CHAN_PING:
        wk_send(w->fd, SBX_CHAN_PONG, 0, NULL, 0);
        break;
    case SBX_CHAN_FORGET:
        break; /* the worker keeps no exited processes */
    default:
        wk_log(w->fd, "unexpected %s frame (0x%02x) for proc %u ignored",
               sbx_chan_type_name(h->type), h->type, (unsigned)h->proc);
        break;
    }
}

/* ---- entry point ---------------------------------------------------------------- */

int duk_worker_main(int argc, char **argv)
{
    struct opts o;
    struct dukw w;
    const char *why = NULL;
    int rc = 0;

    if (parse_args(argc, argv, &o) < 0)
        return 1;
    memset(&w, 0, sizeof(w));
    w.dispatch = dispatch;
    if (harden(&o, &why) < 0) {
        w.fd = o.fd;
        wk_send_error(w.fd, why);
        return 1;
    }
    w.fd = o.fd;
    w.memory_mb = o.memory_mb;
    w.mem_limit = (size_t)o.memory_mb * 1024 * 1024;
    if (dukw_isolate_create(&w) < 0) {
        wk_send_error(w.fd, "cannot create the Duktape heap");
        return 1;
    }
    send_hello(&w);
    rc = wk_serve(w.fd, dispatch, &w);
    dukw_isolate_destroy(&w);
    json_decref(w.tool_reply);
    free(w.more);
    free(w.in.buf);
    return rc;
}
