/* obuf.c - chunked output buffer; see obuf.h. */
#include "obuf.h"

#include <stdlib.h>
#include <string.h>

void obuf_init(struct obuf *b)
{
    memset(b, 0, sizeof(*b));
}

void obuf_deinit(struct obuf *b)
{
    struct obuf_chunk *c = b->head;
    while (c) {
        struct obuf_chunk *n = c->next;
        free(c);
        c = n;
    }
    memset(b, 0, sizeof(*b));
}

int obuf_append(struct obuf *b, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        struct obuf_chunk *t = b->tail;
        if (!t || t->end == OBUF_CHUNK) {
            t = malloc(sizeof(*t));
            if (!t)
                return -1;
            t->next = NULL;
            t->start = t->end = 0;
            if (b->tail)
                b->tail->next = t;
            else
                b->head = t;
            b->tail = t;
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

int obuf_iov(const struct obuf *b, struct iovec *iov, int max)
{
    int n = 0;
    for (struct obuf_chunk *c = b->head; c && n < max; c = c->next) {
        if (c->end == c->start)
            continue;
        iov[n].iov_base = (char *)c->data + c->start;
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
            free(c);
        }
    }
}
