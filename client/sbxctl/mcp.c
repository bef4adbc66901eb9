/*
 * mcp.c - `sbxctl mcp`: sbxd as a Model Context Protocol server over stdio.
 * This file is the top of it (the floors are listed in mcp.h): options,
 * what to run on when nothing was said (daemon.info), the wiring of the
 * floors, and leaving (stdin closed, stdout broken or a signal: stop the
 * calls, destroy the sandboxes we made, wait for sbxd at most QUIT_GRACE).
 *
 * Sandboxes: the command sandbox (--provider/--image, created on first use
 * and destroyed on exit; or --sandbox ID, attached to and kept) and the code
 * sandbox of run_code (--code-provider, default `js` when sbxd offers it,
 * else `duktape`), created on first use, destroyed on exit.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"
#include "mcp_tools.h"
#include "sbxctl.h"

#define QUIT_GRACE 10.0

/* ---- leaving ----------------------------------------------------------------------- */

static void maybe_quit(struct mcp *m)
{
    if (!m->quitting || m->ncalls > 0 || mstdio_queued(&m->io) > 0 || msbx_busy(&m->sb))
        return;
    ev_break(m->loop, EVBREAK_ALL);
}

static void begin_quit(struct mcp *m)
{
    if (m->quitting)
        return;
    m->quitting = 1;
    m->sb.quitting = 1;
    m->io.quiet = 1;
    mstdio_stop_reading(&m->io);
    mcp_proto_cancel_all(m, "shutting down");
    msbx_slot_destroy(&m->sb, &m->sb.cmd);
    msbx_slot_destroy(&m->sb, &m->sb.code);
    ev_timer_start(m->loop, &m->quit_timer);
    maybe_quit(m);
}

static void quit_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w;
    (void)revents;
    mcp_log("gave up waiting for sbxd after %.0f s", QUIT_GRACE);
    ((struct mcp *)w->data)->status = EXIT_RPC;
    ev_break(loop, EVBREAK_ALL);
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct mcp *m = w->data;
    (void)revents;
    if (++m->signals > 1) {
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    begin_quit(m);
}

static void on_process(void *data, const char *method, json_t *params)
{
    mcp_proc_notify(data, method, params);
}

static void sb_idle(void *data)
{
    maybe_quit(data);
}

/* ---- options and main ------------------------------------------------------------ */

static const struct opt mcp_opts[] = {
    {"provider", 'p', 1, 1},    {"image", 'i', 1, 2},      {"sandbox", 0, 1, 3},
    {"code-provider", 0, 1, 4}, {"env", 'e', 1, 5},        {"opt", 'o', 1, 6},
    {"timeout", 't', 1, 7},     {"lifetime", 0, 1, 8},     {"idle-timeout", 0, 1, 9},
    {"max-output", 0, 1, 10},   {"max-message", 0, 1, 11}, {"max-calls", 0, 1, 12},
    {"progress-ms", 0, 1, 13},  {"verbose", 'v', 0, 14},   {NULL, 0, 0, 0},
};

static json_int_t arg_range(const char *what, const char *s, json_int_t lo, json_int_t hi)
{
    json_int_t v = arg_int(what, s);
    if (v < lo || v > hi)
        usage_error("%s must be between %" JSON_INTEGER_FORMAT
                    " and %" JSON_INTEGER_FORMAT,
                    what, lo, hi);
    return v;
}

/* What was not given, from daemon.info (issue 19): without --provider and
 * --sandbox the command sandbox is docker with its configured image when
 * docker is available, else only run_code is offered; run_code's provider is
 * js when available, else duktape. Asked once, before the loop runs (a
 * command-line client may wait here); sbxd unreachable, the command sandbox
 * stays docker and calls say why they fail. */
static void pick_defaults(struct mcp *m)
{
    int want_cmd = !m->conf.provider && !m->conf.sandbox_name;
    if (!want_cmd && m->conf.code_provider)
        return;
    json_t *info = NULL;
    sbx_ctx *c = sbx_connect_unix(socket_path(), 5000);
    if (c && !c->err) {
        sbx_rpc_error *e = NULL;
        if (sbx_call_new(c, &info, &e, SBX_M_INFO, NULL) != SBX_OK)
            info = NULL;
        sbx_rpc_error_free(e);
    }
    sbx_free(c);
    const char *docker_image = NULL, *docker_why = "sbxd did not answer";
    int js = 0, docker = 0;
    size_t i;
    json_t *pv;
    json_array_foreach(json_object_get(info, "providers"), i, pv) {
        const char *name = json_string_value(json_object_get(pv, "name"));
        int avail = json_is_true(json_object_get(pv, "available"));
        if (name && !strcmp(name, "js"))
            js = avail;
        if (name && !strcmp(name, "docker")) {
            docker = avail;
            docker_image =
                json_string_value(json_object_get(json_object_get(pv, "info"), "image"));
            docker_why = json_string_value(json_object_get(pv, "reason"));
        }
    }
    if (!m->conf.code_provider)
        m->conf.code_provider = m->picked[0] = strdup(!info || js ? "js" : "duktape");
    if (!want_cmd)
        goto out;
    if (docker || !info) {
        m->conf.provider = "docker";
        if (!m->conf.image && docker_image)
            m->conf.image = m->picked[1] = strdup(docker_image);
    } else {
        m->conf.code_only = 1;
        mcp_log("no shell provider (docker: %s): offering run_code only; pass --provider "
                "for another",
                docker_why ? docker_why : "unavailable");
    }
out:
    json_decref(info);
}

int cmd_mcp(int argc, char **argv)
{
    struct mcp mm, *m = &mm;
    struct parser p;
    int o;

    memset(m, 0, sizeof(*m));
    m->conf.lifetime_ms = 86400000;
    m->conf.idle_ms = 3600000;
    m->conf.max_output = 1 << 20;
    m->conf.max_message = 4 << 20; /* below sbxd's 16 MiB max_message_bytes, with room */
    m->conf.max_calls = 64;
    m->conf.progress_ms = 1000;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, mcp_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            usage_error("unexpected argument: %s", p.arg);
        case 1:
            m->conf.provider = p.arg;
            break;
        case 2:
            m->conf.image = p.arg;
            break;
        case 3:
            m->conf.sandbox_name = p.arg;
            break;
        case 4:
            m->conf.code_provider = p.arg;
            break;
        case 5:
            if (!m->conf.sb_env)
                m->conf.sb_env = json_object();
            arg_env(m->conf.sb_env, p.arg, 0);
            break;
        case 6:
            if (!m->conf.sb_opts)
                m->conf.sb_opts = json_object();
            arg_opt(m->conf.sb_opts, p.arg);
            break;
        case 7:
            m->conf.default_timeout_ms = arg_range("--timeout", p.arg, 0, 86400000);
            break;
        case 8:
            m->conf.lifetime_ms = arg_range("--lifetime", p.arg, 1, 86400000);
            break;
        case 9:
            m->conf.idle_ms = arg_range("--idle-timeout", p.arg, 0, 86400000);
            break;
        case 10:
            m->conf.max_output = (size_t)arg_range("--max-output", p.arg, 1024, 64 << 20);
            break;
        case 11:
            m->conf.max_message =
                (size_t)arg_range("--max-message", p.arg, 4096, 256 << 20);
            break;
        case 12:
            m->conf.max_calls = (size_t)arg_range("--max-calls", p.arg, 1, 4096);
            break;
        case 13:
            m->conf.progress_ms = (int)arg_range("--progress-ms", p.arg, 50, 3600000);
            break;
        case 14:
            m->conf.verbose = 1;
            break;
        }
    }

    pick_defaults(m);
    m->loop = EV_DEFAULT;
    m->tools = &mcp_toolbox;
    m->on_gone = begin_quit;
    m->on_idle = maybe_quit;
    msbx_init(&m->sb, m->loop, &m->conf);
    m->sb.on_process = on_process;
    m->sb.on_idle = sb_idle;
    m->sb.data = m;
    signal(SIGPIPE, SIG_IGN);
    mcp_proto_start(m);
    ev_signal_init(&m->sigint, signal_cb, SIGINT);
    ev_signal_init(&m->sigterm, signal_cb, SIGTERM);
    m->sigint.data = m->sigterm.data = m;
    ev_signal_start(m->loop, &m->sigint);
    ev_signal_start(m->loop, &m->sigterm);
    ev_timer_init(&m->quit_timer, quit_timer_cb, QUIT_GRACE, 0.);
    m->quit_timer.data = m;
    if (m->conf.verbose)
        mcp_log("serving MCP on stdio; sbxd at %s", socket_path());

    ev_run(m->loop, 0);

    /* Replies we no longer wait for get NULLs; the calls go with them. */
    m->quitting = 1;
    m->io.quiet = 1;
    mcp_proto_abandon(m);
    msbx_fini(&m->sb);
    mcp_proto_fini(m);
    ev_signal_stop(m->loop, &m->sigint);
    ev_signal_stop(m->loop, &m->sigterm);
    ev_timer_stop(m->loop, &m->quit_timer);
    json_decref(m->conf.sb_env);
    json_decref(m->conf.sb_opts);
    for (size_t i = 0; i < sizeof(m->picked) / sizeof(m->picked[0]); i++)
        free(m->picked[i]);
    return m->status;
}
