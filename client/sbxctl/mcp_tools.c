/*
 * mcp_tools.c - the tool table of `sbxctl mcp` (the floors are in mcp.h):
 * each tool's name, description, arguments, output schema and start.
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

#include "mcp_tools.h"
#include "sbxctl.h"

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

static const struct tool tools[] = {
    {"exec_command", "Run a command",
     "Runs a command in the sandbox and waits for it: returns its stdout, stderr and exit "
     "code (a non-zero exit code is a result, not a failed call). The sandbox is created "
     "on first use and "
     "keeps its files between calls. Reports progress while it runs; cancelling the call "
     "kills the command.",
     exec_params, exec_schema,
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}", 1,
     mcp_exec_start},
    {"run_code", "Run JavaScript",
     "Runs a JavaScript or TypeScript program in an isolate with a fresh global object "
     "(no filesystem, network, timers or processes) and returns its result (JSON), its "
     "console lines and its uncaught error, if any. Use it for computation.",
     code_params, code_schema,
     "{\"readOnlyHint\":true,\"destructiveHint\":false,\"openWorldHint\":false}", 1,
     mcp_code_start},
    {"spawn_process", "Start a background process",
     "Starts a command in the sandbox in the background and returns its pid at once. "
     "Read its output with process_output, stop it with kill_process.",
     spawn_params, spawn_schema,
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"openWorldHint\":false}", 0,
     mcp_spawn_start},
    {"process_output", "Read a background process's output",
     "Returns the output of a process started with spawn_process since the last read "
     "(or from the given offsets), whether it is still running and, once it exited, its "
     "exit code. wait_ms waits for it to finish first.",
     output_params, output_schema, "{\"readOnlyHint\":true,\"openWorldHint\":false}", 1,
     mcp_output_start},
    {"kill_process", "Stop a process",
     "Sends a signal (default KILL) to a process of the sandbox and its process group.",
     kill_params, kill_schema,
     "{\"readOnlyHint\":false,\"destructiveHint\":true,\"idempotentHint\":true,"
     "\"openWorldHint\":false}",
     0, mcp_kill_start},
    {"sandbox_info", "Describe the sandbox",
     "Returns the command sandbox (id, provider, status, image, working directory, "
     "limits), its processes, and run_code's sandbox once it exists.",
     no_params, info_schema, "{\"readOnlyHint\":true,\"openWorldHint\":false}", 0,
     mcp_info_start},
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
    if (t->start == mcp_code_start)
        n = asprintf(&s, " Runs on sbxd's %s provider (JavaScript, not a shell).",
                     m && m->conf.code_provider ? m->conf.code_provider : "js");
    else if (m && m->conf.sandbox_name && !m->conf.provider)
        n = asprintf(&s, " Runs in sbxd sandbox %s.", m->conf.sandbox_name);
    else
        n = asprintf(&s, " Runs on sbxd's %s provider%s%s%s.",
                     m && m->conf.provider ? m->conf.provider : "default",
                     m && m->conf.image ? ", image " : "",
                     m && m->conf.image ? m->conf.image : "",
                     m && m->conf.provider &&
                             (!strcmp(m->conf.provider, "js") ||
                              !strcmp(m->conf.provider, "duktape"))
                         ? " (commands are JavaScript, not shell)"
                         : "");
    return n < 0 ? NULL : s;
}

static int offered(const struct mcp *m, const struct tool *t)
{
    return !(m && m->conf.code_only) || t->start == mcp_code_start;
}

static json_t *tools_list(const struct mcp *m, int with_structured, int with_annotations)
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

static const struct tool *tool_find(const struct mcp *m, const char *name)
{
    for (size_t i = 0; name && i < NTOOLS; i++)
        if (strcmp(tools[i].name, name) == 0)
            return offered(m, &tools[i]) ? &tools[i] : NULL;
    return NULL;
}

static const char *tool_name(const struct tool *t)
{
    return t ? t->name : "?";
}

static int tool_has_progress(const struct tool *t)
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

static void tool_start(struct call *c)
{
    const char *bad = check_args(c->tool, c->args);
    if (bad) {
        mcp_answer_error(c, "invalid arguments for %s: %s", c->tool->name, bad);
        return;
    }
    c->tool->start(c);
}

const struct mcp_toolbox mcp_toolbox = {
    tools_list,
    tool_find,
    tool_name,
    tool_has_progress,
    tool_start,
    mcp_proc_cancel,
    mcp_proc_progress_text,
};
