/*
 * ptest_modal_restart.c - sbxd restarted on the same fake Modal: its
 * sandboxes reconnect and are recovered, the state file's owners guarded.
 *
 * usage: ptest_modal_restart SOCKET CONTROL_PORT
 * One part of the main Modal suite (md_kit.h), run by tests/providers/modal.sh
 * against the same sbxd and fake as ptest_modal.c.
 * Environment (set by modal.sh):
 *   PTEST_SBXD_CMD      shell command that execs an sbxd on the same fake
 *                       (SBXD_SOCKET is set by the test)
 *   PTEST_TMP           a scratch folder
 */

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "md_kit.h"
#include "testhelp.h"

/* As root: another uid may not adopt reco-1 after the restart, which leaves it
 * running. */
static void reconnect_other_uid(const char *sock, const char *first)
{
    json_t *fs;
    if (geteuid() == 0) {
        /* Another uid may not adopt it: the owner is tagged on the Modal sandbox. */
        json_t *x = pt_as_uid(
            65534, 65534, sock, "sandbox.create",
            json_pack("{s:s, s:s}", "id", "reco-1", "provider", "modal"), LONG_MS);
        test_cond("reconnect: another uid cannot adopt it (-32003)",
                  err_code(x) == -32003);
        json_decref(x);
        fs = fake_sandbox(first);
        test_cond("reconnect: ... and that left it running",
                  strcmp(json_string_value(json_object_get(fs, "status")), "running") ==
                      0);
        json_decref(fs);
    }
}

/* The adopted reco-1: env, warnings on a known sandbox, files kept. */
static void reconnect_adopted(conn *c)
{
    json_t *r;
    char *ws;
    r = sh(c, "reco-1", "echo $NEW");
    test_cond("reconnect: the requested env reaches commands anyway", out_is(r, "1\n"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:{s:i}}", "id", "reco-1", "provider", "modal",
                            "options", "memory_mb", 778));
    ws = json_dumps(json_object_get(res_of(r), "warnings"), JSON_COMPACT);
    test_cond("reconnect: on a sandbox sbxd knows, changed options are warnings too",
              ws && strstr(ws, "options.memory_mb"));
    free(ws);
    json_decref(r);
    r = sh(c, "reco-1", "cat r.txt");
    test_cond("reconnect: files are still there", out_is(r, "there\n"));
    json_decref(r);
}

static void test_reconnect(const char *cmd, const char *tmp)
{
    char sock[104];
    snprintf(sock, sizeof(sock), "%s/reco.sock", tmp);
    pid_t pid = spawn_sbxd(cmd, sock);
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("reconnect: second sbxd started", 0);
        stop_sbxd(pid);
        return;
    }
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s, s:s}", "id", "reco-1", "provider",
                                    "modal", "working_dir", "/w"));
    errmsg(r);
    char *first = strdup(meta_str(r, "sandbox_id"));
    json_decref(r);
    r = sh(c, "reco-1", "echo there > r.txt");
    json_decref(r);
    cn_close(c);
    int st = stop_sbxd(pid);
    test_cond("reconnect: sbxd stops cleanly (the Modal sandbox keeps running)", st == 0);
    /* Without its state file the restarted sbxd finds it by name (and tags). */
    char statef[600];
    snprintf(statef, sizeof(statef), "%s.modal.json", sock);
    unlink(statef);
    json_t *fs = fake_sandbox(first);
    test_cond("reconnect: still running in Modal",
              strcmp(json_string_value(json_object_get(fs, "status")), "running") == 0);
    json_decref(fs);

    pid = spawn_sbxd(cmd, sock);
    reconnect_other_uid(sock, first);
    c = cn_open(sock);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:s, s:{s:s}, s:{s:i}}", "id", "reco-1",
                            "provider", "modal", "working_dir", "/w", "env", "NEW", "1",
                            "options", "memory_mb", 777));
    errmsg(r);
    test_cond("reconnect: the same id after a restart adopts the running Modal sandbox",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  meta_true(r, "reconnected") &&
                  strcmp(meta_str(r, "sandbox_id"), first) == 0);
    char *ws = json_dumps(json_object_get(res_of(r), "warnings"), JSON_COMPACT);
    test_cond("reconnect: differing options come back as warnings (memory, env), the "
              "same working dir does not",
              ws && strstr(ws, "options.memory_mb") && strstr(ws, "env") &&
                  !strstr(ws, "working_dir"));
    if (ws)
        printf("      warnings: %s\n", ws);
    free(ws);
    json_decref(r);
    reconnect_adopted(c);
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "reco-1"));
    json_decref(r);
    fs = fake_sandbox(first);
    test_cond("reconnect: destroy terminates it",
              strcmp(json_string_value(json_object_get(fs, "status")), "terminated") ==
                  0);
    json_decref(fs);
    cn_close(c);
    st = stop_sbxd(pid);
    test_cond("reconnect: restarted sbxd stops cleanly", st == 0);
    free(first);
}

/* As root: another uid neither sees, deletes nor uses the recovered snapshot. */
static void recovery_snapshot_other_uid(const char *sock, const char *snap)
{
    if (geteuid() != 0)
        return;
    json_t *l = pt_as_uid(65534, 65534, sock, "snapshot.list", NULL, LONG_MS);
    json_t *d = pt_as_uid(65534, 65534, sock, "snapshot.delete",
                          json_pack("{s:s}", "snapshot", snap), LONG_MS);
    json_t *u = pt_as_uid(65534, 65534, sock, "sandbox.create",
                          json_pack("{s:s, s:s}", "provider", "modal", "snapshot", snap),
                          LONG_MS);
    test_cond("recovery: another uid neither sees, deletes nor uses the snapshot",
              res_of(l) &&
                  json_array_size(json_object_get(res_of(l), "snapshots")) == 0 &&
                  err_code(d) == -32000 && err_code(u) != 0);
    json_decref(l);
    json_decref(d);
    json_decref(u);
}

/* After the restart, rec-1 and rec-2 are listed again as they were. */
static void recovery_listed(conn *c, const char *expires)
{
    json_t *r;
    r = cn_call(c, "sandbox.list", json_pack("{s:s}", "provider", "modal"));
    json_t *got1 = NULL, *got2 = NULL;
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(res_of(r), "sandboxes"), i, x) {
        if (strcmp(json_string_value(json_object_get(x, "id")), "rec-1") == 0)
            got1 = x;
        if (strcmp(json_string_value(json_object_get(x, "id")), "rec-2") == 0)
            got2 = x;
    }
    test_cond("recovery: both sandboxes are listed again without a create", got1 && got2);
    const char *renv =
        json_string_value(json_object_get(json_object_get(got1, "env"), "R"));
    test_cond(
        "recovery: ... with their env, working dir and lifetime",
        got1 && renv && strcmp(renv, "one") == 0 &&
            strcmp(json_string_value(json_object_get(got1, "working_dir")), "/w2") == 0 &&
            json_integer_value(json_object_get(got1, "timeout_ms")) == 600000 &&
            strcmp(json_string_value(json_object_get(got1, "expires_at")), expires) ==
                0 &&
            strcmp(json_string_value(json_object_get(got1, "status")), "running") == 0);
    json_decref(r);
}

/* The processes that ran through the restart: re-adopted, replayed, or lost. */
static void recovery_processes(conn *c, int p1, int p2, int p3)
{
    json_t *r;
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "rec-1", "pid", p1));
    errmsg(r);
    test_cond(
        "recovery: the running process is re-adopted and ends with its real exit (3)",
        res_int(r, "exit_code") == 3 &&
            json_is_null(json_object_get(res_of(r), "error")));
    json_decref(r);
    json_decref(cn_call(
        c, "process.attach",
        json_pack("{s:s, s:i, s:b}", "sandbox", "rec-1", "pid", p1, "follow", 0)));
    char out[256];
    for (int k = 0; k < 10 && sb_output(c, "rec-1", p1, out, sizeof(out)) < 11; k++) {
        json_t *m = cn_read(c, 200);
        if (m && json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    sb_output(c, "rec-1", p1, out, sizeof(out));
    test_cond("recovery: its whole output is replayed, from before and after the restart",
              strcmp(out, "a\nb\nonetwo\n") == 0);
    if (strcmp(out, "a\nb\nonetwo\n") != 0)
        printf("      output: \"%s\"\n", out);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "rec-1", "pid", p3));
    errmsg(r);
    const char *e3 = json_string_value(json_object_get(res_of(r), "error"));
    test_cond("recovery: a command started just before the stop is re-adopted or "
              "reported lost, never forgotten",
              p3 > 0 && err_code(r) == 0 &&
                  (res_int(r, "exit_code") == 0 || (e3 && strstr(e3, "lost"))));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "process.wait",
                  json_pack("{s:s, s:i}", "sandbox", "rec-2", "pid", p2));
    const char *e = json_string_value(json_object_get(res_of(r), "error"));
    test_cond("recovery: the process of a sandbox that died meanwhile is reported lost",
              e && strstr(e, "gone") && res_int(r, "exit_code") == -1);
    json_decref(r);
}

/* The adopted sandbox runs new commands; what is destroyed leaves the state file. */
static void recovery_after(conn *c, const char *state)
{
    json_t *r;
    r = sh(c, "rec-1", "echo $R; pwd");
    test_cond("recovery: the adopted sandbox runs new commands (env, working dir kept)",
              res_int(r, "exit_code") == 0 && ends_with(res_str(r, "stdout"), "/w2\n") &&
                  strncmp(res_str(r, "stdout"), "one\n", 4) == 0);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "rec-1")));
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "rec-2")));
    json_t *sf = NULL;
    for (int k = 0; k < 30; k++) { /* written within a second of a change */
        json_decref(sf);
        sf = json_load_file(state, 0, NULL);
        if (sf && json_object_size(json_object_get(sf, "sandboxes")) == 0 &&
            json_object_size(json_object_get(sf, "snapshots")) == 0)
            break;
        usleep(100000);
    }
    test_cond("recovery: destroyed sandboxes and deleted snapshots leave the state file",
              sf && json_object_size(json_object_get(sf, "sandboxes")) == 0 &&
                  json_object_size(json_object_get(sf, "snapshots")) == 0);
    json_decref(sf);
}

/* The snapshot taken before the restart: listed, usable, deleted. */
static void recovery_snapshot(conn *c, const char *sock, const char *snap)
{
    json_t *r;
    size_t i;
    json_t *x;
    r = cn_call(c, "snapshot.list", json_pack("{s:s}", "provider", "modal"));
    int listed = 0;
    json_array_foreach(json_object_get(res_of(r), "snapshots"), i, x)
        if (strcmp(json_string_value(json_object_get(x, "snapshot")), snap) == 0 &&
            json_integer_value(json_object_get(x, "owner_uid")) ==
                (json_int_t)geteuid() &&
            strcmp(json_string_value(json_object_get(x, "sandbox")), "rec-1") == 0)
            listed = 1;
    test_cond("recovery: a Modal snapshot survives the restart (snapshot.list, owner, "
              "sandbox)",
              snap[0] && listed);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:s, s:s}", "id", "rec-3", "provider", "modal",
                            "snapshot", snap, "working_dir", "/w2"));
    errmsg(r);
    json_decref(r);
    r = sh(c, "rec-3", "cat snapfile");
    test_cond("recovery: ... and a sandbox starts from it", out_is(r, "kept\n"));
    json_decref(r);
    recovery_snapshot_other_uid(sock, snap);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "rec-3")));
    r = cn_call(c, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    errmsg(r);
    test_cond("recovery: snapshot.delete of a Modal snapshot",
              json_is_true(json_object_get(res_of(r), "deleted")));
    json_decref(r);
}

/* An sbxd restart: the Modal sandboxes of the daemon are listed again at once
 * (env, working dir, lifetime from the state file), a process that ran
 * through the restart is re-adopted with its whole output and its real exit,
 * and the process of a sandbox that died meanwhile is reported lost. */
static void test_restart_recovery(const char *cmd, const char *tmp)
{
    char sock[104], state[600];
    snprintf(sock, sizeof(sock), "%s/recov.sock", tmp);
    snprintf(state, sizeof(state), "%s/recov.sock.modal.json", tmp);
    unlink(state);
    pid_t pid = spawn_sbxd(cmd, sock);
    conn *c = cn_open(sock);
    if (!c) {
        test_cond("recovery: sbxd started", 0);
        stop_sbxd(pid);
        return;
    }
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s, s:{s:s}, s:s, s:i}", "id", "rec-1",
                                    "provider", "modal", "env", "R", "one", "working_dir",
                                    "/w2", "timeout_ms", 600000));
    errmsg(r);
    const char *exp1 = res_str(r, "expires_at");
    char expires[64];
    snprintf(expires, sizeof(expires), "%s", exp1);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "rec-2", "provider", "modal"));
    char *dead_id = strdup(meta_str(r, "sandbox_id"));
    json_decref(r);
    json_decref(
        cn_call(c, "sandbox.set_env",
                json_pack("{s:s, s:{s:s}}", "id", "rec-1", "env", "LATE", "two")));
    r = spawn_sh(c, "rec-1", "echo a; sleep 4; echo b; echo $R$LATE; exit 3");
    int p1 = (int)res_int(r, "pid");
    json_decref(r);
    r = spawn_sh(c, "rec-2", "echo x; sleep 60");
    int p2 = (int)res_int(r, "pid");
    json_decref(r);
    await_output(c, "rec-1", p1, 30000);
    await_output(c, "rec-2", p2, 30000);
    json_decref(sh(c, "rec-1", "echo kept > snapfile"));
    r = cn_call_t(c, LONG_MS, "sandbox.snapshot", json_pack("{s:s}", "id", "rec-1"));
    errmsg(r);
    char snap[80];
    snprintf(snap, sizeof(snap), "%s", res_str(r, "snapshot"));
    json_decref(r);
    /* Started right before the stop: kept however far its start got. */
    r = spawn_sh(c, "rec-1", "sleep 1; echo late");
    int p3 = (int)res_int(r, "pid");
    json_decref(r);
    cn_close(c);
    int st = stop_sbxd(pid);
    struct stat sst;
    test_cond("recovery: sbxd stops cleanly and leaves its state file, mode 0600",
              st == 0 && stat(state, &sst) == 0 && (sst.st_mode & 0777) == 0600);
    json_decref(ctl("POST", "/fault", json_pack("{s:s}", "kill_sandbox", dead_id)));

    pid = spawn_sbxd(cmd, sock);
    c = cn_open(sock);
    usleep(300000); /* adoption runs on the first loop iteration */
    recovery_listed(c, expires);
    recovery_processes(c, p1, p2, p3);
    recovery_snapshot(c, sock, snap);
    recovery_after(c, state);
    cn_close(c);
    st = stop_sbxd(pid);
    test_cond("recovery: restarted sbxd stops cleanly", st == 0);
    free(dead_id);
}

/* The state file names owners: one that others could have written is ignored. */
static void test_state_guard(const char *cmd, const char *tmp)
{
    char sock[104], state[600];
    snprintf(sock, sizeof(sock), "%s/guard.sock", tmp);
    snprintf(state, sizeof(state), "%s/guard.sock.modal.json", tmp);
    conn *m = cn_open(SOCK);
    json_t *info = cn_call(m, "daemon.info", NULL);
    const char *url = "";
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(res_of(info), "providers"), i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), "modal") == 0 &&
            json_string_value(json_object_get(json_object_get(p, "info"), "server_url")))
            url = json_string_value(
                json_object_get(json_object_get(p, "info"), "server_url"));
    json_t *planted =
        json_pack("{s:i, s:s, s:{s:{s:i, s:{s:s}, s:{s:s, s:s}}}, s:{}}", "version", 1,
                  "server_url", url, "sandboxes", "planted", "owner", (int)geteuid(),
                  "conf", "provider", "modal", "modal", "sandbox_id", "sb-planted-nope",
                  "app_name", "sbxd-test", "snapshots");
    json_dump_file(planted, state, 0);
    json_decref(planted);
    json_decref(info);
    cn_close(m);
    for (int round = 0; round < 2; round++) {
        chmod(state, round == 0 ? 0666 : 0600);
        pid_t pid = spawn_sbxd(cmd, sock);
        conn *c = cn_open(sock);
        usleep(300000);
        json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", "planted"));
        if (round == 0)
            test_eq_int("state file writable by others: ignored (nothing adopted)",
                        err_code(r), -32000);
        else
            test_eq_int(
                "... the same file, mode 0600: adopted (the check above means it)",
                err_code(r), 0);
        json_decref(r);
        if (round == 1)
            json_decref(cn_call_t(c, LONG_MS, "sandbox.destroy",
                                  json_pack("{s:s}", "id", "planted")));
        cn_close(c);
        stop_sbxd(pid);
    }
    unlink(state);
}

int main(int argc, char **argv)
{
    int st = md_main_args(argc, argv);
    if (st)
        return st;
    const char *cmd = getenv("PTEST_SBXD_CMD"), *tmp = getenv("PTEST_TMP");
    if (cmd && tmp) {
        test_reconnect(cmd, tmp);
        test_restart_recovery(cmd, tmp);
        test_state_guard(cmd, tmp);
    }
    return test_report();
}
