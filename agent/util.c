/* util.c - buffers, clock and logging for sbx-init. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

/* ---- allocation ---------------------------------------------------------- */

/*
 * Small allocations abort: an agent that cannot allocate a few hundred bytes
 * cannot do anything useful. Peer-sized buffers go through buf_reserve, which
 * fails gracefully.
 */
void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        alog("out of memory (%zu bytes)", n);
        abort();
    }
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        alog("out of memory (%zu x %zu bytes)", n, size);
        abort();
    }
    return p;
}

char *xstrndup(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* ---- buffers ------------------------------------------------------------- */

int buf_reserve(struct buf *b, size_t n)
{
    if (b->cap - b->len >= n)
        return 0;
    if (b->off > 0) {
        /* Compact: pending bytes move to the front. */
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= n)
            return 0;
    }
    size_t need = b->len + n;
    if (need < b->len)
        return -1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            return -1;
        cap *= 2;
    }
    uint8_t *d = realloc(b->data, cap);
    if (!d)
        return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int buf_puts(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof(tmp))
        return buf_append(b, tmp, (size_t)n);
    if (buf_reserve(b, (size_t)n + 1) < 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_consume(struct buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

void buf_deinit(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->off = b->len = b->cap = 0;
}

/* ---- misc ---------------------------------------------------------------- */

int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Diagnostics go to stderr only: stdout is the channel. */
void alog(const char *fmt, ...)
{
    char line[512];
    int saved = errno;
    int n = snprintf(line, sizeof(line), "sbx-init[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(line))
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    if (len + 1 >= sizeof(line))
        len = sizeof(line) - 2; /* truncated: keep room for the newline */
    line[len++] = '\n';
    ssize_t w = write(2, line, len);
    (void)w;
    errno = saved;
}

int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -1;
    if (fl & O_NONBLOCK)
        return 0;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}
