/*
 * json.c - the smallest strict JSON parser that the SPAWN and REPLAY payloads
 * need, plus a string writer for the frames sbx-init sends.
 *
 * Strict on purpose (RFC 8259): no comments, no trailing commas, no leading
 * zeros, no control characters in strings, UTF-8 validated, \uXXXX surrogates
 * must pair, duplicate object keys are rejected, nothing may follow the value.
 * Depth and node count are capped so a hostile payload costs bounded memory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

struct parser {
    const char *s;
    size_t n, i;
    int depth;
    size_t nodes;
    char *err;
    size_t errlen;
    bool failed;
};

static void fail(struct parser *p, const char *what)
{
    if (p->failed)
        return;
    p->failed = true;
    snprintf(p->err, p->errlen, "%s at offset %zu", what, p->i);
}

static void skip_ws(struct parser *p)
{
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->i++;
    }
}

static struct jval *new_node(struct parser *p, enum jtype t)
{
    if (++p->nodes > JSON_MAX_NODES) {
        fail(p, "too many values");
        return NULL;
    }
    struct jval *v = xcalloc(1, sizeof(*v));
    v->type = t;
    return v;
}

void json_free(struct jval *v)
{
    while (v) {
        struct jval *next = v->next;
        json_free(v->child);
        free(v->key);
        free(v->str);
        free(v);
        v = next;
    }
}

/* ---- strings ------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s[0, n), or 0 if it is invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else
        return 0;
    if (n < len)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xbf)
            return 0;
    return len;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *d, unsigned cp)
{
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xc0 | (cp >> 6));
        d[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xe0 | (cp >> 12));
        d[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        d[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char)(0xf0 | (cp >> 18));
    d[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    d[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/*
 * Parses the string starting at the opening quote. The decoded form is never
 * longer than the source (an escape of 6 or 12 bytes yields at most 4), so one
 * allocation of the source length is enough.
 */
static char *parse_string(struct parser *p, size_t *len_out)
{
    p->i++; /* opening quote */
    size_t start = p->i, end = start;
    while (end < p->n && p->s[end] != '"') {
        if (p->s[end] == '\\')
            end++;
        end++;
    }
    if (end >= p->n) {
        fail(p, "unterminated string");
        return NULL;
    }
    char *out = xmalloc(end - start + 1);
    size_t o = 0;
    while (p->i < end) {
        unsigned char c = (unsigned char)p->s[p->i];
        if (c < 0x20) {
            fail(p, "control character in string");
            goto bad;
        }
        if (c != '\\') {
            size_t k = utf8_seq((const unsigned char *)p->s + p->i, end - p->i);
            if (!k) {
                fail(p, "invalid UTF-8 in string");
                goto bad;
            }
            memcpy(out + o, p->s + p->i, k);
            o += k;
            p->i += k;
            continue;
        }
        char e = p->s[p->i + 1];
        p->i += 2;
        switch (e) {
        case '"':
            out[o++] = '"';
            break;
        case '\\':
            out[o++] = '\\';
            break;
        case '/':
            out[o++] = '/';
            break;
        case 'b':
            out[o++] = '\b';
            break;
        case 'f':
            out[o++] = '\f';
            break;
        case 'n':
            out[o++] = '\n';
            break;
        case 'r':
            out[o++] = '\r';
            break;
        case 't':
            out[o++] = '\t';
            break;
        case 'u': {
            unsigned cp, lo;
            if (end - p->i < 4 || hex4(p->s + p->i, &cp) < 0) {
                fail(p, "bad \\u escape");
                goto bad;
            }
            p->i += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff) {
                fail(p, "lone low surrogate");
                goto bad;
            }
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (end - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
                    hex4(p->s + p->i + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff) {
                    fail(p, "unpaired high surrogate");
                    goto bad;
                }
                p->i += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            o += put_utf8(out + o, cp);
            break;
        }
        default:
            p->i -= 2;
            fail(p, "bad escape");
            goto bad;
        }
    }
    p->i = end + 1;
    out[o] = '\0';
    *len_out = o;
    return out;
bad:
    free(out);
    return NULL;
}

/* ---- numbers ------------------------------------------------------------- */

static int parse_number(struct parser *p, struct jval *v)
{
    size_t start = p->i;
    bool neg = false, integral = true, overflow = false;
    uint64_t mag = 0;
    if (p->s[p->i] == '-') {
        neg = true;
        p->i++;
    }
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') {
        fail(p, "bad number");
        return -1;
    }
    if (p->s[p->i] == '0') {
        p->i++;
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            fail(p, "leading zero");
            return -1;
        }
    } else {
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            unsigned d = (unsigned)(p->s[p->i] - '0');
            if (mag > (UINT64_MAX - d) / 10)
                overflow = true;
            else
                mag = mag * 10 + d;
            p->i++;
        }
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        integral = false;
        p->i++;
        size_t d0 = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == d0) {
            fail(p, "bad fraction");
            return -1;
        }
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        integral = false;
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        size_t d0 = p->i;
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
            p->i++;
        if (p->i == d0) {
            fail(p, "bad exponent");
            return -1;
        }
    }
    size_t len = p->i - start;
    char tmp[64];
    if (len >= sizeof(tmp)) {
        fail(p, "number too long");
        return -1;
    }
    memcpy(tmp, p->s + start, len);
    tmp[len] = '\0';
    v->num = strtod(tmp, NULL);
    if (integral && !overflow) {
        if (!neg && mag <= (uint64_t)INT64_MAX) {
            v->is_int = true;
            v->ival = (int64_t)mag;
        } else if (neg && mag <= (uint64_t)INT64_MAX + 1) {
            v->is_int = true;
            v->ival = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        }
    }
    return 0;
}

/* ---- values -------------------------------------------------------------- */

static struct jval *parse_value(struct parser *p);

static int cmp_member(const void *a, const void *b)
{
    const struct jval *x = *(const struct jval *const *)a;
    const struct jval *y = *(const struct jval *const *)b;
    size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->keylen < y->keylen ? -1 : x->keylen > y->keylen;
}

/* Sorting a copy of the member list finds duplicates in O(n log n). */
static int check_duplicates(struct parser *p, struct jval *obj)
{
    if (obj->count < 2)
        return 0;
    struct jval **v = xmalloc(obj->count * sizeof(*v));
    size_t k = 0;
    for (struct jval *m = obj->child; m; m = m->next)
        v[k++] = m;
    qsort(v, k, sizeof(*v), cmp_member);
    int ret = 0;
    for (size_t j = 1; j < k; j++)
        if (cmp_member(&v[j - 1], &v[j]) == 0) {
            fail(p, "duplicate key");
            ret = -1;
            break;
        }
    free(v);
    return ret;
}

static struct jval *parse_container(struct parser *p, bool is_obj)
{
    if (++p->depth > JSON_MAX_DEPTH) {
        fail(p, "nested too deeply");
        return NULL;
    }
    struct jval *v = new_node(p, is_obj ? J_OBJ : J_ARR);
    if (!v)
        return NULL;
    struct jval **tail = &v->child;
    char close = is_obj ? '}' : ']';
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return v;
    }
    for (;;) {
        char *key = NULL;
        size_t keylen = 0;
        if (is_obj) {
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != '"') {
                fail(p, "expected a key");
                goto bad;
            }
            key = parse_string(p, &keylen);
            if (!key)
                goto bad;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                free(key);
                fail(p, "expected ':'");
                goto bad;
            }
            p->i++;
        }
        struct jval *e = parse_value(p);
        if (!e) {
            free(key);
            goto bad;
        }
        e->key = key;
        e->keylen = keylen;
        *tail = e;
        tail = &e->next;
        v->count++;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            break;
        }
        fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        goto bad;
    }
    if (is_obj && check_duplicates(p, v) < 0)
        goto bad;
    p->depth--;
    return v;
bad:
    json_free(v);
    return NULL;
}

static int match(struct parser *p, const char *lit)
{
    size_t n = strlen(lit);
    if (p->n - p->i < n || memcmp(p->s + p->i, lit, n) != 0)
        return -1;
    p->i += n;
    return 0;
}

static struct jval *parse_value(struct parser *p)
{
    skip_ws(p);
    if (p->i >= p->n) {
        fail(p, "unexpected end of input");
        return NULL;
    }
    char c = p->s[p->i];
    struct jval *v;
    switch (c) {
    case '{':
        return parse_container(p, true);
    case '[':
        return parse_container(p, false);
    case '"': {
        size_t len;
        char *s = parse_string(p, &len);
        if (!s)
            return NULL;
        v = new_node(p, J_STR);
        if (!v) {
            free(s);
            return NULL;
        }
        v->str = s;
        v->len = len;
        return v;
    }
    case 't':
    case 'f':
    case 'n': {
        const char *lit = c == 't' ? "true" : c == 'f' ? "false" : "null";
        if (match(p, lit) < 0) {
            fail(p, "bad literal");
            return NULL;
        }
        return new_node(p, c == 't' ? J_TRUE : c == 'f' ? J_FALSE : J_NULL);
    }
    default:
        if (c == '-' || (c >= '0' && c <= '9')) {
            v = new_node(p, J_NUM);
            if (!v)
                return NULL;
            if (parse_number(p, v) < 0) {
                json_free(v);
                return NULL;
            }
            return v;
        }
        fail(p, "unexpected character");
        return NULL;
    }
}

struct jval *json_parse(const char *s, size_t n, char *err, size_t errlen)
{
    struct parser p = {.s = s, .n = n, .err = err, .errlen = errlen};
    if (errlen)
        err[0] = '\0';
    struct jval *v = parse_value(&p);
    if (!v)
        return NULL;
    skip_ws(&p);
    if (p.i != p.n) {
        fail(&p, "trailing characters");
        json_free(v);
        return NULL;
    }
    return v;
}

const struct jval *json_get(const struct jval *obj, const char *key)
{
    if (!obj || obj->type != J_OBJ)
        return NULL;
    size_t n = strlen(key);
    for (const struct jval *m = obj->child; m; m = m->next)
        if (m->keylen == n && memcmp(m->key, key, n) == 0)
            return m;
    return NULL;
}

/* ---- writer -------------------------------------------------------------- */

int json_put_str(struct buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (buf_append(b, "\"", 1) < 0)
        return -1;
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        char esc[6] = {'\\', 0, '0', '0', 0, 0};
        size_t elen = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                esc[1] = 'u';
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                elen = 6;
            } else
                elen = 0;
        }
        if (elen) {
            if (buf_append(b, esc, elen) < 0)
                return -1;
            i++;
            continue;
        }
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (!k) {
            if (buf_append(b, "\xef\xbf\xbd", 3) < 0) /* U+FFFD */
                return -1;
            i++;
            continue;
        }
        if (buf_append(b, s + i, k) < 0)
            return -1;
        i += k;
    }
    return buf_append(b, "\"", 1);
}
