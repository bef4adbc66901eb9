/*
 * duk_chan.c - the worker's per-process output credit (proto/CHANNEL.md).
 * Frame I/O is workers/common/wk_chan.c.
 *
 * The worker is its own process with a single channel, so plain blocking
 * reads and writes are the simplest correct thing: while JS waits for credit,
 * a tool result or stdin, the worker reads frames and serves them
 * (dukw_pump_nested) until what it waits for arrives.
 */
#include <poll.h>

#include "workers/duktape/duk_worker_int.h"

/* ---- program output ------------------------------------------------------- */

/*
 * Serves whatever frames are already waiting. A program that prints a lot
 * with credit to spare never blocks, so without this the daemon's CREDITs
 * and PINGs would pile up unread in the socket (and a daemon with blocking
 * writes would deadlock against us). The daemon writes whole frames, so a
 * readable channel means a frame that arrives promptly.
 */
static void drain_input(struct dukw *w)
{
    struct pollfd p = {w->fd, POLLIN, 0};
    int budget = 64; /* bounded: output must make progress too */

    while (budget-- > 0 && poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)))
        dukw_pump_nested(w);
}

void dukw_output(struct dukw *w, uint8_t type, const uint8_t *data, size_t len)
{
    uint32_t proc = w->proc;

    if (proc == 0)
        return; /* e.g. a getter run by SNAPSHOT between processes */
    while (len > 0) {
        size_t n = len;

        while (w->credit == 0)
            dukw_pump_nested(w);
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

void dukw_output_cesu8(struct dukw *w, uint8_t type, const uint8_t *s, size_t len)
{
    /* On the stack, not static: output may nest (a getter logging while a
     * SNAPSHOT is served during a credit wait). */
    uint8_t buf[64 * 1024];
    size_t pos = 0;

    if (w->proc == 0)
        return;
    while (pos < len) {
        size_t n = dukw_utf8_from_cesu8(buf, sizeof(buf), s, len, &pos);
        dukw_output(w, type, buf, n);
    }
}
