/*
 * modal_stdin.c - stdin of a process that an sbxd restart re-adopted from
 * the state file (issue 20). On the router stdin goes by byte offset, and
 * the offset a restarted sbxd would need is not in the state file: it is
 * written at most once a second, so it may lag what the exec already took,
 * and a write at a lagging offset would be taken for a retry and its new
 * bytes dropped. The router itself knows: TaskExecStdinStatus answers how
 * many bytes the exec has taken and whether its stdin is closed, so the
 * adopted process asks once, before its first write (writes and a close
 * queued meanwhile go out after it). A ContainerExec process keeps the old
 * rule (its message index is not known: -32006).
 */
#include "log.h"
#include "modal_int.h"

static void status_done(struct grpc_call *c, const struct grpc_status *st,
                        const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct mproc *m = privdata;
    m->stdin_call = NULL;
    m->stdin_recovering = 0;
    Modal__TaskCommandRouter__TaskExecStdinStatusResponse *r = modal_reply(
        &modal__task_command_router__task_exec_stdin_status_response__descriptor, st, msg,
        len);
    if (!r) {
        if (st->code == GRPC_UNAUTHENTICATED)
            modal_router_stale(m->ms);
        log_warn("modal: pid %u: TaskExecStdinStatus failed: %s: %s; its stdin is lost",
                 m->p ? m->p->pid : 0, grpc_code_name(st->code), st->message);
        m->stdin_broken = 1;
        return;
    }
    m->stdin_off = r->num_bytes_written;
    m->stdin_inflight = 0;
    if (r->closed) {
        /* Closed before the restart: what was queued meanwhile cannot go. */
        if (m->stdin_q.bytes)
            log_warn("modal: pid %u: stdin was closed before the restart: %zu bytes "
                     "written since are dropped",
                     m->p ? m->p->pid : 0, m->stdin_q.bytes);
        obuf_consume(&m->stdin_q, m->stdin_q.bytes);
        m->stdin_eof = m->stdin_eof_sent = 1; /* a write now: "stdin is closed" */
    }
    log_debug("modal: pid %u: stdin resumes at byte %llu%s", m->p ? m->p->pid : 0,
              (unsigned long long)m->stdin_off, r->closed ? " (closed)" : "");
    modal_reply_free(r);
    modal_stdin_pump(m);
}

void modal_stdin_recover(struct mproc *m)
{
    if (!m->stdin_recovering || m->stdin_call || !m->ms || !m->rexec_task)
        return;
    Modal__TaskCommandRouter__TaskExecStdinStatusRequest rq =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIN_STATUS_REQUEST__INIT;
    rq.task_id = m->rexec_task;
    rq.exec_id = m->exec_id;
    /* Held in stdin_call: nothing else is sent on stdin until it answers. */
    m->stdin_call = modal_router_unary(m->ms, "TaskExecStdinStatus", &rq.base,
                                       UNARY_TIMEOUT_S, status_done, m);
    grpc_call_retry_budget(m->stdin_call, m->ms->mp->retry_budget_s);
}
