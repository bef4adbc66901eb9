/*
 * session.h - one client connection: line reader, chunked output buffer with
 * high/hard watermarks, peer identity, and what must be unhooked when it
 * goes (pending calls, process subscriptions, tool calls).
 *
 * A session is never freed inside its own call chain: session_close() marks
 * it CLOSE_ASAP and the ev_prepare hook frees it (Redis's freeClientAsync).
 */
#ifndef SBXD_SESSION_H
#define SBXD_SESSION_H

#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "io/obuf.h"
#include "rpc/rpc.h"

enum {
    SESS_CLOSE_ASAP = 1 << 0,        /* free at the next prepare */
    SESS_CLOSE_AFTER_WRITE = 1 << 1, /* stop reading; close once obuf is empty */
    SESS_CONGESTED = 1 << 2,         /* obuf over the high watermark */
    SESS_PENDING = 1 << 3,           /* in the prepare write list */
    SESS_BUSY = 1 << 4,              /* has lines or a batch left for the next slice */
};

struct batch;
struct uid_usage;

struct session {
    struct session *next, *prev;
    uint64_t id;
    int fd;
    ev_io io;
    int io_events;
    uid_t uid;
    gid_t gid;
    pid_t pid;
    int admin;
    int flags;

    char *ibuf;
    size_t ilen, icap, iscan;
    struct obuf obuf;

    /* Its JSON-RPC side: calls, batch, tool calls, followed processes. */
    struct rpc_conn conn;

    struct uid_usage *usage; /* its uid's counters (sessions, input bytes) */
    ev_tstamp last_active;   /* last byte read, for session_idle_timeout_ms */
    int parsing;             /* a large line is with the parser thread (parse.c) */
    int lines_seen;          /* a first line may be fs.stream (fs_stream.c) */
};

void session_accept(int fd);
/* Queues a JSON message (borrowed) as one line. */
void session_send(struct session *s, json_t *msg);
/* Queues an already encoded JSON text (no newline) as one line. */
void session_send_line(struct session *s, const char *text, size_t len);
/* The same for a malloc'd line the session takes over without copying
 * (a large batch reply); freed in every case. */
void session_send_line_owned(struct session *s, char *text, size_t len);
/* Queues the -32005 that replaces a reply with no room: it may take the
 * session up to limits.session_output_slack bytes past its limits (conn.h). */
void session_send_limit_line(struct session *s, const char *text, size_t len);
/* Sends a notification; params stolen. */
void session_notify(struct session *s, const char *method, json_t *params);
/* Marks the session for closing (after its obuf is written if graceful). */
void session_close(struct session *s, int graceful);
/* Frees sessions marked CLOSE_ASAP and flushes pending output. ev_prepare. */
void sessions_before_sleep(void);
void session_free_all(void);
/* Bytes a reply may still take before the session reaches its hard limit. */
size_t session_reply_room(const struct session *s);
/* Queued output of all sessions (limits.output_bytes_total). */
size_t session_output_total(void);
/* The parser thread's value for the line s handed it (see rpc_handle_value). */
void session_parsed(struct session *s, json_t *v, int depth_ok, const json_error_t *jerr);
/* Count of the sessions of uid. */
int session_count_uid(uid_t uid);
struct session *session_by_id(uint64_t id);

#endif
