/*
 * jfast.c - see jfast.h. Whatever is not plainly one of the accepted forms
 * gives up: escapes and bytes outside printable ASCII in strings, reals,
 * integers of more than 18 digits, leading zeros, nesting past
 * SBX_MAX_JSON_DEPTH, anything unexpected. json_loadb decides those.
 * jfast_dumps writes what json_dumps would, and leaves to it the strings it
 * would have to check as UTF-8.
 */
#include "rpc/jfast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_proto.h"

struct scan {
    const char *p, *end;
};

static void skip_ws(struct scan *s)
{
    while (s->p < s->end &&
           (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* A string without escapes, of bytes 0x20-0x7e; s->p is past its '"'. */
static int plain_string(struct scan *s, const char **start, size_t *len)
{
    const char *q = s->p;
    while (q < s->end && *q != '"') {
        unsigned char ch = (unsigned char)*q;
        if (ch < 0x20 || ch > 0x7e || ch == '\\')
            return -1;
        q++;
    }
    if (q == s->end)
        return -1;
    *start = s->p;
    *len = (size_t)(q - s->p);
    s->p = q + 1;
    return 0;
}

static int literal(struct scan *s, const char *word, size_t n)
{
    if ((size_t)(s->end - s->p) < n)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (s->p[i] != word[i])
            return -1;
    s->p += n;
    return 0;
}

static json_t *value(struct scan *s, int depth);

static json_t *integer(struct scan *s)
{
    int neg = 0;
    if (*s->p == '-') {
        neg = 1;
        s->p++;
    }
    const char *d = s->p;
    long long v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        if (s->p - d == 18)
            return NULL; /* a 19th digit: could overflow, jansson's to check */
        v = v * 10 + (*s->p - '0');
        s->p++;
    }
    size_t n = (size_t)(s->p - d);
    if (n == 0 || (n > 1 && *d == '0'))
        return NULL;
    if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
        return NULL; /* a real: jansson's conversion decides its value */
    return json_integer(neg ? -v : v);
}

static json_t *object(struct scan *s, int depth)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return o;
    }
    for (;;) {
        const char *k;
        size_t kl;
        if (s->p >= s->end || *s->p != '"')
            break;
        s->p++;
        if (plain_string(s, &k, &kl) < 0)
            break;
        skip_ws(s);
        if (s->p >= s->end || *s->p != ':')
            break;
        s->p++;
        json_t *v = value(s, depth + 1);
        if (!v || json_object_setn_new_nocheck(o, k, kl, v) < 0)
            break;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            skip_ws(s);
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return o;
        }
        break;
    }
    json_decref(o);
    return NULL;
}

static json_t *array(struct scan *s, int depth)
{
    json_t *a = json_array();
    if (!a)
        return NULL;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return a;
    }
    for (;;) {
        json_t *v = value(s, depth + 1);
        if (!v || json_array_append_new(a, v) < 0)
            break;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return a;
        }
        break;
    }
    json_decref(a);
    return NULL;
}

static json_t *value(struct scan *s, int depth)
{
    if (depth > SBX_MAX_JSON_DEPTH)
        return NULL;
    skip_ws(s);
    if (s->p >= s->end)
        return NULL;
    switch (*s->p) {
    case '{':
        s->p++;
        return object(s, depth);
    case '[':
        s->p++;
        return array(s, depth);
    case '"': {
        const char *t;
        size_t n;
        s->p++;
        return plain_string(s, &t, &n) < 0 ? NULL : json_stringn_nocheck(t, n);
    }
    case 't':
        return literal(s, "true", 4) < 0 ? NULL : json_true();
    case 'f':
        return literal(s, "false", 5) < 0 ? NULL : json_false();
    case 'n':
        return literal(s, "null", 4) < 0 ? NULL : json_null();
    default:
        if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
            return integer(s);
        return NULL;
    }
}

json_t *jfast_load(const char *text, size_t len)
{
    if (len > JFAST_MAX_LEN)
        return NULL;
    struct scan s = {text, text + len};
    json_t *v = value(&s, 0);
    if (!v)
        return NULL;
    skip_ws(&s);
    if (s.p != s.end) {
        json_decref(v); /* more after the value: jansson writes that error */
        return NULL;
    }
    return v;
}

/* ---- writing --------------------------------------------------------------------- */

struct out {
    char *p;
    size_t len, cap;
};

static int put(struct out *o, const char *s, size_t n)
{
    if (o->cap - o->len < n + 1) {
        size_t ncap = o->cap * 2;
        while (ncap - o->len < n + 1)
            ncap *= 2;
        char *np = realloc(o->p, ncap);
        if (!np)
            return -1;
        o->p = np;
        o->cap = ncap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    return 0;
}

/* jansson's escapes (dump.c, without JSON_ENSURE_ASCII or JSON_ESCAPE_SLASH):
 * the two mandatory ones, the five short ones, \u00XX for other bytes below
 * 0x20. Bytes from 0x80 up are UTF-8 for jansson to check: give up. */
static int put_string(struct out *o, const char *s, size_t n)
{
    if (put(o, "\"", 1) < 0)
        return -1;
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != '"' && ch != '\\' && ch < 0x80)
            continue;
        if (ch >= 0x80 || put(o, s + from, i - from) < 0)
            return -1;
        /* The short escapes: each byte, then the letter after its backslash. */
        static const char shorts[] = "\"\"\\\\\bb\ff\nn\rr\tt";
        static const char hex[] = "0123456789ABCDEF";
        char esc[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};
        size_t el = 6;
        for (const char *p = shorts; *p; p += 2) {
            if ((unsigned char)*p == ch) {
                esc[1] = p[1];
                el = 2;
                break;
            }
        }
        if (put(o, esc, el) < 0)
            return -1;
        from = i + 1;
    }
    return put(o, s + from, n - from) < 0 || put(o, "\"", 1) < 0 ? -1 : 0;
}

size_t jfast_int_text(char *buf, json_int_t v)
{
    char tmp[24];
    size_t n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t len = 0;
    if (v < 0)
        buf[len++] = '-';
    while (n)
        buf[len++] = tmp[--n];
    return len;
}

static int put_integer(struct out *o, json_int_t v)
{
    char b[24];
    return put(o, b, jfast_int_text(b, v));
}

/* jansson's real: %.17g, ".0" when that reads as an integer, and the
 * exponent without its '+' or leading zeros. (The daemon never sets a
 * locale, so the decimal point is '.'.) */
static int put_real(struct out *o, double d)
{
    char b[40];
    int n = snprintf(b, sizeof(b) - 2, "%.17g", d);
    if (n < 0 || (size_t)n >= sizeof(b) - 2)
        return -1;
    if (!strchr(b, '.') && !strchr(b, 'e')) {
        memcpy(b + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(b, 'e');
    if (e) {
        char *start = e + 1, *end = e + 2;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        if (end != start) {
            memmove(start, end, (size_t)(b + n - end) + 1);
            n -= (int)(end - start);
        }
    }
    return put(o, b, (size_t)n);
}

static int put_value(struct out *o, json_t *v, int depth)
{
    if (depth > SBX_MAX_JSON_DEPTH)
        return -1; /* also how a value that contains itself ends up at jansson */
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        int first = 1;
        if (put(o, "{", 1) < 0)
            return -1;
        /* Insertion order, as json_dumps without JSON_SORT_KEYS. */
        for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
            if ((!first && put(o, ",", 1) < 0) ||
                put_string(o, json_object_iter_key(it), json_object_iter_key_len(it)) <
                    0 ||
                put(o, ":", 1) < 0 ||
                put_value(o, json_object_iter_value(it), depth + 1) < 0)
                return -1;
            first = 0;
        }
        return put(o, "}", 1);
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *m;
        if (put(o, "[", 1) < 0)
            return -1;
        json_array_foreach(v, i, m) {
            if ((i > 0 && put(o, ",", 1) < 0) || put_value(o, m, depth + 1) < 0)
                return -1;
        }
        return put(o, "]", 1);
    }
    case JSON_STRING:
        return put_string(o, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        return put_integer(o, json_integer_value(v));
    case JSON_REAL:
        return put_real(o, json_real_value(v));
    case JSON_TRUE:
        return put(o, "true", 4);
    case JSON_FALSE:
        return put(o, "false", 5);
    case JSON_NULL:
        return put(o, "null", 4);
    }
    return -1;
}

char *jfast_dumps(json_t *v, size_t *len_out)
{
    struct out o = {malloc(256), 0, 256};
    if (v && o.p && put_value(&o, v, 0) == 0) {
        o.p[o.len] = '\0';
        *len_out = o.len;
        return o.p;
    }
    free(o.p);
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    *len_out = text ? strlen(text) : 0;
    return text;
}
