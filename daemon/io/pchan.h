/*
 * pchan.h - the process channel: one dispatcher for the frames of
 * proto/CHANNEL.md, shared by every provider that speaks it (the isolate
 * workers, the Docker agent link).
 *
 * A frame goes to the handler registered for its type. Handlers registered
 * with PCHAN_PROC get the frame only when its proc id names a live process
 * (the owner's lookup callback says which); a frame for an unknown pid is
 * dropped here with one debug line. Built in, and the same for everyone:
 *   - STDOUT/STDERR: the bytes to the process's output (through the sink),
 *     then credit back to the peer once CREDIT_BATCH bytes are owed and the
 *     output is not blocked (slow reader = backpressure);
 *   - STARTED: the os_pid to the process;
 *   - LOG: the peer's diagnostics, truncated and rate-limited per source
 *     (limits.agent_log_lines_per_s), since the peer is untrusted;
 *   - MORE (optional, pchan_set_more): a message larger than one frame is
 *     collected up to a limit and handed on as one frame of the last type.
 * Everything else (files 0x60-0x6f, ports 0x80-0x9f, HELLO, EXIT, ...) is
 * registered by the file that owns it with pchan_on()/pchan_on_range(), so a
 * new frame family adds a handler in its own file, not another switch.
 *
 * pchan knows nothing of sandboxes or processes: a process is an opaque
 * pointer that the sink (core/process_pchan.h) understands. Handlers may free
 * the process they were given; pchan does not touch it after a handler runs.
 */
#ifndef SBXD_PCHAN_H
#define SBXD_PCHAN_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "sbx_chan.h"

/* pchan's state of one process, embedded in the provider's process record. */
struct pchan_proc {
    uint32_t owed; /* output bytes received and not yet returned as credit */
    int mute;      /* output frames are stale (e.g. until a REPLAY answer): dropped */
    int started;   /* STARTED seen */
};

/* Where process output goes: the core's process (proc is opaque here). */
struct pchan_sink {
    void (*output)(void *proc, int is_stderr, const uint8_t *data, size_t len);
    /* 1 while the process's readers are over their soft limit: hold credit */
    int (*blocked)(void *proc);
    void (*started)(void *proc, long os_pid);
};

struct pchan;
/* A frame for a handler: pp and proc are NULL for channel frames; payload and
 * h are valid only during the call. */
typedef void (*pchan_frame_cb)(struct pchan *pc, const struct sbx_chan_hdr *h,
                               const uint8_t *payload, struct pchan_proc *pp, void *proc,
                               void *privdata);
/* The process the frame's proc id names: its pchan state, and the process for
 * the sink in *proc_out. NULL when there is none (or it has exited). */
typedef struct pchan_proc *(*pchan_lookup_cb)(uint32_t pid, void **proc_out,
                                              void *privdata);
/* Sends one frame to the peer: 0, or -1 when the channel is closed or full. */
typedef int (*pchan_send_cb)(uint8_t type, uint32_t proc, const void *data, size_t len,
                             void *privdata);

#define PCHAN_PROC 1u /* the handler wants a live process: pid looked up first */

struct pchan_handler {
    pchan_frame_cb cb;
    void *privdata;
    unsigned flags;
};

struct pchan {
    struct pchan_handler on[256];
    const struct pchan_sink *sink;
    pchan_lookup_cb lookup;
    pchan_send_cb send;
    void *privdata; /* of lookup and send */
    uint32_t credit_batch;
    /* LOG frames: "<tag>: <text>", text cut at log_max bytes */
    char tag[96];
    size_t log_max;
    struct log_limit *log; /* NULL: the channel's own (own_log) */
    const char *log_key;   /* the source named in the limit's summary line */
    struct log_limit own_log;
    /* MORE frames: collected up to more_max bytes (0 = MORE is not used) */
    size_t more_max;
    uint8_t *more;
    size_t more_len, more_cap;
    uint32_t more_proc;
    int more_over;
    /* counters, for tests and metadata */
    uint64_t unknown_pid, unexpected;
};

/*
 * Sets up pc (embedded, zeroed or not) with the built-in handlers. window is
 * the output window the peer was given (credit goes back at window / 4);
 * tag prefixes log lines ("docker <id> agent"). lookup and send are called
 * with privdata.
 */
void pchan_init(struct pchan *pc, const struct pchan_sink *sink, uint32_t window,
                pchan_lookup_cb lookup, pchan_send_cb send, void *privdata,
                const char *tag);
/* Frees what pc holds (a partial MORE message). pc may be initialised again. */
void pchan_deinit(struct pchan *pc);

/* Handles frames of `type` (replacing the built-in or an earlier one). */
void pchan_on(struct pchan *pc, uint8_t type, unsigned flags, pchan_frame_cb cb,
              void *privdata);
/* The same for every type in lo..hi. */
void pchan_on_range(struct pchan *pc, uint8_t lo, uint8_t hi, unsigned flags,
                    pchan_frame_cb cb, void *privdata);

/* LOG frames count against l (borrowed, NULL = the channel's own) as key; text
 * is cut at max bytes. */
void pchan_set_log(struct pchan *pc, struct log_limit *l, const char *key, size_t max);
/* 1 when one more line from the peer may be logged now (LOG's own limit). */
int pchan_log_take(struct pchan *pc);
/* Collects MORE frames into messages up to max bytes (CHANNEL.md). An EXIT
 * over the limit is replaced by an exit record that says so; anything else
 * over it is dropped. */
void pchan_set_more(struct pchan *pc, size_t max);

/* One frame as it came from the chan. */
void pchan_dispatch(struct pchan *pc, const struct sbx_chan_hdr *h,
                    const uint8_t *payload);

/* Returns the owed credit of pp (proc: its process) once it reaches the batch,
 * or any owed amount when force; never while the output is blocked. */
void pchan_credit(struct pchan *pc, struct pchan_proc *pp, void *proc, uint32_t pid,
                  int force);

#endif
