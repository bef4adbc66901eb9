/*
 * modal_ws.h - sandboxes as workspaces on Modal (issue 18): terminals
 * (PTYInfo on TaskExecStart / ContainerExec), ports in (tunnels declared at
 * create, SandboxGetTunnels behind sandbox.expose), ports out (NetworkAccess
 * from options.egress) and stats (SandboxGetResourceUsage). Only the Modal
 * provider's files include it; the hooks below are all the lifecycle and
 * process rooms call.
 */
#ifndef SBXD_MODAL_WS_H
#define SBXD_MODAL_WS_H

#include "providers/modal/modal_int.h"

/** Keeps the config keys modal_ws.c reads (conf borrowed). */
void modal_ws_load(struct mprov *mp, json_t *conf);
void modal_ws_unload(struct mprov *mp);

/**
 * Checks options.ports and options.egress (opts borrowed) against the
 * config: *out is NULL when neither is given, else what the create sends.
 * <0 with err for a bad or refused option.
 */
int modal_ws_new(struct mprov *mp, json_t *opts, struct mws **out, sbx_err_t *err);

/** Frees ms->ws: calls in flight are cancelled, stats waiting are failed. */
void modal_ws_free(struct msb *ms);

/** Fills def's open_ports (already pointing at a PortSpecs) and network_access. */
void modal_ws_create(struct msb *ms, Modal__Client__Sandbox *def);

/**
 * A start of ms succeeded with result (stolen). Returns 1 when modal_ws
 * ends the op itself (it first learns the declared ports' tunnels), 0 when
 * the caller calls sandbox_op_done (result then untouched).
 */
int modal_ws_start_done(struct msb *ms, json_t *result);

/** ms runs another Modal sandbox (restart, adoption): its tunnels are fetched anew. */
void modal_ws_refresh(struct msb *ms);

/** Sets req's pty_info from spec's "pty" (pty is the storage it points to). */
void modal_ws_pty_router(json_t *spec,
                         Modal__TaskCommandRouter__TaskExecStartRequest *req,
                         Modal__Client__PTYInfo *pty);
void modal_ws_pty_ce(json_t *spec, Modal__Client__ContainerExecRequest *req,
                     Modal__Client__PTYInfo *pty);

/** Adds ports and network access to sandbox.get's metadata. */
void modal_ws_metadata(struct msb *ms, json_t *o);

/* The provider ops (provider.h, "issue 18"). */
int modal_ws_resize(void *cookie, struct process *p, unsigned cols, unsigned rows,
                    sbx_err_t *err);
int modal_ws_stats(void *cookie, struct sandbox *sb, int with_size,
                   void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                   sbx_err_t *err);
int modal_ws_expose(void *cookie, struct sandbox *sb, int port, int host_port,
                    json_t **out, sbx_err_t *err);
int modal_ws_unexpose(void *cookie, struct sandbox *sb, int port, sbx_err_t *err);

#endif
