/*
 * ptest_modal_misc.c - what issue 20 left on Modal, against the local fake
 * (tests/modal/fake): fs.rename (a shell helper: the tool has no rename),
 * fs.watch (the tool's Watch), the ttl of sandbox.snapshot (and its clamp),
 * and stdin of a process re-adopted after an sbxd restart.
 *
 *   ptest_modal_misc SOCKET CONTROL_PORT
 *
 * SOCKET's sbxd runs the config modal.sh writes for this test (misc.yaml:
 * limits.fs_event_queue 4, fs_watches_per_sandbox 2, providers.modal
 * snapshot_ttl_s 600 and snapshot_ttl_max_s 3600). Environment:
 *   PTEST_SBXD_CMD  shell command that execs an sbxd with that config
 *                   (SBXD_SOCKET set by the test): the restart test
 *   PTEST_TMP       a scratch folder
 * The fake's files live under its sandbox root on this host, so renames are
 * checked there; its control port (GET /calls, /images, /execs) says what
 * reached Modal.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "itest.h"
#include "pt_kit.h"
#include "testhelp.h"

#define LONG_MS 120000
#define SB "mmisc"

static const char *SOCK;
static int CPORT;

/* ---- the fake's control port (GET, Connection: close) --------------------------- */

/* ---- sbxd helpers ------------------------------------------------------------- */

static json_t *call(conn *c, const char *m, json_t *p)
{
    return cn_call_t(c, LONG_MS, m, p);
}

static const char *feature_of(json_t *r)
{
    json_t *d = json_object_get(json_object_get(r, "error"), "data");
    const char *s = json_string_value(json_object_get(d, "feature"));
    return s ? s : "";
}

static json_t *sh(conn *c, const char *sb, const char *cmd)
{
    return call(c, "process.exec",
                json_pack("{s:s, s:s}", "sandbox", sb, "command", cmd));
}

static int out_is(json_t *r, const char *want)
{
    const char *s = res_str(r, "stdout");
    return s && !strcmp(s, want);
}

static json_t *mv(conn *c, const char *from, const char *to, int overwrite)
{
    json_t *p = json_pack("{s:s, s:s, s:s}", "sandbox", SB, "path", from, "to", to);
    if (overwrite >= 0)
        json_object_set_new(p, "overwrite", json_boolean(overwrite));
    return call(c, "fs.rename", p);
}

/* The fake's host folder of the sandbox (malloc'd), or NULL. */
static char *fake_root(conn *c, const char *id)
{
    json_t *r = call(c, "sandbox.get", json_pack("{s:s}", "id", id));
    const char *mid = json_string_value(
        json_object_get(json_object_get(res_of(r), "metadata"), "sandbox_id"));
    char *root = NULL;
    json_t *all = pt_http_json(CPORT, "GET", "/sandboxes", NULL);
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
        if (mid && !strcmp(json_string_value(json_object_get(s, "sandbox_id")), mid))
            root = strdup(json_string_value(json_object_get(s, "root")));
    json_decref(all);
    json_decref(r);
    return root;
}

static int host_exists(const char *root, const char *p)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s%s", root, p);
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- fs.rename -------------------------------------------------------------------- */

static void test_rename_ok(conn *c, const char *root)
{
    json_decref(sh(c, SB,
                   "mkdir -p mv/d1/sub mv/d2 mv/full && echo a > mv/f1 && echo b > mv/f2 "
                   "&& echo c > mv/full/x && echo s > mv/d1/sub/s"));
    json_t *r = mv(c, "/mv/f1", "/mv/f3", -1);
    test_cond("fs.rename of a file answers {path, to}",
              res_of(r) && !strcmp(res_str(r, "to"), "/mv/f3") &&
                  !strcmp(res_str(r, "path"), "/mv/f1"));
    json_decref(r);
    test_cond("... and the file moved (the fake's folder)",
              !host_exists(root, "/mv/f1") && host_exists(root, "/mv/f3"));
    r = mv(c, "/mv/f2", "/mv/f3", -1);
    json_decref(r);
    r = sh(c, SB, "cat mv/f3; ls mv");
    test_cond("fs.rename over an existing file replaces it (overwrite defaults to true)",
              out_is(r, "b\nd1\nd2\nf3\nfull\n"));
    json_decref(r);
    r = mv(c, "/mv/d1", "/mv/d2", 1);
    test_cond("fs.rename of a directory onto an empty directory replaces it",
              res_of(r) && host_exists(root, "/mv/d2/sub/s") &&
                  !host_exists(root, "/mv/d1") && !host_exists(root, "/mv/d2/d1"));
    json_decref(r);
    r = mv(c, "/mv/d2", "/mv/new dir ü", -1);
    test_cond("fs.rename of a directory to a new name with a space and unicode",
              res_of(r) && host_exists(root, "/mv/new dir ü/sub/s"));
    json_decref(r);
}

static void test_rename_errors(conn *c)
{
    struct {
        const char *from, *to;
        int overwrite;
        const char *want, *what;
    } cases[] = {
        {"/mv/nope", "/mv/x", -1, "ENOENT", "a missing source: ENOENT"},
        {"/mv/f3", "/mv/nodir/x", -1, "ENOENT", "a missing target directory: ENOENT"},
        {"/mv/f3", "/mv/f3/x", -1, "ENOTDIR", "a target under a file: ENOTDIR"},
        {"/mv/full", "/mv/f3", 0, "EEXIST", "overwrite false onto a file: EEXIST"},
        {"/mv/f3", "/mv/full", -1, "EISDIR", "a file onto a directory: EISDIR"},
        {"/mv/new dir ü", "/mv/full", -1, "ENOTEMPTY",
         "a directory onto a non-empty one: ENOTEMPTY"},
        {"/mv/full", "/mv/f3", 1, "ENOTDIR", "a directory onto a file: ENOTDIR"},
        {"/mv/full", "/mv/full/in", -1, "EINVAL", "a directory into itself: EINVAL"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *r = mv(c, cases[i].from, cases[i].to, cases[i].overwrite);
        const char *path = json_string_value(json_object_get(
            json_object_get(json_object_get(r, "error"), "data"), "path"));
        char name[160];
        snprintf(name, sizeof(name), "fs.rename, %s (-32010, as Docker)", cases[i].what);
        test_cond(name, err_code(r) == -32010 && !strcmp(err_errno(r), cases[i].want) &&
                            path && !strcmp(path, cases[i].from));
        if (err_code(r) != -32010 || strcmp(err_errno(r), cases[i].want))
            printf("      got %d %s\n", err_code(r), err_errno(r));
        json_decref(r);
    }
    json_t *r = sh(c, SB, "cat mv/f3 mv/full/x");
    test_cond("... and none of them changed anything", out_is(r, "b\nc\n"));
    json_decref(r);
    r = mv(c, "/mv/f3", "/mv/f3", 1);
    test_cond("fs.rename onto itself is a no-op (rename(2))", res_of(r) != NULL);
    json_decref(r);
}

/* Across file systems: a small tmpfs on the fake's side (the fake's sandbox
 * is a folder on this host), unmounted again right after. */
static void test_rename_exdev(conn *c, const char *root)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/mv/xd", root);
    mkdir(dir, 0755);
    if (getuid() != 0 || mount("none", dir, "tmpfs", 0, "size=1m") < 0) {
        test_skip("fs.rename across file systems: EXDEV", "cannot mount a tmpfs here");
        return;
    }
    json_t *r = mv(c, "/mv/f3", "/mv/xd/f3", -1);
    test_cond("fs.rename across file systems: -32010 EXDEV (never a copy)",
              err_code(r) == -32010 && !strcmp(err_errno(r), "EXDEV") &&
                  host_exists(root, "/mv/f3") && !host_exists(root, "/mv/xd/f3"));
    json_decref(r);
    if (umount2(dir, MNT_DETACH) < 0)
        printf("      umount %s: %s\n", dir, strerror(errno));
    rmdir(dir);
}

/* ---- fs.watch -------------------------------------------------------------------- */

static int event_is(json_t *n, json_int_t w, const char *path, const char *kind)
{
    json_t *p = json_object_get(n, "params");
    const char *m = json_string_value(json_object_get(n, "method"));
    const char *k = json_string_value(json_object_get(p, "kind"));
    const char *pp = json_string_value(json_object_get(p, "path"));
    return m && !strcmp(m, "fs.event") &&
           json_integer_value(json_object_get(p, "watch")) == w && k &&
           !strcmp(k, kind) && (!path || (pp && !strcmp(pp, path)));
}

/* Waits up to ms for an fs.event of watch w with kind (and path, unless
 * NULL); the notifications seen are taken out of c->notes. 1 if it came. */
static int await_event(conn *c, json_int_t w, const char *path, const char *kind, int ms)
{
    double deadline = now_ms() + ms;
    for (;;) {
        while (json_array_size(c->notes)) {
            json_t *n = json_incref(json_array_get(c->notes, 0));
            json_array_remove(c->notes, 0);
            int hit = event_is(n, w, path, kind);
            json_decref(n);
            if (hit)
                return 1;
        }
        int left = (int)(deadline - now_ms());
        if (left <= 0)
            return 0;
        json_t *m = cn_read(c, left < 200 ? left : 200);
        if (m && json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
}

static json_int_t watch(conn *c, const char *path, int recursive, json_t **res_out)
{
    json_t *r = call(c, "fs.watch",
                     json_pack("{s:s, s:s, s:b}", "sandbox", SB, "path", path,
                               "recursive", recursive));
    json_int_t w = json_integer_value(json_object_get(res_of(r), "watch"));
    if (res_out)
        *res_out = r;
    else
        json_decref(r);
    return w;
}

static void test_watch_events(conn *c)
{
    json_decref(sh(c, SB, "mkdir -p wt wr"));
    json_t *r = NULL;
    json_int_t w = watch(c, "/wt", 0, &r);
    test_cond("fs.watch of a directory answers {watch, path}",
              w > 0 && !strcmp(res_str(r, "path"), "/wt"));
    json_decref(r);
    /* The tool gives no sign when it is watching: fs.watch is answered once
     * Modal started it (PROTOCOL.md), so give it a moment. */
    usleep(1000000);
    json_decref(sh(c, SB, "echo x > wt/a"));
    test_cond("fs.event create for a new file",
              await_event(c, w, "/wt/a", "create", 10000));
    json_decref(sh(c, SB, "sleep 0.1; echo y >> wt/a"));
    test_cond("fs.event modify for a write", await_event(c, w, "/wt/a", "modify", 10000));
    json_decref(sh(c, SB, "rm wt/a"));
    test_cond("fs.event delete for a removal",
              await_event(c, w, "/wt/a", "delete", 10000));
    json_int_t wr = watch(c, "/wr", 1, NULL);
    usleep(1000000);
    json_decref(sh(c, SB, "mkdir -p wr/sub && sleep 0.3 && echo z > wr/sub/deep"));
    test_cond("recursive: fs.event create deep in a directory made after the watch",
              wr > 0 && await_event(c, wr, "/wr/sub/deep", "create", 10000));
    r = call(c, "fs.watch", json_pack("{s:s, s:s}", "sandbox", SB, "path", "/mv"));
    json_t *d = json_object_get(json_object_get(r, "error"), "data");
    test_cond("a third watch is past limits.fs_watches_per_sandbox (2): -32005",
              err_code(r) == -32005 &&
                  !strcmp(json_string_value(json_object_get(d, "limit")),
                          "fs_watches_per_sandbox") &&
                  json_integer_value(json_object_get(d, "max")) == 2);
    json_decref(r);
    /* 40 files at once against a queue of 4 (limits.fs_event_queue). */
    json_decref(sh(c, SB, "for i in $(seq 40); do : > wt/n$i; done"));
    test_cond("more events than limits.fs_event_queue: an overflow event",
              await_event(c, w, "/wt", "overflow", 10000));
    r = call(c, "fs.unwatch", json_pack("{s:s, s:I}", "sandbox", SB, "watch", w));
    test_cond("fs.unwatch answers", res_of(r) != NULL);
    json_decref(r);
    r = call(c, "fs.unwatch", json_pack("{s:s, s:I}", "sandbox", SB, "watch", w));
    test_cond("fs.unwatch of an unknown watch: -32602", err_code(r) == -32602);
    json_decref(r);
    usleep(300000);
    json_array_clear(c->notes);
    json_decref(sh(c, SB, "echo q > wt/after"));
    test_cond("after fs.unwatch no event comes",
              !await_event(c, w, "/wt/after", "create", 1500));
    json_decref(
        call(c, "fs.unwatch", json_pack("{s:s, s:I}", "sandbox", SB, "watch", wr)));
}

/* Every Watch exec the fake ran: the tool with a Watch command, on the router,
 * and ended once unwatched (its stdin closed, the SDK's way to stop it). */
static void test_watch_transport(void)
{
    int n = 0, router = 0, ended = 0;
    for (int tries = 0; tries < 50; tries++) {
        n = router = ended = 0;
        json_t *all = pt_http_json(CPORT, "GET", "/execs", NULL);
        size_t i;
        json_t *e;
        json_array_foreach(all, i, e) {
            const char *a1 =
                json_string_value(json_array_get(json_object_get(e, "command"), 1));
            if (!a1 || !strstr(a1, "\"Watch\""))
                continue;
            n++;
            router += !strcmp(json_string_value(json_object_get(e, "via")), "router");
            ended += !json_is_null(json_object_get(e, "exit_code"));
        }
        json_decref(all);
        if (n && ended == n)
            break;
        usleep(100000);
    }
    printf("      the fake ran %d Watch execs, %d on the router, %d ended\n", n, router,
           ended);
    test_cond("the fake's log: each watch is the tool's Watch on the router, and each "
              "ended after fs.unwatch",
              n >= 2 && router == n && ended == n);
}

/* The fake's last Watch exec of path: 1 ended, 0 running, -1 none. */
static int watch_ended(const char *path)
{
    char q[300];
    snprintf(q, sizeof(q), "\"path\":\"%s\"", path);
    json_t *all = pt_http_json(CPORT, "GET", "/execs", NULL), *e;
    size_t i;
    int ended = -1;
    json_array_foreach(all, i, e) {
        const char *a1 =
            json_string_value(json_array_get(json_object_get(e, "command"), 1));
        if (a1 && strstr(a1, "\"Watch\"") && strstr(a1, q))
            ended = !json_is_null(json_object_get(e, "exit_code"));
    }
    json_decref(all);
    return ended;
}

/* Waits up to ms for the last Watch exec of path to end. */
static int await_watch_end(const char *path, int ms)
{
    for (int i = 0; i < ms / 100; i++) {
        if (watch_ended(path) == 1)
            return 1;
        usleep(100000);
    }
    return 0;
}

/* fs.unwatch while the router fails its stdin EOF (UNAVAILABLE, more times
 * than a call's quick retries): the EOF goes out again through the retry
 * budget, so the Watch still ends instead of running its hour. */
static void test_watch_unwatch_retry(conn *c)
{
    json_decref(sh(c, SB, "mkdir -p wq"));
    json_int_t w = watch(c, "/wq", 0, NULL);
    usleep(500000);
    json_decref(pt_http_json(CPORT, "POST", "/fault",
                             json_pack("{s:{s:s, s:i, s:i}}", "fail_next", "method",
                                       "TaskExecStdinWrite", "code", 14, "times", 5)));
    json_decref(
        call(c, "fs.unwatch", json_pack("{s:s, s:I}", "sandbox", SB, "watch", w)));
    int ended = await_watch_end("/wq", 15000);
    test_cond("fs.unwatch whose stdin EOF the router fails 5 times: sent again until "
              "it goes, and the Watch ends",
              w > 0 && ended);
    json_decref(pt_http_json(CPORT, "DELETE", "/faults", NULL));
}

static void test_watch_errors(conn *c)
{
    json_t *r =
        call(c, "fs.watch", json_pack("{s:s, s:s}", "sandbox", SB, "path", "/nope"));
    test_cond("fs.watch of a missing path: -32010 ENOENT",
              err_code(r) == -32010 && !strcmp(err_errno(r), "ENOENT"));
    json_decref(r);
    r = call(c, "fs.watch", json_pack("{s:s, s:s}", "sandbox", SB, "path", "/mv/f3"));
    test_cond("fs.watch of a file: -32010 ENOTDIR (as Docker)",
              err_code(r) == -32010 && !strcmp(err_errno(r), "ENOTDIR"));
    json_decref(r);
}

/* ---- sandbox.snapshot {ttl} ----------------------------------------------------- */

/* The ttl_seconds of the last TaskSnapshotFilesystem the fake got, or -99. */
static json_int_t last_ttl_sent(void)
{
    json_t *all =
        pt_http_json(CPORT, "GET", "/calls?method=TaskSnapshotFilesystem", NULL);
    json_t *last = json_array_get(all, json_array_size(all) - 1);
    json_t *t = json_object_get(json_object_get(last, "request"), "ttl_seconds");
    json_int_t v = json_is_integer(t)  ? json_integer_value(t)
                   : json_is_string(t) ? atoll(json_string_value(t))
                   : t                 ? -98
                                       : 0;
    json_decref(all);
    return last ? v : -99;
}

static json_int_t snap(conn *c, json_t *ttl, json_t **r_out)
{
    json_t *p = json_pack("{s:s}", "id", SB);
    if (ttl)
        json_object_set_new(p, "ttl", ttl);
    json_t *r = call(c, "sandbox.snapshot", p);
    json_int_t v = json_integer_value(json_object_get(res_of(r), "ttl_s"));
    if (r_out)
        *r_out = r;
    else
        json_decref(r);
    return v;
}

static void test_ttl(conn *c)
{
    json_t *r = NULL;
    json_int_t t = snap(c, json_integer(60), &r);
    test_cond("sandbox.snapshot {ttl: 60}: the answer says ttl_s 60 and expires_at",
              t == 60 && json_is_string(json_object_get(res_of(r), "expires_at")));
    test_cond("... and TaskSnapshotFilesystem carried ttl_seconds 60",
              last_ttl_sent() == 60);
    json_decref(r);
    t = snap(c, NULL, NULL);
    test_cond("no ttl: providers.modal.snapshot_ttl_s (600) is sent",
              t == 600 && last_ttl_sent() == 600);
    t = snap(c, json_integer(999999), NULL);
    test_cond("ttl past providers.modal.snapshot_ttl_max_s (3600) is clamped to it",
              t == 3600 && last_ttl_sent() == 3600);
    t = snap(c, json_integer(-1), NULL);
    test_cond("ttl -1 (never) is clamped to the ceiling too",
              t == 3600 && last_ttl_sent() == 3600);
    json_t *bad[] = {json_integer(0), json_integer(-2), json_string("60"),
                     json_real(1.5)};
    int all = 1;
    for (size_t i = 0; i < 4; i++) {
        r = call(c, "sandbox.snapshot", json_pack("{s:s, s:o}", "id", SB, "ttl", bad[i]));
        all &= err_code(r) == -32602;
        json_decref(r);
    }
    test_cond("ttl 0, -2, a string or a fraction: -32602", all);
    json_t *imgs = pt_http_json(CPORT, "GET", "/images", NULL);
    int found = 0;
    size_t i;
    json_t *im;
    json_array_foreach(imgs, i, im) {
        json_t *ts = json_object_get(im, "ttl_seconds");
        found += json_is_integer(ts) && json_integer_value(ts) == 60;
    }
    json_decref(imgs);
    test_cond("the fake made the image with that ttl (GET /images)", found >= 1);
    /* Stop's image: never expiring (sbxd deletes it when the sandbox goes). */
    r = call(c, "sandbox.stop", json_pack("{s:s}", "id", SB));
    json_decref(r);
    test_cond("stop's snapshot is sent with ttl_seconds -1 (never expires)",
              last_ttl_sent() == -1);
    json_decref(call(c, "sandbox.start", json_pack("{s:s}", "id", SB)));
}

/* 1 if the fake still has image id. */
static int fake_has_image(const char *id)
{
    json_t *imgs = pt_http_json(CPORT, "GET", "/images", NULL);
    int found = 0;
    size_t i;
    json_t *im;
    json_array_foreach(imgs, i, im)
        found |= !strcmp(json_string_value(json_object_get(im, "image_id")), id);
    json_decref(imgs);
    return found;
}

/* The image stop saved lives (never expiring) until its sandbox is destroyed. */
static void test_stop_image_destroyed(conn *c)
{
    json_t *r = call(c, "sandbox.get", json_pack("{s:s}", "id", SB));
    const char *img = json_string_value(
        json_object_get(json_object_get(res_of(r), "metadata"), "saved_image_id"));
    char id[128] = "";
    snprintf(id, sizeof(id), "%s", img ? img : "");
    json_decref(r);
    test_cond("stop's image is still there while the sandbox lives",
              id[0] && fake_has_image(id));
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", SB)));
    int gone = 0;
    for (int i = 0; i < 50 && !(gone = !fake_has_image(id)); i++)
        usleep(100000); /* ImageDelete goes out after the destroy's answer */
    test_cond("... and deleted (ImageDelete) when the sandbox is destroyed", gone);
}

/* Providers whose snapshots never expire take ttl -1 only. */
static void test_ttl_elsewhere(conn *c)
{
    json_decref(call(c, "sandbox.create",
                     json_pack("{s:s, s:s}", "id", "mmisc-dk", "provider", "duktape")));
    json_t *r =
        call(c, "sandbox.snapshot", json_pack("{s:s, s:i}", "id", "mmisc-dk", "ttl", 60));
    test_cond("a ttl on a provider without expiring snapshots: -32011 {feature: snapshot "
              "ttl}",
              err_code(r) == -32011 && !strcmp(feature_of(r), "snapshot ttl"));
    json_decref(r);
    r = call(c, "sandbox.snapshot", json_pack("{s:s, s:i}", "id", "mmisc-dk", "ttl", -1));
    test_cond("... ttl -1 (what its snapshots are anyway) is taken", res_of(r) != NULL);
    json_decref(r);
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mmisc-dk")));
}

/* ---- stdin across an sbxd restart ----------------------------------------------- */

static pid_t spawn_sbxd(const char *cmd, const char *sock)
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
    struct stat st;
    for (int i = 0; i < 400 && stat(sock, &st) != 0; i++)
        usleep(50000);
    return pid;
}

/* The socket file appears at bind(2), before listen(2): connect until it answers. */
static conn *open_retry(const char *sock)
{
    conn *c = NULL;
    for (int i = 0; i < 200 && !(c = cn_open(sock)); i++)
        usleep(50000);
    return c;
}

static int stop_sbxd(pid_t pid, int sig)
{
    int st = 0;
    kill(pid, sig);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* All stdout of pid seen in c->notes (process.output), into out. */
static size_t output_of(conn *c, int pid, char *out, size_t cap)
{
    size_t n = 0;
    size_t i;
    json_t *m;
    json_array_foreach(c->notes, i, m) {
        json_t *p = json_object_get(m, "params");
        const char *d = json_string_value(json_object_get(p, "data"));
        if (strcmp(json_string_value(json_object_get(m, "method")), "process.output") ||
            json_integer_value(json_object_get(p, "pid")) != pid || !d)
            continue;
        size_t off = (size_t)json_integer_value(json_object_get(p, "offset"));
        size_t k = strlen(d);
        if (off + k < cap) {
            memcpy(out + off, d, k);
            n = off + k > n ? off + k : n;
        }
    }
    out[n] = 0;
    return n;
}

static int await_output(conn *c, int pid, const char *want, int ms)
{
    char out[512];
    double deadline = now_ms() + ms;
    while (now_ms() < deadline) {
        output_of(c, pid, out, sizeof(out));
        if (!strcmp(out, want))
            return 1;
        json_t *m = cn_read(c, 200);
        if (m && json_object_get(m, "method"))
            json_array_append_new(c->notes, m);
        else
            json_decref(m);
    }
    printf("      output so far: '%s'\n", out);
    return 0;
}

static json_t *stdin_write(conn *c, const char *sb, int pid, const char *data, int eof)
{
    if (eof)
        return call(c, "process.close_stdin",
                    json_pack("{s:s, s:i}", "sandbox", sb, "pid", pid));
    return call(c, "process.write",
                json_pack("{s:s, s:i, s:s}", "sandbox", sb, "pid", pid, "data", data));
}

/* SIGTERM to an sbxd that watches: its Watch ends before sbxd exits (the
 * EOF sent and answered in the shutdown drain) instead of running its hour
 * after it; the sandbox stays, and the next sbxd destroys it. */
static void test_watch_shutdown(const char *cmd, const char *tmp)
{
    char sock[104];
    snprintf(sock, sizeof(sock), "%s/mwsd.sock", tmp);
    pid_t pid = spawn_sbxd(cmd, sock);
    conn *c = open_retry(sock);
    json_decref(c ? call(c, "sandbox.create",
                         json_pack("{s:s, s:s, s:s}", "id", "mwsd", "provider", "modal",
                                   "working_dir", "/"))
                  : NULL);
    json_decref(c ? sh(c, "mwsd", "mkdir -p wsd") : NULL);
    json_t *r = c ? call(c, "fs.watch",
                         json_pack("{s:s, s:s}", "sandbox", "mwsd", "path", "/wsd"))
                  : NULL;
    int w = res_of(r) != NULL;
    json_decref(r);
    usleep(500000);
    test_cond("shutdown: a watch runs (its Watch exec on the fake)",
              w && watch_ended("/wsd") == 0);
    /* the session stays: a watch also ends with its session */
    double t0 = now_ms();
    int st = stop_sbxd(pid, SIGTERM);
    double took = now_ms() - t0;
    cn_close(c);
    int ended = await_watch_end("/wsd", 3000);
    printf("      sbxd exited %d in %.0f ms after SIGTERM\n", st, took);
    test_cond("shutdown: SIGTERM ends the Watch before sbxd exits (0), not an hour later",
              st == 0 && ended);
    pid = spawn_sbxd(cmd, sock);
    c = open_retry(sock);
    json_decref(c ? call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mwsd")) : NULL);
    cn_close(c);
    stop_sbxd(pid, SIGTERM);
}

static void test_stdin_restart(const char *cmd, const char *tmp)
{
    char sock[104];
    snprintf(sock, sizeof(sock), "%s/mrst.sock", tmp);
    pid_t pid = spawn_sbxd(cmd, sock);
    conn *c = open_retry(sock);
    if (!c) {
        test_cond("stdin restart: sbxd started", 0);
        stop_sbxd(pid, SIGTERM);
        return;
    }
    json_decref(call(c, "sandbox.create",
                     json_pack("{s:s, s:s}", "id", "mrst", "provider", "modal")));
    json_t *r = call(c, "process.spawn",
                     json_pack("{s:s, s:s}", "sandbox", "mrst", "command", "cat"));
    int pr = (int)res_int(r, "pid");
    json_decref(r);
    /* A second one whose stdin is closed before the restart (it keeps running). */
    r = call(c, "process.spawn",
             json_pack("{s:s, s:s}", "sandbox", "mrst", "command", "sleep 120"));
    int pc = (int)res_int(r, "pid");
    json_decref(r);
    json_decref(stdin_write(c, "mrst", pc, NULL, 1));
    json_decref(stdin_write(c, "mrst", pr, "one\n", 0));
    test_cond("stdin restart: a cat on Modal echoes its stdin",
              pr > 0 && await_output(c, pr, "one\n", 20000));
    cn_close(c);
    sleep(2); /* the state file has the exec id (written within a second) */
    int st = stop_sbxd(pid, SIGKILL);
    test_cond("stdin restart: sbxd is killed (SIGKILL, no shutdown write)", st == 137);
    pid = spawn_sbxd(cmd, sock);
    c = open_retry(sock);
    if (!c) {
        test_cond("stdin restart: sbxd started again", 0);
        stop_sbxd(pid, SIGTERM);
        return;
    }
    usleep(500000); /* adoption on the first loop iteration */
    json_decref(
        call(c, "process.attach",
             json_pack("{s:s, s:i, s:b}", "sandbox", "mrst", "pid", pr, "follow", 1)));
    r = stdin_write(c, "mrst", pr, "two\n", 0);
    test_cond("stdin restart: process.write to the re-adopted process is taken",
              res_of(r) != NULL);
    if (!res_of(r))
        printf("      %s\n", json_string_value(json_object_get(
                                 json_object_get(r, "error"), "message")));
    json_decref(r);
    test_cond("stdin restart: ... at the right offset: echoed once, nothing lost or "
              "repeated",
              await_output(c, pr, "one\ntwo\n", 20000));
    usleep(300000);
    r = stdin_write(c, "mrst", pc, "late\n", 0);
    test_cond("stdin restart: a stdin closed before the restart stays closed (-32001)",
              err_code(r) == -32001);
    json_decref(r);
    if (getuid() == 0)
        test_cond("stdin restart: another uid's process.write is -32000",
                  pt_code_as_uid(4321, sock, "process.write",
                                 json_pack("{s:s, s:i, s:s}", "sandbox", "mrst", "pid",
                                           pr, "data", "x")) == -32000);
    json_decref(stdin_write(c, "mrst", pr, NULL, 1));
    r = call(c, "process.wait", json_pack("{s:s, s:i}", "sandbox", "mrst", "pid", pr));
    test_cond("stdin restart: EOF ends the process (exit 0)",
              res_of(r) && res_int(r, "exit_code") == 0 &&
                  json_is_null(json_object_get(res_of(r), "error")));
    json_decref(r);
    json_decref(call(c, "sandbox.destroy", json_pack("{s:s}", "id", "mrst")));
    cn_close(c);
    test_cond("stdin restart: the restarted sbxd stops cleanly",
              stop_sbxd(pid, SIGTERM) == 0);
}

/* ---- another uid ------------------------------------------------------------------ */

static void test_cross_uid(void)
{
    if (getuid() != 0) {
        test_skip("another uid: fs.rename, fs.watch, fs.unwatch, a snapshot ttl are "
                  "-32000",
                  "needs root to switch uid");
        return;
    }
    int a = pt_code_as_uid(4321, SOCK, "fs.rename",
                           json_pack("{s:s, s:s, s:s}", "sandbox", SB, "path", "/mv/f3",
                                     "to", "/mv/stolen"));
    int b = pt_code_as_uid(4321, SOCK, "fs.watch",
                           json_pack("{s:s, s:s}", "sandbox", SB, "path", "/wt"));
    int d = pt_code_as_uid(4321, SOCK, "fs.unwatch",
                           json_pack("{s:s, s:i}", "sandbox", SB, "watch", 1));
    int e = pt_code_as_uid(4321, SOCK, "sandbox.snapshot",
                           json_pack("{s:s, s:i}", "id", SB, "ttl", 60));
    printf("      as uid 4321: rename %d, watch %d, unwatch %d, snapshot %d\n", a, b, d,
           e);
    test_cond("another uid: fs.rename, fs.watch, fs.unwatch, sandbox.snapshot {ttl} on "
              "this Modal sandbox are -32000",
              a == -32000 && b == -32000 && d == -32000 && e == -32000);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ptest_modal_misc SOCKET CONTROL_PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    SOCK = argv[1];
    CPORT = atoi(argv[2]);
    conn *c = cn_open(SOCK);
    test_cond("sbxd answers", c != NULL);
    if (!c)
        return test_report();
    json_t *r = call(
        c, "sandbox.create",
        json_pack("{s:s, s:s, s:s}", "id", SB, "provider", "modal", "working_dir", "/"));
    test_cond("a Modal sandbox", res_of(r) != NULL);
    json_decref(r);
    char *root = fake_root(c, SB);
    test_cond("the fake says where its files are", root != NULL);
    if (root) {
        test_rename_ok(c, root);
        test_rename_errors(c);
        test_rename_exdev(c, root);
        test_watch_errors(c);
        test_watch_events(c);
        test_watch_transport();
        test_watch_unwatch_retry(c);
        test_cross_uid();
        test_ttl(c);
    }
    test_ttl_elsewhere(c);
    free(root);
    test_stop_image_destroyed(c);
    cn_close(c);
    const char *cmd = getenv("PTEST_SBXD_CMD"), *tmp = getenv("PTEST_TMP");
    if (cmd && tmp) {
        test_stdin_restart(cmd, tmp);
        test_watch_shutdown(cmd, tmp);
    } else {
        test_skip("stdin across an sbxd restart", "PTEST_SBXD_CMD/PTEST_TMP not set");
        test_skip("a Watch ends at sbxd's SIGTERM", "PTEST_SBXD_CMD/PTEST_TMP not set");
    }
    return test_report();
}
