/*
 * modal_ws_int.h - modal_ws.c's records and the reply handlers the fuzzer
 * (tests/fuzz/fuzz_modal_ws.c) hands Modal's replies to without a call.
 * The other Modal files use modal_ws.h only.
 */
#ifndef SBXD_MODAL_WS_INT_H
#define SBXD_MODAL_WS_INT_H

#include "providers/modal/modal_ws.h"

struct mws_port {
    int port, unencrypted, exposed;
    char *host, *uhost; /* NULL until SandboxGetTunnels said */
    int host_port, uport;
};

struct mws_stat;

struct mws {
    struct mws_port *ports;
    size_t nports;
    Modal__Client__PortSpec *specs, **specp;
    int net; /* 0: no egress option (OPEN, as before) */
    char **cidrs, **domains;
    size_t ncidrs, ndomains;
    json_t *allow;       /* the request's list, for sandbox.get */
    char *tunnels_of;    /* the Modal sandbox id the tunnel data is of */
    char *fetching;      /* the Modal sandbox id tcall asks about */
    char *tunnels_error; /* why they are not known */
    struct grpc_call *tcall;
    json_t *start_result; /* a start waiting for its tunnels (owned) */
    int start_waits;
    struct mws_stat *stats;
    double last_t;
    uint64_t last_cpu, last_mem;
};

struct mws_stat {
    struct mws_stat *next;
    struct msb *ms;
    struct grpc_call *call;
    void (*done)(void *data, json_t *stats, sbx_err_t *err);
    void *data;
};

/* Non-static for the fuzzer. */

/* Frees what modal_ws_new made (modal_ws_free(ms) is a sandbox's end: it
 * cancels the calls and answers the waiting stats first). */
void modal_ws_release(struct mws *w);
/* SandboxGetTunnels' reply for ms (privdata): the declared ports' tunnels. */
void modal_ws_tunnels_done(struct grpc_call *c, const struct grpc_status *st,
                           const uint8_t *msg, size_t len, void *privdata);
/* SandboxGetResourceUsage's reply for the sample s (privdata): s->done gets
 * the rates since the previous sample. */
void modal_ws_stats_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata);

#endif
