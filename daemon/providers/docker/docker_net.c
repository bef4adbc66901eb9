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
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "docker_int.h"
#include "log.h"
#include "sandbox.h"
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
};

struct dkn_port {
    struct dkn_port *next;
    struct dk_sb *ds;
    int port, host_port;
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
    int ev = 0;
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

void dkn_frame(struct dk_sb *ds, uint8_t type, uint32_t id, const uint8_t *p, size_t n)
{
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
        int max = conf_int(ds, "expose_max_connections", DEFAULT_MAX_CONNS), total = 0;
        for (struct dkn_port *q = ds->ports; q; q = q->next)
            total += q->nconns;
        if (!ds->ready || ds->exec_mode || total >= max) {
            if (total >= max && log_limit_take(&ds->sb->agent_log, ds->sb->id))
                log_info("docker %s: port %d: connection refused (%d of "
                         "expose_max_connections)",
                         ds->sb->id, pt->port, total);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct dkn_conn *k = xcalloc(1, sizeof(*k));
        k->port = pt;
        k->fd = fd;
        k->id = ++ds->next_conn ? ds->next_conn : ++ds->next_conn;
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
    close(pt->fd);
    free(pt);
}

static json_t *port_json(struct dkn_port *pt)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", pt->host_port);
    return json_pack("{s:i, s:s, s:i, s:s, s:i, s:I, s:I, s:I}", "port", pt->port, "host",
                     "127.0.0.1", "host_port", pt->host_port, "url", url, "connections",
                     pt->nconns, "connections_total", (json_int_t)pt->connections,
                     "bytes_in", (json_int_t)pt->bytes_in, "bytes_out",
                     (json_int_t)pt->bytes_out);
}

int dk_sb_expose(void *cookie, struct sandbox *sb, int port, int host_port, json_t **out,
                 sbx_err_t *err)
{
    struct dk_prov *dp = cookie;
    struct dk_sb *ds = sb->pdata;
    if (json_is_false(json_object_get(dp->conf, "expose")))
        return err_make_data(err, SBX_E_PERMISSION, json_object(),
                             "providers.docker.expose is false: ports cannot be exposed");
    if (!ds || ds->exec_mode)
        return err_make_data(
            err, SBX_E_UNSUPPORTED,
            json_pack("{s:s, s:s}", "provider", "docker", "feature", "expose"),
            "ports are relayed by the agent: not in exec_mode docker-exec");
    int n = 0;
    for (struct dkn_port *pt = ds->ports; pt; pt = pt->next, n++)
        if (pt->port == port) {
            if (host_port && host_port != pt->host_port)
                return err_make_data(
                    err, SBX_E_STATE,
                    json_pack("{s:s, s:i}", "sandbox", sb->id, "port", port),
                    "port %d is already exposed on host port %d", port, pt->host_port);
            *out = port_json(pt);
            return 0;
        }
    int max = conf_int(ds, "expose_max_ports", DEFAULT_MAX_PORTS);
    if (n >= max)
        return err_make_data(err, SBX_E_LIMIT,
                             json_pack("{s:s, s:i}", "limit",
                                       "providers.docker.expose_max_ports", "max", max),
                             "sandbox %s already exposes %d ports", sb->id, n);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)host_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(fd, 64) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return err_make_data(
            err, SBX_E_PROVIDER,
            json_pack("{s:s, s:s}", "provider", "docker", "message", strerror(e)),
            "cannot listen on 127.0.0.1:%d: %s", host_port, strerror(e));
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    struct dkn_port *pt = xcalloc(1, sizeof(*pt));
    pt->ds = ds;
    pt->port = port;
    pt->host_port = ntohs(sa.sin_port);
    pt->fd = fd;
    ev_io_init(&pt->io, accept_cb, fd, EV_READ);
    pt->io.data = pt;
    ev_io_start(D->loop, &pt->io);
    ev_timer_init(&pt->retry, retry_cb, 0.02, 0.);
    pt->retry.data = pt;
    pt->next = ds->ports;
    ds->ports = pt;
    log_info("docker %s: port %d exposed on 127.0.0.1:%d", sb->id, port, pt->host_port);
    *out = port_json(pt);
    return 0;
}

int dk_sb_unexpose(void *cookie, struct sandbox *sb, int port, sbx_err_t *err)
{
    struct dk_sb *ds = sb->pdata;
    (void)cookie;
    for (struct dkn_port **pp = ds ? &ds->ports : NULL; pp && *pp; pp = &(*pp)->next)
        if ((*pp)->port == port) {
            struct dkn_port *pt = *pp;
            *pp = pt->next;
            port_free(pt);
            return 0;
        }
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
    while (ds->ports) {
        struct dkn_port *pt = ds->ports;
        ds->ports = pt->next;
        port_free(pt);
    }
}
