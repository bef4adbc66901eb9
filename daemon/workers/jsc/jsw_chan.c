/*
 * jsw_chan.c - the js worker's program output (proto/CHANNEL.md). Frame I/O
 * and the output credit are workers/common/wk_chan.c. The worker has one
 * channel and runs one program, so blocking is the simplest correct thing:
 * while a console call waits for credit the worker serves frames from
 * inside it.
 */
#include "workers/jsc/jsw.h"

/* ---- program output ------------------------------------------------------- */

void jsw_output(struct jsw *w, uint8_t type, const uint8_t *data, size_t len)
{
    struct wk_out o = {w->fd, w->dispatch, w, &w->proc, &w->credit};

    wk_output(&o, type, data, len);
}
