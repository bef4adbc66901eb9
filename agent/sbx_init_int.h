/*
 * sbx_init_int.h - sbx_init.c's state and entry points, for the two files
 * that drive it: main.c (startup, then agent_run) and the fuzzer
 * (tests/fuzz/fuzz_agent_init.c, which feeds frames to agent_process_buf and
 * pumps the output without poll() or children). Not part of agent.h: the
 * other agent files reach the channel only through agent_send and friends.
 */
#ifndef SBX_INIT_INT_H
#define SBX_INIT_INT_H

#include <stdbool.h>
#include <sys/types.h>

#include "agent.h"

/* The input buffers' capacity: the largest frame and room for the next read. */
#define IBUF_CAP (SBX_CHAN_HDR + SBX_CHAN_MAX_PAYLOAD + (64u << 10))

struct agent_state {
    struct proc *procs[AGENT_MAX_PROCS];
    size_t nprocs;
    size_t rr; /* round-robin start for output fairness */
    struct buf ibuf;
    bool in_open;    /* stdin still read */
    bool in_resync;  /* discarding input until a PING frame */
    struct buf dbuf; /* input from agent_out.dfd */
    int sigpipe[2];  /* signal handler -> loop (main.c makes it) */
    pid_t main_pid;
    bool main_exited;
    int main_status;
};

/* sbx-init's state (sbx_init.c); main.c fills in the startup fields. */
extern struct agent_state agent;

/* The poll() loop: frames in and out, children, signals, timers. Never returns. */
void agent_run(void) __attribute__((noreturn));
/* Queues HELLO {version, procs:[...]}: at startup and after every PING. */
void agent_send_hello(void);

/* For the fuzzer: one pass of the loop's frame handling without the loop. */

/* Handles the complete frames in `in` (the direct socket's input if direct)
 * while the output queue has room. */
void agent_process_buf(struct buf *in, bool direct);
/* Frames ring bytes against credit; EXIT once an exited process sent all. */
void agent_pump_output(void);
/* Takes p out of the process table and frees it. */
void agent_remove_proc(struct proc *p);

#endif
