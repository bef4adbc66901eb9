/*
 * test_api_process.c - rpc/api_process.c (the process.* methods) through the
 * kit's connection and provider: spawn answers the pid and streams
 * process.output / process.exit to the caller, write reaches the provider's
 * stdin (text or base64), kill takes signal names, a finished process
 * refuses writes (-32001), an unknown pid is -32004, an unknown sandbox and
 * another uid's are -32000, a bad signal or data is -32602.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "fakeprov.h"
#include "sbx_proto.h"
#include "testhelp.h"

static long long code_of(json_t *m)
{
    return json_integer_value(json_object_get(json_object_get(m, "error"), "code"));
}
static json_t *res(json_t *m)
{
    return json_object_get(m, "result");
}

static json_t *call(struct fakeconn *c, const char *method, const char *params)
{
    char line[1024];
    snprintf(line, sizeof(line),
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}", method,
             params);
    return fakeconn_line(c, line);
}

static void test_spawn_write_kill(struct fakeconn *c)
{
    json_t *m = call(c, "process.spawn", "{\"sandbox\":\"p1\",\"command\":\"run\"}");
    long long pid = json_integer_value(json_object_get(res(m), "pid"));
    test_cond("spawn answers a pid", pid > 0 && fakeprov.n_spawn == 1);
    char p[200];
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld,\"data\":\"hi\\n\"}", pid);
    m = call(c, "process.write", p);
    test_cond("write says how much went, the provider got it",
              json_integer_value(json_object_get(res(m), "written")) == 3 &&
                  fakeprov.stdin_len == 3 && !memcmp(fakeprov.stdin_bytes, "hi\n", 3));
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld,\"data_b64\":\"AP8=\"}",
             pid);
    m = call(c, "process.write", p);
    test_cond("base64 data is written as bytes",
              json_integer_value(json_object_get(res(m), "written")) == 2 &&
                  fakeprov.stdin_len == 5 &&
                  (unsigned char)fakeprov.stdin_bytes[4] == 0xff);
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld,\"data_b64\":\"*\"}", pid);
    test_eq_int("bad base64 is -32602", code_of(call(c, "process.write", p)),
                SBX_E_PARAMS);
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld}", pid);
    test_eq_int("no data is -32602", code_of(call(c, "process.write", p)), SBX_E_PARAMS);
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld,\"signal\":\"NOPE\"}", pid);
    test_eq_int("an unknown signal is -32602", code_of(call(c, "process.kill", p)),
                SBX_E_PARAMS);
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld,\"signal\":\"TERM\"}", pid);
    m = call(c, "process.kill", p);
    json_t *ex = fakeconn_notification(c, "process.exit");
    test_cond("kill TERM reaches the provider as SIGTERM",
              res(m) && fakeprov.n_kill == 1 && fakeprov.last_signal == SIGTERM);
    test_cond("and the spawner hears process.exit with the signal",
              ex && json_integer_value(json_object_get(json_object_get(ex, "params"),
                                                       "exit_code")) == 128 + SIGTERM);
    snprintf(p, sizeof(p), "{\"sandbox\":\"p1\",\"pid\":%lld,\"data\":\"x\"}", pid);
    test_eq_int("a finished process takes no input: -32001",
                code_of(call(c, "process.write", p)), SBX_E_STATE);
    test_eq_int("an unknown pid is -32004",
                code_of(call(c, "process.write",
                             "{\"sandbox\":\"p1\",\"pid\":99999,"
                             "\"data\":\"x\"}")),
                SBX_E_NO_PROCESS);
}

static void test_output_stream(struct fakeconn *c)
{
    size_t before = fakeconn_count(c);
    json_t *m =
        call(c, "process.spawn", "{\"sandbox\":\"p1\",\"command\":\"out hello\"}");
    int got_output = 0;
    for (size_t i = before; i < fakeconn_count(c); i++) {
        json_t *n = json_array_get(c->got, i);
        const char *meth = json_string_value(json_object_get(n, "method"));
        json_t *d = json_object_get(json_object_get(n, "params"), "data");
        got_output |= meth && !strcmp(meth, "process.output") && json_is_string(d) &&
                      !strcmp(json_string_value(d), "hello");
    }
    test_cond("a spawned process's output streams to its spawner as process.output",
              res(m) && got_output);
}

static void test_not_yours(struct fakeconn *c)
{
    fakeprov_sandbox("p2", 2000, NULL);
    test_eq_int(
        "spawn in an unknown sandbox is -32000",
        code_of(call(c, "process.spawn", "{\"sandbox\":\"nope\",\"command\":\"x\"}")),
        SBX_E_NOT_FOUND);
    int spawns = fakeprov.n_spawn;
    test_eq_int(
        "spawn in another uid's sandbox is -32000",
        code_of(call(c, "process.spawn", "{\"sandbox\":\"p2\",\"command\":\"x\"}")),
        SBX_E_NOT_FOUND);
    test_eq_int("and nothing ran there", fakeprov.n_spawn, spawns);
    test_eq_int("process.list of it is -32000",
                code_of(call(c, "process.list", "{\"sandbox\":\"p2\"}")),
                SBX_E_NOT_FOUND);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fakeprov_setup();
    struct fakeconn c;
    fakeconn_init(&c, 1000, 0);
    fakeprov_sandbox("p1", 1000, NULL);
    test_spawn_write_kill(&c);
    test_output_stream(&c);
    test_not_yours(&c);
    fakeconn_deinit(&c);
    fakeprov_teardown();
    return test_report();
}
