/*
 * duk_worker.h - the Duktape isolate worker process (`sbxd --worker`).
 *
 * One worker = one Duktape sandbox = one Duktape heap. The daemon starts it as
 *
 *     sbxd --worker --fd N [--memory-limit-mb M] [--user NAME | --uid N] [--no-drop]
 *
 * (fork + exec of /proc/self/exe) and talks to it over the binary worker
 * channel on fd N (proto/CHANNEL.md). The worker uses plain blocking I/O and
 * runs one process (SPAWN) at a time.
 */
#ifndef SBXD_DUK_WORKER_H
#define SBXD_DUK_WORKER_H

/**
 * Runs the Duktape worker until the channel closes.
 *
 * Options (argv[0] is "sbxd" and is skipped; a "--worker" argument is
 * accepted and ignored, so main() may pass its argv through unchanged):
 *   --fd N               the channel (required); "--fd=N" works too
 *   --memory-limit-mb M  Duktape heap limit in MiB (default 128, 1..65536)
 *   --user NAME          user to drop to when started as root (default
 *                        "nobody", falling back to uid/gid 65534)
 *   --uid N              numeric uid (and gid) to drop to instead: the
 *                        socket user's own worker uid (never 0)
 *   --no-drop            keep the current uid even as root (tests only)
 *
 * Before it speaks, the worker hardens itself (no new privileges, closes
 * every fd but N and 0-2, redirects 0 and 1 to /dev/null, rlimits, drops
 * root, parent-death signal, and a seccomp filter unless SBX_NO_SECCOMP=1 is
 * set or it runs under valgrind).
 *
 * @param argc, argv  the command line, borrowed
 * @return the process exit status: 0 when the daemon closed the channel,
 *         1 on a broken channel or bad options, 70 never (a Duktape fatal
 *         error calls _exit(70) directly).
 *
 * Call it from main() only: it closes file descriptors and changes process
 * credentials and limits. It never returns into an event loop.
 */
int duk_worker_main(int argc, char **argv);

#endif
