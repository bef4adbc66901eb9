/*
 * main.c - sbxctl: the command-line client of sbxd, built on libsbx.
 *
 * Exit status: 0 success, 125 an RPC or connection error ("sbxctl: message
 * (code N)" on stderr, the daemon's or engine's message whole), 2 a usage
 * error; exec, run and wait exit with the command's own status (126 when it
 * could not be invoked, 127 when it was not found, as docker).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
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
    {"ls", cmd_ls, "ls [-q] [--provider P] [--status S] [--format json|table]",
     "Lists your sandboxes with their provider, image, status and creation time; -q\n"
     "prints only their ids."},
    {"get", cmd_get, "get ID", "Shows one sandbox."},
    {"exec", cmd_exec,
     "exec [-itd] [-e K=V]... [-w DIR] [--timeout MS] [--tool NAME=COMMAND]...\n"
     "              [--file SCRIPT] ID [--] CMD...",
     "Runs a command in a sandbox and streams its output, exiting with its exit status.\n"
     "(124 on timeout, 137 when killed.) -i (--stdin) streams sbxctl's standard input\n"
     "to the command, -t asks for a terminal, -w (--cwd) sets its working directory,\n"
     "-e its environment. One CMD argument is sent as a string (sh -c, or\n"
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
    {"ps", cmd_ps, "ps [-q] ID",
     "Lists the processes of a sandbox with their commands as given; -q prints only\n"
     "their pids."},
    {"logs", cmd_logs, "logs [-f] [-t] [--since T] [-n|--tail N|all] ID PID",
     "Prints the buffered output of a process. With -f it follows the output until\n"
     "the process exits and then exits with its exit status; --tail N prints only\n"
     "the last N lines of what is buffered (then, with -f, everything new);\n"
     "--since T only what arrived since T (10m, 2h, 2026-12-01T16:25:00Z, a Unix\n"
     "time); -t puts the time each line arrived before it, as docker logs -t does."},
    {"kill", cmd_kill, "kill [-s|--signal SIG] ID PID",
     "Sends a signal to a process group (default KILL); SIG is a name (TERM, SIGTERM)\n"
     "or a number."},
    {"wait", cmd_wait, "wait ID PID [--timeout MS]",
     "Waits for a process, prints its exit code and exits with it."},
    {"stop", cmd_stop, "stop ID", "Stops a sandbox (its processes are killed)."},
    {"start", cmd_start, "start ID", "Starts a stopped or pending sandbox."},
    {"rm", cmd_rm, "rm [-f] ID...",
     "Destroys sandboxes, running ones included (-f is accepted and changes nothing),\n"
     "and prints each id destroyed; exits 125 if any could not be."},
    {"snapshot", cmd_snapshot, "snapshot ID [--ttl SECONDS|never]",
     "Snapshots a sandbox and prints the snapshot id (--ttl: how long its image "
     "lives, where the provider's images expire: Modal)."},
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
     "run [-itd] [--rm] [-p|--provider P] [--image I] [-o|--opt KEY=VALUE]...\n"
     "              [-e K=V]... [-w DIR] [--timeout MS] [--tool NAME[=COMMAND]]... [--] CMD...",
     "Creates a throw-away sandbox, runs the command in it with streaming output, and\n"
     "destroys the sandbox (also on failure or Ctrl-C), exiting with the command's\n"
     "status. Without --provider it is the configured default (js: CMD is\n"
     "JavaScript); --image or a Docker option means docker. -w sets the sandbox's\n"
     "working directory, --rm is accepted (the sandbox is always removed). With --detach (-d), Ctrl-C leaves the sandbox and the command running\n"
     "and prints how to attach. --tool registers a tool; with =COMMAND sbxctl\n"
     "answers its calls as on exec, e.g. --tool lookup='jq .id'."},
    {"cp", cmd_cp, "cp [-a] [-L] SRC DEST",
     "Copies files or directories between here and a sandbox (ID:PATH on one side;\n`-` is a tar stream on stdin/stdout), as docker cp: one tar stream each way.\n-L follows a symlink SRC; -a keeps uid/gid on a download."},
    {"fs", cmd_fs,
     "fs ls|cat|write|stat|rm|mkdir|mv|watch ID PATH [-r] [-p] [--depth N] [--mode OCT] [-a]",
     "Files in a sandbox: list, print, write (stdin or FILE), stat, remove (-r),\nmkdir (-p), rename (mv ID PATH TO), watch for changes (-r: subdirectories)."},
    {"stats", cmd_stats, "stats [--no-stream] [ID...]",
     "Shows sandboxes' resource use as docker stats does: CPU %, memory use and\n"
     "limit, network and block I/O, pids (all your running sandboxes without IDs).\n"
     "Redraws as new samples come (limits.stats_interval_ms) until Ctrl-C;\n"
     "--no-stream prints one table (with --json, the samples) and exits."},
    {"port-forward", cmd_port_forward,
     "port-forward ID [HOSTPORT:]PORT [--keep] [--address ADDR | --unix]",
     "Makes PORT inside the sandbox reachable on 127.0.0.1:HOSTPORT (any free port\n"
     "without HOSTPORT) through sbxd, also with network: none, until Ctrl-C; --keep\n"
     "leaves it exposed and exits (sandbox.unexpose ends it). --address listens on\n"
     "another host address (if the policy grants it), --unix on a Unix socket only\n"
     "the sandbox's owner can open."},
    {"mcp", cmd_mcp,
     "mcp [--provider P] [--image I] [--sandbox ID] [--code-provider P] [--env K=V]...\n"
     "              [--opt KEY=VALUE]... [--timeout MS] [--lifetime MS] [--idle-timeout MS]\n"
     "              [--max-output BYTES] [--max-message BYTES] [--max-calls N]\n"
     "              [--progress-ms MS] [-v]",
     "Serves sbxd as a Model Context Protocol server on stdin/stdout (JSON-RPC 2.0,\n"
     "one message per line; revisions 2024-11-05 to 2025-11-25). Tools: exec_command,\n"
     "spawn_process, process_output, kill_process, sandbox_info (in the command\n"
     "sandbox) and run_code (JavaScript in the code sandbox). Diagnostics go to stderr.\n"
     "Without --provider and --sandbox, commands run on docker with its configured image\n"
     "when sbxd has docker, else only run_code is offered. Results are text for the\n"
     "model (stdout, stderr, exit code) with the JSON in structuredContent; a non-zero\n"
     "exit is a result, isError only a call that could not be done.\n"
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
     "  \"args\": [\"mcp\"]}}} (or [\"mcp\", \"--image\", \"debian:bookworm-slim\"])"},
    {"events", cmd_events, "events [ID...]",
     "Prints sandbox status changes and process exits as they happen, one line each\n"
     "(with --json one object each), of all your sandboxes or of the IDs given; runs\n"
     "until interrupted."},
    {"completion", cmd_completion, "completion bash|zsh|fish",
     "Prints a completion script for bash, zsh or fish (source <(sbxctl completion bash)\n"
     "in a shell; make install puts them where each shell looks)."},
};

#define NVERBS (sizeof(verbs) / sizeof(verbs[0]))

int verb_count(void)
{
    return (int)NVERBS;
}

const char *verb_name(int i)
{
    return verbs[i].name;
}

const char *verb_usage(int i)
{
    return verbs[i].usage;
}

const char *verb_help_text(int i)
{
    return verbs[i].help;
}

static const struct verb *current;

static void main_usage_short(FILE *f)
{
    fprintf(f, "usage: sbxctl [-s PATH] [--json] [--version] VERB [ARGS...]\nverbs:");
    for (size_t i = 0; i < NVERBS; i++)
        fprintf(f, " %s", verbs[i].name);
    fprintf(f, "\nRun 'sbxctl --help' or 'sbxctl VERB --help' for more.\n");
}

/* A verb's summary: the first sentence of its help, whole, wrapped at 90
 * columns under the verb's name. */
static void print_summary(FILE *f, const char *name, const char *h)
{
    char sent[512];
    size_t n = 0;
    for (const char *q = h; *q && n < sizeof(sent) - 1; q++) {
        sent[n++] = *q == '\n' ? ' ' : *q;
        if (*q == '.' && (q[1] == ' ' || q[1] == '\n' || q[1] == '\0'))
            break;
    }
    sent[n] = '\0';
    const int indent = 16, width = 90 - indent;
    const char *w = sent;
    fprintf(f, "  %-13s ", name);
    while (*w) {
        size_t len = strlen(w);
        size_t cut = len;
        if ((int)len > width) {
            cut = (size_t)width;
            while (cut > 0 && w[cut] != ' ')
                cut--;
            if (!cut)
                cut = (size_t)width;
        }
        fprintf(f, "%.*s\n", (int)cut, w);
        w += cut;
        while (*w == ' ')
            w++;
        if (*w)
            fprintf(f, "%*s", indent, "");
    }
}

static void main_usage(FILE *f)
{
    fprintf(f,
            "usage: sbxctl [-s PATH] [--json] VERB [ARGS...]\n"
            "\n"
            "Options (before the verb; --json and --format also after it):\n"
            "  -s, --socket PATH  sbxd socket (default: $SBXD_SOCKET, else %s)\n"
            "  --json             print the raw JSON result\n"
            "  --format json|table  the same as --json, or the default tables\n"
            "  -h, --help         help (sbxctl VERB --help for a verb)\n"
            "  --version          sbxctl's version and protocol\n"
            "\n"
            "Verbs:\n",
            SBX_DEFAULT_SOCKET);
    for (size_t i = 0; i < NVERBS; i++)
        print_summary(f, verbs[i].name, verbs[i].help);
    fprintf(f,
            "\nExit status: 0, the command's own (exec, run, wait), 2 a usage error, 125 "
            "an error of\nsbxd or its engine, 126/127 a command that could not be "
            "invoked / was not found.\n");
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
    if (current)
        fprintf(stderr, "sbxctl %s: ", current->name);
    else
        fputs("sbxctl: ", stderr);
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

/*
 * opt_next() is getopt_long(3) under the interface the verb files share
 * (sbxctl.h): short flags bundle (-it, -sPATH, -e K=V), long options take
 * --name=value or --name value, options and positionals mix in order, `--`
 * ends the options. Every verb also has -h/--help, --json and --format.
 * getopt's own messages are off; ours name the verb and show its usage.
 */

#define MAX_OPTS 64
#define LONG_ONLY 0x10000 /* getopt's val for an option without a short letter */

enum { VO_HELP = -100, VO_JSON = -101, VO_FORMAT = -102 };

static const struct opt verb_builtin[] = {
    {"help", 'h', 0, VO_HELP},
    {"json", 0, 0, VO_JSON},
    {"format", 0, 1, VO_FORMAT},
    {NULL, 0, 0, 0},
};

void parser_init(struct parser *p, int argc, char **argv)
{
    memset(p, 0, sizeof(*p));
    p->argc = argc;
    p->argv = argv;
}

struct built {
    struct option lo[MAX_OPTS + 1];
    const struct opt *by_val[MAX_OPTS]; /* long-only entries, by val - LONG_ONLY */
    char so[3 * MAX_OPTS + 4];
    const struct opt *shorts[256];
};

static void build_add(struct built *b, int *n, size_t *sn, const struct opt *o)
{
    if (*n >= MAX_OPTS) {
        warnx_("internal error: too many options");
        abort();
    }
    b->lo[*n].name = o->name;
    b->lo[*n].has_arg = o->has_arg ? required_argument : no_argument;
    b->lo[*n].flag = NULL;
    if (o->shortc) {
        b->lo[*n].val = o->shortc;
        b->shorts[(unsigned char)o->shortc] = o;
        b->so[(*sn)++] = (char)o->shortc;
        if (o->has_arg)
            b->so[(*sn)++] = ':';
    } else {
        b->lo[*n].val = LONG_ONLY + *n;
        b->by_val[*n] = o;
    }
    if (o->name)
        (*n)++;
    else /* a short-only option: no long entry */
        memset(&b->lo[*n], 0, sizeof(b->lo[*n]));
}

static struct built *build(const struct opt *opts)
{
    struct built *b = ctl_nonnull(calloc(1, sizeof(*b)));
    int n = 0;
    size_t sn = 0;
    /* '-': positionals come back in order (as 1); ':': a missing value is ':'. */
    b->so[sn++] = '-';
    b->so[sn++] = ':';
    for (const struct opt *o = opts; o && (o->name || o->shortc); o++)
        build_add(b, &n, &sn, o);
    for (const struct opt *o = verb_builtin; o->name; o++) {
        int taken = 0;
        for (const struct opt *v = opts; v && (v->name || v->shortc); v++)
            taken |= (v->name && !strcmp(v->name, o->name)) ||
                     (o->shortc && v->shortc == o->shortc);
        if (!taken)
            build_add(b, &n, &sn, o);
    }
    b->so[sn] = '\0';
    return b;
}

static int set_format(const char *f)
{
    if (!strcmp(f, "json"))
        g.json = 1;
    else if (!strcmp(f, "table"))
        g.json = 0;
    else
        return -1;
    return 0;
}

/* The message for what getopt refused (c is '?' or ':'), as getopt words it. */
static void refused(struct parser *p, int c)
{
    struct built *b = p->priv;
    const char *a = p->gargv[optind - 1];
    if (c == ':') {
        if (optopt && optopt < 256 && a[0] == '-' && a[1] != '-')
            usage_error("option requires an argument -- '%c'", optopt);
        usage_error("option '%s' requires an argument", a);
    }
    if (a[0] == '-' && a[1] == '-') {
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        for (struct option *o = b->lo; o->name; o++)
            if (eq && strlen(o->name) == len && !strncmp(o->name, a + 2, len))
                usage_error("option '--%s' doesn't allow an argument", o->name);
        usage_error("unrecognized option '%.*s'",
                    (int)(eq ? (size_t)(eq - a) : strlen(a)), a);
    }
    usage_error("invalid option -- '%c'", optopt);
}

int opt_next(struct parser *p, const struct opt *opts)
{
    if (!p->priv && p->done)
        return OPT_END; /* called again after the end */
    if (!p->priv) {
        p->priv = build(opts);
        /* getopt wants argv[0] to be the program. */
        p->gargv = ctl_nonnull(calloc((size_t)p->argc + 2, sizeof(char *)));
        p->gargv[0] = (char *)"sbxctl";
        memcpy(p->gargv + 1, p->argv, (size_t)p->argc * sizeof(char *));
        optind = 0; /* a full re-initialisation of GNU getopt */
        p->done = 0;
    }
    struct built *b = p->priv;
    for (;;) {
        if (p->stop || p->done) {
            /* After `--`, or once the verb said so, everything is positional. */
            if (!p->done) {
                p->done = 1;
                p->rest = optind;
            }
            if (p->rest > p->argc) {
                p->i = p->argc;
                /* Done: the tables go (p->arg points into argv, not them). */
                free(p->priv);
                free(p->gargv);
                p->priv = NULL;
                p->gargv = NULL;
                p->stop = 1;
                p->done = 1;
                p->rest = p->argc + 1;
                return OPT_END;
            }
            p->arg = p->gargv[p->rest++];
            p->i = p->rest - 1;
            return OPT_ARG;
        }
        opterr = 0;
        int c = getopt_long(p->argc + 1, p->gargv, b->so, b->lo, NULL);
        p->i = optind - 1;
        if (c == -1) {
            p->done = 1;
            p->rest = optind;
            continue;
        }
        if (c == 1) {
            p->arg = optarg;
            return OPT_ARG;
        }
        if (c == '?' || c == ':')
            refused(p, c);
        const struct opt *o =
            c >= LONG_ONLY ? b->by_val[c - LONG_ONLY] : b->shorts[(unsigned char)c];
        if (!o)
            refused(p, '?');
        p->arg = o->has_arg ? optarg : NULL;
        switch (o->id) {
        case VO_HELP:
            return OPT_HELP;
        case VO_JSON:
            g.json = 1;
            continue;
        case VO_FORMAT:
            if (set_format(p->arg) < 0)
                usage_error("--format: 'json' or 'table', not '%s'", p->arg);
            continue;
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

void format_duration(char *buf, size_t size, double secs)
{
    long long t = (long long)(secs + 0.5);
    if (secs < 0)
        snprintf(buf, size, "-");
    else if (secs < 10)
        snprintf(buf, size, "%.1fs", secs);
    else if (t < 60)
        snprintf(buf, size, "%llds", t);
    else if (t < 3600)
        snprintf(buf, size, "%lldm %llds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, size, "%lldh %lldm", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, size, "%lldd %lldh", t / 86400, t % 86400 / 3600);
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

/* Reals rounded to microseconds (of a second or a millisecond alike): the
 * numbers stay numbers, the float noise of 4.7792541980743408 goes. */
static void round_reals(json_t *v)
{
    const char *k;
    json_t *e;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach(v, k, e) {
            if (json_is_real(e))
                json_real_set(e, round(json_real_value(e) * 1e6) / 1e6);
            else
                round_reals(e);
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, e) {
            if (json_is_real(e))
                json_real_set(e, round(json_real_value(e) * 1e6) / 1e6);
            else
                round_reals(e);
        }
    }
}

void print_json(json_t *v)
{
    round_reals(v);
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
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

/* For an option given before the verb that is a verb's: say where it goes. */
static const char *verb_option_hint(const char *a)
{
    (void)a;
    return " (verb options go after the verb: sbxctl VERB --help)";
}

int main(int argc, char **argv)
{
    static const struct option gl[] = {
        {"socket", required_argument, NULL, 's'}, {"json", no_argument, NULL, 'J'},
        {"format", required_argument, NULL, 'F'}, {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},      {NULL, 0, NULL, 0},
    };
    int c;

    /* Global options stop at the verb ('+'): what follows is the verb's. */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+:s:h", gl, NULL)) != -1) {
        switch (c) {
        case 's':
            g.socket = optarg;
            break;
        case 'J':
            g.json = 1;
            break;
        case 'F':
            if (set_format(optarg) < 0)
                usage_error("--format: 'json' or 'table', not '%s'", optarg);
            break;
        case 'h':
            main_usage(stdout);
            return 0;
        case 'V':
            printf("sbxctl %s (protocol %s)\n", SBX_VERSION, SBX_PROTO_VERSION);
            return 0;
        case ':':
            usage_error("option '%s' requires an argument", argv[optind - 1]);
        default:
            if (argv[optind - 1][1] == '-')
                usage_error("unrecognized option '%s'%s", argv[optind - 1],
                            verb_option_hint(argv[optind - 1]));
            usage_error("invalid option -- '%c'", optopt);
        }
    }
    if (optind >= argc) {
        main_usage_short(stderr);
        return EXIT_USAGE;
    }
    g.verb = argv[optind];
    for (size_t i = 0; i < NVERBS; i++) {
        if (strcmp(verbs[i].name, g.verb) == 0) {
            current = &verbs[i];
            /* The verb parses what follows it. */
            int rc = verbs[i].fn(argc - optind - 1, argv + optind + 1);
            return rc;
        }
    }
    fprintf(stderr, "sbxctl: unknown verb '%s'\n", g.verb);
    main_usage_short(stderr);
    return EXIT_USAGE;
}
