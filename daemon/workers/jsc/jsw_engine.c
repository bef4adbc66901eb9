/*
 * jsw_engine.c - JavaScriptCore for the js worker: one context group per
 * process, a fresh global per program (or the sandbox's persistent one), the
 * prelude (console, external_<tool>, the JSON boundary; prelude.js), the
 * TypeScript stripper in a context of its own, tool calls as deferred
 * promises, and snapshot/restore of a persistent global.
 *
 * JSC runs pending microtasks when the outermost API call returns, so the
 * worker can go back to reading frames between tool answers: each
 * TOOL_RESULT settles one promise, the program's continuation runs inside
 * that call, and when the program's promise settles `done` fills the exit
 * record that jsw_engine_finish sends.
 *
 * Time and memory are enforced from outside: the daemon ends the worker at
 * the deadline and when its RSS passes the limit (JSC has neither an
 * interrupt nor a heap cap in its public API).
 */
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "workers/jsc/jsw.h"
#include "xalloc.h"

extern const char jsw_prelude_js[], jsw_prelude_js_end[];
extern const char jsw_strip_js[], jsw_strip_js_end[];

#define TOOL_PREFIX "external_"
/* Wrapped around the program on its first and last line, so the stripper
 * sees top-level await/return inside a function and line numbers stay. A
 * program without the word await gets a plain function: an async one costs
 * each run a promise and a microtask turn before its result (issue 21), and
 * the prelude follows a returned object the way an async function's return
 * would. Both heads are as long, so columns are corrected alike. */
#define WRAP_HEAD "(async function () {"
#define WRAP_HEAD_SYNC "(      function () {"
#define WRAP_TAIL "\n})"
_Static_assert(sizeof(WRAP_HEAD) == sizeof(WRAP_HEAD_SYNC), "wrapper heads differ");

static struct jsw *W; /* native callbacks get no user data */

/* Exported by the library, not declared in its public headers: a full,
 * synchronous collection (JSGarbageCollect is only a hint). */
void JSSynchronousGarbageCollectForDebugging(JSContextRef ctx);

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- text ---------------------------------------------------------------- */

/* UTF-8 (invalid sequences become U+FFFD, NUL bytes stay) to a JS string. */
static JSStringRef str_from_utf8(const char *s, size_t len)
{
    uint16_t *u = xmalloc((len + 1) * sizeof(*u));
    size_t n = 0, i = 0;
    JSStringRef r;

    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp = 0xfffd;
        size_t need = 0;

        if (c < 0x80) {
            cp = c;
        } else if (c >= 0xc2 && c <= 0xdf) {
            need = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            cp = c & 0x07;
        }
        i++;
        if (need) {
            size_t k;
            for (k = 0;
                 k < need && i + k < len && ((unsigned char)s[i + k] & 0xc0) == 0x80; k++)
                cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3f);
            if (k < need ||
                (need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
                (need == 3 && (cp < 0x10000 || cp > 0x10ffff))) {
                cp = 0xfffd;
                i += k;
            } else {
                i += need;
            }
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            u[n++] = (uint16_t)(0xd800 + (cp >> 10));
            u[n++] = (uint16_t)(0xdc00 + (cp & 0x3ff));
        } else {
            u[n++] = (uint16_t)cp;
        }
    }
    r = JSStringCreateWithCharacters(u, n);
    free(u);
    return r;
}

static JSStringRef str_c(const char *s)
{
    return str_from_utf8(s, strlen(s));
}

/* A JS string as malloc'd UTF-8 (lone surrogates become U+FFFD). */
static char *utf8_from_str(JSStringRef s, size_t *len_out)
{
    const JSChar *u = JSStringGetCharactersPtr(s);
    size_t n = JSStringGetLength(s), o = 0;
    char *out = xmalloc(n * 3 + 1);

    for (size_t i = 0; i < n; i++) {
        uint32_t cp = u[i];
        if (cp >= 0xd800 && cp <= 0xdbff && i + 1 < n && u[i + 1] >= 0xdc00 &&
            u[i + 1] <= 0xdfff) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (u[i + 1] - 0xdc00);
            i++;
        } else if (cp >= 0xd800 && cp <= 0xdfff) {
            cp = 0xfffd;
        }
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else if (cp < 0x800) {
            out[o++] = (char)(0xc0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xe0 | (cp >> 12));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[o++] = (char)(0xf0 | (cp >> 18));
            out[o++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            out[o++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[o++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[o] = '\0';
    if (len_out)
        *len_out = o;
    return out;
}

/* ToString of a value as UTF-8, or NULL if that throws. */
static char *utf8_of(JSContextRef ctx, JSValueRef v, size_t *len_out)
{
    JSValueRef exc = NULL;
    JSStringRef s = JSValueToStringCopy(ctx, v, &exc);
    char *r;

    if (!s)
        return NULL;
    r = utf8_from_str(s, len_out);
    JSStringRelease(s);
    return r;
}

/* Property names and source URLs are the worker's own literals, the same few
 * on every run: each is made into a JS string once and kept for the
 * process's life (its hash is computed once too). Past the table's size,
 * names are made per call as before. */
#define NAMES_MAX 32
static struct {
    char *s;
    JSStringRef ref;
} names[NAMES_MAX];

static JSStringRef name_ref(const char *name)
{
    for (int i = 0; i < NAMES_MAX; i++) {
        if (!names[i].s) {
            names[i].s = xstrdup(name); /* kept: a caller's name may not be */
            names[i].ref = str_c(name);
            return JSStringRetain(names[i].ref);
        }
        if (strcmp(names[i].s, name) == 0)
            return JSStringRetain(names[i].ref);
    }
    return str_c(name);
}

static JSValueRef get(JSContextRef ctx, JSObjectRef o, const char *name)
{
    JSStringRef n = name_ref(name);
    JSValueRef v = JSObjectGetProperty(ctx, o, n, NULL);
    JSStringRelease(n);
    return v;
}

static void set(JSContextRef ctx, JSObjectRef o, const char *name, JSValueRef v)
{
    JSStringRef n = name_ref(name);
    JSObjectSetProperty(ctx, o, n, v, kJSPropertyAttributeNone, NULL);
    JSStringRelease(n);
}

static JSValueRef make_string(JSContextRef ctx, const char *s)
{
    JSStringRef js = str_c(s);
    JSValueRef v = JSValueMakeString(ctx, js);
    JSStringRelease(js);
    return v;
}

/* new <ctor>(msg), e.g. ("TypeError", "..."). */
static JSObjectRef make_error(JSContextRef ctx, const char *ctor, const char *msg)
{
    JSObjectRef global = JSContextGetGlobalObject(ctx);
    JSValueRef c = get(ctx, global, ctor);
    JSValueRef arg = make_string(ctx, msg);
    JSObjectRef e = NULL;

    if (JSValueIsObject(ctx, c))
        e = JSObjectCallAsConstructor(ctx, (JSObjectRef)c, 1, &arg, NULL);
    return e ? e : JSObjectMakeError(ctx, 1, &arg, NULL);
}

/* ---- native primitives the prelude closes over ---------------------------- */

static void add_log(struct jsw *w, const char *line, size_t len)
{
    if (w->logs_truncated || len > JSW_LOGS_MAX - w->logs_bytes) {
        w->logs_truncated = 1;
        return;
    }
    json_array_append_new(w->logs, json_stringn(line, len));
    w->logs_bytes += len;
}

/* out(stream, line) */
static JSValueRef native_out(JSContextRef ctx, JSObjectRef fn, JSObjectRef self,
                             size_t argc, const JSValueRef argv[], JSValueRef *exc)
{
    struct jsw *w = W;
    size_t len;
    char *s;

    if (argc < 2 || w->proc == 0)
        return JSValueMakeUndefined(ctx);
    s = utf8_of(ctx, argv[1], &len);
    if (!s)
        return JSValueMakeUndefined(ctx);
    add_log(w, s, len);
    s = xrealloc(s, len + 2);
    s[len] = '\n';
    jsw_output(
        w, JSValueToNumber(ctx, argv[0], NULL) == 1 ? SBX_CHAN_STDERR : SBX_CHAN_STDOUT,
        (const uint8_t *)s, len + 1);
    free(s);
    return JSValueMakeUndefined(ctx);
}

/* call(toolId, argsJson) -> Promise */
static JSValueRef native_call(JSContextRef ctx, JSObjectRef fn, JSObjectRef self,
                              size_t argc, const JSValueRef argv[], JSValueRef *exc)
{
    struct jsw *w = W;
    JSObjectRef resolve, reject, promise;
    char *name, *args, *name_json, *payload;
    size_t args_len, plen;
    json_t *jn;
    struct jsw_call *c;

    if (argc < 2 || w->proc == 0) {
        *exc = make_error(ctx, "Error", "tools can only be called by a running program");
        return NULL;
    }
    if (w->ncalls >= JSW_MAX_CALLS) {
        *exc = make_error(ctx, "RangeError", "too many tool calls in flight");
        return NULL;
    }
    name = utf8_of(ctx, argv[0], NULL);
    args = utf8_of(ctx, argv[1], &args_len);
    jn = name ? json_string(name) : NULL;
    name_json = jn ? json_dumps(jn, JSON_ENCODE_ANY) : NULL;
    json_decref(jn);
    if (!name || !args || !name_json) {
        free(name);
        free(args);
        free(name_json);
        *exc = make_error(ctx, "Error", "cannot encode the tool call");
        return NULL;
    }
    plen = 48 + strlen(name_json) + args_len;
    if (plen > w->max_message) {
        char msg[160];
        snprintf(msg, sizeof(msg), "arguments of %s are too large (%zu bytes, max %zu)",
                 name, args_len, w->max_message - 48 - strlen(name_json));
        free(name);
        free(args);
        free(name_json);
        *exc = make_error(ctx, "RangeError", msg);
        return NULL;
    }
    promise = JSObjectMakeDeferredPromise(ctx, &resolve, &reject, exc);
    if (!promise) {
        free(name);
        free(args);
        free(name_json);
        return NULL;
    }
    c = xcalloc(1, sizeof(*c));
    payload = xmalloc(plen);
    c->id = ++w->next_call;
    c->tool = name;
    c->resolve = resolve;
    c->reject = reject;
    JSValueProtect(ctx, resolve);
    JSValueProtect(ctx, reject);
    c->next = w->calls;
    w->calls = c;
    w->ncalls++;
    plen = (size_t)snprintf(payload, plen, "{\"call\":%u,\"name\":%s,\"args\":%s}",
                            (unsigned)c->id, name_json, args);
    wk_send_big(w->fd, SBX_CHAN_TOOL_CALL, w->proc, payload, plen);
    free(payload);
    free(args);
    free(name_json);
    return promise;
}

static void set_exception(struct jsw *w, JSContextRef ctx, JSObjectRef d)
{
    json_t *exc = json_object();
    const char *keys[] = {"name", "message", "stack"};

    for (int i = 0; i < 3; i++) {
        size_t len = 0;
        char *s = utf8_of(ctx, get(ctx, d, keys[i]), &len);
        json_object_set_new(exc, keys[i], s ? json_stringn(s, len) : json_string(""));
        free(s);
    }
    json_object_set_new(w->rec, "exit_code", json_integer(1));
    json_object_set_new(w->rec, "exception", exc);
}

/* done(ok, jsonText | {name, message, stack}) */
static JSValueRef native_done(JSContextRef ctx, JSObjectRef fn, JSObjectRef self,
                              size_t argc, const JSValueRef argv[], JSValueRef *exc)
{
    struct jsw *w = W;

    if (w->proc == 0 || w->done || argc < 2)
        return JSValueMakeUndefined(ctx);
    w->done = 1;
    if (JSValueToBoolean(ctx, argv[0])) {
        if (JSValueIsString(ctx, argv[1])) {
            w->result = utf8_of(ctx, argv[1], &w->result_len);
            if (w->result && w->result_len > w->max_message - 65536) {
                char msg[128];
                snprintf(msg, sizeof(msg),
                         "the return value is too large (%zu bytes of JSON)",
                         w->result_len);
                free(w->result);
                w->result = NULL;
                set_exception(w, ctx, make_error(ctx, "RangeError", msg));
            }
        }
    } else if (JSValueIsObject(ctx, argv[1])) {
        set_exception(w, ctx, (JSObjectRef)argv[1]);
    }
    return JSValueMakeUndefined(ctx);
}

/* ---- contexts ------------------------------------------------------------ */

static JSValueRef eval(JSContextRef ctx, const char *src, size_t len, const char *url,
                       JSValueRef *exc)
{
    JSStringRef s = str_from_utf8(src, len), u = str_c(url);
    JSValueRef v = JSEvaluateScript(ctx, s, NULL, u, 1, exc);
    JSStringRelease(s);
    JSStringRelease(u);
    return v;
}

/* What the prelude's api(op, arg) does (prelude.js). */
enum api_op {
    API_START,
    API_DESCRIBE,
    API_TOOLS,
    API_GLOBALS,
    API_RESTORE,
    API_CONSOLE,
};

static JSValueRef api_call(JSContextRef ctx, JSObjectRef api, enum api_op op, size_t argc,
                           const JSValueRef *argv, JSValueRef *exc)
{
    JSValueRef a[3] = {JSValueMakeNumber(ctx, op)};

    for (size_t i = 0; i < argc && i < 2; i++)
        a[i + 1] = argv[i];
    return JSObjectCallAsFunction(ctx, api, NULL, argc < 2 ? argc + 1 : 3, a, exc);
}

/* prelude.js without its comments and indentation: the engine hashes the
 * text for its code cache in every fresh global (issue 21: the full text
 * cost 6% of a run's instructions, measured in-process). Only a comment that
 * starts its line is taken out, so nothing inside a string is (prelude.js
 * keeps to that); newlines stay, and with them line numbers. */
static JSStringRef prelude_text(const char *s, size_t len)
{
    char *out = xmalloc(len + 1);
    size_t o = 0, i = 0;
    int in_comment = 0;
    JSStringRef r;

    while (i < len) {
        const char *nl = memchr(s + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - s) : len, b = i;

        while (b < end && (s[b] == ' ' || s[b] == '\t'))
            b++;
        if (!in_comment && end - b >= 2 && s[b] == '/' && s[b + 1] == '*') {
            in_comment = 1;
            b += 2;
        }
        if (in_comment) {
            const char *close = memmem(s + b, end - b, "*/", 2);
            b = close ? (size_t)(close + 2 - s) : end;
            in_comment = !close;
            while (b < end && s[b] == ' ')
                b++;
        }
        memcpy(out + o, s + b, end - b);
        o += end - b;
        if (nl)
            out[o++] = '\n';
        i = end + 1;
    }
    r = str_from_utf8(out, o);
    free(out);
    return r;
}

/* A new global with the prelude run in it; *api_out protected. `keep`: a
 * persistent global (snapshot and restore work on it). */
static JSGlobalContextRef new_context(struct jsw *w, int keep, JSObjectRef *api_out)
{
    JSGlobalContextRef ctx = JSGlobalContextCreateInGroup(w->group, NULL);
    JSValueRef exc = NULL, fnv, apiv, con, args[5];
    JSStringRef n;

    if (!ctx)
        return NULL;
    /* the prelude's text as a JS string once per process: no UTF-16
     * conversion per run (its length still counts per run: prelude_text) */
    if (!w->prelude_src)
        w->prelude_src =
            prelude_text(jsw_prelude_js, (size_t)(jsw_prelude_js_end - jsw_prelude_js));
    n = name_ref("prelude");
    fnv = JSEvaluateScript(ctx, w->prelude_src, NULL, n, 1, &exc);
    JSStringRelease(n);
    if (!fnv || !JSValueIsObject(ctx, fnv))
        goto fail;
    n = name_ref("out");
    args[0] = JSObjectMakeFunctionWithCallback(ctx, n, native_out);
    JSStringRelease(n);
    n = name_ref("call");
    args[1] = JSObjectMakeFunctionWithCallback(ctx, n, native_call);
    JSStringRelease(n);
    n = name_ref("done");
    args[2] = JSObjectMakeFunctionWithCallback(ctx, n, native_done);
    JSStringRelease(n);
    args[3] = JSValueMakeNumber(ctx, (double)(sizeof(WRAP_HEAD) - 1));
    args[4] = JSValueMakeBoolean(ctx, keep);
    apiv = JSObjectCallAsFunction(ctx, (JSObjectRef)fnv, NULL, 5, args, &exc);
    if (!apiv || !JSValueIsObject(ctx, apiv))
        goto fail;
    con = api_call(ctx, (JSObjectRef)apiv, API_CONSOLE, 0, NULL, &exc);
    if (!con || exc)
        goto fail;
    n = name_ref("console");
    JSObjectSetProperty(ctx, JSContextGetGlobalObject(ctx), n, con,
                        kJSPropertyAttributeDontEnum, NULL);
    JSStringRelease(n);
    JSValueProtect(ctx, apiv);
    *api_out = (JSObjectRef)apiv;
    return ctx;
fail:
    wk_log(w->fd, "the prelude failed");
    JSGlobalContextRelease(ctx);
    return NULL;
}

static void drop_context(JSGlobalContextRef ctx, JSObjectRef api)
{
    if (!ctx)
        return;
    if (api)
        JSValueUnprotect(ctx, api);
    JSGlobalContextRelease(ctx);
}

static JSStringRef strip(struct jsw *w, const char *code, size_t len, JSValueRef *exc);
static void collect_if_big(struct jsw *w);

int jsw_engine_init(struct jsw *w, const char **why)
{
    JSValueRef exc = NULL, f;
    JSStringRef n;

    W = w;
    w->group = JSContextGroupCreate();
    if (!w->group) {
        *why = "cannot create a JavaScriptCore context group";
        return -1;
    }
    w->strip_ctx = JSGlobalContextCreateInGroup(w->group, NULL);
    if (!w->strip_ctx) {
        *why = "cannot create the stripper's context";
        return -1;
    }
    if (!eval(w->strip_ctx, jsw_strip_js, (size_t)(jsw_strip_js_end - jsw_strip_js),
              "strip", &exc) ||
        exc) {
        *why = "the TypeScript stripper failed to load";
        return -1;
    }
    n = str_c("sbxStrip");
    f = JSObjectGetProperty(w->strip_ctx, JSContextGetGlobalObject(w->strip_ctx), n,
                            NULL);
    JSStringRelease(n);
    if (!JSValueIsObject(w->strip_ctx, f)) {
        *why = "the TypeScript stripper has no sbxStrip";
        return -1;
    }
    w->strip_fn = (JSObjectRef)f;
    JSValueProtect(w->strip_ctx, f);
    w->max_message = JSW_MESSAGE_MAX;
    /* The first strip is ~15 ms cold; a worker is started ahead of use, so
     * pay it here. */
    {
        static const char warm[] = "interface P { x: number }\n"
                                   "const f = <T,>(a: T, b?: string): T => a as T;\n"
                                   "return f<P>({ x: 1 } satisfies P)!;";
        JSStringRef r = strip(w, warm, sizeof(warm) - 1, &exc);
        if (r)
            JSStringRelease(r);
    }
    return 0;
}

static void drop_calls(struct jsw *w)
{
    while (w->calls) {
        struct jsw_call *c = w->calls;
        w->calls = c->next;
        JSValueUnprotect(w->ctx, c->resolve);
        JSValueUnprotect(w->ctx, c->reject);
        free(c->tool);
        free(c);
    }
    w->ncalls = 0;
}

/* The spare stays: it was made after the last run ended and no program has
 * run in it, so it is as fresh as one made now, and a recycled worker that
 * would remake it answers HELLO 0.1-0.2 ms later, often while the next
 * sandbox.create already waits for it. The stripped programs go: the next
 * sandbox starts with nothing of this one's. */
void jsw_engine_reset(struct jsw *w)
{
    drop_context(w->pctx, w->papi);
    w->pctx = NULL;
    w->papi = NULL;
    jsw_scache_clear(&w->scache);
    JSGarbageCollect(w->strip_ctx);
}

void jsw_engine_deinit(struct jsw *w)
{
    jsw_engine_reset(w);
    drop_context(w->spare, w->spare_api);
    w->spare = NULL;
    w->spare_api = NULL;
    if (w->prelude_src)
        JSStringRelease(w->prelude_src);
    if (w->strip_ctx) {
        if (w->strip_fn)
            JSValueUnprotect(w->strip_ctx, w->strip_fn);
        JSGlobalContextRelease(w->strip_ctx);
    }
    if (w->group)
        JSContextGroupRelease(w->group);
    free(w->more);
}

/* ---- running a program ---------------------------------------------------- */

/* The tool's global name: external_ + the id with every character that is
 * not [A-Za-z0-9_$] replaced by '_'. */
static char *global_name(const char *id)
{
    size_t n = strlen(id);
    char *g = xmalloc(sizeof(TOOL_PREFIX) + n);

    memcpy(g, TOOL_PREFIX, sizeof(TOOL_PREFIX) - 1);
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        g[sizeof(TOOL_PREFIX) - 1 + i] =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '$'
                ? c
                : '_';
    }
    g[sizeof(TOOL_PREFIX) - 1 + n] = '\0';
    return g;
}

static const char *check_spawn(json_t *req)
{
    json_t *v;

    if (!json_is_string(json_object_get(req, "code")))
        return "the js worker runs only {\"code\": ...} requests";
    v = json_object_get(req, "persistent");
    if (v && !json_is_boolean(v))
        return "persistent must be a boolean";
    v = json_object_get(req, "window");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
              json_integer_value(v) > (json_int_t)UINT32_MAX))
        return "window must be an integer in 0..2^32-1";
    v = json_object_get(req, "max_message");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 65536 * 2))
        return "max_message must be an integer of at least 128 KiB";
    return wk_check_tools(json_object_get(req, "tools"));
}

static json_t *exit_record(int code, const char *error)
{
    json_t *r = json_pack("{s:i,s:i,s:b,s:b}", "exit_code", code, "signal", 0,
                          "timed_out", 0, "killed", 0);
    if (error)
        json_object_set_new(r, "error", json_string(error));
    return r;
}

/* [[globalName, id], ...] as JSON, first sanitised name wins. */
static char *tool_list(json_t *tools)
{
    json_t *list = json_array(), *seen = json_object(), *t;
    size_t i;
    char *s;

    json_array_foreach(tools, i, t) {
        char *g = global_name(json_string_value(t));
        if (!json_object_get(seen, g)) {
            json_object_set_new(seen, g, json_true());
            json_array_append_new(list, json_pack("[s,s]", g, json_string_value(t)));
        }
        free(g);
    }
    s = json_dumps(list, JSON_COMPACT);
    json_decref(list);
    json_decref(seen);
    return s;
}

/* Whether plain JavaScript could mean something else as TypeScript: the one
 * such form is a call or tagged template with type arguments, `f<T>(x)`,
 * which JavaScript parses as comparisons, `(f < T) > (x)`. So: a '<', and a
 * '>' followed (after blanks) by '(', '`' or a comment. Anything else that
 * parses as JavaScript is the same program in TypeScript, and the stripper
 * gives it back unchanged. */
static int maybe_type_arguments(const char *code, size_t len)
{
    if (!memchr(code, '<', len))
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (code[i] != '>')
            continue;
        size_t j = i + 1;
        while (j < len &&
               (code[j] == ' ' || code[j] == '\t' || code[j] == '\n' || code[j] == '\r'))
            j++;
        if (j < len && (code[j] == '(' || code[j] == '`' || code[j] == '/'))
            return 1;
    }
    return 0;
}

/* Text that plain JavaScript rarely holds and TypeScript usually does
 * (annotations, declarations, assertions). A JavaScriptCore syntax check
 * that fails costs more than the stripper itself (measured: 0.25 ms more per
 * 150 B TypeScript program), so a program showing one of these goes straight
 * to the stripper. A false match only costs the stripper's time. */
static int looks_like_typescript(const char *code, size_t len)
{
    static const char *const marks[] = {
        ": string", ": number", ": boolean",  ": any",       ": unknown",  ": void",
        ": never",  ": Record", ": Promise",  ": Array",     "interface ", "type ",
        " as ",     "?:",       "): ",        "!.",          "!)",         "!;",
        "!,",       "!]",       "enum ",      "declare ",    "satisfies ", "readonly ",
        "private ", "public ",  "protected ", "implements ", "namespace ", "abstract ",
    };
    for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
        if (memmem(code, len, marks[i], strlen(marks[i])))
            return 1;
    return 0;
}

/* The stripped, wrapped program as a JS string, or NULL with *exc. A program
 * that parses as JavaScript and cannot mean anything else skips the
 * stripper: a parse is a small part of a TypeScript transform. */
static JSStringRef strip(struct jsw *w, const char *code, size_t len, JSValueRef *exc)
{
    size_t hl = sizeof(WRAP_HEAD) - 1, tl = sizeof(WRAP_TAIL) - 1;
    char *src = xmalloc(hl + len + tl);
    JSStringRef s, out;
    JSValueRef args[2], r;

    memcpy(src, memmem(code, len, "await", 5) ? WRAP_HEAD : WRAP_HEAD_SYNC, hl);
    memcpy(src + hl, code, len);
    memcpy(src + hl + len, WRAP_TAIL, tl);
    s = str_from_utf8(src, hl + len + tl);
    free(src);
    if (!looks_like_typescript(code, len) && !maybe_type_arguments(code, len) &&
        JSCheckScriptSyntax(w->strip_ctx, s, NULL, 1, NULL))
        return s;
    args[0] = JSValueMakeString(w->strip_ctx, s);
    args[1] = JSValueMakeNumber(w->strip_ctx, (double)hl);
    JSStringRelease(s);
    r = JSObjectCallAsFunction(w->strip_ctx, w->strip_fn, NULL, 2, args, exc);
    if (!r || !JSValueIsString(w->strip_ctx, r))
        return NULL;
    out = JSValueToStringCopy(w->strip_ctx, r, exc);
    return out;
}

/* The run failed before the program started: a described exception. */
static void fail_with(struct jsw *w, JSValueRef exc)
{
    JSValueRef d = exc ? api_call(w->ctx, w->api, API_DESCRIBE, 1, &exc, NULL) : NULL;

    w->done = 1;
    if (d && JSValueIsObject(w->ctx, d))
        set_exception(w, w->ctx, (JSObjectRef)d);
    else
        json_object_set_new(w->rec, "exit_code", json_integer(1));
}

void jsw_engine_spawn(struct jsw *w, uint32_t proc, json_t *req)
{
    const char *why = check_spawn(req);
    json_t *v, *code;
    int persistent, is_async;
    JSValueRef exc = NULL, fn, listv;
    JSStringRef src, url;
    char *tl;

    if (why) {
        json_t *rec = exit_record(126, why);
        wk_send_json_big(w->fd, SBX_CHAN_EXIT, proc, rec);
        json_decref(rec);
        return;
    }
    persistent = json_is_true(json_object_get(req, "persistent"));
    w->proc = proc;
    w->credit = (v = json_object_get(req, "window")) ? (uint64_t)json_integer_value(v)
                                                     : SBX_CHAN_WINDOW;
    unsigned last_mb = w->memory_mb;
    w->memory_mb = (v = json_object_get(req, "memory_limit_mb")) && json_is_integer(v) &&
                           json_integer_value(v) > 0
                       ? (unsigned)json_integer_value(v)
                       : 0;
    /* A shared worker (js_share.c) may come from a sandbox with a higher
     * limit: what its runs left must not count against this one's. */
    if (w->memory_mb && (!last_mb || w->memory_mb < last_mb))
        collect_if_big(w);
    w->max_message = (v = json_object_get(req, "max_message")) &&
                             (size_t)json_integer_value(v) < JSW_MESSAGE_MAX
                         ? (size_t)json_integer_value(v)
                         : JSW_MESSAGE_MAX;
    w->done = 0;
    w->rec = exit_record(0, NULL);
    w->logs = json_array();
    w->logs_bytes = 0;
    w->logs_truncated = 0;
    w->result = NULL;
    w->result_len = 0;
    w->next_call = 0;

    if (persistent) {
        if (!w->pctx)
            w->pctx = new_context(w, 1, &w->papi);
        w->ctx = w->pctx;
        w->api = w->papi;
    } else if (w->spare) {
        w->ctx = w->spare;
        w->api = w->spare_api;
        w->spare = NULL;
        w->spare_api = NULL;
    } else {
        w->ctx = new_context(w, 0, &w->api);
    }
    {
        char st[48];
        int n = snprintf(st, sizeof(st), "{\"os_pid\":%d}", (int)getpid());
        wk_send(w->fd, SBX_CHAN_STARTED, proc, st, (size_t)n);
    }
    if (!w->ctx) {
        w->done = 1;
        json_object_set_new(w->rec, "exit_code", json_integer(1));
        json_object_set_new(w->rec, "error",
                            json_string("cannot create a JavaScript context"));
        jsw_engine_finish(w);
        return;
    }

    /* no tools (the usual short program): no list to build and pass */
    if (json_array_size(json_object_get(req, "tools")) > 0) {
        tl = tool_list(json_object_get(req, "tools"));
        JSStringRef s = str_c(tl);
        listv = JSValueMakeFromJSONString(w->ctx, s);
        JSStringRelease(s);
        free(tl);
        if (listv)
            api_call(w->ctx, w->api, API_TOOLS, 1, &listv, NULL);
    }

    code = json_object_get(req, "code");
    double t0 = now_ms();
    src = jsw_scache_get(&w->scache, json_string_value(code), json_string_length(code));
    if (!src) {
        src = strip(w, json_string_value(code), json_string_length(code), &exc);
        if (src)
            jsw_scache_put(&w->scache, json_string_value(code), json_string_length(code),
                           src);
    }
    /* for make bench (CHANNEL.md): what stripping TypeScript costs */
    json_object_set_new(w->rec, "strip_ms", json_real(now_ms() - t0));
    if (!src) {
        fail_with(w, exc);
        jsw_engine_finish(w);
        return;
    }
    is_async = JSStringGetLength(src) > 1 && JSStringGetCharactersPtr(src)[1] == 'a';
    url = name_ref("program");
    fn = JSEvaluateScript(w->ctx, src, NULL, url, 1, &exc);
    JSStringRelease(url);
    JSStringRelease(src);
    if (!fn || exc) {
        fail_with(w, exc);
        jsw_engine_finish(w);
        return;
    }
    {
        /* the wrapper the program got (strip): an async one returns the
         * engine's own promise, followed without looking up its then */
        JSValueRef sa[2] = {fn, JSValueMakeBoolean(w->ctx, is_async)};
        api_call(w->ctx, w->api, API_START, 2, sa, &exc);
    }
    if (w->done)
        jsw_engine_finish(w);
}

void jsw_engine_finish(struct jsw *w)
{
    uint32_t proc = w->proc;
    json_t *exc = json_object_get(w->rec, "exception");
    char *s;
    size_t len;

    if (!proc || !w->done)
        return;
    if (exc) {
        /* Like node: "Uncaught " and the stack (it starts "Name: message")
         * on stderr. */
        const char *name = json_string_value(json_object_get(exc, "name"));
        const char *msg = json_string_value(json_object_get(exc, "message"));
        const char *stack = json_string_value(json_object_get(exc, "stack"));
        size_t n = strlen(name) + strlen(msg) + strlen(stack) + 16;
        char *line = xmalloc(n);
        if (*stack && strncmp(stack, name, strlen(name)) == 0)
            n = (size_t)snprintf(line, n, "Uncaught %s\n", stack);
        else
            n = (size_t)snprintf(line, n, "Uncaught %s%s%s\n", name, *name ? ": " : "",
                                 msg);
        jsw_output(w, SBX_CHAN_STDERR, (const uint8_t *)line, n);
        free(line);
    }
    json_object_set(w->rec, "logs", w->logs);
    if (w->logs_truncated)
        json_object_set_new(w->rec, "logs_truncated", json_true());
    s = json_dumps(w->rec, JSON_COMPACT);
    if (!s)
        x_oom("json_dumps");
    len = strlen(s);
    if (w->result) {
        /* The result is already JSON text: spliced in, not parsed again. */
        char *t = xmalloc(len + w->result_len + 16);
        memcpy(t, s, len - 1);
        len--;
        memcpy(t + len, ",\"result\":", 10);
        len += 10;
        memcpy(t + len, w->result, w->result_len);
        len += w->result_len;
        t[len++] = '}';
        free(s);
        s = t;
    }
    wk_send_big(w->fd, SBX_CHAN_EXIT, proc, s, len);
    free(s);

    drop_calls(w);
    if (w->ctx != w->pctx)
        drop_context(w->ctx, w->api);
    w->ctx = NULL;
    w->api = NULL;
    w->proc = 0;
    w->done = 0;
    json_decref(w->rec);
    w->rec = NULL;
    json_decref(w->logs);
    w->logs = NULL;
    free(w->result);
    w->result = NULL;
    collect_if_big(w);
    jsw_engine_prepare(w);
}

/* The daemon counts the worker's resident memory against each program's
 * limit, so what an earlier program left behind must not count against the
 * next: past half the limit, a full collection after the run (the EXIT is
 * out already). */
static void collect_if_big(struct jsw *w)
{
    char buf[128];
    unsigned long size = 0, res = 0;
    ssize_t n;

    if (w->statm_fd < 0 || w->memory_mb == 0)
        return;
    n = pread(w->statm_fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return;
    buf[n] = '\0';
    if (sscanf(buf, "%lu %lu", &size, &res) != 2 ||
        (double)res * (double)w->page_size < (double)w->memory_mb * 1024 * 1024 / 2)
        return;
    JSSynchronousGarbageCollectForDebugging(w->strip_ctx);
}

void jsw_engine_prepare(struct jsw *w)
{
    if (!w->spare && w->proc == 0)
        w->spare = new_context(w, 0, &w->spare_api);
}

/*
 * A program waiting on a tool call leaves the worker idle for the client's
 * whole round trip; the spare made then is off the critical path of the
 * next run, which otherwise waits for the one made after this run's EXIT
 * (0.1-0.2 ms). It is a new global in which nothing has run, made before
 * this program's later steps: what they do stays in their own global
 * (itest_js_fresh, test_prepared_mid_run). Only when no frame is already
 * waiting: an answer that is there goes first.
 */
void jsw_engine_idle(void *worker)
{
    struct jsw *w = worker;
    struct pollfd p = {w->fd, POLLIN, 0};

    if (w->spare || w->proc == 0 || w->done || w->ncalls == 0 || w->ctx == w->pctx)
        return;
    if (poll(&p, 1, 0) != 0)
        return;
    w->spare = new_context(w, 0, &w->spare_api);
}

void jsw_engine_tool_result(struct jsw *w, uint32_t proc, const char *payload, size_t len)
{
    JSContextRef ctx = w->ctx;
    JSStringRef s;
    JSValueRef v, arg;
    JSObjectRef r;
    struct jsw_call **pp, *c;
    double id;

    if (proc == 0 || proc != w->proc || w->done || !ctx)
        return; /* the program ended; a late answer has nobody to go to */
    s = str_from_utf8(payload, len);
    v = JSValueMakeFromJSONString(ctx, s);
    JSStringRelease(s);
    if (!v || !JSValueIsObject(ctx, v)) {
        wk_log(w->fd, "malformed TOOL_RESULT for proc %u ignored", (unsigned)proc);
        return;
    }
    id = JSValueToNumber(ctx, get(ctx, (JSObjectRef)v, "call"), NULL);
    for (pp = &w->calls; *pp; pp = &(*pp)->next)
        if ((double)(*pp)->id == id)
            break;
    if (!*pp) {
        wk_log(w->fd, "TOOL_RESULT for unknown call %g ignored", id);
        return;
    }
    c = *pp;
    *pp = c->next;
    w->ncalls--;
    {
        JSStringRef rn = name_ref("result");
        int has = JSObjectHasProperty(ctx, (JSObjectRef)v, rn);
        JSStringRelease(rn);
        if (has) {
            arg = get(ctx, (JSObjectRef)v, "result");
            r = c->resolve;
        } else {
            JSValueRef e = get(ctx, (JSObjectRef)v, "error");
            JSValueRef m =
                JSValueIsObject(ctx, e) ? get(ctx, (JSObjectRef)e, "message") : NULL;
            /* the daemon passes a checked data.name as error.name */
            JSValueRef dn =
                JSValueIsObject(ctx, e) ? get(ctx, (JSObjectRef)e, "name") : NULL;
            char *msg = m && JSValueIsString(ctx, m) ? utf8_of(ctx, m, NULL) : NULL;
            JSObjectRef err = make_error(ctx, "Error", msg ? msg : "tool call failed");
            free(msg);
            set(ctx, err, "name",
                dn && JSValueIsString(ctx, dn) ? dn : make_string(ctx, "ToolError"));
            if (JSValueIsObject(ctx, e))
                set(ctx, err, "code", get(ctx, (JSObjectRef)e, "code"));
            set(ctx, err, "tool", make_string(ctx, c->tool));
            arg = err;
            r = c->reject;
        }
    }
    /* The program's continuation runs when this outermost call returns. */
    JSObjectCallAsFunction(ctx, r, NULL, 1, &arg, NULL);
    JSValueUnprotect(ctx, c->resolve);
    JSValueUnprotect(ctx, c->reject);
    free(c->tool);
    free(c);
    if (w->done)
        jsw_engine_finish(w);
}

/* ---- snapshot and restore ------------------------------------------------------ */

static char *snap_error(const char *msg, size_t *len_out)
{
    json_t *j = json_pack("{s:s}", "error", msg);
    char *s = json_dumps(j, JSON_COMPACT);

    json_decref(j);
    *len_out = strlen(s);
    return s;
}

char *jsw_engine_snapshot(struct jsw *w, size_t *len_out)
{
    JSValueRef exc = NULL, r;
    char *g, *s;
    size_t glen;

    if (!w->pctx) {
        s = xstrdup("{\"globals\":{}}");
        *len_out = strlen(s);
        return s;
    }
    r = api_call(w->pctx, w->papi, API_GLOBALS, 0, NULL, &exc);
    if (!r || exc || !JSValueIsString(w->pctx, r))
        return snap_error("cannot take the snapshot", len_out);
    g = utf8_of(w->pctx, r, &glen);
    if (!g)
        return snap_error("cannot take the snapshot", len_out);
    if (glen + 16 > SBX_CHAN_MAX_PAYLOAD) {
        free(g);
        return snap_error("snapshot too large", len_out);
    }
    s = xmalloc(glen + 16);
    *len_out = (size_t)snprintf(s, glen + 16, "{\"globals\":%s}", g);
    free(g);
    return s;
}

int jsw_engine_restore(struct jsw *w, const char *payload, size_t len, const char **why)
{
    json_t *j = json_loadb(payload, len, 0, NULL);
    json_t *globals = json_object_get(j, "globals");
    JSValueRef exc = NULL, arg;
    char *txt;

    if (!json_is_object(globals)) {
        json_decref(j);
        *why = "RESTORE wants {\"globals\": {...}}";
        return -1;
    }
    if (!w->pctx && !(w->pctx = new_context(w, 1, &w->papi))) {
        json_decref(j);
        *why = "cannot create a JavaScript context";
        return -1;
    }
    txt = json_dumps(globals, JSON_COMPACT);
    json_decref(j);
    arg = make_string(w->pctx, txt);
    free(txt);
    api_call(w->pctx, w->papi, API_RESTORE, 1, &arg, &exc);
    if (exc) {
        *why = "a global could not be set";
        return -1;
    }
    return 0;
}
