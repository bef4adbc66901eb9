/*
 * modal_stdin.c - a Modal process's stdin: what process.write queued goes
 * out in chunks (TaskExecStdinWrite by byte offset on the router,
 * ContainerExecPutInput by message index otherwise), one call at a time.
 *
 * And stdin of a process that an sbxd restart re-adopted from
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
#include "providers/modal/modal_int.h"
#include "xalloc.h"

#define STDIN_CHUNK (1u * 1024 * 1024)

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
    m->stdin_off += m->stdin_inflight;
    m->stdin_inflight = 0;
    modal_stdin_pump(m);
}

void modal_stdin_pump(struct mproc *m)
{
    if (!m->exec_id || m->stdin_call || m->stdin_broken || m->stdin_recovering ||
        m->reported || !m->ms)
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
    if (m->router && modal_pout_router_gone(m)) {
        free(buf);
        return;
    }
    if (m->router) {
        /* By byte offset: a repeat of what arrived is skipped, so retrying is safe. */
        Modal__TaskCommandRouter__TaskExecStdinWriteRequest rq =
            MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_STDIN_WRITE_REQUEST__INIT;
        rq.task_id = m->rexec_task;
        rq.exec_id = m->exec_id;
        rq.offset = m->stdin_off;
        rq.data = in.message;
        rq.eof = in.eof;
        m->stdin_inflight = in.message.len;
        m->stdin_call = modal_router_unary(m->ms, "TaskExecStdinWrite", &rq.base,
                                           UNARY_TIMEOUT_S, stdin_done, m);
        grpc_call_retry_budget(m->stdin_call, m->ms->mp->retry_budget_s);
        free(buf);
        return;
    }
    in.message_index = ++m->stdin_index;
    m->stdin_call = grpc_unary(&m->ms->mp->ch, "ContainerExecPutInput", &req.base,
                               UNARY_TIMEOUT_S, stdin_done, m);
    /* Keyed by message_index, a repeat is ignored: safe through an outage. */
    grpc_call_retry_budget(m->stdin_call, m->ms->mp->retry_budget_s);
    free(buf);
}

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
