/*
 * sbx_chan.h - the daemon <-> worker channel: binary frames shared by the
 * Duktape isolate worker (sbxd --worker) and the Docker in-container agent
 * (sbx-init). Spec: proto/CHANNEL.md.
 *
 * Pure C, no allocation, no dependencies: it must build into a static
 * agent that knows nothing of libev or jansson.
 *
 * Frame: 12-byte header, then `len` bytes of payload.
 *   u8  type     SBX_CHAN_*
 *   u8  flags    0 (reserved)
 *   u16 rsvd     0
 *   u32 proc     process id chosen by the daemon (0 = the channel itself)
 *   u32 len      payload length, at most SBX_CHAN_MAX_PAYLOAD
 * All integers big-endian.
 */
#ifndef SBX_CHAN_H
#define SBX_CHAN_H

#include <stddef.h>
#include <stdint.h>

#define SBX_CHAN_VERSION 1
#define SBX_CHAN_HDR 12
#define SBX_CHAN_MAX_PAYLOAD (1u << 20)
/* Largest FS_DATA frame the agent sends for a read. */
#define SBX_CHAN_FS_FRAME (256u * 1024)
/* Largest read one FS_REQ may ask for. */
#define SBX_CHAN_FS_READ_MAX (4u << 20)
/* Output bytes a worker may send for one process before it needs credit. */
#define SBX_CHAN_WINDOW (256u * 1024)

enum sbx_chan_type {
    /* worker -> daemon */
    SBX_CHAN_HELLO = 0x01,     /* JSON {version, agent, procs:[...]} */
    SBX_CHAN_STDOUT = 0x10,    /* raw bytes */
    SBX_CHAN_STDERR = 0x11,    /* raw bytes */
    SBX_CHAN_EXIT = 0x12,      /* JSON exit record */
    SBX_CHAN_STARTED = 0x13,   /* JSON {os_pid} */
    SBX_CHAN_TOOL_CALL = 0x20, /* JSON {call, name, args} */
    SBX_CHAN_SNAP_DATA = 0x31, /* JSON state (proc 0) */
    SBX_CHAN_PONG = 0x51,
    SBX_CHAN_LOG = 0x7e,   /* UTF-8 text: worker diagnostics */
    SBX_CHAN_ERROR = 0x7f, /* JSON {message}: channel-level failure */

    /* daemon -> worker */
    SBX_CHAN_SPAWN = 0x02, /* JSON spawn request */
    SBX_CHAN_STDIN = 0x03, /* raw bytes */
    SBX_CHAN_STDIN_EOF = 0x04,
    SBX_CHAN_KILL = 0x05,        /* u32 signal number */
    SBX_CHAN_CREDIT = 0x06,      /* u32 bytes of further output allowed */
    SBX_CHAN_TOOL_RESULT = 0x21, /* JSON {call, result} or {call, error:{code,message}} */

    /* both ways: raw bytes that prefix the payload of the next frame of the
     * same proc (a message larger than SBX_CHAN_MAX_PAYLOAD) */
    SBX_CHAN_MORE = 0x22,
    SBX_CHAN_SNAPSHOT = 0x30, /* proc 0, empty: answer SNAP_DATA */
    SBX_CHAN_RESTORE = 0x32,  /* proc 0, JSON state to load */
    SBX_CHAN_RESET = 0x33,    /* proc 0, empty: a fresh isolate, then HELLO again */
    SBX_CHAN_REPLAY = 0x40,   /* JSON {stdout, stderr}: resend buffered output from these
                                 offsets */
    SBX_CHAN_FORGET = 0x41,   /* proc: the daemon has the exit; drop its record */
    SBX_CHAN_PING = 0x50,

    /* both ways: moving the channel to a direct socket (sbx-init) */
    SBX_CHAN_DIRECT = 0x52,

    /* files (sbx-init; CHANNEL.md "Files"), 0x60-0x6f. proc = request id. */
    SBX_CHAN_FS_REQ = 0x60,    /* daemon -> agent: JSON {op, path, ...} */
    SBX_CHAN_FS_DATA = 0x61,   /* both ways: raw bytes of a read / an open write */
    SBX_CHAN_FS_CANCEL = 0x62, /* daemon -> agent, empty: abandon the request */
    SBX_CHAN_FS_RESULT = 0x64, /* agent -> daemon: JSON result or {errno, message} */
    SBX_CHAN_FS_EVENT = 0x65,  /* agent -> daemon: JSON {events:[{path,kind}], dropped} */
    /* 0x80-0x9f: terminals, ports, egress, stats (issue 18) */
    SBX_CHAN_RESIZE = 0x80, /* daemon -> agent, proc p: u32 cols, u32 rows */
    /* connections relayed over the channel; "proc" is the connection id */
    SBX_CHAN_NET_OPEN = 0x81,   /* daemon -> agent: JSON {port}: connect to 127.0.0.1:port
                                 */
    SBX_CHAN_NET_OPENED = 0x82, /* agent -> daemon: empty: connected */
    SBX_CHAN_NET_DATA = 0x83,   /* both: raw bytes, against the connection's credit */
    SBX_CHAN_NET_EOF = 0x84,    /* both: no more bytes from this side */
    SBX_CHAN_NET_CLOSE = 0x85,  /* both: JSON {error?} or empty: the connection is gone */
    SBX_CHAN_NET_CREDIT = 0x86, /* both: u32 more bytes the other side may send */
    SBX_CHAN_NET_LISTEN = 0x87, /* daemon -> agent, proc 0: JSON {port}: serve the egress
                                   proxy on 127.0.0.1:port */
    SBX_CHAN_EGRESS_OPEN = 0x88, /* agent -> daemon, conn c (high bit set): JSON
                                    {host, port}: a proxy client wants this */
};

struct sbx_chan_hdr {
    uint8_t type;
    uint8_t flags;
    uint32_t proc;
    uint32_t len;
};

/* Writes the 12-byte header for (type, proc, len) into out. */
void sbx_chan_hdr_encode(uint8_t out[SBX_CHAN_HDR], uint8_t type, uint32_t proc,
                         uint32_t len);

/*
 * Parses a header from buf (at least SBX_CHAN_HDR bytes). Returns 0, or -1
 * when the frame is invalid (reserved bits set, len over the maximum): the
 * peer is then broken and the channel must be closed.
 */
int sbx_chan_hdr_decode(struct sbx_chan_hdr *out, const uint8_t *buf);

uint32_t sbx_chan_get_u32(const uint8_t *p);
void sbx_chan_put_u32(uint8_t *p, uint32_t v);

/* Name of a frame type for logs; "?" for unknown ones. */
const char *sbx_chan_type_name(uint8_t type);

#endif
