/*
 * md_kit.h - what the files of the main Modal suite share: ptest_modal.c
 * (basics, processes, the command router) and its parts by feature,
 * ptest_modal_life.c (stop, start, snapshots, a lost backend, clones, create
 * errors, lifetimes), ptest_modal_outage.c (outages of the control plane,
 * headers, daemons with bad credentials or no server) and
 * ptest_modal_restart.c (sbxd restarts: reconnect, recovery, the state file).
 * The fake Modal control plane's HTTP control port, and the calls the tests
 * make through sbxd.
 *
 * Each part is its own binary, run in turn by tests/providers/modal.sh against
 * the same sbxd and fake, in the order the checks always ran. The kit counts
 * no tests: testhelp.h's counters are per file, so the checks stay in the
 * test files.
 */
#ifndef SBX_MD_KIT_H
#define SBX_MD_KIT_H

#include <sys/types.h>

#include "itest.h"
#include "pt_kit.h"

#ifndef LONG_MS
#define LONG_MS 60000
#endif

/* The main sbxd's socket and the fake's control port (argv). */
extern const char *SOCK;
extern int CPORT;

/*
 * What every part's main starts with: SOCKET CONTROL_PORT from argv, SIGPIPE
 * ignored. 0, or the exit status once it printed why not (2: usage).
 */
int md_main_args(int argc, char **argv);

/* A connection to SOCK; NULL (with a failed tally printed) if none. */
conn *md_connect(void);

/* ---- the fake's control endpoint (HTTP/1.1, one request per connection) ---- */

/* Returns the parsed JSON body (new ref) or NULL. body is stolen. */
json_t *ctl(const char *method, const char *path, json_t *body);

json_t *fake_sandbox(const char *modal_id);

/* The fake's record of the Modal sandbox behind sbxd sandbox id (new), or NULL. */
json_t *fake_sandbox_of(conn *c, const char *id);

/* The fake's host folder of sbxd sandbox id (malloc'd), or NULL. */
char *fake_root(conn *c, const char *id);

/* The last exec whose argv, joined with spaces, contains needle. */
json_t *fake_exec(const char *needle);

int calls_count(const char *method, int code);

const char *meta_str(json_t *resp, const char *k);

json_int_t meta_int(json_t *resp, const char *k);

int meta_true(json_t *resp, const char *k);

json_t *sb_get(conn *c, const char *id);

char *modal_id_of(conn *c, const char *id);

json_t *run(conn *c, const char *sb, json_t *cmd, json_t *extra);

json_t *sh(conn *c, const char *sb, const char *cmd);

int out_is(json_t *resp, const char *want);

int ends_with(const char *s, const char *suffix);

int pid_alive(long pid);

long read_long_file(const char *path);

void errmsg(json_t *resp);

int count_notes(conn *c, const char *method, const char *sandbox);

/* The fake's record of image id, or NULL (the caller frees it). */
json_t *fake_image(const char *image_id);

json_t *spawn_sh(conn *c, const char *sb, const char *cmd);

/* Lines "line1\n".."lineN\n" printed over secs seconds. */
void lines_cmd(char *buf, size_t n, int lines, double secs);

/* The stdout of sb's pid from the notifications seen so far (NUL-terminated). */
size_t sb_output(conn *c, const char *sb, int pid, char *out, size_t max);

/* Reads notifications until sb's pid has printed something (the exec really runs). */
int await_output(conn *c, const char *sb, int pid, int timeout_ms);

void outage_start(double secs, const char *mode);

pid_t spawn_sbxd(const char *cmd, const char *sock);

int stop_sbxd(pid_t pid);

#endif
