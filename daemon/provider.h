/*
 * provider.h - what a provider is: a table of function pointers (crun's
 * custom_handler_s). The core knows nothing about Duktape, Docker or Modal;
 * it drives sandboxes and processes through these calls and hears back
 * through the provider-facing functions at the end of this file.
 *
 * Threading and re-entrancy: everything runs on the daemon's one libev
 * loop. A provider may call the provider-facing functions from any of its
 * own event callbacks, and also synchronously from inside an op (e.g.
 * sb_start may call sandbox_op_done before it returns).
 */
#ifndef SBXD_PROVIDER_H
#define SBXD_PROVIDER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "err.h"

struct sandbox;
struct process;

struct sbx_provider {
    const char *name;
    const struct cfg_key *config_keys; /* allowed keys of providers.<name> */
    /* Commands given as a string run through the shell (Docker, Modal); 0 means
     * the command is source code for the provider (Duktape). */
    int shell_commands;
    const char *default_cwd; /* when neither cwd nor working_dir is given; may be NULL */
    int enabled_by_default;

    /* conf: providers.<name>, borrowed. Fills *cookie. An error here means
     * the provider is unavailable (the daemon still runs). */
    int (*load)(json_t *conf, void **cookie, sbx_err_t *err);
    void (*unload)(void *cookie);
    /* 1 = available; 0 = not, with *reason (static or provider-owned string). */
    int (*available)(void *cookie, const char **reason);
    /* Extra fields for daemon.info, new reference or NULL. */
    json_t *(*info)(void *cookie);

    /* Lifecycle ops. Each is started once at a time per sandbox and finishes
     * with sandbox_op_done(). Returning <0 means it failed at once (and
     * sandbox_op_done must NOT be called). sb_start may finish with the
     * result {"reconnected": true} when it found the backend already there. */
    int (*sb_start)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    int (*sb_stop)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    int (*sb_destroy)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    /* Finishes with sandbox_op_done(sb, NULL, data): data is what a later
     * sb_start of a sandbox created from this snapshot gets as sb->snapshot. */
    int (*sb_snapshot)(void *cookie, struct sandbox *sb, sbx_err_t *err);
    /* Provider metadata for sandbox.get, new reference or NULL. */
    json_t *(*sb_metadata)(void *cookie, struct sandbox *sb);
    /* The sandbox object is going away (after destroy, or at shutdown). */
    void (*sb_release)(void *cookie, struct sandbox *sb);

    /* Starts p (p->spec holds argv/shell/code, env, cwd, timeout_ms). The
     * provider reports process_started / process_output / process_exited. */
    int (*proc_spawn)(void *cookie, struct process *p, sbx_err_t *err);
    int (*proc_write)(void *cookie, struct process *p, const void *data, size_t len,
                      sbx_err_t *err);
    int (*proc_close_stdin)(void *cookie, struct process *p, sbx_err_t *err);
    /* The process (and its children) must really end; report process_exited. */
    int (*proc_kill)(void *cookie, struct process *p, int sig, sbx_err_t *err);
    /* Output is welcome again after process_output_blocked() said 1. */
    void (*proc_resume)(void *cookie, struct process *p);
    /* Answer to a tool call: reply = {"call", "result"} or {"call","error"}, borrowed. */
    void (*proc_tool_result)(void *cookie, struct process *p, json_t *reply);
    /* The process record is being freed; drop p->pdata. */
    void (*proc_release)(void *cookie, struct process *p);
};

/* -- provider-facing core functions ---------------------------------------- */

/* Ends the current lifecycle op. err NULL = success; result stolen (may be NULL). */
void sandbox_op_done(struct sandbox *sb, sbx_err_t *err, json_t *result);
/* The backend is gone behind our back: status error, processes fail. */
void sandbox_lost(struct sandbox *sb, const char *reason);
/* A progress notification to the sandbox's owner sessions; params stolen. */
void sandbox_progress(struct sandbox *sb, json_t *params);

void process_started(struct process *p, long os_pid);
/* stream 0 stdout, 1 stderr. */
void process_output(struct process *p, int stream, const void *data, size_t len);
/* 1 while a follower cannot take more: stop reading / withhold credit. */
int process_output_blocked(struct process *p);
/* rec: {exit_code, signal, timed_out, killed, error, result, exception, reset}, borrowed. */
void process_exited(struct process *p, json_t *rec);
/* A tool call from inside the sandbox; args borrowed. */
void process_tool_call(struct process *p, int64_t call, const char *name, json_t *args);

/* The registered providers, NULL-terminated. */
extern const struct sbx_provider *const sbx_providers[];

#endif
