/*
 * fuzz_utf8.c - the UTF-8 and base64 helpers of daemon/core/utf8.c and libsbx,
 * checked against each other and against plain reference code:
 *   utf8_valid            = a byte-at-a-time RFC 3629 decoder
 *   utf8_incomplete_tail  : cutting valid text anywhere and holding the tail
 *                           back leaves valid text, and the tail is < 4 bytes
 *   json_plain_run        = the first byte < 0x20, '"' or '\\'
 *   json_escape_to        : jansson reads the escaped text back to the bytes
 *   json_escaped_len      = the length json_escape_to writes (and its limit)
 *   base64                : daemon and libsbx encoders agree, each decoder
 *                           reverses both, and whatever libsbx's strict
 *                           decoder accepts the daemon's decodes the same.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/sbx.h"
#include "core/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                         \
    do {                                                                                 \
        if (!(c))                                                                        \
            abort();                                                                     \
    } while (0)

static int ref_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        uint32_t cp, min;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (i + k > n)
            return 0;
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k;
    }
    return 1;
}

static size_t ref_plain(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\')
        i++;
    return i;
}

static void check_escape(const uint8_t *s, size_t n)
{
    char *out = malloc(6 * n + 3);
    CHECK(out);
    out[0] = '"';
    size_t e = json_escape_to(out + 1, s, n);
    CHECK(json_escaped_len(s, n, (size_t)-2) == e);
    if (e > 0) /* the limit: over it, limit + 1; at it, the length */
        CHECK(json_escaped_len(s, n, e - 1) == e && json_escaped_len(s, n, e) == e);
    out[e + 1] = '"';
    json_error_t je;
    json_t *v = json_loadb(out, e + 2, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    CHECK(v && json_is_string(v) && json_string_length(v) == n &&
          memcmp(json_string_value(v), s, n) == 0);
    json_decref(v);
    free(out);
}

static void check_base64(const uint8_t *s, size_t n)
{
    char *a = base64_encode(s, n);
    CHECK(a);
    size_t al = strlen(a);
    CHECK(al == base64_len(n) && al == sbx_base64_encoded_len(n));
    char *b = malloc(al + 1), *c = malloc(al + 1);
    CHECK(b && c);
    CHECK(sbx_base64_encode(b, s, n) == al && memcmp(a, b, al + 1) == 0);
    CHECK(base64_encode_to(c, s, n) == al && memcmp(a, c, al + 1) == 0);
    size_t m = 0;
    uint8_t *d = base64_decode(a, al, &m);
    CHECK(d && m == n && memcmp(d, s, n) == 0);
    free(d);
    uint8_t *e = malloc(al / 4 * 3 + 3);
    CHECK(e);
    CHECK(sbx_base64_decode(e, &m, a, al) == SBX_OK && m == n && memcmp(e, s, n) == 0);
    free(e);
    free(a);
    free(b);
    free(c);
}

/* libsbx's decoder as it was written first, bit by bit: the table-driven
 * one must accept exactly the same texts and give the same bytes. */
static int ref_b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

static int ref_b64_decode(uint8_t *o, size_t *out_len, const char *in, size_t n)
{
    size_t len = 0, pad = 0;
    unsigned acc = 0;
    int bits = 0;
    *out_len = 0;
    while (pad < 2 && pad < n && in[n - 1 - pad] == '=')
        pad++;
    if (pad && n % 4)
        return -1;
    n -= pad;
    if (n % 4 == 1)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int v = ref_b64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6 | (unsigned)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[len++] = (uint8_t)(acc >> bits & 0xff);
        }
    }
    if (bits && (acc & ((1u << bits) - 1)))
        return -1;
    *out_len = len;
    return 0;
}

/* The input read as base64 text: libsbx's strict decoder, its reference
 * and the daemon's lax one. */
static void check_decoders(const char *t, size_t n)
{
    uint8_t *strict = malloc(n / 4 * 3 + 3), *ref = malloc(n / 4 * 3 + 3);
    CHECK(strict && ref);
    size_t sl = 0, dl = 0, rl = 0;
    int ok = sbx_base64_decode(strict, &sl, t, n) == SBX_OK;
    int rok = ref_b64_decode(ref, &rl, t, n) == 0;
    CHECK(ok == rok && (!ok || (sl == rl && memcmp(strict, ref, sl) == 0)));
    free(ref);
    uint8_t *lax = base64_decode(t, n, &dl);
    if (ok)
        CHECK(lax && dl == sl && memcmp(lax, strict, sl) == 0);
    free(lax);
    free(strict);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int valid = utf8_valid(data, size);
    CHECK(valid == ref_valid(data, size));
    CHECK(json_plain_run(data, size) == ref_plain(data, size));
    size_t t = utf8_incomplete_tail(data, size);
    CHECK(t <= 3 && t <= size);
    if (valid && size <= 512) {
        for (size_t k = 0; k <= size; k++) {
            size_t h = utf8_incomplete_tail(data, k);
            CHECK(h <= 3 && ref_valid(data, k - h));
        }
    }
    if (valid)
        check_escape(data, size);
    check_base64(data, size);
    check_decoders((const char *)data, size);
    return 0;
}
