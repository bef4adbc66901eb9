/*
 * proc.c - the processes sbx-init runs for the daemon: SPAWN validation,
 * spawning into a process group, the output rings and the exit record.
 *
 * Spawning is clone(CLONE_VM | CLONE_VFORK) on a stack of our own, the way
 * posix_spawn does it: no page tables to copy and no copy-on-write faults
 * afterwards, which on a virtual machine is most of what a fork costs (an
 * exec round trip is a few milliseconds, and this was one of them). The
 * child therefore shares our memory until it execs: it allocates nothing,
 * touches no lock, and runs with every signal blocked until the handlers it
 * inherited are reset.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* ---- SPAWN payload -------------------------------------------------------- */

static int bad(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* A string usable as a C string: no embedded NUL. */
static bool is_cstr(const struct jval *v)
{
    return v && v->type == J_STR && memchr(v->str, '\0', v->len) == NULL;
}

static int get_uint(const struct jval *v, int64_t max, int64_t *out)
{
    if (!v || v->type != J_NUM || !v->is_int || v->ival < 0 || v->ival > max)
        return -1;
    *out = v->ival;
    return 0;
}

void spawn_req_deinit(struct spawn_req *req)
{
    for (char **a = req->argv; a && *a; a++)
        free(*a);
    free(req->argv);
    for (char **e = req->envp; e && *e; e++)
        free(*e);
    free(req->envp);
    free(req->cwd);
    memset(req, 0, sizeof(*req));
}

int spawn_req_parse(struct spawn_req *req, const uint8_t *p, size_t n, char *err,
                    size_t errlen)
{
    char jerr[128];
    memset(req, 0, sizeof(*req));
    req->window = SBX_CHAN_WINDOW;
    struct jval *root = json_parse((const char *)p, n, jerr, sizeof(jerr));
    if (!root) {
        snprintf(err, errlen, "invalid SPAWN JSON: %s", jerr);
        return -1;
    }
    int ret = -1;
    if (root->type != J_OBJ) {
        bad(err, errlen, "SPAWN payload is not an object");
        goto out;
    }
    const struct jval *argv = json_get(root, "argv");
    const struct jval *shell = json_get(root, "shell");
    const struct jval *env = json_get(root, "env");
    const struct jval *cwd = json_get(root, "cwd");
    const struct jval *tmo = json_get(root, "timeout_ms");
    const struct jval *win = json_get(root, "window");
    const struct jval *pty = json_get(root, "pty");
    if (json_get(root, "code")) {
        bad(err, errlen, "\"code\" is not supported by sbx-init");
        goto out;
    }
    if (!!argv + !!shell != 1) {
        bad(err, errlen, "SPAWN needs exactly one of \"argv\" and \"shell\"");
        goto out;
    }
    if (argv) {
        if (argv->type != J_ARR || argv->count == 0) {
            bad(err, errlen, "\"argv\" must be a non-empty array of strings");
            goto out;
        }
        req->argv = xcalloc(argv->count + 1, sizeof(char *));
        size_t k = 0;
        for (const struct jval *a = argv->child; a; a = a->next) {
            if (!is_cstr(a)) {
                bad(err, errlen, "\"argv\" must hold strings without NUL");
                goto out;
            }
            req->argv[k++] = xstrndup(a->str, a->len);
        }
        if (req->argv[0][0] == '\0') {
            bad(err, errlen, "argv[0] is empty");
            goto out;
        }
    } else {
        if (!is_cstr(shell)) {
            bad(err, errlen, "\"shell\" must be a string without NUL");
            goto out;
        }
        req->argv = xcalloc(4, sizeof(char *));
        req->argv[0] = xstrndup("/bin/sh", 7);
        req->shell = true;
        req->argv[1] = xstrndup("-c", 2);
        req->argv[2] = xstrndup(shell->str, shell->len);
    }
    if (env && env->type != J_OBJ && env->type != J_NULL) {
        bad(err, errlen, "\"env\" must be an object of strings");
        goto out;
    }
    size_t nenv = env && env->type == J_OBJ ? env->count : 0;
    req->envp = xcalloc(nenv + 2, sizeof(char *));
    size_t k = 0;
    bool has_path = false;
    for (const struct jval *e = nenv ? env->child : NULL; e; e = e->next) {
        if (!is_cstr(e) || e->keylen == 0 || memchr(e->key, '=', e->keylen) ||
            memchr(e->key, '\0', e->keylen)) {
            bad(err, errlen, "\"env\" must map names (no '=', not empty) to strings");
            goto out;
        }
        char *kv = xmalloc(e->keylen + 1 + e->len + 1);
        memcpy(kv, e->key, e->keylen);
        kv[e->keylen] = '=';
        memcpy(kv + e->keylen + 1, e->str, e->len + 1);
        req->envp[k++] = kv;
        if (e->keylen == 4 && memcmp(e->key, "PATH", 4) == 0)
            has_path = true;
    }
    if (!has_path) {
        const char *def = "PATH=" AGENT_DEFAULT_PATH;
        req->envp[k++] = xstrndup(def, strlen(def));
    }
    if (cwd && cwd->type != J_NULL) {
        if (!is_cstr(cwd) || cwd->str[0] != '/') {
            bad(err, errlen, "\"cwd\" must be an absolute path");
            goto out;
        }
        req->cwd = xstrndup(cwd->str, cwd->len);
    }
    int64_t v;
    if (tmo && tmo->type != J_NULL) {
        if (get_uint(tmo, (int64_t)1 << 40, &v) < 0) {
            bad(err, errlen, "\"timeout_ms\" must be a non-negative integer");
            goto out;
        }
        req->timeout_ms = v;
    }
    if (win && win->type != J_NULL) {
        if (get_uint(win, UINT32_MAX, &v) < 0 || v == 0) {
            bad(err, errlen, "\"window\" must be a positive 32-bit integer");
            goto out;
        }
        req->window = (uint32_t)v;
    }
    if (pty && pty->type != J_NULL) {
        int64_t cols, rows;
        if (pty->type != J_OBJ ||
            get_uint(json_get(pty, "cols"), AGENT_PTY_MAX_DIM, &cols) < 0 ||
            get_uint(json_get(pty, "rows"), AGENT_PTY_MAX_DIM, &rows) < 0 || cols == 0 ||
            rows == 0) {
            bad(err, errlen, "\"pty\" must be {\"cols\":1..10000,\"rows\":1..10000}");
            goto out;
        }
        req->pty = true;
        req->cols = (unsigned)cols;
        req->rows = (unsigned)rows;
    }
    ret = 0;
out:
    json_free(root);
    if (ret < 0)
        spawn_req_deinit(req);
    return ret;
}

/* ---- exec (child side) ---------------------------------------------------- */

/* PATH value of envp, or the default. */
static const char *env_path(char *const envp[])
{
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            return *e + 5;
    return AGENT_DEFAULT_PATH;
}

/* What the child reports through the CLOEXEC error pipe. */
struct child_err {
    int stage; /* 0 = exec, 1 = cwd, 2 = setup */
    int err;
};

static void __attribute__((noreturn)) report(int errfd, int stage, int err)
{
    struct child_err ce = {stage, err};
    if (errfd >= 0) {
        ssize_t w = write(errfd, &ce, sizeof(ce));
        (void)w;
    }
    _exit(err == ENOENT ? 127 : 126);
}

char **exec_sh_argv(char *const argv[])
{
    size_t argc = 0;
    while (argv[argc])
        argc++;
    char **sh = xcalloc(argc + 2, sizeof(char *));
    sh[0] = (char *)"/bin/sh";
    for (size_t k = 1; k < argc; k++)
        sh[k + 1] = argv[k];
    return sh;
}

/* execve, and for a file without a #! or ELF header run it with /bin/sh like
 * execvp. sh is exec_sh_argv(argv): slot 1 is ours to fill. */
static void try_exec(const char *file, char *const argv[], char *const envp[], char **sh)
{
    execve(file, argv, envp);
    if (errno != ENOEXEC)
        return;
    sh[1] = (char *)file;
    execve("/bin/sh", sh, envp);
    errno = ENOEXEC;
}

/*
 * execvpe done by hand, searching the PATH of the *new* environment (glibc's
 * execvpe searches the caller's). Errors follow execvp: keep looking on
 * ENOENT/ENOTDIR/ESTALE/ENODEV/ETIMEDOUT, remember EACCES, stop on anything else.
 */
void exec_search(char *const argv[], char *const envp[], char **sh, int errfd)
{
    const char *file = argv[0];
    if (strchr(file, '/')) {
        try_exec(file, argv, envp, sh);
        report(errfd, 0, errno);
    }
    const char *path = env_path(envp);
    size_t flen = strlen(file);
    bool eacces = false;
    char full[4096];
    for (const char *d = path;; d++) {
        const char *end = strchr(d, ':');
        size_t dlen = end ? (size_t)(end - d) : strlen(d);
        if (dlen + 1 + flen + 1 <= sizeof(full)) {
            size_t o = 0;
            if (dlen == 0)
                full[o++] = '.'; /* an empty PATH entry is the current directory */
            else {
                memcpy(full, d, dlen);
                o = dlen;
            }
            full[o++] = '/';
            memcpy(full + o, file, flen + 1);
            try_exec(full, argv, envp, sh);
            switch (errno) {
            case EACCES:
                eacces = true;
                break;
            case ENOENT:
            case ENOTDIR:
            case ESTALE:
            case ENODEV:
            case ETIMEDOUT:
                break;
            default:
                report(errfd, 0, errno);
            }
        }
        if (!end)
            break;
        d = end;
    }
    report(errfd, 0, eacces ? EACCES : ENOENT);
}

/* mkdir -p; path is a private copy we may modify. */
static int mkdir_p(char *path)
{
    for (char *s = path + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        int r = mkdir(path, 0755);
        int e = errno;
        *s = c;
        if (r < 0 && e != EEXIST) {
            errno = e;
            return -1;
        }
        if (c == '\0')
            return 0;
    }
}

/*
 * Marks every descriptor above stderr close-on-exec (kernel 5.11+). The upper
 * end is INT_MAX, not ~0u: descriptors are ints, and gVisor refuses a range
 * past INT_MAX with EINVAL, which used to send every spawn there into the
 * fcntl loop below (20000 calls, about 0.45 s on the ptrace platform).
 */
static int close_range_cloexec(void)
{
#ifdef SYS_close_range
    return (int)syscall(SYS_close_range, 3u, (unsigned)INT_MAX, CLOSE_RANGE_CLOEXEC);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* Signals whose disposition is not SIG_DFL in the agent (proc_note_signals). */
static int set_sigs[NSIG];
static int nset_sigs;

void proc_note_signals(void)
{
    nset_sigs = 0;
    for (int s = 1; s < NSIG; s++) {
        struct sigaction sa;
        if (s != SIGKILL && s != SIGSTOP && sigaction(s, NULL, &sa) == 0 &&
            sa.sa_handler != SIG_DFL)
            set_sigs[nset_sigs++] = s;
    }
}

void child_reset_signals(void)
{
    /* Handlers first, then the mask: no handler of ours may run in here. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int k = 0; k < nset_sigs; k++)
        sigaction(set_sigs[k], &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

struct child_args {
    const struct spawn_req *req;
    int fds[3];
    int errfd;
    char **sh;
};

static int child_main(void *arg)
{
    const struct child_args *a = arg;
    const struct spawn_req *req = a->req;
    int errfd = a->errfd;
    child_reset_signals();
    /* A terminal's process leads its own session (its group too, so KILL
     * to -pid still reaches it); the others get a group of their own. */
    if (req->pty ? pty_child_setup(a->fds[0]) < 0 : setpgid(0, 0) < 0)
        report(errfd, 2, errno);
    for (int k = 0; k < 3; k++)
        if (dup2(a->fds[k], k) < 0)
            report(errfd, 2, errno);
    /* Nothing else of the agent's may leak into the program. */
    if (close_range_cloexec() < 0) {
        long max = sysconf(_SC_OPEN_MAX);
        if (max < 0 || max > 65536)
            max = 65536;
        for (int fd = 3; fd < max; fd++)
            fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (req->cwd) {
        char copy[4096];
        size_t n = strlen(req->cwd);
        if (n >= sizeof(copy))
            report(errfd, 1, ENAMETOOLONG);
        memcpy(copy, req->cwd, n + 1);
        if (mkdir_p(copy) < 0 || chdir(req->cwd) < 0)
            report(errfd, 1, errno);
    }
    exec_search(req->argv, req->envp, a->sh, errfd);
}

/* The child's stack. One at a time: the parent waits for each exec. */
static char child_stack[256u << 10] __attribute__((aligned(64)));

/* Starts the child; it has exec'd (or failed and said so on errfd) when this returns. */
static pid_t spawn_child(struct child_args *a)
{
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    pid_t pid = clone(child_main, child_stack + sizeof(child_stack),
                      CLONE_VM | CLONE_VFORK | SIGCHLD, a);
    int e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return pid;
}

/* ---- spawning (agent side) ------------------------------------------------ */

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* The process never ran: its record says why ("HEAD: DETAIL"). */
static void proc_fail(struct proc *p, int code, const char *head, const char *detail)
{
    char msg[512];
    snprintf(msg, sizeof(msg), "%s: %s", head, detail);
    free(p->error);
    p->error = xstrndup(msg, strlen(msg));
    p->exit_code = code;
    p->signal = 0;
    p->state = PROC_EXITED;
}

static char *command_of(const struct spawn_req *req);

struct proc *proc_spawn(uint32_t id, const struct spawn_req *req)
{
    struct proc *p = xcalloc(1, sizeof(*p));
    p->id = id;
    p->command = command_of(req);
    p->window = req->window;
    p->credit = req->window;
    p->in_fd = -1;
    p->tty_fd = -1;
    p->pty = req->pty;
    for (int s = 0; s < 2; s++) {
        p->out[s].fd = -1;
        p->out[s].drain_limit = UINT64_MAX;
    }
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, ep[2] = {-1, -1};
    if (pipe2(ep, O_CLOEXEC) < 0) {
        proc_fail(p, 126, "pipe", strerror(errno));
        goto close_all;
    }
    if (req->pty) {
        /* One terminal for all three: in[1] and out[0] are the master (two
         * descriptors, so closing stdin does not end the output), in[0] the
         * slave; err stays -1 and stderr never has bytes. */
        int m, s;
        if (pty_open(&m, &s, req->cols, req->rows) < 0) {
            proc_fail(p, 126, "pty", strerror(errno));
            goto close_all;
        }
        out[0] = m;
        in[0] = s;
        in[1] = fcntl(m, F_DUPFD_CLOEXEC, 3);
        p->tty_fd = fcntl(m, F_DUPFD_CLOEXEC, 3);
        if (in[1] < 0 || p->tty_fd < 0) {
            proc_fail(p, 126, "pty", strerror(errno));
            goto close_all;
        }
    } else if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
               pipe2(err, O_CLOEXEC) < 0) {
        proc_fail(p, 126, "pipe", strerror(errno));
        goto close_all;
    }
    int fds[3] = {in[0], req->pty ? in[0] : out[1], req->pty ? in[0] : err[1]};
    struct child_args ca = {
        req, {fds[0], fds[1], fds[2]}, ep[1], exec_sh_argv(req->argv)};
    pid_t pid = spawn_child(&ca);
    free(ca.sh);
    if (pid < 0) {
        proc_fail(p, 126, "clone", strerror(errno));
        goto close_all;
    }
    /* The child made its group before exec, and we ran on only after that. */
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&err[1]);
    close_fd(&ep[1]);
    struct child_err ce;
    ssize_t r;
    do
        r = read(ep[0], &ce, sizeof(ce));
    while (r < 0 && errno == EINTR);
    close_fd(&ep[0]);
    if (r == (ssize_t)sizeof(ce)) {
        /* The child reported and _exit()ed: reap it here, not in the loop. */
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        const char *what = ce.stage == 0 ? "exec" : ce.stage == 1 ? "cwd" : "setup";
        const char *arg = ce.stage == 0 ? req->argv[0] : ce.stage == 1 ? req->cwd : "";
        char head[300];
        if (ce.stage == 2)
            snprintf(head, sizeof(head), "%s", what);
        else
            snprintf(head, sizeof(head), "%s \"%.200s\"", what, arg);
        proc_fail(p, ce.err == ENOENT ? 127 : 126, head, strerror(ce.err));
        goto close_all;
    }
    p->pid = pid;
    p->state = PROC_RUNNING;
    p->in_fd = in[1];
    p->out[0].fd = out[0];
    p->out[1].fd = err[0];
    set_nonblock(p->in_fd);
    set_nonblock(p->out[0].fd);
    if (p->out[1].fd >= 0)
        set_nonblock(p->out[1].fd);
    if (req->timeout_ms > 0)
        p->deadline = now_ms() + req->timeout_ms;
    return p;
close_all:
    close_fd(&in[0]);
    close_fd(&in[1]);
    close_fd(&out[0]);
    close_fd(&out[1]);
    close_fd(&err[0]);
    close_fd(&err[1]);
    close_fd(&ep[0]);
    close_fd(&ep[1]);
    close_fd(&p->tty_fd);
    return p;
}

void proc_free(struct proc *p)
{
    if (!p)
        return;
    close_fd(&p->in_fd);
    close_fd(&p->tty_fd);
    for (int s = 0; s < 2; s++) {
        close_fd(&p->out[s].fd);
        free(p->out[s].ring);
    }
    buf_deinit(&p->in);
    free(p->error);
    free(p->command);
    free(p);
}

/* What HELLO says a process runs: the shell string, or argv joined by spaces. */
static char *command_of(const struct spawn_req *req)
{
    struct buf b = {0};
    if (req->shell)
        buf_puts(&b, req->argv[2]);
    for (size_t k = 0; !req->shell && req->argv[k] && b.len < AGENT_COMMAND_MAX; k++) {
        if (k)
            buf_puts(&b, " ");
        buf_puts(&b, req->argv[k]);
    }
    size_t n = b.len < AGENT_COMMAND_MAX ? b.len : AGENT_COMMAND_MAX;
    char *s = xstrndup(b.data ? (const char *)b.data : "", n);
    buf_deinit(&b);
    return s;
}

/* ---- lifecycle ------------------------------------------------------------ */

void proc_close_stdin(struct proc *p)
{
    close_fd(&p->in_fd);
    buf_deinit(&p->in);
}

void proc_close_stream(struct proc *p, int s)
{
    close_fd(&p->out[s].fd);
    if (p->state == PROC_DRAINING && p->out[0].fd < 0 && p->out[1].fd < 0)
        p->state = PROC_EXITED;
}

void proc_leader_exited(struct proc *p, int status, int64_t now)
{
    if (WIFSIGNALED(status)) {
        p->signal = WTERMSIG(status);
        p->exit_code = 128 + p->signal;
    } else {
        p->signal = 0;
        p->exit_code = WEXITSTATUS(status);
    }
    if (p->timed_out)
        p->exit_code = 124;
    p->deadline = 0;
    /* Background children may still read it, but nobody will feed them now. */
    proc_close_stdin(p);
    p->state = PROC_DRAINING;
    p->grace_at = now + AGENT_EXIT_GRACE_MS;
    if (p->out[0].fd < 0 && p->out[1].fd < 0)
        p->state = PROC_EXITED;
}

void proc_timeout(struct proc *p)
{
    if (p->pid > 0)
        kill(-p->pid, SIGKILL);
    p->timed_out = true;
    p->killed = true;
    p->deadline = 0;
}

void proc_grace_expired(struct proc *p)
{
    p->grace_at = 0;
    for (int s = 0; s < 2; s++) {
        struct stream *st = &p->out[s];
        if (st->fd < 0 || st->drain_limit != UINT64_MAX)
            continue;
        /*
         * Whatever sits in the pipe now includes everything the leader wrote
         * before it exited; later writes come from background children and
         * are not waited for.
         */
        int avail = 0;
        if (ioctl(st->fd, FIONREAD, &avail) < 0 || avail <= 0)
            proc_close_stream(p, s);
        else
            st->drain_limit = st->total + (uint64_t)avail;
    }
}

/* ---- rings ---------------------------------------------------------------- */

uint64_t proc_ring_oldest(const struct proc *p, int s)
{
    const struct stream *st = &p->out[s];
    return st->total > st->cap ? st->total - st->cap : 0;
}

void proc_ring_read(const struct proc *p, int s, uint64_t off, uint8_t *dst, size_t n)
{
    const struct stream *st = &p->out[s];
    if (n == 0)
        return;
    size_t pos = (size_t)(off % st->cap);
    size_t first = st->cap - pos < n ? st->cap - pos : n;
    memcpy(dst, st->ring + pos, first);
    memcpy(dst + first, st->ring, n - first);
}

void proc_ring_write(struct proc *p, int s, const uint8_t *data, size_t n)
{
    struct stream *st = &p->out[s];
    uint64_t need = st->total + n;
    if (st->cap < AGENT_RING_MAX && need > st->cap) {
        size_t cap = st->cap ? st->cap : AGENT_RING_MIN;
        while (cap < need && cap < AGENT_RING_MAX)
            cap *= 2;
        uint8_t *ring = xmalloc(cap);
        uint64_t oldest = proc_ring_oldest(p, s);
        for (uint64_t off = oldest; off < st->total;) {
            size_t pos = (size_t)(off % cap);
            size_t chunk = cap - pos;
            if (chunk > st->total - off)
                chunk = (size_t)(st->total - off);
            proc_ring_read(p, s, off, ring + pos, chunk);
            off += chunk;
        }
        free(st->ring);
        st->ring = ring;
        st->cap = cap;
    }
    size_t pos = (size_t)(st->total % st->cap);
    size_t first = st->cap - pos < n ? st->cap - pos : n;
    memcpy(st->ring + pos, data, first);
    memcpy(st->ring, data + first, n - first);
    st->total += n;
}

size_t proc_read_allowance(const struct proc *p, int s)
{
    const struct stream *st = &p->out[s];
    if (st->fd < 0)
        return 0;
    int64_t unsent = (int64_t)(p->out[0].total - p->out[0].sent) +
                     (int64_t)(p->out[1].total - p->out[1].sent);
    int64_t a = p->credit - unsent;
    if (a <= 0)
        return 0;
    /* Unsent bytes must never be overwritten in the ring. */
    int64_t room = (int64_t)AGENT_RING_MAX - (int64_t)(st->total - st->sent);
    if (a > room)
        a = room;
    if (st->drain_limit != UINT64_MAX && (uint64_t)a > st->drain_limit - st->total)
        a = (int64_t)(st->drain_limit - st->total);
    if (a > (int64_t)AGENT_FRAME_OUT)
        a = AGENT_FRAME_OUT;
    return a > 0 ? (size_t)a : 0;
}

/* ---- exit record ---------------------------------------------------------- */

int proc_exit_json(const struct proc *p, struct buf *b)
{
    if (buf_printf(b, "{\"exit_code\":%d,\"signal\":%d,\"timed_out\":%s,\"killed\":%s",
                   p->exit_code, p->signal, p->timed_out ? "true" : "false",
                   p->killed ? "true" : "false") < 0)
        return -1;
    if (p->error) {
        if (buf_puts(b, ",\"error\":") < 0 ||
            json_put_str(b, p->error, strlen(p->error)) < 0)
            return -1;
    }
    return buf_puts(b, "}");
}
