/*
 * dk_kit.c - the Docker provider tests' shared helpers (dk_kit.h).
 */
#include "dk_kit.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char *kit_sbxd, *kit_host;
static long kit_timeout_s = 60;

void dk_kit_init(const char *sbxd_bin, const char *docker_host)
{
    kit_sbxd = sbxd_bin;
    kit_host = docker_host;
}

void dk_engine_timeout(long seconds)
{
    kit_timeout_s = seconds;
}

int dk_main_args(int argc, char **argv, const char **sbxd_bin, const char **bdir,
                 const char **tmpdir, const char **docker_host)
{
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc < 4) {
        fprintf(stderr, "usage: %s SBXD BUILD_DIR TMPDIR\n", name);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    *sbxd_bin = argv[1];
    *bdir = argv[2];
    *tmpdir = argv[3];
    *docker_host = getenv("DOCKER_HOST");
    if (!*docker_host || strncmp(*docker_host, "unix://", 7) != 0) {
        printf("DOCKER_HOST must be unix://...\n0 passed, 1 failed\n");
        return 1;
    }
    dk_kit_init(*sbxd_bin, *docker_host);
    return 0;
}

/* ---- the engine, directly ---- */

size_t dk_buf_write(char *p, size_t s, size_t n, void *u)
{
    struct dk_buf *b = u;
    size_t k = s * n;
    char *nd = realloc(b->d, b->n + k + 1);
    if (!nd)
        return 0;
    b->d = nd;
    memcpy(b->d + b->n, p, k);
    b->n += k;
    b->d[b->n] = '\0';
    return k;
}

long dk_engine(const char *method, const char *path, const char *body, json_t **out)
{
    CURL *e = curl_easy_init();
    char url[2048];
    snprintf(url, sizeof(url), "http://localhost/v1.41%s", path);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, kit_host + 7); /* after unix:// */
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, kit_timeout_s);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    /* a POST without a body still sends an empty one (Content-Length: 0) */
    if (body || strcmp(method, "POST") == 0)
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
    struct dk_buf b = {0};
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, dk_buf_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    long status = 0;
    if (curl_easy_perform(e) == CURLE_OK)
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(e);
    if (out)
        *out = b.d ? json_loads(b.d, JSON_DECODE_ANY, NULL) : NULL;
    free(b.d);
    return status;
}

json_t *dk_inspect(const char *cid)
{
    char p[256];
    snprintf(p, sizeof(p), "/containers/%s/json", cid);
    json_t *j = NULL;
    dk_engine("GET", p, NULL, &j);
    return j;
}

/* ---- sbxd instances ---- */

pid_t dk_sbxd_start(const char *cfg, const char *sock, const char *log, const char *level)
{
    unlink(sock);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("SBXD_SOCKET", sock, 1);
        const char *argv[6];
        int n = 0;
        argv[n++] = "sbxd";
        if (cfg) {
            argv[n++] = "-c";
            argv[n++] = cfg;
        }
        if (level) {
            argv[n++] = "--log-level";
            argv[n++] = level;
        }
        argv[n] = NULL;
        execv(kit_sbxd, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        struct stat st;
        if (stat(sock, &st) == 0)
            break;
        usleep(25000);
    }
    return pid;
}

void dk_sbxd_stop(pid_t pid, int sig, int wait_ms)
{
    if (pid <= 0) /* never kill(0, ...): that is our own process group */
        return;
    kill(pid, sig);
    for (int waited = 0; waited < wait_ms; waited += 25) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return;
        usleep(25000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

conn *dk_connect(const char *sock, int ms)
{
    for (int waited = 0; waited < ms; waited += 50) {
        conn *c = cn_open(sock);
        if (c)
            return c;
        usleep(50000);
    }
    return NULL;
}

pid_t dk_start_other(const char *tmpdir, const char *bdir, const char *host,
                     const char *name, const char *docker_extra, char *osock, size_t cap)
{
    char ocfg[600], olog[600];
    snprintf(osock, cap, "%.80s/%.10s.sock", tmpdir, name);
    snprintf(ocfg, sizeof(ocfg), "%s/%s.yaml", tmpdir, name);
    snprintf(olog, sizeof(olog), "%s/sbxd-%s.log", tmpdir, name);
    FILE *f = fopen(ocfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "socket:\n  mode: \"0666\"\n"
            "providers:\n"
            "  docker:\n"
            "    host: %s\n"
            "    agent_path: %s/sbx-init\n"
            "    image: sbx-test/busybox\n"
            "    network: none\n"
            "    memory: 256m\n"
            "    labels:\n      org.sbxd.managed: \"true\"\n"
            "%s",
            host, bdir, docker_extra);
    fclose(f);
    return dk_sbxd_start(ocfg, osock, olog, "debug");
}

conn *dk_connect_ready(const char *sock)
{
    conn *c = dk_connect(sock, 5000);
    if (c)
        dk_docker_up(c, 10000);
    return c;
}

int dk_docker_up(conn *c, int ms)
{
    for (int waited = 0; c && waited < ms; waited += 100) {
        json_t *r = cn_call(c, "daemon.info", NULL);
        char *s = r ? json_dumps(r, 0) : NULL;
        int up = s && strstr(s, "\"api_version\"");
        free(s);
        json_decref(r);
        if (up)
            return 1;
        usleep(100000);
    }
    return 0;
}

/* ---- calls ---- */

json_t *dk_create(conn *c, const char *id, json_t *extra, int call_ms)
{
    json_t *p = json_pack("{s:s, s:s}", "id", id, "provider", "docker");
    if (extra) {
        json_object_update(p, extra);
        json_decref(extra);
    }
    return cn_call_t(c, call_ms, "sandbox.create", p);
}

json_t *dk_exec(conn *c, const char *sb, const char *cmd, int call_ms)
{
    return cn_call_t(c, call_ms, "process.exec",
                     json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
}

int dk_exec_is(conn *c, const char *sb, const char *cmd, const char *want, int call_ms)
{
    json_t *r = dk_exec(c, sb, cmd, call_ms);
    int ok = res_of(r) && res_int(r, "exit_code") == 0 &&
             (!want || strcmp(res_str(r, "stdout"), want) == 0);
    if (!ok) {
        char *s = r ? json_dumps(r, JSON_COMPACT) : NULL;
        printf("      exec %s -> %.600s\n", cmd, s ? s : "(no answer)");
        free(s);
    }
    json_decref(r);
    return ok;
}

void dk_destroy(conn *c, const char *id, int call_ms)
{
    json_decref(cn_call_t(c, call_ms, "sandbox.destroy", json_pack("{s:s}", "id", id)));
}

const char *dk_meta(json_t *resp, const char *key)
{
    const char *s = json_string_value(
        json_object_get(json_object_get(res_of(resp), "metadata"), key));
    return s ? s : "";
}
