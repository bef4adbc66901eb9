/*
 * chan.h - the daemon side of the worker channel (proto/CHANNEL.md): frame
 * parsing from a byte stream and a bounded outgoing buffer.
 *
 * Two ways to drive it: over a nonblocking fd that the chan watches itself
 * with libev (Duktape workers), or by feeding bytes and draining the output
 * through a write function (transports that own their socket, e.g. Docker's
 * attach stream under libcurl).
 *
 * The owner must not free a chan from inside its callbacks; chan_close()
 * is safe there and stops all further callbacks.
 */
#ifndef SBXD_CHAN_H
#define SBXD_CHAN_H

#include <ev.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/obuf.h"
#include "sbx_chan.h"

struct chan;
/* payload is valid only during the call. */
typedef void (*chan_frame_cb)(struct chan *ch, const struct sbx_chan_hdr *h,
                              const uint8_t *payload, void *data);
/* The channel ended (EOF, I/O error, protocol error); why is static text. */
typedef void (*chan_close_cb)(struct chan *ch, const char *why, void *data);

struct chan {
    int fd; /* -1 when fed by hand */
    ev_io io;
    int io_events;
    uint8_t *rbuf;
    size_t rlen, rcap;
    struct obuf wbuf;
    size_t wlimit; /* chan_send fails beyond this many pending bytes */
    chan_frame_cb on_frame;
    chan_close_cb on_close;
    void *data;
    int closed;
    int in_read;
    int paused; /* stop reading (fd mode) */
};

/* fd mode: takes ownership of fd (made nonblocking), starts watching it. */
void chan_init_fd(struct chan *ch, int fd, chan_frame_cb on_frame, chan_close_cb on_close,
                  void *data);
/* Fed mode: no fd; use chan_feed and chan_take_output. */
void chan_init_fed(struct chan *ch, chan_frame_cb on_frame, chan_close_cb on_close,
                   void *data);
/* Stops callbacks and closes the fd; idempotent. Does not free ch itself. */
void chan_close(struct chan *ch);
void chan_deinit(struct chan *ch);

/* Queues one frame. -1 when closed or over wlimit. */
int chan_send(struct chan *ch, uint8_t type, uint32_t proc, const void *payload,
              size_t len);
/* Same with a JSON payload (borrowed). */
int chan_send_json(struct chan *ch, uint8_t type, uint32_t proc, json_t *payload);
int chan_send_u32(struct chan *ch, uint8_t type, uint32_t proc, uint32_t v);

/* Fed mode: parses frames out of bytes. Returns -1 after a protocol error
 * (the close callback has run). */
int chan_feed(struct chan *ch, const uint8_t *data, size_t len);
size_t chan_pending_output(const struct chan *ch);
/* Fed mode: forgets a partial frame (the next byte starts a frame). Not from
 * inside this chan's callbacks. */
void chan_reset_input(struct chan *ch);

/* Parses a frame's JSON payload with the protocol's depth limit; NULL if bad. */
json_t *chan_json(const uint8_t *payload, size_t len);

#endif
