/*
 * main.c - sbxctl: the command-line client of sbxd, built on libsbx.
 *
 * Exit status: 0 success, 1 an RPC or connection error ("sbxctl: message
 * (code N)" on stderr), 2 a usage error; exec, run and wait exit with the
 * command's own status.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbxctl.h"

struct sbxctl_globals g;

struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
    const char *help;
};

static const struct verb verbs[] = {
    {"ping", cmd_ping, "ping", "Checks that sbxd answers."},
    {"info", cmd_info, "info",
     "Shows the daemon's version, providers, counts and limits."},
    {"create", cmd_create,
     "create [--provider P] [--id ID] [--image I] [--env K=V]... [--workdir DIR]\n"
     "              [--lifetime MS] [--command-timeout MS] [--idle-timeout MS]\n"
     "              [--opt KEY=VALUE]... [--tool NAME]...\n"
     "              [--memory-mb N] [--snapshot SNAP] [--instructions TEXT] [--fresh-isolate]\n"
     "              [--instructions-append TEXT] [--on-start CMD] [--on-stop CMD]\n"
     "              [--on-destroy CMD] [--no-start]",
     "Creates a sandbox and prints its id. --opt values are parsed as JSON when they\n"
     "parse, else taken as strings; they go to the provider's options. --lifetime is\n"
     "the sandbox's lifetime (--timeout is its old name; none: the provider's default,\n"
     "for Docker no limit); --command-timeout the default timeout of its commands.\n"
     "Reconnect warnings (options the existing sandbox does not have) go to stderr.\n"
     "--on-start/--on-stop/--on-destroy set lifecycle hooks (a shell command, or\n"
     "JavaScript for Duktape); --instructions-append extends the tool description."},
    {"ls", cmd_ls, "ls [--provider P] [--status S]", "Lists your sandboxes."},
    {"get", cmd_get, "get ID", "Shows one sandbox."},
    {"exec", cmd_exec,
     "exec ID [--env K=V]... [--cwd DIR] [--timeout MS] [--stdin] [--detach]\n"
     "              [--tool NAME=COMMAND]... [--file SCRIPT] -- CMD...",
     "Runs a command and streams its output; exits with its exit status (124 on\n"
     "timeout, 137 when killed). One CMD argument is sent as a string (sh -c, or\n"
     "JavaScript for Duktape), several as argv. --file sends a file's content as the\n"
     "command. --stdin streams sbxctl's standard input to the command. A Duktape\n"
     "completion value is printed as JSON after the output.\n"
     "Ctrl-C kills the command in the sandbox (a second Ctrl-C detaches at once).\n"
     "--tool NAME=COMMAND answers the program's external_NAME(args) calls: COMMAND\n"
     "runs with /bin/sh, the args as JSON on its stdin; exit 0: its stdout (JSON, or\n"
     "else text) is the result; otherwise its stderr is the error.\n"
     "With --detach (-d), Ctrl-C detaches instead and the command keeps running;\n"
     "'sbxctl attach ID PID' follows it again."},
    {"attach", cmd_attach, "attach ID PID [--stdin]",
     "Replays a process's buffered output, then follows it live; with --stdin also\n"
     "forwards sbxctl's standard input. Exits with the process's exit status. Ctrl-C\n"
     "detaches (the process keeps running)."},
    {"write", cmd_write, "write ID PID [DATA | --file FILE] [--close]",
     "Writes DATA (or a file, or sbxctl's standard input when neither is given) to\n"
     "the process's stdin; --close then closes it."},
    {"close-stdin", cmd_close_stdin, "close-stdin ID PID",
     "Closes the process's stdin (it reads EOF)."},
    {"spawn", cmd_spawn, "spawn ID [--env K=V]... [--cwd DIR] [--timeout MS] -- CMD...",
     "Starts a command in the background and prints its pid."},
    {"ps", cmd_ps, "ps ID", "Lists the processes of a sandbox."},
    {"logs", cmd_logs, "logs [-f] ID PID",
     "Prints the buffered output of a process; with -f, follows it until it exits\n"
     "and then exits with its exit status."},
    {"kill", cmd_kill, "kill ID PID [--signal S]",
     "Signals a process group (default KILL)."},
    {"wait", cmd_wait, "wait ID PID [--timeout MS]",
     "Waits for a process, prints its exit code and exits with it."},
    {"stop", cmd_stop, "stop ID", "Stops a sandbox (its processes are killed)."},
    {"start", cmd_start, "start ID", "Starts a stopped or pending sandbox."},
    {"rm", cmd_rm, "rm ID", "Destroys a sandbox."},
    {"snapshot", cmd_snapshot, "snapshot ID",
     "Snapshots a sandbox and prints the snapshot id."},
    {"snapshots", cmd_snapshots, "snapshots [--provider P]",
     "Lists your snapshots (all of them for an admin)."},
    {"snapshot-rm", cmd_snapshot_rm, "snapshot-rm SNAP",
     "Deletes a snapshot and the provider's copy of it (a Docker image)."},
    {"clone", cmd_clone, "clone ID [--id NEW] [--env K=V]... [--workdir DIR] [--start]",
     "Clones a sandbox (pending until started) and prints the new id."},
    {"set-env", cmd_set_env, "set-env ID K=V... [K=]...",
     "Sets runtime environment variables; K= removes K. Prints the resulting env."},
    {"instructions", cmd_instructions, "instructions ID",
     "Prints the tool description of a sandbox."},
    {"run", cmd_run,
     "run [--provider P] [--image I] [--opt KEY=VALUE]... [--env K=V]... [--timeout MS]\n"
     "              [--tool NAME[=COMMAND]]... [--detach] -- CMD...",
     "Creates a throw-away sandbox, runs the command with streaming output, and\n"
     "destroys the sandbox (also on failure or Ctrl-C). Exits with the command's\n"
     "status. With --detach (-d), Ctrl-C leaves the sandbox and the command running\n"
     "and prints how to attach. --tool registers a tool; with =COMMAND sbxctl\n"
     "answers its calls as on exec, e.g. --tool lookup='jq .id'."},
    {"cp", cmd_cp, "cp SRC DEST",
     "Copies files or directories between here and a sandbox (ID:PATH on one side;\n`-` is a tar stream on stdin/stdout), as docker cp."},
    {"fs", cmd_fs,
     "fs ls|cat|write|stat|rm|mkdir|mv|watch ID PATH [-r] [-p] [--depth N] [--mode OCT] [-a]",
     "Files in a sandbox: list, print, write (stdin or FILE), stat, remove (-r),\nmkdir (-p), rename (mv ID PATH TO), watch for changes (-r: subdirectories)."},
    {"mcp", cmd_mcp,
     "mcp [--provider P] [--image I] [--sandbox ID] [--code-provider P] [--env K=V]...\n"
     "              [--opt KEY=VALUE]... [--timeout MS] [--lifetime MS] [--idle-timeout MS]\n"
     "              [--max-output BYTES] [--max-message BYTES] [--max-calls N]\n"
     "              [--progress-ms MS] [-v]",
     "Serves sbxd as a Model Context Protocol server on stdin/stdout (JSON-RPC 2.0,\n"
     "one message per line; revisions 2024-11-05 to 2025-11-25). Tools: exec_command,\n"
     "spawn_process, process_output, kill_process, sandbox_info (in the command\n"
     "sandbox) and run_code (JavaScript in the code sandbox). Diagnostics go to stderr.\n"
     "\n"
     "  --provider P, --image I  the command sandbox, created on first use and\n"
     "                           destroyed when stdin closes (or on SIGTERM/SIGINT)\n"
     "  --env K=V, --opt K=V     its environment and provider options (as create)\n"
     "  --sandbox ID             use sandbox ID instead (created with the options above\n"
     "                           if it does not exist); it is never destroyed\n"
     "  --code-provider P        run_code's provider (default js when sbxd has it,\n"
     "                           else duktape)\n"
     "  --timeout MS             default command timeout (0: the sandbox's)\n"
     "  --lifetime MS            lifetime of created sandboxes (default 86400000)\n"
     "  --idle-timeout MS        sbxd destroys them after this long unused (default\n"
     "                           3600000; 0 = never), should sbxctl mcp die first\n"
     "  --max-output BYTES       output kept per stream per call (default 1 MiB)\n"
     "  --max-message BYTES      longest request line (default 4 MiB)\n"
     "  --max-calls N            tool calls running at once (default 64)\n"
     "  --progress-ms MS         interval of progress notifications (default 1000)\n"
     "  -v, --verbose            log requests and sandboxes to stderr\n"
     "\n"
     "A client config: {\"mcpServers\": {\"sbxd\": {\"command\": \"sbxctl\",\n"
     "  \"args\": [\"mcp\", \"--provider\", \"docker\", \"--image\", \"debian:bookworm-slim\"]}}}"},
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

static const struct verb *current;

static void main_usage_short(FILE *f)
{
    fprintf(f, "usage: sbxctl [-s PATH] [--json] VERB [ARGS...]\nverbs:");
    for (size_t i = 0; i < NVERBS; i++)
        fprintf(f, " %s", verbs[i].name);
    fprintf(f, "\nRun 'sbxctl --help' or 'sbxctl VERB --help' for more.\n");
}

static void main_usage(FILE *f)
{
    fprintf(f,
            "usage: sbxctl [-s PATH] [--json] VERB [ARGS...]\n"
            "\n"
            "Options (also accepted after the verb):\n"
            "  -s, --socket PATH  sbxd socket (default: $SBXD_SOCKET, else %s)\n"
            "  --json             print the raw JSON result\n"
            "  -h, --help         help (sbxctl VERB --help for a verb)\n"
            "\n"
            "Verbs:\n",
            SBX_DEFAULT_SOCKET);
    for (size_t i = 0; i < NVERBS; i++) {
        const char *h = verbs[i].help;
        const char *nl = strchr(h, '\n');
        int n = nl ? (int)(nl - h) : (int)strlen(h);
        fprintf(f, "  %-13s %.*s\n", verbs[i].name, n, h);
    }
}

/* ---- messages -------------------------------------------------------------------- */

void warnx_(const char *fmt, ...)
{
    va_list ap;
    fputs("sbxctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sbxctl %s: ", current ? current->name : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (current)
        fprintf(stderr, "usage: sbxctl %s\n", current->usage);
    else
        main_usage_short(stderr);
    exit(EXIT_USAGE);
}

void verb_help(void)
{
    printf("usage: sbxctl [-s PATH] [--json] %s\n\n%s\n", current->usage, current->help);
    exit(0);
}

/* ---- option parsing ----------------------------------------------------------- */

void parser_init(struct parser *p, int argc, char **argv)
{
    memset(p, 0, sizeof(*p));
    p->argc = argc;
    p->argv = argv;
}

static const struct opt global_opts[] = {
    {"socket", 's', 1, 1},
    {"json", 0, 0, 2},
    {"help", 'h', 0, 3},
    {NULL, 0, 0, 0},
};

static const struct opt *find_opt(const struct opt *opts, const char *name, size_t len,
                                  int shortc)
{
    for (const struct opt *o = opts; o && (o->name || o->shortc); o++) {
        if (shortc
                ? o->shortc == shortc
                : (o->name && strlen(o->name) == len && strncmp(o->name, name, len) == 0))
            return o;
    }
    return NULL;
}

int opt_next(struct parser *p, const struct opt *opts)
{
    for (;;) {
        if (p->i >= p->argc)
            return OPT_END;
        char *a = p->argv[p->i++];
        if (p->stop || a[0] != '-' || a[1] == '\0') {
            p->arg = a;
            return OPT_ARG;
        }
        if (strcmp(a, "--") == 0) {
            p->stop = 1;
            continue;
        }

        const struct opt *o;
        const char *inline_val = NULL;
        if (a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            if (eq)
                inline_val = eq + 1;
            o = find_opt(opts, name, len, 0);
            if (!o)
                o = find_opt(global_opts, name, len, 0);
        } else {
            if (a[2] != '\0')
                inline_val = a + 2; /* -sPATH */
            o = find_opt(opts, NULL, 0, a[1]);
            if (!o)
                o = find_opt(global_opts, NULL, 0, a[1]);
        }
        if (!o)
            usage_error("unknown option %s", a);

        p->arg = NULL;
        if (o->has_arg) {
            if (inline_val)
                p->arg = inline_val;
            else if (p->i < p->argc)
                p->arg = p->argv[p->i++];
            else
                usage_error("option %s needs a value", a);
        } else if (inline_val && a[1] == '-') {
            usage_error("option --%s takes no value", o->name);
        } else if (inline_val) {
            usage_error("unknown option %s", a);
        }

        if (o >= global_opts && o < global_opts + 3) {
            switch (o->id) {
            case 1:
                g.socket = p->arg;
                continue;
            case 2:
                g.json = 1;
                continue;
            default:
                return OPT_HELP;
            }
        }
        return o->id;
    }
}

/* ---- argument helpers -------------------------------------------------------------- */

json_int_t arg_int(const char *what, const char *s)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0')
        usage_error("%s: not an integer: %s", what, s);
    return (json_int_t)v;
}

void arg_env(json_t *obj, const char *kv, int null_if_empty)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        usage_error("expected KEY=VALUE, got: %s", kv);
    char *key = ctl_nonnull(strndup(kv, (size_t)(eq - kv)));
    json_object_set_new(
        obj, key, null_if_empty && eq[1] == '\0' ? json_null() : json_string(eq + 1));
    free(key);
}

void arg_opt(json_t *obj, const char *kv)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        usage_error("expected KEY=VALUE, got: %s", kv);
    char *key = ctl_nonnull(strndup(kv, (size_t)(eq - kv)));
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    if (!v)
        v = json_string(eq + 1);
    json_object_set_new(obj, key, v);
    free(key);
}

json_t *command_json(int n, char **args)
{
    if (n == 1)
        return json_string(args[0]);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(a, json_string(args[i]));
    return a;
}

json_t *file_string(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        warnx_("%s: %s", path, strerror(errno));
        exit(EXIT_RPC);
    }
    size_t cap = 8192, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        warnx_("%s: read error", path);
        exit(EXIT_RPC);
    }
    if (f != stdin)
        fclose(f);
    json_t *s = json_stringn(buf, len);
    free(buf);
    if (!s) {
        warnx_("%s: not valid UTF-8 text", path);
        exit(EXIT_RPC);
    }
    return s;
}

json_t *obj_object(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        v = json_object();
        json_object_set_new(obj, key, v);
    }
    return v;
}

json_t *obj_array(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        v = json_array();
        json_object_set_new(obj, key, v);
    }
    return v;
}

char *field_text(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return strdup("");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    return s ? s : strdup("?");
}

int exit_status(json_t *rec)
{
    json_t *code = json_object_get(rec, "exit_code");
    json_int_t sig = json_integer_value(json_object_get(rec, "signal"));
    if (json_is_integer(code) && json_integer_value(code) >= 0 &&
        json_integer_value(code) <= 255)
        return (int)json_integer_value(code);
    if (sig > 0 && sig < 128)
        return 128 + (int)sig;
    return 1;
}

/* ---- daemon access ---------------------------------------------------------------- */

const char *socket_path(void)
{
    if (g.socket)
        return g.socket;
    const char *env = getenv("SBXD_SOCKET");
    return env && *env ? env : SBX_DEFAULT_SOCKET;
}

sbx_ctx *ctl_connect(void)
{
    sbx_ctx *c = sbx_connect_unix(socket_path(), 10000);
    if (!c) {
        warnx_("out of memory");
        exit(EXIT_RPC);
    }
    if (c->err) {
        warnx_("cannot connect to sbxd: %s", c->errstr);
        sbx_free(c);
        exit(EXIT_RPC);
    }
    return c;
}

void print_rpc_error(const sbx_rpc_error *e)
{
    warnx_("%s (code %d)", e->message, e->code);
}

int ctl_call(sbx_ctx *c, const char *method, json_t *params, json_t **result_out)
{
    sbx_rpc_error *e = NULL;
    json_t *result = NULL;

    if (result_out)
        *result_out = NULL;
    if (sbx_call_new(c, &result, &e, method, params) != SBX_OK) {
        if (e)
            print_rpc_error(e);
        else
            warnx_("%s: %s", method, c->errstr);
        sbx_rpc_error_free(e);
        return EXIT_RPC;
    }
    if (result_out)
        *result_out = result;
    else
        json_decref(result);
    return 0;
}

void print_json(json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (s) {
        puts(s);
        free(s);
    }
}

int ctl_simple(const char *method, json_t *params, json_t **result_out)
{
    json_t *result;
    if (result_out)
        *result_out = NULL;
    sbx_ctx *c = ctl_connect();
    int rc = ctl_call(c, method, params, &result);
    sbx_free(c);
    if (rc)
        return rc;
    if (g.json)
        print_json(result);
    if (result_out)
        *result_out = result;
    else
        json_decref(result);
    return 0;
}

void print_progress(const char *method, json_t *params)
{
    if (strcmp(method, SBX_N_PROGRESS) != 0 || !isatty(2))
        return;
    const char *stage = json_string_value(json_object_get(params, "stage"));
    const char *msg = json_string_value(json_object_get(params, "message"));
    json_t *cur = json_object_get(params, "current"),
           *tot = json_object_get(params, "total");
    fprintf(stderr, "sbxctl: %s%s%s", stage ? stage : "", stage && msg ? ": " : "",
            msg ? msg : "");
    if (json_is_integer(cur) && json_is_integer(tot))
        fprintf(stderr, " (%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT ")",
                json_integer_value(cur), json_integer_value(tot));
    fputc('\n', stderr);
}

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    struct parser p;
    int o;

    parser_init(&p, argc - 1, argv + 1);
    /* Global options up to the verb. */
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP) {
            main_usage(stdout);
            return 0;
        }
        if (o == OPT_ARG) {
            g.verb = p.arg;
            break;
        }
    }
    if (!g.verb) {
        main_usage_short(stderr);
        return EXIT_USAGE;
    }
    for (size_t i = 0; i < NVERBS; i++) {
        if (strcmp(verbs[i].name, g.verb) == 0) {
            current = &verbs[i];
            /* The verb parses argv[p.i ...]. */
            return verbs[i].fn(p.argc - p.i, p.argv + p.i);
        }
    }
    fprintf(stderr, "sbxctl: unknown verb '%s'\n", g.verb);
    main_usage_short(stderr);
    return EXIT_USAGE;
}
