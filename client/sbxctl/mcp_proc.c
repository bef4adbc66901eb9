/*
 * mcp_proc.c - the process tools of `sbxctl mcp`:
 *
 *   exec_command    process.exec (streamed into this call; process.started names
 *                   its pid first, so a cancel can kill it)
 *   run_code        the same, in the code sandbox; the answer is result + logs
 *   spawn_process   process.spawn without streaming
 *   process_output  [process.wait with a timeout] -> process.attach, follow false
 *   kill_process    process.kill
 *   sandbox_info    sandbox.get -> process.list
 *
 * exec_command and run_code follow their process: cancelling the call kills it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_tools.h"
#include "sbxctl.h"

/* ---- shared pieces ----------------------------------------------------------------- */

static int is_code(const struct call *c)
{
    return c->tool->start == mcp_code_start;
}

/* An error reply on a call's sandbox. A sandbox that is gone (destroyed
 * behind our back, expired while sbxd had closed our idle session) is made
 * anew; a call whose failed step changed nothing (a spawn, a get) runs again
 * once in the new one, others say what happened. */
static void answer_failed(struct call *c, const sbx_rpc_error *err, const char *what)
{
    struct mcp *m = c->m;
    if (err && err->code == SBX_E_NOT_FOUND && c->slot && c->sandbox) {
        if (c->slot->state == SLOT_READY && strcmp(c->slot->id, c->sandbox) == 0)
            msbx_slot_lost(c->slot);
        int again = c->tool->start == mcp_exec_start ||
                    c->tool->start == mcp_code_start ||
                    c->tool->start == mcp_spawn_start || c->tool->start == mcp_info_start;
        if (again && !c->retried && !c->done) {
            c->retried = 1;
            free(c->sandbox);
            c->sandbox = NULL;
            c->pid = -1;
            c->following = 0;
            mcp_slot_use(c, c->slot, c->on_ready);
            return;
        }
        mcp_answer_error(c, "%s: %s; the sandbox is gone, the next call makes a new one",
                         what, mcp_errtext(m, err));
        return;
    }
    mcp_answer_error(c, "%s: %s", what, mcp_errtext(m, err));
}

static json_int_t arg_int_or(struct call *c, const char *key, json_int_t dflt)
{
    json_t *v = json_object_get(c->args, key);
    return json_is_integer(v) ? json_integer_value(v) : dflt;
}

static void ignore_reply(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    (void)c;
    (void)result;
    (void)err;
}

static void send_kill(struct call *c)
{
    if (c->kill_sent || c->pid < 0 || !c->sandbox)
        return;
    c->kill_sent = 1;
    mcp_dcall(c, SBX_M_KILL,
              json_pack("{s:s, s:I}", "sandbox", c->sandbox, "pid", c->pid),
              ignore_reply);
}

void mcp_proc_cancel(struct call *c)
{
    /* A spawn still in flight kills on its reply (spawn_done sees c->done). */
    if (c->following)
        send_kill(c);
}

static struct call *find_proc_call(struct mcp *m, const char *sandbox, json_int_t pid,
                                   int attaching, const struct call * not )
{
    for (struct call *c = m->calls; c; c = c->next) {
        if (c == not || c->pid != pid || !c->sandbox || strcmp(c->sandbox, sandbox) != 0)
            continue;
        if (attaching ? c->attaching : c->following)
            return c;
    }
    return NULL;
}

/* Appends at most what fits in max, cut at a UTF-8 boundary. Returns the bytes taken. */
static size_t take_output(struct mbuf *b, const char *data, size_t len, size_t max)
{
    size_t room = b->len < max ? max - b->len : 0;
    size_t n = len;
    if (n > room) {
        n = room;
        while (n > 0 && ((unsigned char)data[n] & 0xC0) == 0x80)
            n--;
    }
    return mbuf_append(b, data, n, (size_t)-1);
}

static int route(struct mcp *m, const char *method, json_t *params)
{
    const char *sandbox = json_string_value(json_object_get(params, "sandbox"));
    json_t *pidj = json_object_get(params, "pid");
    if (!sandbox || !json_is_integer(pidj))
        return 0;
    json_int_t pid = json_integer_value(pidj);
    int is_exit = strcmp(method, SBX_N_EXIT) == 0;
    struct call *c = find_proc_call(m, sandbox, pid, 0, NULL);
    int attach = 0;
    if (!c) {
        c = find_proc_call(m, sandbox, pid, 1, NULL);
        attach = 1;
    }
    if (!c)
        return 0;
    if (is_exit) {
        if (attach) {
            json_decref(c->exit);
            c->exit = json_incref(params);
        }
        return 1;
    }
    int stream;
    char *data;
    size_t len;
    if (sbx_output_decode(&stream, &data, &len, params) != SBX_OK)
        return 1;
    int s = stream == SBX_STDERR;
    if (!attach) {
        if (take_output(&c->out[s], data, len, m->conf.max_output) < len)
            c->truncated = 1;
        if (is_code(c))
            mbuf_append(&c->logs, data, len, m->conf.max_output);
    } else if (c->at[s] >= 0) { /* < 0: cut at the size limit, the rest waits */
        json_int_t off = json_integer_value(json_object_get(params, "offset"));
        size_t skip = 0;
        if (off > c->at[s]) {
            c->dropped += off - c->at[s]; /* older bytes are gone from sbxd's buffer */
            c->at[s] = off;
        } else {
            skip = (size_t)(c->at[s] - off); /* a piece we already have */
        }
        if (skip < len) {
            size_t n =
                take_output(&c->out[s], data + skip, len - skip, m->conf.max_output);
            c->at[s] += (json_int_t)n;
            if (n < len - skip) {
                c->truncated = 1;
                c->at[s] = -1 - c->at[s];
            }
        }
    }
    free(data);
    return 1;
}

/* The last line of b, at most 120 bytes (malloc'd), or NULL. */
static char *last_line(const struct mbuf *b)
{
    if (!b->len)
        return NULL;
    size_t end = b->len;
    while (end > 0 && (b->p[end - 1] == '\n' || b->p[end - 1] == '\r'))
        end--;
    size_t start = end;
    while (start > 0 && b->p[start - 1] != '\n' && end - start < 120)
        start--;
    while (start < end && ((unsigned char)b->p[start] & 0xC0) == 0x80)
        start++;
    return start < end ? strndup(b->p + start, end - start) : NULL;
}

char *mcp_proc_progress_text(struct call *c)
{
    char buf[512];
    double secs = ev_now(c->m->loop) - c->t0;
    if (c->tool->start == mcp_output_start) {
        snprintf(buf, sizeof(buf), "waiting %.1f s for process %" JSON_INTEGER_FORMAT,
                 secs, arg_int_or(c, "pid", 0));
    } else if (c->pid < 0) {
        int creating = c->slot && c->slot->state != SLOT_READY;
        snprintf(buf, sizeof(buf), "%.1f s: %s%s%.200s", secs,
                 creating ? "creating the sandbox" : "starting",
                 creating && c->slot->progress ? ": " : "",
                 creating && c->slot->progress ? c->slot->progress : "");
    } else {
        char *tail = last_line(c->out[0].len ? &c->out[0] : &c->out[1]);
        snprintf(buf, sizeof(buf), "running %.1f s, %zu bytes of output%s%s", secs,
                 c->out[0].len + c->out[1].len, tail ? ": " : "", tail ? tail : "");
        free(tail);
    }
    return strdup(buf);
}

/* ---- exec_command and run_code ----------------------------------------------------- */

static void exec_waited(struct call *c, json_t *result, const sbx_rpc_error *err);

/* One process.exec, one round trip: its process.started (before any output)
 * gives the pid a cancel kills, its result (after every process.output) is
 * the exit record. Issue 21: the spawn + wait pair it replaces cost a second
 * round trip per call. */
static void started(struct mcp *m, json_t *params)
{
    const char *tok = json_string_value(json_object_get(params, "token"));
    json_t *pid = json_object_get(params, "pid");
    char *end;
    if (!tok || tok[0] != 'm' || !json_is_integer(pid))
        return;
    long long t = strtoll(tok + 1, &end, 10);
    if (*end || t <= 0)
        return;
    /* Done (cancelled) calls are still listed while their exec is outstanding. */
    for (struct call *c = m->calls; c; c = c->next) {
        if (c->token != t || c->following)
            continue;
        c->pid = json_integer_value(pid);
        c->following = 1;
        if (c->done) /* cancelled before its pid was known */
            send_kill(c);
        return;
    }
}

static void exec_done(struct call *c, json_t *rec, const sbx_rpc_error *err)
{
    c->token = 0;
    if (!rec) {
        c->following = 0;
        if (!c->done)
            answer_failed(c, err, "cannot run the command");
        return;
    }
    exec_waited(c, rec, err);
}

static void exec_ready(struct call *c)
{
    struct mcp *m = c->m;
    json_t *p = json_object();
    const char *keys[] = {"command", "cwd", "env", "stdin"};

    free(c->sandbox);
    c->sandbox = strdup(c->slot->id);
    if (is_code(c)) {
        json_object_set(p, "command", json_object_get(c->args, "code"));
    } else {
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
            if (json_object_get(c->args, keys[i]))
                json_object_set(p, keys[i], json_object_get(c->args, keys[i]));
    }
    c->timeout_ms = arg_int_or(c, "timeout_ms", m->conf.default_timeout_ms);
    if (c->timeout_ms > 0)
        json_object_set_new(p, "timeout_ms", json_integer(c->timeout_ms));
    json_object_set_new(p, "sandbox", json_string(c->sandbox));
    json_object_set_new(p, "stream", json_true());
    char tok[32];
    c->token = ++m->next_token;
    snprintf(tok, sizeof(tok), "m%" JSON_INTEGER_FORMAT, c->token);
    json_object_set_new(p, "start_token", json_string(tok));
    if (mcp_dcall(c, SBX_M_EXEC, p, exec_done) < 0) {
        c->token = 0;
        mcp_answer_error(c, "cannot reach sbxd");
    }
}

void mcp_exec_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, exec_ready);
}

void mcp_code_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.code, exec_ready);
}

static json_t *split_lines(const struct mbuf *b)
{
    json_t *arr = json_array();
    size_t start = 0;
    for (size_t i = 0; i <= b->len; i++) {
        if (i < b->len && b->p[i] != '\n')
            continue;
        if (i > start || i < b->len)
            json_array_append_new(arr, mbuf_string(b->p + start, i - start));
        start = i + 1;
    }
    return arr;
}

static void code_answer(struct call *c, json_t *rec)
{
    json_t *exc = json_object_get(rec, "exception");
    json_t *error = json_null();
    json_int_t code = json_integer_value(json_object_get(rec, "exit_code"));
    const char *errs = json_string_value(json_object_get(rec, "error"));
    int timed_out = json_is_true(json_object_get(rec, "timed_out"));

    if (json_is_object(exc)) {
        const char *name = json_string_value(json_object_get(exc, "name"));
        const char *msg = json_string_value(json_object_get(exc, "message"));
        error = json_pack("{s:s, s:s}", "name", name ? name : "Error", "message",
                          msg ? msg : "");
        if (json_is_string(json_object_get(exc, "stack")))
            json_object_set(error, "stack", json_object_get(exc, "stack"));
    } else if (json_is_string(exc)) {
        error = json_pack("{s:s, s:O}", "name", "Error", "message", exc);
    } else if (timed_out) {
        error = json_pack("{s:s, s:s}", "name", "TimeoutError", "message",
                          "the program ran out of time");
    } else if (errs) {
        error = json_pack("{s:s, s:s}", "name", "Error", "message", errs);
    } else if (code != 0) {
        char msg[64];
        snprintf(msg, sizeof(msg), "exited with code %" JSON_INTEGER_FORMAT, code);
        error = json_pack("{s:s, s:s}", "name", "Error", "message", msg);
    }
    json_t *result = json_object_get(rec, "result");
    /* A provider that returns the logs itself is believed; else the output lines. */
    json_t *logs = json_object_get(rec, "logs");
    size_t i;
    json_t *l;
    int all_strings = json_is_array(logs);
    json_array_foreach(logs, i, l) {
        if (!json_is_string(l))
            all_strings = 0;
    }
    logs = all_strings ? json_incref(logs) : split_lines(&c->logs);
    json_t *s =
        json_pack("{s:O, s:o, s:o, s:b, s:b}", "result", result ? result : json_null(),
                  "logs", logs, "error", error, "timed_out", timed_out, "truncated",
                  c->truncated || json_is_true(json_object_get(rec, "logs_truncated")));
    if (json_object_get(rec, "duration_ms"))
        json_object_set(s, "duration_ms", json_object_get(rec, "duration_ms"));
    /* The program ran: its uncaught error is its result, for the model to
     * read. The tool failed only when the program could not be run. */
    char *text = mcp_code_text(s);
    mcp_answer(c, s, code < 0, text);
    free(text);
}

static void exec_waited(struct call *c, json_t *rec, const sbx_rpc_error *err)
{
    c->following = 0;
    if (c->done)
        return;
    if (!rec) {
        answer_failed(c, err, "waiting for the command failed");
        return;
    }
    if (is_code(c)) {
        code_answer(c, rec);
        return;
    }
    json_t *code = json_object_get(rec, "exit_code");
    json_t *error = json_object_get(rec, "error");
    json_t *s =
        json_pack("{s:I, s:I, s:I, s:b, s:b, s:o, s:o, s:b}", "pid", c->pid, "exit_code",
                  json_integer_value(code), "signal",
                  json_integer_value(json_object_get(rec, "signal")), "timed_out",
                  json_is_true(json_object_get(rec, "timed_out")), "killed",
                  json_is_true(json_object_get(rec, "killed")), "stdout",
                  mbuf_string(c->out[0].p, c->out[0].len), "stderr",
                  mbuf_string(c->out[1].p, c->out[1].len), "truncated", c->truncated);
    json_object_set_new(s, "error",
                        json_is_string(error) ? json_incref(error) : json_null());
    const char *keep[] = {"duration_ms", "result", "exception"};
    for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
        if (json_object_get(rec, keep[i]))
            json_object_set(s, keep[i], json_object_get(rec, keep[i]));
    /* A command that ran and exited non-zero is a successful call whose
     * result says so (grep finding nothing is not a failure of the tool);
     * isError only when it could not be run at all (exit_code < 0). */
    char *text = mcp_exec_text(s);
    mcp_answer(c, s, !json_is_integer(code) || json_integer_value(code) < 0, text);
    free(text);
}

/* ---- spawn_process ----------------------------------------------------------------- */

static void spawn_done(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    json_t *pid = json_object_get(result, "pid");
    if (!json_is_integer(pid)) {
        answer_failed(c, err, "cannot start the process");
        return;
    }
    if (c->done) { /* cancelled while the spawn was on its way: nobody has the pid */
        c->pid = json_integer_value(pid);
        send_kill(c);
        return;
    }
    char text[200];
    snprintf(text, sizeof(text),
             "started process %" JSON_INTEGER_FORMAT
             " in sandbox %s; read its output with process_output",
             json_integer_value(pid), c->sandbox);
    mcp_answer(c, json_pack("{s:O, s:s}", "pid", pid, "sandbox", c->sandbox), 0, text);
}

static void spawn_ready(struct call *c)
{
    struct mcp *m = c->m;
    json_t *p = json_object();
    const char *keys[] = {"command", "cwd", "env"};

    c->sandbox = strdup(c->slot->id);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (json_object_get(c->args, keys[i]))
            json_object_set(p, keys[i], json_object_get(c->args, keys[i]));
    json_int_t t = arg_int_or(c, "timeout_ms", m->conf.default_timeout_ms);
    if (t > 0)
        json_object_set_new(p, "timeout_ms", json_integer(t));
    json_object_set_new(p, "sandbox", json_string(c->sandbox));
    /* Nobody follows it: process_output reads what sbxd keeps. */
    json_object_set_new(p, "stream", json_false());
    if (mcp_dcall(c, SBX_M_SPAWN, p, spawn_done) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

void mcp_spawn_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, spawn_ready);
}

/* ---- process_output ---------------------------------------------------------------- */

static void output_attach(struct call *c);

static void output_attached(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    struct mcp *m = c->m;
    c->attaching = 0;
    /* The next reader of this process may go now. */
    for (struct call *o = m->calls; o; o = o->next) {
        if (o->blocked && o->sandbox && o->pid == c->pid &&
            strcmp(o->sandbox, c->sandbox) == 0) {
            o->blocked = 0;
            if (!o->done)
                output_attach(o);
            break;
        }
    }
    if (c->done)
        return;
    if (!result) {
        answer_failed(c, err, "cannot read the process's output");
        return;
    }
    json_int_t next[2];
    const char *offkey[2] = {"stdout_offset", "stderr_offset"};
    const char *startkey[2] = {"stdout_start", "stderr_start"};
    for (int s = 0; s < 2; s++) {
        if (c->at[s] < 0) {
            next[s] = -1 - c->at[s];
        } else {
            json_int_t end = json_integer_value(json_object_get(result, offkey[s]));
            json_int_t start = json_integer_value(json_object_get(result, startkey[s]));
            /* Nothing replayed: a request past the end, or all gone. */
            next[s] = c->at[s] < end ? end : c->at[s];
            if (c->out[s].len == 0 && start > c->at[s] && start <= end)
                c->dropped += start - c->at[s];
            if (next[s] > end)
                next[s] = end;
        }
    }
    msbx_offsets_put(&m->sb, c->sandbox, c->pid, next);
    int running = json_is_true(json_object_get(result, "running"));
    json_t *s = json_pack(
        "{s:I, s:b, s:o, s:o, s:I, s:I, s:b, s:I}", "pid", c->pid, "running", running,
        "stdout", mbuf_string(c->out[0].p, c->out[0].len), "stderr",
        mbuf_string(c->out[1].p, c->out[1].len), "stdout_offset", next[0],
        "stderr_offset", next[1], "truncated", c->truncated, "dropped_bytes", c->dropped);
    if (!running && c->exit) {
        const char *ints[] = {"exit_code", "signal"}, *bools[] = {"timed_out", "killed"};
        for (int i = 0; i < 2; i++) {
            if (json_is_integer(json_object_get(c->exit, ints[i])))
                json_object_set(s, ints[i], json_object_get(c->exit, ints[i]));
            json_object_set_new(
                s, bools[i],
                json_boolean(json_is_true(json_object_get(c->exit, bools[i]))));
        }
    }
    char *text = mcp_exec_text(s);
    mcp_answer(c, s, 0, text);
    free(text);
}

static void output_attach(struct call *c)
{
    struct mcp *m = c->m;
    if (find_proc_call(m, c->sandbox, c->pid, 1, c)) {
        c->blocked = 1; /* one reader per process at a time: their pieces would mix */
        return;
    }
    json_int_t off[2];
    msbx_offsets_get(&m->sb, c->sandbox, c->pid, off);
    off[0] = arg_int_or(c, "stdout_offset", off[0]);
    off[1] = arg_int_or(c, "stderr_offset", off[1]);
    c->at[0] = off[0];
    c->at[1] = off[1];
    c->attaching = 1;
    if (mcp_dcall(c, SBX_M_ATTACH,
                  json_pack("{s:s, s:I, s:I, s:I, s:b}", "sandbox", c->sandbox, "pid",
                            c->pid, "stdout_offset", off[0], "stderr_offset", off[1],
                            "follow", 0),
                  output_attached) < 0) {
        c->attaching = 0;
        mcp_answer_error(c, "cannot reach sbxd");
    }
}

static void output_waited(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    if (c->done)
        return;
    /* Still running after wait_ms (-32001) is fine: read what there is. */
    if (!result && (!err || err->code != SBX_E_STATE)) {
        answer_failed(c, err, "cannot wait for the process");
        return;
    }
    output_attach(c);
}

static void output_ready(struct call *c)
{
    c->sandbox = strdup(c->slot->id);
    c->pid = arg_int_or(c, "pid", -1);
    if (find_proc_call(c->m, c->sandbox, c->pid, 0, c)) {
        mcp_answer_error(c,
                         "process %" JSON_INTEGER_FORMAT
                         " belongs to a running exec_command "
                         "call: its output comes with that call's result",
                         c->pid);
        return;
    }
    json_int_t wait = arg_int_or(c, "wait_ms", 0);
    c->timeout_ms = wait;
    if (wait <= 0) {
        output_attach(c);
        return;
    }
    if (mcp_dcall(c, SBX_M_WAIT,
                  json_pack("{s:s, s:I, s:I}", "sandbox", c->sandbox, "pid", c->pid,
                            "timeout_ms", wait),
                  output_waited) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

void mcp_output_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, output_ready);
}

/* ---- kill_process ------------------------------------------------------------------ */

static void kill_done(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    if (!result) {
        answer_failed(c, err, "cannot kill the process");
        return;
    }
    int gone = json_is_true(json_object_get(result, "already_exited"));
    char text[160];
    snprintf(text, sizeof(text),
             gone ? "process %" JSON_INTEGER_FORMAT " had already exited"
                  : "signalled process %" JSON_INTEGER_FORMAT,
             arg_int_or(c, "pid", 0));
    mcp_answer(
        c,
        json_pack("{s:I, s:b}", "pid", arg_int_or(c, "pid", 0), "already_exited", gone),
        0, text);
}

static void kill_ready(struct call *c)
{
    c->sandbox = strdup(c->slot->id);
    json_t *p =
        json_pack("{s:s, s:I}", "sandbox", c->sandbox, "pid", arg_int_or(c, "pid", 0));
    if (json_object_get(c->args, "signal"))
        json_object_set(p, "signal", json_object_get(c->args, "signal"));
    if (mcp_dcall(c, SBX_M_KILL, p, kill_done) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

void mcp_kill_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, kill_ready);
}

/* ---- sandbox_info ------------------------------------------------------------------ */

static void info_listed(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    if (!result) {
        answer_failed(c, err, "cannot list the processes");
        return;
    }
    json_t *procs = json_object_get(result, "processes");
    struct slot *code = &c->m->sb.code;
    json_t *cj = code->state == SLOT_READY
                     ? json_pack("{s:s, s:s}", "id", code->id, "provider",
                                 code->provider ? code->provider : "")
                     : json_null();
    json_t *s = json_pack("{s:O, s:o, s:o}", "sandbox", c->exit, "processes",
                          json_is_array(procs) ? json_incref(procs) : json_array(),
                          "code_sandbox", cj);
    /* Indented JSON reads well enough for a description of this shape. */
    char *text = json_dumps(s, JSON_INDENT(2));
    mcp_answer(c, s, 0, text);
    free(text);
}

static void info_got(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    if (c->done)
        return;
    if (!json_is_object(result)) {
        answer_failed(c, err, "cannot get the sandbox");
        return;
    }
    c->exit = json_incref(result);
    if (mcp_dcall(c, SBX_M_PLIST, json_pack("{s:s}", "sandbox", c->sandbox),
                  info_listed) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

static void info_ready(struct call *c)
{
    c->sandbox = strdup(c->slot->id);
    if (mcp_dcall(c, SBX_M_GET, json_pack("{s:s}", "id", c->sandbox), info_got) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

void mcp_info_start(struct call *c)
{
    mcp_slot_use(c, &c->m->sb.cmd, info_ready);
}

void mcp_proc_notify(void *data, const char *method, json_t *params)
{
    struct mcp *m = data;
    if (strcmp(method, SBX_N_STARTED) == 0)
        started(m, params);
    else /* not ours: another client's process, or one of a call that is gone */
        route(m, method, params);
}
