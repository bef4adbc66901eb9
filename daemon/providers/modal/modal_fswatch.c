/*
 * modal_fswatch.c - fs.watch on Modal, the way today's SDKs watch (npm modal
 * 0.11.1, SandboxFilesystem.watch): an exec of the filesystem tool with
 *   {"Watch": {path, recursive, filter, timeout_secs}}
 * on the sandbox's router, which prints one JSON line per change,
 * {"event_type": "Create"|"Modify"|"Remove"|"Rename"|"RenameFrom"|
 * "RenameTo"|"Access"|"Unknown", "paths": [...]}, until its stdin is closed
 * (how the SDK stops it) or timeout_secs pass (then it exits 0).
 *
 * One watch (struct mwatch, the core's handle data) goes through:
 *   STAT  a Stat exec of the path first: Docker watches directories only,
 *         so a file is ENOTDIR and a missing path ENOENT, before anything runs
 *   RUN   the Watch exec; fs.watch is answered once Modal started it. Its
 *         stdout is cut into lines (at most MW_BUF; a longer one is
 *         dropped with an overflow), each mapped to fs.event kinds
 *         (modal_fs_parse_watch), queued (coalesced, at most
 *         limits.fs_event_queue, beyond that an overflow) and handed to the
 *         core every MW_FLUSH_S, as Docker's agent does.
 * A Watch exec lives MW_EXEC_S (an sbxd that died cannot close its stdin, so
 * it ends by itself), then the next one starts with an overflow (changes in
 * between are not seen). A Watch that fails (the tool's error, the sandbox
 * gone, a stream broken past its reopens) ends the watch: a last overflow
 * with ended: true. fs.unwatch closes the tool's stdin and forgets it.
 */
#include <string.h>

#include "daemon.h"
#include "core/fs.h"
#include "log.h"
#include "providers/modal/modal_int.h"
#include "xalloc.h"

#define MW_TOOL "/__modal/.bin/modal-sandbox-fs-tools"
#define MW_BUF (64u * 1024) /* one event line; Stat's answer or stderr kept */
#define MW_FLUSH_S 0.05     /* events handed on at most this often */
#define MW_EXEC_S 3600u     /* one Watch exec, then the next */
#define MW_MIN_RUN_S 5.0    /* a Watch that ends sooner is not started again */
#define MW_REOPENS 10       /* a broken stdout stream is reopened this often */
#define MW_FD_STDOUT ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)0)
#define MW_FD_STDERR ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)1)

enum mw_phase { MW_STAT, MW_RUN };
enum mw_step { MW_START, MW_READ, MW_WAIT, MW_ERR };

struct mw_ev {
    char *path;
    const char *kind;
};

struct mwatch {
    struct mwatch *next; /* ms->watches */
    struct msb *ms;
    struct fs_call *fc; /* fs.watch, until it is answered */
    uint64_t handle;
    char *path;
    int recursive;
    enum mw_phase phase;
    enum mw_step step;
    int waiting; /* for the router access */
    char exec_id[40];
    char *task;
    struct grpc_call *call;
    uint64_t off; /* bytes of the stream being read */
    int reopens;
    uint8_t *buf; /* an event line, Stat's answer, or stderr */
    size_t blen;
    int skipping; /* the rest of an over-long line */
    int exit_code;
    double run_t0;
    struct mw_ev *q;
    size_t nq, qmax;
    int dropped;
    ev_timer flush;
};

/* ---- events --------------------------------------------------------------------- */

static void flush_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop, (void)revents;
    struct mwatch *w = t->data;
    struct sandbox *sb = w->ms->sb;
    uint64_t h = w->handle;
    int dropped = w->dropped;
    size_t n = w->nq;
    struct mw_ev *q = w->q;
    w->q = NULL;
    w->nq = 0;
    w->dropped = 0;
    for (size_t i = 0; i < n; i++) {
        fs_event(sb, h, q[i].path, q[i].kind);
        free(q[i].path);
    }
    free(q);
    if (dropped)
        fs_overflow(sb, h, 0);
}

static void queue_event(struct mwatch *w, const char *path, const char *kind)
{
    if (!strcmp(kind, "overflow")) {
        w->dropped = 1;
    } else {
        for (size_t i = 0; i < w->nq; i++)
            if (w->q[i].kind == kind && !strcmp(w->q[i].path, path))
                return; /* coalesced */
        if (w->nq >= w->qmax) {
            w->dropped = 1;
        } else {
            if (!w->q)
                w->q = xcalloc(w->qmax, sizeof(*w->q));
            w->q[w->nq++] = (struct mw_ev){xstrdup(path), kind};
        }
    }
    if (!ev_is_active(&w->flush)) {
        ev_timer_set(&w->flush, MW_FLUSH_S, 0.);
        ev_timer_start(D->loop, &w->flush);
    }
}

static void take_line(struct mwatch *w)
{
    json_t *evs = modal_fs_parse_watch(w->buf, w->blen);
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e) {
        /* map[]'s kinds are static strings: compared by address when coalescing */
        const char *k = json_string_value(json_object_get(e, "kind"));
        static const char *const kinds[] = {"create", "modify", "delete", "rename",
                                            "overflow"};
        for (size_t j = 0; j < 5; j++)
            if (!strcmp(k, kinds[j]))
                queue_event(w, json_string_value(json_object_get(e, "path")), kinds[j]);
    }
    json_decref(evs);
}

static void feed_lines(struct mwatch *w, const uint8_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '\n') {
            if (!w->skipping && w->blen)
                take_line(w);
            w->skipping = 0;
            w->blen = 0;
            continue;
        }
        if (w->skipping)
            continue;
        if (w->blen >= MW_BUF) {
            w->skipping = 1; /* an event we cannot read: the client lists again */
            queue_event(w, w->path, "overflow");
            continue;
        }
        if (!w->buf)
            w->buf = xmalloc(MW_BUF);
        w->buf[w->blen++] = d[i];
    }
}

/* ---- one exec of the tool ------------------------------------------------------- */

static void step(struct mwatch *w);
static void answer(struct mwatch *w, sbx_err_t *err);

static void mw_free(struct mwatch *w)
{
    struct msb *ms = w->ms;
    for (struct mwatch **pp = &ms->watches; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    grpc_call_cancel(w->call);
    ev_timer_stop(D->loop, &w->flush);
    for (size_t i = 0; i < w->nq; i++)
        free(w->q[i].path);
    free(w->q);
    free(w->buf);
    free(w->task);
    free(w->path);
    free(w);
}

/* The watch is over (the tool failed, the sandbox went away): a last
 * overflow with ended, which drops the handle (and frees w through
 * modal_fswatch_release). */
static void end_watch(struct mwatch *w, const char *why)
{
    log_info("modal: sandbox %s: watch %llu of %s ended: %s", w->ms->sb->id,
             (unsigned long long)w->handle, w->path, why);
    if (w->fc) {
        sbx_err_t err = {0};
        modal_plain_err(&err, why);
        answer(w, &err);
        return;
    }
    struct sandbox *sb = w->ms->sb;
    uint64_t h = w->handle;
    flush_cb(D->loop, &w->flush, 0); /* what came before the end goes first */
    fs_overflow(sb, h, 1);
}

/* Answers fs.watch: err NULL, the watch runs. Nothing may touch w after it. */
static void answer(struct mwatch *w, sbx_err_t *err)
{
    struct fs_call *fc = w->fc;
    w->fc = NULL;
    if (err) {
        *fc->hdata = NULL;
        mw_free(w); /* the core drops a handle whose first call failed */
    }
    fs_call_done(fc, err, err ? NULL : json_object());
    if (err)
        err_clear(err);
}

static int rpc_failed(struct mwatch *w, const struct grpc_status *st, const char *what)
{
    if (st->code == GRPC_OK)
        return 0;
    if (st->code == GRPC_UNAUTHENTICATED)
        modal_router_stale(w->ms);
    char why[400];
    snprintf(why, sizeof(why), "%s (modal-sandbox-fs-tools Watch): %s: %s", what,
             grpc_code_name(st->code), st->message);
    if (w->fc) {
        sbx_err_t err = {0};
        modal_grpc_err(w->ms->mp, &err, st, what);
        answer(w, &err);
    } else {
        end_watch(w, why);
    }
    return 1;
}

static char *watch_cmd(struct mwatch *w)
{
    json_t *c = w->phase == MW_STAT
                    ? json_pack("{s:{s:s}}", "Stat", "path", w->path)
                    : json_pack("{s:{s:s, s:b, s:[s,s,s,s,s,s,s], s:i}}", "Watch", "path",
                                w->path, "recursive", w->recursive, "filter", "Create",
                                "Modify", "Remove", "Rename", "RenameFrom", "RenameTo",
                                "Unknown", "timeout_secs", (int)MW_EXEC_S);
    char *s = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    return s;
}

static void started(struct grpc_call *c, const struct grpc_status *st, const uint8_t *msg,
                    size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len;
    struct mwatch *w = privdata;
    w->call = NULL;
    if (rpc_failed(w, st, "TaskExecStart"))
        return;
    if (!w->ms->router || !w->ms->rt_auth) {
        end_watch(w, "the sandbox's command router is not reachable");
        return; /* checked here: step() below must not end w before the answer */
    }
    w->step = MW_READ;
    w->off = 0;
    w->blen = 0;
    w->reopens = 0;
    w->run_t0 = daemon_now();
    step(w);
    if (w->phase == MW_RUN && w->fc)
        answer(w, NULL); /* last: the core may drop the handle right here */
}

static void out_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct mwatch *w = privdata;
    Modal__TaskCommandRouter__TaskExecStdioReadResponse *r =
        modal__task_command_router__task_exec_stdio_read_response__unpack(NULL, len, msg);
    if (!r)
        return;
    w->off += r->data.len;
    if (w->step == MW_READ && w->phase == MW_RUN) {
        feed_lines(w, r->data.data, r->data.len);
    } else {
        size_t take = w->blen < MW_BUF ? MW_BUF - w->blen : 0;
        take = take < r->data.len ? take : r->data.len;
        if (take) {
            if (!w->buf)
                w->buf = xmalloc(MW_BUF);
            memcpy(w->buf + w->blen, r->data.data, take);
            w->blen += take;
        }
    }
    modal__task_command_router__task_exec_stdio_read_response__free_unpacked(r, NULL);
}

/* The exec ended well: Stat's answer is looked at; a Watch that ran its time
 * is started again (with an overflow: what changed in between is not seen). */
static void exec_ok(struct mwatch *w)
{
    if (w->phase == MW_STAT) {
        json_t *st = modal_fs_parse_stat(w->buf, w->blen);
        const char *type = json_string_value(json_object_get(st, "type"));
        /* A symlink: the tool follows it (and says so if it is no directory). */
        int dir = type && (!strcmp(type, "dir") || !strcmp(type, "symlink"));
        json_decref(st);
        if (!dir) {
            sbx_err_t err = {0};
            fs_err(&err, type ? "ENOTDIR" : "EIO", w->path,
                   type ? "only directories can be watched"
                        : "modal-sandbox-fs-tools printed something that is not its "
                          "answer");
            answer(w, &err);
            return;
        }
        w->phase = MW_RUN;
    } else if (daemon_now() - w->run_t0 < MW_MIN_RUN_S) {
        end_watch(w, "modal-sandbox-fs-tools stopped watching");
        return;
    } else {
        queue_event(w, w->path, "overflow");
    }
    w->exec_id[0] = 0;
    w->step = MW_START;
    step(w);
}

static void out_done(struct grpc_call *c, const struct grpc_status *st,
                     const uint8_t *msg, size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len;
    struct mwatch *w = privdata;
    w->call = NULL;
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND &&
        st->code != GRPC_UNAUTHENTICATED && w->reopens++ < MW_REOPENS) {
        step(w); /* reopened at the byte offset reached: nothing lost or repeated */
        return;
    }
    if (rpc_failed(w, st, "TaskExecStdioRead"))
        return;
    if (w->step == MW_READ) {
        w->step = MW_WAIT;
        step(w);
        return;
    }
    /* stderr of a failed run: the tool's error. */
    const char *en;
    char m[256];
    if (modal_fs_parse_error(w->buf, w->blen, &en, m, sizeof(m)) < 0)
        snprintf(m, sizeof(m), "modal-sandbox-fs-tools exited %d", w->exit_code);
    if (w->fc) {
        sbx_err_t err = {0};
        fs_err(&err, en, w->path, m);
        answer(w, &err);
        return;
    }
    end_watch(w, m);
}

static void wait_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct mwatch *w = privdata;
    w->call = NULL;
    if (st->code == GRPC_DEADLINE_EXCEEDED) {
        step(w);
        return;
    }
    if (rpc_failed(w, st, "TaskExecWait"))
        return;
    int code = modal_exec_wait_code(st, msg, len);
    if (code == 0) {
        exec_ok(w);
        return;
    }
    w->exit_code = code;
    w->step = MW_ERR;
    w->off = 0;
    w->blen = 0;
    w->reopens = 0;
    step(w);
}

static void start_exec(struct mwatch *w)
{
    struct msb *ms = w->ms;
    modal_uuid4(w->exec_id);
    modal_set_str(&w->task, ms->task_id);
    char *cmd = watch_cmd(w);
    char *argv[2] = {(char *)MW_TOOL, cmd};
    Modal__TaskCommandRouter__TaskExecStartRequest req =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST__INIT;
    req.task_id = w->task;
    req.exec_id = w->exec_id;
    req.command_args = argv;
    req.n_command_args = 2;
    req._timeout_secs_case =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___TIMEOUT_SECS_TIMEOUT_SECS;
    /* The tool's own timeout_secs ends it first; this is Modal's backstop. */
    req.timeout_secs = MW_EXEC_S + 60;
    req.stdout_config =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDOUT_CONFIG__TASK_EXEC_STDOUT_CONFIG_PIPE;
    req.stderr_config =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDERR_CONFIG__TASK_EXEC_STDERR_CONFIG_PIPE;
    w->call =
        modal_router_unary(ms, "TaskExecStart", &req.base, UNARY_TIMEOUT_S, started, w);
    /* Our exec id makes a retried start run the tool once. */
    grpc_call_retry_budget(w->call, ms->mp->retry_budget_s);
    free(cmd);
}

static void step(struct mwatch *w)
{
    struct msb *ms = w->ms;
    if (!ms->router || !ms->rt_auth) {
        end_watch(w, "the sandbox's command router is not reachable");
        return;
    }
    switch (w->step) {
    case MW_START:
        start_exec(w);
        return;
    case MW_READ:
    case MW_ERR: {
        Modal__TaskCommandRouter__TaskExecStdioReadRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIO_READ_REQUEST__INIT;
        rq.task_id = w->task;
        rq.exec_id = w->exec_id;
        rq.offset = w->off;
        rq.file_descriptor = w->step == MW_READ ? MW_FD_STDOUT : MW_FD_STDERR;
        /* A Watch's stdout is quiet for as long as nothing changes: no
         * transfer timeout but the exec's own lifetime. */
        double t = w->phase == MW_RUN && w->step == MW_READ ? MW_EXEC_S + 120.0
                                                            : POLL_S + POLL_SLACK_S;
        w->call = modal_router_stream(ms, "TaskExecStdioRead", &rq.base, t, out_msg,
                                      out_done, w);
        return;
    }
    case MW_WAIT: {
        Modal__TaskCommandRouter__TaskExecWaitRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_REQUEST__INIT;
        rq.task_id = w->task;
        rq.exec_id = w->exec_id;
        w->call = modal_router_unary(ms, "TaskExecWait", &rq.base, POLL_S, wait_done, w);
        return;
    }
    }
}

/* ---- the provider's side ------------------------------------------------------ */

static void go(struct mwatch *w, const char *failure)
{
    int u = failure ? -1 : modal_router_use_fs(w->ms);
    if (u == 0) {
        w->waiting = 1;
        return;
    }
    if (u < 0) {
        sbx_err_t err = {0};
        modal_plain_err(&err, failure ? failure
                                      : "fs.watch needs Modal's command router, which "
                                        "this sandbox does not offer");
        answer(w, &err);
        return;
    }
    step(w);
}

int modal_fswatch_call(struct msb *ms, struct fs_call *fc, sbx_err_t *err)
{
    const char *p = json_string_value(json_object_get(fc->args, "path"));
    if (!p || !fc->hdata)
        return err_make(err, SBX_E_INTERNAL, "fs.watch without a path or a handle");
    struct mwatch *w = xcalloc(1, sizeof(*w));
    w->ms = ms;
    w->fc = fc;
    w->handle = fc->handle;
    w->path = xstrdup(p);
    w->recursive = json_is_true(json_object_get(fc->args, "recursive"));
    w->qmax = D->cfg.fs_event_queue > 0 ? (size_t)D->cfg.fs_event_queue : 1;
    ev_init(&w->flush, flush_cb);
    w->flush.data = w;
    w->next = ms->watches;
    ms->watches = w;
    *fc->hdata = w;
    go(w, NULL);
    return 0;
}

void modal_fswatch_router_ready(struct msb *ms, const char *failure)
{
    struct mwatch *w = ms->watches, *next;
    for (; w; w = next) {
        next = w->next;
        if (w->waiting) {
            w->waiting = 0;
            go(w, failure);
        }
    }
}

static void eof_done(struct grpc_call *c, const struct grpc_status *st,
                     const uint8_t *msg, size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len, (void)privdata;
    if (st->code != GRPC_OK)
        log_debug("modal: closing a Watch's stdin: %s: %s", grpc_code_name(st->code),
                  st->message);
}

/* Stops w's tool the SDK's way (its stdin closed); frees w. Nobody waits
 * for the EOF, but the shutdown drain d (NULL: none) counts it. */
static void stop(struct mwatch *w, struct mdrain *d)
{
    struct msb *ms = w->ms;
    if (w->phase == MW_RUN && w->exec_id[0] && w->task && ms->router && ms->rt_auth) {
        Modal__TaskCommandRouter__TaskExecStdinWriteRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIN_WRITE_REQUEST__INIT;
        rq.task_id = w->task;
        rq.exec_id = w->exec_id;
        rq.eof = 1;
        /* Retried through router failures for the whole budget (an EOF
         * again does no harm): an EOF lost would leave the Watch running
         * for its MW_EXEC_S. */
        struct grpc_call *c =
            modal_router_unary(ms, "TaskExecStdinWrite", &rq.base, UNARY_TIMEOUT_S,
                               d ? modal_drain_done : eof_done, d);
        grpc_call_retry_budget(c, ms->mp->retry_budget_s);
        modal_drain_count(d, c);
    }
    mw_free(w);
}

void modal_fswatch_release(struct msb *ms, void *hdata)
{
    for (struct mwatch *w = ms->watches; w; w = w->next)
        if (w == hdata) {
            stop(w, NULL);
            return;
        }
}

void modal_fswatch_release_all(struct msb *ms)
{
    while (ms->watches) {
        struct mwatch *w = ms->watches;
        if (w->fc) {
            sbx_err_t err = {0};
            err_make(&err, SBX_E_STATE, "modal: the sandbox went away");
            answer(w, &err);
        } else {
            stop(w, NULL);
        }
    }
}

void modal_fswatch_drain(struct msb *ms, struct mdrain *d)
{
    /* An sbxd that stops cannot unwatch later: each Watch would run its
     * MW_EXEC_S. The core's handles forget w without touching it (it is
     * no longer in ms->watches); one still being answered is left. */
    struct mwatch *w = ms->watches, *next;
    for (; w; w = next) {
        next = w->next;
        if (!w->fc)
            stop(w, d);
    }
}
