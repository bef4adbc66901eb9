/*
 * fuzz_chan.c - the channel codec: proto/sbx_chan.c's header codec and
 * daemon/io/chan.c's frame parser in fed mode, with the input cut into pieces
 * at places the input chooses (first byte), and every payload given to
 * chan_json as the daemon's frame handlers do. Checks that a decoded header
 * re-encodes to the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "io/chan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t frames;

static void on_frame(struct chan *ch, const struct sbx_chan_hdr *h,
                     const uint8_t *payload, void *data)
{
    frames++;
    if (h->len > SBX_CHAN_MAX_PAYLOAD)
        abort(); /* the parser let an oversized frame through */
    json_t *v = chan_json(payload, h->len);
    json_decref(v);
    /* Answers go to the bounded output buffer, as the daemon's do. */
    chan_send(ch, h->type, h->proc, payload, h->len > 64 ? 64 : h->len);
}

static void on_close(struct chan *ch, const char *why, void *data)
{
    (void)why;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= SBX_CHAN_HDR) {
        struct sbx_chan_hdr h;
        if (sbx_chan_hdr_decode(&h, data) == 0) {
            uint8_t again[SBX_CHAN_HDR];
            sbx_chan_hdr_encode(again, h.type, h.proc, h.len);
            if (memcmp(again, data, SBX_CHAN_HDR) != 0)
                abort();
            (void)sbx_chan_type_name(h.type);
        }
    }
    if (size == 0)
        return 0;
    /* The first byte picks the piece size: 1..256 bytes per chan_feed. */
    size_t piece = (size_t)data[0] + 1;
    data++;
    size--;
    struct chan ch;
    chan_init_fed(&ch, on_frame, on_close, NULL);
    for (size_t off = 0; off < size && !ch.closed;) {
        size_t k = size - off < piece ? size - off : piece;
        if (chan_feed(&ch, data + off, k) < 0)
            break;
        off += k;
    }
    chan_deinit(&ch);
    return 0;
}
