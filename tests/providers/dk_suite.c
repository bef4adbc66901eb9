/*
 * dk_suite.c - the main Docker suite's shared sbxd, config and calls
 * (dk_suite.h), linked into ptest_docker and its parts by feature.
 */

#include "dk_suite.h"

#include <curl/curl.h>
#include <signal.h>
#include <sys/stat.h>

const char *sbxd_bin, *bdir, *tmpdir;
const char *docker_host, *tls_host, *tls_ca, *tls_cert, *tls_key;
int private_engine;
char main_sock[108], main_cfg[512], main_log[512];
pid_t main_pid;
static double suite_t0;

/* ---- the engine, directly --------------------------------------------------------- */

/* Does the container's process table (docker top) show a command matching s? */
int top_has(const char *cid, const char *s)
{
    char p[256];
    snprintf(p, sizeof(p), "/containers/%s/top?ps_args=-eo%%20pid,args", cid);
    json_t *j = NULL;
    long st = dk_engine("GET", p, NULL, &j);
    int found = 0;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(j, "Processes"), i, row) {
        size_t k;
        json_t *col;
        json_array_foreach(row, k, col)
            if (json_is_string(col) && strstr(json_string_value(col), s))
                found = 1;
    }
    json_decref(j);
    return st == 200 ? found : -1;
}

/* ---- sbxd instances -----------------------------------------------------------------
 */

pid_t start_sbxd(const char *cfg, const char *sock, const char *log)
{
    return dk_sbxd_start(cfg, sock, log, "debug");
}

void stop_sbxd(pid_t pid, int sig)
{
    dk_sbxd_stop(pid, sig, 5000);
}

void write_config(const char *path, const char *host, const char *extra)
{
    FILE *f = fopen(path, "w");
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "limits:\n  max_sandboxes_per_uid: 64\n  session_output_high: 8M\n"
            "  session_output_hard: 64M\n"
            "providers:\n"
            "  duktape:\n    pool_size: 1\n"
            "  docker:\n"
            "    host: %s\n"
            "    api_version: \"1.43\"\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    network: none\n"
            "    memory: 512m\n"
            "    memory_swap: 512m\n"
            "    pids_limit: 256\n"
            "    cap_drop: [ALL]\n"
            "    security_opt: [no-new-privileges]\n"
            "    ulimits:\n      nofile: {soft: 4096, hard: 4096}\n"
            "    tmpfs:\n      /tmp: \"rw,nosuid,nodev,size=64m\"\n"
            "    labels:\n      org.sbxd.managed: \"true\"\n"
            "    command_timeout_ms: 60000\n"
            "%s",
            host, bdir, extra ? extra : "");
    fclose(f);
}

/* A second sbxd named `name` (its files in tmpdir) for the engine at host, with
 * extra provider config; a connection to it (NULL if it does not answer). */
conn *start_other(const char *name, const char *host, const char *extra, pid_t *pid)
{
    char cfg[600], sock[108], log[600];
    snprintf(cfg, sizeof(cfg), "%s/%s.yaml", tmpdir, name);
    snprintf(sock, sizeof(sock), "%.80s/%.10s.sock", tmpdir, name);
    snprintf(log, sizeof(log), "%s/sbxd-%s.log", tmpdir, name);
    write_config(cfg, host, extra);
    *pid = start_sbxd(cfg, sock, log);
    conn *c = NULL;
    for (int i = 0; i < 100 && !c; i++) {
        c = cn_open(sock);
        if (!c)
            usleep(50000);
    }
    return c;
}

/* ---- helpers -------------------------------------------------------------------------
 */

conn *connect_main(void)
{
    return dk_connect(main_sock, 5000);
}

/* Docker's create with a 30 min lifetime unless extra says otherwise. */
json_t *create(conn *c, const char *id, json_t *extra)
{
    json_t *p = json_pack("{s:i}", "timeout_ms", 1800000);
    if (extra) {
        json_object_update(p, extra);
        json_decref(extra);
    }
    return dk_create(c, id, p, 120000);
}

const char *cid_of(json_t *resp)
{
    return dk_meta(resp, "container_id");
}

json_t *exec_t(conn *c, const char *sb, const char *cmd, int timeout_ms)
{
    return dk_exec(c, sb, cmd, timeout_ms + 30000);
}

json_t *exec(conn *c, const char *sb, const char *cmd)
{
    return exec_t(c, sb, cmd, 30000);
}

int exec_ok(conn *c, const char *sb, const char *cmd, const char *want_stdout)
{
    return dk_exec_is(c, sb, cmd, want_stdout, 60000);
}

void destroy(conn *c, const char *id)
{
    dk_destroy(c, id, 60000);
}

/* metadata.channel of a sandbox object in a response, or "". */
const char *channel_of(json_t *resp)
{
    return dk_meta(resp, "channel");
}

const char *status_of(conn *c, const char *id)
{
    static char buf[32];
    json_t *r = cn_call(c, "sandbox.get", json_pack("{s:s}", "id", id));
    snprintf(buf, sizeof(buf), "%s", res_str(r, "status"));
    json_decref(r);
    return buf;
}

int wait_status(conn *c, const char *id, const char *want, int ms)
{
    double until = now_ms() + ms;
    while (now_ms() < until) {
        if (strcmp(status_of(c, id), want) == 0)
            return 1;
        usleep(50000);
    }
    printf("      %s: status %s, wanted %s\n", id, status_of(c, id), want);
    return 0;
}

/* Sends a call without waiting; its answer comes from await_id(). */
int send_call(conn *c, const char *method, json_t *params)
{
    int id = ++c->next_id;
    json_t *m = json_pack("{s:s, s:i, s:s, s:o}", "jsonrpc", "2.0", "id", id, "method",
                          method, "params", params);
    char *t = json_dumps(m, JSON_COMPACT);
    cn_send_raw(c, t, strlen(t));
    cn_send_raw(c, "\n", 1);
    free(t);
    json_decref(m);
    return id;
}

/* The answer to call id within ms, or NULL; other messages go to c->notes. */
json_t *await_id(conn *c, int id, int ms)
{
    double until = now_ms() + ms;
    while (now_ms() < until) {
        json_t *m = cn_read(c, 500);
        if (m && json_integer_value(json_object_get(m, "id")) == id)
            return m;
        if (m)
            json_array_append_new(c->notes, m);
    }
    return NULL;
}

/* An op's answer: done, or failed with a provider error (-32002 engine not
 * reached, -32006 the engine's refusal) naming Docker. */
int op_answer_clear(json_t *ans)
{
    if (!ans)
        return 0;
    if (!json_object_get(ans, "error"))
        return res_of(ans) != NULL;
    int code = err_code(ans);
    const char *m =
        json_string_value(json_object_get(json_object_get(ans, "error"), "message"));
    return (code == -32002 || code == -32006) && m && m[0];
}

void print_answer(const char *what, json_t *ans, double ms)
{
    char *t = ans ? json_dumps(ans, JSON_COMPACT) : NULL;
    printf("      %s after %.0f ms: %.300s\n", what, ms, t ? t : "(no answer)");
    free(t);
}

int has_note(conn *c, const char *method, const char *key, const char *val)
{
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        if (strcmp(json_string_value(json_object_get(m, "method")), method) != 0)
            continue;
        const char *v =
            json_string_value(json_object_get(json_object_get(m, "params"), key));
        if (!val || (v && strcmp(v, val) == 0))
            return 1;
    }
    return 0;
}

int restarted_ok(json_t *r, const char *want_stdout)
{
    int ok = res_of(r) && res_int(r, "exit_code") == 0 &&
             strcmp(res_str(r, "stdout"), want_stdout) == 0 &&
             json_is_true(json_object_get(res_of(r), "retried")) &&
             json_is_true(json_object_get(res_of(r), "sandbox_restarted"));
    if (!ok) {
        char *t = json_dumps(r, JSON_COMPACT);
        printf("      %.500s\n", t ? t : "?");
        free(t);
    }
    return ok;
}

/* Waits (up to 10 s) for the docker provider of the sbxd on c to be available. */
int docker_up(conn *c)
{
    int up = 0;
    for (int i = 0; i < 100 && c && !up; i++) {
        json_t *r = cn_call(c, "daemon.info", NULL);
        size_t k;
        json_t *p;
        json_array_foreach(json_object_get(res_of(r), "providers"), k, p) {
            if (strcmp(json_string_value(json_object_get(p, "name")), "docker") == 0 &&
                json_is_true(json_object_get(p, "available")))
                up = 1;
        }
        json_decref(r);
        if (!up)
            usleep(100000);
    }
    return up;
}

/* ---- a part's main ----------------------------------------------------------------- */

int dk_suite_start(int argc, char **argv, const char *name, conn **cp)
{
    *cp = NULL;
    int st = dk_main_args(argc, argv, &sbxd_bin, &bdir, &tmpdir, &docker_host);
    if (st)
        return st;
    tls_host = getenv("DOCKER_TLS_HOST");
    tls_ca = getenv("DOCKER_TLS_CA");
    tls_cert = getenv("DOCKER_TLS_CERT");
    tls_key = getenv("DOCKER_TLS_KEY");
    private_engine = getenv("SBX_DOCKERD_PRIVATE") && atoi(getenv("SBX_DOCKERD_PRIVATE"));
    curl_global_init(CURL_GLOBAL_DEFAULT);
    snprintf(main_sock, sizeof(main_sock), "%.80s/%.16s.sock", tmpdir, name);
    snprintf(main_cfg, sizeof(main_cfg), "%s/%s.yaml", tmpdir, name);
    snprintf(main_log, sizeof(main_log), "%s/sbxd-%s.log", tmpdir, name);
    write_config(main_cfg, docker_host, NULL);
    main_pid = start_sbxd(main_cfg, main_sock, main_log);
    conn *c = connect_main();
    if (!c) {
        printf("sbxd did not start (log %s)\n0 passed, 1 failed\n", main_log);
        return 1;
    }
    /* the first ping is asynchronous */
    dk_docker_up(c, 5000);
    suite_t0 = now_ms();
    *cp = c;
    return 0;
}

void dk_suite_end(conn *c)
{
    printf("    total %.1f s\n", (now_ms() - suite_t0) / 1000);
    cn_close(c);
    stop_sbxd(main_pid, SIGTERM);
    curl_global_cleanup();
}
