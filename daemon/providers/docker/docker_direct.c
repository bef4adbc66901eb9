/*
 * docker_direct.c - moving a sandbox's agent channel from Docker's attach
 * stream to a Unix socket inside the container (proto/CHANNEL.md, "Direct
 * socket").
 *
 * Why: every byte on the attach stream is copied by containerd-shim and
 * dockerd in small chunks with a wakeup each; on this kind of machine that
 * relay, not sbxd, caps output at roughly 100-150 MB/s and adds about a
 * millisecond to every round trip. When the engine shares our kernel, sbxd
 * can reach the agent's socket through /proc/PID/root of the container's
 * PID 1 instead. The attach stream stays open: it carries the agent's
 * stderr, tells us when the container dies, and is the channel again
 * whenever the socket cannot be had (remote engines, no access to /proc,
 * an old agent) or is lost.
 *
 * The steps, each bounded by DIRECT_TIMEOUT_S, all ending in the normal
 * PING handshake on whichever channel won:
 *   1. DIRECT {key, answer} on the attach stream; the agent listens and
 *      answers DIRECT {path}.
 *   2. Inspect the container for State.Pid; open PID/root/path without
 *      following any symlink (the container's filesystem is untrusted) and
 *      connect. Under gVisor the container's files are not under PID/root:
 *      there the run directory is a volume made at create (dkd_run_volume)
 *      and the path is opened below its host directory instead.
 *   3. DIRECT {key} on the socket; the agent proves itself with DIRECT
 *      {answer}. From here frames go through the socket; the attach
 *      stream's frames are ignored.
 * A failure anywhere logs once and handshakes again on the attach stream
 * (the agent may have switched already; a PING on its stdin switches it back).
 * A socket that never worked is not asked for again until the next start.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "core/sandbox.h"

#define DIRECT_TIMEOUT_S 3.0
#define DIRECT_TRIES 3   /* per start: a socket that keeps getting lost is given up */
#define LOST_GRACE_S 0.5 /* a dying container's attach stream ends within this */

/* Random hex for the one-time key and answer. */
static int make_token(char out[DKD_TOKEN + 1])
{
    uint8_t raw[DKD_TOKEN / 2];
    size_t got = 0;
    while (got < sizeof(raw)) {
        ssize_t r = getrandom(raw + got, sizeof(raw) - got, GRND_NONBLOCK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(raw); i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[DKD_TOKEN] = '\0';
    return 0;
}

/*
 * Connects to the socket at path below the directory fd dfd, resolved with
 * how_resolve and no symlink at all: a link planted in the container must
 * not lead us to a host socket. Takes dfd. *missing is set when there is no
 * such file.
 */
static int connect_below(int dfd, const char *path, uint64_t how_resolve, int *missing,
                         char *err, size_t errlen)
{
    struct open_how how = {
        .flags = O_PATH | O_CLOEXEC,
        .resolve = how_resolve | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    while (*path == '/')
        path++;
    int sfd = (int)syscall(SYS_openat2, dfd, path, &how, sizeof(how));
    int e = errno;
    close(dfd);
    *missing = sfd < 0 && e == ENOENT;
    if (sfd < 0) {
        snprintf(err, errlen, "open %s in the container: %s", path, strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(sfd, &st) < 0 || !S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s in the container is not a socket", path);
        close(sfd);
        return -1;
    }
    /* connect() takes a path: this fd's, which resolves to the inode we checked. */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", sfd);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        /* A Unix connect completes at once or not at all (EAGAIN: backlog full). */
        snprintf(err, errlen, "connect: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        close(sfd);
        return -1;
    }
    close(sfd);
    return fd;
}

int dkd_connect(long pid, const char *path, char *err, size_t errlen)
{
    char root[64];
    snprintf(root, sizeof(root), "/proc/%ld/root", pid);
    int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (rfd < 0) {
        snprintf(err, errlen, "%s: %s", root, strerror(errno));
        return -1;
    }
    /* Resolved as if the container's root were "/". */
    int missing;
    return connect_below(rfd, path, RESOLVE_IN_ROOT, &missing, err, errlen);
}

/* ---- the run directory on the host (gVisor) --------------------------------------- */

/* The default runtime and runc by its other names share our kernel: the
 * agent's socket is reached through /proc/PID/root, its directory a tmpfs. */
static int runc_like(const char *rt)
{
    return !rt || !rt[0] || !strcmp(rt, "runc") || !strcmp(rt, "io.containerd.runc.v2") ||
           !strcmp(rt, "io.containerd.runtime.v1.linux");
}

/* A local volume of tmpfs at the run directory, as the options' tmpfs would be. */
static json_t *run_volume_mount(json_t *body)
{
    /* The agent runs as the container's user and wants the directory its
     * own: a numeric user gets it; any other runs as root or falls back. */
    char o[160] = "size=1m,mode=0700,nosuid,nodev,noexec";
    const char *u = json_string_value(json_object_get(body, "User"));
    unsigned long uid, gid;
    char *end;
    if (u && u[0] >= '0' && u[0] <= '9') {
        uid = strtoul(u, &end, 10);
        gid = uid;
        if (*end == ':' && end[1] >= '0' && end[1] <= '9')
            gid = strtoul(end + 1, &end, 10);
        if (*end == '\0' && uid <= 0x7fffffff && gid <= 0x7fffffff)
            snprintf(o + strlen(o), sizeof(o) - strlen(o), ",uid=%lu,gid=%lu", uid, gid);
    }
    return json_pack("{s:s, s:s, s:{s:b, s:{s:s, s:{s:s, s:s, s:s}}}}", "Type", "volume",
                     "Target", DK_AGENT_DIR "/run", "VolumeOptions", "NoCopy", 1,
                     "DriverConfig", "Name", "local", "Options", "type", "tmpfs",
                     "device", "tmpfs", "o", o);
}

int dkd_run_volume(struct dk_prov *dp, json_t *body)
{
    json_t *hc = json_object_get(body, "HostConfig");
    if (!dp->direct || !dp->eng.unix_path ||
        runc_like(json_string_value(json_object_get(hc, "Runtime"))) ||
        json_object_get(json_object_get(hc, "Tmpfs"), DK_AGENT_DIR "/run"))
        return 0;
    json_t *mounts = json_is_array(json_object_get(hc, "Mounts"))
                         ? json_copy(json_object_get(hc, "Mounts"))
                         : json_array();
    size_t i;
    json_t *m;
    json_array_foreach(mounts, i, m) {
        const char *t = json_string_value(json_object_get(m, "Target"));
        if (t && !strcmp(t, DK_AGENT_DIR "/run")) {
            json_decref(mounts);
            return 1; /* the options mount something there: theirs */
        }
    }
    json_array_append_new(mounts, run_volume_mount(body));
    json_object_set_new(hc, "Mounts", mounts);
    return 1;
}

/* The host directory of the local volume at the run directory, or NULL. */
static const char *run_volume_dir(json_t *inspect)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(inspect, "Mounts"), i, m) {
        const char *dst = json_string_value(json_object_get(m, "Destination"));
        const char *type = json_string_value(json_object_get(m, "Type"));
        const char *drv = json_string_value(json_object_get(m, "Driver"));
        const char *src = json_string_value(json_object_get(m, "Source"));
        if (dst && type && drv && src && src[0] == '/' &&
            !strcmp(dst, DK_AGENT_DIR "/run") && !strcmp(type, "volume") &&
            !strcmp(drv, "local"))
            return src;
    }
    return NULL;
}

/* The agent's socket in the run volume, seen from the host. */
static int connect_volume(const char *dir, const char *path, char *err, size_t errlen)
{
    static const char run[] = DK_AGENT_DIR "/run/";
    if (strncmp(path, run, sizeof(run) - 1) != 0) {
        snprintf(err, errlen, "%s is not in the run directory's volume", path);
        return -1;
    }
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    /* Beneath the volume, no "..", no symlink, no other mount. */
    const char *rel = path + sizeof(run) - 1;
    int missing;
    int fd = connect_below(fcntl(dfd, F_DUPFD_CLOEXEC, 0), rel,
                           RESOLVE_BENEATH | RESOLVE_NO_XDEV, &missing, err, errlen);
    if (fd < 0 && missing)
        snprintf(err, errlen,
                 "the runtime keeps the agent's socket inside its sandbox (gVisor: "
                 "add --host-uds=create to its runtimeArgs)");
    /* gVisor can neither unlink nor bind again a host socket file it made
     * (EPERM): the next DIRECT (a restart of sbxd) needs the name free. The
     * connection outlives the name; unlinkat removes a planted link itself. */
    if (!missing && !strchr(rel, '/'))
        unlinkat(dfd, rel, 0);
    close(dfd);
    return fd;
}

void dkd_close(struct dk_sb *ds)
{
    dkapi_reqlist_cancel(&ds->dreqs);
    ev_timer_stop(D->loop, &ds->dtimer);
    if (ds->dch_live) {
        chan_deinit(&ds->dch);
        ds->dch_live = 0;
    }
    ds->cur = &ds->ch;
    ds->dstate = DKD_OFF;
    ds->dlost = 0;
    ds->dmoved = 0;
}

/* Back to the attach stream, handshaking there again. */
static void fall_back(struct dk_sb *ds, const char *why)
{
    int was_on = ds->dstate == DKD_ON;
    int moved = ds->dmoved;
    dkd_close(ds);
    ds->att_sync = 1; /* the agent may have left it mid-frame */
    ds->sync_k = 0;
    if (moved) {
        /* Another client (a second sbxd) attached and pinged the agent, which
         * now talks on the attach stream. Taking it back would only start a
         * tug of war: listen there, as two attached clients always could. */
        log_warn("docker %s: another client took over the agent of container %.12s",
                 ds->sb->id, ds->cid);
        ds->dtries = DIRECT_TRIES;
        /* The other client's PONG may have gone by on our attach stream
         * before this notice: resync on a PONG of our own, or every frame
         * after it would be skipped. */
        ds->dev->resync(ds);
        return;
    }
    log_info("docker %s: %s %s; the attach stream is the agent channel", ds->sb->id,
             was_on ? "direct socket lost:" : "no direct socket:", why);
    /* A socket that never worked (an older agent that does not answer
     * DIRECT, no access to /proc, a refusal) will not work on the next
     * handshake either; one that worked and was lost may be tried again. */
    if (!was_on)
        ds->dtries = DIRECT_TRIES;
    if (was_on && ds->phase == PH_IDLE) {
        /* When the container is dying its attach stream ends soon, and that
         * path knows how to tell what happened; otherwise handshake there. */
        ds->ready = 0;
        ds->dstate = DKD_LOST;
        ev_timer_set(&ds->dtimer, LOST_GRACE_S, 0.);
        ev_timer_start(D->loop, &ds->dtimer);
        return;
    }
    ds->dev->resync(ds);
}

int dkd_begin(struct dk_sb *ds)
{
    struct dk_prov *dp = ds->dp;
    if (!dp->direct || !dp->eng.unix_path || ds->cur != &ds->ch ||
        ds->dtries >= DIRECT_TRIES)
        return -1;
    if (make_token(ds->dkey) < 0 || make_token(ds->danswer) < 0)
        return -1;
    json_t *req = json_pack("{s:s, s:s}", "key", ds->dkey, "answer", ds->danswer);
    int r = ds->dev->send_json(ds, SBX_CHAN_DIRECT, 0, req);
    json_decref(req);
    if (r < 0)
        return -1;
    ds->dtries++;
    ds->dstate = DKD_ASKED;
    ds->phase = PH_DIRECT;
    ev_timer_stop(D->loop, &ds->dtimer);
    ev_timer_set(&ds->dtimer, DIRECT_TIMEOUT_S, 0.);
    ev_timer_start(D->loop, &ds->dtimer);
    return 0;
}

/* Frames of the direct socket go to the agent link's handler; frees are
 * deferred around it (dtimer). */
static void direct_frame(struct chan *ch, const struct sbx_chan_hdr *h,
                         const uint8_t *payload, void *data)
{
    struct dk_sb *ds = data;
    ds->in_direct++;
    ds->dev->frame(ch, h, payload, data);
    ds->in_direct--;
}

static void pid_done(struct dk_resp *r, void *data)
{
    struct dk_sb *ds = data;
    if (ds->dstate != DKD_INSPECT)
        return;
    json_t *pid = json_object_get(json_object_get(r->json, "State"), "Pid");
    if (r->status != 200 || !json_is_integer(pid) || json_integer_value(pid) <= 0) {
        fall_back(ds, "the container's PID is not known");
        return;
    }
    char err[300];
    const char *vol = run_volume_dir(r->json);
    int fd =
        vol ? connect_volume(vol, ds->dpath, err, sizeof(err))
            : dkd_connect((long)json_integer_value(pid), ds->dpath, err, sizeof(err));
    if (fd < 0) {
        fall_back(ds, err);
        return;
    }
    chan_init_fd(&ds->dch, fd, direct_frame, dkd_closed, ds);
    ds->dch_live = 1;
    ds->dstate = DKD_PROVE;
    json_t *hello = json_pack("{s:s}", "key", ds->dkey);
    int sent = chan_send_json(&ds->dch, SBX_CHAN_DIRECT, 0, hello);
    json_decref(hello);
    if (sent < 0 && ds->dstate == DKD_PROVE)
        fall_back(ds, "the socket failed at once");
}

void dkd_frame(struct dk_sb *ds, struct chan *ch, const uint8_t *payload, size_t len)
{
    json_t *v = chan_json(payload, len);
    if (ch == &ds->ch && ds->dstate == DKD_ASKED) {
        const char *path = json_string_value(json_object_get(v, "path"));
        const char *e = json_string_value(json_object_get(v, "error"));
        if (!path || path[0] != '/' || strlen(path) >= sizeof(ds->dpath)) {
            char why[300];
            snprintf(why, sizeof(why), "the agent says: %.200s", e ? e : "(no path)");
            json_decref(v);
            fall_back(ds, why);
            return;
        }
        snprintf(ds->dpath, sizeof(ds->dpath), "%s", path);
        json_decref(v);
        ds->dstate = DKD_INSPECT;
        char *p = dkapi_path(&ds->dp->eng, "/containers/%s/json", ds->cid);
        if (!dkapi_call(&ds->dp->eng, &ds->dreqs, "GET", p, NULL, DK_CALL_TIMEOUT_MS,
                        pid_done, ds))
            fall_back(ds, "cannot start an engine request");
        free(p);
        return;
    }
    if (ch == &ds->dch && ds->dstate == DKD_PROVE) {
        const char *a = json_string_value(json_object_get(v, "answer"));
        int ok = a && strlen(a) == DKD_TOKEN && memcmp(a, ds->danswer, DKD_TOKEN) == 0;
        json_decref(v);
        if (!ok) {
            fall_back(ds, "the peer did not prove the answer");
            return;
        }
        ev_timer_stop(D->loop, &ds->dtimer);
        ds->dstate = DKD_ON;
        ds->cur = &ds->dch;
        memset(ds->dkey, 0, sizeof(ds->dkey));
        memset(ds->danswer, 0, sizeof(ds->danswer));
        ds->dev->resync(ds);
        return;
    }
    if (ch == &ds->dch && ds->dstate == DKD_ON &&
        json_is_true(json_object_get(v, "moved")))
        ds->dmoved = 1; /* the socket closes next */
    else
        log_debug("docker %s: stray DIRECT frame ignored", ds->sb->id);
    json_decref(v);
}

/* chan callback: may run inside chan_send deep in a call chain, so the
 * switch back happens from the timer. */
void dkd_closed(struct chan *ch, const char *why, void *data)
{
    struct dk_sb *ds = data;
    ds->dlost = 1;
    ev_timer_stop(D->loop, &ds->dtimer);
    ev_timer_set(&ds->dtimer, 0., 0.);
    ev_timer_start(D->loop, &ds->dtimer);
}

void dkd_timer(struct dk_sb *ds)
{
    if (ds->dlost) {
        fall_back(ds, "the socket closed");
        return;
    }
    if (ds->dstate == DKD_LOST) {
        ds->dstate = DKD_OFF;
        ds->dev->resync(ds);
        return;
    }
    if (ds->dstate != DKD_OFF && ds->dstate != DKD_ON)
        fall_back(ds, "timed out");
}
