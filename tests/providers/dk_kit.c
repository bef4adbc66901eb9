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

json_t *dk_as_uid(uid_t uid, gid_t gid, const char *sock, const char *method,
                  json_t *params, int call_ms)
{
    int fds[2];
    if (pipe(fds) < 0) {
        json_decref(params);
        return NULL;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (uid != 0 && (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0))
            _exit(3);
        conn *c = cn_open(sock);
        json_t *r =
            c ? cn_call_t(c, call_ms, method, params)
              : json_pack("{s:{s:i, s:s}}", "error", "code", 2, "message", "connect");
        char *t = r ? json_dumps(r, JSON_COMPACT) : NULL;
        size_t n = t ? strlen(t) : 0, off = 0;
        while (off < n) {
            ssize_t w = write(fds[1], t + off, n - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        _exit(0);
    }
    json_decref(params);
    close(fds[1]);
    struct dk_buf b = {0};
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0)
        dk_buf_write(buf, 1, (size_t)n, &b);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    json_t *r = b.d ? json_loads(b.d, 0, NULL) : NULL;
    free(b.d);
    return r;
}

int dk_code_as_uid(uid_t uid, const char *sock, const char *method, json_t *params)
{
    json_t *r = dk_as_uid(uid, uid, sock, method, params, 15000);
    int code = r ? err_code(r) : 2;
    json_decref(r);
    return code;
}

long dk_rss_kb(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
    FILE *f = fopen(p, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}
