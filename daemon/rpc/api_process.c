/*
 * api_process.c - the process.* methods: exec, spawn, write, close_stdin,
 * kill, wait, list, attach, detach. Each parses its params, checks them
 * against the caller's sandbox, and hands over to the core (process.h,
 * output.h) with a completion that answers the call.
 */
#include "rpc/api_process.h"
#include "rpc/api_ws.h"

#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "rpc/call.h"
#include "rpc/conn.h"
#include "daemon.h"
#include "log.h"
#include "rpc/params.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "core/utf8.h"
#include "xalloc.h"

static int proc_param(struct call *c, const char *param, const char *msg)
{
    call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", param), "%s", msg);
    return -1;
}

/* process.exec/spawn params into o (borrowing from params; o->stdin_data is
 * a new reference) and *stream. 0 ok, -1 answered. */
static int proc_opts_parse(struct call *c, json_t *params, struct sandbox *sb,
                           struct proc_opts *o, int *stream)
{
    json_t *cmd = json_object_get(params, "command");
    if (json_is_string(cmd)) {
        if (json_string_length(cmd) == 0)
            return proc_param(c, "command", "command is empty");
        if (param_has_nul(cmd))
            return proc_param(c, "command", "command contains a NUL byte");
    } else if (json_is_array(cmd) && json_array_size(cmd) > 0) {
        size_t i;
        json_t *a;
        json_array_foreach(cmd, i, a) {
            if (!json_is_string(a))
                return proc_param(c, "command", "command array must hold strings");
            if (param_has_nul(a))
                return proc_param(c, "command", "command contains a NUL byte");
        }
    } else {
        return proc_param(c, "command", "command must be a string or a non-empty array");
    }
    o->command = cmd;
    json_t *env = json_object_get(params, "env");
    if (env && !json_is_object(env) && !json_is_null(env))
        return proc_param(c, "env", "env must be an object");
    sbx_err_t err = {0};
    if (env_check(env, &err) < 0) {
        call_fail(c, &err);
        return -1;
    }
    o->env = env;
    json_t *jcwd = json_object_get(params, "cwd");
    if (jcwd && !json_is_null(jcwd)) {
        if (!json_is_string(jcwd) || json_string_value(jcwd)[0] != '/' ||
            param_has_nul(jcwd))
            return proc_param(c, "cwd", "cwd must be an absolute path");
        o->cwd = json_string_value(jcwd);
    }
    json_t *jt = json_object_get(params, "timeout_ms");
    if (jt && !json_is_null(jt)) {
        if (!json_is_integer(jt) || json_integer_value(jt) < 0 ||
            json_integer_value(jt) > 86400000)
            return proc_param(c, "timeout_ms",
                              "timeout_ms must be an integer 0..86400000");
        o->timeout_ms = json_integer_value(jt);
    }
    json_t *js = json_object_get(params, "stdin"),
           *jb = json_object_get(params, "stdin_b64");
    if (js && !json_is_null(js)) {
        if (!json_is_string(js))
            return proc_param(c, "stdin", "stdin must be a string");
        o->stdin_data = json_incref(js);
    } else if (jb && !json_is_null(jb)) {
        size_t n = 0;
        uint8_t *b = json_is_string(jb) ? base64_decode(json_string_value(jb),
                                                        json_string_length(jb), &n)
                                        : NULL;
        if (!b)
            return proc_param(c, "stdin_b64", "stdin_b64 must be base64");
        o->stdin_data = json_stringn_nocheck((const char *)b, n);
        free(b);
    }
    json_t *jst = json_object_get(params, "stream");
    if (jst && !json_is_boolean(jst)) {
        json_decref(o->stdin_data);
        o->stdin_data = NULL;
        return proc_param(c, "stream", "stream must be a boolean");
    }
    *stream = !jst || json_is_true(jst);
    if (api_ws_pty_param(c, params, sb, o) < 0) {
        json_decref(o->stdin_data);
        o->stdin_data = NULL;
        return -1;
    }
    return 0;
}

/* process.kill's signal: a name (KILL, SIGTERM, ...) or a number 1..64. */
static int signal_from_json(json_t *v, int *out)
{
    static const struct {
        const char *name;
        int sig;
    } names[] = {{"KILL", SIGKILL}, {"TERM", SIGTERM}, {"INT", SIGINT},
                 {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},
                 {"USR2", SIGUSR2}, {"STOP", SIGSTOP}, {"CONT", SIGCONT},
                 {"ALRM", SIGALRM}, {"PIPE", SIGPIPE}};
    if (!v || json_is_null(v)) {
        *out = SIGKILL;
        return 0;
    }
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 1 || n > 64)
            return -1;
        *out = (int)n;
        return 0;
    }
    if (!json_is_string(v) || param_has_nul(v))
        return -1;
    const char *s = json_string_value(v);
    if (strncasecmp(s, "SIG", 3) == 0)
        s += 3;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcasecmp(s, names[i].name) == 0) {
            *out = names[i].sig;
            return 0;
        }
    return -1;
}

static void start_process(struct call *c, json_t *params, int is_exec)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "sandbox");
    if (!sb)
        return;
    sandbox_touch(sb);
    enum out_enc enc;
    if (param_encoding(c, params, &enc) < 0)
        return;
    /* A backend that died behind our back: this call restarts it and runs
     * once more (the provider's choice, restart_on_call). */
    int restart = sandbox_restarts_on_call(sb);
    if (restart) {
        log_info("sandbox %s is in error (%s): restarting it for a %s", sb->id,
                 sb->error ? sb->error : "?", c->method ? c->method : "call");
        sandbox_start(sb, NULL, NULL);
    }
    if (sb->status != SB_RUNNING && sb->status != SB_PENDING &&
        sb->status != SB_STARTING) {
        call_error(c, SBX_E_STATE,
                   json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                             sandbox_status_name(sb->status)),
                   "sandbox %s is %s", sb->id, sandbox_status_name(sb->status));
        return;
    }
    struct proc_opts o = {.origin = c->conn ? c->conn->id : 0,
                          .sandbox_restarted = restart,
                          .result_enc = enc};
    if (is_exec) {
        o.exec_cb = api_call_done;
        o.exec_data = c;
    }
    /* start_token: the session learns the pid of an exec before its result
     * (process.started precedes the process's output), so a client that
     * must be able to cancel it (sbxctl mcp) needs no spawn + wait pair. */
    json_t *tok = json_object_get(params, "start_token");
    if (tok && (!json_is_string(tok) || json_string_length(tok) == 0 ||
                json_string_length(tok) > 128)) {
        param_bad(c, "start_token", "must be a string of 1 to 128 bytes");
        return;
    }
    int stream = 1;
    if (proc_opts_parse(c, params, sb, &o, &stream) < 0)
        return;
    struct process *p = NULL;
    sbx_err_t err = {0};
    int r = process_new(&p, sb, &o, &err);
    json_decref(o.stdin_data);
    if (r < 0) {
        call_fail(c, &err);
        return;
    }
    if (stream)
        process_subscribe(p, c->conn ? &c->conn->fol : NULL, enc, 0);
    uint32_t pid = p->pid;
    if (tok && c->conn)
        conn_notify(c->conn, SBX_N_STARTED,
                    json_pack("{s:s, s:I, s:O}", "sandbox", sb->id, "pid",
                              (json_int_t)pid, "token", tok));
    if (process_launch(p, &err) < 0) {
        call_fail(c, &err);
        return;
    }
    /* Its start's completion spawns the process, maybe right here. */
    if (sb->status == SB_PENDING)
        sandbox_start(sb, NULL, NULL);
    if (!is_exec)
        call_reply(c, json_pack("{s:I}", "pid", (json_int_t)pid));
}

static void m_exec(struct call *c, json_t *params)
{
    start_process(c, params, 1);
}

static void m_spawn(struct call *c, json_t *params)
{
    start_process(c, params, 0);
}

static void m_write(struct call *c, json_t *params)
{
    struct sandbox *sb;
    struct process *p = api_process_arg(c, params, &sb);
    if (!p)
        return;
    json_t *d = json_object_get(params, "data"), *b = json_object_get(params, "data_b64");
    uint8_t *bytes = NULL;
    size_t n = 0;
    const void *src;
    if (json_is_string(d)) {
        src = json_string_value(d);
        n = json_string_length(d);
    } else if (json_is_string(b)) {
        bytes = base64_decode(json_string_value(b), json_string_length(b), &n);
        if (!bytes) {
            param_bad(c, "data_b64", "must be base64");
            return;
        }
        src = bytes;
    } else {
        param_bad(c, "data", "data (string) or data_b64 is required");
        return;
    }
    if (p->state != P_RUNNING) {
        free(bytes);
        call_error(c, SBX_E_STATE,
                   json_pack("{s:s, s:I, s:s}", "sandbox", sb->id, "pid",
                             (json_int_t)p->pid, "status",
                             p->state == P_EXITED ? "exited" : "queued"),
                   "process %u is not running", p->pid);
        return;
    }
    sbx_err_t err = {0};
    int r = process_write(p, src, n, &err);
    free(bytes);
    if (r < 0)
        call_fail(c, &err);
    else
        call_reply(c, json_pack("{s:I}", "written", (json_int_t)n));
}

static void m_close_stdin(struct call *c, json_t *params)
{
    struct sandbox *sb;
    struct process *p = api_process_arg(c, params, &sb);
    if (!p)
        return;
    if (p->state != P_RUNNING) {
        call_reply(c, NULL);
        return;
    }
    sbx_err_t err = {0};
    if (process_close_stdin(p, &err) < 0)
        call_fail(c, &err);
    else
        call_reply(c, NULL);
}

static void m_kill(struct call *c, json_t *params)
{
    struct sandbox *sb;
    struct process *p = api_process_arg(c, params, &sb);
    if (!p)
        return;
    int sig;
    if (signal_from_json(json_object_get(params, "signal"), &sig) < 0) {
        param_bad(c, "signal", "must be a signal name (KILL, TERM, ...) or number 1..64");
        return;
    }
    int was_exited = p->state == P_EXITED;
    sbx_err_t err = {0};
    if (process_kill(p, sig, &err) < 0)
        call_fail(c, &err);
    else
        call_reply(c, json_pack("{s:b}", "already_exited", was_exited));
}

static void m_wait(struct call *c, json_t *params)
{
    struct process *p = api_process_arg(c, params, NULL);
    if (!p)
        return;
    int64_t t = 0;
    if (param_int(c, params, "timeout_ms", 0, 86400000, &t) < 0)
        return;
    if (p->state == P_EXITED) {
        call_reply(c, process_exit_json(p, 0));
        return;
    }
    process_add_waiter(p, t, api_call_done, c);
}

static void m_plist(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "sandbox");
    if (!sb)
        return;
    json_t *arr = json_array();
    for (struct process *p = sb->procs; p; p = p->next)
        if (!p->internal)
            json_array_append_new(arr, process_list_json(p));
    call_reply(c, json_pack("{s:o}", "processes", arr));
}

static void m_attach(struct call *c, json_t *params)
{
    struct process *p = api_process_arg(c, params, NULL);
    if (!p)
        return;
    int64_t off = 0, o1 = -1, o2 = -1;
    int follow = 1;
    struct replay_opts ro = {0};
    if (param_encoding(c, params, &ro.enc) < 0 ||
        param_int(c, params, "offset", 0, INT64_MAX, &off) < 0 ||
        param_int(c, params, "stdout_offset", 0, INT64_MAX, &o1) < 0 ||
        param_int(c, params, "stderr_offset", 0, INT64_MAX, &o2) < 0 ||
        param_bool(c, params, "follow", &follow) < 0 ||
        param_since(c, params, &ro.since_ns) < 0 ||
        param_bool(c, params, "timestamps", &ro.timestamps) < 0)
        return;
    if (!c->conn) {
        call_reply(c, NULL);
        return;
    }
    ro.off[0] = (uint64_t)(o1 >= 0 ? o1 : off);
    ro.off[1] = (uint64_t)(o2 >= 0 ? o2 : off);
    json_t *res = process_replay(p, &c->conn->fol, &ro);
    if (p->state == P_EXITED) {
        json_t *e = p->exit;
        conn_notify(c->conn, SBX_N_EXIT,
                    json_pack("{s:s, s:I, s:O, s:O, s:O, s:O, s:O}", "sandbox", p->sb->id,
                              "pid", (json_int_t)p->pid, "exit_code",
                              json_object_get(e, "exit_code"), "signal",
                              json_object_get(e, "signal"), "timed_out",
                              json_object_get(e, "timed_out"), "killed",
                              json_object_get(e, "killed"), "error",
                              json_object_get(e, "error")));
    } else if (follow) {
        process_subscribe(p, c->conn ? &c->conn->fol : NULL, ro.enc, ro.timestamps);
    }
    call_reply(c, res);
}

static void m_detach(struct call *c, json_t *params)
{
    struct process *p = api_process_arg(c, params, NULL);
    if (!p)
        return;
    if (c->conn)
        process_unsubscribe(p, &c->conn->fol);
    call_reply(c, NULL);
}

/* -- table ------------------------------------------------------------------- */

static const struct {
    const char *name;
    method_fn fn;
} process_methods[] = {
    {SBX_M_EXEC, m_exec},     {SBX_M_SPAWN, m_spawn},
    {SBX_M_WRITE, m_write},   {SBX_M_CLOSE_STDIN, m_close_stdin},
    {SBX_M_KILL, m_kill},     {SBX_M_WAIT, m_wait},
    {SBX_M_PLIST, m_plist},   {SBX_M_ATTACH, m_attach},
    {SBX_M_DETACH, m_detach},
};

method_fn api_process_lookup(const char *method)
{
    for (size_t i = 0; i < sizeof(process_methods) / sizeof(process_methods[0]); i++)
        if (strcmp(process_methods[i].name, method) == 0)
            return process_methods[i].fn;
    return NULL;
}
