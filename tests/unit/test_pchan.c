/*
 * test_pchan.c - daemon/io/pchan.c, the process channel's dispatcher: frames
 * to the handler of their type, per-process frames only for a pid the owner
 * knows, output to the sink with credit at the batch (held while the output
 * is blocked), STARTED, LOG under its rate limit, MORE reassembly with its
 * limit, and hostile frames: an unknown pid, a type nobody handles, output
 * far beyond the window (the owed count saturates, never wraps), an oversize
 * MORE message and an oversize exit record.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "daemon.h"
#include "io/pchan.h"
#include "testhelp.h"

static struct daemon d;

/* ---- a fake owner: two processes (pids 1 and 2), a recorded peer ----------------- */

struct fproc {
    uint32_t pid;
    int live;
    struct pchan_proc pp;
    size_t out[2]; /* bytes of stdout, stderr */
    long os_pid;
    int blocked;
};

static struct fproc procs[2];
static int sent_credits;
static uint32_t last_credit, last_credit_pid;
static int send_fails;

static void s_output(void *proc, int is_stderr, const uint8_t *data, size_t len)
{
    ((struct fproc *)proc)->out[is_stderr ? 1 : 0] += len;
}

static int s_blocked(void *proc)
{
    return ((struct fproc *)proc)->blocked;
}

static void s_started(void *proc, long os_pid)
{
    ((struct fproc *)proc)->os_pid = os_pid;
}

static const struct pchan_sink sink = {s_output, s_blocked, s_started};

static struct pchan_proc *lookup(uint32_t pid, void **proc_out, void *privdata)
{
    for (int i = 0; i < 2; i++)
        if (procs[i].pid == pid && procs[i].live) {
            *proc_out = &procs[i];
            return &procs[i].pp;
        }
    *proc_out = NULL;
    return NULL;
}

static int send_frame(uint8_t type, uint32_t proc, const void *data, size_t len,
                      void *privdata)
{
    if (send_fails)
        return -1;
    if (type == SBX_CHAN_CREDIT && len == 4) {
        sent_credits++;
        last_credit = sbx_chan_get_u32(data);
        last_credit_pid = proc;
    }
    return 0;
}

/* What the registered handlers saw. */
static int got_exit, got_hello, got_fs;
static uint32_t exit_len;
static char exit_text[128];

static void on_exit_frame(struct pchan *pc, const struct sbx_chan_hdr *h,
                          const uint8_t *payload, struct pchan_proc *pp, void *proc,
                          void *privdata)
{
    got_exit++;
    exit_len = h->len;
    snprintf(exit_text, sizeof(exit_text), "%.*s", (int)(h->len < 100 ? h->len : 100),
             (const char *)payload);
}

static void on_hello(struct pchan *pc, const struct sbx_chan_hdr *h,
                     const uint8_t *payload, struct pchan_proc *pp, void *proc,
                     void *privdata)
{
    got_hello += pp == NULL && proc == NULL;
}

static void on_fs(struct pchan *pc, const struct sbx_chan_hdr *h, const uint8_t *payload,
                  struct pchan_proc *pp, void *proc, void *privdata)
{
    got_fs += *(int *)privdata;
}

static struct pchan pc;

static void reset(void)
{
    memset(procs, 0, sizeof(procs));
    procs[0] = (struct fproc){.pid = 1, .live = 1};
    procs[1] = (struct fproc){.pid = 2, .live = 1};
    sent_credits = 0;
    last_credit = last_credit_pid = 0;
    send_fails = 0;
    got_exit = got_hello = got_fs = 0;
    exit_len = 0;
    exit_text[0] = '\0';
    pchan_deinit(&pc);
    pchan_init(&pc, &sink, 1024 * 1024, lookup, send_frame, NULL, "test peer");
    pchan_on(&pc, SBX_CHAN_EXIT, PCHAN_PROC, on_exit_frame, NULL);
    pchan_on(&pc, SBX_CHAN_HELLO, 0, on_hello, NULL);
}

static void frame(uint8_t type, uint32_t proc, const void *payload, uint32_t len)
{
    struct sbx_chan_hdr h = {.type = type, .proc = proc, .len = len};
    pchan_dispatch(&pc, &h, payload);
}

/* ---- tests ------------------------------------------------------------------------- */

static void test_output_and_credit(void)
{
    reset();
    static uint8_t buf[200 * 1024];
    frame(SBX_CHAN_STDOUT, 1, buf, sizeof(buf));
    test_eq_int("output: STDOUT bytes reach pid 1's stdout", procs[0].out[0],
                sizeof(buf));
    test_eq_int("credit: none below the batch (window/4)", sent_credits, 0);
    frame(SBX_CHAN_STDERR, 1, buf, 100 * 1024);
    test_eq_int("output: STDERR bytes reach stderr", procs[0].out[1], 100 * 1024);
    test_eq_int("credit: one CREDIT at the batch", sent_credits, 1);
    test_eq_int("credit: it returns every owed byte", last_credit, 300 * 1024);
    test_eq_int("credit: to the process it is for", last_credit_pid, 1);
    test_eq_int("credit: nothing owed after it", procs[0].pp.owed, 0);
    test_eq_int("output: pid 2 saw nothing", procs[1].out[0] + procs[1].out[1], 0);
    frame(SBX_CHAN_STDOUT, 2, buf, 10);
    pchan_credit(&pc, &procs[1].pp, &procs[1], 2, 1);
    test_cond("credit: forced, any owed amount goes",
              sent_credits == 2 && last_credit == 10);
}

static void test_backpressure(void)
{
    reset();
    static uint8_t buf[300 * 1024];
    procs[0].blocked = 1;
    frame(SBX_CHAN_STDOUT, 1, buf, sizeof(buf));
    test_eq_int("backpressure: no credit while the output is blocked", sent_credits, 0);
    test_eq_int("backpressure: the bytes stay owed", procs[0].pp.owed, sizeof(buf));
    procs[0].blocked = 0;
    pchan_credit(&pc, &procs[0].pp, &procs[0], 1, 1);
    test_cond("backpressure: resumed, the owed credit goes out",
              sent_credits == 1 && last_credit == sizeof(buf));
    frame(SBX_CHAN_STDOUT, 1, buf, sizeof(buf));
    send_fails = 1;
    frame(SBX_CHAN_STDOUT, 1, buf, 1);
    test_cond("credit: a failed send keeps the credit owed", procs[0].pp.owed > 0);
    procs[0].pp.mute = 1;
    size_t before = procs[0].out[0];
    frame(SBX_CHAN_STDOUT, 1, buf, 100);
    test_eq_int("mute: output of a muted process is dropped", procs[0].out[0], before);
}

static void test_hostile(void)
{
    reset();
    static uint8_t buf[64];
    frame(SBX_CHAN_STDOUT, 7, buf, sizeof(buf));
    frame(SBX_CHAN_EXIT, 0, "{}", 2);
    test_eq_int("bad pid: frames for unknown pids are counted and dropped",
                pc.unknown_pid, 2);
    test_cond("bad pid: no output and no exit handler ran",
              procs[0].out[0] == 0 && got_exit == 0);
    procs[1].live = 0;
    frame(SBX_CHAN_STDOUT, 2, buf, sizeof(buf));
    test_eq_int("bad pid: an exited process gets nothing", procs[1].out[0], 0);
    frame(0xee, 1, buf, sizeof(buf));
    frame(SBX_CHAN_SPAWN, 1, buf, sizeof(buf));
    test_eq_int("unknown type: counted as unexpected, nothing else", pc.unexpected, 2);
    /* A peer sending past its window while the reader is stuck: the count of
     * owed bytes saturates instead of wrapping to a small credit. */
    procs[0].blocked = 1;
    procs[0].pp.owed = UINT32_MAX - 10;
    frame(SBX_CHAN_STDOUT, 1, buf, sizeof(buf));
    test_eq_int("credit overflow: owed saturates at UINT32_MAX", procs[0].pp.owed,
                UINT32_MAX);
    test_eq_int("credit overflow: and no credit goes while blocked", sent_credits, 0);
}

static void test_started_hello_log(void)
{
    reset();
    frame(SBX_CHAN_STARTED, 2, "{\"os_pid\": 4242}", 16);
    test_cond("STARTED: os_pid reaches the process",
              procs[1].os_pid == 4242 && procs[1].pp.started);
    frame(SBX_CHAN_STARTED, 1, "{\"os_pid\": \"x\"}", 15);
    test_cond("STARTED: a non-integer os_pid is not passed on",
              procs[0].os_pid == 0 && procs[0].pp.started);
    frame(SBX_CHAN_HELLO, 99, "{}", 2);
    test_eq_int("channel frames: HELLO reaches its handler without a pid", got_hello, 1);
    struct log_limit l = {0};
    pchan_set_log(&pc, &l, "src", 300);
    for (int i = 0; i < 1000; i++)
        frame(SBX_CHAN_LOG, 0, "hello", 5);
    test_eq_int("LOG: lines over the per-second limit are dropped", l.dropped,
                1000 - d.cfg.agent_log_lines_per_s);
    static int two = 2;
    pchan_on_range(&pc, SBX_CHAN_FS_REQ, 0x6f, 0, on_fs, &two);
    frame(SBX_CHAN_FS_RESULT, 3, "{}", 2);
    frame(0x6f, 0, NULL, 0);
    test_eq_int("registration: a range goes to its own handler and privdata", got_fs, 4);
}

static void test_more(void)
{
    reset();
    pchan_set_more(&pc, 64);
    frame(SBX_CHAN_MORE, 1, "{\"exit_code\":", 13);
    frame(SBX_CHAN_EXIT, 1, "3}", 2);
    test_cond("MORE: prefixes the next frame into one message",
              got_exit == 1 && exit_len == 15 && !strcmp(exit_text, "{\"exit_code\":3}"));
    static uint8_t big[100];
    memset(big, 'x', sizeof(big));
    frame(SBX_CHAN_MORE, 1, big, sizeof(big));
    frame(SBX_CHAN_EXIT, 1, "}", 1);
    test_cond("oversize: an exit record over the limit becomes one that says so",
              got_exit == 2 && strstr(exit_text, "too large") != NULL);
    frame(SBX_CHAN_MORE, 1, big, sizeof(big));
    frame(SBX_CHAN_HELLO, 1, "{}", 2);
    test_eq_int("oversize: any other message over the limit is dropped", got_hello, 0);
    frame(SBX_CHAN_MORE, 1, "abc", 3);
    frame(SBX_CHAN_EXIT, 2, "{}", 2);
    test_cond("MORE: frames of another proc drop the partial message",
              got_exit == 3 && exit_len == 2);
    test_cond("MORE: nothing is held after a message", pc.more_len == 0 && !pc.more);
    pchan_set_more(&pc, 0);
    frame(SBX_CHAN_MORE, 1, "abc", 3);
    test_eq_int("MORE: without reassembly, a MORE frame is unexpected", pc.unexpected, 1);
}

int main(void)
{
    D = &d;
    config_init_defaults(&d.cfg);
    d.loop = EV_DEFAULT;
    log_set_level(LOG_LVL_ERROR);
    test_output_and_credit();
    test_backpressure();
    test_hostile();
    test_started_hello_log();
    test_more();
    pchan_deinit(&pc);
    return test_report();
}
