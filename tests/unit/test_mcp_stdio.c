/*
 * test_mcp_stdio.c - the two bottom floors of `sbxctl mcp` on their own:
 * mcp_util (bounded buffers, UTF-8 repair) and mcp_stdio (line framing on
 * fds 0 and 1, the size bound on a line, EOF, backpressure). The transport
 * runs on real pipes dup2'd onto fds 0 and 1; the results are printed after
 * fd 1 is given back.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxctl/mcp_stdio.h"
#include "testhelp.h"

struct seen {
    char lines[8][64];
    int nlines, too_long, closed, drained;
};

static void on_line(void *d, char *line, size_t len)
{
    struct seen *s = d;
    if (s->nlines < 8)
        snprintf(s->lines[s->nlines], sizeof(s->lines[0]), "%.*s", (int)len, line);
    s->nlines++;
}
static void on_too_long(void *d)
{
    ((struct seen *)d)->too_long++;
}
static void on_closed(void *d)
{
    ((struct seen *)d)->closed++;
}
static void on_drained(void *d)
{
    ((struct seen *)d)->drained++;
}

static void test_util(void)
{
    struct mbuf b = {0};
    test_eq_int("mbuf_append takes what fits under max", mbuf_append(&b, "hello", 5, 3),
                3);
    test_eq_int("mbuf_append takes nothing at max", mbuf_append(&b, "x", 1, 3), 0);
    test_cond("mbuf keeps a NUL after the bytes",
              b.len == 3 && memcmp(b.p, "hel", 4) == 0);
    mbuf_free(&b);
    json_t *j = mbuf_string("a\xff\xc3\xa9z\xe2\x82", 7);
    test_eq_str("mbuf_string: a bad byte and a cut sequence become U+FFFD, é stays",
                json_string_value(j), "a\xef\xbf\xbd\xc3\xa9z\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(j);
    j = mbuf_string("\xed\xa0\x80", 3); /* a surrogate is not UTF-8 */
    test_eq_int("mbuf_string: a UTF-16 surrogate is three replacement characters",
                (long long)json_string_length(j), 9);
    json_decref(j);
}

/* Runs the loop until cond or about a second. */
#define RUN_UNTIL(cond)                                                                  \
    for (int __i = 0; __i < 200 && !(cond); __i++)                                       \
    ev_run(loop, EVRUN_NOWAIT), usleep(5000)

static void test_stdio(void)
{
    struct ev_loop *loop = EV_DEFAULT;
    int in[2], out[2], saved_in = dup(0), saved_out = dup(1);
    if (pipe(in) < 0 || pipe(out) < 0 || saved_in < 0 || saved_out < 0) {
        test_skip("mcp_stdio on pipes", strerror(errno));
        return;
    }
    fflush(stdout);
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(out[1]);
    struct seen s = {0};
    static const struct mstdio_cbs cbs = {on_line, on_too_long, on_closed, on_drained};
    struct mstdio io;
    mstdio_init(&io, loop, 16, &cbs, &s);

    /* framing: a line split over writes, two in one, a \r kept for the owner */
    int r1 = write(in[1], "{\"a\":", 5) == 5;
    RUN_UNTIL(0);
    int split_held = s.nlines == 0;
    r1 &= write(in[1], "1}\nsecond\n", 10) == 10;
    RUN_UNTIL(s.nlines >= 2);
    /* a line over max_message (16) is skipped once, the next one comes */
    r1 &= write(in[1], "0123456789abcdefXYZ\nok\n", 23) == 23;
    RUN_UNTIL(s.nlines >= 3);
    mstdio_send(&io, "{\"r\":1}", 7);
    char got[64] = {0};
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    ssize_t n = read(out[0], got, sizeof(got) - 1);
    int drained_after_send = s.drained > 0;

    /* backpressure: more than MSTDIO_HIGH waiting stops reading stdin */
    size_t big = MSTDIO_HIGH + 4096;
    char *blob = malloc(big);
    memset(blob, 'x', big);
    mstdio_send(&io, blob, big);
    free(blob);
    int paused = io.in_paused && !ev_is_active(&io.in_w);
    char sink[65536];
    size_t drained_bytes = 0;
    for (int i = 0; i < 2000 && mstdio_queued(&io) > 0; i++) {
        ssize_t k = read(out[0], sink, sizeof(sink));
        if (k > 0)
            drained_bytes += (size_t)k;
        ev_run(loop, EVRUN_NOWAIT);
    }
    int resumed = !io.in_paused && ev_is_active(&io.in_w);
    for (ssize_t k; (k = read(out[0], sink, sizeof(sink))) > 0;)
        drained_bytes += (size_t)k; /* what the pipe still holds */
    close(in[1]);
    RUN_UNTIL(s.closed);
    int closed = s.closed == 1 && mstdio_gone(&io);
    mstdio_fini(&io);

    fflush(stdout);
    dup2(saved_in, 0);
    dup2(saved_out, 1);
    close(saved_in);
    close(saved_out);
    close(out[0]);
    test_cond("the test's writes went through", r1);
    test_cond("half a line is held until its newline", split_held);
    test_eq_str("a line split over two writes comes whole", s.lines[0], "{\"a\":1}");
    test_eq_str("the second line of a write comes too", s.lines[1], "second");
    test_eq_int("a line over max_message is reported once", s.too_long, 1);
    test_eq_str("the line after the long one comes", s.lines[2], "ok");
    test_eq_int("three lines in all", s.nlines, 3);
    test_cond("a message goes out as one line",
              n == 8 && strcmp(got, "{\"r\":1}\n") == 0);
    test_cond("drained is reported once stdout has taken everything", drained_after_send);
    test_cond("more than MSTDIO_HIGH queued: stdin is not read", paused);
    test_cond("every queued byte reaches the reader", drained_bytes == big + 1);
    test_cond("below half the mark stdin is read again", resumed);
    test_cond("EOF on stdin is reported as closed, once", closed);
}

int main(void)
{
    test_util();
    test_stdio();
    return test_report();
}
