/*
 * test_lifecycle16.c - issue 16's core logic in-process, with a provider
 * whose start and stop finish only when the test says so: lifecycle calls
 * queued behind an op in flight, the restart window (adoption.c), the
 * per-uid memory reservations and the queued-bytes budget.
 */
#include <signal.h>

#include "core/adoption.h"
#include "daemon.h"
#include "core/process.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "testhelp.h"
#include "core/usage.h"

/* -- a provider that holds its ops ---------------------------------------------- */

static struct sandbox *held; /* the sandbox whose start or stop is pending */

static int h_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static void h_unload(void *cookie)
{
}
static int h_available(void *cookie, const char **reason)
{
    return 1;
}
static int h_hold(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    held = sb;
    return 0;
}
static int h_destroy(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
static int h_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    return 0; /* runs until killed */
}
static int h_write(void *c, struct process *p, const void *d, size_t n, sbx_err_t *e)
{
    return 0;
}
static int h_close(void *c, struct process *p, sbx_err_t *e)
{
    return 0;
}
static int h_kill(void *c, struct process *p, int sig, sbx_err_t *e)
{
    json_t *rec = json_pack("{s:i, s:i}", "exit_code", 128 + sig, "signal", sig);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

static const struct sbx_provider holding = {
    .name = "holding",
    .load = h_load,
    .unload = h_unload,
    .available = h_available,
    .adopts_at_load = 1,
    .sb_start = h_hold,
    .sb_stop = h_hold,
    .sb_destroy = h_destroy,
    .proc_spawn = h_spawn,
    .proc_write = h_write,
    .proc_close_stdin = h_close,
    .proc_kill = h_kill,
};

static struct daemon d;

static void setup(void)
{
    D = &d;
    config_init_defaults(&d.cfg);
    d.loop = EV_DEFAULT;
    d.snapshots = json_object();
    d.providers[0].ops = &holding;
    d.providers[0].enabled = 1;
    d.providers[0].loaded = 1;
    d.nproviders = 1;
}

/* Lets timers of 0 s (the queued op) run. */
static void turn(void)
{
    for (int i = 0; i < 3; i++)
        ev_run(d.loop, EVRUN_NOWAIT);
    sandboxes_before_sleep();
}

static void finish_held(void)
{
    struct sandbox *sb = held;
    held = NULL;
    if (sb)
        sandbox_op_done(sb, NULL, NULL);
}

/* An answer a test looks at: how many came, and the last status or error. */
struct answer {
    int n, code;
    char status[16];
};

static void record(sbx_err_t *err, json_t *result, void *privdata)
{
    struct answer *a = privdata;
    a->n++;
    a->code = err ? err->code : 0;
    const char *s = json_string_value(json_object_get(result, "status"));
    snprintf(a->status, sizeof(a->status), "%s", s ? s : "");
}

static struct sandbox *new_sandbox(const char *id, uid_t owner)
{
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    json_t *conf = json_pack("{s:s, s:i}", "provider", "holding", "timeout_ms", 600000);
    if (sandbox_new(&sb, id, &d.providers[0], owner, conf, &err) < 0)
        err_clear(&err);
    return sb;
}

/* -- lifecycle calls queued behind an op (item 11) --------------------------------- */

static void test_queued_ops(void)
{
    struct sandbox *sb = new_sandbox("q1", 1000);
    struct answer start = {0}, stop = {0}, start2 = {0}, gone = {0};
    sandbox_start(sb, record, &start);
    test_eq_str("queue: the start is in flight", sandbox_status_name(sb->status),
                "starting");
    sandbox_stop(sb, record, &stop);
    test_cond("queue: a stop during the start is not answered yet (no -32001)",
              stop.n == 0 && start.n == 0);
    finish_held();
    test_cond("queue: the start answers running",
              start.n == 1 && !start.code && strcmp(start.status, "running") == 0);
    test_cond("queue: the stop waits for the loop, not inside the start's end",
              stop.n == 0 && held == NULL);
    turn();
    test_cond("queue: then the queued stop runs", held == sb && stop.n == 0);
    sandbox_start(sb, record, &start2);
    finish_held();
    test_cond("queue: the stop answers stopped",
              stop.n == 1 && !stop.code && strcmp(stop.status, "stopped") == 0);
    turn();
    test_cond("queue: a start asked during the stop runs after it", held == sb);
    finish_held();
    test_cond("queue: and answers running",
              start2.n == 1 && strcmp(start2.status, "running") == 0);
    sandbox_stop(sb, NULL, NULL);
    sandbox_destroy(sb, record, &gone);
    finish_held(); /* the stop */
    turn();
    test_cond("queue: a destroy during a stop runs after it",
              gone.n == 1 && strcmp(gone.status, "destroyed") == 0);
    turn();
}

/* -- memory per uid (item 6) -------------------------------------------------------- */

static void test_memory(void)
{
    d.cfg.memory_per_uid = 100 << 20;
    struct sandbox *a = new_sandbox("m1", 1001), *b = new_sandbox("m2", 1001),
                   *other = new_sandbox("m3", 1002);
    sbx_err_t err = {0};
    test_eq_int("memory: 60 MiB fit in 100", sandbox_reserve_memory(a, 60 << 20, &err),
                0);
    int r = sandbox_reserve_memory(b, 60 << 20, &err);
    const char *lim =
        json_string_value(json_object_get(err.data ? err.data : NULL, "limit"));
    test_cond("memory: 60 more are -32005 {limit: memory_per_uid}",
              r < 0 && err.code == SBX_E_LIMIT && lim && !strcmp(lim, "memory_per_uid"));
    err_clear(&err);
    test_eq_int("memory: another uid has its own total",
                sandbox_reserve_memory(other, 60 << 20, &err), 0);
    test_eq_int("memory: a sandbox's new reservation replaces its old one",
                sandbox_reserve_memory(a, 90 << 20, &err), 0);
    test_eq_int("memory: the uid's usage is that one", usage_find(1001)->memory_bytes,
                90 << 20);
    test_cond("memory: adoption counts without refusing (err NULL)",
              sandbox_reserve_memory(b, 60 << 20, NULL) == 0 &&
                  usage_find(1001)->memory_bytes == 150 << 20);
    struct sandbox *all[] = {a, b, other};
    for (int i = 0; i < 3; i++)
        sandbox_destroy(all[i], NULL, NULL);
    turn();
    test_cond("memory: destroyed sandboxes give it all back",
              usage_find(1001) == NULL && usage_find(1002) == NULL);
}

/* -- queued bytes (item 3) ---------------------------------------------------------- */

static void test_queued_bytes(void)
{
    d.cfg.queued_bytes_per_uid = 64 * 1024;
    struct sandbox *sb = new_sandbox("qb", 1003); /* pending: spawns queue */
    char *big = malloc(40 * 1024);
    memset(big, 'x', 40 * 1024);
    json_t *in = json_stringn(big, 40 * 1024), *cmd = json_string("run");
    free(big);
    struct proc_opts o = {.command = cmd, .stdin_data = in};
    struct process *p1 = NULL, *p2 = NULL;
    sbx_err_t err = {0};
    test_eq_int("queued: 40k of stdin fits in 64k", process_new(&p1, sb, &o, &err), 0);
    int r = process_new(&p2, sb, &o, &err);
    const char *lim = json_string_value(json_object_get(err.data, "limit"));
    test_cond("queued: 40k more are -32005 {limit: queued_bytes_per_uid}",
              r < 0 && err.code == SBX_E_LIMIT && lim &&
                  !strcmp(lim, "queued_bytes_per_uid"));
    err_clear(&err);
    o.internal = 1;
    test_eq_int("queued: a hook is not counted", process_new(&p2, sb, &o, &err), 0);
    process_kill(p1, SIGKILL, &err);
    test_cond("queued: a process that leaves the queue gives its bytes back",
              usage_find(1003) == NULL || usage_find(1003)->queued_bytes == 0);
    json_decref(in);
    json_decref(cmd);
    sandbox_destroy(sb, NULL, NULL);
    turn();
}

/* -- the restart window (item 12) --------------------------------------------------- */

static void note(void *privdata)
{
    (*(int *)privdata)++;
}

static void test_window(void)
{
    d.cfg.adopt_wait_ms = 60000;
    adoption_begin("holding");
    int ran = 0;
    adoption_wait(note, &ran);
    test_cond("window: open while the provider lists; a waiter waits",
              adoption_pending() && ran == 0);
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    sandbox_adopt(&sb, "ad1", &d.providers[0], 1004, json_object(), SB_RUNNING, &err);
    sandbox_adoption_done("holding");
    test_cond("window: still open while an adopted sandbox reconnects",
              adoption_pending() && ran == 0 && sb && sb->adopting);
    sandbox_adopted(sb);
    test_cond("window: closes when it is back; the waiter runs once",
              !adoption_pending() && ran == 1);
    adoption_wait(note, &ran);
    test_eq_int("window: a waiter after it runs at once", ran, 2);
    sandbox_destroy(sb, NULL, NULL);
    turn();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setup();
    test_queued_ops();
    test_memory();
    test_queued_bytes();
    test_window();
    adoption_free_all();
    sandbox_free_all();
    usage_free_all();
    json_decref(d.snapshots);
    config_deinit(&d.cfg);
    return test_report();
}
