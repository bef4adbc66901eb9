/*
 * docker_fs.c - fs.* on Docker: requests to sbx-init over the agent channel
 * (proto/CHANNEL.md "Files"), which does the work inside the container as
 * the container's user. One dkf_req per channel request id: a one-shot
 * operation, an open write (alive between its calls) or a watch.
 *
 * What the agent says is untrusted: a result must be a JSON object, errno
 * names are checked, read bytes beyond what was asked fail the call, events
 * are validated one by one; a request the agent leaves unanswered fails
 * after DKF_TIMEOUT_S, so no fs call can hang on a broken agent.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "providers/docker/docker_archive.h"
#include "providers/docker/docker_int.h"
#include "core/fs.h"
#include "log.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "xalloc.h"

#define DKF_TIMEOUT_S 60.0  /* no frame of an answered request for this long: failed */
#define DKF_EVENTS_MAX 4096 /* events taken from one FS_EVENT frame */

struct dkf_req {
    struct dkf_req *next, *prev;
    struct dk_sb *ds;
    uint32_t id;
    struct fs_call *fc; /* the call in flight, or NULL */
    int results;        /* FS_RESULTs still expected for fc */
    int write, watch;
    int archive; /* a tar read (tar_get, then tar_more): lives until its eof */
    int failed;  /* fc already answered with an error; swallow the rest */
    int pending; /* not sent yet: the agent was not reached */
    uint64_t handle;
    double last;
};

static const char *const op_names[] = {
    [FS_OP_READ] = "read",     [FS_OP_WRITE] = "open",  [FS_OP_LIST] = "list",
    [FS_OP_STAT] = "stat",     [FS_OP_MKDIR] = "mkdir", [FS_OP_REMOVE] = "remove",
    [FS_OP_RENAME] = "rename", [FS_OP_WATCH] = "watch",
};

/* -- requests ------------------------------------------------------------------ */

static struct dkf_req *find(struct dk_sb *ds, uint32_t id)
{
    for (struct dkf_req *r = ds->fs_reqs; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static void unlink_req(struct dkf_req *r)
{
    struct dk_sb *ds = r->ds;
    if (r->prev)
        r->prev->next = r->next;
    else
        ds->fs_reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
    free(r);
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

static struct dkf_req *new_req(struct dk_sb *ds)
{
    struct dkf_req *r = xcalloc(1, sizeof(*r));
    r->ds = ds;
    do
        r->id = ++ds->fs_next;
    while (r->id == 0 || find(ds, r->id));
    r->next = ds->fs_reqs;
    if (ds->fs_reqs)
        ds->fs_reqs->prev = r;
    ds->fs_reqs = r;
    if (!ev_is_active(&ds->fs_timer)) {
        ev_timer_init(&ds->fs_timer, timer_cb, 5.0, 5.0);
        ds->fs_timer.data = ds;
        ev_timer_start(D->loop, &ds->fs_timer);
    }
    return r;
}

/* Ends r's call. err NULL: success with res (stolen). The req itself lives
 * on as an open write or watch unless it is over. */
static void finish(struct dkf_req *r, sbx_err_t *err, json_t *res)
{
    struct fs_call *fc = r->fc;
    r->fc = NULL;
    int over = !r->watch && !r->write && !r->archive;
    if (r->archive && (err || json_is_true(json_object_get(res, "eof"))))
        over = 1;
    if (r->write && (err || !fc->more))
        over = 1;
    if (r->watch && err)
        over = 1;
    if (over && (r->write || r->watch || r->archive) && r->results == 0 && err &&
        r->ds->ch_live)
        dka_send_frame(r->ds, SBX_CHAN_FS_CANCEL, r->id, NULL, 0);
    if (over && r->results == 0)
        unlink_req(r);
    else if (over)
        r->failed = 1; /* answers still under way are swallowed, then r goes */
    if (fc)
        fs_call_done(fc, err, res);
    else
        json_decref(res);
}

static void fail(struct dkf_req *r, int code, const char *msg)
{
    sbx_err_t err = {0};
    err_make_data(&err, code,
                  json_pack("{s:s, s:s}", "provider", "docker", "message", msg),
                  "docker: %s", msg);
    finish(r, &err, NULL);
}

/* Sends r's frames for its call: the request, and a write's bytes and its
 * flush or commit. -1 when the channel cannot take them. */
static int send_call(struct dkf_req *r)
{
    struct dk_sb *ds = r->ds;
    struct fs_call *fc = r->fc;
    r->last = ev_now(D->loop);
    r->pending = 0;
    if (!r->write || fc->first) {
        json_t *q = dkar_tar_req(fc);
        if (!q) {
            q = json_deep_copy(fc->args);
            json_object_del(q, "sandbox_id");
            json_object_del(q, "encoding");
            json_object_set_new(q, "op", json_string(op_names[fc->op]));
        }
        int rc = dka_send_json(ds, SBX_CHAN_FS_REQ, r->id, q);
        json_decref(q);
        if (rc < 0)
            return -1;
        r->results++;
    }
    if (!r->write)
        return 0;
    for (size_t off = 0; off < fc->len;) {
        size_t n = fc->len - off;
        if (n > SBX_CHAN_MAX_PAYLOAD)
            n = SBX_CHAN_MAX_PAYLOAD;
        if (dka_send_frame(ds, SBX_CHAN_FS_DATA, r->id, fc->data + off, n) < 0)
            return -1;
        off += n;
    }
    json_t *q = json_pack("{s:s}", "op", fc->more ? "flush" : "commit");
    int rc = dka_send_json(ds, SBX_CHAN_FS_REQ, r->id, q);
    json_decref(q);
    if (rc < 0)
        return -1;
    r->results++;
    return 0;
}

/* -- the provider ops ------------------------------------------------------------ */

int dkf_call(void *cookie, struct fs_call *fc, sbx_err_t *err)
{
    (void)cookie;
    struct dk_sb *ds = fc->sb->pdata;
    if (!ds)
        return err_make(err, SBX_E_STATE, "sandbox %s has no container", fc->sb->id);
    if (ds->exec_mode)
        return err_make_data(err, SBX_E_UNSUPPORTED,
                             json_pack("{s:s, s:s}", "provider", "docker", "feature",
                                       "fs (exec_mode docker-exec)"),
                             "files need the agent: exec_mode docker-exec has no fs.*");
    int cont =
        fc->hdata && !fc->first && fc->op != FS_OP_WATCH; /* a handle's later call */
    struct dkf_req *r = cont ? *fc->hdata : NULL;
    if (cont && !r)
        return err_make(err, SBX_E_INTERNAL, "file handle without its request");
    if (!r) {
        r = new_req(ds);
        r->write = fc->op == FS_OP_WRITE;
        r->watch = fc->op == FS_OP_WATCH;
        r->archive = fc->op == FS_OP_READ && fc->hdata;
        r->handle = fc->handle;
        if (fc->hdata)
            *fc->hdata = r;
    }
    r->fc = fc;
    if (!ds->ready) {
        /* The agent is being reached (a pooled container, a restart): sent
         * by dkf_kick once the handshake is done, or failed by the timer. */
        r->pending = 1;
        r->last = ev_now(D->loop);
        return 0;
    }
    if (send_call(r) < 0) {
        r->fc = NULL;
        if (fc->first || !cont)
            unlink_req(r);
        if (fc->hdata && fc->first)
            *fc->hdata = NULL;
        return err_make_data(err, SBX_E_PROVIDER,
                             json_pack("{s:s, s:s}", "provider", "docker", "message",
                                       "the agent channel is full or closed"),
                             "docker: the agent channel is full or closed");
    }
    return 0;
}

void dkf_release(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata)
{
    (void)cookie;
    (void)handle;
    struct dk_sb *ds = sb->pdata;
    struct dkf_req *r = hdata;
    if (!ds || !r)
        return;
    for (struct dkf_req *x = ds->fs_reqs; x; x = x->next)
        if (x == r) {
            if (ds->ch_live)
                dka_send_frame(ds, SBX_CHAN_FS_CANCEL, r->id, NULL, 0);
            if (r->fc)
                return; /* the core never drops a busy handle; its call ends it */
            unlink_req(r);
            return;
        }
}

void dkf_kick(struct dk_sb *ds)
{
    struct dkf_req *r = ds->fs_reqs, *next;
    for (; r; r = next) {
        next = r->next;
        if (r->pending && r->fc && send_call(r) < 0)
            fail(r, SBX_E_PROVIDER, "the agent channel is full or closed");
    }
}

void dkf_reset(struct dk_sb *ds, const char *why)
{
    /* Answers of calls in flight may be lost with the old channel. */
    struct dkf_req *r = ds->fs_reqs, *next;
    for (; r; r = next) {
        next = r->next;
        if (r->fc && !r->pending) {
            r->results = 0;
            fail(r, SBX_E_PROVIDER, why);
        }
    }
}

void dkf_release_all(struct dk_sb *ds)
{
    while (ds->fs_reqs) {
        struct dkf_req *r = ds->fs_reqs;
        r->results = 0;
        if (r->fc)
            fail(r, SBX_E_STATE, "the sandbox stopped");
        else
            unlink_req(r);
    }
    ev_timer_stop(D->loop, &ds->fs_timer);
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)revents;
    struct dk_sb *ds = w->data;
    double now = ev_now(loop);
    struct dkf_req *r = ds->fs_reqs, *next;
    for (; r; r = next) {
        next = r->next;
        if (r->fc && now - r->last > DKF_TIMEOUT_S) {
            r->results = 0;
            fail(r, SBX_E_PROVIDER,
                 r->pending ? "the agent was not reached in time"
                            : "the agent did not answer a file request in time");
        }
    }
    if (!ds->fs_reqs)
        ev_timer_stop(loop, w);
}

/* -- frames from the agent --------------------------------------------------------- */

/* An errno name as the agent may send it: E + capitals and digits. */
static int valid_errno(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 2 || n > 20 || s[0] != 'E')
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!isupper((unsigned char)s[i]) && !isdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

static void on_result(struct dkf_req *r, const uint8_t *payload, size_t len)
{
    if (r->results > 0)
        r->results--;
    if (r->failed || !r->fc) {
        if (r->failed && r->results == 0)
            unlink_req(r);
        return;
    }
    r->last = ev_now(D->loop);
    json_t *v = chan_json(payload, len);
    if (!json_is_object(v)) {
        json_decref(v);
        fail(r, SBX_E_PROVIDER, "the agent sent an invalid file answer");
        return;
    }
    json_t *en = json_object_get(v, "errno");
    if (en) {
        const char *name = json_string_value(en);
        const char *msg = json_string_value(json_object_get(v, "message"));
        char m[256];
        snprintf(m, sizeof(m), "%s", msg ? msg : "file operation failed");
        sbx_err_t err = {0};
        fs_err(&err, valid_errno(name) ? name : "EIO",
               json_string_value(json_object_get(r->fc->args, "path")), m);
        json_decref(v);
        finish(r, &err, NULL);
        return;
    }
    if (r->results > 0) {
        json_decref(v); /* a write's open: its flush/commit answers for it */
        return;
    }
    finish(r, NULL, v);
}

static void on_events(struct dk_sb *ds, struct dkf_req *r, const uint8_t *payload,
                      size_t len)
{
    static const char *const kinds[] = {"create", "modify", "delete", "rename"};
    json_t *v = chan_json(payload, len);
    json_t *evs = json_object_get(v, "events");
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e) {
        if (i >= DKF_EVENTS_MAX)
            break;
        const char *p = json_string_value(json_object_get(e, "path"));
        const char *k = json_string_value(json_object_get(e, "kind"));
        if (!p || !k || p[0] != '/')
            continue;
        for (size_t j = 0; j < sizeof(kinds) / sizeof(kinds[0]); j++)
            if (!strcmp(k, kinds[j])) {
                fs_event(ds->sb, r->handle, p, kinds[j]);
                break;
            }
    }
    json_t *dr = json_object_get(v, "dropped");
    if ((json_is_integer(dr) && json_integer_value(dr) > 0) ||
        json_array_size(evs) > DKF_EVENTS_MAX)
        fs_overflow(ds->sb, r->handle, 0);
    json_decref(v);
}

void dkf_frame(struct dk_sb *ds, const struct sbx_chan_hdr *h, const uint8_t *payload)
{
    struct dkf_req *r = find(ds, h->proc);
    if (!r) {
        log_debug("docker %s: %s for unknown file request %u ignored", ds->sb->id,
                  sbx_chan_type_name(h->type), h->proc);
        return;
    }
    switch (h->type) {
    case SBX_CHAN_FS_DATA:
        if (!r->fc || r->failed || r->fc->op != FS_OP_READ)
            return;
        r->last = ev_now(D->loop);
        if (fs_call_data(r->fc, payload, h->len) < 0) {
            dka_send_frame(ds, SBX_CHAN_FS_CANCEL, r->id, NULL, 0);
            r->results = 0;
            fail(r, SBX_E_PROVIDER, "the agent sent more bytes than were asked for");
        }
        return;
    case SBX_CHAN_FS_RESULT:
        on_result(r, payload, h->len);
        return;
    case SBX_CHAN_FS_EVENT:
        if (r->watch && !r->fc && !r->failed)
            on_events(ds, r, payload, h->len);
        return;
    }
}
