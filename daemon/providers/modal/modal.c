/*
 * modal.c - the Modal provider: a sandbox is a Modal Sandbox, driven over
 * Modal's own gRPC API (grpc.c on curlev, protobuf-c messages generated from
 * proto/modal/modal_api.proto). See shared/modal-protocol.md for the calls.
 *
 * Lifecycle jobs run as small state machines, one at a time per sandbox:
 *   start   AppGetOrCreate -> [SandboxGetFromName: adopt a running sandbox
 *           named like ours -> SandboxGetTaskId -> SandboxTagsGet: it must be
 *           this uid's] or: image (ImageGetOrCreate + ImageJoinStreaming,
 *           ImageFromId for a snapshot, or the image saved by stop) ->
 *           [SecretGetOrCreate for env] -> SandboxCreate -> SandboxGetTaskId
 *           -> SandboxTagsSet (owner uid)
 *   restart the same without the lookup, when a call found the sandbox dead
 *   stop    SandboxSnapshotFs -> SandboxTerminate (start recreates from it)
 *   destroy SandboxTerminate
 *   snapshot SandboxSnapshotFs
 * A lifecycle op asked for during a restart waits for it (pending_op).
 *
 * A process is one ContainerExec of a small sh wrapper whose argv carries a
 * per-process tag (so process.kill can really end the remote process group
 * with a second exec that finds it), two ContainerExecGetOutput streams
 * (resumed from the last batch index when they break, paused while the
 * followers can't keep up) and a ContainerExecWait long poll. The exit is
 * reported once the wait says completed and both streams delivered their last
 * batch, always from a fresh loop iteration (report_timer): the core may free
 * the process record inside process_exited.
 *
 * Outages: broken streams and waits are retried with backoff for
 * retry_budget_ms, then the exit says output_incomplete; ContainerExec is
 * repeated only when the attempt surely never reached Modal. Restarts: the
 * sandboxes, their running execs and the snapshots live in a state file (see
 * "state file" below) and are adopted on the first loop iteration; tags on
 * each Modal sandbox (owner, image, workdir, resources, env hash, deadline)
 * serve the by-name reconnect when the file is gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "grpc.h"
#include "log.h"
#include "modal_api.pb-c.h"
#include "obuf.h"
#include "process.h"
#include "provider.h"
#include "sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DEFAULT_URL "https://api.modal.com:443"
#define DEFAULT_APP "sbxd"
#define DEFAULT_IMAGE "ubuntu:22.04"
#define BUILDER_VERSION "2024.10"
#define SERVICE "modal.client.ModalClient"
#define UNARY_TIMEOUT_S 60.0
#define POLL_S 55.0       /* server-side long poll, as the SDK */
#define POLL_SLACK_S 30.0 /* our transfer timeout on top of it */
#define TASK_POLL_S 0.5
#define TASK_MAX_POLLS 600
#define MAX_STREAM_FAILS 10 /* image build log stream */
#define RETRY_BUDGET_MS 120000 /* default providers.modal.retry_budget_ms */
#define BACKOFF_FIRST_S 0.2
#define BACKOFF_MAX_S 5.0
#define TAIL_QUIET_S                                                                     \
    0.5               /* after the exit, a silent output stream is reopened after this */
#define TAIL_TRIES 16 /* ... this many times, then the rest of the output is given up */
#define KILL_CONFIRM_S 4.0 /* the core gives up on a timed-out process after 5 s */
#define STDIN_LIMIT (16u * 1024 * 1024)
#define STDIN_CHUNK (1u * 1024 * 1024)
#define MAX_LIFETIME_S 86400
#define MODAL_MAX_MSG (100u * 1024 * 1024) /* Modal's own limit */
#define TAG_OWNER "sbxd_owner_uid"
#define TAG_ID "sbxd_id"

/* Runs the command as a child of a shell whose argv carries the process's tag
 * ($0 = "sbxd-<tag>"), so that a second exec can find that shell and end its
 * process group or tree. Two commands, so no shell execs the last one away. */
static const char WRAPPER[] = "\"$@\"; exit $?";

/* Signals what runs below the wrapper tagged $0 with signal $1. SIGKILL ends
 * the wrapper's process group (when it leads one) and its whole process tree,
 * found through /proc and stopped first so nothing forks away in between.
 * Other signals go to the tree below the wrapper only: the wrapper then exits
 * with its child's status, as if the command had been signalled directly.
 * The pattern "sbx[d]-TAG" matches the wrapper's argv but neither grep's nor
 * this shell's. */
static const char KILLER[] =
    "s=$1; p=; i=0\n"
    "while [ -z \"$p\" ] && [ $i -lt 20 ]; do\n"
    "  for f in $(grep -lsa \"sbx[d]-$0\" /proc/[0-9]*/cmdline 2>/dev/null); do\n"
    "    x=${f#/proc/}; x=${x%/cmdline}\n"
    "    [ \"$x\" != \"$$\" ] && p=$x && break\n"
    "  done\n"
    "  [ -n \"$p\" ] || { sleep 0.1; i=$((i+1)); }\n"
    "done\n"
    "case \"$p\" in ''|*[!0-9]*) exit 0;; esac\n"
    "t=\" $p \"\n"
    "scan() {\n"
    "  c=1; n=0\n"
    "  while [ $c = 1 ] && [ $n -lt 8 ]; do\n"
    "    c=0; n=$((n+1))\n"
    "    for x in /proc/[0-9]*; do\n"
    "      y=${x#/proc/}\n"
    "      case \"$t\" in *\" $y \"*) continue;; esac\n"
    "      { read -r l <\"$x/stat\"; } 2>/dev/null || continue\n"
    "      set -- ${l##*) }\n"
    "      case \"$t\" in *\" $2 \"*) t=\"$t$y \"; c=1;; esac\n"
    "    done\n"
    "  done\n"
    "}\n"
    "scan\n"
    "g=\n"
    "if { read -r l <\"/proc/$p/stat\"; } 2>/dev/null; then set -- ${l##*) }; "
    "[ \"$3\" = \"$p\" ] && g=$p; fi\n"
    "if [ \"$s\" = 9 ]; then [ -n \"$g\" ] && kill -STOP -- -$g 2>/dev/null; "
    "kill -STOP $t 2>/dev/null; scan; fi\n"
    "if [ \"$s\" = 9 ]; then [ -n \"$g\" ] && kill -9 -- -$g 2>/dev/null; kill -9 $t "
    "2>/dev/null\n"
    "else t=${t# $p }; [ -n \"$t\" ] && kill -$s $t 2>/dev/null; fi\n";

struct mproc;

struct mprov {
    struct grpc_chan ch;
    int ready;        /* credentials and a channel */
    char reason[256]; /* why not ready */
    char *url, *app_name, *environment, *image, *working_dir;
    char *token_id, *token_secret; /* sent on every call */
    double cpu;
    int64_t memory_mb;
    int64_t max_timeout_ms;
    double retry_budget_s; /* how long an exec's streams and wait retry through an outage */
    json_t *apps;   /* "env/name" -> app_id */
    json_t *images; /* tag -> image_id */
    char last_error[512];
    /* Output flow control: 1 = pause the HTTP/2 stream (CURL_WRITEFUNC_PAUSE,
     * resumed with curl_easy_pause), the default. 0 (SBXD_MODAL_CURL_PAUSE=0) =
     * close a blocked output stream and reopen it from its last batch index on
     * resume: the way out if a libcurl stalls paused h2 streams (curl issues
     * 10988, 16955). Either way a stuck stream ends at its transfer timeout
     * and is reopened from the last batch. */
    int curl_pause;

    /* What survives an sbxd restart (see "state file" below). */
    char *state_path;  /* NULL: nothing is kept */
    json_t *saved;     /* read at load, adopted on the first loop iteration */
    json_t *snaps;     /* snapshot id -> {owner, created_at, sandbox, data} */
    ev_timer adopt_timer;
    ev_timer save_timer; /* writes at most once per STATE_SAVE_DELAY_S */
    int dirty;
    /* Every Modal sandbox object, until released: at shutdown the core has
     * already taken them out of its registry when the first one is released
     * (and the pending write goes out). */
    struct msb *all;
};

enum mjob { J_NONE, J_START, J_RESTART, J_STOP, J_DESTROY, J_SNAPSHOT };

enum mstep {
    ST_APP,
    ST_LOOKUP,
    ST_IMAGE,
    ST_IMAGE_BUILD,
    ST_IMAGE_JOIN,
    ST_SNAP_IMAGE,
    ST_SECRET,
    ST_CREATE,
    ST_TASK,
    ST_TAGS_SET,
    ST_TAGS_CHECK,
    ST_STOP_SNAP,
    ST_STOP_CHECK,
    ST_TERMINATE,
    ST_SNAPSHOT,
};

struct msb {
    struct sandbox *sb;
    struct mprov *mp;
    char *app_name, *env_name, *app_id;
    char *image_tag;
    char *image_id;     /* image of the current Modal sandbox */
    char *resume_image; /* saved by stop: the next start uses it */
    char *sandbox_id, *task_id;
    char *workdir;
    double cpu;
    int64_t memory_mb;
    uint32_t timeout_secs, idle_secs;
    json_t *baked_env; /* what the sandbox's secret holds */
    char *secret_id;
    int reconnected, restarts, last_retried, adopting, lookup_done;
    int dead;
    char *dead_reason;

    enum mjob job;
    enum mstep step;
    struct grpc_call *call;
    ev_timer timer; /* task id polling */
    int polls;
    char *join_entry;
    int join_fails, join_result; /* join_result: GenericStatus seen, 0 = none */
    char *join_exception;
    enum mjob pending_op; /* a lifecycle op that waits for a restart */

    struct mproc *procs;   /* live processes */
    struct mproc *waiters; /* processes waiting for the restart */
    int destroyed;         /* terminated: no longer kept in the state file */
    struct msb *all_next, *all_prev; /* mp->all */
    json_t *warnings;      /* a found-by-name sandbox differs from the request */
    struct grpc_call *check_call; /* after adoption: is the Modal sandbox still there? */
};

struct mproc {
    struct process *p;
    struct msb *ms;
    struct mproc *next, *prev; /* ms->procs */
    struct mproc *wnext;       /* ms->waiters */
    int waiting;
    char tag[40];
    char argv0[48]; /* "sbxd-<tag>": $0 of the wrapper shell */
    char *exec_id;
    struct grpc_call *exec_call, *out[2], *wait_call, *stdin_call, *check_call;
    uint64_t last_batch[2];
    double out_t0[2];
    int out_got[2], out_done[2], out_fails[2], reopen[2];
    int have_exit, exit_code;
    char *exit_error;
    int gone;
    int retried, restarted;
    int paused;
    struct obuf stdin_q;
    int stdin_eof, stdin_eof_sent, stdin_broken;
    uint64_t stdin_index;
    int kill_sig, kill_escalated;
    ev_timer kill_timer;
    ev_timer grace;
    ev_timer report_timer;
    ev_timer retry_timer;
    int wait_fails;
    double wait_fail_t0;   /* first failure of the current run of failures, 0 = none */
    double out_fail_t0[2];
    ev_timer out_timer[2]; /* reopen a broken output stream after a backoff */
    int exec_fails;
    double exec_fail_t0;
    ev_timer exec_timer; /* ContainerExec again after a failure that never reached Modal */
    int incomplete;      /* some output could not be read: never a clean exit */
    char *incomplete_why;
    int reported;
    double t0;
    double last_output; /* when a batch last arrived */
    int tail_tries;
    int adopted; /* found in the state file after an sbxd restart */
};

static void job_next(struct msb *ms);
static void job_ready(struct msb *ms);
static void exec_start(struct mproc *m);
static void start_restart(struct msb *ms);
static void run_lifecycle(struct msb *ms, enum mjob op);
static void schedule_report(struct mproc *m);
static void check_finish(struct mproc *m);
static void state_dirty(struct mprov *mp);
static void state_write(struct mprov *mp);

/* ---- small helpers -------------------------------------------------------- */

static void set_str(char **dst, const char *src)
{
    char *n = src ? xstrdup(src) : NULL;
    free(*dst);
    *dst = n;
}

static const char *nz(const char *s)
{
    return s ? s : "";
}

/* A Modal failure as a daemon error: unreachable -> -32002, else -32006. */
static int grpc_err(struct mprov *mp, sbx_err_t *err, const struct grpc_status *st,
                    const char *what)
{
    snprintf(mp->last_error, sizeof(mp->last_error), "%s: %s: %s", st->method,
             grpc_code_name(st->code), st->message);
    if (st->transport)
        return err_make_data(err, SBX_E_UNAVAILABLE,
                             json_pack("{s:s, s:s, s:s}", "provider", "modal", "reason",
                                       st->message, "rpc", st->method),
                             "%s: Modal is unreachable: %s", what, st->message);
    return err_make_data(err, SBX_E_PROVIDER,
                         json_pack("{s:s, s:s, s:i, s:s, s:s}", "provider", "modal",
                                   "message", st->message, "grpc_status", st->code,
                                   "grpc_code", grpc_code_name(st->code), "rpc",
                                   st->method),
                         "%s: Modal %s failed: %s: %s", what, st->method,
                         grpc_code_name(st->code), st->message);
}

static int plain_err(sbx_err_t *err, const char *msg)
{
    return err_make_data(err, SBX_E_PROVIDER,
                         json_pack("{s:s, s:s}", "provider", "modal", "message", msg),
                         "%s", msg);
}

static void progress(struct msb *ms, const char *stage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void progress(struct msb *ms, const char *stage, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (n == 0)
        return;
    sandbox_progress(ms->sb, json_pack("{s:s, s:s}", "stage", stage, "message", buf));
}

static int dead_code(int code)
{
    return code == GRPC_NOT_FOUND || code == GRPC_FAILED_PRECONDITION;
}

static const char *result_text(const Modal__Client__GenericResult *r)
{
    if (r && r->exception && r->exception[0])
        return r->exception;
    switch (r ? (int)r->status : 0) {
    case 2: return "failed";
    case 3: return "terminated";
    case 4: return "timed out";
    case 5: return "failed to start";
    case 6: return "internal failure";
    case 7: return "idle timeout";
    default: return "ended";
    }
}

/* ---- lifecycle jobs -------------------------------------------------------- */

/* Ends the current job. err (may be NULL) is cleared; result stolen. May free ms
 * (a failed first start removes the sandbox): nothing may touch ms afterwards. */
static void job_end(struct msb *ms, sbx_err_t *err, json_t *result)
{
    enum mjob job = ms->job;
    ms->job = J_NONE;
    ms->call = NULL;
    ev_timer_stop(D->loop, &ms->timer);
    int failed = err && err->msg;
    if (job == J_DESTROY && !failed)
        ms->destroyed = 1;
    if (job == J_SNAPSHOT && !failed && result && ms->sb->snap_id[0])
        /* Kept in the state file: the registry gets it back after a restart. */
        json_object_set_new(ms->mp->snaps, ms->sb->snap_id,
                            json_pack("{s:I, s:f, s:s, s:O}", "owner",
                                      (json_int_t)ms->sb->owner, "created_at", daemon_now(),
                                      "sandbox", ms->sb->id, "data", result));
    state_dirty(ms->mp);
    if (job == J_RESTART) {
        json_decref(result);
        if (!failed) {
            ms->restarts++;
            ms->dead = 0;
        }
        /* The waiting processes go on (or fail) from their own timers. */
        struct mproc *w = ms->waiters;
        ms->waiters = NULL;
        while (w) {
            struct mproc *m = w;
            w = m->wnext;
            m->wnext = NULL;
            m->waiting = 0;
            if (failed) {
                set_str(&m->exit_error, err->msg);
                m->have_exit = 1;
                m->exit_code = -1;
                m->gone = 1;
                schedule_report(m);
            } else {
                m->restarted = 1;
                exec_start(m);
            }
        }
        enum mjob op = ms->pending_op;
        ms->pending_op = J_NONE;
        if (op != J_NONE) {
            err_clear(err);
            run_lifecycle(ms, op);
            return;
        }
        if (failed) {
            char why[600];
            snprintf(why, sizeof(why),
                     "the Modal sandbox died and could not be restarted: %s", err->msg);
            err_clear(err);
            sandbox_lost(ms->sb, why);
        }
        return;
    }
    if (!failed && job == J_START) {
        ms->dead = 0;
        if (ms->reconnected && !result)
            result = json_pack("{s:b}", "reconnected", 1);
        if (result && json_array_size(ms->warnings) > 0)
            json_object_set(result, "warnings", ms->warnings);
    }
    json_decref(ms->warnings);
    ms->warnings = NULL;
    /* Processes that wanted a restart while another op ran. */
    if (ms->waiters && ms->job == J_NONE && job == J_SNAPSHOT)
        start_restart(ms);
    sandbox_op_done(ms->sb, failed ? err : NULL, result);
    err_clear(err);
}

static void job_fail_st(struct msb *ms, const struct grpc_status *st, const char *what)
{
    sbx_err_t err = {0};
    grpc_err(ms->mp, &err, st, what);
    log_warn("modal: sandbox %s: %s", ms->sb->id, err.msg);
    job_end(ms, &err, NULL);
}

static void job_fail_msg(struct msb *ms, const char *msg)
{
    sbx_err_t err = {0};
    plain_err(&err, msg);
    log_warn("modal: sandbox %s: %s", ms->sb->id, msg);
    job_end(ms, &err, NULL);
}

static void job_rpc_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata);

static void job_call(struct msb *ms, const char *method, const ProtobufCMessage *req,
                     double timeout)
{
    ms->call = grpc_unary(&ms->mp->ch, method, req, timeout, job_rpc_done, ms);
}

static void task_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if (ms->job != J_NONE)
        job_next(ms);
}

static uint32_t lifetime_secs(struct msb *ms)
{
    double ms_total =
        (double)json_integer_value(json_object_get(ms->sb->conf, "timeout_ms"));
    double left = ms_total / 1000.0;
    if (ms->sb->expires_at > 0)
        left = ms->sb->expires_at - daemon_now();
    if (ms->mp->max_timeout_ms > 0 && left > ms->mp->max_timeout_ms / 1000.0)
        left = ms->mp->max_timeout_ms / 1000.0;
    double secs = ceil(left);
    if (secs < 1)
        secs = 1;
    if (secs > MAX_LIFETIME_S)
        secs = MAX_LIFETIME_S;
    return (uint32_t)secs;
}

static void send_create(struct msb *ms)
{
    Modal__Client__GPUConfig gpu = MODAL__CLIENT__GPUCONFIG__INIT;
    Modal__Client__Resources res = MODAL__CLIENT__RESOURCES__INIT;
    res.gpu_config = &gpu;
    res.milli_cpu = (uint32_t)(ms->cpu * 1000.0 + 0.5);
    res.memory_mb = (uint32_t)ms->memory_mb;
    Modal__Client__PortSpecs ports = MODAL__CLIENT__PORT_SPECS__INIT;
    Modal__Client__NetworkAccess net = MODAL__CLIENT__NETWORK_ACCESS__INIT;
    net.network_access_type = MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__OPEN;
    Modal__Client__Sandbox def = MODAL__CLIENT__SANDBOX__INIT;
    char a0[] = "sleep", a1[] = "48h";
    char *ep[] = {a0, a1};
    def.entrypoint_args = ep;
    def.n_entrypoint_args = 2;
    def.image_id = ms->image_id;
    char *secrets[1] = {ms->secret_id};
    if (ms->secret_id) {
        def.secret_ids = secrets;
        def.n_secret_ids = 1;
    }
    def.resources = &res;
    ms->timeout_secs = lifetime_secs(ms);
    def.timeout_secs = ms->timeout_secs;
    if (ms->workdir) {
        def._workdir_case = MODAL__CLIENT__SANDBOX___WORKDIR_WORKDIR;
        def.workdir = ms->workdir;
    }
    def.open_ports_oneof_case = MODAL__CLIENT__SANDBOX__OPEN_PORTS_ONEOF_OPEN_PORTS;
    def.open_ports = &ports;
    def.network_access = &net;
    def._name_case = MODAL__CLIENT__SANDBOX___NAME_NAME;
    def.name = ms->sb->id;
    int64_t idle = json_integer_value(json_object_get(ms->sb->conf, "idle_timeout_ms"));
    ms->idle_secs = idle > 0 ? (uint32_t)((idle + 999) / 1000) : 0;
    if (ms->idle_secs) {
        def._idle_timeout_secs_case =
            MODAL__CLIENT__SANDBOX___IDLE_TIMEOUT_SECS_IDLE_TIMEOUT_SECS;
        def.idle_timeout_secs = ms->idle_secs;
    }
    Modal__Client__SandboxCreateRequest req = MODAL__CLIENT__SANDBOX_CREATE_REQUEST__INIT;
    req.app_id = ms->app_id;
    req.definition = &def;
    progress(ms, "sandbox", "Creating Modal sandbox (image %s)", ms->image_id);
    job_call(ms, "SandboxCreate", &req.base, UNARY_TIMEOUT_S);
}

static void send_secret(struct msb *ms, json_t *env)
{
    size_t n = json_object_size(env), i = 0;
    Modal__Client__SecretGetOrCreateRequest__EnvDictEntry *ents =
        xcalloc(n, sizeof(*ents));
    Modal__Client__SecretGetOrCreateRequest__EnvDictEntry **ptrs =
        xcalloc(n, sizeof(*ptrs));
    const char *k;
    json_t *v;
    json_object_foreach (env, k, v) {
        Modal__Client__SecretGetOrCreateRequest__EnvDictEntry e =
            MODAL__CLIENT__SECRET_GET_OR_CREATE_REQUEST__ENV_DICT_ENTRY__INIT;
        ents[i] = e;
        ents[i].key = (char *)k;
        ents[i].value = (char *)json_string_value(v);
        ptrs[i] = &ents[i];
        i++;
    }
    Modal__Client__SecretGetOrCreateRequest req =
        MODAL__CLIENT__SECRET_GET_OR_CREATE_REQUEST__INIT;
    req.environment_name = (char *)nz(ms->env_name);
    req.object_creation_type =
        MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_EPHEMERAL;
    req.env_dict = ptrs;
    req.n_env_dict = n;
    job_call(ms, "SecretGetOrCreate", &req.base, UNARY_TIMEOUT_S);
    free(ents);
    free(ptrs);
}

static void join_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    Modal__Client__ImageJoinStreamingResponse *r =
        modal__client__image_join_streaming_response__unpack(NULL, len, msg);
    if (!r)
        return;
    for (size_t i = 0; i < r->n_task_logs; i++)
        progress(ms, "image", "%s", nz(r->task_logs[i]->data));
    if (r->entry_id && r->entry_id[0])
        set_str(&ms->join_entry, r->entry_id);
    if (r->result && r->result->status != 0 && !ms->join_result) {
        ms->join_result = (int)r->result->status;
        set_str(&ms->join_exception, r->result->exception);
    }
    ms->join_fails = 0;
    modal__client__image_join_streaming_response__free_unpacked(r, NULL);
}

static void join_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->call = NULL;
    if (ms->join_result == 1) {
        json_object_set_new(ms->mp->images, ms->image_tag, json_string(ms->image_id));
        progress(ms, "image", "Image %s is ready (%s)", ms->image_tag, ms->image_id);
        ms->step = ST_SECRET;
        job_next(ms);
        return;
    }
    if (ms->join_result) {
        char buf[600];
        snprintf(buf, sizeof(buf), "building image %s failed: %s", ms->image_tag,
                 ms->join_exception ? ms->join_exception : "unknown error");
        job_fail_msg(ms, buf);
        return;
    }
    if (st->code != GRPC_OK && !grpc_code_retryable(st->code)) {
        job_fail_st(ms, st, "building the image");
        return;
    }
    if (st->code != GRPC_OK && ++ms->join_fails > MAX_STREAM_FAILS) {
        job_fail_st(ms, st, "building the image");
        return;
    }
    job_next(ms); /* the long poll ended: join again from the last entry */
}

/* ---- tags: owner, and what the sandbox was made with ------------------------------ */

#define TAG_IMAGE "sbxd_image"
#define TAG_WORKDIR "sbxd_workdir"
#define TAG_CPU "sbxd_cpu"
#define TAG_MEMORY "sbxd_memory_mb"
#define TAG_ENV "sbxd_env_hash"
#define TAG_EXPIRES "sbxd_expires_at"

/* FNV-1a of the env as compact sorted JSON: tags show no env values. */
static void env_hash(json_t *env, char *out, size_t n)
{
    char *js = json_dumps(env ? env : json_object(), JSON_COMPACT | JSON_SORT_KEYS);
    uint64_t h = 1469598103934665603ull;
    for (const char *c = js ? js : ""; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    free(js);
    snprintf(out, n, "%016llx", (unsigned long long)h);
}

static json_t *sandbox_tags(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    char buf[64];
    json_t *t = json_object();
    snprintf(buf, sizeof(buf), "%u", (unsigned)sb->owner);
    json_object_set_new(t, TAG_OWNER, json_string(buf));
    json_object_set_new(t, TAG_ID, json_string(sb->id));
    json_object_set_new(t, TAG_IMAGE, json_string(nz(ms->image_tag)));
    json_object_set_new(t, TAG_WORKDIR, json_string(nz(ms->workdir)));
    snprintf(buf, sizeof(buf), "%g", ms->cpu);
    json_object_set_new(t, TAG_CPU, json_string(buf));
    snprintf(buf, sizeof(buf), "%lld", (long long)ms->memory_mb);
    json_object_set_new(t, TAG_MEMORY, json_string(buf));
    env_hash(ms->baked_env, buf, sizeof(buf));
    json_object_set_new(t, TAG_ENV, json_string(buf));
    /* During the first start the core has not set expires_at yet. */
    double exp = sb->expires_at > 0 ? sb->expires_at : daemon_now() + lifetime_secs(ms);
    snprintf(buf, sizeof(buf), "%.3f", exp);
    json_object_set_new(t, TAG_EXPIRES, json_string(buf));
    return t;
}

static void tag_warning(struct msb *ms, const char *what, const char *want, const char *have)
{
    char *msg = xasprintf("%s: requested %s, the existing Modal sandbox has %s (not applied)",
                          what, want, have);
    if (!ms->warnings)
        ms->warnings = json_array();
    json_array_append_new(ms->warnings, json_string(msg));
    free(msg);
}

/* A running Modal sandbox found by name (tags: name -> value, borrowed):
 * what the request asks that it does not have becomes a warning; its
 * lifetime goes on from the tagged deadline. */
static void compare_tags(struct msb *ms, json_t *have)
{
    json_t *want = sandbox_tags(ms);
    static const struct {
        const char *tag, *what;
    } keys[] = {{TAG_IMAGE, "image"},
                {TAG_WORKDIR, "working_dir"},
                {TAG_CPU, "options.cpu"},
                {TAG_MEMORY, "options.memory_mb"}};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *h = json_string_value(json_object_get(have, keys[i].tag));
        const char *w = json_string_value(json_object_get(want, keys[i].tag));
        if (h && w && strcmp(h, w) != 0)
            tag_warning(ms, keys[i].what, w[0] ? w : "(none)", h[0] ? h : "(none)");
    }
    const char *he = json_string_value(json_object_get(have, TAG_ENV));
    const char *we = json_string_value(json_object_get(want, TAG_ENV));
    if (he && we && strcmp(he, we) != 0) {
        /* Its secret holds another env: every command gets the requested one
         * explicitly (keys only the old env has stay set). */
        json_decref(ms->baked_env);
        ms->baked_env = json_object();
        if (!ms->warnings)
            ms->warnings = json_array();
        json_array_append_new(
            ms->warnings,
            json_string("env: the existing Modal sandbox was created with another env; "
                        "the requested env is applied to each command, but variables "
                        "only the old env has stay set"));
    }
    double exp = atof(nz(json_string_value(json_object_get(have, TAG_EXPIRES))));
    double wexp = atof(nz(json_string_value(json_object_get(want, TAG_EXPIRES))));
    struct sandbox *sb = ms->sb;
    if (exp > 0 && fabs(exp - wexp) > 2.0) {
        char w[64], h[64];
        snprintf(w, sizeof(w), "%.0f s from now", wexp - daemon_now());
        snprintf(h, sizeof(h), "%.0f s left", exp - daemon_now());
        tag_warning(ms, "timeout_ms", w, h);
        /* Modal ends it at its own deadline: sbxd's follows it. */
        ev_timer_stop(D->loop, &sb->life_timer);
        sb->expires_at = exp;
        double left = exp - daemon_now();
        ev_timer_set(&sb->life_timer, left > 0.001 ? left : 0.001, 0.);
        ev_timer_start(D->loop, &sb->life_timer);
    }
    json_decref(want);
}

static void job_next(struct msb *ms)
{
    struct mprov *mp = ms->mp;
    struct sandbox *sb = ms->sb;
    for (;;) {
        switch (ms->step) {
        case ST_APP: {
            char key[512];
            snprintf(key, sizeof(key), "%s/%s", nz(ms->env_name), ms->app_name);
            const char *id = json_string_value(json_object_get(mp->apps, key));
            if (id) {
                set_str(&ms->app_id, id);
                ms->step = ST_LOOKUP;
                continue;
            }
            Modal__Client__AppGetOrCreateRequest req =
                MODAL__CLIENT__APP_GET_OR_CREATE_REQUEST__INIT;
            req.app_name = ms->app_name;
            req.environment_name = (char *)nz(ms->env_name);
            req.object_creation_type =
                MODAL__CLIENT__OBJECT_CREATION_TYPE__OBJECT_CREATION_TYPE_CREATE_IF_MISSING;
            progress(ms, "app", "Looking up Modal app %s", ms->app_name);
            job_call(ms, "AppGetOrCreate", &req.base, UNARY_TIMEOUT_S);
            return;
        }
        case ST_LOOKUP:
            if (ms->job == J_START && ms->sandbox_id && !ms->dead) {
                /* Started again after an error: is the old one still there? */
                ms->adopting = 1;
                ms->polls = 0;
                ms->step = ST_TASK;
                continue;
            }
            if (ms->job == J_START && !ms->lookup_done && !ms->resume_image &&
                !sb->snapshot) {
                ms->lookup_done = 1;
                Modal__Client__SandboxGetFromNameRequest req =
                    MODAL__CLIENT__SANDBOX_GET_FROM_NAME_REQUEST__INIT;
                req.sandbox_name = sb->id;
                req.app_name = ms->app_name;
                req.environment_name = (char *)nz(ms->env_name);
                job_call(ms, "SandboxGetFromName", &req.base, UNARY_TIMEOUT_S);
                return;
            }
            ms->step = ST_IMAGE;
            continue;
        case ST_IMAGE: {
            ms->adopting = 0;
            if (ms->resume_image) {
                set_str(&ms->image_id, ms->resume_image);
                ms->step = ST_SECRET;
                continue;
            }
            if (sb->snapshot) {
                const char *im =
                    json_string_value(json_object_get(sb->snapshot, "image_id"));
                if (!im) {
                    job_fail_msg(ms, "the snapshot holds no Modal image id");
                    return;
                }
                set_str(&ms->image_id, im);
                Modal__Client__ImageFromIdRequest req =
                    MODAL__CLIENT__IMAGE_FROM_ID_REQUEST__INIT;
                req.image_id = (char *)im;
                ms->step = ST_SNAP_IMAGE;
                progress(ms, "image", "Using snapshot image %s", im);
                job_call(ms, "ImageFromId", &req.base, UNARY_TIMEOUT_S);
                return;
            }
            const char *id =
                json_string_value(json_object_get(mp->images, ms->image_tag));
            if (id) {
                set_str(&ms->image_id, id);
                ms->step = ST_SECRET;
                continue;
            }
            char cmd[600];
            snprintf(cmd, sizeof(cmd), "FROM %s", ms->image_tag);
            char *cmds[1] = {cmd};
            Modal__Client__Image img = MODAL__CLIENT__IMAGE__INIT;
            img.dockerfile_commands = cmds;
            img.n_dockerfile_commands = 1;
            Modal__Client__ImageGetOrCreateRequest req =
                MODAL__CLIENT__IMAGE_GET_OR_CREATE_REQUEST__INIT;
            req.image = &img;
            req.app_id = ms->app_id;
            req.builder_version = (char *)BUILDER_VERSION;
            ms->step = ST_IMAGE_BUILD;
            progress(ms, "image", "Building image %s", ms->image_tag);
            job_call(ms, "ImageGetOrCreate", &req.base, UNARY_TIMEOUT_S);
            return;
        }
        case ST_IMAGE_JOIN: {
            Modal__Client__ImageJoinStreamingRequest req =
                MODAL__CLIENT__IMAGE_JOIN_STREAMING_REQUEST__INIT;
            req.image_id = ms->image_id;
            req.timeout = (float)POLL_S;
            req.last_entry_id = (char *)nz(ms->join_entry);
            ms->call = grpc_stream(&mp->ch, "ImageJoinStreaming", &req.base,
                                   POLL_S + POLL_SLACK_S, join_msg, join_done, ms);
            return;
        }
        case ST_SECRET: {
            json_t *env = sandbox_env_for(sb, NULL);
            json_decref(ms->baked_env);
            ms->baked_env = env;
            free(ms->secret_id);
            ms->secret_id = NULL;
            if (json_object_size(env) == 0) {
                ms->step = ST_CREATE;
                continue;
            }
            send_secret(ms, env);
            return;
        }
        case ST_CREATE: send_create(ms); return;
        case ST_TASK: {
            Modal__Client__SandboxGetTaskIdRequest req =
                MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
            req.sandbox_id = ms->sandbox_id;
            job_call(ms, "SandboxGetTaskId", &req.base, UNARY_TIMEOUT_S);
            return;
        }
        case ST_TAGS_SET: {
            /* Who owns it, and what it was made with: a restarted sbxd that
             * finds it by name (without its state file) compares and warns. */
            json_t *tv = sandbox_tags(ms);
            size_t nt = json_object_size(tv), i = 0;
            Modal__Client__SandboxTag *tv_s = xcalloc(nt, sizeof(*tv_s));
            Modal__Client__SandboxTag **tags = xcalloc(nt, sizeof(*tags));
            const char *k;
            json_t *v;
            json_object_foreach (tv, k, v) {
                Modal__Client__SandboxTag t = MODAL__CLIENT__SANDBOX_TAG__INIT;
                tv_s[i] = t;
                tv_s[i].tag_name = (char *)k;
                tv_s[i].tag_value = (char *)json_string_value(v);
                tags[i] = &tv_s[i];
                i++;
            }
            Modal__Client__SandboxTagsSetRequest req =
                MODAL__CLIENT__SANDBOX_TAGS_SET_REQUEST__INIT;
            req.environment_name = (char *)nz(ms->env_name);
            req.sandbox_id = ms->sandbox_id;
            req.tags = tags;
            req.n_tags = nt;
            job_call(ms, "SandboxTagsSet", &req.base, UNARY_TIMEOUT_S);
            free(tags);
            free(tv_s);
            json_decref(tv);
            return;
        }
        case ST_TAGS_CHECK: {
            Modal__Client__SandboxTagsGetRequest req =
                MODAL__CLIENT__SANDBOX_TAGS_GET_REQUEST__INIT;
            req.sandbox_id = ms->sandbox_id;
            job_call(ms, "SandboxTagsGet", &req.base, UNARY_TIMEOUT_S);
            return;
        }
        case ST_STOP_SNAP:
        case ST_SNAPSHOT: {
            Modal__Client__SandboxSnapshotFsRequest req =
                MODAL__CLIENT__SANDBOX_SNAPSHOT_FS_REQUEST__INIT;
            req.sandbox_id = ms->sandbox_id;
            req.timeout = (float)POLL_S;
            job_call(ms, "SandboxSnapshotFs", &req.base, POLL_S + POLL_SLACK_S);
            return;
        }
        case ST_STOP_CHECK: {
            Modal__Client__SandboxGetTaskIdRequest req =
                MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
            req.sandbox_id = ms->sandbox_id;
            job_call(ms, "SandboxGetTaskId", &req.base, UNARY_TIMEOUT_S);
            return;
        }
        case ST_TERMINATE: {
            Modal__Client__SandboxTerminateRequest req =
                MODAL__CLIENT__SANDBOX_TERMINATE_REQUEST__INIT;
            req.sandbox_id = ms->sandbox_id;
            job_call(ms, "SandboxTerminate", &req.base, UNARY_TIMEOUT_S);
            return;
        }
        default: job_fail_msg(ms, "internal error: bad job step"); return;
        }
    }
}

static void forget_sandbox(struct msb *ms)
{
    free(ms->sandbox_id);
    ms->sandbox_id = NULL;
    free(ms->task_id);
    ms->task_id = NULL;
}

static void on_task(struct msb *ms, const struct grpc_status *st, const uint8_t *msg,
                    size_t len)
{
    Modal__Client__SandboxGetTaskIdResponse *r =
        st->code == GRPC_OK
            ? modal__client__sandbox_get_task_id_response__unpack(NULL, len, msg)
            : NULL;
    int ended =
        st->code == GRPC_NOT_FOUND ||
        (r &&
         r->_task_result_case ==
             MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT &&
         r->task_result);
    if (st->code != GRPC_OK && !ended) {
        job_fail_st(ms, st, "waiting for the sandbox");
        return;
    }
    if (ended) {
        char why[512];
        snprintf(why, sizeof(why), "%s", r ? result_text(r->task_result) : st->message);
        if (r)
            modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
        if (ms->adopting) {
            /* The sandbox of that name (or ours from before) is gone: make a new one. */
            log_info(
                "modal: sandbox %s: Modal sandbox %s has ended (%s); creating a new one",
                ms->sb->id, ms->sandbox_id, why);
            forget_sandbox(ms);
            ms->reconnected = 0;
            ms->adopting = 0;
            ms->step = ST_IMAGE;
            job_next(ms);
            return;
        }
        char buf[600];
        snprintf(buf, sizeof(buf), "the Modal sandbox %s ended before it was ready: %s",
                 nz(ms->sandbox_id), why);
        forget_sandbox(ms);
        job_fail_msg(ms, buf);
        return;
    }
    if (!r) {
        job_fail_msg(ms, "SandboxGetTaskId: undecodable response");
        return;
    }
    if (r->_task_id_case !=
            MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID ||
        !r->task_id || !r->task_id[0]) {
        modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
        if (++ms->polls > TASK_MAX_POLLS) {
            job_fail_msg(ms, "the Modal sandbox did not get a task in time");
            return;
        }
        ev_timer_set(&ms->timer, TASK_POLL_S, 0.);
        ev_timer_start(D->loop, &ms->timer);
        return;
    }
    set_str(&ms->task_id, r->task_id);
    modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
    int adopted = ms->adopting;
    ms->adopting = 0;
    if (adopted && !ms->baked_env)
        ms->baked_env = sandbox_env_for(ms->sb, NULL);
    if (adopted && !ms->reconnected) {
        job_ready(ms); /* our own from before an error: already tagged */
        return;
    }
    /* A sandbox found by name must be this uid's; new ones get their owner tagged. */
    ms->step = adopted ? ST_TAGS_CHECK : ST_TAGS_SET;
    job_next(ms);
}

static void job_ready(struct msb *ms)
{
    progress(ms, "sandbox", "%s Modal sandbox %s",
             ms->reconnected ? "Reconnected to" : "Running in", ms->sandbox_id);
    log_info("modal: sandbox %s is Modal sandbox %s (task %s)%s", ms->sb->id,
             ms->sandbox_id, ms->task_id, ms->reconnected ? ", reconnected" : "");
    job_end(ms, NULL, NULL);
}

static void job_rpc_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->call = NULL;
    switch (ms->step) {
    case ST_APP: {
        Modal__Client__AppGetOrCreateResponse *r =
            st->code == GRPC_OK
                ? modal__client__app_get_or_create_response__unpack(NULL, len, msg)
                : NULL;
        if (!r || !r->app_id[0]) {
            if (r)
                modal__client__app_get_or_create_response__free_unpacked(r, NULL);
            job_fail_st(ms, st, "looking up the Modal app");
            return;
        }
        char key[512];
        snprintf(key, sizeof(key), "%s/%s", nz(ms->env_name), ms->app_name);
        json_object_set_new(ms->mp->apps, key, json_string(r->app_id));
        set_str(&ms->app_id, r->app_id);
        modal__client__app_get_or_create_response__free_unpacked(r, NULL);
        ms->step = ST_LOOKUP;
        job_next(ms);
        return;
    }
    case ST_LOOKUP: {
        if (st->code == GRPC_NOT_FOUND) {
            ms->step = ST_IMAGE;
            job_next(ms);
            return;
        }
        Modal__Client__SandboxGetFromNameResponse *r =
            st->code == GRPC_OK
                ? modal__client__sandbox_get_from_name_response__unpack(NULL, len, msg)
                : NULL;
        if (!r || !r->sandbox_id[0]) {
            if (r)
                modal__client__sandbox_get_from_name_response__free_unpacked(r, NULL);
            job_fail_st(ms, st, "looking up the sandbox by name");
            return;
        }
        set_str(&ms->sandbox_id, r->sandbox_id);
        modal__client__sandbox_get_from_name_response__free_unpacked(r, NULL);
        ms->reconnected = 1;
        ms->adopting = 1;
        ms->polls = 0;
        ms->step = ST_TASK;
        progress(ms, "sandbox", "Found running Modal sandbox %s named %s", ms->sandbox_id,
                 ms->sb->id);
        job_next(ms);
        return;
    }
    case ST_IMAGE_BUILD: {
        Modal__Client__ImageGetOrCreateResponse *r =
            st->code == GRPC_OK
                ? modal__client__image_get_or_create_response__unpack(NULL, len, msg)
                : NULL;
        if (!r || !r->image_id[0]) {
            if (r)
                modal__client__image_get_or_create_response__free_unpacked(r, NULL);
            job_fail_st(ms, st, "building the image");
            return;
        }
        set_str(&ms->image_id, r->image_id);
        int status = r->result ? (int)r->result->status : 0;
        char exc[512];
        snprintf(exc, sizeof(exc), "%s", r->result ? result_text(r->result) : "");
        modal__client__image_get_or_create_response__free_unpacked(r, NULL);
        if (status == 1) {
            json_object_set_new(ms->mp->images, ms->image_tag, json_string(ms->image_id));
            ms->step = ST_SECRET;
        } else if (status != 0) {
            char buf[700];
            snprintf(buf, sizeof(buf), "building image %s failed: %s", ms->image_tag,
                     exc);
            job_fail_msg(ms, buf);
            return;
        } else {
            free(ms->join_entry);
            ms->join_entry = NULL;
            free(ms->join_exception);
            ms->join_exception = NULL;
            ms->join_result = 0;
            ms->join_fails = 0;
            ms->step = ST_IMAGE_JOIN;
        }
        job_next(ms);
        return;
    }
    case ST_SNAP_IMAGE: {
        if (st->code != GRPC_OK) {
            job_fail_st(ms, st, "finding the snapshot image");
            return;
        }
        ms->step = ST_SECRET;
        job_next(ms);
        return;
    }
    case ST_SECRET: {
        Modal__Client__SecretGetOrCreateResponse *r =
            st->code == GRPC_OK
                ? modal__client__secret_get_or_create_response__unpack(NULL, len, msg)
                : NULL;
        if (!r || !r->secret_id[0]) {
            if (r)
                modal__client__secret_get_or_create_response__free_unpacked(r, NULL);
            job_fail_st(ms, st, "storing the sandbox env");
            return;
        }
        set_str(&ms->secret_id, r->secret_id);
        modal__client__secret_get_or_create_response__free_unpacked(r, NULL);
        ms->step = ST_CREATE;
        job_next(ms);
        return;
    }
    case ST_CREATE: {
        Modal__Client__SandboxCreateResponse *r =
            st->code == GRPC_OK
                ? modal__client__sandbox_create_response__unpack(NULL, len, msg)
                : NULL;
        if (!r || !r->sandbox_id[0]) {
            if (r)
                modal__client__sandbox_create_response__free_unpacked(r, NULL);
            job_fail_st(ms, st, "creating the sandbox");
            return;
        }
        set_str(&ms->sandbox_id, r->sandbox_id);
        modal__client__sandbox_create_response__free_unpacked(r, NULL);
        ms->polls = 0;
        ms->adopting = 0;
        ms->step = ST_TASK;
        job_next(ms);
        return;
    }
    case ST_TASK: on_task(ms, st, msg, len); return;
    case ST_TAGS_SET:
        if (st->code != GRPC_OK)
            log_warn("modal: sandbox %s: tagging the owner failed (%s: %s); a restarted "
                     "sbxd will not be able to check who owns it",
                     ms->sb->id, grpc_code_name(st->code), st->message);
        job_ready(ms);
        return;
    case ST_TAGS_CHECK: {
        Modal__Client__SandboxTagsGetResponse *r =
            st->code == GRPC_OK
                ? modal__client__sandbox_tags_get_response__unpack(NULL, len, msg)
                : NULL;
        const char *owner = NULL;
        json_t *have = json_object();
        for (size_t i = 0; r && i < r->n_tags; i++) {
            if (strcmp(r->tags[i]->tag_name, TAG_OWNER) == 0)
                owner = r->tags[i]->tag_value;
            json_object_set_new(have, r->tags[i]->tag_name,
                                json_string(nz(r->tags[i]->tag_value)));
        }
        char uid[32];
        snprintf(uid, sizeof(uid), "%u", (unsigned)ms->sb->owner);
        int other = owner && strcmp(owner, uid) != 0;
        if (!r)
            log_warn(
                "modal: sandbox %s: cannot read the tags of Modal sandbox %s (%s: %s)",
                ms->sb->id, ms->sandbox_id, grpc_code_name(st->code), st->message);
        if (r)
            modal__client__sandbox_tags_get_response__free_unpacked(r, NULL);
        if (!other)
            compare_tags(ms, have);
        json_decref(have);
        if (other) {
            sbx_err_t err = {0};
            err_make_data(
                &err, SBX_E_PERMISSION, json_pack("{s:s}", "sandbox", ms->sb->id),
                "the running Modal sandbox named %s belongs to another user", ms->sb->id);
            /* Not ours: forget it, so that nothing here ever terminates it. */
            forget_sandbox(ms);
            ms->reconnected = 0;
            job_end(ms, &err, NULL);
            return;
        }
        job_ready(ms);
        return;
    }
    case ST_STOP_SNAP: {
        Modal__Client__SandboxSnapshotFsResponse *r =
            st->code == GRPC_OK
                ? modal__client__sandbox_snapshot_fs_response__unpack(NULL, len, msg)
                : NULL;
        if (r && r->result && r->result->status == 1 && r->image_id[0]) {
            set_str(&ms->resume_image, r->image_id);
            log_info("modal: sandbox %s: filesystem saved as %s", ms->sb->id,
                     ms->resume_image);
            modal__client__sandbox_snapshot_fs_response__free_unpacked(r, NULL);
            ms->step = ST_TERMINATE;
            job_next(ms);
            return;
        }
        if (r)
            modal__client__sandbox_snapshot_fs_response__free_unpacked(r, NULL);
        if (st->code == GRPC_NOT_FOUND || st->code == GRPC_OK) {
            /* Maybe it died: then there is nothing to save, and stop is done. */
            ms->step = ST_STOP_CHECK;
            job_next(ms);
            return;
        }
        job_fail_st(ms, st, "saving the filesystem before stop");
        return;
    }
    case ST_STOP_CHECK: {
        Modal__Client__SandboxGetTaskIdResponse *r =
            st->code == GRPC_OK
                ? modal__client__sandbox_get_task_id_response__unpack(NULL, len, msg)
                : NULL;
        int ended =
            st->code == GRPC_NOT_FOUND ||
            (r &&
             r->_task_result_case ==
                 MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT);
        if (r)
            modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
        if (!ended) {
            job_fail_msg(ms, "stop: Modal could not snapshot the sandbox's filesystem; "
                             "it keeps running");
            return;
        }
        log_warn("modal: sandbox %s: the Modal sandbox was already gone at stop; its "
                 "files are lost",
                 ms->sb->id);
        forget_sandbox(ms);
        job_end(ms, NULL, NULL);
        return;
    }
    case ST_TERMINATE:
        if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND) {
            job_fail_st(ms, st,
                        ms->job == J_STOP ? "stopping the sandbox"
                                          : "terminating the sandbox");
            return;
        }
        log_info("modal: sandbox %s: Modal sandbox %s terminated", ms->sb->id,
                 ms->sandbox_id);
        forget_sandbox(ms);
        job_end(ms, NULL, NULL);
        return;
    case ST_SNAPSHOT: {
        Modal__Client__SandboxSnapshotFsResponse *r =
            st->code == GRPC_OK
                ? modal__client__sandbox_snapshot_fs_response__unpack(NULL, len, msg)
                : NULL;
        if (r && r->result && r->result->status == 1 && r->image_id[0]) {
            json_t *data = json_pack("{s:s, s:s}", "image_id", r->image_id,
                                     "modal_sandbox_id", nz(ms->sandbox_id));
            modal__client__sandbox_snapshot_fs_response__free_unpacked(r, NULL);
            job_end(ms, NULL, data);
            return;
        }
        if (st->code != GRPC_OK) {
            if (r)
                modal__client__sandbox_snapshot_fs_response__free_unpacked(r, NULL);
            job_fail_st(ms, st, "snapshot");
            return;
        }
        char buf[600];
        snprintf(buf, sizeof(buf), "snapshot failed: %s",
                 r && r->result ? result_text(r->result) : "no image returned");
        if (r)
            modal__client__sandbox_snapshot_fs_response__free_unpacked(r, NULL);
        job_fail_msg(ms, buf);
        return;
    }
    default: job_fail_msg(ms, "internal error: unexpected reply"); return;
    }
}

static void start_restart(struct msb *ms)
{
    log_info("modal: sandbox %s: restarting the Modal sandbox (%s)", ms->sb->id,
             nz(ms->dead_reason));
    forget_sandbox(ms);
    ms->job = J_RESTART;
    ms->step = ST_APP;
    ms->polls = 0;
    job_next(ms);
}

/* Starts stop/destroy/snapshot now (the core already waits for it). */
static void run_lifecycle(struct msb *ms, enum mjob op)
{
    ms->job = op;
    if (op == J_DESTROY) {
        if (!ms->sandbox_id) {
            job_end(ms, NULL, NULL);
            return;
        }
        ms->step = ST_TERMINATE;
    } else if (op == J_STOP) {
        if (!ms->sandbox_id) {
            job_end(ms, NULL, NULL);
            return;
        }
        ms->step = ms->dead ? ST_STOP_CHECK : ST_STOP_SNAP;
    } else {
        if (!ms->sandbox_id || ms->dead) {
            if (ms->resume_image && !ms->sandbox_id) {
                job_end(ms, NULL, json_pack("{s:s}", "image_id", ms->resume_image));
                return;
            }
            job_fail_msg(
                ms,
                "snapshot: the sandbox has no running Modal sandbox and no saved image");
            return;
        }
        ms->step = ST_SNAPSHOT;
    }
    job_next(ms);
}

/* ---- sandbox ops ------------------------------------------------------------ */

static int opt_number(json_t *v, double *out)
{
    if (json_is_number(v)) {
        *out = json_number_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        char *end;
        double d = strtod(json_string_value(v), &end);
        if (end != json_string_value(v) && *end == '\0') {
            *out = d;
            return 0;
        }
    }
    return -1;
}

static const char *opt_string(json_t *opts, const char *key)
{
    return json_string_value(json_object_get(opts, key));
}

/* The options a Modal sandbox takes; anything else is -32602, as on Docker. */
static const char *const option_keys[] = {"app_name", "environment", "image", "cpu",
                                          "memory_mb", "memory", NULL};

static int check_options(json_t *opts, sbx_err_t *err)
{
    if (opts && !json_is_object(opts) && !json_is_null(opts))
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options"),
                             "options must be an object");
    const char *k;
    json_t *v;
    json_object_foreach (opts, k, v) {
        int known = 0;
        for (size_t i = 0; option_keys[i]; i++)
            known |= strcmp(option_keys[i], k) == 0;
        if (!known) {
            char param[300];
            snprintf(param, sizeof(param), "options.%s", k);
            return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", param),
                                 "%s: not a Modal option (known: app_name, environment, "
                                 "image, cpu, memory_mb, memory)",
                                 param);
        }
    }
    return 0;
}

static struct msb *msb_new(struct mprov *mp, struct sandbox *sb, sbx_err_t *err)
{
    json_t *opts = json_object_get(sb->conf, "options");
    if (check_options(opts, err) < 0)
        return NULL;
    double cpu = mp->cpu;
    json_t *v = json_object_get(opts, "cpu");
    if (v && !json_is_null(v) && (opt_number(v, &cpu) < 0 || cpu < 0 || cpu > 1024)) {
        err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.cpu"),
                      "options.cpu must be a number of cores");
        return NULL;
    }
    double mem = (double)mp->memory_mb;
    json_int_t ml = json_integer_value(json_object_get(sb->conf, "memory_limit_mb"));
    if (ml > 0)
        mem = (double)ml;
    const char *mkeys[] = {"memory_mb", "memory"};
    for (int i = 0; i < 2; i++) {
        v = json_object_get(opts, mkeys[i]);
        if (v && !json_is_null(v) &&
            (opt_number(v, &mem) < 0 || mem < 0 || mem > 4194304)) {
            err_make_data(err, SBX_E_PARAMS,
                          json_pack("{s:s}", "param", "options.memory_mb"),
                          "options.%s must be a number of MiB", mkeys[i]);
            return NULL;
        }
    }
    const char *keys[] = {"app_name", "environment", "image"};
    for (int i = 0; i < 3; i++) {
        v = json_object_get(opts, keys[i]);
        if (v && !json_is_null(v) && (!json_is_string(v) || !json_string_length(v))) {
            char p[64];
            snprintf(p, sizeof(p), "options.%s", keys[i]);
            err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", p),
                          "%s must be a non-empty string", p);
            return NULL;
        }
    }
    struct msb *ms = xcalloc(1, sizeof(*ms));
    ms->sb = sb;
    ms->mp = mp;
    ms->app_name = xstrdup(opt_string(opts, "app_name") ? opt_string(opts, "app_name")
                                                        : mp->app_name);
    const char *env = opt_string(opts, "environment") ? opt_string(opts, "environment")
                                                      : mp->environment;
    ms->env_name = env ? xstrdup(env) : NULL;
    const char *img = json_string_value(json_object_get(sb->conf, "image"));
    if (!img)
        img = opt_string(opts, "image");
    ms->image_tag = xstrdup(img ? img : mp->image);
    const char *wd = json_string_value(json_object_get(sb->conf, "working_dir"));
    set_str(&ms->workdir, wd ? wd : mp->working_dir);
    ms->cpu = cpu;
    ms->memory_mb = (int64_t)mem;
    ev_init(&ms->timer, task_timer_cb);
    ms->timer.data = ms;
    ms->all_next = mp->all;
    if (mp->all)
        mp->all->all_prev = ms;
    mp->all = ms;
    sb->pdata = ms;
    return ms;
}

static int m_sb_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    struct mprov *mp = cookie;
    if (!mp->ready)
        return err_make_data(
            err, SBX_E_UNAVAILABLE,
            json_pack("{s:s, s:s}", "provider", "modal", "reason", mp->reason),
            "provider modal is unavailable: %s", mp->reason);
    struct msb *ms = sb->pdata;
    if (!ms && !(ms = msb_new(mp, sb, err)))
        return -1;
    if (ms->job != J_NONE)
        return err_make(err, SBX_E_STATE,
                        "sandbox %s is busy with another Modal operation", sb->id);
    ms->job = J_START;
    ms->step = ST_APP;
    ms->polls = 0;
    job_next(ms);
    return 0;
}

static int lifecycle(struct sandbox *sb, enum mjob op, sbx_err_t *err)
{
    struct msb *ms = sb->pdata;
    if (!ms) {
        if (op == J_SNAPSHOT)
            return plain_err(err, "snapshot: this sandbox never started");
        sandbox_op_done(sb, NULL, NULL);
        return 0;
    }
    if (ms->job == J_RESTART) {
        ms->pending_op = op;
        return 0;
    }
    if (ms->job != J_NONE)
        return err_make(err, SBX_E_STATE,
                        "sandbox %s is busy with another Modal operation", sb->id);
    run_lifecycle(ms, op);
    return 0;
}

static int m_sb_stop(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_STOP, err);
}

static int m_sb_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_DESTROY, err);
}

static int m_sb_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    return lifecycle(sb, J_SNAPSHOT, err);
}

static json_t *m_sb_metadata(void *cookie, struct sandbox *sb)
{
    struct mprov *mp = cookie;
    struct msb *ms = sb->pdata;
    if (!ms)
        return json_pack("{s:s}", "server_url", mp->url ? mp->url : "");
    json_t *o = json_object();
    json_object_set_new(o, "server_url", json_string(nz(mp->url)));
    json_object_set_new(o, "app", json_string(ms->app_name));
    if (ms->app_id)
        json_object_set_new(o, "app_id", json_string(ms->app_id));
    json_object_set_new(o, "environment",
                        ms->env_name ? json_string(ms->env_name) : json_null());
    json_object_set_new(o, "image", json_string(ms->image_tag));
    if (ms->image_id)
        json_object_set_new(o, "image_id", json_string(ms->image_id));
    if (ms->resume_image)
        json_object_set_new(o, "saved_image_id", json_string(ms->resume_image));
    json_object_set_new(o, "sandbox_id",
                        ms->sandbox_id ? json_string(ms->sandbox_id) : json_null());
    if (ms->task_id)
        json_object_set_new(o, "task_id", json_string(ms->task_id));
    json_object_set_new(o, "timeout_secs", json_integer(ms->timeout_secs));
    if (ms->idle_secs)
        json_object_set_new(o, "idle_timeout_secs", json_integer(ms->idle_secs));
    if (ms->workdir)
        json_object_set_new(o, "workdir", json_string(ms->workdir));
    json_object_set_new(o, "cpu", json_real(ms->cpu));
    json_object_set_new(o, "memory_mb", json_integer(ms->memory_mb));
    json_object_set_new(o, "reconnected", json_boolean(ms->reconnected));
    json_object_set_new(o, "restarts", json_integer(ms->restarts));
    json_object_set_new(o, "retried", json_boolean(ms->last_retried));
    if (ms->dead)
        json_object_set_new(o, "dead", json_string(nz(ms->dead_reason)));
    return o;
}

static void m_sb_release(void *cookie, struct sandbox *sb)
{
    struct msb *ms = sb->pdata;
    if (!ms)
        return;
    /* The Modal sandbox stays: a restarted sbxd adopts it from the state file
     * (or by name). A pending write goes out while every sandbox is still here. */
    if (ms->mp->dirty)
        state_write(ms->mp);
    if (!ms->destroyed)
        state_dirty(ms->mp);
    if (ms->all_prev)
        ms->all_prev->all_next = ms->all_next;
    else
        ms->mp->all = ms->all_next;
    if (ms->all_next)
        ms->all_next->all_prev = ms->all_prev;
    grpc_call_cancel(ms->call);
    grpc_call_cancel(ms->check_call);
    ev_timer_stop(D->loop, &ms->timer);
    for (struct mproc *m = ms->procs; m; m = m->next)
        m->ms = NULL;
    free(ms->app_name);
    free(ms->env_name);
    free(ms->app_id);
    free(ms->image_tag);
    free(ms->image_id);
    free(ms->resume_image);
    free(ms->sandbox_id);
    free(ms->task_id);
    free(ms->workdir);
    free(ms->secret_id);
    free(ms->dead_reason);
    free(ms->join_entry);
    free(ms->join_exception);
    json_decref(ms->baked_env);
    json_decref(ms->warnings);
    free(ms);
    sb->pdata = NULL;
}

/* ---- processes ---------------------------------------------------------------- */

static void mark_dead(struct msb *ms, const char *why)
{
    if (!ms)
        return;
    if (!ms->dead)
        log_warn("modal: sandbox %s: the Modal sandbox %s is gone: %s", ms->sb->id,
                 nz(ms->sandbox_id), why);
    ms->dead = 1;
    set_str(&ms->dead_reason, why);
}

static void stop_calls(struct mproc *m)
{
    grpc_call_cancel(m->exec_call);
    m->exec_call = NULL;
    for (int i = 0; i < 2; i++) {
        grpc_call_cancel(m->out[i]);
        m->out[i] = NULL;
    }
    grpc_call_cancel(m->wait_call);
    m->wait_call = NULL;
    grpc_call_cancel(m->stdin_call);
    m->stdin_call = NULL;
    grpc_call_cancel(m->check_call);
    m->check_call = NULL;
    ev_timer_stop(D->loop, &m->kill_timer);
    ev_timer_stop(D->loop, &m->grace);
    ev_timer_stop(D->loop, &m->retry_timer);
    ev_timer_stop(D->loop, &m->out_timer[0]);
    ev_timer_stop(D->loop, &m->out_timer[1]);
    ev_timer_stop(D->loop, &m->exec_timer);
}

/* ---- outages: backoff under a time budget ---------------------------------------- */

/* The wait before attempt n (1-based) of a run of failures: 0.2 s doubling up to
 * 5 s, with up to 20% jitter so that many processes do not retry in step. */
static double backoff_s(int n)
{
    double d = BACKOFF_FIRST_S;
    for (int i = 1; i < n && d < BACKOFF_MAX_S; i++)
        d *= 2;
    if (d > BACKOFF_MAX_S)
        d = BACKOFF_MAX_S;
    return d * (0.8 + 0.4 * ((double)(random() % 1000) / 1000.0));
}

/* Starts or continues a run of failures at *t0. Returns the wait before the next
 * attempt, or -1 when the budget is spent. */
static double retry_after(struct mprov *mp, double *t0, int *fails)
{
    double now = ev_now(D->loop);
    if (*t0 == 0)
        *t0 = now;
    (*fails)++;
    if (now - *t0 >= mp->retry_budget_s)
        return -1;
    double d = backoff_s(*fails);
    double left = *t0 + mp->retry_budget_s - now;
    return d < left ? d : left;
}

/* Output of stream fd could not be read to its end: the exit will say so. */
static void out_incomplete(struct mproc *m, int fd, const char *why)
{
    log_warn("modal: pid %u: %s output is incomplete: %s", m->p->pid,
             fd == 1 ? "stdout" : "stderr", why);
    m->out_done[fd - 1] = 1;
    if (!m->incomplete) {
        m->incomplete = 1;
        set_str(&m->incomplete_why, why);
    }
}

static void report_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (m->reported)
        return;
    m->reported = 1;
    stop_calls(m);
    struct process *p = m->p;
    int code = m->have_exit ? m->exit_code : -1;
    json_t *rec = json_pack("{s:i}", "exit_code", m->incomplete ? -1 : code);
    if (m->incomplete) {
        /* Never a clean exit when output is missing. */
        char *e = NULL;
        if (m->exit_error)
            e = xstrdup(m->exit_error);
        else
            e = xasprintf("the output could not be read completely (%s); %s",
                          nz(m->incomplete_why),
                          m->have_exit ? "the command itself ended" : "its exit is unknown");
        json_object_set_new(rec, "error", json_string(e ? e : "output incomplete"));
        json_object_set_new(rec, "output_incomplete", json_true());
        if (m->have_exit && !m->gone)
            json_object_set_new(rec, "remote_exit_code", json_integer(code));
        free(e);
    } else if (m->exit_error) {
        json_object_set_new(rec, "error", json_string(m->exit_error));
    }
    if (m->kill_sig)
        json_object_set_new(rec, "killed", json_true());
    /* Modal's own exec timeout (sbxd's deadline usually comes first). */
    if (code == SBX_EXIT_TIMEOUT && p->timeout_ms > 0 &&
        (ev_now(loop) - m->t0) * 1000.0 >= (double)p->timeout_ms * 0.9) {
        json_object_set_new(rec, "timed_out", json_true());
        json_object_set_new(rec, "killed", json_true());
    }
    if (m->retried || m->restarted) {
        json_object_set_new(rec, "retried", json_boolean(m->retried));
        json_object_set_new(rec, "sandbox_restarted", json_boolean(m->restarted));
    }
    if (m->ms && m->exec_id)
        state_dirty(m->ms->mp);
    process_exited(p, rec);
    json_decref(rec);
}

/* Reports from a fresh loop iteration: callers may be deep inside grpc. */
static void schedule_report(struct mproc *m)
{
    if (m->reported)
        return;
    ev_timer_set(&m->report_timer, 0., 0.);
    ev_timer_start(D->loop, &m->report_timer);
}

static void report_error(struct mproc *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void report_error(struct mproc *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    free(m->exit_error);
    m->exit_error = s;
    m->have_exit = 1;
    m->exit_code = -1;
    m->gone = 1;
    schedule_report(m);
}

static void out_open(struct mproc *m, int fd);

/* After the exit, the output streams should deliver their last batch at once.
 * One that stays silent (not paused by a slow follower) is reopened from its
 * last batch index: a server may sit on a long poll although the final batch
 * is there (the test fake does when output arrives while it is sending).
 * After TAIL_TRIES silent reopens the rest is given up. */
static void grace_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (m->reported)
        return;
    double quiet = ev_now(loop) - m->last_output;
    if (m->paused || quiet < TAIL_QUIET_S) {
        ev_timer_set(w, m->paused ? TAIL_QUIET_S : TAIL_QUIET_S - quiet, 0.);
        ev_timer_start(loop, w);
        return;
    }
    if (++m->tail_tries > TAIL_TRIES || !m->ms) {
        log_warn(
            "modal: pid %u: output streams still open %.0f s after the exit; ending them",
            m->p->pid, TAIL_TRIES * TAIL_QUIET_S);
        for (int fd = 1; fd <= 2; fd++)
            if (!m->out_done[fd - 1])
                out_incomplete(m, fd, "the stream stayed open after the exit");
        schedule_report(m);
        return;
    }
    for (int fd = 1; fd <= 2; fd++) {
        if (m->out_done[fd - 1])
            continue;
        log_debug("modal: pid %u: %s stream silent after the exit; reopening", m->p->pid,
                  fd == 1 ? "stdout" : "stderr");
        grpc_call_cancel(m->out[fd - 1]);
        m->out[fd - 1] = NULL;
        out_open(m, fd);
    }
    m->last_output = ev_now(loop);
    ev_timer_set(w, TAIL_QUIET_S, 0.);
    ev_timer_start(loop, w);
}

static void check_finish(struct mproc *m)
{
    if (!m->have_exit || m->reported)
        return;
    if ((m->out_done[0] && m->out_done[1]) || m->gone) {
        ev_timer_stop(D->loop, &m->grace);
        schedule_report(m);
        return;
    }
    if (!ev_is_active(&m->grace)) {
        m->last_output = ev_now(D->loop);
        ev_timer_set(&m->grace, TAIL_QUIET_S, 0.);
        ev_timer_start(D->loop, &m->grace);
    }
}

static void out_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    int fd = m->out[0] == c ? 1 : 2;
    Modal__Client__RuntimeOutputBatch *b =
        modal__client__runtime_output_batch__unpack(NULL, len, msg);
    if (!b) {
        log_warn("modal: pid %u: undecodable output batch", m->p->pid);
        return;
    }
    if (b->batch_index > m->last_batch[fd - 1] || b->batch_index == 0) {
        for (size_t i = 0; i < b->n_items; i++) {
            Modal__Client__RuntimeOutputMessage *it = b->items[i];
            int stream = it->file_descriptor == 2   ? SBX_STREAM_STDERR
                         : it->file_descriptor == 1 ? SBX_STREAM_STDOUT
                                                    : fd;
            if (it->message_bytes.len)
                process_output(m->p, stream, it->message_bytes.data,
                               it->message_bytes.len);
            else if (it->message && it->message[0])
                process_output(m->p, stream, it->message, strlen(it->message));
        }
        if (b->batch_index > m->last_batch[fd - 1])
            m->last_batch[fd - 1] = b->batch_index;
    }
    m->out_got[fd - 1] = 1;
    m->out_fails[fd - 1] = 0;
    m->out_fail_t0[fd - 1] = 0;
    m->tail_tries = 0;
    m->last_output = ev_now(D->loop);
    if (b->_exit_code_case == MODAL__CLIENT__RUNTIME_OUTPUT_BATCH___EXIT_CODE_EXIT_CODE)
        m->out_done[fd - 1] = 1;
    modal__client__runtime_output_batch__free_unpacked(b, NULL);
    if (process_output_blocked(m->p)) {
        m->paused = 1;
        if (m->ms->mp->curl_pause) {
            grpc_call_pause(c);
        } else {
            /* Drop the stream; proc_resume reopens it after the last batch we
             * delivered, so nothing is lost and nothing piles up meanwhile. */
            log_debug(
                "modal: pid %u: follower blocked after batch %llu; closing the %s stream",
                m->p->pid, (unsigned long long)m->last_batch[fd - 1],
                fd == 1 ? "stdout" : "stderr");
            grpc_call_cancel(c);
            m->out[fd - 1] = NULL;
            m->reopen[fd - 1] = 1;
        }
    }
}

static void out_done_cb(struct grpc_call *c, const struct grpc_status *st,
                        const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    int fd = m->out[0] == c ? 1 : 2;
    m->out[fd - 1] = NULL;
    log_debug("modal: pid %u: %s stream ended: %s%s%s (done %d)", m->p->pid,
              fd == 1 ? "stdout" : "stderr", grpc_code_name(st->code),
              st->message[0] ? ": " : "", st->message, m->out_done[fd - 1]);
    if (m->reported)
        return;
    if (m->out_done[fd - 1]) {
        check_finish(m);
        return;
    }
    if (st->code == GRPC_NOT_FOUND) {
        /* The exec (and with it the sandbox) is gone. */
        if (!m->have_exit) {
            m->out_done[fd - 1] = 1;
            mark_dead(m->ms, st->message);
            report_error(m, "the Modal sandbox is gone: %s", st->message);
        } else {
            out_incomplete(m, fd, st->message);
        }
        check_finish(m);
        return;
    }
    char why[400];
    snprintf(why, sizeof(why), "ContainerExecGetOutput: %s: %s", grpc_code_name(st->code),
             st->message);
    int again = st->code == GRPC_OK || grpc_code_retryable(st->code) || st->transport;
    if (!again) {
        out_incomplete(m, fd, why);
        check_finish(m);
        return;
    }
    double lived = ev_now(D->loop) - m->out_t0[fd - 1];
    if (st->code == GRPC_OK && (m->out_got[fd - 1] || lived >= 1.0)) {
        /* A long poll that ended as it should: on at once. */
        m->out_fails[fd - 1] = 0;
        m->out_fail_t0[fd - 1] = 0;
        if (m->paused)
            m->reopen[fd - 1] = 1;
        else
            out_open(m, fd);
        return;
    }
    /* Broken (or ending at once with nothing): again after a backoff, for as
     * long as the budget lasts. */
    double d = retry_after(m->ms->mp, &m->out_fail_t0[fd - 1], &m->out_fails[fd - 1]);
    if (d < 0) {
        char buf[480];
        snprintf(buf, sizeof(buf), "%s (still failing after %.0f s)", why,
                 m->ms->mp->retry_budget_s);
        out_incomplete(m, fd, buf);
        check_finish(m);
        return;
    }
    log_debug("modal: pid %u: %s stream broke (%s); again in %.2f s after batch %llu",
              m->p->pid, fd == 1 ? "stdout" : "stderr", why, d,
              (unsigned long long)m->last_batch[fd - 1]);
    ev_timer_set(&m->out_timer[fd - 1], d, 0.);
    ev_timer_start(D->loop, &m->out_timer[fd - 1]);
}

static void out_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    int fd = w == &m->out_timer[0] ? 1 : 2;
    if (m->reported || m->out_done[fd - 1] || m->out[fd - 1] || !m->ms)
        return;
    if (m->paused)
        m->reopen[fd - 1] = 1;
    else
        out_open(m, fd);
}

static void out_open(struct mproc *m, int fd)
{
    Modal__Client__ContainerExecGetOutputRequest req =
        MODAL__CLIENT__CONTAINER_EXEC_GET_OUTPUT_REQUEST__INIT;
    req.exec_id = m->exec_id;
    req.timeout = (float)POLL_S;
    req.last_batch_index = m->last_batch[fd - 1];
    req.file_descriptor = fd == 1
                              ? MODAL__CLIENT__FILE_DESCRIPTOR__FILE_DESCRIPTOR_STDOUT
                              : MODAL__CLIENT__FILE_DESCRIPTOR__FILE_DESCRIPTOR_STDERR;
    req.get_raw_bytes = 1;
    log_debug("modal: pid %u: %s stream from batch %llu", m->p->pid,
              fd == 1 ? "stdout" : "stderr", (unsigned long long)m->last_batch[fd - 1]);
    m->reopen[fd - 1] = 0;
    m->out_got[fd - 1] = 0;
    m->out_t0[fd - 1] = ev_now(D->loop);
    m->out[fd - 1] = grpc_stream(&m->ms->mp->ch, "ContainerExecGetOutput", &req.base,
                                 POLL_S + POLL_SLACK_S, out_msg, out_done_cb, m);
}

static void wait_open(struct mproc *m);

static void wait_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (!m->reported && m->exec_id && !m->have_exit && m->ms)
        wait_open(m);
}

static void wait_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    m->wait_call = NULL;
    if (m->reported || m->have_exit)
        return;
    if (st->code == GRPC_OK) {
        Modal__Client__ContainerExecWaitResponse *r =
            modal__client__container_exec_wait_response__unpack(NULL, len, msg);
        if (r && r->completed) {
            m->have_exit = 1;
            m->exit_code =
                r->_exit_code_case ==
                        MODAL__CLIENT__CONTAINER_EXEC_WAIT_RESPONSE___EXIT_CODE_EXIT_CODE
                    ? r->exit_code
                    : 0;
            modal__client__container_exec_wait_response__free_unpacked(r, NULL);
            ev_timer_stop(D->loop, &m->kill_timer);
            check_finish(m);
            return;
        }
        if (r)
            modal__client__container_exec_wait_response__free_unpacked(r, NULL);
        m->wait_fails = 0;
        m->wait_fail_t0 = 0;
        wait_open(m);
        return;
    }
    if (st->code == GRPC_NOT_FOUND) {
        mark_dead(m->ms, st->message);
        report_error(m, "the Modal sandbox is gone: %s", st->message);
        return;
    }
    int again = grpc_code_retryable(st->code) || st->transport;
    double d = again ? retry_after(m->ms->mp, &m->wait_fail_t0, &m->wait_fails) : -1;
    if (d < 0) {
        /* The process may still run: its exit and the rest of its output are unknown. */
        for (int fd = 1; fd <= 2; fd++)
            if (!m->out_done[fd - 1])
                out_incomplete(m, fd, "the exit could not be awaited");
        report_error(m, "ContainerExecWait failed%s: %s: %s",
                     again ? " for the whole retry budget" : "", grpc_code_name(st->code),
                     st->message);
        return;
    }
    log_debug("modal: pid %u: ContainerExecWait failed (%s: %s); again in %.2f s",
              m->p->pid, grpc_code_name(st->code), st->message, d);
    ev_timer_set(&m->retry_timer, d, 0.);
    ev_timer_start(D->loop, &m->retry_timer);
}

static void wait_open(struct mproc *m)
{
    Modal__Client__ContainerExecWaitRequest req =
        MODAL__CLIENT__CONTAINER_EXEC_WAIT_REQUEST__INIT;
    req.exec_id = m->exec_id;
    req.timeout = (float)POLL_S;
    m->wait_call = grpc_unary(&m->ms->mp->ch, "ContainerExecWait", &req.base,
                              POLL_S + POLL_SLACK_S, wait_done, m);
}

static void stdin_pump(struct mproc *m);

static void stdin_done(struct grpc_call *c, const struct grpc_status *st,
                       const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    m->stdin_call = NULL;
    if (st->code != GRPC_OK) {
        log_warn("modal: pid %u: stdin write failed: %s: %s", m->p->pid,
                 grpc_code_name(st->code), st->message);
        m->stdin_broken = 1;
        return;
    }
    stdin_pump(m);
}

static void stdin_pump(struct mproc *m)
{
    if (!m->exec_id || m->stdin_call || m->stdin_broken || m->reported || !m->ms)
        return;
    Modal__Client__RuntimeInputMessage in = MODAL__CLIENT__RUNTIME_INPUT_MESSAGE__INIT;
    Modal__Client__ContainerExecPutInputRequest req =
        MODAL__CLIENT__CONTAINER_EXEC_PUT_INPUT_REQUEST__INIT;
    req.exec_id = m->exec_id;
    req.input = &in;
    uint8_t *buf = NULL;
    if (m->stdin_q.bytes > 0) {
        size_t n = m->stdin_q.bytes < STDIN_CHUNK ? m->stdin_q.bytes : STDIN_CHUNK;
        buf = xmalloc(n);
        size_t got = 0;
        while (got < n) {
            struct iovec iov[8];
            int k = obuf_iov(&m->stdin_q, iov, 8);
            if (k == 0)
                break;
            size_t take = iov[0].iov_len < n - got ? iov[0].iov_len : n - got;
            memcpy(buf + got, iov[0].iov_base, take);
            obuf_consume(&m->stdin_q, take);
            got += take;
        }
        in.message.data = buf;
        in.message.len = got;
    } else if (m->stdin_eof && !m->stdin_eof_sent) {
        in.eof = 1;
        m->stdin_eof_sent = 1;
    } else {
        return;
    }
    in.message_index = ++m->stdin_index;
    m->stdin_call = grpc_unary(&m->ms->mp->ch, "ContainerExecPutInput", &req.base,
                               UNARY_TIMEOUT_S, stdin_done, m);
    /* Keyed by message_index, a repeat is ignored: safe through an outage. */
    grpc_call_retry_budget(m->stdin_call, m->ms->mp->retry_budget_s);
    free(buf);
}

static void fire_and_forget_done(struct grpc_call *c, const struct grpc_status *st,
                                 const uint8_t *msg, size_t len, void *privdata)
{
    if (st->code != GRPC_OK)
        log_warn("modal: kill exec failed: %s: %s", grpc_code_name(st->code),
                 st->message);
}

/* Runs the killer for tag with sig in the sandbox; nobody waits for it. */
static void send_killer(struct mprov *mp, const char *task_id, const char *tag, int sig)
{
    char signum[16];
    snprintf(signum, sizeof(signum), "%d", sig);
    char a0[] = "sh", a1[] = "-c";
    char *argv[] = {a0, a1, (char *)KILLER, (char *)tag, signum};
    Modal__Client__ContainerExecRequest req = MODAL__CLIENT__CONTAINER_EXEC_REQUEST__INIT;
    req.task_id = (char *)task_id;
    req.command = argv;
    req.n_command = 5;
    req.timeout_secs = 30;
    /* Killing twice does no harm: this one may retry through an outage. */
    grpc_call_retry_budget(grpc_unary(&mp->ch, "ContainerExec", &req.base, UNARY_TIMEOUT_S,
                                      fire_and_forget_done, NULL),
                           mp->retry_budget_s);
}

static void kill_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (m->reported || m->have_exit || !m->ms)
        return;
    if (m->kill_sig != SIGKILL && !m->kill_escalated && m->exec_id && m->ms->task_id) {
        /* It ignored the signal: the process must end. */
        m->kill_escalated = 1;
        send_killer(m->ms->mp, m->ms->task_id, m->tag, SIGKILL);
        ev_timer_set(w, KILL_CONFIRM_S, 0.);
        ev_timer_start(loop, w);
        return;
    }
    log_warn("modal: pid %u: Modal did not confirm the end of the process", m->p->pid);
    m->have_exit = 1;
    m->exit_code = 128 + m->kill_sig;
    set_str(&m->exit_error, "killed, but Modal did not confirm that the process ended");
    m->gone = 1;
    schedule_report(m);
}

static void send_kill(struct mproc *m)
{
    if (!m->ms || !m->ms->task_id)
        return;
    send_killer(m->ms->mp, m->ms->task_id, m->tag, m->kill_sig);
    ev_timer_set(&m->kill_timer, KILL_CONFIRM_S, 0.);
    ev_timer_start(D->loop, &m->kill_timer);
}

/* Final env of the process against what the sandbox's secret already holds:
 * `env -u K... K=V... ` in front of the command when they differ. */
static size_t env_prefix(struct msb *ms, json_t *want, char **argv, char ***owned,
                         size_t *nowned)
{
    json_t *baked = ms->baked_env;
    size_t n = 0;
    const char *k;
    json_t *v;
    int need = 0;
    json_object_foreach (baked, k, v)
        if (!json_object_get(want, k) && k[0] != '-')
            need = 1;
    json_object_foreach (want, k, v) {
        json_t *b = json_object_get(baked, k);
        if (!b || !json_equal(b, v))
            need = 1;
    }
    if (!need)
        return 0;
    *owned = xcalloc(json_object_size(want) + 1, sizeof(char *));
    argv[n++] = (char *)"env";
    json_object_foreach (baked, k, v) {
        if (json_object_get(want, k) || k[0] == '-')
            continue;
        argv[n++] = (char *)"-u";
        argv[n++] = (char *)k;
    }
    json_object_foreach (want, k, v) {
        json_t *b = json_object_get(baked, k);
        if (b && json_equal(b, v))
            continue;
        char *kv = xasprintf("%s=%s", k, json_string_value(v));
        (*owned)[(*nowned)++] = kv;
        argv[n++] = kv;
    }
    return n;
}

static void exec_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata);
static void check_done(struct grpc_call *c, const struct grpc_status *st,
                       const uint8_t *msg, size_t len, void *privdata);

static void wait_for_restart(struct mproc *m)
{
    struct msb *ms = m->ms;
    m->waiting = 1;
    m->wnext = ms->waiters;
    ms->waiters = m;
    if (ms->job == J_NONE)
        start_restart(ms);
}

static void exec_start(struct mproc *m)
{
    struct msb *ms = m->ms;
    struct process *p = m->p;
    if (!ms->task_id || ms->dead) {
        wait_for_restart(m);
        return;
    }
    json_t *spec = p->spec;
    json_t *argv_j = json_object_get(spec, "argv");
    const char *shell = json_string_value(json_object_get(spec, "shell"));
    size_t nargs = shell ? 3 : json_array_size(argv_j);
    json_t *env = json_object_get(spec, "env");
    size_t max = 8 + nargs + 2 * json_object_size(ms->baked_env) + json_object_size(env);
    char **argv = xcalloc(max, sizeof(char *));
    char **owned = NULL;
    size_t nowned = 0;
    size_t n = env_prefix(ms, env, argv, &owned, &nowned);
    argv[n++] = (char *)"sh";
    argv[n++] = (char *)"-c";
    argv[n++] = (char *)WRAPPER;
    argv[n++] = m->argv0;
    if (shell) {
        argv[n++] = (char *)"sh";
        argv[n++] = (char *)"-c";
        argv[n++] = (char *)shell;
    } else {
        size_t i;
        json_t *a;
        json_array_foreach (argv_j, i, a)
            argv[n++] = (char *)json_string_value(a);
    }
    Modal__Client__ContainerExecRequest req = MODAL__CLIENT__CONTAINER_EXEC_REQUEST__INIT;
    req.task_id = ms->task_id;
    req.command = argv;
    req.n_command = n;
    json_int_t tmo = json_integer_value(json_object_get(spec, "timeout_ms"));
    if (tmo > 0)
        req.timeout_secs = (uint32_t)((tmo + 999) / 1000);
    const char *cwd = json_string_value(json_object_get(spec, "cwd"));
    if (cwd) {
        req._workdir_case = MODAL__CLIENT__CONTAINER_EXEC_REQUEST___WORKDIR_WORKDIR;
        req.workdir = (char *)cwd;
    }
    m->exec_call = grpc_unary(&ms->mp->ch, "ContainerExec", &req.base, UNARY_TIMEOUT_S,
                              exec_done, m);
    /* Modal may or may not honour x-idempotency-key for ContainerExec: never risk
     * running the command twice (exec_done repeats only calls that never left). */
    grpc_call_no_resend(m->exec_call);
    for (size_t i = 0; i < nowned; i++)
        free(owned[i]);
    free(owned);
    free(argv);
}

static void exec_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    m->exec_call = NULL;
    if (m->reported)
        return;
    struct msb *ms = m->ms;
    Modal__Client__ContainerExecResponse *r =
        st->code == GRPC_OK
            ? modal__client__container_exec_response__unpack(NULL, len, msg)
            : NULL;
    if (r && r->exec_id[0]) {
        set_str(&m->exec_id, r->exec_id);
        modal__client__container_exec_response__free_unpacked(r, NULL);
        ms->last_retried = m->retried;
        state_dirty(ms->mp);
        log_debug("modal: sandbox %s pid %u is exec %s%s", ms->sb->id, m->p->pid,
                  m->exec_id, m->retried ? " (retried)" : "");
        out_open(m, 1);
        out_open(m, 2);
        wait_open(m);
        stdin_pump(m);
        if (m->kill_sig)
            send_kill(m);
        return;
    }
    if (r)
        modal__client__container_exec_response__free_unpacked(r, NULL);
    if (m->kill_sig) {
        m->have_exit = 1;
        m->exit_code = 128 + m->kill_sig;
        schedule_report(m);
        return;
    }
    if (st->code != GRPC_OK && dead_code(st->code) && !m->retried) {
        /* Maybe the sandbox died: look, restart it if so, and try once more. */
        m->retried = 1;
        ms->last_retried = 1;
        log_info("modal: sandbox %s pid %u: ContainerExec failed (%s: %s); checking the "
                 "sandbox",
                 ms->sb->id, m->p->pid, grpc_code_name(st->code), st->message);
        if (!ms->sandbox_id || ms->dead) {
            wait_for_restart(m);
            return;
        }
        Modal__Client__SandboxGetTaskIdRequest req =
            MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
        req.sandbox_id = ms->sandbox_id;
        m->check_call = grpc_unary(&ms->mp->ch, "SandboxGetTaskId", &req.base,
                                   UNARY_TIMEOUT_S, check_done, m);
        return;
    }
    if (st->code != GRPC_OK && st->unsent &&
        (grpc_code_retryable(st->code) || st->transport)) {
        /* It never reached Modal: starting it again cannot run it twice. */
        double d = retry_after(ms->mp, &m->exec_fail_t0, &m->exec_fails);
        if (d >= 0) {
            log_debug("modal: pid %u: ContainerExec did not reach Modal (%s); again in "
                      "%.2f s",
                      m->p->pid, st->message, d);
            ev_timer_set(&m->exec_timer, d, 0.);
            ev_timer_start(D->loop, &m->exec_timer);
            return;
        }
    }
    ms->last_retried = m->retried;
    if (st->code != GRPC_OK && !st->unsent &&
        (grpc_code_retryable(st->code) || st->transport)) {
        /* It may have started remotely: end whatever it started, and say so. */
        if (ms->task_id)
            send_killer(ms->mp, ms->task_id, m->tag, SIGKILL);
        report_error(m,
                     "Modal ContainerExec failed after the call may have reached Modal "
                     "(%s: %s); it was not repeated, so that the command cannot run "
                     "twice, and anything it started was killed",
                     grpc_code_name(st->code), st->message);
    } else if (st->transport)
        report_error(m, "Modal is unreachable: %s", st->message);
    else
        report_error(m, "Modal ContainerExec failed: %s: %s%s", grpc_code_name(st->code),
                     st->code == GRPC_OK ? "no exec id" : st->message,
                     m->retried ? " (the call was already retried once)" : "");
}

static void check_done(struct grpc_call *c, const struct grpc_status *st,
                       const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    m->check_call = NULL;
    if (m->reported)
        return;
    struct msb *ms = m->ms;
    Modal__Client__SandboxGetTaskIdResponse *r =
        st->code == GRPC_OK
            ? modal__client__sandbox_get_task_id_response__unpack(NULL, len, msg)
            : NULL;
    int ended =
        st->code == GRPC_NOT_FOUND ||
        (r && r->_task_result_case ==
                  MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT);
    if (!ended &&
        (!r || r->_task_id_case !=
                   MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID)) {
        if (r)
            modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
        report_error(
            m, "Modal ContainerExec failed and the sandbox could not be checked: %s: %s",
            grpc_code_name(st->code), st->message);
        return;
    }
    if (ended) {
        char why[512];
        snprintf(why, sizeof(why), "%s", r ? result_text(r->task_result) : st->message);
        if (r)
            modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
        mark_dead(ms, why);
        wait_for_restart(m);
        return;
    }
    /* Alive: the task may have moved; retry the exec once. */
    set_str(&ms->task_id, r->task_id);
    modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
    exec_start(m);
}

static void exec_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (!m->reported && !m->exec_id && !m->exec_call && m->ms)
        exec_start(m);
}

/* A process record of ms for p (tag NULL: a new one). */
static struct mproc *mproc_new(struct msb *ms, struct process *p, const char *tag)
{
    struct mproc *m = xcalloc(1, sizeof(*m));
    m->p = p;
    m->ms = ms;
    if (tag) {
        snprintf(m->tag, sizeof(m->tag), "%s", tag);
    } else {
        char rnd[24];
        daemon_random_id("", rnd, sizeof(rnd));
        snprintf(m->tag, sizeof(m->tag), "p%u-%s", p->pid, rnd);
    }
    snprintf(m->argv0, sizeof(m->argv0), "sbxd-%s", m->tag);
    obuf_init(&m->stdin_q);
    m->t0 = ev_now(D->loop);
    ev_init(&m->kill_timer, kill_timer_cb);
    m->kill_timer.data = m;
    ev_init(&m->grace, grace_cb);
    m->grace.data = m;
    ev_init(&m->report_timer, report_cb);
    m->report_timer.data = m;
    ev_init(&m->retry_timer, wait_retry_cb);
    m->retry_timer.data = m;
    for (int i = 0; i < 2; i++) {
        ev_init(&m->out_timer[i], out_timer_cb);
        m->out_timer[i].data = m;
    }
    ev_init(&m->exec_timer, exec_timer_cb);
    m->exec_timer.data = m;
    m->next = ms->procs;
    if (ms->procs)
        ms->procs->prev = m;
    ms->procs = m;
    p->pdata = m;
    return m;
}

static int m_proc_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    struct msb *ms = p->sb->pdata;
    if (!ms)
        return err_make(err, SBX_E_STATE, "sandbox %s has no Modal sandbox", p->sb->id);
    exec_start(mproc_new(ms, p, NULL));
    return 0;
}

static int m_proc_write(void *cookie, struct process *p, const void *data, size_t len,
                        sbx_err_t *err)
{
    struct mproc *m = p->pdata;
    if (!m || m->stdin_eof || m->reported)
        return err_make(err, SBX_E_STATE, "stdin of process %u is closed", p->pid);
    if (m->stdin_broken)
        return plain_err(err, m->adopted ? "stdin of a process re-adopted after an sbxd "
                                           "restart cannot be written"
                                         : "stdin of the Modal exec failed earlier");
    if (m->stdin_q.bytes + len > STDIN_LIMIT)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "stdin_buffer", "max", (int)STDIN_LIMIT),
            "stdin buffer of process %u is full", p->pid);
    if (obuf_append(&m->stdin_q, data, len) < 0)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    stdin_pump(m);
    return 0;
}

static int m_proc_close_stdin(void *cookie, struct process *p, sbx_err_t *err)
{
    struct mproc *m = p->pdata;
    if (!m || m->stdin_eof)
        return 0;
    m->stdin_eof = 1;
    stdin_pump(m);
    return 0;
}

static void unwait(struct mproc *m)
{
    if (!m->waiting || !m->ms)
        return;
    for (struct mproc **pp = &m->ms->waiters; *pp; pp = &(*pp)->wnext)
        if (*pp == m) {
            *pp = m->wnext;
            break;
        }
    m->waiting = 0;
    m->wnext = NULL;
}

static int m_proc_kill(void *cookie, struct process *p, int sig, sbx_err_t *err)
{
    struct mproc *m = p->pdata;
    if (!m || m->reported)
        return 0;
    if (m->kill_sig && m->kill_sig == sig && (m->exec_id || m->exec_call))
        return 0; /* already on it */
    m->kill_sig = sig;
    if (m->exec_id) {
        send_kill(m);
        return 0;
    }
    if (m->exec_call) {
        /* exec_done sends the kill as soon as the exec id is known. */
        ev_timer_set(&m->kill_timer, KILL_CONFIRM_S + UNARY_TIMEOUT_S, 0.);
        ev_timer_start(D->loop, &m->kill_timer);
        return 0;
    }
    /* Nothing runs remotely yet (waiting for a restart or a check). */
    unwait(m);
    stop_calls(m);
    m->have_exit = 1;
    m->exit_code = 128 + sig;
    m->reported = 1;
    json_t *rec =
        json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig, "killed", 1);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

static void m_proc_resume(void *cookie, struct process *p)
{
    struct mproc *m = p->pdata;
    if (!m || !m->paused || m->reported)
        return;
    m->paused = 0;
    m->last_output = ev_now(D->loop);
    log_debug("modal: pid %u: follower drained; resuming output (reopen %d/%d)", p->pid,
              m->reopen[0], m->reopen[1]);
    for (int i = 0; i < 2 && !m->paused; i++) {
        if (m->out[i])
            grpc_call_resume(m->out[i]); /* may deliver held batches and pause again */
    }
    for (int i = 0; i < 2 && !m->paused; i++)
        if (m->reopen[i] && !m->out[i] && !m->reported)
            out_open(m, i + 1);
}

static void m_proc_release(void *cookie, struct process *p)
{
    struct mproc *m = p->pdata;
    if (!m)
        return;
    struct msb *ms = m->ms;
    /* At shutdown the core frees processes before their sandboxes: a pending
     * state write goes out while every exec is still known. */
    if (ms && D->draining && ms->mp->dirty)
        state_write(ms->mp);
    /* A process dropped while it still runs remotely (the core gave up on it):
     * end it there too, unless the whole sandbox is going away anyway. */
    if (ms && m->exec_id && !m->have_exit && !m->reported && ms->task_id && !ms->dead &&
        p->sb->status == SB_RUNNING && !D->draining)
        send_killer(ms->mp, ms->task_id, m->tag, SIGKILL);
    unwait(m);
    stop_calls(m);
    ev_timer_stop(D->loop, &m->report_timer);
    if (ms) {
        if (m->prev)
            m->prev->next = m->next;
        else
            ms->procs = m->next;
        if (m->next)
            m->next->prev = m->prev;
    }
    obuf_deinit(&m->stdin_q);
    free(m->exec_id);
    free(m->exit_error);
    free(m->incomplete_why);
    free(m);
    p->pdata = NULL;
}

/* ---- state file: what survives an sbxd restart -------------------------------------
 *
 * Modal sandboxes outlive sbxd. So that a restarted sbxd lists them again with
 * their env, working dir and lifetime, and re-adopts their running processes,
 * each sandbox this daemon started is kept in a JSON file (mode 0600: env
 * values may be secrets), rewritten whole (write + rename) within a second
 * of a change, at most once a second, and at shutdown. The file is authoritative for sbxd's view
 * (conf, owner, lifetime, exec ids); Modal is authoritative for what still
 * runs: after adoption each sandbox is checked (SandboxGetTaskId) and each
 * process's output is read again from its first batch; what Modal no longer
 * knows is reported as lost, never dropped silently.
 *
 * {"version": 1, "server_url": URL,
 *  "sandboxes": {ID: {owner, conf, runtime_env, created_at, expires_at, stopped,
 *                     modal: {...}, procs: [{pid, exec_id, tag, command,
 *                     started_at, deadline}]}},
 *  "snapshots": {SNAP: {owner, created_at, sandbox, data}}}
 */

#define STATE_VERSION 1
/* A write (about 2 ms on ext4: write + rename) blocks the loop: changes are
 * gathered and written at most once per this many seconds (and at shutdown). */
#define STATE_SAVE_DELAY_S 1.0
#define MAX_ADOPT_PROCS 256


static void put_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static const char *get_str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static json_t *msb_state(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    json_t *m = json_object();
    put_str(m, "app_name", ms->app_name);
    put_str(m, "env_name", ms->env_name);
    put_str(m, "app_id", ms->app_id);
    put_str(m, "image_tag", ms->image_tag);
    put_str(m, "image_id", ms->image_id);
    put_str(m, "resume_image", ms->resume_image);
    put_str(m, "sandbox_id", ms->sandbox_id);
    put_str(m, "task_id", ms->task_id);
    put_str(m, "workdir", ms->workdir);
    put_str(m, "secret_id", ms->secret_id);
    json_object_set_new(m, "cpu", json_real(ms->cpu));
    json_object_set_new(m, "memory_mb", json_integer(ms->memory_mb));
    json_object_set_new(m, "timeout_secs", json_integer(ms->timeout_secs));
    json_object_set_new(m, "idle_secs", json_integer(ms->idle_secs));
    if (ms->baked_env)
        json_object_set(m, "baked_env", ms->baked_env);
    json_t *procs = json_array();
    for (struct mproc *x = ms->procs; x; x = x->next) {
        if (x->reported || x->have_exit || !x->p)
            continue;
        struct process *p = x->p;
        double deadline = p->timeout_ms > 0 && p->started_at > 0
                              ? p->started_at + p->timeout_ms / 1000.0
                              : 0;
        /* Without an exec id (ContainerExec not answered yet) it is kept too:
         * after a restart it is reported lost and its tag killed. */
        json_t *pe = json_pack("{s:I, s:s, s:s, s:f, s:f}", "pid", (json_int_t)p->pid, "tag",
                               x->tag, "command", p->display ? p->display : "",
                               "started_at", p->started_at, "deadline", deadline);
        if (x->exec_id)
            json_object_set_new(pe, "exec_id", json_string(x->exec_id));
        json_array_append_new(procs, pe);
    }
    json_t *conf = json_deep_copy(sb->conf);
    json_t *e = json_pack("{s:I, s:o, s:f, s:f, s:b, s:o, s:o}", "owner",
                          (json_int_t)sb->owner, "conf", conf, "created_at",
                          sb->created_at, "expires_at", sb->expires_at, "stopped",
                          sb->status == SB_STOPPED || (!ms->sandbox_id && ms->resume_image),
                          "modal", m, "procs", procs);
    if (sb->runtime_env)
        json_object_set(e, "runtime_env", sb->runtime_env);
    return e;
}

static void state_write(struct mprov *mp)
{
    ev_timer_stop(D->loop, &mp->save_timer);
    mp->dirty = 0;
    if (!mp->state_path)
        return;
    json_t *sbs = json_object();
    for (struct msb *ms = mp->all; ms; ms = ms->all_next) {
        struct sandbox *sb = ms->sb;
        if (ms->destroyed || sb->status == SB_DESTROYING || sb->status == SB_DESTROYED ||
            (!ms->sandbox_id && !ms->resume_image))
            continue;
        json_object_set_new(sbs, sb->id, msb_state(ms));
    }
    json_t *root = json_pack("{s:i, s:s, s:o, s:O}", "version", STATE_VERSION, "server_url",
                             nz(mp->url), "sandboxes", sbs, "snapshots", mp->snaps);
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", mp->state_path);
    /* Never through a link someone else planted, never into their file. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int ok = fd >= 0 && json_dumpfd(root, fd, JSON_COMPACT) == 0;
    if (fd >= 0 && close(fd) < 0)
        ok = 0;
    if (ok && rename(tmp, mp->state_path) < 0)
        ok = 0;
    if (!ok) {
        log_warn("modal: cannot write the state file %s: %s; a restarted sbxd will not "
                 "find these sandboxes",
                 mp->state_path, strerror(errno));
        unlink(tmp);
    }
    json_decref(root);
}

static void save_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    state_write(w->data);
}

static void state_dirty(struct mprov *mp)
{
    if (!mp->state_path || mp->dirty || D->draining)
        return;
    mp->dirty = 1;
    ev_timer_set(&mp->save_timer, STATE_SAVE_DELAY_S, 0.);
    ev_timer_start(D->loop, &mp->save_timer);
}

/* Reads the state file; a missing file is an empty state. */
static void state_read(struct mprov *mp)
{
    mp->snaps = json_object();
    if (!mp->state_path)
        return;
    json_error_t je = {0};
    int fd = open(mp->state_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            log_warn("modal: cannot open the state file %s: %s; starting without it",
                     mp->state_path, strerror(errno));
        return;
    }
    /* It names owners: only a file of ours that nobody else may write counts. */
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022)) {
        log_warn("modal: state file %s is not a regular file owned by this user and "
                 "writable only by it; ignored",
                 mp->state_path);
        close(fd);
        return;
    }
    json_t *root = json_loadfd(fd, 0, &je);
    close(fd);
    if (!root) {
        log_warn("modal: state file %s is unreadable (%s); starting without it",
                 mp->state_path, je.text);
        return;
    }
    const char *url = get_str(root, "server_url");
    if (json_integer_value(json_object_get(root, "version")) != STATE_VERSION ||
        !url || strcmp(url, nz(mp->url)) != 0) {
        log_warn("modal: state file %s is for another server or version (%s); ignored",
                 mp->state_path, url ? url : "?");
        json_decref(root);
        return;
    }
    json_t *snaps = json_object_get(root, "snapshots");
    if (json_is_object(snaps))
        json_object_update(mp->snaps, snaps);
    json_t *sbs = json_object_get(root, "sandboxes");
    if (json_is_object(sbs) && json_object_size(sbs) > 0)
        mp->saved = json_incref(sbs);
    json_decref(root);
}

static void adopt_check_done(struct grpc_call *c, const struct grpc_status *st,
                             const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->check_call = NULL;
    Modal__Client__SandboxGetTaskIdResponse *r =
        st->code == GRPC_OK
            ? modal__client__sandbox_get_task_id_response__unpack(NULL, len, msg)
            : NULL;
    int ended =
        st->code == GRPC_NOT_FOUND ||
        (r && r->_task_result_case ==
                  MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT);
    if (ended) {
        char why[512];
        snprintf(why, sizeof(why), "ended while sbxd was down: %s",
                 r ? result_text(r->task_result) : st->message);
        mark_dead(ms, why); /* the next call restarts it */
    } else if (r && r->_task_id_case ==
                        MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID &&
               r->task_id && r->task_id[0]) {
        set_str(&ms->task_id, r->task_id);
        log_info("modal: sandbox %s: Modal sandbox %s is still running", ms->sb->id,
                 ms->sandbox_id);
    } else if (st->code != GRPC_OK) {
        log_warn("modal: sandbox %s: cannot check Modal sandbox %s after the restart: %s: "
                 "%s",
                 ms->sb->id, nz(ms->sandbox_id), grpc_code_name(st->code), st->message);
    }
    if (r)
        modal__client__sandbox_get_task_id_response__free_unpacked(r, NULL);
}

static void adopt_proc(struct msb *ms, json_t *pe)
{
    json_int_t pid = json_integer_value(json_object_get(pe, "pid"));
    const char *exec_id = get_str(pe, "exec_id"), *tag = get_str(pe, "tag");
    if (pid <= 0 || pid > UINT32_MAX || !tag || strlen(tag) >= 40)
        return;
    const char *cmd = get_str(pe, "command");
    struct process *p = process_adopt(ms->sb, (uint32_t)pid, cmd ? cmd : "");
    if (!p)
        return;
    double started = json_number_value(json_object_get(pe, "started_at"));
    if (started > 0)
        p->started_at = started;
    double deadline = json_number_value(json_object_get(pe, "deadline"));
    if (deadline > 0) {
        /* sbxd's own deadline goes on where it was. */
        double left = deadline - daemon_now();
        p->timeout_ms = (int64_t)((deadline - p->started_at) * 1000.0);
        ev_timer_set(&p->timer, left > 0.001 ? left : 0.001, 0.);
        ev_timer_start(D->loop, &p->timer);
    }
    struct mproc *m = mproc_new(ms, p, tag);
    m->adopted = 1;
    if (!exec_id) {
        /* sbxd stopped before Modal answered its ContainerExec: whatever it
         * may have started cannot be followed; end it and say so. */
        if (ms->task_id)
            send_killer(ms->mp, ms->task_id, m->tag, SIGKILL);
        report_error(m, "lost: sbxd stopped before Modal confirmed the start of this "
                        "command; anything it started was killed");
        return;
    }
    set_str(&m->exec_id, exec_id);
    m->stdin_broken = 1; /* the next stdin index is not known */
    /* Output again from the first batch Modal still has: the replay. */
    out_open(m, 1);
    out_open(m, 2);
    wait_open(m);
}

static void adopt_sandbox(struct mprov *mp, const char *id, json_t *e)
{
    json_t *mm = json_object_get(e, "modal");
    json_t *conf = json_object_get(e, "conf");
    json_int_t owner = json_integer_value(json_object_get(e, "owner"));
    if (!json_is_object(mm) || !json_is_object(conf) || owner < 0 ||
        !json_is_integer(json_object_get(e, "owner")) || strlen(id) > 63)
        return;
    double expires = json_number_value(json_object_get(e, "expires_at"));
    double now = daemon_now();
    if (expires > 0 && expires <= now) {
        log_info("modal: sandbox %s reached its lifetime while sbxd was down; Modal has "
                 "ended it",
                 id);
        return;
    }
    int stopped = json_is_true(json_object_get(e, "stopped"));
    struct provider_inst *pi = daemon_provider("modal");
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (!pi || sandbox_adopt(&sb, id, pi, (uid_t)owner, json_deep_copy(conf),
                             stopped ? SB_STOPPED : SB_RUNNING, &err) < 0) {
        log_warn("modal: cannot adopt sandbox %s: %s", id, err.msg ? err.msg : "?");
        err_clear(&err);
        return;
    }
    double created = json_number_value(json_object_get(e, "created_at"));
    if (created > 0)
        sb->created_at = created;
    json_t *renv = json_object_get(e, "runtime_env");
    if (json_is_object(renv)) {
        json_decref(sb->runtime_env);
        sb->runtime_env = json_deep_copy(renv);
    }
    if (expires > 0 && !stopped) {
        /* The lifetime runs on from the original creation. */
        ev_timer_stop(D->loop, &sb->life_timer);
        sb->expires_at = expires;
        ev_timer_set(&sb->life_timer, expires - now, 0.);
        ev_timer_start(D->loop, &sb->life_timer);
    }
    struct msb *ms = msb_new(mp, sb, &err);
    if (!ms) {
        log_warn("modal: sandbox %s: %s", id, err.msg ? err.msg : "?");
        err_clear(&err);
        return;
    }
    const char *v;
    if ((v = get_str(mm, "app_id")))
        set_str(&ms->app_id, v);
    if ((v = get_str(mm, "image_id")))
        set_str(&ms->image_id, v);
    if ((v = get_str(mm, "resume_image")))
        set_str(&ms->resume_image, v);
    if ((v = get_str(mm, "sandbox_id")))
        set_str(&ms->sandbox_id, v);
    if ((v = get_str(mm, "task_id")))
        set_str(&ms->task_id, v);
    if ((v = get_str(mm, "secret_id")))
        set_str(&ms->secret_id, v);
    if ((v = get_str(mm, "workdir")))
        set_str(&ms->workdir, v);
    ms->timeout_secs = (uint32_t)json_integer_value(json_object_get(mm, "timeout_secs"));
    ms->idle_secs = (uint32_t)json_integer_value(json_object_get(mm, "idle_secs"));
    json_t *be = json_object_get(mm, "baked_env");
    ms->baked_env = json_is_object(be) ? json_deep_copy(be) : sandbox_env_for(sb, NULL);
    ms->reconnected = 1;
    ms->lookup_done = 1;
    int nprocs = 0;
    if (!stopped && ms->sandbox_id) {
        Modal__Client__SandboxGetTaskIdRequest req =
            MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
        req.sandbox_id = ms->sandbox_id;
        ms->check_call = grpc_unary(&mp->ch, "SandboxGetTaskId", &req.base,
                                    UNARY_TIMEOUT_S, adopt_check_done, ms);
        grpc_call_retry_budget(ms->check_call, mp->retry_budget_s);
        size_t i;
        json_t *pe;
        json_array_foreach (json_object_get(e, "procs"), i, pe) {
            if (nprocs >= MAX_ADOPT_PROCS)
                break;
            adopt_proc(ms, pe);
            nprocs++;
        }
    }
    log_info("modal: sandbox %s (Modal sandbox %s, uid %u) adopted from the state file; "
             "%d process(es) re-adopted",
             id, nz(ms->sandbox_id), (unsigned)owner, nprocs);
}

/* Puts the snapshots of the state file into the core's registry. */
static void register_snaps(struct mprov *mp)
{
    const char *id;
    json_t *e;
    json_object_foreach (mp->snaps, id, e) {
        json_int_t owner = json_integer_value(json_object_get(e, "owner"));
        json_t *data = json_object_get(e, "data");
        if (owner < 0 || !json_is_object(data))
            continue;
        snapshot_register(id, "modal", (uid_t)owner,
                          json_number_value(json_object_get(e, "created_at")),
                          json_string_value(json_object_get(e, "sandbox")),
                          json_deep_copy(data));
    }
}

static int m_snapshot_list(void *cookie, void (*done)(void *data, sbx_err_t *err),
                           void *data, sbx_err_t *err)
{
    register_snaps(cookie);
    done(data, NULL);
    return 0;
}

/* Modal's API has no call that deletes an image (the SDK has none either):
 * the snapshot is forgotten here and in the state file; Modal keeps or
 * expires the image by its own rules. */
static int m_snapshot_delete(void *cookie, const char *id, json_t *rec,
                             void (*done)(void *data, sbx_err_t *err), void *data,
                             sbx_err_t *err)
{
    struct mprov *mp = cookie;
    json_object_del(mp->snaps, id);
    state_dirty(mp);
    done(data, NULL);
    return 0;
}

static void adopt_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mprov *mp = w->data;
    /* Snapshots first: a sandbox made from one finds it again (a restart
     * of that sandbox starts from the snapshot, as before). */
    register_snaps(mp);
    json_t *saved = mp->saved;
    mp->saved = NULL;
    const char *id;
    json_t *e;
    json_object_foreach (saved, id, e) {
        if (sandbox_find_any(id))
            continue;
        adopt_sandbox(mp, id, e);
    }
    json_decref(saved);
    state_dirty(mp);
}

/* Where the state file lives: providers.modal.state_file, else
 * $STATE_DIRECTORY (systemd's StateDirectory=sbxd) or the socket's folder,
 * named after the socket so that daemons sharing a folder keep apart. */
static char *state_path_for(json_t *conf)
{
    const char *f = json_string_value(json_object_get(conf, "state_file"));
    if (f)
        return f[0] ? xstrdup(f) : NULL; /* "" turns it off */
    const char *sock = D->cfg.socket_path ? D->cfg.socket_path : "sbxd.sock";
    char *a = xstrdup(sock), *b = xstrdup(sock);
    const char *dir = getenv("STATE_DIRECTORY");
    if (dir && strchr(dir, ':'))
        dir = NULL; /* several directories: use the socket's */
    char *path =
        xasprintf("%s/%s.modal.json", dir && dir[0] ? dir : dirname(a), basename(b));
    free(a);
    free(b);
    return path;
}

/* ---- authentication: Modal's headers and auth token ----------------------------------
 *
 * grpc.c knows no Modal: every call carries the token id and secret, every
 * call but AuthTokenGet the auth token it fetched (a JWT), and unary calls
 * the SDK's idempotency key and retry marks (shared/modal-protocol.md 1.1-1.2).
 */

/* No exp claim in the token: treat it as valid this long (the SDK's rule). */
#define TOKEN_DEFAULT_LIFE 1200.0
#define TOKEN_REFRESH_EARLY 300.0

static void add_header(struct curl_slist **list, const char *name, const char *value)
{
    char line[8400];
    snprintf(line, sizeof(line), "%s: %s", name, value);
    grpc_header_add(list, line);
}

static void auth_headers(struct curl_slist **list, const struct grpc_attempt *a,
                         void *privdata)
{
    struct mprov *mp = privdata;
    add_header(list, "x-modal-token-id", mp->token_id);
    add_header(list, "x-modal-token-secret", mp->token_secret);
    if (a->token && !a->is_token)
        add_header(list, "x-modal-auth-token", a->token);
    if (!a->unary)
        return;
    char v[32];
    add_header(list, "x-idempotency-key", a->call_id);
    snprintf(v, sizeof(v), "%d", a->attempt);
    add_header(list, "x-retry-attempt", v);
    if (a->attempt > 0) {
        snprintf(v, sizeof(v), "%.3f", a->since_first_s);
        add_header(list, "x-retry-delay", v);
    }
}

static int b64url_val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '-' || ch == '+')
        return 62;
    if (ch == '_' || ch == '/')
        return 63;
    return -1;
}

/* exp from the JWT payload, or 0. */
static double jwt_exp(const char *tok)
{
    const char *a = strchr(tok, '.');
    const char *b = a ? strchr(a + 1, '.') : NULL;
    if (!b || b - a - 1 > 8192)
        return 0;
    size_t n = (size_t)(b - a - 1);
    char *out = xmalloc(n + 1);
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64url_val((unsigned char)a[1 + i]);
        if (v < 0)
            break;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    json_t *j = json_loadb(out, o, 0, NULL);
    free(out);
    json_t *e = json_object_get(j, "exp");
    double exp = json_is_number(e) ? json_number_value(e) : 0;
    json_decref(j);
    return exp;
}

/* AuthTokenGet's reply: the token, refreshed 5 min before its exp (or half
 * way through a shorter life). */
static char *auth_token_parse(const uint8_t *msg, size_t len, double *refresh_in_s,
                              void *privdata)
{
    Modal__Client__AuthTokenGetResponse *r =
        modal__client__auth_token_get_response__unpack(NULL, len, msg);
    if (!r)
        return NULL;
    char *tok = r->token && r->token[0] ? xstrdup(r->token) : NULL;
    modal__client__auth_token_get_response__free_unpacked(r, NULL);
    if (!tok)
        return NULL;
    double now = daemon_now();
    double exp = jwt_exp(tok);
    double life = exp > now ? exp - now : TOKEN_DEFAULT_LIFE;
    if (exp <= 0)
        log_warn("modal: the auth token has no exp claim; treating it as valid for %.0f s",
                 TOKEN_DEFAULT_LIFE);
    double early = life / 2 < TOKEN_REFRESH_EARLY ? life / 2 : TOKEN_REFRESH_EARLY;
    *refresh_in_s = life - early;
    return tok;
}

static int printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}

/* ---- provider ------------------------------------------------------------------- */

static const char *first_env(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return v && v[0] ? v : fallback;
}

static int m_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    struct mprov *mp = xcalloc(1, sizeof(*mp));
    mp->apps = json_object();
    mp->images = json_object();
    ev_init(&mp->adopt_timer, adopt_timer_cb);
    mp->adopt_timer.data = mp;
    ev_init(&mp->save_timer, save_timer_cb);
    mp->save_timer.data = mp;
    const char *url = first_env("MODAL_SERVER_URL",
                                json_string_value(json_object_get(conf, "server_url")));
    mp->url = xstrdup(url ? url : DEFAULT_URL);
    const char *tid =
        first_env("MODAL_TOKEN_ID", json_string_value(json_object_get(conf, "token_id")));
    const char *tsec = first_env(
        "MODAL_TOKEN_SECRET", json_string_value(json_object_get(conf, "token_secret")));
    const char *app = json_string_value(json_object_get(conf, "app_name"));
    mp->app_name = xstrdup(app && app[0] ? app : DEFAULT_APP);
    const char *envn = first_env("MODAL_ENVIRONMENT",
                                 json_string_value(json_object_get(conf, "environment")));
    mp->environment = envn ? xstrdup(envn) : NULL;
    const char *img = json_string_value(json_object_get(conf, "image"));
    mp->image = xstrdup(img && img[0] ? img : DEFAULT_IMAGE);
    const char *wd = json_string_value(json_object_get(conf, "working_dir"));
    if (wd && wd[0] != '/') {
        log_warn("modal: working_dir %s is not absolute; ignored", wd);
        wd = NULL;
    }
    mp->working_dir = wd ? xstrdup(wd) : NULL;
    json_t *cpu = json_object_get(conf, "cpu");
    if (cpu && opt_number(cpu, &mp->cpu) < 0) {
        log_warn("modal: cpu must be a number; ignored");
        mp->cpu = 0;
    }
    mp->memory_mb = json_integer_value(json_object_get(conf, "memory_mb"));
    mp->max_timeout_ms = json_integer_value(json_object_get(conf, "timeout_ms"));
    json_int_t rb = json_integer_value(json_object_get(conf, "retry_budget_ms"));
    mp->retry_budget_s = (rb > 0 ? (double)rb : RETRY_BUDGET_MS) / 1000.0;
    *cookie = mp;
    if (!tid || !tid[0] || !tsec || !tsec[0]) {
        snprintf(mp->reason, sizeof(mp->reason),
                 "no Modal credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or "
                 "providers.modal.token_id and token_secret");
        return 0;
    }
    if (!printable(tid) || !printable(tsec)) {
        snprintf(mp->reason, sizeof(mp->reason), "token id/secret not printable");
        return 0;
    }
    if (grpc_chan_init(&mp->ch, D->loop, mp->url, SERVICE, err) < 0) {
        snprintf(mp->reason, sizeof(mp->reason), "%s",
                 err->msg ? err->msg : "bad configuration");
        err_clear(err);
        return 0;
    }
    json_int_t mm = json_integer_value(json_object_get(conf, "max_message_bytes"));
    if (mm > 0)
        mp->ch.max_msg = mm > MODAL_MAX_MSG ? MODAL_MAX_MSG : (size_t)mm;
    grpc_chan_header(&mp->ch, "User-Agent: sbxd/" SBX_VERSION " (libcurl)");
    grpc_chan_header(&mp->ch, "x-modal-client-type: 8");
    grpc_chan_header(&mp->ch, "x-modal-client-version: 1.0.0");
    grpc_chan_header(&mp->ch, "x-modal-libmodal-version: sbxd/" SBX_VERSION);
    mp->token_id = xstrdup(tid);
    mp->token_secret = xstrdup(tsec);
    grpc_chan_set_headers(&mp->ch, auth_headers, mp);
    grpc_chan_set_token(&mp->ch, "AuthTokenGet", auth_token_parse, mp);
    const char *cp = getenv("SBXD_MODAL_CURL_PAUSE");
    mp->curl_pause = cp ? atoi(cp) != 0 : 1;
    mp->ready = 1;
    mp->state_path = state_path_for(conf);
    state_read(mp);
    if (mp->saved || json_object_size(mp->snaps) > 0) {
        /* The provider table is complete only once every provider loaded. */
        ev_timer_set(&mp->adopt_timer, 0., 0.);
        ev_timer_start(D->loop, &mp->adopt_timer);
    }
    log_info("modal: server %s, app %s, image %s; output flow control by %s; state in %s",
             mp->url, mp->app_name, mp->image,
             mp->curl_pause ? "pausing the stream" : "closing and resuming the stream",
             mp->state_path ? mp->state_path : "(not kept)");
    return 0;
}

static void m_unload(void *cookie)
{
    struct mprov *mp = cookie;
    ev_timer_stop(D->loop, &mp->adopt_timer);
    ev_timer_stop(D->loop, &mp->save_timer);
    json_decref(mp->saved);
    json_decref(mp->snaps);
    free(mp->state_path);
    if (mp->ready)
        grpc_chan_deinit(&mp->ch);
    json_decref(mp->apps);
    json_decref(mp->images);
    free(mp->url);
    free(mp->app_name);
    free(mp->environment);
    free(mp->image);
    free(mp->working_dir);
    free(mp->token_id);
    free(mp->token_secret);
    free(mp);
}

static int m_available(void *cookie, const char **reason)
{
    struct mprov *mp = cookie;
    if (mp->ready)
        return 1;
    *reason = mp->reason;
    return 0;
}

static json_t *m_info(void *cookie)
{
    struct mprov *mp = cookie;
    json_t *o = json_pack("{s:s, s:s, s:s}", "server_url", nz(mp->url), "app_name",
                          nz(mp->app_name), "image", nz(mp->image));
    if (mp->environment)
        json_object_set_new(o, "environment", json_string(mp->environment));
    json_object_set_new(o, "authenticated", json_boolean(mp->ready && mp->ch.token));
    if (mp->last_error[0])
        json_object_set_new(o, "last_error", json_string(mp->last_error));
    return o;
}

static const struct cfg_key modal_keys[] = {
    {"server_url", CFG_STR},
    {"token_id", CFG_STR},
    {"token_secret", CFG_STR},
    {"app_name", CFG_STR},
    {"environment", CFG_STR},
    {"image", CFG_STR},
    {"cpu", CFG_ANY},
    {"memory_mb", CFG_INT},
    {"timeout_ms", CFG_INT},
    {"working_dir", CFG_STR},
    {"command_timeout_ms", CFG_INT},
    {"max_message_bytes", CFG_INT}, /* one received gRPC message; default 16 MiB */
    {"retry_budget_ms", CFG_INT},   /* outages: how long streams and waits retry */
    {"state_file", CFG_STR},        /* what survives a restart; "" = nothing */
    {NULL, 0},
};

const struct sbx_provider sbx_provider_modal = {
    .name = "modal",
    .config_keys = modal_keys,
    .shell_commands = 1,
    .default_cwd = NULL,
    .enabled_by_default = 1,
    .load = m_load,
    .unload = m_unload,
    .available = m_available,
    .info = m_info,
    .sb_start = m_sb_start,
    .sb_stop = m_sb_stop,
    .sb_destroy = m_sb_destroy,
    .sb_snapshot = m_sb_snapshot,
    .sb_metadata = m_sb_metadata,
    .sb_instructions = sandbox_shell_instructions,
    .sb_release = m_sb_release,
    .proc_spawn = m_proc_spawn,
    .proc_write = m_proc_write,
    .proc_close_stdin = m_proc_close_stdin,
    .proc_kill = m_proc_kill,
    .proc_resume = m_proc_resume,
    .proc_tool_result = NULL,
    .proc_release = m_proc_release,
    .snapshot_list = m_snapshot_list,
    .snapshot_delete = m_snapshot_delete,
};
