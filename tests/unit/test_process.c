/*
 * test_process.c - daemon/core/process.c with the kit's provider (fakeprov.h):
 * a tool call from a process reaches the events table only for a tool of
 * its sandbox (else the provider gets the error at once), the answer goes
 * back to the provider as {call, result} or {call, error}; output counts
 * towards the retained bytes and touches the sandbox; an exit reaches the
 * followers as a typed exit note.
 */
#include <signal.h>

#include "daemon.h"
#include "fakeprov.h"
#include "core/events.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"

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

static int reply_error_code(void)
{
    return (int)json_integer_value(
        json_object_get(json_object_get(fakeprov.tool_reply, "error"), "code"));
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
                  json_integer_value(json_object_get(fakeprov.tool_reply, "call")) == 2);
    process_tool_call(p, 3, "lookup", NULL);
    test_cond("a tool of the sandbox goes to the events table",
              tool_calls == 1 && strcmp(tool_name, "lookup") == 0);
    process_tool_result(p, 3, json_integer(42), 0, NULL, NULL);
    test_cond("its answer reaches the provider as {call, result}",
              json_integer_value(json_object_get(fakeprov.tool_reply, "call")) == 3 &&
                  json_integer_value(json_object_get(fakeprov.tool_reply, "result")) ==
                      42);
    process_tool_result(p, 4, NULL, SBX_E_TOOL, "it broke", "TypeError");
    json_t *e = json_object_get(fakeprov.tool_reply, "error");
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
    fakeprov_setup();
    struct sandbox *sb =
        fakeprov_sandbox("p1", 0, json_pack("{s:[s]}", "tools", "lookup"));
    struct process *p = sb ? fakeprov_process(sb, "run") : NULL;
    test_cond("a running process", p && p->state == P_RUNNING);
    if (p) {
        test_tool_calls(p);
        test_output_and_exit(sb, p);
    }
    core_events_set(NULL);
    fakeprov_teardown();
    return test_report();
}
