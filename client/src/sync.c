/*
 * sync.c - the blocking API: sbx_connect_unix, sbx_call, sbx_read_notification.
 *
 * The socket stays non-blocking; the blocking is done with poll(2), which
 * gives us timeouts and lets us keep reading while a large request is still
 * being written (the daemon stops reading from a client that does not drain
 * its output, so writing without reading could deadlock).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_private.h"

sbx_ctx *sbx_connect_unix(const char *path, int timeout_ms)
{
    sbx_ctx *c = malloc(sizeof(*c));
    if (!c)
        return NULL;
    if (sbx__ctx_init(c) != SBX_OK) {
        free(c);
        return NULL;
    }
    sbx__ctx_connect_unix(c, path, timeout_ms, 0);
    return c;
}

void sbx_free(sbx_ctx *c)
{
    if (!c)
        return;
    sbx__ctx_deinit(c);
    free(c);
}

void sbx_set_timeout(sbx_ctx *c, int timeout_ms)
{
    c->priv->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void sbx_set_max_frame(sbx_ctx *c, size_t max)
{
    sbx_reader_set_max_frame(c->reader, max);
}

void sbx_set_notify_cb(sbx_ctx *c, sbx_notify_cb cb, void *privdata)
{
    c->priv->notify_cb = cb;
    c->priv->notify_priv = privdata;
}

void sbx_set_tool_cb(sbx_ctx *c, sbx_tool_cb cb, void *privdata)
{
    c->priv->tool_cb = cb;
    c->priv->tool_priv = privdata;
}

size_t sbx_notifications_dropped(const sbx_ctx *c)
{
    return c->priv->dropped;
}

/* ---- dispatch ------------------------------------------------------------------ */

static int answer_tool_call(sbx_ctx *c, json_t *m)
{
    json_t *id = json_object_get(m, "id");
    json_t *params = json_object_get(m, "params");
    const char *tool = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "args");
    json_t *result = NULL;
    char errmsg[SBX_TOOL_ERRMSG_LEN] = "";

    if (!tool)
        return sbx__ctx_append_error(c, id, SBX_E_PARAMS, "tool.call without a name",
                                     json_pack("{s:s}", "param", "name"));

    c->flags |= SBX_IN_CALLBACK;
    int rc = c->priv->tool_cb(c, &result, tool, args, params, errmsg, sizeof(errmsg),
                              c->priv->tool_priv);
    c->flags &= ~SBX_IN_CALLBACK;

    if (rc == SBX_OK)
        return sbx__ctx_append_result(c, id, result);
    json_decref(result);
    errmsg[sizeof(errmsg) - 1] = '\0';
    return sbx__ctx_append_error(c, id, SBX_E_TOOL, errmsg[0] ? errmsg : "tool failed",
                                 json_pack("{s:s}", "tool", tool));
}

static void deliver_notification(sbx_ctx *c, json_t *m)
{
    struct sbx_ctx_priv *p = c->priv;

    if (p->notify_cb) {
        const char *method = json_string_value(json_object_get(m, "method"));
        c->flags |= SBX_IN_CALLBACK;
        p->notify_cb(c, method, json_object_get(m, "params"), p->notify_priv);
        c->flags &= ~SBX_IN_CALLBACK;
        return;
    }
    if (!p->queue)
        p->queue = json_array();
    if (!p->queue || json_array_size(p->queue) >= SBX_NOTIFY_QUEUE_MAX ||
        json_array_append(p->queue, m) < 0)
        p->dropped++;
}

/*
 * Handles one frame (stolen). Returns 1 when it is what the caller waits for
 * (moved to *resp_out or *notif_out), 0 to keep going, SBX_ERR on failure.
 */
static int dispatch(sbx_ctx *c, json_t *m, json_int_t want, json_t **resp_out,
                    json_t **notif_out)
{
    json_t *id;
    int rc = 0;

    switch (sbx__msg_classify(m)) {
    case MSG_RESPONSE:
        id = json_object_get(m, "id");
        if (want > 0 && json_is_integer(id) && json_integer_value(id) == want) {
            *resp_out = m;
            return 1;
        }
        /* An error without id (-32700, -32007) can only be about the one
         * request a sync context has in flight. */
        if (want > 0 && (!id || json_is_null(id)) && json_object_get(m, "error")) {
            *resp_out = m;
            return 1;
        }
        break; /* a late answer to a call that timed out */
    case MSG_NOTIFY:
        if (notif_out) {
            *notif_out = m;
            return 1;
        }
        deliver_notification(c, m);
        break;
    case MSG_REQUEST: {
        const char *method = json_string_value(json_object_get(m, "method"));
        if (c->priv->tool_cb && strcmp(method, SBX_R_TOOL_CALL) == 0)
            rc = answer_tool_call(c, m);
        else
            rc = sbx__ctx_reply_unknown(c, m);
        if (rc != SBX_OK)
            sbx__ctx_fail(c, c->err ? c->err : SBX_ERR_OOM, "cannot answer %s", method);
        break;
    }
    default:
        sbx__ctx_fail(c, SBX_ERR_PROTOCOL, "unexpected message from sbxd");
        rc = SBX_ERR;
        break;
    }
    json_decref(m);
    return rc == SBX_OK ? 0 : SBX_ERR;
}

/* Runs the socket until dispatch() reports what we wait for. */
static int pump(sbx_ctx *c, json_int_t want, json_t **resp_out, json_t **notif_out,
                int timeout_ms)
{
    uint64_t deadline = timeout_ms >= 0 ? sbx__now_ms() + (uint64_t)timeout_ms : 0;

    for (;;) {
        json_t *m;
        for (;;) {
            if (sbx_reader_get_frame(c->reader, &m) != SBX_OK) {
                sbx__ctx_fail_reader(c);
                return SBX_ERR;
            }
            if (!m)
                break;
            int rc = dispatch(c, m, want, resp_out, notif_out);
            if (rc == 1)
                return SBX_OK;
            if (rc < 0)
                return SBX_ERR;
        }
        if (c->flags & SBX_BROKEN)
            return SBX_ERR;

        int wait = -1;
        if (timeout_ms >= 0) {
            uint64_t now = sbx__now_ms();
            wait = now >= deadline ? 0 : (int)(deadline - now);
        }
        struct pollfd pfd = {c->fd, POLLIN | (sbx__ctx_obuf_pending(c) ? POLLOUT : 0), 0};
        int n = poll(&pfd, 1, wait);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            sbx__ctx_fail(c, SBX_ERR_IO, "poll: %s", strerror(errno));
            return SBX_ERR;
        }
        if (n == 0) {
            sbx__ctx_seterr(c, SBX_ERR_TIMEOUT, "timed out");
            return SBX_ERR;
        }
        if ((pfd.revents & POLLOUT) && sbx__ctx_flush(c) < 0)
            return SBX_ERR;
        if ((pfd.revents & (POLLIN | POLLHUP | POLLERR)) && sbx__ctx_read(c) < 0)
            return SBX_ERR;
    }
}

static int check_usable(sbx_ctx *c)
{
    if (c->flags & SBX_BROKEN)
        return SBX_ERR; /* keep the error that broke it */
    if (c->flags & SBX_IN_CALLBACK) {
        sbx__ctx_seterr(c, SBX_ERR_USAGE, "sync call from inside a callback");
        return SBX_ERR;
    }
    if (!(c->flags & SBX_CONNECTED)) {
        sbx__ctx_seterr(c, SBX_ERR_USAGE, "not connected");
        return SBX_ERR;
    }
    sbx__ctx_clear_err(c);
    return SBX_OK;
}

int sbx_call(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out, const char *method,
             json_t *params)
{
    json_t *resp = NULL;

    if (result_out)
        *result_out = NULL;
    if (err_out)
        *err_out = NULL;
    if (check_usable(c) != SBX_OK)
        return SBX_ERR;

    json_int_t id = c->priv->next_id++;
    if (sbx__ctx_append_request(c, id, method, params) != SBX_OK)
        return SBX_ERR;
    if (pump(c, id, &resp, NULL, c->priv->timeout_ms > 0 ? c->priv->timeout_ms : -1) !=
        SBX_OK)
        return SBX_ERR;

    json_t *error = json_object_get(resp, "error");
    if (error) {
        sbx_rpc_error view;
        sbx__rpc_error_view(&view, error);
        sbx__ctx_seterr(c, SBX_ERR_RPC, "%s", view.message);
        if (err_out)
            *err_out = sbx__rpc_error_new(error);
        json_decref(resp);
        return SBX_ERR;
    }
    if (result_out)
        *result_out = json_incref(json_object_get(resp, "result"));
    json_decref(resp);
    sbx__ctx_clear_err(c); /* e.g. a refused nested call from a callback */
    return SBX_OK;
}

int sbx_call_new(sbx_ctx *c, json_t **result_out, sbx_rpc_error **err_out,
                 const char *method, json_t *params)
{
    int rc = sbx_call(c, result_out, err_out, method, params);
    json_decref(params);
    return rc;
}

int sbx_read_notification(sbx_ctx *c, json_t **notification_out, int timeout_ms)
{
    struct sbx_ctx_priv *p = c->priv;

    *notification_out = NULL;
    if (p->queue && json_array_size(p->queue) > 0) {
        *notification_out = json_incref(json_array_get(p->queue, 0));
        json_array_remove(p->queue, 0);
        return SBX_OK;
    }
    if (check_usable(c) != SBX_OK)
        return SBX_ERR;
    return pump(c, 0, NULL, notification_out, timeout_ms < 0 ? -1 : timeout_ms);
}
