/*
 * utf8.h - UTF-8 validation, the held-back tail of a split sequence, and
 * base64: what makes process output lossless on a JSON wire.
 */
#ifndef SBXD_UTF8_H
#define SBXD_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* 1 if s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
int utf8_valid(const uint8_t *s, size_t len);

/*
 * Length of the incomplete multi-byte sequence at the end of s that could
 * still become valid with more bytes (0..3). Bytes before it are not checked.
 */
size_t utf8_incomplete_tail(const uint8_t *s, size_t len);

/* How many bytes from s need no escaping in a JSON string (not < 0x20, '"' or '\\'). */
size_t json_plain_run(const uint8_t *s, size_t len);

/*
 * Writes s as the inside of a JSON string (no quotes): '"' '\\' \n \t \r
 * as two-byte escapes, other bytes below 0x20 as \u00XX, the rest as is.
 * out needs 6 * len bytes. Returns the length written.
 */
size_t json_escape_to(char *out, const uint8_t *s, size_t len);
/* Length of s escaped as json_escape_to writes it; stops counting once it
 * passes limit and returns limit + 1. */
size_t json_escaped_len(const uint8_t *s, size_t len, size_t limit);

/* Length of the padded base64 text for len bytes. */
static inline size_t base64_len(size_t len)
{
    return (len + 2) / 3 * 4;
}
/* base64 (RFC 4648, padded). Returns a malloc'd NUL-terminated string or NULL. */
char *base64_encode(const uint8_t *s, size_t len);
/* Writes the base64 of s and a NUL to out (base64_len(len) + 1 bytes);
 * returns base64_len(len). */
size_t base64_encode_to(char *out, const uint8_t *s, size_t len);
/* Decodes base64 (padding optional, no whitespace). Returns malloc'd bytes
 * (len in *out_len) or NULL on invalid input/OOM. */
uint8_t *base64_decode(const char *s, size_t len, size_t *out_len);

#endif
