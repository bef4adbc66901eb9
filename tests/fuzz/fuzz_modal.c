/*
 * fuzz_modal.c - Modal's replies as the Modal provider reads them: each
 * record of the input is one protobuf message from Modal's server. Output
 * batches go through modal_pout.c's modal_pout_msg (batch index
 * bookkeeping, file descriptor routing, raw bytes or text into the core's
 * process output, exit marks); an ExecWait reply that says completed goes
 * through modal_pout_wait_done (exit code, finishing); AuthTokenGet's reply
 * goes through modal_util.c's token hook (modal_auth_token_parse: JWT exp);
 * every other reply type the provider decodes is unpacked and freed as it
 * does (protobuf-c's parser on hostile bytes). With bit 7 of the first byte
 * set the process is on the command router: output records are
 * TaskExecStdioRead messages (byte offsets), wait records TaskExecWait
 * replies (code or signal). The router's access reply, SandboxCreateV2's
 * reply and RPCRetryPolicy details are parsed too. Those three handlers and
 * the provider's records come from its internal header (modal_int.h); no
 * call is ever sent and the loop never runs, so the process's timers get a
 * callback that would abort if one ever fired.
 *
 * Input: records [kind][u16 len][message bytes].
 */
#include "fuzz_daemon.h"
#include "providers/modal/modal_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The loop never runs here: a timer that is armed never fires. */
static void timer_never(struct ev_loop *loop, ev_timer *w, int revents)
{
    abort();
}

/* Every response type the provider unpacks, besides the two handled for real. */
static void unpack_other(int kind, const uint8_t *m, size_t n)
{
    ProtobufCMessage *v = NULL;
    switch (kind) {
    case 0:
        v = (ProtobufCMessage *)modal__client__app_get_or_create_response__unpack(NULL, n,
                                                                                  m);
        break;
    case 1:
        v = (ProtobufCMessage *)modal__client__sandbox_get_from_name_response__unpack(
            NULL, n, m);
        break;
    case 2:
        v = (ProtobufCMessage *)modal__client__image_get_or_create_response__unpack(NULL,
                                                                                    n, m);
        break;
    case 3:
        v = (ProtobufCMessage *)modal__client__secret_get_or_create_response__unpack(
            NULL, n, m);
        break;
    case 4:
        v = (ProtobufCMessage *)modal__client__sandbox_create_response__unpack(NULL, n,
                                                                               m);
        break;
    case 5:
        v = (ProtobufCMessage *)modal__client__sandbox_tags_get_response__unpack(NULL, n,
                                                                                 m);
        break;
    case 6:
        v = (ProtobufCMessage *)modal__client__sandbox_snapshot_fs_response__unpack(NULL,
                                                                                    n, m);
        break;
    case 7:
        v = (ProtobufCMessage *)modal__client__sandbox_get_task_id_response__unpack(NULL,
                                                                                    n, m);
        break;
    case 8:
        v = (ProtobufCMessage *)modal__client__container_exec_response__unpack(NULL, n,
                                                                               m);
        break;
    case 9:
        v = (ProtobufCMessage *)modal__client__image_join_streaming_response__unpack(
            NULL, n, m);
        break;
    case 10:
        v = (ProtobufCMessage *)
            modal__client__task_get_command_router_access_response__unpack(NULL, n, m);
        break;
    case 11:
        v = (ProtobufCMessage *)modal__client__sandbox_create_v2_response__unpack(NULL, n,
                                                                                  m);
        break;
    case 12: {
        /* grpc-status-details-bin as it arrives: base64 text. */
        double secs = -1;
        if (grpc_retry_policy_parse((const char *)m, n, &secs) == 0 &&
            !(secs >= 0 && secs <= 3600))
            abort();
        break;
    }
    default: {
        /* AuthTokenGet's reply: the token and its JWT exp. */
        double refresh = 0;
        free(modal_auth_token_parse(m, n, &refresh, NULL));
        break;
    }
    }
    if (v)
        protobuf_c_message_free_unpacked(v, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_daemon_setup();
    static struct mprov mp;
    struct msb ms;
    struct mproc m;
    memset(&ms, 0, sizeof(ms));
    memset(&m, 0, sizeof(m));
    mp.curl_pause = 1;
    ms.mp = &mp;
    struct sandbox *sb = fz_sandbox("modal");
    ms.sb = sb;
    m.p = fz_process(sb);
    m.ms = &ms;
    obuf_init(&m.stdin_q);
    ev_init(&m.kill_timer, timer_never);
    ev_init(&m.grace, timer_never);
    ev_init(&m.report_timer, timer_never);
    ev_init(&m.retry_timer, timer_never);
    m.kill_timer.data = m.grace.data = m.report_timer.data = m.retry_timer.data = &m;
    /* Two stand-ins for the output calls: modal_pout_msg only compares them. */
    static char call_tokens[2];
    m.out[0] = (struct grpc_call *)&call_tokens[0];
    m.out[1] = (struct grpc_call *)&call_tokens[1];
    m.router = size > 0 && (data[0] & 0x80);

    size_t off = 0;
    while (off + 3 <= size && m.p->state == P_RUNNING) {
        uint8_t kind = data[off];
        size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
        off += 3;
        if (len > size - off)
            len = size - off;
        const uint8_t *msg = data + off;
        off += len;
        switch (kind % 4) {
        case 0:
        case 1:
            modal_pout_msg(m.out[kind % 2], msg, len, &m);
            break;
        case 2:
            if (m.router) {
                Modal__TaskCommandRouter__TaskExecWaitResponse *w =
                    modal__task_command_router__task_exec_wait_response__unpack(NULL, len,
                                                                                msg);
                int done =
                    w &&
                    w->exit_status_case !=
                        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS__NOT_SET;
                if (w)
                    modal__task_command_router__task_exec_wait_response__free_unpacked(
                        w, NULL);
                if (done && !m.have_exit) {
                    struct grpc_status st = {
                        .code = GRPC_OK, .message = "", .method = "w"};
                    modal_pout_wait_done(NULL, &st, msg, len, &m);
                }
                break;
            }
            {
                Modal__Client__ContainerExecWaitResponse *r =
                    modal__client__container_exec_wait_response__unpack(NULL, len, msg);
                int completed = r && r->completed;
                if (r)
                    modal__client__container_exec_wait_response__free_unpacked(r, NULL);
                /* Not completed would poll again (a real call): only the end. */
                if (completed && !m.have_exit) {
                    struct grpc_status st = {
                        .code = GRPC_OK, .message = "", .method = "w"};
                    modal_pout_wait_done(NULL, &st, msg, len, &m);
                }
                break;
            }
        default:
            unpack_other(kind / 4 % 14, msg, len);
            break;
        }
    }
    ev_timer_stop(D->loop, &m.kill_timer);
    ev_timer_stop(D->loop, &m.grace);
    ev_timer_stop(D->loop, &m.report_timer);
    ev_timer_stop(D->loop, &m.retry_timer);
    obuf_deinit(&m.stdin_q);
    free(m.exit_error);
    free(m.exec_id);
    m.p->pdata = NULL;
    fz_daemon_reset();
    return 0;
}
