/* utf8.c - UTF-8 checks and base64; see utf8.h. */
#include "core/utf8.h"

#include <stdlib.h>
#include <string.h>

/* Length of the sequence a lead byte announces, 0 if it can't lead. */
static int seq_len(uint8_t c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* Is the second byte valid after lead c? (excludes overlongs and surrogates) */
static int second_ok(uint8_t c, uint8_t d)
{
    if ((d & 0xC0) != 0x80)
        return 0;
    if (c == 0xE0 && d < 0xA0)
        return 0;
    if (c == 0xED && d > 0x9F)
        return 0;
    if (c == 0xF0 && d < 0x90)
        return 0;
    if (c == 0xF4 && d > 0x8F)
        return 0;
    return 1;
}

/* 8 bytes from p, whatever their alignment. */
static inline uint64_t load8(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

int utf8_valid(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* ASCII, the common case, 8 bytes at a time */
        while (i + 8 <= len && (load8(s + i) & HIGHS) == 0)
            i += 8;
        if (i >= len)
            break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n = seq_len(c);
        if (n == 0 || i + (size_t)n > len)
            return 0;
        if (!second_ok(c, s[i + 1]))
            return 0;
        for (int k = 2; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
        i += (size_t)n;
    }
    return 1;
}

size_t utf8_incomplete_tail(const uint8_t *s, size_t len)
{
    /* Walk back over at most 3 continuation bytes to a lead byte. */
    size_t back = 0;
    while (back < 3 && back < len && (s[len - 1 - back] & 0xC0) == 0x80)
        back++;
    if (back == len)
        return 0;
    size_t lead = len - 1 - back;
    int n = seq_len(s[lead]);
    if (n <= 1 || (size_t)n <= back + 1)
        return 0; /* complete (or not a lead): nothing to hold */
    if (back >= 1 && !second_ok(s[lead], s[lead + 1]))
        return 0;
    return back + 1;
}

static const char b64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t base64_encode_to(char *out, const uint8_t *s, size_t len)
{
    char *o = out;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        uint32_t v = ((uint32_t)s[i] << 16) | ((uint32_t)s[i + 1] << 8) | s[i + 2];
        o[0] = b64[v >> 18];
        o[1] = b64[(v >> 12) & 63];
        o[2] = b64[(v >> 6) & 63];
        o[3] = b64[v & 63];
        o += 4;
    }
    if (i < len) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)s[i + 1] << 8;
        *o++ = b64[v >> 18];
        *o++ = b64[(v >> 12) & 63];
        *o++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return (size_t)(o - out);
}

char *base64_encode(const uint8_t *s, size_t len)
{
    char *out = malloc(base64_len(len) + 1);
    if (!out)
        return NULL;
    base64_encode_to(out, s, len);
    return out;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* 64 = not a base64 character. Both alphabets (+/ and -_) are accepted. */
static uint8_t b64tab[256];

static void b64tab_init(void)
{
    if (b64tab[0])
        return;
    memset(b64tab, 64, sizeof(b64tab));
    for (int c = 0; c < 256; c++) {
        int v = b64val((char)c);
        if (v >= 0)
            b64tab[c] = (uint8_t)v;
    }
}

uint8_t *base64_decode(const char *s, size_t len, size_t *out_len)
{
    while (len > 0 && s[len - 1] == '=')
        len--;
    if (len % 4 == 1)
        return NULL;
    uint8_t *out = malloc(len * 3 / 4 + 1);
    if (!out)
        return NULL;
    b64tab_init();
    const uint8_t *u = (const uint8_t *)s;
    size_t o = 0, i = 0;
    /* Four characters at a time (file chunks are megabytes of this). */
    for (; i + 4 <= len; i += 4) {
        uint32_t a = b64tab[u[i]], b = b64tab[u[i + 1]], c = b64tab[u[i + 2]],
                 d = b64tab[u[i + 3]];
        if ((a | b | c | d) & 64) {
            free(out);
            return NULL;
        }
        uint32_t w = a << 18 | b << 12 | c << 6 | d;
        out[o] = (uint8_t)(w >> 16);
        out[o + 1] = (uint8_t)(w >> 8);
        out[o + 2] = (uint8_t)w;
        o += 3;
    }
    uint32_t acc = 0;
    int bits = 0;
    for (; i < len; i++) {
        uint32_t v = b64tab[u[i]];
        if (v & 64) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
        }
    }
    *out_len = o;
    return out;
}

size_t json_plain_run(const uint8_t *s, size_t len)
{
    size_t i = 0;
    /* A byte needs escaping when it is < 0x20, '"' or '\\' (SWAR: a zero
     * byte test on w ^ c for the two characters, a borrow test for < 0x20). */
    for (; i + 8 <= len; i += 8) {
        uint64_t w = load8(s + i);
        uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
        uint64_t bad = ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w);
        bad &= HIGHS;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* The lowest flagged byte is a true one (a borrow only runs upwards
         * from a byte that is flagged itself), so it is the answer: text
         * has a newline every few dozen bytes, and the byte loop below
         * after each was a third of the daemon's work streaming it. */
        if (bad)
            return i + (size_t)__builtin_ctzll(bad) / 8;
#else
        if (bad)
            break;
#endif
    }
    while (i < len && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\')
        i++;
    return i;
}

/* The escaped length of each byte: \" \\ \n \t \r take two bytes, other
 * controls \u00XX six, the rest one. */
#define ESC_LEN(c)                                                                       \
    ((c) < 0x20 ? ((c) == '\n' || (c) == '\t' || (c) == '\r' ? 2 : 6)                    \
                : ((c) == '"' || (c) == '\\' ? 2 : 1))
#define ESC4(c) ESC_LEN(c), ESC_LEN((c) + 1), ESC_LEN((c) + 2), ESC_LEN((c) + 3)
#define ESC16(c) ESC4(c), ESC4((c) + 4), ESC4((c) + 8), ESC4((c) + 12)
#define ESC64(c) ESC16(c), ESC16((c) + 16), ESC16((c) + 32), ESC16((c) + 48)
static const uint8_t esc_len[256] = {ESC64(0), ESC64(64), ESC64(128), ESC64(192)};

size_t json_escaped_len(const uint8_t *s, size_t len, size_t limit)
{
    size_t out = 0;
    for (size_t i = 0; i < len;) {
        size_t run = json_plain_run(s + i, len - i);
        out += run;
        i += run;
        /* A run of bytes that need escaping (NUL-heavy output is mostly
         * that) byte by byte, not a plain-run call per byte: deciding
         * between escaping and base64 cost the daemon more than the base64. */
        while (i < len && esc_len[s[i]] != 1) {
            out += esc_len[s[i++]];
            if (out > limit)
                return limit + 1;
        }
    }
    return out;
}

size_t json_escape_to(char *out, const uint8_t *d, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        /* Runs of bytes that need no escaping are copied 8 at a time. */
        size_t run = json_plain_run(d + i, n - i);
        if (run) {
            memcpy(out + o, d + i, run);
            o += run;
            i += run;
            if (i == n)
                break;
        }
        uint8_t ch = d[i];
        if (ch == '"' || ch == '\\') {
            out[o++] = '\\';
            out[o++] = (char)ch;
        } else if (ch == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (ch == '\t') {
            out[o++] = '\\';
            out[o++] = 't';
        } else if (ch == '\r') {
            out[o++] = '\\';
            out[o++] = 'r';
        } else {
            memcpy(out + o, "\\u00", 4);
            out[o + 4] = hex[ch >> 4];
            out[o + 5] = hex[ch & 15];
            o += 6;
        }
    }
    return o;
}
