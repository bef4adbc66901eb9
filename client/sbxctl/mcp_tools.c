/*
 * mcp_tools.c - the tools of `sbxctl mcp` (see mcp.c for the server).
 *
 * Each tool's arguments are declared once, in a table: tools/list builds the
 * JSON Schema from it and tools/call checks the arguments against it, so the
 * two cannot drift. Bad arguments are a tool error (isError), as MCP asks,
 * with a message that names the argument.
 *
 *   exec_command    process.exec (streamed into this call; process.started names
 *                   its pid first, so a cancel can kill it)
 *   run_code        the same, in the code sandbox; the answer is result + logs
 *   spawn_process   process.spawn without streaming
 *   process_output  [process.wait with a timeout] -> process.attach, follow false
 *   kill_process    process.kill
 *   sandbox_info    sandbox.get -> process.list
 *   read_file, write_file, edit_file, list_directory, directory_tree,
 *   move_file, search_files, get_file_info: fs.* (mcp_files.c)
 *
 * exec_command and run_code follow their process: cancelling the call kills it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "sbxctl.h"

enum kind { K_STRING, K_INT, K_ENV, K_COMMAND, K_SIGNAL };

struct param {
    const char *name;
    enum kind kind;
    int required;
    json_int_t lo, hi; /* K_INT */
    const char *desc;
};

struct tool {
    const char *name, *title, *desc;
    const struct param *params;
    const char *output_schema; /* JSON text */
    const char *annotations;   /* JSON text */
    int progress;
    void (*start)(struct call *c);
};

#define MAX_MS 86400000

static const char command_desc[] =
    "The command: a string runs with sh -c, an array of strings is an argv. "
    "On the duktape and js providers it is JavaScript source.";

static const struct param exec_params[] = {
    {"command", K_COMMAND, 1, 0, 0, command_desc},
    {"cwd", K_STRING, 0, 0, 0, "Working directory (an absolute path)."},
    {"env", K_ENV, 0, 0, 0, "Extra environment variables."},
    {"timeout_ms", K_INT, 0, 1, MAX_MS,
     "Kill the command after this many milliseconds (exit code 124)."},
    {"stdin", K_STRING, 0, 0, 0,
     "Text written to the command's standard input, then EOF."},
    {NULL, 0, 0, 0, 0, NULL},
};

static const struct param spawn_params[] = {
    {"command", K_COMMAND, 1, 0, 0, command_desc},
    {"cwd", K_STRING, 0, 0, 0, "Working directory (an absolute path)."},
    {"env", K_ENV, 0, 0, 0, "Extra environment variables."},
    {"timeout_ms", K_INT, 0, 1, MAX_MS, "Kill the process after this many milliseconds."},
    {NULL, 0, 0, 0, 0, NULL},
};

static const struct param code_params[] = {
    {"code", K_STRING, 1, 0, 0,
     "A JavaScript (or TypeScript) program: the body of an async function, so top-level "
     "await and return work; its result is the value it returns (on the duktape fallback: "
     "the completion value). console.log lines come back as logs."},
    {"timeout_ms", K_INT, 0, 1, MAX_MS, "Stop the program after this many milliseconds."},
    {NULL, 0, 0, 0, 0, NULL},
};

static const struct param output_params[] = {
    {"pid", K_INT, 1, 1, 0x7fffffff, "The pid spawn_process returned."},
    {"wait_ms", K_INT, 0, 0, 600000,
     "Wait up to this many milliseconds for the process to exit first (default 0)."},
    {"stdout_offset", K_INT, 0, 0, 0x7fffffffffffLL,
     "Byte offset in stdout to read from; default: where the last process_output stopped."},
    {"stderr_offset", K_INT, 0, 0, 0x7fffffffffffLL,
     "Byte offset in stderr to read from; default: where the last process_output stopped."},
    {NULL, 0, 0, 0, 0, NULL},
};

static const struct param kill_params[] = {
    {"pid", K_INT, 1, 1, 0x7fffffff, "The pid of the process."},
    {"signal", K_SIGNAL, 0, 0, 0,
     "Signal name (TERM, KILL, INT...) or number; default KILL."},
    {NULL, 0, 0, 0, 0, NULL},
};

static const struct param no_params[] = {{NULL, 0, 0, 0, 0, NULL}};

static const char exec_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pid\":{\"type\":\"integer\"},"
    "\"exit_code\":{\"type\":\"integer\",\"description\":\"124 on timeout, 128+N when killed by signal N\"},"
    "\"signal\":{\"type\":\"integer\"},"
    "\"timed_out\":{\"type\":\"boolean\"},"
    "\"killed\":{\"type\":\"boolean\"},"
    "\"stdout\":{\"type\":\"string\"},"
    "\"stderr\":{\"type\":\"string\"},"
    "\"truncated\":{\"type\":\"boolean\",\"description\":\"output beyond the kept maximum was left out\"},"
    "\"duration_ms\":{\"type\":\"number\"},"
    "\"error\":{\"type\":[\"string\",\"null\"]},"
    "\"result\":{\"description\":\"the completion value (duktape and js providers)\"},"
    "\"exception\":{\"description\":\"an uncaught JavaScript error (duktape and js providers)\"}"
    "},\"required\":[\"exit_code\",\"stdout\",\"stderr\",\"timed_out\",\"killed\",\"truncated\"]}";

static const char code_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"result\":{\"description\":\"the program's result (JSON)\"},"
    "\"logs\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"error\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},\"message\":{\"type\":\"string\"},\"stack\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"message\"]}]},"
    "\"timed_out\":{\"type\":\"boolean\"},"
    "\"truncated\":{\"type\":\"boolean\"},"
    "\"duration_ms\":{\"type\":\"number\"}"
    "},\"required\":[\"result\",\"logs\",\"error\"]}";

static const char spawn_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pid\":{\"type\":\"integer\"},\"sandbox\":{\"type\":\"string\"}},"
    "\"required\":[\"pid\",\"sandbox\"]}";

static const char output_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pid\":{\"type\":\"integer\"},"
    "\"running\":{\"type\":\"boolean\"},"
    "\"stdout\":{\"type\":\"string\"},"
    "\"stderr\":{\"type\":\"string\"},"
    "\"stdout_offset\":{\"type\":\"integer\",\"description\":\"where the next read of stdout starts\"},"
    "\"stderr_offset\":{\"type\":\"integer\",\"description\":\"where the next read of stderr starts\"},"
    "\"truncated\":{\"type\":\"boolean\",\"description\":\"more output is waiting: call again\"},"
    "\"dropped_bytes\":{\"type\":\"integer\",\"description\":\"output older than sbxd keeps\"},"
    "\"exit_code\":{\"type\":\"integer\"},"
    "\"signal\":{\"type\":\"integer\"},"
    "\"timed_out\":{\"type\":\"boolean\"},"
    "\"killed\":{\"type\":\"boolean\"}"
    "},\"required\":[\"pid\",\"running\",\"stdout\",\"stderr\",\"stdout_offset\",\"stderr_offset\"]}";

static const char kill_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"pid\":{\"type\":\"integer\"},\"already_exited\":{\"type\":\"boolean\"}},"
    "\"required\":[\"pid\",\"already_exited\"]}";

static const char info_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"sandbox\":{\"type\":\"object\"},"
    "\"processes\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
    "\"code_sandbox\":{\"type\":[\"object\",\"null\"],"
    "\"description\":\"run_code's sandbox {id, provider}, once it exists\"}},"
    "\"required\":[\"sandbox\",\"processes\"]}";

/* file tools (mcp_files.c) */
static const struct param fpath_params[] = {
    {"path", K_STRING, 1, 0, 0,
     "A path in the sandbox (relative: from its working directory)."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct param fread_params[] = {
    {"path", K_STRING, 1, 0, 0,
     "A path in the sandbox (relative: from its working directory)."},
    {"offset", K_INT, 0, 0, 0x7fffffffffffLL, "Byte offset to start at (default 0)."},
    {"length", K_INT, 0, 1, 0x7fffffffffffLL,
     "Bytes to read at most (default: --max-output)."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct param fwrite_params[] = {
    {"path", K_STRING, 1, 0, 0,
     "A path in the sandbox; missing directories are created."},
    {"content", K_STRING, 1, 0, 0, "The whole new content (UTF-8 text)."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct param fedit_params[] = {
    {"path", K_STRING, 1, 0, 0, "The file to edit."},
    {"old_text", K_STRING, 1, 0, 0, "Text that occurs exactly once in the file."},
    {"new_text", K_STRING, 1, 0, 0, "What replaces it."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct param ftree_params[] = {
    {"path", K_STRING, 1, 0, 0, "The directory."},
    {"depth", K_INT, 0, 1, 16, "Levels to descend (default 3)."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct param fsearch_params[] = {
    {"path", K_STRING, 1, 0, 0, "The directory to search under (16 levels)."},
    {"pattern", K_STRING, 1, 0, 0, "A glob (*.c) or a part of the name."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct param fmove_params[] = {
    {"source", K_STRING, 1, 0, 0, "What to move."},
    {"destination", K_STRING, 1, 0, 0, "Where to (must not exist)."},
    {NULL, 0, 0, 0, 0, NULL},
};
static const char fs_schema[] = "{\"type\":\"object\"}";
static const char fs_ro[] = "{\"readOnlyHint\":true,\"openWorldHint\":false}";
static const char fs_rw[] =
    "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}";

static void exec_start(struct call *c);
static void code_start(struct call *c);
static void spawn_start(struct call *c);
static void output_start(struct call *c);
static void kill_start(struct call *c);
static void info_start(struct call *c);

static const struct tool tools[] = {
    {"exec_command", "Run a command",
     "Runs a command in the sandbox and waits for it: returns its stdout, stderr and exit "
     "code (a non-zero exit code is a result, not a failed call). The sandbox is created "
     "on first use and "
     "keeps its files between calls. Reports progress while it runs; cancelling the call "
     "kills the command.",
     exec_params, exec_schema,
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}", 1,
     exec_start},
    {"run_code", "Run JavaScript",
     "Runs a JavaScript or TypeScript program in an isolate with a fresh global object "
     "(no filesystem, network, timers or processes) and returns its result (JSON), its "
     "console lines and its uncaught error, if any. Use it for computation.",
     code_params, code_schema,
     "{\"readOnlyHint\":true,\"destructiveHint\":false,\"openWorldHint\":false}", 1,
     code_start},
    {"spawn_process", "Start a background process",
     "Starts a command in the sandbox in the background and returns its pid at once. "
     "Read its output with process_output, stop it with kill_process.",
     spawn_params, spawn_schema,
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}", 0,
     spawn_start},
    {"process_output", "Read a background process's output",
     "Returns the output of a process started with spawn_process since the last read "
     "(or from the given offsets), whether it is still running and, once it exited, its "
     "exit code. wait_ms waits for it to finish first.",
     output_params, output_schema, "{\"readOnlyHint\":true,\"openWorldHint\":false}", 1,
     output_start},
    {"kill_process", "Stop a process",
     "Sends a signal (default KILL) to a process of the sandbox and its process group.",
     kill_params, kill_schema,
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"idempotentHint\":true,"
     "\"openWorldHint\":false}",
     0, kill_start},
    {"sandbox_info", "Describe the sandbox",
     "Returns the command sandbox (id, provider, status, image, working directory, "
     "limits), its processes, and run_code's sandbox once it exists.",
     no_params, info_schema, "{\"readOnlyHint\":true,\"openWorldHint\":false}", 0,
     info_start},
    {"read_file", "Read a file",
     "Reads a file of the sandbox: its text (or base64 for binary), at most --max-output "
     "bytes from offset; eof says whether the rest was read.",
     fread_params, fs_schema, fs_ro, 0, mcpf_read_start},
    {"write_file", "Write a file",
     "Creates or replaces a file of the sandbox with the given text, atomically (readers "
     "see the old or the new file, never half).",
     fwrite_params, fs_schema, fs_rw, 0, mcpf_write_start},
    {"edit_file", "Edit a file",
     "Replaces old_text, which must occur exactly once, with new_text in a text file of "
     "the sandbox, atomically.",
     fedit_params, fs_schema, fs_rw, 0, mcpf_edit_start},
    {"list_directory", "List a directory",
     "Lists a directory of the sandbox: [DIR] and [FILE] lines, sorted.", fpath_params,
     fs_schema, fs_ro, 0, mcpf_list_start},
    {"directory_tree", "Show a directory tree",
     "Lists a directory of the sandbox and its subdirectories (depth levels) by path.",
     ftree_params, fs_schema, fs_ro, 0, mcpf_list_start},
    {"move_file", "Move or rename a file",
     "Moves or renames a file or directory of the sandbox; the destination must not exist.",
     fmove_params, fs_schema, fs_rw, 0, mcpf_move_start},
    {"search_files", "Find files by name",
     "Finds entries under a directory of the sandbox whose name matches a glob or contains "
     "the pattern.",
     fsearch_params, fs_schema, fs_ro, 0, mcpf_list_start},
    {"get_file_info", "Describe a file",
     "Type, size, permission bits, owner uid/gid, modification time and link target of a "
     "path in the sandbox.",
     fpath_params, fs_schema, fs_ro, 0, mcpf_info_start},
};

#define NTOOLS (sizeof(tools) / sizeof(tools[0]))

/* ---- schemas and validation -------------------------------------------------------- */

static json_t *param_schema(const struct param *p)
{
    json_t *s;
    switch (p->kind) {
    case K_STRING:
        s = json_pack("{s:s}", "type", "string");
        break;
    case K_INT:
        s = json_pack("{s:s, s:I, s:I}", "type", "integer", "minimum", p->lo, "maximum",
                      p->hi);
        break;
    case K_ENV:
        s = json_pack("{s:s, s:{s:s}}", "type", "object", "additionalProperties", "type",
                      "string");
        break;
    case K_COMMAND:
        s = json_pack("{s:[{s:s, s:i}, {s:s, s:{s:s}, s:i}]}", "anyOf", "type", "string",
                      "minLength", 1, "type", "array", "items", "type", "string",
                      "minItems", 1);
        break;
    default: /* K_SIGNAL */
        s = json_pack("{s:[s,s]}", "type", "string", "integer");
        break;
    }
    json_object_set_new(s, "description", json_string(p->desc));
    return s;
}

/* Where a tool runs, for its description: a model reads it to know what
 * language its command is in (issue 19). */
static char *where_text(const struct mcp *m, const struct tool *t)
{
    char *s = NULL;
    int n;
    if (t->start == code_start)
        n = asprintf(&s, " Runs on sbxd's %s provider (JavaScript, not a shell).",
                     m && m->code_provider ? m->code_provider : "js");
    else if (m && m->sandbox_name && !m->provider)
        n = asprintf(&s, " Runs in sbxd sandbox %s.", m->sandbox_name);
    else
        n = asprintf(
            &s, " Runs on sbxd's %s provider%s%s%s.",
            m && m->provider ? m->provider : "default", m && m->image ? ", image " : "",
            m && m->image ? m->image : "",
            m && m->provider &&
                    (!strcmp(m->provider, "js") || !strcmp(m->provider, "duktape"))
                ? " (commands are JavaScript, not shell)"
                : "");
    return n < 0 ? NULL : s;
}

static int offered(const struct mcp *m, const struct tool *t)
{
    return !(m && m->code_only) || t->start == code_start;
}

json_t *mcp_tools_list(const struct mcp *m, int with_structured, int with_annotations)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < NTOOLS; i++) {
        const struct tool *t = &tools[i];
        if (!offered(m, t))
            continue;
        json_t *props = json_object(), *req = json_array();
        for (const struct param *p = t->params; p->name; p++) {
            json_object_set_new(props, p->name, param_schema(p));
            if (p->required)
                json_array_append_new(req, json_string(p->name));
        }
        json_t *in = json_pack("{s:s, s:o, s:b}", "type", "object", "properties", props,
                               "additionalProperties", 0);
        if (json_array_size(req))
            json_object_set_new(in, "required", req);
        else
            json_decref(req);
        char *where = where_text(m, t), *desc = NULL;
        if (asprintf(&desc, "%s%s", t->desc, where ? where : "") < 0)
            desc = NULL;
        json_t *o = json_pack("{s:s, s:s, s:o}", "name", t->name, "description",
                              desc ? desc : t->desc, "inputSchema", in);
        free(where);
        free(desc);
        if (with_annotations) {
            json_t *ann = json_loads(t->annotations, 0, NULL);
            json_object_set_new(ann, "title", json_string(t->title));
            json_object_set_new(o, "annotations", ann);
        }
        if (with_structured) {
            json_object_set_new(o, "title", json_string(t->title));
            json_object_set_new(o, "outputSchema", json_loads(t->output_schema, 0, NULL));
        }
        json_array_append_new(arr, o);
    }
    return arr;
}

const struct tool *mcp_tool_find(const struct mcp *m, const char *name)
{
    for (size_t i = 0; name && i < NTOOLS; i++)
        if (strcmp(tools[i].name, name) == 0)
            return offered(m, &tools[i]) ? &tools[i] : NULL;
    return NULL;
}

const char *mcp_tool_name(const struct tool *t)
{
    return t ? t->name : "?";
}

int mcp_tool_has_progress(const struct tool *t)
{
    return t->progress;
}

/* NULL when args fit the table, else a message (static buffer). */
static const char *check_args(const struct tool *t, json_t *args)
{
    static char msg[512];
    const char *key;
    json_t *v;

    json_object_foreach(args, key, v) {
        const struct param *p;
        for (p = t->params; p->name; p++)
            if (strcmp(p->name, key) == 0)
                break;
        if (!p->name) {
            size_t n = (size_t)snprintf(
                msg, sizeof(msg), "unknown argument \"%.64s\"; %s takes", key, t->name);
            for (p = t->params; p->name && n < sizeof(msg); p++)
                n += (size_t)snprintf(msg + n, sizeof(msg) - n, " %s", p->name);
            if (!t->params->name)
                snprintf(msg + n, sizeof(msg) - n, " no arguments");
            return msg;
        }
        const char *want = NULL;
        switch (p->kind) {
        case K_STRING:
            if (!json_is_string(v))
                want = "a string";
            break;
        case K_INT:
            if (!json_is_integer(v) || json_integer_value(v) < p->lo ||
                json_integer_value(v) > p->hi)
                want = "an integer in range";
            break;
        case K_ENV: {
            const char *k2;
            json_t *v2;
            if (!json_is_object(v))
                want = "an object of strings";
            json_object_foreach(v, k2, v2) {
                if (!json_is_string(v2))
                    want = "an object of strings";
            }
            break;
        }
        case K_COMMAND: {
            size_t i;
            json_t *e;
            if (json_is_string(v) ? json_string_length(v) == 0
                                  : !json_is_array(v) || json_array_size(v) == 0)
                want = "a non-empty string or array of strings";
            json_array_foreach(v, i, e) {
                if (!json_is_string(e))
                    want = "a non-empty string or array of strings";
            }
            break;
        }
        case K_SIGNAL:
            if (!json_is_string(v) && !json_is_integer(v))
                want = "a signal name or number";
            break;
        }
        if (want) {
            if (p->kind == K_INT)
                snprintf(msg, sizeof(msg),
                         "argument \"%s\" must be an integer from %" JSON_INTEGER_FORMAT
                         " to %" JSON_INTEGER_FORMAT,
                         p->name, p->lo, p->hi);
            else
                snprintf(msg, sizeof(msg), "argument \"%s\" must be %s", p->name, want);
            return msg;
        }
    }
    for (const struct param *p = t->params; p->name; p++) {
        if (p->required && !json_object_get(args, p->name)) {
            snprintf(msg, sizeof(msg), "missing argument \"%s\"", p->name);
            return msg;
        }
    }
    return NULL;
}

void mcp_tool_start(struct call *c)
{
    const char *bad = check_args(c->tool, c->args);
    if (bad) {
        mcp_answer_error(c, "invalid arguments for %s: %s", c->tool->name, bad);
        return;
    }
    c->tool->start(c);
}

/* ---- shared pieces ----------------------------------------------------------------- */

static int is_code(const struct call *c)
{
    return c->tool->start == code_start;
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
            mcp_slot_lost(m, c->slot);
        int again = c->tool->start == exec_start || c->tool->start == code_start ||
                    c->tool->start == spawn_start || c->tool->start == info_start;
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

void mcp_tool_cancel(struct call *c)
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

int mcp_tool_route(struct mcp *m, const char *method, json_t *params)
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
        if (take_output(&c->out[s], data, len, m->max_output) < len)
            c->truncated = 1;
        if (is_code(c))
            mbuf_append(&c->logs, data, len, m->max_output);
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
            size_t n = take_output(&c->out[s], data + skip, len - skip, m->max_output);
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

char *mcp_tool_progress_text(struct call *c)
{
    char buf[512];
    double secs = ev_now(c->m->loop) - c->t0;
    if (c->tool->start == output_start) {
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
void mcp_tool_started(struct mcp *m, json_t *params)
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
    c->timeout_ms = arg_int_or(c, "timeout_ms", m->default_timeout_ms);
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

static void exec_start(struct call *c)
{
    mcp_slot_use(c, &c->m->cmd, exec_ready);
}

static void code_start(struct call *c)
{
    mcp_slot_use(c, &c->m->code, exec_ready);
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

/* ---- text for people and models (issue 19) ---------------------------------------- */

/* A growing string; OOM aborts, as elsewhere in sbxctl. */
struct text {
    char *p;
    size_t len, cap;
};

static void text_add(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1)
            cap *= 2;
        t->p = ctl_nonnull(realloc(t->p, cap));
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void text_printf(struct text *t, const char *fmt, ...) SBXCTL_PRINTF(2, 3);
static void text_printf(struct text *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0)
        text_add(t, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A labelled block of output ("stdout:\n...") when it has any. */
static void text_stream(struct text *t, const char *label, json_t *s)
{
    const char *v = json_string_value(s);
    size_t n = json_string_length(s);
    if (!v || !n)
        return;
    text_printf(t, "%s%s:\n", t->len ? "\n" : "", label);
    text_add(t, v, n);
    if (v[n - 1] != '\n')
        text_add(t, "\n", 1);
}

/* "exit code 3", "exit code 124 (timed out)", "killed by signal 9". */
static void text_status(struct text *t, json_t *s)
{
    json_int_t code = json_integer_value(json_object_get(s, "exit_code"));
    json_int_t sig = json_integer_value(json_object_get(s, "signal"));
    const char *err = json_string_value(json_object_get(s, "error"));
    text_printf(t, "%sexit code %" JSON_INTEGER_FORMAT, t->len ? "\n" : "", code);
    if (json_is_true(json_object_get(s, "timed_out")))
        text_printf(t, " (timed out)");
    else if (sig > 0)
        text_printf(t, " (killed by signal %" JSON_INTEGER_FORMAT ")", sig);
    if (err)
        text_printf(t, ": %.400s", err);
    text_add(t, "\n", 1);
    if (json_is_true(json_object_get(s, "truncated")))
        text_printf(t, "(output was cut at the kept maximum)\n");
}

/* exec_command / process_output: stdout, stderr, then the exit status. */
static char *exec_text(json_t *s)
{
    struct text t = {0};
    text_stream(&t, "stdout", json_object_get(s, "stdout"));
    text_stream(&t, "stderr", json_object_get(s, "stderr"));
    if (!t.len && json_object_get(s, "exit_code"))
        text_printf(&t, "(no output)\n");
    if (json_is_true(json_object_get(s, "running")))
        text_printf(&t, "%sprocess %" JSON_INTEGER_FORMAT " is still running\n",
                    t.len ? "\n" : "", json_integer_value(json_object_get(s, "pid")));
    else if (json_object_get(s, "exit_code"))
        text_status(&t, s);
    else if (!t.len)
        text_printf(&t, "(no new output)\n");
    return t.p ? t.p : ctl_nonnull(strdup(""));
}

/* run_code: the console lines, the result (JSON), or the uncaught error. */
static char *code_text(json_t *s)
{
    struct text t = {0};
    json_t *logs = json_object_get(s, "logs"), *err = json_object_get(s, "error");
    size_t i;
    json_t *l;
    if (json_array_size(logs))
        text_printf(&t, "console:\n");
    json_array_foreach(logs, i, l) {
        if (json_is_string(l)) {
            text_add(&t, json_string_value(l), json_string_length(l));
            text_add(&t, "\n", 1);
        }
    }
    if (json_is_object(err)) {
        const char *name = json_string_value(json_object_get(err, "name"));
        const char *msg = json_string_value(json_object_get(err, "message"));
        text_printf(&t, "%suncaught %s: %.1000s\n", t.len ? "\n" : "",
                    name ? name : "Error", msg ? msg : "");
    } else {
        char *r = json_dumps(json_object_get(s, "result"),
                             JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_SORT_KEYS);
        text_printf(&t, "%sresult: ", t.len ? "\n" : "");
        if (r)
            text_add(&t, r, strlen(r));
        text_add(&t, "\n", 1);
        free(r);
    }
    return t.p;
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
    char *text = code_text(s);
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
    char *text = exec_text(s);
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
    json_int_t t = arg_int_or(c, "timeout_ms", m->default_timeout_ms);
    if (t > 0)
        json_object_set_new(p, "timeout_ms", json_integer(t));
    json_object_set_new(p, "sandbox", json_string(c->sandbox));
    /* Nobody follows it: process_output reads what sbxd keeps. */
    json_object_set_new(p, "stream", json_false());
    if (mcp_dcall(c, SBX_M_SPAWN, p, spawn_done) < 0)
        mcp_answer_error(c, "cannot reach sbxd");
}

static void spawn_start(struct call *c)
{
    mcp_slot_use(c, &c->m->cmd, spawn_ready);
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
    mcp_offsets_put(m, c->sandbox, c->pid, next);
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
    char *text = exec_text(s);
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
    mcp_offsets_get(m, c->sandbox, c->pid, off);
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

static void output_start(struct call *c)
{
    mcp_slot_use(c, &c->m->cmd, output_ready);
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

static void kill_start(struct call *c)
{
    mcp_slot_use(c, &c->m->cmd, kill_ready);
}

/* ---- sandbox_info ------------------------------------------------------------------ */

static void info_listed(struct call *c, json_t *result, const sbx_rpc_error *err)
{
    if (!result) {
        answer_failed(c, err, "cannot list the processes");
        return;
    }
    json_t *procs = json_object_get(result, "processes");
    struct slot *code = &c->m->code;
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

static void info_start(struct call *c)
{
    mcp_slot_use(c, &c->m->cmd, info_ready);
}
