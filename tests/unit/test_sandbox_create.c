/*
 * test_sandbox_create.c - daemon/core/sandbox_create.c with a provider of a
 * few lines: the caller's own id reconnects (started again, with warnings),
 * another uid's id is refused, a snapshot is only its owner's (or an
 * admin's) and only for its provider, the provider must be loaded, the
 * per-uid cap holds, and a create answers with "reconnected" as its start
 * found the backend.
 */
#include <signal.h>

#include "daemon.h"
#include "core/sandbox.h"
#include "core/sandbox_create.h"
#include "sbx_proto.h"
#include "testhelp.h"

static int starts, backend_there;

static int f_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static int f_available(void *cookie, const char **reason)
{
    return 1;
}
static int f_start(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    starts++;
    sandbox_op_done(sb, NULL,
                    backend_there ? json_pack("{s:b}", "reconnected", 1) : NULL);
    return 0;
}
static int f_op(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}

static const struct sbx_provider fake = {
    .name = "fake",
    .load = f_load,
    .available = f_available,
    .sb_start = f_start,
    .sb_stop = f_op,
    .sb_destroy = f_op,
};

static struct daemon d;

static void setup(void)
{
    D = &d;
    config_init_defaults(&d.cfg);
    d.cfg.max_sandboxes_per_uid = 2;
    d.loop = EV_DEFAULT;
    d.snapshots = json_object();
    d.providers[0].ops = &fake;
    d.providers[0].enabled = 1;
    d.providers[0].loaded = 1;
    d.nproviders = 1;
}

/* What a create or reconnect answered. */
struct answer {
    int n, code;
    json_t *result;
};
static void record(sbx_err_t *err, json_t *result, void *data)
{
    struct answer *a = data;
    a->n++;
    a->code = err ? err->code : 0;
    json_decref(a->result);
    a->result = result ? json_incref(result) : NULL;
}

static json_t *conf_of(void)
{
    return json_pack("{s:s, s:i, s:i, s:i}", "provider", "fake", "timeout_ms", 60000,
                     "idle_timeout_ms", 0, "command_timeout_ms", 60000);
}

static int answered_reconnected(struct answer *a, int want)
{
    json_t *r = json_object_get(a->result, "reconnected");
    return a->n == 1 && a->code == 0 && json_is_boolean(r) && json_is_true(r) == want;
}

static void test_create_and_reconnect(void)
{
    struct answer a = {0};
    sbx_err_t err = {0};
    int r = sandbox_create("c1", &d.providers[0], 1000, conf_of(), 1, record, &a, &err);
    test_cond("create starts and answers reconnected false",
              r == 0 && starts == 1 && answered_reconnected(&a, 0));
    struct sandbox *sb = sandbox_find_any("c1");
    test_cond("the sandbox is the caller's and runs",
              sb && sb->owner == 1000 && sb->status == SB_RUNNING);

    struct answer b = {0};
    json_t *params = json_pack("{s:s, s:s}", "id", "c1", "image", "other:tag");
    r = sandbox_create_claim(1000, "c1", params, record, &b, &err);
    test_cond("the owner's id reconnects, answered reconnected true",
              r == 1 && answered_reconnected(&b, 1));
    r = sandbox_create_claim(1001, "c1", params, record, &b, &err);
    test_cond("another uid's id is refused (-32003 naming it)",
              r < 0 && err.code == SBX_E_PERMISSION && b.n == 1);
    err_clear(&err);
    test_eq_int("a free id is free",
                sandbox_create_claim(1000, "nope", params, record, &b, &err), 0);
    json_decref(params);

    sandbox_stop(sb, NULL, NULL);
    struct answer c = {0};
    r = sandbox_create_claim(1000, "c1", NULL, record, &c, &err);
    test_cond("a stopped sandbox of the owner is started again by the reconnect",
              r == 1 && starts == 2 && sb->status == SB_RUNNING &&
                  answered_reconnected(&c, 1));

    struct answer e = {0};
    backend_there = 1;
    r = sandbox_create("c2", &d.providers[0], 1000, conf_of(), 1, record, &e, &err);
    backend_there = 0;
    test_cond("a start that found its backend answers reconnected true",
              r == 0 && answered_reconnected(&e, 1));
    json_decref(a.result);
    json_decref(b.result);
    json_decref(c.result);
    json_decref(e.result);
}

static void test_checks(void)
{
    sbx_err_t err = {0};
    test_cond("at the cap (2 sandboxes) a third is refused with -32005",
              sandbox_create_check(&d.providers[0], "fake", 1000, &err) < 0 &&
                  err.code == SBX_E_LIMIT);
    err_clear(&err);
    test_eq_int("another uid is under its own cap",
                sandbox_create_check(&d.providers[0], "fake", 1001, &err), 0);
    d.providers[0].loaded = 0;
    test_cond("a provider that did not load is -32001",
              sandbox_create_check(&d.providers[0], "fake", 1001, &err) < 0 &&
                  err.code == SBX_E_UNAVAILABLE);
    err_clear(&err);
    d.providers[0].loaded = 1;

    json_object_set_new(d.snapshots, "snap-1",
                        json_pack("{s:s, s:i}", "provider", "fake", "owner", 1000));
    const char *prov = NULL;
    test_cond("the owner's snapshot gives its provider",
              sandbox_create_snapshot(1000, 0, "snap-1", &prov, &err) == 0 && prov &&
                  strcmp(prov, "fake") == 0);
    prov = NULL;
    test_cond("another uid's snapshot is no such snapshot (-32602)",
              sandbox_create_snapshot(1001, 0, "snap-1", &prov, &err) < 0 &&
                  err.code == SBX_E_PARAMS && prov == NULL);
    err_clear(&err);
    test_eq_int("an admin may use any snapshot",
                sandbox_create_snapshot(1001, 1, "snap-1", &prov, &err), 0);
    prov = "docker";
    test_cond("a snapshot of another provider is refused",
              sandbox_create_snapshot(1000, 0, "snap-1", &prov, &err) < 0 &&
                  strstr(err.msg, "another provider"));
    err_clear(&err);
    prov = NULL;
    test_cond("an unknown snapshot is refused",
              sandbox_create_snapshot(1000, 1, "snap-2", &prov, &err) < 0);
    err_clear(&err);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setup();
    test_create_and_reconnect();
    test_checks();
    sandbox_free_all();
    json_decref(d.snapshots);
    config_deinit(&d.cfg);
    return test_report();
}
