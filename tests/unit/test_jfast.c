/*
 * test_jfast.c - daemon/rpc/jfast.c: the request shapes it takes give the
 * value json_loadb gives (same bytes when encoded, keys in the same order),
 * and everything else is left to jansson (NULL), so a malformed line still
 * gets jansson's parse error; jfast_dumps writes json_dumps's bytes.
 * tests/fuzz/fuzz_jfast.c checks the same on random input.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/jfast.h"
#include "sbx_proto.h"
#include "testhelp.h"

/* 1: jfast took it and agrees with jansson; 0: it gave up; -1: it disagrees. */
static int verdict(const char *text, size_t len)
{
    json_t *f = jfast_load(text, len);
    if (!f)
        return 0;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    char *a = json_dumps(f, JSON_COMPACT | JSON_ENCODE_ANY);
    char *b = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    int ok = j && json_equal(f, j) && a && b && strcmp(a, b) == 0;
    free(a);
    free(b);
    json_decref(f);
    json_decref(j);
    return ok ? 1 : -1;
}

static void taken(const char *descr, const char *text)
{
    test_eq_int(descr, verdict(text, strlen(text)), 1);
}

static void left(const char *descr, const char *text)
{
    test_eq_int(descr, verdict(text, strlen(text)), 0);
}

/* jfast_dumps(v) is json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY), byte for byte. */
static void same_text(const char *descr, json_t *v)
{
    size_t len = 99;
    char *a = jfast_dumps(v, &len);
    char *b = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    test_cond(descr, a && b && strcmp(a, b) == 0 && len == strlen(b));
    free(a);
    free(b);
    json_decref(v);
}

static void test_dumps(void)
{
    same_text("a ping's result and a reply around it",
              json_pack("{s:s, s:i, s:{s:b, s:s}}", "jsonrpc", "2.0", "id", 7, "result",
                        "pong", 1, "time", "2026-12-01T19:00:00.123Z"));
    same_text("every literal, negative and extreme integers, empty containers",
              json_pack("[b, b, n, I, I, I, {}, []]", 1, 0, (json_int_t)-42,
                        (json_int_t)INT64_MAX, (json_int_t)INT64_MIN));
    same_text("escapes: quotes, backslashes, the short ones, other control bytes",
              json_stringn("a\"b\\c\b\f\n\r\t\x01\x1f\x7f/d\0e", 17));
    same_text("reals as jansson prints them",
              json_pack("[f, f, f, f, f, f, f]", 0.0, -0.0, 1.0, 3.6547183990478516,
                        1e300, 1.5e-7, 123456789012345678.0));
    same_text("UTF-8 in a value and in a key (left to jansson)",
              json_pack("{s:s, s:i}", "a", "\xc3\xa9t\xc3\xa9", "cl\xc3\xa9", 1));
    same_text("members in insertion order",
              json_pack("{s:i, s:i, s:i, s:[{s:n}]}", "z", 1, "a", 2, "m", 3, "k", "x"));
    json_t *deep = json_array();
    for (int i = 0; i < SBX_MAX_JSON_DEPTH + 3; i++) {
        json_t *up = json_array();
        json_array_append_new(up, deep);
        deep = up;
    }
    same_text("nesting past the depth limit (left to jansson)", deep);
    size_t len = 5;
    test_cond("NULL gives NULL and 0", !jfast_dumps(NULL, &len) && len == 0);
}

int main(void)
{
    test_dumps();
    taken("a ping", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\"}");
    taken("an exec with params, arrays and literals",
          "{\"jsonrpc\":\"2.0\",\"id\":\"a-b\",\"method\":\"process.exec\",\"params\":"
          "{\"sandbox\":\"s\",\"argv\":[\"x\",-3,0,true,false,null],\"env\":{}}}");
    taken("a batch", "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"daemon.ping\"},"
                     "{\"jsonrpc\":\"2.0\",\"method\":\"x\"}]");
    taken("whitespace everywhere JSON allows it",
          " \t{ \"a\" :\r[ 1 , { } ] ,\"b\":[]} ");
    taken("a duplicate key: the last one wins, as in jansson",
          "{\"a\":1,\"b\":2,\"a\":3}");
    taken("the largest integer it reads (18 digits)", "[999999999999999999,-0,-17]");
    taken("a top-level scalar", "\"plain\"");
    taken("an empty key and string", "{\"\":\"\"}");

    left("a string with an escape", "{\"a\":\"\\n\"}");
    left("a string with UTF-8", "{\"a\":\"\xc3\xa9\"}");
    left("a string with a control byte", "{\"a\":\"\x01\"}");
    left("a real", "{\"id\":1.5}");
    left("an exponent", "{\"id\":1e3}");
    left("an integer of 19 digits", "{\"id\":1234567890123456789}");
    left("a run of digits far past 18 (no overflow on the way)",
         "{\"x\":199999999999999999999999999999999999999999999999999999999997}");
    left("a leading zero", "{\"id\":01}");
    left("a lone minus", "[-]");
    left("a trailing comma in an object", "{\"a\":1,}");
    left("a trailing comma in an array", "[1,]");
    left("a bare word", "[tru]");
    left("a literal run into a letter", "[truex]");
    left("text after the value", "{\"a\":1} x");
    left("two values", "{} {}");
    left("an unterminated string", "{\"a\":\"b");
    left("an unterminated object", "{\"a\":1");
    left("a key that is not a string", "{a:1}");
    left("a missing colon", "{\"a\" 1}");
    left("an empty line", "");
    left("only whitespace", "   ");
    test_eq_int("a NUL byte inside", verdict("[1,\0 2]", 6), 0);

    /* Nesting: up to SBX_MAX_JSON_DEPTH it builds the tree; past it, jansson
     * parses and the daemon's depth check refuses it as before. */
    char deep[2 * (SBX_MAX_JSON_DEPTH + 2) + 1];
    for (int n = SBX_MAX_JSON_DEPTH + 1; n <= SBX_MAX_JSON_DEPTH + 2; n++) {
        memset(deep, '[', (size_t)n);
        memset(deep + n, ']', (size_t)n);
        deep[2 * n] = '\0';
        if (n == SBX_MAX_JSON_DEPTH + 1)
            taken("nesting at the depth limit", deep);
        else
            left("nesting past the depth limit", deep);
    }
    char *big = malloc(JFAST_MAX_LEN + 8);
    memset(big, ' ', JFAST_MAX_LEN + 7);
    memcpy(big, "[1]", 3);
    big[JFAST_MAX_LEN + 7] = '\0';
    left("a line over JFAST_MAX_LEN", big);
    free(big);
    return test_report();
}
