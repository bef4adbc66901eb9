/* err.c - error objects; see err.h. */
#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *vfmt(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

int err_make(sbx_err_t *err, int code, const char *fmt, ...)
{
    if (!err)
        return -1;
    err_clear(err);
    va_list ap;
    va_start(ap, fmt);
    err->msg = vfmt(fmt, ap);
    va_end(ap);
    err->code = code;
    return -1;
}

int err_make_data(sbx_err_t *err, int code, json_t *data, const char *fmt, ...)
{
    if (!err) {
        json_decref(data);
        return -1;
    }
    err_clear(err);
    va_list ap;
    va_start(ap, fmt);
    err->msg = vfmt(fmt, ap);
    va_end(ap);
    err->code = code;
    err->data = data;
    return -1;
}

int err_wrap(sbx_err_t *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    char *ctx = vfmt(fmt, ap);
    va_end(ap);
    char *joined = NULL;
    if (ctx && asprintf(&joined, "%s: %s", ctx, err->msg ? err->msg : "error") >= 0) {
        free(err->msg);
        err->msg = joined;
    }
    free(ctx);
    return -1;
}

void err_clear(sbx_err_t *err)
{
    if (!err)
        return;
    free(err->msg);
    json_decref(err->data);
    memset(err, 0, sizeof(*err));
}

void err_move(sbx_err_t *dst, sbx_err_t *src)
{
    err_clear(dst);
    *dst = *src;
    memset(src, 0, sizeof(*src));
}
