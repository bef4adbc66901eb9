/*
 * dk_kit.h - what the Docker provider tests (tests/providers/ptest_docker*.c)
 * share: the engine asked directly (blocking libcurl, tests only), sbxd
 * instances started and stopped, and the sandbox calls every file makes.
 *
 * Linked into each ptest_docker* binary (Makefile). It does not count tests:
 * testhelp.h's counters are per file, so the checks stay in the test files.
 */
#ifndef SBX_DK_KIT_H
#define SBX_DK_KIT_H

#include <sys/types.h>

#include "itest.h"
#include "pt_kit.h"

/* The sbxd binary and the engine (DOCKER_HOST, unix://...) the kit uses. */
void dk_kit_init(const char *sbxd_bin, const char *docker_host);

/* How long one direct engine call may take (60 s unless set). */
void dk_engine_timeout(long seconds);

/*
 * What every ptest_docker* main starts with: SBXD BUILD_DIR TMPDIR from argv,
 * DOCKER_HOST (unix://...) from the environment, SIGPIPE ignored, the kit
 * initialised. 0, or the exit status once it printed why not (2: usage;
 * 1: DOCKER_HOST is not unix://, with a "0 passed, 1 failed" tally).
 */
int dk_main_args(int argc, char **argv, const char **sbxd_bin, const char **bdir,
                 const char **tmpdir, const char **docker_host);

/* Runs one test step, timed, unless SBX_PTEST_ONLY=name names others (it
 * runs the steps whose call text contains name). */
#define DK_STEP(x)                                                                       \
    do {                                                                                 \
        const char *_only = getenv("SBX_PTEST_ONLY");                                    \
        if (_only && !strstr(#x, _only))                                                 \
            break;                                                                       \
        double _t = now_ms();                                                            \
        x;                                                                               \
        printf("    (%s: %.1f s)\n", #x, (now_ms() - _t) / 1000);                        \
    } while (0)

/* ---- the engine, directly ---- */

struct dk_buf {
    char *d;
    size_t n;
};

/* Appends to a struct dk_buf (kept NUL-terminated); a libcurl write callback. */
size_t dk_buf_write(char *p, size_t s, size_t n, void *u);

/* One engine call; the HTTP status (0: no answer), *out the parsed body. */
long dk_engine(const char *method, const char *path, const char *body, json_t **out);

/* GET /containers/cid/json, or NULL. */
json_t *dk_inspect(const char *cid);

/* ---- sbxd instances ---- */

/* Starts sbxd with config cfg (NULL: none), listening on sock, its output
 * appended to log, with --log-level level (NULL: sbxd's default). Returns once
 * the socket exists (or after 5 s). */
pid_t dk_sbxd_start(const char *cfg, const char *sock, const char *log,
                    const char *level);

/* Sends sig and reaps pid; SIGKILL after wait_ms. */
void dk_sbxd_stop(pid_t pid, int sig, int wait_ms);

/* A connection to sock, retried for up to ms; NULL if it never answers. */
conn *dk_connect(const char *sock, int ms);

/* Waits up to ms until daemon.info shows the engine's api_version (sbxd
 * pings the engine asynchronously at start). 1 if it does. */
int dk_docker_up(conn *c, int ms);

/* ---- calls ---- */

/* sandbox.create {id, provider: docker} plus the keys of extra (taken). */
json_t *dk_create(conn *c, const char *id, json_t *extra, int call_ms);

json_t *dk_exec(conn *c, const char *sb, const char *cmd, int call_ms);

/* process.exec exits 0 with stdout want (NULL: any); prints the answer if not. */
int dk_exec_is(conn *c, const char *sb, const char *cmd, const char *want, int call_ms);

void dk_destroy(conn *c, const char *id, int call_ms);

/*
 * Another sbxd for a test of its own: TMPDIR/NAME.yaml (socket mode 0666, the
 * Docker provider on host with BDIR's agent, sbx-test/busybox, no network,
 * 256m, the managed label, then docker_extra: more lines of the docker
 * section), socket TMPDIR/NAME.sock into osock, log TMPDIR/sbxd-NAME.log at
 * debug. Its pid.
 */
pid_t dk_start_other(const char *tmpdir, const char *bdir, const char *host,
                     const char *name, const char *docker_extra, char *osock, size_t cap);

/* A connection to sock once the engine is up there (dk_docker_up), or NULL. */
conn *dk_connect_ready(const char *sock);

/* metadata.key of the sandbox in a response, or "". */
const char *dk_meta(json_t *resp, const char *key);

#endif
