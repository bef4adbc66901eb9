/*
 * mcp_util.c - bounded buffers, UTF-8-safe JSON strings and the diagnostic
 * line of `sbxctl mcp` (mcp_util.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_util.h"

void mcp_log(const char *fmt, ...)
{
    va_list ap;
    fputs("sbxctl mcp: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

size_t mbuf_append(struct mbuf *b, const char *data, size_t len, size_t max)
{
    if (b->len >= max)
        return 0;
    if (len > max - b->len)
        len = max - b->len;
    if (b->len + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return 0;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    b->p[b->len] = '\0';
    return len;
}

void mbuf_free(struct mbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned min;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    unsigned cp = c & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

json_t *mbuf_string(const char *p, size_t len)
{
    const unsigned char *s = (const unsigned char *)p;
    struct mbuf b = {0};
    size_t i = 0, run = 0;
    json_t *j;

    while (i < len) {
        size_t k = utf8_seq(s + i, len - i);
        if (k) {
            i += k;
            continue;
        }
        /* Flush the valid run before i, then U+FFFD for the bad byte. */
        mbuf_append(&b, p + run, i - run, (size_t)-1);
        mbuf_append(&b, "\xEF\xBF\xBD", 3, (size_t)-1);
        run = ++i;
    }
    if (run == 0)
        return json_stringn(p ? p : "", len);
    mbuf_append(&b, p + run, len - run, (size_t)-1);
    j = json_stringn(b.p ? b.p : "", b.len);
    mbuf_free(&b);
    return j;
}
