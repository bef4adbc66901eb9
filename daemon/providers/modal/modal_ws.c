/*
 * modal_ws.c - sandboxes as workspaces on Modal (issue 18), in Modal's own
 * terms, as today's SDKs use them (npm modal 0.11.1, api.proto and
 * task_command_router.proto of 2026-08):
 *
 *   terminals  TaskExecStart.pty_info (ContainerExec.pty_info on the
 *              fallback), the SDKs' PTYInfo with sbxd's size. Neither
 *              service has a call that resizes a running exec's terminal, so
 *              process.resize is -32011 {feature: "resize"}.
 *   ports in   Modal opens tunnels only when a sandbox is created
 *              (Sandbox.open_ports): options.ports declares them, the start
 *              ends once SandboxGetTunnels has said where they are, and
 *              sandbox.expose answers from that. A port not declared is
 *              -32602 saying so; unexpose is -32011 (a tunnel lives as long
 *              as its sandbox).
 *   ports out  options.egress.allow becomes Sandbox.network_access: CIDRs
 *              and addresses into allowed_cidrs, names and *.domains into
 *              allowed_domains, [] is BLOCKED; a host:port entry cannot be
 *              said to Modal and is refused. Every entry must be covered by
 *              providers.modal.egress.allow, and private ranges need
 *              allow_private_addresses, as on Docker.
 *   stats      SandboxGetResourceUsage: what Modal bills, cumulative CPU
 *              core-seconds and memory GiB-seconds; percent is over the time
 *              since the previous sample. Modal reports no current memory,
 *              pids, block I/O or network: those are null.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "log.h"
#include "providers/modal/modal_ws.h"
#include "providers/modal/modal_ws_int.h"
#include "core/terminal.h"
#include "xalloc.h"

#define MAX_EGRESS 100       /* Modal's cap on domain lists */
#define DEFAULT_MAX_PORTS 16 /* providers.modal.expose_max_ports */
#define TUNNELS_WAIT_S 50.0  /* SandboxGetTunnels.timeout, the SDK's default */

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void modal_ws_load(struct mprov *mp, json_t *conf)
{
    mp->ws_conf =
        json_pack("{s:O?, s:O?, s:O?}", "expose", json_object_get(conf, "expose"),
                  "expose_max_ports", json_object_get(conf, "expose_max_ports"), "egress",
                  json_object_get(conf, "egress"));
}

void modal_ws_unload(struct mprov *mp)
{
    json_decref(mp->ws_conf);
    mp->ws_conf = NULL;
}

/* ---- options.ports ------------------------------------------------------------ */

static int ports_err(sbx_err_t *err, const char *msg)
{
    return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.ports"),
                         "options.ports: %s", msg);
}

static int parse_ports(struct mprov *mp, json_t *req, struct mws *w, sbx_err_t *err)
{
    if (!json_is_array(req))
        return ports_err(err, "must be an array of ports (8080 or "
                              "{\"port\": 8080, \"unencrypted\": true})");
    /* Adopted (its tunnels exist): not refused again, see egress_entry. */
    if (json_is_false(json_object_get(mp->ws_conf, "expose")) && !mp->ws_adopting)
        return err_make(err, SBX_E_PERMISSION,
                        "providers.modal.expose is false: ports cannot be declared");
    json_int_t max = json_integer_value(json_object_get(mp->ws_conf, "expose_max_ports"));
    if (max <= 0)
        max = DEFAULT_MAX_PORTS;
    if ((json_int_t)json_array_size(req) > max && !mp->ws_adopting)
        return err_make_data(err, SBX_E_LIMIT,
                             json_pack("{s:s, s:I}", "limit",
                                       "providers.modal.expose_max_ports", "max", max),
                             "options.ports declares more than %lld ports",
                             (long long)max);
    w->ports = xcalloc(json_array_size(req) + 1, sizeof(*w->ports));
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) {
        json_t *pv = json_is_object(v) ? json_object_get(v, "port") : v;
        json_t *uv = json_is_object(v) ? json_object_get(v, "unencrypted") : NULL;
        json_int_t port = json_integer_value(pv);
        if (!json_is_integer(pv) || port < 1 || port > 65535 ||
            (uv && !json_is_boolean(uv)))
            return ports_err(err, "each entry is a port 1..65535 or {\"port\": N, "
                                  "\"unencrypted\": bool}");
        for (size_t j = 0; j < w->nports; j++)
            if (w->ports[j].port == port)
                return ports_err(err, "a port is declared twice");
        w->ports[w->nports].port = (int)port;
        w->ports[w->nports++].unencrypted = json_is_true(uv);
    }
    w->specs = xcalloc(w->nports + 1, sizeof(*w->specs));
    w->specp = xcalloc(w->nports + 1, sizeof(*w->specp));
    for (size_t j = 0; j < w->nports; j++) {
        modal__client__port_spec__init(&w->specs[j]);
        w->specs[j].port = (uint32_t)w->ports[j].port;
        w->specs[j].unencrypted = w->ports[j].unencrypted;
        w->specp[j] = &w->specs[j];
    }
    return 0;
}

/* ---- options.egress ------------------------------------------------------------- */

struct cidr {
    int family;
    unsigned char a[16];
    int len;
};

/* "10.0.0.0/8", "2001:db8::/32" or a bare address: 1; anything else 0. */
static int parse_cidr(const char *s, struct cidr *out)
{
    char buf[64];
    const char *slash = strchr(s, '/');
    size_t n = slash ? (size_t)(slash - s) : strlen(s);
    if (n == 0 || n >= sizeof(buf))
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    out->family = strchr(buf, ':') ? AF_INET6 : AF_INET;
    int bits = out->family == AF_INET ? 32 : 128;
    memset(out->a, 0, sizeof(out->a));
    if (inet_pton(out->family, buf, out->a) != 1)
        return 0;
    out->len = bits;
    if (slash) {
        char *end;
        long l = strtol(slash + 1, &end, 10);
        if (!slash[1] || *end || l < 0 || l > bits)
            return 0;
        out->len = (int)l;
    }
    return 1;
}

/* The first n bits of a and b agree. */
static int same_prefix(const unsigned char *a, const unsigned char *b, int n)
{
    int bytes = n / 8, rest = n % 8;
    if (memcmp(a, b, (size_t)bytes) != 0)
        return 0;
    if (!rest)
        return 1;
    unsigned char mask = (unsigned char)(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

/* r shares addresses with loopback, private, link-local, CGNAT, multicast... */
static int private_cidr(const struct cidr *r)
{
    static const char *const v4[] = {"0.0.0.0/8",      "10.0.0.0/8",    "127.0.0.0/8",
                                     "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
                                     "100.64.0.0/10",  "224.0.0.0/3"};
    static const char *const v6[] = {"::/127", "fe80::/10", "ff00::/8", "fc00::/7",
                                     "::ffff:0:0/96"};
    const char *const *list = r->family == AF_INET ? v4 : v6;
    size_t n = r->family == AF_INET ? 8 : 5;
    for (size_t i = 0; i < n; i++) {
        struct cidr p;
        parse_cidr(list[i], &p);
        if (same_prefix(r->a, p.a, r->len < p.len ? r->len : p.len))
            return 1;
    }
    return 0;
}

/* A name or *.domain Modal's allowed_domains takes. */
static int valid_domain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253 || (s[0] == '*' && (n < 3 || s[1] != '.')))
        return 0;
    for (size_t i = s[0] == '*' ? 2 : 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
              (ch >= '0' && ch <= '9') || ch == '.' || ch == '-'))
            return 0;
    }
    return 1;
}

/* A ceiling entry covers want: "*"; the same name; a name under its *.domain;
 * a CIDR inside its CIDR. */
static int covers(const char *ceil, const char *want, const struct cidr *wc)
{
    if (strcmp(ceil, "*") == 0)
        return 1;
    struct cidr cc;
    if (wc)
        return parse_cidr(ceil, &cc) && cc.family == wc->family && cc.len <= wc->len &&
               same_prefix(cc.a, wc->a, cc.len);
    size_t cl = strlen(ceil), wl = strlen(want);
    if (cl > 2 && ceil[0] == '*' && ceil[1] == '.')
        return wl > cl - 1 && strcasecmp(want + wl - (cl - 1), ceil + 1) == 0;
    return strcasecmp(ceil, want) == 0;
}

static int egress_err(sbx_err_t *err, const char *entry, const char *why)
{
    return err_make_data(
        err, SBX_E_PARAMS,
        json_pack("{s:s, s:s}", "param", "options.egress.allow", "entry", entry),
        "options.egress.allow: %s: %s", entry, why);
}

/* The config's word on entry e (c: its CIDR, or NULL for a name): 0, or -32003. */
static int clamp(struct mprov *mp, const char *e, const struct cidr *c, sbx_err_t *err)
{
    json_t *conf = json_object_get(mp->ws_conf, "egress");
    if (c && private_cidr(c) &&
        !json_is_true(json_object_get(conf, "allow_private_addresses")))
        return err_make_data(err, SBX_E_PERMISSION,
                             json_pack("{s:s, s:s, s:s}", "option", "egress", "reason",
                                       "private", "requested", e),
                             "egress to %s reaches private, loopback or link-local "
                             "addresses (providers.modal.egress.allow_private_addresses)",
                             e);
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(conf, "allow"), i, v)
        if (json_is_string(v) && covers(json_string_value(v), e, c))
            return 0;
    return err_make_data(err, SBX_E_PERMISSION,
                         json_pack("{s:s, s:s, s:s}", "option", "egress", "reason",
                                   "ceiling", "requested", e),
                         "egress to %s is beyond providers.modal.egress.allow", e);
}

/* One entry: checked, clamped, and put in w's CIDR or domain list. A sandbox
 * adopted from the state file is not clamped again: Modal already runs it
 * with this list, which a narrower ceiling since then does not take back. */
static int egress_entry(struct mprov *mp, struct mws *w, const char *e, sbx_err_t *err)
{
    struct cidr c;
    int is_cidr = parse_cidr(e, &c);
    if (!is_cidr && strcmp(e, "*") != 0 && strchr(e, ':'))
        return egress_err(err, e,
                          "Modal's network access filters by address range and domain, "
                          "not by port: give the host without :port");
    if (!is_cidr && strcmp(e, "*") != 0 && !valid_domain(e))
        return egress_err(err, e, "not a host name, *.domain, address or CIDR");
    if (!mp->ws_adopting && clamp(mp, e, is_cidr ? &c : NULL, err) < 0)
        return -1;
    if (strcmp(e, "*") == 0)
        w->net = MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__OPEN;
    else if (is_cidr)
        w->cidrs[w->ncidrs++] = xstrdup(e);
    else
        w->domains[w->ndomains++] = xstrdup(e);
    return 0;
}

static int parse_egress(struct mprov *mp, json_t *req, struct mws *w, sbx_err_t *err)
{
    json_t *allow = json_object_get(req, "allow");
    if (!json_is_object(req) || !json_is_array(allow) || json_object_size(req) != 1)
        return err_make_data(
            err, SBX_E_PARAMS, json_pack("{s:s}", "param", "options.egress"),
            "options.egress must be {\"allow\": [\"host\", \"*.domain\", "
            "\"10.0.0.0/8\", ...]}");
    size_t n = json_array_size(allow);
    if (n > MAX_EGRESS)
        return err_make_data(
            err, SBX_E_LIMIT,
            json_pack("{s:s, s:i}", "limit", "options.egress.allow", "max", MAX_EGRESS),
            "options.egress.allow has more than %d entries (Modal's limit)", MAX_EGRESS);
    w->cidrs = xcalloc(n + 1, sizeof(char *));
    w->domains = xcalloc(n + 1, sizeof(char *));
    w->net = n ? MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__ALLOWLIST
               : MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__BLOCKED;
    w->allow = json_incref(allow);
    size_t i;
    json_t *v;
    json_array_foreach(allow, i, v) {
        if (!json_is_string(v))
            return egress_err(err, "(not a string)", "entries are strings");
        if (egress_entry(mp, w, json_string_value(v), err) < 0)
            return -1;
    }
    return 0;
}

void modal_ws_release(struct mws *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nports; i++) {
        free(w->ports[i].host);
        free(w->ports[i].uhost);
    }
    for (size_t i = 0; i < w->ncidrs; i++)
        free(w->cidrs[i]);
    for (size_t i = 0; i < w->ndomains; i++)
        free(w->domains[i]);
    free(w->cidrs);
    free(w->domains);
    free(w->ports);
    free(w->specs);
    free(w->specp);
    json_decref(w->allow);
    free(w->tunnels_of);
    free(w->fetching);
    free(w->tunnels_error);
    free(w);
}

int modal_ws_new(struct mprov *mp, json_t *opts, struct mws **out, sbx_err_t *err)
{
    *out = NULL;
    json_t *ports = json_object_get(opts, "ports");
    json_t *egress = json_object_get(opts, "egress");
    if (ports && json_is_null(ports))
        ports = NULL;
    if (egress && json_is_null(egress))
        egress = NULL;
    if (!ports && !egress)
        return 0;
    struct mws *w = xcalloc(1, sizeof(*w));
    if ((ports && parse_ports(mp, ports, w, err) < 0) ||
        (egress && parse_egress(mp, egress, w, err) < 0)) {
        modal_ws_release(w);
        return -1;
    }
    *out = w;
    return 0;
}

void modal_ws_create(struct msb *ms, Modal__Client__Sandbox *def)
{
    struct mws *w = ms->ws;
    if (!w)
        return;
    def->open_ports->ports = w->specp;
    def->open_ports->n_ports = w->nports;
    if (w->net == MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__OPEN)
        return; /* "*": the lists would mean nothing (and OPEN is the default) */
    if (w->net) {
        def->network_access->network_access_type = w->net;
        def->network_access->allowed_cidrs = w->cidrs;
        def->network_access->n_allowed_cidrs = w->ncidrs;
        def->network_access->allowed_domains = w->domains;
        def->network_access->n_allowed_domains = w->ndomains;
    }
}

/* ---- tunnels --------------------------------------------------------------------- */

static void start_finish(struct msb *ms)
{
    struct mws *w = ms->ws;
    if (!w->start_waits)
        return;
    json_t *result = w->start_result;
    w->start_result = NULL;
    w->start_waits = 0;
    if (w->tunnels_error) {
        if (!result)
            result = json_object();
        json_t *warn = json_object_get(result, "warnings");
        if (!warn)
            json_object_set_new(result, "warnings", warn = json_array());
        json_array_append_new(warn,
                              json_sprintf("the tunnels of the declared ports are not "
                                           "known yet: %s",
                                           w->tunnels_error));
    }
    sandbox_op_done(ms->sb, NULL, result);
}

static void tunnels_fetch(struct msb *ms);

void modal_ws_tunnels_done(struct grpc_call *c, const struct grpc_status *st,
                           const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct msb *ms = privdata;
    struct mws *w = ms->ws;
    w->tcall = NULL;
    Modal__Client__SandboxGetTunnelsResponse *r = modal_reply(
        &modal__client__sandbox_get_tunnels_response__descriptor, st, msg, len);
    free(w->tunnels_error);
    w->tunnels_error = NULL;
    if (!r) {
        sbx_err_t e = {0};
        modal_grpc_err(ms->mp, &e, st, "SandboxGetTunnels");
        w->tunnels_error = xstrdup(e.msg);
        err_clear(&e);
    } else if (
        r->result &&
        r->result->status ==
            MODAL__CLIENT__GENERIC_RESULT__GENERIC_STATUS__GENERIC_STATUS_TIMEOUT) {
        w->tunnels_error = xstrdup("Modal's SandboxGetTunnels timed out");
    } else {
        for (size_t i = 0; i < r->n_tunnels; i++) {
            Modal__Client__TunnelData *t = r->tunnels[i];
            for (size_t j = 0; j < w->nports; j++) {
                struct mws_port *p = &w->ports[j];
                if ((uint32_t)p->port != t->container_port)
                    continue;
                modal_set_str(&p->host, t->host);
                p->host_port = (int)t->port;
                int uh = t->_unencrypted_host_case ==
                         MODAL__CLIENT__TUNNEL_DATA___UNENCRYPTED_HOST_UNENCRYPTED_HOST;
                modal_set_str(&p->uhost, uh ? t->unencrypted_host : NULL);
                p->uport =
                    t->_unencrypted_port_case ==
                            MODAL__CLIENT__TUNNEL_DATA___UNENCRYPTED_PORT_UNENCRYPTED_PORT
                        ? (int)t->unencrypted_port
                        : 0;
            }
        }
        modal_set_str(&w->tunnels_of, w->fetching);
    }
    if (w->tunnels_error)
        log_warn("modal: sandbox %s: %s", ms->sb->id, w->tunnels_error);
    modal_reply_free(r);
    /* The Modal sandbox changed (a restart) while this was asked: again. */
    if (ms->sandbox_id && strcmp(nz(w->fetching), ms->sandbox_id) != 0)
        tunnels_fetch(ms);
    else
        start_finish(ms);
}

static void tunnels_fetch(struct msb *ms)
{
    struct mws *w = ms->ws;
    if (w->tcall || !ms->sandbox_id)
        return;
    Modal__Client__SandboxGetTunnelsRequest req =
        MODAL__CLIENT__SANDBOX_GET_TUNNELS_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    req.timeout = (float)TUNNELS_WAIT_S;
    modal_set_str(&w->fetching, ms->sandbox_id);
    w->tcall = grpc_unary(&ms->mp->ch, modal_rpc(ms, "SandboxGetTunnels"), &req.base,
                          TUNNELS_WAIT_S + POLL_SLACK_S, modal_ws_tunnels_done, ms);
}

int modal_ws_start_done(struct msb *ms, json_t *result)
{
    struct mws *w = ms->ws;
    if (!w || w->nports == 0 || !ms->sandbox_id)
        return 0;
    w->start_result = result;
    w->start_waits = 1;
    tunnels_fetch(ms);
    return 1;
}

void modal_ws_refresh(struct msb *ms)
{
    if (ms->ws && ms->ws->nports)
        tunnels_fetch(ms);
}

static int tunnels_known(const struct msb *ms)
{
    const struct mws *w = ms->ws;
    return w->tunnels_of && ms->sandbox_id && strcmp(w->tunnels_of, ms->sandbox_id) == 0;
}

static json_t *port_json(const struct mws_port *p)
{
    const char *host = p->unencrypted && p->uhost ? p->uhost : p->host;
    int hp = p->unencrypted && p->uhost ? p->uport : p->host_port;
    json_t *o =
        json_pack("{s:i, s:s?, s:i, s:b, s:b}", "port", p->port, "host", host,
                  "host_port", hp, "tls", !(p->unencrypted && p->uhost), "tunnel", 1);
    if (host) {
        json_object_set_new(o, "url",
                            p->unencrypted && p->uhost
                                ? json_sprintf("tcp://%s:%d", host, hp)
                            : hp == 443 ? json_sprintf("https://%s", host)
                                        : json_sprintf("https://%s:%d", host, hp));
        if (p->uhost && !p->unencrypted)
            json_object_set_new(o, "unencrypted_host", json_string(p->uhost));
    }
    return o;
}

int modal_ws_expose(void *cookie, struct sandbox *sb, int port, int host_port,
                    json_t **out, sbx_err_t *err)
{
    struct mprov *mp = cookie;
    struct msb *ms = sb->pdata;
    if (json_is_false(json_object_get(mp->ws_conf, "expose")))
        return err_make(err, SBX_E_PERMISSION,
                        "providers.modal.expose is false: ports cannot be exposed");
    struct mws_port *p = NULL;
    for (size_t i = 0; ms && ms->ws && i < ms->ws->nports; i++)
        if (ms->ws->ports[i].port == port)
            p = &ms->ws->ports[i];
    if (!p)
        return err_make_data(
            err, SBX_E_PARAMS, json_pack("{s:s, s:i}", "param", "port", "port", port),
            "port %d was not declared when sandbox %s was created: Modal "
            "opens tunnels only at create (options.ports: [%d])",
            port, sb->id, port);
    if (!tunnels_known(ms)) {
        tunnels_fetch(ms);
        return err_make_data(err, SBX_E_PROVIDER,
                             json_pack("{s:s, s:s}", "provider", "modal", "message",
                                       "tunnels not known yet"),
                             "the tunnel of port %d is not known yet (%s): try again",
                             port,
                             ms->ws->tunnels_error ? ms->ws->tunnels_error
                                                   : "SandboxGetTunnels is under way");
    }
    if (host_port && host_port != (p->unencrypted && p->uhost ? p->uport : p->host_port))
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "host_port"),
                             "host_port: Modal chooses the tunnel's host and port");
    p->exposed = 1;
    *out = port_json(p);
    log_info("modal %s: port %d exposed through Modal's tunnel %s:%d", sb->id, port,
             nz(p->host), p->host_port);
    return 0;
}

int modal_ws_unexpose(void *cookie, struct sandbox *sb, int port, sbx_err_t *err)
{
    (void)cookie, (void)port;
    return terminal_unsupported(err, sb, "unexpose");
}

/* ---- terminals --------------------------------------------------------------------- */

/* The SDKs' PTYInfo (defaultSandboxPTYInfo) with spec's size: 0 without "pty". */
static int pty_of(json_t *spec, Modal__Client__PTYInfo *pty)
{
    json_t *t = json_object_get(spec, "pty");
    if (!json_is_object(t))
        return 0;
    modal__client__ptyinfo__init(pty);
    pty->enabled = 1;
    pty->winsz_cols = (uint32_t)json_integer_value(json_object_get(t, "cols"));
    pty->winsz_rows = (uint32_t)json_integer_value(json_object_get(t, "rows"));
    pty->env_term = (char *)"xterm-256color";
    pty->env_colorterm = (char *)"truecolor";
    pty->pty_type = MODAL__CLIENT__PTYINFO__PTYTYPE__PTY_TYPE_SHELL;
    pty->no_terminate_on_idle_stdin = 1;
    return 1;
}

void modal_ws_pty_router(json_t *spec,
                         Modal__TaskCommandRouter__TaskExecStartRequest *req,
                         Modal__Client__PTYInfo *pty)
{
    if (!pty_of(spec, pty))
        return;
    req->_pty_info_case =
        MODAL__TASK_COMMAND_ROUTER__TASK_EXEC_START_REQUEST___PTY_INFO_PTY_INFO;
    req->pty_info = pty;
}

void modal_ws_pty_ce(json_t *spec, Modal__Client__ContainerExecRequest *req,
                     Modal__Client__PTYInfo *pty)
{
    if (!pty_of(spec, pty))
        return;
    req->_pty_info_case = MODAL__CLIENT__CONTAINER_EXEC_REQUEST___PTY_INFO_PTY_INFO;
    req->pty_info = pty;
}

int modal_ws_resize(void *cookie, struct process *p, unsigned cols, unsigned rows,
                    sbx_err_t *err)
{
    (void)cookie, (void)cols, (void)rows;
    /* Neither ModalClient nor the TaskCommandRouter has a call that changes a
     * running exec's window size; the size is fixed at TaskExecStart. */
    return terminal_unsupported(err, p->sb, "resize");
}

/* ---- stats ---------------------------------------------------------------------- */

static void stat_unlink(struct mws_stat *s)
{
    for (struct mws_stat **pp = &s->ms->ws->stats; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
}

static json_t *stats_json(struct msb *ms,
                          const Modal__Client__SandboxGetResourceUsageResponse *r)
{
    struct mws *w = ms->ws;
    double now = wall_now(), dt = now - w->last_t;
    json_t *pct = json_null(), *avg = json_null();
    if (w->last_t > 0 && dt > 0.05 && r->cpu_core_nanosecs >= w->last_cpu) {
        pct =
            json_real((double)(r->cpu_core_nanosecs - w->last_cpu) / (dt * 1e9) * 100.0);
        if (r->mem_gib_nanosecs >= w->last_mem)
            avg = json_integer((json_int_t)((double)(r->mem_gib_nanosecs - w->last_mem) /
                                            (dt * 1e9) * 1073741824.0));
    }
    w->last_t = now;
    w->last_cpu = r->cpu_core_nanosecs;
    w->last_mem = r->mem_gib_nanosecs;
    int gpu = r->_gpu_type_case ==
              MODAL__CLIENT__SANDBOX_GET_RESOURCE_USAGE_RESPONSE___GPU_TYPE_GPU_TYPE;
    return json_pack(
        "{s:{s:f, s:o}, s:{s:n, s:o, s:o?}, s:n, s:n, s:n, s:{s:s, s:f, s:f, s:f, s:s?}}",
        "cpu", "usage_s", (double)r->cpu_core_nanosecs / 1e9, "percent", pct, "memory",
        "current", "average", avg, "limit",
        ms->memory_mb > 0 ? json_integer((json_int_t)ms->memory_mb * 1048576) : NULL,
        "pids", "block_io", "network", "modal", "source", "SandboxGetResourceUsage",
        "cpu_core_seconds", (double)r->cpu_core_nanosecs / 1e9, "memory_gib_seconds",
        (double)r->mem_gib_nanosecs / 1e9, "gpu_seconds", (double)r->gpu_nanosecs / 1e9,
        "gpu_type", gpu ? r->gpu_type : NULL);
}

void modal_ws_stats_done(struct grpc_call *c, const struct grpc_status *st,
                         const uint8_t *msg, size_t len, void *privdata)
{
    (void)c;
    struct mws_stat *s = privdata;
    struct msb *ms = s->ms;
    stat_unlink(s);
    Modal__Client__SandboxGetResourceUsageResponse *r = modal_reply(
        &modal__client__sandbox_get_resource_usage_response__descriptor, st, msg, len);
    sbx_err_t err = {0};
    if (r) {
        s->done(s->data, stats_json(ms, r), NULL);
    } else {
        if (st->code == GRPC_UNIMPLEMENTED)
            terminal_unsupported(&err, ms->sb, "stats");
        else
            modal_grpc_err(ms->mp, &err, st, "sandbox.stats");
        s->done(s->data, NULL, &err);
        err_clear(&err);
    }
    modal_reply_free(r);
    free(s);
}

int modal_ws_stats(void *cookie, struct sandbox *sb, int with_size,
                   void (*done)(void *data, json_t *stats, sbx_err_t *err), void *data,
                   sbx_err_t *err)
{
    (void)cookie, (void)with_size; /* Modal reports no disk use */
    struct msb *ms = sb->pdata;
    if (!ms || !ms->sandbox_id)
        return err_make_data(
            err, SBX_E_STATE,
            json_pack("{s:s, s:s}", "sandbox", sb->id, "status", "starting"),
            "sandbox %s has no Modal sandbox yet", sb->id);
    if (!ms->ws)
        ms->ws = xcalloc(1, sizeof(*ms->ws));
    struct mws_stat *s = xcalloc(1, sizeof(*s));
    s->ms = ms;
    s->done = done;
    s->data = data;
    s->next = ms->ws->stats;
    ms->ws->stats = s;
    Modal__Client__SandboxGetResourceUsageRequest req =
        MODAL__CLIENT__SANDBOX_GET_RESOURCE_USAGE_REQUEST__INIT;
    req.sandbox_id = ms->sandbox_id;
    s->call = grpc_unary(&ms->mp->ch, "SandboxGetResourceUsage", &req.base,
                         UNARY_TIMEOUT_S, modal_ws_stats_done, s);
    return 0;
}

/* ---- sandbox.get and release ---------------------------------------------------- */

void modal_ws_metadata(struct msb *ms, json_t *o)
{
    struct mws *w = ms->ws;
    if (!w)
        return;
    if (w->nports) {
        json_t *a = json_array();
        for (size_t i = 0; i < w->nports; i++) {
            json_t *p = port_json(&w->ports[i]);
            if (!tunnels_known(ms)) {
                /* Not (yet) of the current Modal sandbox: nothing to show. */
                json_object_del(p, "host");
                json_object_del(p, "host_port");
                json_object_del(p, "url");
            }
            json_object_set_new(p, "known", json_boolean(tunnels_known(ms)));
            json_object_set_new(p, "exposed", json_boolean(w->ports[i].exposed));
            json_object_set_new(p, "unencrypted", json_boolean(w->ports[i].unencrypted));
            json_array_append_new(a, p);
        }
        json_object_set_new(o, "ports", a);
        if (w->tunnels_error)
            json_object_set_new(o, "tunnels_error", json_string(w->tunnels_error));
    }
    if (w->net) {
        const char *type =
            w->net == MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__OPEN ? "open"
            : w->net == MODAL__CLIENT__NETWORK_ACCESS__NETWORK_ACCESS_TYPE__BLOCKED
                ? "blocked"
                : "allowlist";
        json_t *c = json_array(), *d = json_array();
        for (size_t i = 0; i < w->ncidrs; i++)
            json_array_append_new(c, json_string(w->cidrs[i]));
        for (size_t i = 0; i < w->ndomains; i++)
            json_array_append_new(d, json_string(w->domains[i]));
        json_object_set_new(o, "network_access",
                            json_pack("{s:s, s:o, s:o}", "type", type, "allowed_cidrs", c,
                                      "allowed_domains", d));
    }
}

void modal_ws_free(struct msb *ms)
{
    struct mws *w = ms->ws;
    if (!w)
        return;
    grpc_call_cancel(w->tcall);
    json_decref(w->start_result);
    while (w->stats) {
        struct mws_stat *s = w->stats;
        w->stats = s->next;
        grpc_call_cancel(s->call);
        sbx_err_t err = {0};
        err_make_data(&err, SBX_E_STATE,
                      json_pack("{s:s, s:s}", "sandbox", ms->sb->id, "status", "gone"),
                      "sandbox %s went away during sandbox.stats", ms->sb->id);
        s->done(s->data, NULL, &err);
        err_clear(&err);
        free(s);
    }
    modal_ws_release(w);
    ms->ws = NULL;
}
