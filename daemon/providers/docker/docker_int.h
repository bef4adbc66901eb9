/*
 * docker_int.h - the Docker provider's private interface, shared by its files.
 *
 * Every function or variable a file exports carries that file's prefix, so a
 * name says where it lives (statics carry none, or keep the one they had).
 * The types and constants shared through this header keep the provider's
 * dk_/DK_ (struct dk_sb, dk_proc, dk_prov, dk_engine, dk_req, ...).
 *
 *   file               prefix     what it is
 *   docker.c           dk_        the provider table, its ops, adoption, records
 *   docker_lc.c        dklc_      the lifecycle: a step table of engine calls
 *   docker_agent.c     dka_       the agent link: attach stream, frames,
 *                                 handshake, reconcile (the agent's ptrans)
 *   docker_direct.c    dkd_       the agent channel moved to a Unix socket
 *   docker_exec.c      dkx_       exec_mode docker-exec: the engine's ptrans
 *   docker_spawn.c     dkspawn_   what sbxd adds to a create body and a process
 *   docker_pool.c      dkp_       warm pools
 *   docker_fs.c        dkf_       fs.* through the agent
 *   docker_archive.c   dkar_      tar streams (docker_archive.h)
 *   docker_mount.c     dkm_       sandbox.mount / unmount (docker_mount.h)
 *   docker_net.c       dkn_       sandbox.expose, the egress proxy's relay
 *   docker_pty.c       dkpty_     terminals held by sbx-init
 *   docker_stats.c     dkstats_   sandbox.stats from the engine
 *   docker_sec.c       dks_       hardening: the user check, disk limits
 *   docker_spec.c      dkspec_    options -> container create body, names,
 *                                 sizes, the agent tar (a leaf)
 *   docker_hijack.c    dkh_       upgraded ("hijacked") attach/exec streams
 *                                 (struct dkh), Docker's 8-byte frames out
 *   docker_api.c       dkapi_     the Engine API over libcurl's multi
 *                                 interface (curlev): requests, answers,
 *                                 version negotiation, liveness
 *   policy.c           policy_           who may loosen the hardening (policy.h)
 *   policy_expose.c    policy_expose_    who may expose ports (policy_expose.h),
 *                                        a leaf below policy.c
 *   policy_reserved.c  policy_reserved   names only sbxd sets (policy.h)
 *   egress_rule.c      egress_rule_      egress allow-list entries (egress_rule.h)
 *
 * Nothing here blocks: every engine call is a curlev request or a hijacked
 * connection watched by the daemon's libev loop.
 */
#ifndef SBXD_DOCKER_INT_H
#define SBXD_DOCKER_INT_H

#include <curl/curl.h>
#include <ev.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "io/chan.h"
#include "io/curlev.h"
#include "err.h"
#include "io/obuf.h"
#include "io/pchan.h"
#include "core/sandbox_obj.h"
#include "daemon.h"

struct sandbox;
struct process;

/* The Docker half of SB, or NULL when SB belongs to another provider. The
 * provider is told by its table's name, not the table's address, so that
 * the files below docker.c (net, mount, stats) never name docker.c's table
 * and nothing calls up into it. */
static inline struct dk_sb *dk_sb_of(const struct sandbox *sb)
{
    return sb && sb->prov && sb->prov->ops && strcmp(sb->prov->ops->name, "docker") == 0
               ? sb->pdata
               : NULL;
}

#define DK_API_MIN_MAJOR 1
#define DK_API_MIN_MINOR 41
#define DK_API_MAX "1.47"         /* the newest API version we ask for */
#define DK_BODY_MAX (16u << 20)   /* largest engine answer we buffer */
#define DK_LINE_MAX (64u << 10)   /* longest JSON progress line */
#define DK_CALL_TIMEOUT_MS 120000 /* one ordinary engine call */
#define DK_CONNECT_TIMEOUT_MS 5000
#define DK_PULL_TIMEOUT_MS (30 * 60 * 1000)
#define DK_COMMIT_TIMEOUT_MS (10 * 60 * 1000)

/* ---- the engine (docker_api.c) ---------------------------------------------- */

struct dk_engine {
    struct curlev ce;
    char *host;      /* as configured: unix:///path or tcp://host:port */
    char *unix_path; /* set for unix:// */
    char *base;      /* URL prefix: http://localhost, https://h:p or http://h:p */
    int tls;
    char *tls_ca, *tls_cert, *tls_key;
    int tls_verify;
    char version[16];     /* negotiated, e.g. "1.41"; "" before the first ping */
    char cfg_version[16]; /* the highest version allowed by config, or "" */
    char engine_version[64];
    char server_api[16]; /* the engine's own newest API version */
    int up;              /* the last ping (or call) reached the engine */
    char reason[300];    /* why not, when !up */
    int ever_up;
    struct dk_req *ping; /* in flight */
    ev_timer ping_timer;
    /* Called once after each transition to up (adoption, waking sandboxes). */
    void (*on_up)(struct dk_engine *e, void *data);
    void *on_up_data;
    /* A ping failed (the engine is down or unreachable); on_up_data too. */
    void (*on_down)(struct dk_engine *e, void *data);
    struct dk_reqlist *misc; /* provider-level requests (ping, adoption) */
};

/* An answer. json is the parsed body when it is JSON (else NULL); body/len
 * the raw bytes. transport: the engine was not reached (status 0). Borrowed:
 * valid during the callback only. */
struct dk_resp {
    long status;
    json_t *json;
    const char *body;
    size_t len;
    int transport;
    const char *errmsg;      /* transport error, or the engine's "message" */
    const char *api_version; /* the Api-Version header, when sent */
};

typedef void (*dk_cb)(struct dk_resp *r, void *data);
/* One line of a streamed JSON-lines answer (image pull); return 0 to go on. */
typedef int (*dk_line_cb)(const char *line, size_t len, void *data);

/* A list of requests owned by someone (a sandbox, a process): cancelled together. */
struct dk_reqlist {
    struct dk_req *head;
};

int dkapi_engine_init(struct dk_engine *e, json_t *conf, sbx_err_t *err);
void dkapi_engine_deinit(struct dk_engine *e);
/* Starts pinging (at load); on_up runs after each successful ping that follows a failure.
 */
void dkapi_engine_start(struct dk_engine *e);
/* A transport failure seen somewhere: mark the engine down and ping soon. */
void dkapi_engine_failed(struct dk_engine *e, const char *why);
/* "/v1.41" + path; malloc'd. */
char *dkapi_path(struct dk_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Percent-encodes s for a query string or path segment; malloc'd. */
char *dkapi_escape(const char *s);

/* Starts a request. path is complete (use dkapi_path). body: JSON (borrowed) or
 * NULL. list may be NULL. Returns NULL when libcurl refuses (cb not called). */
struct dk_req *dkapi_call(struct dk_engine *e, struct dk_reqlist *list,
                          const char *method, const char *path, json_t *body,
                          long timeout_ms, dk_cb cb, void *data);
/* Same with a raw body and content type (archive upload). */
struct dk_req *dkapi_call_raw(struct dk_engine *e, struct dk_reqlist *list,
                              const char *method, const char *path, const char *ctype,
                              const void *body, size_t len, long timeout_ms, dk_cb cb,
                              void *data);
/* Same, the answer streamed as JSON lines to on_line (nothing is buffered). */
struct dk_req *dkapi_call_lines(struct dk_engine *e, struct dk_reqlist *list,
                                const char *method, const char *path, long timeout_ms,
                                dk_line_cb on_line, dk_cb cb, void *data);
void dkapi_req_cancel(struct dk_req *r);
void dkapi_reqlist_cancel(struct dk_reqlist *l);
int dkapi_reqlist_busy(const struct dk_reqlist *l);

/* Fills err from a failed answer: -32002 when the engine was not reached,
 * else -32006 {provider, message, status}. what = the step ("create container").
 * Returns -1. */
int dkapi_err(sbx_err_t *err, struct dk_resp *r, const char *what);
/* Applies the engine's TLS settings to an easy handle. */
void dkapi_engine_tls(struct dk_engine *e, CURL *easy);

/* ---- hijacked connections (docker_hijack.c) ------------------------------------ */

struct dkh;
/* The request was answered: status 101/200 = streaming; anything else is an
 * error (msg = the engine's message or a transport error) and h is freed
 * after the callback. */
typedef void (*dkh_open_cb)(struct dkh *h, long status, const char *msg, void *data);
/* Demultiplexed bytes: stream 1 stdout, 2 stderr. Valid during the call only. */
typedef void (*dkh_data_cb)(struct dkh *h, int stream, const uint8_t *d, size_t n,
                            void *data);
/* The stream ended (EOF, error, protocol error); h is freed after the callback. */
typedef void (*dkh_close_cb)(struct dkh *h, const char *why, void *data);

/* Connects, sends `method path` with Upgrade: tcp and the JSON body (borrowed,
 * may be NULL). out: the bytes to send once upgraded (borrowed, may be NULL;
 * call dkh_flush after appending). NULL when libcurl refuses at once. */
struct dkh *dkh_open(struct dk_engine *e, const char *method, const char *path,
                     json_t *body, struct obuf *out, dkh_open_cb on_open,
                     dkh_data_cb on_data, dkh_close_cb on_close, void *data);
/* Writes what it can of *out now; the rest when the socket is writable. */
void dkh_flush(struct dkh *h);
/* Stops/starts reading (flow control). */
void dkh_pause(struct dkh *h, int paused);
/* Half-closes the sending side once *out is empty (plain sockets only; -1 on TLS). */
int dkh_shutdown_write(struct dkh *h);
/* Ends the connection: no callback runs after this. Safe inside callbacks. */
void dkh_close(struct dkh *h);
int dkh_streaming(const struct dkh *h);

/* ---- options and container specs (docker_spec.c) -------------------------------- */

/* Effective options: config defaults (providers.docker), then conf.options,
 * then the top-level conf image/env/working_dir. New reference; -1 = err filled. */
int dkspec_options(json_t **out, json_t *pconf, json_t *sbconf, sbx_err_t *err);
/* The container create body from effective options. argv0: entrypoint
 * (agent path inside the container) or NULL (exec mode without agent). */
int dkspec_create_body(json_t **out, json_t *opts, const char *sandbox_id, uid_t owner,
                       const char *entry, json_t *labels_extra, sbx_err_t *err);
/* Differences between requested hardening (opts) and a container's inspect JSON. */
json_t *dkspec_warnings(json_t *opts, json_t *inspect);
/* Sanitised container name; malloc'd. */
char *dkspec_name(const char *want, const char *sandbox_id);
/* "512m" -> bytes; -1 if invalid. Integers pass through. */
int64_t dkspec_parse_size(json_t *v);
/* image ref with a tag (":latest" added when none and no digest); malloc'd. */
char *dkspec_image_ref(const char *image);
/* A one-file ustar archive in memory: name (no '/'), mode, data. malloc'd. */
int dkspec_tar_one(uint8_t **out, size_t *out_len, const char *name, unsigned mode,
                   const uint8_t *data, size_t len);
/* The agent as an image tree: .sbx/, .sbx/run/, .sbx/sbx-init. malloc'd. */
int dkspec_tar_agent_tree(uint8_t **out, size_t *out_len, const uint8_t *data,
                          size_t len);
/* ["K=V", ...] <-> {"K": "V"} */
json_t *dkspec_env_to_obj(json_t *arr);
json_t *dkspec_env_to_arr(json_t *obj);
/* Bool/int/string leniency for --opt values. */
int dkspec_opt_bool(json_t *opts, const char *key, int dflt);
const char *dkspec_opt_str(json_t *opts, const char *key);

/* ---- the provider (docker.c) ------------------------------------------------------- */

enum dk_phase {
    PH_IDLE,
    PH_LOOKUP,
    PH_INSPECT,
    PH_IMAGE,
    PH_PULL,
    PH_CREATE,
    PH_UPLOAD,
    PH_UNPAUSE,
    PH_ATTACH,
    PH_START,
    PH_HANDSHAKE,
    PH_DIRECT, /* moving the channel to the direct socket (docker_direct.c) */
    PH_USER,   /* reading the image's passwd/group for the user (docker_sec.c) */
    PH_STOP,
    PH_DESTROY,
};

/* Why the lifecycle machine runs: a core op, or our own recovery. */
enum dk_why { WHY_NONE, WHY_START, WHY_RECOVER };

struct dk_prov;
struct dk_sb;
struct dk_proc;

/*
 * What the agent link (docker_agent.c, docker_direct.c), the engine exec
 * (docker_exec.c) and the user check (docker_sec.c) report to the lifecycle
 * above them. The provider (docker.c) sets ds->up; they call these, never the
 * lifecycle by name.
 */
struct dk_link_ev {
    void (*step)(struct dk_sb *ds); /* the current phase's work is done: run the next */
    void (*ok)(struct dk_sb *ds);   /* the machine's run succeeded */
    void (*fail)(struct dk_sb *ds, sbx_err_t *err);     /* it failed with err (taken) */
    void (*trouble)(struct dk_sb *ds, const char *why); /* the link ended while idle */
    void (*release)(struct dk_sb *ds); /* a deferred free of a released sandbox is due */
    /* a process record for a process the agent still runs (adopted) */
    struct dk_proc *(*adopt)(struct dk_sb *ds, struct process *p);
    void (*ready)(struct dk_sb *ds);  /* handshake done, before the reconciliation */
    void (*linked)(struct dk_sb *ds); /* handshake done and reported */
    void (*reset)(struct dk_sb *ds, const char *why); /* frames in flight are lost */
    void (*lost)(struct dk_sb *ds);                   /* the channel is gone */
};

/* What the direct socket (docker_direct.c) reports to the agent link above it. */
struct dkd_ev {
    chan_frame_cb frame;
    void (*resync)(struct dk_sb *ds); /* the channel moved (or failed to): handshake */
    int (*send_json)(struct dk_sb *ds, uint8_t type, uint32_t pid, json_t *v);
};

/* One way of running a sandbox's processes: the agent's channel (dka_ptrans,
 * docker_agent.c) or the engine's exec API (dkx_ptrans, docker_exec.c). The
 * provider's process ops do the common part, then call ds's transport. */
struct dk_ptrans {
    int (*spawn)(struct dk_sb *ds, struct dk_proc *dpp, sbx_err_t *err);
    int (*write)(struct dk_proc *dpp, const void *data, size_t len, sbx_err_t *err);
    int (*close_stdin)(struct dk_proc *dpp, sbx_err_t *err);
    int (*kill)(struct dk_proc *dpp, int sig, sbx_err_t *err);
    void (*resume)(struct dk_proc *dpp);
    void (*release)(struct dk_proc *dpp); /* before the record is freed */
};
extern const struct dk_ptrans dka_ptrans, dkx_ptrans;

enum dkd_state { DKD_OFF, DKD_ASKED, DKD_INSPECT, DKD_PROVE, DKD_ON, DKD_LOST };
#define DKD_TOKEN 32 /* hex digits of the one-time key and answer */

struct dk_proc {
    struct dk_proc *next, *prev; /* in the sandbox */
    struct process *p;
    struct dk_sb *ds;
    uint32_t pid;
    struct pchan_proc pc; /* credit owed, STARTED seen, output muted (io/pchan.h) */
    int spawned;          /* SPAWN sent (agent) / exec started (exec mode) */
    int exited;           /* EXIT seen (agent) or stream over (exec mode) */
    int retried;          /* respawned once after the container was restarted */
    int adopted;
    struct obuf stdin_buf; /* exec mode: bytes for the exec's stdin */
    int stdin_eof;
    /* exec mode */
    char exec_id[80];
    char marker[96]; /* SBX_PROC value: kill finds the process tree by it */
    struct dkh *hj;
    struct dk_reqlist reqs;
    int out_paused;
    int inspect_tries; /* exec mode: inspects of a finished exec */
};

struct dk_sb {
    struct sandbox *sb;
    struct dk_prov *dp;
    const struct dk_link_ev *up; /* the lifecycle's events (docker.c) */
    const struct dkd_ev *dev;    /* the agent link's, for the direct socket */
    char cid[80];                /* container id, "" = none known */
    char *name;
    int exec_mode;    /* 1 = docker-exec */
    json_t *opts;     /* effective options of the last start */
    json_t *base_env; /* container env as an object (image + create env) */
    json_t *image_env;
    json_t *warnings; /* array or NULL */
    char *image_id;
    int reconnected;   /* found an existing container by label */
    int restarts;      /* container restarts done for retries */
    int recreated;     /* containers made again after one was removed */
    char *pool;        /* the warm pool its container came from, or NULL */
    int agent_mounted; /* the last create mounted the agent (no upload) */
    int pool_record;   /* taken from a pool: rename it and leave its config once ready */

    enum dk_phase phase;
    enum dk_why why;
    struct dk_reqlist reqs;      /* lifecycle calls (the machine, stop, destroy) */
    struct dk_reqlist snap_reqs; /* a commit */
    int running;                 /* container state seen by the last inspect */
    int paused;
    int need_start;

    /* agent channel */
    struct dkh *att;
    struct chan ch; /* fed by the attach stream */
    int ch_live;
    struct pchan pc;  /* the frames of ch and dch (io/pchan.h) */
    struct chan *cur; /* where frames go and come from: &ch or &dch */
    int att_sync;     /* attach: skipping to an exact PONG header (CHANNEL.md Resync) */
    int sync_k;       /* bytes of that header matched so far */
    /* the direct socket (docker_direct.c) */
    struct chan dch;
    int dch_live;
    enum dkd_state dstate;
    int dtries;
    int dlost;  /* dch closed; handled from dtimer */
    int dmoved; /* the agent said another client took it over */
    char dkey[DKD_TOKEN + 1], danswer[DKD_TOKEN + 1];
    char dpath[108];
    ev_timer dtimer;
    struct dk_reqlist dreqs;
    int ready; /* handshake done */
    int pong;  /* PONG seen in this handshake */
    int pings;
    int first_hello; /* adopt unknown processes from the next HELLO */
    ev_timer hs_timer;
    ev_timer retry_timer;
    int recovering;

    struct dk_proc *procs;
    json_t *hello;     /* the HELLO that ends a handshake */
    char errline[256]; /* agent stderr, line being collected */
    size_t errlen;
    int errlines;
    int in_feed;   /* inside chan_feed: frees are deferred */
    int in_direct; /* inside a frame of the direct socket: freed from dtimer */
    int dead;      /* released while in_feed */
    json_t *pull_last;
    double pull_t;

    /* docker_sec.c: the user check after create, disk limits */
    int user_check;           /* PH_USER runs after the create */
    enum dk_phase user_then;  /* the phase after it */
    int user_step, user_link; /* 0 passwd, 1 group; a file was a link */
    char *user_passwd, *user_group;
    size_t user_passwd_len, user_group_len;
    int disk_quota;    /* the engine enforces options.disk (StorageOpt) */
    int disk_busy;     /* a size request in flight */
    int disk_exceeded; /* killed for it */
    int64_t disk_used; /* the last measured SizeRw */
    struct dk_reqlist disk_reqs;

    /* files (docker_fs.c) */
    struct dkf_req *fs_reqs;
    uint32_t fs_next;
    ev_timer fs_timer;
    uint64_t mem_peak;       /* docker_stats.c: the highest memory use sampled */
    struct dkn_port *ports;  /* docker_net.c: exposed ports */
    uint32_t next_conn;      /* their connections' ids on the channel */
    struct dkn_port *egress; /* docker_net.c: the egress proxy's connections */
    uint64_t egress_refused;
    /* net18: the per-sandbox bounds of exposed ports (policy_expose.c) */
    int64_t expose_max_conns, expose_max_bytes; /* -1 unlimited */
    uint64_t expose_bytes, expose_refused;
    int lookups;             /* egress names being resolved for it */
    uint64_t egress_limited; /* egress refused by a lookup bound (503) */
};

/* The image of a create that names none and has none in config. */
#define DK_DEFAULT_IMAGE "debian:bookworm-slim"

struct dk_prov {
    struct dk_engine eng;
    json_t *conf;     /* providers.docker, owned */
    int exec_mode;    /* default */
    char *agent_path; /* NULL = not found */
    uint8_t *agent_tar;
    size_t agent_tar_len;
    char agent_err[300];
    struct dk_reqlist misc;
    int adopted_once;
    int direct;            /* direct_channel: try the direct socket on local engines */
    struct policy *policy; /* providers.docker.policy */
    int agent_bind;        /* local engine: bind-mount agent_path read-only */
    char agent_holder[96]; /* remote engine: the holder container with the agent, "" =
                              none yet */
    char agent_hash[17];   /* of the agent binary: names the holder and its image */
    int holder_busy;       /* making the holder */
    int agent_share;       /* agent_mount auto */
    uint8_t *agent_tree;   /* the agent as an image tree, for the holder's import */
    size_t agent_tree_len;
    struct dk_pool **pools; /* warm pools (docker_pool.c) */
    int npools;
    int pools_clean; /* an earlier sbxd's unused pool containers are gone */
    ev_timer pool_timer;

    /* docker_sec.c: disk limits */
    int disk_mode; /* DKS_DISK_* */
    char disk_driver[32], disk_backing[32];
    ev_timer disk_timer;
    /* docker_pool.c: claims of taken pool containers, by container id */
    json_t *claims; /* cid -> claim volume labels, while listing after a restart */
    /* docker.c: adopts a container the pool listing found claimed */
    void (*adopt_entry)(struct dk_prov *dp, json_t *c);
};

#define DKS_DISK_UNKNOWN 0
#define DKS_DISK_QUOTA 1
#define DKS_DISK_MEASURED 2

/* docker_sec.c */
/* Fills the hardened built-in defaults into providers.docker (conf) where unset. */
void dks_defaults(json_t *conf);
/* 1 when the user of ds->opts must be resolved in the image after the create. */
int dks_user_needed(struct dk_sb *ds);
/* PH_USER: reads /etc/passwd and /etc/group of the created container, decides. */
void dks_user_next(struct dk_sb *ds);
void dks_user_free(struct dk_sb *ds);
/* The first regular file of a tar (the archive endpoint's answer), or NULL;
 * *n its size; *link set when the entry is a link. Untrusted input. */
const char *dks_tar_first_file(const char *b, size_t len, size_t *n, int *link);
void dks_engine_up(struct dk_prov *dp);
void dks_unload(struct dk_prov *dp);
/* Adds StorageOpt size to a create body where the driver enforces it. */
void dks_create_body(struct dk_sb *ds, json_t *body);
/* A create failed: 1 when it was the quota and the create runs again without. */
int dks_create_failed(struct dk_sb *ds, struct dk_resp *r);
/* The per-uid disk total (disk_per_uid): -1 with -32005 past it. */
int dks_disk_total(struct dk_prov *dp, struct sandbox *sb, json_t *opts, sbx_err_t *err);
json_t *dks_info(struct dk_prov *dp);
json_t *dks_metadata(struct dk_sb *ds);

/* A taken pool container's claim: a volume of this name + container id whose
 * labels (sbxd.claim, id, owner, conf, created) sbxd alone writes. */
#define DK_CLAIM_PREFIX "sbxd-claim-"

/* ---- files (docker_fs.c) --------------------------------------------------------- */
struct fs_call;
struct sbx_chan_hdr;
/* provider.h's fs_call and fs_release. */
int dkf_call(void *cookie, struct fs_call *fc, sbx_err_t *err);
void dkf_release(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata);
/* An FS_DATA, FS_RESULT or FS_EVENT frame from the agent. */
void dkf_frame(struct dk_sb *ds, const struct sbx_chan_hdr *h, const uint8_t *payload);
/* The handshake is done: send the requests that waited for it. */
void dkf_kick(struct dk_sb *ds);
/* The channel was reset: calls in flight fail (their answers may be lost). */
void dkf_reset(struct dk_sb *ds, const char *why);
/* The sandbox is released: everything fails or goes. */
void dkf_release_all(struct dk_sb *ds);
#define DK_AGENT_DIR "/.sbx"
#define DK_AGENT_IN "/.sbx/sbx-init"

/* docker_pool.c */
int dkp_load(struct dk_prov *dp, json_t *conf, sbx_err_t *err);
void dkp_unload(struct dk_prov *dp);
void dkp_engine_up(struct dk_prov *dp);
void dkp_refill(struct dk_prov *dp);
/* Takes a ready container of a pool whose options equal opts: its id into
 * cid, its env (new reference) into *env; the pool's name, or NULL. */
const char *dkp_take(struct dk_prov *dp, json_t *opts, char *cid, size_t n, json_t **env);
json_t *dkp_info(struct dk_prov *dp);
/* The provider's shutdown_drain (provider.h; cookie is the dk_prov): the
 * pools' unused containers and those being filled are removed. */
int dkp_shutdown_drain(void *cookie, void (*done)(void *data), void *data);
/* Adopts a container from a /containers/json entry (labels sbxd.id, owner, conf). */
void dk_adopt_entry(struct dk_prov *dp, json_t *c);

/* docker_spawn.c: what sbxd adds to a create body and a process */
/* Mounts the agent into a create body without an upload (bind or holder). */
void dkspawn_agent_mount(struct dk_prov *dp, json_t *body);
/* A process's environment (new reference) and working directory (borrowed). */
json_t *dkspawn_env(struct dk_sb *ds, struct process *p);
const char *dkspawn_cwd(struct dk_sb *ds, struct process *p);

/* docker_exec.c */
int dkx_spawn(struct dk_sb *ds, struct dk_proc *dpp, sbx_err_t *err);
int dkx_write(struct dk_proc *dpp, const void *data, size_t len, sbx_err_t *err);
int dkx_close_stdin(struct dk_proc *dpp, sbx_err_t *err);
int dkx_kill(struct dk_proc *dpp, int sig, sbx_err_t *err);
void dkx_resume(struct dk_proc *dpp);
void dkx_release(struct dk_proc *dpp);

/* docker_direct.c */
/* After the attach handshake: asks the agent for its socket (phase PH_DIRECT).
 * -1 when the direct socket does not apply; the caller goes on as before. */
int dkd_begin(struct dk_sb *ds);
/* A DIRECT frame from the agent on ch. */
void dkd_frame(struct dk_sb *ds, struct chan *ch, const uint8_t *payload, size_t len);
/* Drops the direct socket (if any); frames use the attach stream again. */
void dkd_close(struct dk_sb *ds);
void dkd_timer(struct dk_sb *ds);
/* Connects to the Unix socket at path inside the root of process pid, never
 * following a symlink. A nonblocking fd, or -1 with a message in err. */
int dkd_connect(long pid, const char *path, char *err, size_t errlen);
/* Create body: a runtime other than runc (gVisor) gets the agent's run
 * directory as a local tmpfs volume, so that its socket can be seen from the
 * host (runsc --host-uds=create). 1 when the run directory is seen to. */
int dkd_run_volume(struct dk_prov *dp, json_t *body);
void dkd_closed(struct chan *ch, const char *why, void *data);

/* docker_lc.c: the lifecycle machine */
/* The value of every container's sbxd.socket label: which sbxd it is of. */
const char *dklc_label_socket(void);
/* Removes a pooled container's claim, then answers the destroy; 0 when the
 * request cannot start. */
int dklc_claim_remove(struct dk_sb *ds);
/* The core's start op, its options set in ds: the machine's first phase
 * (inspect a known container, look one up by label, or make one; a warm
 * pool container answers at once). */
void dklc_start(struct dk_sb *ds);
void dklc_container_trouble(struct dk_sb *ds, const char *why);
/* Runs the current phase; ends the machine's run with success or err. */
void dklc_next(struct dk_sb *ds);
void dklc_ok(struct dk_sb *ds);
void dklc_fail(struct dk_sb *ds, sbx_err_t *err);
/* Frees the provider state of a released sandbox (deferred while in_feed/in_direct). */
void dk_ds_free(struct dk_sb *ds);
/* The provider state of a sandbox (sb->pdata), with its agent link set up. */
struct dk_sb *dk_ds_new(struct dk_prov *dp, struct sandbox *sb);
/* A process record of the sandbox, linked to p (p->pdata). */
struct dk_proc *dk_proc_new(struct dk_sb *ds, struct process *p);

/* docker_agent.c: the agent channel */
void dka_init(struct dk_sb *ds); /* timers of a new dk_sb */
/* PH_ATTACH: a new chan and the attach stream; -1 when libcurl refuses. */
int dka_attach(struct dk_sb *ds);
/* PH_HANDSHAKE: PING until PONG and HELLO; then reconcile and dklc_ok(). */
void dka_handshake(struct dk_sb *ds);
void dka_open_channel(struct dk_sb *ds);
/* The attach stream's data callback (docker_hijack.c): stream 1 = channel
 * frames (with the PONG resync), 2 = the agent's diagnostics. */
void dka_att_data(struct dkh *h, int stream, const uint8_t *d, size_t n, void *data);
void dka_close_attach(struct dk_sb *ds);
/* Frames on ds->cur; -1 when the channel is closed or full. */
int dka_send_frame(struct dk_sb *ds, uint8_t type, uint32_t pid, const void *d, size_t n);
int dka_send_u32(struct dk_sb *ds, uint8_t type, uint32_t pid, uint32_t v);

/* ---- docker_pty.c: terminals held by sbx-init (issue 18) ---- */
/* provider op proc_resize: RESIZE to the agent, or kept in the spec until
 * the SPAWN goes out. */
int dkpty_proc_resize(void *cookie, struct process *p, unsigned cols, unsigned rows,
                      sbx_err_t *err);

/* ---- docker_net.c: sandbox.expose, connections over the channel ---- */
struct dkn_port;
struct sbx_expose_req;
int dkn_sb_expose(void *cookie, struct sandbox *sb, int port, int host_port, json_t **out,
                  sbx_err_t *err);
int dkn_sb_unexpose(void *cookie, struct sandbox *sb, int port, sbx_err_t *err);
/* net18: provider op sb_expose_req (host address, Unix socket, policy). */
int dkn_sb_expose_req(void *cookie, struct sandbox *sb, const struct sbx_expose_req *req,
                      json_t **out, sbx_err_t *err);
/* sandbox.stats' ports member: {exposed, connections, connections_total,
 * refused, bytes_in, bytes_out, max_connections, max_bytes} (new). */
json_t *dkn_stats(struct dk_sb *ds);
/* A NET_* frame from the agent. */
void dkn_frame(struct dk_sb *ds, uint8_t type, uint32_t id, const uint8_t *p, size_t n);
/* The channel is gone: its connections end (listeners stay). */
void dkn_channel_lost(struct dk_sb *ds);
/* For sandbox.get's metadata: the exposed ports (new reference). */
json_t *dkn_ports_json(struct dk_sb *ds);
/* The sandbox is released: listeners and connections end. */
void dkn_release(struct dk_sb *ds);
/* After a handshake: the agent serves the egress proxy when the sandbox has one. */
void dkn_egress_ready(struct dk_sb *ds);
/* sandbox.stats' egress member, or NULL without egress (new reference). */
json_t *dkn_egress_stats(struct dk_sb *ds);

/* ---- docker_stats.c: sandbox.stats from the engine's stats endpoint ---- */
int dkstats_sb_stats(void *cookie, struct sandbox *sb, int with_size,
                     void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                     sbx_err_t *err);
int dka_send_json(struct dk_sb *ds, uint8_t type, uint32_t pid, json_t *v);
/* SPAWN (then buffered stdin) once the agent is ready. */
void dka_send_spawn(struct dk_sb *ds, struct dk_proc *dpp);
/* Returns output credit (at CREDIT_BATCH, or any when force). */
void dka_send_credit(struct dk_sb *ds, struct dk_proc *dpp, int force);
/* The process ended with rec (borrowed); may free dpp. */
void dka_proc_gone(struct dk_sb *ds, struct dk_proc *dpp, json_t *rec);
void dka_frame(struct chan *ch, const struct sbx_chan_hdr *h, const uint8_t *payload,
               void *data);

#endif
