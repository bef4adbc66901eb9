/*
 * main.c - sbxctl: the command-line client of sbxd, built on libsbx.
 *
 * Exit status: 0 success, 125 an RPC or connection error ("sbxctl: message
 * (code N)" on stderr, the daemon's or engine's message whole), 2 a usage
 * error; exec, run and wait exit with the command's own status (126 when it
 * could not be invoked, 127 when it was not found, as docker).
 *
 * The top floor: the verb table and main(). What the verb files share sits
 * below them all and never calls up: cli.c (messages, options, the verb
 * table this file hands it), args.c (argument and JSON helpers), call.c (the
 * daemon: connect, call, print).
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "sbxctl.h"

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

    cli_set_verbs(verbs, NVERBS);
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
            if (cli_set_format(optarg) < 0)
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
        cli_usage_short(stderr);
        return EXIT_USAGE;
    }
    g.verb = argv[optind];
    for (size_t i = 0; i < NVERBS; i++) {
        if (strcmp(verbs[i].name, g.verb) == 0) {
            cli_set_current(&verbs[i]);
            /* The verb parses what follows it. */
            int rc = verbs[i].fn(argc - optind - 1, argv + optind + 1);
            return rc;
        }
    }
    fprintf(stderr, "sbxctl: unknown verb '%s'\n", g.verb);
    cli_usage_short(stderr);
    return EXIT_USAGE;
}
