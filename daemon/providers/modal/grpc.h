/*
 * grpc.h - a small gRPC client over HTTP/2 on curlev (libcurl multi on the
 * libev loop): unary calls and server-streaming calls, with Modal's
 * authentication built in (x-modal-token-id/-secret on every call, and an
 * x-modal-auth-token fetched with AuthTokenGet before the first call and
 * refreshed before it expires).
 *
 * Wire rules (see shared/modal-protocol.md section 1): POST to
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
 * Unary calls carry x-idempotency-key (the same across retries) and
 * x-retry-attempt/x-retry-delay, and are retried on CANCELLED, UNKNOWN,
 * DEADLINE_EXCEEDED, INTERNAL and UNAVAILABLE (3 retries, 100/200/400 ms).
 * Streaming calls are never retried here: their owner reconnects.
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

#include "curlev.h"
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

/* Default cap of one received message (Modal allows 100 MiB). */
#define GRPC_DEFAULT_MAX_MSG (16u * 1024 * 1024)

struct grpc_call;

/** How a call ended. Valid only during the on_done callback. */
struct grpc_status {
    int code;            /* enum grpc_code */
    const char *message; /* grpc-message, percent-decoded, or our own text; never NULL */
    int transport;       /* 1: no HTTP response at all (connect, DNS, TLS, reset) */
    long http_status;    /* 0 if none */
    const char
        *method; /* the RPC, e.g. "SandboxCreate" (or "AuthTokenGet" when that failed) */
    int unsent; /* 1: the request surely never reached the server (no connection
                 * could be made, or the auth token it waited for failed) */
};

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
    char *service;  /* "modal.client.ModalClient" */
    int tls;
    char *token_id, *token_secret;
    char *auth_token;       /* NULL until fetched */
    double auth_refresh_at; /* wall clock */
    struct grpc_call *auth_call;
    struct grpc_call *auth_wait, *auth_wait_tail; /* calls waiting for a token */
    struct grpc_call *calls;                      /* every live call */
    struct curl_slist *extra;                     /* static headers for every call */
    size_t max_msg;
    long connect_timeout_ms;
    int verbose;  /* SBXD_CURL_VERBOSE set: libcurl traces to stderr */
    int no_reuse; /* h2c on libcurl < 8.0: a fresh connection per call */
};

/**
 * Sets ch up for url ("https://api.modal.com:443", "http://127.0.0.1:9000";
 * no scheme means http) and service. token_id/token_secret are copied and
 * sent on every call. Returns 0, or -1 with err (SBX_E_PARAMS) for a bad URL
 * or token.
 */
int grpc_chan_init(struct grpc_chan *ch, struct ev_loop *loop, const char *url,
                   const char *service, const char *token_id, const char *token_secret,
                   sbx_err_t *err);

/** Cancels every call (no callbacks) and frees everything ch holds. */
void grpc_chan_deinit(struct grpc_chan *ch);

/** Adds a static header line "name: value" sent on every call. */
int grpc_chan_header(struct grpc_chan *ch, const char *line);

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
