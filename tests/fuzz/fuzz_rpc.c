/*
 * fuzz_rpc.c - the session/JSON-RPC input path: bytes a client writes to
 * the daemon's socket, through session.c's line reader, rpc.c's request and
 * batch handling and api.c's methods, on the fake provider (sandboxes,
 * processes, attach, wait, kill... all reachable). The input is written to
 * a real socketpair in pieces while the loop runs; replies are read and
 * dropped. Everything is freed after each input.
 */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drain(int fd)
{
    char buf[65536];
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_daemon_setup();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        abort();
    session_accept(sv[0]);
    /* A sandbox the input may address by name, with a live process (pid 1). */
    struct sandbox *sb = fz_sandbox("sb");
    fz_process(sb);

    size_t off = 0;
    for (int rounds = 0; rounds < 4096 && off < size; rounds++) {
        ssize_t w = send(sv[1], data + off, size - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR)
            break;
        ev_run(D->loop, EVRUN_NOWAIT);
        drain(sv[1]);
    }
    /* Let the session finish what it read (ev_run handles one batch of events). */
    for (int i = 0; i < 8; i++) {
        ev_run(D->loop, EVRUN_NOWAIT);
        drain(sv[1]);
    }
    close(sv[1]);
    ev_run(D->loop, EVRUN_NOWAIT);
    fz_daemon_reset();
    return 0;
}
