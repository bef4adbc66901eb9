/*
 * iso_text.c - the words of the isolate providers: the instructions of a
 * sandbox (what the engine offers, its tools as the program names them) and
 * the hint for a program that was shell, not JavaScript.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/isolate/iso_int.h"
#include "core/process.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* ---- the shell-looking program (issue 19) ---- */

/* 1 when code that failed to parse as JavaScript reads like a shell command:
 * it starts with a common command name followed by a space or its end, or
 * with "#!" / "./" / "/". A guess, only used to add a hint to the error. */
static int looks_like_shell(const char *code)
{
    static const char *const cmds[] = {
        "echo",   "ls",      "cat",     "cd",    "pwd",   "grep", "sed",   "awk",
        "find",   "apt",     "apt-get", "pip",   "pip3",  "npm",  "npx",   "node",
        "python", "python3", "curl",    "wget",  "git",   "make", "mkdir", "rm",
        "cp",     "mv",      "touch",   "chmod", "sh",    "bash", "uname", "whoami",
        "id",     "env",     "export",  "exit",  "sleep", "head", "tail",  "wc",
        "sort",   "ps",      "kill",    "df",    "du",    "tar",  "which", "true",
        "false",  "printf",  "date",    "test",  NULL};
    if (!code)
        return 0;
    while (*code == ' ' || *code == '\t' || *code == '\n')
        code++;
    if (!strncmp(code, "#!", 2) || !strncmp(code, "./", 2) || code[0] == '/')
        return code[0] != '/' || code[1] != '/';
    for (size_t i = 0; cmds[i]; i++) {
        size_t n = strlen(cmds[i]);
        if (!strncmp(code, cmds[i], n) &&
            (code[n] == ' ' || code[n] == '\0' || code[n] == '\n' || code[n] == ';'))
            return 1;
    }
    return 0;
}

/* A SyntaxError (or a ReferenceError: `ls` alone parses) on a program that
 * reads like shell: say which provider ran
 * it and how to get a shell, on stderr and as the exit record's hint. */
void iso_text_shell_hint(struct process *p, json_t *rec)
{
    json_t *exc = json_object_get(rec, "exception");
    const char *name = json_string_value(json_object_get(exc, "name"));
    if (!name ||
        (strcmp(name, "SyntaxError") != 0 && strcmp(name, "ReferenceError") != 0) ||
        !looks_like_shell(json_string_value(json_object_get(p->spec, "code"))))
        return;
    char hint[256];
    snprintf(hint, sizeof(hint),
             "this ran as JavaScript on the %s provider; to run shell commands use a "
             "shell provider, e.g. sbxctl run --provider docker -- CMD",
             p->sb->prov->ops->name);
    char line[300];
    int n = snprintf(line, sizeof(line), "sbxd: %s\n", hint);
    if (n > 0)
        process_output(p, SBX_STREAM_STDERR, line,
                       (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    json_object_set_new(rec, "hint", json_string(hint));
}

/* ---- instructions ---- */

/* duktape: the tools as the isolate names them, external_<name>(args). */
char *iso_text_duk(struct sandbox *sb, int64_t mem_mb)
{
    char tools[1024] = "";
    size_t i, off = 0;
    json_t *t;
    json_array_foreach(json_object_get(sb->conf, "tools"), i, t) {
        off +=
            (size_t)snprintf(tools + off, off < sizeof(tools) ? sizeof(tools) - off : 0,
                             "%sexternal_%s(args)", i ? ", " : "", json_string_value(t));
        if (off >= sizeof(tools))
            break;
    }
    return xasprintf(
        "Run JavaScript (ES5 with some ES2015+, Duktape) in sandbox %s. There is "
        "no filesystem, network, module loader or process access. The value of "
        "the last expression is returned as JSON; console.log/info write to "
        "stdout and console.warn/error to stderr. Global variables persist "
        "between runs unless the isolate is reset (after a timeout or the memory "
        "limit of %lld MiB). Process environment: process.env.%s%s",
        sb->id, (long long)mem_mb,
        tools[0] ? " Host tools (synchronous, take and return JSON): " : "", tools);
}

/* js: the names sanitised as the engine exposes them. */
char *iso_text_js(struct sandbox *sb, int64_t mem_mb, int persistent)
{
    char *t = NULL, list[1024] = "";
    const char *tools;
    size_t i, off = 0;
    json_t *v;
    json_array_foreach(json_object_get(sb->conf, "tools"), i, v) {
        if (off >= sizeof(list) - 8)
            break;
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%sexternal_",
                                i ? ", " : "");
        for (const char *q = json_string_value(v); *q && off < sizeof(list) - 8; q++)
            list[off++] = isalnum((unsigned char)*q) || *q == '_' || *q == '$' ? *q : '_';
        off += (size_t)snprintf(list + off, sizeof(list) - off, "(args)");
    }
    tools = list;
    if (asprintf(
            &t,
            "Run JavaScript or TypeScript (ES2023, JavaScriptCore) in sandbox %s. The "
            "program is the body of an async function: use await at the top level and "
            "return a JSON-serializable value, which is the result. TypeScript types are "
            "stripped before it runs. console.log/info/debug write to stdout and "
            "console.warn/error to stderr; the lines are also returned as logs. There is no "
            "filesystem, network, timers, module loader or process access.%s%s%s%s Memory "
            "limit %lld MiB; a timeout or the limit ends the program with an exception.",
            sb->id,
            persistent
                ? " Globals (globalThis.x = ...) persist between runs; top-level const/let "
                  "are local to a run."
                : " Every run starts with a fresh global.",
            tools[0] ? " Host tools (each returns a Promise; pass and get JSON): " : "",
            tools, tools[0] ? "." : "", (long long)mem_mb) < 0)
        return NULL;
    return t;
}
