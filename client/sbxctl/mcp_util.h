/*
 * mcp_util.h - the bottom of `sbxctl mcp`: bounded byte buffers, UTF-8-safe
 * JSON strings, and the diagnostic line on stderr. Calls nothing above it.
 */
#ifndef SBXCTL_MCP_UTIL_H
#define SBXCTL_MCP_UTIL_H

#include <stddef.h>

#include <jansson.h>

/* A byte buffer that never grows past the max its callers give. */
struct mbuf {
    char *p;
    size_t len, cap;
};

/* Appends up to max bytes in all; returns how many were taken. */
size_t mbuf_append(struct mbuf *b, const char *data, size_t len, size_t max);
void mbuf_free(struct mbuf *b);
/* A JSON string of the bytes with invalid UTF-8 replaced by U+FFFD (new ref). */
json_t *mbuf_string(const char *p, size_t len);

/* "sbxctl mcp: ..." on stderr (stdout carries MCP messages only). */
void mcp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
