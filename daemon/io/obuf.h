/*
 * obuf.h - an output buffer made of fixed 16 KiB chunks (Redis's client reply
 * list): appends never move existing data, and memory is returned chunk by
 * chunk as the peer reads.
 */
#ifndef SBXD_OBUF_H
#define SBXD_OBUF_H

#include <stddef.h>
#include <sys/uio.h>

#define OBUF_CHUNK (16 * 1024)

struct obuf_chunk {
    struct obuf_chunk *next;
    size_t start, end; /* live bytes are bytes[start, end) */
    char *ext;         /* an adopted buffer (obuf_adopt), owned; NULL: data */
    char data[];       /* OBUF_CHUNK bytes, unless ext */
};

struct obuf {
    struct obuf_chunk *head, *tail;
    size_t bytes; /* live bytes in all chunks */
};

void obuf_init(struct obuf *b);
void obuf_deinit(struct obuf *b);
/* Appends len bytes (copies). Returns 0, or -1 on OOM. */
int obuf_append(struct obuf *b, const void *data, size_t len);
/* Appends buf[0, len) without copying: the buffer becomes the obuf's (it is
 * freed once written, or by obuf_deinit), also when -1 (OOM) is returned.
 * For a large reply built elsewhere, so that queueing it costs no copy. */
int obuf_adopt(struct obuf *b, char *buf, size_t len);
/* Fills up to max iovecs with the pending bytes; returns how many. */
int obuf_iov(const struct obuf *b, struct iovec *iov, int max);
/* Drops the first n bytes (they were written). */
void obuf_consume(struct obuf *b, size_t n);
/* Frees the one emptied chunk kept for the next append (at shutdown). */
void obuf_release_spare(void);

#endif
