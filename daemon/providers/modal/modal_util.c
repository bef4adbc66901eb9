/*
 * modal_util.c - the Modal provider's leaf: what every other room of it
 * shares and that calls nothing above grpc.c. Reply decoding and errors
 * (Modal's words reach the user), Modal's auth headers and the auth token
 * hook (grpc.c itself names nothing Modal), ids (UUIDs, V1/V2 shapes, which
 * RPC a sandbox takes), and the two fire-and-forget cleanups
 * (SandboxTerminate, ImageDelete) that the lifecycle and the provider table
 * both send.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* ---- small helpers -------------------------------------------------------- */

void modal_set_str(char **dst, const char *src)
{
    char *n = src ? xstrdup(src) : NULL;
    free(*dst);
    *dst = n;
}

/* A Modal failure as a daemon error: unreachable -> -32002, else -32006. */
int modal_grpc_err(struct mprov *mp, sbx_err_t *err, const struct grpc_status *st,
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

int modal_plain_err(sbx_err_t *err, const char *msg)
{
    return err_make_data(err, SBX_E_PROVIDER,
                         json_pack("{s:s, s:s}", "provider", "modal", "message", msg),
                         "%s", msg);
}

const char *modal_result_text(const Modal__Client__GenericResult *r)
{
    if (r && r->exception && r->exception[0])
        return r->exception;
    switch (r ? (int)r->status : 0) {
    case 2:
        return "failed";
    case 3:
        return "terminated";
    case 4:
        return "timed out";
    case 5:
        return "failed to start";
    case 6:
        return "internal failure";
    case 7:
        return "idle timeout";
    default:
        return "ended";
    }
}

int modal_opt_number(json_t *v, double *out)
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

/* The one place a reply is decoded: every reply site gets the message or
 * NULL, and frees it with modal_reply_free. */
void *modal_reply(const ProtobufCMessageDescriptor *desc, const struct grpc_status *st,
                  const uint8_t *msg, size_t len)
{
    if (!desc || st->code != GRPC_OK)
        return NULL;
    return protobuf_c_message_unpack(desc, NULL, len, msg);
}

void modal_reply_free(void *r)
{
    if (r)
        protobuf_c_message_free_unpacked(r, NULL);
}

int modal_exec_wait_code(const struct grpc_status *st, const uint8_t *msg, size_t len)
{
    Modal__TaskCommandRouter__TaskExecWaitResponse *r = modal_reply(
        &modal__task_command_router__task_exec_wait_response__descriptor, st, msg, len);
    int code = -1;
    if (r && r->exit_status_case ==
                 MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS_CODE)
        code = r->code;
    else if (r &&
             r->exit_status_case ==
                 MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_WAIT_RESPONSE__EXIT_STATUS_SIGNAL)
        code = 128 + r->signal;
    modal_reply_free(r);
    return code;
}

int modal_task_ended(const struct grpc_status *st,
                     const Modal__Client__SandboxGetTaskIdResponse *r)
{
    return st->code == GRPC_NOT_FOUND ||
           (r &&
            r->_task_result_case ==
                MODAL__CLIENT__SANDBOX_GET_TASK_ID_RESPONSE___TASK_RESULT_TASK_RESULT);
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

void modal_auth_headers(struct curl_slist **list, const struct grpc_attempt *a,
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
    /* As npm modal 0.11.1: the host it dials, and how often the server's
     * RPCRetryPolicy has sent it back. */
    if (mp->host)
        add_header(list, "x-modal-host", mp->host);
    snprintf(v, sizeof(v), "%d", a->throttle_attempt);
    add_header(list, "x-throttle-retry-attempt", v);
    if (a->throttle_attempt > 0) {
        snprintf(v, sizeof(v), "%.3f", a->since_first_s);
        add_header(list, "x-throttle-retry-delay", v);
    }
}

/* The host of a server URL, without scheme, port or brackets. */
char *modal_url_host(const char *url)
{
    const char *h = strstr(url, "://");
    h = h ? h + 3 : url;
    size_t n = strcspn(h, "/?#");
    if (n && h[0] == '[') {
        const char *e = memchr(h, ']', n);
        return e ? xstrndup(h + 1, (size_t)(e - h - 1)) : NULL;
    }
    const char *c = memchr(h, ':', n);
    return xstrndup(h, c ? (size_t)(c - h) : n);
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

/* ---- ids and images ---------------------------------------------------------- */

void modal_uuid4(char *out)
{
    unsigned char b[16];
    if (getrandom(b, sizeof(b), GRND_NONBLOCK) != (ssize_t)sizeof(b)) {
        static unsigned long long ctr;
        unsigned long long v = (unsigned long long)time(NULL) ^ (++ctr << 20) ^
                               (unsigned long long)(uintptr_t)out;
        memcpy(b, &v, 8);
        v ^= ctr * 0x9e3779b97f4a7c15ULL;
        memcpy(b + 8, &v, 8);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

static void image_deleted(struct grpc_call *c, const struct grpc_status *st,
                          const uint8_t *msg, size_t len, void *privdata)
{
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND)
        log_warn("modal: ImageDelete failed: %s: %s", grpc_code_name(st->code),
                 st->message);
}

static void terminated_unscheduled(struct grpc_call *c, const struct grpc_status *st,
                                   const uint8_t *msg, size_t len, void *privdata)
{
    if (st->code != GRPC_OK && st->code != GRPC_NOT_FOUND)
        log_warn("modal: SandboxTerminate failed: %s: %s", grpc_code_name(st->code),
                 st->message);
}

void modal_sandbox_terminate(struct mprov *mp, const char *sandbox_id)
{
    if (!mp->ready || !sandbox_id)
        return;
    const char *method =
        modal_v1_id(sandbox_id) ? "SandboxTerminate" : "SandboxTerminateV2";
    Modal__Client__SandboxTerminateRequest req =
        MODAL__CLIENT__SANDBOX_TERMINATE_REQUEST__INIT;
    req.sandbox_id = (char *)sandbox_id;
    grpc_call_retry_budget(grpc_unary(&mp->ch, method, &req.base, UNARY_TIMEOUT_S,
                                      terminated_unscheduled, NULL),
                           mp->retry_budget_s);
}

void modal_image_delete(struct mprov *mp, const char *image_id)
{
    if (!mp->ready || !image_id || !image_id[0])
        return;
    Modal__Client__ImageDeleteRequest req = MODAL__CLIENT__IMAGE_DELETE_REQUEST__INIT;
    req.image_id = (char *)image_id;
    log_info("modal: deleting image %s", image_id);
    grpc_unary(&mp->ch, "ImageDelete", &req.base, UNARY_TIMEOUT_S, image_deleted, NULL);
}

int modal_v1_id(const char *id)
{
    if (!id || strncmp(id, "sb-", 3) != 0 || strlen(id) != 25)
        return 0;
    for (const char *p = id + 3; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9')))
            return 0;
    return 1;
}

const char *modal_rpc(const struct msb *ms, const char *method)
{
    static const char *const twins[][2] = {
        {"SandboxCreate", "SandboxCreateV2"},
        {"SandboxGetFromName", "SandboxGetFromNameV2"},
        {"SandboxGetTaskId", "SandboxGetTaskIdV2"},
        {"SandboxGetTunnels", "SandboxGetTunnelsV2"},
        {"SandboxTagsGet", "SandboxTagsGetV2"},
        {"SandboxTagsSet", "SandboxTagsSetV2"},
        {"SandboxTerminate", "SandboxTerminateV2"},
        {"SandboxWait", "SandboxWaitV2"},
    };
    if (!ms || !ms->v2 || !method)
        return method;
    for (size_t i = 0; i < sizeof(twins) / sizeof(twins[0]); i++)
        if (strcmp(twins[i][0], method) == 0)
            return twins[i][1];
    return method;
}

double modal_jwt_exp(const char *tok)
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
char *modal_auth_token_parse(const uint8_t *msg, size_t len, double *refresh_in_s,
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
    double exp = modal_jwt_exp(tok);
    double life = exp > now ? exp - now : TOKEN_DEFAULT_LIFE;
    if (exp <= 0)
        log_warn("modal: the auth token has no exp claim; treating it as valid for "
                 "%.0f s",
                 TOKEN_DEFAULT_LIFE);
    double early = life / 2 < TOKEN_REFRESH_EARLY ? life / 2 : TOKEN_REFRESH_EARLY;
    *refresh_in_s = life - early;
    return tok;
}

int modal_printable(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 0;
    return 1;
}
