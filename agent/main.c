/*
 * main.c - sbx-init's startup: arguments, the standard descriptors, signals
 * into the loop's self-pipe, the tini-style main child; then sbx_init.c's
 * loop (agent_run) takes over for good. See sbx_init.c for what the agent
 * does once running.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "sbx_init_int.h"

extern char **environ;

/* ---- signals --------------------------------------------------------------- */

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char c = (unsigned char)sig;
    ssize_t w = write(agent.sigpipe[1], &c, 1);
    (void)w;
    errno = saved;
}

/* ---- startup --------------------------------------------------------------- */

/* Pipes must never land on 0-2, and children expect them open. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int nfd = open("/dev/null", O_RDWR);
            if (nfd >= 0 && nfd != fd) {
                dup2(nfd, fd);
                close(nfd);
            }
        }
}

static void setup_signals(void)
{
    if (pipe2(agent.sigpipe, O_CLOEXEC | O_NONBLOCK) < 0) {
        alog("pipe: %s", strerror(errno));
        exit(1);
    }
    signal(SIGPIPE, SIG_IGN);
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
    for (size_t k = 0; k < sizeof(sigs) / sizeof(sigs[0]); k++) {
        struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
        if (sigs[k] == SIGCHLD)
            sa.sa_flags |= SA_NOCLDSTOP;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[k], &sa, NULL);
    }
}

/* tini-style main child: own group, no stdin, output to our stderr. */
static void start_main_child(char **argv)
{
    int ep[2];
    if (pipe2(ep, O_CLOEXEC) < 0) {
        alog("pipe: %s", strerror(errno));
        exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
        alog("fork: %s", strerror(errno));
        exit(1);
    }
    if (pid == 0) {
        child_reset_signals();
        setpgid(0, 0);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) {
            dup2(nul, 0);
            if (nul != 0)
                close(nul);
        } else
            close(0);
        dup2(2, 1);
        close(agent.sigpipe[0]);
        close(agent.sigpipe[1]);
        exec_search(argv, environ, exec_sh_argv(argv), ep[1]);
    }
    setpgid(pid, pid);
    close(ep[1]);
    int ce[2];
    ssize_t r;
    do
        r = read(ep[0], ce, sizeof(ce));
    while (r < 0 && errno == EINTR);
    close(ep[0]);
    if (r == (ssize_t)sizeof(ce)) {
        alog("exec \"%s\": %s", argv[0], strerror(ce[1]));
        int st;
        waitpid(pid, &st, 0);
        exit(ce[1] == ENOENT ? 127 : 126);
    }
    agent.main_pid = pid;
}

static void usage(void)
{
    static const char text[] =
        "usage: sbx-init [--] [CMD ARGS...]\n"
        "  Agent and init process of an sbxd Docker sandbox: speaks the worker\n"
        "  channel (proto/CHANNEL.md) on stdin/stdout, reaps zombies and, with\n"
        "  CMD, runs it as the main child and exits with its status.\n";
    ssize_t w = write(2, text, sizeof(text) - 1);
    (void)w;
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        alog("channel version %d", SBX_CHAN_VERSION);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--") == 0)
        first = 2;
    else if (argc > 1 && argv[1][0] == '-') {
        usage();
        return 2;
    }

    net_init(agent_send);
    ensure_std_fds();
    setup_signals();
    proc_note_signals();
    /*
     * When not PID 1, become a subreaper so orphans of our children are
     * reparented to us and reaped here, as they would be in a container.
     */
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    /*
     * Non-dumpable: code in the container (root, but without CAP_SYS_PTRACE)
     * can no longer open the files of /proc/1/fd to forge frames on our stdout or take
     * the direct socket, nor read our memory. sbxd reaches /proc/PID/root
     * from the host with CAP_SYS_PTRACE, which this does not affect; the
     * commands we start are dumpable again after their execve.
     */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    set_nonblock(0);
    set_nonblock(1);
    agent.in_open = true;
    if (buf_reserve(&agent.ibuf, IBUF_CAP) < 0) {
        alog("out of memory");
        return 1;
    }
    if (first < argc)
        start_main_child(argv + first);
    agent_send_hello();
    agent_run();
}
