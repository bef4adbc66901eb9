/*
 * events.h - what the core tells the floor above it, as typed callbacks:
 * output and exits of processes to their followers, sandbox status and
 * progress to their owners, tool calls from processes. The core writes no
 * wire format; the protocol floor (rpc/notify.c) registers one table at
 * start and does all the encoding. Until a table is registered, and for
 * every member left NULL, the events are dropped (their stolen values
 * freed).
 *
 * Callbacks run on the loop, from inside core (and so provider) calls: they
 * must not call back into the core, except process_tool_result from
 * tool_call and process_output_blocked.
 */
#ifndef SBXD_EVENTS_H
#define SBXD_EVENTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/output.h"

struct process;
struct sandbox;
struct follower;

/* One piece of a process's output, valid during the call. */
struct out_piece {
    int stream; /* 0 stdout, 1 stderr */
    uint64_t offset;
    const uint8_t *data;
    size_t len;
    int valid_utf8; /* data is valid UTF-8 (checked once, by the core) */
    int64_t ns;     /* when it arrived (ns since the epoch); 0 when not asked for */
};

/* How a process ended, for its followers. */
struct exit_note {
    int exit_code, signal, timed_out, killed;
    const char *error; /* NULL: none */
    int output_incomplete;
};

struct core_events {
    /* Live output of p for every follower in p->subs (each with its own
     * encoding and timestamps). ns is set when a follower asked for times. */
    void (*output)(struct process *p, const struct out_piece *piece);
    /* A piece of p's replay for follower f alone, in encoding enc; with
     * timed, piece->ns is its time. */
    void (*replay)(struct follower *f, struct process *p, const struct out_piece *piece,
                   enum out_enc enc, int timed);
    /* p ended; its followers (p->subs) are told before they are dropped. */
    void (*exit)(struct process *p, const struct exit_note *e);
    /* sb's status changed (sb->status, sb->error): its owner is told. */
    void (*status)(struct sandbox *sb);
    /* A provider's note about sb (params stolen): progress of a start
     * (method NULL), or another notification by name (sandbox.egress). */
    void (*note)(struct sandbox *sb, const char *method, json_t *params);
    /* p calls the host tool name (a tool of its sandbox; args borrowed): the
     * answer comes back through process_tool_result, now or later. */
    void (*tool_call)(struct process *p, int64_t call, const char *name, json_t *args);
};

/* Registers the table (static storage; NULL: none). */
void core_events_set(const struct core_events *ev);
/* The table registered (never NULL: an empty one when none is). */
const struct core_events *core_events(void);

#endif
