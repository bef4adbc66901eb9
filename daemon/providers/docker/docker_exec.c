/*
 * docker_exec.c - exec_mode docker-exec: each process is an Engine exec
 * (POST /containers/{id}/exec, then a hijacked POST /exec/{id}/start), the
 * fallback for when the agent can't be used.
 *
 * Same semantics as the agent as far as Docker allows; what it can't do:
 *   - Signals: the exec API has none. A kill runs another exec inside the
 *     container, a shell loop that signals every process whose environment
 *     carries this process's SBX_PROC marker (the command and its children,
 *     unless they scrub their environment). The image needs /bin/sh, tr, grep
 *     and kill for that.
 *   - The exec's output ends only when every holder of its pipes is gone, so
 *     `sleep 300 & echo started` returns after the sleep.
 *   - Closing stdin is a half-close of the connection: not possible over TLS.
 *   - No replay and no adoption after an sbxd restart: the processes keep
 *     running in the container but sbxd has lost them.
 *   - Flow control is the connection's: a slow reader stops our reads, the
 *     engine's buffers fill, then the process blocks in write().
 *   - A working directory that does not exist is not created.
 *   - Removing a container env key (env {K: null}) needs `env` in the image.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"

#define STDIN_LIMIT (16u * 1024 * 1024)
#define INSPECT_RETRIES 100

static void exec_create(struct dk_proc *dpp);

static void fail_proc(struct dk_proc *dpp, const char *msg)
{
    json_t *rec = json_pack("{s:i, s:s}", "exit_code", -1, "error", msg);
    if (dpp->retried)
        json_object_set_new(rec, "retried", json_true());
    dpp->exited = 1;
    process_exited(dpp->p, rec);
    json_decref(rec);
}

/* ---- exit
 * ------------------------------------------------------------------------------ */

static void inspect_done(struct dk_resp *r, void *data)
{
    struct dk_proc *dpp = data;
    if (r->status != 200 || !json_is_object(r->json)) {
        char msg[400];
        snprintf(msg, sizeof(msg), "docker: inspect exec: %s",
                 r->errmsg ? r->errmsg : "bad answer");
        fail_proc(dpp, msg);
        return;
    }
    if (json_is_true(json_object_get(r->json, "Running")) &&
        dpp->inspect_tries < INSPECT_RETRIES) {
        /* The streams closed a moment before the engine saw the exit. */
        dpp->inspect_tries++;
        char *path = dkapi_path(&dpp->ds->dp->eng, "/exec/%s/json", dpp->exec_id);
        if (!dkapi_call(&dpp->ds->dp->eng, &dpp->reqs, "GET", path, NULL,
                        DK_CALL_TIMEOUT_MS, inspect_done, dpp))
            fail_proc(dpp, "docker: cannot inspect the exec");
        free(path);
        return;
    }
    json_t *jc = json_object_get(r->json, "ExitCode");
    int code = json_is_integer(jc) ? (int)json_integer_value(jc) : -1;
    json_t *rec = json_pack("{s:i}", "exit_code", code);
    if (code > 128 && code < 128 + 65)
        json_object_set_new(rec, "signal", json_integer(code - 128));
    if (dpp->retried)
        json_object_set_new(rec, "retried", json_true());
    dpp->exited = 1;
    process_exited(dpp->p, rec);
    json_decref(rec);
}

static void stream_data(struct dkh *h, int stream, const uint8_t *d, size_t n, void *data)
{
    struct dk_proc *dpp = data;
    if (dpp->exited || stream < 1 || stream > 2)
        return;
    process_output(dpp->p, stream, d, n); /* Docker frames use 1, 2 too */
    if (process_output_blocked(dpp->p) && !dpp->out_paused) {
        dpp->out_paused = 1;
        dkh_pause(h, 1);
    }
}

static void stream_closed(struct dkh *h, const char *why, void *data)
{
    struct dk_proc *dpp = data;
    dpp->hj = NULL;
    if (dpp->exited)
        return;
    dpp->inspect_tries = 0;
    char *path = dkapi_path(&dpp->ds->dp->eng, "/exec/%s/json", dpp->exec_id);
    if (!dkapi_call(&dpp->ds->dp->eng, &dpp->reqs, "GET", path, NULL, DK_CALL_TIMEOUT_MS,
                    inspect_done, dpp))
        fail_proc(dpp, "docker: cannot inspect the exec");
    free(path);
}

static void stream_open(struct dkh *h, long status, const char *msg, void *data)
{
    struct dk_proc *dpp = data;
    if (status != 101 && status != 200) {
        dpp->hj = NULL;
        char m[400];
        snprintf(m, sizeof(m), "docker: exec start: %s", msg ? msg : "failed");
        fail_proc(dpp, m);
        return;
    }
    dpp->pc.started = 1;
    process_started(dpp->p, 0);
    if (dpp->stdin_eof)
        dkh_shutdown_write(h);
}

/* ---- create and start
 * --------------------------------------------------------------------- */

static void restart_done(struct dk_resp *r, void *data)
{
    struct dk_proc *dpp = data;
    if (r->status != 204 && r->status != 304) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "docker: the container is not running and restarting it failed: %s",
                 r->errmsg ? r->errmsg : "?");
        fail_proc(dpp, msg);
        return;
    }
    exec_create(dpp);
}

static void created(struct dk_resp *r, void *data)
{
    struct dk_proc *dpp = data;
    struct dk_sb *ds = dpp->ds;
    const char *id = json_string_value(json_object_get(r->json, "Id"));
    if (r->status == 409 && !dpp->retried && !r->transport) {
        /* The container died: start it again once and retry; the result
         * says so (isolate_reset). */
        dpp->retried = 1;
        ds->restarts++;
        log_warn("docker %s: exec failed (%s); restarting the container to retry",
                 ds->sb->id, r->errmsg ? r->errmsg : "?");
        sandbox_progress(
            ds->sb, json_pack("{s:s, s:s}", "stage", "restart", "message",
                              "the container was not running; restarting it to retry"));
        char *path = dkapi_path(&ds->dp->eng, "/containers/%s/start", ds->cid);
        if (!dkapi_call(&ds->dp->eng, &dpp->reqs, "POST", path, NULL, DK_CALL_TIMEOUT_MS,
                        restart_done, dpp))
            fail_proc(dpp, "docker: cannot restart the container");
        free(path);
        return;
    }
    if (r->status != 201 || !id || strlen(id) >= sizeof(dpp->exec_id)) {
        char msg[400];
        snprintf(msg, sizeof(msg), "docker: create exec: %s",
                 r->errmsg ? r->errmsg : "bad answer");
        int gone = r->status == 404 || r->transport;
        fail_proc(dpp, msg);
        if (gone)
            ds->up->trouble(ds, msg);
        return;
    }
    snprintf(dpp->exec_id, sizeof(dpp->exec_id), "%s", id);
    char *path = dkapi_path(&ds->dp->eng, "/exec/%s/start", id);
    json_t *body = json_pack("{s:b, s:b}", "Detach", 0, "Tty", 0);
    dpp->hj = dkh_open(&ds->dp->eng, "POST", path, body, &dpp->stdin_buf, stream_open,
                       stream_data, stream_closed, dpp);
    json_decref(body);
    free(path);
    if (!dpp->hj)
        fail_proc(dpp, "docker: cannot connect to the engine");
}

/*
 * An exec inherits the container's env (the image's and the create-time
 * one) and the Engine API can only add to it: a key the sandbox's layers
 * removed (env {K: null}, set_env {K: null}) is unset by running the command
 * under `env -u K ...` (the image needs env, as busybox and coreutils have).
 * Steals argv; returns the command to run.
 */
static json_t *unset_removed(struct dk_sb *ds, json_t *env, json_t *argv)
{
    json_t *wrap = NULL;
    const char *k;
    json_t *v;
    json_object_foreach(ds->base_env, k, v) {
        if (json_object_get(env, k))
            continue;
        if (!wrap)
            wrap = json_pack("[s]", "env");
        json_array_append_new(wrap, json_string("-u"));
        json_array_append_new(wrap, json_string(k));
    }
    if (!wrap)
        return argv;
    json_array_extend(wrap, argv);
    json_decref(argv);
    return wrap;
}

static void exec_create(struct dk_proc *dpp)
{
    struct dk_sb *ds = dpp->ds;
    struct process *p = dpp->p;
    json_t *cmd = json_object_get(p->spec, "shell");
    json_t *argv = cmd ? json_pack("[s, s, O]", "/bin/sh", "-c", cmd)
                       : json_incref(json_object_get(p->spec, "argv"));
    json_t *env = dkspawn_env(ds, p);
    argv = unset_removed(ds, env, argv);
    snprintf(dpp->marker, sizeof(dpp->marker), "%s.%u.%llx", ds->sb->id, p->pid,
             (unsigned long long)(daemon_now() * 1e6));
    json_object_set_new(env, "SBX_PROC", json_string(dpp->marker));
    json_t *body =
        json_pack("{s:b, s:b, s:b, s:b, s:o, s:o, s:s}", "AttachStdin", 1, "AttachStdout",
                  1, "AttachStderr", 1, "Tty", 0, "Cmd", argv, "Env",
                  dkspec_env_to_arr(env), "WorkingDir", dkspawn_cwd(ds, p));
    json_decref(env);
    if (json_object_get(ds->opts, "user"))
        json_object_set(body, "User", json_object_get(ds->opts, "user"));
    char *path = dkapi_path(&ds->dp->eng, "/containers/%s/exec", ds->cid);
    if (!dkapi_call(&ds->dp->eng, &dpp->reqs, "POST", path, body, DK_CALL_TIMEOUT_MS,
                    created, dpp))
        fail_proc(dpp, "docker: cannot start an engine request");
    free(path);
    json_decref(body);
}

int dkx_spawn(struct dk_sb *ds, struct dk_proc *dpp, sbx_err_t *err)
{
    if (!ds->cid[0])
        return err_make(err, SBX_E_STATE, "sandbox %s has no container", ds->sb->id);
    dpp->spawned = 1;
    exec_create(dpp);
    return 0;
}

/* ---- stdin, kill, flow control
 * ------------------------------------------------------------- */

int dkx_write(struct dk_proc *dpp, const void *data, size_t len, sbx_err_t *err)
{
    if (dpp->stdin_buf.bytes + len > STDIN_LIMIT)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "stdin_buffer", "max", (int)STDIN_LIMIT),
            "stdin buffer of process %u is full", dpp->pid);
    if (obuf_append(&dpp->stdin_buf, data, len) < 0)
        return err_make(err, SBX_E_INTERNAL, "out of memory");
    if (dpp->hj)
        dkh_flush(dpp->hj);
    return 0;
}

int dkx_close_stdin(struct dk_proc *dpp, sbx_err_t *err)
{
    if (dpp->ds->dp->eng.tls)
        return err_make_data(
            err, SBX_E_PROVIDER,
            json_pack("{s:s, s:s}", "provider", "docker", "message",
                      "closing stdin is not possible over TLS in docker-exec mode"),
            "docker: closing stdin is not possible over TLS in docker-exec mode");
    dpp->stdin_eof = 1;
    if (dpp->hj && dkh_streaming(dpp->hj))
        dkh_shutdown_write(dpp->hj);
    return 0;
}

static void kill_started(struct dk_resp *r, void *data)
{
    if (r->status != 200 && r->status != 204)
        log_warn("docker: kill exec: %s", r->errmsg ? r->errmsg : "failed");
}

static void kill_created(struct dk_resp *r, void *data)
{
    struct dk_proc *dpp = data;
    const char *id = json_string_value(json_object_get(r->json, "Id"));
    if (r->status != 201 || !id) {
        log_warn("docker %s: cannot run kill in the container: %s", dpp->ds->sb->id,
                 r->errmsg ? r->errmsg : "?");
        return;
    }
    char *path = dkapi_path(&dpp->ds->dp->eng, "/exec/%s/start", id);
    json_t *body = json_pack("{s:b, s:b}", "Detach", 1, "Tty", 0);
    dkapi_call(&dpp->ds->dp->eng, &dpp->reqs, "POST", path, body, DK_CALL_TIMEOUT_MS,
               kill_started, dpp);
    json_decref(body);
    free(path);
}

int dkx_kill(struct dk_proc *dpp, int sig, sbx_err_t *err)
{
    struct dk_sb *ds = dpp->ds;
    if (!dpp->exec_id[0] && !dpp->pc.started) {
        /* Not created yet: never let it start. */
        dkapi_reqlist_cancel(&dpp->reqs);
        json_t *rec = json_pack("{s:i, s:i, s:b}", "exit_code", 128 + sig, "signal", sig,
                                "killed", 1);
        dpp->exited = 1;
        process_exited(dpp->p, rec);
        json_decref(rec);
        return 0;
    }
    /* exec_create put the marker into the process's env; find it in /proc. */
    char script[512];
    snprintf(
        script, sizeof(script),
        "for d in /proc/[0-9]*; do if tr '\\000' '\\n' < $d/environ 2>/dev/null | "
        "grep -qxF 'SBX_PROC=%s'; then kill -%d ${d#/proc/} 2>/dev/null; fi; done; true",
        dpp->marker, sig);
    json_t *body =
        json_pack("{s:b, s:b, s:b, s:[s, s, s]}", "AttachStdin", 0, "AttachStdout", 0,
                  "AttachStderr", 0, "Cmd", "/bin/sh", "-c", script);
    if (json_object_get(ds->opts, "user"))
        json_object_set(body, "User", json_object_get(ds->opts, "user"));
    char *path = dkapi_path(&ds->dp->eng, "/containers/%s/exec", ds->cid);
    struct dk_req *rq = dkapi_call(&ds->dp->eng, &dpp->reqs, "POST", path, body,
                                   DK_CALL_TIMEOUT_MS, kill_created, dpp);
    free(path);
    json_decref(body);
    if (!rq)
        return err_make(err, SBX_E_UNAVAILABLE, "docker: cannot start an engine request");
    return 0;
}

void dkx_resume(struct dk_proc *dpp)
{
    if (dpp->out_paused && dpp->hj && !process_output_blocked(dpp->p)) {
        dpp->out_paused = 0;
        dkh_pause(dpp->hj, 0);
    }
}

void dkx_release(struct dk_proc *dpp)
{
    dkapi_reqlist_cancel(&dpp->reqs);
    if (dpp->hj) {
        dkh_close(dpp->hj);
        dpp->hj = NULL;
    }
}

const struct dk_ptrans dkx_ptrans = {
    .spawn = dkx_spawn,
    .write = dkx_write,
    .close_stdin = dkx_close_stdin,
    .kill = dkx_kill,
    .resume = dkx_resume,
    .release = dkx_release,
};
