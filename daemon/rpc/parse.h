/*
 * parse.h - large request lines are parsed off the loop. jansson needs
 * ~70 ms per MB on a busy 2-core VM, and a 3 MB batch held every other
 * client's ping for the whole parse (issue 11, reproduction 5). Lines of at
 * least PARSE_OFFLOOP_MIN bytes go to one parser thread; the session takes
 * no further input until the parsed value comes back (ev_async), so requests
 * keep their order.
 */
#ifndef SBXD_PARSE_H
#define SBXD_PARSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define PARSE_OFFLOOP_MIN (64 * 1024)

/* A parsed line, on the loop: v (stolen; NULL with jerr on a parse error),
 * depth_ok 0 when it nests deeper than SBX_MAX_JSON_DEPTH. owner: what
 * parse_submit was given (a session id: the session may be gone). */
typedef void (*parse_done_fn)(uint64_t owner, json_t *v, int depth_ok,
                              const json_error_t *jerr);

/* Hands a copy of line to the parser thread (started on first use); done
 * gets the value on the loop. Returns 0, or -1 when the thread cannot be
 * used (the caller parses in place). */
int parse_submit(uint64_t owner, const char *line, size_t len, parse_done_fn done);
/* 1 if v nests no deeper than SBX_MAX_JSON_DEPTH (counting from depth). */
int parse_depth_ok(json_t *v, int depth);
/* Frees v (stolen) on the parser thread when it runs, else here: a large
 * parsed request is freed where it was allocated, off the loop. Refcounts
 * are atomic in jansson, so parts the loop still holds stay alive. */
void parse_dispose(json_t *v);
/* Stops the thread and drops what it holds. */
void parse_shutdown(void);

#endif
