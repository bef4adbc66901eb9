/*
 * output.h - a process's output streams and who follows them (output.c):
 * the replay ring, exec result accumulation, process.output lines to
 * followers, replay, and the flow control that holds a process back while
 * a follower cannot take more. The provider-facing entry points
 * (process_output in process.c, process_output_blocked) are declared in
 * provider.h; what goes to followers leaves through events.h.
 */
#ifndef SBXD_OUTPUT_H
#define SBXD_OUTPUT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct process;

struct ring {
    uint8_t *buf;
    size_t cap, max; /* cap grows to max */
    size_t len;      /* bytes held (<= cap) */
    size_t head;     /* index of the oldest byte */
};

/*
 * When output arrived: one mark per chunk the provider reported, the stream
 * offset of its first byte and the wall-clock time (ns). At most max marks
 * (ring.max / TMARK_GRAIN); past that the oldest half is merged pairwise,
 * each pair keeping the later time, so old output keeps an upper bound of
 * its time and recent output its exact one. Bytes before the first mark
 * carry its time. Counted in the retained bytes with the ring.
 */
struct tmark {
    uint64_t off;
    int64_t ns;
};
struct tmarks {
    struct tmark *m; /* entries m[start, start + len) */
    size_t cap, max, start, len;
};
#define TMARK_GRAIN 128 /* replay bytes per mark of room */

struct pstream {
    uint64_t total;   /* bytes received */
    uint64_t emitted; /* bytes sent in notifications (total - held tail) */
    uint8_t tail[4];  /* incomplete UTF-8 sequence held back */
    size_t ntail;
    struct ring ring; /* last replay_bytes */
    struct tmarks marks;
    char *acc; /* exec result accumulation */
    size_t acc_len;
    int truncated;
};

/* How output bytes go on the wire (PROTOCOL.md, output_encoding). */
enum out_enc {
    ENC_UTF8 = 0, /* "data" when valid UTF-8, else "data_b64" */
    ENC_AUTO = 1, /* the shorter of the two for each chunk */
};

/*
 * A reader of process output: the protocol layer embeds one in each client
 * connection and keeps congested up to date (set over its high mark,
 * cleared below the low one, then output_follower_writable()). What it is
 * sent comes through the events table (events.h: output, replay, exit).
 */
struct follower {
    struct sub *subs; /* the processes it follows */
    int congested;
};

/* A follower following one process. */
struct sub {
    struct sub *pnext, *pprev; /* in process */
    struct sub *snext, *sprev; /* in follower */
    struct process *p;
    struct follower *f;
    enum out_enc enc;
    int timestamps; /* each process.output carries its "time" */
};

/* What process.attach asks of the replay. */
struct replay_opts {
    uint64_t off[2]; /* stdout, stderr: replay from these offsets */
    enum out_enc enc;
    int64_t since_ns; /* > 0: only output that arrived at or after it */
    int timestamps;   /* each piece carries its time; stdout and stderr pieces
                         then come in the order they arrived */
};

/* Adds f as a follower of p (f NULL: nothing), or changes its encoding and
 * timestamps if it follows already. */
void process_subscribe(struct process *p, struct follower *f, enum out_enc enc,
                       int timestamps);
void process_unsubscribe(struct process *p, struct follower *f);
/* Replays p's buffered output as o asks to f; the answer for
 * process.attach {running, stdout_start, ...}, a new reference. */
json_t *process_replay(struct process *p, struct follower *f,
                       const struct replay_opts *o);
/* f drained below its low mark: the processes it held back may go on. */
void output_follower_writable(struct follower *f);
/* f goes away: it follows nothing any more. */
void output_follower_gone(struct follower *f);

/* -- for process.c ----------------------------------------------------------- */

struct exit_note;
/* Takes len bytes (> 0) of stream (0 stdout, 1 stderr) of p: ring, marks,
 * the exec result when accumulate, pieces to the followers. Returns how many
 * bytes the ring and marks grew by (for limits.retained_bytes_*). */
size_t output_append(struct process *p, int stream, const void *data, size_t len,
                     int accumulate);

/* Emits the UTF-8 tails held back, at the exit. */
void output_flush(struct process *p);
/* Tells p's followers how it ended (events.h: exit). */
void output_notify_exit(struct process *p, const struct exit_note *e);
/* Bytes the marks of st hold (counted with the ring). */
size_t output_marks_bytes(const struct pstream *st);
/* Frees the ring and the marks of st. */
void output_stream_drop(struct pstream *st);
/* Drops every follower of p. */
void output_unfollow_all(struct process *p);
/* 1 when bytes that are valid UTF-8 still go as base64 for enc: escaping
 * them (control characters become \u00XX) would be longer. */
int output_b64_cheaper(enum out_enc enc, const uint8_t *d, size_t n);
/* Puts a stream's accumulated exec output into o as key or key_b64. */
void output_put_result(json_t *o, const char *key, struct pstream *st, enum out_enc enc);

#endif
