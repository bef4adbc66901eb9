/*
 * jsw_scache.c - the js worker's cache of stripped programs. Agents send the
 * same programs again and again (a tool loop, a retry, a template with its
 * data in a tool call), and stripping TypeScript is most of what a short
 * program costs the worker: the stripper's output is a pure function of its
 * input, so an exact match (hash, length and bytes) gives back the string
 * the stripper made last time. Nothing else of a run is kept.
 *
 * Bounded: JSW_SCACHE_ENTRIES programs, JSW_SCACHE_BYTES of source and
 * stripped text together; programs above JSW_SCACHE_ONE are never kept. The
 * least recently used entry goes first. Emptied on RESET (the worker goes
 * to its next sandbox), and a worker serves one uid only (the daemon binds
 * it): no program of one sandbox ever meets another's.
 */
#include <stdlib.h>
#include <string.h>

#include "workers/jsc/jsw.h"
#include "xalloc.h"

static uint64_t hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static void drop(struct jsw_scache *c, struct jsw_scache_entry *e)
{
    c->bytes -= e->bytes;
    free(e->src);
    JSStringRelease(e->out);
    memset(e, 0, sizeof(*e));
}

JSStringRef jsw_scache_get(struct jsw_scache *c, const char *src, size_t len)
{
    uint64_t h;

    if (len > JSW_SCACHE_ONE)
        return NULL;
    h = hash(src, len);
    for (unsigned i = 0; i < JSW_SCACHE_ENTRIES; i++) {
        struct jsw_scache_entry *e = &c->e[i];
        if (e->out && e->hash == h && e->len == len && memcmp(e->src, src, len) == 0) {
            e->used = ++c->clock;
            c->hits++;
            return JSStringRetain(e->out);
        }
    }
    return NULL;
}

void jsw_scache_put(struct jsw_scache *c, const char *src, size_t len, JSStringRef out)
{
    size_t bytes = len + JSStringGetLength(out) * sizeof(JSChar);
    struct jsw_scache_entry *e = NULL;

    if (len > JSW_SCACHE_ONE || bytes > JSW_SCACHE_BYTES)
        return;
    /* a free slot, else the least recently used; then older ones until the
     * bytes fit */
    for (;;) {
        struct jsw_scache_entry *lru = NULL;
        e = NULL;
        for (unsigned i = 0; i < JSW_SCACHE_ENTRIES; i++) {
            if (!c->e[i].out) {
                e = e ? e : &c->e[i];
                continue;
            }
            if (!lru || c->e[i].used < lru->used)
                lru = &c->e[i];
        }
        if (e && c->bytes + bytes <= JSW_SCACHE_BYTES)
            break;
        if (!lru)
            return; /* cannot happen: bytes <= JSW_SCACHE_BYTES */
        drop(c, lru);
    }
    e->hash = hash(src, len);
    e->src = xmalloc(len ? len : 1);
    memcpy(e->src, src, len);
    e->len = len;
    e->out = JSStringRetain(out);
    e->bytes = bytes;
    e->used = ++c->clock;
    c->bytes += bytes;
}

void jsw_scache_clear(struct jsw_scache *c)
{
    for (unsigned i = 0; i < JSW_SCACHE_ENTRIES; i++)
        if (c->e[i].out)
            drop(c, &c->e[i]);
}
