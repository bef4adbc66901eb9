/*
 * daemon.h - the daemon's global state. There is one daemon per process and
 * one libev loop, so this is a single global (D), as in Redis's `server`.
 */
#ifndef SBXD_DAEMON_H
#define SBXD_DAEMON_H

#include <ev.h>
#include <jansson.h>
#include <sys/types.h>

#include "config.h"
#include "core/provider.h"

struct session;
struct sandbox;

struct provider_inst {
    const struct sbx_provider *ops;
    void *cookie;
    int enabled;
    int loaded;
    char *load_error; /* why load failed, owned */
};

#define MAX_PROVIDERS 8

struct daemon {
    struct ev_loop *loop;
    struct sbx_config cfg;
    ev_tstamp started_mono;
    char *exe_path; /* this binary, for worker processes */

    int listen_fd;
    int listen_activated; /* socket came from systemd: don't unlink it */
    ev_io listen_io;
    ev_prepare prepare;
    /* How long the loop's turns take in the loop thread's own CPU time
     * (wall time would count the host's other load): one client's work
     * must not hold the others' up (issue 11). Cumulative, so that a
     * caller can diff two daemon.info readings. */
    struct {
        double cpu0; /* the thread's CPU time when the last turn ended */
        uint64_t turns;
        uint64_t over[5]; /* turns over 1, 2, 4, 8, 16 ms */
        double longest_ms;
    } turn;
    ev_signal sig_term, sig_int, sig_hup;

    struct session *sessions;
    int nsessions;
    uint64_t next_session_id;

    struct sandbox *sandboxes;
    int nsandboxes;
    int nprocesses; /* live (queued or running) */

    json_t *snapshots; /* "snap-…" -> {provider, owner, created_at, data} */

    gid_t admin_gid;
    int have_admin_gid;

    struct provider_inst providers[MAX_PROVIDERS];
    int nproviders;

    int draining;
};

extern struct daemon *D;

struct provider_inst *daemon_provider(const char *name);
/* Wall clock now as "2026-11-29T20:00:00.123Z" into buf (>= 40 bytes). */
const char *daemon_timestamp(double t, char *buf);
double daemon_now(void);
/* Random hex id with a prefix: "sb-" + 16 hex. buf >= 64. */
void daemon_random_id(const char *prefix, char *buf, size_t n);

#endif
