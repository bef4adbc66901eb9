/*
 * jsw_chan.c - the js worker's output credit (proto/CHANNEL.md). Frame I/O
 * is workers/common/wk_chan.c. The worker has one channel and runs one
 * program, so blocking is the simplest correct thing: while a console call
 * waits for credit the worker serves frames from inside it.
 */
#include <poll.h>

#include "workers/jsc/jsw.h"

/* ---- program output ------------------------------------------------------- */

/* Serves frames already waiting (credit, PING), bounded, so a program that
 * prints with credit to spare does not let them pile up unread. */
static void drain_input(struct jsw *w)
{
    struct pollfd p = {w->fd, POLLIN, 0};
    int budget = 64;

    while (budget-- > 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)))
        jsw_pump(w);
}

void jsw_output(struct jsw *w, uint8_t type, const uint8_t *data, size_t len)
{
    uint32_t proc = w->proc;

    if (proc == 0)
        return;
    while (len > 0) {
        size_t n = len;

        while (w->credit == 0 && w->proc == proc)
            jsw_pump(w);
        if (w->proc != proc)
            return;
        if (n > w->credit)
            n = (size_t)w->credit;
        if (n > SBX_CHAN_MAX_PAYLOAD)
            n = SBX_CHAN_MAX_PAYLOAD;
        wk_send(w->fd, type, proc, data, n);
        w->credit -= n;
        data += n;
        len -= n;
        drain_input(w);
    }
}
