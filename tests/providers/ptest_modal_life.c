/*
 * ptest_modal_life.c - Modal sandboxes' lifecycle through a real sbxd:
 * a dead sandbox, stop and start, snapshots, the backend lost mid-op, clones,
 * create errors, lifetimes.
 *
 * usage: ptest_modal_life SOCKET CONTROL_PORT
 * One part of the main Modal suite (md_kit.h), run by tests/providers/modal.sh
 * against the same sbxd and fake as ptest_modal.c.
 */

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "md_kit.h"
#include "testhelp.h"

static void test_dead_sandbox(conn *c)
{
    char *old = modal_id_of(c, "m1");
    json_t *f = ctl("POST", "/fault", json_pack("{s:s}", "kill_sandbox", old));
    json_decref(f);
    json_t *r = sh(c, "m1", "echo ok");
    test_cond("dead sandbox: exec works after a restart",
              res_int(r, "exit_code") == 0 && out_is(r, "ok\n"));
    test_cond("dead sandbox: the result says retried",
              json_is_true(json_object_get(res_of(r), "retried")));
    json_decref(r);
    r = sb_get(c, "m1");
    test_cond("dead sandbox: metadata shows the restart and a new Modal sandbox",
              meta_int(r, "restarts") == 1 && meta_true(r, "retried") &&
                  strcmp(meta_str(r, "sandbox_id"), old) != 0 &&
                  strcmp(res_str(r, "status"), "running") == 0);
    json_decref(r);
    free(old);

    /* Two failures in a row: retried once, then reported. */
    f = ctl("POST", "/fault",
            json_pack("{s:{s:s, s:i, s:s, s:i}}", "fail_next", "method", "TaskExecStart",
                      "code", 5, "message", "fake: no such task (100% gone, über)",
                      "times", 2));
    json_decref(f);
    r = sh(c, "m1", "echo x");
    const char *e = json_string_value(json_object_get(res_of(r), "error"));
    test_cond(
        "second failure: reported (grpc-message percent-decoded), not retried again",
        e && strstr(e, "NOT_FOUND") &&
            strstr(e, "fake: no such task (100% gone, über)") &&
            res_int(r, "exit_code") != 0);
    test_cond("second failure: the result says it was retried",
              json_is_true(json_object_get(res_of(r), "retried")));
    json_decref(r);
    json_decref(ctl("DELETE", "/faults", NULL));
    r = sh(c, "m1", "echo y");
    test_cond("after the faults: exec works", out_is(r, "y\n"));
    json_decref(r);
}

static void test_stop_start(conn *c)
{
    json_t *r = sh(c, "m1", "echo keep > f.txt");
    json_decref(r);
    char *old = modal_id_of(c, "m1");
    r = cn_call_t(c, LONG_MS, "sandbox.stop", json_pack("{s:s}", "id", "m1"));
    errmsg(r);
    test_eq_str("stop: stopped", res_str(r, "status"), "stopped");
    test_cond("stop: the filesystem was saved",
              strncmp(meta_str(r, "saved_image_id"), "im-", 3) == 0);
    json_t *im = fake_image(meta_str(r, "saved_image_id"));
    test_cond("stop: saved on the task (TaskSnapshotFilesystem), never expiring",
              im &&
                  strcmp(json_string_value(json_object_get(im, "via")),
                         "TaskSnapshotFilesystem") == 0 &&
                  json_integer_value(json_object_get(im, "ttl_seconds")) == -1);
    json_decref(im);
    json_decref(r);
    json_t *fs = fake_sandbox(old);
    test_cond("stop: the Modal sandbox was terminated",
              strcmp(json_string_value(json_object_get(fs, "status")), "terminated") ==
                  0);
    json_decref(fs);
    r = cn_call_t(c, LONG_MS, "sandbox.start", json_pack("{s:s}", "id", "m1"));
    errmsg(r);
    test_cond("start: running on a new Modal sandbox",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  strcmp(meta_str(r, "sandbox_id"), old) != 0);
    json_decref(r);
    r = sh(c, "m1", "cat f.txt");
    test_cond("start: the file survived stop/start", out_is(r, "keep\n"));
    json_decref(r);
    free(old);
}

static void test_snapshot(conn *c)
{
    json_t *r = sh(c, "m1", "echo snap > s.txt");
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.snapshot", json_pack("{s:s}", "id", "m1"));
    errmsg(r);
    char *snap = strdup(res_str(r, "snapshot"));
    test_cond("snapshot: an id", strncmp(snap, "snap-", 5) == 0);

    json_t *c2 = cn_call_t(c, LONG_MS, "sandbox.create",
                           json_pack("{s:s, s:s}", "id", "m2", "snapshot", snap));
    errmsg(c2);
    test_cond("create from snapshot: running",
              strcmp(res_str(c2, "status"), "running") == 0 &&
                  strcmp(res_str(c2, "provider"), "modal") == 0);
    json_t *fs = fake_sandbox(meta_str(c2, "sandbox_id"));
    const char *img = json_string_value(json_object_get(fs, "image_id"));
    char *snap_img = img ? strdup(img) : NULL;
    json_t *sim = fake_image(snap_img);
    test_cond("snapshot: taken on the task with Modal's default TTL",
              sim &&
                  strcmp(json_string_value(json_object_get(sim, "via")),
                         "TaskSnapshotFilesystem") == 0 &&
                  json_integer_value(json_object_get(sim, "ttl_seconds")) > 0);
    json_decref(sim);
    json_t *imgs = ctl("GET", "/images", NULL);
    int is_snap = 0;
    size_t i;
    json_t *im;
    json_array_foreach(imgs, i, im)
        if (strcmp(json_string_value(json_object_get(im, "image_id")),
                   json_string_value(json_object_get(fs, "image_id"))) == 0)
            is_snap =
                strcmp(json_string_value(json_object_get(im, "kind")), "snapshot") == 0;
    test_cond("create from snapshot: started on the snapshot image", is_snap);
    json_decref(imgs);
    json_decref(fs);
    json_decref(c2);
    json_decref(r);
    r = run(c, "m2", json_string("cat s.txt"), json_pack("{s:s}", "cwd", "/work"));
    test_cond("create from snapshot: the file is there", out_is(r, "snap\n"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "m2"));
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "snapshot.delete", json_pack("{s:s}", "snapshot", snap));
    errmsg(r);
    sim = fake_image(snap_img);
    test_cond("snapshot.delete: the Modal image is deleted (ImageDelete)",
              err_code(r) == 0 && snap_img && !sim && calls_count("ImageDelete", 0) > 0);
    json_decref(sim);
    json_decref(r);
    free(snap_img);
    free(snap);
}

/* Kills Modal sandbox modal_id from a child after delay_ms, while the parent
 * waits in a call. Returns the child's pid. */
static pid_t kill_later(const char *modal_id, int delay_ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        usleep((useconds_t)delay_ms * 1000);
        json_decref(ctl("POST", "/fault", json_pack("{s:s}", "kill_sandbox", modal_id)));
        _exit(0);
    }
    return pid;
}

/* Losing the backend fails the pending op at once (issue 11): a SnapshotFs
 * that the server holds for 30 s while the sandbox dies ends within seconds,
 * although limits.op_timeout_ms is 60 s; stop of a lost sandbox is done;
 * destroy finishes. */
static void test_lost_backend(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mlost", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    char *mid = modal_id_of(c, "mlost");
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i}}", "hold_next", "method",
                              "TaskSnapshotFilesystem", "ms", 30000)));
    double t0 = now_ms();
    pid_t k = kill_later(mid, 1000);
    r = cn_call_t(c, LONG_MS, "sandbox.snapshot", json_pack("{s:s}", "id", "mlost"));
    double took = now_ms() - t0;
    waitpid(k, NULL, 0);
    const char *msg =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    test_cond("lost backend: the held snapshot fails with a provider error (-32006)",
              err_code(r) == -32006 && msg && strstr(msg, "lost"));
    printf("    (snapshot failed after %.0f ms: %s)\n", took, msg ? msg : "?");
    test_cond("lost backend: the snapshot fails within seconds, not at op_timeout_ms",
              took < 10000);
    json_decref(r);
    free(mid);

    /* stop: a held SnapshotFs, then the sandbox dies: nothing left to save. */
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlost")));
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s}", "id", "mlost2", "provider", "modal"));
    errmsg(r);
    json_decref(r);
    mid = modal_id_of(c, "mlost2");
    json_decref(ctl("POST", "/fault",
                    json_pack("{s:{s:s, s:i}}", "hold_next", "method",
                              "TaskSnapshotFilesystem", "ms", 30000)));
    t0 = now_ms();
    k = kill_later(mid, 1000);
    r = cn_call_t(c, LONG_MS, "sandbox.stop", json_pack("{s:s}", "id", "mlost2"));
    took = now_ms() - t0;
    waitpid(k, NULL, 0);
    errmsg(r);
    test_cond("lost backend: stop of a sandbox lost mid-snapshot is done within seconds",
              strcmp(res_str(r, "status"), "stopped") == 0 && took < 10000);
    json_decref(r);
    t0 = now_ms();
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlost2"));
    test_cond("lost backend: destroy finishes",
              !json_object_get(r, "error") && now_ms() - t0 < 10000);
    json_decref(r);
    json_decref(ctl("DELETE", "/faults", NULL));
    free(mid);
}

static void test_clone_destroy(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.clone",
                          json_pack("{s:s, s:s, s:i, s:b}", "id", "m1", "new_id", "m1c",
                                    "idle_timeout_ms", 90000, "start", 1));
    errmsg(r);
    json_t *fs = fake_sandbox(meta_str(r, "sandbox_id"));
    test_cond("clone: idle_timeout_ms becomes Modal's idle_timeout_secs",
              strcmp(res_str(r, "status"), "running") == 0 &&
                  json_integer_value(json_object_get(fs, "idle_timeout_secs")) == 90);
    json_decref(fs);
    json_decref(r);
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "m1c"));
    json_decref(r);

    char *mid = modal_id_of(c, "m1");
    r = cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "m1"));
    test_eq_str("destroy: destroyed", res_str(r, "status"), "destroyed");
    json_decref(r);
    fs = fake_sandbox(mid);
    test_cond("destroy: the Modal sandbox was terminated",
              strcmp(json_string_value(json_object_get(fs, "status")), "terminated") ==
                  0);
    json_decref(fs);
    free(mid);
}

/* Modal's own lifetime: 5 min by default (basics), 24 h at most. */
static void test_lifetime(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "id", "mlife", "provider", "modal"));
    errmsg(r);
    test_cond("lifetime: without timeout_ms a Modal sandbox gets 5 min (sbxd and Modal)",
              res_int(r, "timeout_ms") == 300000 && meta_int(r, "timeout_secs") == 300);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlife")));
    r = cn_call_t(c, LONG_MS, "sandbox.create",
                  json_pack("{s:s, s:s, s:i}", "id", "mlife", "provider", "modal",
                            "timeout_ms", 86400000));
    errmsg(r);
    test_cond("lifetime: 24 h, Modal's maximum, is accepted and reaches Modal",
              meta_int(r, "timeout_secs") == 86400);
    json_t *fs = fake_sandbox(meta_str(r, "sandbox_id"));
    test_eq_int("lifetime: ... the fake got timeout_secs 86400",
                json_integer_value(json_object_get(fs, "timeout_secs")), 86400);
    json_decref(fs);
    json_decref(r);
    json_decref(
        cn_call_t(c, LONG_MS, "sandbox.destroy", json_pack("{s:s}", "id", "mlife")));
}

static void test_create_errors(conn *c)
{
    json_t *r = cn_call_t(c, LONG_MS, "sandbox.create",
                          json_pack("{s:s, s:s}", "provider", "modal", "image",
                                    "example.com/fake-build-fail:1"));
    const char *m =
        json_string_value(json_object_get(json_object_get(r, "error"), "message"));
    test_cond("image build failure: create fails with the build's error",
              err_code(r) == -32006 && m && strstr(m, "fake build failure"));
    json_decref(r);
    r = cn_call_t(
        c, LONG_MS, "sandbox.create",
        json_pack("{s:s, s:{s:s}}", "provider", "modal", "options", "cpu", "lots"));
    test_eq_int("bad options.cpu: -32602", err_code(r), -32602);
    json_decref(r);
    r = cn_call_t(
        c, LONG_MS, "sandbox.create",
        json_pack("{s:s, s:{s:s}}", "provider", "modal", "options", "memroy", "1g"));
    test_cond(
        "unknown option: -32602 naming options.memroy (as Docker)",
        err_code(r) == -32602 &&
            strcmp(json_string_value(json_object_get(
                       json_object_get(json_object_get(r, "error"), "data"), "param")),
                   "options.memroy") == 0);
    json_decref(r);
    r = cn_call(c, "sandbox.list", json_pack("{s:s}", "provider", "modal"));
    test_eq_int("failed creates leave nothing behind",
                json_array_size(json_object_get(res_of(r), "sandboxes")), 0);
    json_decref(r);
}

int main(int argc, char **argv)
{
    int st = md_main_args(argc, argv);
    if (st)
        return st;
    conn *c = md_connect();
    if (!c)
        return 1;
    test_dead_sandbox(c);
    test_stop_start(c);
    test_snapshot(c);
    test_lost_backend(c);
    test_clone_destroy(c);
    test_create_errors(c);
    test_lifetime(c);
    cn_close(c);
    return test_report();
}
