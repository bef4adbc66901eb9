/*
 * pt_kit.c - the provider tests' shared helpers (pt_kit.h).
 */
#include "pt_kit.h"

#include <arpa/inet.h>
#include <grp.h>
#include <netinet/in.h>
#include <sys/wait.h>

/* Reads fd to its end (or until deadline, 0: none) into a malloc'd,
 * NUL-terminated buffer. */
static char *read_all(int fd, double deadline, size_t *len_out)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (deadline > 0) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            int left = (int)(deadline - now_ms());
            if (left <= 0 || poll(&p, 1, left) <= 0)
                break;
        }
        if (cap - len < 4096)
            buf = realloc(buf, cap *= 2);
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    if (len_out)
        *len_out = len;
    return buf;
}

json_t *pt_as_uid(uid_t uid, gid_t gid, const char *sock, const char *method,
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
    size_t n = 0;
    char *buf = read_all(fds[0], 0, &n);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    json_t *r = n ? json_loads(buf, 0, NULL) : NULL;
    free(buf);
    return r;
}

int pt_code_as_uid(uid_t uid, const char *sock, const char *method, json_t *params)
{
    json_t *r = pt_as_uid(uid, uid, sock, method, params, 15000);
    int code = r ? err_code(r) : 2;
    json_decref(r);
    return code;
}

char *pt_tcp_talk(int port, const char *req, size_t req_len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        send(fd, req, req_len, MSG_NOSIGNAL) < 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *buf = read_all(fd, now_ms() + 15000, NULL);
    close(fd);
    return buf;
}

static char *dechunk(const char *b, size_t n, size_t *out_n)
{
    char *out = malloc(n + 1);
    size_t o = 0, i = 0;
    while (i < n) {
        size_t len = strtoul(b + i, NULL, 16);
        const char *nl = memchr(b + i, '\n', n - i);
        if (!nl || len == 0)
            break;
        i = (size_t)(nl - b) + 1;
        if (i + len > n)
            len = n - i;
        memcpy(out + o, b + i, len);
        o += len;
        i += len + 2;
    }
    out[o] = '\0';
    *out_n = o;
    return out;
}

json_t *pt_http_json(int port, const char *method, const char *path, json_t *body)
{
    char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    size_t bl = b ? strlen(b) : 0, cap = 512 + strlen(path) + bl;
    char *req = malloc(cap);
    int hl = snprintf(req, cap,
                      "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                      method, path, bl, b ? b : "");
    free(b);
    char *buf = hl > 0 ? pt_tcp_talk(port, req, (size_t)hl) : NULL;
    free(req);
    if (!buf)
        return NULL;
    size_t len = strlen(buf);
    char *sep = strstr(buf, "\r\n\r\n");
    json_t *v = NULL;
    if (sep) {
        char *bodyp = sep + 4;
        size_t n = len - (size_t)(bodyp - buf);
        char *te = strcasestr(buf, "transfer-encoding: chunked");
        if (te && te < sep) {
            size_t dn;
            char *d = dechunk(bodyp, n, &dn);
            v = json_loadb(d, dn, 0, NULL);
            free(d);
        } else {
            v = json_loadb(bodyp, n, 0, NULL);
        }
    }
    free(buf);
    return v;
}

void pt_sha256_file(const char *file, char out[65])
{
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "sha256sum '%s' 2>/dev/null", file);
    FILE *f = popen(cmd, "r");
    out[0] = '\0';
    if (f) {
        if (!fgets(out, 65, f))
            out[0] = '\0';
        pclose(f);
    }
}

json_t *pt_provider_of(json_t *info, const char *name)
{
    size_t i;
    json_t *p, *found = NULL;
    json_array_foreach(json_object_get(res_of(info), "providers"), i, p)
        if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0)
            found = p;
    return found;
}

long pt_rss_kb(pid_t pid)
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
