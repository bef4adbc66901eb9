/*
 * agent_kit.h - what the tests of build/sbx-init share (test_agent.c: the
 * channel, processes, credit, malformed input; test_agent_init.c: the direct
 * socket, SIGTERM, tini mode, PID 1): the agent as a child process with pipes
 * for stdin/stdout, its frames, and /proc inspection.
 *
 * Linked into both binaries (Makefile). It counts no tests: testhelp.h's
 * counters are per file, so the checks stay in the test files.
 */
#ifndef SBX_AGENT_KIT_H
#define SBX_AGENT_KIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The agent binary under test, -v, and a scratch folder (agent_kit_main). */
extern const char *agent_path;
extern bool verbose;
extern char tmpdir[];

/*
 * What both mains start with: [-v] [path/to/sbx-init] from argv; without a
 * path $SBX_INIT, else ../sbx-init next to this binary's directory
 * (build/tests/test_agent -> build/sbx-init), else build/sbx-init. SIGPIPE
 * ignored, tmpdir made. 0; -1 when the agent is not there (printed); 1 when
 * tmpdir cannot be made.
 */
int agent_kit_main(int argc, char **argv);

/* Removes tmpdir. */
void agent_kit_end(void);

struct dbuf {
    uint8_t *data;
    size_t len, cap;
};

struct agent {
    pid_t pid;   /* our child: the agent, or unshare wrapping it */
    int in, out; /* its stdin (we write), its stdout (we read) */
    struct dbuf rx;
    size_t rx_off;
    int logs, errors; /* LOG and ERROR frames seen */
};

struct frame {
    uint8_t type;
    uint32_t proc;
    uint8_t *data; /* points into a private copy, NUL-terminated */
    size_t len;
};

/* Everything one process sent until its EXIT. */
struct run {
    struct dbuf out, err;
    json_t *exit; /* NULL when no EXIT came */
    int os_pid;
    bool started;
    size_t frames;
    size_t max_uncredited; /* most output bytes seen beyond the credit we granted */
    int64_t ms;            /* SPAWN to EXIT */
    bool order_ok;         /* no output after EXIT, STARTED first */
};

int64_t mono_ms(void);

void sleep_ms(int ms);

void dbuf_add(struct dbuf *b, const void *p, size_t n);

void dbuf_free(struct dbuf *b);

int agent_start(struct agent *a, const char *const argv[]);

int agent_start_plain(struct agent *a);

/* Waits up to ms for the agent (our child) to exit; returns the wait status or -1. */
int agent_wait(struct agent *a, int ms);

void agent_close(struct agent *a);

int write_all(int fd, const void *p, size_t n);

int send_frame(struct agent *a, uint8_t type, uint32_t proc, const void *p, size_t n);

int send_str(struct agent *a, uint8_t type, uint32_t proc, const char *s);

int send_u32(struct agent *a, uint8_t type, uint32_t proc, uint32_t v);

/*
 * Next frame within ms: 1, 0 on timeout, -1 on EOF or a bad header. LOG and
 * ERROR frames are counted (and shown with -v) but returned like the rest.
 */
int recv_frame(struct agent *a, struct frame *f, int ms);

/* Waits for a frame of this type and proc, dropping others. */
int expect(struct agent *a, uint8_t type, uint32_t proc, struct frame *f, int ms);

json_t *frame_json(const struct frame *f);

json_int_t jint(json_t *o, const char *k);

bool jtrue(json_t *o, const char *k);

bool jfalse(json_t *o, const char *k);

const char *jstr(json_t *o, const char *k);

void run_free(struct run *r);

/*
 * Collects proc's frames until EXIT or ms pass. With credit, every output
 * frame is acknowledged with CREDIT of its length, like the daemon does.
 */
void collect(struct agent *a, uint32_t proc, struct run *r, bool credit, int ms);

void spawn_run(struct agent *a, uint32_t proc, const char *json, struct run *r, int ms);

/* Reads state, ppid and pgrp of pid from /proc; -1 if it is gone. */
int proc_stat(int pid, char *state, int *ppid, int *pgrp);

/* Processes whose process group is pgrp (zombies included). */
int count_group(int pgrp);

/* Children of parent in state Z, and all its children. */
void count_children(int parent, int *zombies, int *all);

bool wait_group_size(int pgrp, int want, int ms);

#endif
