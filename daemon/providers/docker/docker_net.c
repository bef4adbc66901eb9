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
#include <unistd.h>

#include "daemon.h"
#include "docker_int.h"
#include "log.h"
#include "provider.h"
#include "sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

extern const struct sbx_provider sbx_provider_docker;

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
/* Lookups in flight, daemon-wide: an agent is untrusted and could ask for
 * names faster than they resolve; past this many the answer is 503. */
#define LOOKUPS_MAX 64
static int lk_inflight;

/* "host", "*.domain", either with ":port"; ports default to 80 and 443. */
static int pattern_match(const char *pat, const char *host, int port)
{
    char ph[256];
    int pport = 0;
    const char *colon = strrchr(pat, ':');
    size_t hl = colon ? (size_t)(colon - pat) : strlen(pat);
    if (hl == 0 || hl >= sizeof(ph))
        return 0;
    memcpy(ph, pat, hl);
    ph[hl] = '\0';
    if (colon)
        pport = atoi(colon + 1);
    if (pport ? port != pport : port != 80 && port != 443)
        return 0;
    if (strcmp(ph, "*") == 0)
        return 1;
    if (ph[0] == '*' && ph[1] == '.') {
        size_t n = strlen(host), m = strlen(ph + 1);
        return n > m && strcasecmp(host + n - m, ph + 1) == 0;
    }
    return strcasecmp(ph, host) == 0;
}

static int allowed_name(struct dk_sb *ds, const char *host, int port)
{
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(json_object_get(ds->opts, "egress"), "allow"), i,
                       v)
        if (json_is_string(v) && pattern_match(json_string_value(v), host, port))
            return 1;
    return 0;
}

/* Loopback, private, link-local, CGNAT, multicast, unspecified, ULA... */
static int private_addr(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        return (a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 ||
               (a >> 16) == 0xa9fe || (a >> 20) == 0xac1 || (a >> 16) == 0xc0a8 ||
               (a >> 22) == (100u << 2 | 1) || (a >> 28) >= 0xe;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            struct sockaddr_in v4 = {.sin_family = AF_INET};
            memcpy(&v4.sin_addr, a->s6_addr + 12, 4);
            return private_addr((const struct sockaddr *)&v4);
        }
        return IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) ||
               IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_MULTICAST(a) ||
               (a->s6_addr[0] & 0xfe) == 0xfc;
    }
    return 1;
}

/* A refusal: 403 in the sandbox, a sandbox.egress notification, a log line. */
static void refuse(struct dk_sb *ds, uint32_t id, const char *host, int port, int status,
                   const char *why)
{
    json_t *m = json_pack("{s:i, s:s}", "status", status, "error", why);
    dk_send_json(ds, SBX_CHAN_NET_CLOSE, id, m);
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
    struct sandbox *sb = sandbox_find_any(q->sb_id);
    struct dk_sb *ds = sb && sb->prov->ops == &sbx_provider_docker ? sb->pdata : NULL;
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
        if (!allow_private && private_addr(a->ai_addr)) {
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
    if (lk_inflight >= LOOKUPS_MAX) {
        refuse(ds, id, host, port, 503, "too many names being resolved");
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
    }
    pthread_attr_destroy(&at);
}

void dke_ready(struct dk_sb *ds)
{
    if (json_is_object(json_object_get(ds->opts, "egress")))
        dka_send_frame(ds, SBX_CHAN_NET_LISTEN, 0, "{\"port\":3128}", 13);
}

json_t *dke_stats(struct dk_sb *ds)
{
    if (!json_is_object(json_object_get(ds->opts, "egress")))
        return NULL;
    struct dkn_port *pt = ds->egress;
    return json_pack(
        "{s:I, s:I, s:I, s:I, s:I}", "connections", (json_int_t)(pt ? pt->nconns : 0),
        "connections_total", (json_int_t)(pt ? pt->connections : 0), "refused",
        (json_int_t)ds->egress_refused, "bytes_in", (json_int_t)(pt ? pt->bytes_out : 0),
        "bytes_out", (json_int_t)(pt ? pt->bytes_in : 0));
}

/* A request entry covered by a ceiling entry: the same name, or under the
 * ceiling's wildcard; the same port, or no port on either. */
static int covers(const char *ceil, const char *want)
{
    const char *cc = strrchr(ceil, ':'), *wc = strrchr(want, ':');
    size_t cl = cc ? (size_t)(cc - ceil) : strlen(ceil);
    size_t wl = wc ? (size_t)(wc - want) : strlen(want);
    if (cc && (!wc || strcmp(cc, wc) != 0))
        return 0;
    if (cl == 1 && ceil[0] == '*')
        return 1;
    if (cl > 2 && ceil[0] == '*' && ceil[1] == '.')
        return wl > cl - 1 && strncasecmp(want + wl - (cl - 1), ceil + 1, cl - 1) == 0;
    return cl == wl && strncasecmp(ceil, want, cl) == 0;
}

static int valid_pattern(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 260)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == ':' ||
              (ch == '*' && i == 0)))
            return 0;
    }
    return !(s[0] == '*' && n > 1 && s[1] != '.');
}

int dke_options(json_t *req, json_t *pconf, json_t *o, sbx_err_t *err)
{
    if (!req || json_is_null(req))
        return 0;
    json_t *allow = json_object_get(req, "allow");
    if (!json_is_object(req) || !json_is_array(allow) || json_object_size(req) != 1)
        return err_make_data(
            err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.egress"),
            "options.egress must be {\"allow\": [\"host\", \"*.domain\", "
            "\"host:port\", ...]}");
    json_t *ceil = json_object_get(json_object_get(pconf, "egress"), "allow");
    size_t i, j;
    json_t *v, *c;
    if (json_array_size(allow) > 100)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "options.egress.allow", "max", 100),
            "options.egress.allow has more than 100 entries");
    json_array_foreach(allow, i, v) {
        const char *w = json_string_value(v);
        if (!w || !valid_pattern(w))
            return err_make_data(
                err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.egress.allow"),
                "options.egress.allow: not a host pattern: %s", w ? w : "(not a string)");
        int ok = 0;
        json_array_foreach(ceil, j, c)
            ok |= json_is_string(c) && covers(json_string_value(c), w);
        if (!ok)
            return err_make_data(err, SBX_E_PERMISSION,
                                 json_pack("{s:s, s:s, s:s}", "option", "egress",
                                           "reason", "ceiling", "requested", w),
                                 "egress to %s is beyond providers.docker.egress.allow",
                                 w);
    }
    json_object_set_new(o, "egress", json_pack("{s:O}", "allow", allow));
    json_t *env = json_object_get(o, "env");
    static const char *const keys[] = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                                       "https_proxy"};
    for (size_t k = 0; env && k < 4; k++)
        json_object_set_new(env, keys[k], json_string("http://127.0.0.1:3128"));
    if (env) {
        json_object_set_new(env, "NO_PROXY", json_string("localhost,127.0.0.1"));
        json_object_set_new(env, "no_proxy", json_string("localhost,127.0.0.1"));
    }
    return 0;
}
