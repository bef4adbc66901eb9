/*
 * api.c - the method table: validates params, checks ownership and limits,
 * then hands over to sandbox.c and process.c. Every handler answers its call
 * exactly once, now or later.
 */
#include "rpc/api.h"
#include "rpc/api_fs.h"
#include "rpc/api_mount.h"
#include "rpc/api_process.h"
#include "rpc/api_ws.h"
#include "rpc/params.h"

#include <ctype.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "rpc/call.h"
#include "rpc/conn.h"
#include "daemon.h"
#include "log.h"
#include "core/process.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "core/sandbox_create.h"
#include "sbx_proto.h"
#include "core/snapshot.h"
#include "core/usage.h"
#include "core/utf8.h"
#include "xalloc.h"

/* -- ids and commands ------------------------------------------------------- */

static int valid_id(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || !isalnum((unsigned char)s[0]))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-')
            return 0;
    return 1;
}

/* A hook command: what process.exec would take as command. */
static int valid_command(json_t *v)
{
    if (json_is_string(v))
        return json_string_length(v) > 0 && !param_has_nul(v);
    if (!json_is_array(v) || json_array_size(v) == 0)
        return 0;
    size_t i;
    json_t *a;
    json_array_foreach(v, i, a) {
        if (!json_is_string(a) || param_has_nul(a))
            return 0;
    }
    return 1;
}

/* -- daemon.* ------------------------------------------------------------------- */

static void m_ping(struct call *c, json_t *params)
{
    char ts[40];
    /* Built directly: json_pack reads its format string on every call. */
    json_t *r = json_object();
    json_object_set_new(r, "pong", json_true());
    json_object_set_new(r, "time", json_string(daemon_timestamp(daemon_now(), ts)));
    call_reply(c, r);
}

/* Every configured limit, by its config key (limits.*). */
static json_t *limits_json(void)
{
    const struct sbx_config *g = &D->cfg;
    json_t *o = json_object();
#define L(k) json_object_set_new(o, #k, json_integer((json_int_t)g->k))
    L(max_sessions);
    L(max_sessions_per_uid);
    L(admin_reserved_sessions);
    L(session_idle_timeout_ms);
    L(max_sandboxes_per_uid);
    L(max_processes_per_sandbox);
    L(max_queued_per_sandbox);
    L(max_message_bytes);
    L(input_bytes_per_uid);
    L(exec_output_bytes);
    L(replay_bytes);
    L(retained_bytes_per_sandbox);
    L(retained_bytes_total);
    L(session_output_high);
    L(session_output_hard);
    L(session_output_slack);
    L(output_bytes_total);
    L(env_bytes);
    L(max_snapshots_per_uid);
    L(snapshot_bytes_per_uid);
    L(max_memory_limit_mb);
    L(op_timeout_ms);
    L(agent_log_lines_per_s);
    L(fs_chunk_bytes);
    L(fs_transfers_per_uid);
    L(fs_bytes_in_flight_per_uid);
    L(fs_watches_per_sandbox);
    L(fs_event_queue);
    L(fs_list_max);
    L(fs_handle_idle_ms);
    L(fs_stream_token_ms);
    L(queued_bytes_per_uid);
    L(memory_per_uid);
    L(adopt_wait_ms);
    L(shutdown_drain_ms);
#undef L
    return o;
}

static void put_usage(json_t *o, const char *limit, json_int_t used, json_int_t max)
{
    json_object_set_new(o, limit, json_pack("{s:I, s:I}", "used", used, "max", max));
}

/* The caller's usage against each cap that counts per uid, per session or
 * daemon-wide (what the caller shares with everyone). */
static json_t *usage_json(struct rpc_conn *k, uid_t uid)
{
    const struct sbx_config *g = &D->cfg;
    struct uid_usage *u = usage_find(uid);
    json_t *o = json_object();
    put_usage(o, "max_sessions", D->nsessions, g->max_sessions);
    put_usage(o, "max_sessions_per_uid", u ? u->sessions : 0, g->max_sessions_per_uid);
    put_usage(o, "input_bytes_per_uid", u ? (json_int_t)u->input_bytes : 0,
              g->input_bytes_per_uid);
    put_usage(o, "max_sandboxes_per_uid", sandbox_count_owned(uid),
              g->max_sandboxes_per_uid);
    put_usage(o, "session_output_hard", k ? (json_int_t)k->ops->queued(k) : 0,
              g->session_output_hard);
    put_usage(o, "output_bytes_total", k ? (json_int_t)k->ops->queued_all(k) : 0,
              g->output_bytes_total);
    put_usage(o, "retained_bytes_total", (json_int_t)process_retained_total(),
              g->retained_bytes_total);
    int nsnap;
    size_t snap_bytes;
    snapshot_usage(uid, &nsnap, &snap_bytes);
    put_usage(o, "max_snapshots_per_uid", nsnap, g->max_snapshots_per_uid);
    put_usage(o, "snapshot_bytes_per_uid", (json_int_t)snap_bytes,
              g->snapshot_bytes_per_uid);
    put_usage(o, "queued_bytes_per_uid", u ? (json_int_t)u->queued_bytes : 0,
              g->queued_bytes_per_uid);
    put_usage(o, "memory_per_uid", u ? (json_int_t)u->memory_bytes : 0,
              g->memory_per_uid);
    put_usage(o, "fs_transfers_per_uid", u ? u->fs_transfers : 0,
              g->fs_transfers_per_uid);
    put_usage(o, "fs_bytes_in_flight_per_uid", u ? (json_int_t)u->fs_bytes : 0,
              g->fs_bytes_in_flight_per_uid);
    return o;
}

static void m_info(struct call *c, json_t *params)
{
    json_t *provs = json_array();
    for (int i = 0; i < D->nproviders; i++) {
        struct provider_inst *pi = &D->providers[i];
        const char *reason = NULL;
        int avail = pi->enabled && pi->loaded && pi->ops->available(pi->cookie, &reason);
        if (!pi->enabled)
            reason = "disabled in config";
        else if (!pi->loaded)
            reason = pi->load_error ? pi->load_error : "failed to load";
        json_t *o =
            json_pack("{s:s, s:b, s:b}", "name", pi->ops->name, "available", avail,
                      "default", strcmp(pi->ops->name, D->cfg.default_provider) == 0);
        if (!avail && reason)
            json_object_set_new(o, "reason", json_string(reason));
        if (pi->loaded && pi->ops->info) {
            json_t *extra = pi->ops->info(pi->cookie);
            if (extra)
                json_object_set_new(o, "info", extra);
        }
        json_array_append_new(provs, o);
    }
    uid_t uid = c->conn ? c->conn->uid : 0;
    json_t *res = json_pack(
        "{s:s, s:s, s:f, s:i, s:i, s:b, s:o, s:{s:i, s:i, s:i}}", "version", SBX_VERSION,
        "protocol", SBX_PROTO_VERSION, "uptime_s", ev_now(D->loop) - D->started_mono,
        "pid", (int)getpid(), "uid", (int)uid, "admin", c->conn ? c->conn->admin : 0,
        "providers", provs, "counts", "sessions", D->nsessions, "sandboxes",
        D->nsandboxes, "processes", D->nprocesses);
    json_object_set_new(res, "limits", limits_json());
    json_object_set_new(res, "usage", usage_json(c->conn, uid));
    json_object_set_new(
        res, "loop",
        json_pack("{s:I, s:f, s:{s:I, s:I, s:I, s:I, s:I}}", "turns",
                  (json_int_t)D->turn.turns, "longest_turn_ms", D->turn.longest_ms,
                  "turns_over_ms", "1", (json_int_t)D->turn.over[0], "2",
                  (json_int_t)D->turn.over[1], "4", (json_int_t)D->turn.over[2], "8",
                  (json_int_t)D->turn.over[3], "16", (json_int_t)D->turn.over[4]));
    call_reply(c, res);
}

/* -- sandbox.* -------------------------------------------------------------------- */

/* A create or clone past the uid's max_sandboxes_per_uid: answered, -1. */
static int over_sandbox_cap(struct call *c, uid_t uid)
{
    if (sandbox_count_owned(uid) < D->cfg.max_sandboxes_per_uid)
        return 0;
    call_error(c, SBX_E_LIMIT,
               json_pack("{s:s, s:I}", "limit", "max_sandboxes_per_uid", "max",
                         (json_int_t)D->cfg.max_sandboxes_per_uid),
               "too many sandboxes (limit %lld)",
               (long long)D->cfg.max_sandboxes_per_uid);
    return -1;
}

/* Validates the create/clone knobs into conf (borrowed). 0 ok, -1 answered. */
static int conf_common(struct call *c, json_t *params, json_t *conf)
{
    const char *s;
    if (param_str(c, params, "working_dir", &s) < 0)
        return -1;
    if (s) {
        if (s[0] != '/')
            return param_bad(c, "working_dir", "must be an absolute path");
        json_object_set_new(conf, "working_dir", json_string(s));
    }
    int64_t v = -1;
    if (param_int(c, params, "idle_timeout_ms", 0, 86400000, &v) < 0)
        return -1;
    if (v >= 0)
        json_object_set_new(conf, "idle_timeout_ms", json_integer(v));
    json_t *env = json_object_get(params, "env");
    if (env && !json_is_null(env)) {
        json_t *merged = json_object_get(conf, "env");
        merged = merged ? json_deep_copy(merged) : json_object();
        sbx_err_t err = {0};
        if (env_merge(merged, env, &err) < 0) {
            json_decref(merged);
            call_fail(c, &err);
            return -1;
        }
        json_object_set_new(conf, "env", merged);
    }
    return 0;
}

/* -- provider choice (issue 19) ------------------------------------------------ */

/* An unknown provider name: -32602 naming the known ones, with a suggestion
 * when one is a typo away (data {param, known, suggestion?}). */
static void unknown_provider(struct call *c, const char *name)
{
    char known[256] = "";
    size_t o = 0, best_d = SIZE_MAX;
    const char *best = NULL;
    json_t *arr = json_array();
    for (size_t i = 0; sbx_providers[i]; i++) {
        const char *n = sbx_providers[i]->name;
        int w = snprintf(known + o, sizeof(known) - o, "%s%s", o ? ", " : "", n);
        if (w > 0 && (size_t)w < sizeof(known) - o)
            o += (size_t)w;
        json_array_append_new(arr, json_string(n));
        size_t d = config_edit_distance(name, n);
        if (d <= (strlen(n) >= 6 ? 2u : 1u) && d < best_d) {
            best_d = d;
            best = n;
        }
    }
    json_t *data = json_pack("{s:s, s:o}", "param", "provider", "known", arr);
    if (best) {
        json_object_set_new(data, "suggestion", json_string(best));
        call_error(c, SBX_E_PARAMS, data,
                   "provider: unknown provider '%s' (did you mean '%s'? known: %s)", name,
                   best, known);
        return;
    }
    call_error(c, SBX_E_PARAMS, data, "provider: unknown provider '%s' (known: %s)", name,
               known);
}

/* 1 when options has a key the provider does not list (ops->option_keys),
 * with *key_out set to it; 0 otherwise (and always for a provider that
 * checks its own options). */
static int foreign_option(const struct sbx_provider *ops, json_t *opts,
                          const char **key_out)
{
    const char *k;
    json_t *v;
    if (!ops->option_keys || !json_is_object(opts))
        return 0;
    json_object_foreach(opts, k, v) {
        size_t i = 0;
        while (ops->option_keys[i] && strcmp(ops->option_keys[i], k) != 0)
            i++;
        if (!ops->option_keys[i]) {
            *key_out = k;
            return 1;
        }
    }
    return 0;
}

/* What the request asks (image, options) that the provider has not: -32602
 * naming the param and the provider. 0 fine, -1 answered. */
static int refuse_foreign(struct call *c, const struct sbx_provider *ops, json_t *params)
{
    const char *key = NULL;
    json_t *image = json_object_get(params, "image");
    if (!ops->takes_image && image && !json_is_null(image)) {
        call_error(c, SBX_E_PARAMS,
                   json_pack("{s:s, s:s}", "param", "image", "provider", ops->name),
                   "image: the %s provider runs no images (its commands are JavaScript); "
                   "ask for provider docker to run an image",
                   ops->name);
        return -1;
    }
    if (foreign_option(ops, json_object_get(params, "options"), &key)) {
        char param[96], have[160] = "";
        size_t o = 0;
        snprintf(param, sizeof(param), "options.%s", key);
        for (size_t i = 0; ops->option_keys[i]; i++) {
            int w = snprintf(have + o, sizeof(have) - o, "%s%s", o ? ", " : "",
                             ops->option_keys[i]);
            if (w > 0 && (size_t)w < sizeof(have) - o)
                o += (size_t)w;
        }
        call_error(c, SBX_E_PARAMS,
                   json_pack("{s:s, s:s}", "param", param, "provider", ops->name),
                   "%s: not an option of the %s provider (its options: %s)", param,
                   ops->name, have[0] ? have : "none");
        return -1;
    }
    return 0;
}

/* No provider named: the configured default, unless the request asks for
 * what only an image-running provider has (an image, or an option the
 * default does not know) and the default runs none: then docker, which
 * must be available. NULL: answered. */
static const char *default_provider_for(struct call *c, json_t *params)
{
    const char *name = D->cfg.default_provider, *key = NULL;
    struct provider_inst *pi = daemon_provider(name);
    if (!pi || pi->ops->takes_image)
        return name;
    json_t *image = json_object_get(params, "image");
    const char *why = image && !json_is_null(image) ? "image"
                      : foreign_option(pi->ops, json_object_get(params, "options"), &key)
                          ? "options"
                          : NULL;
    if (!why)
        return name;
    struct provider_inst *dk = daemon_provider("docker");
    /* loaded but its engine not answering: the same clear error, with the
     * engine's reason, rather than "docker is unavailable" from the create */
    const char *down = NULL;
    if (dk && dk->enabled && dk->loaded && dk->ops->available(dk->cookie, &down))
        return "docker";
    const char *reason = !dk              ? "not built in"
                         : !dk->enabled   ? "disabled in config"
                         : dk->loaded     ? (down ? down : "its engine does not answer")
                         : dk->load_error ? dk->load_error
                                          : "failed to load";
    call_error(c, SBX_E_UNAVAILABLE,
               json_pack("{s:s, s:s, s:s}", "provider", "docker", "reason", reason,
                         "param", why),
               "%s%s%s without a provider means docker, which is unavailable here: %s; "
               "the default provider %s runs JavaScript, not images",
               why, key ? "." : "", key ? key : "", reason, name);
    return NULL;
}

static void m_create(struct call *c, json_t *params)
{
    uid_t uid = c->conn ? c->conn->uid : 0;
    const char *id, *prov_name, *snap, *str;
    if (param_str(c, params, "id", &id) < 0 ||
        param_str(c, params, "provider", &prov_name) < 0 ||
        param_str(c, params, "snapshot", &snap) < 0)
        return;
    if (id && !valid_id(id)) {
        param_bad(c, "id", "must match [A-Za-z0-9][A-Za-z0-9_.-]{0,62}");
        return;
    }
    /* A create naming an id not adopted yet must not make a second sandbox
     * of it: it reconnects once the adoption is done. */
    if (id && !sandbox_find_any(id) && api_park(c, params))
        return;
    sbx_err_t err = {0};
    int claimed = sandbox_create_claim(uid, id, params, api_call_done, c, &err);
    if (claimed != 0) {
        if (claimed < 0)
            call_fail(c, &err);
        return; /* 1: the reconnect answers */
    }
    if (snap && sandbox_create_snapshot(uid, c->conn && c->conn->admin, snap, &prov_name,
                                        &err) < 0) {
        call_fail(c, &err);
        return;
    }
    if (!prov_name && !(prov_name = default_provider_for(c, params)))
        return;
    struct provider_inst *pi = daemon_provider(prov_name);
    if (!pi) {
        unknown_provider(c, prov_name);
        return;
    }
    if (refuse_foreign(c, pi->ops, params) < 0)
        return;
    if (sandbox_create_check(pi, prov_name, uid, &err) < 0) {
        call_fail(c, &err);
        return;
    }

    json_t *conf = json_object();
    json_object_set_new(conf, "provider", json_string(prov_name));
    if (snap)
        json_object_set_new(conf, "snapshot", json_string(snap));
    int64_t timeout = sandbox_default_timeout(pi), idle = D->cfg.default_idle_timeout_ms;
    int64_t mem = 0, ctimeout = 0;
    json_t *pconf = config_provider(&D->cfg, prov_name);
    json_t *pct = json_object_get(pconf, "command_timeout_ms");
    ctimeout = json_is_integer(pct) ? json_integer_value(pct)
                                    : D->cfg.default_command_timeout_ms;
    int start = 1, fresh = 0, persistent = -1;
    if (param_int(c, params, "timeout_ms", 1, 86400000, &timeout) < 0 ||
        param_int(c, params, "command_timeout_ms", 1, 86400000, &ctimeout) < 0 ||
        param_int(c, params, "memory_limit_mb", 1, 65536, &mem) < 0 ||
        param_bool(c, params, "start", &start) < 0 ||
        param_bool(c, params, "fresh_isolate", &fresh) < 0 ||
        param_bool(c, params, "persistent", &persistent) < 0)
        goto fail;
    json_object_set_new(conf, "timeout_ms", json_integer(timeout));
    json_object_set_new(conf, "idle_timeout_ms", json_integer(idle));
    json_object_set_new(conf, "command_timeout_ms", json_integer(ctimeout));
    if (mem > D->cfg.max_memory_limit_mb) {
        /* The client's number is a wish; the config's ceiling is the limit,
         * and the result says so (issue 11, reproduction 4). */
        json_object_set_new(conf, "clamped",
                            json_pack("{s:{s:I, s:I}}", "memory_limit_mb", "requested",
                                      (json_int_t)mem, "max",
                                      (json_int_t)D->cfg.max_memory_limit_mb));
        mem = D->cfg.max_memory_limit_mb;
    }
    if (mem)
        json_object_set_new(conf, "memory_limit_mb", json_integer(mem));
    if (fresh)
        json_object_set_new(conf, "fresh_isolate", json_true());
    if (persistent >= 0)
        json_object_set_new(conf, "persistent", json_boolean(persistent));
    if (conf_common(c, params, conf) < 0)
        goto fail;
    if (param_str(c, params, "image", &str) < 0)
        goto fail;
    if (str)
        json_object_set_new(conf, "image", json_string(str));
    const char *texts[] = {"instructions", "instructions_append"};
    for (int i = 0; i < 2; i++) {
        if (param_str(c, params, texts[i], &str) < 0)
            goto fail;
        if (str)
            json_object_set_new(conf, texts[i], json_string(str));
    }
    const char *hooks[] = {"on_start", "on_stop", "on_destroy"};
    for (int i = 0; i < 3; i++) {
        json_t *h = json_object_get(params, hooks[i]);
        if (!h || json_is_null(h))
            continue;
        if (!valid_command(h)) {
            param_bad(c, hooks[i], "must be a command (string or array of strings)");
            goto fail;
        }
        json_object_set(conf, hooks[i], h);
    }
    json_t *tools = json_object_get(params, "tools");
    if (tools && !json_is_null(tools)) {
        size_t i;
        json_t *t;
        if (!json_is_array(tools) || json_array_size(tools) > 64) {
            param_bad(c, "tools", "must be an array of at most 64 names");
            goto fail;
        }
        json_array_foreach(tools, i, t) {
            const char *n = json_string_value(t);
            /* The js provider exposes a name that is not an identifier
             * sanitised (my-tool -> external_my_tool); tool.call names the
             * original. */
            int ok = n && n[0] && strlen(n) == json_string_length(t) && strlen(n) < 64;
            for (const char *q = n; ok && *q; q++)
                ok = isalnum((unsigned char)*q) || strchr("_$.:/@-", *q);
            if (!ok) {
                param_bad(c, "tools", "names are 1-63 characters of [A-Za-z0-9_$.:/@-]");
                goto fail;
            }
        }
        json_object_set(conf, "tools", tools);
    }
    json_t *opts = json_object_get(params, "options");
    if (opts && !json_is_null(opts)) {
        if (!json_is_object(opts)) {
            param_bad(c, "options", "must be an object");
            goto fail;
        }
        json_object_set(conf, "options", opts);
    }

    if (sandbox_create(id, pi, uid, conf, start, api_call_done, c, &err) < 0)
        call_fail(c, &err);
    return;
fail:
    json_decref(conf);
}

static void m_get(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (sb)
        call_reply(c, sandbox_to_json(sb));
}

static void m_list(struct call *c, json_t *params)
{
    const char *prov, *status;
    if (param_str(c, params, "provider", &prov) < 0 ||
        param_str(c, params, "status", &status) < 0)
        return;
    if (api_park(c, params))
        return; /* the whole list comes once it is known */
    json_t *arr = json_array();
    for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next) {
        if (!sandbox_visible(api_caller_uid(c), api_caller_admin(c), sb))
            continue;
        if (prov && strcmp(prov, sb->prov->ops->name) != 0)
            continue;
        if (status && strcmp(status, sandbox_status_name(sb->status)) != 0)
            continue;
        json_array_append_new(arr, sandbox_to_json(sb));
    }
    call_reply(c, json_pack("{s:o}", "sandboxes", arr));
}

/* start/stop/destroy/snapshot: find the caller's sandbox, hand the call over. */
static void lifecycle(struct call *c, json_t *params,
                      void (*op)(struct sandbox *, sbx_result_cb, void *))
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (sb)
        op(sb, api_call_done, c);
}

static void m_start(struct call *c, json_t *params)
{
    lifecycle(c, params, sandbox_start);
}

static void m_stop(struct call *c, json_t *params)
{
    lifecycle(c, params, sandbox_stop);
}

static void m_destroy(struct call *c, json_t *params)
{
    lifecycle(c, params, sandbox_destroy);
}

static void m_snapshot(struct call *c, json_t *params)
{
    /* ttl (issue 20): seconds the image lives, -1 never; the provider clamps it. */
    int64_t ttl = 0;
    if (param_int(c, params, "ttl", -1, INT32_MAX, &ttl) < 0)
        return;
    if (ttl == 0 && json_is_integer(json_object_get(params, "ttl"))) {
        param_bad(c, "ttl", "seconds (1 or more), or -1 for never");
        return;
    }
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (sb)
        sandbox_snapshot_ttl(sb, ttl, api_call_done, c);
}

static void m_snapshot_list(struct call *c, json_t *params)
{
    const char *prov;
    if (param_str(c, params, "provider", &prov) < 0)
        return;
    if (prov && !daemon_provider(prov)) {
        unknown_provider(c, prov);
        return;
    }
    snapshot_list(prov, api_caller_uid(c), api_caller_admin(c), api_call_done, c);
}

static void m_snapshot_delete(struct call *c, json_t *params)
{
    const char *id;
    if (param_req_str(c, params, "snapshot", &id) < 0)
        return;
    snapshot_delete(id, api_caller_uid(c), api_caller_admin(c), api_call_done, c);
}

static void m_clone(struct call *c, json_t *params)
{
    struct sandbox *src = api_sandbox_arg(c, params, "id");
    if (!src)
        return;
    uid_t uid = c->conn ? c->conn->uid : 0;
    const char *nid;
    if (param_str(c, params, "new_id", &nid) < 0)
        return;
    if (nid && !valid_id(nid)) {
        param_bad(c, "new_id", "must match [A-Za-z0-9][A-Za-z0-9_.-]{0,62}");
        return;
    }
    if (nid && sandbox_find_any(nid)) {
        call_error(c, SBX_E_PERMISSION, json_pack("{s:s}", "sandbox", nid),
                   "sandbox id %s is not available", nid);
        return;
    }
    if (over_sandbox_cap(c, uid) < 0)
        return;
    json_t *conf = json_deep_copy(src->conf);
    /* The runtime env layer is part of the parent's configuration too. */
    json_t *env = json_object_get(conf, "env");
    env = env ? json_incref(env) : json_object();
    env_merge(env, src->runtime_env, NULL);
    json_object_set_new(conf, "env", env);
    int start = 0;
    if (conf_common(c, params, conf) < 0 || param_bool(c, params, "start", &start) < 0) {
        json_decref(conf);
        return;
    }
    char gen[64];
    if (!nid) {
        daemon_random_id("sb-", gen, sizeof(gen));
        nid = gen;
    }
    struct sandbox *sb = NULL;
    sbx_err_t err = {0};
    if (sandbox_new(&sb, nid, src->prov, uid, conf, &err) < 0) {
        call_fail(c, &err);
        return;
    }
    if (start)
        sandbox_start(sb, api_call_done, c);
    else
        call_reply(c, sandbox_to_json(sb));
}

static void m_set_env(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (!sb)
        return;
    json_t *patch = json_object_get(params, "env");
    if (!json_is_object(patch)) {
        param_bad(c, "env", "must be an object");
        return;
    }
    json_t *next = json_deep_copy(sb->runtime_env);
    sbx_err_t err = {0};
    if (env_merge(next, patch, &err) < 0) {
        json_decref(next);
        call_fail(c, &err);
        return;
    }
    /* A null must also hide a create-time value: keep it as an explicit removal. */
    const char *k;
    json_t *v;
    json_object_foreach(patch, k, v)
        if (json_is_null(v))
            json_object_set_new(next, k, json_null());
    json_decref(sb->runtime_env);
    sb->runtime_env = next;
    sandbox_touch(sb);
    call_reply(c, json_pack("{s:o}", "env", sandbox_env_for(sb, NULL)));
}

static void m_instructions(struct call *c, json_t *params)
{
    struct sandbox *sb = api_sandbox_arg(c, params, "id");
    if (!sb)
        return;
    char *text = sandbox_instructions(sb);
    call_reply(c, json_pack("{s:s}", "text", text ? text : ""));
    free(text);
}

/* -- process.* -------------------------------------------------------------------- */

/* -- table --------------------------------------------------------------------------- */

static const struct {
    const char *name;
    method_fn fn;
} methods[] = {
    {SBX_M_PING, m_ping},
    {SBX_M_INFO, m_info},
    {SBX_M_CREATE, m_create},
    {SBX_M_GET, m_get},
    {SBX_M_LIST, m_list},
    {SBX_M_START, m_start},
    {SBX_M_STOP, m_stop},
    {SBX_M_DESTROY, m_destroy},
    {SBX_M_SNAPSHOT, m_snapshot},
    {SBX_M_SNAPSHOT_LIST, m_snapshot_list},
    {SBX_M_SNAPSHOT_DELETE, m_snapshot_delete},
    {SBX_M_CLONE, m_clone},
    {SBX_M_SET_ENV, m_set_env},
    {SBX_M_INSTRUCTIONS, m_instructions},
    /* files (api_fs.c) */
    {SBX_M_FS_READ, m_fs_read},
    {SBX_M_FS_WRITE, m_fs_write},
    {SBX_M_FS_LIST, m_fs_list},
    {SBX_M_FS_STAT, m_fs_stat},
    {SBX_M_FS_MKDIR, m_fs_mkdir},
    {SBX_M_FS_REMOVE, m_fs_remove},
    {SBX_M_FS_RENAME, m_fs_rename},
    {SBX_M_FS_WATCH, m_fs_watch},
    {SBX_M_FS_UNWATCH, m_fs_unwatch},
};

method_fn api_lookup(const char *method)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(methods[i].name, method) == 0)
            return methods[i].fn;
    method_fn fn = api_process_lookup(method);
    if (!fn)
        fn = api_ws_lookup(method);
    return fn ? fn : api_mount_lookup(method);
}
