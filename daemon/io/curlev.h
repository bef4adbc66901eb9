/*
 * curlev.h - libcurl's multi interface on the daemon's libev loop.
 *
 * One `struct curlev` per provider (embedded in the provider's state) runs
 * any number of transfers without ever blocking the loop. A transfer is a
 * `struct curlev_req`: URL, method, headers, body, data/header callbacks,
 * pause/resume, cancel, and one completion callback with the CURLcode and
 * the HTTP status. It fits HTTP/2 gRPC (Modal) as well as HTTP/1.1 over a
 * Unix socket (Docker): protocol details are set on the easy handle, which
 * curlev_req_easy() exposes before the start.
 *
 * Re-entrancy rules (curl_multi_socket_action(3), curl_easy_pause(3)):
 * callbacks run from inside libcurl. From a data or header callback you may
 * call curlev_req_cancel() and curlev_req_resume() on any request (both are
 * deferred until libcurl has returned) and curlev_req_start(). From the done
 * callback (libcurl has returned by then) anything goes, except
 * curlev_deinit() of the curlev that calls it.
 *
 * A connect-only request (curlev_req_connect_only) hands its connection to
 * the caller once made: Docker's upgraded attach and exec streams.
 */
#ifndef SBXD_CURLEV_H
#define SBXD_CURLEV_H

#include <curl/curl.h>
#include <ev.h>
#include <stddef.h>

struct curlev_req;

/**
 * Body bytes of a response, as libcurl hands them over.
 * Return len to take them all, CURL_WRITEFUNC_PAUSE to pause the transfer
 * (libcurl delivers the same bytes again after curlev_req_resume()), or
 * anything else to abort it (it completes with CURLE_WRITE_ERROR).
 * data is valid only during the call.
 */
typedef size_t (*curlev_data_cb)(struct curlev_req *r, const char *data, size_t len,
                                 void *privdata);

/**
 * One response header line (status line, header, the blank line ending a
 * block, or a trailer) without its CR LF. line is valid only during the call.
 */
typedef void (*curlev_header_cb)(struct curlev_req *r, const char *line, size_t len,
                                 void *privdata);

/**
 * The transfer finished: rc is libcurl's result, http_status the response
 * code (0 if none arrived), errmsg libcurl's error text ("" when rc is OK).
 * Called exactly once per started request unless it was cancelled; the
 * request is freed when the callback returns.
 */
typedef void (*curlev_done_cb)(struct curlev_req *r, CURLcode rc, long http_status,
                               const char *errmsg, void *privdata);

struct curlev_sock;

struct curlev {
    struct ev_loop *loop;
    CURLM *multi;
    ev_timer timer; /* libcurl's own timeout */
    ev_timer kick;  /* runs deferred work (resume/cancel) on the next iteration */
    int running;
    int depth;                   /* > 0 while inside a libcurl call */
    struct curlev_req *reqs;     /* started, not yet finished */
    struct curlev_req *deferred; /* cancelled or resumed while depth > 0 */
    long max_streams;            /* CURLMOPT_MAX_CONCURRENT_STREAMS; 0 = default */
};

/**
 * Sets ce up on loop. libcurl must have been initialised by the caller
 * (curl_global_init in main). Returns 0, or -1 if libcurl fails.
 */
int curlev_init(struct curlev *ce, struct ev_loop *loop);

/**
 * Ends every transfer without calling their callbacks, then frees the multi
 * handle. ce may be reused after curlev_init() again. Not from a callback.
 */
void curlev_deinit(struct curlev *ce);

/**
 * A new request for method ("GET", "POST", ...) and url (both copied).
 * Nothing happens until curlev_req_start(). Aborts on OOM.
 */
struct curlev_req *curlev_req_new(struct curlev *ce, const char *method, const char *url);

/**
 * Adds a request header line "Name: value" (copied). "Name:" removes a header
 * libcurl would send by itself.
 */
int curlev_req_header(struct curlev_req *r, const char *line);

/** The request body (copied). Sets Content-Length. */
int curlev_req_body(struct curlev_req *r, const void *data, size_t len);

/** Talks HTTP over the Unix socket at path instead of TCP (Docker). */
int curlev_req_unix_socket(struct curlev_req *r, const char *path);

/** Total and connect timeouts in ms (0 = none / libcurl's default). */
void curlev_req_timeouts(struct curlev_req *r, long total_ms, long connect_ms);

/** Callbacks; any may be NULL (no data callback = body discarded). */
void curlev_req_callbacks(struct curlev_req *r, curlev_data_cb on_data,
                          curlev_header_cb on_header, curlev_done_cb on_done,
                          void *privdata);

/** The easy handle, for protocol options (HTTP version, TLS, ...). Borrowed. */
CURL *curlev_req_easy(struct curlev_req *r);

/**
 * Starts the transfer. Returns 0; or -1 if libcurl refuses it, in which case
 * r is freed and no callback runs. The done callback never runs inside this call.
 */
int curlev_req_start(struct curlev_req *r);

/**
 * Continues a transfer whose data callback returned CURL_WRITEFUNC_PAUSE.
 * Outside callbacks it calls curl_easy_pause() at once (which may run the
 * data callback before returning); inside a callback it is deferred.
 */
void curlev_req_resume(struct curlev_req *r);

/** 1 while the transfer is paused by its data callback. */
int curlev_req_paused(const struct curlev_req *r);

/**
 * Ends the transfer (started or not) and frees r. No callback runs after
 * this, even if the removal itself is deferred. r must not be used again.
 */
void curlev_req_cancel(struct curlev_req *r);

/** Number of requests started and not finished (held connections count). */
int curlev_active(const struct curlev *ce);

/* ---- connect-only requests: a connection for the caller's own protocol ---- */

/**
 * Makes r (not yet started) connect-only (CURLOPT_CONNECT_ONLY): libcurl
 * connects as for r's URL (Unix socket, TCP, TLS for https) and sends
 * nothing. The done callback runs once the connection is made (rc CURLE_OK)
 * or has failed. On success r is *held*, not freed: it stays in the multi
 * handle, since removing it would close the connection, and is the caller's
 * to use with curlev_req_socket(), curlev_req_send() and curlev_req_recv()
 * until curlev_req_cancel() closes it (also from inside that done callback).
 * curlev never watches a held connection's socket: its owner does. Should the
 * multi handle fail later, done runs once more, with an error, and r is freed
 * after it.
 *
 * libcurl's connection cache takes an idle connection with unread input for
 * a dead one and may close it when another transfer of the same multi
 * handle connects: give each held connection a curlev of its own.
 */
void curlev_req_connect_only(struct curlev_req *r);

/** The socket of a held connect-only request, or CURL_SOCKET_BAD. */
curl_socket_t curlev_req_socket(struct curlev_req *r);

/**
 * curl_easy_send() / curl_easy_recv() on a held connect-only request. They
 * never block: CURLE_AGAIN means "wait until the socket is ready" (with TLS,
 * retry a send of the same length). recv returns CURLE_OK with *got 0 at EOF.
 */
CURLcode curlev_req_send(struct curlev_req *r, const void *data, size_t len,
                         size_t *sent);
CURLcode curlev_req_recv(struct curlev_req *r, void *buf, size_t len, size_t *got);

#endif
