/*
 * test_chan.c - daemon/io/chan.c: frames out of a byte stream however it is
 * cut, the header's limits (reserved bits, payload over 1 MiB), a close from
 * inside a frame callback, frames queued for sending within the write limit,
 * the JSON payloads' depth limit, and the fd mode over a socketpair (EOF,
 * a peer that does not read: bounded, then drained).
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "io/chan.h"
#include "fakeprov.h"
#include "sbx_proto.h"
#include "testhelp.h"

/* What the callbacks saw. */
struct seen {
    int frames, closes;
    uint8_t type[8];
    uint32_t proc[8], len[8];
    char first[64]; /* the first frame's payload, as text */
    const char *why;
    int close_on_frame; /* 1: chan_close from inside the first frame */
};

static void on_frame(struct chan *ch, const struct sbx_chan_hdr *h, const uint8_t *p,
                     void *data)
{
    struct seen *s = data;
    if (s->frames < 8) {
        s->type[s->frames] = h->type;
        s->proc[s->frames] = h->proc;
        s->len[s->frames] = h->len;
    }
    if (s->frames == 0)
        snprintf(s->first, sizeof(s->first), "%.*s", (int)(h->len < 60 ? h->len : 60),
                 (const char *)p);
    s->frames++;
    if (s->close_on_frame)
        chan_close(ch);
}

static void on_close(struct chan *ch, const char *why, void *data)
{
    struct seen *s = data;
    s->closes++;
    s->why = why;
}

/* A frame's bytes: header + payload, into buf; returns the length. */
static size_t frame(uint8_t *buf, uint8_t type, uint32_t proc, const char *payload)
{
    size_t n = strlen(payload);
    sbx_chan_hdr_encode(buf, type, proc, (uint32_t)n);
    memcpy(buf + SBX_CHAN_HDR, payload, n);
    return SBX_CHAN_HDR + n;
}

static void test_framing(void)
{
    struct seen s = {0};
    struct chan ch;
    chan_init_fed(&ch, on_frame, on_close, &s);
    uint8_t buf[256];
    size_t n = frame(buf, SBX_CHAN_STDOUT, 7, "hello");
    n += frame(buf + n, SBX_CHAN_STDERR, 9, "");
    n += frame(buf + n, SBX_CHAN_EXIT, 7, "{\"exit_code\":0}");
    test_eq_int("three frames fed at once are accepted", chan_feed(&ch, buf, n), 0);
    test_cond("each arrives once, in order, with type, proc and length",
              s.frames == 3 && s.type[0] == SBX_CHAN_STDOUT && s.proc[0] == 7 &&
                  s.len[0] == 5 && s.type[1] == SBX_CHAN_STDERR && s.proc[1] == 9 &&
                  s.len[1] == 0 && s.type[2] == SBX_CHAN_EXIT && s.len[2] == 15);
    test_eq_str("the payload is the bytes sent", s.first, "hello");

    /* The same bytes one at a time: nothing until a frame's last byte. */
    memset(&s, 0, sizeof(s));
    int early = 0;
    size_t first_len = SBX_CHAN_HDR + 5;
    for (size_t i = 0; i < n; i++) {
        chan_feed(&ch, buf + i, 1);
        if (i + 1 < first_len && s.frames)
            early = 1;
        if (i + 1 == first_len && s.frames != 1)
            early = 1;
    }
    test_cond("fed byte by byte: a frame arrives with its last byte, not before", !early);
    test_cond("and all three arrive whole",
              s.frames == 3 && s.len[2] == 15 && strcmp(s.first, "hello") == 0);

    /* A partial frame dropped by chan_reset_input: the next byte starts one. */
    memset(&s, 0, sizeof(s));
    chan_feed(&ch, buf, 8);
    chan_reset_input(&ch);
    chan_feed(&ch, buf, first_len);
    test_cond("after reset_input a partial frame is forgotten",
              s.frames == 1 && strcmp(s.first, "hello") == 0 && s.closes == 0);
    chan_deinit(&ch);
}

static void test_limits(void)
{
    struct seen s = {0};
    struct chan ch;
    chan_init_fed(&ch, on_frame, on_close, &s);
    /* The largest payload the protocol allows passes whole. */
    size_t big = SBX_CHAN_MAX_PAYLOAD;
    uint8_t *buf = calloc(1, SBX_CHAN_HDR + big);
    sbx_chan_hdr_encode(buf, SBX_CHAN_STDOUT, 1, (uint32_t)big);
    test_eq_int("a 1 MiB payload is accepted", chan_feed(&ch, buf, SBX_CHAN_HDR + big),
                0);
    test_cond("and arrives as one frame", s.frames == 1 && s.len[0] == big);
    /* One byte more is a broken peer: closed with a reason, nothing more read. */
    sbx_chan_hdr_encode(buf, SBX_CHAN_STDOUT, 1, (uint32_t)big + 1);
    test_eq_int("a payload over 1 MiB fails the feed", chan_feed(&ch, buf, SBX_CHAN_HDR),
                -1);
    test_cond("the close callback says why, once",
              s.closes == 1 && s.why && strstr(s.why, "invalid frame header"));
    uint8_t ok[64];
    size_t n = frame(ok, SBX_CHAN_STDOUT, 1, "x");
    test_cond("a closed chan takes no more frames",
              chan_feed(&ch, ok, n) == -1 && s.frames == 1 && s.closes == 1);
    chan_deinit(&ch);
    free(buf);

    /* Reserved header bytes must be zero. */
    memset(&s, 0, sizeof(s));
    chan_init_fed(&ch, on_frame, on_close, &s);
    n = frame(ok, SBX_CHAN_STDOUT, 1, "x");
    ok[1] = 1;
    test_cond("a frame with reserved bits set closes the chan",
              chan_feed(&ch, ok, n) == -1 && s.closes == 1 && s.frames == 0);
    chan_deinit(&ch);

    /* A close from inside a callback ends the feed there. */
    memset(&s, 0, sizeof(s));
    s.close_on_frame = 1;
    chan_init_fed(&ch, on_frame, on_close, &s);
    uint8_t two[64];
    n = frame(two, SBX_CHAN_STDOUT, 1, "a");
    n += frame(two + n, SBX_CHAN_STDOUT, 1, "b");
    test_cond("chan_close inside on_frame: no further frame, feed says -1",
              chan_feed(&ch, two, n) == -1 && s.frames == 1);
    test_eq_int("an owner's own close runs no close callback", s.closes, 0);
    chan_deinit(&ch);
}

static void test_send(void)
{
    struct seen s = {0};
    struct chan ch;
    chan_init_fed(&ch, on_frame, on_close, &s);
    test_eq_int("a frame is queued", chan_send(&ch, SBX_CHAN_STDIN, 5, "abc", 3), 0);
    test_eq_int("as header + payload", chan_pending_output(&ch), SBX_CHAN_HDR + 3);
    struct iovec iov[4];
    int n = obuf_iov(&ch.wbuf, iov, 4);
    struct sbx_chan_hdr h;
    int dec = n == 1 && sbx_chan_hdr_decode(&h, iov[0].iov_base) == 0;
    test_cond("the header says type, proc and length",
              dec && h.type == SBX_CHAN_STDIN && h.proc == 5 && h.len == 3 &&
                  memcmp((char *)iov[0].iov_base + SBX_CHAN_HDR, "abc", 3) == 0);
    chan_send_u32(&ch, SBX_CHAN_CREDIT, 5, 0x01020304);
    n = obuf_iov(&ch.wbuf, iov, 4);
    const uint8_t *u = (const uint8_t *)iov[0].iov_base + 2 * SBX_CHAN_HDR + 3;
    test_cond("a u32 payload is big-endian",
              chan_pending_output(&ch) == 2 * SBX_CHAN_HDR + 7 && u[0] == 1 && u[3] == 4);
    json_t *j = json_pack("{s:i}", "a", 1);
    chan_send_json(&ch, SBX_CHAN_SPAWN, 6, j);
    json_decref(j);
    test_eq_int("a JSON payload is compact", chan_pending_output(&ch),
                3 * SBX_CHAN_HDR + 7 + strlen("{\"a\":1}"));
    obuf_consume(&ch.wbuf, chan_pending_output(&ch));

    char *big = calloc(1, SBX_CHAN_MAX_PAYLOAD + 1);
    test_cond("a payload over 1 MiB is refused and nothing queued",
              chan_send(&ch, SBX_CHAN_STDIN, 1, big, SBX_CHAN_MAX_PAYLOAD + 1) == -1 &&
                  chan_pending_output(&ch) == 0);
    ch.wlimit = 100;
    test_eq_int("within the write limit a frame is queued",
                chan_send(&ch, SBX_CHAN_STDIN, 1, big, 80), 0);
    test_cond("past it the send fails and the queue keeps its size",
              chan_send(&ch, SBX_CHAN_STDIN, 1, big, 80) == -1 &&
                  chan_pending_output(&ch) == SBX_CHAN_HDR + 80);
    free(big);
    chan_close(&ch);
    test_eq_int("a closed chan sends nothing", chan_send(&ch, SBX_CHAN_STDIN, 1, "x", 1),
                -1);
    chan_deinit(&ch);
}

static char *nested(int arrays)
{
    char *s = malloc((size_t)arrays * 2 + 2);
    memset(s, '[', (size_t)arrays);
    s[arrays] = '1';
    memset(s + arrays + 1, ']', (size_t)arrays);
    s[2 * arrays + 1] = 0;
    return s;
}

static void test_json(void)
{
    const char *t = "{\"a\":[1,\"x\\u0000y\"]}";
    json_t *v = chan_json((const uint8_t *)t, strlen(t));
    test_cond("a JSON payload parses, NUL inside a string allowed",
              v && json_string_length(json_array_get(json_object_get(v, "a"), 1)) == 3);
    json_decref(v);
    test_cond("bad JSON is NULL", chan_json((const uint8_t *)"{\"a\":", 5) == NULL);
    test_cond("a bare scalar is a value",
              (v = chan_json((const uint8_t *)"7", 1)) && json_integer_value(v) == 7);
    json_decref(v);
    char *s = nested(SBX_MAX_JSON_DEPTH);
    v = chan_json((const uint8_t *)s, strlen(s));
    test_cond("nesting at the protocol's depth limit parses", v != NULL);
    json_decref(v);
    free(s);
    s = nested(SBX_MAX_JSON_DEPTH + 1);
    test_cond("one level deeper is refused",
              chan_json((const uint8_t *)s, strlen(s)) == NULL);
    free(s);
}

/* Runs the loop a few times without sleeping. */
static void spin(int n)
{
    for (int i = 0; i < n; i++)
        ev_run(D->loop, EVRUN_NOWAIT);
}

static void test_fd_mode(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        test_skip("fd mode over a socketpair", "no socketpair");
        return;
    }
    struct seen s = {0};
    struct chan ch;
    chan_init_fd(&ch, sv[0], on_frame, on_close, &s);
    uint8_t buf[64];
    size_t n = frame(buf, SBX_CHAN_HELLO, 0, "{}");
    test_cond("the peer's frame is written", write(sv[1], buf, n) == (ssize_t)n);
    spin(5);
    test_cond("fd mode: a frame from the peer arrives",
              s.frames == 1 && s.type[0] == SBX_CHAN_HELLO && s.len[0] == 2);
    chan_send(&ch, SBX_CHAN_STDIN, 3, "ping", 4);
    uint8_t got[64];
    ssize_t r = read(sv[1], got, sizeof(got));
    test_cond("fd mode: a sent frame is written at once",
              r == SBX_CHAN_HDR + 4 && memcmp(got + SBX_CHAN_HDR, "ping", 4) == 0 &&
                  chan_pending_output(&ch) == 0);

    /* A peer that does not read: the queue grows to the write limit, no further. */
    ch.wlimit = 1u << 20;
    static char chunk[64 * 1024];
    int sent = 0, refused = 0;
    for (int i = 0; i < 64 && !refused; i++) {
        if (chan_send(&ch, SBX_CHAN_STDIN, 3, chunk, sizeof(chunk)) == 0)
            sent++;
        else
            refused = 1;
    }
    test_cond("a peer that does not read: sends are refused at the limit",
              refused && chan_pending_output(&ch) <= ch.wlimit &&
                  chan_pending_output(&ch) > 0);
    size_t want = (size_t)sent * (SBX_CHAN_HDR + sizeof(chunk)), total = 0;
    for (int i = 0; i < 2000 && total < want; i++) {
        spin(1);
        static char sink[256 * 1024];
        ssize_t k = recv(sv[1], sink, sizeof(sink), MSG_DONTWAIT);
        if (k > 0)
            total += (size_t)k;
    }
    test_cond("once it reads, every queued byte arrives and the queue empties",
              total == want && chan_pending_output(&ch) == 0);

    close(sv[1]);
    spin(5);
    test_cond("the peer's close is reported once, with why",
              s.closes == 1 && s.why && strstr(s.why, "closed"));
    chan_deinit(&ch);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fakeprov_setup();
    test_framing();
    test_limits();
    test_send();
    test_json();
    test_fd_mode();
    fakeprov_teardown();
    return test_report();
}
