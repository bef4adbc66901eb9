/*
 * docker_net.c - ports into Docker sandboxes (sandbox.expose): sbxd
 * listens on 127.0.0.1:HOST_PORT and relays each connection over the agent
 * channel (NET_* frames, proto/CHANNEL.md "Connections") to 127.0.0.1:PORT
 * inside the container, so it works with network: none.
 *
 * Flow control is per connection, both ways: at most SBX_CHAN_WINDOW bytes
 * in flight, topped up by NET_CREDIT as the receiver writes them out. The
 * host socket is read only while its connection has credit and the channel
 * is below CHAN_ROOM; what the agent sends is at most a window, buffered
 * until the host socket takes it. Memory is thus bounded by
 * expose_max_connections windows per sandbox.
 *
 * Connections die with the channel (a reattach, a stop): the agent drops
 * its side at the next PING. Listeners live until sandbox.unexpose or the
 * sandbox's release; while the agent is not ready they refuse clients.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "providers/docker/egress_rule.h"
#include "log.h"
#include "providers/docker/policy.h"
#include "providers/docker/policy_expose.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* Channel bytes pending above which host sockets are not read. */
#define CHAN_ROOM (8u << 20)
#define CREDIT_BATCH (SBX_CHAN_WINDOW / 4)
#define DEFAULT_MAX_PORTS 16
#define DEFAULT_MAX_CONNS 64

struct dkn_conn {
    struct dkn_conn *next;
    struct dkn_port *port;
    uint32_t id;
    int fd;
    ev_io io;
    int events;
    struct obuf wbuf; /* from the agent, for the host socket */
    int64_t credit;   /* bytes we may still send the agent */
    uint32_t owed;    /* written to the host socket, not yet credited */
    int opened, rd_eof, out_eof, wr_shut;
    int connecting; /* egress: our connect() to the destination in progress */
};

struct dkn_port {
    struct dkn_port *next;
    struct dk_sb *ds;
    int port, host_port;
    char host[48];   /* the address listened on */
    char *unix_path; /* or a Unix socket (owned), unlinked at the end */
    int fd;
    ev_io io;
    ev_timer retry; /* re-reads host sockets after the channel drained */
    struct dkn_conn *conns;
    int nconns;
    uint64_t connections, bytes_in, bytes_out;
};

static int conf_int(struct dk_sb *ds, const char *key, int def)
{
    json_t *v = json_object_get(ds->dp->conf, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (int)json_integer_value(v)
                                                            : def;
}

/* ---- connections ------------------------------------------------------------------- */

static void conn_watch(struct dkn_conn *k);

static void conn_free(struct dkn_conn *k, const char *why, int tell)
{
    struct dkn_port *pt = k->port;
    for (struct dkn_conn **pp = &pt->conns; *pp; pp = &(*pp)->next)
        if (*pp == k) {
            *pp = k->next;
            break;
        }
    pt->nconns--;
    if (tell && pt->ds->ready)
        dka_send_frame(pt->ds, SBX_CHAN_NET_CLOSE, k->id, NULL, 0);
    if (why)
        log_debug("docker %s: port %d connection %u: %s", pt->ds->sb->id, pt->port, k->id,
                  why);
    ev_io_stop(D->loop, &k->io);
    close(k->fd);
    obuf_deinit(&k->wbuf);
    free(k);
}

static struct dkn_conn *conn_find(struct dk_sb *ds, uint32_t id)
{
    for (struct dkn_conn *k = ds->egress ? ds->egress->conns : NULL; k; k = k->next)
        if (k->id == id)
            return k;
    for (struct dkn_port *pt = ds->ports; pt; pt = pt->next)
        for (struct dkn_conn *k = pt->conns; k; k = k->next)
            if (k->id == id)
                return k;
    return NULL;
}

static int chan_has_room(struct dk_sb *ds)
{
    return ds->ready && chan_pending_output(ds->cur) < CHAN_ROOM;
}

static void conn_watch(struct dkn_conn *k)
{
    int ev = k->connecting ? EV_WRITE : 0;
    if (k->opened && !k->rd_eof && k->credit > 0 && chan_has_room(k->port->ds))
        ev |= EV_READ;
    if (k->wbuf.bytes > 0)
        ev |= EV_WRITE;
    if (k->opened && !k->rd_eof && k->credit > 0 && !chan_has_room(k->port->ds) &&
        !ev_is_active(&k->port->retry))
        ev_timer_start(D->loop, &k->port->retry);
    if (ev == k->events)
        return;
    k->events = ev;
    ev_io_stop(D->loop, &k->io);
    if (ev) {
        ev_io_set(&k->io, k->fd, ev);
        ev_io_start(D->loop, &k->io);
    }
}

/* Counts n relayed bytes of an exposed port's connection against the
 * sandbox's expose_max_bytes; past it the connection ends (1: k was freed)
 * and new ones are refused. */
static int over_bytes(struct dkn_conn *k, uint64_t n)
{
    struct dk_sb *ds = k->port->ds;
    if (k->port == ds->egress)
        return 0;
    ds->expose_bytes += n;
    if (ds->expose_max_bytes < 0 || ds->expose_bytes < (uint64_t)ds->expose_max_bytes)
        return 0;
    if (log_limit_take(&ds->sb->agent_log, ds->sb->id))
        log_info("docker %s: port %d: connection closed: %llu bytes relayed "
                 "(expose_max_bytes %lld)",
                 ds->sb->id, k->port->port, (unsigned long long)ds->expose_bytes,
                 (long long)ds->expose_max_bytes);
    conn_free(k, NULL, 1);
    return 1;
}

/* Writes what the agent sent; returns credit; shuts down after its EOF. 0, or
 * -1 when k was freed. */
static int conn_flush(struct dkn_conn *k)
{
    while (k->wbuf.bytes > 0) {
        struct iovec iov[8];
        int n = obuf_iov(&k->wbuf, iov, 8);
        ssize_t w = writev(k->fd, iov, n);
        if (w > 0) {
            obuf_consume(&k->wbuf, (size_t)w);
            k->owed += (uint32_t)w;
            k->port->bytes_out += (uint64_t)w;
            if (over_bytes(k, (uint64_t)w))
                return -1;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        conn_free(k, w < 0 ? strerror(errno) : "closed", 1);
        return -1;
    }
    struct dk_sb *ds = k->port->ds;
    if (k->owed >= CREDIT_BATCH || (k->owed > 0 && k->wbuf.bytes == 0)) {
        if (dka_send_u32(ds, SBX_CHAN_NET_CREDIT, k->id, k->owed) == 0)
            k->owed = 0;
    }
    if (k->out_eof && !k->wr_shut && k->wbuf.bytes == 0) {
        shutdown(k->fd, SHUT_WR);
        k->wr_shut = 1;
    }
    if (k->wr_shut && k->rd_eof) {
        conn_free(k, NULL, 1);
        return -1;
    }
    return 0;
}

static void conn_read(struct dkn_conn *k)
{
    static uint8_t chunk[64 * 1024];
    struct dk_sb *ds = k->port->ds;
    for (int rounds = 0; rounds < 4 && k->credit > 0 && chan_has_room(ds); rounds++) {
        size_t want =
            k->credit < (int64_t)sizeof(chunk) ? (size_t)k->credit : sizeof(chunk);
        ssize_t r = read(k->fd, chunk, want);
        if (r > 0) {
            if (dka_send_frame(ds, SBX_CHAN_NET_DATA, k->id, chunk, (size_t)r) < 0) {
                conn_free(k, "the agent channel is full or closed", 0);
                return;
            }
            k->credit -= r;
            k->port->bytes_in += (uint64_t)r;
            if (over_bytes(k, (uint64_t)r))
                return;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        if (r < 0) {
            conn_free(k, strerror(errno), 1);
            return;
        }
        k->rd_eof = 1;
        dka_send_frame(ds, SBX_CHAN_NET_EOF, k->id, NULL, 0);
        if (k->wr_shut) {
            conn_free(k, NULL, 1);
            return;
        }
        break;
    }
    conn_watch(k);
}

static void conn_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct dkn_conn *k = w->data;
    (void)loop;
    if (k->connecting) {
        int e = 0;
        socklen_t l = sizeof(e);
        getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &e, &l);
        k->connecting = 0;
        if (e) {
            char msg[200];
            int n = snprintf(msg, sizeof(msg),
                             "{\"status\":502,\"error\":\"connect: %s\"}", strerror(e));
            dka_send_frame(k->port->ds, SBX_CHAN_NET_CLOSE, k->id, msg, (size_t)n);
            conn_free(k, strerror(e), 0);
            return;
        }
        k->opened = 1;
        dka_send_frame(k->port->ds, SBX_CHAN_NET_OPENED, k->id, NULL, 0);
        conn_watch(k);
        return;
    }
    if ((revents & EV_WRITE) && conn_flush(k) < 0)
        return;
    if (revents & EV_READ) {
        conn_read(k);
        return;
    }
    conn_watch(k);
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct dkn_port *pt = w->data;
    (void)loop;
    (void)revents;
    for (struct dkn_conn *k = pt->conns; k; k = k->next)
        conn_watch(k);
}

/* ---- frames from the agent ------------------------------------------------------- */

static void egress_open(struct dk_sb *ds, uint32_t id, const uint8_t *p, size_t n);

void dkn_frame(struct dk_sb *ds, uint8_t type, uint32_t id, const uint8_t *p, size_t n)
{
    if (type == SBX_CHAN_EGRESS_OPEN) {
        egress_open(ds, id, p, n);
        return;
    }
    struct dkn_conn *k = conn_find(ds, id);
    if (!k)
        return; /* raced with our close */
    switch (type) {
    case SBX_CHAN_NET_OPENED:
        k->opened = 1;
        conn_watch(k);
        return;
    case SBX_CHAN_NET_DATA:
        if (k->out_eof || k->wbuf.bytes + n > 2 * SBX_CHAN_WINDOW) {
            conn_free(k, "the agent sent past its window", 1);
            return;
        }
        obuf_append(&k->wbuf, p, n);
        if (conn_flush(k) == 0)
            conn_watch(k);
        return;
    case SBX_CHAN_NET_EOF:
        k->out_eof = 1;
        if (conn_flush(k) == 0)
            conn_watch(k);
        return;
    case SBX_CHAN_NET_CLOSE:
        /* {"error"}: the program refused (nothing listens on the port, ...) */
        if (n > 0 && log_limit_take(&ds->sb->agent_log, ds->sb->id))
            log_info("docker %s: port %d: %.*s", ds->sb->id, k->port->port,
                     (int)(n > 200 ? 200 : n), (const char *)p);
        conn_free(k, NULL, 0);
        return;
    case SBX_CHAN_NET_CREDIT:
        if (n == 4) {
            k->credit += sbx_chan_get_u32(p);
            if (k->credit > (int64_t)4 * SBX_CHAN_WINDOW)
                k->credit = (int64_t)4 * SBX_CHAN_WINDOW; /* a lying agent */
            conn_watch(k);
        }
        return;
    }
}

void dkn_channel_lost(struct dk_sb *ds)
{
    while (ds->egress && ds->egress->conns)
        conn_free(ds->egress->conns, "the agent channel went away", 0);
    for (struct dkn_port *pt = ds->ports; pt; pt = pt->next)
        while (pt->conns)
            conn_free(pt->conns, "the agent channel went away", 0);
}

/* ---- listeners --------------------------------------------------------------------- */

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct dkn_port *pt = w->data;
    struct dk_sb *ds = pt->ds;
    (void)loop;
    (void)revents;
    for (int rounds = 0; rounds < 16; rounds++) {
        int fd = accept4(pt->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int total = 0;
        for (struct dkn_port *q = ds->ports; q; q = q->next)
            total += q->nconns;
        const char *full = ds->expose_max_conns >= 0 && total >= ds->expose_max_conns
                               ? "expose_max_connections"
                           : ds->expose_max_bytes >= 0 &&
                                   ds->expose_bytes >= (uint64_t)ds->expose_max_bytes
                               ? "expose_max_bytes"
                               : NULL;
        if (!ds->ready || ds->exec_mode || full) {
            if (full) {
                ds->expose_refused++;
                if (log_limit_take(&ds->sb->agent_log, ds->sb->id))
                    log_info("docker %s: port %d: connection refused (%s reached)",
                             ds->sb->id, pt->port, full);
            }
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct dkn_conn *k = xcalloc(1, sizeof(*k));
        k->port = pt;
        k->fd = fd;
        /* ids below the agent's (high bit) and never 0 */
        ds->next_conn = (ds->next_conn + 1) & 0x7fffffffu;
        if (ds->next_conn == 0)
            ds->next_conn = 1;
        k->id = ds->next_conn;
        k->credit = SBX_CHAN_WINDOW;
        obuf_init(&k->wbuf);
        ev_init(&k->io, conn_cb);
        k->io.data = k;
        k->next = pt->conns;
        pt->conns = k;
        pt->nconns++;
        pt->connections++;
        char msg[32];
        int len = snprintf(msg, sizeof(msg), "{\"port\":%d}", pt->port);
        if (dka_send_frame(ds, SBX_CHAN_NET_OPEN, k->id, msg, (size_t)len) < 0) {
            conn_free(k, "the agent channel is full or closed", 0);
            continue;
        }
        conn_watch(k);
    }
}

static void port_free(struct dkn_port *pt)
{
    while (pt->conns)
        conn_free(pt->conns, "unexposed", 1);
    ev_io_stop(D->loop, &pt->io);
    ev_timer_stop(D->loop, &pt->retry);
    if (pt->fd >= 0)
        close(pt->fd);
    if (pt->unix_path)
        unlink(pt->unix_path);
    free(pt->unix_path);
    free(pt);
}

static json_t *port_json(struct dkn_port *pt)
{
    char url[700];
    if (pt->unix_path)
        snprintf(url, sizeof(url), "unix://%s", pt->unix_path);
    else if (strchr(pt->host, ':'))
        snprintf(url, sizeof(url), "http://[%s]:%d/", pt->host, pt->host_port);
    else
        snprintf(url, sizeof(url), "http://%s:%d/", pt->host, pt->host_port);
    json_t *o = json_pack(
        "{s:i, s:s, s:i, s:s, s:i, s:I, s:I, s:I}", "port", pt->port, "host",
        pt->unix_path ? "unix" : pt->host, "host_port", pt->host_port, "url", url,
        "connections", pt->nconns, "connections_total", (json_int_t)pt->connections,
        "bytes_in", (json_int_t)pt->bytes_in, "bytes_out", (json_int_t)pt->bytes_out);
    if (pt->unix_path)
        json_object_set_new(o, "unix", json_string(pt->unix_path));
    return o;
}

static int listen_failed(sbx_err_t *err, int fd, const char *where)
{
    int e = errno;
    if (fd >= 0)
        close(fd);
    return err_make_data(
        err, SBX_E_PROVIDER,
        json_pack("{s:s, s:s}", "provider", "docker", "message", strerror(e)),
        "cannot listen on %s: %s", where, strerror(e));
}

/* A directory only uid (and root) may enter: made, or checked to be ours. */
static int private_dir(const char *path, mode_t mode, uid_t uid)
{
    struct stat st;
    if (mkdir(path, mode) < 0 && errno != EEXIST)
        return -1;
    if (lstat(path, &st) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    if (st.st_uid != uid && chown(path, uid, (gid_t)-1) < 0)
        return -1;
    return chmod(path, mode);
}

/*
 * The Unix socket of an exposed port: SOCKETDIR/sbxd-ports/UID/SANDBOX-PORT.sock,
 * where SOCKETDIR holds sbxd's own socket. sbxd owns sbxd-ports (0711); UID's
 * directory and the socket belong to the sandbox's owner (0700, 0600), so only
 * the owner (and root) can connect. sbxd decides it all: nothing a container
 * or client writes names the path.
 */
static int unix_listen(struct dk_sb *ds, int port, char **path_out, sbx_err_t *err)
{
    char dir[512], udir[560], path[700];
    const char *sp = D->cfg.socket_path ? D->cfg.socket_path : "/tmp/sbxd.sock";
    const char *slash = strrchr(sp, '/');
    int dl = slash ? (int)(slash - sp) : 1;
    snprintf(dir, sizeof(dir), "%.*s/sbxd-ports", dl, slash ? sp : ".");
    uid_t owner = ds->sb->owner;
    snprintf(udir, sizeof(udir), "%s/%u", dir, (unsigned)owner);
    snprintf(path, sizeof(path), "%s/%s-%d.sock", udir, ds->sb->id, port);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return listen_failed(err, -1, path);
    }
    if (private_dir(dir, 0711, geteuid()) < 0 || private_dir(udir, 0700, owner) < 0)
        return listen_failed(err, -1, udir);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path); /* a stale one of an earlier sbxd */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return listen_failed(err, fd, path);
    if ((geteuid() != owner && chown(path, owner, (gid_t)-1) < 0) ||
        chmod(path, 0600) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        unlink(path);
        errno = e;
        return listen_failed(err, fd, path);
    }
    *path_out = xstrdup(path);
    return fd;
}

/* host:host_port (v4 or v6); the port taken is written back. */
static int tcp_listen(const char *host, int *host_port, sbx_err_t *err)
{
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    char where[80];
    snprintf(where, sizeof(where), "%s port %d", host, *host_port);
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)*host_port);
        sl = sizeof(*s4);
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)*host_port);
        sl = sizeof(*s6);
    } else {
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "host"),
                             "host must be an IPv4 or IPv6 address literal");
    }
    int one = 1, fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ss.ss_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 64) < 0)
        return listen_failed(err, fd, where);
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *host_port = ntohs(ss.ss_family == AF_INET ? s4->sin_port : s6->sin6_port);
    return fd;
}

/* An exposed port again: the same answer, or -32001 for another place. */
static int exposed_again(struct dkn_port *pt, const struct sbx_expose_req *rq,
                         const char *host, json_t **out, sbx_err_t *err)
{
    if ((rq->host_port && rq->host_port != pt->host_port) || strcmp(host, pt->host) != 0)
        return err_make_data(
            err, SBX_E_STATE,
            json_pack("{s:s, s:i}", "sandbox", pt->ds->sb->id, "port", rq->port),
            "port %d is already exposed on %s port %d", rq->port, pt->host,
            pt->host_port);
    *out = port_json(pt);
    return 0;
}

int dkn_sb_expose_req(void *cookie, struct sandbox *sb, const struct sbx_expose_req *rq,
                      json_t **out, sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    struct policy_expose lim;
    json_t *grants = policy_grants(dp->policy, rq->uid);
    int allowed = policy_expose_check(grants, rq->uid, dp->conf, rq->host, rq->host_port,
                                      rq->unix_socket, &lim, err);
    json_decref(grants);
    if (allowed < 0)
        return -1;
    if (!ds || ds->exec_mode)
        return err_make_data(
            err, SBX_E_UNSUPPORTED,
            json_pack("{s:s, s:s}", "provider", "docker", "feature", "expose"),
            "ports are relayed by the agent: not in exec_mode docker-exec");
    const char *host = rq->unix_socket ? "unix" : rq->host ? rq->host : "127.0.0.1";
    int n = 0;
    for (struct dkn_port *pt = ds->ports; pt; pt = pt->next, n++)
        if (pt->port == rq->port && !pt->unix_path == !rq->unix_socket)
            return exposed_again(pt, rq, host, out, err);
    int max = conf_int(ds, "expose_max_ports", DEFAULT_MAX_PORTS);
    if (n >= max)
        return err_make_data(err, SBX_E_LIMIT,
                             json_pack("{s:s, s:i}", "limit",
                                       "providers.docker.expose_max_ports", "max", max),
                             "sandbox %s already exposes %d ports", sb->id, n);
    char *path = NULL;
    int host_port = rq->host_port;
    int fd = rq->unix_socket ? unix_listen(ds, rq->port, &path, err)
                             : tcp_listen(host, &host_port, err);
    if (fd < 0)
        return -1;
    ds->expose_max_conns = lim.max_connections;
    ds->expose_max_bytes = lim.max_bytes;
    struct dkn_port *pt = xcalloc(1, sizeof(*pt));
    pt->ds = ds;
    pt->port = rq->port;
    pt->host_port = rq->unix_socket ? 0 : host_port;
    snprintf(pt->host, sizeof(pt->host), "%s", host);
    pt->unix_path = path;
    pt->fd = fd;
    ev_io_init(&pt->io, accept_cb, fd, EV_READ);
    pt->io.data = pt;
    ev_io_start(D->loop, &pt->io);
    ev_timer_init(&pt->retry, retry_cb, 0.02, 0.);
    pt->retry.data = pt;
    pt->next = ds->ports;
    ds->ports = pt;
    if (path)
        log_info("docker %s: port %d exposed on %s", sb->id, rq->port, path);
    else
        log_info("docker %s: port %d exposed on %s port %d", sb->id, rq->port, host,
                 pt->host_port);
    *out = port_json(pt);
    return 0;
}

int dkn_sb_expose(void *cookie, struct sandbox *sb, int port, int host_port, json_t **out,
                  sbx_err_t *err)
{
    struct sbx_expose_req rq = {.port = port, .host_port = host_port, .uid = sb->owner};
    return dkn_sb_expose_req(cookie, sb, &rq, out, err);
}

json_t *dkn_stats(struct dk_sb *ds)
{
    json_int_t open = 0, total = 0, in = 0, outb = 0, n = 0;
    for (struct dkn_port *pt = ds->ports; pt; pt = pt->next, n++) {
        open += pt->nconns;
        total += (json_int_t)pt->connections;
        in += (json_int_t)pt->bytes_in;
        outb += (json_int_t)pt->bytes_out;
    }
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "exposed", n,
                     "connections", open, "connections_total", total, "refused",
                     (json_int_t)ds->expose_refused, "bytes",
                     (json_int_t)ds->expose_bytes, "bytes_in", in, "bytes_out", outb,
                     "max_connections", (json_int_t)ds->expose_max_conns, "max_bytes",
                     (json_int_t)ds->expose_max_bytes);
}

int dkn_sb_unexpose(void *cookie, struct sandbox *sb, int port, sbx_err_t *err)
{
    struct dk_sb *ds = sb->pdata;
    (void)cookie;
    int found = 0;
    for (struct dkn_port **pp = ds ? &ds->ports : NULL; pp && *pp;)
        if ((*pp)->port == port) { /* on TCP and on a Unix socket: both go */
            struct dkn_port *pt = *pp;
            *pp = pt->next;
            port_free(pt);
            found = 1;
        } else {
            pp = &(*pp)->next;
        }
    if (found)
        return 0;
    return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "port"),
                         "port %d is not exposed", port);
}

json_t *dkn_ports_json(struct dk_sb *ds)
{
    json_t *a = json_array();
    for (struct dkn_port *pt = ds->ports; pt; pt = pt->next)
        json_array_append_new(a, port_json(pt));
    return a;
}

void dkn_release(struct dk_sb *ds)
{
    if (ds->egress) {
        port_free(ds->egress);
        ds->egress = NULL;
    }
    while (ds->ports) {
        struct dkn_port *pt = ds->ports;
        ds->ports = pt->next;
        port_free(pt);
    }
}

/* ---- egress: the agent's proxy asks, sbxd decides, resolves and connects ---------- */

/*
 * Names are resolved on a thread of their own (one per lookup, detached),
 * because getaddrinfo blocks; the answer comes back as a pointer written
 * to a pipe that the loop watches. The lookup holds ids, not pointers: the
 * sandbox or its channel may be gone when it ends. The addresses checked
 * are the addresses connected to (no second resolution: no rebinding).
 */
struct lookup {
    uid_t uid;
    char sb_id[64];
    char cid[80];
    uint32_t id;
    char host[256];
    int port;
    int rc;
    struct addrinfo *res;
};

static int lk_pipe[2] = {-1, -1};
static ev_io lk_io;
/*
 * Lookups in flight, bounded daemon-wide, per uid and per sandbox
 * (providers.docker.egress.lookups_max, lookups_per_uid,
 * lookups_per_sandbox): an agent is untrusted and could ask for names faster
 * than they resolve, and one uid's flood must leave slots to the others.
 * Past a bound the answer is 503 and a sandbox.egress notification names it.
 */
#define LOOKUPS_CEIL 1024
static int lk_inflight;
static struct {
    uid_t uid;
    int n;
} lk_uid[LOOKUPS_CEIL];
static int lk_nuid;

static int *lk_uid_count(uid_t uid, int make)
{
    for (int i = 0; i < lk_nuid; i++)
        if (lk_uid[i].uid == uid)
            return &lk_uid[i].n;
    if (!make || lk_nuid >= LOOKUPS_CEIL)
        return NULL;
    lk_uid[lk_nuid].uid = uid;
    lk_uid[lk_nuid].n = 0;
    return &lk_uid[lk_nuid++].n;
}

static void lk_uid_done(uid_t uid)
{
    for (int i = 0; i < lk_nuid; i++)
        if (lk_uid[i].uid == uid && --lk_uid[i].n <= 0) {
            lk_uid[i] = lk_uid[--lk_nuid];
            return;
        }
}

static int egress_int(struct dk_sb *ds, const char *key, int def, int lo, int hi)
{
    json_t *v = json_object_get(json_object_get(ds->dp->conf, "egress"), key);
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : def;
    return n < lo ? lo : n > hi ? hi : (int)n;
}

/* The bound a new lookup of ds would pass (its config key, *max), or NULL. */
static const char *lk_full(struct dk_sb *ds, int *max)
{
    int all = egress_int(ds, "lookups_max", 64, 1, LOOKUPS_CEIL);
    int per_uid = egress_int(ds, "lookups_per_uid", 16, 1, all);
    int per_sb = egress_int(ds, "lookups_per_sandbox", 8, 1, per_uid);
    int *mine = lk_uid_count(ds->sb->owner, 0);
    if (mine && *mine >= per_uid) {
        *max = per_uid;
        return "providers.docker.egress.lookups_per_uid";
    }
    if (ds->lookups >= per_sb) {
        *max = per_sb;
        return "providers.docker.egress.lookups_per_sandbox";
    }
    *max = all;
    return lk_inflight >= all ? "providers.docker.egress.lookups_max" : NULL;
}

static int allowed_name(struct dk_sb *ds, const char *host, int port)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(ds->opts, "egress"), "allow"), i,
                       v)
        if (json_is_string(v) && egress_rule_match(json_string_value(v), host, port))
            return 1;
    return 0;
}

/* A refusal: 403 in the sandbox, a sandbox.egress notification, a log line. */
static void refuse(struct dk_sb *ds, uint32_t id, const char *host, int port, int status,
                   const char *why)
{
    json_t *m = json_pack("{s:i, s:s}", "status", status, "error", why);
    dka_send_json(ds, SBX_CHAN_NET_CLOSE, id, m);
    json_decref(m);
    if (status == 403)
        ds->egress_refused++;
    /* What the sandbox provokes is rate-limited as its agent's lines are: a
     * loop of refused requests must not flood the log or the owner. */
    if (!log_limit_take(&ds->sb->agent_log, ds->sb->id))
        return;
    log_info("docker %s: egress to %s:%d refused: %s", ds->sb->id, host, port, why);
    if (status == 403)
        sandbox_notify(ds->sb, SBX_N_EGRESS,
                       json_pack("{s:s, s:i, s:s, s:s}", "host", host, "port", port,
                                 "decision", "refused", "reason", why));
}

/* A lookup bound reached: 503 in the sandbox, a sandbox.egress notification
 * naming the bound (config key and value), a log line. */
static void refuse_limit(struct dk_sb *ds, uint32_t id, const char *host, int port,
                         const char *key, int max)
{
    char why[160];
    snprintf(why, sizeof(why), "too many names being resolved (%s: %d)", key, max);
    json_t *m = json_pack("{s:i, s:s}", "status", 503, "error", why);
    dka_send_json(ds, SBX_CHAN_NET_CLOSE, id, m);
    json_decref(m);
    ds->egress_limited++;
    if (!log_limit_take(&ds->sb->agent_log, ds->sb->id))
        return;
    log_info("docker %s: egress to %s:%d refused: %s", ds->sb->id, host, port, why);
    sandbox_notify(ds->sb, SBX_N_EGRESS,
                   json_pack("{s:s, s:i, s:s, s:s, s:s, s:i}", "host", host, "port", port,
                             "decision", "refused", "reason", why, "limit", key, "max",
                             max));
}

static struct dkn_port *egress_port(struct dk_sb *ds)
{
    if (!ds->egress) {
        struct dkn_port *pt = xcalloc(1, sizeof(*pt));
        pt->ds = ds;
        pt->fd = -1;
        ev_init(&pt->io, accept_cb);
        ev_timer_init(&pt->retry, retry_cb, 0.02, 0.);
        pt->retry.data = pt;
        ds->egress = pt;
    }
    return ds->egress;
}

static void lookup_done(struct lookup *q)
{
    lk_inflight--;
    lk_uid_done(q->uid);
    struct sandbox *sb = sandbox_find_any(q->sb_id);
    struct dk_sb *ds = dk_sb_of(sb);
    if (ds && strcmp(ds->cid, q->cid) == 0 && ds->lookups > 0)
        ds->lookups--;
    if (!ds || strcmp(ds->cid, q->cid) != 0 || !ds->ready || conn_find(ds, q->id))
        goto out;
    if (q->rc != 0 || !q->res) {
        refuse(ds, q->id, q->host, q->port, 502, gai_strerror(q->rc));
        goto out;
    }
    int allow_private = json_is_true(json_object_get(
        json_object_get(ds->dp->conf, "egress"), "allow_private_addresses"));
    const struct addrinfo *use = NULL;
    for (const struct addrinfo *a = q->res; a; a = a->ai_next) {
        if (!allow_private && egress_rule_addr_private(a->ai_addr)) {
            refuse(ds, q->id, q->host, q->port, 403,
                   "the name resolves to a loopback, private or link-local address");
            goto out;
        }
        if (!use && (a->ai_family == AF_INET || a->ai_family == AF_INET6))
            use = a;
    }
    if (!use) {
        refuse(ds, q->id, q->host, q->port, 502, "no address");
        goto out;
    }
    int fd = socket(use->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 ||
        (connect(fd, use->ai_addr, use->ai_addrlen) < 0 && errno != EINPROGRESS)) {
        refuse(ds, q->id, q->host, q->port, 502, strerror(errno));
        if (fd >= 0)
            close(fd);
        goto out;
    }
    struct dkn_port *pt = egress_port(ds);
    struct dkn_conn *k = xcalloc(1, sizeof(*k));
    k->port = pt;
    k->fd = fd;
    k->id = q->id;
    k->credit = SBX_CHAN_WINDOW;
    k->connecting = 1;
    obuf_init(&k->wbuf);
    ev_init(&k->io, conn_cb);
    k->io.data = k;
    k->next = pt->conns;
    pt->conns = k;
    pt->nconns++;
    pt->connections++;
    if (log_limit_take(&ds->sb->agent_log, ds->sb->id))
        log_info("docker %s: egress to %s:%d allowed", ds->sb->id, q->host, q->port);
    conn_watch(k);
out:
    if (q->res)
        freeaddrinfo(q->res);
    free(q);
}

static void lk_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop;
    (void)w;
    (void)revents;
    struct lookup *qs[64];
    ssize_t n = read(lk_pipe[0], qs, sizeof(qs));
    for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(qs[0]); i++)
        lookup_done(qs[i]);
}

static void *lk_thread(void *arg)
{
    struct lookup *q = arg;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_ADDRCONFIG};
    char port[8];
    snprintf(port, sizeof(port), "%d", q->port);
    q->rc = getaddrinfo(q->host, port, &hints, &q->res);
    /* A pointer is 8 bytes: a pipe write that small is atomic. */
    ssize_t w = write(lk_pipe[1], &q, sizeof(q));
    (void)w;
    return NULL;
}

static void egress_open(struct dk_sb *ds, uint32_t id, const uint8_t *p, size_t n)
{
    json_t *v = chan_json(p, n);
    const char *host = json_string_value(json_object_get(v, "host"));
    json_t *jp = json_object_get(v, "port");
    int port = json_is_integer(jp) ? (int)json_integer_value(jp) : 0;
    if (!(id & 0x80000000u) || !host || strlen(host) >= 256 || port < 1 || port > 65535 ||
        conn_find(ds, id)) {
        json_decref(v);
        dka_send_frame(ds, SBX_CHAN_NET_CLOSE, id, "{\"status\":400}", 14);
        return;
    }
    int max = conf_int(ds, "expose_max_connections", DEFAULT_MAX_CONNS);
    if (ds->egress && ds->egress->nconns >= max) {
        refuse(ds, id, host, port, 503, "too many egress connections");
        json_decref(v);
        return;
    }
    if (!allowed_name(ds, host, port)) {
        refuse(ds, id, host, port, 403, "not in the sandbox's egress allow list");
        json_decref(v);
        return;
    }
    if (lk_pipe[0] < 0) {
        if (pipe2(lk_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
            refuse(ds, id, host, port, 502, "no resolver");
            json_decref(v);
            return;
        }
        ev_io_init(&lk_io, lk_cb, lk_pipe[0], EV_READ);
        ev_io_start(D->loop, &lk_io);
    }
    int lmax;
    const char *full = lk_full(ds, &lmax);
    if (full) {
        refuse_limit(ds, id, host, port, full, lmax);
        json_decref(v);
        return;
    }
    struct lookup *q = xcalloc(1, sizeof(*q));
    snprintf(q->sb_id, sizeof(q->sb_id), "%s", ds->sb->id);
    snprintf(q->cid, sizeof(q->cid), "%s", ds->cid);
    snprintf(q->host, sizeof(q->host), "%s", host);
    q->port = port;
    q->id = id;
    json_decref(v);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 << 10);
    if (pthread_create(&t, &at, lk_thread, q) != 0) {
        refuse(ds, id, q->host, port, 502, "no resolver thread");
        free(q);
    } else {
        lk_inflight++;
        ds->lookups++;
        q->uid = ds->sb->owner;
        (*lk_uid_count(q->uid, 1))++;
    }
    pthread_attr_destroy(&at);
}

void dkn_egress_ready(struct dk_sb *ds)
{
    if (json_is_object(json_object_get(ds->opts, "egress")))
        dka_send_frame(ds, SBX_CHAN_NET_LISTEN, 0, "{\"port\":3128}", 13);
}

json_t *dkn_egress_stats(struct dk_sb *ds)
{
    if (!json_is_object(json_object_get(ds->opts, "egress")))
        return NULL;
    struct dkn_port *pt = ds->egress;
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:i}", "connections",
                     (json_int_t)(pt ? pt->nconns : 0), "connections_total",
                     (json_int_t)(pt ? pt->connections : 0), "refused",
                     (json_int_t)ds->egress_refused, "limited",
                     (json_int_t)ds->egress_limited, "bytes_in",
                     (json_int_t)(pt ? pt->bytes_out : 0), "bytes_out",
                     (json_int_t)(pt ? pt->bytes_in : 0), "lookups", ds->lookups);
}
