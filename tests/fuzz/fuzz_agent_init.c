/*
 * fuzz_agent_init.c - sbx-init's end of the agent protocol: the input is
 * the byte stream the daemon writes to the agent's stdin, handled by
 * sbx_init.c's own frame loop (agent_process_buf: header decode, resync on a
 * malformed header, SPAWN validation through the agent's JSON parser,
 * STDIN, KILL, CREDIT, REPLAY, FORGET, PING/HELLO, DIRECT, SNAPSHOT), then
 * the output pump (agent_pump_output) that frames ring bytes against credit.
 * The agent's state and those entry points come from agent/sbx_init_int.h;
 * the harness links every agent file but main.c (startup).
 *
 * Three functions are replaced at link time (the Makefile's -Wl,--wrap): the
 * agent's calls to proc_spawn reach __wrap_proc_spawn, which forks nothing:
 * the process "runs" with pid 0 (KILL does nothing) and has some output in
 * its rings, or, for odd ids, has exited already. Its calls to fs_frame
 * reach __wrap_fs_frame: file frames (FS_REQ, FS_DATA, FS_CANCEL) go on to
 * agent/fs.c (__real_fs_frame) for real, but only for paths inside
 * FUZZ_FS_ROOT (a request naming any other path, or one with "..", is
 * dropped before fs.c sees it), so the fuzzer writes, lists, renames,
 * removes and watches in a scratch directory of its own. alog is
 * __wrap_alog: diagnostics are formatted (format bugs still show) but not
 * printed: at fuzzing rates they would be most of the run.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "sbx_init_int.h"

#define FUZZ_FS_ROOT "/tmp/sbx-init-fuzz-fs"

/* The linker's names for the wrapped functions (-Wl,--wrap=NAME). */
struct proc *__wrap_proc_spawn(uint32_t id, const struct spawn_req *req);
void __wrap_fs_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t n);
void __real_fs_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t n);
void __wrap_alog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#include <ftw.h>
#include <sys/stat.h>

/* A path the fuzzer may touch: inside FUZZ_FS_ROOT, without "..". */
static bool fuzz_path_ok(const struct jval *v)
{
    if (!v)
        return true;
    if (v->type != J_STR)
        return true; /* fs.c refuses it itself */
    size_t rl = strlen(FUZZ_FS_ROOT);
    return v->len >= rl && memcmp(v->str, FUZZ_FS_ROOT, rl) == 0 &&
           (v->str[rl] == '/' || v->str[rl] == '\0') && !strstr(v->str, "..");
}

void __wrap_fs_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t n)
{
    if (type == SBX_CHAN_FS_REQ) {
        char err[64];
        struct jval *q = json_parse((const char *)payload, n, err, sizeof(err));
        bool ok = !q || q->type != J_OBJ ||
                  (fuzz_path_ok(json_get(q, "path")) && fuzz_path_ok(json_get(q, "to")));
        json_free(q);
        if (!ok)
            return;
    }
    __real_fs_frame(type, id, payload, n);
}

static int fuzz_rm(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP)
        rmdir(p);
    else
        unlink(p);
    return 0;
}

void __wrap_alog(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct proc *__wrap_proc_spawn(uint32_t id, const struct spawn_req *req)
{
    struct proc *p = xcalloc(1, sizeof(*p));
    p->id = id;
    p->command = xstrndup(req->argv[0], strlen(req->argv[0]));
    p->window = req->window;
    p->credit = req->window;
    p->in_fd = -1;
    for (int s = 0; s < 2; s++) {
        p->out[s].fd = -1;
        p->out[s].drain_limit = UINT64_MAX;
    }
    static const char out[] = "some output\n", err[] = "an error\n";
    proc_ring_write(p, 0, (const uint8_t *)out, sizeof(out) - 1);
    proc_ring_write(p, 1, (const uint8_t *)err, sizeof(err) - 1);
    if (id % 2) {
        p->state = PROC_EXITED;
        p->exit_code = 3;
    } else {
        p->state = PROC_RUNNING;
    }
    return p;
}

static void reset(void)
{
    static unsigned runs;
    fs_reset();
    /* The scratch directory starts over now and then, so it stays small. */
    if (runs++ % 256 == 0) {
        nftw(FUZZ_FS_ROOT, fuzz_rm, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
        mkdir(FUZZ_FS_ROOT, 0700);
    }
    while (agent.nprocs > 0)
        agent_remove_proc(agent.procs[0]);
    direct_stop();
    if (agent_out.dfd >= 0)
        close(agent_out.dfd);
    agent_out.dfd = -1;
    buf_consume(&agent.ibuf, buf_pending(&agent.ibuf));
    buf_deinit(&agent_out.q);
    buf_deinit(&agent.dbuf);
    agent.in_resync = false;
    agent_out.dead = false;
    agent.rr = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        /* DIRECT listens in a private directory of ours, not /.sbx/run. */
        char dir[] = "/tmp/sbx-init-fuzz.XXXXXX";
        if (!mkdtemp(dir))
            abort();
        setenv("SBX_INIT_RUNDIR", dir, 1);
        agent_out.dfd = -1;
        agent.in_open = true;
        /* main() sizes the input buffer once for the largest frame. */
        if (buf_reserve(&agent.ibuf, IBUF_CAP) < 0)
            abort();
    }
    if (size > IBUF_CAP - SBX_CHAN_HDR)
        size = IBUF_CAP - SBX_CHAN_HDR; /* what one read could bring */
    if (buf_append(&agent.ibuf, data, size) < 0)
        abort();
    /* As agent_run() does: frames in while the output has room, output pumped and
     * "written" (dropped) so that the loop goes on. */
    for (int rounds = 0; rounds < 1024; rounds++) {
        size_t before = buf_pending(&agent.ibuf);
        agent_process_buf(&agent.ibuf, false);
        agent_pump_output();
        fs_pump();
        fs_timers(now_ms());
        size_t out = buf_pending(&agent_out.q);
        buf_consume(&agent_out.q, out);
        if (buf_pending(&agent.ibuf) == before && out == 0)
            break;
    }
    reset();
    return 0;
}
