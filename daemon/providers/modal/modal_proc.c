/*
 * modal_proc.c - processes of the Modal provider: starting the exec, kill,
 * the provider's process ops and adoption after a restart. The output
 * streams, the wait and the exit report are modal_pout.c's, sending stdin
 * modal_stdin.c's.
 *
 * A process is one exec of a small sh wrapper whose argv carries a
 * per-process tag (so process.kill can really end the remote process group
 * with a second exec that finds it). On the task's command router (the
 * normal case, modal_router.c): TaskExecStart with an exec id sbxd chooses
 * (retried freely: a known id is not run twice) and the env in
 * TaskExecStart.env, two TaskExecStdioRead streams (resumed at the byte after
 * the last one delivered; a clean end is EOF), TaskExecStdinWrite by offset,
 * TaskExecWait (code or signal). The fallback when the router is refused (V1
 * sandboxes only) is what SDKs before 0.7.0 did: ContainerExec, two
 * ContainerExecGetOutput streams (resumed from the last batch index when they
 * break), ContainerExecPutInput by message index and a ContainerExecWait long
 * poll. Either way output streams are paused while the followers can't keep
 * up. The exit is reported once the wait says completed and both streams
 * delivered their last batch (router: their EOF), always from a fresh loop iteration
 * (report_timer): the core may free the process record inside process_exited.
 *
 * Outages: broken streams and waits are retried with backoff for
 * retry_budget_ms, then the exit says output_incomplete; ContainerExec is
 * repeated only when the attempt surely never reached Modal (TaskExecStart
 * always: it is idempotent by its exec id). A call that
 * finds the sandbox dead (NOT_FOUND) marks it dead (modal_job_mark_dead) and, for
 * an exec that never ran, waits for a restart (modal_job_restart).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "providers/modal/modal_ws.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define BACKOFF_FIRST_S 0.2
#define BACKOFF_MAX_S 5.0
/* After the exit, a silent output stream is reopened after TAIL_QUIET_S, TAIL_TRIES
 * times; then the rest of the output is given up. */
#define TAIL_QUIET_S 0.5
#define TAIL_TRIES 16
#define KILL_CONFIRM_S 4.0 /* the core gives up on a timed-out process after 5 s */
#define STDIN_LIMIT (16u * 1024 * 1024)

/* Runs the command as a child of a shell whose argv carries the process's tag
 * ($0 = "sbxd-<tag>"), so that a second exec can find that shell and end its
 * process group or tree (modal_kill.c). Two commands, so no shell execs the
 * last one away. */
static const char WRAPPER[] = "\"$@\"; exit $?";

static void exec_start(struct mproc *m);

/* The router numbers stdout 0 and stderr 1 (ContainerExec: 1 and 2); the
 * generated names are longer than a line. */
#define RT_FD_STDOUT ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)0)
#define RT_FD_STDERR ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)1)

static void kill_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (m->reported || m->have_exit || !m->ms)
        return;
    if (m->kill_sig != SIGKILL && !m->kill_escalated && m->exec_id && m->ms->task_id) {
        /* It ignored the signal: the process must end. */
        m->kill_escalated = 1;
        modal_kill_send(m->ms, m->tag, SIGKILL, NULL);
        ev_timer_set(w, KILL_CONFIRM_S, 0.);
        ev_timer_start(loop, w);
        return;
    }
    log_warn("modal: pid %u: Modal did not confirm the end of the process", m->p->pid);
    m->have_exit = 1;
    m->exit_code = 128 + m->kill_sig;
    modal_set_str(&m->exit_error,
                  "killed, but Modal did not confirm that the process ended");
    m->gone = 1;
    modal_pout_schedule_report(m);
}

static void send_kill(struct mproc *m)
{
    if (!m->ms || !m->ms->task_id)
        return;
    modal_kill_send(m->ms, m->tag, m->kill_sig, NULL);
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
    json_object_foreach(baked, k, v)
        if (!json_object_get(want, k) && k[0] != '-')
            need = 1;
    json_object_foreach(want, k, v) {
        json_t *b = json_object_get(baked, k);
        if (!b || !json_equal(b, v))
            need = 1;
    }
    if (!need)
        return 0;
    *owned = xcalloc(json_object_size(want) + 1, sizeof(char *));
    argv[n++] = (char *)"env";
    json_object_foreach(baked, k, v) {
        if (json_object_get(want, k) || k[0] == '-')
            continue;
        argv[n++] = (char *)"-u";
        argv[n++] = (char *)k;
    }
    json_object_foreach(want, k, v) {
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
        modal_job_restart(ms);
}

void modal_proc_waiters_resume(struct msb *ms, const char *failure)
{
    /* The waiting processes go on (or fail) from their own timers. */
    struct mproc *w = ms->waiters;
    ms->waiters = NULL;
    while (w) {
        struct mproc *m = w;
        w = m->wnext;
        m->wnext = NULL;
        m->waiting = 0;
        if (failure) {
            modal_set_str(&m->exit_error, failure);
            m->have_exit = 1;
            m->exit_code = -1;
            m->gone = 1;
            modal_pout_schedule_report(m);
        } else {
            m->restarted = 1;
            exec_start(m);
        }
    }
}

/* Unsets in front of the command for what the sandbox's secret holds but the
 * process must not see; what it must see goes in TaskExecStart.env. */
static size_t env_unsets(struct msb *ms, json_t *want, char **argv)
{
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(ms->baked_env, k, v) {
        if (json_object_get(want, k) || k[0] == '-')
            continue;
        if (n == 0)
            argv[n++] = (char *)"env";
        argv[n++] = (char *)"-u";
        argv[n++] = (char *)k;
    }
    return n;
}

/* TaskExecStart with our own exec id: retried for the whole budget, since a
 * repeat of a known id is not run again. A new task gets a new id. */
static void router_exec_start(struct mproc *m)
{
    struct msb *ms = m->ms;
    struct process *p = m->p;
    m->router = 1;
    if (!m->rexec_id || !m->rexec_task || strcmp(m->rexec_task, ms->task_id) != 0) {
        char id[40];
        modal_uuid4(id);
        modal_set_str(&m->rexec_id, id);
        modal_set_str(&m->rexec_task, ms->task_id);
    }
    json_t *spec = p->spec;
    json_t *argv_j = json_object_get(spec, "argv");
    const char *shell = json_string_value(json_object_get(spec, "shell"));
    size_t nargs = shell ? 3 : json_array_size(argv_j);
    json_t *env = json_object_get(spec, "env");
    size_t max = 8 + nargs + 2 * json_object_size(ms->baked_env);
    char **argv = xcalloc(max, sizeof(char *));
    size_t n = env_unsets(ms, env, argv);
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
        json_array_foreach(argv_j, i, a)
            argv[n++] = (char *)json_string_value(a);
    }
    size_t ne = json_object_size(env), k = 0;
    Modal__TaskCommandRouter__TaskExecStartRequest__EnvEntry *ents =
        xcalloc(ne ? ne : 1, sizeof(*ents));
    Modal__TaskCommandRouter__TaskExecStartRequest__EnvEntry **eps =
        xcalloc(ne ? ne : 1, sizeof(*eps));
    const char *key;
    json_t *val;
    json_object_foreach(env, key, val) {
        if (!json_is_string(val))
            continue;
        modal__task_command_router__task_exec_start_request__env_entry__init(&ents[k]);
        ents[k].key = (char *)key;
        ents[k].value = (char *)json_string_value(val);
        eps[k] = &ents[k];
        k++;
    }
    Modal__TaskCommandRouter__TaskExecStartRequest req =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST__INIT;
    req.task_id = m->rexec_task;
    req.exec_id = m->rexec_id;
    req.command_args = argv;
    req.n_command_args = n;
    /* DEVNULL is 0: both must be asked for. */
    req.stdout_config =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDOUT_CONFIG__TASK_EXEC_STDOUT_CONFIG_PIPE;
    req.stderr_config =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDERR_CONFIG__TASK_EXEC_STDERR_CONFIG_PIPE;
    json_int_t tmo = json_integer_value(json_object_get(spec, "timeout_ms"));
    if (tmo > 0) {
        req._timeout_secs_case =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___TIMEOUT_SECS_TIMEOUT_SECS;
        req.timeout_secs = (uint32_t)((tmo + 999) / 1000);
    }
    const char *cwd = json_string_value(json_object_get(spec, "cwd"));
    if (cwd) {
        req._workdir_case =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___WORKDIR_WORKDIR;
        req.workdir = (char *)cwd;
    }
    req.env = eps;
    req.n_env = k;
    Modal__Client__PTYInfo pty;
    modal_ws_pty_router(spec, &req, &pty);
    m->exec_call =
        modal_router_unary(ms, "TaskExecStart", &req.base, UNARY_TIMEOUT_S, exec_done, m);
    grpc_call_retry_budget(m->exec_call, ms->mp->retry_budget_s);
    free(ents);
    free(eps);
    free(argv);
}

void modal_proc_router_ready(struct mproc *m, const char *failure)
{
    if (m->reported || !m->ms)
        return;
    if (failure) {
        modal_pout_report_error(m, "%s", failure);
        return;
    }
    if (m->exec_id && m->router) {
        /* An adopted process: follow it on the router. */
        if (modal_pout_router_gone(m))
            return;
        for (int fd = 1; fd <= 2; fd++)
            if (!m->out_done[fd - 1] && !m->out[fd - 1])
                modal_pout_open(m, fd);
        if (!m->have_exit && !m->wait_call)
            modal_pout_wait_open(m);
        modal_stdin_recover(m);
        return;
    }
    exec_start(m);
}

static void exec_start(struct mproc *m)
{
    struct msb *ms = m->ms;
    struct process *p = m->p;
    if (!ms->task_id || ms->dead) {
        wait_for_restart(m);
        return;
    }
    int use = modal_router_use(m);
    if (use == 0)
        return; /* modal_proc_router_ready follows */
    if (use > 0) {
        router_exec_start(m);
        return;
    }
    if (ms->v2) {
        /* V2 sandboxes run commands only on the router. */
        modal_pout_report_error(
            m, "this V2 Modal sandbox has no command router to run commands: %s",
            ms->rt_why ? ms->rt_why : "exec_transport is container_exec");
        return;
    }
    m->router = 0;
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
        json_array_foreach(argv_j, i, a)
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
    Modal__Client__PTYInfo pty;
    modal_ws_pty_ce(spec, &req, &pty);
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
    int started;
    if (m->router) {
        started = st->code == GRPC_OK;
        if (started)
            modal_set_str(&m->exec_id, m->rexec_id);
        if (st->code == GRPC_UNAUTHENTICATED && m->unauth_tries++ < 2) {
            /* A rejected token: the same exec id again with a new one. */
            modal_router_stale(ms);
            exec_start(m);
            return;
        }
    } else {
        Modal__Client__ContainerExecResponse *r = modal_reply(
            &modal__client__container_exec_response__descriptor, st, msg, len);
        if (r && r->exec_id[0])
            modal_set_str(&m->exec_id, r->exec_id);
        started = r && r->exec_id[0];
        modal_reply_free(r);
    }
    if (started) {
        ms->last_retried = m->retried;
        modal_state_dirty(ms->mp);
        log_debug("modal: sandbox %s pid %u is exec %s%s%s", ms->sb->id, m->p->pid,
                  m->exec_id, m->router ? " on the router" : "",
                  m->retried ? " (retried)" : "");
        modal_pout_open(m, 1);
        modal_pout_open(m, 2);
        modal_pout_wait_open(m);
        modal_stdin_pump(m);
        if (m->kill_sig)
            send_kill(m);
        return;
    }
    if (m->kill_sig) {
        m->have_exit = 1;
        m->exit_code = 128 + m->kill_sig;
        modal_pout_schedule_report(m);
        return;
    }
    if (st->code != GRPC_OK && modal_pout_dead_code(st->code) && !m->retried) {
        /* Maybe the sandbox died: look, restart it if so, and try once more. */
        m->retried = 1;
        ms->last_retried = 1;
        log_info("modal: sandbox %s pid %u: %s failed (%s: %s); checking the sandbox",
                 ms->sb->id, m->p->pid, m->router ? "TaskExecStart" : "ContainerExec",
                 grpc_code_name(st->code), st->message);
        if (!ms->sandbox_id || ms->dead) {
            wait_for_restart(m);
            return;
        }
        Modal__Client__SandboxGetTaskIdRequest req =
            MODAL__CLIENT__SANDBOX_GET_TASK_ID_REQUEST__INIT;
        req.sandbox_id = ms->sandbox_id;
        m->check_call = grpc_unary(&ms->mp->ch, modal_rpc(ms, "SandboxGetTaskId"),
                                   &req.base, UNARY_TIMEOUT_S, check_done, m);
        return;
    }
    if (st->code != GRPC_OK && st->unsent &&
        (grpc_code_retryable(st->code) || st->transport)) {
        /* It never reached Modal: starting it again cannot run it twice. */
        double d = modal_pout_retry_after(ms->mp, &m->exec_fail_t0, &m->exec_fails);
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
            modal_kill_send(ms, m->tag, SIGKILL, NULL);
        if (m->router)
            modal_pout_report_error(
                m,
                "Modal TaskExecStart failed for the whole retry budget (%s: "
                "%s); anything it may have started was killed",
                grpc_code_name(st->code), st->message);
        else
            modal_pout_report_error(
                m,
                "Modal ContainerExec failed after the call may have reached "
                "Modal (%s: %s); it was not repeated, so that the command "
                "cannot run twice, and anything it started was killed",
                grpc_code_name(st->code), st->message);
    } else if (st->transport)
        modal_pout_report_error(m, "Modal is unreachable: %s", st->message);
    else
        modal_pout_report_error(
            m, "Modal %s failed: %s: %s%s", m->router ? "TaskExecStart" : "ContainerExec",
            grpc_code_name(st->code), st->code == GRPC_OK ? "no exec id" : st->message,
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
    Modal__Client__SandboxGetTaskIdResponse *r = modal_reply(
        &modal__client__sandbox_get_task_id_response__descriptor, st, msg, len);
    int ended = modal_task_ended(st, r);
    if (!ended &&
        (!r || r->_task_id_case !=
                   MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_ID_TASK_ID)) {
        modal_reply_free(r);
        modal_pout_report_error(
            m, "Modal ContainerExec failed and the sandbox could not be checked: %s: %s",
            grpc_code_name(st->code), st->message);
        return;
    }
    if (ended) {
        char why[512];
        snprintf(why, sizeof(why), "%s",
                 r ? modal_result_text(r->task_result) : st->message);
        modal_reply_free(r);
        modal_job_mark_dead(ms, why);
        wait_for_restart(m);
        return;
    }
    /* Alive: the task may have moved; retry the exec once. */
    modal_set_str(&ms->task_id, r->task_id);
    modal_reply_free(r);
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
    modal_pout_init(m);
    ev_init(&m->exec_timer, exec_timer_cb);
    m->exec_timer.data = m;
    m->next = ms->procs;
    if (ms->procs)
        ms->procs->prev = m;
    ms->procs = m;
    p->pdata = m;
    return m;
}

int modal_proc_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    struct msb *ms = p->sb->pdata;
    if (!ms)
        return err_make(err, SBX_E_STATE, "sandbox %s has no Modal sandbox", p->sb->id);
    exec_start(mproc_new(ms, p, NULL));
    return 0;
}

int modal_proc_write(void *cookie, struct process *p, const void *data, size_t len,
                     sbx_err_t *err)
{
    struct mproc *m = p->pdata;
    if (!m || m->stdin_eof || m->reported)
        return err_make(err, SBX_E_STATE, "stdin of process %u is closed", p->pid);
    if (m->stdin_broken)
        return modal_plain_err(err, m->adopted
                                        ? "stdin of this re-adopted process is lost"
                                        : "stdin of the Modal exec failed earlier");
    if (m->stdin_q.bytes + len > STDIN_LIMIT)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "stdin_buffer", "max", (int)STDIN_LIMIT),
            "stdin buffer of process %u is full", p->pid);
    if (obuf_append(&m->stdin_q, data, len) < 0)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    modal_stdin_pump(m);
    return 0;
}

int modal_proc_close_stdin(void *cookie, struct process *p, sbx_err_t *err)
{
    struct mproc *m = p->pdata;
    if (!m || m->stdin_eof)
        return 0;
    m->stdin_eof = 1;
    modal_stdin_pump(m);
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

int modal_proc_kill(void *cookie, struct process *p, int sig, sbx_err_t *err)
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
    /* Nothing runs remotely yet (waiting for a restart, a check or the router). */
    unwait(m);
    modal_router_unwait(m);
    modal_pout_stop_calls(m);
    m->have_exit = 1;
    m->exit_code = 128 + sig;
    m->reported = 1;
    json_t *rec =
        json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig, "killed", 1);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

void modal_proc_resume(void *cookie, struct process *p)
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
            modal_pout_open(m, i + 1);
}

void modal_proc_release(void *cookie, struct process *p)
{
    struct mproc *m = p->pdata;
    if (!m)
        return;
    struct msb *ms = m->ms;
    /* At shutdown the core frees processes before their sandboxes: a pending
     * state write goes out while every exec is still known. */
    if (ms && D->draining)
        modal_state_flush(ms->mp);
    /* A process dropped while it still runs remotely (the core gave up on it):
     * end it there too, unless the whole sandbox is going away anyway. */
    if (ms && m->exec_id && !m->have_exit && !m->reported && ms->task_id && !ms->dead &&
        p->sb->status == SB_RUNNING && !D->draining)
        modal_kill_send(ms, m->tag, SIGKILL, NULL);
    unwait(m);
    modal_router_unwait(m);
    modal_pout_stop_calls(m);
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
    free(m->rexec_id);
    free(m->rexec_task);
    free(m->exit_error);
    free(m->incomplete_why);
    free(m);
    p->pdata = NULL;
}

/* ---- adoption after an sbxd restart ---------------------------------------------- */

void modal_proc_adopt(struct msb *ms, json_t *pe)
{
    json_int_t pid = json_integer_value(json_object_get(pe, "pid"));
    const char *exec_id = json_string_value(json_object_get(pe, "exec_id")),
               *tag = json_string_value(json_object_get(pe, "tag"));
    if (pid <= 0 || pid > UINT32_MAX || !tag || strlen(tag) >= 40)
        return;
    const char *cmd = json_string_value(json_object_get(pe, "command"));
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
            modal_kill_send(ms, m->tag, SIGKILL, NULL);
        modal_pout_report_error(
            m, "lost: sbxd stopped before Modal confirmed the start of this "
               "command; anything it started was killed");
        return;
    }
    modal_set_str(&m->exec_id, exec_id);
    const char *rtask = json_string_value(json_object_get(pe, "router_task"));
    m->stdin_broken = !rtask;      /* ContainerExec: its next stdin index is not known */
    m->stdin_recovering = !!rtask; /* the router says where it stands (modal_stdin.c) */
    if (rtask) {
        /* On the router: output again from byte 0, once the access is there. */
        m->router = 1;
        modal_set_str(&m->rexec_id, exec_id);
        modal_set_str(&m->rexec_task, rtask);
        if (modal_router_use(m) > 0)
            modal_proc_router_ready(m, NULL);
        else if (!m->rt_waiting)
            modal_pout_report_error(
                m, "lost: the command router of its sandbox is not available");
        return;
    }
    /* Output again from the first batch Modal still has: the replay. */
    modal_pout_open(m, 1);
    modal_pout_open(m, 2);
    modal_pout_wait_open(m);
}
