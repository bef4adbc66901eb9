/*
 * sbxctl.h - what the sbxctl verb files share.
 */
#ifndef SBXCTL_H
#define SBXCTL_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include <sbx/sbx.h>
#include <sbx/sbx_async.h>

#define SBXCTL_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* An allocation's result (malloc, strdup, json_dumps...), checked: out of
 * memory, a command-line tool has nothing to save, so it says so and aborts.
 * (libsbx never does this: it returns SBX_ERR_OOM.) */
static inline void *ctl_nonnull(void *p)
{
    if (!p) {
        fputs("sbxctl: out of memory\n", stderr);
        abort();
    }
    return p;
}

/* Exit statuses of sbxctl itself (exec/run/wait exit with the command's), as
 * docker's: 125 when sbxd or its engine failed (or could not be reached), 126
 * a command that could not be invoked, 127 one that was not found. */
#define EXIT_RPC 125
#define EXIT_CANNOT_INVOKE 126
#define EXIT_NOT_FOUND 127
#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130

/* Global options: -s/--socket, --json, --format, -h, --version, only before
 * the verb (docker's rule: `kill -s TERM` is kill's -s). --json and --format
 * are also every verb's own. */
struct sbxctl_globals {
    const char *socket;
    int json;
    const char *verb;
};
extern struct sbxctl_globals g;

/* ---- cli.c: the verb table main.c hands over ---- */
struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
    const char *help;
};
/* The table (borrowed, static) for usage lines, help and completion. */
void cli_set_verbs(const struct verb *table, size_t n);
/* The verb running now: usage_error and verb_help speak of it. */
void cli_set_current(const struct verb *v);
/* "usage: sbxctl ... verbs: ..." in short. */
void cli_usage_short(FILE *f);
/* --format json|table into g.json; -1 for anything else. */
int cli_set_format(const char *f);

/* ---- cli.c: option parsing ----
 * The interface every verb file uses (unchanged from the hand-written parser
 * it replaces; getopt_long(3) underneath since issue 19):
 *
 *     static const struct opt my_opts[] = {
 *         {"recursive", 'r', 0, 1}, {"mode", 0, 1, 2}, {NULL, 0, 0, 0}};
 *     struct parser p;
 *     parser_init(&p, argc, argv);
 *     while ((o = opt_next(&p, my_opts)) != OPT_END) switch (o) {
 *         case OPT_HELP: verb_help();
 *         case OPT_ARG: ...p.arg is a positional...
 *         case 1: ... case 2: ...p.arg is the value...
 *     }
 *
 * opt_next() returns an option's id (> 0), OPT_ARG for a positional argument
 * (in p->arg, in command-line order), OPT_END, or OPT_HELP (-h/--help); on a
 * bad option it prints getopt's wording with the verb's usage and exits 2.
 * Short letters bundle (-it, -sPATH, -e K=V); long options take --name=V or
 * --name V (and unambiguous prefixes, as getopt_long does). --json and
 * --format json|table are handled inside (they set g.json). `--` ends the
 * options; setting p->stop makes every later argument positional (a command's
 * own flags: `run -- ls -l`, or `exec ID ls -l` once CMD started). Pass the
 * same opts on every call of one parser. Letters a verb does not use are free
 * for it; -h is help unless the verb's table takes it. */
enum { OPT_END = -1, OPT_ARG = -2, OPT_HELP = -3 };

struct opt {
    const char *name; /* long name, without "--"; NULL for a short-only option */
    int shortc;       /* short letter, or 0 */
    int has_arg;
    int id; /* > 0 */
};

struct parser {
    int argc;
    char **argv;
    int i;    /* index in argv of the argument last returned */
    int stop; /* no more options: everything is positional */
    const char *arg;
    /* the parser's own state */
    void *priv;
    char **gargv;
    int done, rest;
};

void parser_init(struct parser *p, int argc, char **argv);
int opt_next(struct parser *p, const struct opt *opts);

/* Prints "sbxctl VERB: msg" and the verb's usage to stderr, exits 2. */
void usage_error(const char *fmt, ...) SBXCTL_PRINTF(1, 2) __attribute__((noreturn));
/* Prints the verb's full help to stdout, exits 0. */
void verb_help(void) __attribute__((noreturn));
/* Prints "sbxctl: msg" to stderr. */
void warnx_(const char *fmt, ...) SBXCTL_PRINTF(1, 2);

/* ---- args.c: argument helpers (usage_error on bad input) ---- */
json_int_t arg_int(const char *what, const char *s);
/* The next positional into pos[*n], at most max of them (usage_error past). */
void arg_positional(const char **pos, int *n, int max, const char *arg);
/* Collects the positionals "ID PID" one at a time (process.c). */
void args_id_pid(const char *arg, const char **id, const char **pid);
/* K=V into obj; with null_if_empty, "K=" stores null. */
void arg_env(json_t *obj, const char *kv, int null_if_empty);
/* key=value into obj; value parsed as JSON if it parses, else a string. */
void arg_opt(json_t *obj, const char *kv);
/* One argument: the string; several: an array (new reference). */
json_t *command_json(int n, char **args);
/* Reads a whole file; exits 1 on failure. Returns a new json string. */
json_t *file_string(const char *path);
/* obj[key] as an object / array, created when absent (borrowed). */
json_t *obj_object(json_t *obj, const char *key);
json_t *obj_array(json_t *obj, const char *key);
/* obj[key] as a string (or "" / the compact JSON of non-strings, malloc'd). */
char *field_text(json_t *obj, const char *key);
/* A duration for people: 4.8s, 42s, 3m 12s, 2h 5m, 3d 4h. */
void format_duration(char *buf, size_t size, double secs);
/* The exit status for an exit record (exit_code, else 128+signal, else 1). */
int exit_status(json_t *rec);

/* ---- call.c: daemon access ---- */
const char *socket_path(void);
/* Connects or exits 1. */
sbx_ctx *ctl_connect(void);
/* Prints an RPC error like "sbxctl: message (code N)". */
void print_rpc_error(const sbx_rpc_error *e);
/* Calls method with params (stolen). 0 and *result_out (may be NULL) on
 * success; prints the error and returns 1 otherwise. */
int ctl_call(sbx_ctx *c, const char *method, json_t *params, json_t **result_out);
/* Connect, call, print the result as JSON when --json; returns 0/1. */
int ctl_simple(const char *method, json_t *params, json_t **result_out);
/* Compact JSON + newline on stdout. */
void print_json(json_t *v);
/* A sandbox.progress notification, to stderr when it is a terminal. */
void print_progress(const char *method, json_t *params);

/* ---- verbs ---- */
/* ---- tools.c: --tool NAME=COMMAND answers tool.call by running COMMAND ---- */
struct ctl_tools;
struct ev_loop;
struct ctl_tools *ctl_tools_new(void);
/* Adds NAME or NAME=COMMAND (usage_error when malformed); returns NAME,
 * owned by t (or spec itself when it has no '='). */
const char *ctl_tools_add(struct ctl_tools *t, const char *spec);
/* Answers the tool calls arriving on *acp (read at each answer: NULL once the
 * connection is gone) with children watched on loop. */
void ctl_tools_attach(struct ctl_tools *t, struct ev_loop *loop, sbx_async **acp);
/* Kills commands still running. NULL is a no-op. */
void ctl_tools_free(struct ctl_tools *t);

/* ---- tty.c: exec/run/attach --tty (issue 18) ---- */
struct ctl_tty;
/* A terminal session; with raw (the keyboard is forwarded), stdin in raw
 * mode when it is a terminal (restored by ctl_tty_free, ctl_tty_restore,
 * or at exit). Without, Ctrl-C stays sbxctl's own, as without --tty. */
struct ctl_tty *ctl_tty_new(struct ev_loop *loop, int raw);
/* process.spawn's "pty" for the local window size (new reference). */
json_t *ctl_tty_pty_params(void);
/* The process is known: window-size changes go to it through *acp (read at
 * each change); send_now sends the current size at once (attach). */
void ctl_tty_start(struct ctl_tty *t, sbx_async **acp, const char *sandbox,
                   json_int_t pid, int send_now);
/* Copies the n input bytes to out (room for n) without the detach keys
 * (Ctrl-P Ctrl-Q; a lone Ctrl-P is held until the next byte); *detach = 1
 * when they came. Returns the bytes to send. */
size_t ctl_tty_filter(struct ctl_tty *t, const char *in, size_t n, char *out,
                      int *detach);
void ctl_tty_restore(struct ctl_tty *t);
/* NULL is a no-op. */
void ctl_tty_free(struct ctl_tty *t);

int cmd_ping(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_start(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_snapshots(int argc, char **argv);
int cmd_snapshot_rm(int argc, char **argv);
int cmd_clone(int argc, char **argv);
int cmd_set_env(int argc, char **argv);
int cmd_instructions(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_spawn(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_kill(int argc, char **argv);
int cmd_wait(int argc, char **argv);
int cmd_write(int argc, char **argv);
int cmd_close_stdin(int argc, char **argv);
int cmd_attach(int argc, char **argv);
int cmd_mcp(int argc, char **argv);
/* files (fs.c, cp.c) */
int cmd_fs(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_stats(int argc, char **argv);        /* stats.c (issue 18) */
int cmd_port_forward(int argc, char **argv); /* port.c (issue 18) */

/* ---- issue 19: events.c, completion.c ---- */
int cmd_events(int argc, char **argv);
int cmd_completion(int argc, char **argv);
/* The verb table as cli.c was given it (completion.c reads it). */
int verb_count(void);
const char *verb_name(int i);
const char *verb_usage(int i);
const char *verb_help_text(int i);

#endif
