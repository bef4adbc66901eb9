/*
 * fs_stream.h - the raw byte path of fs.read/fs.write (PROTOCOL.md "Files",
 * "Raw transfers"): a call with transport "raw" gets a one-time token; a
 * second connection presents it as its first line (fs.stream) and then
 * carries the file's bytes without JSON or base64.
 */
#ifndef SBXD_FS_STREAM_H
#define SBXD_FS_STREAM_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/fs.h"

struct call;
struct sandbox;

/* Answers c with a token for op (FS_OP_READ or FS_OP_WRITE) on sb with args
 * (stolen; for a write, "size" the byte count the stream will carry). */
void fs_stream_offer(struct call *c, struct sandbox *sb, enum fs_op op, json_t *args);

/* A session's first line: when it is fs.stream, the stream takes fd over
 * (with rest, the bytes read after the line) and returns 1; the session
 * must then forget fd. 0: not fs.stream, nothing taken. */
int fs_stream_take(int fd, uid_t uid, const char *line, size_t len, const char *rest,
                   size_t restlen);

/* Frees every token and stream (daemon exit). */
void fs_stream_free_all(void);

#endif
