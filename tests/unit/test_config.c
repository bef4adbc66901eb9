/*
 * test_config.c - daemon/config.c: defaults, every key, the data-driven cases
 * under tests/data/config/{valid,invalid}, size suffixes, octal modes, the
 * environment override, the sample config and jansson allocation failures.
 *
 * Run from the repository root, or pass the data directory (default
 * "tests/data") as argv[1] or in SBX_TESTDATA. The sample config is found at
 * DATADIR/../../config/sbxd.yaml unless SBX_SAMPLE_CONFIG names it.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "sbx_proto.h"
#include "testhelp.h"

/* ---- the providers' schemas: the real key tables the daemon registers ---- */

#include "core/provider.h"

static struct cfg_schema schemas[8];
static size_t nschemas;
#define NSCHEMAS nschemas

static void load_schemas(void)
{
    for (size_t i = 0; sbx_providers[i] && nschemas < 8; i++) {
        schemas[nschemas].provider = sbx_providers[i]->name;
        schemas[nschemas].keys = sbx_providers[i]->config_keys;
        nschemas++;
    }
}

#define MIB (INT64_C(1024) * 1024)

/* ---- helpers ------------------------------------------------------------ */

static char tmp_path[64];

/* Writes text to a fresh temporary file; its name is in tmp_path. */
static int write_tmp(const char *text)
{
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/sbx-test-config-XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0)
        return -1;
    size_t len = strlen(text);
    int ok = write(fd, text, len) == (ssize_t)len;
    close(fd);
    return ok ? 0 : -1;
}

/* Loads YAML text over cfg (which must be initialised). */
static int load_over(struct sbx_config *cfg, const char *yaml, sbx_err_t *err)
{
    if (write_tmp(yaml) < 0)
        return -2;
    int ret = config_load_file(cfg, tmp_path, schemas, NSCHEMAS, err);
    unlink(tmp_path);
    return ret;
}

/* Loads YAML text over the defaults. */
static int load_str(struct sbx_config *cfg, const char *yaml, sbx_err_t *err)
{
    if (config_init_defaults(cfg) < 0)
        return -2;
    return load_over(cfg, yaml, err);
}

static int msg_has(const sbx_err_t *err, const char *needle)
{
    int ok = err->msg && strstr(err->msg, needle);
    if (!ok)
        printf("      message: %s\n      wanted:  %s\n", err->msg ? err->msg : "(none)",
               needle);
    return ok;
}

/* Loads yaml, expects failure with `needle` in the message. */
static int fails_with(const char *yaml, const char *needle)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    int ret = load_str(&cfg, yaml, &err);
    int ok = ret == -1 && err.code == SBX_E_PARAMS && msg_has(&err, needle);
    if (ret == 0)
        printf("      loaded, but should have failed with: %s\n", needle);
    config_deinit(&cfg);
    err_clear(&err);
    return ok;
}

static json_t *prov_key(const struct sbx_config *cfg, const char *prov, const char *key)
{
    return json_object_get(config_provider(cfg, prov), key);
}

static int json_eq_str(json_t *got, const char *want_json)
{
    json_t *want = json_loads(want_json, JSON_DECODE_ANY, NULL);
    int ok = want && got && json_equal(got, want);
    if (!ok) {
        char *g = got ? json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        printf("      got %s, wanted %s\n", g ? g : "(null)", want_json);
        free(g);
    }
    json_decref(want);
    return ok;
}

/* ---- defaults ------------------------------------------------------------ */

static void test_defaults(void)
{
    struct sbx_config cfg;
    test_cond("config_init_defaults succeeds", config_init_defaults(&cfg) == 0);
    test_cond("default path is NULL (no file)", cfg.path == NULL);
    test_cond("default socket path",
              cfg.socket_path && !strcmp(cfg.socket_path, SBX_DEFAULT_SOCKET));
    test_cond("default socket mode 0660", cfg.socket_mode == 0660);
    test_cond("default socket group unset", cfg.socket_group == NULL);
    test_cond("default admin group unset", cfg.admin_group == NULL);
    test_cond("default log level info", cfg.log_level == LOG_LVL_INFO);
    test_cond("default max_sessions 1024", cfg.max_sessions == 1024);
    test_cond("default max_sandboxes_per_uid 64", cfg.max_sandboxes_per_uid == 64);
    test_cond("default max_processes_per_sandbox 64",
              cfg.max_processes_per_sandbox == 64);
    test_cond("default max_message_bytes 16 MiB", cfg.max_message_bytes == 16 * MIB);
    test_cond("default exec_output_bytes 1 MiB", cfg.exec_output_bytes == MIB);
    test_cond("default replay_bytes 1 MiB", cfg.replay_bytes == MIB);
    test_cond("default session_output_high 8 MiB", cfg.session_output_high == 8 * MIB);
    test_cond("default session_output_hard 64 MiB", cfg.session_output_hard == 64 * MIB);
    test_cond("default provider js",
              cfg.default_provider && !strcmp(cfg.default_provider, "js"));
    test_cond("default timeout 300000 ms", cfg.default_timeout_ms == 300000);
    test_cond("default idle timeout off", cfg.default_idle_timeout_ms == 0);
    test_cond("default command timeout 5 min", cfg.default_command_timeout_ms == 300000);
    test_cond("default instructions unset",
              !cfg.instructions_text && !cfg.instructions_append);
    test_cond("default providers is an empty object",
              json_is_object(cfg.providers) && json_object_size(cfg.providers) == 0);
    test_cond("config_provider of an unknown name is NULL",
              config_provider(&cfg, "duktape") == NULL);
    config_deinit(&cfg);
    config_deinit(&cfg); /* twice is harmless */
    config_deinit(NULL);
    test_cond("config_provider(NULL cfg) is NULL", config_provider(NULL, "x") == NULL);

    sbx_err_t err = {0};
    test_cond("empty file loads", load_str(&cfg, "", &err) == 0);
    test_cond("empty file keeps defaults",
              cfg.max_sessions == 1024 && cfg.socket_mode == 0660 && cfg.path);
    test_cond("empty file: an entry per schema, without 'enabled'",
              json_object_size(cfg.providers) == NSCHEMAS &&
                  json_is_object(config_provider(&cfg, "duktape")) &&
                  json_object_size(config_provider(&cfg, "docker")) == 0 &&
                  json_object_size(config_provider(&cfg, "modal")) == 0);
    config_deinit(&cfg);
    err_clear(&err);
}

/* ---- every core key ----------------------------------------------------------- */

static void core_keys_all(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    int ret = load_str(&cfg,
                       "socket:\n"
                       "  path: /tmp/sbxd-test.sock\n"
                       "  mode: \"0600\"\n"
                       "  group: sbx\n"
                       "admin_group: wheel\n"
                       "log_level: debug\n"
                       "limits:\n"
                       "  max_sessions: 10\n"
                       "  max_sandboxes_per_uid: 11\n"
                       "  max_processes_per_sandbox: 12\n"
                       "  max_message_bytes: 2M\n"
                       "  exec_output_bytes: 64k\n"
                       "  replay_bytes: 4096\n"
                       "  session_output_high: 1M\n"
                       "  session_output_hard: 1G\n"
                       "defaults:\n"
                       "  provider: docker\n"
                       "  timeout_ms: 1000\n"
                       "  idle_timeout_ms: 86400000\n"
                       "  command_timeout_ms: 4500\n"
                       "instructions:\n"
                       "  text: |\n"
                       "    line one\n"
                       "    line two\n"
                       "  append: \"more\"\n",
                       &err);
    test_cond("all core keys load", ret == 0);
    if (ret < 0)
        printf("      %s\n", err.msg);
    test_cond("socket.path",
              cfg.socket_path && !strcmp(cfg.socket_path, "/tmp/sbxd-test.sock"));
    test_cond("socket.mode", cfg.socket_mode == 0600);
    test_cond("socket.group", cfg.socket_group && !strcmp(cfg.socket_group, "sbx"));
    test_cond("admin_group", cfg.admin_group && !strcmp(cfg.admin_group, "wheel"));
    test_cond("log_level", cfg.log_level == LOG_LVL_DEBUG);
    test_cond("limits.max_sessions", cfg.max_sessions == 10);
    test_cond("limits.max_sandboxes_per_uid", cfg.max_sandboxes_per_uid == 11);
    test_cond("limits.max_processes_per_sandbox", cfg.max_processes_per_sandbox == 12);
    test_cond("limits.max_message_bytes", cfg.max_message_bytes == 2 * MIB);
    test_cond("limits.exec_output_bytes", cfg.exec_output_bytes == 64 * 1024);
    test_cond("limits.replay_bytes", cfg.replay_bytes == 4096);
    test_cond("limits.session_output_high", cfg.session_output_high == MIB);
    test_cond("limits.session_output_hard", cfg.session_output_hard == 1024 * MIB);
    test_cond("defaults.provider",
              cfg.default_provider && !strcmp(cfg.default_provider, "docker"));
    test_cond("defaults.timeout_ms", cfg.default_timeout_ms == 1000);
    test_cond("defaults.idle_timeout_ms", cfg.default_idle_timeout_ms == 86400000);
    test_cond("defaults.command_timeout_ms", cfg.default_command_timeout_ms == 4500);
    test_cond("instructions.text (block scalar)",
              cfg.instructions_text &&
                  !strcmp(cfg.instructions_text, "line one\nline two\n"));
    test_cond("instructions.append",
              cfg.instructions_append && !strcmp(cfg.instructions_append, "more"));
    test_cond("cfg->path is the file read", cfg.path && !strncmp(cfg.path, "/tmp/", 5));

    /* Null resets the optional strings; sections may be null. */
    ret = load_over(&cfg,
                    "socket:\n  group: ~\nadmin_group:\ninstructions:\n  text: null\n"
                    "limits:\n",
                    &err);
    test_cond("null resets optional strings", ret == 0 && !cfg.socket_group &&
                                                  !cfg.admin_group &&
                                                  !cfg.instructions_text);
    test_cond("loading over a config keeps what the file does not set",
              cfg.max_sessions == 10 && cfg.instructions_append &&
                  !strcmp(cfg.instructions_append, "more"));
    config_deinit(&cfg);
    err_clear(&err);
}

static void core_keys_forms(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    const char *levels[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++) {
        char y[64], d[64];
        snprintf(y, sizeof(y), "log_level: %s\n", levels[i]);
        snprintf(d, sizeof(d), "log_level: %s", levels[i]);
        test_cond(d, load_str(&cfg, y, &err) == 0 && (int)cfg.log_level == i);
        config_deinit(&cfg);
    }
    test_cond("log_level is case-insensitive",
              load_str(&cfg, "log_level: WARN\n", &err) == 0 &&
                  cfg.log_level == LOG_LVL_WARN);
    config_deinit(&cfg);

    test_cond("JSON (flow style) is YAML too",
              load_str(&cfg,
                       "{\"limits\": {\"max_sessions\": 3}, \"log_level\": \"error\"}",
                       &err) == 0 &&
                  cfg.max_sessions == 3 && cfg.log_level == LOG_LVL_ERROR);
    config_deinit(&cfg);
    test_cond("an alias may supply a value",
              load_str(&cfg,
                       "defaults:\n  timeout_ms: &t 4242\nlimits:\n  max_sessions: *t\n",
                       &err) == 0 &&
                  cfg.max_sessions == 4242);
    config_deinit(&cfg);
    test_cond("quoted integers are accepted",
              load_str(&cfg, "limits:\n  max_sessions: \"77\"\n", &err) == 0 &&
                  cfg.max_sessions == 77);
    config_deinit(&cfg);
    test_cond("hex integers are accepted",
              load_str(&cfg, "limits:\n  max_sessions: 0x10\n", &err) == 0 &&
                  cfg.max_sessions == 16);
    config_deinit(&cfg);
    err_clear(&err);
}

static void test_core_keys(void)
{
    core_keys_all();
    core_keys_forms();
}

/* ---- size suffixes ------------------------------------------------------ */

static void test_sizes(void)
{
    static const struct {
        const char *text;
        int64_t value;
    } good[] = {
        {"1", 1},        {"65536", 65536},    {"1k", 1024},       {"2K", 2048},
        {"3m", 3 * MIB}, {"4M", 4 * MIB},     {"1g", 1024 * MIB}, {"1G", 1024 * MIB},
        {"0x400", 1024}, {"\"8M\"", 8 * MIB}, {"+5k", 5 * 1024},
    };
    static const char *const bad[] = {"1T", "1kb", "k",     "1.5M", "-1k",   "0",
                                      "2G", "1 M", "16MiB", "010",  "0x10k", "lots"};
    struct sbx_config cfg;
    sbx_err_t err = {0};
    char y[128], d[128];

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(y, sizeof(y), "limits:\n  exec_output_bytes: %s\n", good[i].text);
        snprintf(d, sizeof(d), "size %s = %" PRId64, good[i].text, good[i].value);
        int ret = load_str(&cfg, y, &err);
        test_cond(d, ret == 0 && cfg.exec_output_bytes == good[i].value);
        if (ret < 0)
            printf("      %s\n", err.msg);
        config_deinit(&cfg);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(y, sizeof(y), "limits:\n  exec_output_bytes: %s\n", bad[i]);
        snprintf(d, sizeof(d), "size %s is refused", bad[i]);
        test_cond(d, fails_with(y, ":2:22: key 'limits.exec_output_bytes': "));
    }
    test_cond(
        "size overflow is refused",
        fails_with("limits:\n  replay_bytes: 99999999999G\n",
                   ":2:17: key 'limits.replay_bytes': '99999999999G' is too large"));
    test_cond("size range names units",
              fails_with("limits:\n  max_message_bytes: 1000\n",
                         ":2:22: key 'limits.max_message_bytes': '1000' is out of range "
                         "(1k..1G)"));
    test_cond("every size key takes suffixes",
              load_str(&cfg,
                       "limits:\n  max_message_bytes: 1k\n  exec_output_bytes: 2k\n"
                       "  replay_bytes: 3k\n  session_output_high: 4k\n"
                       "  session_output_hard: 5k\n",
                       &err) == 0 &&
                  cfg.max_message_bytes == 1024 && cfg.exec_output_bytes == 2048 &&
                  cfg.replay_bytes == 3072 && cfg.session_output_high == 4096 &&
                  cfg.session_output_hard == 5120);
    config_deinit(&cfg);
    test_cond(
        "plain integer keys refuse suffixes",
        fails_with("limits:\n  max_sessions: 1k\n",
                   ":2:17: key 'limits.max_sessions': expected an integer, got '1k'"));

    /* No shipped provider has an INT key named *_bytes; a made-up one does. */
    static const struct cfg_key test_keys[] = {
        {"buf_bytes", CFG_INT}, {"count", CFG_INT}, {NULL, 0}};
    static const struct cfg_schema test_schema[] = {{"test", test_keys}};
    config_init_defaults(&cfg);
    int ret =
        write_tmp(
            "defaults:\n  provider: test\nproviders:\n  test:\n    buf_bytes: 2k\n") < 0
            ? -2
            : config_load_file(&cfg, tmp_path, test_schema, 1, &err);
    unlink(tmp_path);
    test_cond("provider INT *_bytes keys take suffixes",
              ret == 0 && json_integer_value(json_object_get(
                              config_provider(&cfg, "test"), "buf_bytes")) == 2048);
    config_deinit(&cfg);
    config_init_defaults(&cfg);
    ret =
        write_tmp("defaults:\n  provider: test\nproviders:\n  test:\n    count: 2k\n") < 0
            ? -2
            : config_load_file(&cfg, tmp_path, test_schema, 1, &err);
    unlink(tmp_path);
    test_cond("other provider INT keys do not",
              ret == -1 && msg_has(&err, ":5:12: key 'providers.test.count': expected an "
                                         "integer, got '2k'"));
    config_deinit(&cfg);
    err_clear(&err);
}

/* ---- limits that were constants ------------------------------------------ */

/* limits.session_output_slack was CONN_LIMIT_SLACK (rpc/conn.h): the same
 * default, now a bounded key. */
static void test_output_slack(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    config_init_defaults(&cfg);
    test_cond("default session_output_slack 64 KiB (the old constant)",
              cfg.session_output_slack == 64 * 1024);
    config_deinit(&cfg);
    int ret = load_str(&cfg, "limits:\n  session_output_slack: 1M\n", &err);
    test_cond("limits.session_output_slack takes a size",
              ret == 0 && cfg.session_output_slack == MIB);
    config_deinit(&cfg);
    err_clear(&err);
    test_cond("limits.session_output_slack below 1k is refused",
              fails_with("limits:\n  session_output_slack: 512\n",
                         "key 'limits.session_output_slack': '512' is out of range "
                         "(1k..64M)"));
    test_cond("limits.session_output_slack above 64M is refused",
              fails_with("limits:\n  session_output_slack: 65M\n",
                         "key 'limits.session_output_slack': '65M' is out of range"));
}

/* limits.shutdown_drain_ms: how long SIGTERM lets the providers drain;
 * bounded below systemd's TimeoutStopSec (30 s). */
static void test_shutdown_drain(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    config_init_defaults(&cfg);
    test_cond("default shutdown_drain_ms 10000", cfg.shutdown_drain_ms == 10000);
    config_deinit(&cfg);
    int ret = load_str(&cfg, "limits:\n  shutdown_drain_ms: 0\n", &err);
    test_cond("limits.shutdown_drain_ms 0 (no drain) loads",
              ret == 0 && cfg.shutdown_drain_ms == 0);
    config_deinit(&cfg);
    err_clear(&err);
    test_cond("limits.shutdown_drain_ms above 20000 is refused",
              fails_with("limits:\n  shutdown_drain_ms: 20001\n",
                         "key 'limits.shutdown_drain_ms': '20001' is out of range "
                         "(0..20000)"));
}

/* ---- octal modes ------------------------------------------------------------ */

static void test_modes(void)
{
    static const struct {
        const char *text;
        unsigned mode;
    } good[] = {
        {"0660", 0660},      {"660", 0660},   {"\"0660\"", 0660}, {"'600'", 0600},
        {"0o640", 0640},     {"0777", 0777},  {"0", 0},           {"7", 07},
        {"\"0o700\"", 0700}, {"00660", 0660},
    };
    static const char *const bad[] = {"0778", "1000", "\"rw\"", "-1",   "0x1ff",
                                      "0o",   "~",    "[1]",    "01777"};
    struct sbx_config cfg;
    sbx_err_t err = {0};
    char y[128], d[128];

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(y, sizeof(y), "socket:\n  mode: %s\n", good[i].text);
        snprintf(d, sizeof(d), "mode %s = 0%o", good[i].text, good[i].mode);
        int ret = load_str(&cfg, y, &err);
        test_cond(d, ret == 0 && cfg.socket_mode == good[i].mode);
        if (ret < 0)
            printf("      %s\n", err.msg);
        config_deinit(&cfg);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(y, sizeof(y), "socket:\n  mode: %s\n", bad[i]);
        snprintf(d, sizeof(d), "mode %s is refused", bad[i]);
        test_cond(d, fails_with(y, ":2:9: key 'socket.mode': "));
    }
    test_cond("mode above 0777 says so",
              fails_with("socket:\n  mode: 1000\n",
                         "mode '1000' is out of range (at most 0777)"));
    err_clear(&err);
}

/* ---- providers ------------------------------------------------------------- */

/* Every key of every provider, js and duktape disabled. */
#define ALL_PROVIDER_KEYS                                                                \
    "providers:\n"                                                                       \
    "  js:\n"                                                                            \
    "    enabled: false\n"                                                               \
    "    memory_limit_mb: 64\n"                                                          \
    "    pool_size: 1\n"                                                                 \
    "    worker_user: nobody\n"                                                          \
    "    worker_path: /j\n"                                                              \
    "    jit: no\n"                                                                      \
    "    persistent: yes\n"                                                              \
    "    command_timeout_ms: 1000\n"                                                     \
    "  duktape:\n"                                                                       \
    "    enabled: false\n"                                                               \
    "    memory_limit_mb: 32\n"                                                          \
    "    pool_size: 2\n"                                                                 \
    "    worker_user: nobody\n"                                                          \
    "    fresh_isolate: yes\n"                                                           \
    "    worker_path: /w\n"                                                              \
    "    command_timeout_ms: 1500\n"                                                     \
    "  docker:\n"                                                                        \
    "    enabled: on\n"                                                                  \
    "    host: tcp://127.0.0.1:2376\n"                                                   \
    "    api_version: 1.43\n"                                                            \
    "    tls_ca: /ca.pem\n"                                                              \
    "    tls_cert: /cert.pem\n"                                                          \
    "    tls_key: /key.pem\n"                                                            \
    "    tls_verify: True\n"                                                             \
    "    exec_mode: docker-exec\n"                                                       \
    "    agent_path: /sbx-init\n"                                                        \
    "    image: alpine:3.20\n"                                                           \
    "    command: [sleep, 3600, true, \"true\", ~, 1.5, '1.5', 0755, {a: b}]\n"          \
    "    network: none\n"                                                                \
    "    privileged: off\n"                                                              \
    "    memory: 512m\n"                                                                 \
    "    memory_swap: 1g\n"                                                              \
    "    cpu_shares: 512\n"                                                              \
    "    cpu_quota: 50000\n"                                                             \
    "    cpu_period: 100000\n"                                                           \
    "    pids_limit: 0\n"                                                                \
    "    readonly_rootfs: FALSE\n"                                                       \
    "    cap_drop: [ALL]\n"                                                              \
    "    cap_add:\n"                                                                     \
    "      - CHOWN\n"                                                                    \
    "      - 'SETUID'\n"                                                                 \
    "    security_opt: []\n"                                                             \
    "    ulimits: {nofile: {soft: 1024, hard: 2048}}\n"                                  \
    "    tmpfs:\n"                                                                       \
    "      /tmp: rw,size=64m\n"                                                          \
    "    working_dir: /work\n"                                                           \
    "    user: 1000\n"                                                                   \
    "    labels:\n"                                                                      \
    "      a: 1\n"                                                                       \
    "      b: \"two\"\n"                                                                 \
    "      c: true\n"                                                                    \
    "    volumes: [\"/a:/b:ro\"]\n"                                                      \
    "    command_timeout_ms: 0x10\n"                                                     \
    "  modal:\n"                                                                         \
    "    server_url: http://127.0.0.1:8000\n"                                            \
    "    token_id: ak-1\n"                                                               \
    "    token_secret: as-1\n"                                                           \
    "    app_name: app\n"                                                                \
    "    environment: dev\n"                                                             \
    "    image: python:3.12\n"                                                           \
    "    cpu: 0.25\n"                                                                    \
    "    memory_mb: 256\n"                                                               \
    "    timeout_ms: 60000\n"                                                            \
    "    command_timeout_ms: 9000\n"                                                     \
    "    max_message_bytes: 1M\n"                                                        \
    "    working_dir: ~\n"

/* The docker section of ALL_PROVIDER_KEYS, key by key. */
static void providers_docker_keys(struct sbx_config *cfg)
{
    test_cond("BOOL on", json_is_true(prov_key(cfg, "docker", "enabled")));
    test_cond("STR host",
              json_eq_str(prov_key(cfg, "docker", "host"), "\"tcp://127.0.0.1:2376\""));
    test_cond("STR keeps a plain number as text",
              json_eq_str(prov_key(cfg, "docker", "api_version"), "\"1.43\"") &&
                  json_eq_str(prov_key(cfg, "docker", "user"), "\"1000\""));
    test_cond("STR tls files",
              json_eq_str(prov_key(cfg, "docker", "tls_ca"), "\"/ca.pem\"") &&
                  json_eq_str(prov_key(cfg, "docker", "tls_cert"), "\"/cert.pem\"") &&
                  json_eq_str(prov_key(cfg, "docker", "tls_key"), "\"/key.pem\""));
    test_cond("BOOL True / off / FALSE",
              json_is_true(prov_key(cfg, "docker", "tls_verify")) &&
                  json_is_false(prov_key(cfg, "docker", "privileged")) &&
                  json_is_false(prov_key(cfg, "docker", "readonly_rootfs")));
    test_cond("STR exec_mode, agent_path, image, network, memory, working_dir",
              json_eq_str(prov_key(cfg, "docker", "exec_mode"), "\"docker-exec\"") &&
                  json_eq_str(prov_key(cfg, "docker", "agent_path"), "\"/sbx-init\"") &&
                  json_eq_str(prov_key(cfg, "docker", "image"), "\"alpine:3.20\"") &&
                  json_eq_str(prov_key(cfg, "docker", "network"), "\"none\"") &&
                  json_eq_str(prov_key(cfg, "docker", "memory"), "\"512m\"") &&
                  json_eq_str(prov_key(cfg, "docker", "memory_swap"), "\"1g\"") &&
                  json_eq_str(prov_key(cfg, "docker", "working_dir"), "\"/work\""));
    test_cond(
        "ANY typing: plain scalars typed, quoted stay strings",
        json_eq_str(prov_key(cfg, "docker", "command"),
                    "[\"sleep\", 3600, true, \"true\", null, 1.5, \"1.5\", \"0755\","
                    " {\"a\": \"b\"}]"));
    test_cond("INT cpu_*, pids_limit 0, hex",
              json_eq_str(prov_key(cfg, "docker", "cpu_shares"), "512") &&
                  json_eq_str(prov_key(cfg, "docker", "cpu_quota"), "50000") &&
                  json_eq_str(prov_key(cfg, "docker", "cpu_period"), "100000") &&
                  json_eq_str(prov_key(cfg, "docker", "pids_limit"), "0") &&
                  json_eq_str(prov_key(cfg, "docker", "command_timeout_ms"), "16"));
    test_cond(
        "LIST flow, block and empty",
        json_eq_str(prov_key(cfg, "docker", "cap_drop"), "[\"ALL\"]") &&
            json_eq_str(prov_key(cfg, "docker", "cap_add"), "[\"CHOWN\", \"SETUID\"]") &&
            json_eq_str(prov_key(cfg, "docker", "security_opt"), "[]"));
    test_cond("ANY nested mapping",
              json_eq_str(prov_key(cfg, "docker", "ulimits"),
                          "{\"nofile\": {\"soft\": 1024, \"hard\": 2048}}") &&
                  json_eq_str(prov_key(cfg, "docker", "tmpfs"),
                              "{\"/tmp\": \"rw,size=64m\"}") &&
                  json_eq_str(prov_key(cfg, "docker", "volumes"), "[\"/a:/b:ro\"]"));
    test_cond("MAP values are strings",
              json_eq_str(prov_key(cfg, "docker", "labels"),
                          "{\"a\": \"1\", \"b\": \"two\", \"c\": \"true\"}"));
}

static void providers_every_key(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    int ret = load_str(&cfg, ALL_PROVIDER_KEYS, &err);
    /* js is disabled there but still the default provider: an error. */
    test_cond("a disabled default provider is an error",
              ret == -1 && msg_has(&err, "'js' is disabled"));
    config_deinit(&cfg);

    ret = load_str(&cfg, "defaults:\n  provider: docker\n" ALL_PROVIDER_KEYS, &err);
    test_cond("every provider key loads", ret == 0);
    if (ret < 0)
        printf("      %s\n", err.msg);

    json_t *duk = config_provider(&cfg, "duktape");
    test_cond("duktape section",
              json_eq_str(duk, "{\"enabled\": false, \"memory_limit_mb\": 32,"
                               " \"pool_size\": 2, \"worker_user\": \"nobody\","
                               " \"fresh_isolate\": true, \"worker_path\": \"/w\","
                               " \"command_timeout_ms\": 1500}"));
    providers_docker_keys(&cfg);
    test_cond(
        "modal section (ANY float, null unsets)",
        json_eq_str(config_provider(&cfg, "modal"),
                    "{\"server_url\": \"http://127.0.0.1:8000\", \"token_id\": \"ak-1\","
                    " \"token_secret\": \"as-1\", \"app_name\": \"app\","
                    " \"environment\": \"dev\", \"image\": \"python:3.12\","
                    " \"cpu\": 0.25, \"memory_mb\": 256, \"timeout_ms\": 60000,"
                    " \"command_timeout_ms\": 9000, \"max_message_bytes\": 1048576}"));
    test_cond("every docker key present (29 + enabled)",
              json_object_size(config_provider(&cfg, "docker")) == 30);
    config_deinit(&cfg);
    err_clear(&err);
}

static void providers_sections(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};
    int ret;
    ret = load_str(&cfg, "providers:\n  docker:\n    image: x\n", &err);
    test_cond("unmentioned providers get an empty entry",
              ret == 0 && json_object_size(config_provider(&cfg, "duktape")) == 0 &&
                  json_object_size(config_provider(&cfg, "modal")) == 0 &&
                  json_object_size(config_provider(&cfg, "docker")) == 1 &&
                  !prov_key(&cfg, "docker", "enabled"));
    test_cond("unknown providers are not invented",
              config_provider(&cfg, "other") == NULL);
    config_deinit(&cfg);

    test_cond("null provider section is an empty entry",
              load_str(&cfg, "providers:\n  modal:\n", &err) == 0 &&
                  json_is_object(config_provider(&cfg, "modal")));
    config_deinit(&cfg);

    test_cond("ANY: aliases expand",
              load_str(&cfg,
                       "providers:\n  docker:\n    tmpfs: &t {/tmp: a}\n"
                       "    volumes: [*t, *t]\n",
                       &err) == 0 &&
                  json_eq_str(prov_key(&cfg, "docker", "volumes"),
                              "[{\"/tmp\": \"a\"}, {\"/tmp\": \"a\"}]"));
    config_deinit(&cfg);

    test_cond("ANY: a string command stays a string",
              load_str(&cfg, "providers:\n  docker:\n    command: sleep infinity\n",
                       &err) == 0 &&
                  json_eq_str(prov_key(&cfg, "docker", "command"), "\"sleep infinity\""));
    config_deinit(&cfg);

    test_cond("no schemas: any provider is unknown",
              config_init_defaults(&cfg) == 0 &&
                  write_tmp("providers:\n  docker: {}\n") == 0 &&
                  config_load_file(&cfg, tmp_path, NULL, 0, &err) == -1 &&
                  msg_has(&err, "unknown provider 'docker' (known: none)"));
    unlink(tmp_path);
    config_deinit(&cfg);
    test_cond("no schemas: an empty file loads",
              config_init_defaults(&cfg) == 0 && write_tmp("log_level: info\n") == 0 &&
                  config_load_file(&cfg, tmp_path, NULL, 0, &err) == 0 &&
                  json_object_size(cfg.providers) == 0);
    unlink(tmp_path);
    config_deinit(&cfg);
    err_clear(&err);
}

static void test_providers(void)
{
    providers_every_key();
    providers_sections();
}

/* ---- errors that need a setup a data file cannot give ------------------------- */

/* libyaml rescans every open flow level per token: 40k '[' took 16 s. The
 * pre-pass refuses the 65th level before that, in flow and block style. */
static void test_nesting(void)
{
    size_t n = 40000;
    char *y = malloc(n + 8);
    memcpy(y, "x: ", 3);
    memset(y + 3, '[', n);
    y[n + 3] = '\0';
    test_cond("40k flow levels are refused as too deep", fails_with(y, ":1:"));
    test_cond("the message names the nesting limit",
              fails_with(y, "nested more than 64 levels deep"));
    free(y);
    char blk[8192];
    size_t o = 0;
    for (int i = 0; i < 70; i++)
        o += (size_t)snprintf(blk + o, sizeof(blk) - o, "%*sk%d:\n", i * 2, "", i);
    test_cond("70 block levels are refused too",
              fails_with(blk, "nested more than 64 levels deep"));
    struct sbx_config cfg;
    sbx_err_t err = {0};
    test_cond(
        "the new limit keys load",
        load_str(&cfg,
                 "limits:\n  max_sessions_per_uid: 3\n  admin_reserved_sessions: 2\n"
                 "  session_idle_timeout_ms: 0\n  input_bytes_per_uid: 1M\n"
                 "  output_bytes_total: 2M\n  retained_bytes_per_sandbox: 3M\n"
                 "  retained_bytes_total: 4M\n  env_bytes: 5k\n"
                 "  max_snapshots_per_uid: 6\n  snapshot_bytes_per_uid: 7M\n"
                 "  max_memory_limit_mb: 8\n  op_timeout_ms: 900\n"
                 "  agent_log_lines_per_s: 10\n",
                 &err) == 0 &&
            cfg.max_sessions_per_uid == 3 && cfg.admin_reserved_sessions == 2 &&
            cfg.session_idle_timeout_ms == 0 && cfg.input_bytes_per_uid == MIB &&
            cfg.output_bytes_total == 2 * MIB &&
            cfg.retained_bytes_per_sandbox == 3 * MIB &&
            cfg.retained_bytes_total == 4 * MIB && cfg.env_bytes == 5 * 1024 &&
            cfg.max_snapshots_per_uid == 6 && cfg.snapshot_bytes_per_uid == 7 * MIB &&
            cfg.max_memory_limit_mb == 8 && cfg.op_timeout_ms == 900 &&
            cfg.agent_log_lines_per_s == 10);
    if (err.msg)
        printf("      %s\n", err.msg);
    config_deinit(&cfg);
    err_clear(&err);
}

static void test_errors(void)
{
    struct sbx_config cfg;
    sbx_err_t err = {0};

    test_cond("positions are 1-based", fails_with("x: 1\n", ":1:1: unknown key 'x'"));
    test_cond(
        "value errors point at the value",
        fails_with("limits:\n    max_sessions: lots\n",
                   ":2:19: key 'limits.max_sessions': expected an integer, got 'lots'"));
    test_cond("unknown keys suggest a near match",
              fails_with("limits:\n  max_sesions: 1\n",
                         ":2:3: unknown key 'limits.max_sesions' (did you mean "
                         "'max_sessions'?)"));
    test_cond(
        "unknown provider lists the known ones",
        fails_with(
            "providers:\n  dockr: {}\n",
            ":2:3: unknown provider 'dockr' (did you mean 'docker'? known: js, duktape, docker, modal)"));

    /* Every bad key is reported, one per line, not only the first (issue 19). */
    const char *several = "limits:\n  max_sessions: lots\n  bogus: 1\nproviders:\n"
                          "  dokcer: {}\nlog_level: loud\n";
    test_cond(
        "several errors: the first is reported",
        fails_with(several, ":2:17: key 'limits.max_sessions': expected an integer"));
    test_cond("several errors: the second too",
              fails_with(several, ":3:3: unknown key 'limits.bogus'"));
    test_cond(
        "several errors: the third, with did-you-mean",
        fails_with(several, ":5:3: unknown provider 'dokcer' (did you mean 'docker'?"));
    test_cond("several errors: the fourth, on its own line",
              fails_with(several, "\n") && fails_with(several, ":6:12: key 'log_level'"));

    /* A failed load leaves the config as it was. */
    test_cond("setup: load a valid file",
              load_str(&cfg, "limits:\n  max_sessions: 5\n", &err) == 0);
    char *path_before = cfg.path ? strdup(cfg.path) : NULL;
    int ret = load_over(&cfg, "limits:\n  max_sessions: 7\n  bogus: 1\n", &err);
    test_cond("failed load reports",
              ret == -1 && msg_has(&err, ":3:3: unknown key 'limits.bogus'"));
    test_cond("failed load leaves cfg unchanged", cfg.max_sessions == 5 && cfg.path &&
                                                      path_before &&
                                                      !strcmp(cfg.path, path_before));
    free(path_before);
    config_deinit(&cfg);

    config_init_defaults(&cfg);
    ret = config_load_file(&cfg, "/nonexistent/sbxd.yaml", schemas, NSCHEMAS, &err);
    test_cond("a missing file is an error",
              ret == -1 && err.code == SBX_E_PARAMS &&
                  msg_has(&err, "/nonexistent/sbxd.yaml: cannot open: "));
    ret = config_load_file(&cfg, "/tmp", schemas, NSCHEMAS, &err);
    test_cond("a directory is an error",
              ret == -1 && msg_has(&err, "/tmp: cannot read: "));
    config_deinit(&cfg);

    /* Long values are shortened in messages. */
    char big[512];
    snprintf(big, sizeof(big), "limits:\n  max_sessions: %0300d\n", 7);
    memcpy(big + 34, "x", 1);
    test_cond(
        "long values are shortened in messages",
        fails_with(
            big,
            "expected an integer, got '0000000000x00000000000000000000000000000...'"));
    err_clear(&err);
}

/* ---- environment ------------------------------------------------------------ */

static void test_env(void)
{
    struct sbx_config cfg;
    config_init_defaults(&cfg);
    unsetenv("SBXD_SOCKET");
    config_apply_env(&cfg);
    test_cond("SBXD_SOCKET unset: path kept",
              !strcmp(cfg.socket_path, SBX_DEFAULT_SOCKET));
    setenv("SBXD_SOCKET", "", 1);
    config_apply_env(&cfg);
    test_cond("SBXD_SOCKET empty: path kept",
              !strcmp(cfg.socket_path, SBX_DEFAULT_SOCKET));
    setenv("SBXD_SOCKET", "/tmp/sbxd-env.sock", 1);
    config_apply_env(&cfg);
    test_cond("SBXD_SOCKET overrides", !strcmp(cfg.socket_path, "/tmp/sbxd-env.sock"));
    config_deinit(&cfg);

    sbx_err_t err = {0};
    int ret = load_str(&cfg, "socket:\n  path: /tmp/from-file.sock\n", &err);
    config_apply_env(&cfg);
    test_cond("SBXD_SOCKET overrides the file",
              ret == 0 && !strcmp(cfg.socket_path, "/tmp/sbxd-env.sock"));
    config_deinit(&cfg);
    unsetenv("SBXD_SOCKET");
    err_clear(&err);
}

/* ---- the sample config --------------------------------------------------------- */

static void test_sample(const char *sample)
{
    sbx_err_t err = {0};
    int ret = config_check_file(sample, schemas, NSCHEMAS, &err);
    test_cond("config/sbxd.yaml passes config_check_file", ret == 0);
    if (ret < 0)
        printf("      %s\n", err.msg);

    struct sbx_config cfg;
    config_init_defaults(&cfg);
    ret = config_load_file(&cfg, sample, schemas, NSCHEMAS, &err);
    test_cond("sample loads", ret == 0);
    test_cond("sample core values are the defaults",
              cfg.max_sessions == 1024 && cfg.socket_mode == 0660 &&
                  cfg.max_message_bytes == 16 * MIB &&
                  cfg.session_output_hard == 64 * MIB &&
                  cfg.default_timeout_ms == 300000 && cfg.log_level == LOG_LVL_INFO &&
                  !strcmp(cfg.socket_path, SBX_DEFAULT_SOCKET) &&
                  !strcmp(cfg.default_provider, "js"));
    test_cond(
        "sample docker is hardened",
        json_eq_str(prov_key(&cfg, "docker", "cap_drop"), "[\"ALL\"]") &&
            json_eq_str(prov_key(&cfg, "docker", "security_opt"),
                        "[\"no-new-privileges\"]") &&
            json_eq_str(prov_key(&cfg, "docker", "pids_limit"), "256") &&
            json_eq_str(prov_key(&cfg, "docker", "memory"), "\"512m\"") &&
            json_eq_str(prov_key(&cfg, "docker", "network"), "\"none\"") &&
            json_is_false(prov_key(&cfg, "docker", "readonly_rootfs")) &&
            json_is_false(prov_key(&cfg, "docker", "privileged")) &&
            json_is_string(json_object_get(prov_key(&cfg, "docker", "tmpfs"), "/tmp")));
    struct sbx_config def;
    config_init_defaults(&def);
    test_cond("sample limits (issue 11's caps) are the built-in defaults",
              cfg.max_sessions_per_uid == def.max_sessions_per_uid &&
                  cfg.admin_reserved_sessions == def.admin_reserved_sessions &&
                  cfg.session_idle_timeout_ms == def.session_idle_timeout_ms &&
                  cfg.input_bytes_per_uid == def.input_bytes_per_uid &&
                  cfg.output_bytes_total == def.output_bytes_total &&
                  cfg.retained_bytes_per_sandbox == def.retained_bytes_per_sandbox &&
                  cfg.retained_bytes_total == def.retained_bytes_total &&
                  cfg.env_bytes == def.env_bytes &&
                  cfg.max_snapshots_per_uid == def.max_snapshots_per_uid &&
                  cfg.snapshot_bytes_per_uid == def.snapshot_bytes_per_uid &&
                  cfg.max_memory_limit_mb == def.max_memory_limit_mb &&
                  cfg.op_timeout_ms == def.op_timeout_ms &&
                  cfg.agent_log_lines_per_s == def.agent_log_lines_per_s &&
                  cfg.session_output_slack == def.session_output_slack);
    config_deinit(&def);
    test_cond("sample modal has no credentials",
              !prov_key(&cfg, "modal", "token_id") &&
                  !prov_key(&cfg, "modal", "token_secret"));
    config_deinit(&cfg);

    ret = config_check_file("/nonexistent.yaml", schemas, NSCHEMAS, &err);
    test_cond("config_check_file reports a missing file",
              ret == -1 && msg_has(&err, "cannot open"));
    err_clear(&err);
}

/* ---- data-driven cases ---------------------------------------------------------- */

static int yaml_filter(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return n > 5 && !strcmp(d->d_name + n - 5, ".yaml");
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getdelim(&buf, &cap, '\0', f);
    fclose(f);
    if (n < 0) {
        free(buf);
        return NULL;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    return buf;
}

/* Returns the number of cases run. */
static int run_dir(const char *datadir, const char *kind)
{
    char dir[1024], path[2048], descr[320];
    struct dirent **names = NULL;
    snprintf(dir, sizeof(dir), "%s/config/%s", datadir, kind);
    int n = scandir(dir, &names, yaml_filter, alphasort);
    if (n < 0) {
        printf("      cannot read %s\n", dir);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        struct sbx_config cfg;
        sbx_err_t err = {0};
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        config_init_defaults(&cfg);
        int ret = config_load_file(&cfg, path, schemas, NSCHEMAS, &err);
        snprintf(descr, sizeof(descr), "%s/%s", kind, name);
        if (!strcmp(kind, "valid")) {
            test_cond(descr, ret == 0);
            if (ret < 0)
                printf("      %s\n", err.msg);
        } else {
            snprintf(path + strlen(path) - 5, sizeof(path) - strlen(path) + 5, ".err");
            char *want = slurp(path);
            test_cond(descr, want && *want && ret == -1 && err.code == SBX_E_PARAMS &&
                                 msg_has(&err, want));
            if (!want)
                printf("      missing or unreadable %s\n", path);
            free(want);
        }
        config_deinit(&cfg);
        err_clear(&err);
        free(names[i]);
    }
    free(names);
    return n;
}

/* ---- jansson allocation failures -------------------------------------------- */

static long alloc_budget = -1; /* allocations left before failing; -1 = never fail */
static int alloc_failed;

static void *failing_malloc(size_t size)
{
    if (alloc_budget == 0) {
        alloc_failed = 1;
        return NULL;
    }
    if (alloc_budget > 0)
        alloc_budget--;
    return malloc(size);
}

static void test_alloc_failures(const char *sample)
{
    json_set_alloc_funcs(failing_malloc, free);
    int all_clean = 1, loaded = 0;
    long i;
    for (i = 0; i < 5000 && !loaded; i++) {
        struct sbx_config cfg;
        sbx_err_t err = {0};
        alloc_budget = -1;
        if (config_init_defaults(&cfg) < 0) {
            all_clean = 0;
            break;
        }
        alloc_budget = i;
        alloc_failed = 0;
        int ret = config_load_file(&cfg, sample, schemas, NSCHEMAS, &err);
        alloc_budget = -1;
        if (ret == 0 && !alloc_failed)
            loaded = 1;
        else if (ret == 0 || !err.msg || !strstr(err.msg, "out of memory"))
            all_clean = 0; /* a failure must surface as an error, an error as OOM */
        if (ret < 0 && cfg.max_sessions != 1024)
            all_clean = 0;
        config_deinit(&cfg);
        err_clear(&err);
    }
    alloc_budget = -1;
    json_set_alloc_funcs(malloc, free);
    printf("      (%ld jansson allocation failure points)\n", i - 1);
    test_cond("every jansson allocation failure is reported as OOM", all_clean);
    test_cond("the sample eventually loads with enough memory", loaded);
}

int main(int argc, char **argv)
{
    load_schemas();
    const char *datadir = argc > 1 ? argv[1] : getenv("SBX_TESTDATA");
    if (!datadir || !*datadir)
        datadir = "tests/data";
    char sample_buf[1024];
    const char *sample = getenv("SBX_SAMPLE_CONFIG");
    if (!sample || !*sample) {
        snprintf(sample_buf, sizeof(sample_buf), "%s/../../config/sbxd.yaml", datadir);
        sample = sample_buf;
    }

    test_defaults();
    test_core_keys();
    test_sizes();
    test_output_slack();
    test_shutdown_drain();
    test_modes();
    test_providers();
    test_errors();
    test_env();
    test_nesting();
    test_sample(sample);
    test_cond("valid data cases found", run_dir(datadir, "valid") >= 5);
    test_cond("invalid data cases found", run_dir(datadir, "invalid") >= 20);
    test_alloc_failures(sample);
    return test_report();
}
