/*
 * test_libsbx_reader.c - libsbx without a daemon: the frame reader, base64,
 * output decoding, and the sync and async APIs against a scripted fake
 * daemon (a forked child on a Unix socket) that can misbehave on purpose.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sbx/sbx.h>
#include <sbx/sbx_async.h>

#include "../../client/adapters/poll.h"
#include "testhelp.h"

/* ---- reader ------------------------------------------------------------------------ */

static int feed_str(sbx_reader *r, const char *s)
{
    return sbx_reader_feed(r, s, strlen(s));
}

static json_t *next(sbx_reader *r)
{
    json_t *v = NULL;
    if (sbx_reader_get_frame(r, &v) != SBX_OK)
        return NULL;
    return v;
}

static char *nested(int depth)
{
    char *s = malloc((size_t)depth * 2 + 3);
    int n = 0;
    for (int i = 0; i < depth; i++)
        s[n++] = '[';
    for (int i = 0; i < depth; i++)
        s[n++] = ']';
    s[n++] = '\n';
    s[n] = '\0';
    return s;
}

static void reader_frames(void)
{
    sbx_reader *r = sbx_reader_new();
    json_t *v;

    feed_str(r, "{\"a\":1}\n");
    v = next(r);
    test_cond("reader: one frame", v && json_integer_value(json_object_get(v, "a")) == 1);
    json_decref(v);
    v = (json_t *)1;
    test_cond("reader: nothing more -> OK with NULL",
              sbx_reader_get_frame(r, &v) == SBX_OK && v == NULL);

    /* A frame dribbled in byte by byte. */
    const char *msg = "{\"method\":\"x\",\"params\":{\"s\":\"a\\nb\"}}\n";
    int early = 0;
    for (size_t i = 0; msg[i]; i++) {
        sbx_reader_feed(r, msg + i, 1);
        if (msg[i + 1]) {
            v = next(r);
            if (v) {
                early = 1;
                json_decref(v);
            }
        }
    }
    v = next(r);
    test_cond("reader: byte-by-byte frame not returned early", !early);
    test_cond(
        "reader: byte-by-byte frame complete, escaped newline kept",
        v && strcmp(json_string_value(json_object_get(json_object_get(v, "params"), "s")),
                    "a\nb") == 0);
    json_decref(v);

    feed_str(r, "[1]\n\n  \r\n{\"b\":2}\r\n[3]");
    json_t *v1 = next(r), *v2 = next(r), *v3 = next(r);
    test_cond("reader: several frames, blank and CRLF lines",
              json_is_array(v1) && json_is_object(v2) && v3 == NULL);
    test_cond("reader: partial tail stays buffered", sbx_reader_buffered(r) == 3);
    json_decref(v1);
    json_decref(v2);
    feed_str(r, "\n");
    v = next(r);
    test_cond("reader: tail completes", json_is_array(v) && json_array_size(v) == 1);
    json_decref(v);

    feed_str(r, "{\"s\":\"a\\u0000b\"}\n");
    v = next(r);
    test_cond("reader: NUL inside a string is allowed",
              v && json_string_length(json_object_get(v, "s")) == 3);
    json_decref(v);

    feed_str(r, "{\"s\":\"[[[[{{{{\\\"]]]\"}\n");
    v = next(r);
    test_cond("reader: brackets and escaped quotes in strings do not nest", v != NULL);
    json_decref(v);
    sbx_reader_free(r);
}

static void reader_limits(void)
{
    sbx_reader *r;
    json_t *v;
    /* Depth limit. */
    r = sbx_reader_new();
    char *ok = nested(SBX_MAX_JSON_DEPTH), *bad = nested(SBX_MAX_JSON_DEPTH + 1);
    feed_str(r, ok);
    v = next(r);
    test_cond("reader: depth 64 accepted", v != NULL);
    json_decref(v);
    feed_str(r, bad);
    test_cond("reader: depth 65 rejected", sbx_reader_get_frame(r, &v) == SBX_ERR &&
                                               v == NULL &&
                                               sbx_reader_err(r) == SBX_ERR_PROTOCOL);
    test_cond("reader: error is sticky",
              feed_str(r, "{}\n") == SBX_ERR && sbx_reader_get_frame(r, &v) == SBX_ERR);
    test_cond("reader: errstr says why", strstr(sbx_reader_errstr(r), "deeper") != NULL);
    free(ok);
    free(bad);
    sbx_reader_free(r);

    /* Size limit. */
    r = sbx_reader_new();
    sbx_reader_set_max_frame(r, 16);
    feed_str(r, "{\"a\":\"0123456\"}\n"); /* 15 bytes */
    v = next(r);
    test_cond("reader: frame under the limit", v != NULL);
    json_decref(v);
    feed_str(r, "{\"a\":\"012345678\"}\n");
    test_cond("reader: frame over the limit rejected",
              sbx_reader_get_frame(r, &v) == SBX_ERR &&
                  sbx_reader_err(r) == SBX_ERR_PROTOCOL);
    sbx_reader_free(r);

    r = sbx_reader_new();
    sbx_reader_set_max_frame(r, 16);
    feed_str(r, "{\"a\":\"0123456789abcdef");
    test_cond("reader: oversized frame without newline rejected early",
              sbx_reader_get_frame(r, &v) == SBX_ERR);
    sbx_reader_free(r);

    r = sbx_reader_new();
    feed_str(r, "{\"a\":}\n");
    test_cond("reader: invalid JSON rejected", sbx_reader_get_frame(r, &v) == SBX_ERR &&
                                                   sbx_reader_err(r) == SBX_ERR_PROTOCOL);
    sbx_reader_free(r);

    r = sbx_reader_new();
    feed_str(r, "42\n");
    test_cond("reader: a scalar is not a frame", sbx_reader_get_frame(r, &v) == SBX_ERR);
    sbx_reader_free(r);

    /* Many frames through one buffer: compaction keeps it bounded. */
    r = sbx_reader_new();
    int count = 0;
    for (int i = 0; i < 10000; i++) {
        feed_str(
            r,
            "{\"method\":\"process.output\",\"params\":{\"data\":\"xxxxxxxxxxxxxxxx\"}}\n");
        while ((v = next(r))) {
            count++;
            json_decref(v);
        }
    }
    test_cond("reader: 10000 frames streamed",
              count == 10000 && sbx_reader_buffered(r) == 0);
    sbx_reader_free(r);
    sbx_reader_free(NULL);
}

static void test_reader(void)
{
    reader_frames();
    reader_limits();
}

/* ---- base64 and output ------------------------------------------------------------- */

static int b64_is(const char *in, const char *want)
{
    char out[64];
    size_t n = sbx_base64_encode(out, in, strlen(in));
    return n == strlen(want) && strcmp(out, want) == 0 &&
           sbx_base64_encoded_len(strlen(in)) == n;
}

static int unb64_is(const char *in, const char *want)
{
    char out[64];
    size_t n;
    return sbx_base64_decode(out, &n, in, strlen(in)) == SBX_OK && n == strlen(want) &&
           memcmp(out, want, n) == 0;
}

static int unb64_fails(const char *in)
{
    char out[64];
    size_t n;
    return sbx_base64_decode(out, &n, in, strlen(in)) == SBX_ERR;
}

/* A line in the daemon's process.output shape must give what jansson gives. */
static int same_as_jansson(const char *line)
{
    sbx_reader *r = sbx_reader_new();
    json_t *v = NULL;
    feed_str(r, line);
    feed_str(r, "\n");
    int rc = sbx_reader_get_frame(r, &v);
    json_t *ref = json_loads(line, JSON_ALLOW_NUL, NULL);
    int ok = ref ? rc == SBX_OK && v && json_equal(v, ref) : rc == SBX_ERR && !v;
    json_decref(v);
    json_decref(ref);
    sbx_reader_free(r);
    return ok;
}

#define OUT_HEAD                                                                           \
    "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{\"sandbox\":\"sb-1\"," \
    "\"pid\":7,\"stream\":\"stdout\",\"offset\":12345678901,"

static void test_reader_fast(void)
{
    test_cond(
        "fast path: plain text is what jansson reads",
        same_as_jansson(OUT_HEAD "\"data\":\"hello world, a plain line of text\"}}"));
    test_cond("fast path: every escape, \\u0000 and a surrogate pair",
              same_as_jansson(
                  OUT_HEAD
                  "\"data\":\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t "
                  "\\u0000\\u00e9\\u20ac\\ud83d\\ude00 \xc3\xa9\xf0\x9f\x98\x80\"}}"));
    test_cond(
        "fast path: data_b64 and stderr",
        same_as_jansson("{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{"
                        "\"sandbox\":\"x\",\"pid\":1,\"stream\":\"stderr\",\"offset\":0,"
                        "\"data_b64\":\"AP8QaGk=\"}}"));
    test_cond("fast path: a key after data falls back to jansson",
              same_as_jansson(OUT_HEAD "\"data\":\"a\\nb\",\"more\":\"x\\\"}\"}}"));
    test_cond("fast path: a lone surrogate is an error as in jansson",
              same_as_jansson(OUT_HEAD "\"data\":\"ab\\ud800\"}}") &&
                  same_as_jansson(OUT_HEAD "\"data\":\"ab\\udc00x\"}}"));
    test_cond("fast path: a raw control byte or bad UTF-8 is an error as in jansson",
              same_as_jansson(OUT_HEAD "\"data\":\"a\tb\"}}") &&
                  same_as_jansson(OUT_HEAD "\"data\":\"a\xc0\xaf"
                                           "b\"}}") &&
                  same_as_jansson(OUT_HEAD "\"data\":\"a\xed\xa0\x80\"}}"));
    test_cond(
        "fast path: odd numbers fall back (leading zero, negative, huge)",
        same_as_jansson("{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{"
                        "\"sandbox\":\"x\",\"pid\":01,\"stream\":\"stdout\",\"offset\":0,"
                        "\"data\":\"y\"}}") &&
            same_as_jansson(
                "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{"
                "\"sandbox\":\"x\",\"pid\":-1,\"stream\":\"stdout\",\"offset\":0,"
                "\"data\":\"y\"}}") &&
            same_as_jansson(OUT_HEAD "\"data\":\"y\"}}  \r") &&
            same_as_jansson(
                "{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{"
                "\"sandbox\":\"x\",\"pid\":99999999999999999999,\"stream\":"
                "\"stdout\",\"offset\":0,\"data\":\"y\"}}"));
}

static void test_base64(void)
{
    test_cond("base64: RFC 4648 encode vectors",
              b64_is("", "") && b64_is("f", "Zg==") && b64_is("fo", "Zm8=") &&
                  b64_is("foo", "Zm9v") && b64_is("foob", "Zm9vYg==") &&
                  b64_is("fooba", "Zm9vYmE=") && b64_is("foobar", "Zm9vYmFy"));
    test_cond("base64: RFC 4648 decode vectors",
              unb64_is("", "") && unb64_is("Zg==", "f") && unb64_is("Zm8=", "fo") &&
                  unb64_is("Zm9v", "foo") && unb64_is("Zm9vYg==", "foob") &&
                  unb64_is("Zm9vYmE=", "fooba") && unb64_is("Zm9vYmFy", "foobar"));
    test_cond("base64: padding optional", unb64_is("Zg", "f") && unb64_is("Zm8", "fo"));
    test_cond("base64: invalid input rejected",
              unb64_fails("Z") && unb64_fails("Zg=") && unb64_fails("Zm9v!") &&
                  unb64_fails("Zh==") && unb64_fails("Z===") && unb64_fails("Zm 9v") &&
                  unb64_fails("=Zm9"));

    int ok = 1;
    unsigned char in[300], dec[300 + 3];
    char enc[404 + 1];
    for (size_t n = 0; n < sizeof(in) && ok; n++) {
        for (size_t i = 0; i < n; i++)
            in[i] = (unsigned char)(i * 37 + n);
        size_t e = sbx_base64_encode(enc, in, n), d;
        ok = sbx_base64_decode(dec, &d, enc, e) == SBX_OK && d == n &&
             memcmp(in, dec, n) == 0;
    }
    test_cond("base64: round trip of all byte values, lengths 0..299", ok);

    char *data;
    size_t len;
    int stream = 0;
    json_t *p = json_pack("{s:s, s:s, s:i, s:i, s:s}", "sandbox", "sb", "stream",
                          "stderr", "pid", 1, "offset", 0, "data_b64", "AP8K");
    test_cond("output: data_b64 decodes binary",
              sbx_output_decode(&stream, &data, &len, p) == SBX_OK &&
                  stream == SBX_STDERR && len == 3 && (unsigned char)data[0] == 0 &&
                  (unsigned char)data[1] == 0xff && data[2] == '\n');
    free(data);
    json_decref(p);

    p = json_pack("{s:s, s:s}", "stream", "stdout", "data", "héllo\n");
    test_cond("output: data is taken as is",
              sbx_output_decode(&stream, &data, &len, p) == SBX_OK &&
                  stream == SBX_STDOUT && len == strlen("héllo\n") &&
                  strcmp(data, "héllo\n") == 0);
    free(data);
    json_decref(p);

    p = json_pack("{s:s, s:s}", "stream", "stdin", "data", "x");
    test_cond("output: unknown stream rejected",
              sbx_output_decode(&stream, &data, &len, p) == SBX_ERR && data == NULL);
    json_decref(p);

    p = json_pack("{s:s, s:s}", "stdout", "out", "stderr_b64", "ZXJy");
    char *d2 = NULL;
    size_t l2;
    test_cond("output: exec result stdout / stderr_b64",
              sbx_json_get_bytes(&data, &len, p, "stdout") == SBX_OK && len == 3 &&
                  sbx_json_get_bytes(&d2, &l2, p, "stderr") == SBX_OK && l2 == 3 &&
                  memcmp(d2, "err", 3) == 0);
    free(data);
    free(d2);
    test_cond("output: missing key",
              sbx_json_get_bytes(&data, &len, p, "nope") == SBX_ERR);
    json_decref(p);
}

/* ---- a scripted fake daemon -------------------------------------------------------- */

static char sock_path[108];

static void send_line(FILE *f, json_t *m)
{
    char *s = json_dumps(m, JSON_COMPACT);
    fprintf(f, "%s\n", s);
    fflush(f);
    free(s);
    json_decref(m);
}

static json_t *read_msg(FILE *f)
{
    char *line = NULL;
    size_t cap = 0;
    if (getline(&line, &cap, f) < 0) {
        free(line);
        return NULL;
    }
    json_t *m = json_loads(line, 0, NULL);
    free(line);
    return m;
}

/* serve's process.spawn: an error for sandbox "bad", else output that overtakes
 * the answer (for pid 7 and another process), the answer, more output, the exit. */
static void serve_spawn(FILE *out, json_t *id, json_t *params)
{
    const char *sb = json_string_value(json_object_get(params, "sandbox"));
    if (strcmp(sb, "bad") == 0) {
        send_line(out, json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:s}}}", "jsonrpc", "2.0",
                                 "id", id, "error", "code", -32000, "message",
                                 "sandbox not found", "data", "sandbox", sb));
        return;
    }
    /* Output that overtakes the response, for us and another process. */
    send_line(out, json_pack("{s:s, s:s, s:{s:s, s:i, s:s, s:i, s:s}}", "jsonrpc", "2.0",
                             "method", "process.output", "params", "sandbox", sb, "pid",
                             7, "stream", "stdout", "offset", 0, "data", "early\n"));
    send_line(out, json_pack("{s:s, s:s, s:{s:s, s:i, s:s, s:i, s:s}}", "jsonrpc", "2.0",
                             "method", "process.output", "params", "sandbox", sb, "pid",
                             8, "stream", "stdout", "offset", 0, "data", "other"));
    send_line(out, json_pack("{s:s, s:O, s:{s:i}}", "jsonrpc", "2.0", "id", id, "result",
                             "pid", 7));
    send_line(out, json_pack("{s:s, s:s, s:{s:s, s:i, s:s, s:i, s:s}}", "jsonrpc", "2.0",
                             "method", "process.output", "params", "sandbox", sb, "pid",
                             7, "stream", "stderr", "offset", 6, "data_b64", "bGF0ZQo="));
    send_line(out, json_pack("{s:s, s:s, s:{s:s, s:i, s:i}}", "jsonrpc", "2.0", "method",
                             "process.exit", "params", "sandbox", sb, "pid", 7,
                             "exit_code", 3));
}

/* serve's t.output: output in the daemon's shape, then the answer. */
static void serve_output(FILE *out, json_t *id)
{
    /* Output in the daemon's shape (text with escapes, base64) and in
     * another key order, then the answer. */
    fputs("{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{"
          "\"sandbox\":\"sb\",\"pid\":7,\"stream\":\"stdout\",\"offset\":0,"
          "\"data\":\"a\\u0000\\\"b\\n\"}}\n",
          out);
    fputs("{\"jsonrpc\":\"2.0\",\"method\":\"process.output\",\"params\":{"
          "\"sandbox\":\"sb\",\"pid\":7,\"stream\":\"stderr\",\"offset\":0,"
          "\"data_b64\":\"AP8K\"}}\n",
          out);
    fputs("{\"method\":\"process.output\",\"jsonrpc\":\"2.0\",\"params\":{"
          "\"data\":\"end\",\"stream\":\"stdout\",\"pid\":7,\"offset\":5,"
          "\"sandbox\":\"sb\"}}\n",
          out);
    fflush(out);
    send_line(out, json_pack("{s:s, s:O, s:b}", "jsonrpc", "2.0", "id", id, "result", 1));
}

/* serve's t.deep: an answer nested 100 deep. */
static void serve_deep(FILE *out, json_t *id)
{
    fprintf(out, "{\"jsonrpc\":\"2.0\",\"id\":%" JSON_INTEGER_FORMAT ",\"result\":",
            json_integer_value(id));
    for (int i = 0; i < 100; i++)
        fputc('[', out);
    for (int i = 0; i < 100; i++)
        fputc(']', out);
    fputs("}\n", out);
    fflush(out);
}

/* Answers one connection by the methods' names. */
static void serve(int fd)
{
    FILE *in = fdopen(fd, "r"), *out = fdopen(dup(fd), "w");
    json_t *m, *held = NULL;

    while ((m = read_msg(in))) {
        const char *method = json_string_value(json_object_get(m, "method"));
        json_t *id = json_object_get(m, "id");
        json_t *params = json_object_get(m, "params");
        if (!method) {
            json_decref(m);
            continue;
        }
        if (strcmp(method, "t.echo") == 0) {
            send_line(out, json_pack("{s:s, s:O, s:O}", "jsonrpc", "2.0", "id", id,
                                     "result", params ? params : json_null()));
        } else if (strcmp(method, "t.notify") == 0) {
            send_line(out, json_pack("{s:s, s:s, s:{s:s, s:i, s:s, s:i, s:s}}", "jsonrpc",
                                     "2.0", "method", "process.output", "params",
                                     "sandbox", "sb", "pid", 7, "stream", "stdout",
                                     "offset", 0, "data", "hi\n"));
            send_line(out, json_pack("{s:s, s:s, s:{s:s, s:i, s:i}}", "jsonrpc", "2.0",
                                     "method", "process.exit", "params", "sandbox", "sb",
                                     "pid", 7, "exit_code", 0));
            send_line(out, json_pack("{s:s, s:O, s:{s:i}}", "jsonrpc", "2.0", "id", id,
                                     "result", "pid", 7));
        } else if (strcmp(method, "t.tool") == 0) {
            /* Ask the client, then return its whole answer as our result. */
            send_line(out, json_pack("{s:s, s:s, s:s, s:{s:s, s:i, s:s, s:{s:i, s:i}}}",
                                     "jsonrpc", "2.0", "id", "t1", "method", "tool.call",
                                     "params", "sandbox", "sb", "pid", 1, "name",
                                     json_string_value(json_object_get(params, "tool")),
                                     "args", "a", 1, "b", 2));
            json_t *answer = read_msg(in);
            send_line(out, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id,
                                     "result", answer ? answer : json_null()));
        } else if (strcmp(method, "process.spawn") == 0) {
            serve_spawn(out, id, params);
        } else if (strcmp(method, "t.output") == 0) {
            serve_output(out, id);
        } else if (strcmp(method, "t.error") == 0) {
            send_line(out, json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:s}}}", "jsonrpc",
                                     "2.0", "id", id, "error", "code", -32000, "message",
                                     "sandbox not found", "data", "sandbox", "nope"));
        } else if (strcmp(method, "t.slow") == 0) {
            held = json_incref(id); /* answered after the next t.fast */
        } else if (strcmp(method, "t.fast") == 0) {
            send_line(out, json_pack("{s:s, s:O, s:s}", "jsonrpc", "2.0", "id", id,
                                     "result", "fast"));
            if (held)
                send_line(out, json_pack("{s:s, s:o, s:s}", "jsonrpc", "2.0", "id", held,
                                         "result", "slow"));
            held = NULL;
        } else if (strcmp(method, "t.deep") == 0) {
            serve_deep(out, id);
        } else if (strcmp(method, "t.garbage") == 0) {
            fputs("this is not json\n", out);
            fflush(out);
        } else if (strcmp(method, "t.close") == 0) {
            json_decref(m);
            break;
        } else if (strcmp(method, "t.stall") == 0) {
            /* never answers */
        } else {
            send_line(out, json_pack("{s:s, s:O, s:{s:i, s:s, s:{s:s}}}", "jsonrpc",
                                     "2.0", "id", id, "error", "code", -32601, "message",
                                     "method not found", "data", "method", method));
        }
        json_decref(m);
    }
    json_decref(held);
    fclose(in);
    fclose(out);
}

static pid_t start_fake(void)
{
    snprintf(sock_path, sizeof(sock_path), "/tmp/sbx-test-%d.sock", (int)getpid());
    unlink(sock_path);
    int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0) {
        perror("fake daemon");
        exit(1);
    }
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_IGN);
        for (;;) {
            int fd = accept(lfd, NULL, NULL);
            if (fd < 0)
                _exit(0);
            if (fork() == 0) {
                close(lfd);
                serve(fd);
                _exit(0);
            }
            close(fd);
        }
    }
    close(lfd);
    return pid;
}

/* ---- sync API ---------------------------------------------------------------------- */

static int notes_seen;
static char notes_out[64];

static void note_cb(sbx_ctx *c, const char *method, json_t *params, void *privdata)
{
    char *data;
    size_t len;
    (void)c;
    (void)privdata;
    notes_seen++;
    if (strcmp(method, "process.output") == 0 &&
        sbx_output_decode(NULL, &data, &len, params) == SBX_OK) {
        strncat(notes_out, data, sizeof(notes_out) - strlen(notes_out) - 1);
        free(data);
    }
}

static int tool_cb(sbx_ctx *c, json_t **result_out, const char *tool, json_t *args,
                   json_t *params, char *errmsg, size_t errmsg_size, void *privdata)
{
    (void)params;
    (void)privdata;
    /* A sync call from here must be refused, not deadlock. */
    if (sbx_call(c, NULL, NULL, "t.echo", NULL) != SBX_ERR || c->err != SBX_ERR_USAGE)
        return SBX_ERR;
    if (strcmp(tool, "add") == 0) {
        *result_out = json_integer(json_integer_value(json_object_get(args, "a")) +
                                   json_integer_value(json_object_get(args, "b")));
        return SBX_OK;
    }
    snprintf(errmsg, errmsg_size, "no tool %s", tool);
    return SBX_ERR;
}

/* tool.call round trips, timeouts, and a response too deep (which breaks c). */
static void sync_tools_timeouts(sbx_ctx *c)
{
    json_t *r;
    /* tool.call round trip. */
    json_t *answer;
    test_cond("sync: tool.call without a handler is answered with -32009",
              sbx_call_new(c, &answer, NULL, "t.tool",
                           json_pack("{s:s}", "tool", "add")) == SBX_OK &&
                  json_integer_value(json_object_get(json_object_get(answer, "error"),
                                                     "code")) == SBX_E_TOOL &&
                  strcmp(json_string_value(json_object_get(answer, "id")), "t1") == 0);
    json_decref(answer);
    sbx_set_tool_cb(c, tool_cb, NULL);
    test_cond("sync: tool.call answered by the tool callback",
              sbx_call_new(c, &answer, NULL, "t.tool",
                           json_pack("{s:s}", "tool", "add")) == SBX_OK &&
                  json_integer_value(json_object_get(answer, "result")) == 3);
    json_decref(answer);
    test_cond("sync: tool failure becomes an error response",
              sbx_call_new(c, &answer, NULL, "t.tool",
                           json_pack("{s:s}", "tool", "mul")) == SBX_OK &&
                  strcmp(json_string_value(json_object_get(
                             json_object_get(answer, "error"), "message")),
                         "no tool mul") == 0);
    json_decref(answer);

    /* Timeouts are not fatal; the late answer is dropped. */
    sbx_set_timeout(c, 100);
    test_cond("sync: call timeout", sbx_call(c, &r, NULL, "t.stall", NULL) == SBX_ERR &&
                                        c->err == SBX_ERR_TIMEOUT);
    sbx_set_timeout(c, 0);
    test_cond("sync: usable after a timeout",
              sbx_call(c, &r, NULL, "t.echo", NULL) == SBX_OK);
    json_decref(r);

    test_cond("sync: too deep a response breaks the ctx",
              sbx_call(c, &r, NULL, "t.deep", NULL) == SBX_ERR &&
                  c->err == SBX_ERR_PROTOCOL && (c->flags & SBX_BROKEN));
    test_cond("sync: a broken ctx keeps its first error",
              sbx_call(c, &r, NULL, "t.echo", NULL) == SBX_ERR &&
                  c->err == SBX_ERR_PROTOCOL);
}

/* Garbage, EOF, an oversized response; a 4 MiB request and response. */
static void sync_bad_replies(void)
{
    sbx_ctx *c;
    json_t *r, *params;
    c = sbx_connect_unix(sock_path, 1000);
    test_cond("sync: garbage from the daemon is a protocol error",
              sbx_call(c, &r, NULL, "t.garbage", NULL) == SBX_ERR &&
                  c->err == SBX_ERR_PROTOCOL);
    sbx_free(c);

    c = sbx_connect_unix(sock_path, 1000);
    test_cond("sync: EOF",
              sbx_call(c, &r, NULL, "t.close", NULL) == SBX_ERR && c->err == SBX_ERR_EOF);
    sbx_free(c);

    c = sbx_connect_unix(sock_path, 1000);
    sbx_set_max_frame(c, 64);
    params = json_pack(
        "{s:s}", "s",
        "0123456789012345678901234567890123456789012345678901234567890123456789");
    test_cond("sync: max frame applies to responses",
              sbx_call(c, &r, NULL, "t.echo", params) == SBX_ERR &&
                  c->err == SBX_ERR_PROTOCOL);
    json_decref(params);
    sbx_free(c);

    /* A request larger than the socket buffers while notifications flow. */
    c = sbx_connect_unix(sock_path, 1000);
    size_t big = 4 * 1024 * 1024;
    char *s = malloc(big + 1);
    memset(s, 'x', big);
    s[big] = '\0';
    params = json_pack("{s:s}", "s", s);
    free(s);
    test_cond("sync: 4 MiB request and response",
              sbx_call(c, &r, NULL, "t.echo", params) == SBX_OK && json_equal(r, params));
    json_decref(r);
    json_decref(params);
    sbx_free(c);
}

static void test_sync(void)
{
    json_t *r;
    sbx_rpc_error *e;

    sbx_ctx *c = sbx_connect_unix("/nonexistent/sbxd.sock", 1000);
    test_cond("sync: connect failure returns a ctx with err",
              c && c->err == SBX_ERR_IO && strstr(c->errstr, "nonexistent") &&
                  (c->flags & SBX_BROKEN));
    test_cond("sync: calls on a failed ctx fail",
              sbx_call(c, &r, &e, "t.echo", NULL) == SBX_ERR && r == NULL && e == NULL);
    sbx_free(c);
    sbx_free(NULL);

    c = sbx_connect_unix(sock_path, 1000);
    test_cond("sync: connect",
              c && c->err == 0 && c->fd >= 0 && (c->flags & SBX_CONNECTED));

    json_t *params = json_pack("{s:s, s:[i,i]}", "x", "y", "z", 1, 2);
    test_cond("sync: echo call", sbx_call(c, &r, &e, "t.echo", params) == SBX_OK &&
                                     json_equal(r, params) && e == NULL);
    test_cond("sync: params are borrowed", params->refcount == 1);
    json_decref(r);
    json_decref(params);

    test_cond("sync: sbx_call_new steals params",
              sbx_call_new(c, &r, NULL, "t.echo", json_pack("{s:i}", "n", 5)) == SBX_OK &&
                  json_integer_value(json_object_get(r, "n")) == 5);
    json_decref(r);

    test_cond("sync: RPC error", sbx_call(c, &r, &e, "t.error", NULL) == SBX_ERR &&
                                     c->err == SBX_ERR_RPC && e &&
                                     e->code == SBX_E_NOT_FOUND &&
                                     strcmp(e->message, "sandbox not found") == 0 &&
                                     strcmp(c->errstr, "sandbox not found") == 0 &&
                                     json_is_object(e->data) && r == NULL);
    sbx_rpc_error_free(e);
    test_cond("sync: an RPC error does not break the ctx",
              sbx_call(c, &r, NULL, "t.echo", NULL) == SBX_OK && c->err == 0 &&
                  json_is_null(r));
    json_decref(r);

    /* Notifications during a call: queued without a callback. */
    test_cond("sync: call with notifications",
              sbx_call(c, &r, NULL, "t.notify", NULL) == SBX_OK);
    json_decref(r);
    json_t *n1 = NULL, *n2 = NULL, *n3 = NULL;
    test_cond("sync: queued notifications come in order",
              sbx_read_notification(c, &n1, 0) == SBX_OK &&
                  sbx_read_notification(c, &n2, 0) == SBX_OK &&
                  strcmp(json_string_value(json_object_get(n1, "method")),
                         "process.output") == 0 &&
                  strcmp(json_string_value(json_object_get(n2, "method")),
                         "process.exit") == 0);
    test_cond("sync: read_notification times out",
              sbx_read_notification(c, &n3, 50) == SBX_ERR && c->err == SBX_ERR_TIMEOUT &&
                  n3 == NULL && !(c->flags & SBX_BROKEN));
    json_decref(n1);
    json_decref(n2);

    sbx_set_notify_cb(c, note_cb, NULL);
    test_cond("sync: notify callback runs during the call",
              sbx_call(c, &r, NULL, "t.notify", NULL) == SBX_OK && notes_seen == 2 &&
                  strcmp(notes_out, "hi\n") == 0);
    json_decref(r);

    sync_tools_timeouts(c);
    sbx_free(c);

    sync_bad_replies();
}

/* ---- async API (poll adapter) ------------------------------------------------------ */

struct actx {
    int connected, disconnected, disc_status;
    int replies;
    char order[64];
    int nulls;
    int outputs, exits;
    char out[64];
    int tool_calls;
    char *tool_id;
    int free_in_cb;
    int notes;
};

static void a_notify(sbx_async *ac, const char *method, json_t *params, void *privdata)
{
    struct actx *t = privdata;
    (void)ac;
    (void)params;
    if (strcmp(method, "process.output") == 0)
        t->notes++;
}

static void a_connect(sbx_async *ac, int status)
{
    struct actx *t = ac->data;
    t->connected = status == SBX_OK ? 1 : -1;
}

static void a_disconnect(sbx_async *ac, int status)
{
    struct actx *t = ac->data;
    t->disconnected++;
    t->disc_status = status;
}

static void a_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                    void *privdata)
{
    struct actx *t = ac->data;
    const char *tag = privdata;
    t->replies++;
    if (!result && !err) {
        t->nulls++;
        return;
    }
    size_t n = strlen(t->order);
    if (n + 1 < sizeof(t->order)) {
        t->order[n] = err ? 'E' : *tag;
        t->order[n + 1] = '\0';
    }
    if (t->free_in_cb) {
        sbx_async_free(ac); /* deferred */
        sbx_async_free(ac); /* idempotent */
    }
}

static void a_output(sbx_async *ac, int stream, const char *data, size_t len,
                     void *privdata)
{
    struct actx *t = ac->data;
    (void)stream;
    (void)privdata;
    t->outputs++;
    strncat(t->out, data,
            len < sizeof(t->out) - strlen(t->out) - 1
                ? len
                : sizeof(t->out) - strlen(t->out) - 1);
}

static void a_exit(sbx_async *ac, json_t *exit_params, const sbx_rpc_error *err,
                   void *privdata)
{
    struct actx *t = ac->data;
    (void)err;
    (void)privdata;
    t->exits += exit_params
                    ? (json_integer_value(json_object_get(exit_params, "exit_code")) == 3)
                    : (err ? 100 : 1000);
}

static void a_tool(sbx_async *ac, const char *call_id, const char *tool, json_t *args,
                   json_t *params, void *privdata)
{
    struct actx *t = privdata;
    (void)tool;
    (void)args;
    (void)params;
    t->tool_calls++;
    t->tool_id = strdup(call_id); /* answered later, outside the callback */
    (void)ac;
}

static char raw_out[64];
static size_t raw_len;
static int raw_calls, raw_stderr;

static void a_raw(sbx_async *ac, const char *sandbox, json_int_t pid, int stream,
                  uint64_t offset, const char *data, size_t len, void *privdata)
{
    (void)ac;
    (void)privdata;
    (void)offset;
    if (strcmp(sandbox, "sb") != 0 || pid != 7)
        return;
    raw_calls++;
    raw_stderr += stream == SBX_STDERR;
    if (raw_len + len <= sizeof(raw_out)) {
        memcpy(raw_out + raw_len, data, len);
        raw_len += len;
    }
}

/* Reply tags (privdata must not be a string literal: -Wwrite-strings). */
static char tags[] = "sfxTgn12";
#define TAG(ch) strchr(tags, #ch[0])

static sbx_async *a_new(struct actx *t)
{
    memset(t, 0, sizeof(*t));
    sbx_async *ac = sbx_async_connect_unix(sock_path);
    ac->data = t;
    sbx_async_set_connect_cb(ac, a_connect);
    sbx_async_set_disconnect_cb(ac, a_disconnect);
    sbx_poll_attach(ac);
    return ac;
}

/* Runs until cond or the context is gone; returns 0 if it is gone. */
#define RUN_UNTIL(ac, cond)                                                              \
    do {                                                                                 \
        for (int _i = 0; _i < 200 && !(cond); _i++)                                      \
            if (sbx_poll_tick(ac, 20) < 0) {                                             \
                ac = NULL;                                                               \
                break;                                                                   \
            }                                                                            \
    } while (0)

/* tool.call through the async API: the callback gets the call id, the reply
 * goes later. The context, or NULL if it broke (as RUN_UNTIL leaves it). */
static sbx_async *async_tools(sbx_async *ac, struct actx *t)
{
    sbx_async_set_tool_cb(ac, a_tool, t);
    sbx_async_call_new(ac, "t.tool", json_pack("{s:s}", "tool", "add"), a_reply, TAG(T));
    RUN_UNTIL(ac, t->tool_calls);
    test_cond("async: tool callback got the call id",
              t->tool_calls == 1 && t->tool_id && strcmp(t->tool_id, "t1") == 0);
    json_t *three = json_integer(3);
    test_cond("async: tool reply later",
              sbx_async_tool_reply(ac, t->tool_id, three, 0, NULL) == SBX_OK);
    json_decref(three);
    free(t->tool_id);
    RUN_UNTIL(ac, t->replies == 4);
    test_cond("async: tool round trip completed", strstr(t->order, "T") != NULL);
    return ac;
}

static void async_calls(void)
{
    struct actx t;

    sbx_async *ac = sbx_async_connect_unix("/nonexistent/sbxd.sock");
    test_cond("async: connect failure sets err", ac && ac->c.err == SBX_ERR_IO);
    test_cond("async: attach refused on a failed ctx", sbx_poll_attach(ac) == SBX_ERR);
    sbx_async_free(ac);
    sbx_async_free(NULL);

    ac = a_new(&t);
    test_cond("async: second attach rejected", sbx_poll_attach(ac) == SBX_ERR);
    RUN_UNTIL(ac, t.connected);
    test_cond("async: on_connect(SBX_OK)", ac && t.connected == 1);

    /* Out of order: slow first, fast second; fast is answered first. */
    sbx_async_call(ac, "t.slow", NULL, a_reply, TAG(s));
    sbx_async_call(ac, "t.fast", NULL, a_reply, TAG(f));
    sbx_async_call(ac, "t.error", NULL, a_reply, TAG(x));
    test_cond("async: three pending", sbx_async_pending(ac) == 3);
    RUN_UNTIL(ac, t.replies == 3);
    test_cond("async: replies matched by id, out of order", strcmp(t.order, "fsE") == 0);
    test_cond("async: nothing pending", sbx_async_pending(ac) == 0);

    /* sbx_async_spawn: output that overtakes the spawn response is held until
     * the pid is known; another process's output goes to the notify callback. */
    sbx_async_set_notify_cb(ac, a_notify, &t);
    json_t *sp = json_pack("{s:s, s:s}", "sandbox", "sb", "command", "x");
    test_cond("async: spawn needs callbacks",
              sbx_async_spawn(ac, sp, NULL, a_exit, NULL) == SBX_ERR &&
                  ac->c.err == SBX_ERR_USAGE);
    test_cond("async: spawn sent",
              sbx_async_spawn(ac, sp, a_output, a_exit, NULL) == SBX_OK);
    json_decref(sp);
    RUN_UNTIL(ac, t.exits);
    test_cond("async: spawn watch got early and late output in order",
              strcmp(t.out, "early\nlate\n") == 0 && t.outputs == 2);
    test_cond("async: spawn watch ended with on_exit(exit params)", t.exits == 1);
    test_cond("async: other process's output went to the notify callback", t.notes == 1);

    sp = json_pack("{s:s, s:s}", "sandbox", "bad", "command", "x");
    t.exits = 0;
    sbx_async_spawn(ac, sp, a_output, a_exit, NULL);
    json_decref(sp);
    RUN_UNTIL(ac, t.exits);
    test_cond("async: a failed spawn ends with on_exit(NULL, err)", t.exits == 100);

    ac = async_tools(ac, &t);

    /* The output callback: decoded bytes, both shapes, not the notify callback. */
    t.notes = 0;
    sbx_async_set_output_cb(ac, a_raw, NULL);
    sbx_async_call(ac, "t.output", NULL, a_reply, TAG(g));
    RUN_UNTIL(ac, t.replies == 5);
    test_cond("async: output callback gets the bytes of data and data_b64, in order",
              raw_calls == 3 && raw_stderr == 1 && raw_len == 5 + 3 + 3 &&
                  memcmp(raw_out, "a\0\"b\n\0\xff\nend", 11) == 0);
    test_cond("async: with an output callback, output skips the notify callback",
              t.notes == 0);
    sbx_async_set_output_cb(ac, NULL, NULL);

    /* Graceful disconnect waits for pending replies. */
    sbx_async_call(ac, "t.echo", NULL, a_reply, TAG(g));
    sbx_async_disconnect(ac);
    test_cond("async: no calls while disconnecting",
              sbx_async_call(ac, "t.echo", NULL, a_reply, TAG(n)) == SBX_ERR);
    RUN_UNTIL(ac, 0);
    test_cond("async: disconnect delivered the pending reply, then on_disconnect(OK)",
              ac == NULL && strstr(t.order, "g") && t.disconnected == 1 &&
                  t.disc_status == SBX_OK && t.nulls == 0);
}

static void async_endings(void)
{
    struct actx t;
    sbx_async *ac;
    /* Free with calls pending: callbacks get NULLs. */
    ac = a_new(&t);
    RUN_UNTIL(ac, t.connected);
    sbx_async_call(ac, "t.stall", NULL, a_reply, TAG(1));
    sbx_async_call(ac, "t.stall", NULL, a_reply, TAG(2));
    for (int i = 0; i < 5; i++)
        sbx_poll_tick(ac, 10); /* let them be written */
    sbx_async_free(ac);
    test_cond("async: free -> pending callbacks get NULLs, on_disconnect once",
              t.nulls == 2 && t.disconnected == 1);

    /* Free from inside a reply callback is deferred. */
    ac = a_new(&t);
    t.free_in_cb = 1;
    sbx_async_call(ac, "t.fast", NULL, a_reply, TAG(f));
    sbx_async_call(ac, "t.stall", NULL, a_reply, TAG(2));
    RUN_UNTIL(ac, 0);
    test_cond("async: free inside a callback is deferred, the rest get NULLs",
              ac == NULL && strcmp(t.order, "f") == 0 && t.nulls == 1 &&
                  t.disconnected == 1);

    /* EOF: pending callbacks get NULLs, on_disconnect(ERR). */
    ac = a_new(&t);
    sbx_async_call(ac, "t.stall", NULL, a_reply, TAG(1));
    sbx_async_call(ac, "t.close", NULL, a_reply, TAG(2));
    RUN_UNTIL(ac, 0);
    test_cond("async: EOF fails pending calls", ac == NULL && t.nulls == 2 &&
                                                    t.disconnected == 1 &&
                                                    t.disc_status == SBX_ERR);

    /* Timeout. */
    ac = a_new(&t);
    sbx_async_set_timeout(ac, 100);
    sbx_async_call(ac, "t.stall", NULL, a_reply, TAG(1));
    RUN_UNTIL(ac, 0);
    test_cond("async: timeout fails pending calls",
              ac == NULL && t.nulls == 1 && t.disc_status == SBX_ERR);
}

static void test_async(void)
{
    async_calls();
    async_endings();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    test_reader();
    test_reader_fast();
    test_base64();

    pid_t fake = start_fake();
    test_sync();
    test_async();
    kill(fake, SIGTERM);
    waitpid(fake, NULL, 0);
    unlink(sock_path);
    return test_report();
}
