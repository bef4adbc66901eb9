/*
 * output.c - base64 and the decoding of process output (data / data_b64).
 */
#include <stdlib.h>
#include <string.h>

#include "sbx_private.h"

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* ---- base64 -------------------------------------------------------------- */

size_t sbx_base64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

size_t sbx_base64_encode(char *out, const void *in, size_t n)
{
    const unsigned char *p = in;
    size_t o = 0, i = 0;

    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = b64_alphabet[v >> 6 & 63];
        out[o++] = b64_alphabet[v & 63];
    }
    if (i < n) {
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < n)
            v |= (unsigned)p[i + 1] << 8;
        out[o++] = b64_alphabet[v >> 18 & 63];
        out[o++] = b64_alphabet[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64_alphabet[v >> 6 & 63] : '=';
        out[o++] = '=';
    }
    out[o] = '\0';
    return o;
}

/* 0..63 for the alphabet, 0xff for anything else. */
static const unsigned char b64_table[256] = {
#define X 0xff
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  62, X,  X,  X,  63, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, X,  X,
    X,  X,  X,  X,  X,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14,
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X,  X,  X,  X,  X,  X,  26, 27, 28,
    29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48,
    49, 50, 51, X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
    X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,  X,
#undef X
};

int sbx_base64_decode(void *out, size_t *out_len, const char *in, size_t n)
{
    const unsigned char *s = (const unsigned char *)in;
    unsigned char *o = out;
    size_t len = 0;

    *out_len = 0;
    /* Padding only at the end, at most two, and only where it completes a quad. */
    size_t pad = 0;
    while (pad < 2 && pad < n && in[n - 1 - pad] == '=')
        pad++;
    if (pad && n % 4)
        return SBX_ERR;
    n -= pad;
    if (n % 4 == 1)
        return SBX_ERR;

    /* Whole quads, one table lookup per character; a bad one shows in the OR. */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        unsigned a = b64_table[s[i]], b = b64_table[s[i + 1]], c = b64_table[s[i + 2]],
                 d = b64_table[s[i + 3]];
        if ((a | b | c | d) & 0x80)
            return SBX_ERR;
        unsigned v = a << 18 | b << 12 | c << 6 | d;
        o[len] = (unsigned char)(v >> 16);
        o[len + 1] = (unsigned char)(v >> 8);
        o[len + 2] = (unsigned char)v;
        len += 3;
    }
    /* 2 or 3 characters left: 1 or 2 bytes, the unused bits must be zero
     * (canonical encoding). */
    if (i < n) {
        unsigned a = b64_table[s[i]], b = b64_table[s[i + 1]];
        unsigned c = n - i == 3 ? b64_table[s[i + 2]] : 0;
        if ((a | b | c) & 0x80)
            return SBX_ERR;
        unsigned v = a << 18 | b << 12 | c << 6;
        o[len++] = (unsigned char)(v >> 16);
        if (n - i == 3) {
            o[len++] = (unsigned char)(v >> 8);
            if (v & 0xff)
                return SBX_ERR;
        } else if (v & 0xffff) {
            return SBX_ERR;
        }
    }
    *out_len = len;
    return SBX_OK;
}

/* ---- output -------------------------------------------------------------- */

int sbx_json_get_bytes(char **data_out, size_t *len_out, const json_t *obj,
                       const char *key)
{
    *data_out = NULL;
    *len_out = 0;
    if (!json_is_object(obj))
        return SBX_ERR;

    const json_t *v = json_object_get(obj, key);
    if (json_is_string(v)) {
        size_t n = json_string_length(v);
        char *d = malloc(n + 1);
        if (!d)
            return SBX_ERR;
        memcpy(d, json_string_value(v), n);
        d[n] = '\0';
        *data_out = d;
        *len_out = n;
        return SBX_OK;
    }

    size_t klen = strlen(key);
    char *k64 = malloc(klen + 5);
    if (!k64)
        return SBX_ERR;
    memcpy(k64, key, klen);
    memcpy(k64 + klen, "_b64", 5);
    v = json_object_get(obj, k64);
    free(k64);
    if (!json_is_string(v))
        return SBX_ERR;

    size_t n = json_string_length(v);
    char *d = malloc(n / 4 * 3 + 4);
    size_t len;
    if (!d)
        return SBX_ERR;
    if (sbx_base64_decode(d, &len, json_string_value(v), n) != SBX_OK) {
        free(d);
        return SBX_ERR;
    }
    d[len] = '\0';
    *data_out = d;
    *len_out = len;
    return SBX_OK;
}

int sbx__output_view_bytes(const struct sbx_output_view *v, char **scratch, size_t *scap,
                           const char **data_out, size_t *len_out)
{
    if (!v->b64) {
        *data_out = v->data;
        *len_out = v->len;
        return SBX_OK;
    }
    size_t need = v->len / 4 * 3 + 3;
    if (need > *scap) {
        char *ns = realloc(*scratch, need);
        if (!ns)
            return SBX_ERR;
        *scratch = ns;
        *scap = need;
    }
    if (sbx_base64_decode(*scratch, len_out, v->data, v->len) != SBX_OK)
        return SBX_ERR;
    *data_out = *scratch;
    return SBX_OK;
}

int sbx_output_decode(int *stream_out, char **data_out, size_t *len_out,
                      const json_t *params)
{
    *data_out = NULL;
    *len_out = 0;
    const char *stream = json_string_value(json_object_get(params, "stream"));
    int s;
    if (stream && strcmp(stream, "stdout") == 0)
        s = SBX_STDOUT;
    else if (stream && strcmp(stream, "stderr") == 0)
        s = SBX_STDERR;
    else
        return SBX_ERR;
    if (stream_out)
        *stream_out = s;
    return sbx_json_get_bytes(data_out, len_out, params, "data");
}

const char *sbx_version(void)
{
#ifdef SBX_VERSION
    return SBX_VERSION; /* the Makefile's VERSION */
#endif
#define SBX_STR2(x) #x
#define SBX_STR(x) SBX_STR2(x)
    return SBX_STR(SBX_VERSION_MAJOR) "." SBX_STR(SBX_VERSION_MINOR) "." SBX_STR(
        SBX_VERSION_PATCH);
}
