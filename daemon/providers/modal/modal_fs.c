/*
 * modal_fs.c - fs.* on Modal, the way today's SDKs do files (npm modal
 * 0.11.1, src/sandbox_fs.ts): every operation is one exec, on the sandbox's
 * TaskCommandRouter, of the filesystem tool Modal puts in every sandbox,
 * /__modal/.bin/modal-sandbox-fs-tools, with one JSON command as argv[1]:
 *   ReadFile {path}              the file's bytes on stdout
 *   WriteFile {path}             stdin into the file (the SDK's writes end
 *                                with EOF; without it the tool never commits)
 *   ListFiles {path}             a JSON array of entries on stdout
 *   Stat {path}                  one JSON entry on stdout
 *   MakeDirectory {path, parents}
 *   Remove {path, recursive}
 * A failure exits non-zero with {"error_kind","message","detail"} on stderr;
 * the kinds become errno names (-32010). The tool has no rename: fs.rename
 * runs a shell script instead (modal_fsmv.c) through the same steps; its
 * Watch streams events for as long as the exec lives (modal_fswatch.c).
 *
 * One mfs per operation (a write: per handle, alive between its calls). The
 * steps: TaskExecStart (our exec id), [stdin by offset, EOF on commit],
 * stdout to EOF (a read: only the asked window is kept; list/stat: at most
 * MFS_OUT_MAX bytes), TaskExecWait, and on a non-zero exit stderr (at most
 * MFS_ERR_MAX bytes). What the tool prints is untrusted: the parsers below
 * (modal_fs_parse_*) check every field and are fuzzed (tests/fuzz/fuzz_modal_fs.c).
 */
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "log.h"
#include "providers/modal/modal_int.h"
#include "xalloc.h"

#define MFS_TOOL "/__modal/.bin/modal-sandbox-fs-tools"
#define MFS_OUT_MAX (16u * 1024 * 1024) /* list/stat output kept */
#define MFS_ERR_MAX (64u * 1024)        /* stderr kept */
#define MFS_STDIN_PIECE (1u * 1024 * 1024)
/* The tool's exec ends after this (Modal kills it), so a write whose client
 * went away without EOF does not keep its process for the sandbox's life. */
#define MFS_EXEC_TIMEOUT_S 600u
#define MFS_WRITE_TIMEOUT_S 3600u
#define MFS_LINK_HOPS 8 /* symlinks fs.stat follows, then ELOOP */
#define MFS_FD_STDOUT ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)0)
#define MFS_FD_STDERR ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)1)

enum mfs_step { MFS_IDLE, MFS_START, MFS_STDIN, MFS_OUT, MFS_WAIT, MFS_ERR };

struct mfs {
    struct mfs *next, *prev; /* ms->fs_ops */
    struct msb *ms;
    struct fs_call *fc; /* the call in flight, or NULL (an open write between calls) */
    enum fs_op op;
    enum mfs_step step;
    void **hdata; /* a write's: where the core keeps f */
    int waiting;  /* for the router access */
    int started;  /* TaskExecStart answered */
    char exec_id[40];
    char *task;
    char *cmd;
    struct grpc_call *call;
    /* stdin (writes): this call's bytes from fc->data, sent piece by piece */
    uint64_t in_off;
    size_t in_pos;
    int in_eof;
    /* stdout / stderr */
    uint64_t out_off; /* bytes of the current stream so far */
    uint64_t win_off, win_len;
    uint8_t *buf;
    size_t blen;
    int exit_code;
    /* Some calls take two execs, for Docker's semantics where the tool has
     * none of its own: a write without mkdir_parents first stats the parent
     * (the tool always makes parents), mkdir with parents tries without
     * them first (to tell created from existing). */
    enum { PH_MAIN, PH_PARENT, PH_MKDIR_P, PH_MKDIR_STAT, PH_FOLLOW } phase;
    /* PH_FOLLOW: the tool's Stat is lstat; fs.stat follows links itself */
    char *cur;
    int hops;
    /* An archive (format "tar", modal_fstar.c): a read is a handle too, its
     * stdout read from out_off a chunk per call; cnt counts the entries.
     * argv0 tags its script ("sbxd-tar-<exec id>") for modal_kill_send;
     * exited: its TaskExecWait gave the exit (nothing of it runs any more). */
    int tar;
    struct mtar_count cnt;
    char argv0[64];
    int exited;
};

/* -- one operation ------------------------------------------------------------ */

static void step_next(struct mfs *f);
static int advance(struct mfs *f, const char *en);

/* modal_fs_release_all is ending everything: the sandbox goes with it. */
static int releasing;

/* An archive that ends here while its tar may still run (its client left
 * before eof, a call failed, the idle handle expired) is ended in the
 * sandbox, or it would run on to its end or its exec's timeout (an hour): a
 * get's whole tree is killed; a put that never got EOF (an abort sends bad
 * bytes and EOF instead, abandon below) has its tar terminated, so that its
 * script still removes what it extracted. At shutdown (d: the drain counts
 * the killer) every running archive ends so. */
static void end_tar(struct mfs *f, struct mdrain *d)
{
    struct msb *ms = f->ms;
    if (!f->tar || !f->exec_id[0] || f->exited || !ms || releasing || !ms->task_id ||
        ms->dead || (f->op == FS_OP_WRITE && f->in_eof))
        return;
    log_debug("modal: sandbox %s: an archive %s ended before its tar: ending %s",
              ms->sb->id, f->op == FS_OP_READ ? "read" : "write", f->argv0);
    modal_kill_send(ms, f->argv0 + 5, f->op == FS_OP_READ ? SIGKILL : SIGTERM, d);
    f->exited = 1; /* once */
}

static void mfs_free(struct mfs *f)
{
    struct msb *ms = f->ms;
    end_tar(f, NULL);
    if (ms) {
        if (f->prev)
            f->prev->next = f->next;
        else
            ms->fs_ops = f->next;
        if (f->next)
            f->next->prev = f->prev;
    }
    grpc_call_cancel(f->call);
    if (f->hdata)
        *f->hdata = NULL; /* the core's handle forgets f */
    free(f->task);
    free(f->cur);
    free(f->cmd);
    free(f->buf);
    free(f);
}

/* Ends f's call; err NULL: success with res (stolen). An open write between
 * its calls lives on; everything else ends. */
static void finish(struct mfs *f, sbx_err_t *err, json_t *res)
{
    struct fs_call *fc = f->fc;
    f->fc = NULL;
    int keep = fc && f->op == FS_OP_WRITE && fc->more && !err;
    if (fc && f->tar && f->op == FS_OP_READ && !err)
        keep = !json_is_true(json_object_get(res, "eof"));
    if (!keep)
        mfs_free(f);
    if (fc)
        fs_call_done(fc, err, res);
    else
        json_decref(res);
}

static void fail_provider(struct mfs *f, const char *what, const struct grpc_status *st)
{
    sbx_err_t err = {0};
    if (st)
        modal_grpc_err(f->ms->mp, &err, st, what);
    else
        modal_plain_err(&err, what);
    finish(f, &err, NULL);
}

static int rpc_failed(struct mfs *f, const struct grpc_status *st, const char *what)
{
    if (st->code == GRPC_OK)
        return 0;
    if (st->code == GRPC_UNAUTHENTICATED)
        modal_router_stale(f->ms);
    fail_provider(f, what, st);
    return 1;
}

static const char *path_of(struct mfs *f)
{
    return json_string_value(json_object_get(f->fc->args, "path"));
}

static void exec_started(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len;
    struct mfs *f = privdata;
    f->call = NULL;
    if (rpc_failed(f, st, "TaskExecStart (modal-sandbox-fs-tools)"))
        return;
    f->started = 1;
    f->step = f->op == FS_OP_WRITE && f->phase == PH_MAIN ? MFS_STDIN : MFS_OUT;
    step_next(f);
}

static void stdin_done(struct grpc_call *c, const struct grpc_status *st,
                       const uint8_t *msg, size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len;
    struct mfs *f = privdata;
    f->call = NULL;
    if (st->code == GRPC_FAILED_PRECONDITION || st->code == GRPC_ABORTED) {
        /* The tool is done reading (it failed early): its exit says why. */
        f->step = MFS_WAIT;
        step_next(f);
        return;
    }
    if (rpc_failed(f, st, "TaskExecStdinWrite (modal-sandbox-fs-tools)"))
        return;
    step_next(f);
}

static json_t *tar_result(struct mfs *f, int eof)
{
    return json_pack("{s:I, s:b, s:I}", "n", (json_int_t)f->fc->blen, "eof", eof,
                     "entries", (json_int_t)f->cnt.entries);
}

/* An archive's bytes (r, freed here): into the call up to its length, the
 * credit; the stream is closed when it is used up (the rest is asked for
 * again from out_off by the next call), so sbxd holds one chunk. */
static void archive_bytes(struct mfs *f, struct grpc_call *c,
                          Modal__TaskCommandRouter__TaskExecStdioReadResponse *r)
{
    struct fs_call *fc = f->fc;
    size_t n = r->data.len, room = fc->bmax - fc->blen;
    size_t take = n < room ? n : room;
    fs_call_data(fc, r->data.data, take);
    modal_fstar_count(&f->cnt, r->data.data, take);
    f->out_off += take;
    modal__task_command_router__task_exec_stdio_read_response__free_unpacked(r, NULL);
    if (fc->blen < fc->bmax)
        return;
    grpc_call_cancel(c);
    f->call = NULL;
    finish(f, NULL, tar_result(f, 0));
}

static void out_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct mfs *f = privdata;
    if (!f->fc)
        return;
    Modal__TaskCommandRouter__TaskExecStdioReadResponse *r =
        modal__task_command_router__task_exec_stdio_read_response__unpack(NULL, len, msg);
    if (!r)
        return;
    const uint8_t *d = r->data.data;
    size_t n = r->data.len;
    if (f->step == MFS_OUT && f->tar && f->op == FS_OP_READ) {
        archive_bytes(f, c, r);
        return;
    }
    uint64_t at = f->out_off;
    f->out_off += n;
    if (f->step == MFS_OUT && f->op == FS_OP_READ) {
        /* Only the window [win_off, win_off + win_len) is kept. */
        uint64_t lo = at > f->win_off ? at : f->win_off;
        uint64_t hi =
            f->out_off < f->win_off + f->win_len ? f->out_off : f->win_off + f->win_len;
        if (hi > lo)
            fs_call_data(f->fc, d + (lo - at), (size_t)(hi - lo));
    } else {
        size_t max = f->step == MFS_ERR ? MFS_ERR_MAX : MFS_OUT_MAX;
        size_t take = f->blen < max ? max - f->blen : 0;
        if (take > n)
            take = n;
        if (take) {
            f->buf = xrealloc(f->buf, f->blen + take);
            memcpy(f->buf + f->blen, d, take);
            f->blen += take;
        }
    }
    modal__task_command_router__task_exec_stdio_read_response__free_unpacked(r, NULL);
}

static void out_done(struct grpc_call *c, const struct grpc_status *st,
                     const uint8_t *msg, size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len;
    struct mfs *f = privdata;
    f->call = NULL;
    if (f->tar && f->step == MFS_OUT && st->code == GRPC_DEADLINE_EXCEEDED) {
        step_next(f); /* tar is slow: ask again from where the bytes stopped */
        return;
    }
    if (rpc_failed(f, st, "TaskExecStdioRead (modal-sandbox-fs-tools)"))
        return;
    if (f->step == MFS_OUT && f->op != FS_OP_READ && f->blen >= MFS_OUT_MAX) {
        fail_provider(f, "modal-sandbox-fs-tools printed more than sbxd takes", NULL);
        return;
    }
    if (f->step == MFS_OUT) {
        f->step = MFS_WAIT;
        step_next(f);
        return;
    }
    /* stderr of a failed run: the tool's error, or its exit code. */
    const char *en;
    char m[256];
    if ((f->op == FS_OP_RENAME || f->tar ? modal_fs_mv_error : modal_fs_parse_error)(
            f->buf, f->blen, &en, m, sizeof(m)) < 0)
        snprintf(m, sizeof(m), "modal-sandbox-fs-tools exited %d", f->exit_code);
    if (advance(f, en))
        return;
    sbx_err_t err = {0};
    fs_err(&err, en, path_of(f), m);
    finish(f, &err, NULL);
}

static char *command_of(struct fs_call *fc);

/* f's next exec: command cmd (stolen) from its start. */
static void again(struct mfs *f, char *cmd)
{
    free(f->cmd);
    f->cmd = cmd;
    f->exec_id[0] = 0;
    f->started = 0;
    f->out_off = 0;
    f->in_off = 0;
    f->in_pos = 0;
    f->in_eof = 0;
    free(f->buf);
    f->buf = NULL;
    f->blen = 0;
    f->step = MFS_START;
    step_next(f);
}

static char *tool_cmd(const char *op, const char *path, int flag_key_set,
                      const char *flag_key, int flag)
{
    json_t *c = flag_key_set
                    ? json_pack("{s:{s:s, s:b}}", op, "path", path, flag_key, flag)
                    : json_pack("{s:{s:s}}", op, "path", path);
    char *s = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    return s;
}

/* After the exec of a phase that is not the call's last one ended, with en
 * NULL (it succeeded) or the errno name of its failure: 1 when f went on
 * (another exec, or finished), 0 to answer as usual. */
static int advance(struct mfs *f, const char *en)
{
    struct fs_call *fc = f->fc;
    const char *path = path_of(f);
    sbx_err_t err = {0};
    switch (f->phase) {
    case PH_MAIN:
        return 0;
    case PH_PARENT: {
        json_t *st = en ? NULL : modal_fs_parse_stat(f->buf, f->blen);
        const char *type = json_string_value(json_object_get(st, "type"));
        int dir = type && !strcmp(type, "dir");
        json_decref(st);
        if (en || !dir) {
            fs_err(&err, en ? en : "ENOTDIR", path,
                   en ? "the parent directory does not exist (mkdir_parents makes it)"
                      : "the parent is not a directory");
            finish(f, &err, NULL);
            return 1;
        }
        f->phase = PH_MAIN;
        again(f, command_of(fc));
        return 1;
    }
    case PH_MKDIR_P:
        if (!en)
            return 0; /* made by the first try: created */
        if (!strcmp(en, "EEXIST")) {
            f->phase = PH_MKDIR_STAT;
            again(f, tool_cmd("Stat", path, 0, NULL, 0));
            return 1;
        }
        if (!strcmp(en, "ENOENT")) {
            f->phase = PH_MAIN; /* a parent is missing: now with parents */
            again(f, tool_cmd("MakeDirectory", path, 1, "parents", 1));
            return 1;
        }
        return 0;
    case PH_FOLLOW: {
        json_t *st = en ? NULL : modal_fs_parse_stat(f->buf, f->blen);
        const char *type = json_string_value(json_object_get(st, "type"));
        const char *tg = json_string_value(json_object_get(st, "target"));
        if (!type || strcmp(type, "symlink") || !tg || !tg[0]) {
            json_decref(st);
            return 0; /* not a link (or an error): answered as it is */
        }
        if (++f->hops > MFS_LINK_HOPS) {
            json_decref(st);
            fs_err(&err, "ELOOP", path, "Too many levels of symbolic links");
            finish(f, &err, NULL);
            return 1;
        }
        const char *at = f->cur ? f->cur : path;
        char *next;
        if (tg[0] == '/') {
            next = xstrdup(tg);
        } else {
            const char *sl = strrchr(at, '/');
            next = xasprintf("%.*s/%s", (int)(sl ? sl - at : 0), at, tg);
        }
        json_decref(st);
        free(f->cur);
        f->cur = next;
        again(f, tool_cmd("Stat", next, 0, NULL, 0));
        return 1;
    }
    case PH_MKDIR_STAT: {
        json_t *st = en ? NULL : modal_fs_parse_stat(f->buf, f->blen);
        const char *type = json_string_value(json_object_get(st, "type"));
        int dir = type && !strcmp(type, "dir");
        json_decref(st);
        if (dir) {
            finish(f, NULL, json_pack("{s:b}", "created", 0));
            return 1;
        }
        fs_err(&err, "EEXIST", path, "Path already exists and is not a directory");
        finish(f, &err, NULL);
        return 1;
    }
    }
    return 0;
}

static void answer(struct mfs *f)
{
    if (advance(f, NULL))
        return;
    struct fs_call *fc = f->fc;
    json_t *res = NULL;
    if (f->tar) {
        res = f->op == FS_OP_READ
                  ? tar_result(f, 1)
                  : json_pack("{s:I, s:I, s:i}", "size", (json_int_t)f->in_off, "entries",
                              (json_int_t)f->cnt.entries, "skipped", 0);
        finish(f, NULL, res);
        return;
    }
    switch (f->op) {
    case FS_OP_READ: {
        uint64_t end = fc->blen + f->win_off;
        res = json_pack("{s:I, s:I, s:b}", "size", (json_int_t)f->out_off, "n",
                        (json_int_t)fc->blen, "eof", end >= f->out_off);
        break;
    }
    case FS_OP_WRITE:
        res = json_pack("{s:I}", "size", (json_int_t)f->in_off);
        break;
    case FS_OP_LIST:
        res = modal_fs_parse_list(f->buf, f->blen,
                                  json_integer_value(json_object_get(fc->args, "skip")),
                                  json_integer_value(json_object_get(fc->args, "limit")));
        break;
    case FS_OP_STAT:
        res = modal_fs_parse_stat(f->buf, f->blen);
        break;
    case FS_OP_MKDIR:
        res = json_pack("{s:b}", "created", 1);
        break;
    default:
        res = json_object();
        break;
    }
    if (!res) {
        fail_provider(
            f, "modal-sandbox-fs-tools printed something that is not its answer", NULL);
        return;
    }
    finish(f, NULL, res);
}

static void wait_done(struct grpc_call *c, const struct grpc_status *st,
                      const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct mfs *f = privdata;
    f->call = NULL;
    if (st->code == GRPC_DEADLINE_EXCEEDED) {
        step_next(f); /* no server-side timeout: wait again */
        return;
    }
    if (rpc_failed(f, st, "TaskExecWait (modal-sandbox-fs-tools)"))
        return;
    int code = modal_exec_wait_code(st, msg, len);
    f->exited = 1;
    /* GNU tar's 1 on a read: a file changed while it was read (a warning) */
    if (code == 0 || (f->tar && f->op == FS_OP_READ && code == 1)) {
        answer(f);
        return;
    }
    f->exit_code = code;
    f->step = MFS_ERR;
    f->out_off = 0;
    free(f->buf);
    f->buf = NULL;
    f->blen = 0;
    step_next(f);
}

static void start_exec(struct mfs *f)
{
    struct msb *ms = f->ms;
    if (!f->exec_id[0]) {
        modal_uuid4(f->exec_id);
        modal_set_str(&f->task, ms->task_id);
        snprintf(f->argv0, sizeof(f->argv0), "sbxd-tar-%s", f->exec_id);
    }
    char *argv[2] = {(char *)MFS_TOOL, f->cmd};
    Modal__TaskCommandRouter__TaskExecStartRequest req =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST__INIT;
    req.task_id = f->task;
    req.exec_id = f->exec_id;
    req.command_args = argv;
    req.n_command_args = 2;
    char **mv = NULL;
    if (f->op == FS_OP_RENAME || f->tar) {
        /* The tool has no rename nor archives: a shell script from /
         * (modal_fsmv.c, modal_fstar.c). */
        mv = f->tar ? modal_fstar_argv(f->fc, f->argv0, &req.n_command_args)
                    : modal_fs_mv_argv(f->fc, &req.n_command_args);
        req.command_args = mv;
        req._workdir_case =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___WORKDIR_WORKDIR;
        req.workdir = (char *)"/";
    }
    req._timeout_secs_case =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___TIMEOUT_SECS_TIMEOUT_SECS;
    req.timeout_secs = (f->op == FS_OP_WRITE && f->phase == PH_MAIN) || f->tar
                           ? MFS_WRITE_TIMEOUT_S
                           : MFS_EXEC_TIMEOUT_S;
    req.stdout_config =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDOUT_CONFIG__TASK_EXEC_STDOUT_CONFIG_PIPE;
    req.stderr_config =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDERR_CONFIG__TASK_EXEC_STDERR_CONFIG_PIPE;
    f->call = modal_router_unary(ms, "TaskExecStart", &req.base, UNARY_TIMEOUT_S,
                                 exec_started, f);
    modal_fs_mv_argv_free(mv, req.n_command_args);
    /* Our exec id makes a retried start run the tool once. */
    grpc_call_retry_budget(f->call, ms->mp->retry_budget_s);
}

/* Does f's next step for its current call. */
static void step_next(struct mfs *f)
{
    struct msb *ms = f->ms;
    if (!f->fc)
        return;
    if (!ms->router || !ms->rt_auth) {
        fail_provider(f, "the sandbox's command router is not reachable", NULL);
        return;
    }
    switch (f->step) {
    case MFS_IDLE:
    case MFS_START:
        f->step = MFS_START;
        start_exec(f);
        return;
    case MFS_STDIN: {
        struct fs_call *fc = f->fc;
        size_t left = fc->len - f->in_pos;
        int eof = !fc->more && left <= MFS_STDIN_PIECE;
        if (left == 0 && (fc->more || f->in_eof)) {
            if (fc->more) {
                finish(f, NULL, json_pack("{s:I}", "size", (json_int_t)f->in_off));
                return;
            }
            f->step = MFS_OUT;
            step_next(f);
            return;
        }
        size_t n = left < MFS_STDIN_PIECE ? left : MFS_STDIN_PIECE;
        Modal__TaskCommandRouter__TaskExecStdinWriteRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIN_WRITE_REQUEST__INIT;
        rq.task_id = f->task;
        rq.exec_id = f->exec_id;
        rq.offset = f->in_off;
        rq.data.data = (uint8_t *)fc->data + f->in_pos;
        rq.data.len = n;
        rq.eof = eof;
        f->in_pos += n;
        f->in_off += n;
        if (eof)
            f->in_eof = 1;
        f->call = modal_router_unary(ms, "TaskExecStdinWrite", &rq.base, UNARY_TIMEOUT_S,
                                     stdin_done, f);
        /* By offset: a repeat of what arrived is skipped, so a retry is safe. */
        grpc_call_retry_budget(f->call, ms->mp->retry_budget_s);
        return;
    }
    case MFS_OUT:
    case MFS_ERR: {
        Modal__TaskCommandRouter__TaskExecStdioReadRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIO_READ_REQUEST__INIT;
        rq.task_id = f->task;
        rq.exec_id = f->exec_id;
        rq.offset = 0;
        rq.file_descriptor = f->step == MFS_OUT ? MFS_FD_STDOUT : MFS_FD_STDERR;
        if (f->tar && f->op == FS_OP_READ && f->step == MFS_OUT)
            rq.offset = f->out_off; /* an archive's next chunk */
        else
            f->out_off = 0;
        f->call = modal_router_stream(ms, "TaskExecStdioRead", &rq.base,
                                      POLL_S + POLL_SLACK_S, out_msg, out_done, f);
        return;
    }
    case MFS_WAIT: {
        Modal__TaskCommandRouter__TaskExecWaitRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_REQUEST__INIT;
        rq.task_id = f->task;
        rq.exec_id = f->exec_id;
        f->call = modal_router_unary(ms, "TaskExecWait", &rq.base, POLL_S, wait_done, f);
        return;
    }
    }
}

/* The router access is settled: f goes on, or fails with why. */
static void go(struct mfs *f, const char *failure)
{
    if (failure) {
        fail_provider(f, failure, NULL);
        return;
    }
    int u = modal_router_use_fs(f->ms);
    if (u < 0) {
        fail_provider(f,
                      "files need Modal's command router, which this sandbox does not "
                      "offer (exec goes through ContainerExec)",
                      NULL);
        return;
    }
    if (u == 0) {
        f->waiting = 1;
        return;
    }
    step_next(f);
}

void modal_fs_router_ready(struct msb *ms, const char *failure)
{
    modal_fswatch_router_ready(ms, failure);
    struct mfs *f = ms->fs_ops, *next;
    for (; f; f = next) {
        next = f->next;
        if (f->waiting && f->fc) {
            f->waiting = 0;
            go(f, failure);
        }
    }
}

static char *command_of(struct fs_call *fc)
{
    json_t *a = fc->args;
    json_t *path = json_object_get(a, "path");
    json_t *c = NULL;
    if (modal_fstar_is(fc))
        return xstrdup("sbxd-tar"); /* a log's words: argv is modal_fstar.c's */
    switch (fc->op) {
    case FS_OP_READ:
        c = json_pack("{s:{s:O}}", "ReadFile", "path", path);
        break;
    case FS_OP_WRITE:
        c = json_pack("{s:{s:O}}", "WriteFile", "path", path);
        break;
    case FS_OP_LIST:
        c = json_pack("{s:{s:O}}", "ListFiles", "path", path);
        break;
    case FS_OP_STAT:
        c = json_pack("{s:{s:O}}", "Stat", "path", path);
        break;
    case FS_OP_MKDIR:
        c = json_pack("{s:{s:O, s:b}}", "MakeDirectory", "path", path, "parents",
                      json_is_true(json_object_get(a, "parents")));
        break;
    case FS_OP_REMOVE:
        c = json_pack("{s:{s:O, s:b}}", "Remove", "path", path, "recursive",
                      json_is_true(json_object_get(a, "recursive")));
        break;
    case FS_OP_RENAME:
        c = json_pack("{s:{s:O, s:O}}", "sbxd-mv", "path", path, "to",
                      json_object_get(a, "to")); /* a log's words: argv is modal_fsmv.c's
                                                  */
        break;
    default:
        break;
    }
    char *s = c ? json_dumps(c, JSON_COMPACT) : NULL;
    json_decref(c);
    return s;
}

static int unsupported(sbx_err_t *err, const char *feature, const char *why)
{
    return err_make_data(err, SBX_E_UNSUPPORTED,
                         json_pack("{s:s, s:s}", "provider", "modal", "feature", feature),
                         "modal: %s", why);
}

int modal_fs_call(void *cookie, struct fs_call *fc, sbx_err_t *err)
{
    (void)cookie;
    struct msb *ms = fc->sb->pdata;
    if (!ms || !ms->task_id)
        return err_make(err, SBX_E_STATE, "sandbox %s has no Modal task", fc->sb->id);
    json_t *a = fc->args;
    switch (fc->op) {
    case FS_OP_WATCH:
        return modal_fswatch_call(ms, fc, err); /* modal_fswatch.c */
    case FS_OP_RENAME:
        if (!modal_fs_mv_argv_ok(fc))
            return err_make(err, SBX_E_PARAMS, "fs.rename: path and to must be absolute");
        break;
    case FS_OP_LIST:
        if (json_integer_value(json_object_get(a, "depth")) > 1)
            return unsupported(err, "fs.list depth",
                               "Modal's filesystem tool lists one level: depth > 1 is "
                               "not supported");
        break;
    case FS_OP_WRITE:
        if (fc->first && json_is_true(json_object_get(a, "append")))
            return unsupported(err, "fs.write append",
                               "Modal's filesystem tool replaces whole files: append is "
                               "not supported");
        if (fc->first && json_object_get(a, "mode"))
            return unsupported(err, "fs.write mode",
                               "Modal's filesystem tool sets no file mode: mode is not "
                               "supported");
        break;
    default:
        break;
    }
    int tar = modal_fstar_is(fc);
    const char *ap = json_string_value(json_object_get(a, "path"));
    if (tar && fc->first && (!ap || ap[0] != '/'))
        return err_make(err, SBX_E_PARAMS, "format \"tar\": path must be absolute");
    int handle = fc->op == FS_OP_WRITE || (tar && fc->op == FS_OP_READ);
    struct mfs *f = handle && !fc->first ? *fc->hdata : NULL;
    if (handle && !fc->first && !f)
        return err_make(err, SBX_E_INTERNAL, "fs handle without its exec");
    if (!f) {
        f = xcalloc(1, sizeof(*f));
        f->ms = ms;
        f->op = fc->op;
        f->tar = tar;
        f->cmd = command_of(fc);
        const char *p = json_string_value(json_object_get(a, "path"));
        const char *slash = p ? strrchr(p, '/') : NULL;
        if (f->cmd && fc->op == FS_OP_WRITE && !tar &&
            !json_is_true(json_object_get(a, "mkdir_parents")) && slash && slash != p) {
            char *parent = xstrndup(p, (size_t)(slash - p));
            free(f->cmd);
            f->cmd = tool_cmd("Stat", parent, 0, NULL, 0);
            free(parent);
            f->phase = PH_PARENT;
        } else if (f->cmd && fc->op == FS_OP_STAT &&
                   !json_is_false(json_object_get(a, "follow"))) {
            f->phase = PH_FOLLOW;
        } else if (f->cmd && fc->op == FS_OP_MKDIR &&
                   json_is_true(json_object_get(a, "parents"))) {
            free(f->cmd);
            f->cmd = tool_cmd("MakeDirectory", p, 1, "parents", 0);
            f->phase = PH_MKDIR_P;
        }
        if (!f->cmd) {
            free(f);
            return err_make(err, SBX_E_INTERNAL, "modal: no tool command for this path");
        }
        f->next = ms->fs_ops;
        if (ms->fs_ops)
            ms->fs_ops->prev = f;
        ms->fs_ops = f;
        if (fc->hdata) {
            *fc->hdata = f;
            f->hdata = fc->hdata;
        }
    }
    f->fc = fc;
    f->in_pos = 0;
    if (tar && fc->op == FS_OP_WRITE)
        modal_fstar_count(&f->cnt, fc->data, fc->len);
    if (fc->op == FS_OP_READ && !tar) {
        f->win_off = (uint64_t)json_integer_value(json_object_get(a, "offset"));
        f->win_len = (uint64_t)json_integer_value(json_object_get(a, "length"));
    }
    if (f->started) {
        step_next(f); /* a write's next chunk */
        return 0;
    }
    go(f, NULL);
    return 0;
}

static void abandon_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata)
{
    (void)c, (void)msg, (void)len;
    struct mfs *f = privdata;
    f->call = NULL;
    if (st->code != GRPC_OK)
        log_debug("modal: an aborted archive's stdin: %s", st->message);
    mfs_free(f);
}

/* An archive write dropped between its calls: its tar gets bytes it fails
 * on, and EOF, so the script ends and removes its temporary directory
 * instead of waiting for the rest until its exec's timeout. f is freed when
 * the write is answered (or with the sandbox). */
static void abandon(struct mfs *f)
{
    if (f->hdata)
        *f->hdata = NULL;
    f->hdata = NULL;
    size_t n;
    const uint8_t *bad = modal_fstar_poison(&n);
    Modal__TaskCommandRouter__TaskExecStdinWriteRequest rq =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIN_WRITE_REQUEST__INIT;
    rq.task_id = f->task;
    rq.exec_id = f->exec_id;
    rq.offset = f->in_off;
    rq.data.data = (uint8_t *)bad;
    rq.data.len = n;
    rq.eof = 1;
    f->in_eof = 1;
    if (!f->ms->router || !f->ms->rt_auth) {
        mfs_free(f);
        return;
    }
    f->call = modal_router_unary(f->ms, "TaskExecStdinWrite", &rq.base, UNARY_TIMEOUT_S,
                                 abandon_done, f);
}

void modal_fs_release(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata)
{
    (void)cookie;
    (void)handle;
    struct msb *ms = sb->pdata;
    struct mfs *f = hdata;
    if (!ms || !f)
        return;
    for (struct mfs *x = ms->fs_ops; x; x = x->next)
        if (x == f) {
            /* An aborted write: no EOF goes to the tool, so it never puts a
             * half file in place (the SDK's rule for a broken source). An
             * archive's tar is made to fail, so its script removes what it
             * extracted. */
            if (!f->fc && f->tar && f->op == FS_OP_WRITE && f->started && !f->in_eof)
                abandon(f);
            else if (!f->fc)
                mfs_free(f);
            return;
        }
    modal_fswatch_release(ms, hdata); /* an fs.unwatch: hdata may be a watch */
}

void modal_fs_release_all(struct msb *ms, const char *why)
{
    modal_fswatch_release_all(ms);
    releasing = 1;
    while (ms->fs_ops) {
        struct mfs *f = ms->fs_ops;
        if (f->fc) {
            sbx_err_t err = {0};
            err_make(&err, SBX_E_STATE, "modal: %s", why);
            finish(f, &err, NULL);
        } else {
            if (f->prev)
                f->prev->next = f->next;
            else
                ms->fs_ops = f->next;
            if (f->next)
                f->next->prev = f->prev;
            f->ms = NULL;
            mfs_free(f);
        }
    }
    releasing = 0;
}

void modal_fs_drain(struct msb *ms, struct mdrain *d)
{
    modal_fswatch_drain(ms, d);
    for (struct mfs *f = ms->fs_ops; f; f = f->next)
        end_tar(f, d);
}
