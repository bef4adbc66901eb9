/* obuf.c - chunked output buffer; see obuf.h. */
#include "io/obuf.h"

#include <stdlib.h>
#include <string.h>

/* One emptied data chunk kept back for the next append: a client sending one
 * request at a time would otherwise cost a 16 KiB malloc and free (and
 * malloc's consolidation of its small free chunks) per reply. Loop thread
 * only; one chunk, bounded. */
static struct obuf_chunk *spare;

static void chunk_free(struct obuf_chunk *c)
{
    if (!c->ext && !spare) {
        spare = c;
        return;
    }
    free(c->ext);
    free(c);
}

static struct obuf_chunk *chunk_new(void)
{
    struct obuf_chunk *t = spare;
    if (t)
        spare = NULL;
    else if (!(t = malloc(sizeof(*t) + OBUF_CHUNK)))
        return NULL;
    t->start = t->end = 0;
    t->ext = NULL;
    return t;
}

void obuf_release_spare(void)
{
    free(spare);
    spare = NULL;
}

static void link_tail(struct obuf *b, struct obuf_chunk *t)
{
    t->next = NULL;
    if (b->tail)
        b->tail->next = t;
    else
        b->head = t;
    b->tail = t;
}

void obuf_init(struct obuf *b)
{
    memset(b, 0, sizeof(*b));
}

void obuf_deinit(struct obuf *b)
{
    struct obuf_chunk *c = b->head;
    while (c) {
        struct obuf_chunk *n = c->next;
        chunk_free(c);
        c = n;
    }
    memset(b, 0, sizeof(*b));
}

int obuf_append(struct obuf *b, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        struct obuf_chunk *t = b->tail;
        if (!t || t->ext || t->end == OBUF_CHUNK) {
            t = chunk_new();
            if (!t)
                return -1;
            link_tail(b, t);
        }
        size_t n = OBUF_CHUNK - t->end;
        if (n > len)
            n = len;
        memcpy(t->data + t->end, p, n);
        t->end += n;
        b->bytes += n;
        p += n;
        len -= n;
    }
    return 0;
}

int obuf_adopt(struct obuf *b, char *buf, size_t len)
{
    if (len == 0) {
        free(buf);
        return 0;
    }
    /* Only the header: the bytes are buf's. */
    struct obuf_chunk *t = malloc(sizeof(*t));
    if (!t) {
        free(buf);
        return -1;
    }
    t->start = 0;
    t->end = len;
    t->ext = buf;
    link_tail(b, t);
    b->bytes += len;
    return 0;
}

int obuf_iov(const struct obuf *b, struct iovec *iov, int max)
{
    int n = 0;
    for (struct obuf_chunk *c = b->head; c && n < max; c = c->next) {
        if (c->end == c->start)
            continue;
        iov[n].iov_base = (c->ext ? c->ext : (char *)c->data) + c->start;
        iov[n].iov_len = c->end - c->start;
        n++;
    }
    return n;
}

void obuf_consume(struct obuf *b, size_t n)
{
    while (n > 0 && b->head) {
        struct obuf_chunk *c = b->head;
        size_t avail = c->end - c->start;
        size_t take = avail < n ? avail : n;
        c->start += take;
        b->bytes -= take;
        n -= take;
        if (c->start == c->end) {
            b->head = c->next;
            if (!b->head)
                b->tail = NULL;
            chunk_free(c);
        }
    }
}
