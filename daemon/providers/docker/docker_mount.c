/*
 * docker_mount.c - sandbox.mount / sandbox.unmount on Docker (PROTOCOL.md
 * "Mounts"): a host directory bound into a running container, which the
 * Engine API cannot do (binds are fixed at create).
 *
 * The grant is the policy's, as for a create's volumes: the sandbox's
 * effective options with this one bind as their volumes go through
 * policy_check for its owner, so an ungranted host path is refused with the
 * same words. sbxd itself then makes the mount: a child process (fork, so
 * that setns does not touch the loop's thread) clones the host directory
 * with open_tree(OPEN_TREE_CLONE) from the host's view, after checking it is
 * still the path the policy resolved, makes it nosuid,nodev (and read-only
 * when asked), joins the container's mount namespace (its PID 1's, from the
 * engine's inspect) and moves it onto the target there; the target's
 * directories are made as needed. The container never gets a capability for
 * it. unmount detaches only what sbxd mounted in that container (recorded
 * by container id), never a mount of the image or of the create.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/mount.h>
#include <linux/openat2.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "providers/docker/docker_mount.h"
#include "providers/docker/policy.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* Mounts sbxd may make per container, unless providers.docker.mount_max says. */
#define DKM_DEFAULT_MAX 32

struct dkm_rec {
    struct dkm_rec *next;
    char cid[80];
    char *target, *source;
    int ro;
    char started[48]; /* State.StartedAt of the container run it was made in */
};
static struct dkm_rec *recs;
static struct dkm_req *inflight; /* mounts and unmounts on their way */

static const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "EIO";
}

struct dkm_req {
    struct dk_prov *dp;
    char *sb_id;
    char cid[80];
    char *source, *target; /* source: the resolved host path */
    int ro, unmount;
    char started[48];
    int pipe_rd;
    ev_child child;
    dkm_done_fn done;
    void *data;
    struct dkm_req *next; /* in inflight */
};

static void req_free(struct dkm_req *q)
{
    for (struct dkm_req **p = &inflight; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    free(q->sb_id);
    free(q->source);
    free(q->target);
    free(q);
}

static struct dkm_rec *rec_find(const char *cid, const char *target)
{
    for (struct dkm_rec *r = recs; r; r = r->next)
        if (!strcmp(r->cid, cid) && !strcmp(r->target, target))
            return r;
    return NULL;
}

static void rec_drop(struct dkm_rec *gone)
{
    for (struct dkm_rec **p = &recs; *p; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            free(gone->target);
            free(gone->source);
            free(gone);
            return;
        }
}

/* Records of containers no sandbox has any more go (destroyed, recreated). */
static void rec_prune(void)
{
    struct dkm_rec **p = &recs;
    while (*p) {
        struct dkm_rec *r = *p;
        int live = 0;
        for (struct sandbox *sb = D->sandboxes; sb && !live; sb = sb->next)
            live = dk_sb_of(sb) && !strcmp(dk_sb_of(sb)->cid, r->cid);
        if (live) {
            p = &r->next;
            continue;
        }
        *p = r->next;
        free(r->target);
        free(r->source);
        free(r);
    }
}

static int rec_count(const char *cid)
{
    int n = 0;
    for (struct dkm_rec *r = recs; r; r = r->next)
        n += !strcmp(r->cid, cid);
    return n;
}

/* ---- the child: runs in its own process, reports "step errno" on a pipe ---- */

static void child_fail(int fd, const char *step)
{
    char msg[64];
    int n = snprintf(msg, sizeof(msg), "%s %d", step, errno);
    if (write(fd, msg, (size_t)n) < 0)
        _exit(2);
    _exit(1);
}

static void mkdirs(char *path)
{
    for (char *s = path + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            (void)mkdir(path, 0755);
            *s = '/';
        }
    (void)mkdir(path, 0755);
}

static void child_run(struct dkm_req *q, long pid, int wfd)
{
    char nspath[64];
    snprintf(nspath, sizeof(nspath), "/proc/%ld/ns/mnt", pid);
    int tree = -1;
    if (!q->unmount) {
        int src = open(q->source, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0)
            child_fail(wfd, "open source");
        /* Still the path the policy resolved: no symlink swapped in since. */
        char fdp[64], now[PATH_MAX];
        snprintf(fdp, sizeof(fdp), "/proc/self/fd/%d", src);
        ssize_t n = readlink(fdp, now, sizeof(now) - 1);
        if (n < 0 || (now[n] = '\0', strcmp(now, q->source) != 0)) {
            errno = EXDEV;
            child_fail(wfd, "source changed");
        }
        tree = (int)syscall(SYS_open_tree, src, "",
                            AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
                                AT_RECURSIVE);
        if (tree < 0)
            child_fail(wfd, "open_tree");
        struct mount_attr a = {0};
        a.attr_set =
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (q->ro ? MOUNT_ATTR_RDONLY : 0);
        a.propagation = MS_PRIVATE;
        if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &a,
                    sizeof(a)) < 0)
            child_fail(wfd, "mount_setattr");
    }
    int ns = open(nspath, O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNS) < 0)
        child_fail(wfd, "setns");
    if (q->unmount) {
        if (umount2(q->target, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
            child_fail(wfd, "umount");
        _exit(0);
    }
    mkdirs(q->target);
    /* The target as the container's own links lead, but no magic links
     * (/proc/PID/root and the like) out of its view. */
    struct open_how how = {0};
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
    how.resolve = RESOLVE_NO_MAGICLINKS;
    int t = (int)syscall(SYS_openat2, AT_FDCWD, q->target, &how, sizeof(how));
    if (t < 0)
        child_fail(wfd, "open target");
    if (syscall(SYS_move_mount, tree, "", t, "",
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
        child_fail(wfd, "move_mount");
    _exit(0);
}

/* ---- the parent ----------------------------------------------------------------- */

static void finish(struct dkm_req *q, json_t *result, sbx_err_t *err)
{
    q->done(q->data, result, err);
    req_free(q);
}

static void child_done(struct ev_loop *loop, ev_child *w, int revents)
{
    (void)revents;
    struct dkm_req *q = w->data;
    ev_child_stop(loop, w);
    char msg[64] = "";
    ssize_t n = read(q->pipe_rd, msg, sizeof(msg) - 1);
    close(q->pipe_rd);
    sbx_err_t err = {0};
    if (WIFEXITED(w->rstatus) && WEXITSTATUS(w->rstatus) == 0) {
        if (q->unmount) {
            struct dkm_rec *r = rec_find(q->cid, q->target);
            if (r)
                rec_drop(r);
            finish(q, json_pack("{s:s}", "target", q->target), NULL);
            return;
        }
        struct dkm_rec *r = xcalloc(1, sizeof(*r));
        snprintf(r->cid, sizeof(r->cid), "%s", q->cid);
        r->target = xstrdup(q->target);
        r->source = xstrdup(q->source);
        r->ro = q->ro;
        snprintf(r->started, sizeof(r->started), "%s", q->started);
        r->next = recs;
        recs = r;
        finish(q,
               json_pack("{s:s, s:s, s:b}", "source", q->source, "target", q->target,
                         "read_only", q->ro),
               NULL);
        return;
    }
    char step[40] = "mount";
    int e = EIO;
    if (n > 0) {
        msg[n] = '\0';
        if (sscanf(msg, "%39[^0-9] %d", step, &e) < 1)
            e = EIO;
        size_t l = strlen(step);
        while (l && step[l - 1] == ' ')
            step[--l] = '\0';
    }
    err_make_data(&err, SBX_E_FS,
                  json_pack("{s:s, s:s, s:s}", "errno", ename(e), "path", q->target,
                            "message", strerror(e)),
                  "%s %s: %s: %s", q->unmount ? "unmount" : "mount", q->target, step,
                  strerror(e));
    finish(q, NULL, &err);
}

static void pid_known(struct dk_resp *r, void *data)
{
    struct dkm_req *q = data;
    sbx_err_t err = {0};
    json_t *pid = json_object_get(json_object_get(r->json, "State"), "Pid");
    if (r->status != 200 || !json_is_integer(pid) || json_integer_value(pid) <= 0) {
        if (r->status != 200)
            dkapi_err(&err, r, "inspect container");
        else
            err_make(&err, SBX_E_STATE, "the container of %s is not running", q->sb_id);
        finish(q, NULL, &err);
        return;
    }
    /* A container that stopped and started again has a new mount namespace:
     * what sbxd mounted in the old one is gone. Its start time tells the
     * runs apart (a namespace's inode number is reused once it is freed). */
    const char *started = json_string_value(
        json_object_get(json_object_get(r->json, "State"), "StartedAt"));
    snprintf(q->started, sizeof(q->started), "%s", started ? started : "");
    for (struct dkm_rec *m = recs, *nx; m; m = nx) {
        nx = m->next;
        if (!strcmp(m->cid, q->cid) && strcmp(m->started, q->started) != 0)
            rec_drop(m);
    }
    struct dkm_rec *had = rec_find(q->cid, q->target);
    if (q->unmount && !had) {
        err_make_data(&err, SBX_E_PARAMS, json_pack("{s:s}", "param", "target"),
                      "%s is not a mount sandbox.mount made in %s", q->target, q->sb_id);
        finish(q, NULL, &err);
        return;
    }
    if (!q->unmount && had) {
        err_make_data(&err, SBX_E_PARAMS,
                      json_pack("{s:s, s:s, s:b}", "param", "target", "source",
                                had->source, "read_only", had->ro),
                      "%s is already mounted (from %s): unmount it first", q->target,
                      had->source);
        finish(q, NULL, &err);
        return;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
        err_make(&err, SBX_E_INTERNAL, "pipe: %s", strerror(errno));
        finish(q, NULL, &err);
        return;
    }
    pid_t c = fork();
    if (c == 0) {
        close(p[0]);
        child_run(q, (long)json_integer_value(pid), p[1]);
        _exit(3);
    }
    close(p[1]);
    if (c < 0) {
        close(p[0]);
        err_make(&err, SBX_E_INTERNAL, "fork: %s", strerror(errno));
        finish(q, NULL, &err);
        return;
    }
    q->pipe_rd = p[0];
    ev_child_init(&q->child, child_done, c, 0);
    q->child.data = q;
    ev_child_start(D->loop, &q->child);
}

static int start(struct dkm_req *q, sbx_err_t *err)
{
    char *path = dkapi_path(&q->dp->eng, "/containers/%s/json", q->cid);
    struct dk_req *rq = dkapi_call(&q->dp->eng, &q->dp->misc, "GET", path, NULL,
                                   DK_CALL_TIMEOUT_MS, pid_known, q);
    free(path);
    if (!rq) {
        req_free(q);
        return err_make(err, SBX_E_PROVIDER, "docker: cannot inspect the container");
    }
    return 0;
}

static struct dkm_req *req_new(struct dk_prov *dp, struct sandbox *sb, const char *target,
                               dkm_done_fn done, void *data, sbx_err_t *err)
{
    struct dk_sb *ds = sb->pdata;
    if (!ds || !ds->cid[0]) {
        err_make(err, SBX_E_STATE, "sandbox %s has no container", sb->id);
        return NULL;
    }
    const char *rt = dkspec_opt_str(ds->opts, "runtime");
    if (rt && strstr(rt, "runsc")) {
        /* gVisor's guest has a file system of its own: a host mount never reaches it. */
        err_make_data(err, SBX_E_UNSUPPORTED,
                      json_pack("{s:s, s:s}", "provider", "docker", "feature",
                                "mount (runtime runsc)"),
                      "docker: sandbox.mount is not supported under runtime %s", rt);
        return NULL;
    }
    for (struct dkm_req *o = inflight; o; o = o->next)
        if (!strcmp(o->cid, ds->cid) && !strcmp(o->target, target)) {
            /* Two at once would stack two mounts under one record. */
            err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "target"),
                          "a mount or unmount of %s is in progress", target);
            return NULL;
        }
    struct dkm_req *q = xcalloc(1, sizeof(*q));
    q->next = inflight;
    inflight = q;
    q->dp = dp;
    q->sb_id = xstrdup(sb->id);
    snprintf(q->cid, sizeof(q->cid), "%s", ds->cid);
    q->target = xstrdup(target);
    q->pipe_rd = -1;
    q->done = done;
    q->data = data;
    return q;
}

int dkm_mount(void *cookie, struct sandbox *sb, const char *source, const char *target,
              int ro, dkm_done_fn done, void *data, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (json_is_false(json_object_get(dp->conf, "mount")))
        return err_make_data(
            err, SBX_E_PERMISSION,
            json_pack("{s:s, s:s}", "option", "mount", "reason", "denied"),
            "sandbox.mount is off (providers.docker.mount: false)");
    json_t *jmax = json_object_get(dp->conf, "mount_max");
    int max = json_is_integer(jmax) && json_integer_value(jmax) >= 0 &&
                      json_integer_value(jmax) <= 4096
                  ? (int)json_integer_value(jmax)
                  : DKM_DEFAULT_MAX;
    rec_prune();
    if (ds && ds->cid[0]) {
        if (rec_count(ds->cid) >= max)
            return err_make_data(err, SBX_E_LIMIT,
                                 json_pack("{s:s, s:i}", "limit",
                                           "providers.docker.mount_max", "max", max),
                                 "sandbox %s has %d mounts already", sb->id, max);
    }
    /* The grant, in the policy's words: this bind as a create's only volume. */
    json_t *eff = ds && ds->opts ? json_deep_copy(ds->opts) : json_object();
    char *bind = xasprintf("%s:%s%s", source, target, ro ? ":ro" : "");
    json_object_set_new(eff, "volumes", json_pack("[s]", bind));
    int ok = policy_check(dp->policy, sb->owner, dp->conf, eff, err);
    json_decref(eff);
    free(bind);
    if (ok < 0)
        return -1;
    char real[PATH_MAX];
    if (!realpath(source, real))
        return err_make_data(err, SBX_E_FS,
                             json_pack("{s:s, s:s, s:s}", "errno", ename(errno), "path",
                                       source, "message", strerror(errno)),
                             "mount source %s: %s", source, strerror(errno));
    struct dkm_req *q = req_new(dp, sb, target, done, data, err);
    if (!q)
        return -1;
    q->source = xstrdup(real);
    q->ro = ro;
    return start(q, err);
}

int dkm_unmount(void *cookie, struct sandbox *sb, const char *target, dkm_done_fn done,
                void *data, sbx_err_t *err)
{
    struct dk_sb *ds = sb->pdata;
    rec_prune();
    if (!ds || !rec_find(ds->cid, target))
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "target"),
                             "%s is not a mount sandbox.mount made in %s", target,
                             sb->id);
    struct dkm_req *q = req_new(cookie, sb, target, done, data, err);
    if (!q)
        return -1;
    q->unmount = 1;
    return start(q, err);
}
