/*
 * docker_api.c - the Docker Engine API as the provider sees it: one curlev
 * (libcurl multi on the daemon's loop) per engine, requests that answer with
 * parsed JSON, the API version negotiated from /_ping and /version, and a
 * liveness flag that `available()` reads without any I/O.
 *
 * Liveness: a ping at load, then every DK_PING_DOWN_S while the engine does
 * not answer and every DK_PING_UP_S while it does. Any call that fails at the
 * transport level (nothing came back) marks the engine down at once and
 * brings the next ping forward, so daemon.info and sandbox.create learn of a
 * dead engine within one call, not one ping period.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DK_PING_DOWN_S 2.0
#define DK_PING_UP_S 30.0
#define DK_PING_TIMEOUT_MS 5000

struct dk_req {
    struct dk_req *next, **pprev; /* in list */
    struct dk_reqlist *list;
    struct dk_engine *e;
    struct curlev_req *cr;
    dk_cb cb;
    dk_line_cb on_line;
    void *data;
    char *buf;
    size_t len, cap;
    int too_big;
    int line_stop;
    char api_hdr[16];
};

/* ---- helpers ------------------------------------------------------------------ */

char *dkapi_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *o = xmalloc(n * 3 + 1), *q = o;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            *q++ = (char)*p;
        } else {
            *q++ = '%';
            *q++ = hex[*p >> 4];
            *q++ = hex[*p & 15];
        }
    }
    *q = '\0';
    return o;
}

char *dkapi_path(struct dk_engine *e, const char *fmt, ...)
{
    char *tail = NULL, *out = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&tail, fmt, ap) < 0)
        x_oom("vasprintf");
    va_end(ap);
    out = xasprintf("/v%s%s", e->version[0] ? e->version : "1.41", tail);
    free(tail);
    return out;
}

static int parse_version(const char *v, int *maj, int *min)
{
    return v && sscanf(v, "%d.%d", maj, min) == 2 ? 0 : -1;
}

static int version_cmp(const char *a, const char *b)
{
    int a1 = 0, a2 = 0, b1 = 0, b2 = 0;
    parse_version(a, &a1, &a2);
    parse_version(b, &b1, &b2);
    if (a1 != b1)
        return a1 < b1 ? -1 : 1;
    return a2 < b2 ? -1 : a2 > b2;
}

/* ---- requests ------------------------------------------------------------------ */

static void req_unlink(struct dk_req *r)
{
    if (r->pprev) {
        *r->pprev = r->next;
        if (r->next)
            r->next->pprev = r->pprev;
        r->pprev = NULL;
        r->next = NULL;
    }
}

static void req_free(struct dk_req *r)
{
    req_unlink(r);
    free(r->buf);
    free(r);
}

static int buf_add(struct dk_req *r, const char *d, size_t n)
{
    if (r->len + n > DK_BODY_MAX) {
        r->too_big = 1;
        return -1;
    }
    if (r->len + n + 1 > r->cap) {
        size_t nc = r->cap ? r->cap : 4096;
        while (nc < r->len + n + 1)
            nc *= 2;
        char *nb = realloc(r->buf, nc);
        if (!nb)
            return -1;
        r->buf = nb;
        r->cap = nc;
    }
    memcpy(r->buf + r->len, d, n);
    r->len += n;
    r->buf[r->len] = '\0';
    return 0;
}

static size_t on_data(struct curlev_req *cr, const char *d, size_t n, void *privdata)
{
    struct dk_req *r = privdata;
    if (!r->on_line)
        return buf_add(r, d, n) < 0 ? 0 : n;
    /* JSON lines: hand over each complete line; a line longer than
     * DK_LINE_MAX is dropped whole (pull progress is advisory). */
    for (size_t i = 0; i < n && !r->line_stop; i++) {
        if (d[i] == '\n') {
            if (!r->too_big && r->len > 0 && r->on_line(r->buf, r->len, r->data) != 0)
                r->line_stop = 1;
            r->len = 0;
            r->too_big = 0;
            continue;
        }
        if (r->len >= DK_LINE_MAX) {
            r->too_big = 1;
            continue;
        }
        if (buf_add(r, d + i, 1) < 0)
            r->too_big = 1;
    }
    return r->line_stop ? 0 : n;
}

static void on_header(struct curlev_req *cr, const char *line, size_t len, void *privdata)
{
    struct dk_req *r = privdata;
    if (len > 12 && strncasecmp(line, "Api-Version:", 12) == 0) {
        const char *v = line + 12;
        size_t vl = len - 12;
        while (vl > 0 && *v == ' ')
            v++, vl--;
        if (vl >= sizeof(r->api_hdr))
            vl = sizeof(r->api_hdr) - 1;
        memcpy(r->api_hdr, v, vl);
        r->api_hdr[vl] = '\0';
    }
}

static void on_done(struct curlev_req *cr, CURLcode rc, long status, const char *errmsg,
                    void *privdata)
{
    struct dk_req *r = privdata;
    struct dk_engine *e = r->e;
    req_unlink(r);
    struct dk_resp resp = {0};
    resp.status = status;
    resp.body = r->buf ? r->buf : "";
    resp.len = r->on_line ? 0 : r->len;
    char msg[512];
    msg[0] = '\0';
    if (!r->on_line && r->len > 0) {
        const char *p = r->buf;
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
            p++;
        if (*p == '{' || *p == '[')
            resp.json = json_loadb(r->buf, r->len, JSON_DECODE_ANY, NULL);
    }
    if (rc != CURLE_OK && !(r->line_stop && rc == CURLE_WRITE_ERROR)) {
        if (status == 0) {
            resp.transport = 1;
            /* libcurl's own text names "localhost port 80" for a Unix socket */
            snprintf(msg, sizeof(msg), "cannot reach the Docker engine at %s: %s",
                     e ? e->host : "?",
                     rc == CURLE_OPERATION_TIMEDOUT ? "timed out"
                                                    : curl_easy_strerror(rc));
        } else if (r->too_big) {
            snprintf(msg, sizeof(msg), "engine answer larger than %u bytes", DK_BODY_MAX);
            resp.status = 0;
        } else {
            snprintf(msg, sizeof(msg), "%s",
                     errmsg && errmsg[0] ? errmsg : curl_easy_strerror(rc));
            if (status < 300)
                resp.status = 0; /* a cut transfer is not a success */
        }
    } else if (status >= 400 || status < 200) {
        const char *m = json_string_value(json_object_get(resp.json, "message"));
        if (m)
            snprintf(msg, sizeof(msg), "%s", m);
        else
            snprintf(msg, sizeof(msg), "%.*s", (int)(r->len > 300 ? 300 : r->len),
                     r->buf ? r->buf : "");
        size_t ml = strlen(msg);
        while (ml > 0 && (msg[ml - 1] == '\n' || msg[ml - 1] == '\r'))
            msg[--ml] = '\0';
        if (!msg[0])
            snprintf(msg, sizeof(msg), "HTTP status %ld", status);
    }
    resp.errmsg = msg[0] ? msg : NULL;
    if (resp.transport && e)
        dkapi_engine_failed(e, msg);
    resp.api_version = r->api_hdr[0] ? r->api_hdr : NULL;
    if (r->cb)
        r->cb(&resp, r->data);
    json_decref(resp.json);
    free(r->buf);
    free(r);
}

static struct dk_req *req_make(struct dk_engine *e, struct dk_reqlist *list,
                               const char *method, const char *path, long timeout_ms,
                               dk_cb cb, void *data)
{
    struct dk_req *r = xcalloc(1, sizeof(*r));
    char *url = xasprintf("%s%s", e->base, path);
    r->e = e;
    r->cb = cb;
    r->data = data;
    r->cr = curlev_req_new(&e->ce, method, url);
    free(url);
    if (e->unix_path)
        curlev_req_unix_socket(r->cr, e->unix_path);
    dkapi_engine_tls(e, curlev_req_easy(r->cr));
    curlev_req_timeouts(r->cr, timeout_ms, DK_CONNECT_TIMEOUT_MS);
    curlev_req_header(r->cr, "Expect:");
    curlev_req_callbacks(r->cr, on_data, on_header, on_done, r);
    if (list) {
        r->list = list;
        r->next = list->head;
        if (list->head)
            list->head->pprev = &r->next;
        list->head = r;
        r->pprev = &list->head;
    }
    return r;
}

static struct dk_req *req_go(struct dk_req *r)
{
    if (curlev_req_start(r->cr) < 0) {
        /* curlev freed the curl request */
        req_free(r);
        return NULL;
    }
    return r;
}

struct dk_req *dkapi_call(struct dk_engine *e, struct dk_reqlist *list,
                          const char *method, const char *path, json_t *body,
                          long timeout_ms, dk_cb cb, void *data)
{
    struct dk_req *r = req_make(e, list, method, path, timeout_ms, cb, data);
    if (body) {
        char *s = json_dumps(body, JSON_COMPACT);
        if (!s)
            x_oom("json_dumps");
        curlev_req_header(r->cr, "Content-Type: application/json");
        curlev_req_body(r->cr, s, strlen(s));
        free(s);
    }
    return req_go(r);
}

struct dk_req *dkapi_call_raw(struct dk_engine *e, struct dk_reqlist *list,
                              const char *method, const char *path, const char *ctype,
                              const void *body, size_t len, long timeout_ms, dk_cb cb,
                              void *data)
{
    struct dk_req *r = req_make(e, list, method, path, timeout_ms, cb, data);
    char h[128];
    snprintf(h, sizeof(h), "Content-Type: %s", ctype);
    curlev_req_header(r->cr, h);
    if (curlev_req_body(r->cr, body, len) < 0) {
        curlev_req_cancel(r->cr);
        req_free(r);
        return NULL;
    }
    return req_go(r);
}

struct dk_req *dkapi_call_lines(struct dk_engine *e, struct dk_reqlist *list,
                                const char *method, const char *path, long timeout_ms,
                                dk_line_cb on_line, dk_cb cb, void *data)
{
    struct dk_req *r = req_make(e, list, method, path, timeout_ms, cb, data);
    r->on_line = on_line;
    return req_go(r);
}

void dkapi_req_cancel(struct dk_req *r)
{
    if (!r)
        return;
    curlev_req_cancel(r->cr);
    req_free(r);
}

void dkapi_reqlist_cancel(struct dk_reqlist *l)
{
    /* Bounded: each pass removes one. */
    while (l->head)
        dkapi_req_cancel(l->head);
}

int dkapi_reqlist_busy(const struct dk_reqlist *l)
{
    return l->head != NULL;
}

int dkapi_err(sbx_err_t *err, struct dk_resp *r, const char *what)
{
    const char *m = r->errmsg ? r->errmsg : "unexpected answer";
    if (r->transport)
        return err_make_data(err, SBX_E_UNAVAILABLE,
                             json_pack("{s:s, s:s}", "provider", "docker", "reason", m),
                             "docker: %s: %s", what, m);
    return err_make_data(err, SBX_E_PROVIDER,
                         json_pack("{s:s, s:s, s:i}", "provider", "docker", "message", m,
                                   "status", (int)r->status),
                         "docker: %s: %s", what, m);
}

void dkapi_engine_tls(struct dk_engine *e, CURL *easy)
{
    if (!e->tls)
        return;
    if (e->tls_ca)
        curl_easy_setopt(easy, CURLOPT_CAINFO, e->tls_ca);
    if (e->tls_cert)
        curl_easy_setopt(easy, CURLOPT_SSLCERT, e->tls_cert);
    if (e->tls_key)
        curl_easy_setopt(easy, CURLOPT_SSLKEY, e->tls_key);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, e->tls_verify ? 1L : 0L);
    curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, e->tls_verify ? 2L : 0L);
}

/* ---- liveness --------------------------------------------------------------------- */

static void ping_start(struct dk_engine *e);

static void ping_later(struct dk_engine *e, double s)
{
    ev_timer_stop(D->loop, &e->ping_timer);
    ev_timer_set(&e->ping_timer, s, 0.);
    ev_timer_start(D->loop, &e->ping_timer);
}

static void set_down(struct dk_engine *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_down(struct dk_engine *e, const char *fmt, ...)
{
    char why[sizeof(e->reason)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (e->up || strcmp(why, e->reason) != 0)
        log_warn("docker: engine at %s unavailable: %s", e->host, why);
    e->up = 0;
    snprintf(e->reason, sizeof(e->reason), "%s", why);
    if (e->on_down)
        e->on_down(e, e->on_up_data);
}

static void version_done(struct dk_resp *r, void *data)
{
    struct dk_engine *e = data;
    e->ping = NULL;
    if (r->status != 200 || !json_is_object(r->json)) {
        if (r->transport)
            set_down(e, "%s", r->errmsg);
        else
            set_down(e, "GET /version: %s", r->errmsg ? r->errmsg : "bad answer");
        ping_later(e, DK_PING_DOWN_S);
        return;
    }
    const char *api = json_string_value(json_object_get(r->json, "ApiVersion"));
    const char *ver = json_string_value(json_object_get(r->json, "Version"));
    if (!api) {
        set_down(e, "GET /version: no ApiVersion");
        ping_later(e, DK_PING_DOWN_S);
        return;
    }
    char minv[16];
    snprintf(minv, sizeof(minv), "%d.%d", DK_API_MIN_MAJOR, DK_API_MIN_MINOR);
    if (version_cmp(api, minv) < 0) {
        set_down(e, "Docker engine API %s is older than %s", api, minv);
        ping_later(e, DK_PING_DOWN_S * 15);
        return;
    }
    const char *want = e->cfg_version[0] ? e->cfg_version : DK_API_MAX;
    const char *use = version_cmp(api, want) < 0 ? api : want;
    if (version_cmp(use, minv) < 0)
        use = minv;
    /* Newer engines drop old versions (MinAPIVersion): never ask below it. */
    const char *emin = json_string_value(json_object_get(r->json, "MinAPIVersion"));
    if (emin && version_cmp(use, emin) < 0 && version_cmp(emin, api) <= 0)
        use = emin;
    snprintf(e->version, sizeof(e->version), "%s", use);
    snprintf(e->engine_version, sizeof(e->engine_version), "%s", ver ? ver : "?");
    snprintf(e->server_api, sizeof(e->server_api), "%s", api);
    int was_up = e->up;
    e->up = 1;
    e->reason[0] = '\0';
    ping_later(e, DK_PING_UP_S);
    if (!was_up) {
        log_info("docker: engine %s at %s, API %s (engine supports %s)",
                 e->engine_version, e->host, e->version, api);
        e->ever_up = 1;
        if (e->on_up)
            e->on_up(e, e->on_up_data);
    }
}

static void ping_done(struct dk_resp *r, void *data)
{
    struct dk_engine *e = data;
    e->ping = NULL;
    if (r->transport || r->status != 200) {
        if (r->transport)
            set_down(e, "%s", r->errmsg);
        else
            set_down(e, "GET /_ping answered %ld: %s", r->status,
                     r->errmsg ? r->errmsg : "");
        ping_later(e, DK_PING_DOWN_S);
        return;
    }
    if (e->up && (!r->api_version || strcmp(r->api_version, e->server_api) == 0)) {
        ping_later(e, DK_PING_UP_S);
        return;
    }
    if (e->up)
        log_info("docker: the engine now speaks API %s: negotiating again",
                 r->api_version);
    /* Was down (or never up): negotiate again; the engine may have changed. */
    e->ping = dkapi_call(e, e->misc, "GET", "/version", NULL, DK_PING_TIMEOUT_MS,
                         version_done, e);
    if (!e->ping)
        ping_later(e, DK_PING_DOWN_S);
}

static void ping_start(struct dk_engine *e)
{
    if (e->ping)
        return;
    e->ping =
        dkapi_call(e, e->misc, "GET", "/_ping", NULL, DK_PING_TIMEOUT_MS, ping_done, e);
    if (!e->ping)
        ping_later(e, DK_PING_DOWN_S);
}

static void ping_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    ping_start(w->data);
}

void dkapi_engine_failed(struct dk_engine *e, const char *why)
{
    if (e->up)
        set_down(e, "%s", why);
    if (!e->ping)
        ping_later(e, 0.2);
}

void dkapi_engine_start(struct dk_engine *e)
{
    ping_start(e);
}

/* ---- configuration ---------------------------------------------------------------- */

static char *dup_or_null(const char *s)
{
    return s && s[0] ? strdup(s) : NULL;
}

static char *cert_file(const char *dir, const char *name)
{
    char *p = NULL;
    if (!dir || !dir[0] || asprintf(&p, "%s/%s", dir, name) < 0)
        return NULL;
    return p;
}

int dkapi_engine_init(struct dk_engine *e, json_t *conf, sbx_err_t *err)
{
    memset(e, 0, sizeof(*e));
    const char *host = json_string_value(json_object_get(conf, "host"));
    int from_env = 0;
    if (!host || !host[0]) {
        host = getenv("DOCKER_HOST");
        from_env = host && host[0];
    }
    if (!host || !host[0])
        host = "unix:///var/run/docker.sock";
    e->host = strdup(host);
    const char *ca = json_string_value(json_object_get(conf, "tls_ca"));
    const char *cert = json_string_value(json_object_get(conf, "tls_cert"));
    const char *key = json_string_value(json_object_get(conf, "tls_key"));
    json_t *jv = json_object_get(conf, "tls_verify");
    e->tls_verify = jv ? json_is_true(jv) : 1;
    char *env_ca = NULL, *env_cert = NULL, *env_key = NULL;
    if (from_env && !ca && !cert && !key && getenv("DOCKER_CERT_PATH")) {
        const char *d = getenv("DOCKER_CERT_PATH");
        ca = env_ca = cert_file(d, "ca.pem");
        cert = env_cert = cert_file(d, "cert.pem");
        key = env_key = cert_file(d, "key.pem");
    }
    if (strncmp(host, "unix://", 7) == 0 || host[0] == '/') {
        e->unix_path = strdup(host[0] == '/' ? host : host + 7);
        e->base = strdup("http://localhost");
    } else if (strncmp(host, "tcp://", 6) == 0 || strncmp(host, "https://", 8) == 0 ||
               strncmp(host, "http://", 7) == 0) {
        const char *hp = strstr(host, "://") + 3;
        size_t hl = strcspn(hp, "/");
        e->tls = ca || cert || key || strncmp(host, "https://", 8) == 0;
        e->base = xasprintf("%s://%.*s", e->tls ? "https" : "http", (int)hl, hp);
        e->tls_ca = dup_or_null(ca);
        e->tls_cert = dup_or_null(cert);
        e->tls_key = dup_or_null(key);
    } else {
        free(env_ca);
        free(env_cert);
        free(env_key);
        err_make(err, SBX_E_UNAVAILABLE,
                 "docker: unsupported host %s (use unix:// or tcp://)", host);
        free(e->host);
        e->host = NULL;
        return -1;
    }
    free(env_ca);
    free(env_cert);
    free(env_key);
    const char *av = json_string_value(json_object_get(conf, "api_version"));
    if (av && av[0]) {
        const char *v = av[0] == 'v' ? av + 1 : av;
        int a, b;
        if (parse_version(v, &a, &b) < 0) {
            err_make(err, SBX_E_UNAVAILABLE, "docker: api_version %s is not MAJOR.MINOR",
                     av);
            dkapi_engine_deinit(e);
            return -1;
        }
        snprintf(e->cfg_version, sizeof(e->cfg_version), "%d.%d", a, b);
    }
    if (curlev_init(&e->ce, D->loop) < 0) {
        err_make(err, SBX_E_UNAVAILABLE, "docker: libcurl multi handle failed");
        dkapi_engine_deinit(e);
        return -1;
    }
    e->up = 0;
    snprintf(e->reason, sizeof(e->reason), "not contacted yet (%s)", e->host);
    ev_timer_init(&e->ping_timer, ping_timer_cb, 1., 0.);
    e->ping_timer.data = e;
    return 0;
}

void dkapi_engine_deinit(struct dk_engine *e)
{
    if (D && D->loop)
        ev_timer_stop(D->loop, &e->ping_timer);
    if (e->misc)
        dkapi_reqlist_cancel(e->misc);
    e->ping = NULL;
    if (e->ce.multi)
        curlev_deinit(&e->ce);
    free(e->host);
    free(e->unix_path);
    free(e->base);
    free(e->tls_ca);
    free(e->tls_cert);
    free(e->tls_key);
    e->host = e->unix_path = e->base = e->tls_ca = e->tls_cert = e->tls_key = NULL;
}
