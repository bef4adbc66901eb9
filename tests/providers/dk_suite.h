/*
 * dk_suite.h - what the files of the main Docker suite share: ptest_docker.c
 * (lifecycle, options, snapshots) and its parts by feature, ptest_docker_proc.c
 * (processes, streams, a misbehaving agent), ptest_docker_policy.c (the policy,
 * agent mounts, warm pools), ptest_docker_restart.c (adoption, restarts,
 * containers lost behind sbxd's back), ptest_docker_stream.c (a large stream to
 * a slow reader, direct and attach-only) and ptest_docker_engine.c (TLS, no
 * engine, a misbehaving engine, the engine stopping).
 *
 * Each part is its own binary with its own "main" sbxd (named by the part, so
 * two parts never share a socket, a config or a log); tests/providers/docker.sh
 * runs them in turn and adds up their tallies. The kit counts no tests:
 * testhelp.h's counters are per file, so the checks stay in the test files.
 */
#ifndef SBX_DK_SUITE_H
#define SBX_DK_SUITE_H

#include <sys/types.h>

#include "dk_kit.h"
#include "itest.h"

/* From argv and the environment (docker.sh), set by dk_suite_start. */
extern const char *sbxd_bin, *bdir, *tmpdir;
extern const char *docker_host, *tls_host, *tls_ca, *tls_cert, *tls_key;
/* SBX_DOCKERD_PRIVATE=1: the engine is ours and may be stopped. */
extern int private_engine;
/* The part's main sbxd: tmpdir/NAME.sock, NAME.yaml, sbxd-NAME.log. */
extern char main_sock[108], main_cfg[512], main_log[512];
extern pid_t main_pid;

/*
 * What every part's main starts with: the arguments (dk_main_args), libcurl,
 * the part's main sbxd named name started with the standard config, *c a
 * connection to it once its first engine ping answered (or 5 s passed).
 * 0, or the exit status once it printed why not (with a failed tally).
 */
int dk_suite_start(int argc, char **argv, const char *name, conn **c);

/* Prints the part's time, closes c (NULL: none), stops the main sbxd. The
 * caller then returns test_report(). */
void dk_suite_end(conn *c);

/* ---- the engine, directly ---- */

/* Does the container's process table (docker top) show a command matching s?
 * -1 if the engine did not answer. */
int top_has(const char *cid, const char *s);

/* ---- sbxd instances ---- */

pid_t start_sbxd(const char *cfg, const char *sock, const char *log);
void stop_sbxd(pid_t pid, int sig);
/* The standard config for the engine at host, plus extra provider lines. */
void write_config(const char *path, const char *host, const char *extra);
/* A second sbxd named `name` (its files in tmpdir) for the engine at host, with
 * extra provider config; a connection to it (NULL if it does not answer). */
conn *start_other(const char *name, const char *host, const char *extra, pid_t *pid);

/* ---- calls ---- */

conn *connect_main(void);
/* Docker's create with a 30 min lifetime unless extra (taken) says otherwise. */
json_t *create(conn *c, const char *id, json_t *extra);
const char *cid_of(json_t *resp);
json_t *exec_t(conn *c, const char *sb, const char *cmd, int timeout_ms);
json_t *exec(conn *c, const char *sb, const char *cmd);
int exec_ok(conn *c, const char *sb, const char *cmd, const char *want_stdout);
void destroy(conn *c, const char *id);
/* metadata.channel of a sandbox object in a response, or "". */
const char *channel_of(json_t *resp);
const char *status_of(conn *c, const char *id);
int wait_status(conn *c, const char *id, const char *want, int ms);
/* Sends a call without waiting; its answer comes from await_id(). */
int send_call(conn *c, const char *method, json_t *params);
/* The answer to call id within ms, or NULL; other messages go to c->notes. */
json_t *await_id(conn *c, int id, int ms);
/* An op's answer: done, or failed with a provider error (-32002 engine not
 * reached, -32006 the engine's refusal) naming Docker. */
int op_answer_clear(json_t *ans);
void print_answer(const char *what, json_t *ans, double ms);
/* An exec that worked after sbxd restarted the sandbox, and says so. */
int restarted_ok(json_t *r, const char *want_stdout);
/* Waits (up to 10 s) for the docker provider of the sbxd on c to be up. */
int docker_up(conn *c);
/* A notification method in c->notes whose params.key is val (NULL: any). */
int has_note(conn *c, const char *method, const char *key, const char *val);

#endif
