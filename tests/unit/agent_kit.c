/*
 * agent_kit.c - the sbx-init tests' shared helpers (agent_kit.h).
 */
#include "agent_kit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sbx_chan.h"

const char *agent_path = "build/sbx-init";
bool verbose;
char tmpdir[] = "/tmp/sbx-agent-test-XXXXXX";

int agent_kit_main(int argc, char **argv)
{
    /* B/tests/test_agent finds B/sbx-init (build, build-asan, ...). */
    static char sibling[4096];
    const char *slash = strrchr(argv[0], '/');
    if (slash && (size_t)(slash - argv[0]) < sizeof(sibling) - 32) {
        snprintf(sibling, sizeof(sibling), "%.*s/../sbx-init", (int)(slash - argv[0]),
                 argv[0]);
        if (access(sibling, X_OK) == 0)
            agent_path = sibling;
    }
    if (getenv("SBX_INIT"))
        agent_path = getenv("SBX_INIT");
    for (int k = 1; k < argc; k++) {
        if (strcmp(argv[k], "-v") == 0)
            verbose = true;
        else
            agent_path = argv[k];
    }
    signal(SIGPIPE, SIG_IGN);
    if (access(agent_path, X_OK) != 0) {
        printf("sbx-init not found at %s (build it with `make build/sbx-init`)\n",
               agent_path);
        return -1;
    }
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    return 0;
}

void agent_kit_end(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* ---- helpers ------------------------------------------------------------- */

/* ---- the agent under test ------------------------------------------------ */

/* ---- /proc inspection ---------------------------------------------------- */

int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

void dbuf_add(struct dbuf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->data = realloc(b->data, cap);
        if (!b->data)
            abort();
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void dbuf_free(struct dbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

int agent_start(struct agent *a, const char *const argv[])
{
    int in[2], out[2];
    memset(a, 0, sizeof(*a));
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
        return -1;
    a->pid = fork();
    if (a->pid < 0)
        return -1;
    if (a->pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        execv(argv[0], (char *const *)argv);
        perror(argv[0]);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    a->in = in[1];
    a->out = out[0];
    fcntl(a->out, F_SETFL, O_NONBLOCK);
    return 0;
}

int agent_start_plain(struct agent *a)
{
    const char *argv[] = {agent_path, NULL};
    return agent_start(a, argv);
}

/* Waits up to ms for the agent (our child) to exit; returns the wait status or -1. */
int agent_wait(struct agent *a, int ms)
{
    int64_t until = mono_ms() + ms;
    int st;
    for (;;) {
        pid_t r = waitpid(a->pid, &st, WNOHANG);
        if (r == a->pid)
            return st;
        if (r < 0 || mono_ms() > until)
            return -1;
        sleep_ms(5);
    }
}

void agent_close(struct agent *a)
{
    if (a->in >= 0)
        close(a->in);
    a->in = -1;
    if (agent_wait(a, 3000) < 0) {
        kill(a->pid, SIGKILL);
        waitpid(a->pid, NULL, 0);
    }
    close(a->out);
    dbuf_free(&a->rx);
}

int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int send_frame(struct agent *a, uint8_t type, uint32_t proc, const void *p, size_t n)
{
    uint8_t hdr[SBX_CHAN_HDR];
    sbx_chan_hdr_encode(hdr, type, proc, (uint32_t)n);
    if (write_all(a->in, hdr, sizeof(hdr)) < 0)
        return -1;
    return n ? write_all(a->in, p, n) : 0;
}

int send_str(struct agent *a, uint8_t type, uint32_t proc, const char *s)
{
    return send_frame(a, type, proc, s, strlen(s));
}

int send_u32(struct agent *a, uint8_t type, uint32_t proc, uint32_t v)
{
    uint8_t b[4];
    sbx_chan_put_u32(b, v);
    return send_frame(a, type, proc, b, 4);
}

/*
 * Next frame within ms: 1, 0 on timeout, -1 on EOF or a bad header. LOG and
 * ERROR frames are counted (and shown with -v) but returned like the rest.
 */
int recv_frame(struct agent *a, struct frame *f, int ms)
{
    int64_t until = mono_ms() + ms;
    for (;;) {
        size_t avail = a->rx.len - a->rx_off;
        if (avail >= SBX_CHAN_HDR) {
            struct sbx_chan_hdr h;
            if (sbx_chan_hdr_decode(&h, a->rx.data + a->rx_off) < 0)
                return -1;
            if (avail >= SBX_CHAN_HDR + h.len) {
                static struct dbuf copy;
                copy.len = 0;
                dbuf_add(&copy, a->rx.data + a->rx_off + SBX_CHAN_HDR, h.len);
                a->rx_off += SBX_CHAN_HDR + h.len;
                if (a->rx_off == a->rx.len)
                    a->rx_off = a->rx.len = 0;
                f->type = h.type;
                f->proc = h.proc;
                f->data = copy.data;
                f->len = h.len;
                if (h.type == SBX_CHAN_LOG)
                    a->logs++;
                if (h.type == SBX_CHAN_ERROR)
                    a->errors++;
                if (verbose || h.type == SBX_CHAN_LOG || h.type == SBX_CHAN_ERROR)
                    if (verbose || getenv("SBX_TEST_SHOWLOG"))
                        fprintf(stderr, "  <- %s proc %u len %zu %.*s\n",
                                sbx_chan_type_name(h.type), h.proc, f->len,
                                f->len > 200 ? 200 : (int)f->len,
                                h.type == SBX_CHAN_STDOUT || h.type == SBX_CHAN_STDERR
                                    ? ""
                                    : (const char *)f->data);
                return 1;
            }
        }
        if (a->rx_off > 0 && a->rx_off == a->rx.len)
            a->rx_off = a->rx.len = 0;
        int64_t left = until - mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd pfd = {.fd = a->out, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno != EINTR)
            return -1;
        if (r <= 0)
            continue;
        uint8_t tmp[65536];
        ssize_t n = read(a->out, tmp, sizeof(tmp));
        if (n == 0)
            return -1;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            return -1;
        }
        dbuf_add(&a->rx, tmp, (size_t)n);
    }
}

/* Waits for a frame of this type and proc, dropping others. */
int expect(struct agent *a, uint8_t type, uint32_t proc, struct frame *f, int ms)
{
    int64_t until = mono_ms() + ms;
    for (;;) {
        int64_t left = until - mono_ms();
        int r = recv_frame(a, f, left > 0 ? (int)left : 0);
        if (r <= 0)
            return r;
        if (f->type == type && f->proc == proc)
            return 1;
    }
}

json_t *frame_json(const struct frame *f)
{
    return json_loadb((const char *)f->data, f->len, 0, NULL);
}

json_int_t jint(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : -999999;
}

bool jtrue(json_t *o, const char *k)
{
    return json_is_true(json_object_get(o, k));
}

bool jfalse(json_t *o, const char *k)
{
    return json_is_false(json_object_get(o, k));
}

const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : "";
}

void run_free(struct run *r)
{
    dbuf_free(&r->out);
    dbuf_free(&r->err);
    if (r->exit)
        json_decref(r->exit);
    memset(r, 0, sizeof(*r));
}

/*
 * Collects proc's frames until EXIT or ms pass. With credit, every output
 * frame is acknowledged with CREDIT of its length, like the daemon does.
 */
void collect(struct agent *a, uint32_t proc, struct run *r, bool credit, int ms)
{
    int64_t t0 = mono_ms(), until = t0 + ms;
    r->order_ok = true;
    for (;;) {
        struct frame f;
        int64_t left = until - mono_ms();
        if (left <= 0 || recv_frame(a, &f, (int)left) <= 0)
            break;
        if (f.proc != proc)
            continue;
        r->frames++;
        switch (f.type) {
        case SBX_CHAN_STARTED: {
            json_t *j = frame_json(&f);
            r->os_pid = j ? (int)jint(j, "os_pid") : -1;
            if (r->out.len || r->err.len)
                r->order_ok = false;
            r->started = true;
            json_decref(j);
            break;
        }
        case SBX_CHAN_STDOUT:
        case SBX_CHAN_STDERR:
            dbuf_add(f.type == SBX_CHAN_STDOUT ? &r->out : &r->err, f.data, f.len);
            if (credit)
                send_u32(a, SBX_CHAN_CREDIT, proc, (uint32_t)f.len);
            break;
        case SBX_CHAN_EXIT:
            r->exit = frame_json(&f);
            r->ms = mono_ms() - t0;
            return;
        }
    }
    r->ms = mono_ms() - t0;
}

void spawn_run(struct agent *a, uint32_t proc, const char *json, struct run *r, int ms)
{
    memset(r, 0, sizeof(*r));
    send_str(a, SBX_CHAN_SPAWN, proc, json);
    collect(a, proc, r, true, ms);
}

/* Reads state, ppid and pgrp of pid from /proc; -1 if it is gone. */
int proc_stat(int pid, char *state, int *ppid, int *pgrp)
{
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return -1;
    size_t n = fread(line, 1, sizeof(line) - 1, fp);
    fclose(fp);
    line[n] = '\0';
    char *rp = strrchr(line, ')');
    if (!rp || sscanf(rp + 2, "%c %d %d", state, ppid, pgrp) != 3)
        return -1;
    return 0;
}

/* Processes whose process group is pgrp (zombies included). */
int count_group(int pgrp)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = atoi(e->d_name);
        char st;
        int ppid, pg;
        if (pid > 0 && proc_stat(pid, &st, &ppid, &pg) == 0 && pg == pgrp)
            n++;
    }
    closedir(d);
    return n;
}

/* Children of parent in state Z, and all its children. */
void count_children(int parent, int *zombies, int *all)
{
    *zombies = *all = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = atoi(e->d_name);
        char st;
        int ppid, pg;
        if (pid > 0 && proc_stat(pid, &st, &ppid, &pg) == 0 && ppid == parent) {
            (*all)++;
            if (st == 'Z')
                (*zombies)++;
        }
    }
    closedir(d);
}

bool wait_group_size(int pgrp, int want, int ms)
{
    int64_t until = mono_ms() + ms;
    while (mono_ms() < until) {
        if (count_group(pgrp) == want)
            return true;
        sleep_ms(10);
    }
    return count_group(pgrp) == want;
}
