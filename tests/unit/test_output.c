/*
 * test_output.c - daemon/core/output.c in-process, with the kit's provider
 * (fakeprov.h) whose processes print only what the test hands them: the time
 * marks of the replay ring (issue 19) stay within their bound and are
 * counted in the retained bytes, recent output keeps its exact time and
 * old output an upper bound, since starts the replay where it should, and
 * a timed replay carries times and orders the two streams as they came.
 * What leaves the core is checked as the typed events (events.h) a
 * recording table here gets, not as wire text (that is rpc/notify.c's).
 */
#include <signal.h>
#include <time.h>

#include "daemon.h"
#include "fakeprov.h"
#include "core/events.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"
#include "wallclock.h"

/* Waits until the wall clock has moved past t, so each chunk has a time of
 * its own. */
static int64_t after(int64_t t)
{
    int64_t n;
    while ((n = wallclock_now_ns()) <= t)
        ;
    return n;
}

/* A follower that keeps the pieces the events table gets for it. */
struct lines {
    struct follower f;
    struct piece {
        int stream;
        char data[64];
        int64_t ns;
    } got[8];
    int n;
};
static void keep(struct lines *l, const struct out_piece *pc)
{
    if (l->n < 8) {
        struct piece *g = &l->got[l->n];
        g->stream = pc->stream;
        snprintf(g->data, sizeof(g->data), "%.*s", (int)pc->len, (const char *)pc->data);
        g->ns = pc->ns;
    }
    l->n++;
}
static void ev_replay(struct follower *f, struct process *p, const struct out_piece *pc,
                      enum out_enc enc, int timed)
{
    keep((struct lines *)f, pc);
}
static void ev_output(struct process *p, const struct out_piece *pc)
{
    for (struct sub *s = p->subs; s; s = s->pnext)
        keep((struct lines *)s->f, pc);
}
static const struct core_events test_events = {.output = ev_output, .replay = ev_replay};

/* -- tests ----------------------------------------------------------------- */

static int marks_ordered(const struct tmarks *mk)
{
    for (size_t i = 1; i < mk->len; i++) {
        const struct tmark *a = &mk->m[mk->start + i - 1], *b = a + 1;
        if (a->off >= b->off || a->ns >= b->ns)
            return 0;
    }
    return 1;
}

static void test_marks_bounded(void)
{
    struct sandbox *sb = fakeprov_sandbox("marks", 0, NULL);
    struct process *p = fakeprov_process(sb, "run"); /* runs until killed */
    size_t r0 = process_retained_total();
    int64_t t = 0, t600 = 0, t990 = 0;
    for (int i = 0; i < 1000; i++) {
        t = after(t);
        if (i == 600)
            t600 = t;
        if (i == 990)
            t990 = t;
        process_output(p, SBX_STREAM_STDOUT, "x", 1);
    }
    const struct pstream *st = &p->out[0];
    test_cond("a thousand one-byte chunks keep at most max marks",
              st->marks.max == 32 && st->marks.len <= 32 && st->marks.cap <= 32);
    test_eq_int("the marks are counted in the retained bytes",
                process_retained_total() - r0, st->ring.cap + output_marks_bytes(st));
    test_cond("marks stay ordered by offset and time", marks_ordered(&st->marks));
    test_cond("the first mark covers the oldest byte",
              st->marks.m[st->marks.start].off <= st->total - st->ring.len);

    struct lines l = {0};
    struct replay_opts o = {.since_ns = t990};
    json_t *r = process_replay(p, &l.f, &o);
    test_eq_int("since a recent chunk: the replay starts exactly there",
                json_integer_value(json_object_get(r, "stdout_start")), 990);
    json_decref(r);
    o.since_ns = t600;
    r = process_replay(p, &l.f, &o);
    json_int_t s600 = json_integer_value(json_object_get(r, "stdout_start"));
    test_cond("since an old chunk: never later than it (an upper bound of its time)",
              s600 <= 600);
    json_decref(r);
    o.since_ns = after(t);
    r = process_replay(p, &l.f, &o);
    test_eq_int("since now: nothing, the start at the end",
                json_integer_value(json_object_get(r, "stdout_start")), 1000);
    json_decref(r);

    sbx_err_t err = {0};
    process_kill(p, SIGKILL, &err);
    test_cond("an exited record still holds them",
              process_retained_total() - r0 >= st->ring.cap + output_marks_bytes(st));
    process_free(p);
    test_eq_int("freeing the record gives the bytes back", process_retained_total(), r0);
    sandbox_destroy(sb, NULL, NULL);
}

static void test_timed_replay(void)
{
    struct sandbox *sb = fakeprov_sandbox("timed", 0, NULL);
    struct process *p = fakeprov_process(sb, "run"); /* runs until killed */
    int64_t t = after(0);
    process_output(p, SBX_STREAM_STDOUT, "a\n", 2);
    t = after(t);
    process_output(p, SBX_STREAM_STDERR, "b\n", 2);
    t = after(t);
    process_output(p, SBX_STREAM_STDOUT, "c\n", 2);

    struct lines l = {0};
    struct replay_opts o = {.timestamps = 1};
    json_decref(process_replay(p, &l.f, &o));
    test_cond("timed: three pieces, stdout and stderr in the order they came",
              l.n == 3 && strcmp(l.got[0].data, "a\n") == 0 && l.got[1].stream == 1 &&
                  strcmp(l.got[1].data, "b\n") == 0 && strcmp(l.got[2].data, "c\n") == 0);
    test_cond("each timed piece carries its time, in order",
              l.got[0].ns > 0 && l.got[0].ns < l.got[1].ns && l.got[1].ns < l.got[2].ns &&
                  l.got[2].ns <= wallclock_now_ns());
    struct lines u = {0};
    struct replay_opts uo = {0};
    json_decref(process_replay(p, &u.f, &uo));
    test_cond("untimed: stdout whole, then stderr, without times",
              u.n == 2 && strcmp(u.got[0].data, "a\nc\n") == 0 && u.got[0].ns == 0 &&
                  strcmp(u.got[1].data, "b\n") == 0);

    /* Live: a time only when a follower asked for times. */
    struct lines lu = {0}, lt = {0};
    process_subscribe(p, &lu.f, ENC_UTF8, 0);
    process_output(p, SBX_STREAM_STDOUT, "d", 1);
    test_cond("live, no follower asked: no time", lu.n == 1 && lu.got[0].ns == 0);
    process_subscribe(p, &lt.f, ENC_UTF8, 1);
    int64_t before = wallclock_now_ns();
    process_output(p, SBX_STREAM_STDOUT, "e", 1);
    test_cond("live, a follower asked: the piece's time",
              lt.n == 1 && lt.got[0].ns >= before && lu.n == 2);
    sbx_err_t err = {0};
    process_kill(p, SIGKILL, &err);
    sandbox_destroy(sb, NULL, NULL);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fakeprov_setup();
    D->cfg.replay_bytes = 4096; /* room for max(16, 4096 / 128) = 32 marks */
    core_events_set(&test_events);
    test_marks_bounded();
    test_timed_replay();
    core_events_set(NULL);
    fakeprov_teardown();
    return test_report();
}
