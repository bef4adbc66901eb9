/*
 * fuzz_docker_http.c - what the Docker engine answers, over a real Unix
 * socket: a thread plays the engine, reads the request and writes the
 * input back as the answer, then closes. Byte 0 of the input picks the
 * client side:
 *   0: an attach stream (docker_hijack.c: connect through libcurl, then its
 *      own HTTP head parser, the error body, Docker's 8-byte stream frames)
 *   1: an ordinary API call (docker_api.c over curlev: status, headers,
 *      Api-Version, the JSON body)
 *   2: a streamed JSON-lines answer (an image pull: the line splitter)
 * The engine's answer is the rest of the input.
 */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "providers/docker/docker_int.h"
#include "fuzz_daemon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct dk_engine eng;
static int lfd = -1;
static const uint8_t *answer;
static size_t answer_len;
static int done;
static size_t got;
static struct dkh *live; /* the attach stream until it freed itself */

static void *engine_thread(void *arg)
{
    /* A client that never connects (refused before connecting) ends the wait. */
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, 6000) <= 0)
        return NULL;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return NULL;
    /* The request head (the hijack and libcurl both send one, no body). */
    char req[8192];
    size_t n = 0;
    while (n < sizeof(req) - 1) {
        ssize_t r = recv(fd, req + n, sizeof(req) - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    for (size_t off = 0; off < answer_len;) {
        ssize_t w = send(fd, answer + off, answer_len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    /* What was sent stays readable after the close (AF_UNIX), then EOF;
     * libcurl may keep its end for reuse, so do not wait for it. */
    close(fd);
    return NULL;
}

static void on_open(struct dkh *h, long status, const char *msg, void *data)
{
    if (status != 101 && status != 200) {
        if (!msg)
            abort(); /* a refusal says why */
        done = 1;
        live = NULL; /* freed after this callback */
    }
}
static void on_data(struct dkh *h, int stream, const uint8_t *d, size_t n, void *data)
{
    if (stream < 0 || stream > 2)
        abort();
    got += n;
}
static void on_close(struct dkh *h, const char *why, void *data)
{
    done = 1;
    live = NULL; /* freed after this callback */
}
static void on_resp(struct dk_resp *r, void *data)
{
    done = 1;
}
static int on_line(const char *line, size_t len, void *data)
{
    got += len;
    return 0;
}
static void guard_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    done = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_daemon_setup();
    if (lfd < 0) {
        char dir[] = "/tmp/sbxd-fuzz-engine.XXXXXX";
        if (!mkdtemp(dir))
            abort();
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/docker.sock", dir);
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            listen(lfd, 8) < 0)
            abort();
        json_t *conf = json_pack("{s:s+}", "host", "unix://", sa.sun_path);
        sbx_err_t err = {0};
        if (dkapi_engine_init(&eng, conf, &err) < 0)
            abort();
        json_decref(conf);
        snprintf(eng.version, sizeof(eng.version), "1.43");
    }
    if (size < 1)
        return 0;
    int mode = data[0] % 3;
    answer = data + 1;
    answer_len = size - 1;
    done = 0;
    got = 0;

    pthread_t t;
    if (pthread_create(&t, NULL, engine_thread, NULL) != 0)
        abort();
    struct obuf out;
    obuf_init(&out);
    obuf_append(&out, "\x01\0\0\0\0\0\0\x04ping", 12);
    struct dkh *h = NULL;
    struct dk_req *req = NULL;
    struct dk_reqlist list = {0};
    char *path = dkapi_path(&eng, "/containers/%s/attach?stream=1", "fuzz");
    if (mode == 0)
        live = h =
            dkh_open(&eng, "POST", path, NULL, &out, on_open, on_data, on_close, NULL);
    else if (mode == 1)
        req = dkapi_call(&eng, &list, "GET", path, NULL, 5000, on_resp, NULL);
    else
        req = dkapi_call_lines(&eng, &list, "POST", path, 5000, on_line, on_resp, NULL);
    free(path);
    if (!h && !req)
        done = 1;
    ev_timer guard;
    ev_timer_init(&guard, guard_cb, 5., 0.);
    ev_timer_start(D->loop, &guard);
    while (!done)
        ev_run(D->loop, EVRUN_ONCE);
    ev_timer_stop(D->loop, &guard);
    if (live)
        dkh_close(live);
    live = NULL;
    dkapi_reqlist_cancel(&list);
    obuf_deinit(&out);
    pthread_join(t, NULL);
    return 0;
}
