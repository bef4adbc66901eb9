/*
 * snapshot.c - the snapshot registry. Records live in D->snapshots as
 * "snap-…" -> {provider, owner, created_at, sandbox, data}. Duktape's live
 * only here; Docker's are images whose labels carry the id and the owner, so
 * after an sbxd restart a snapshot.list (and the provider's own listing when
 * the engine comes up) registers them again.
 */
#include "core/snapshot.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "core/provider.h"
#include "core/sandbox_obj.h"
#include "sbx_proto.h"
#include "xalloc.h"

void snapshot_register(const char *id, const char *provider, uid_t owner,
                       double created_at, const char *sandbox, json_t *data)
{
    char ts[40];
    json_t *rec = json_object_get(D->snapshots, id);
    if (rec &&
        strcmp(json_string_value(json_object_get(rec, "provider")), provider) == 0) {
        /* Known already: keep the record (sandboxes hold its data), mark it seen. */
        json_object_del(rec, "_stale");
        json_decref(data);
        return;
    }
    if (rec) {
        log_warn("snapshot %s of provider %s clashes with one of %s; ignored", id,
                 provider, json_string_value(json_object_get(rec, "provider")));
        json_decref(data);
        return;
    }
    rec =
        json_pack("{s:s, s:I, s:s, s:s, s:o}", "provider", provider, "owner",
                  (json_int_t)owner, "created_at", daemon_timestamp(created_at, ts),
                  "sandbox", sandbox ? sandbox : "", "data", data ? data : json_object());
    if (rec)
        json_object_set_new(D->snapshots, id, rec);
}

void snapshot_usage(uid_t uid, int *count_out, size_t *bytes_out)
{
    int n = 0;
    size_t bytes = 0;
    const char *id;
    json_t *rec;
    json_object_foreach(D->snapshots, id, rec) {
        if (json_integer_value(json_object_get(rec, "owner")) != (json_int_t)uid)
            continue;
        n++;
        bytes += (size_t)json_integer_value(json_object_get(rec, "bytes"));
    }
    *count_out = n;
    *bytes_out = bytes;
}

json_t *snapshot_data(json_t *rec)
{
    json_t *text = json_object_get(rec, "data_text");
    if (json_is_string(text))
        return json_loadb(json_string_value(text), json_string_length(text),
                          JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    json_t *d = json_object_get(rec, "data");
    return d ? json_incref(d) : NULL;
}

static int may_use(uid_t uid, int admin, json_t *rec)
{
    return admin || json_integer_value(json_object_get(rec, "owner")) == (json_int_t)uid;
}

json_t *snapshot_get(uid_t uid, int admin, const char *id)
{
    json_t *rec = id ? json_object_get(D->snapshots, id) : NULL;
    return rec && may_use(uid, admin, rec) ? rec : NULL;
}

/* ---- snapshot.list ------------------------------------------------------------ */

struct list_job {
    sbx_result_cb cb;
    void *privdata;
    uid_t uid;
    int admin;
    char provider[64]; /* "" = all */
    int pending;
    json_t *errors; /* [{provider, message}] */
};

static void list_answer(struct list_job *j)
{
    json_t *arr = json_array();
    const char *id;
    json_t *rec;
    json_object_foreach(D->snapshots, id, rec) {
        const char *pn = json_string_value(json_object_get(rec, "provider"));
        if (j->provider[0] && strcmp(j->provider, pn) != 0)
            continue;
        if (!may_use(j->uid, j->admin, rec))
            continue;
        int in_use = 0;
        for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next) {
            const char *from = json_string_value(json_object_get(sb->conf, "snapshot"));
            in_use += from && strcmp(from, id) == 0;
        }
        json_t *o = json_pack("{s:s, s:s, s:O, s:O, s:O, s:i}", "snapshot", id,
                              "provider", pn, "owner_uid", json_object_get(rec, "owner"),
                              "created_at", json_object_get(rec, "created_at"), "sandbox",
                              json_object_get(rec, "sandbox"), "sandboxes", in_use);
        json_t *img = json_object_get(json_object_get(rec, "data"), "image");
        if (img)
            json_object_set(o, "image", img);
        json_array_append_new(arr, o);
    }
    json_t *res = json_pack("{s:o}", "snapshots", arr);
    if (json_array_size(j->errors) > 0)
        json_object_set(res, "errors", j->errors);
    j->cb(NULL, res, j->privdata);
    json_decref(res);
    json_decref(j->errors);
    free(j);
}

struct list_one {
    struct list_job *job;
    const char *provider; /* static: the provider table's name */
};

static void list_one_done(void *data, sbx_err_t *err)
{
    struct list_one *lo = data;
    struct list_job *j = lo->job;
    const char *id;
    json_t *rec;
    void *tmp;
    if (err && err->msg) {
        /* The backend could not be asked: keep what we know. */
        json_array_append_new(j->errors, json_pack("{s:s, s:s}", "provider", lo->provider,
                                                   "message", err->msg));
        json_object_foreach(D->snapshots, id, rec)
            json_object_del(rec, "_stale");
        err_clear(err);
    } else {
        json_object_foreach_safe(D->snapshots, tmp, id, rec) {
            if (!json_object_get(rec, "_stale"))
                continue;
            int used = 0;
            for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next) {
                const char *from =
                    json_string_value(json_object_get(sb->conf, "snapshot"));
                used |= from && strcmp(from, id) == 0;
            }
            if (used) {
                json_object_del(rec, "_stale");
                continue;
            }
            log_info("snapshot %s is gone from provider %s", id, lo->provider);
            json_object_del(D->snapshots, id);
        }
    }
    free(lo);
    if (--j->pending == 0)
        list_answer(j);
}

void snapshot_list(const char *provider, uid_t uid, int admin, sbx_result_cb cb,
                   void *privdata)
{
    struct list_job *j = xcalloc(1, sizeof(*j));
    j->cb = cb;
    j->privdata = privdata;
    j->uid = uid;
    j->admin = admin;
    snprintf(j->provider, sizeof(j->provider), "%s", provider ? provider : "");
    j->errors = json_array();
    j->pending = 1; /* our own, dropped below: answers wait for every provider */
    for (int i = 0; i < D->nproviders; i++) {
        struct provider_inst *pi = &D->providers[i];
        const char *reason = NULL;
        if (provider && strcmp(provider, pi->ops->name) != 0)
            continue;
        if (!pi->enabled || !pi->loaded || !pi->ops->snapshot_list ||
            !pi->ops->available(pi->cookie, &reason))
            continue;
        const char *id;
        json_t *rec;
        json_object_foreach(D->snapshots, id, rec) {
            if (strcmp(json_string_value(json_object_get(rec, "provider")),
                       pi->ops->name) == 0)
                json_object_set_new(rec, "_stale", json_true());
        }
        struct list_one *lo = xcalloc(1, sizeof(*lo));
        lo->job = j;
        lo->provider = pi->ops->name;
        j->pending++;
        sbx_err_t err = {0};
        if (pi->ops->snapshot_list(pi->cookie, list_one_done, lo, &err) < 0)
            list_one_done(lo, &err);
    }
    if (--j->pending == 0)
        list_answer(j);
}

/* ---- snapshot.delete ------------------------------------------------------------- */

struct del_job {
    sbx_result_cb cb;
    void *privdata;
    char id[64];
};

static void del_done(void *data, sbx_err_t *err)
{
    struct del_job *j = data;
    if (err && err->msg) {
        j->cb(err, NULL, j->privdata);
        err_clear(err);
    } else {
        json_object_del(D->snapshots, j->id);
        log_info("snapshot %s deleted", j->id);
        json_t *res = json_pack("{s:s, s:b}", "snapshot", j->id, "deleted", 1);
        j->cb(NULL, res, j->privdata);
        json_decref(res);
    }
    free(j);
}

void snapshot_delete(const char *id, uid_t uid, int admin, sbx_result_cb cb,
                     void *privdata)
{
    sbx_err_t err = {0};
    json_t *rec = snapshot_get(uid, admin, id);
    if (!rec) {
        err_make_data(&err, SBX_E_NOT_FOUND, json_pack("{s:s}", "snapshot", id),
                      "snapshot not found: %s", id);
        cb(&err, NULL, privdata);
        err_clear(&err);
        return;
    }
    for (struct sandbox *sb = D->sandboxes; sb; sb = sb->next) {
        const char *from = json_string_value(json_object_get(sb->conf, "snapshot"));
        if (from && strcmp(from, id) == 0) {
            err_make_data(&err, SBX_E_STATE,
                          json_pack("{s:s, s:s}", "snapshot", id, "sandbox", sb->id),
                          "snapshot %s is in use by sandbox %s", id, sb->id);
            cb(&err, NULL, privdata);
            err_clear(&err);
            return;
        }
    }
    struct del_job *j = xcalloc(1, sizeof(*j));
    j->cb = cb;
    j->privdata = privdata;
    snprintf(j->id, sizeof(j->id), "%s", id);
    struct provider_inst *pi =
        daemon_provider(json_string_value(json_object_get(rec, "provider")));
    if (!pi || !pi->loaded || !pi->ops->snapshot_delete) {
        del_done(j, NULL);
        return;
    }
    if (pi->ops->snapshot_delete(pi->cookie, id, rec, del_done, j, &err) < 0)
        del_done(j, &err);
}
