/*
 * config.c - sbxd's configuration: built-in defaults, the YAML file, the
 * environment. See config.h for the interface and config/README.md for the
 * keys.
 *
 * The file is read whole and loaded with libyaml's document API; we then walk
 * the node tree. Every error names the file, the 1-based line and column of
 * the offending node and the dotted key path. The load works on a copy of the
 * caller's config and only replaces it on success, so a failed reload
 * (SIGHUP) leaves the running configuration untouched.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <yaml.h>

#include "config_int.h"
#include "sbx_proto.h"

#define MAX_FILE_BYTES (4 * MIB) /* a config file is small; refuse anything silly */
/* libyaml keeps a simple-key slot per flow level and rescans them for every
 * token: 40k '[' took 16 s. An event pre-pass stops at this depth, before
 * the quadratic part, so a load (and a SIGHUP reload on the loop) stays
 * bounded by the file size cap. */
#define YAML_MAX_DEPTH 64
#define SUN_PATH_MAX 107 /* sizeof(sockaddr_un.sun_path) - 1 */

/* ---- the core keys ------------------------------------------------------ */

enum kind {
    K_STR,   /* string; min/max bound its length */
    K_INT,   /* integer in min..max */
    K_SIZE,  /* byte size in min..max, k/M/G suffixes allowed */
    K_MODE,  /* octal permission bits, at most 0777 */
    K_LEVEL, /* log level name */
};

struct core_key {
    const char *section; /* NULL = top level */
    const char *name;
    enum kind kind;
    size_t off; /* into struct sbx_config */
    int64_t min, max;
    int nullable; /* K_STR: null resets the field to NULL ("not set") */
};

#define F(field) offsetof(struct sbx_config, field)
/* One row a key: kept as written, not wrapped to the column limit. */
/* clang-format off */
static const struct core_key core_keys[] = {
    {"socket", "path", K_STR, F(socket_path), 1, SUN_PATH_MAX, 0},
    {"socket", "mode", K_MODE, F(socket_mode), 0, 0777, 0},
    {"socket", "group", K_STR, F(socket_group), 1, 255, 1},
    {NULL, "admin_group", K_STR, F(admin_group), 1, 255, 1},
    {NULL, "log_level", K_LEVEL, F(log_level), 0, 0, 0},
    {"limits", "max_sessions", K_INT, F(max_sessions), 1, 1000000, 0},
    {"limits", "max_sandboxes_per_uid", K_INT, F(max_sandboxes_per_uid), 1, 100000, 0},
    {"limits", "max_processes_per_sandbox", K_INT, F(max_processes_per_sandbox), 1, 100000, 0},
    {"limits", "max_queued_per_sandbox", K_INT, F(max_queued_per_sandbox), 0, 100000, 0},
    {"limits", "max_message_bytes", K_SIZE, F(max_message_bytes), 1024, GIB, 0},
    {"limits", "exec_output_bytes", K_SIZE, F(exec_output_bytes), 1, GIB, 0},
    {"limits", "replay_bytes", K_SIZE, F(replay_bytes), 1, GIB, 0},
    {"limits", "session_output_high", K_SIZE, F(session_output_high), 1, 64 * GIB, 0},
    {"limits", "session_output_hard", K_SIZE, F(session_output_hard), 1, 64 * GIB, 0},
    {"limits", "session_output_slack", K_SIZE, F(session_output_slack), KIB, 64 * MIB, 0},
    {"limits", "max_sessions_per_uid", K_INT, F(max_sessions_per_uid), 1, 1000000, 0},
    {"limits", "admin_reserved_sessions", K_INT, F(admin_reserved_sessions), 0, 1000000, 0},
    {"limits", "session_idle_timeout_ms", K_INT, F(session_idle_timeout_ms), 0, 86400000, 0},
    {"limits", "input_bytes_per_uid", K_SIZE, F(input_bytes_per_uid), 1024, 64 * GIB, 0},
    {"limits", "output_bytes_total", K_SIZE, F(output_bytes_total), 1024, 1024 * GIB, 0},
    {"limits", "retained_bytes_per_sandbox", K_SIZE, F(retained_bytes_per_sandbox), 0, 64 * GIB, 0},
    {"limits", "retained_bytes_total", K_SIZE, F(retained_bytes_total), 0, 1024 * GIB, 0},
    {"limits", "env_bytes", K_SIZE, F(env_bytes), 1024, GIB, 0},
    {"limits", "max_snapshots_per_uid", K_INT, F(max_snapshots_per_uid), 0, 1000000, 0},
    {"limits", "snapshot_bytes_per_uid", K_SIZE, F(snapshot_bytes_per_uid), 0, 1024 * GIB, 0},
    {"limits", "max_memory_limit_mb", K_INT, F(max_memory_limit_mb), 1, 1048576, 0},
    {"limits", "op_timeout_ms", K_INT, F(op_timeout_ms), 100, 86400000, 0},
    {"limits", "agent_log_lines_per_s", K_INT, F(agent_log_lines_per_s), 1, 1000000, 0},
    {"limits", "fs_chunk_bytes", K_SIZE, F(fs_chunk_bytes), 1024, 64 * MIB, 0},
    {"limits", "fs_transfers_per_uid", K_INT, F(fs_transfers_per_uid), 1, 100000, 0},
    {"limits", "fs_bytes_in_flight_per_uid", K_SIZE, F(fs_bytes_in_flight_per_uid), 1024, 64 * GIB, 0},
    {"limits", "fs_watches_per_sandbox", K_INT, F(fs_watches_per_sandbox), 0, 64, 0},
    {"limits", "fs_event_queue", K_INT, F(fs_event_queue), 1, 65536, 0},
    {"limits", "fs_list_max", K_INT, F(fs_list_max), 1, 4096, 0},
    {"limits", "fs_handle_idle_ms", K_INT, F(fs_handle_idle_ms), 1000, 86400000, 0},
    {"limits", "fs_stream_token_ms", K_INT, F(fs_stream_token_ms), 100, 600000, 0},
    /* issue 18: sandbox.stats streams */
    {"limits", "stats_interval_ms", K_INT, F(stats_interval_ms), 1000, 3600000, 0},
    {"limits", "stats_streams_per_session", K_INT, F(stats_streams_per_session), 0, 1000, 0},
    /* issue 16 (seccore) */
    {"limits", "queued_bytes_per_uid", K_SIZE, F(queued_bytes_per_uid), 64 * KIB, 64 * GIB, 0},
    {"limits", "memory_per_uid", K_SIZE, F(memory_per_uid), MIB, 64 * 1024 * GIB, 0},
    {"limits", "adopt_wait_ms", K_INT, F(adopt_wait_ms), 0, 600000, 0},
    /* at most 20 s: systemd/sbxd.service stops it after 30 */
    {"limits", "shutdown_drain_ms", K_INT, F(shutdown_drain_ms), 0, 20000, 0},
    {"defaults", "provider", K_STR, F(default_provider), 1, 64, 0},
    {"defaults", "timeout_ms", K_INT, F(default_timeout_ms), 1, 86400000, 0},
    {"defaults", "idle_timeout_ms", K_INT, F(default_idle_timeout_ms), 0, 86400000, 0},
    {"defaults", "command_timeout_ms", K_INT, F(default_command_timeout_ms), 1, 86400000, 0},
    {"instructions", "text", K_STR, F(instructions_text), 0, MIB, 1},
    {"instructions", "append", K_STR, F(instructions_append), 0, MIB, 1},
};
/* clang-format on */
#undef F
#define N_CORE ARRAY_SIZE(core_keys)

static const char *const sections[] = {"socket", "limits", "defaults", "instructions"};
static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* ---- defaults, copy, free ------------------------------------------------ */

/* The built-in limits.memory_per_uid: half of the host's memory, so that one
 * uid cannot reserve all of it with sandboxes' memory limits (issue 16, item
 * 6). 8 GiB when /proc/meminfo cannot be read. */
static int64_t default_memory_per_uid(void)
{
    int64_t kb = 0;
    char line[128];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "MemTotal:", 9) == 0) {
            kb = strtoll(line + 9, NULL, 10);
            break;
        }
    if (f)
        fclose(f);
    return kb > 0 ? kb * KIB / 2 : 8 * GIB;
}

int config_init_defaults(struct sbx_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->socket_mode = 0660;
    cfg->log_level = LOG_LVL_INFO;
    cfg->max_sessions = 1024;
    cfg->max_sandboxes_per_uid = 64;
    cfg->max_processes_per_sandbox = 64;
    cfg->max_queued_per_sandbox = 1024;
    cfg->max_message_bytes = SBX_DEFAULT_MAX_MESSAGE;
    cfg->exec_output_bytes = MIB;
    cfg->replay_bytes = MIB;
    cfg->session_output_high = 8 * MIB;
    cfg->session_output_hard = 64 * MIB;
    cfg->session_output_slack = 64 * KIB;
    cfg->max_sessions_per_uid = 64;
    cfg->admin_reserved_sessions = 16;
    cfg->session_idle_timeout_ms = 600000;
    cfg->input_bytes_per_uid = 64 * MIB;
    cfg->output_bytes_total = GIB;
    cfg->retained_bytes_per_sandbox = 8 * MIB;
    cfg->retained_bytes_total = 64 * MIB;
    cfg->env_bytes = 256 * KIB;
    cfg->max_snapshots_per_uid = 32;
    cfg->snapshot_bytes_per_uid = 64 * MIB;
    cfg->fs_chunk_bytes = 4 * MIB;
    cfg->fs_transfers_per_uid = 16;
    cfg->fs_bytes_in_flight_per_uid = 64 * MIB;
    cfg->fs_watches_per_sandbox = 16;
    cfg->fs_event_queue = 1024;
    cfg->fs_list_max = 1000;
    cfg->fs_handle_idle_ms = 60000;
    cfg->fs_stream_token_ms = 10000;
    cfg->max_memory_limit_mb = 512;
    cfg->op_timeout_ms = 300000;
    cfg->agent_log_lines_per_s = 50;
    cfg->stats_interval_ms = 5000;
    cfg->stats_streams_per_session = 8;
    cfg->queued_bytes_per_uid = 64 * MIB;
    cfg->memory_per_uid = default_memory_per_uid();
    cfg->adopt_wait_ms = 10000;
    cfg->shutdown_drain_ms = 10000;
    cfg->default_timeout_ms = 300000;
    cfg->default_idle_timeout_ms = 0;
    cfg->default_command_timeout_ms = 300000;
    cfg->socket_path = strdup(SBX_DEFAULT_SOCKET);
    cfg->default_provider = strdup("js");
    cfg->providers = json_object();
    if (!cfg->socket_path || !cfg->default_provider || !cfg->providers) {
        config_deinit(cfg);
        return -1;
    }
    return 0;
}

void config_deinit(struct sbx_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    free(cfg->socket_path);
    free(cfg->socket_group);
    free(cfg->admin_group);
    free(cfg->default_provider);
    free(cfg->instructions_text);
    free(cfg->instructions_append);
    json_decref(cfg->providers);
    memset(cfg, 0, sizeof(*cfg));
}

static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return 0;
    *dst = strdup(src);
    return *dst ? 0 : -1;
}

/* Deep copy; dst is overwritten. Returns -1 on OOM (dst then holds nothing). */
static int config_copy(struct sbx_config *dst, const struct sbx_config *src)
{
    *dst = *src;
    /* Nothing may alias src when a failure below frees dst. */
    dst->path = dst->socket_path = dst->socket_group = dst->admin_group = NULL;
    dst->default_provider = dst->instructions_text = dst->instructions_append = NULL;
    dst->providers = NULL;
    if (dup_str(&dst->path, src->path) < 0 ||
        dup_str(&dst->socket_path, src->socket_path) < 0 ||
        dup_str(&dst->socket_group, src->socket_group) < 0 ||
        dup_str(&dst->admin_group, src->admin_group) < 0 ||
        dup_str(&dst->default_provider, src->default_provider) < 0 ||
        dup_str(&dst->instructions_text, src->instructions_text) < 0 ||
        dup_str(&dst->instructions_append, src->instructions_append) < 0)
        goto fail;
    dst->providers = src->providers ? json_deep_copy(src->providers) : json_object();
    if (!dst->providers)
        goto fail;
    return 0;
fail:
    config_deinit(dst);
    return -1;
}

void config_apply_env(struct sbx_config *cfg)
{
    const char *s = getenv("SBXD_SOCKET");
    if (!s || !*s)
        return;
    char *copy = strdup(s);
    if (!copy)
        return; /* keep the configured path rather than none */
    free(cfg->socket_path);
    cfg->socket_path = copy;
}

json_t *config_provider(const struct sbx_config *cfg, const char *name)
{
    if (!cfg || !cfg->providers || !name)
        return NULL;
    return json_object_get(cfg->providers, name);
}

/* ---- core keys ------------------------------------------------------------ */

/* Permission bits are octal whatever the spelling: 0660, 660, "0660", 0o660. */
static int parse_mode(const char *s, unsigned *out)
{
    const char *p = s;
    unsigned v = 0;
    if (p[0] == '0' && (p[1] == 'o' || p[1] == 'O'))
        p += 2;
    if (!*p)
        return NUM_SYNTAX;
    for (; *p; p++) {
        if (*p < '0' || *p > '7')
            return NUM_SYNTAX;
        v = v * 8 + (unsigned)(*p - '0');
        if (v > 0777)
            return NUM_RANGE;
    }
    *out = v;
    return NUM_OK;
}

static const struct core_key *find_core(const char *section, const char *name)
{
    for (size_t i = 0; i < N_CORE; i++) {
        const struct core_key *ck = &core_keys[i];
        int same_section =
            section ? ck->section && !strcmp(ck->section, section) : !ck->section;
        if (same_section && !strcmp(ck->name, name))
            return ck;
    }
    return NULL;
}

static int set_core(struct ld *ld, const struct core_key *ck, const char *path,
                    yaml_node_t *v)
{
    void *field = (char *)ld->cfg + ck->off;
    int ret = 0;

    switch (ck->kind) {
    case K_STR: {
        char **sp = field;
        if (cfg_is_null(v)) {
            if (!ck->nullable)
                return cfg_expected(ld, path, v, "a string");
            free(*sp);
            *sp = NULL;
            break;
        }
        if (v->type != YAML_SCALAR_NODE)
            return cfg_expected(ld, path, v, "a string");
        if ((ret = cfg_check_nul(ld, path, v)) < 0)
            return ret;
        size_t len = v->data.scalar.length;
        if (len < (size_t)ck->min)
            return cfg_fail_at(ld, v->start_mark, "key '%s': must not be empty", path);
        if (len > (size_t)ck->max)
            return cfg_fail_at(ld, v->start_mark,
                               "key '%s': too long (%zu bytes, at most %" PRId64 ")",
                               path, len, ck->max);
        char *copy = strdup(cfg_sval(v));
        if (!copy)
            return cfg_oom(ld);
        free(*sp);
        *sp = copy;
        break;
    }
    case K_INT:
    case K_SIZE:
        ret = cfg_get_int(ld, path, v, ck->kind == K_SIZE, ck->min, ck->max,
                          (int64_t *)field);
        break;
    case K_MODE: {
        if (v->type != YAML_SCALAR_NODE || cfg_is_null(v))
            return cfg_expected(ld, path, v, "an octal mode such as \"0660\"");
        int r = parse_mode(cfg_sval(v), (unsigned *)field);
        if (r == NUM_RANGE) {
            char got[64];
            cfg_describe(v, got, sizeof(got));
            return cfg_fail_at(ld, v->start_mark,
                               "key '%s': mode %s is out of range (at most 0777)", path,
                               got);
        }
        if (r != NUM_OK)
            return cfg_expected(ld, path, v, "an octal mode such as \"0660\"");
        break;
    }
    case K_LEVEL: {
        if (v->type == YAML_SCALAR_NODE) {
            for (size_t i = 0; i < ARRAY_SIZE(level_names); i++) {
                if (!strcasecmp(cfg_sval(v), level_names[i])) {
                    *(enum log_level *)field = (enum log_level)i;
                    goto done;
                }
            }
        }
        return cfg_expected(ld, path, v, "one of error, warn, info, debug");
    }
    }
done:
    if (ret == 0) {
        ld->set[ck - core_keys] = 1;
        ld->mark[ck - core_keys] = v->start_mark;
    }
    return ret;
}

static int on_section_key(struct ld *ld, const char *path, const char *key,
                          yaml_node_t *k, yaml_node_t *v, void *privdata)
{
    const char *section = privdata;
    const struct core_key *ck = find_core(section, key);
    if (ck)
        return set_core(ld, ck, path, v);
    struct suggest s = {key, NULL, SIZE_MAX};
    for (size_t i = 0; i < N_CORE; i++)
        if (core_keys[i].section && !strcmp(core_keys[i].section, section))
            cfg_suggest_try(&s, core_keys[i].name);
    return cfg_unknown_key(ld, k, path, &s);
}

/* ---- the top level ---------------------------------------------------------- */

static int on_top_key(struct ld *ld, const char *path, const char *key, yaml_node_t *k,
                      yaml_node_t *v, void *privdata)
{
    (void)privdata;
    if (!strcmp(key, "providers")) {
        if (cfg_is_null(v))
            return 0;
        if (v->type != YAML_MAPPING_NODE)
            return cfg_expected(ld, path, v, "a mapping of provider names");
        return cfg_each_pair(ld, v, path, cfg_on_provider, NULL);
    }
    for (size_t i = 0; i < ARRAY_SIZE(sections); i++) {
        if (strcmp(key, sections[i]))
            continue;
        if (cfg_is_null(v))
            return 0;
        if (v->type != YAML_MAPPING_NODE)
            return cfg_expected(ld, path, v, "a mapping");
        return cfg_each_pair(ld, v, path, on_section_key, (void *)sections[i]);
    }
    const struct core_key *ck = find_core(NULL, key);
    if (ck)
        return set_core(ld, ck, path, v);

    struct suggest s = {key, NULL, SIZE_MAX};
    cfg_suggest_try(&s, "providers");
    for (size_t i = 0; i < ARRAY_SIZE(sections); i++)
        cfg_suggest_try(&s, sections[i]);
    for (size_t i = 0; i < N_CORE; i++)
        if (!core_keys[i].section)
            cfg_suggest_try(&s, core_keys[i].name);
    return cfg_unknown_key(ld, k, path, &s);
}

/* Tags would change what a scalar means behind our back (!!binary, !!int "x"). */
static int check_tags(struct ld *ld)
{
    static const char yaml_prefix[] = "tag:yaml.org,2002:";
    for (yaml_node_t *n = ld->doc->nodes.start; n < ld->doc->nodes.top; n++) {
        const char *tag = (const char *)n->tag;
        const char *dflt = n->type == YAML_MAPPING_NODE    ? YAML_DEFAULT_MAPPING_TAG
                           : n->type == YAML_SEQUENCE_NODE ? YAML_DEFAULT_SEQUENCE_TAG
                                                           : YAML_DEFAULT_SCALAR_TAG;
        if (!tag || !strcmp(tag, dflt))
            continue;
        if (!strncmp(tag, yaml_prefix, sizeof(yaml_prefix) - 1))
            return cfg_fail_at(ld, n->start_mark, "unsupported YAML tag '!!%s'",
                               tag + sizeof(yaml_prefix) - 1);
        return cfg_fail_at(ld, n->start_mark, "unsupported YAML tag '%s'", tag);
    }
    return 0;
}

static const struct core_key *core_by_field(size_t off)
{
    for (size_t i = 0; i < N_CORE; i++)
        if (core_keys[i].off == off)
            return &core_keys[i];
    return NULL;
}

/* Checks that span keys, after the whole file is read. */
static int check_consistency(struct ld *ld)
{
    struct sbx_config *cfg = ld->cfg;
    const struct core_key *high =
        core_by_field(offsetof(struct sbx_config, session_output_high));
    const struct core_key *hard =
        core_by_field(offsetof(struct sbx_config, session_output_hard));
    const struct core_key *prov =
        core_by_field(offsetof(struct sbx_config, default_provider));

    if (cfg->session_output_high >= cfg->session_output_hard) {
        char a[32], b[32];
        cfg_fmt_size(cfg->session_output_high, a, sizeof(a));
        cfg_fmt_size(cfg->session_output_hard, b, sizeof(b));
        /* Point at whichever of the two the file set; high if both. */
        const struct core_key *at = ld->set[high - core_keys] ? high : hard;
        static const char msg[] = "limits.session_output_high (%s) must be below "
                                  "limits.session_output_hard (%s)";
        if (ld->set[at - core_keys])
            return cfg_fail_at(ld, ld->mark[at - core_keys], msg, a, b);
        return cfg_fail_file(ld, msg, a, b);
    }

    if (ld->nschemas == 0)
        return 0;
    const char *name = cfg->default_provider;
    int pset = ld->set[prov - core_keys];
    yaml_mark_t pmark = ld->mark[prov - core_keys];
    if (!cfg_find_schema(ld, name)) {
        char known[512];
        cfg_known_providers(ld, known, sizeof(known));
        struct suggest sg = {name, NULL, SIZE_MAX};
        for (size_t i = 0; i < ld->nschemas; i++)
            cfg_suggest_try(&sg, ld->schemas[i].provider);
        if (pset && sg.best)
            return cfg_fail_at(
                ld, pmark,
                "key 'defaults.provider': unknown provider '%s' (did you mean "
                "'%s'? known: %s)",
                name, sg.best, known);
        if (pset)
            return cfg_fail_at(
                ld, pmark, "key 'defaults.provider': unknown provider '%s' (known: %s)",
                name, known);
        return cfg_fail_file(ld,
                             "key 'defaults.provider': unknown provider '%s' (known: %s)",
                             name, known);
    }
    json_t *enabled = json_object_get(config_provider(cfg, name), "enabled");
    if (json_is_false(enabled)) {
        if (pset)
            return cfg_fail_at(ld, pmark,
                               "key 'defaults.provider': provider '%s' is disabled "
                               "(providers.%s.enabled is false)",
                               name, name);
        return cfg_fail_file(
            ld,
            "key 'defaults.provider': the default provider '%s' is disabled "
            "(providers.%s.enabled is false); set defaults.provider",
            name, name);
    }
    return 0;
}

/* ---- files and libyaml ---------------------------------------------------- */

static int read_all(const char *path, char **buf_out, size_t *len_out, sbx_err_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_make(err, SBX_E_PARAMS, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int ret = 0;
    if (!buf) {
        ret = err_make(err, SBX_E_PARAMS, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= (size_t)MAX_FILE_BYTES) {
                ret = err_make(err, SBX_E_PARAMS, "%s: larger than %d MiB", path,
                               (int)(MAX_FILE_BYTES / MIB));
                goto out;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                ret = err_make(err, SBX_E_PARAMS, "%s: out of memory", path);
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            ret =
                err_make(err, SBX_E_PARAMS, "%s: cannot read: %s", path, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    *buf_out = buf;
    *len_out = len;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return ret;
}

/* libyaml's reader reports a byte offset; turn it into a line and column. */
static void offset_to_mark(const char *buf, size_t len, size_t offset, size_t *line,
                           size_t *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (buf[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
            (*col)++; /* count characters, not UTF-8 continuation bytes */
        }
    }
}

static int yaml_fail(const char *file, const yaml_parser_t *p, const char *buf,
                     size_t len, sbx_err_t *err)
{
    const char *problem = p->problem ? p->problem : "unknown error";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return err_make(err, SBX_E_PARAMS, "%s: out of memory", file);
    case YAML_READER_ERROR:
        if (p->encoding == YAML_UTF8_ENCODING) {
            size_t line, col;
            offset_to_mark(buf, len, p->problem_offset, &line, &col);
            if (p->problem_value != -1)
                return err_make(err, SBX_E_PARAMS, "%s:%zu:%zu: YAML error: %s (#%X)",
                                file, line, col, problem, (unsigned)p->problem_value);
            return err_make(err, SBX_E_PARAMS, "%s:%zu:%zu: YAML error: %s", file, line,
                            col, problem);
        }
        return err_make(err, SBX_E_PARAMS, "%s: YAML error: %s at byte %zu", file,
                        problem, p->problem_offset);
    default:
        if (p->context)
            return err_make(
                err, SBX_E_PARAMS, "%s:%zu:%zu: YAML syntax error: %s (%s at %zu:%zu)",
                file, p->problem_mark.line + 1, p->problem_mark.column + 1, problem,
                p->context, p->context_mark.line + 1, p->context_mark.column + 1);
        return err_make(err, SBX_E_PARAMS, "%s:%zu:%zu: YAML syntax error: %s", file,
                        p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
    }
}

/* The nesting pre-pass: events only, stopping at the first node deeper than
 * YAML_MAX_DEPTH. Syntax errors are left to the real load, which reports them. */
static int check_depth(const char *file, const char *buf, size_t len, sbx_err_t *err)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return err_make(err, SBX_E_PARAMS, "%s: out of memory", file);
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    int depth = 0, ret = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev))
            break;
        yaml_event_type_t t = ev.type;
        yaml_mark_t m = ev.start_mark;
        yaml_event_delete(&ev);
        if (t == YAML_STREAM_END_EVENT)
            break;
        if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > YAML_MAX_DEPTH) {
                ret = err_make(err, SBX_E_PARAMS,
                               "%s:%zu:%zu: nested more than %d levels deep", file,
                               m.line + 1, m.column + 1, YAML_MAX_DEPTH);
                break;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        }
    }
    yaml_parser_delete(&p);
    return ret;
}

int config_load_file(struct sbx_config *cfg, const char *path,
                     const struct cfg_schema *schemas, size_t nschemas, sbx_err_t *err)
{
    struct sbx_config tmp;
    struct ld ld;
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    int have_parser = 0, have_doc = 0, ret;
    char *buf = NULL;
    size_t len = 0;

    memset(&tmp, 0, sizeof(tmp));
    if (!cfg || !path || (nschemas && !schemas))
        return err_make(err, SBX_E_INTERNAL, "config_load_file: invalid arguments");
    if ((ret = read_all(path, &buf, &len, err)) < 0)
        goto out;
    if ((ret = check_depth(path, buf, len, err)) < 0)
        goto out;
    if (!yaml_parser_initialize(&parser)) {
        ret = err_make(err, SBX_E_PARAMS, "%s: out of memory", path);
        goto out;
    }
    have_parser = 1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) { /* libyaml frees doc on failure */
        ret = yaml_fail(path, &parser, buf, len, err);
        goto out;
    }
    have_doc = 1;

    /* A second document would be silently ignored; make it an error. */
    if (!yaml_parser_load(&parser, &extra)) {
        ret = yaml_fail(path, &parser, buf, len, err);
        goto out;
    }
    if (yaml_document_get_root_node(&extra)) {
        ret = err_make(err, SBX_E_PARAMS, "%s:%zu:%zu: only one YAML document is allowed",
                       path, extra.start_mark.line + 1, extra.start_mark.column + 1);
        yaml_document_delete(&extra);
        goto out;
    }
    yaml_document_delete(&extra);

    if (config_copy(&tmp, cfg) < 0) {
        ret = err_make(err, SBX_E_PARAMS, "%s: out of memory", path);
        goto out;
    }
    memset(&ld, 0, sizeof(ld));
    yaml_mark_t marks[N_CORE];
    unsigned char set[N_CORE];
    memset(set, 0, sizeof(set));
    ld.mark = marks;
    ld.set = set;
    ld.file = path;
    ld.doc = &doc;
    ld.err = err;
    ld.cfg = &tmp;
    ld.schemas = schemas;
    ld.nschemas = nschemas;
    if ((ret = check_tags(&ld)) < 0)
        goto out;

    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !cfg_is_null(root)) {
        if (root->type != YAML_MAPPING_NODE) {
            char got[64];
            cfg_describe(root, got, sizeof(got));
            ret = cfg_fail_at(&ld, root->start_mark,
                              "the top level must be a mapping, got %s", got);
            goto out;
        }
        if ((ret = cfg_each_pair(&ld, root, NULL, on_top_key, NULL)) < 0)
            goto out;
    }
    for (size_t i = 0; i < nschemas; i++) {
        json_t *unused;
        if (schemas[i].provider &&
            (ret = cfg_provider_obj(&ld, schemas[i].provider, &unused)) < 0)
            goto out;
    }
    if ((ret = check_consistency(&ld)) < 0)
        goto out;

    free(tmp.path);
    if (!(tmp.path = strdup(path))) {
        ret = cfg_oom(&ld);
        goto out;
    }
    config_deinit(cfg);
    *cfg = tmp;
    memset(&tmp, 0, sizeof(tmp));
    ret = 0;
out:
    config_deinit(&tmp);
    if (have_doc)
        yaml_document_delete(&doc);
    if (have_parser)
        yaml_parser_delete(&parser);
    free(buf);
    return ret;
}

int config_check_file(const char *path, const struct cfg_schema *schemas, size_t nschemas,
                      sbx_err_t *err)
{
    struct sbx_config cfg;
    if (config_init_defaults(&cfg) < 0)
        return err_make(err, SBX_E_PARAMS, "%s: out of memory", path ? path : "(null)");
    int ret = config_load_file(&cfg, path, schemas, nschemas, err);
    config_deinit(&cfg);
    return ret;
}
