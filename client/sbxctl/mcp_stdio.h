/*
 * mcp_stdio.h - MCP's stdio transport: one JSON-RPC message per line on
 * stdin and stdout, non-blocking on the libev loop. Knows nothing of MCP;
 * reports to its owner through the callbacks it was given.
 *
 * Bounds: an incoming line is at most max_message bytes (a longer one is
 * skipped and reported with too_long); while more than MSTDIO_HIGH bytes wait
 * for stdout, stdin is not read (backpressure on the client).
 */
#ifndef SBXCTL_MCP_STDIO_H
#define SBXCTL_MCP_STDIO_H

#include <stddef.h>

#include <ev.h>

#include "mcp_util.h"

#define MSTDIO_HIGH (8u << 20)

struct mstdio_cbs {
    void (*line)(void *data, char *line, size_t len); /* one line, without '\n' */
    void (*too_long)(void *data); /* a line over max_message was skipped */
    void (*closed)(void *data);   /* stdin at EOF, or stdout broken */
    void (*drained)(void *data);  /* everything queued for stdout is written */
};

struct mstdio {
    struct ev_loop *loop;
    ev_io in_w, out_w;
    struct mbuf in, out;
    size_t max_message;
    int discarding, in_eof, in_paused;
    int quiet; /* no diagnostics (the owner is leaving) */
    int in_flags0, out_flags0;
    struct mstdio_cbs cb;
    void *data;
};

/* Makes fds 0 and 1 non-blocking and starts reading stdin. */
void mstdio_init(struct mstdio *s, struct ev_loop *loop, size_t max_message,
                 const struct mstdio_cbs *cb, void *data);
/* Queues one message line (a newline is added) and writes what it can. */
void mstdio_send(struct mstdio *s, const char *text, size_t len);
/* Bytes still waiting for stdout. */
size_t mstdio_queued(const struct mstdio *s);
/* More than half the high mark waits: optional messages should be skipped. */
int mstdio_congested(const struct mstdio *s);
/* Whether stdin or stdout is gone (the client left). */
int mstdio_gone(const struct mstdio *s);
void mstdio_stop_reading(struct mstdio *s);
/* Stops the watchers, restores the fds' flags, frees the buffers. */
void mstdio_fini(struct mstdio *s);

#endif
