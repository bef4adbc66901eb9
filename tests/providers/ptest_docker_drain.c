/*
 * ptest_docker_drain.c - a stopped sbxd keeps no warm container alive: at
 * SIGTERM it removes its pools' unused containers, and those still being
 * filled, through the Engine API within limits.shutdown_drain_ms, then
 * exits; users' sandboxes (one taken from the pool, one not) keep running
 * and the next sbxd adopts them. limits.shutdown_drain_ms: 0 exits at once
 * and leaves the pool to the next sbxd, as before.
 *
 *   ptest_docker_drain SBXD BUILD_DIR TMPDIR     (tests/providers/docker_drain.sh)
 */
#include <signal.h>
#include <sys/wait.h>

#include "dk_kit.h"
#include "itest.h"
#include "testhelp.h"

#define POOL "    pools:\n      - {name: dwarm, size: 2}\n"

static const char *sbxd_bin, *bdir, *tmpdir, *docker_host;

/* ---- helpers ---------------------------------------------------------------------- */

/* Ids of the containers (running or not) labelled sbxd.pool by the sbxd on
 * sock; unused: only those never taken (taken ones are renamed /sbxp.…). */
static json_t *pool_containers(const char *sock, int unused)
{
    json_t *l = NULL, *ids = json_array();
    dk_engine("GET",
              "/containers/json?all=1&filters=%7B%22label%22%3A%5B%22sbxd.pool%22%5D%7D",
              NULL, &l);
    size_t i;
    json_t *c;
    json_array_foreach(l, i, c) {
        const char *s = json_string_value(
            json_object_get(json_object_get(c, "Labels"), "sbxd.socket"));
        const char *nm =
            json_string_value(json_array_get(json_object_get(c, "Names"), 0));
        if (!s || strcmp(s, sock) != 0 || (unused && nm && !strncmp(nm, "/sbxp.", 6)))
            continue;
        json_array_append(ids, json_object_get(c, "Id"));
    }
    json_decref(l);
    return ids;
}

/* daemon.info's docker pools, summed: ready into *ready, filling returned. */
static int pool_counts(conn *c, int *ready)
{
    json_t *r = cn_call(c, "daemon.info", NULL);
    int filling = 0;
    *ready = 0;
    size_t i, j;
    json_t *pv, *pl;
    json_array_foreach(json_object_get(res_of(r), "providers"), i, pv)
        json_array_foreach(json_object_get(json_object_get(pv, "info"), "pools"), j, pl) {
            *ready += (int)json_integer_value(json_object_get(pl, "ready"));
            filling += (int)json_integer_value(json_object_get(pl, "filling"));
        }
    json_decref(r);
    return filling;
}

static int wait_ready(conn *c, int want, int ms)
{
    for (double until = now_ms() + ms; now_ms() < until; usleep(100000)) {
        int ready;
        pool_counts(c, &ready);
        if (ready == want)
            return 1;
    }
    return 0;
}

/* SIGTERM, then the exit status (-1: still running after ms, then killed);
 * *took the time to exit. */
static int term_and_wait(pid_t pid, int ms, double *took)
{
    double t0 = now_ms();
    kill(pid, SIGTERM);
    for (;;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            *took = now_ms() - t0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        if (now_ms() - t0 > ms) {
            dk_sbxd_stop(pid, SIGKILL, 1000);
            *took = now_ms() - t0;
            return -1;
        }
        usleep(20000);
    }
}

static int running(const char *cid)
{
    json_t *j = cid[0] ? dk_inspect(cid) : NULL;
    int r = json_is_true(json_object_get(json_object_get(j, "State"), "Running"));
    json_decref(j);
    return r;
}

static void remove_all(json_t *ids)
{
    size_t i;
    json_t *id;
    char path[200];
    json_array_foreach(ids, i, id) {
        snprintf(path, sizeof(path), "/containers/%s?force=1&v=1", json_string_value(id));
        dk_engine("DELETE", path, NULL, NULL);
    }
}

/* ---- tests ---------------------------------------------------------------------- */

/* The next sbxd on the socket adopts the users' sandboxes; they are destroyed. */
static void adopt_and_clean(const char *cid_taken, const char *cid_own)
{
    char s2[108];
    pid_t pid = dk_start_other(tmpdir, bdir, docker_host, "drain", "", s2, sizeof(s2));
    conn *c = dk_connect_ready(s2);
    int ok = c && dk_exec_is(c, "dtaken", "echo back", "back\n", 60000) &&
             dk_exec_is(c, "dmine", "echo back", "back\n", 60000);
    test_cond(
        "drain: the next sbxd adopts both users' sandboxes and runs commands in them",
        ok);
    if (c) {
        dk_destroy(c, "dtaken", 60000);
        dk_destroy(c, "dmine", 60000);
    }
    test_cond("drain: destroyed, the users' containers are gone",
              !running(cid_taken) && !running(cid_own));
    cn_close(c);
    double took;
    test_cond("drain: an sbxd without pools exits at SIGTERM at once (exit 0)",
              term_and_wait(pid, 10000, &took) == 0 && took < 2000);
}

static void test_drain_pool(void)
{
    char sock[108];
    pid_t pid =
        dk_start_other(tmpdir, bdir, docker_host, "drain", POOL, sock, sizeof(sock));
    conn *c = dk_connect_ready(sock);
    test_cond("drain: the pool fills (2 ready)", c && wait_ready(c, 2, 90000));
    json_t *a = c ? dk_create(c, "dtaken", NULL, 120000) : NULL;
    json_t *b =
        c ? dk_create(c, "dmine", json_pack("{s:{s:i}}", "options", "pids_limit", 128),
                      120000)
          : NULL;
    char cid_taken[80], cid_own[80];
    snprintf(cid_taken, sizeof(cid_taken), "%s", dk_meta(a, "container_id"));
    snprintf(cid_own, sizeof(cid_own), "%s", dk_meta(b, "container_id"));
    test_cond("drain: one user's sandbox from the pool, one not",
              dk_meta(a, "pool")[0] && !dk_meta(b, "pool")[0] && cid_taken[0] &&
                  cid_own[0]);
    json_decref(a);
    json_decref(b);
    test_cond("drain: the pool refills (2 ready)", c && wait_ready(c, 2, 90000));
    json_t *before = pool_containers(sock, 1);
    cn_close(c);
    double took;
    int st = term_and_wait(pid, 25000, &took);
    printf("      %zu unused pool containers; sbxd exited %d after SIGTERM in %.0f ms\n",
           json_array_size(before), st, took);
    json_t *after = pool_containers(sock, 1);
    test_cond("drain: SIGTERM removes every unused pool container before sbxd exits (0)",
              st == 0 && json_array_size(before) == 2 && json_array_size(after) == 0);
    test_cond("drain: the users' sandboxes keep running (taken from the pool, and not)",
              running(cid_taken) && running(cid_own));
    remove_all(after);
    json_decref(before);
    json_decref(after);
    adopt_and_clean(cid_taken, cid_own);
}

/* SIGTERM while the pool is still being filled, once the engine made one of
 * its containers (a fill past its create): what the fills made goes too. The
 * engine is asked again a while after the exit, so that a create sbxd left
 * in flight has landed. */
static void test_drain_filling(void)
{
    char sock[108];
    pid_t pid = dk_start_other(tmpdir, bdir, docker_host, "dfill",
                               "    pools:\n      - {name: dfill, size: 3}\n", sock,
                               sizeof(sock));
    conn *c = dk_connect_ready(sock);
    int filling = 0, ready = 0;
    size_t made = 0;
    for (double until = now_ms() + 30000; c && now_ms() < until; usleep(20000)) {
        filling = pool_counts(c, &ready);
        json_t *ids = pool_containers(sock, 0);
        made = json_array_size(ids);
        json_decref(ids);
        if (filling && made)
            break;
    }
    cn_close(c);
    double took;
    int st = term_and_wait(pid, 25000, &took);
    usleep(3000 * 1000);
    json_t *after = pool_containers(sock, 0);
    printf(
        "      SIGTERM with %d filling (%zu made), %d ready: exited %d in %.0f ms, %zu "
        "left 3 s later\n",
        filling, made, ready, st, took, json_array_size(after));
    test_cond("drain: SIGTERM while the pool fills leaves none of its containers",
              filling > 0 && made > 0 && st == 0 && json_array_size(after) == 0);
    remove_all(after);
    json_decref(after);
}

/* limits.shutdown_drain_ms: 0 is the old way: exit at once, the pool stays
 * for the next sbxd on the socket to remove. */
static void test_drain_off(void)
{
    char sock[108];
    pid_t pid = dk_start_other(tmpdir, bdir, docker_host, "doff",
                               "    pools:\n      - {name: doff, size: 1}\n"
                               "limits:\n  shutdown_drain_ms: 0\n",
                               sock, sizeof(sock));
    conn *c = dk_connect_ready(sock);
    test_cond("drain off: the pool fills", c && wait_ready(c, 1, 90000));
    cn_close(c);
    double took;
    int st = term_and_wait(pid, 10000, &took);
    json_t *after = pool_containers(sock, 1);
    test_cond(
        "drain off: shutdown_drain_ms 0 exits at once and leaves the pool's container",
        st == 0 && json_array_size(after) == 1);
    remove_all(after);
    json_decref(after);
}

int main(int argc, char **argv)
{
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &docker_host);
    if (st)
        return st;
    DK_STEP(test_drain_pool());
    DK_STEP(test_drain_filling());
    DK_STEP(test_drain_off());
    return test_report();
}
