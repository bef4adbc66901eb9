/*
 * reader.c - newline framing of the daemon's byte stream into JSON values.
 *
 * Bytes [pos, len) of buf are unconsumed; [pos, scan) is known to hold no
 * '\n', so a frame that arrives in many reads is scanned only once.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_private.h"

struct sbx_reader {
    char *buf;
    size_t len;
    size_t pos;
    size_t scan;
    size_t cap;
    size_t max_frame;
    int max_depth;
    int err;
    char errstr[SBX_ERRSTR_LEN];
};

sbx_reader *sbx_reader_new(void)
{
    sbx_reader *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->max_frame = SBX_DEFAULT_MAX_MESSAGE;
    r->max_depth = SBX_MAX_JSON_DEPTH;
    return r;
}

void sbx_reader_free(sbx_reader *r)
{
    if (!r)
        return;
    free(r->buf);
    free(r);
}

void sbx_reader_set_max_frame(sbx_reader *r, size_t max)
{
    r->max_frame = max ? max : SBX_DEFAULT_MAX_MESSAGE;
}

void sbx_reader_set_max_depth(sbx_reader *r, int depth)
{
    r->max_depth = depth > 0 ? depth : SBX_MAX_JSON_DEPTH;
}

size_t sbx_reader_buffered(const sbx_reader *r)
{
    return r->len - r->pos;
}

int sbx_reader_err(const sbx_reader *r)
{
    return r->err;
}

const char *sbx_reader_errstr(const sbx_reader *r)
{
    return r->errstr;
}

SBX_PRINTF(3, 4)
static int reader_fail(sbx_reader *r, int code, const char *fmt, ...)
{
    va_list ap;

    r->err = code;
    va_start(ap, fmt);
    vsnprintf(r->errstr, sizeof(r->errstr), fmt, ap);
    va_end(ap);
    /* The stream position is lost: drop everything. */
    free(r->buf);
    r->buf = NULL;
    r->len = r->pos = r->scan = r->cap = 0;
    return SBX_ERR;
}

int sbx_reader_feed(sbx_reader *r, const char *data, size_t n)
{
    if (r->err)
        return SBX_ERR;
    if (n == 0)
        return SBX_OK;

    /* Drop consumed bytes first; it is cheap when a frame just ended. */
    if (r->pos > 0 && (r->pos == r->len || r->len + n > r->cap)) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->scan -= r->pos;
        r->pos = 0;
    }
    if (r->len + n > r->cap) {
        size_t cap = r->cap ? r->cap : 16 * 1024;
        while (cap < r->len + n) {
            if (cap > SIZE_MAX / 2)
                return reader_fail(r, SBX_ERR_OOM, "reader buffer overflow");
            cap *= 2;
        }
        /* A peer-sized buffer: fail gracefully rather than abort. */
        char *nb = realloc(r->buf, cap);
        if (!nb)
            return reader_fail(r, SBX_ERR_OOM, "out of memory");
        r->buf = nb;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, data, n);
    r->len += n;
    return SBX_OK;
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* Returns 1 if the text nests arrays/objects deeper than max. Brackets inside
 * strings do not count; jansson checks the rest of the syntax. */
static int too_deep(const char *s, size_t n, int max)
{
    int depth = 0, in_str = 0;

    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (in_str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if (ch == '[' || ch == '{') {
            if (++depth > max)
                return 1;
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return 0;
}

int sbx_reader_get_frame(sbx_reader *r, json_t **frame_out)
{
    *frame_out = NULL;
    if (r->err)
        return SBX_ERR;
    if (!r->buf)
        return SBX_OK; /* nothing fed yet (and no NULL + 0 below) */

    for (;;) {
        char *start = r->buf + r->pos;
        char *nl = r->scan < r->len ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
        if (!nl) {
            r->scan = r->len;
            if (r->len - r->pos > r->max_frame)
                return reader_fail(r, SBX_ERR_PROTOCOL, "frame larger than %zu bytes",
                                   r->max_frame);
            return SBX_OK;
        }
        size_t n = (size_t)(nl - start);
        r->pos += n + 1;
        r->scan = r->pos;
        if (n > r->max_frame)
            return reader_fail(r, SBX_ERR_PROTOCOL, "frame larger than %zu bytes", r->max_frame);
        if (is_blank(start, n))
            continue;
        if (too_deep(start, n, r->max_depth))
            return reader_fail(r, SBX_ERR_PROTOCOL, "frame nested deeper than %d levels",
                               r->max_depth);

        json_error_t je;
        json_t *v = json_loadb(start, n, JSON_ALLOW_NUL, &je);
        if (!v)
            return reader_fail(r, SBX_ERR_PROTOCOL, "invalid JSON frame: %s", je.text);
        *frame_out = v;
        return SBX_OK;
    }
}
