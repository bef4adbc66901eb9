/*
 * test_params.c - rpc/params.c (the checks every method makes of its params)
 * and rpc/call.c (how a call is answered): a wrong value answers the call
 * with -32602 {"param": key} once; an absent or null one leaves the default;
 * strings with NUL bytes, integers out of range, non-booleans, encodings and
 * since values are refused; results and errors take the call's id, and a
 * notification's call answers nothing.
 */
#include <stdlib.h>

#include "rpc/call.h"
#include "rpc/params.h"
#include "sbx_proto.h"
#include "testhelp.h"

static json_t *answer; /* what the last call finished with (owned) */
static int finished;

static void finish(struct call *c, json_t *msg)
{
    finished++;
    json_decref(answer);
    answer = msg;
    json_decref(c->id);
    free(c);
}

/* A call with id 1 (or a notification's, without one). */
static struct call *mk(int with_id)
{
    struct call *c = calloc(1, sizeof(*c));
    c->id = with_id ? json_integer(1) : NULL;
    c->finish = finish;
    return c;
}

static const char *bad_param(void)
{
    json_t *e = json_object_get(answer, "error");
    if (json_integer_value(json_object_get(e, "code")) != SBX_E_PARAMS)
        return NULL;
    return json_string_value(json_object_get(json_object_get(e, "data"), "param"));
}

/* Runs check, an expression of __c (the call) and __p (params parsed from
 * text); 1 if it refused naming key and answered the call exactly once. */
#define REFUSES(check, text, key)                                                        \
    ({                                                                                   \
        json_t *__p = json_loads(text, JSON_ALLOW_NUL, NULL);                            \
        struct call *__c = mk(1);                                                        \
        int __f = finished, __r = (check);                                               \
        if (__r == 0)                                                                    \
            finish(__c, NULL);                                                           \
        json_decref(__p);                                                                \
        __r < 0 && finished == __f + 1 && bad_param() && !strcmp(bad_param(), key);      \
    })

static void test_params(void)
{
    const char *s = "unset";
    int64_t n = 7;
    int b = 5;
    enum out_enc enc = ENC_AUTO;
    test_cond("a string that is not one is refused",
              REFUSES(param_str(__c, __p, "id", &s), "{\"id\":3}", "id"));
    test_cond("a string with a NUL byte is refused",
              REFUSES(param_str(__c, __p, "id", &s), "{\"id\":\"a\\u0000b\"}", "id"));
    test_cond("a required string that is absent is refused",
              REFUSES(param_req_str(__c, __p, "id", &s), "{}", "id"));
    test_cond("an integer out of range is refused",
              REFUSES(param_int(__c, __p, "n", 0, 10, &n), "{\"n\":11}", "n"));
    test_cond("a real is not an integer",
              REFUSES(param_int(__c, __p, "n", 0, 10, &n), "{\"n\":1.5}", "n"));
    test_cond("a string is not a boolean",
              REFUSES(param_bool(__c, __p, "b", &b), "{\"b\":\"true\"}", "b"));
    test_cond("an unknown encoding is refused",
              REFUSES(param_encoding(__c, __p, &enc), "{\"output_encoding\":\"latin1\"}",
                      "output_encoding"));
    test_cond("\"auto\" with a NUL after it is refused",
              REFUSES(param_encoding(__c, __p, &enc),
                      "{\"output_encoding\":\"auto\\u0000\"}", "output_encoding"));
    test_cond("a negative since is refused",
              REFUSES(param_since(__c, __p, &n), "{\"since\":-1}", "since"));
    test_cond("a since past 2262 is refused",
              REFUSES(param_since(__c, __p, &n), "{\"since\":1e12}", "since"));

    json_t *p = json_loads("{\"id\":\"x\",\"n\":null,\"b\":true,\"output_encoding\":"
                           "\"auto\",\"since\":1.5}",
                           0, NULL);
    struct call *c = mk(1);
    n = 7;
    int ok = param_str(c, p, "id", &s) == 0 && !strcmp(s, "x") &&
             param_int(c, p, "n", 0, 10, &n) == 0 && n == 7 &&
             param_bool(c, p, "b", &b) == 0 && b == 1 &&
             param_encoding(c, p, &enc) == 0 && enc == ENC_AUTO;
    test_cond("good values are taken; null leaves the default", ok);
    test_cond("since in seconds is kept to the nanosecond",
              param_since(c, p, &n) == 0 && n == 1500000000);
    test_cond("param_str of an absent key is NULL",
              param_str(c, p, "none", &s) == 0 && s == NULL);
    test_eq_int("and nothing was answered", finished, 10);
    finish(c, NULL);
    json_decref(p);
}

static void test_answers(void)
{
    struct call *c = mk(1);
    call_reply(c, json_pack("{s:i}", "x", 1));
    test_cond("a result takes the call's id",
              json_integer_value(json_object_get(answer, "id")) == 1 &&
                  json_integer_value(
                      json_object_get(json_object_get(answer, "result"), "x")) == 1);
    c = mk(1);
    call_reply(c, NULL);
    test_cond("no result is {}",
              json_is_object(json_object_get(answer, "result")) &&
                  json_object_size(json_object_get(answer, "result")) == 0);
    c = mk(1);
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_NOT_FOUND, json_pack("{s:s}", "id", "x"), "no sandbox x");
    call_fail(c, &err);
    json_t *e = json_object_get(answer, "error");
    test_cond(
        "an error carries code, message and data",
        json_integer_value(json_object_get(e, "code")) == SBX_E_NOT_FOUND &&
            !strcmp(json_string_value(json_object_get(e, "message")), "no sandbox x") &&
            !strcmp(json_string_value(json_object_get(json_object_get(e, "data"), "id")),
                    "x") &&
            !err.msg && !err.data);
    c = mk(1);
    call_fail(c, &err);
    test_eq_int(
        "an error without a code is -32603",
        json_integer_value(json_object_get(json_object_get(answer, "error"), "code")),
        SBX_E_INTERNAL);
    c = mk(0);
    call_error(c, SBX_E_PARAMS, json_pack("{s:s}", "param", "x"), "bad %s", "x");
    test_cond("a notification's call answers nothing", answer == NULL);
    json_t *r = call_error_response(NULL, SBX_E_PARSE, NULL, NULL);
    test_cond("an error response without id has id null and data {}",
              json_is_null(json_object_get(r, "id")) &&
                  json_is_object(json_object_get(json_object_get(r, "error"), "data")));
    json_decref(r);
}

int main(void)
{
    test_params();
    test_answers();
    json_decref(answer);
    return test_report();
}
