/*
 * config.h - sbxd's configuration: built-in defaults, a YAML file (libyaml),
 * and the SBXD_SOCKET override.
 *
 * The core knows the keys of the top-level sections. Provider sections
 * (providers.<name>) are validated against a key table each provider
 * exposes (struct cfg_key), so unknown keys are errors everywhere while the
 * core stays ignorant of what Docker or Modal need.
 */
#ifndef SBXD_CONFIG_H
#define SBXD_CONFIG_H

#include <jansson.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

enum cfg_type {
    CFG_STR,  /* scalar -> JSON string */
    CFG_INT,  /* integer scalar -> JSON integer (1024, 0x10; k/m/g for *_bytes keys) */
    CFG_BOOL, /* true/false/yes/no/on/off -> JSON boolean */
    CFG_MAP,  /* mapping of string -> scalar string -> JSON object of strings */
    CFG_LIST, /* sequence of scalars -> JSON array of strings */
    CFG_ANY,  /* any YAML node -> JSON (scalars that look like ints/bools become them) */
};

struct cfg_key {
    const char *name;
    enum cfg_type type;
};

/* One provider's config schema: the keys allowed under providers.<name>.
 * "enabled" (bool) is always allowed and need not be listed. */
struct cfg_schema {
    const char *provider;
    const struct cfg_key *keys; /* terminated by {NULL, 0} */
};

enum log_level { LOG_LVL_ERROR, LOG_LVL_WARN, LOG_LVL_INFO, LOG_LVL_DEBUG };

struct sbx_config {
    char *path; /* the file read, or NULL for built-in defaults */

    /* socket: */
    char *socket_path;    /* default SBX_DEFAULT_SOCKET; SBXD_SOCKET overrides */
    unsigned socket_mode; /* default 0660 (YAML: octal string "0660" or int) */
    char *socket_group;   /* NULL = leave as is */

    char *admin_group;        /* NULL = only root is admin */
    enum log_level log_level; /* "error"|"warn"|"info"|"debug", default info */

    /* limits: */
    int64_t max_sessions;               /* default 1024 */
    int64_t max_sandboxes_per_uid;      /* default 64 */
    int64_t max_processes_per_sandbox;  /* default 64 */
    int64_t max_queued_per_sandbox;     /* beyond the running ones; default 1024 */
    int64_t max_message_bytes;          /* default 16 MiB */
    int64_t exec_output_bytes;          /* default 1 MiB, cap of exec result per stream */
    int64_t replay_bytes;               /* default 1 MiB per stream per process */
    int64_t session_output_high;        /* default 8 MiB */
    int64_t session_output_hard;        /* default 64 MiB */
    int64_t session_output_slack;       /* default 64 KiB past hard for -32005s */
    int64_t max_sessions_per_uid;       /* default 64 */
    int64_t admin_reserved_sessions;    /* default 16 of max_sessions, for admins only */
    int64_t session_idle_timeout_ms;    /* default 600000; 0 = off */
    int64_t input_bytes_per_uid;        /* default 64 MiB: a uid's unparsed input */
    int64_t output_bytes_total;         /* default 1 GiB: queued output of all sessions */
    int64_t retained_bytes_per_sandbox; /* default 8 MiB: what exited processes keep */
    int64_t retained_bytes_total;       /* default 64 MiB: the same, daemon-wide */
    int64_t env_bytes;                  /* default 256 KiB: an env (keys + values) */
    int64_t max_snapshots_per_uid;      /* default 32 */
    int64_t snapshot_bytes_per_uid;     /* default 64 MiB */
    int64_t max_memory_limit_mb;        /* default 512: ceiling of memory_limit_mb */
    int64_t op_timeout_ms;              /* default 300000: start/stop/destroy/snapshot */
    int64_t agent_log_lines_per_s;      /* default 50: agent log lines per sandbox */
    /* files (fs.*, PROTOCOL.md "Files") */
    int64_t fs_chunk_bytes; /* default 4 MiB: file bytes one fs.read/fs.write call moves
                             */
    int64_t fs_transfers_per_uid; /* default 16: fs calls in flight + open write handles
                                     per uid */
    int64_t fs_bytes_in_flight_per_uid; /* default 64 MiB: file bytes buffered in sbxd per
                                           uid */
    int64_t fs_watches_per_sandbox;     /* default 16: fs.watch per sandbox */
    int64_t fs_event_queue;             /* default 1024: events queued per watch */
    int64_t fs_list_max;                /* default 1000: entries per fs.list answer */
    int64_t fs_handle_idle_ms; /* default 60000: an open write unused this long is aborted
                                */
    int64_t fs_stream_token_ms; /* default 10000: a raw transfer token lives this long */
    int64_t stats_interval_ms;  /* default 5000: sandbox.stats stream period */
    int64_t stats_streams_per_session; /* default 8: stats streams a session may hold */
    /* issue 16 (seccore): */
    int64_t queued_bytes_per_uid; /* default 64 MiB: command, env, stdin of queued procs
                                   */
    int64_t memory_per_uid;       /* default half of MemTotal: sandboxes' memory limits */
    int64_t adopt_wait_ms;        /* default 10000: calls wait this long for adoption */
    int64_t shutdown_drain_ms; /* default 10000: providers drain at SIGTERM this long */

    /* defaults: */
    char *default_provider;          /* default "duktape" */
    int64_t default_timeout_ms;      /* default 300000 (5 min), max 86400000 */
    int64_t default_idle_timeout_ms; /* default 0 = off */
    /* default 300000; providers.<name>.command_timeout_ms wins */
    int64_t default_command_timeout_ms;

    /* instructions: */
    char *instructions_text;   /* replaces the default text when set */
    char *instructions_append; /* appended to it when set */

    /* providers: object provider-name -> object of the keys the file set.
     * After config_load_file there is an entry (maybe empty) for every schema
     * passed. "enabled" (bool) is present only when the file says it: absent
     * means not said, and what that means is the provider's business. A key
     * whose YAML value is null is absent (not set). Owned. */
    json_t *providers;
};

/* Fills cfg with built-in defaults (no file). Returns 0 or -1 on OOM. */
int config_init_defaults(struct sbx_config *cfg);

/*
 * Reads the YAML file at path over the defaults in cfg. Unknown keys, wrong
 * types and out-of-range values are errors; err->msg then reads
 * "FILE:LINE:COL: key 'a.b.c': what is wrong". `schemas` lists the known
 * providers; a providers.<name> not in it is an error. On failure cfg is
 * left unchanged (safe for a reload). Returns 0 or -1 (err->code SBX_E_PARAMS).
 */
int config_load_file(struct sbx_config *cfg, const char *path,
                     const struct cfg_schema *schemas, size_t nschemas, sbx_err_t *err);

/*
 * For `sbxd --check-config`: loads path over built-in defaults into a
 * temporary config and frees it. Returns 0 if the file is valid, else -1
 * with err->msg as config_load_file.
 */
int config_check_file(const char *path, const struct cfg_schema *schemas, size_t nschemas,
                      sbx_err_t *err);

/* Applies environment overrides (SBXD_SOCKET, when set and non-empty). */
void config_apply_env(struct sbx_config *cfg);

/* Frees everything cfg holds. */
void config_deinit(struct sbx_config *cfg);

/* Borrowed: the providers.<name> object, or NULL. */
json_t *config_provider(const struct sbx_config *cfg, const char *name);
/* Optimal string alignment distance of two short strings (SIZE_MAX when
 * either is over 63 characters): the "did you mean" of config and daemon. */
size_t config_edit_distance(const char *a, const char *b);

#endif
