/*
 * agent.h - sbx-init, the in-container agent of the Docker provider.
 *
 * sbx-init runs as PID 1 of a Docker sandbox (or as a plain child in tests).
 * Its stdin/stdout carry the worker channel (proto/CHANNEL.md); stderr is for
 * diagnostics only. It is linked statically and uses nothing from the image:
 * no NSS, no shell unless a SPAWN asks for one, no locale files.
 *
 * Files:
 *   main.c      startup: arguments, std fds, signal handlers, the main child
 *   sbx_init.c  the poll() loop, signals, the channel (frames in, the queue
 *               written out); its state and loop for main.c and the fuzzer
 *               are in sbx_init_int.h
 *   out.c       the output queue: sbx_init.c, fs.c and fs_tar.c queue frames there
 *   proc.c      SPAWN: fork/exec, per-process pipes, output rings, exit records
 *   direct.c    the direct socket: listener, key check (CHANNEL.md, Direct socket)
 *   fs.c        file requests: stat, list, read, atomic write, watch (CHANNEL.md, Files)
 *   fs_tar.c    archive requests (tar_get, tar_put) on tar.c's writer and extractor
 *   pty.c       terminals: the master/slave pair, window size, controlling tty
 *   net.c       connections relayed over the channel (sandbox.expose)
 *   json.c      a small strict JSON parser and a JSON string writer
 *   util.c      growable buffers, clock, logging
 */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx_chan.h"

/* ---- limits (documented in proto/CHANNEL.md "Agent bookkeeping") -------- */
#define AGENT_MAX_PROCS 256
#define AGENT_RING_MAX (1u << 20)    /* replay ring per stream */
#define AGENT_RING_MIN (16u << 10)   /* rings start small and double */
#define AGENT_STDIN_MAX (8u << 20)   /* buffered stdin per process */
#define AGENT_FRAME_OUT (64u << 10)  /* largest STDOUT/STDERR frame we send */
#define AGENT_OBUF_SOFT (256u << 10) /* stop producing output above this */
#define AGENT_OBUF_HARD (16u << 20)  /* never queue more than this */
#define AGENT_EXIT_GRACE_MS 50       /* pipes held by background children */
#define AGENT_CREDIT_MAX ((int64_t)1 << 40)
#define AGENT_COMMAND_MAX 1024    /* bytes of a command kept for HELLO */
#define AGENT_RUN_DIR "/.sbx/run" /* the direct socket's private directory */
#define AGENT_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* ---- util.c -------------------------------------------------------------- */

/* A byte buffer: data[off, len) is pending. */
struct buf {
    uint8_t *data;
    size_t off, len, cap;
};

static inline size_t buf_pending(const struct buf *b)
{
    return b->len - b->off;
}
/* Make room for n more bytes at the tail (compacting first). -1 on OOM. */
int buf_reserve(struct buf *b, size_t n);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_consume(struct buf *b, size_t n);
void buf_deinit(struct buf *b);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
char *xstrndup(const char *s, size_t n);

int64_t now_ms(void);
void alog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int set_nonblock(int fd);

/* ---- direct.c ------------------------------------------------------------ */

/*
 * A DIRECT request (payload {"key","answer"}): listens on a fresh socket in a
 * private directory ($SBX_INIT_RUNDIR, else AGENT_RUN_DIR). reply gets the
 * payload of the DIRECT answer: {"path":P}, or {"error":S} and -1.
 */
int direct_listen(const uint8_t *payload, size_t n, struct buf *reply);
/* The listener and unproven connections, to poll for POLLIN. */
int direct_poll_fds(int *fds, int max);
/*
 * One of those fds is readable. Returns the new channel fd once a peer proved
 * the key (answer then holds the DIRECT payload to send it, and the listener
 * is gone: one key, one channel); -1 otherwise.
 */
int direct_ready(int fd, struct buf *answer);
/* Closes the listener and unproven connections, forgets the key. */
void direct_stop(void);

/* ---- out.c: the output queue, below every file that sends frames ------- */

struct agent_out {
    struct buf q; /* framed bytes not yet written (sbx_init.c writes them) */
    bool dead;    /* stdout failed for good (EPIPE): frames are dropped */
    int dfd;      /* the direct socket while it is the channel (both ways), else -1 */
};
/* The one queue; the loop (sbx_init.c) and the fuzzer reach into it, the
 * other files only through the functions below. */
extern struct agent_out agent_out;

/* Queues a frame to the daemon (dropped when the channel is dead). */
void agent_send(uint8_t type, uint32_t id, const void *payload, size_t n);
/* Same, then frees b. */
void agent_send_buf(uint8_t type, uint32_t id, struct buf *b);
/* The output queue is below its soft mark: producing more is welcome. */
bool agent_out_room(void);
/* A channel is there to write to (the direct socket, or stdout not dead). */
bool out_ok(void);
/* The fd frames are written to: the direct socket while there is one, else 1. */
int out_fd(void);
/* Drops what is queued (the channel changed: the daemon REPLAYs). */
void out_drop_queued(void);
/* A failed file request's FS_RESULT {"errno":"ENOENT","message":M} (fs.c and
 * fs_tar.c): M is msg, or strerror(e) when msg is NULL or empty. */
void agent_send_fs_err(uint32_t id, int e, const char *msg);

/* ---- fs.c ---------------------------------------------------------------- */

/* An FS_REQ, FS_DATA or FS_CANCEL frame from the daemon. */
void fs_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t n);
/* Sends pending read data while the output queue has room. */
void fs_pump(void);
/* Reads have data to send (poll without waiting when there is room). */
bool fs_has_output(void);
/* The watches' inotify fds (and their ids) to poll for POLLIN. */
int fs_poll_fds(int *fds, uint32_t *ids, int max);
/* Watch id's inotify fd is readable. */
void fs_ready(uint32_t id);
/* Sends due event batches, expires abandoned writes; ms until the next, or -1. */
int fs_timers(int64_t now);
/* Drops every request, open write (its temporary file too) and watch. */
void fs_reset(void);

/* ---- fs_tar.c: tar_get/tar_more/tar_put (fs.c hands them over) ------------ */

struct jval;
/* An FS_REQ op of an archive (or a flush/commit of a put): true if taken. */
bool fs_tar_req(uint32_t id, const char *op, const struct jval *q);
/* FS_DATA / FS_CANCEL for an archive request: true if id is one. */
bool fs_tar_data(uint32_t id, const uint8_t *payload, size_t n);
bool fs_tar_cancel(uint32_t id);
bool fs_tar_has_output(void);
void fs_tar_pump(void);
void fs_tar_timers(int64_t now);
void fs_tar_reset(void);
/* ---- pty.c --------------------------------------------------------------- */

#define AGENT_PTY_MAX_DIM 10000 /* cols and rows a SPAWN or RESIZE may ask for */

/* A new terminal of cols x rows: both ends close-on-exec. -1 with errno. */
int pty_open(int *master_out, int *slave_out, unsigned cols, unsigned rows);
/* Sets the window size (the foreground job gets SIGWINCH). */
int pty_resize(int master, unsigned cols, unsigned rows);
/* In the child: a new session with slave as its controlling terminal. */
int pty_child_setup(int slave);

/* ---- net.c --------------------------------------------------------------- */

#define AGENT_MAX_CONNS 256 /* relayed connections at once */

struct pollfd;
/* How net.c queues a frame on the channel (sbx_init.c's chan_send). */
typedef void (*net_send_fn)(uint8_t type, uint32_t id, const void *payload, size_t n);
void net_init(net_send_fn fn);
/* A NET_* frame from the daemon. */
void net_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t n);
/* Fills up to max poll entries (POLLIN only with obuf_room); net_ready(k, revents)
 * for entry k after poll; net_reap() after the dispatch frees closed ones. */
int net_pollfds(struct pollfd *pfd, int max, bool obuf_room);
void net_ready(int k, short revents);
void net_reap(void);
/* The channel was lost: every connection ends (the daemon's ended too). */
void net_close_all(void);

/* ---- json.c -------------------------------------------------------------- */

#define JSON_MAX_DEPTH 32
#define JSON_MAX_NODES 65536

enum jtype { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
    enum jtype type;
    struct jval *next; /* next element/member of the parent */
    char *key;         /* member name when the parent is an object (NUL-terminated) */
    size_t keylen;
    char *str; /* J_STR: decoded UTF-8, NUL-terminated, may hold \u0000 */
    size_t len;
    double num;  /* J_NUM */
    bool is_int; /* J_NUM written without fraction/exponent and fits int64 */
    int64_t ival;
    struct jval *child; /* J_ARR, J_OBJ: first element/member */
    size_t count;
};

/*
 * Parses exactly one JSON value from s[0, n) (RFC 8259, strict: UTF-8 is
 * validated, lone surrogates, duplicate keys, trailing commas and trailing
 * garbage are errors). Returns a tree the caller frees with json_free, or NULL
 * with a message in err.
 */
struct jval *json_parse(const char *s, size_t n, char *err, size_t errlen);
void json_free(struct jval *v);
/* Borrowed member of an object, or NULL. */
const struct jval *json_get(const struct jval *obj, const char *key);
/* Appends s[0, n) as a JSON string literal; invalid UTF-8 becomes U+FFFD. */
int json_put_str(struct buf *b, const char *s, size_t n);

/* ---- proc.c -------------------------------------------------------------- */

enum proc_state {
    PROC_RUNNING,  /* leader alive */
    PROC_DRAINING, /* leader reaped; reading what is left in the pipes */
    PROC_EXITED,   /* exit record final; EXIT goes out once all output is sent */
};

struct stream {
    int fd;        /* our read end, -1 once closed */
    uint8_t *ring; /* last `cap` bytes; byte at offset o lives at ring[o % cap] */
    size_t cap;
    uint64_t total;       /* bytes read from the pipe */
    uint64_t sent;        /* bytes framed into the output queue */
    uint64_t drain_limit; /* set at the end of the grace period; UINT64_MAX = none */
};

struct proc {
    uint32_t id;
    pid_t pid; /* leader; also the process group id */
    enum proc_state state;
    struct stream out[2]; /* stdout, stderr */
    int in_fd;
    struct buf in;
    bool in_eof;
    int64_t credit;
    uint32_t window;
    int64_t deadline; /* timeout_ms, monotonic; 0 = none */
    int64_t grace_at; /* DRAINING: when to stop waiting for pipe EOF */
    bool killed, timed_out, exit_sent;
    int exit_code, signal;
    char *error;
    char *command; /* for HELLO: the shell string or argv joined, capped */
    bool pty;      /* stdin/stdout/stderr are one terminal: out[0] is its master */
    int tty_fd;    /* a second descriptor of the master, for RESIZE; -1 = none */
};

struct spawn_req {
    char **argv; /* NULL-terminated */
    char **envp; /* NULL-terminated, contains PATH */
    char *cwd;   /* NULL = inherit */
    int64_t timeout_ms;
    uint32_t window;
    bool shell; /* argv is /bin/sh -c STRING from a "shell" request */
    bool pty;   /* "pty": {"cols","rows"}: run on a new terminal of that size */
    unsigned cols, rows;
};

/* Validates a SPAWN payload into req. -1 with a message in err. */
int spawn_req_parse(struct spawn_req *req, const uint8_t *p, size_t n, char *err,
                    size_t errlen);
void spawn_req_deinit(struct spawn_req *req);

/*
 * Forks and execs req as process `id` in its own process group. Always returns
 * a proc (NULL only on OOM); when the exec failed it is already PROC_EXITED
 * with exit_code 126/127 and error set.
 */
struct proc *proc_spawn(uint32_t id, const struct spawn_req *req);
void proc_free(struct proc *p);

/* The leader was reaped with wait status `status`. */
void proc_leader_exited(struct proc *p, int status, int64_t now);
/* Kills the group after a timeout. */
void proc_timeout(struct proc *p);
/* Grace period over: read only what is already in the pipes, then close. */
void proc_grace_expired(struct proc *p);
/* Closes stream s's pipe; moves a DRAINING proc with both pipes closed to EXITED. */
void proc_close_stream(struct proc *p, int s);
void proc_close_stdin(struct proc *p);
/* Bytes stream s may read now (credit, ring room, drain limit). */
size_t proc_read_allowance(const struct proc *p, int s);
/* Appends bytes read from stream s's pipe to its ring. */
void proc_ring_write(struct proc *p, int s, const uint8_t *data, size_t n);
/* Copies ring bytes [off, off+n) of stream s (they must still be held). */
void proc_ring_read(const struct proc *p, int s, uint64_t off, uint8_t *dst, size_t n);
/* Oldest offset stream s still holds. */
uint64_t proc_ring_oldest(const struct proc *p, int s);
/* The EXIT record as JSON. */
int proc_exit_json(const struct proc *p, struct buf *b);

/* Child side of spawning, shared with the main child: never returns. sh is
 * exec_sh_argv(argv), made before the child exists (it must not allocate). */
void exec_search(char *const argv[], char *const envp[], char **sh, int errfd)
    __attribute__((noreturn));
char **exec_sh_argv(char *const argv[]);
/* Records which signals the agent handles or ignores (after it set them up). */
void proc_note_signals(void);
/* In a child: those back to SIG_DFL, then every signal unblocked. */
void child_reset_signals(void);

#endif
