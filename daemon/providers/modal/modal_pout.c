/*
 * modal_pout.c - a running Modal process's output and exit: the two output
 * streams (TaskExecStdioRead on the router, ContainerExecGetOutput
 * otherwise), resumed where they broke and paused while the followers
 * cannot keep up; the wait (TaskExecWait / ContainerExecWait); backoff under
 * the retry budget in an outage; and the exit report, always from a fresh
 * loop iteration. modal_proc.c starts the exec and calls down into this
 * file; this file calls nothing of modal_proc.c.
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
#define STDIN_CHUNK (1u * 1024 * 1024)

/* The router numbers stdout 0 and stderr 1 (ContainerExec: 1 and 2); the
 * generated names are longer than a line. */
#define RT_FD_STDOUT ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)0)
#define RT_FD_STDERR ((Modal__TaskCommandRouter__TaskExecStdioFileDescriptor)1)

static void check_finish(struct mproc *m);

int modal_pout_dead_code(int code)
{
    return code == GRPC_NOT_FOUND || code == GRPC_FAILED_PRECONDITION;
}

void modal_pout_stop_calls(struct mproc *m)
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
double modal_pout_retry_after(struct mprov *mp, double *t0, int *fails)
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
        modal_set_str(&m->incomplete_why, why);
    }
}

static void report_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (m->reported)
        return;
    m->reported = 1;
    modal_pout_stop_calls(m);
    struct process *p = m->p;
    int code = m->have_exit ? m->exit_code : -1;
    json_t *rec = json_pack("{s:i}", "exit_code", m->incomplete ? -1 : code);
    if (m->incomplete) {
        /* Never a clean exit when output is missing. */
        char *e = NULL;
        if (m->exit_error)
            e = xstrdup(m->exit_error);
        else
            e = xasprintf(
                "the output could not be read completely (%s); %s", nz(m->incomplete_why),
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
    if (m->exit_signal > 0 && !m->incomplete)
        json_object_set_new(rec, "signal", json_integer(m->exit_signal));
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
        modal_state_dirty(m->ms->mp);
    process_exited(p, rec);
    json_decref(rec);
}

/* Reports from a fresh loop iteration: callers may be deep inside grpc. */
void modal_pout_schedule_report(struct mproc *m)
{
    if (m->reported)
        return;
    ev_timer_set(&m->report_timer, 0., 0.);
    ev_timer_start(D->loop, &m->report_timer);
}

void modal_pout_report_error(struct mproc *m, const char *fmt, ...)
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
    modal_pout_schedule_report(m);
}

/* A router process whose task's router is no longer known (the task ended, or
 * a restart replaced it): reported gone. 1 if so. */
int modal_pout_router_gone(struct mproc *m)
{
    struct msb *ms = m->ms;
    if (ms && ms->rt_mode == RT_ON && ms->router && ms->rt_task && m->rexec_task &&
        strcmp(ms->rt_task, m->rexec_task) == 0)
        return 0;
    if (!m->reported)
        modal_pout_report_error(m, "the Modal sandbox is gone: %s",
                                ms && ms->dead_reason
                                    ? ms->dead_reason
                                    : "its task and command router are gone");
    return 1;
}

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
        modal_pout_schedule_report(m);
        return;
    }
    for (int fd = 1; fd <= 2; fd++) {
        if (m->out_done[fd - 1])
            continue;
        log_debug("modal: pid %u: %s stream silent after the exit; reopening", m->p->pid,
                  fd == 1 ? "stdout" : "stderr");
        grpc_call_cancel(m->out[fd - 1]);
        m->out[fd - 1] = NULL;
        modal_pout_open(m, fd);
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
        modal_pout_schedule_report(m);
        return;
    }
    if (!ev_is_active(&m->grace)) {
        m->last_output = ev_now(D->loop);
        ev_timer_set(&m->grace, TAIL_QUIET_S, 0.);
        ev_timer_start(D->loop, &m->grace);
    }
}

/* After a message: flow control for a follower that cannot keep up. */
static void out_backpressure(struct mproc *m, struct grpc_call *c, int fd)
{
    if (!process_output_blocked(m->p))
        return;
    m->paused = 1;
    if (m->ms->mp->curl_pause) {
        grpc_call_pause(c);
    } else {
        /* Drop the stream; proc_resume reopens it after the last batch (router:
         * byte) we delivered, so nothing is lost and nothing piles up meanwhile. */
        log_debug("modal: pid %u: follower blocked at %llu; closing the %s stream",
                  m->p->pid, (unsigned long long)m->last_batch[fd - 1],
                  fd == 1 ? "stdout" : "stderr");
        grpc_call_cancel(c);
        m->out[fd - 1] = NULL;
        m->reopen[fd - 1] = 1;
    }
}

/* TaskExecStdioRead: raw bytes from the offset we asked for. */
static void router_out_msg(struct mproc *m, struct grpc_call *c, int fd,
                           const uint8_t *msg, size_t len)
{
    Modal__TaskCommandRouter__TaskExecStdioReadResponse *r =
        modal__task_command_router__task_exec_stdio_read_response__unpack(NULL, len, msg);
    if (!r) {
        log_warn("modal: pid %u: undecodable TaskExecStdioRead message", m->p->pid);
        return;
    }
    if (r->data.len)
        process_output(m->p, fd == 1 ? SBX_STREAM_STDOUT : SBX_STREAM_STDERR,
                       r->data.data, r->data.len);
    m->last_batch[fd - 1] += r->data.len;
    modal__task_command_router__task_exec_stdio_read_response__free_unpacked(r, NULL);
    m->out_got[fd - 1] = 1;
    m->out_fails[fd - 1] = 0;
    m->out_fail_t0[fd - 1] = 0;
    m->tail_tries = 0;
    m->last_output = ev_now(D->loop);
    out_backpressure(m, c, fd);
}

void modal_pout_msg(struct grpc_call *c, const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    int fd = m->out[0] == c ? 1 : 2;
    if (m->router) {
        router_out_msg(m, c, fd, msg, len);
        return;
    }
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
    out_backpressure(m, c, fd);
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
    if (m->router && st->code == GRPC_OK && !m->paused)
        m->out_done[fd - 1] = 1; /* a clean end of TaskExecStdioRead is EOF */
    if (m->out_done[fd - 1]) {
        check_finish(m);
        return;
    }
    if (m->router && st->code == GRPC_OK) {
        m->reopen[fd - 1] = 1; /* ended while paused: EOF or not, ask again on resume */
        return;
    }
    if (m->router && st->code == GRPC_UNAUTHENTICATED)
        modal_router_stale(m->ms);
    if (m->router && st->code == GRPC_DEADLINE_EXCEEDED &&
        ev_now(D->loop) - m->out_t0[fd - 1] >= POLL_S) {
        /* Our transfer timeout on a quiet stream: on at once from the same offset. */
        modal_pout_open(m, fd);
        return;
    }
    if (st->code == GRPC_NOT_FOUND) {
        /* The exec (and with it the sandbox) is gone. */
        if (!m->have_exit) {
            m->out_done[fd - 1] = 1;
            modal_job_mark_dead(m->ms, st->message);
            modal_pout_report_error(m, "the Modal sandbox is gone: %s", st->message);
        } else {
            out_incomplete(m, fd, st->message);
        }
        check_finish(m);
        return;
    }
    char why[400];
    snprintf(why, sizeof(why), "%s: %s: %s",
             m->router ? "TaskExecStdioRead" : "ContainerExecGetOutput",
             grpc_code_name(st->code), st->message);
    int again = st->code == GRPC_OK || grpc_code_retryable(st->code) || st->transport ||
                (m->router && st->code == GRPC_UNAUTHENTICATED);
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
            modal_pout_open(m, fd);
        return;
    }
    /* Broken (or ending at once with nothing): again after a backoff, for as
     * long as the budget lasts. */
    double d =
        modal_pout_retry_after(m->ms->mp, &m->out_fail_t0[fd - 1], &m->out_fails[fd - 1]);
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
        modal_pout_open(m, fd);
}

void modal_pout_open(struct mproc *m, int fd)
{
    if (m->router) {
        if (modal_pout_router_gone(m))
            return;
        /* From the byte after the last one delivered: nothing lost or repeated. */
        Modal__TaskCommandRouter__TaskExecStdioReadRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIO_READ_REQUEST__INIT;
        rq.task_id = m->rexec_task;
        rq.exec_id = m->exec_id;
        rq.offset = m->last_batch[fd - 1];
        rq.file_descriptor = fd == 1 ? RT_FD_STDOUT : RT_FD_STDERR;
        log_debug("modal: pid %u: %s stream from byte %llu", m->p->pid,
                  fd == 1 ? "stdout" : "stderr", (unsigned long long)rq.offset);
        m->reopen[fd - 1] = 0;
        m->out_got[fd - 1] = 0;
        m->out_t0[fd - 1] = ev_now(D->loop);
        m->out[fd - 1] =
            modal_router_stream(m->ms, "TaskExecStdioRead", &rq.base,
                                POLL_S + POLL_SLACK_S, modal_pout_msg, out_done_cb, m);
        return;
    }
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
                                 POLL_S + POLL_SLACK_S, modal_pout_msg, out_done_cb, m);
}

static void wait_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct mproc *m = w->data;
    if (!m->reported && m->exec_id && !m->have_exit && m->ms)
        modal_pout_wait_open(m);
}

void modal_pout_wait_done(struct grpc_call *c, const struct grpc_status *st,
                          const uint8_t *msg, size_t len, void *privdata)
{
    struct mproc *m = privdata;
    m->wait_call = NULL;
    if (m->reported || m->have_exit)
        return;
    if (m->router && st->code == GRPC_OK) {
        Modal__TaskCommandRouter__TaskExecWaitResponse *r =
            modal_reply(&modal__task_command_router__task_exec_wait_response__descriptor,
                        st, msg, len);
        int done =
            r &&
            r->exit_status_case !=
                MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS__NOT_SET;
        if (done) {
            m->have_exit = 1;
            if (r->exit_status_case ==
                MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS_SIGNAL) {
                m->exit_signal = r->signal;
                m->exit_code = 128 + r->signal;
            } else {
                m->exit_code = r->code;
            }
        }
        modal_reply_free(r);
        if (done) {
            ev_timer_stop(D->loop, &m->kill_timer);
            check_finish(m);
            return;
        }
        modal_pout_wait_open(m);
        return;
    }
    if (m->router &&
        (st->code == GRPC_DEADLINE_EXCEEDED || st->code == GRPC_UNAUTHENTICATED)) {
        /* TaskExecWait has no server-side timeout: our per-call deadline ends a
         * long wait, which goes on at once (a rejected token: with a new one). */
        if (st->code == GRPC_UNAUTHENTICATED) {
            modal_router_stale(m->ms);
            double d =
                modal_pout_retry_after(m->ms->mp, &m->wait_fail_t0, &m->wait_fails);
            if (d >= 0) {
                ev_timer_set(&m->retry_timer, d, 0.);
                ev_timer_start(D->loop, &m->retry_timer);
                return;
            }
        } else {
            m->wait_fails = 0;
            m->wait_fail_t0 = 0;
            modal_pout_wait_open(m);
            return;
        }
    }
    if (st->code == GRPC_OK) {
        Modal__Client__ContainerExecWaitResponse *r = modal_reply(
            &modal__client__container_exec_wait_response__descriptor, st, msg, len);
        int completed = r && r->completed;
        if (completed) {
            m->have_exit = 1;
            m->exit_code =
                r->_exit_code_case ==
                        MODAL__CLIENT__CONTAINER_EXEC_WAIT_RESPONSE___EXIT_CODE_EXIT_CODE
                    ? r->exit_code
                    : 0;
        }
        modal_reply_free(r);
        if (completed) {
            ev_timer_stop(D->loop, &m->kill_timer);
            check_finish(m);
            return;
        }
        m->wait_fails = 0;
        m->wait_fail_t0 = 0;
        modal_pout_wait_open(m);
        return;
    }
    if (st->code == GRPC_NOT_FOUND) {
        modal_job_mark_dead(m->ms, st->message);
        modal_pout_report_error(m, "the Modal sandbox is gone: %s", st->message);
        return;
    }
    int again = grpc_code_retryable(st->code) || st->transport;
    double d =
        again ? modal_pout_retry_after(m->ms->mp, &m->wait_fail_t0, &m->wait_fails) : -1;
    if (d < 0) {
        /* The process may still run: its exit and the rest of its output are unknown. */
        for (int fd = 1; fd <= 2; fd++)
            if (!m->out_done[fd - 1])
                out_incomplete(m, fd, "the exit could not be awaited");
        modal_pout_report_error(m, "%s failed%s: %s: %s",
                                m->router ? "TaskExecWait" : "ContainerExecWait",
                                again ? " for the whole retry budget" : "",
                                grpc_code_name(st->code), st->message);
        return;
    }
    log_debug("modal: pid %u: ContainerExecWait failed (%s: %s); again in %.2f s",
              m->p->pid, grpc_code_name(st->code), st->message, d);
    ev_timer_set(&m->retry_timer, d, 0.);
    ev_timer_start(D->loop, &m->retry_timer);
}

void modal_pout_wait_open(struct mproc *m)
{
    if (m->router) {
        if (modal_pout_router_gone(m))
            return;
        Modal__TaskCommandRouter__TaskExecWaitRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_REQUEST__INIT;
        rq.task_id = m->rexec_task;
        rq.exec_id = m->exec_id;
        m->wait_call = modal_router_unary(m->ms, "TaskExecWait", &rq.base,
                                          UNARY_TIMEOUT_S, modal_pout_wait_done, m);
        return;
    }
    Modal__Client__ContainerExecWaitRequest req =
        MODAL__CLIENT__CONTAINER_EXEC_WAIT_REQUEST__INIT;
    req.exec_id = m->exec_id;
    req.timeout = (float)POLL_S;
    m->wait_call = grpc_unary(&m->ms->mp->ch, "ContainerExecWait", &req.base,
                              POLL_S + POLL_SLACK_S, modal_pout_wait_done, m);
}

/* The timers of a new process record: the exit report, the grace after the
 * exit, the wait's retry, and each output stream's. */
void modal_pout_init(struct mproc *m)
{
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
}
