/*
 * grpc.h - a small, generic gRPC client over HTTP/2 on curlev (libcurl multi
 * on the libev loop): unary calls and server-streaming calls, optionally with
 * a header of their own (a per-call bearer token on a shared channel), and
 * server-directed retries (RPCRetryPolicy in grpc-status-details-bin). It knows no
 * service: the owner supplies the metadata (headers) every attempt carries
 * through a callback (grpc_chan_set_headers), static header lines
 * (grpc_chan_header), and optionally a token that one unary RPC fetches,
 * that every other call waits for, and that is fetched again when it is due
 * or rejected (grpc_chan_set_token).
 *
 * Wire rules (the gRPC-over-HTTP/2 spec, as grpc-js applies it): POST to
 * /<service>/<Method>, content-type application/grpc, te: trailers, no
 * Expect:, identity encoding only. Messages are 5-byte-prefixed frames that
 * may be split across or packed into write callbacks; responses are parsed
 * incrementally and streaming messages are handed over as soon as each one
 * is complete. grpc-status/grpc-message come from the headers (trailers-only
 * replies) or the trailers; without them the HTTP status is mapped like
 * grpc-js does. http:// URLs use cleartext HTTP/2 with prior knowledge,
 * https:// HTTP/2 over TLS (ALPN). All calls share one connection
 * (CURLPIPE_MULTIPLEX + PIPEWAIT).
 *
 * Unary calls are retried on CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, INTERNAL
 * and UNAVAILABLE (3 retries, 100/200/400 ms), with the same call_id (see
 * struct grpc_attempt). Streaming calls are never retried here: their owner
 * reconnects.
 *
 * Callbacks: on_msg and on_done run from the libev loop (or from
 * grpc_call_resume), never inside the function that started the call. From
 * inside them every function here may be called, including grpc_call_cancel()
 * on the very call.
 */
#ifndef SBXD_GRPC_H
#define SBXD_GRPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "io/curlev.h"
#include "err.h"

enum grpc_code {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_ALREADY_EXISTS = 6,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_ABORTED = 10,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16,
};

/* Default cap of one received message (grpc_chan.max_msg; the owner may raise it). */
#define GRPC_DEFAULT_MAX_MSG (16u * 1024 * 1024)

struct grpc_call;

/** How a call ended. Valid only during the on_done callback. */
struct grpc_status {
    int code;            /* enum grpc_code */
    const char *message; /* grpc-message, percent-decoded, or our own text; never NULL */
    int transport;       /* 1: no HTTP response at all (connect, DNS, TLS, reset) */
    long http_status;    /* 0 if none */
    const char *method;  /* the RPC, e.g. "SandboxCreate" (or the token method when
                          * the token it waited for could not be fetched) */
    int unsent;          /* 1: the request surely never reached the server (no connection
                          * could be made, or the token it waited for failed) */
};

/** One attempt of a call, as the headers callback sees it (valid during the call). */
struct grpc_attempt {
    const char *method;   /* "SandboxCreate" */
    int unary;            /* 0: server-streaming */
    int is_token;         /* 1: the channel's own token fetch */
    int attempt;          /* 0, then 1, 2, ... for the retries of a unary call */
    double since_first_s; /* wall time since the call's first attempt */
    const char *call_id;  /* a UUIDv4, the same for every attempt of one call */
    const char *token;    /* the channel's token this attempt carries, or NULL */
    int throttle_attempt; /* how many retries so far the server asked for (RPCRetryPolicy)
                           */
};

/**
 * Adds the owner's headers for one attempt to *list (with grpc_header_add).
 * Runs on the loop right before each attempt is sent; it must not start or
 * cancel calls.
 */
typedef void (*grpc_headers_cb)(struct curl_slist **list, const struct grpc_attempt *a,
                                void *privdata);

/**
 * Reads the channel's token out of the token method's reply (msg/len, valid
 * during the call). Returns the token (malloc'd, the caller frees it; NULL if
 * the reply holds none) and sets *refresh_in_s: seconds until a new one is
 * fetched before the next call.
 */
typedef char *(*grpc_token_cb)(const uint8_t *msg, size_t len, double *refresh_in_s,
                               void *privdata);

/** A message of a streaming call; msg is valid only during the call. */
typedef void (*grpc_msg_cb)(struct grpc_call *c, const uint8_t *msg, size_t len,
                            void *privdata);

/**
 * The call is over (exactly once, unless it was cancelled). For a unary call
 * that succeeded, msg/len is the response message (valid during the call);
 * otherwise NULL/0. The call is freed when this returns.
 */
typedef void (*grpc_done_cb)(struct grpc_call *c, const struct grpc_status *st,
                             const uint8_t *msg, size_t len, void *privdata);

struct grpc_chan {
    struct curlev ce;
    struct ev_loop *loop;
    char *base_url; /* scheme://host:port */
    char *service;  /* "package.Service" */
    int tls;
    grpc_headers_cb headers_cb; /* the owner's per-attempt metadata, or NULL */
    void *headers_data;
    char *token_method; /* NULL: no token */
    grpc_token_cb token_parse;
    void *token_data;
    char *token;             /* NULL until fetched */
    double token_refresh_at; /* wall clock */
    struct grpc_call *token_call;
    struct grpc_call *token_wait, *token_wait_tail; /* calls waiting for a token */
    struct grpc_call *calls;                        /* every live call */
    struct curl_slist *extra;                       /* static headers for every call */
    size_t max_msg;
    long connect_timeout_ms;
    char *ca_file;     /* CA bundle that verifies https peers (NULL: the system's) */
    double throttle_s; /* > 0: how long server-directed retries may go on */
    int verbose;       /* SBXD_CURL_VERBOSE set: libcurl traces to stderr */
    int no_reuse;      /* h2c on libcurl < 8.0: a fresh connection per call */
};

/**
 * Sets ch up for url ("https://host:443", "http://127.0.0.1:9000"; no scheme
 * means http) and service ("package.Service"). Returns 0, or -1 with err
 * (SBX_E_PARAMS) for a bad URL.
 */
int grpc_chan_init(struct grpc_chan *ch, struct ev_loop *loop, const char *url,
                   const char *service, sbx_err_t *err);

/** Cancels every call (no callbacks) and frees everything ch holds. */
void grpc_chan_deinit(struct grpc_chan *ch);

/**
 * Appends the header line "name: value" (copied) to *list. Returns 0, or -1
 * (nothing added) when the line has no colon or holds control characters.
 */
int grpc_header_add(struct curl_slist **list, const char *line);

/** Adds a static header line "name: value" sent on every call; 0 or -1 as above. */
int grpc_chan_header(struct grpc_chan *ch, const char *line);

/** Verifies https peers with the CA bundle at path (copied; NULL: the system's). */
void grpc_chan_set_ca(struct grpc_chan *ch, const char *path);

/**
 * Server-directed retries: a failed unary call whose grpc-status-details-bin
 * carries a modal.client.RPCRetryPolicy is tried again after the delay it
 * names (whatever its code), for as long as budget_s from the first attempt
 * allows (0: never). The attempt's throttle_attempt counts them.
 */
void grpc_chan_set_throttle(struct grpc_chan *ch, double budget_s);

/**
 * Reads grpc-status-details-bin (the header's base64 value, b64/n, padding
 * optional): a google.rpc.Status whose details hold a google.protobuf.Any of
 * type .../modal.client.RPCRetryPolicy. Returns 0 and its retry_after_secs in
 * *secs_out (clamped to [0, 3600]), or -1 if there is none or the bytes do
 * not parse. Safe on any input.
 */
int grpc_retry_policy_parse(const char *b64, size_t n, double *secs_out);

/** Sets the callback that adds each attempt's headers (NULL: none). */
void grpc_chan_set_headers(struct grpc_chan *ch, grpc_headers_cb cb, void *privdata);

/**
 * Every call then waits for a token: a unary call of method (copied) with an
 * empty request, made before the first call, again once the token is due for
 * a refresh, and once more when a call that carried it is rejected with
 * UNAUTHENTICATED. parse reads the reply; the headers callback puts the token
 * on the wire (grpc_attempt.token). Calls waiting for a token that cannot be
 * fetched fail with that fetch's status (st->unsent set).
 */
void grpc_chan_set_token(struct grpc_chan *ch, const char *method, grpc_token_cb parse,
                         void *privdata);

/**
 * Starts a unary call of method with req (packed now; borrowed). timeout_s is
 * per attempt (0 = none). Returns the call (owned by the channel until
 * on_done returns or it is cancelled). Never NULL; failures arrive through on_done.
 */
struct grpc_call *grpc_unary(struct grpc_chan *ch, const char *method,
                             const ProtobufCMessage *req, double timeout_s,
                             grpc_done_cb on_done, void *privdata);

/** Starts a server-streaming call: on_msg per message, then on_done. */
struct grpc_call *grpc_stream(struct grpc_chan *ch, const char *method,
                              const ProtobufCMessage *req, double timeout_s,
                              grpc_msg_cb on_msg, grpc_done_cb on_done, void *privdata);

/**
 * grpc_unary/grpc_stream with one more header line (copied) on every attempt
 * of this call: a credential that differs per call on a shared channel (the
 * command router's per-task bearer token). NULL: none.
 */
struct grpc_call *grpc_unary_h(struct grpc_chan *ch, const char *method,
                               const ProtobufCMessage *req, double timeout_s,
                               const char *header, grpc_done_cb on_done, void *privdata);
struct grpc_call *grpc_stream_h(struct grpc_chan *ch, const char *method,
                                const ProtobufCMessage *req, double timeout_s,
                                const char *header, grpc_msg_cb on_msg,
                                grpc_done_cb on_done, void *privdata);

/**
 * For calls that must not run twice on the server (ContainerExec): the
 * built-in retries then repeat only attempts that surely never reached it
 * (st->unsent). Call it right after grpc_unary().
 */
void grpc_call_no_resend(struct grpc_call *c);

/**
 * Retries the call's retryable failures for up to budget_s seconds from the
 * first attempt (backoff 0.1 s doubling, at most 5 s apart) instead of the
 * SDK's 3 quick retries. Call it right after grpc_unary().
 */
void grpc_call_retry_budget(struct grpc_call *c, double budget_s);

/** Ends the call; no callback runs afterwards. c must not be used again. NULL is a no-op.
 */
void grpc_call_cancel(struct grpc_call *c);

/**
 * Stops delivering messages (flow control): call it from on_msg. Bytes that
 * already arrived are kept (at most one message plus one network chunk) and
 * the HTTP/2 stream is paused (CURL_WRITEFUNC_PAUSE) on the next chunk.
 */
void grpc_call_pause(struct grpc_call *c);

/**
 * Delivers what was held back, then lets the transfer continue. May run the
 * call's on_msg (and on_done, if the response had already ended) before it
 * returns. Callable from anywhere, callbacks included: libcurl is only
 * touched outside its own callbacks.
 */
void grpc_call_resume(struct grpc_call *c);

/** The name of a gRPC status code ("NOT_FOUND"). */
const char *grpc_code_name(int code);

/** 1 for codes worth retrying (1, 2, 4, 13, 14). */
int grpc_code_retryable(int code);

#endif
