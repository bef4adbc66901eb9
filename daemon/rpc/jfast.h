/*
 * jfast.h - fast paths beside jansson. jfast_load: in front of json_loadb for
 * the lines clients send most: small requests of plain ASCII strings,
 * integers, literals, objects and arrays. It builds the same values
 * json_loadb(JSON_DECODE_ANY | JSON_ALLOW_NUL) would, or gives up (NULL) on anything
 * else, and the caller then asks jansson, which also writes the error for bad input. It
 * never reports an error itself, so it cannot change what a malformed line gets.
 *
 * Why: for a daemon.ping, jansson's parse of the 50-byte request was half of
 * the daemon's instructions (callgrind), its lexer reading one byte at a
 * time through a callback.
 */
#ifndef SBXD_JFAST_H
#define SBXD_JFAST_H

#include <jansson.h>
#include <stddef.h>

/* Lines longer than this go to jansson directly. */
#define JFAST_MAX_LEN 4096

/* The value of text[0, len), a new reference, or NULL: ask json_loadb. */
json_t *jfast_load(const char *text, size_t len);

/*
 * The text json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) gives, byte for byte,
 * malloc'd and NUL-terminated, its length in *len_out; NULL (and 0) only
 * when jansson's would be NULL too. v borrowed. Values of plain ASCII text,
 * integers, reals and literals are written here; a string with bytes from
 * 0x80 up (UTF-8 for jansson to check) or nesting past SBX_MAX_JSON_DEPTH go
 * to json_dumps.
 *
 * Why: json_dumps sets up a hash table (its loop check) for every call and
 * prints a key for each container it enters; for daemon.ping's two-member
 * result that was a third of the daemon's instructions (callgrind).
 */
char *jfast_dumps(json_t *v, size_t *len_out);

/* v in decimal into buf (room for 21 bytes, no NUL written); returns the
 * length. */
size_t jfast_int_text(char *buf, json_int_t v);

#endif
