/*
 * reader.c - newline framing of the daemon's byte stream into JSON values.
 *
 * Bytes [pos, len) of buf are unconsumed; [pos, scan) is known to hold no
 * '\n', so a frame that arrives in many reads is scanned only once.
 *
 * Output fast path: a process.output line in the exact shape the daemon
 * writes (PROTOCOL.md, Output encoding) is read by hand, its data string
 * unescaped in place, instead of going through jansson (which parsed
 * output at ~70 MB/s, and \u0000-heavy output at ~8 MB/s). Anything that
 * deviates in the slightest falls back to jansson, which then decides.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
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
    char *scratch; /* unescaped output data, when it held escapes */
    size_t scap;
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
    free(r->scratch);
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

char *sbx__reader_space(sbx_reader *r, size_t n, size_t *avail)
{
    if (r->err)
        return NULL;
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
            if (cap > SIZE_MAX / 2) {
                reader_fail(r, SBX_ERR_OOM, "reader buffer overflow");
                return NULL;
            }
            cap *= 2;
        }
        /* A peer-sized buffer: fail gracefully rather than abort. */
        char *nb = realloc(r->buf, cap);
        if (!nb) {
            reader_fail(r, SBX_ERR_OOM, "out of memory");
            return NULL;
        }
        r->buf = nb;
        r->cap = cap;
    }
    *avail = r->cap - r->len;
    return r->buf + r->len;
}

void sbx__reader_commit(sbx_reader *r, size_t n)
{
    r->len += n;
}

int sbx_reader_feed(sbx_reader *r, const char *data, size_t n)
{
    if (r->err)
        return SBX_ERR;
    if (n == 0)
        return SBX_OK;
    size_t avail;
    char *dst = sbx__reader_space(r, n, &avail);
    if (!dst)
        return SBX_ERR;
    memcpy(dst, data, n);
    sbx__reader_commit(r, n);
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

/* ---- the process.output fast path ------------------------------------------------ */

#define HIGHS 0x8080808080808080ull
#define ONES 0x0101010101010101ull

/* Bytes from s on that are plain inside a JSON string: not '"', '\\', a
 * control character or a byte >= 0x80 (which needs a UTF-8 check). */
static size_t plain_run(const unsigned char *s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
        uint64_t bad =
            ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((w - ONES * 0x20) & ~w) | w;
        if (bad & HIGHS)
            break;
    }
    while (i < n && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\')
        i++;
    return i;
}

/* Length of the valid UTF-8 sequence at s (lead byte >= 0x80), 0 if invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t k;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if (n < k || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t j = 2; j < k; j++)
        if ((s[j] & 0xc0) != 0x80)
            return 0;
    return k;
}

static int hex4(const unsigned char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return -1;
    }
    *out = v;
    return 0;
}

/*
 * Unescapes the JSON string whose contents start at s[*i] into d (at least
 * n - *i bytes: nothing gets longer), up to its closing quote, which *i is
 * left after. Returns the decoded length, or (size_t)-1 for anything
 * jansson should judge (invalid escapes, lone surrogates, raw control
 * bytes, bad UTF-8, no end). s is not modified.
 */
static size_t unescape(const unsigned char *s, size_t n, size_t *i, unsigned char *d)
{
    size_t o = 0, k = *i;
    for (;;) {
        size_t run = plain_run(s + k, n - k);
        memcpy(d + o, s + k, run);
        o += run;
        k += run;
        if (k >= n)
            return (size_t)-1;
        unsigned char c = s[k];
        if (c == '"') {
            *i = k + 1;
            return o;
        }
        if (c >= 0x80) {
            size_t q = utf8_seq(s + k, n - k);
            if (!q)
                return (size_t)-1;
            memcpy(d + o, s + k, q);
            o += q;
            k += q;
            continue;
        }
        if (c != '\\' || k + 1 >= n)
            return (size_t)-1; /* a raw control byte */
        c = s[k + 1];
        k += 2;
        switch (c) {
        case '"':
            d[o++] = '"';
            continue;
        case '\\':
            d[o++] = '\\';
            continue;
        case '/':
            d[o++] = '/';
            continue;
        case 'b':
            d[o++] = '\b';
            continue;
        case 'f':
            d[o++] = '\f';
            continue;
        case 'n':
            d[o++] = '\n';
            continue;
        case 'r':
            d[o++] = '\r';
            continue;
        case 't':
            d[o++] = '\t';
            continue;
        case 'u':
            break;
        default:
            return (size_t)-1;
        }
        unsigned cp, lo;
        if (k + 4 > n || hex4(s + k, &cp) < 0)
            return (size_t)-1;
        k += 4;
        if (cp >= 0xdc00 && cp <= 0xdfff)
            return (size_t)-1;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (k + 6 > n || s[k] != '\\' || s[k + 1] != 'u' ||
                hex4(s + k + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                return (size_t)-1;
            k += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        /* Never longer than its escape (6 or 12 bytes). */
        if (cp < 0x80) {
            d[o++] = (unsigned char)cp;
        } else if (cp < 0x800) {
            d[o++] = (unsigned char)(0xc0 | cp >> 6);
            d[o++] = (unsigned char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            d[o++] = (unsigned char)(0xe0 | cp >> 12);
            d[o++] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
            d[o++] = (unsigned char)(0x80 | (cp & 0x3f));
        } else {
            d[o++] = (unsigned char)(0xf0 | cp >> 18);
            d[o++] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
            d[o++] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
            d[o++] = (unsigned char)(0x80 | (cp & 0x3f));
        }
    }
}

static int lit(const unsigned char *s, size_t n, size_t *i, const char *want)
{
    size_t l = strlen(want);
    if (n - *i < l || memcmp(s + *i, want, l) != 0)
        return 0;
    *i += l;
    return 1;
}

/* A JSON non-negative integer without leading zeros, at most max. */
static int uint_at(const unsigned char *s, size_t n, size_t *i, uint64_t max,
                   uint64_t *out)
{
    size_t k = *i;
    uint64_t v = 0;
    if (k >= n || s[k] < '0' || s[k] > '9' ||
        (s[k] == '0' && k + 1 < n && s[k + 1] >= '0' && s[k + 1] <= '9'))
        return 0;
    for (; k < n && s[k] >= '0' && s[k] <= '9'; k++) {
        if (v > (max - (uint64_t)(s[k] - '0')) / 10)
            return 0;
        v = v * 10 + (uint64_t)(s[k] - '0');
    }
    *i = k;
    *out = v;
    return 1;
}

/*
 * The line s[0, n) in the daemon's exact process.output shape: fills v and
 * returns 1 (its pointers go into s, or into the reader's scratch buffer
 * when the data held escapes; s may be modified then); 0 for anything
 * else, with s untouched for jansson.
 */
static int output_fast(sbx_reader *r, unsigned char *s, size_t n,
                       struct sbx_output_view *v)
{
    size_t i = 0, k;
    uint64_t pid, off;
    if (!lit(
            s, n, &i,
            "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{\"sandbox\":\""))
        return 0;
    k = i;
    while (k < n && (isalnum(s[k]) || s[k] == '_' || s[k] == '.' || s[k] == '-'))
        k++;
    if (k == i || k >= n || s[k] != '"')
        return 0;
    v->sandbox = (const char *)s + i;
    v->sandbox_len = k - i;
    i = k;
    if (!lit(s, n, &i, "\",\"pid\":") || !uint_at(s, n, &i, (uint64_t)INT64_MAX, &pid) ||
        !lit(s, n, &i, ",\"stream\":\"std"))
        return 0;
    if (lit(s, n, &i, "out\""))
        v->stream = SBX_STDOUT;
    else if (lit(s, n, &i, "err\""))
        v->stream = SBX_STDERR;
    else
        return 0;
    if (!lit(s, n, &i, ",\"offset\":") || !uint_at(s, n, &i, (uint64_t)INT64_MAX, &off))
        return 0;
    if (lit(s, n, &i, ",\"data\":\""))
        v->b64 = 0;
    else if (lit(s, n, &i, ",\"data_b64\":\""))
        v->b64 = 1;
    else
        return 0;
    /* Everything after the string is fixed: check it before touching bytes. */
    size_t end = n;
    while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t' || s[end - 1] == '\r'))
        end--;
    if (end - i < 3 || memcmp(s + end - 3, "\"}}", 3) != 0)
        return 0;
    /* Usually nothing needs unescaping: the data is used where it is. */
    size_t run = plain_run(s + i, end - 3 - i);
    if (i + run == end - 3) {
        v->data = (const char *)s + i;
        v->len = run;
    } else {
        if (end - i > r->scap) {
            char *ns = realloc(r->scratch, end - i);
            if (!ns)
                return 0;
            r->scratch = ns;
            r->scap = end - i;
        }
        size_t at = i;
        size_t dl = unescape(s, end - 2, &at, (unsigned char *)r->scratch);
        if (dl == (size_t)-1 || at != end - 2)
            return 0; /* (a '"' inside, or a bad string: jansson decides) */
        v->data = r->scratch;
        v->len = dl;
    }
    /* sandbox ids hold no escapes: ending them with NUL loses nothing. */
    s[v->sandbox_len + (size_t)(v->sandbox - (const char *)s)] = '\0';
    v->pid = (json_int_t)pid;
    v->offset = off;
    return 1;
}

json_t *sbx__output_view_json(const struct sbx_output_view *v)
{
    json_t *params =
        json_pack("{s:s%, s:I, s:s, s:I}", "sandbox", v->sandbox, v->sandbox_len, "pid",
                  v->pid, "stream", v->stream == SBX_STDOUT ? "stdout" : "stderr",
                  "offset", (json_int_t)v->offset);
    /* Checked already: base64 text is ASCII, data was UTF-8-validated. */
    json_t *data = json_stringn_nocheck(v->data, v->len);
    if (!params || !data ||
        json_object_set_new(params, v->b64 ? "data_b64" : "data", data) < 0) {
        json_decref(params);
        return NULL;
    }
    json_t *m = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", "process.output",
                          "params", params);
    return m;
}

int sbx__reader_next(sbx_reader *r, json_t **frame_out, struct sbx_output_view *view)
{
    *frame_out = NULL;
    if (view)
        view->data = NULL;
    if (r->err)
        return SBX_ERR;
    if (!r->buf)
        return SBX_OK; /* nothing fed yet (and no NULL + 0 below) */

    for (;;) {
        char *start = r->buf + r->pos;
        char *nl =
            r->scan < r->len ? memchr(r->buf + r->scan, '\n', r->len - r->scan) : NULL;
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
            return reader_fail(r, SBX_ERR_PROTOCOL, "frame larger than %zu bytes",
                               r->max_frame);
        if (is_blank(start, n))
            continue;
        struct sbx_output_view v;
        if (n > 64 && start[0] == '{' && output_fast(r, (unsigned char *)start, n, &v)) {
            if (view) {
                *view = v;
                return SBX_OK;
            }
            json_t *m = sbx__output_view_json(&v);
            if (!m)
                return reader_fail(r, SBX_ERR_OOM, "out of memory");
            *frame_out = m;
            return SBX_OK;
        }
        if (too_deep(start, n, r->max_depth))
            return reader_fail(r, SBX_ERR_PROTOCOL, "frame nested deeper than %d levels",
                               r->max_depth);

        json_error_t je;
        json_t *v2 = json_loadb(start, n, JSON_ALLOW_NUL, &je);
        if (!v2)
            return reader_fail(r, SBX_ERR_PROTOCOL, "invalid JSON frame: %s", je.text);
        *frame_out = v2;
        return SBX_OK;
    }
}

int sbx_reader_get_frame(sbx_reader *r, json_t **frame_out)
{
    return sbx__reader_next(r, frame_out, NULL);
}
