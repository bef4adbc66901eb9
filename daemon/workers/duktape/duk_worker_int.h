/*
 * duk_worker_int.h - internals of the Duktape worker, in floors that call
 * only down: duk_worker.c (process setup, frame dispatch) > duk_isolate.c
 * (the heap and its bindings) > duk_chan.c (program output, frames served
 * while JS waits, through the dispatcher struct dukw holds) > duk_text.c
 * (UTF-8 <-> CESU-8). Not for use outside daemon/workers/duktape/.
 *
 * Prefix: dukw_ (never duk_, which is Duktape's own namespace).
 */
#ifndef SBXD_DUK_WORKER_INT_H
#define SBXD_DUK_WORKER_INT_H

#include <duktape.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx_chan.h"
#include "workers/common/wk.h"

#define DUKW_DEFAULT_MEMORY_MB 128
#define DUKW_MAX_MEMORY_MB 65536
/* STDIN bytes held for a program that does not read them. */
#define DUKW_STDIN_MAX (8u * 1024 * 1024)
/* Exception strings (message, stack) are cut to this many bytes. */
#define DUKW_EXC_MAX (64u * 1024)
/* A run whose allocations are still refused this long after the first
 * refusal is ended (duk_isolate.c). */
#define DUKW_MEM_GIVE_UP_MS 1000
/* Largest TOOL_RESULT joined from MORE frames. */
#define DUKW_MESSAGE_MAX (64u * 1024 * 1024)

struct dukw_stdin {
    uint8_t *buf; /* UTF-8 bytes not yet returned by read_stdin() */
    size_t len, cap;
    int eof;
};

struct dukw {
    int fd; /* the channel */
    /* The frame handler (duk_worker.c's, set before the first frame): the
     * floors below serve frames through it while JS waits, so that they never
     * call back up into the file that calls them. */
    wk_dispatch_fn *dispatch;

    /* The heap. mem_* are kept by the accounting allocator. */
    duk_context *ctx;
    size_t mem_limit; /* bytes */
    size_t mem_used;  /* bytes, headers included */
    unsigned memory_mb;
    int mem_exceeded;      /* an allocation was refused since the flag was cleared */
    double mem_refused_at; /* ms (monotonic) of this run's first refusal, or 0 */
    int reset_pending;     /* the heap failed outside a run: recreate it, say reset */

    /* The running process; proc 0 = none. */
    uint32_t proc;
    uint64_t credit;
    uint32_t next_call; /* last TOOL_CALL id used */
    uint32_t wait_call; /* TOOL_CALL id awaited, 0 = none */
    json_t *tool_reply; /* its TOOL_RESULT, owned, set by the dispatcher */
    /* MORE frames: the start of a TOOL_RESULT larger than one frame */
    uint8_t *more;
    size_t more_len, more_cap;
    struct dukw_stdin in;
};

/* ---- duk_chan.c: output (frames: workers/common/wk.h) --------------------- */

/*
 * Sends program output for the running process (type STDOUT or STDERR),
 * split into frames of at most the current credit and SBX_CHAN_MAX_PAYLOAD.
 * Blocks, serving other frames, while there is no credit. Output with no
 * running process is dropped.
 */
void dukw_output(struct dukw *w, uint8_t type, const uint8_t *data, size_t len);

/*
 * Output as dukw_output, but of a Duktape string (CESU-8) converted to UTF-8
 * on the way, without one big temporary copy.
 */
void dukw_output_cesu8(struct dukw *w, uint8_t type, const uint8_t *s, size_t len);

/*
 * Reads and handles one frame (through w->dispatch) while a JS call is
 * blocked (credit, tool result, stdin). EOF or a broken channel end the
 * process from here, since there is no way to unwind the JS stack.
 */
void dukw_pump_nested(struct dukw *w);

/* ---- duk_isolate.c: the heap ------------------------------------------- */

/* Creates the heap and its globals. Returns 0, or -1 (heap left NULL). */
int dukw_isolate_create(struct dukw *w);
/* Destroys the heap (no-op without one). */
void dukw_isolate_destroy(struct dukw *w);

/*
 * Runs one SPAWN request (`req` borrowed, already parsed as an object) for
 * process `proc`: sends STARTED, the output, and exactly one EXIT.
 */
void dukw_isolate_run(struct dukw *w, uint32_t proc, json_t *req);

/*
 * Builds the SNAP_DATA payload: {"globals":{...}} or {"error":S}. Returns a
 * malloc'd UTF-8 string (caller frees) and its length in *len_out, or NULL on
 * OOM.
 */
char *dukw_isolate_snapshot(struct dukw *w, size_t *len_out);

/*
 * Loads a RESTORE payload ({"globals":{...}}, borrowed). Returns 0, or -1
 * with a static message in *why.
 */
int dukw_isolate_restore(struct dukw *w, json_t *state, const char **why);

/* ---- duk_text.c: UTF-8 <-> CESU-8 -------------------------------------- */

/*
 * Duktape strings hold CESU-8 (a non-BMP character is a pair of 3-byte
 * surrogates) and may hold any other byte sequence. Output must be UTF-8.
 *
 * dukw_utf8_from_cesu8 converts in[*pos..len) to UTF-8: surrogate pairs
 * become one 4-byte sequence, valid 4-byte UTF-8 passes through, and a lone
 * surrogate or any invalid sequence becomes U+FFFD (EF BF BD). It stops when
 * the next character might not fit in the `cap` bytes left (cap >= 4 always
 * makes progress), advances *pos and returns the bytes written. With out ==
 * NULL it only counts.
 */
size_t dukw_utf8_from_cesu8(uint8_t *out, size_t cap, const uint8_t *in, size_t len,
                            size_t *pos);

/*
 * The other way, for text entering the isolate (source code, stdin, JSON
 * strings): UTF-8 to CESU-8, 4-byte sequences becoming surrogate pairs and
 * invalid sequences (encoded surrogates included) U+FFFD. When `final` is 0,
 * an incomplete but so far valid sequence at the end of the input is left
 * unconsumed (more bytes may complete it). Same conventions as above.
 */
size_t dukw_cesu8_from_utf8(uint8_t *out, size_t cap, const uint8_t *in, size_t len,
                            size_t *pos, int final);

/*
 * Converts a whole Duktape string to a malloc'd, NUL-terminated UTF-8 string.
 * Returns NULL on OOM; *len_out (may be NULL) receives the length.
 */
char *dukw_utf8_dup(const uint8_t *in, size_t len, size_t *len_out);

#endif
