/*
 * curlev.c - libcurl's multi interface on libev (see curlev.h). The shape is
 * curl's docs/examples/multi-uv.c: libcurl tells us which sockets to watch
 * (SOCKETFUNCTION) and when to time out (TIMERFUNCTION); libev tells libcurl
 * what happened through curl_multi_socket_action(); finished transfers are
 * collected with curl_multi_info_read(). Timer values are in ms and go to
 * libev as seconds in floating point (evhiperfifo.c's integer division turns
 * every sub-second timeout into a busy loop), and socket events are passed as
 * CURL_CSELECT_* flags, never CURL_POLL_*.
 *
 * Nothing here calls into libcurl from a libcurl callback: cancel and resume
 * asked for while we are inside libcurl (depth > 0) go to a deferred list
 * that runs as soon as the outermost libcurl call has returned.
 *
 * A connect-only transfer is done once connected, but curl_multi_remove_handle
 * would close its connection: drain() leaves it in the multi handle (RQ_HELD)
 * for its owner to read and write, and only a cancel removes it.
 */
#include "io/curlev.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xalloc.h"

/* Deferred entries handled per pass before the rest waits for the next loop iteration. */
#define DEFERRED_BATCH 1024

struct curlev_sock {
    ev_io io;
    struct curlev *ce;
    struct curlev_sock *next, *prev; /* every socket we watch, to free leftovers */
};

enum req_state { RQ_NEW, RQ_RUNNING, RQ_HELD, RQ_DONE };

struct curlev_req {
    struct curlev *ce;
    struct curlev_req *next, *prev; /* in ce->reqs while running */
    struct curlev_req *dnext;       /* in ce->deferred */
    CURL *easy;
    char *method;
    struct curl_slist *headers;
    char *body;
    size_t body_len;
    int has_body;
    curlev_data_cb on_data;
    curlev_header_cb on_header;
    curlev_done_cb on_done;
    void *privdata;
    enum req_state state;
    int paused;      /* the data callback returned CURL_WRITEFUNC_PAUSE */
    int want_resume; /* resume asked for inside libcurl */
    int cancelled;
    int on_deferred;
    int in_done; /* its done callback is running: cancel is a no-op */
    int connect_only;
    char errbuf[CURL_ERROR_SIZE];
};

static struct curlev_sock *all_socks; /* per process: curlev_deinit frees what libcurl
                                         left */

static void run_deferred(struct curlev *ce);
static void drain(struct curlev *ce);
static void multi_failed(struct curlev *ce, CURLMcode mc);

/* ---- libcurl -> libev ---------------------------------------------------- */

static void sock_unlink(struct curlev_sock *cs)
{
    if (cs->prev)
        cs->prev->next = cs->next;
    else
        all_socks = cs->next;
    if (cs->next)
        cs->next->prev = cs->prev;
}

/* Lets libcurl act on fd (or its timeout), then runs what that finished. */
static void socket_action(struct curlev *ce, curl_socket_t fd, int flags)
{
    ce->depth++;
    CURLMcode mc = curl_multi_socket_action(ce->multi, fd, flags, &ce->running);
    ce->depth--;
    if (mc != CURLM_OK) {
        multi_failed(ce, mc);
        return;
    }
    run_deferred(ce);
    drain(ce);
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct curlev_sock *cs = w->data;
    struct curlev *ce = cs->ce;
    int fd = w->fd; /* cs may be freed inside socket_action */
    int flags = 0;
    if (revents & EV_READ)
        flags |= CURL_CSELECT_IN;
    if (revents & EV_WRITE)
        flags |= CURL_CSELECT_OUT;
    if (revents & EV_ERROR)
        flags |= CURL_CSELECT_ERR;
    socket_action(ce, fd, flags);
}

static int sock_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct curlev *ce = userp;
    struct curlev_sock *cs = socketp;
    struct curlev_req *r = NULL;
    if (easy && what != CURL_POLL_REMOVE &&
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&r) == CURLE_OK && r &&
        r->state == RQ_HELD) {
        /* A held connection's owner watches its socket. */
        if (cs)
            ev_io_stop(ce->loop, &cs->io);
        return 0;
    }
    if (what == CURL_POLL_REMOVE) {
        if (cs) {
            ev_io_stop(ce->loop, &cs->io);
            sock_unlink(cs);
            free(cs);
        }
        curl_multi_assign(ce->multi, s, NULL);
        return 0;
    }
    if (!cs) {
        cs = calloc(1, sizeof(*cs));
        if (!cs)
            return -1;
        cs->ce = ce;
        ev_init(&cs->io, io_cb);
        cs->io.data = cs;
        cs->next = all_socks;
        if (all_socks)
            all_socks->prev = cs;
        all_socks = cs;
        curl_multi_assign(ce->multi, s, cs);
    }
    int ev = 0;
    if (what & CURL_POLL_IN)
        ev |= EV_READ;
    if (what & CURL_POLL_OUT)
        ev |= EV_WRITE;
    ev_io_stop(ce->loop, &cs->io);
    if (ev) {
        ev_io_set(&cs->io, s, ev);
        ev_io_start(ce->loop, &cs->io);
    }
    return 0;
}

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct curlev *ce = w->data;
    socket_action(ce, CURL_SOCKET_TIMEOUT, 0);
}

static int timer_fn(CURLM *multi, long timeout_ms, void *userp)
{
    struct curlev *ce = userp;
    ev_timer_stop(ce->loop, &ce->timer);
    if (timeout_ms < 0)
        return 0;
    /* Floating point: 5 ms must stay 5 ms. 0 fires on the next iteration. */
    ev_timer_set(&ce->timer, (double)timeout_ms / 1000.0, 0.);
    ev_timer_start(ce->loop, &ce->timer);
    return 0;
}

static void kick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct curlev *ce = w->data;
    run_deferred(ce);
    drain(ce);
}

static int multi_setup(struct curlev *ce)
{
    ce->multi = curl_multi_init();
    if (!ce->multi)
        return -1;
    curl_multi_setopt(ce->multi, CURLMOPT_SOCKETFUNCTION, sock_cb);
    curl_multi_setopt(ce->multi, CURLMOPT_SOCKETDATA, ce);
    curl_multi_setopt(ce->multi, CURLMOPT_TIMERFUNCTION, timer_fn);
    curl_multi_setopt(ce->multi, CURLMOPT_TIMERDATA, ce);
    curl_multi_setopt(ce->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    if (ce->max_streams > 0)
        curl_multi_setopt(ce->multi, CURLMOPT_MAX_CONCURRENT_STREAMS, ce->max_streams);
    return 0;
}

int curlev_init(struct curlev *ce, struct ev_loop *loop)
{
    long ms = ce->max_streams;
    memset(ce, 0, sizeof(*ce));
    ce->max_streams = ms;
    ce->loop = loop;
    ev_init(&ce->timer, timeout_cb);
    ce->timer.data = ce;
    ev_init(&ce->kick, kick_cb);
    ce->kick.data = ce;
    return multi_setup(ce);
}

/* ---- requests ------------------------------------------------------------ */

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct curlev_req *r = userdata;
    size_t len = size * nmemb;
    if (r->cancelled)
        return len ? 0 : len; /* aborts the transfer; it is removed right after */
    if (!r->on_data)
        return len;
    size_t n = r->on_data(r, ptr, len, r->privdata);
    if (n == CURL_WRITEFUNC_PAUSE) {
        r->paused = 1;
        log_debug("curlev: paused %p with %zu bytes", (void *)r, len);
    }
    return n;
}

static size_t header_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct curlev_req *r = userdata;
    size_t len = size * nmemb;
    if (r->cancelled || !r->on_header)
        return len;
    size_t n = len;
    while (n > 0 && (ptr[n - 1] == '\n' || ptr[n - 1] == '\r'))
        n--;
    r->on_header(r, ptr, n, r->privdata);
    return len;
}

struct curlev_req *curlev_req_new(struct curlev *ce, const char *method, const char *url)
{
    struct curlev_req *r = xcalloc(1, sizeof(*r));
    r->ce = ce;
    r->easy = curl_easy_init();
    r->method = xstrdup(method ? method : "GET");
    if (!r->easy)
        x_oom("curl_easy_init");
    curl_easy_setopt(r->easy, CURLOPT_URL, url);
    curl_easy_setopt(r->easy, CURLOPT_PRIVATE, r);
    curl_easy_setopt(r->easy, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(r->easy, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(r->easy, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->easy, CURLOPT_HEADERFUNCTION, header_cb);
    curl_easy_setopt(r->easy, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(r->easy, CURLOPT_NOSIGNAL, 1L);
    return r;
}

int curlev_req_header(struct curlev_req *r, const char *line)
{
    struct curl_slist *n = curl_slist_append(r->headers, line);
    if (!n)
        return -1;
    r->headers = n;
    return 0;
}

int curlev_req_body(struct curlev_req *r, const void *data, size_t len)
{
    char *b = malloc(len ? len : 1);
    if (!b)
        return -1;
    if (len)
        memcpy(b, data, len);
    free(r->body);
    r->body = b;
    r->body_len = len;
    r->has_body = 1;
    return 0;
}

int curlev_req_unix_socket(struct curlev_req *r, const char *path)
{
    return curl_easy_setopt(r->easy, CURLOPT_UNIX_SOCKET_PATH, path) == CURLE_OK ? 0 : -1;
}

void curlev_req_timeouts(struct curlev_req *r, long total_ms, long connect_ms)
{
    curl_easy_setopt(r->easy, CURLOPT_TIMEOUT_MS, total_ms > 0 ? total_ms : 0L);
    if (connect_ms > 0)
        curl_easy_setopt(r->easy, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
}

void curlev_req_callbacks(struct curlev_req *r, curlev_data_cb on_data,
                          curlev_header_cb on_header, curlev_done_cb on_done,
                          void *privdata)
{
    r->on_data = on_data;
    r->on_header = on_header;
    r->on_done = on_done;
    r->privdata = privdata;
}

CURL *curlev_req_easy(struct curlev_req *r)
{
    return r->easy;
}

int curlev_req_paused(const struct curlev_req *r)
{
    return r->paused;
}

int curlev_active(const struct curlev *ce)
{
    int n = 0;
    for (const struct curlev_req *r = ce->reqs; r; r = r->next)
        n++;
    return n;
}

static void req_free(struct curlev_req *r)
{
    if (r->easy)
        curl_easy_cleanup(r->easy);
    curl_slist_free_all(r->headers);
    free(r->body);
    free(r->method);
    free(r);
}

static void unlink_running(struct curlev_req *r)
{
    struct curlev *ce = r->ce;
    if (r->prev)
        r->prev->next = r->next;
    else
        ce->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

static void undefer(struct curlev_req *r)
{
    if (!r->on_deferred)
        return;
    for (struct curlev_req **pp = &r->ce->deferred; *pp; pp = &(*pp)->dnext)
        if (*pp == r) {
            *pp = r->dnext;
            break;
        }
    r->on_deferred = 0;
    r->dnext = NULL;
}

static void defer(struct curlev_req *r)
{
    if (r->on_deferred)
        return;
    r->on_deferred = 1;
    r->dnext = r->ce->deferred;
    r->ce->deferred = r;
}

int curlev_req_start(struct curlev_req *r)
{
    struct curlev *ce = r->ce;
    assert(r->state == RQ_NEW);
    CURL *e = r->easy;
    const char *m = r->method;
    if (r->connect_only) {
        /* no request: the owner speaks on the connection */
    } else if (strcmp(m, "GET") == 0 && !r->has_body) {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(m, "HEAD") == 0) {
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
        if (r->has_body) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
        } else if (strcmp(m, "POST") == 0) {
            curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
            curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        }
        if (strcmp(m, "POST") != 0)
            curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, m);
    }
    if (r->headers)
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
    ce->depth++;
    CURLMcode mc = curl_multi_add_handle(ce->multi, e);
    ce->depth--;
    if (mc != CURLM_OK) {
        log_warn("curl: cannot start a transfer: %s", curl_multi_strerror(mc));
        req_free(r);
        return -1;
    }
    r->state = RQ_RUNNING;
    r->next = ce->reqs;
    if (ce->reqs)
        ce->reqs->prev = r;
    ce->reqs = r;
    if (ce->depth == 0)
        run_deferred(ce);
    return 0;
}

void curlev_req_resume(struct curlev_req *r)
{
    struct curlev *ce = r->ce;
    if (r->cancelled || r->state != RQ_RUNNING)
        return;
    if (ce->depth > 0) {
        r->want_resume = 1;
        defer(r);
        return;
    }
    r->want_resume = 0;
    if (!r->paused)
        return;
    r->paused = 0;
    ce->depth++;
    /* May call the data callback, which may pause again. */
    CURLcode rc = curl_easy_pause(r->easy, CURLPAUSE_CONT);
    log_debug("curlev: resumed %p (paused again: %d)", (void *)r, r->paused);
    ce->depth--;
    if (rc != CURLE_OK)
        log_debug("curl: unpause: %s", curl_easy_strerror(rc));
    run_deferred(ce);
    /* libcurl set a 0 ms timer to continue: drain() runs from there. */
}

static void remove_and_free(struct curlev_req *r)
{
    struct curlev *ce = r->ce;
    undefer(r);
    if (r->state == RQ_RUNNING || r->state == RQ_HELD) {
        ce->depth++;
        curl_multi_remove_handle(ce->multi, r->easy);
        ce->depth--;
        unlink_running(r);
        r->state = RQ_DONE;
    }
    req_free(r);
}

void curlev_req_cancel(struct curlev_req *r)
{
    if (!r || r->in_done)
        return;
    r->on_data = NULL;
    r->on_header = NULL;
    r->on_done = NULL;
    r->privdata = NULL;
    r->cancelled = 1;
    if (r->state != RQ_RUNNING && r->state != RQ_HELD) {
        undefer(r);
        req_free(r);
        return;
    }
    if (r->ce->depth > 0) {
        defer(r);
        return;
    }
    remove_and_free(r);
}

static void run_deferred(struct curlev *ce)
{
    if (ce->depth > 0)
        return;
    for (int i = 0; ce->deferred; i++) {
        if (i >= DEFERRED_BATCH) {
            /* Resumes that keep deferring each other: finish next iteration. */
            ev_timer_set(&ce->kick, 0., 0.);
            ev_timer_start(ce->loop, &ce->kick);
            return;
        }
        struct curlev_req *r = ce->deferred;
        ce->deferred = r->dnext;
        r->dnext = NULL;
        r->on_deferred = 0;
        if (r->cancelled)
            remove_and_free(r);
        else if (r->want_resume)
            curlev_req_resume(r);
    }
}

/* Completes every finished transfer. A done callback may start or cancel others. */
static void drain(struct curlev *ce)
{
    CURLMsg *m;
    int left;
    /* Bounded: each message is a finished transfer, and there are only so many. */
    while (ce->depth == 0 && (m = curl_multi_info_read(ce->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *e = m->easy_handle;
        CURLcode rc = m->data.result;
        struct curlev_req *r = NULL;
        long code = 0;
        curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
        if (r && r->connect_only && rc == CURLE_OK && !r->cancelled) {
            /* Connected: the handle stays, or the connection would close. The
             * owner may cancel r from the callback (in_done stays 0). */
            r->state = RQ_HELD;
            if (r->on_done)
                r->on_done(r, rc, code, "", r->privdata);
            continue;
        }
        ce->depth++;
        curl_multi_remove_handle(ce->multi, e); /* m is dead from here on */
        ce->depth--;
        if (!r)
            continue;
        unlink_running(r);
        undefer(r);
        r->state = RQ_DONE;
        if (!r->cancelled && r->on_done) {
            const char *msg = rc == CURLE_OK ? ""
                              : r->errbuf[0] ? r->errbuf
                                             : curl_easy_strerror(rc);
            r->in_done = 1;
            r->on_done(r, rc, code, msg, r->privdata);
        }
        req_free(r);
    }
}

/* A CURLMcode error leaves every transfer in doubt: fail them all and start
 * over with a fresh multi handle. */
static void multi_failed(struct curlev *ce, CURLMcode mc)
{
    log_error("curl multi failed: %s; failing %d transfers", curl_multi_strerror(mc),
              curlev_active(ce));
    struct curlev_req *list = ce->reqs;
    ce->reqs = NULL;
    ce->deferred = NULL;
    ce->depth++;
    for (struct curlev_req *r = list; r; r = r->next) {
        curl_multi_remove_handle(ce->multi, r->easy);
        r->on_deferred = 0;
        r->dnext = NULL;
        r->state = RQ_DONE;
    }
    curl_multi_cleanup(ce->multi);
    ce->depth--;
    ev_timer_stop(ce->loop, &ce->timer);
    if (multi_setup(ce) < 0)
        x_oom("curl_multi_init");
    char msg[128];
    snprintf(msg, sizeof(msg), "curl multi handle failed: %s", curl_multi_strerror(mc));
    while (list) {
        struct curlev_req *r = list;
        list = r->next;
        if (!r->cancelled && r->on_done) {
            r->in_done = 1;
            r->on_done(r, CURLE_RECV_ERROR, 0, msg, r->privdata);
        }
        req_free(r);
    }
}

void curlev_deinit(struct curlev *ce)
{
    if (!ce->multi)
        return;
    ce->depth++;
    while (ce->reqs) {
        struct curlev_req *r = ce->reqs;
        curl_multi_remove_handle(ce->multi, r->easy);
        unlink_running(r);
        r->state = RQ_DONE;
        r->on_deferred = 0;
        req_free(r);
    }
    ce->deferred = NULL;
    /* May still call sock_cb with CURL_POLL_REMOVE: ce stays valid. */
    curl_multi_cleanup(ce->multi);
    ce->depth--;
    ce->multi = NULL;
    ev_timer_stop(ce->loop, &ce->timer);
    ev_timer_stop(ce->loop, &ce->kick);
    struct curlev_sock *cs = all_socks, *next;
    for (; cs; cs = next) {
        next = cs->next;
        if (cs->ce != ce)
            continue;
        ev_io_stop(ce->loop, &cs->io);
        sock_unlink(cs);
        free(cs);
    }
}

/* ---- connect-only requests ---------------------------------------------- */

void curlev_req_connect_only(struct curlev_req *r)
{
    assert(r->state == RQ_NEW);
    r->connect_only = 1;
    curl_easy_setopt(r->easy, CURLOPT_CONNECT_ONLY, 1L);
}

curl_socket_t curlev_req_socket(struct curlev_req *r)
{
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (r->state != RQ_HELD ||
        curl_easy_getinfo(r->easy, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK)
        return CURL_SOCKET_BAD;
    return fd;
}

CURLcode curlev_req_send(struct curlev_req *r, const void *data, size_t len, size_t *sent)
{
    *sent = 0;
    if (r->state != RQ_HELD)
        return CURLE_SEND_ERROR;
    return curl_easy_send(r->easy, data, len, sent);
}

CURLcode curlev_req_recv(struct curlev_req *r, void *buf, size_t len, size_t *got)
{
    *got = 0;
    if (r->state != RQ_HELD)
        return CURLE_RECV_ERROR;
    return curl_easy_recv(r->easy, buf, len, got);
}
