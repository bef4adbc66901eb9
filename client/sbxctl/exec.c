/*
 * exec.c - sbxctl exec, run and attach: stream a command's output live,
 * forward stdin, react to Ctrl-C. These use the async API on a libev loop,
 * because they wait on the daemon, on our stdin and on signals at once.
 *
 *   exec:          [connect] -> process.spawn -> [process.write... ->
 *                  process.close_stdin] -> (output..., process.exit) -> process.wait
 *   run:           [connect] -> sandbox.create -> as exec -> sandbox.destroy
 *   attach:        [connect] -> process.attach (replay, then live) -> as exec
 *
 * exec starts with process.spawn, not process.exec, so that the pid is known
 * at once: Ctrl-C kills the remote process (process.kill; the result then
 * says 137) even before it printed anything, and a second Ctrl-C detaches
 * (exit 130, the process may still be ending). run destroys its sandbox on
 * Ctrl-C. With --detach, Ctrl-C detaches instead (exec: the process keeps
 * running; run: the sandbox stays too) and says how to attach again.
 * attach: Ctrl-C detaches (the process keeps running).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxctl.h"

#include "../adapters/libev.h"

#define STDIN_CHUNK (64 * 1024)

struct job {
    struct ev_loop *loop;
    sbx_async *ac; /* NULL once libsbx freed it */
    int is_run;
    int is_attach;         /* attach: pid given, process.attach instead of spawn */
    int detach;            /* --detach: Ctrl-C leaves the process running */
    json_t *acc[2];        /* --json: stdout/stderr collected for the result */
    json_t *create_params; /* run */
    json_t *exec_params;   /* process.exec/spawn params, "sandbox" added later */
    char *sandbox;
    int use_stdin;
    json_int_t pid;     /* -1 until known */
    json_t *early_exit; /* --stdin: process.exit seen before the spawn reply */
    int wait_sent;
    int stdout_nl;       /* nothing written yet, or the last byte was '\n' */
    char err_tail[4096]; /* the end of the streamed stderr, NUL-terminated */
    int status;
    int finished; /* the command's result is in */
    int destroy_sent;
    int done;
    int interrupts;
    int kill_sent;
    ev_io in_w;
    int in_eof;
    ev_signal sigint, sigterm;
    struct ctl_tools *tools; /* --tool NAME=COMMAND handlers, or NULL */
    int want_tty;            /* -t: the process runs on a terminal (tty.c) */
    struct ctl_tty *tty;     /* while it runs */
};

static void start_command(struct job *j);
static void command_finished(struct job *j);
static void collect(struct job *j, int stream, const char *data, size_t len);
static void detach_now(struct job *j);
static void start_stdin(struct job *j);

/* ---- leaving ----------------------------------------------------------------------- */

static void quit(struct job *j)
{
    ctl_tty_restore(j->tty);
    j->done = 1;
    ev_io_stop(j->loop, &j->in_w);
    ev_signal_stop(j->loop, &j->sigint);
    ev_signal_stop(j->loop, &j->sigterm);
    if (j->ac)
        sbx_async_disconnect(j->ac);
    ev_break(j->loop, EVBREAK_ALL);
}

static void data_cleanup(void *data)
{
    struct job *j = data;
    if (!j->done) {
        /* The connection went away under us (ac is still readable here). */
        warnx_("connection to sbxd lost: %s",
               j->ac->c.errstr[0] ? j->ac->c.errstr : "closed");
        j->status = EXIT_RPC;
        j->ac = NULL;
        quit(j);
    }
    j->ac = NULL;
}

/* A call that failed ends the job with 125: the daemon's error, else why,
 * else what libsbx said (a call that could not be sent). */
static void rpc_failed(struct job *j, const sbx_rpc_error *err, const char *why)
{
    if (err)
        print_rpc_error(err);
    else
        warnx_("%s", why ? why : j->ac->c.errstr);
    j->status = EXIT_RPC;
}

/* Both NULL in a reply: the connection is gone (or we are leaving). */
static int lost(struct job *j, json_t *result, const sbx_rpc_error *err)
{
    if (result || err)
        return 0;
    if (!j->done) {
        warnx_("connection to sbxd lost: %s",
               j->ac && j->ac->c.errstr[0] ? j->ac->c.errstr : "closed");
        j->status = EXIT_RPC;
        quit(j);
    }
    return 1;
}

/* A reply the job no longer waits for: the connection is gone (lost), the
 * job is over, or its command already finished. */
static int stale(struct job *j, json_t *result, const sbx_rpc_error *err)
{
    return lost(j, result, err) || j->done || j->finished;
}

/* ---- output ------------------------------------------------------------------------ */

/* All of data to fd: write(2) straight from libsbx's buffer, no stdio copy. */
static void write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            /* A non-blocking stdout (shared with another program): wait. */
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            poll(&pfd, 1, -1);
            continue;
        }
        if (w <= 0)
            return; /* EPIPE and the like: the reader is gone */
        data += w;
        len -= (size_t)w;
    }
}

static void write_out(struct job *j, int stream, const char *data, size_t len)
{
    FILE *f = stream == SBX_STDERR ? stderr : stdout;
    if (len == 0)
        return;
    fflush(f); /* anything printed through stdio first */
    write_all(fileno(f), data, len);
    if (f == stdout) {
        j->stdout_nl = data[len - 1] == '\n';
        return;
    }
    /* Keep the tail of stderr (NULs as spaces) to spot a stack the daemon
     * already printed ("Uncaught ..."). */
    size_t cap = sizeof(j->err_tail) - 1, have = strlen(j->err_tail);
    if (len >= cap) {
        data += len - cap;
        len = cap;
        have = 0;
    } else if (have + len > cap) {
        memmove(j->err_tail, j->err_tail + (have + len - cap), cap - len);
        have = cap - len;
    }
    for (size_t i = 0; i < len; i++)
        j->err_tail[have + i] = data[i] ? data[i] : ' ';
    j->err_tail[have + len] = '\0';
}

/* --json: output goes into the printed result, as process.exec has it. */
static void collect(struct job *j, int stream, const char *data, size_t len)
{
    int i = stream == SBX_STDERR ? 1 : 0;
    json_t *prev = j->acc[i];
    size_t pl = prev ? json_string_length(prev) : 0;
    char *b = ctl_nonnull(malloc(pl + len + 1));
    if (pl)
        memcpy(b, json_string_value(prev), pl);
    memcpy(b + pl, data, len);
    json_decref(prev);
    j->acc[i] = json_stringn_nocheck(b, pl + len);
    free(b);
}

/* Prints what an exec/wait result adds to the streamed output. */
static void print_result(struct job *j, json_t *r)
{
    const char *error = json_string_value(json_object_get(r, "error"));
    json_t *value = json_object_get(r, "result");
    json_t *exc = json_object_get(r, "exception");

    if (error)
        warnx_("%s", error);
    if (value && !json_is_null(value)) {
        if (!j->stdout_nl)
            putchar('\n');
        print_json(value);
        fflush(stdout);
        j->stdout_nl = 1;
    }
    if (exc && !json_is_null(exc)) {
        const char *stack = json_string_value(json_object_get(exc, "stack"));
        const char *name = json_string_value(json_object_get(exc, "name"));
        const char *msg = json_string_value(json_object_get(exc, "message"));
        if (stack && strstr(j->err_tail, stack))
            ; /* the Duktape provider streamed "Uncaught <stack>" already */
        else if (stack)
            fprintf(stderr, "%s\n", stack);
        else if (name || msg)
            fprintf(stderr, "%s%s%s\n", name ? name : "Error", msg ? ": " : "",
                    msg ? msg : "");
        else
            print_json(exc);
        fflush(stderr);
    }
}

/* ---- notifications ----------------------------------------------------------------- */

static void on_process_exit(struct job *j);

static void notify_cb(sbx_async *ac, const char *method, json_t *params, void *privdata)
{
    struct job *j = privdata;
    const char *sb = json_string_value(json_object_get(params, "sandbox"));
    json_t *pidj = json_object_get(params, "pid");
    (void)ac;

    if (j->done)
        return;
    if (strcmp(method, SBX_N_PROGRESS) == 0) {
        print_progress(method, params);
        return;
    }
    if (!j->sandbox || !sb || strcmp(sb, j->sandbox) != 0 || !json_is_integer(pidj))
        return;
    json_int_t pid = json_integer_value(pidj);

    if (strcmp(method, SBX_N_EXIT) == 0) {
        if (j->pid < 0) {
            if (!j->early_exit)
                j->early_exit = json_incref(params);
        } else if (pid == j->pid) {
            on_process_exit(j);
        }
    }
}

/* process.output comes here as bytes (libsbx's fast path), not as JSON. */
static void output_cb(sbx_async *ac, const char *sandbox, json_int_t pid, int stream,
                      uint64_t offset, const char *data, size_t len, void *privdata)
{
    struct job *j = privdata;
    (void)ac;
    (void)offset;
    if (j->done || !j->sandbox || strcmp(sandbox, j->sandbox) != 0)
        return;
    if (j->pid >= 0 && pid != j->pid)
        return;
    if (g.json)
        collect(j, stream, data, len);
    else
        write_out(j, stream, data, len);
}

/* ---- the command ------------------------------------------------------------------- */

static void result_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                         void *privdata)
{
    struct job *j = privdata;
    (void)ac;

    if (stale(j, result, err))
        return;
    if (err) {
        print_rpc_error(err);
        if (!j->interrupts)
            j->status = EXIT_RPC;
    } else {
        if (g.json) {
            json_object_set(result, "stdout", j->acc[0] ? j->acc[0] : json_string(""));
            json_object_set(result, "stderr", j->acc[1] ? j->acc[1] : json_string(""));
            print_json(result);
        } else {
            print_result(j, result);
        }
        if (!(j->is_run && j->interrupts))
            j->status = exit_status(result);
    }
    command_finished(j);
}

static void ignore_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                         void *privdata)
{
    (void)ac;
    (void)result;
    (void)err;
    (void)privdata;
}

static void on_process_exit(struct job *j)
{
    ev_io_stop(j->loop, &j->in_w);
    if (j->wait_sent || j->finished)
        return;
    j->wait_sent = 1;
    /* The exit notification lacks the Duktape result: ask for the record. */
    if (sbx_async_call_new(j->ac, SBX_M_WAIT,
                           json_pack("{s:s, s:I}", "sandbox", j->sandbox, "pid", j->pid),
                           result_reply, j) != SBX_OK) {
        rpc_failed(j, NULL, NULL);
        command_finished(j);
    }
}

static void write_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                        void *privdata)
{
    struct job *j = privdata;
    (void)ac;

    if (stale(j, result, err))
        return;
    /* A failed write means the process is gone or closed its stdin; its exit
     * (or result) still ends the job. */
    if (!err && !j->in_eof && !j->wait_sent)
        ev_io_start(j->loop, &j->in_w);
}

static void stdin_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct job *j = w->data;
    static char buf[STDIN_CHUNK];
    (void)revents;

    ssize_t n = read(0, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    ev_io_stop(loop, w);
    if (!j->ac)
        return;
    if (j->tty && n > 0) {
        int detach;
        n = (ssize_t)ctl_tty_filter(j->tty, buf, (size_t)n, buf, &detach);
        if (detach) {
            detach_now(j);
            return;
        }
        if (n == 0) { /* a held Ctrl-P */
            ev_io_start(loop, w);
            return;
        }
    } else if (j->tty && n == 0) {
        /* The end of a piped input on a terminal: ^D, which a reading
         * program (canonical mode) takes as EOF; its terminal stays. */
        n = 1;
        buf[0] = 0x04;
        j->in_eof = 1;
    }
    json_t *params = json_pack("{s:s, s:I}", "sandbox", j->sandbox, "pid", j->pid);
    if (n > 0) {
        char *b64 = ctl_nonnull(malloc(sbx_base64_encoded_len((size_t)n) + 1));
        sbx_base64_encode(b64, buf, (size_t)n);
        json_object_set_new(params, "data_b64", json_string(b64));
        free(b64);
        sbx_async_call_new(j->ac, SBX_M_WRITE, params, write_reply, j);
    } else {
        if (n < 0)
            warnx_("stdin: %s", strerror(errno));
        j->in_eof = 1;
        sbx_async_call_new(j->ac, SBX_M_CLOSE_STDIN, params, ignore_reply, NULL);
    }
}

static void start_stdin(struct job *j)
{
    if (!j->use_stdin)
        return;
    ev_io_init(&j->in_w, stdin_cb, 0, EV_READ);
    j->in_w.data = j;
    ev_io_start(j->loop, &j->in_w);
}

/* Leaves the process (and, for run, the sandbox) running: exit 130. */
static void detach_now(struct job *j)
{
    ctl_tty_restore(j->tty);
    if (j->kill_sent || j->destroy_sent)
        fprintf(stderr, "sbxctl: detached; the %s was already asked for\n",
                j->destroy_sent ? "sandbox's destruction" : "kill");
    else if (j->pid >= 0)
        fprintf(stderr,
                "sbxctl: detached; process %" JSON_INTEGER_FORMAT
                " keeps running (sbxctl attach %s %" JSON_INTEGER_FORMAT ")\n",
                j->pid, j->sandbox, j->pid);
    else
        fprintf(stderr, "sbxctl: detached\n");
    j->status = EXIT_INTERRUPTED;
    quit(j);
}

static void attach_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                         void *privdata)
{
    struct job *j = privdata;
    (void)ac;

    if (stale(j, result, err))
        return;
    if (err) {
        rpc_failed(j, err, NULL);
        command_finished(j);
        return;
    }
    /* A finished process's replay ends with its process.exit (on_process_exit). */
    if (j->tty)
        ctl_tty_start(j->tty, &j->ac, j->sandbox, j->pid, 1);
    start_stdin(j);
}

static void spawn_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                        void *privdata)
{
    struct job *j = privdata;
    (void)ac;

    if (lost(j, result, err) || j->done)
        return;
    const char *feature =
        err ? json_string_value(json_object_get(err->data, "feature")) : NULL;
    if (err && err->code == SBX_E_UNSUPPORTED && feature && strcmp(feature, "pty") == 0 &&
        j->tty) {
        /* A provider without terminals (an isolate): -t degrades to plain
         * pipes, said once, rather than refusing the command. */
        warnx_("%s; running without a terminal", err->message);
        ctl_tty_free(j->tty);
        j->tty = NULL;
        json_object_del(j->exec_params, "pty");
        if (sbx_async_call(j->ac, SBX_M_SPAWN, j->exec_params, spawn_reply, j) !=
            SBX_OK) {
            rpc_failed(j, NULL, NULL);
            command_finished(j);
        }
        return;
    }
    if (err || !json_is_integer(json_object_get(result, "pid"))) {
        rpc_failed(j, err, "process.spawn returned no pid");
        command_finished(j);
        return;
    }
    j->pid = json_integer_value(json_object_get(result, "pid"));
    if (j->early_exit) {
        json_t *pidj = json_object_get(j->early_exit, "pid");
        if (json_integer_value(pidj) == j->pid) {
            on_process_exit(j);
            return;
        }
    }
    if (j->interrupts && !j->is_run) {
        if (j->detach) {
            detach_now(j);
            return;
        }
        j->kill_sent = 1;
        sbx_async_call_new(j->ac, SBX_M_KILL,
                           json_pack("{s:s, s:I}", "sandbox", j->sandbox, "pid", j->pid),
                           ignore_reply, NULL);
    }
    if (j->tty)
        ctl_tty_start(j->tty, &j->ac, j->sandbox, j->pid, 0);
    start_stdin(j);
}

static void start_command(struct job *j)
{
    int rc;
    if (j->is_attach) {
        rc = sbx_async_call_new(j->ac, SBX_M_ATTACH,
                                json_pack("{s:s, s:I, s:b, s:s}", "sandbox", j->sandbox,
                                          "pid", j->pid, "follow", 1, "output_encoding",
                                          "auto"),
                                attach_reply, j);
    } else {
        json_object_set_new(j->exec_params, "sandbox", json_string(j->sandbox));
        /* Binary output as base64 rather than 6-byte \u00XX escapes (PROTOCOL.md). */
        json_object_set_new(j->exec_params, "output_encoding", json_string("auto"));
        rc = sbx_async_call(j->ac, SBX_M_SPAWN, j->exec_params, spawn_reply, j);
    }
    if (rc != SBX_OK) {
        rpc_failed(j, NULL, NULL);
        quit(j);
    }
}

/* ---- run: create and destroy ------------------------------------------------------- */

static void destroy_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                          void *privdata)
{
    struct job *j = privdata;
    (void)ac;

    if (lost(j, result, err) || j->done)
        return;
    if (err) {
        print_rpc_error(err);
        if (j->status == 0)
            j->status = EXIT_RPC;
    }
    quit(j);
}

static void send_destroy(struct job *j)
{
    j->destroy_sent = 1;
    if (sbx_async_call_new(j->ac, SBX_M_DESTROY, json_pack("{s:s}", "id", j->sandbox),
                           destroy_reply, j) != SBX_OK) {
        warnx_("cannot destroy %s: %s", j->sandbox, j->ac->c.errstr);
        quit(j);
    }
}

static void command_finished(struct job *j)
{
    j->finished = 1;
    ev_io_stop(j->loop, &j->in_w);
    if (j->is_run && j->sandbox && !j->destroy_sent)
        send_destroy(j);
    else if (!j->is_run || !j->destroy_sent)
        quit(j);
}

static void create_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                         void *privdata)
{
    struct job *j = privdata;
    const char *id = json_string_value(json_object_get(result, "id"));
    (void)ac;

    if (lost(j, result, err) || j->done)
        return;
    if (err || !id) {
        rpc_failed(j, err, "sandbox.create returned no id");
        quit(j);
        return;
    }
    j->sandbox = strdup(id);
    if (j->interrupts)
        send_destroy(j);
    else
        start_command(j);
}

/* ---- connection and signals -------------------------------------------------------- */

static void connect_cb(sbx_async *ac, int status)
{
    struct job *j = ac->data;

    if (status != SBX_OK) {
        warnx_("cannot connect to sbxd: %s", ac->c.errstr);
        j->status = EXIT_RPC;
        quit(j);
        return;
    }
    if (!j->is_run) {
        start_command(j);
    } else if (sbx_async_call(ac, SBX_M_CREATE, j->create_params, create_reply, j) !=
               SBX_OK) {
        warnx_("%s", ac->c.errstr);
        j->status = EXIT_RPC;
        quit(j);
    }
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct job *j = w->data;
    (void)loop;
    (void)revents;

    if (++j->interrupts > 1 || !j->ac) {
        /* The second Ctrl-C detaches: whatever was asked goes on without us. */
        if (j->ac && j->sandbox)
            detach_now(j);
        else {
            j->status = EXIT_INTERRUPTED;
            quit(j);
        }
        return;
    }
    if (j->is_attach || (j->detach && (!j->is_run || j->sandbox))) {
        if (j->pid >= 0 || j->is_run)
            detach_now(j);
        return; /* exec --detach: spawn_reply detaches once the pid is known */
    }
    if (j->is_run) {
        j->status = EXIT_INTERRUPTED;
        /* Without an id yet, create_reply destroys it on arrival. */
        if (j->sandbox && !j->destroy_sent)
            send_destroy(j);
        return;
    }
    if (j->pid >= 0 && !j->kill_sent) {
        j->kill_sent = 1;
        fprintf(stderr,
                "sbxctl: killing process %" JSON_INTEGER_FORMAT
                " (Ctrl-C again to detach)\n",
                j->pid);
        sbx_async_call_new(j->ac, SBX_M_KILL,
                           json_pack("{s:s, s:I}", "sandbox", j->sandbox, "pid", j->pid),
                           ignore_reply, NULL);
        return;
    }
    /* No pid yet: spawn_reply kills it. */
}

static int run_job(struct job *j)
{
    j->loop = EV_DEFAULT;
    if (!j->is_attach)
        j->pid = -1;
    j->stdout_nl = 1;
    j->status = EXIT_RPC;
    signal(SIGPIPE, SIG_IGN);

    sbx_async *ac = sbx_async_connect_unix(socket_path());
    if (!ac) {
        warnx_("out of memory");
        goto out;
    }
    if (ac->c.err) {
        warnx_("cannot connect to sbxd: %s", ac->c.errstr);
        sbx_async_free(ac);
        goto out;
    }
    j->ac = ac;
    ac->data = j;
    ac->data_cleanup = data_cleanup;
    sbx_async_set_connect_cb(ac, connect_cb);
    sbx_async_set_notify_cb(ac, notify_cb, j);
    sbx_async_set_output_cb(ac, output_cb, j);
    if (j->tools)
        ctl_tools_attach(j->tools, j->loop, &j->ac);
    if (sbx_libev_attach(j->loop, ac) != SBX_OK) {
        warnx_("cannot attach to the event loop");
        j->done = 1;
        sbx_async_free(ac);
        goto out;
    }
    j->status = 0;
    if (j->want_tty)
        j->tty = ctl_tty_new(j->loop, j->use_stdin);
    ev_io_init(&j->in_w, stdin_cb, 0, EV_READ);
    j->in_w.data = j;
    ev_signal_init(&j->sigint, signal_cb, SIGINT);
    ev_signal_init(&j->sigterm, signal_cb, SIGTERM);
    j->sigint.data = j->sigterm.data = j;
    ev_signal_start(j->loop, &j->sigint);
    ev_signal_start(j->loop, &j->sigterm);

    ev_run(j->loop, 0);

    /* A graceful disconnect may still wait for a reply we no longer need. */
    j->done = 1;
    if (j->ac)
        sbx_async_free(j->ac);
out:
    ctl_tty_free(j->tty);
    fflush(stdout);
    json_decref(j->create_params);
    json_decref(j->exec_params);
    json_decref(j->early_exit);
    json_decref(j->acc[0]);
    json_decref(j->acc[1]);
    free(j->sandbox);
    ctl_tools_free(j->tools);
    return j->status;
}

/* ---- argument parsing -------------------------------------------------------------- */

enum {
    X_ENV = 1,
    X_CWD,
    X_TIMEOUT,
    X_STDIN,
    X_FILE,
    X_PROVIDER,
    X_IMAGE,
    X_OPT,
    X_TOOL,
    X_DETACH,
    X_TTY,
    X_WORKDIR,
    X_RM,
};

/* Docker's letters (issue 19): -i stdin, -t a terminal, -e env, -w workdir,
 * -d detach; the timeout keeps only its long name (-t is the terminal). */
static const struct opt exec_opts[] = {
    {"env", 'e', 1, X_ENV},
    {"cwd", 'C', 1, X_CWD},
    {"workdir", 'w', 1, X_CWD},
    {"timeout", 0, 1, X_TIMEOUT},
    {"stdin", 'i', 0, X_STDIN},
    {"interactive", 0, 0, X_STDIN},
    {"tty", 't', 0, X_TTY},
    {"file", 'f', 1, X_FILE},
    {"tool", 0, 1, X_TOOL},
    {"detach", 'd', 0, X_DETACH},
    {NULL, 0, 0, 0},
};

static const struct opt run_opts[] = {
    {"env", 'e', 1, X_ENV},
    {"cwd", 'C', 1, X_CWD},
    {"workdir", 'w', 1, X_WORKDIR},
    {"timeout", 0, 1, X_TIMEOUT},
    {"stdin", 'i', 0, X_STDIN},
    {"interactive", 0, 0, X_STDIN},
    {"tty", 't', 0, X_TTY},
    {"rm", 0, 0, X_RM},
    {"file", 'f', 1, X_FILE},
    {"provider", 'p', 1, X_PROVIDER},
    {"image", 0, 1, X_IMAGE},
    {"opt", 'o', 1, X_OPT},
    {"tool", 0, 1, X_TOOL},
    {"detach", 'd', 0, X_DETACH},
    {NULL, 0, 0, 0},
};

static int exec_or_run(int argc, char **argv, int is_run)
{
    struct job j;
    struct parser p;
    char **cmd = ctl_nonnull(calloc((size_t)argc + 1, sizeof(*cmd)));
    const char *file = NULL;
    int ncmd = 0, o;

    memset(&j, 0, sizeof(j));
    j.is_run = is_run;
    j.exec_params = json_object();
    j.create_params = json_object();

    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, is_run ? run_opts : exec_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            if (!is_run && !j.sandbox) {
                j.sandbox = strdup(p.arg);
            } else {
                cmd[ncmd++] = (char *)p.arg;
                p.stop = 1; /* the command's own options are its own */
            }
            break;
        case X_ENV:
            arg_env(obj_object(j.exec_params, "env"), p.arg, 0);
            break;
        case X_CWD:
            json_object_set_new(j.exec_params, "cwd", json_string(p.arg));
            break;
        case X_TIMEOUT:
            json_object_set_new(j.exec_params, "timeout_ms",
                                json_integer(arg_int("--timeout", p.arg)));
            break;
        case X_STDIN:
            j.use_stdin = 1;
            break;
        case X_FILE:
            file = p.arg;
            break;
        case X_PROVIDER:
            json_object_set_new(j.create_params, "provider", json_string(p.arg));
            break;
        case X_IMAGE:
            json_object_set_new(j.create_params, "image", json_string(p.arg));
            break;
        case X_OPT:
            arg_opt(obj_object(j.create_params, "options"), p.arg);
            break;
        case X_TOOL: {
            /* NAME registers the tool (run); NAME=COMMAND also answers it here */
            if (!j.tools)
                j.tools = ctl_tools_new();
            const char *name = ctl_tools_add(j.tools, p.arg);
            if (is_run)
                json_array_append_new(obj_array(j.create_params, "tools"),
                                      json_string(name));
            break;
        }
        case X_DETACH:
            j.detach = 1;
            break;
        case X_TTY:
            /* A terminal for the command: process.spawn's "pty" of the
             * local window size; raw mode, resizes and the detach keys in
             * tty.c (issue 18). */
            j.want_tty = 1;
            break;
        case X_WORKDIR: /* run: the sandbox's working directory, as docker run -w */
            json_object_set_new(j.create_params, "working_dir", json_string(p.arg));
            break;
        case X_RM:
            /* run's sandbox is always removed afterwards: --rm is docker's
             * habit, accepted and already true. */
            break;
        }
    }
    if (!is_run && !j.sandbox)
        usage_error("missing sandbox ID");
    if (file && ncmd)
        usage_error("give either --file or a command, not both");
    if (!file && !ncmd)
        usage_error("missing command");
    if (file && j.use_stdin && strcmp(file, "-") == 0)
        usage_error("--file - and --stdin both want standard input");
    json_object_set_new(j.exec_params, "command",
                        file ? file_string(file) : command_json(ncmd, cmd));
    if (j.want_tty)
        json_object_set_new(j.exec_params, "pty", ctl_tty_pty_params());
    free(cmd);
    return run_job(&j);
}

int cmd_exec(int argc, char **argv)
{
    return exec_or_run(argc, argv, 0);
}

int cmd_run(int argc, char **argv)
{
    return exec_or_run(argc, argv, 1);
}

/* ---- attach ------------------------------------------------------------------------ */

static const struct opt attach_opts[] = {
    {"stdin", 'i', 0, X_STDIN},
    {"tty", 't', 0, X_TTY},
    {NULL, 0, 0, 0},
};

int cmd_attach(int argc, char **argv)
{
    struct job j;
    struct parser p;
    const char *pid = NULL;
    int o;

    memset(&j, 0, sizeof(j));
    j.is_attach = 1;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, attach_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            if (!j.sandbox)
                j.sandbox = strdup(p.arg);
            else if (!pid)
                pid = p.arg;
            else
                usage_error("unexpected argument: %s", p.arg);
            break;
        case X_STDIN:
            j.use_stdin = 1;
            break;
        case X_TTY:
            /* the keyboard is the terminal's: it is read (and detaches) */
            j.want_tty = j.use_stdin = 1;
            break;
        }
    }
    if (!j.sandbox || !pid) {
        free(j.sandbox);
        usage_error("missing %s", j.sandbox ? "PID" : "sandbox ID");
    }
    j.pid = arg_int("PID", pid);
    return run_job(&j);
}
