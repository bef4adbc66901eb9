/*
 * jfast.h - a fast path in front of json_loadb for the lines clients send
 * most: small requests of plain ASCII strings, integers, literals, objects
 * and arrays. It builds the same values json_loadb(JSON_DECODE_ANY |
 * JSON_ALLOW_NUL) would, or gives up (NULL) on anything else, and the caller
 * then asks jansson, which also writes the error for bad input. It never
 * reports an error itself, so it cannot change what a malformed line gets.
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

#endif
