/*
 * grpc_int.h - grpc.c's call record and its receive path, for grpc.c and
 * the fuzzer (tests/fuzz/fuzz_grpc.c, which builds calls that are linked
 * into a channel but never sent and feeds them response headers and body
 * chunks as libcurl would). Modal's files use grpc.h only.
 */
#ifndef SBX_GRPC_INT_H
#define SBX_GRPC_INT_H

#include "providers/modal/grpc.h"

/* Attempts of a call without a retry budget (grpc_call_retry_budget). */
#define MAX_RETRIES 3

enum call_state {
    CS_NEW,
    CS_QUEUED,
    CS_SENDING,
    CS_RETRY_WAIT,
    CS_HELD,
    CS_FAILING,
    CS_DONE
};

struct grpc_call {
    struct grpc_chan *ch;
    struct grpc_call *next, *prev; /* ch->calls */
    struct grpc_call *qnext;       /* ch->token_wait, or a failing list */
    enum call_state state;
    char method[64];
    char *url;
    uint8_t *frame; /* the request: 5-byte prefix + message */
    size_t frame_len;
    int unary, is_token; /* is_token: the channel's token fetch */
    double timeout_s;
    grpc_msg_cb on_msg;
    grpc_done_cb on_done;
    void *privdata;
    struct curlev_req *req;
    ev_timer timer; /* retry backoff, or a deferred completion */
    int attempt;
    double t0; /* wall clock of the first attempt */
    char idem[40];
    int token_retried;
    char *used_token;   /* the channel token this attempt carried */
    char *hdr;          /* the call's own header line, or NULL */
    double retry_after; /* this attempt's RPCRetryPolicy delay, -1 = none */
    int throttle_retries;

    /* response of the current attempt */
    uint8_t *in;
    size_t in_off, in_len, in_cap;
    int grpc_status; /* -1 = not seen */
    char *grpc_message;
    int compressed_ok; /* a grpc-encoding header came */
    int local_code;    /* our own failure (bad frame, too large): abort with this */
    char *local_msg;
    uint8_t *resp;
    size_t resp_len;
    int got_msg;

    /* final status kept while HELD */
    int held_code;
    char *held_msg;
    long held_http;
    int held_transport;

    int paused;
    int cancelled;
    int in_cb;
    int no_resend;   /* repeat only attempts that surely never reached the server */
    double budget_s; /* > 0: retry for this long (backoff up to 5 s), not 3 times */
    int unsent;      /* the last attempt surely never reached the server */
};

/* ---- the receive path: libcurl's callbacks of a call's transfer ---------- */
/* Non-static for the fuzzer, which calls them without a transfer. */

/* A body chunk: buffered, then complete messages go to on_msg (or are kept
 * for a unary call's on_done). Returns n, CURL_WRITEFUNC_PAUSE, or less than
 * n to end the transfer. */
size_t grpc_call_on_data(struct curlev_req *r, const char *d, size_t n, void *privdata);
/* A response header line (grpc-status, grpc-message, grpc-encoding,
 * grpc-status-details-bin). */
void grpc_call_on_header(struct curlev_req *r, const char *line, size_t n,
                         void *privdata);
/* The transfer ended: the status from trailers, HTTP or transport; then a
 * retry, a hold (paused with messages left) or on_done. */
void grpc_call_req_done(struct curlev_req *r, CURLcode rc, long http, const char *errmsg,
                        void *privdata);
/* The call's timer: a retry's backoff is over, or a start failure is reported. */
void grpc_call_retry_cb(struct ev_loop *loop, ev_timer *w, int revents);
/* on_done of the channel's token fetch (privdata = the channel): the owner's
 * parse hook, then the waiting calls are sent or failed. */
void grpc_token_done(struct grpc_call *tc, const struct grpc_status *st,
                     const uint8_t *msg, size_t len, void *privdata);

#endif
