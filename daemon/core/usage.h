/*
 * usage.h - what each uid holds, against its per-uid limits: sessions,
 * unparsed input, snapshots, queued processes, reserved memory. One record per uid that
 * holds anything; it goes when everything it counts is back to zero.
 */
#ifndef SBXD_USAGE_H
#define SBXD_USAGE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct uid_usage {
    struct uid_usage *next;
    uid_t uid;
    int sessions;
    size_t input_bytes; /* input buffers of its sessions */
    int snapshots;
    size_t snapshot_bytes; /* encoded size of its snapshots' data */
    int fs_transfers;      /* fs calls in flight + open write handles (core/fs.c) */
    size_t fs_bytes;       /* file bytes those hold in sbxd */
    /* issue 16: what its queued processes hold (command, env, stdin) */
    size_t queued_bytes;
    /* issue 16: memory its sandboxes reserve (sandbox_reserve_memory) */
    uint64_t memory_bytes;
};

/* The record of uid, created if missing (aborts on OOM: it is tiny). */
struct uid_usage *usage_of(uid_t uid);
/* The record of uid or NULL: for reading only. */
struct uid_usage *usage_find(uid_t uid);
/* Frees u if it counts nothing any more. */
void usage_release(struct uid_usage *u);
void usage_free_all(void);

#endif
