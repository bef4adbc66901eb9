/*
 * md_kit.c - the main Modal suite's shared helpers (md_kit.h).
 */
#include "md_kit.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/wait.h>

const char *SOCK;
int CPORT;

int md_main_args(int argc, char **argv)
{
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc < 3) {
        fprintf(stderr, "usage: %s SOCKET CONTROL_PORT\n", name);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    SOCK = argv[1];
    CPORT = atoi(argv[2]);
    return 0;
}

conn *md_connect(void)
{
    conn *c = cn_open(SOCK);
    if (!c)
        printf("sbxd does not answer at %s\n0 passed, 1 failed\n", SOCK);
    return c;
}

/* Returns the parsed JSON body (new ref) or NULL. body is stolen. */
json_t *ctl(const char *method, const char *path, json_t *body)
{
    return pt_http_json(CPORT, method, path, body);
}

json_t *fake_sandbox(const char *modal_id)
{
    json_t *all = ctl("GET", "/sandboxes", NULL), *found = NULL;
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
        if (modal_id &&
            strcmp(json_string_value(json_object_get(s, "sandbox_id")), modal_id) == 0)
            found = json_incref(s);
    json_decref(all);
    return found;
}

/* The last exec whose argv, joined with spaces, contains needle. */
json_t *fake_exec(const char *needle)
{
    json_t *all = ctl("GET", "/execs", NULL), *found = NULL;
    size_t i, j;
    json_t *e, *a;
    json_array_foreach(all, i, e) {
        char line[8192] = "";
        size_t o = 0;
        json_array_foreach(json_object_get(e, "command"), j, a) {
            o += (size_t)snprintf(line + o, o < sizeof(line) ? sizeof(line) - o : 0,
                                  "%s ", json_string_value(a));
            if (o >= sizeof(line))
                break;
        }
        if (strstr(line, needle)) {
            json_decref(found);
            found = json_incref(e);
        }
    }
    json_decref(all);
    return found;
}

int calls_count(const char *method, int code)
{
    char path[128];
    snprintf(path, sizeof(path), "/calls?method=%s", method);
    json_t *all = ctl("GET", path, NULL);
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(all, i, c)
        if (code < 0 || json_integer_value(json_object_get(c, "code")) == code)
            n++;
    json_decref(all);
    return n;
}

const char *meta_str(json_t *resp, const char *k)
{
    const char *s =
        json_string_value(json_object_get(json_object_get(res_of(resp), "metadata"), k));
    return s ? s : "";
}

json_int_t meta_int(json_t *resp, const char *k)
{
    return json_integer_value(
        json_object_get(json_object_get(res_of(resp), "metadata"), k));
}

int meta_true(json_t *resp, const char *k)
{
    return json_is_true(json_object_get(json_object_get(res_of(resp), "metadata"), k));
}

json_t *sb_get(conn *c, const char *id)
{
    return cn_call(c, "sandbox.get", json_pack("{s:s}", "id", id));
}

char *modal_id_of(conn *c, const char *id)
{
    json_t *r = sb_get(c, id);
    char *s = strdup(meta_str(r, "sandbox_id"));
    json_decref(r);
    return s;
}

json_t *fake_sandbox_of(conn *c, const char *id)
{
    char *mid = modal_id_of(c, id);
    json_t *s = fake_sandbox(mid);
    free(mid);
    return s;
}

char *fake_root(conn *c, const char *id)
{
    json_t *s = fake_sandbox_of(c, id);
    const char *root = json_string_value(json_object_get(s, "root"));
    char *out = root ? strdup(root) : NULL;
    json_decref(s);
    return out;
}

json_t *run(conn *c, const char *sb, json_t *cmd, json_t *extra)
{
    json_t *p = json_pack("{s:s, s:o}", "sandbox", sb, "command", cmd);
    if (extra) {
        json_object_update(p, extra);
        json_decref(extra);
    }
    return cn_call_t(c, LONG_MS, "process.exec", p);
}

json_t *sh(conn *c, const char *sb, const char *cmd)
{
    return run(c, sb, json_string(cmd), NULL);
}

int out_is(json_t *resp, const char *want)
{
    const char *s = res_str(resp, "stdout");
    int ok = strcmp(s, want) == 0;
    if (!ok)
        printf("      stdout: \"%s\" (want \"%s\"), stderr: \"%s\", error: %s\n", s, want,
               res_str(resp, "stderr"),
               json_string_value(json_object_get(res_of(resp), "error"))
                   ? json_string_value(json_object_get(res_of(resp), "error"))
                   : (json_object_get(resp, "error")
                          ? json_dumps(json_object_get(resp, "error"), 0)
                          : "null"));
    return ok;
}

int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int pid_alive(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

long read_long_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long v = 0;
    if (fscanf(f, "%ld", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

void errmsg(json_t *resp)
{
    json_t *e = json_object_get(resp, "error");
    if (e) {
        char *s = json_dumps(e, JSON_COMPACT);
        printf("      error: %s\n", s);
        free(s);
    }
}

int count_notes(conn *c, const char *method, const char *sandbox)
{
    int n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), method) == 0 &&
            (!sandbox ||
             strcmp(json_string_value(json_object_get(p, "sandbox")), sandbox) == 0))
            n++;
    }
    return n;
}

/* The fake's record of image id, or NULL (the caller frees it). */
json_t *fake_image(const char *image_id)
{
    json_t *imgs = ctl("GET", "/images", NULL), *found = NULL;
    size_t i;
    json_t *im;
    json_array_foreach(imgs, i, im)
        if (image_id &&
            strcmp(json_string_value(json_object_get(im, "image_id")), image_id) == 0)
            found = json_incref(im);
    json_decref(imgs);
    return found;
}

json_t *spawn_sh(conn *c, const char *sb, const char *cmd)
{
    return cn_call_t(c, LONG_MS, "process.spawn",
                     json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
}

/* Lines "line1\n".."lineN\n" printed over secs seconds. */
void lines_cmd(char *buf, size_t n, int lines, double secs)
{
    snprintf(buf, n,
             "i=1; while [ $i -le %d ]; do echo line$i; i=$((i+1)); sleep %.2f; done",
             lines, secs / lines);
}

/* The stdout of sb's pid from the notifications seen so far (NUL-terminated). */
size_t sb_output(conn *c, const char *sb, int pid, char *out, size_t max)
{
    size_t n = 0, i;
    json_t *m;
    if (out && max)
        out[0] = '\0';
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") !=
                0 ||
            json_integer_value(json_object_get(p, "pid")) != pid ||
            strcmp(json_string_value(json_object_get(p, "sandbox")), sb) != 0 ||
            strcmp(json_string_value(json_object_get(p, "stream")), "stdout") != 0)
            continue;
        const char *d = json_string_value(json_object_get(p, "data"));
        size_t l = json_string_length(json_object_get(p, "data"));
        if (out && d && n + l < max) {
            memcpy(out + n, d, l);
            out[n + l] = '\0';
        }
        n += d ? l : 0;
    }
    return n;
}

/* Reads notifications until sb's pid has printed something (the exec really runs). */
int await_output(conn *c, const char *sb, int pid, int timeout_ms)
{
    double deadline = now_ms() + timeout_ms;
    while (sb_output(c, sb, pid, NULL, 0) == 0 && now_ms() < deadline) {
        json_t *m = cn_read(c, 200);
        if (m && json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    return sb_output(c, sb, pid, NULL, 0) > 0;
}

void outage_start(double secs, const char *mode)
{
    json_decref(
        ctl("POST", "/outage", json_pack("{s:f, s:s}", "seconds", secs, "mode", mode)));
}

pid_t spawn_sbxd(const char *cmd, const char *sock)
{
    unlink(sock);
    char logp[600];
    snprintf(logp, sizeof(logp), "%s.log", sock);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        setenv("SBXD_SOCKET", sock, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    /* Ready when it accepts a connection: the socket file exists a moment
     * before sbxd listens on it, and a test that connected in that moment
     * failed under load. */
    for (int i = 0; i < 400; i++) {
        conn *probe = cn_open(sock);
        if (probe) {
            cn_close(probe);
            return pid;
        }
        usleep(50000);
    }
    return pid;
}

int stop_sbxd(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
