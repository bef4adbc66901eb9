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
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"

enum nstate {
    N_CONNECTING, /* NET_OPEN: our connect() in progress */
    N_OPEN,
    N_HEAD, /* a proxy client: reading its request head */
    N_WAIT, /* EGRESS_OPEN sent: the daemon decides */
    N_DEAD,
};

#define HEAD_MAX 8192
#define EGRESS_ID_BIT 0x80000000u

struct nconn {
    uint32_t id;
    int fd;
    enum nstate state;
    struct buf out;  /* from the daemon, for the socket */
    bool out_eof;    /* NET_EOF from the daemon: shut down writing once out is empty */
    bool wr_shut;    /* done */
    bool rd_eof;     /* the socket said EOF: NET_EOF sent */
    int64_t credit;  /* bytes we may still send the daemon */
    uint32_t owed;   /* bytes written to the socket, not yet credited back */
    bool is_connect; /* proxy: CONNECT (answer 200 and relay) or plain (send the head) */
    struct buf head; /* proxy: the request head, then what goes to the daemon first */
};

static int proxy_fd = -1;
static uint32_t next_egress_id;

static struct nconn *conns[AGENT_MAX_CONNS];
static size_t nconns;
static net_send_fn send_frame;
/* poll entries handed out by net_pollfds, in order */
static struct nconn *polled[AGENT_MAX_CONNS + 1];

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
            buf_deinit(&conns[k]->head);
            free(conns[k]);
            conns[k] = conns[--nconns];
            continue;
        }
        k++;
    }
}

/* ---- the egress proxy: NET_LISTEN, a client's request head ------------------- */

static void on_listen(const uint8_t *p, size_t n)
{
    char err[128];
    struct jval *root = json_parse((const char *)p, n, err, sizeof(err));
    const struct jval *port = root ? json_get(root, "port") : NULL;
    if (!send_frame || proxy_fd >= 0 || !port || port->type != J_NUM || !port->is_int ||
        port->ival < 1 || port->ival > 65535) {
        json_free(root);
        return;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port->ival),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    json_free(root);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(fd, 64) < 0) {
        alog("egress proxy: cannot listen: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    proxy_fd = fd;
}

static void proxy_accept(void)
{
    for (int k = 0; k < 16 && nconns < AGENT_MAX_CONNS; k++) {
        int fd = accept4(proxy_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct nconn *c = xcalloc(1, sizeof(*c));
        c->id = EGRESS_ID_BIT | (++next_egress_id & ~EGRESS_ID_BIT);
        c->fd = fd;
        c->state = N_HEAD;
        c->credit = SBX_CHAN_WINDOW;
        conns[nconns++] = c;
    }
}

/* A response to the proxy client, then the end of it. */
static void answer_and_close(struct nconn *c, int status, const char *reason,
                             const char *text)
{
    char msg[600];
    int n =
        snprintf(msg, sizeof(msg),
                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                 "Connection: close\r\n\r\n%s",
                 status, reason, strlen(text), text);
    if (n > 0) {
        ssize_t w =
            send(c->fd, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1,
                 MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    close(c->fd);
    c->fd = -1;
    c->state = N_DEAD;
}

/* host[:port] or [v6]:port of an authority into host (cap bytes, brackets
 * dropped) and *port. The daemon decides what the host may be; here only
 * its shape: an IPv6 literal holds hex digits, ':' and '.' (an embedded
 * IPv4) and nothing else. */
static int split_authority(const char *a, size_t n, char *host, size_t cap, int *port)
{
    const char *colon = NULL, *hs = a;
    size_t hl;
    if (n > 0 && a[0] == '[') {
        const char *rb = memchr(a, ']', n);
        if (!rb || (rb + 1 < a + n && rb[1] != ':'))
            return -1;
        hs = a + 1;
        hl = (size_t)(rb - hs);
        for (size_t i = 0; i < hl; i++)
            if (!isxdigit((unsigned char)hs[i]) && hs[i] != ':' && hs[i] != '.')
                return -1;
        colon = rb + 1 < a + n ? rb + 1 : NULL;
    } else {
        for (size_t i = 0; i < n; i++)
            if (a[i] == ':') {
                if (colon)
                    return -1; /* an IPv6 literal needs its brackets */
                colon = a + i;
            }
        hl = colon ? (size_t)(colon - a) : n;
    }
    if (hl == 0 || hl >= cap)
        return -1;
    memcpy(host, hs, hl);
    host[hl] = '\0';
    if (colon) {
        char num[8];
        size_t pl = n - (size_t)(colon - a) - 1;
        if (pl == 0 || pl >= sizeof(num))
            return -1;
        memcpy(num, colon + 1, pl);
        num[pl] = '\0';
        char *end;
        long v = strtol(num, &end, 10);
        if (*end || v < 1 || v > 65535)
            return -1;
        *port = (int)v;
    }
    return 0;
}

/*
 * The head is complete: "CONNECT host:port HTTP/1.x" or "METHOD
 * http://host[:port]/path HTTP/1.x" (plain, rewritten to origin form).
 * Asks the daemon with EGRESS_OPEN; anything else is answered 400 here.
 */
static void head_done(struct nconn *c)
{
    const char *h = (const char *)c->head.data + c->head.off;
    size_t len = buf_pending(&c->head);
    const char *eol = memchr(h, '\r', len);
    const char *sp1 = eol ? memchr(h, ' ', (size_t)(eol - h)) : NULL;
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
    char host[256];
    int port = 80;
    if (!sp2) {
        answer_and_close(c, 400, "Bad Request", "sbxd egress proxy: bad request line\n");
        return;
    }
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(sp2 - target);
    struct buf rest = {0};
    if ((size_t)(sp1 - h) == 7 && memcmp(h, "CONNECT", 7) == 0) {
        port = 443;
        if (split_authority(target, tlen, host, sizeof(host), &port) < 0) {
            answer_and_close(c, 400, "Bad Request",
                             "sbxd egress proxy: bad CONNECT target\n");
            return;
        }
        c->is_connect = true;
        /* bytes the client sent after the head go up once connected */
        const char *end = memmem(h, len, "\r\n\r\n", 4);
        buf_append(&rest, end + 4, len - (size_t)(end + 4 - h));
    } else if (tlen > 7 && strncasecmp(target, "http://", 7) == 0) {
        const char *auth = target + 7, *slash = memchr(auth, '/', tlen - 7);
        size_t alen = slash ? (size_t)(slash - auth) : tlen - 7;
        if (split_authority(auth, alen, host, sizeof(host), &port) < 0) {
            answer_and_close(c, 400, "Bad Request", "sbxd egress proxy: bad URL\n");
            return;
        }
        /* METHOD /path HTTP/1.x, then the rest of the head as it came */
        buf_append(&rest, h, (size_t)(sp1 - h) + 1);
        if (slash)
            buf_append(&rest, slash, (size_t)(sp2 - slash));
        else
            buf_puts(&rest, "/");
        buf_append(&rest, sp2, len - (size_t)(sp2 - h));
    } else {
        answer_and_close(c, 400, "Bad Request",
                         "sbxd egress proxy: only CONNECT and absolute http:// URLs\n");
        return;
    }
    buf_deinit(&c->head);
    c->head = rest;
    struct buf b = {0};
    buf_puts(&b, "{\"host\":");
    json_put_str(&b, host, strlen(host));
    buf_printf(&b, ",\"port\":%d}", port);
    send_frame(SBX_CHAN_EGRESS_OPEN, c->id, b.data + b.off, buf_pending(&b));
    buf_deinit(&b);
    c->state = N_WAIT;
}

static void read_head(struct nconn *c)
{
    char chunk[2048];
    ssize_t r = recv(c->fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0) {
        drop(c, NULL, false);
        return;
    }
    if (buf_pending(&c->head) + (size_t)r > HEAD_MAX) {
        answer_and_close(c, 431, "Request Header Fields Too Large",
                         "sbxd egress proxy: request head over 8 KiB\n");
        return;
    }
    buf_append(&c->head, chunk, (size_t)r);
    if (memmem(c->head.data + c->head.off, buf_pending(&c->head), "\r\n\r\n", 4))
        head_done(c);
}

/* The daemon's answer to EGRESS_OPEN. */
static void egress_answer(struct nconn *c, uint8_t type, const uint8_t *p, size_t n)
{
    if (type == SBX_CHAN_NET_OPENED) {
        c->state = N_OPEN;
        if (c->is_connect) {
            static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
            ssize_t w = send(c->fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;
        }
        size_t k = buf_pending(&c->head);
        if (k > 0) {
            send_frame(SBX_CHAN_NET_DATA, c->id, c->head.data + c->head.off, k);
            c->credit -= (int64_t)k;
        }
        buf_deinit(&c->head);
        return;
    }
    if (type == SBX_CHAN_NET_CLOSE) {
        char err[64], text[400] = "sbxd egress proxy: refused\n";
        struct jval *root = json_parse((const char *)p, n, err, sizeof(err));
        const struct jval *e = root ? json_get(root, "error") : NULL;
        if (e && e->type == J_STR)
            snprintf(text, sizeof(text), "sbxd egress proxy: %.*s\n", (int)e->len,
                     e->str);
        const struct jval *st = root ? json_get(root, "status") : NULL;
        int status = st && st->type == J_NUM && st->is_int ? (int)st->ival : 502;
        json_free(root);
        answer_and_close(c, status, status == 403 ? "Forbidden" : "Bad Gateway", text);
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
    if (type == SBX_CHAN_NET_LISTEN) {
        on_listen(p, n);
        return;
    }
    struct nconn *c = find(id);
    if (!c)
        return; /* raced with its close */
    if (c->state == N_WAIT) {
        egress_answer(c, type, p, n);
        return;
    }
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
    if (proxy_fd >= 0 && obuf_room && nconns < AGENT_MAX_CONNS && n < max) {
        pfd[n] = (struct pollfd){.fd = proxy_fd, .events = POLLIN};
        polled[n++] = NULL;
    }
    for (size_t k = 0; k < nconns && n < max; k++) {
        struct nconn *c = conns[k];
        short ev = 0;
        if (c->state == N_CONNECTING)
            ev = POLLOUT;
        else if (c->state == N_HEAD)
            ev = POLLIN;
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
    if (!c) {
        proxy_accept();
        return;
    }
    if (c->state == N_DEAD || c->state == N_WAIT)
        return;
    if (c->state == N_HEAD) {
        read_head(c);
        return;
    }
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
