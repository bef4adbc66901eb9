/*
 * docker_archive.c - tar streams of Docker sandboxes (PROTOCOL.md
 * "Archives"). A running sandbox's archives are made and extracted by
 * sbx-init (proto/CHANNEL.md "Files", tar_get/tar_more/tar_put), driven by
 * docker_fs.c like its reads and writes: this file only shapes the
 * requests.
 */
#include "providers/docker/docker_archive.h"

#include <string.h>

#include "core/fs.h"

static int is_tar(const struct fs_call *fc)
{
    const char *f = json_string_value(json_object_get(fc->args, "format"));
    return f && !strcmp(f, "tar");
}

json_t *dkar_tar_req(const struct fs_call *fc)
{
    if (!is_tar(fc))
        return NULL;
    json_t *path = json_object_get(fc->args, "path");
    if (fc->op == FS_OP_WRITE)
        return json_pack("{s:s, s:O}", "op", "tar_put", "path", path);
    if (fc->op != FS_OP_READ)
        return NULL;
    json_t *len = json_object_get(fc->args, "length");
    if (!fc->first)
        return json_pack("{s:s, s:O}", "op", "tar_more", "length", len);
    json_t *q =
        json_pack("{s:s, s:O, s:O, s:b}", "op", "tar_get", "path", path, "length", len,
                  "follow", json_is_true(json_object_get(fc->args, "follow")));
    json_t *name = json_object_get(fc->args, "name");
    if (json_is_string(name))
        json_object_set(q, "name", name);
    return q;
}

/* ==== a stopped sandbox: the Engine API's archive endpoints ====================== */

/*
 * The engine resolves paths in the container's root file system, so a
 * stopped sandbox's files can be read without starting it: HEAD
 * /containers/{id}/archive?path=P for a stat (its X-Docker-Container-Path-Stat
 * header), GET for a tar stream of P. One dka_x per call (stat, read, list)
 * or per tar handle (its transfer lives across the handle's calls, paused
 * whenever the call in flight has no room: CURL_WRITEFUNC_PAUSE, resumed by
 * the next call). Bounded: a call holds its fs_call's buffer (the core's
 * chunk) plus at most one libcurl delivery (stash), a list at most `limit`
 * entries; header and metadata records are capped. Never blocks: curlev.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "daemon.h"
#include "providers/docker/docker_int.h"
#include "log.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "core/utf8.h"
#include "xalloc.h"

#define DKA_TIMEOUT_MS (10 * 60 * 1000) /* a whole transfer */
#define DKA_META_MAX (64u << 10)        /* a PAX or GNU long-name record */
#define DKA_STASH_MAX (1u << 20)        /* one libcurl delivery held over */
#define DKA_LINKS 8                     /* symlinks followed by a stat */

enum dka_kind { DKA_STAT, DKA_READ, DKA_LIST, DKA_TAR };

struct dka_x {
    struct dk_sb *ds;
    enum dka_kind kind;
    struct fs_call *fc; /* the call in flight (NULL: a tar handle between calls) */
    struct curlev_req *cr;
    char path[4200]; /* the path asked (links followed for a stat and read) */
    int links;
    long status;
    json_t *st; /* the stat (HEAD) */
    char err[400];
    size_t elen;
    /* tar parsing (read, list) */
    uint8_t hdr[512];
    size_t hlen;
    uint64_t left, pad;
    char type;
    int in_meta, first;
    char *meta;
    size_t mlen;
    char *lname;
    /* read */
    int64_t off, want, pos, size, mtime_ms;
    int got_entry, read_done;
    /* list */
    json_t *entries;
    int64_t skip, limit, seen, depth;
    int more;
    /* tar */
    uint8_t *stash;
    size_t slen;
    int ended, paused;
    int head; /* the request in flight is the HEAD (a stat) */
};

static void x_free(struct dka_x *x)
{
    if (x->cr)
        curlev_req_cancel(x->cr);
    json_decref(x->st);
    json_decref(x->entries);
    free(x->meta);
    free(x->lname);
    free(x->stash);
    free(x);
}

/* Ends x's call with err (NULL: res, stolen). A tar handle lives on unless over. */
static void x_finish(struct dka_x *x, sbx_err_t *err, json_t *res, int over)
{
    struct fs_call *fc = x->fc;
    x->fc = NULL;
    if (over) {
        if (fc && fc->hdata)
            *fc->hdata = NULL;
        x_free(x);
    }
    if (fc)
        fs_call_done(fc, err, res);
    else
        json_decref(res);
}

static void x_fail_errno(struct dka_x *x, const char *en, const char *msg)
{
    sbx_err_t err = {0};
    fs_err(&err, en, json_string_value(json_object_get(x->fc->args, "path")), msg);
    x_finish(x, &err, NULL, 1);
}

static void x_fail(struct dka_x *x, const char *msg)
{
    sbx_err_t err = {0};
    err_make_data(&err, SBX_E_PROVIDER,
                  json_pack("{s:s, s:s}", "provider", "docker", "message", msg),
                  "docker: %s", msg);
    x_finish(x, &err, NULL, 1);
}

/* Go's os.FileMode (the engine's stat) as our type name and permission bits. */
static const char *go_type(uint64_t m)
{
    if (m & (1ull << 31))
        return "dir";
    if (m & (1ull << 27))
        return "symlink";
    if (m & (1ull << 25))
        return "fifo";
    if (m & (1ull << 24))
        return "socket";
    if (m & (1ull << 26))
        return m & (1ull << 21) ? "char" : "block";
    return "file";
}

static int go_perm(uint64_t m)
{
    int p = (int)(m & 0777);
    p |= m & (1ull << 23) ? 04000 : 0;
    p |= m & (1ull << 22) ? 02000 : 0;
    p |= m & (1ull << 20) ? 01000 : 0;
    return p;
}

/* RFC 3339 with optional fraction, in ms since the epoch; 0 when unreadable. */
static int64_t rfc3339_ms(const char *s)
{
    struct tm tm = {0};
    const char *p = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!p)
        return 0;
    int64_t ms = (int64_t)timegm(&tm) * 1000;
    if (*p == '.') {
        int64_t f = 0, d = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, d++)
            if (d < 3)
                f = f * 10 + (*p - '0');
        for (; d < 3; d++)
            f *= 10;
        ms += f;
    }
    if (*p == '+' || *p == '-') {
        int hh = 0, mm = 0;
        if (sscanf(p + 1, "%d:%d", &hh, &mm) == 2)
            ms -= (*p == '+' ? 1 : -1) * ((int64_t)hh * 3600 + mm * 60) * 1000;
    }
    return ms;
}

/* ---- requests ---------------------------------------------------------------- */

static size_t on_data(struct curlev_req *cr, const char *d, size_t n, void *privdata);
static void on_header(struct curlev_req *cr, const char *line, size_t len,
                      void *privdata);
static void on_done(struct curlev_req *cr, CURLcode rc, long status, const char *errmsg,
                    void *privdata);

static int x_start(struct dka_x *x, const char *method)
{
    struct dk_engine *e = &x->ds->dp->eng;
    char *esc = dkapi_escape(x->path);
    char *path = dkapi_path(e, "/containers/%s/archive?path=%s", x->ds->cid, esc);
    char *url = xasprintf("%s%s", e->base, path);
    free(esc);
    free(path);
    x->status = 0;
    x->elen = 0;
    x->head = !strcmp(method, "HEAD");
    json_decref(x->st);
    x->st = NULL;
    x->cr = curlev_req_new(&e->ce, method, url);
    free(url);
    if (e->unix_path)
        curlev_req_unix_socket(x->cr, e->unix_path);
    dkapi_engine_tls(e, curlev_req_easy(x->cr));
    curlev_req_timeouts(x->cr, DKA_TIMEOUT_MS, DK_CONNECT_TIMEOUT_MS);
    curlev_req_callbacks(x->cr, on_data, on_header, on_done, x);
    if (curlev_req_start(x->cr) < 0) {
        x->cr = NULL;
        return -1;
    }
    return 0;
}

static void on_header(struct curlev_req *cr, const char *line, size_t len, void *privdata)
{
    (void)cr;
    struct dka_x *x = privdata;
    static const char h[] = "X-Docker-Container-Path-Stat:";
    if (len > 9 && !strncmp(line, "HTTP/", 5)) {
        const char *sp = memchr(line, ' ', len);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return;
    }
    if (!x->head || len < sizeof(h) || strncasecmp(line, h, sizeof(h) - 1) != 0 ||
        len > 16384)
        return;
    const char *v = line + sizeof(h) - 1;
    size_t vl = len - (sizeof(h) - 1);
    while (vl && *v == ' ')
        v++, vl--;
    size_t n = 0;
    uint8_t *raw = base64_decode(v, vl, &n);
    if (raw) {
        json_decref(x->st);
        x->st = json_loadb((const char *)raw, n, 0, NULL);
        if (!json_is_object(x->st)) {
            json_decref(x->st);
            x->st = NULL;
        }
        free(raw);
    }
}

/* The engine's stat as our stat result (new reference). */
static json_t *stat_result(json_t *st)
{
    uint64_t m = (uint64_t)json_integer_value(json_object_get(st, "mode"));
    json_t *r = json_pack(
        "{s:s, s:I, s:i, s:I}", "type", go_type(m), "size",
        json_integer_value(json_object_get(st, "size")), "mode", go_perm(m), "mtime_ms",
        (json_int_t)rfc3339_ms(json_string_value(json_object_get(st, "mtime"))));
    const char *t = json_string_value(json_object_get(st, "linkTarget"));
    if (t && !strcmp(go_type(m), "symlink"))
        json_object_set_new(r, "target", json_string(t));
    return r;
}

/* ---- the tar stream of a read or a list -------------------------------------------- */

static int64_t tar_num(const uint8_t *f, size_t n)
{
    if (f[0] & 0x80) {
        int64_t v = 0;
        for (size_t i = 1; i < n; i++) {
            if (v >> 54)
                return -1;
            v = v << 8 | f[i];
        }
        return f[0] == 0x80 ? v : -1;
    }
    int64_t v = 0;
    size_t i = 0;
    while (i < n && f[i] == ' ')
        i++;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 58)
            return -1;
        v = v * 8 + (f[i] - '0');
    }
    return v;
}

/* A list entry from the header in x->hdr named name (the archive's). */
static void list_entry(struct dka_x *x, const char *name)
{
    /* the archive's names start with the listed directory's base name */
    const char *rel = strchr(name, '/');
    if (!rel || !rel[1])
        return;
    rel++;
    char r[4200];
    snprintf(r, sizeof(r), "%s", rel);
    size_t rl = strlen(r);
    while (rl && r[rl - 1] == '/')
        r[--rl] = '\0';
    int depth = 1;
    for (const char *p = r; *p; p++)
        depth += *p == '/';
    if (!rl || depth > x->depth || x->seen++ < x->skip)
        return;
    if ((int64_t)json_array_size(x->entries) >= x->limit) {
        x->more = 1;
        return;
    }
    const char *base = strrchr(r, '/') ? strrchr(r, '/') + 1 : r;
    const char *dir = json_string_value(json_object_get(x->fc->args, "path"));
    char full[8400];
    snprintf(full, sizeof(full), "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/",
             r);
    char t = x->type;
    const char *type = t == '5'   ? "dir"
                       : t == '2' ? "symlink"
                       : t == '6' ? "fifo"
                       : t == '3' ? "char"
                       : t == '4' ? "block"
                                  : "file";
    int64_t size = tar_num(x->hdr + 124, 12), mt = tar_num(x->hdr + 136, 12);
    json_t *e = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "name", base, "path", full,
                          "type", type, "size", (json_int_t)(t == '0' ? size : 0), "mode",
                          (json_int_t)(tar_num(x->hdr + 100, 8) & 07777), "mtime_ms",
                          (json_int_t)(mt < 0 ? 0 : mt * 1000));
    if (t == '2') {
        char l[101];
        snprintf(l, sizeof(l), "%.100s", (const char *)x->hdr + 157);
        json_object_set_new(e, "target", json_string(x->lname ? x->lname : l));
    }
    json_array_append_new(x->entries, e);
}

/* A whole header in x->hdr. 0 on, 1 done (stop the transfer), -1 malformed. */
static int on_tar_header(struct dka_x *x)
{
    static const uint8_t zero[512];
    if (!memcmp(x->hdr, zero, 512))
        return 1; /* the end */
    int64_t size = tar_num(x->hdr + 124, 12);
    if (size < 0)
        return -1;
    x->type = (char)x->hdr[156];
    x->left = (uint64_t)size;
    x->pad = (512 - x->left % 512) % 512;
    if (x->type == 'x' || x->type == 'L' || x->type == 'K' || x->type == 'g') {
        if (x->left > DKA_META_MAX)
            return -1;
        free(x->meta);
        x->meta = xmalloc(x->left + 1);
        x->mlen = 0;
        x->in_meta = 1;
        return 0;
    }
    char name[4200];
    if (x->lname)
        snprintf(name, sizeof(name), "%s", x->lname);
    else if (x->hdr[345])
        snprintf(name, sizeof(name), "%.155s/%.100s", (char *)x->hdr + 345,
                 (char *)x->hdr);
    else
        snprintf(name, sizeof(name), "%.100s", (char *)x->hdr);
    x->in_meta = 0;
    if (x->kind == DKA_LIST) {
        list_entry(x, name);
        free(x->lname);
        x->lname = NULL;
        if (x->type != '0' && x->type != '\0')
            x->left = x->pad = 0;
        return x->more ? 1 : 0;
    }
    free(x->lname);
    x->lname = NULL;
    /* a read: the first real entry is the file */
    if (x->type != '0' && x->type != '\0' && x->type != '7')
        return -2;
    x->got_entry = 1;
    x->size = size;
    int64_t mt = tar_num(x->hdr + 136, 12);
    x->mtime_ms = mt < 0 ? 0 : mt * 1000;
    x->pos = 0;
    return 0;
}

/* The PAX record (path / linkpath) or GNU long name just read. */
static void on_meta(struct dka_x *x)
{
    x->meta[x->mlen] = '\0';
    if (x->type == 'L' || x->type == 'K') {
        if (x->type == 'L') {
            free(x->lname);
            x->lname = xstrdup(x->meta);
        }
        return;
    }
    if (x->type != 'x')
        return;
    for (size_t i = 0; i < x->mlen;) {
        char *end = NULL;
        long len = strtol(x->meta + i, &end, 10);
        if (len <= 0 || (size_t)len > x->mlen - i || !end || *end != ' ')
            return;
        char *kv = end + 1, *stop = x->meta + i + len - 1;
        if (!strncmp(kv, "path=", 5) && stop > kv + 5) {
            free(x->lname);
            x->lname = xstrndup(kv + 5, (size_t)(stop - kv - 5));
        }
        i += (size_t)len;
    }
}

/* Tar bytes of a read or a list. 0 on, 1 done, -1 malformed, -2 not a file. */
static int tar_feed(struct dka_x *x, const uint8_t *d, size_t n)
{
    while (n > 0) {
        if (x->left == 0 && x->pad == 0) {
            size_t k = 512 - x->hlen < n ? 512 - x->hlen : n;
            memcpy(x->hdr + x->hlen, d, k);
            x->hlen += k;
            d += k;
            n -= k;
            if (x->hlen < 512)
                return 0;
            x->hlen = 0;
            int r = on_tar_header(x);
            if (r)
                return r;
            if (x->in_meta && x->left == 0) {
                on_meta(x);
                x->in_meta = 0;
            } else if (x->kind == DKA_READ && x->got_entry && x->left == 0) {
                x->read_done = 1;
                return 1;
            }
            continue;
        }
        if (x->left > 0) {
            size_t k = x->left < n ? (size_t)x->left : n;
            if (x->in_meta) {
                memcpy(x->meta + x->mlen, d, k);
                x->mlen += k;
            } else if (x->kind == DKA_READ) {
                /* the window [off, off + want) of the file */
                int64_t s = x->pos, e = x->pos + (int64_t)k;
                int64_t a = s > x->off ? s : x->off,
                        b = e < x->off + x->want ? e : x->off + x->want;
                if (b > a && fs_call_data(x->fc, d + (a - s), (size_t)(b - a)) < 0)
                    return -1;
                x->pos = e;
                if (x->pos >= x->off + x->want) {
                    x->read_done = 1;
                    return 1;
                }
            }
            x->left -= k;
            d += k;
            n -= k;
            if (x->left == 0 && x->in_meta) {
                on_meta(x);
                x->in_meta = 0;
            } else if (x->left == 0 && x->kind == DKA_READ && x->got_entry) {
                x->read_done = 1;
                return 1;
            }
            continue;
        }
        size_t k = x->pad < n ? (size_t)x->pad : n;
        x->pad -= k;
        d += k;
        n -= k;
    }
    return 0;
}

/* ---- transfers ------------------------------------------------------------------- */

static json_t *read_result(struct dka_x *x)
{
    return json_pack("{s:I, s:I, s:b, s:I}", "size", (json_int_t)x->size, "n",
                     (json_int_t)x->fc->blen, "eof",
                     x->off + (int64_t)x->fc->blen >= x->size, "mtime_ms",
                     (json_int_t)x->mtime_ms);
}

/* Moves stashed bytes into the tar call in flight; finishes it when full. 1 if it did. */
static int tar_drain(struct dka_x *x)
{
    struct fs_call *fc = x->fc;
    size_t k = fc->bmax - fc->blen < x->slen ? fc->bmax - fc->blen : x->slen;
    if (k) {
        fs_call_data(fc, x->stash, k);
        memmove(x->stash, x->stash + k, x->slen - k);
        x->slen -= k;
    }
    if (fc->blen == fc->bmax || (x->ended && x->slen == 0)) {
        int eof = x->ended && x->slen == 0;
        x_finish(x, NULL, json_pack("{s:I, s:b}", "n", (json_int_t)fc->blen, "eof", eof),
                 eof);
        return 1;
    }
    return 0;
}

static size_t tar_data(struct dka_x *x, const char *d, size_t n)
{
    if (!x->fc) {
        x->paused = 1;
        return CURL_WRITEFUNC_PAUSE; /* nobody asked: the engine waits */
    }
    struct fs_call *fc = x->fc;
    size_t room = fc->bmax - fc->blen, k = room < n ? room : n;
    fs_call_data(fc, d, k);
    if (k < n) {
        if (x->slen + (n - k) > DKA_STASH_MAX) {
            x_fail(x, "the engine sent a larger piece than can be held");
            return 0;
        }
        x->stash = xrealloc(x->stash, x->slen + (n - k));
        memcpy(x->stash + x->slen, d + k, n - k);
        x->slen += n - k;
    }
    if (fc->blen == fc->bmax)
        x_finish(x, NULL, json_pack("{s:I, s:b}", "n", (json_int_t)fc->blen, "eof", 0),
                 0);
    return n;
}

static size_t on_data(struct curlev_req *cr, const char *d, size_t n, void *privdata)
{
    (void)cr;
    struct dka_x *x = privdata;
    if (x->status != 200) {
        size_t k = sizeof(x->err) - 1 - x->elen < n ? sizeof(x->err) - 1 - x->elen : n;
        memcpy(x->err + x->elen, d, k);
        x->elen += k;
        x->err[x->elen] = '\0';
        return n;
    }
    if (x->kind == DKA_TAR)
        return tar_data(x, d, n);
    if (!x->fc)
        return 0;
    int r = tar_feed(x, (const uint8_t *)d, n);
    if (r == 0)
        return n;
    x->cr = NULL; /* libcurl ends it when we return 0; no callback after */
    curlev_req_cancel(cr);
    if (r == -2)
        x_fail_errno(x, "EINVAL", "not a regular file");
    else if (r < 0)
        x_fail(x, "the engine's archive is malformed");
    else if (x->kind == DKA_READ)
        x_finish(x, NULL, read_result(x), 1);
    else
        x_finish(x, NULL, json_pack("{s:O, s:b}", "entries", x->entries, "more", x->more),
                 1);
    return 0;
}

/* The engine's own words for a failed call, or the status. */
static void engine_fail(struct dka_x *x, CURLcode rc, const char *errmsg)
{
    char m[480];
    json_t *j = x->elen ? json_loads(x->err, 0, NULL) : NULL;
    const char *em = json_string_value(json_object_get(j, "message"));
    if (x->status == 404) {
        x_fail_errno(x, "ENOENT", em ? em : "No such file or directory");
    } else if (rc != CURLE_OK && x->status == 0) {
        snprintf(m, sizeof(m), "cannot reach the Docker engine: %s",
                 errmsg && *errmsg ? errmsg : curl_easy_strerror(rc));
        dkapi_engine_failed(&x->ds->dp->eng, m);
        x_fail(x, m);
    } else {
        snprintf(m, sizeof(m), "the engine's archive: %s",
                 em        ? em
                 : x->elen ? x->err
                           : "the transfer failed");
        x_fail(x, m);
    }
    json_decref(j);
}

static void x_next(struct dka_x *x);

static void on_done(struct curlev_req *cr, CURLcode rc, long status, const char *errmsg,
                    void *privdata)
{
    (void)cr;
    struct dka_x *x = privdata;
    x->cr = NULL;
    if (status)
        x->status = status;
    if (x->kind == DKA_TAR && x->status == 200 && rc == CURLE_OK && !x->head) {
        x->ended = 1;
        if (x->fc)
            tar_drain(x);
        return;
    }
    if (!x->fc)
        return; /* a tar handle between calls: its next call sees the failure */
    if (rc != CURLE_OK || x->status != 200) {
        engine_fail(x, rc, errmsg);
        return;
    }
    if (x->head && !x->st) {
        x_fail(x, "the engine's stat of the path is missing or malformed");
        return;
    }
    if (x->head) {
        x_next(x); /* a stat answered: follow, answer, or fetch */
        return;
    }
    if (x->kind == DKA_READ && x->got_entry)
        x_finish(x, NULL, read_result(x), 1);
    else if (x->kind == DKA_READ)
        x_fail(x, "the engine's archive has no file");
    else
        x_finish(x, NULL, json_pack("{s:O, s:b}", "entries", x->entries, "more", x->more),
                 1);
}

/* After a stat: follow a link, answer the stat, or start the GET. */
static void x_next(struct dka_x *x)
{
    json_t *st = x->st;
    uint64_t m = (uint64_t)json_integer_value(json_object_get(st, "mode"));
    const char *t = json_string_value(json_object_get(st, "linkTarget"));
    int follow =
        x->kind != DKA_STAT || json_is_true(json_object_get(x->fc->args, "follow"));
    if (!strcmp(go_type(m), "symlink") && follow && t && *t) {
        if (++x->links > DKA_LINKS) {
            x_fail_errno(x, "ELOOP", "Too many levels of symbolic links");
            return;
        }
        char np[sizeof(x->path)];
        if (t[0] == '/')
            snprintf(np, sizeof(np), "%s", t);
        else
            snprintf(np, sizeof(np), "%.*s/%s",
                     (int)(strrchr(x->path, '/') ? strrchr(x->path, '/') - x->path : 0),
                     x->path, t);
        snprintf(x->path, sizeof(x->path), "%s", np);
        if (x_start(x, "HEAD") < 0)
            x_fail(x, "libcurl refused the request");
        return;
    }
    const char *type = go_type(m);
    if (x->kind == DKA_STAT) {
        x_finish(x, NULL, stat_result(st), 1);
        return;
    }
    if (x->kind == DKA_READ && strcmp(type, "file")) {
        x_fail_errno(x, !strcmp(type, "dir") ? "EISDIR" : "EINVAL",
                     !strcmp(type, "dir") ? "Is a directory" : "not a regular file");
        return;
    }
    if (x->kind == DKA_LIST && strcmp(type, "dir")) {
        x_fail_errno(x, "ENOTDIR", "Not a directory");
        return;
    }
    x->size = json_integer_value(json_object_get(st, "size"));
    json_decref(x->st);
    x->st = NULL;
    if (x_start(x, "GET") < 0)
        x_fail(x, "libcurl refused the request");
}

/* ---- the provider's ops ------------------------------------------------------------ */

int dkar_call_stopped(void *cookie, struct fs_call *fc, sbx_err_t *err)
{
    (void)cookie;
    struct dk_sb *ds = fc->sb->pdata;
    if (!ds || !ds->cid[0])
        return err_make(err, SBX_E_STATE, "sandbox %s has no container", fc->sb->id);
    const char *fmt = json_string_value(json_object_get(fc->args, "format"));
    int tar = fmt && !strcmp(fmt, "tar");
    if (tar && !fc->first) {
        struct dka_x *x = *fc->hdata;
        if (!x)
            return err_make(err, SBX_E_INTERNAL, "archive handle without its transfer");
        x->fc = fc;
        if (!tar_drain(x) && x->paused && x->cr) {
            x->paused = 0;
            curlev_req_resume(x->cr);
        }
        if (x->fc && !x->cr && !x->ended)
            engine_fail(x, CURLE_OK, NULL);
        return 0;
    }
    struct dka_x *x = xcalloc(1, sizeof(*x));
    x->ds = ds;
    x->fc = fc;
    x->kind = tar                    ? DKA_TAR
              : fc->op == FS_OP_STAT ? DKA_STAT
              : fc->op == FS_OP_LIST ? DKA_LIST
                                     : DKA_READ;
    snprintf(x->path, sizeof(x->path), "%s",
             json_string_value(json_object_get(fc->args, "path")));
    x->off = json_integer_value(json_object_get(fc->args, "offset"));
    x->want = json_integer_value(json_object_get(fc->args, "length"));
    x->skip = json_integer_value(json_object_get(fc->args, "skip"));
    x->limit = json_integer_value(json_object_get(fc->args, "limit"));
    x->depth = json_integer_value(json_object_get(fc->args, "depth"));
    if (x->kind == DKA_LIST)
        x->entries = json_array();
    if (tar)
        *fc->hdata = x;
    int follow = json_is_true(json_object_get(fc->args, "follow"));
    if (x_start(x, tar && !follow ? "GET" : "HEAD") < 0) {
        if (tar)
            *fc->hdata = NULL;
        x_free(x);
        return err_make(err, SBX_E_INTERNAL, "libcurl refused the request");
    }
    return 0;
}

void dkar_release_stopped(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata)
{
    (void)cookie;
    (void)sb;
    (void)handle;
    if (hdata)
        x_free(hdata);
}
