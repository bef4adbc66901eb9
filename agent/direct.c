/*
 * direct.c - sbx-init's direct socket (proto/CHANNEL.md, "Direct socket").
 *
 * Docker's attach relay costs two copies and several wakeups per chunk in
 * dockerd and containerd-shim; on a local engine sbxd can reach a Unix socket
 * inside the container instead. This file owns the listening side: the socket
 * in a private directory, connections that have not yet proven who they are,
 * and the one-time key that turns one of them into the channel. sbx_init.c
 * decides what the channel is; nothing here writes frames to it.
 *
 * Who may become the channel: a peer that presents the key the daemon sent
 * over the attach stream (which code in the container cannot read) and,
 * when we are PID 1 of our own PID namespace, a peer from outside it (its
 * SO_PEERCRED pid reads as 0 here, or as our own pid under gVisor, which
 * does not let its sandbox's processes connect to a socket the host sees).
 * The directory is 0700, so only our uid can even connect.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"

#define DIRECT_PENDING 4
#define DIRECT_KEY 16
#define DIRECT_HELLO_MAX 256 /* the daemon's first frame: {"key":"<32 hex>"} */

static struct {
    int lfd;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    uint8_t key[DIRECT_KEY], answer[DIRECT_KEY];
    struct {
        int fd; /* valid when open */
        bool open;
        uint8_t buf[SBX_CHAN_HDR + DIRECT_HELLO_MAX];
        size_t len;
    } pend[DIRECT_PENDING];
    size_t next_slot;
} S = {.lfd = -1};

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A member of obj holding exactly 2*DIRECT_KEY hex digits, into out. */
static int get_key(const struct jval *obj, const char *name, uint8_t out[DIRECT_KEY])
{
    const struct jval *v = json_get(obj, name);
    if (!v || v->type != J_STR || v->len != 2 * DIRECT_KEY)
        return -1;
    for (size_t i = 0; i < DIRECT_KEY; i++) {
        int hi = hexval(v->str[2 * i]), lo = hexval(v->str[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

static void put_hex(struct buf *b, const uint8_t *k)
{
    static const char digits[] = "0123456789abcdef";
    char s[2 * DIRECT_KEY];
    for (size_t i = 0; i < DIRECT_KEY; i++) {
        s[2 * i] = digits[k[i] >> 4];
        s[2 * i + 1] = digits[k[i] & 15];
    }
    buf_append(b, s, sizeof(s));
}

static void close_pending(size_t i)
{
    if (S.pend[i].open)
        close(S.pend[i].fd);
    S.pend[i].open = false;
    S.pend[i].len = 0;
}

void direct_stop(void)
{
    if (S.lfd >= 0) {
        close(S.lfd);
        S.lfd = -1;
        unlink(S.path);
    }
    for (size_t i = 0; i < DIRECT_PENDING; i++)
        close_pending(i);
    memset(S.key, 0, sizeof(S.key));
    memset(S.answer, 0, sizeof(S.answer));
}

/* The private directory: ours, a real directory, nobody else may enter. */
static int private_dir(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(dir, &st) < 0) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
        snprintf(err, errlen, "%s is not a directory of ours", dir);
        return -1;
    }
    if ((st.st_mode & 077) && chmod(dir, 0700) < 0) {
        snprintf(err, errlen, "chmod %s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int direct_listen(const uint8_t *payload, size_t n, struct buf *reply)
{
    char err[300] = "";
    direct_stop();
    struct jval *root = json_parse((const char *)payload, n, err, sizeof(err));
    if (!root || root->type != J_OBJ || get_key(root, "key", S.key) < 0 ||
        get_key(root, "answer", S.answer) < 0) {
        if (!err[0])
            snprintf(err, sizeof(err), "want {\"key\":HEX32,\"answer\":HEX32}");
        goto fail;
    }
    const char *dir = getenv("SBX_INIT_RUNDIR");
    if (!dir || dir[0] != '/')
        dir = AGENT_RUN_DIR;
    if (private_dir(dir, err, sizeof(err)) < 0)
        goto fail;
    if ((size_t)snprintf(S.path, sizeof(S.path), "%s/chan.sock", dir) >= sizeof(S.path)) {
        snprintf(err, sizeof(err), "socket path too long");
        goto fail;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, S.path, strlen(S.path) + 1);
    S.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    unlink(S.path);
    if (S.lfd < 0 || bind(S.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(S.lfd, DIRECT_PENDING) < 0) {
        snprintf(err, sizeof(err), "socket %s: %s", S.path, strerror(errno));
        goto fail;
    }
    json_free(root);
    buf_puts(reply, "{\"path\":");
    json_put_str(reply, S.path, strlen(S.path));
    buf_puts(reply, "}");
    return 0;
fail:
    json_free(root);
    direct_stop();
    buf_puts(reply, "{\"error\":");
    json_put_str(reply, err, strlen(err));
    buf_puts(reply, "}");
    return -1;
}

int direct_poll_fds(int *fds, int max)
{
    int n = 0;
    if (S.lfd >= 0 && n < max)
        fds[n++] = S.lfd;
    for (size_t i = 0; i < DIRECT_PENDING && n < max; i++)
        if (S.pend[i].open)
            fds[n++] = S.pend[i].fd;
    return n;
}

static void accept_all(void)
{
    for (;;) {
        int fd = accept4(S.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct ucred cr;
        socklen_t len = sizeof(cr);
        /* gVisor (runsc --host-uds=create) reports a peer from the host with
         * our own pid; processes in its sandbox cannot connect at all. */
        if (getpid() == 1 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 ||
                              (cr.pid != 0 && cr.pid != getpid()))) {
            alog("direct socket: a peer inside the container was refused");
            close(fd);
            continue;
        }
        /* The oldest unproven connection makes room. */
        size_t i = S.next_slot++ % DIRECT_PENDING;
        close_pending(i);
        S.pend[i].fd = fd;
        S.pend[i].open = true;
    }
}

/* Reads a pending connection's first frame; the channel fd once it proves the key. */
static int read_pending(size_t i)
{
    size_t want = SBX_CHAN_HDR;
    struct sbx_chan_hdr h;
    for (;;) {
        if (S.pend[i].len >= SBX_CHAN_HDR) {
            if (sbx_chan_hdr_decode(&h, S.pend[i].buf) < 0 || h.type != SBX_CHAN_DIRECT ||
                h.proc != 0 || h.len > DIRECT_HELLO_MAX)
                goto refuse;
            want = SBX_CHAN_HDR + h.len;
            if (S.pend[i].len == want)
                break;
        }
        ssize_t r =
            read(S.pend[i].fd, S.pend[i].buf + S.pend[i].len, want - S.pend[i].len);
        if (r > 0) {
            S.pend[i].len += (size_t)r;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return -1;
        close_pending(i); /* gone before saying anything */
        return -1;
    }
    char err[128];
    uint8_t key[DIRECT_KEY];
    struct jval *root =
        json_parse((const char *)S.pend[i].buf + SBX_CHAN_HDR, h.len, err, sizeof(err));
    int ok = root && root->type == J_OBJ && get_key(root, "key", key) == 0;
    json_free(root);
    uint8_t diff = 0;
    for (size_t k = 0; ok && k < DIRECT_KEY; k++)
        diff |= (uint8_t)(key[k] ^ S.key[k]);
    if (!ok || diff)
        goto refuse;
    int fd = S.pend[i].fd;
    S.pend[i].open = false;
    S.pend[i].len = 0;
    return fd;
refuse:
    alog("direct socket: a connection without the key was refused");
    close_pending(i);
    return -1;
}

int direct_ready(int fd, struct buf *answer)
{
    if (fd == S.lfd) {
        accept_all();
        return -1;
    }
    for (size_t i = 0; i < DIRECT_PENDING; i++) {
        if (!S.pend[i].open || S.pend[i].fd != fd)
            continue;
        int ch = read_pending(i);
        if (ch < 0)
            return -1;
        buf_puts(answer, "{\"answer\":\"");
        put_hex(answer, S.answer);
        buf_puts(answer, "\"}");
        direct_stop(); /* one key, one channel */
        return ch;
    }
    return -1;
}
