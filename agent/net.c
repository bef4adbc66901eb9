/*
 * net.c - connections the agent relays over the channel (proto/CHANNEL.md,
 * "Connections"): sandbox.expose opens one to 127.0.0.1:PORT inside the
 * container for each client of the exposed port on the host.
 *
 * Each connection has its own credit in both directions (a window of
 * SBX_CHAN_WINDOW bytes, topped up by NET_CREDIT as the other side writes
 * them out), so a slow peer stalls only its own connection and the shared
 * channel never fills with one connection's bytes. The socket is read only
 * while the connection has credit and the channel's queue is below its
 * soft mark; bytes from the daemon are buffered at most one window.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"

enum nstate { N_CONNECTING, N_OPEN, N_DEAD };

struct nconn {
    uint32_t id;
    int fd;
    enum nstate state;
    struct buf out; /* from the daemon, for the socket */
    bool out_eof;   /* NET_EOF from the daemon: shut down writing once out is empty */
    bool wr_shut;   /* done */
    bool rd_eof;    /* the socket said EOF: NET_EOF sent */
    int64_t credit; /* bytes we may still send the daemon */
    uint32_t owed;  /* bytes written to the socket, not yet credited back */
};

static struct nconn *conns[AGENT_MAX_CONNS];
static size_t nconns;
static net_send_fn send_frame;
/* poll entries handed out by net_pollfds, in order */
static struct nconn *polled[AGENT_MAX_CONNS];

void net_init(net_send_fn fn)
{
    send_frame = fn;
}

static struct nconn *find(uint32_t id)
{
    for (size_t k = 0; k < nconns; k++)
        if (conns[k]->id == id && conns[k]->state != N_DEAD)
            return conns[k];
    return NULL;
}

/* Ends c: NET_CLOSE to the daemon (unless it closed it), freed by net_reap. */
static void drop(struct nconn *c, const char *why, bool tell)
{
    if (c->state == N_DEAD)
        return;
    if (tell) {
        struct buf b = {0};
        if (why) {
            buf_puts(&b, "{\"error\":");
            json_put_str(&b, why, strlen(why));
            buf_puts(&b, "}");
        }
        send_frame(SBX_CHAN_NET_CLOSE, c->id, b.data ? b.data + b.off : NULL,
                   buf_pending(&b));
        buf_deinit(&b);
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = N_DEAD;
}

void net_reap(void)
{
    for (size_t k = 0; k < nconns;) {
        if (conns[k]->state == N_DEAD) {
            buf_deinit(&conns[k]->out);
            free(conns[k]);
            conns[k] = conns[--nconns];
            continue;
        }
        k++;
    }
}

static void on_open(uint32_t id, const uint8_t *p, size_t n)
{
    char err[128];
    if (!send_frame)
        return; /* net_init not called (the fuzz harness): nothing is relayed */
    if (id == 0 || find(id)) {
        send_frame(SBX_CHAN_NET_CLOSE, id, "{\"error\":\"bad connection id\"}", 29);
        return;
    }
    struct jval *root = json_parse((const char *)p, n, err, sizeof(err));
    const struct jval *port = root ? json_get(root, "port") : NULL;
    if (!port || port->type != J_NUM || !port->is_int || port->ival < 1 ||
        port->ival > 65535 || nconns >= AGENT_MAX_CONNS) {
        json_free(root);
        static const char msg[] = "{\"error\":\"NET_OPEN needs {\\\"port\\\": 1..65535}, "
                                  "or too many connections\"}";
        send_frame(SBX_CHAN_NET_CLOSE, id, msg, sizeof(msg) - 1);
        return;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port->ival),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    json_free(root);
    struct nconn *c = xcalloc(1, sizeof(*c));
    c->id = id;
    c->credit = SBX_CHAN_WINDOW;
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    conns[nconns++] = c;
    if (c->fd < 0) {
        drop(c, strerror(errno), true);
        return;
    }
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        c->state = N_OPEN;
        send_frame(SBX_CHAN_NET_OPENED, id, NULL, 0);
    } else if (errno == EINPROGRESS) {
        c->state = N_CONNECTING;
    } else {
        drop(c, strerror(errno), true);
    }
}

/* Writes what the daemon sent; credits it back; shuts down after NET_EOF. */
static void flush_out(struct nconn *c)
{
    while (c->state == N_OPEN && buf_pending(&c->out) > 0) {
        ssize_t w = send(c->fd, c->out.data + c->out.off, buf_pending(&c->out),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            buf_consume(&c->out, (size_t)w);
            c->owed += (uint32_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            break;
        drop(c, w < 0 ? strerror(errno) : "closed", true);
        return;
    }
    if (c->state == N_OPEN && c->owed >= SBX_CHAN_WINDOW / 4) {
        uint8_t v[4];
        sbx_chan_put_u32(v, c->owed);
        send_frame(SBX_CHAN_NET_CREDIT, c->id, v, 4);
        c->owed = 0;
    }
    if (c->state == N_OPEN && c->out_eof && !c->wr_shut && buf_pending(&c->out) == 0) {
        shutdown(c->fd, SHUT_WR);
        c->wr_shut = true;
    }
    if (c->state == N_OPEN && c->wr_shut && c->rd_eof)
        drop(c, NULL, true);
}

void net_frame(uint8_t type, uint32_t id, const uint8_t *p, size_t n)
{
    if (type == SBX_CHAN_NET_OPEN) {
        on_open(id, p, n);
        return;
    }
    struct nconn *c = find(id);
    if (!c)
        return; /* raced with its close */
    switch (type) {
    case SBX_CHAN_NET_DATA:
        if (c->out_eof || buf_pending(&c->out) + n > 2 * SBX_CHAN_WINDOW ||
            buf_append(&c->out, p, n) < 0) {
            drop(c, "the daemon sent past its window", true);
            return;
        }
        flush_out(c);
        return;
    case SBX_CHAN_NET_EOF:
        c->out_eof = true;
        flush_out(c);
        return;
    case SBX_CHAN_NET_CLOSE:
        drop(c, NULL, false);
        return;
    case SBX_CHAN_NET_CREDIT:
        if (n == 4) {
            c->credit += sbx_chan_get_u32(p);
            if (c->credit > AGENT_CREDIT_MAX)
                c->credit = AGENT_CREDIT_MAX;
        }
        return;
    }
}

int net_pollfds(struct pollfd *pfd, int max, bool obuf_room)
{
    int n = 0;
    for (size_t k = 0; k < nconns && n < max; k++) {
        struct nconn *c = conns[k];
        short ev = 0;
        if (c->state == N_CONNECTING)
            ev = POLLOUT;
        else if (c->state == N_OPEN) {
            if (obuf_room && c->credit > 0 && !c->rd_eof)
                ev |= POLLIN;
            if (buf_pending(&c->out) > 0)
                ev |= POLLOUT;
        }
        if (!ev)
            continue;
        pfd[n] = (struct pollfd){.fd = c->fd, .events = ev};
        polled[n++] = c;
    }
    return n;
}

static void read_sock(struct nconn *c)
{
    static uint8_t chunk[AGENT_FRAME_OUT];
    size_t want = c->credit < (int64_t)sizeof(chunk) ? (size_t)c->credit : sizeof(chunk);
    if (want == 0)
        return;
    ssize_t r = recv(c->fd, chunk, want, MSG_DONTWAIT);
    if (r > 0) {
        c->credit -= r;
        send_frame(SBX_CHAN_NET_DATA, c->id, chunk, (size_t)r);
        return;
    }
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r < 0) {
        drop(c, strerror(errno), true);
        return;
    }
    c->rd_eof = true;
    send_frame(SBX_CHAN_NET_EOF, c->id, NULL, 0);
    if (c->wr_shut)
        drop(c, NULL, true);
}

void net_ready(int k, short revents)
{
    struct nconn *c = polled[k];
    if (c->state == N_DEAD)
        return;
    if (c->state == N_CONNECTING) {
        int e = 0;
        socklen_t l = sizeof(e);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &l);
        if (e) {
            drop(c, strerror(e), true);
            return;
        }
        c->state = N_OPEN;
        send_frame(SBX_CHAN_NET_OPENED, c->id, NULL, 0);
        return;
    }
    if (revents & POLLOUT)
        flush_out(c);
    if (c->state == N_OPEN && (revents & (POLLIN | POLLHUP | POLLERR)))
        read_sock(c);
}

void net_close_all(void)
{
    for (size_t k = 0; k < nconns; k++)
        drop(conns[k], NULL, false);
    net_reap();
}
