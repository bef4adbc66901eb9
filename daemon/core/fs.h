/*
 * fs.h - files in sandboxes (fs.*, PROTOCOL.md "Files"): one operation in
 * flight (struct fs_call), the handles that outlive a call (open writes,
 * watches), and the bounds on both (per uid, per sandbox).
 *
 * The rpc layer (rpc/api_fs.c) validates params and makes absolute paths;
 * this file checks ownership-independent bounds, keeps the handles, hands
 * each call to the sandbox's provider (provider.h, fs_call) and turns the
 * provider's answer into the protocol's. Providers see struct fs_call and
 * the provider-facing functions in provider.h.
 */
#ifndef SBXD_FS_H
#define SBXD_FS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

struct sandbox;

enum fs_op {
    FS_OP_READ,
    FS_OP_WRITE,
    FS_OP_LIST,
    FS_OP_STAT,
    FS_OP_MKDIR,
    FS_OP_REMOVE,
    FS_OP_RENAME,
    FS_OP_WATCH,
};

/* Where a call's answer goes: err (borrowed) or result (borrowed). */
typedef void (*fs_done_cb)(sbx_err_t *err, json_t *result, void *privdata);
/* A watch's notification params (borrowed) for its owner. Returns 0, or -1
 * when the owner cannot take it now (its output is over its high mark): the
 * event is dropped and an overflow follows once it can. */
typedef int (*fs_event_cb)(json_t *params, void *owner);

struct fs_handle;

struct fs_call {
    /* -- what the provider reads -- */
    enum fs_op op;
    struct sandbox *sb;
    json_t *args;        /* validated params, "path" absolute; owned by the call */
    const uint8_t *data; /* FS_OP_WRITE: this call's bytes */
    size_t len;
    /* A read with args.format "tar" (an archive, PROTOCOL.md fs.read) has a
     * handle like a write: first, handle and hdata are set; it ends at eof. */
    int first;       /* FS_OP_WRITE, tar read: the handle's first call: open it */
    int more;        /* FS_OP_WRITE: more calls follow; 0 = commit */
    uint64_t handle; /* FS_OP_WRITE, FS_OP_WATCH, tar read: the handle's id */
    void **hdata;    /* ... the provider's per-handle pointer */
    /* -- the core's -- */
    uid_t uid;
    uint8_t *buf; /* FS_OP_READ: bytes so far; FS_OP_WRITE: the decoded chunk */
    size_t blen, bmax;
    size_t charged; /* bytes counted against fs_bytes_in_flight_per_uid */
    struct fs_handle *h;
    fs_done_cb done;
    void *privdata;
    /* FS_OP_READ for a raw stream (rpc/fs_stream.c): the answer has no
     * data; the bytes go to raw_done, which takes buf over. */
    void (*raw_done)(sbx_err_t *err, json_t *result, uint8_t *buf, size_t len,
                     void *privdata);
};

/* Starts op on sb for uid (the sandbox's owner or an admin: checked by the
 * caller). args stolen (an object; "path" absolute). For FS_OP_WRITE, data
 * is this call's bytes (stolen, malloc'd, may be NULL with len 0) and h the
 * handle of a continued write (NULL for a new one); more 1 keeps it open.
 * FS_OP_WATCH: owner/on_event get its events. done runs exactly once, maybe
 * before this returns. */
void fs_start(struct sandbox *sb, uid_t uid, enum fs_op op, json_t *args, uint8_t *data,
              size_t len, int more, struct fs_handle *h, void *owner,
              fs_event_cb on_event, fs_done_cb done, void *privdata);

/* A read whose bytes are handed over raw (h and owner: a tar read's handle
 * after its first call, and whose it is) (buf malloc'd, the callee's) instead
 * of encoded into the answer: the raw stream's (rpc/fs_stream.c). */
void fs_start_raw_read(struct sandbox *sb, uid_t uid, json_t *args, struct fs_handle *h,
                       void *owner,
                       void (*raw_done)(sbx_err_t *err, json_t *result, uint8_t *buf,
                                        size_t len, void *privdata),
                       void *privdata);
/* The per-uid bounds, for what holds bytes or a slot outside a call (a raw
 * stream's token and its socket buffer). 0, or -1 with err (-32005). */
int fs_charge(uid_t uid, int slot, size_t bytes, sbx_err_t *err);
void fs_uncharge(uid_t uid, int slot, size_t bytes);
/* The handle `id` of kind op owned by owner, or NULL. */
struct fs_handle *fs_handle_find(uint64_t id, void *owner, enum fs_op op);
/* The json args of a write handle (borrowed): what its first call asked. */
json_t *fs_handle_args(struct fs_handle *h);
int fs_handle_busy(const struct fs_handle *h);
/* Drops a handle (abort a write, unwatch): the provider is told. */
void fs_handle_drop(struct fs_handle *h);
/* Drops every handle of owner (its session closed). */
void fs_drop_owner(void *owner);
/* Drops every handle of sb (stopped, destroyed); watches get a last overflow. */
void fs_drop_sandbox(struct sandbox *sb);

/* Frees handles idle past limits.fs_handle_idle_ms; called from a timer. */
void fs_expire(double now);

#endif
