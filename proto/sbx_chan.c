/* sbx_chan.c - frame header codec for the worker channel (proto/CHANNEL.md). */
#include "sbx_chan.h"

uint32_t sbx_chan_get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
           (uint32_t)p[3];
}

void sbx_chan_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

void sbx_chan_hdr_encode(uint8_t out[SBX_CHAN_HDR], uint8_t type, uint32_t proc,
                         uint32_t len)
{
    out[0] = type;
    out[1] = 0;
    out[2] = 0;
    out[3] = 0;
    sbx_chan_put_u32(out + 4, proc);
    sbx_chan_put_u32(out + 8, len);
}

int sbx_chan_hdr_decode(struct sbx_chan_hdr *out, const uint8_t *buf)
{
    out->type = buf[0];
    out->flags = buf[1];
    out->proc = sbx_chan_get_u32(buf + 4);
    out->len = sbx_chan_get_u32(buf + 8);
    if (buf[1] != 0 || buf[2] != 0 || buf[3] != 0)
        return -1;
    if (out->len > SBX_CHAN_MAX_PAYLOAD)
        return -1;
    return 0;
}

const char *sbx_chan_type_name(uint8_t type)
{
    switch (type) {
    case SBX_CHAN_HELLO:
        return "HELLO";
    case SBX_CHAN_STDOUT:
        return "STDOUT";
    case SBX_CHAN_STDERR:
        return "STDERR";
    case SBX_CHAN_EXIT:
        return "EXIT";
    case SBX_CHAN_STARTED:
        return "STARTED";
    case SBX_CHAN_TOOL_CALL:
        return "TOOL_CALL";
    case SBX_CHAN_SNAP_DATA:
        return "SNAP_DATA";
    case SBX_CHAN_PONG:
        return "PONG";
    case SBX_CHAN_LOG:
        return "LOG";
    case SBX_CHAN_ERROR:
        return "ERROR";
    case SBX_CHAN_SPAWN:
        return "SPAWN";
    case SBX_CHAN_RESIZE:
        return "RESIZE";
    case SBX_CHAN_NET_OPEN:
        return "NET_OPEN";
    case SBX_CHAN_NET_OPENED:
        return "NET_OPENED";
    case SBX_CHAN_NET_DATA:
        return "NET_DATA";
    case SBX_CHAN_NET_EOF:
        return "NET_EOF";
    case SBX_CHAN_NET_CLOSE:
        return "NET_CLOSE";
    case SBX_CHAN_NET_CREDIT:
        return "NET_CREDIT";
    case SBX_CHAN_NET_LISTEN:
        return "NET_LISTEN";
    case SBX_CHAN_EGRESS_OPEN:
        return "EGRESS_OPEN";
    case SBX_CHAN_STDIN:
        return "STDIN";
    case SBX_CHAN_STDIN_EOF:
        return "STDIN_EOF";
    case SBX_CHAN_KILL:
        return "KILL";
    case SBX_CHAN_CREDIT:
        return "CREDIT";
    case SBX_CHAN_TOOL_RESULT:
        return "TOOL_RESULT";
    case SBX_CHAN_MORE:
        return "MORE";
    case SBX_CHAN_FS_REQ:
        return "FS_REQ";
    case SBX_CHAN_FS_DATA:
        return "FS_DATA";
    case SBX_CHAN_FS_CANCEL:
        return "FS_CANCEL";
    case SBX_CHAN_FS_RESULT:
        return "FS_RESULT";
    case SBX_CHAN_FS_EVENT:
        return "FS_EVENT";
    case SBX_CHAN_SNAPSHOT:
        return "SNAPSHOT";
    case SBX_CHAN_RESTORE:
        return "RESTORE";
    case SBX_CHAN_RESET:
        return "RESET";
    case SBX_CHAN_REPLAY:
        return "REPLAY";
    case SBX_CHAN_FORGET:
        return "FORGET";
    case SBX_CHAN_PING:
        return "PING";
    case SBX_CHAN_DIRECT:
        return "DIRECT";
    }
    return "?";
}
