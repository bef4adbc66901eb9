/*
 * wk.h - the runtime both isolate workers share (sbxd-worker on Duktape,
 * sbxd-jsworker on JavaScriptCore): blocking channel frame I/O (wk_chan.c),
 * self-hardening steps (wk_harden.c) and SPAWN checks (wk_spawn.c). Each
 * worker keeps only what is engine-specific, its seccomp allow-list included.
 */
#ifndef SBX_WK_H
#define SBX_WK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "sbx_chan.h"

#define WK_NOBODY_ID 65534
#define WK_MAX_TOOLS 256 /* tools per SPAWN */
#define WK_TOOL_NAME_MAX 128

/* ---- channel (wk_chan.c) ------------------------------------------------------- */

/**
 * Sends one frame on the blocking channel fd, header and payload in one
 * writev. A payload over SBX_CHAN_MAX_PAYLOAD is a caller's bug: it is
 * dropped and a LOG frame says so. Exits the process (_exit(0)) when the
 * daemon is gone.
 */
void wk_send(int fd, uint8_t type, uint32_t proc, const void *data, size_t len);

/** Sends a message of any size: MORE frames, then one frame of `type`. */
void wk_send_big(int fd, uint8_t type, uint32_t proc, const void *data, size_t len);

/** Sends json (borrowed) as compact JSON in one frame (through wk_send). */
void wk_send_json(int fd, uint8_t type, uint32_t proc, json_t *json);

/** As wk_send_json, but a message of any size (through wk_send_big). */
void wk_send_json_big(int fd, uint8_t type, uint32_t proc, json_t *json);

/** An ERROR frame (proc 0) {"message": msg}. */
void wk_send_error(int fd, const char *msg);

/** A LOG frame (proc 0) from a printf format, cut at 1023 bytes. */
void wk_log(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/**
 * Reads one frame. Returns 0 with *payload_out (malloc'd, NUL-terminated,
 * caller frees), 1 on a clean EOF, -1 on a read error or a bad header.
 */
int wk_recv(int fd, struct sbx_chan_hdr *hdr, uint8_t **payload_out);

/**
 * wk_recv for a frame read while JS waits (credit, a tool result, stdin):
 * EOF ends the process with status 0, a broken channel sends ERROR
 * "invalid frame" and ends it with 1. Returns the payload (caller frees).
 */
uint8_t *wk_recv_nested(int fd, struct sbx_chan_hdr *hdr);

/** A worker's frame handler: payload borrowed, NUL-terminated. */
typedef void wk_dispatch_fn(void *worker, const struct sbx_chan_hdr *h,
                            const uint8_t *payload);

/**
 * Reads one frame while JS waits (wk_recv_nested: EOF or a broken channel
 * end the process) and hands it to dispatch.
 */
void wk_pump(int fd, wk_dispatch_fn *dispatch, void *worker);

/**
 * The worker's main loop: frames to dispatch until EOF (returns 0) or a
 * bad frame (sends ERROR "invalid frame", returns 1).
 */
int wk_serve(int fd, wk_dispatch_fn *dispatch, void *worker);

/** Work a worker does while it waits for its next frame (may be NULL). */
typedef void wk_idle_fn(void *worker);

/**
 * wk_serve with idle(worker) called before each wait for a frame: the js
 * worker makes its next fresh global there while a program awaits a tool's
 * answer. idle checks for itself whether a frame is already waiting.
 */
int wk_serve_idle(int fd, wk_dispatch_fn *dispatch, wk_idle_fn *idle, void *worker);

/* What program output needs of a worker: its channel, its dispatcher, and
 * where it keeps the running proc (0 = none) and that proc's credit. */
struct wk_out {
    int fd;
    wk_dispatch_fn *dispatch;
    void *worker;
    const uint32_t *proc;
    uint64_t *credit;
};

/**
 * Sends program output of the running proc (type STDOUT or STDERR) in frames
 * of at most the credit and SBX_CHAN_MAX_PAYLOAD. While there is no credit it
 * serves frames (wk_pump), and it stops if the running proc changes; after
 * each frame it serves, at most 64, the frames already waiting. Output with
 * no running proc is dropped.
 */
void wk_output(const struct wk_out *o, uint8_t type, const uint8_t *data, size_t len);

/* ---- hardening (wk_harden.c) ------------------------------------------------------ */

/*
 * Each step returns 0, or -1 with *why set to a static message. The order
 * in which a worker calls them matters (see the callers' harden()).
 */

/**
 * Nonzero when the seccomp filter and RLIMIT_AS must be skipped:
 * SBX_NO_SECCOMP=1, under valgrind (SBX_VALGRIND or detected) and in
 * sanitized builds (SBX_SANITIZED, or built with ASan).
 */
int wk_no_sandbox_extras(void);

/**
 * Keeps only the channel (moved above 2 if needed; *fd is updated) and 0-2;
 * 0 and 1 become /dev/null, stderr stays. The channel is made blocking and
 * close-on-exec.
 */
int wk_isolate_fds(int *fd, const char **why);

/** Sets both the soft and hard limit of `res` to v (setrlimit's return). */
int wk_set_limit(int res, rlim_t v);

/** Sets only the soft limit (valgrind lets its client lower no more). */
int wk_soft_limit(int res, rlim_t v);

/** uid/gid of user `name`; "nobody" falls back to 65534. Refuses uid 0. */
int wk_lookup_user(const char *name, uid_t *uid, gid_t *gid, const char **why);

/**
 * Parses `--uid N` (decimal, no sign): the daemon's per-user worker uid
 * (README "Security": providers.<isolate>.worker_uid_base). uid and gid both
 * become N. Refuses 0 and (uid_t)-1. Returns 0, or -1 with *why set.
 */
int wk_parse_uid(const char *s, uid_t *uid, gid_t *gid, const char **why);

/** Drops every group and sets real/effective/saved ids, then checks it stuck. */
int wk_drop_privileges(uid_t uid, gid_t gid, const char **why);

/**
 * Installs a seccomp filter of n instructions (borrowed); on failure *why
 * becomes fail_msg.
 */
struct sock_filter;
int wk_seccomp_install(const struct sock_filter *f, size_t n, const char *fail_msg,
                       const char **why);

/* Filter building blocks for the workers' allow-lists. */
#define WK_ALLOW(nr)                                                                     \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                                     \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
#define WK_DENY(nr, err)                                                                 \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                                     \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (SECCOMP_RET_DATA & (err)))
/* Loads the arch, kills a foreign one, then loads the syscall number. */
#define WK_FILTER_HEAD(audit)                                                            \
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),             \
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (audit), 1, 0),                              \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),                             \
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))

#if defined(__x86_64__)
#define WK_SECCOMP_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define WK_SECCOMP_ARCH AUDIT_ARCH_AARCH64
#endif

/* ---- SPAWN requests (wk_spawn.c) -------------------------------------------------- */

/**
 * Checks a SPAWN's "tools" value (borrowed; NULL = absent): an array of at
 * most WK_MAX_TOOLS non-empty names of at most WK_TOOL_NAME_MAX bytes, no
 * NUL. Returns NULL when fine, else a static message.
 */
const char *wk_check_tools(const json_t *tools);

#endif
