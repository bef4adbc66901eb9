/*
 * test_process.c - daemon/core/process.c with a provider of a few lines:
 * a tool call from a process reaches the events table only for a tool of
 * its sandbox (else the provider gets the error at once), the answer goes
 * back to the provider as {call, result} or {call, error}; output counts
 * towards the retained bytes and touches the sandbox; an exit reaches the
 * followers as a typed exit note.
 */
#include <signal.h>

#include "daemon.h"
#include "core/events.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"

static json_t *last_reply; /* what the provider got through proc_tool_result */

static int f_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static int f_available(void *cookie, const char **reason)
{
    return 1;
}
static int f_op(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
static int f_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    return 0;
}
static int f_write(void *c, struct process *p, const void *d, size_t n, sbx_err_t *e)
{
    return 0;
}
static int f_close(void *c, struct process *p, sbx_err_t *e)
{
    return 0;
}
static int f_kill(void *c, struct process *p, int sig, sbx_err_t *e)
{
    json_t *rec = json_pack("{s:i, s:i}", "exit_code", 128 + sig, "signal", sig);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}
static void f_tool_result(void *c, struct process *p, json_t *reply)
{
    json_decref(last_reply);
    last_reply = json_incref(reply);
}

static const struct sbx_provider fake = {
    .name = "fake",
    .load = f_load,
    .available = f_available,
    .sb_start = f_op,
    .sb_stop = f_op,
    .sb_destroy = f_op,
    .proc_spawn = f_spawn,
    .proc_write = f_write,
    .proc_close_stdin = f_close,
    .proc_kill = f_kill,
    .proc_tool_result = f_tool_result,
};

/* The events the process module sends. */
static int tool_calls, exits, exit_code, exit_killed;
static char tool_name[32];
static void ev_tool_call(struct process *p, int64_t call, const char *name, json_t *args)
{
    tool_calls++;
    snprintf(tool_name, sizeof(tool_name), "%s", name);
}
static void ev_exit(struct process *p, const struct exit_note *e)
{
    exits++;
    exit_code = e->exit_code;
    exit_killed = e->killed;
}
static const struct core_events test_events = {.tool_call = ev_tool_call,
                                               .exit = ev_exit};

static struct daemon d;

static void setup(void)
{
    D = &d;
    config_init_defaults(&d.cfg);
    d.loop = EV_DEFAULT;
    d.snapshots = json_object();
    d.providers[0].ops = &fake;
    d.providers[0].enabled = 1;
    d.providers[0].loaded = 1;
    d.nproviders = 1;
}

static struct process *spawn(struct sandbox *sb)
{
    json_t *cmd = json_string("run");
    struct proc_opts o = {.command = cmd};
    struct process *p = NULL;
    sbx_err_t err = {0};
    if (process_new(&p, sb, &o, &err) < 0 || process_launch(p, &err) < 0)
        p = NULL;
    err_clear(&err);
    json_decref(cmd);
    return p;
}

static int reply_error_code(void)
{
    return (int)json_integer_value(
        json_object_get(json_object_get(last_reply, "error"), "code"));
}

static void test_tool_calls(struct process *p)
{
    core_events_set(NULL);
    process_tool_call(p, 1, "lookup", NULL);
    test_cond("no events table: the provider gets a tool error at once",
              reply_error_code() == SBX_E_TOOL && tool_calls == 0);
    core_events_set(&test_events);
    process_tool_call(p, 2, "nope", NULL);
    test_cond("a tool the sandbox does not have: the error, no event",
              reply_error_code() == SBX_E_TOOL && tool_calls == 0 &&
                  json_integer_value(json_object_get(last_reply, "call")) == 2);
    process_tool_call(p, 3, "lookup", NULL);
    test_cond("a tool of the sandbox goes to the events table",
              tool_calls == 1 && strcmp(tool_name, "lookup") == 0);
    process_tool_result(p, 3, json_integer(42), 0, NULL, NULL);
    test_cond("its answer reaches the provider as {call, result}",
              json_integer_value(json_object_get(last_reply, "call")) == 3 &&
                  json_integer_value(json_object_get(last_reply, "result")) == 42);
    process_tool_result(p, 4, NULL, SBX_E_TOOL, "it broke", "TypeError");
    json_t *e = json_object_get(last_reply, "error");
    test_cond(
        "a failed answer carries code, message and the Error's name",
        e && strcmp(json_string_value(json_object_get(e, "name")), "TypeError") == 0 &&
            strcmp(json_string_value(json_object_get(e, "message")), "it broke") == 0);
}

static void test_output_and_exit(struct sandbox *sb, struct process *p)
{
    size_t r0 = process_retained_total();
    sb->last_activity = 0;
    process_output(p, SBX_STREAM_STDOUT, "hello", 5);
    test_cond("output is counted in the retained bytes",
              process_retained_total() > r0 && p->out[0].total == 5);
    test_cond("output touches the sandbox (idle timer)", sb->last_activity > 0);
    process_output(p, 7, "x", 1);
    test_eq_int("an unknown stream is ignored", p->out[0].total + p->out[1].total, 5);

    struct follower f = {0};
    process_subscribe(p, &f, ENC_UTF8, 0);
    sbx_err_t err = {0};
    process_kill(p, SIGTERM, &err);
    test_cond("the exit reaches the followers as a typed note",
              exits == 1 && exit_code == 128 + SIGTERM && exit_killed == 1 &&
                  f.subs == NULL);
    process_output(p, SBX_STREAM_STDOUT, "late", 4);
    test_eq_int("output after the exit is dropped", p->out[0].total, 5);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setup();
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    sandbox_new(&sb, "p1", &d.providers[0], 0,
                json_pack("{s:i, s:i, s:i, s:[s]}", "timeout_ms", 60000,
                          "idle_timeout_ms", 0, "command_timeout_ms", 60000, "tools",
                          "lookup"),
                &err);
    sandbox_start(sb, NULL, NULL);
    struct process *p = spawn(sb);
    test_cond("a running process", p && p->state == P_RUNNING);
    if (p) {
        test_tool_calls(p);
        test_output_and_exit(sb, p);
    }
    core_events_set(NULL);
    json_decref(last_reply);
    sandbox_free_all();
    json_decref(d.snapshots);
    config_deinit(&d.cfg);
    return test_report();
}
