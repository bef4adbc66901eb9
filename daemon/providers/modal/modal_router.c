/*
 * modal_router.c - the link to Modal's TaskCommandRouter.
 *
 * Today's SDKs (npm modal >= 0.7.0, Python >= 1.4.3) run exec, stdio, stdin,
 * wait and filesystem snapshots on a second gRPC service on the sandbox's
 * worker. ModalClient/TaskGetCommandRouterAccess{task_id} gives its URL (https
 * only) and a JWT; every router call carries just "authorization: Bearer
 * <jwt>". Here each sandbox (msb) keeps the access of its current task: it is
 * fetched when a process first needs it, fetched again ROUTER_EARLY_S before
 * the JWT expires while the sandbox has processes (and at once when the router
 * rejects it), and forgotten when the task changes. The calls themselves go on
 * one channel per router URL (one TLS HTTP/2 connection per worker, shared by
 * its tasks), through curlev like the control plane. A refusal of the access
 * (FAILED_PRECONDITION: the router is not enabled for the task, or
 * UNIMPLEMENTED) turns the sandbox to ContainerExec, and sandbox.get says so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "xalloc.h"

#define ROUTER_SERVICE "modal.task_command_router.TaskCommandRouter"
#define ROUTER_EARLY_S 60.0    /* fetch a new JWT this long before it expires */
#define ROUTER_MIN_LEFT_S 10.0 /* a JWT closer to its end than this is not used */
#define ROUTER_DEFAULT_LIFE_S 600.0

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The channel for url, made on first use. NULL with err for a bad URL. */
static struct mrouter *router_for(struct mprov *mp, const char *url, sbx_err_t *err)
{
    for (struct mrouter *r = mp->routers; r; r = r->next)
        if (strcmp(r->url, url) == 0)
            return r;
    if (strncasecmp(url, "https://", 8) != 0) {
        err_make(err, SBX_E_PROVIDER, "the command router URL %s is not https", url);
        return NULL;
    }
    struct mrouter *r = xcalloc(1, sizeof(*r));
    if (grpc_chan_init(&r->ch, D->loop, url, ROUTER_SERVICE, err) < 0) {
        free(r);
        return NULL;
    }
    r->url = xstrdup(url);
    grpc_chan_set_ca(&r->ch, mp->ca_file);
    grpc_chan_header(&r->ch, "User-Agent: sbxd/" SBX_VERSION " (libcurl)");
    r->ch.max_msg = mp->ch.max_msg;
    r->next = mp->routers;
    mp->routers = r;
    log_info("modal: command router %s", url);
    return r;
}

void modal_router_unload(struct mprov *mp)
{
    while (mp->routers) {
        struct mrouter *r = mp->routers;
        mp->routers = r->next;
        grpc_chan_deinit(&r->ch);
        free(r->url);
        free(r);
    }
}

static void access_fetch(struct msb *ms);

/* A token closer to its end than this is fetched anew before use: at most
 * ROUTER_MIN_LEFT_S, a quarter of its life for short-lived ones (else a fresh
 * short token would never be good enough). */
static double min_left(const struct msb *ms)
{
    double q = ms->rt_life / 4;
    return q < ROUTER_MIN_LEFT_S ? q : ROUTER_MIN_LEFT_S;
}

/* Tells every waiting process (a fresh list: they may queue again). */
static void wake_waiters(struct msb *ms, const char *failure)
{
    if (ms->rt_job_waiting) {
        ms->rt_job_waiting = 0;
        ms->mp->hooks.job_router_ready(ms);
    }
    if (ms->rt_fs_waiting) {
        ms->rt_fs_waiting = 0;
        ms->mp->hooks.fs_router_ready(ms, failure);
    }
    struct mproc *w = ms->rt_waiters;
    ms->rt_waiters = NULL;
    while (w) {
        struct mproc *m = w;
        w = m->rt_next;
        m->rt_next = NULL;
        m->rt_waiting = 0;
        ms->mp->hooks.proc_router_ready(m, failure);
    }
}

static void rt_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct msb *ms = w->data;
    if (ms->rt_mode != RT_ON)
        return;
    if (ms->procs || ms->fs_ops) {
        access_fetch(ms); /* keeps the current token in use meanwhile */
    } else {
        ms->rt_exp = 1; /* the next user fetches a fresh one */
    }
}

static void access_done(struct grpc_call *c, const struct grpc_status *st,
                        const uint8_t *msg, size_t len, void *privdata)
{
    struct msb *ms = privdata;
    ms->rt_call = NULL;
    Modal__Client__TaskGetCommandRouterAccessResponse *r =
        modal_reply(&modal__client__task_get_command_router_access_response__descriptor,
                    st, msg, len);
    if (st->code == GRPC_FAILED_PRECONDITION || st->code == GRPC_UNIMPLEMENTED) {
        /* Not enabled for this task: ContainerExec, as SDKs before 0.7.0. */
        char why[400];
        snprintf(why, sizeof(why), "TaskGetCommandRouterAccess: %s: %s",
                 grpc_code_name(st->code), st->message);
        log_info("modal: sandbox %s: no command router (%s); exec through ContainerExec",
                 ms->sb->id, why);
        ms->rt_mode = RT_OFF;
        modal_set_str(&ms->rt_why, why);
        modal_reply_free(r);
        /* A V2 sandbox has no ContainerExec to fall back to. */
        wake_waiters(ms, ms->v2 ? why : NULL);
        return;
    }
    sbx_err_t err = {0};
    struct mrouter *rt = NULL;
    if (r && r->jwt[0] && r->url[0])
        rt = router_for(ms->mp, r->url, &err);
    if (!rt) {
        char why[600];
        if (st->code == GRPC_NOT_FOUND)
            ms->mp->hooks.mark_dead(ms, st->message);
        snprintf(why, sizeof(why), "Modal's command router access failed: %s",
                 err.msg          ? err.msg
                 : st->code == 0  ? "no URL or token in the reply"
                 : st->message[0] ? st->message
                                  : grpc_code_name(st->code));
        err_clear(&err);
        modal_reply_free(r);
        int had = ms->rt_mode == RT_ON && ms->rt_jwt;
        ms->rt_mode = had ? RT_ON : RT_UNKNOWN;
        if (had) {
            /* A refresh failed: the old token serves while it lasts. */
            log_warn("modal: sandbox %s: %s", ms->sb->id, why);
            return;
        }
        wake_waiters(ms, st->code == GRPC_NOT_FOUND ? NULL : why);
        return;
    }
    ms->router = rt;
    modal_set_str(&ms->rt_jwt, r->jwt);
    free(ms->rt_auth);
    ms->rt_auth = xasprintf("authorization: Bearer %s", r->jwt);
    double now = wall_now(), exp = modal_jwt_exp(r->jwt);
    if (exp <= now)
        exp = now + ROUTER_DEFAULT_LIFE_S;
    ms->rt_exp = exp;
    ms->rt_life = exp - now;
    ms->rt_mode = RT_ON;
    modal_reply_free(r);
    double life = exp - now;
    double in = life > 2 * ROUTER_EARLY_S ? life - ROUTER_EARLY_S : life / 2;
    ev_timer_stop(D->loop, &ms->rt_timer);
    ev_timer_set(&ms->rt_timer, in > 1 ? in : 1, 0.);
    ev_timer_start(D->loop, &ms->rt_timer);
    log_debug("modal: sandbox %s: router %s, token good for %.0f s", ms->sb->id,
              ms->router->url, life);
    wake_waiters(ms, NULL);
}

static void access_fetch(struct msb *ms)
{
    if (ms->rt_call || !ms->task_id)
        return;
    if (ms->rt_mode != RT_ON)
        ms->rt_mode = RT_FETCHING;
    if (ms->v2) {
        /* V2: by sandbox id; the reply's jwt=1/url=2 are TaskGet...'s. */
        Modal__Client__SandboxGetCommandRouterAccessRequest vreq =
            MODAL__CLIENT__SANDBOX_GET_COMMAND_ROUTER_ACCESS_REQUEST__INIT;
        vreq.target_case =
            MODAL__CLIENT__SANDBOX_GET_COMMAND_ROUTER_ACCESS_REQUEST__TARGET_SANDBOX_ID;
        vreq.sandbox_id = ms->sandbox_id;
        ms->rt_call = grpc_unary(&ms->mp->ch, "SandboxGetCommandRouterAccess", &vreq.base,
                                 UNARY_TIMEOUT_S, access_done, ms);
        grpc_call_retry_budget(ms->rt_call, ms->mp->retry_budget_s);
        return;
    }
    Modal__Client__TaskGetCommandRouterAccessRequest req =
        MODAL__CLIENT__TASK_GET_COMMAND_ROUTER_ACCESS_REQUEST__INIT;
    req.task_id = ms->task_id;
    ms->rt_call = grpc_unary(&ms->mp->ch, "TaskGetCommandRouterAccess", &req.base,
                             UNARY_TIMEOUT_S, access_done, ms);
    grpc_call_retry_budget(ms->rt_call, ms->mp->retry_budget_s);
}

void modal_router_init(struct msb *ms)
{
    ev_init(&ms->rt_timer, rt_timer_cb);
    ms->rt_timer.data = ms;
}

void modal_router_reset(struct msb *ms)
{
    grpc_call_cancel(ms->rt_call);
    ms->rt_call = NULL;
    ev_timer_stop(D->loop, &ms->rt_timer);
    ms->rt_mode = RT_UNKNOWN;
    ms->rt_exp = 0;
    ms->router = NULL;
    free(ms->rt_task);
    free(ms->rt_jwt);
    free(ms->rt_auth);
    free(ms->rt_why);
    ms->rt_task = ms->rt_jwt = ms->rt_auth = ms->rt_why = NULL;
}

int modal_router_use(struct mproc *m)
{
    struct msb *ms = m->ms;
    if (!ms || ms->mp->container_exec_only)
        return -1;
    if (ms->task_id && (!ms->rt_task || strcmp(ms->rt_task, ms->task_id) != 0)) {
        /* A new task (a restart): its router and token are its own. */
        modal_router_reset(ms);
        ms->rt_task = xstrdup(ms->task_id);
    }
    if (ms->rt_mode == RT_OFF)
        return -1;
    if (ms->rt_mode == RT_ON && ms->rt_exp - wall_now() > min_left(ms))
        return 1;
    if (!m->rt_waiting) {
        m->rt_waiting = 1;
        m->rt_next = ms->rt_waiters;
        ms->rt_waiters = m;
    }
    access_fetch(ms);
    return 0;
}

int modal_router_use_job(struct msb *ms)
{
    if (ms->mp->container_exec_only || !ms->task_id)
        return -1;
    if (!ms->rt_task || strcmp(ms->rt_task, ms->task_id) != 0) {
        modal_router_reset(ms);
        ms->rt_task = xstrdup(ms->task_id);
    }
    if (ms->rt_mode == RT_OFF)
        return -1;
    if (ms->rt_mode == RT_ON && ms->rt_exp - wall_now() > min_left(ms))
        return 1;
    if (ms->rt_job_tries++ > 0)
        return -1; /* it could not be had for this job: the fallback */
    ms->rt_job_waiting = 1;
    access_fetch(ms);
    return 0;
}

int modal_router_use_fs(struct msb *ms)
{
    if (ms->mp->container_exec_only || !ms->task_id)
        return -1;
    if (!ms->rt_task || strcmp(ms->rt_task, ms->task_id) != 0) {
        modal_router_reset(ms);
        ms->rt_task = xstrdup(ms->task_id);
    }
    if (ms->rt_mode == RT_OFF)
        return -1;
    if (ms->rt_mode == RT_ON && ms->rt_exp - wall_now() > min_left(ms))
        return 1;
    ms->rt_fs_waiting = 1;
    access_fetch(ms);
    return 0;
}

void modal_router_unwait(struct mproc *m)
{
    if (!m->rt_waiting || !m->ms)
        return;
    for (struct mproc **pp = &m->ms->rt_waiters; *pp; pp = &(*pp)->rt_next)
        if (*pp == m) {
            *pp = m->rt_next;
            break;
        }
    m->rt_waiting = 0;
    m->rt_next = NULL;
}

void modal_router_stale(struct msb *ms)
{
    if (ms->rt_mode != RT_ON)
        return;
    log_debug("modal: sandbox %s: the router rejected its token; fetching a new one",
              ms->sb->id);
    ms->rt_exp = 1;
    access_fetch(ms);
}

struct grpc_call *modal_router_unary(struct msb *ms, const char *method,
                                     const ProtobufCMessage *req, double timeout_s,
                                     grpc_done_cb on_done, void *privdata)
{
    return grpc_unary_h(&ms->router->ch, method, req, timeout_s, ms->rt_auth, on_done,
                        privdata);
}

struct grpc_call *modal_router_stream(struct msb *ms, const char *method,
                                      const ProtobufCMessage *req, double timeout_s,
                                      grpc_msg_cb on_msg, grpc_done_cb on_done,
                                      void *privdata)
{
    return grpc_stream_h(&ms->router->ch, method, req, timeout_s, ms->rt_auth, on_msg,
                         on_done, privdata);
}

void modal_router_metadata(struct msb *ms, json_t *o)
{
    if (ms->mp->container_exec_only) {
        json_object_set_new(o, "exec_transport", json_string("container_exec"));
        json_object_set_new(
            o, "exec_fallback_reason",
            json_string("providers.modal.exec_transport is container_exec"));
        return;
    }
    switch (ms->rt_mode) {
    case RT_OFF:
        json_object_set_new(o, "exec_transport", json_string("container_exec"));
        json_object_set_new(o, "exec_fallback_reason", json_string(nz(ms->rt_why)));
        break;
    case RT_ON:
        json_object_set_new(o, "exec_transport", json_string("task_command_router"));
        json_object_set_new(o, "command_router_url", json_string(ms->router->url));
        break;
    default:
        /* Decided by the first process. */
        json_object_set_new(o, "exec_transport", json_string("task_command_router"));
        break;
    }
}
