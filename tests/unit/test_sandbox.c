/*
 * test_sandbox.c - daemon/core/sandbox.c's lifecycle against the kit's
 * provider with completions held back: a start under way is "starting" and
 * answers when the provider finishes; a failure (at once or later) leaves
 * the sandbox in error with the provider's words; an op asked while one runs
 * waits for it; a destroy during a hanging op cancels it and goes ahead; an
 * op past limits.op_timeout_ms is failed and the backend released.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/sandbox.h"
#include "fakeprov.h"
#include "sbx_proto.h"
#include "testhelp.h"

struct answers {
    int n, code;
    char msg[200];
};

static void record(sbx_err_t *err, json_t *result, void *privdata)
{
    struct answers *a = privdata;
    a->n++;
    a->code = err ? err->code : 0;
    snprintf(a->msg, sizeof(a->msg), "%s", err && err->msg ? err->msg : "");
}

static struct sandbox *pending_sandbox(const char *id)
{
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    json_t *conf = json_pack("{s:i, s:i, s:i}", "timeout_ms", 60000, "idle_timeout_ms", 0,
                             "command_timeout_ms", 60000);
    if (sandbox_new(&sb, id, &D->providers[0], 1000, conf, &err) < 0)
        err_clear(&err);
    return sb;
}

static void test_deferred_start(void)
{
    fakeprov_reset();
    fakeprov.defer = 1;
    struct answers a = {0};
    struct sandbox *sb = pending_sandbox("d1");
    sandbox_start(sb, record, &a);
    test_cond("a start under way: starting, no answer yet",
              sb->status == SB_STARTING && a.n == 0 && fakeprov.npending == 1);
    struct answers b = {0};
    sandbox_stop(sb, record, &b);
    fakeprov_spin(3);
    test_cond("a stop asked meanwhile waits for it",
              b.n == 0 && fakeprov.n_stop == 0 && fakeprov.npending == 1);
    fakeprov_finish(0, NULL);
    fakeprov_spin(3);
    test_cond("the provider's success answers the start once, running",
              a.n == 1 && a.code == 0 && fakeprov.n_stop == 1);
    test_cond("then the stop runs", fakeprov.npending == 1 && sb->status == SB_STOPPING);
    fakeprov_finish(0, NULL);
    fakeprov_spin(3);
    test_cond("and answers when it ends",
              b.n == 1 && b.code == 0 && sb->status == SB_STOPPED);
    fakeprov.defer = 0;
    sandbox_destroy(sb, NULL, NULL);
}

static void test_failures(void)
{
    fakeprov_reset();
    struct answers a = {0};
    struct sandbox *sb = pending_sandbox("f1");
    fakeprov.fail_now = SBX_E_UNAVAILABLE;
    sandbox_start(sb, record, &a);
    test_cond("a start refused at once: error, answered with the provider's code",
              a.n == 1 && a.code == SBX_E_UNAVAILABLE && sb->status == SB_ERROR &&
                  strstr(sb->error, "refused at once"));
    fakeprov.defer = 1;
    sandbox_start(sb, record, &a);
    fakeprov_finish(SBX_E_PROVIDER, "image not found");
    fakeprov_spin(3);
    test_cond("a start that fails later: error, in the provider's words",
              a.n == 2 && a.code == SBX_E_PROVIDER && sb->status == SB_ERROR &&
                  strstr(a.msg, "image not found"));
    sandbox_start(sb, record, &a);
    fakeprov_finish(0, NULL);
    fakeprov_spin(3);
    test_cond("from error a start begins afresh",
              a.n == 3 && a.code == 0 && sb->status == SB_RUNNING);
    fakeprov.defer = 0;
    sandbox_destroy(sb, NULL, NULL);
}

static void test_destroy_cancels(void)
{
    fakeprov_reset();
    struct sandbox *sb = fakeprov_sandbox("c1", 1000, NULL);
    fakeprov.defer = 1;
    struct answers snap = {0}, gone = {0};
    sandbox_snapshot(sb, record, &snap);
    test_cond("a snapshot hangs", snap.n == 0 && fakeprov.npending == 1);
    fakeprov.defer = 0;
    sandbox_destroy(sb, record, &gone);
    fakeprov_spin(3);
    test_cond("destroy: the provider cancels the snapshot, which fails",
              fakeprov.n_cancel == 1 && snap.n == 1 && snap.code == SBX_E_PROVIDER &&
                  strstr(snap.msg, "cancelled"));
    test_cond("and the destroy goes ahead",
              gone.n == 1 && gone.code == 0 && !sandbox_find_any("c1"));
}

static void test_op_timeout(void)
{
    fakeprov_reset();
    int64_t saved = D->cfg.op_timeout_ms;
    D->cfg.op_timeout_ms = 30;
    struct sandbox *sb = pending_sandbox("t1");
    fakeprov.defer = 1;
    struct answers a = {0};
    sandbox_start(sb, record, &a);
    for (int i = 0; i < 200 && a.n == 0; i++) {
        usleep(2000);
        fakeprov_spin(1);
    }
    test_cond("a start past limits.op_timeout_ms fails, naming the limit",
              a.n == 1 && a.code == SBX_E_PROVIDER && strstr(a.msg, "op_timeout_ms"));
    test_cond("and the backend is released (no late completion can follow)",
              fakeprov.n_release >= 1 && fakeprov.npending == 0 &&
                  sb->status == SB_ERROR);
    D->cfg.op_timeout_ms = saved;
    fakeprov.defer = 0;
    sandbox_destroy(sb, NULL, NULL);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    fakeprov_setup();
    test_deferred_start();
    test_failures();
    test_destroy_cancels();
    test_op_timeout();
    fakeprov_teardown();
    return test_report();
}
