/*
 * duk_isolate.c - the worker's Duktape heap: an accounting allocator, the
 * fatal handler, the globals a sandbox sees (console, read_stdin, process,
 * external_<tool>), running one program, snapshot and restore.
 *
 * Duktape reports errors by longjmp. Every entry into JS therefore goes
 * through duk_safe_call / duk_pcall, and C code that holds malloc'd memory
 * never calls a Duktape function that may throw: text headed for the heap is
 * converted into a Duktape buffer (freed by the GC if anything fails), text
 * leaving it is copied out only after the protected call returned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "workers/duktape/duk_worker_int.h"

/* Size header in front of every block: 16 bytes keep malloc's alignment. */
#define BLK_HDR 16
#define FILENAME "<sandbox>"
#define TOOL_PREFIX "external_"
#define HID_TOOL DUK_HIDDEN_SYMBOL("sbxTool")
#define STASH_BUILTINS "builtins"
#define STASH_TOOLS "tools"

static struct dukw *worker_of(duk_context *ctx)
{
    duk_memory_functions f;

    duk_get_memory_functions(ctx, &f);
    return f.udata;
}

/* ---- accounting allocator ------------------------------------------------- */

/*
 * Every block carries its size, so the heap's footprint is known exactly.
 * A refused allocation sets mem_exceeded: Duktape then runs an emergency GC
 * and retries, and throws RangeError if that fails too. The flag is sticky
 * for the run, and a run that saw it discards the heap (CHANNEL.md `reset`):
 * a heap that failed allocations half-way is not trusted with state.
 */
static void mem_give_up(struct dukw *w);

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int mem_charge(struct dukw *w, size_t old_total, size_t new_total)
{
    if (new_total > old_total && new_total - old_total > w->mem_limit - w->mem_used) {
        w->mem_exceeded = 1;
        if (w->proc && w->mem_refused_at == 0)
            w->mem_refused_at = now_ms();
        return -1;
    }
    return 0;
}

/* Called on every allocation: a run that is still at the cap a while after
 * its first refusal is ended; one that got well below it again is forgiven. */
static void mem_watch(struct dukw *w)
{
    if (w->mem_refused_at == 0 || !w->proc)
        return;
    if (w->mem_used < w->mem_limit / 10 * 9)
        w->mem_refused_at = 0;
    else if (now_ms() - w->mem_refused_at >= DUKW_MEM_GIVE_UP_MS)
        mem_give_up(w);
}

/*
 * A program that holds the heap at the cap (a bomb of distinct strings) makes
 * every small allocation fail, and each failure costs Duktape an emergency
 * GC before it retries (each a pass over a full heap): the program crawls
 * on at the cap until its timeout. When the heap is still near the cap
 * DUKW_MEM_GIVE_UP_MS after the first refusal of a run, the worker ends it
 * the
 * way the limit promises: an EXIT saying so, then the worker exits (no
 * longjmp out of an allocator is safe), and the daemon starts a fresh one.
 */
static void mem_give_up(struct dukw *w)
{
    char msg[96];
    json_t *j;

    snprintf(msg, sizeof(msg), "memory limit exceeded (%u MiB): out of memory",
             w->memory_mb);
    j = json_pack("{s:i,s:i,s:b,s:b,s:s,s:b,s:b}", "exit_code", 1, "signal", 0,
                  "timed_out", 0, "killed", 0, "error", msg, "reset", 1, "exiting", 1);
    if (j)
        wk_send_json(w->fd, SBX_CHAN_EXIT, w->proc, j);
    _exit(0);
}

static void *mem_alloc(void *udata, duk_size_t size)
{
    struct dukw *w = udata;
    uint8_t *p;

    if (size == 0)
        return NULL;
    mem_watch(w);
    if (size > SIZE_MAX - BLK_HDR || mem_charge(w, 0, size + BLK_HDR) < 0) {
        w->mem_exceeded = 1;
        return NULL;
    }
    p = malloc(size + BLK_HDR);
    if (!p) {
        w->mem_exceeded = 1;
        return NULL;
    }
    memcpy(p, &size, sizeof(size));
    w->mem_used += size + BLK_HDR;
    return p + BLK_HDR;
}

static void mem_free(void *udata, void *ptr)
{
    struct dukw *w = udata;
    uint8_t *base;
    size_t size;

    if (!ptr)
        return;
    base = (uint8_t *)ptr - BLK_HDR;
    memcpy(&size, base, sizeof(size));
    w->mem_used -= size + BLK_HDR;
    free(base);
}

static void *mem_realloc(void *udata, void *ptr, duk_size_t size)
{
    struct dukw *w = udata;
    uint8_t *base, *q;
    size_t old;

    if (!ptr)
        return mem_alloc(udata, size);
    if (size == 0) { /* Duktape accepts NULL for a zero-size result */
        mem_free(udata, ptr);
        return NULL;
    }
    base = (uint8_t *)ptr - BLK_HDR;
    memcpy(&old, base, sizeof(old));
    mem_watch(w);
    if (size > SIZE_MAX - BLK_HDR || mem_charge(w, old + BLK_HDR, size + BLK_HDR) < 0) {
        w->mem_exceeded = 1;
        return NULL;
    }
    q = realloc(base, size + BLK_HDR);
    if (!q) {
        w->mem_exceeded = 1;
        return NULL;
    }
    memcpy(q, &size, sizeof(size));
    w->mem_used = w->mem_used - old + size;
    return q + BLK_HDR;
}

/* ---- fatal errors ----------------------------------------------------------- */

/*
 * Duktape calls this for errors it cannot throw (one outside any protected
 * call, internal failures). It must not return. The running process gets its
 * EXIT, then the worker dies: the daemon sees EOF and starts a new one.
 */
static void on_fatal(void *udata, const char *msg)
{
    struct dukw *w = udata;
    char raw[512], text[1024];
    size_t pos = 0, n;
    json_t *j;

    snprintf(raw, sizeof(raw), "duktape fatal error: %s", msg ? msg : "?");
    n = dukw_utf8_from_cesu8((uint8_t *)text, sizeof(text) - 1, (const uint8_t *)raw,
                             strlen(raw), &pos);
    text[n] = '\0';
    if (w->proc) {
        j = json_pack("{s:i,s:i,s:b,s:b,s:s,s:b,s:b}", "exit_code", 1, "signal", 0,
                      "timed_out", 0, "killed", 0, "error", text, "reset", 1, "exiting",
                      1);
        if (j)
            wk_send_json(w->fd, SBX_CHAN_EXIT, w->proc, j);
    } else {
        j = json_pack("{s:s}", "message", text);
        if (j)
            wk_send_json(w->fd, SBX_CHAN_ERROR, 0, j);
    }
    _exit(70);
}

/* ---- helpers that run inside Duktape (they may throw) -------------------- */

/* Pushes UTF-8 text as a proper (CESU-8) JS string. */
static void push_utf8(duk_context *ctx, const char *s, size_t len)
{
    size_t pos = 0,
           n = dukw_cesu8_from_utf8(NULL, SIZE_MAX, (const uint8_t *)s, len, &pos, 1);
    uint8_t *buf = duk_push_fixed_buffer(ctx, n);

    pos = 0;
    dukw_cesu8_from_utf8(buf, n, (const uint8_t *)s, len, &pos, 1);
    duk_buffer_to_string(ctx, -1);
}

/*
 * Safe-call bodies. duk_safe_call runs them in the caller's value stack frame
 * (not a fresh one like a C function gets), so they index relative to the top
 * they start with, never from 0.
 */

/* JSON text that is pure ASCII (jansson JSON_ENSURE_ASCII) -> JS value. */
static duk_ret_t json_decode_safe(duk_context *ctx, void *udata)
{
    duk_push_string(ctx, udata);
    duk_json_decode(ctx, -1);
    return 1;
}

/* [v] -> [JSON text or undefined]; throws like JSON.stringify. */
static duk_ret_t json_encode_safe(duk_context *ctx, void *udata)
{
    (void)udata;
    duk_json_encode(ctx, -1);
    return 1;
}

/* [v] -> [String(v)]: unlike ToString, String() also accepts symbols. */
static duk_ret_t string_of_safe(duk_context *ctx, void *udata)
{
    (void)udata;
    duk_get_global_string(ctx, "String");
    duk_insert(ctx, -2);
    duk_call(ctx, 1);
    return 1;
}

/* Replaces the value at idx by its console text. Throws only on OOM. */
static void console_format(duk_context *ctx, duk_idx_t idx)
{
    if (duk_is_string(ctx, idx))
        return;
    duk_dup(ctx, idx);
    if (duk_is_error(ctx, idx)) {
        /* An Error prints as its stack (first line "Name: message"). */
        duk_get_prop_string(ctx, idx, "stack");
        if (duk_is_string(ctx, -1)) {
            duk_replace(ctx, idx);
            duk_pop(ctx);
            return;
        }
        duk_pop(ctx);
    } else if (duk_is_object(ctx, idx) && !duk_is_function(ctx, idx)) {
        if (duk_safe_call(ctx, json_encode_safe, NULL, 1, 1) == DUK_EXEC_SUCCESS &&
            duk_is_string(ctx, -1)) {
            duk_replace(ctx, idx);
            return;
        }
        duk_pop(ctx); /* cycles, throwing toJSON: fall back to String() */
        duk_dup(ctx, idx);
    }
    if (duk_safe_call(ctx, string_of_safe, NULL, 1, 1) != DUK_EXEC_SUCCESS) {
        duk_pop(ctx);
        duk_push_string(ctx, "[unprintable]");
    }
    duk_replace(ctx, idx);
}

/* ---- console, read_stdin, external_<tool> -------------------------------- */

/* console.log/info/debug (magic 0, stdout), console.warn/error (1, stderr). */
static duk_ret_t console_fn(duk_context *ctx)
{
    struct dukw *w = worker_of(ctx);
    duk_idx_t i, n = duk_get_top(ctx);
    uint8_t type = duk_get_current_magic(ctx) ? SBX_CHAN_STDERR : SBX_CHAN_STDOUT;
    const char *s;
    duk_size_t len;

    for (i = 0; i < n; i++)
        console_format(ctx, i);
    duk_push_string(ctx, " ");
    duk_insert(ctx, 0);
    duk_join(ctx, n);
    duk_push_string(ctx, "\n");
    duk_concat(ctx, 2);
    s = duk_get_lstring(ctx, -1, &len);
    /* Sent at once, never held back: output printed just before an endless
     * loop must still reach the daemon. */
    dukw_output_cesu8(w, type, (const uint8_t *)s, len);
    return 0;
}

/* read_stdin(): the next chunk of stdin as a string, or null after EOF. */
static duk_ret_t read_stdin_fn(duk_context *ctx)
{
    struct dukw *w = worker_of(ctx);
    struct dukw_stdin *in = &w->in;

    for (;;) {
        if (in->len > 0) {
            size_t pos = 0, n = dukw_cesu8_from_utf8(NULL, SIZE_MAX, in->buf, in->len,
                                                     &pos, in->eof);
            if (pos > 0) { /* else only the start of a character is here yet */
                uint8_t *buf = duk_push_fixed_buffer(ctx, n);
                size_t used = pos;

                pos = 0;
                dukw_cesu8_from_utf8(buf, n, in->buf, used, &pos, in->eof);
                memmove(in->buf, in->buf + used, in->len - used);
                in->len -= used;
                duk_buffer_to_string(ctx, -1);
                return 1;
            }
        }
        if (in->eof || w->proc == 0) {
            duk_push_null(ctx);
            return 1;
        }
        dukw_pump_nested(w);
    }
}

struct tool_error {
    json_t *reply;    /* borrowed */
    const char *tool; /* a Duktape string on the caller's stack */
};

/* [] -> [Error] built from a TOOL_RESULT's {"error": {code, message, name?}}. */
static duk_ret_t push_tool_error(duk_context *ctx, void *udata)
{
    struct tool_error *te = udata;
    json_t *err = json_object_get(te->reply, "error");
    json_t *msg = json_object_get(err, "message");
    json_t *code = json_object_get(err, "code");

    if (json_is_string(msg))
        push_utf8(ctx, json_string_value(msg), json_string_length(msg));
    else
        duk_push_string(ctx, "tool call failed");
    duk_push_error_object(ctx, DUK_ERR_ERROR, "%s", duk_get_string(ctx, -1));
    if (json_is_string(json_object_get(err, "name"))) {
        duk_push_string(ctx, json_string_value(json_object_get(err, "name")));
        duk_put_prop_string(ctx, -2, "name");
    }
    if (json_is_integer(code)) {
        duk_push_number(ctx, (duk_double_t)json_integer_value(code));
        duk_put_prop_string(ctx, -2, "code");
    }
    duk_push_string(ctx, te->tool);
    duk_put_prop_string(ctx, -2, "tool");
    return 1;
}

/*
 * external_<name>(args): JSON-encodes args, sends TOOL_CALL and blocks until
 * the matching TOOL_RESULT, serving other frames meanwhile. Only JSON
 * crosses; a tool error becomes a catchable Error with .code.
 */
static duk_ret_t tool_fn(duk_context *ctx)
{
    struct dukw *w = worker_of(ctx);
    const char *name, *args;
    duk_size_t name_len, args_len;
    char *name_u8 = NULL, *args_u8 = NULL, *name_json = NULL, *payload = NULL;
    size_t args_u8_len = 0, plen;
    uint32_t call;
    json_t *reply, *result, *jname;
    struct tool_error te;
    int rc;

    if (w->proc == 0)
        return duk_error(ctx, DUK_ERR_ERROR,
                         "tools can only be called by a running process");
    duk_set_top(ctx, 1);
    duk_push_current_function(ctx);
    duk_get_prop_string(ctx, -1, HID_TOOL);
    name = duk_require_lstring(ctx, -1, &name_len); /* [arg fn name] */
    duk_dup(ctx, 0);
    args = duk_json_encode(ctx, -1); /* throws on cycles, like JSON.stringify */
    if (!duk_is_string(ctx, -1)) {
        args = "null"; /* undefined, a function, a symbol */
        args_len = 4;
    } else {
        duk_get_lstring(ctx, -1, &args_len);
    }

    /* From here on C memory is held: no throwing Duktape calls until freed. */
    name_u8 = dukw_utf8_dup((const uint8_t *)name, name_len, NULL);
    args_u8 = dukw_utf8_dup((const uint8_t *)args, args_len, &args_u8_len);
    jname = name_u8 ? json_string(name_u8) : NULL;
    name_json = jname ? json_dumps(jname, JSON_ENCODE_ANY) : NULL;
    json_decref(jname);
    plen = name_json && args_u8 ? 48 + strlen(name_json) + args_u8_len : 0;
    payload = plen ? malloc(plen) : NULL;
    rc = payload ? 0 : -1;
    if (rc == 0 && plen > SBX_CHAN_MAX_PAYLOAD)
        rc = -2;
    if (rc == 0) {
        call = ++w->next_call;
        if (call == 0)
            call = ++w->next_call;
        plen = (size_t)snprintf(payload, plen, "{\"call\":%u,\"name\":%s,\"args\":%s}",
                                (unsigned)call, name_json, args_u8);
        wk_send(w->fd, SBX_CHAN_TOOL_CALL, w->proc, payload, plen);
    }
    free(payload);
    free(name_json);
    free(args_u8);
    free(name_u8);
    if (rc == -1)
        return duk_error(ctx, DUK_ERR_ERROR, "out of memory calling a tool");
    if (rc == -2)
        return duk_error(ctx, DUK_ERR_RANGE_ERROR, "tool arguments too large");

    w->wait_call = call;
    while (!w->tool_reply)
        dukw_pump_nested(w);
    reply = w->tool_reply;
    w->tool_reply = NULL;
    w->wait_call = 0;

    result = json_object_get(reply, "result");
    if (result) {
        char *txt =
            json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY | JSON_ENSURE_ASCII);

        json_decref(reply);
        if (!txt)
            return duk_error(ctx, DUK_ERR_ERROR, "out of memory reading a tool result");
        rc = duk_safe_call(ctx, json_decode_safe, txt, 0, 1);
        free(txt);
        if (rc != DUK_EXEC_SUCCESS)
            return duk_throw(ctx);
        return 1;
    }
    if (!json_is_object(json_object_get(reply, "error"))) {
        json_decref(reply);
        return duk_error(ctx, DUK_ERR_ERROR, "malformed tool result");
    }
    te.reply = reply;
    te.tool = duk_get_string(ctx, 2);
    duk_safe_call(ctx, push_tool_error, &te, 0, 1); /* the Error, or what failed */
    json_decref(reply);
    return duk_throw(ctx);
}

/* ---- heap setup ------------------------------------------------------------ */

static void put_console_fn(duk_context *ctx, const char *name, int magic)
{
    duk_push_c_function(ctx, console_fn, DUK_VARARGS);
    duk_set_magic(ctx, -1, magic);
    duk_put_prop_string(ctx, -2, name);
}

/* Removes I/O and code-loading globals, adds ours, records the builtins. */
static duk_ret_t setup_globals(duk_context *ctx, void *udata)
{
    /* The whole `Duktape` object goes (issue 16, item 7): Duktape.Pointer
     * and Duktape.info hand out live heap addresses, Duktape.act the call
     * stack's internals, Duktape.fin runs finalizers at odd times (GC, heap
     * teardown) outside any process, Duktape.Thread/gc/compact reach the
     * engine's machinery, modSearch/modLoaded are a loader. No sandbox
     * program needs any of it; standard ES covers the rest. */
    static const char *const gone[] = {"print", "alert", "require", "Duktape", NULL};
    size_t i;

    (void)udata;
    duk_push_global_object(ctx);
    for (i = 0; gone[i]; i++)
        duk_del_prop_string(ctx, -1, gone[i]);

    duk_push_object(ctx);
    put_console_fn(ctx, "log", 0);
    put_console_fn(ctx, "info", 0);
    put_console_fn(ctx, "debug", 0);
    put_console_fn(ctx, "warn", 1);
    put_console_fn(ctx, "error", 1);
    duk_put_prop_string(ctx, -2, "console");
    duk_push_c_function(ctx, read_stdin_fn, 0);
    duk_put_prop_string(ctx, -2, "read_stdin");

    /* Everything present now is a builtin that snapshots skip; "process" is
     * replaced by every SPAWN, so it counts too. */
    duk_push_global_stash(ctx);
    duk_push_object(ctx);
    duk_enum(ctx, -3, DUK_ENUM_OWN_PROPERTIES_ONLY | DUK_ENUM_INCLUDE_NONENUMERABLE);
    while (duk_next(ctx, -1, 0)) {
        duk_push_true(ctx);
        duk_put_prop(ctx, -4);
    }
    duk_pop(ctx);
    duk_push_true(ctx);
    duk_put_prop_string(ctx, -2, "process");
    duk_put_prop_string(ctx, -2, STASH_BUILTINS);
    duk_push_array(ctx);
    duk_put_prop_string(ctx, -2, STASH_TOOLS);
    duk_pop_2(ctx);
    return 0;
}

int dukw_isolate_create(struct dukw *w)
{
    duk_context *ctx;

    w->mem_exceeded = 0;
    ctx = duk_create_heap(mem_alloc, mem_realloc, mem_free, w, on_fatal);
    if (!ctx)
        return -1;
    if (duk_safe_call(ctx, setup_globals, NULL, 0, 1) != DUK_EXEC_SUCCESS ||
        w->mem_exceeded) {
        duk_destroy_heap(ctx);
        return -1;
    }
    duk_pop(ctx);
    w->ctx = ctx;
    return 0;
}

void dukw_isolate_destroy(struct dukw *w)
{
    if (!w->ctx)
        return;
    duk_destroy_heap(w->ctx);
    w->ctx = NULL;
}

/* Replaces the heap; on failure the next SPAWN tries again. */
static int recreate(struct dukw *w)
{
    dukw_isolate_destroy(w);
    if (dukw_isolate_create(w) < 0) {
        w->reset_pending = 1;
        return -1;
    }
    w->reset_pending = 0;
    return 0;
}

/* ---- one run ---------------------------------------------------------------- */

struct run_setup {
    uint32_t proc;
    const char *env_json; /* ASCII JSON object */
    const char *cwd;      /* UTF-8 */
    json_t *tools;        /* array of strings, borrowed */
};

/* Defines `process` and the external_<tool> functions for this run. */
static duk_ret_t setup_run(duk_context *ctx, void *udata)
{
    struct run_setup *rs = udata;
    duk_idx_t b = duk_get_top(ctx); /* a safe call shares its caller's frame */
    duk_uarridx_t i, n;
    size_t k;
    json_t *t;

    duk_push_global_object(ctx); /* b */
    duk_push_global_stash(ctx);  /* b+1 */

    /* Tools of the previous run go; this run's come. */
    duk_get_prop_string(ctx, b + 1, STASH_TOOLS); /* b+2 */
    n = (duk_uarridx_t)duk_get_length(ctx, b + 2);
    for (i = 0; i < n; i++) {
        duk_get_prop_index(ctx, b + 2, i);
        duk_del_prop(ctx, b);
    }
    duk_pop(ctx);
    duk_push_array(ctx); /* b+2 */
    json_array_foreach(rs->tools, k, t) {
        duk_push_c_function(ctx, tool_fn, 1);
        push_utf8(ctx, json_string_value(t), json_string_length(t));
        duk_put_prop_string(ctx, -2, HID_TOOL);
        duk_push_string(ctx, TOOL_PREFIX);
        push_utf8(ctx, json_string_value(t), json_string_length(t));
        duk_concat(ctx, 2);
        duk_dup(ctx, -1);
        duk_put_prop_index(ctx, b + 2, (duk_uarridx_t)k);
        duk_insert(ctx, -2);
        duk_put_prop(ctx, b);
    }
    duk_put_prop_string(ctx, b + 1, STASH_TOOLS);

    duk_push_object(ctx);
    duk_push_uint(ctx, rs->proc);
    duk_put_prop_string(ctx, -2, "pid");
    duk_push_string(ctx, rs->env_json);
    duk_json_decode(ctx, -1);
    duk_put_prop_string(ctx, -2, "env");
    push_utf8(ctx, rs->cwd, strlen(rs->cwd));
    duk_put_prop_string(ctx, -2, "cwd");
    duk_push_array(ctx);
    duk_put_prop_string(ctx, -2, "argv");
    duk_put_prop_string(ctx, b, "process");
    return 0;
}

struct code_arg {
    const uint8_t *src; /* CESU-8 */
    size_t len;
};

/* Compiles and runs the program: [] -> [completion value]. */
static duk_ret_t run_code(duk_context *ctx, void *udata)
{
    struct code_arg *c = udata;

    duk_push_lstring(ctx, (const char *)c->src, c->len);
    duk_push_string(ctx, FILENAME);
    duk_compile(ctx, 0); /* global code: calling it yields the completion value */
    duk_call(ctx, 0);
    return 1;
}

/* [err] -> [name message stack], all strings. */
static duk_ret_t describe_error(duk_context *ctx, void *udata)
{
    duk_idx_t e = duk_get_top(ctx) - 1;

    (void)udata;
    if (duk_is_object(ctx, e)) {
        duk_get_prop_string(ctx, e, "name");
        if (duk_is_undefined(ctx, -1)) {
            duk_pop(ctx);
            duk_push_string(ctx, "");
        }
        duk_to_string(ctx, -1);
        duk_get_prop_string(ctx, e, "message");
        if (duk_is_undefined(ctx, -1)) {
            duk_pop(ctx);
            duk_dup(ctx, e);
            string_of_safe(ctx, NULL);
        }
        duk_to_string(ctx, -1);
        duk_get_prop_string(ctx, e, "stack");
        if (!duk_is_string(ctx, -1)) {
            duk_pop(ctx);
            duk_push_string(ctx, "");
        }
    } else { /* throw "text", throw 42: no name, no stack */
        duk_push_string(ctx, "");
        duk_dup(ctx, e);
        string_of_safe(ctx, NULL);
        duk_push_string(ctx, "");
    }
    return 3;
}

/* Copies the string at idx out as UTF-8, cut to max bytes on a character
 * boundary. Returns NULL on OOM. */
static char *utf8_out(duk_context *ctx, duk_idx_t idx, size_t max, size_t *len_out)
{
    duk_size_t len;
    const char *s = duk_get_lstring(ctx, idx, &len);
    size_t n;
    char *u = dukw_utf8_dup((const uint8_t *)(s ? s : ""), s ? len : 0, &n);

    if (u && n > max) {
        n = max;
        while (n > 0 && ((uint8_t)u[n] & 0xc0) == 0x80)
            n--;
        u[n] = '\0';
    }
    if (len_out)
        *len_out = u ? n : 0;
    return u;
}

static json_t *exit_record(int exit_code, const char *error, int reset)
{
    json_t *j = json_pack("{s:i,s:i,s:b,s:b,s:b}", "exit_code", exit_code, "signal", 0,
                          "timed_out", 0, "killed", 0, "reset", reset);

    if (j && error)
        json_object_set_new(j, "error", json_string(error));
    return j;
}

/*
 * Sends EXIT (`rec` stolen), with `result` spliced in as a JSON value when
 * given: JSON text from Duktape is embedded as is, not re-serialized (which
 * would turn 0.1 into 0.10000000000000001).
 */
static void send_exit(struct dukw *w, uint32_t proc, json_t *rec, const char *result,
                      size_t rlen)
{
    char *s, *payload;
    size_t slen;

    if (!rec)
        return;
    if (result && rlen > SBX_CHAN_MAX_PAYLOAD - 512) {
        char msg[128];

        snprintf(msg, sizeof(msg),
                 "completion value too large to return (%zu bytes of JSON)", rlen);
        json_object_set_new(rec, "error", json_string(msg));
        result = NULL;
    }
    s = json_dumps(rec, JSON_COMPACT);
    json_decref(rec);
    if (!s)
        return;
    slen = strlen(s);
    if (!result || slen + rlen + 16 > SBX_CHAN_MAX_PAYLOAD ||
        !(payload = malloc(slen + rlen + 16))) {
        wk_send(w->fd, SBX_CHAN_EXIT, proc, s, slen);
        free(s);
        return;
    }
    /* s ends in '}': {...,"result":<text>} */
    memcpy(payload, s, slen - 1);
    slen--;
    memcpy(payload + slen, ",\"result\":", 10);
    slen += 10;
    memcpy(payload + slen, result, rlen);
    slen += rlen;
    payload[slen++] = '}';
    wk_send(w->fd, SBX_CHAN_EXIT, proc, payload, slen);
    free(payload);
    free(s);
}

/* An uncaught error at the stack top: "Uncaught ..." on stderr, the record. */
static json_t *uncaught(struct dukw *w)
{
    duk_context *ctx = w->ctx;
    char *name, *msg, *stack, *line;
    size_t nlen, mlen, slen;
    json_t *rec, *exc;

    if (duk_safe_call(ctx, describe_error, NULL, 1, 3) != DUK_EXEC_SUCCESS) {
        duk_pop_3(ctx);
        duk_push_string(ctx, "Error");
        duk_push_string(ctx, "(the thrown value could not be described)");
        duk_push_string(ctx, "");
    }
    name = utf8_out(ctx, -3, DUKW_EXC_MAX, &nlen);
    msg = utf8_out(ctx, -2, DUKW_EXC_MAX, &mlen);
    stack = utf8_out(ctx, -1, DUKW_EXC_MAX, &slen);
    duk_pop_3(ctx);
    if (!name || !msg || !stack) {
        free(name);
        free(msg);
        free(stack);
        return exit_record(1, "out of memory describing an uncaught error", 0);
    }

    /* Like node: the stack when there is one (it starts "Name: message"). */
    line = malloc(nlen + mlen + slen + 16);
    if (line) {
        int n;
        if (slen)
            n = snprintf(line, nlen + mlen + slen + 16, "Uncaught %s\n", stack);
        else if (nlen)
            n = snprintf(line, nlen + mlen + slen + 16, "Uncaught %s: %s\n", name, msg);
        else
            n = snprintf(line, nlen + mlen + slen + 16, "Uncaught %s\n", msg);
        if (n > 0)
            dukw_output(w, SBX_CHAN_STDERR, (const uint8_t *)line, (size_t)n);
        free(line);
    }

    rec = exit_record(1, NULL, 0);
    exc = json_object();
    if (rec && exc) {
        json_object_set_new(exc, "name", json_stringn(name, nlen));
        json_object_set_new(exc, "message", json_stringn(msg, mlen));
        json_object_set_new(exc, "stack", json_stringn(stack, slen));
        json_object_set(rec, "exception", exc);
    }
    json_decref(exc);
    free(name);
    free(msg);
    free(stack);
    return rec;
}

/* Parses and checks a SPAWN request. Returns NULL, or a static message. */
static const char *check_spawn(json_t *req, json_int_t *window)
{
    json_t *v;

    if (!json_is_string(json_object_get(req, "code")))
        return "the Duktape worker runs only {\"code\": ...} requests";
    v = json_object_get(req, "env");
    if (v && !json_is_object(v))
        return "env must be an object";
    v = json_object_get(req, "cwd");
    if (v && !json_is_string(v))
        return "cwd must be a string";
    v = json_object_get(req, "fresh");
    if (v && !json_is_boolean(v))
        return "fresh must be a boolean";
    v = json_object_get(req, "timeout_ms");
    if (v && !json_is_integer(v))
        return "timeout_ms must be an integer";
    v = json_object_get(req, "window");
    *window = SBX_CHAN_WINDOW;
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > (json_int_t)UINT32_MAX)
            return "window must be an integer in 0..2^32-1";
        *window = json_integer_value(v);
    }
    return wk_check_tools(json_object_get(req, "tools"));
}

static void stdin_clear(struct dukw_stdin *in)
{
    in->len = 0;
    in->eof = 0;
}

void dukw_isolate_run(struct dukw *w, uint32_t proc, json_t *req)
{
    struct run_setup rs;
    struct code_arg code;
    json_int_t window;
    const char *why = check_spawn(req, &window);
    json_t *env, *tools, *rec, *code_j;
    char *env_json = NULL, *result = NULL;
    size_t pos, rlen = 0;
    uint8_t *src = NULL;
    int reset, rc;
    duk_context *ctx;

    if (why) {
        send_exit(w, proc, exit_record(126, why, 0), NULL, 0);
        return;
    }

    /* A heap that failed outside a run (or was never made) is replaced and
     * the run says so; "fresh" replaces a healthy heap and says nothing. */
    reset = w->reset_pending || w->mem_exceeded || !w->ctx;
    if (reset || json_is_true(json_object_get(req, "fresh"))) {
        if (recreate(w) < 0) {
            send_exit(w, proc, exit_record(1, "cannot create the Duktape heap", 1), NULL,
                      0);
            return;
        }
    }
    ctx = w->ctx;
    w->mem_exceeded = 0;
    w->mem_refused_at = 0;
    w->proc = proc;
    w->credit = (uint64_t)window;
    stdin_clear(&w->in);

    env = json_object_get(req, "env");
    tools = json_object_get(req, "tools");
    env_json = env ? json_dumps(env, JSON_COMPACT | JSON_ENSURE_ASCII) : strdup("{}");
    code_j = json_object_get(req, "code");
    pos = 0;
    code.len =
        dukw_cesu8_from_utf8(NULL, SIZE_MAX, (const uint8_t *)json_string_value(code_j),
                             json_string_length(code_j), &pos, 1);
    src = malloc(code.len + 1);
    rs.proc = proc;
    rs.env_json = env_json;
    rs.cwd = json_is_string(json_object_get(req, "cwd"))
                 ? json_string_value(json_object_get(req, "cwd"))
                 : "/";
    rs.tools = json_is_array(tools) ? tools : NULL;
    if (!rs.tools)
        rs.tools = json_array();
    else
        json_incref(rs.tools);
    if (!env_json || !src || !rs.tools) {
        rec = exit_record(1, "out of memory starting the process", 0);
        goto out;
    }
    pos = 0;
    dukw_cesu8_from_utf8(src, code.len, (const uint8_t *)json_string_value(code_j),
                         json_string_length(code_j), &pos, 1);
    code.src = src;

    if (duk_safe_call(ctx, setup_run, &rs, 0, 1) != DUK_EXEC_SUCCESS || w->mem_exceeded) {
        duk_pop(ctx);
        rec = NULL; /* decided below */
        if (!w->mem_exceeded)
            rec = exit_record(1, "cannot set up the process globals", 0);
        goto out;
    }
    duk_pop(ctx);

    {
        json_t *st =
            json_pack("{s:i,s:i}", "os_pid", (int)getpid(), "uid", (int)getuid());
        if (st)
            wk_send_json(w->fd, SBX_CHAN_STARTED, proc, st);
        json_decref(st);
    }

    rc = duk_safe_call(ctx, run_code, &code, 0, 1);
    free(src);
    src = NULL;
    rec = NULL;
    if (rc == DUK_EXEC_SUCCESS) {
        /* undefined, functions, symbols: JSON.stringify gives undefined, no key */
        if (duk_safe_call(ctx, json_encode_safe, NULL, 1, 1) == DUK_EXEC_SUCCESS) {
            if (duk_is_string(ctx, -1) && !(result = utf8_out(ctx, -1, SIZE_MAX, &rlen)))
                rec = exit_record(1, "out of memory returning the completion value", 0);
        } else if (!w->mem_exceeded) {
            wk_log(w->fd, "proc %u: completion value is not JSON-serializable",
                   (unsigned)proc);
        }
        duk_pop(ctx);
        if (!rec && !w->mem_exceeded)
            rec = exit_record(0, NULL, reset);
    } else if (!w->mem_exceeded) {
        rec = uncaught(w);
        if (rec && reset)
            json_object_set_new(rec, "reset", json_true());
    } else {
        duk_pop(ctx);
    }

out:
    if (w->mem_exceeded) {
        char msg[96];

        json_decref(rec);
        free(result);
        result = NULL;
        snprintf(msg, sizeof(msg), "memory limit exceeded (%u MiB): out of memory",
                 w->memory_mb);
        rec = exit_record(1, msg, 1);
    }
    duk_set_top(ctx, 0);
    send_exit(w, proc, rec, result, rlen);
    w->proc = 0;
    stdin_clear(&w->in);
    if (w->mem_exceeded)
        recreate(w); /* state lost, as the EXIT said */
    json_decref(rs.tools);
    free(result);
    free(env_json);
    free(src);
}

/* ---- snapshot and restore ---------------------------------------------------- */

/* [] -> [array of the own enumerable non-builtin global names] */
static duk_ret_t snapshot_keys(duk_context *ctx, void *udata)
{
    duk_idx_t b = duk_get_top(ctx);
    duk_uarridx_t n = 0;

    (void)udata;
    duk_push_global_stash(ctx);                  /* b */
    duk_get_prop_string(ctx, b, STASH_BUILTINS); /* b+1 */
    duk_push_array(ctx);                         /* b+2 */
    duk_push_global_object(ctx);                 /* b+3 */
    /* b+4: own properties, no symbols, no hidden keys */
    duk_enum(ctx, b + 3, DUK_ENUM_OWN_PROPERTIES_ONLY);
    while (duk_next(ctx, b + 4, 0)) {
        duk_dup(ctx, -1);
        if (duk_has_prop(ctx, b + 1)) {
            duk_pop(ctx);
            continue;
        }
        duk_put_prop_index(ctx, b + 2, n++);
    }
    duk_dup(ctx, b + 2);
    return 1;
}

/* [keys] -> [key JSON, value JSON] for keys[*udata]; undefined for values
 * that are skipped (functions, undefined, what JSON.stringify drops). */
static duk_ret_t snapshot_entry(duk_context *ctx, void *udata)
{
    duk_uarridx_t i = *(duk_uarridx_t *)udata;
    duk_idx_t b = duk_get_top(ctx) - 1; /* keys */

    duk_get_prop_index(ctx, b, i); /* b+1: key */
    duk_push_global_object(ctx);   /* b+2 */
    duk_dup(ctx, b + 1);
    duk_get_prop(ctx, b + 2); /* b+3: value (a getter may run, or throw) */
    if (duk_is_function(ctx, b + 3) || duk_is_undefined(ctx, b + 3)) {
        duk_push_undefined(ctx);
        duk_push_undefined(ctx);
        return 2;
    }
    duk_json_encode(ctx, b + 3);
    duk_dup(ctx, b + 1);
    duk_json_encode(ctx, -1);
    duk_dup(ctx, b + 3);
    return 2;
}

struct sbuf {
    char *p;
    size_t len, cap;
    int err; /* 1 = OOM, 2 = over SBX_CHAN_MAX_PAYLOAD */
};

/* Makes room for n more bytes (plus a NUL). Returns 0, or -1 with b->err. */
static int sbuf_reserve(struct sbuf *b, size_t n)
{
    size_t cap;
    char *p;

    if (b->err)
        return -1;
    if (n > SBX_CHAN_MAX_PAYLOAD - b->len) {
        b->err = 2;
        return -1;
    }
    if (b->len + n + 1 <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1)
        cap *= 2;
    p = realloc(b->p, cap);
    if (!p) {
        b->err = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void sbuf_add(struct sbuf *b, const char *s, size_t n)
{
    if (sbuf_reserve(b, n) < 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Appends a Duktape string (CESU-8) as UTF-8. */
static void sbuf_add_cesu8(struct sbuf *b, duk_context *ctx, duk_idx_t idx)
{
    duk_size_t len;
    const uint8_t *s = (const uint8_t *)duk_get_lstring(ctx, idx, &len);
    size_t pos = 0, n = dukw_utf8_from_cesu8(NULL, SIZE_MAX, s, len, &pos);

    if (sbuf_reserve(b, n) < 0)
        return;
    pos = 0;
    dukw_utf8_from_cesu8((uint8_t *)b->p + b->len, n, s, len, &pos);
    b->len += n;
    b->p[b->len] = '\0';
}

static char *snap_error(const char *msg, size_t *len_out)
{
    json_t *j = json_pack("{s:s}", "error", msg);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;

    json_decref(j);
    if (s)
        *len_out = strlen(s);
    return s;
}

char *dukw_isolate_snapshot(struct dukw *w, size_t *len_out)
{
    duk_context *ctx = w->ctx;
    struct sbuf b = {0};
    duk_idx_t top;
    duk_uarridx_t i, n;
    int first = 1, was_exceeded = w->mem_exceeded;

    if (!ctx || w->reset_pending)
        return snap_error("the isolate was lost (reset)", len_out);
    /* We may be nested inside a JS call (a program blocked on output, stdin
     * or a tool): only touch the stack above the current top. */
    top = duk_get_top(ctx);
    if (duk_safe_call(ctx, snapshot_keys, NULL, 0, 1) != DUK_EXEC_SUCCESS) {
        duk_set_top(ctx, top);
        goto fail;
    }
    sbuf_add(&b, "{\"globals\":{", 12);
    n = (duk_uarridx_t)duk_get_length(ctx, -1);
    for (i = 0; i < n && !b.err; i++) {
        duk_dup(ctx, -1);
        if (duk_safe_call(ctx, snapshot_entry, &i, 1, 2) == DUK_EXEC_SUCCESS &&
            duk_is_string(ctx, -2) && duk_is_string(ctx, -1)) {
            if (!first)
                sbuf_add(&b, ",", 1);
            first = 0;
            sbuf_add_cesu8(&b, ctx, -2);
            sbuf_add(&b, ":", 1);
            sbuf_add_cesu8(&b, ctx, -1);
        }
        duk_pop_2(ctx);
    }
    sbuf_add(&b, "}}", 2);
    duk_set_top(ctx, top);

fail:
    if (w->mem_exceeded && !was_exceeded) {
        free(b.p);
        if (w->proc == 0)
            w->reset_pending = 1; /* a run notices the flag itself */
        return snap_error("memory limit exceeded while taking the snapshot", len_out);
    }
    if (b.err == 2) {
        free(b.p);
        return snap_error("snapshot too large", len_out);
    }
    if (b.err || !b.p) {
        free(b.p);
        return snap_error("cannot take the snapshot", len_out);
    }
    *len_out = b.len;
    return b.p;
}

/* [] -> []: global[k] = v for each k of JSON.parse(udata). */
static duk_ret_t restore_globals(duk_context *ctx, void *udata)
{
    duk_idx_t b = duk_get_top(ctx);

    duk_push_global_stash(ctx);                  /* b */
    duk_get_prop_string(ctx, b, STASH_BUILTINS); /* b+1 */
    duk_push_global_object(ctx);                 /* b+2 */
    duk_push_string(ctx, udata);
    duk_json_decode(ctx, b + 3);                        /* b+3 */
    duk_enum(ctx, b + 3, DUK_ENUM_OWN_PROPERTIES_ONLY); /* b+4 */
    while (duk_next(ctx, b + 4, 1)) {                   /* [key value] */
        const char *k = duk_get_string(ctx, -2);
        duk_dup(ctx, -2);
        /* Never a builtin; never __proto__, which would set the prototype. */
        if (duk_has_prop(ctx, b + 1) || (k && strcmp(k, "__proto__") == 0)) {
            duk_pop_2(ctx);
            continue;
        }
        duk_put_prop(ctx, b + 2);
    }
    return 0;
}

int dukw_isolate_restore(struct dukw *w, json_t *state, const char **why)
{
    json_t *globals = json_object_get(state, "globals");
    char *txt;
    duk_idx_t top;
    int rc;

    if (!json_is_object(globals)) {
        *why = "RESTORE wants {\"globals\": {...}}";
        return -1;
    }
    if ((!w->ctx || w->reset_pending) && w->proc == 0 && recreate(w) < 0) {
        *why = "cannot create the Duktape heap";
        return -1;
    }
    if (!w->ctx) {
        *why = "no isolate";
        return -1;
    }
    txt = json_dumps(globals, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!txt) {
        *why = "out of memory";
        return -1;
    }
    top = duk_get_top(w->ctx);
    rc = duk_safe_call(w->ctx, restore_globals, txt, 0, 1);
    duk_set_top(w->ctx, top);
    free(txt);
    if (w->mem_exceeded) {
        if (w->proc == 0)
            w->reset_pending = 1;
        *why = "memory limit exceeded while restoring";
        return -1;
    }
    if (rc != DUK_EXEC_SUCCESS) {
        *why = "a global could not be set";
        return -1;
    }
    return 0;
}
