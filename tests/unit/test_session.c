/*
 * test_session.c - daemon/rpc/session.c over a real socketpair with the
 * fake-provider kit: lines however the bytes are cut, a message over
 * max_message_bytes (-32007, then closed), a reply over the session's hard
 * limit (-32005, the session lives on, even when the -32005 itself does
 * not fit), a client that does not read
 * (backpressure: queued output stays near session_output_high, requests
 * wait, nothing is lost once it reads), the session cap (-32005 naming
 * max_sessions) and a hang-up freeing the session.
 */
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakeprov.h"
#include "sbx_proto.h"
#include "rpc/session.h"
#include "testhelp.h"

#define PING(id) "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"daemon.ping\"}\n"
#define INFO(id) "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"daemon.info\"}\n"

/* A connected client: fd is its end; sbxd's end went to session_accept. */
static int client(int sndbuf)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        return -1;
    if (sndbuf) {
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
        setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &sndbuf, sizeof(sndbuf));
    }
    session_accept(sv[0]);
    return sv[1];
}

static void put(int fd, const char *s)
{
    if (send(fd, s, strlen(s), MSG_NOSIGNAL) < 0)
        perror("send");
}

/* Reads answers for a while (about idle_rounds quiet turns); returns them, and
 * *eof when the session closed the connection. */
static json_t *read_answers(int fd, int idle_rounds, int *eof)
{
    static char buf[1 << 20];
    size_t len = 0;
    json_t *out = json_array();
    if (eof)
        *eof = 0;
    for (int idle = 0; idle < idle_rounds;) {
        fakeprov_spin(1);
        ssize_t r = recv(fd, buf + len, sizeof(buf) - len - 1, MSG_DONTWAIT);
        if (r == 0 && eof)
            *eof = 1;
        if (r <= 0) {
            idle++;
            usleep(1000);
            if (r == 0)
                break;
            continue;
        }
        len += (size_t)r;
        char *nl;
        while ((nl = memchr(buf, '\n', len))) {
            json_t *v = json_loadb(buf, (size_t)(nl - buf), 0, NULL);
            json_array_append_new(out, v ? v : json_null());
            len -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len);
        }
    }
    return out;
}

static long long id_at(json_t *a, size_t i)
{
    return json_integer_value(json_object_get(json_array_get(a, i), "id"));
}
static long long code_at(json_t *a, size_t i)
{
    return json_integer_value(
        json_object_get(json_object_get(json_array_get(a, i), "error"), "code"));
}

static void test_framing(void)
{
    int fd = client(0);
    put(fd, PING(1) PING(2));
    json_t *a = read_answers(fd, 5, NULL);
    test_cond("two lines in one write: two answers in order",
              json_array_size(a) == 2 && id_at(a, 0) == 1 && id_at(a, 1) == 2);
    json_decref(a);
    const char *line = PING(3);
    size_t n = strlen(line), third = n / 3;
    char part[100];
    snprintf(part, sizeof(part), "%.*s", (int)third, line);
    put(fd, part);
    a = read_answers(fd, 3, NULL);
    size_t early = json_array_size(a);
    json_decref(a);
    snprintf(part, sizeof(part), "%.*s", (int)third, line + third);
    put(fd, part);
    fakeprov_spin(3);
    put(fd, line + 2 * third);
    a = read_answers(fd, 5, NULL);
    test_cond("a line in three writes: answered once, after its newline",
              early == 0 && json_array_size(a) == 1 && id_at(a, 0) == 3);
    json_decref(a);
    int before = D->nsessions;
    close(fd);
    fakeprov_spin(5);
    test_eq_int("a hang-up frees the session", D->nsessions, before - 1);
}

/* A line past PARSE_OFFLOOP_MIN is parsed on a parser thread (parse.c); the
 * lines after it wait, so answers keep the requests' order. */
static void test_offloop_parse(void)
{
    size_t pad = 100 * 1024;
    char *line = malloc(pad + 200);
    int n = snprintf(line, pad + 200,
                     "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"daemon.ping\","
                     "\"params\":{\"pad\":\"");
    memset(line + n, 'x', pad);
    snprintf(line + n + pad, 200,
             "\"}}\n" PING(21) "{\"jsonrpc\":\"2.0\",\"id\":22,"
                               "\"method\":\"daemon.ping\",\"params\":{\"pad\":\"");
    int fd = client(0);
    put(fd, line);
    /* The third request, as long as the first, ends with bad JSON. */
    memset(line, 'y', pad);
    snprintf(line + pad, 200, "\"\n");
    put(fd, line);
    json_t *a = NULL, *all = json_array();
    for (int i = 0; i < 100 && json_array_size(all) < 3; i++) {
        a = read_answers(fd, 3, NULL);
        json_array_extend(all, a);
        json_decref(a);
    }
    test_cond("a 100 kB line parsed off the loop is answered before the next line",
              json_array_size(all) == 3 && id_at(all, 0) == 20 && code_at(all, 0) == 0 &&
                  id_at(all, 1) == 21);
    test_eq_int("and a long line of bad JSON is -32700", code_at(all, 2), SBX_E_PARSE);
    json_decref(all);
    free(line);
    close(fd);
    fakeprov_spin(3);
}

static void test_too_large(void)
{
    int64_t saved = D->cfg.max_message_bytes;
    D->cfg.max_message_bytes = 1000;
    int fd = client(0);
    char big[3000];
    memset(big, ' ', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    put(fd, big);
    int eof = 0;
    json_t *a = read_answers(fd, 20, &eof);
    json_t *data =
        json_object_get(json_object_get(json_array_get(a, 0), "error"), "data");
    test_cond("a message over max_message_bytes: -32007 with the max, id null",
              json_array_size(a) == 1 && code_at(a, 0) == SBX_E_TOO_LARGE &&
                  json_integer_value(json_object_get(data, "max")) == 1000 &&
                  json_is_null(json_object_get(json_array_get(a, 0), "id")));
    test_cond("then the connection is closed", eof);
    json_decref(a);
    close(fd);
    D->cfg.max_message_bytes = saved;
    fakeprov_spin(3);

    /* A hard limit just under daemon.info's answer (its -32005 still fits). */
    fd = client(0);
    put(fd, INFO(6));
    a = read_answers(fd, 5, NULL);
    char *info = json_dumps(json_array_get(a, 0), JSON_COMPACT);
    size_t info_len = info ? strlen(info) : 0;
    free(info);
    json_decref(a);
    saved = D->cfg.session_output_hard;
    D->cfg.session_output_hard = (int64_t)info_len - 40;
    put(fd, INFO(7));
    a = read_answers(fd, 5, &eof);
    test_cond("a reply over session_output_hard: -32005 in its place",
              info_len > 400 && json_array_size(a) == 1 && code_at(a, 0) == SBX_E_LIMIT &&
                  id_at(a, 0) == 7);
    json_decref(a);
    put(fd, PING(8));
    a = read_answers(fd, 5, &eof);
    test_cond("and the session serves on",
              json_array_size(a) == 1 && id_at(a, 0) == 8 && !eof);
    json_decref(a);
    close(fd);
    D->cfg.session_output_hard = saved;
    fakeprov_spin(3);
}

/* A hard limit below the -32005 itself (as when output already queued leaves
 * less room than the error takes): the error is still sent, past the limit by
 * its own few hundred bytes, instead of the session being disconnected for
 * it; a batch gets one -32005 the same way. */
static void test_limit_error_past_hard(void)
{
    int64_t saved = D->cfg.session_output_hard;
    int fd = client(0);
    put(fd, PING(1));
    json_t *a = read_answers(fd, 5, NULL);
    char *ping = json_dumps(json_array_get(a, 0), JSON_COMPACT);
    size_t ping_len = ping ? strlen(ping) : 0;
    free(ping);
    json_decref(a);
    /* Room for a ping's answer, not for daemon.info's nor for its -32005. */
    D->cfg.session_output_hard = (int64_t)ping_len + 20;
    int eof = 0;
    put(fd, INFO(2));
    a = read_answers(fd, 5, &eof);
    const char *limit = json_string_value(json_object_get(
        json_object_get(json_object_get(json_array_get(a, 0), "error"), "data"),
        "limit"));
    char *err = json_dumps(json_array_get(a, 0), JSON_COMPACT);
    size_t err_len = err ? strlen(err) : 0;
    free(err);
    test_cond("a -32005 larger than the room left is still sent, naming the limit",
              json_array_size(a) == 1 && code_at(a, 0) == SBX_E_LIMIT &&
                  id_at(a, 0) == 2 && err_len > ping_len + 20 && limit &&
                  !strcmp(limit, "session_output_hard"));
    test_cond("and the session is not disconnected for it", !eof);
    json_decref(a);
    put(fd, "["
            "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"daemon.info\"},"
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"daemon.info\"}]\n");
    a = read_answers(fd, 5, &eof);
    test_cond("a batch with no room for its errors: one -32005 for it, session kept",
              json_array_size(a) == 1 && code_at(a, 0) == SBX_E_LIMIT && !eof);
    json_decref(a);
    put(fd, PING(5));
    a = read_answers(fd, 5, &eof);
    test_cond("and it serves on", json_array_size(a) == 1 && id_at(a, 0) == 5 && !eof);
    json_decref(a);
    close(fd);
    D->cfg.session_output_hard = saved;
    fakeprov_spin(3);
}

/* A client that sends many requests and reads nothing for a while. */
static void test_backpressure(void)
{
    int64_t saved = D->cfg.session_output_high;
    D->cfg.session_output_high = 16 * 1024;
    int fd = client(4096);
    enum { N = 600 };
    char *reqs = malloc(N * 64);
    size_t len = 0;
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(
            reqs + len, N * 64 - len,
            "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"daemon.info\"}\n", i);
    size_t off = 0;
    size_t peak = 0;
    for (int round = 0; round < 400; round++) {
        if (off < len) {
            ssize_t w = send(fd, reqs + off, len - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
        }
        fakeprov_spin(1);
        if (session_output_total() > peak)
            peak = session_output_total();
    }
    /* One answer may start past the mark: allow a few kB over it. */
    test_cond("a client that does not read: queued output stays near the high mark",
              peak >= 16 * 1024 && peak < 16 * 1024 + 8 * 1024);
    printf("      (peak %zu bytes queued, %zu of %zu request bytes taken)\n", peak, off,
           len);
    int eof = 0;
    json_t *a = NULL, *all = json_array();
    for (int i = 0; i < 200 && json_array_size(all) < N; i++) {
        if (off < len) {
            ssize_t w = send(fd, reqs + off, len - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
        }
        a = read_answers(fd, 2, &eof);
        json_array_extend(all, a);
        json_decref(a);
    }
    int in_order = json_array_size(all) == N;
    for (size_t i = 0; in_order && i < N; i++)
        in_order = id_at(all, i) == (long long)i && code_at(all, i) == 0;
    test_cond("once it reads, every request is answered, in order, none lost", in_order);
    json_decref(all);
    free(reqs);
    close(fd);
    D->cfg.session_output_high = saved;
    fakeprov_spin(3);
}

static void test_session_cap(void)
{
    int64_t saved = D->cfg.max_sessions;
    int keep = client(0);
    fakeprov_spin(2);
    D->cfg.max_sessions = D->nsessions;
    int fd = client(0);
    int eof = 0;
    json_t *a = read_answers(fd, 10, &eof);
    json_t *data =
        json_object_get(json_object_get(json_array_get(a, 0), "error"), "data");
    test_cond(
        "past max_sessions a connection is refused: -32005 naming the limit",
        json_array_size(a) == 1 && code_at(a, 0) == SBX_E_LIMIT &&
            !strcmp(json_string_value(json_object_get(data, "limit")), "max_sessions") &&
            eof);
    json_decref(a);
    close(fd);
    put(keep, PING(9));
    a = read_answers(keep, 5, NULL);
    test_cond("the sessions already there serve on",
              json_array_size(a) == 1 && id_at(a, 0) == 9);
    json_decref(a);
    close(keep);
    D->cfg.max_sessions = saved;
    fakeprov_spin(3);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fakeprov_setup();
    test_framing();
    test_offloop_parse();
    test_too_large();
    test_limit_error_past_hard();
    test_backpressure();
    test_session_cap();
    fakeprov_teardown();
    return test_report();
}
