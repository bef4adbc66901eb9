/*
 * pty.c - terminals for SPAWNs that ask for one ("pty": {"cols","rows"}).
 *
 * The agent holds the master; the child gets the slave as stdin, stdout and
 * stderr, becomes a session leader and takes the slave as its controlling
 * terminal, so the line discipline turns ^C into SIGINT for whatever job is
 * in the foreground, and SIGWINCH follows a resize. The child side runs
 * between clone and exec (proc.c): it only makes system calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"

#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

int pty_open(int *master_out, int *slave_out, unsigned cols, unsigned rows)
{
    int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0)
        return -1;
    int unlock = 0;
    if (ioctl(m, TIOCSPTLCK, &unlock) < 0)
        goto fail;
    /*
     * TIOCGPTPEER opens the slave through the master, not by a path: a
     * /dev/pts the image replaced, or a name that a process in the container
     * raced us to, cannot hand us another file.
     */
    int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (s < 0) {
        unsigned n;
        char path[64];
        if (ioctl(m, TIOCGPTN, &n) < 0)
            goto fail;
        snprintf(path, sizeof(path), "/dev/pts/%u", n);
        s = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (s < 0)
            goto fail;
    }
    if (pty_resize(m, cols, rows) < 0) {
        int e = errno;
        close(s);
        errno = e;
        goto fail;
    }
    *master_out = m;
    *slave_out = s;
    return 0;
fail : {
    int e = errno;
    close(m);
    errno = e;
    return -1;
}
}

int pty_resize(int master, unsigned cols, unsigned rows)
{
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    return ioctl(master, TIOCSWINSZ, &ws);
}

int pty_child_setup(int slave)
{
    if (setsid() < 0)
        return -1;
    return ioctl(slave, TIOCSCTTY, 0);
}
