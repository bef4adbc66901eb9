/*
 * test_rpc.c - daemon/rpc/ (rpc.c framing, call.c answers, api.c dispatch)
 * through the fake-provider kit: a request line goes in on a connection
 * without a socket, the JSON-RPC answer comes out. Ids of every kind, parse
 * errors, invalid requests, unknown methods, params that are not an object,
 * a NUL in a method name, batches (order, notifications, empty, all
 * notifications), replies over the connection's room (-32005), draining,
 * another uid's sandbox (-32000, untouched), and calls that finish later
 * or after their client left.
 */
#include <signal.h>
#include <stdlib.h>

#include "fakeprov.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"

static long long code_of(json_t *msg)
{
    return json_integer_value(json_object_get(json_object_get(msg, "error"), "code"));
}
static json_t *result_of(json_t *msg)
{
    return json_object_get(msg, "result");
}
static json_t *data_of(json_t *msg)
{
    return json_object_get(json_object_get(msg, "error"), "data");
}
static const char *str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

#define REQ(id, method, params)                                                          \
    "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"" method "\",\"params\":" params "}"

static void test_ids(struct fakeconn *c)
{
    json_t *m = fakeconn_line(c, REQ("1", "daemon.ping", "{}"));
    test_cond("a request is answered with its id and a result",
              m && json_integer_value(json_object_get(m, "id")) == 1 && result_of(m) &&
                  !strcmp(str(m, "jsonrpc"), "2.0") && !json_object_get(m, "error"));
    m = fakeconn_line(c, REQ("\"abc\"", "daemon.ping", "{}"));
    test_eq_str("a string id comes back as it was", str(m, "id"), "abc");
    m = fakeconn_line(c, REQ("null", "daemon.ping", "{}"));
    test_cond("a null id is answered with null",
              m && json_is_null(json_object_get(m, "id")));
    m = fakeconn_line(c, REQ("{\"x\":1}", "daemon.ping", "{}"));
    test_cond("an object id is an invalid request, answered with id null",
              code_of(m) == SBX_E_INVALID_REQUEST &&
                  json_is_null(json_object_get(m, "id")));
    size_t n = fakeconn_count(c);
    m = fakeconn_line(c, "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"}");
    test_cond("a notification gets no answer", m == NULL && fakeconn_count(c) == n);
    test_cond("blank and CRLF lines are nothing",
              fakeconn_line(c, "  \r") == NULL && fakeconn_count(c) == n);
    m = fakeconn_line(c, REQ("5", "daemon.ping", "{}") "\r");
    test_eq_int("a CRLF-ended request is answered",
                json_integer_value(json_object_get(m, "id")), 5);
}

static void test_errors(struct fakeconn *c)
{
    json_t *m = fakeconn_line(c, "{\"jsonrpc\":\"2.0\",\"id\":1,");
    test_cond("bad JSON: -32700 with id null and where it broke",
              code_of(m) == SBX_E_PARSE && json_is_null(json_object_get(m, "id")) &&
                  json_is_integer(json_object_get(data_of(m), "position")));
    char deep[400];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof(deep),
                          "{\"jsonrpc\":\"2.0\",\"id\":2,\"params\":{\"a\":");
    for (int i = 0; i < SBX_MAX_JSON_DEPTH + 2; i++)
        deep[k++] = '[';
    for (int i = 0; i < SBX_MAX_JSON_DEPTH + 2; i++)
        deep[k++] = ']';
    snprintf(deep + k, sizeof(deep) - k, "},\"method\":\"daemon.ping\"}");
    m = fakeconn_line(c, deep);
    test_cond("nesting past the limit: -32700 nesting too deep",
              code_of(m) == SBX_E_PARSE &&
                  strstr(str(json_object_get(m, "error"), "message"), "deep"));
    m = fakeconn_line(c, "7");
    test_eq_int("a bare value is an invalid request", code_of(m), SBX_E_INVALID_REQUEST);
    m = fakeconn_line(c, "{\"jsonrpc\":\"1.0\",\"id\":3,\"method\":\"daemon.ping\"}");
    test_cond("jsonrpc other than 2.0 is an invalid request, with its id",
              code_of(m) == SBX_E_INVALID_REQUEST &&
                  json_integer_value(json_object_get(m, "id")) == 3);
    m = fakeconn_line(c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":7}");
    test_eq_int("a method that is not a string is invalid", code_of(m),
                SBX_E_INVALID_REQUEST);
    m = fakeconn_line(c, REQ("5", "no.such", "{}"));
    test_cond("an unknown method: -32601 naming it",
              code_of(m) == SBX_E_METHOD &&
                  !strcmp(str(data_of(m), "method"), "no.such"));
    m = fakeconn_line(c, REQ("6", "daemon.ping", "[1]"));
    test_cond("params that are an array: -32602 naming params",
              code_of(m) == SBX_E_PARAMS && !strcmp(str(data_of(m), "param"), "params"));
    m = fakeconn_line(c, REQ("7", "daemon.ping", "3"));
    test_eq_int("params that are a number: invalid request", code_of(m),
                SBX_E_INVALID_REQUEST);
    m = fakeconn_line(
        c, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"daemon.ping\\u0000x\"}");
    test_cond("a NUL in a method name does not run the method before it",
              code_of(m) == SBX_E_PARAMS && !strcmp(str(data_of(m), "param"), "method"));
}

static void test_batches(struct fakeconn *c)
{
    json_t *m = fakeconn_line(c, "[]");
    test_cond("an empty batch is one invalid request",
              code_of(m) == SBX_E_INVALID_REQUEST);
    m = fakeconn_line(
        c, "[" REQ("1", "daemon.ping",
                   "{}") ","
                         "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"},7," REQ(
                             "3", "nope", "{}") "]");
    test_cond("a batch is answered as one array, notifications left out",
              json_is_array(m) && json_array_size(m) == 3);
    test_cond("in the members' order, each with its own answer",
              json_integer_value(json_object_get(json_array_get(m, 0), "id")) == 1 &&
                  result_of(json_array_get(m, 0)) &&
                  code_of(json_array_get(m, 1)) == SBX_E_INVALID_REQUEST &&
                  json_integer_value(json_object_get(json_array_get(m, 2), "id")) == 3 &&
                  code_of(json_array_get(m, 2)) == SBX_E_METHOD);
    size_t n = fakeconn_count(c);
    m = fakeconn_line(c, "[{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"},"
                         "{\"jsonrpc\":\"2.0\",\"method\":\"daemon.ping\"}]");
    test_cond("a batch of notifications gets no answer at all",
              m == NULL && fakeconn_count(c) == n);
    /* Long enough to be dispatched in slices. */
    size_t members = 2000, cap = members * 64 + 8, len = 1;
    char *big = malloc(cap);
    big[0] = '[';
    for (size_t i = 0; i < members; i++)
        len += (size_t)snprintf(big + len, cap - len,
                                "%s" REQ("%zu", "daemon.ping", "{}"), i ? "," : "", i);
    snprintf(big + len, cap - len, "]");
    m = fakeconn_line(c, big);
    free(big);
    int in_order = json_array_size(m) == members;
    for (size_t i = 0; in_order && i < members; i++)
        in_order = json_integer_value(json_object_get(json_array_get(m, i), "id")) ==
                   (json_int_t)i;
    test_cond("a 2000-member batch is answered whole and in order", in_order);
}

static void test_room_and_drain(struct fakeconn *c)
{
    c->room = 20;
    json_t *m = fakeconn_line(c, REQ("1", "daemon.info", "{}"));
    test_cond("a reply over the connection's room: -32005 naming the limit",
              code_of(m) == SBX_E_LIMIT &&
                  !strcmp(str(data_of(m), "limit"), "session_output_hard") &&
                  json_integer_value(json_object_get(m, "id")) == 1);
    m = fakeconn_line(c, "[" REQ("2", "daemon.info", "{}") "]");
    test_cond("a batch whose errors do not fit either: one -32005 for it, id null",
              code_of(m) == SBX_E_LIMIT && json_is_null(json_object_get(m, "id")));
    c->room = 64u << 20;
    m = fakeconn_line(c, REQ("2", "daemon.info", "{}"));
    char *info = json_dumps(m, JSON_COMPACT);
    /* Room for two errors, not for two answers. */
    c->room = strlen(info) + 50;
    free(info);
    m = fakeconn_line(
        c, "[" REQ("2", "daemon.info", "{}") "," REQ("3", "daemon.info", "{}") "]");
    test_cond("a batch over the room: each member gets a -32005 of its own",
              json_array_size(m) == 2 && code_of(json_array_get(m, 0)) == SBX_E_LIMIT &&
                  code_of(json_array_get(m, 1)) == SBX_E_LIMIT &&
                  json_integer_value(json_object_get(json_array_get(m, 1), "id")) == 3);
    c->room = 64u << 20;
    D->draining = 1;
    m = fakeconn_line(c, REQ("4", "sandbox.list", "{}"));
    test_eq_int("while draining a call is -32008", code_of(m), SBX_E_SHUTDOWN);
    m = fakeconn_line(c, REQ("5", "daemon.ping", "{}"));
    test_cond("but a ping still answers", result_of(m) != NULL);
    D->draining = 0;
}

static void test_ownership(struct fakeconn *c)
{
    struct sandbox *theirs = fakeprov_sandbox("theirs", 2000, NULL);
    test_cond("another uid's sandbox runs", theirs && theirs->status == SB_RUNNING);
    static const char *const calls[] = {
        REQ("1", "sandbox.get", "{\"id\":\"theirs\"}"),
        REQ("2", "sandbox.destroy", "{\"id\":\"theirs\"}"),
        REQ("3", "sandbox.stop", "{\"id\":\"theirs\"}"),
        REQ("4", "process.exec", "{\"sandbox\":\"theirs\",\"command\":\"out hi\"}"),
        REQ("5", "sandbox.snapshot", "{\"id\":\"theirs\"}"),
    };
    int all = 1;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
        json_t *m = fakeconn_line(c, calls[i]);
        if (code_of(m) != SBX_E_NOT_FOUND) {
            all = 0;
            printf("      %s: %lld\n", calls[i], code_of(m));
        }
    }
    test_cond("get, destroy, stop, exec, snapshot of it are all -32000", all);
    test_cond("and it was not touched",
              sandbox_find_any("theirs") && theirs->status == SB_RUNNING &&
                  fakeprov.n_spawn == 0 && fakeprov.n_stop == 0);
    json_t *m = fakeconn_line(c, REQ("6", "sandbox.list", "{}"));
    char *t = json_dumps(result_of(m), 0);
    test_cond("sandbox.list leaves it out", t && !strstr(t, "theirs"));
    free(t);
    m = fakeconn_line(c, REQ("7", "sandbox.create", "{\"id\":\"theirs\"}"));
    test_cond("creating with its id is refused, not a reconnect",
              code_of(m) != 0 && !result_of(m) && theirs->owner == 2000);
    struct fakeconn admin;
    fakeconn_init(&admin, 0, 1);
    m = fakeconn_line(&admin, REQ("8", "sandbox.get", "{\"id\":\"theirs\"}"));
    test_cond("an admin sees it",
              result_of(m) && !strcmp(str(result_of(m), "id"), "theirs"));
    fakeconn_deinit(&admin);
    sandbox_destroy(theirs, NULL, NULL);
    fakeprov_spin(2);
    int leaked = 0;
    for (size_t i = 0; i < fakeconn_count(c); i++) {
        json_t *p = json_object_get(json_array_get(c->got, i), "params");
        leaked |= str(p, "sandbox") && !strcmp(str(p, "sandbox"), "theirs");
    }
    test_cond("its status changes are never sent to another uid", !leaked);
}

static void test_through_provider(struct fakeconn *c)
{
    fakeprov_reset();
    json_t *m = fakeconn_line(c, REQ("1", "sandbox.create", "{\"id\":\"mine\"}"));
    test_cond("sandbox.create through the provider: running, the caller's",
              result_of(m) && !strcmp(str(result_of(m), "status"), "running") &&
                  fakeprov.n_start == 1);
    json_t *note = fakeconn_notification(c, "sandbox.status");
    test_cond("and its owner's connection hears sandbox.status running",
              note && !strcmp(str(json_object_get(note, "params"), "sandbox"), "mine") &&
                  !strcmp(str(json_object_get(note, "params"), "status"), "running"));
    m = fakeconn_line(
        c, REQ("2", "process.exec", "{\"sandbox\":\"mine\",\"command\":\"out hi\"}"));
    test_cond("process.exec answers with the exit and the output",
              result_of(m) && !strcmp(str(result_of(m), "stdout"), "hi") &&
                  json_integer_value(json_object_get(result_of(m), "exit_code")) == 0);
    fakeprov.defer = 1;
    size_t n = fakeconn_answers(c);
    m = fakeconn_line(c, REQ("3", "sandbox.stop", "{\"id\":\"mine\"}"));
    test_cond("a provider op still under way: no answer yet",
              fakeconn_answers(c) == n && fakeprov.npending == 1);
    fakeprov_finish(SBX_E_PROVIDER, "backend said no");
    fakeprov_spin(3);
    m = fakeconn_last_answer(c);
    test_cond("its failure answers the call, in the provider's words",
              fakeconn_answers(c) == n + 1 && code_of(m) == SBX_E_PROVIDER &&
                  strstr(str(json_object_get(m, "error"), "message"), "backend said no"));

    /* A call whose client leaves before the provider answers. */
    struct fakeconn gone;
    fakeconn_init(&gone, getuid(), 0);
    fakeconn_line(&gone, REQ("4", "sandbox.stop", "{\"id\":\"mine\"}"));
    fakeconn_deinit(&gone);
    fakeprov.defer = 0;
    test_eq_int("a call outlives its client: the op still ends", fakeprov_finish(0, NULL),
                0);
    fakeprov_spin(3);
    struct sandbox *sb = sandbox_find_any("mine");
    test_cond("and the sandbox is where the op left it", sb && sb->status == SB_STOPPED);
    m = fakeconn_line(c, REQ("5", "sandbox.destroy", "{\"id\":\"mine\"}"));
    test_cond("destroy answers", result_of(m) && !sandbox_find_any("mine"));
}

/* conn.c: the registry of connections and whole messages written to one. */
static void test_conn(struct fakeconn *c)
{
    test_cond("a live connection is found by its id", conn_by_id(c->k.id) == &c->k);
    c->k.closing = 1;
    test_cond("a closing one is not", conn_by_id(c->k.id) == NULL);
    c->k.closing = 0;
    test_cond("an unknown id is nobody", conn_by_id(c->k.id + 12345) == NULL);
    size_t n = fakeconn_count(c);
    conn_notify(&c->k, "test.note", json_pack("{s:i}", "x", 1));
    json_t *m = json_array_get(c->got, n);
    test_cond(
        "a notification: jsonrpc, method and params, no id",
        fakeconn_count(c) == n + 1 && !strcmp(str(m, "jsonrpc"), "2.0") &&
            !strcmp(str(m, "method"), "test.note") &&
            json_integer_value(json_object_get(json_object_get(m, "params"), "x")) == 1 &&
            !json_object_get(m, "id"));
    conn_notify(&c->k, "test.empty", NULL);
    m = json_array_get(c->got, n + 1);
    test_cond("without params it has an empty object",
              json_is_object(json_object_get(m, "params")) &&
                  json_object_size(json_object_get(m, "params")) == 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fakeprov_setup();
    struct fakeconn c;
    fakeconn_init(&c, getuid(), 0);
    test_conn(&c);
    test_ids(&c);
    test_errors(&c);
    test_batches(&c);
    test_room_and_drain(&c);
    test_ownership(&c);
    test_through_provider(&c);
    fakeconn_deinit(&c);
    fakeprov_teardown();
    return test_report();
}
