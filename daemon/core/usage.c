/*
 * usage.c - per-uid counters behind the per-uid limits. A list: the uids
 * that talk to one sbxd are few.
 */
#include "core/usage.h"

#include <stdlib.h>

#include "xalloc.h"

static struct uid_usage *all;

struct uid_usage *usage_find(uid_t uid)
{
    for (struct uid_usage *u = all; u; u = u->next)
        if (u->uid == uid)
            return u;
    return NULL;
}

struct uid_usage *usage_of(uid_t uid)
{
    struct uid_usage *u = usage_find(uid);
    if (u)
        return u;
    u = xcalloc(1, sizeof(*u));
    u->uid = uid;
    u->next = all;
    all = u;
    return u;
}

void usage_release(struct uid_usage *u)
{
    if (!u || u->sessions || u->input_bytes || u->snapshots || u->snapshot_bytes ||
        u->fs_transfers || u->fs_bytes || u->queued_bytes || u->memory_bytes)
        return;
    for (struct uid_usage **pp = &all; *pp; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            free(u);
            return;
        }
}

void usage_free_all(void)
{
    while (all) {
        struct uid_usage *n = all->next;
        free(all);
        all = n;
    }
}
