/*
 * fuzz_daemon.h - what the daemon-side harnesses share: the global daemon
 * state on the default loop, a provider whose ops finish synchronously (as
 * in tests/unit/test_core.c, so that no backend is needed), and a sandbox
 * with processes running in it. Header-only; included once per harness.
 */
#ifndef SBX_FUZZ_DAEMON_H
#define SBX_FUZZ_DAEMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "core/process.h"
#include "rpc/rpc.h"
#include "core/sandbox.h"
#include "rpc/session.h"

/* Commands: "out TEXT" prints TEXT and exits 0, "exit N" exits N, anything
 * else runs until killed. */
static int fz_spawn(void *cookie, struct process *p, sbx_err_t *err)
{
    const char *code = json_string_value(json_object_get(p->spec, "code"));
    if (code && strncmp(code, "out ", 4) == 0) {
        process_output(p, SBX_STREAM_STDOUT, code + 4, strlen(code + 4));
        json_t *rec = json_pack("{s:i}", "exit_code", 0);
        process_exited(p, rec);
        json_decref(rec);
    } else if (code && strncmp(code, "exit ", 5) == 0) {
        json_t *rec = json_pack("{s:i}", "exit_code", atoi(code + 5));
        process_exited(p, rec);
        json_decref(rec);
    }
    return 0;
}
static int fz_load(json_t *conf, void **cookie, sbx_err_t *err)
{
    return 0;
}
static void fz_unload(void *cookie)
{
}
static int fz_available(void *cookie, const char **reason)
{
    return 1;
}
static int fz_sb_done(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, NULL);
    return 0;
}
static int fz_snapshot(void *cookie, struct sandbox *sb, sbx_err_t *err)
{
    sandbox_op_done(sb, NULL, json_pack("{s:s}", "state", "x"));
    return 0;
}
static int fz_write(void *c, struct process *p, const void *d, size_t n, sbx_err_t *e)
{
    return 0;
}
static int fz_close(void *c, struct process *p, sbx_err_t *e)
{
    return 0;
}
static int fz_kill(void *c, struct process *p, int sig, sbx_err_t *e)
{
    json_t *rec = json_pack("{s:i, s:i}", "exit_code", 128 + sig, "signal", sig);
    process_exited(p, rec);
    json_decref(rec);
    return 0;
}

static const struct sbx_provider fz_provider = {
    .name = "fake",
    .shell_commands = 0,
    .default_cwd = "/",
    .load = fz_load,
    .unload = fz_unload,
    .available = fz_available,
    .sb_start = fz_sb_done,
    .sb_stop = fz_sb_done,
    .sb_destroy = fz_sb_done,
    .sb_snapshot = fz_snapshot,
    .proc_spawn = fz_spawn,
    .proc_write = fz_write,
    .proc_close_stdin = fz_close,
    .proc_kill = fz_kill,
};

static struct daemon fz_daemon;
static ev_prepare fz_prepare;

static void fz_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    sessions_before_sleep();
    sandboxes_before_sleep();
}

/* Once per process: the daemon as main.c sets it up, quiet logs. */
static inline void fz_daemon_setup(void)
{
    if (D)
        return;
    D = &fz_daemon;
    config_init_defaults(&fz_daemon.cfg);
    free(fz_daemon.cfg.default_provider);
    fz_daemon.cfg.default_provider = strdup("fake");
    fz_daemon.loop = EV_DEFAULT;
    ev_prepare_init(&fz_prepare, fz_prepare_cb);
    ev_prepare_start(fz_daemon.loop, &fz_prepare);
    fz_daemon.snapshots = json_object();
    fz_daemon.providers[0].ops = &fz_provider;
    fz_daemon.providers[0].enabled = 1;
    fz_daemon.providers[0].loaded = 1;
    fz_daemon.nproviders = 1;
    log_set_level(LOG_LVL_ERROR);
}

/* A running sandbox of the fake provider. */
static inline struct sandbox *fz_sandbox(const char *id)
{
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    json_t *conf = json_pack("{s:i, s:i, s:i}", "timeout_ms", 60000, "idle_timeout_ms", 0,
                             "command_timeout_ms", 60000);
    if (sandbox_new(&sb, id, &fz_daemon.providers[0], 0, conf, &err) < 0)
        abort();
    sandbox_start(sb, NULL, NULL);
    return sb;
}

/* A process that runs until killed. */
static inline struct process *fz_process(struct sandbox *sb)
{
    struct process *p = NULL;
    sbx_err_t err = {0};
    json_t *cmd = json_string("run");
    struct proc_opts o = {.command = cmd};
    if (process_new(&p, sb, &o, &err) < 0 || process_launch(p, &err) < 0)
        abort();
    json_decref(cmd);
    return p;
}

/* Everything goes: sessions, sandboxes, their processes; pending frees run. */
static inline void fz_daemon_reset(void)
{
    session_free_all();
    sandbox_free_all();
    sandboxes_before_sleep();
    json_object_clear(fz_daemon.snapshots);
}

#endif
