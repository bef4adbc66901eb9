/*
 * xalloc.h - allocation that cannot fail, for the daemon and its workers.
 *
 * sbxd bounds every buffer by configuration, so running out of memory is
 * not a request's fault and not something a caller can repair: like Redis's
 * zmalloc, these report and abort instead of handing NULL to code that would
 * only crash later, further from the cause. Library code (libsbx) does not
 * use them: it returns errors. Each returns memory the caller owns (free()).
 */
#ifndef SBXD_XALLOC_H
#define SBXD_XALLOC_H

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noreturn, cold)) static inline void x_oom(const char *what)
{
    fprintf(stderr, "sbxd: out of memory (%s)\n", what);
    abort();
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        x_oom("malloc");
    return p;
}

static inline void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        x_oom("calloc");
    return p;
}

static inline void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        x_oom("realloc");
    return q;
}

static inline char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        x_oom("strdup");
    return p;
}

static inline char *xstrndup(const char *s, size_t n)
{
    char *p = strndup(s, n);
    if (!p)
        x_oom("strndup");
    return p;
}

__attribute__((format(printf, 1, 2))) static inline char *xasprintf(const char *fmt, ...)
{
    char *p = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&p, fmt, ap);
    va_end(ap);
    if (n < 0)
        x_oom("asprintf");
    return p;
}

/* A jansson constructor's result (json_pack, json_object, ...): NULL there
 * means no memory, or a format this program got wrong; neither can go on. */
static inline json_t *xjson(json_t *v)
{
    if (!v)
        x_oom("json");
    return v;
}

#endif
