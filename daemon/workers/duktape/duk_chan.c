/*
 * duk_chan.c - the worker's program output (proto/CHANNEL.md). Frame I/O and
 * the output credit are workers/common/wk_chan.c.
 *
 * The worker is its own process with a single channel, so plain blocking
 * reads and writes are the simplest correct thing: while JS waits for credit,
 * a tool result or stdin, the worker reads frames and serves them
 * (dukw_pump_nested) until what it waits for arrives. They are served by
 * w->dispatch, duk_worker.c's handler, which this file never names: that
 * file calls down into the heap, which calls down into this one.
 */
#include "workers/duktape/duk_worker_int.h"

/* ---- program output ------------------------------------------------------- */

void dukw_output(struct dukw *w, uint8_t type, const uint8_t *data, size_t len)
{
    struct wk_out o = {w->fd, w->dispatch, w, &w->proc, &w->credit};

    wk_output(&o, type, data, len);
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

/* ---- frames served while JS waits ----------------------------------------------- */

void dukw_pump_nested(struct dukw *w)
{
    wk_pump(w->fd, w->dispatch, w);
}
