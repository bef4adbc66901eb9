/*
 * duk_text.c - UTF-8 <-> CESU-8 for the Duktape worker.
 *
 * Duktape keeps strings as CESU-8: "\ud83d\ude00" is two 3-byte encoded
 * surrogates, which is not valid UTF-8. Strings can also hold standard 4-byte
 * UTF-8 (pushed from C), Duktape's extended 5..7-byte forms, or any bytes at
 * all. Everything that leaves the worker is made valid UTF-8 here, and text
 * that enters the isolate is made CESU-8 so that JS sees standard UTF-16
 * semantics ("\u{1F600}".length === 2). Lone surrogates and invalid bytes
 * become U+FFFD: lossy, but the daemon and JSON parsers downstream insist on
 * valid UTF-8.
 */
#include <stdlib.h>
#include <string.h>

#include "workers/duktape/duk_worker_int.h"

/* ---- decoding ------------------------------------------------------------ */

enum { DEC_OK, DEC_BAD, DEC_SHORT };

/*
 * Decodes one sequence at s (len >= 1 bytes available). Surrogates decode
 * as themselves: the callers decide. *n is the byte count to consume (for
 * DEC_SHORT: the bytes present, all of them a valid prefix).
 */
static int decode(const uint8_t *s, size_t len, uint32_t *cp, size_t *n)
{
    uint8_t b = s[0];
    size_t need, i;
    uint64_t c, min;

    if (b < 0x80) {
        *cp = b;
        *n = 1;
        return DEC_OK;
    }
    if (b < 0xc0 || b == 0xff) { /* stray continuation byte, or never a lead */
        *n = 1;
        return DEC_BAD;
    }
    if (b < 0xe0) {
        need = 2, c = b & 0x1f, min = 0x80;
    } else if (b < 0xf0) {
        need = 3, c = b & 0x0f, min = 0x800;
    } else if (b < 0xf8) {
        need = 4, c = b & 0x07, min = 0x10000;
    } else if (b < 0xfc) { /* Duktape's extended forms: consumed whole, replaced */
        need = 5, c = b & 0x03, min = 0x200000;
    } else if (b < 0xfe) {
        need = 6, c = b & 0x01, min = 0x4000000;
    } else {
        need = 7, c = 0, min = 0x80000000;
    }
    for (i = 1; i < need; i++) {
        if (i >= len) {
            *n = i;
            return DEC_SHORT;
        }
        if ((s[i] & 0xc0) != 0x80) {
            *n = i;
            return DEC_BAD;
        }
        c = (c << 6) | (s[i] & 0x3f);
    }
    *n = need;
    if (need > 4 || c < min || c > 0x10ffff)
        return DEC_BAD;
    *cp = (uint32_t)c;
    return DEC_OK;
}

static int is_high(uint32_t cp)
{
    return cp >= 0xd800 && cp <= 0xdbff;
}
static int is_low(uint32_t cp)
{
    return cp >= 0xdc00 && cp <= 0xdfff;
}
static int is_surrogate(uint32_t cp)
{
    return cp >= 0xd800 && cp <= 0xdfff;
}

/* Encodes cp (any value up to 0x10FFFF, surrogates included) into out. */
static size_t encode(uint8_t *out, uint32_t cp)
{
    if (cp < 0x80) {
        if (out)
            out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        if (out) {
            out[0] = (uint8_t)(0xc0 | (cp >> 6));
            out[1] = (uint8_t)(0x80 | (cp & 0x3f));
        }
        return 2;
    }
    if (cp < 0x10000) {
        if (out) {
            out[0] = (uint8_t)(0xe0 | (cp >> 12));
            out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
            out[2] = (uint8_t)(0x80 | (cp & 0x3f));
        }
        return 3;
    }
    if (out) {
        out[0] = (uint8_t)(0xf0 | (cp >> 18));
        out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[3] = (uint8_t)(0x80 | (cp & 0x3f));
    }
    return 4;
}

/* ---- conversions --------------------------------------------------------- */

/* The length of the ASCII run at s, at most n. Eight bytes at a time: the
 * byte loop it replaces ran at a byte a cycle and its speed swung 2x with
 * where the linker placed it (streaming output, make bench). */
static size_t ascii_run(const uint8_t *s, size_t n)
{
    size_t i = 0;
    uint64_t v;

    while (i + 8 <= n) {
        memcpy(&v, s + i, 8);
        if (v & 0x8080808080808080ull)
            break;
        i += 8;
    }
    while (i < n && s[i] < 0x80)
        i++;
    return i;
}

size_t dukw_utf8_from_cesu8(uint8_t *out, size_t cap, const uint8_t *in, size_t len,
                            size_t *pos)
{
    size_t w = 0;

    while (*pos < len) {
        /* ASCII runs are the common case of program output: copy them
         * whole instead of decoding and encoding byte by byte. */
        if (in[*pos] < 0x80) {
            size_t lim = len - *pos < cap - w ? len - *pos : cap - w;
            size_t run = ascii_run(in + *pos, lim);
            if (run == 0)
                break;
            if (out)
                memcpy(out + w, in + *pos, run);
            w += run;
            *pos += run;
            continue;
        }
        const uint8_t *s = in + *pos;
        size_t avail = len - *pos, n, n2, k;
        uint32_t cp, cp2;
        int st = decode(s, avail, &cp, &n);

        if (st != DEC_OK) {
            cp = 0xfffd;
        } else if (is_high(cp) && n == 3 && avail > 3 &&
                   decode(s + 3, avail - 3, &cp2, &n2) == DEC_OK && n2 == 3 &&
                   is_low(cp2)) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (cp2 - 0xdc00);
            n = 6;
        } else if (is_surrogate(cp)) {
            cp = 0xfffd;
        }
        k = encode(NULL, cp);
        if (k > cap - w)
            break;
        w += encode(out ? out + w : NULL, cp);
        *pos += n;
    }
    return w;
}

size_t dukw_cesu8_from_utf8(uint8_t *out, size_t cap, const uint8_t *in, size_t len,
                            size_t *pos, int final)
{
    size_t w = 0;

    while (*pos < len) {
        size_t n, k;
        uint32_t cp;
        int st = decode(in + *pos, len - *pos, &cp, &n);

        if (st == DEC_SHORT && !final)
            break;
        if (st != DEC_OK || is_surrogate(cp))
            cp = 0xfffd;
        k = cp >= 0x10000 ? 6 : encode(NULL, cp);
        if (k > cap - w)
            break;
        if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            w += encode(out ? out + w : NULL, 0xd800 + (v >> 10));
            w += encode(out ? out + w : NULL, 0xdc00 + (v & 0x3ff));
        } else {
            w += encode(out ? out + w : NULL, cp);
        }
        *pos += n;
    }
    return w;
}

char *dukw_utf8_dup(const uint8_t *in, size_t len, size_t *len_out)
{
    size_t pos = 0, n = dukw_utf8_from_cesu8(NULL, SIZE_MAX, in, len, &pos);
    char *s = malloc(n + 1);

    if (!s)
        return NULL;
    pos = 0;
    dukw_utf8_from_cesu8((uint8_t *)s, n, in, len, &pos);
    s[n] = '\0';
    if (len_out)
        *len_out = n;
    return s;
}
