/*
 * own_kit.c - an sbxd of the test's own (own_kit.h).
 */
#include "own_kit.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

struct own_sbxd own;

const char own_base_yaml[] = "socket:\n"
                             "  mode: \"0666\"\n"
                             "providers:\n"
                             "  duktape:\n"
                             "    pool_size: 1\n"
                             "  docker:\n"
                             "    enabled: false\n"
                             "  modal:\n"
                             "    enabled: false\n"
                             "limits:\n";

int own_init(const char *bdir, const char *tag)
{
    own.bdir = bdir;
    snprintf(own.dir, sizeof(own.dir), "/tmp/sbx-%s.XXXXXX", tag);
    if (!mkdtemp(own.dir))
        return 1;
    chmod(own.dir, 0755);
    snprintf(own.sock, sizeof(own.sock), "%s/sbxd.sock", own.dir);
    snprintf(own.cfg, sizeof(own.cfg), "%s/sbxd.yaml", own.dir);
    snprintf(own.log, sizeof(own.log), "%s/sbxd.log", own.dir);
    if (getuid() != 0) {
        printf("itest_%s: needs root (it connects as another uid)\n", tag);
        return 2;
    }
    return 0;
}

void own_cleanup(void)
{
    if (getenv("SBX_KEEP_TMP") == NULL) {
        unlink(own.sock);
        unlink(own.cfg);
        unlink(own.log);
        rmdir(own.dir);
    } else {
        printf("sbxd log: %s\n", own.log);
    }
}

int own_start(const char *limits)
{
    FILE *f = fopen(own.cfg, "w");
    if (!f)
        return -1;
    fprintf(f, "%s%s", own_base_yaml, limits);
    fclose(f);
    unlink(own.sock);
    own.pid = fork();
    if (own.pid == 0) {
        int fd = open(own.log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        char bin[512];
        snprintf(bin, sizeof(bin), "%s/sbxd", own.bdir);
        setenv("SBXD_SOCKET", own.sock, 1);
        execl(bin, "sbxd", "-c", own.cfg, "--log-level", "debug", (char *)NULL);
        _exit(127);
    }
    struct stat st;
    for (int i = 0; i < 800 && stat(own.sock, &st) != 0; i++)
        usleep(25000);
    return stat(own.sock, &st) == 0 ? 0 : -1;
}

int own_stop(void)
{
    if (own.pid <= 0)
        return 0;
    kill(own.pid, SIGTERM);
    int st = 0;
    waitpid(own.pid, &st, 0);
    own.pid = 0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("      sbxd exited with status %d\n", st);
        return -1;
    }
    return 0;
}

long own_status_kb(const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)own.pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, strlen(field)) == 0)
            kb = atol(line + strlen(field));
    if (f)
        fclose(f);
    return kb;
}

long own_rss_kb(void)
{
    return own_status_kb("VmRSS:");
}

int own_rss_meaningful(void)
{
    return !getenv("SBX_SANITIZED") && !getenv("SBX_VALGRIND");
}

const char *own_limit_of(json_t *resp)
{
    const char *s = json_string_value(json_object_get(
        json_object_get(json_object_get(resp, "error"), "data"), "limit"));
    return s ? s : "";
}

json_int_t own_usage_used(json_t *info, const char *limit)
{
    return json_integer_value(json_object_get(
        json_object_get(json_object_get(res_of(info), "usage"), limit), "used"));
}

void own_as_uid(uid_t uid, void (*fn)(char *res, size_t n), char *res, size_t n)
{
    int fds[2];
    memset(res, 0, n);
    if (pipe(fds) < 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (setgid(uid) < 0 || setuid(uid) < 0)
            _exit(3);
        char buf[256] = {0};
        fn(buf, n < sizeof(buf) ? n : sizeof(buf));
        if (write(fds[1], buf, n) < 0)
            _exit(4);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fds[0], res + got, n - got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fds[0]);
    waitpid(pid, NULL, 0);
}
