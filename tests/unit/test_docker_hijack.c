/*
 * test_docker_hijack.c - docker_hijack.c's side of an upgraded ("hijacked")
 * Engine connection, against a fake engine of a few lines on a Unix socket in
 * a temporary directory: the request it writes, the response head (101,
 * errors with the engine's message, garbage), and the multiplexed stream
 * {stream, 0, 0, 0, u32 BE length} demultiplexed however the bytes are cut
 * (one byte at a time, frames split across reads, empty frames), with its
 * refusals (reserved bytes, unknown streams, the engine's own stream 3) and
 * pause/resume.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fakeprov.h"
#include "providers/docker/docker_int.h"
#include "testhelp.h"

static char dir[] = "/tmp/sbx-hijack.XXXXXX";
static char sock_path[100];
static int lfd = -1;
static struct dk_engine eng;

/* What the connection's callbacks saw. */
struct seen {
    int opens, closes;
    long status;
    char msg[300], why[300];
    char out[300000], err[300];
    size_t nout, nerr;
    int pause_after; /* >0: pause once this many stdout bytes are in */
    struct dkh *h;
};

static void on_open(struct dkh *h, long status, const char *msg, void *data)
{
    struct seen *s = data;
    s->opens++;
    s->status = status;
    snprintf(s->msg, sizeof(s->msg), "%s", msg ? msg : "");
}

static void on_data(struct dkh *h, int stream, const uint8_t *d, size_t n, void *data)
{
    struct seen *s = data;
    char *dst = stream == 1 ? s->out : s->err;
    size_t *len = stream == 1 ? &s->nout : &s->nerr;
    size_t cap = stream == 1 ? sizeof(s->out) : sizeof(s->err);
    size_t k = n < cap - *len ? n : cap - *len;
    memcpy(dst + *len, d, k);
    *len += k;
    if (s->pause_after && s->nout >= (size_t)s->pause_after) {
        s->pause_after = 0;
        dkh_pause(h, 1);
    }
}

static void on_close(struct dkh *h, const char *why, void *data)
{
    struct seen *s = data;
    s->closes++;
    snprintf(s->why, sizeof(s->why), "%s", why);
}

static void spin(int n)
{
    for (int i = 0; i < n; i++) {
        ev_run(D->loop, EVRUN_NOWAIT);
        usleep(500);
    }
}

/* Accepts the connection and reads the request head (plus what follows it
 * within a moment). Returns the engine's side of the connection, or -1. */
static int accept_request(char *req, size_t cap)
{
    int cfd = -1;
    size_t len = 0;
    for (int i = 0; i < 4000 && cfd < 0; i++) {
        spin(1);
        cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    }
    for (int i = 0; i < 4000 && cfd >= 0; i++) {
        spin(1);
        ssize_t r = recv(cfd, req + len, cap - 1 - len, 0);
        if (r > 0)
            len += (size_t)r;
        req[len] = 0;
        if (strstr(req, "\r\n\r\n") && (i > 20 || r <= 0))
            break;
    }
    return cfd;
}

/* Writes ans in pieces of cut bytes (0: at once), letting the loop run in
 * between, then closes unless keep_open; runs until a callback ended it. */
/* What the engine received after the request head (answer()). */
static char got[4096];
static size_t ngot;

static void answer(int cfd, const uint8_t *ans, size_t len, size_t cut, int keep_open,
                   struct seen *s)
{
    for (size_t off = 0; off < len;) {
        size_t k = cut && cut < len - off ? cut : len - off;
        ssize_t w = send(cfd, ans + off, k, MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t)w;
        spin(1);
    }
    /* Read what the client sent meanwhile: closing with unread input would
     * be a reset, not the EOF under test. */
    spin(20);
    ssize_t r;
    while ((r = recv(cfd, got + ngot, sizeof(got) - 1 - ngot, 0)) > 0)
        ngot += (size_t)r;
    got[ngot] = 0;
    if (!keep_open)
        close(cfd);
    for (int i = 0; i < 4000 && !s->closes && !(s->opens && s->status != 101); i++) {
        spin(1);
        if (keep_open && s->nout + s->nerr > 0 && i > 50)
            break;
    }
}

static struct dkh *open_one(struct seen *s, struct obuf *out)
{
    memset(s, 0, sizeof(*s));
    s->h = dkh_open(&eng, "POST", "/containers/c1/attach?stream=1", NULL, out, on_open,
                    on_data, on_close, s);
    return s->h;
}

/* A Docker stream frame into p; returns its length. */
static size_t dframe(uint8_t *p, int stream, const char *payload, size_t n)
{
    p[0] = (uint8_t)stream;
    p[1] = p[2] = p[3] = 0;
    p[4] = (uint8_t)(n >> 24);
    p[5] = (uint8_t)(n >> 16);
    p[6] = (uint8_t)(n >> 8);
    p[7] = (uint8_t)n;
    memcpy(p + 8, payload, n);
    return 8 + n;
}

static const char head101[] = "HTTP/1.1 101 UPGRADED\r\nContent-Type: "
                              "application/vnd.docker.raw-stream\r\nConnection: "
                              "Upgrade\r\nUpgrade: tcp\r\n\r\n";

static void test_stream(size_t cut, const char *name)
{
    struct seen s;
    struct obuf out;
    obuf_init(&out);
    obuf_append(&out, "typed", 5);
    open_one(&s, &out);
    char req[8192];
    ngot = 0;
    got[0] = 0;
    int cfd = accept_request(req, sizeof(req));
    if (cfd < 0) {
        test_cond("the fake engine gets the connection", 0);
        return;
    }
    static uint8_t ans[4096];
    size_t n = strlen(head101);
    memcpy(ans, head101, n);
    n += dframe(ans + n, 1, "hello ", 6);
    n += dframe(ans + n, 2, "oops", 4);
    n += dframe(ans + n, 1, "", 0);
    n += dframe(ans + n, 1, "world", 5);
    answer(cfd, ans, n, cut, 0, &s);
    char what[160];
    snprintf(what, sizeof(what), "%s: the request upgrades to tcp", name);
    test_cond(what,
              !strncmp(req, "POST /containers/c1/attach?stream=1 HTTP/1.1\r\n", 46) &&
                  strstr(req, "Upgrade: tcp\r\n") &&
                  strstr(req, "Connection: Upgrade\r\n"));
    snprintf(what, sizeof(what), "%s: 101 opens the stream", name);
    test_cond(what, s.opens == 1 && s.status == 101 && s.msg[0] == 0);
    snprintf(what, sizeof(what), "%s: stdout and stderr apart, in order", name);
    test_cond(what, s.nout == 11 && !memcmp(s.out, "hello world", 11) && s.nerr == 4 &&
                        !memcmp(s.err, "oops", 4));
    snprintf(what, sizeof(what), "%s: the engine's EOF closes it", name);
    test_cond(what, s.closes == 1 && strstr(s.why, "closed by the engine"));
    if (s.closes != 1 || !strstr(s.why, "closed by the engine"))
        printf("      closes %d why '%s'\n", s.closes, s.why);
    snprintf(what, sizeof(what), "%s: queued input is sent once upgraded", name);
    const char *body = strstr(req, "\r\n\r\n");
    test_cond(what, out.bytes == 0 && ((body && !strcmp(body + 4, "typed")) ||
                                       (body && !body[4] && !strcmp(got, "typed"))));
    obuf_deinit(&out);
}

/* One answer that must end the connection with why (a close) or msg (an open). */
static void test_refusal(const char *name, const uint8_t *ans, size_t n, long status,
                         const char *text)
{
    struct seen s;
    open_one(&s, NULL);
    char req[8192];
    int cfd = accept_request(req, sizeof(req));
    if (cfd < 0) {
        test_cond(name, 0);
        return;
    }
    answer(cfd, ans, n, 0, 1, &s);
    for (int i = 0; i < 200 && !s.closes && !s.opens; i++)
        spin(1);
    int ok = status == 101 ? s.closes == 1 && strstr(s.why, text)
                           : s.opens == 1 && s.status == status && strstr(s.msg, text);
    test_cond(name, ok);
    if (!ok)
        printf("      opens %d status %ld msg '%s' closes %d why '%s'\n", s.opens,
               s.status, s.msg, s.closes, s.why);
    close(cfd);
    spin(5);
}

static void test_refusals(void)
{
    uint8_t ans[1024];
    size_t h = strlen(head101), n;
    memcpy(ans, head101, h);
    n = h + dframe(ans + h, 1, "x", 1);
    ans[h + 1] = 1;
    test_refusal("a frame with reserved bytes set ends the stream", ans, n, 101,
                 "invalid stream frame");
    n = h + dframe(ans + h, 4, "x", 1);
    test_refusal("an unknown stream number ends it", ans, n, 101, "invalid stream frame");
    n = h + dframe(ans + h, 3, "exec failed: no such file", 25);
    test_refusal("stream 3 is the engine's own error, in its words", ans, n, 101,
                 "engine: exec failed: no such file");
    const char *nf =
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
        "Content-Length: 36\r\n\r\n{\"message\":\"No such container: c1\"}\n";
    test_refusal("an error status answers the open with the engine's message",
                 (const uint8_t *)nf, strlen(nf), 404, "No such container: c1");
    const char *e500 = "HTTP/1.1 500 Internal\r\nContent-Length: 0\r\n\r\n";
    test_refusal("an error without a body says its status", (const uint8_t *)e500,
                 strlen(e500), 500, "HTTP status 500");
    const char *junk = "SSH-2.0-OpenSSH\r\n\r\n";
    test_refusal("an answer that is not HTTP fails the open", (const uint8_t *)junk,
                 strlen(junk), 0, "invalid HTTP answer");
}

/* A large frame split over many reads, and a pause in the middle of it. */
static void test_big_and_pause(void)
{
    struct seen s;
    open_one(&s, NULL);
    s.pause_after = 1000;
    char req[8192];
    int cfd = accept_request(req, sizeof(req));
    if (cfd < 0) {
        test_cond("a large frame arrives whole", 0);
        return;
    }
    size_t big = 200000, h = strlen(head101);
    uint8_t *ans = malloc(h + 8 + big);
    char *payload = malloc(big);
    for (size_t i = 0; i < big; i++)
        payload[i] = (char)('a' + i % 26);
    memcpy(ans, head101, h);
    size_t n = h + dframe(ans + h, 1, payload, big), off = 0;
    /* Send while the socket takes it (a paused reader fills it), then resume. */
    for (int i = 0; i < 400 && off < n; i++) {
        ssize_t w = send(cfd, ans + off, n - off < 4096 ? n - off : 4096, MSG_NOSIGNAL);
        if (w > 0)
            off += (size_t)w;
        spin(1);
    }
    size_t at_pause = s.nout;
    test_cond("while paused no more bytes are handed on",
              at_pause >= 1000 && at_pause < big && dkh_streaming(s.h));
    dkh_pause(s.h, 0);
    for (int i = 0; i < 8000 && s.nout < big; i++) {
        ssize_t w = off < n ? send(cfd, ans + off, n - off, MSG_NOSIGNAL) : 0;
        if (w > 0)
            off += (size_t)w;
        spin(1);
    }
    test_cond("after resume the 200 kB frame arrives whole and in order",
              s.nout == big && !memcmp(s.out, payload, big));
    dkh_close(s.h);
    test_eq_int("dkh_close runs no callback", s.closes, 0);
    close(cfd);
    spin(5);
    free(ans);
    free(payload);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    fakeprov_setup();
    if (!mkdtemp(dir)) {
        test_skip("hijacked connections", "no temporary directory");
        return test_report();
    }
    snprintf(sock_path, sizeof(sock_path), "%s/engine.sock", dir);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        listen(lfd, 8) < 0) {
        test_skip("hijacked connections", "cannot listen on a Unix socket");
        return test_report();
    }
    static char host[] = "unix:///fake", base[] = "http://localhost";
    eng.host = host;
    eng.unix_path = sock_path;
    eng.base = base;
    test_stream(0, "at once");
    test_stream(1, "byte by byte");
    test_stream(7, "in 7-byte pieces");
    test_refusals();
    test_big_and_pause();
    close(lfd);
    unlink(sock_path);
    rmdir(dir);
    fakeprov_teardown();
    curl_global_cleanup();
    return test_report();
}
