/*
 * jfast.c - see jfast.h. Whatever is not plainly one of the accepted forms
 * gives up: escapes and bytes outside printable ASCII in strings, reals,
 * integers of more than 18 digits, leading zeros, nesting past
 * SBX_MAX_JSON_DEPTH, anything unexpected. json_loadb decides those.
 */
#include "rpc/jfast.h"

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
