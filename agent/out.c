/*
 * out.c - sbx-init's output queue: frames to the daemon (proto/CHANNEL.md).
 *
 * Below every file that produces frames (sbx_init.c, fs.c, fs_tar.c, and
 * net.c through the function main.c hands it), so that none of them calls
 * back up into the loop to send. The loop (sbx_init.c) writes the queue out,
 * and switches the channel between stdout and the direct socket; this file
 * only frames and bounds.
 */
#include <stdio.h>
#include <string.h>

#include "agent.h"

/* The one instance: no direct socket until a DIRECT is proven. */
struct agent_out agent_out = {.dfd = -1};

/* Frames go to the direct socket while there is one, else to stdout. */
bool out_ok(void)
{
    return agent_out.dfd >= 0 || !agent_out.dead;
}

int out_fd(void)
{
    return agent_out.dfd >= 0 ? agent_out.dfd : 1;
}

void agent_send(uint8_t type, uint32_t id, const void *payload, size_t n)
{
    if (!out_ok())
        return;
    if (n > SBX_CHAN_MAX_PAYLOAD) {
        alog("a %s frame of %zu bytes is over the maximum: dropped",
             sbx_chan_type_name(type), n);
        return;
    }
    if (buf_pending(&agent_out.q) + SBX_CHAN_HDR + n > AGENT_OBUF_HARD ||
        buf_reserve(&agent_out.q, SBX_CHAN_HDR + n) < 0) {
        alog("output queue full: dropping a %s frame", sbx_chan_type_name(type));
        return;
    }
    uint8_t hdr[SBX_CHAN_HDR];
    sbx_chan_hdr_encode(hdr, type, id, (uint32_t)n);
    buf_append(&agent_out.q, hdr, sizeof(hdr));
    buf_append(&agent_out.q, payload, n);
}

void agent_send_buf(uint8_t type, uint32_t id, struct buf *b)
{
    agent_send(type, id, b->data + b->off, buf_pending(b));
    buf_deinit(b);
}

bool agent_out_room(void)
{
    return buf_pending(&agent_out.q) < AGENT_OBUF_SOFT;
}

/* Frames queued for the old channel are dropped: the daemon REPLAYs after
 * its handshake on the new one, and EXIT/STARTED are in that HELLO/REPLAY. */
void out_drop_queued(void)
{
    buf_consume(&agent_out.q, buf_pending(&agent_out.q));
}

/* ---- answers ------------------------------------------------------------------- */

void agent_send_fs_err(uint32_t id, int e, const char *msg)
{
    const char *name = strerrorname_np(e);
    struct buf b = {0};
    buf_printf(&b, "{\"errno\":\"%s\",\"message\":", name ? name : "EIO");
    const char *m = msg && *msg ? msg : strerror(e);
    json_put_str(&b, m, strlen(m));
    buf_puts(&b, "}");
    agent_send_buf(SBX_CHAN_FS_RESULT, id, &b);
}
