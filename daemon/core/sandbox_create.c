/*
 * sandbox_create.c - creating a sandbox, or reconnecting to the caller's
 * own (sandbox_create.h). Ownership here is sbxd's: the uid that created a
 * sandbox or a snapshot, never anything a client or a backend can write.
 */
#include "core/sandbox_create.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* A reconnect waiting for the start that brings the sandbox back. */
struct reconnect {
    sbx_result_cb cb;
    void *privdata;
    json_t *warnings; /* what the request asked that it does not have, or NULL */
};

static void reconnect_done(sbx_err_t *err, json_t *result, void *data)
{
    struct reconnect *rc = data;
    if (err) {
        rc->cb(err, NULL, rc->privdata);
    } else {
        json_t *o = json_copy(result);
        json_object_set_new(o, "reconnected", json_true());
        if (rc->warnings)
            json_object_set(o, "warnings", rc->warnings);
        rc->cb(NULL, o, rc->privdata);
        json_decref(o);
    }
    json_decref(rc->warnings);
    free(rc);
}

int sandbox_create_claim(uid_t uid, const char *id, json_t *params, sbx_result_cb cb,
                         void *privdata, sbx_err_t *err)
{
    struct sandbox *old = id ? sandbox_find_any(id) : NULL;
    if (!old)
        return 0;
    if (old->owner != uid)
        return err_make_data(err, SBX_E_PERMISSION, json_pack("{s:s}", "sandbox", id),
                             "sandbox id %s is not available", id);
    /* Answered once it runs (or with why it cannot): a reconnecting
     * framework's next call must find it running (issue 16, item 11). An
     * errored one is restarted. */
    struct reconnect *rc = xcalloc(1, sizeof(*rc));
    rc->cb = cb;
    rc->privdata = privdata;
    rc->warnings = sandbox_reconnect_warnings(old, params);
    sandbox_start(old, reconnect_done, rc);
    return 1;
}

static int no_snapshot(sbx_err_t *err, const char *why)
{
    return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "snapshot"),
                         "snapshot: %s", why);
}

int sandbox_create_snapshot(uid_t uid, int admin, const char *snapshot,
                            const char **provider_io, sbx_err_t *err)
{
    json_t *rec = json_object_get(D->snapshots, snapshot);
    if (!rec ||
        (!admin && json_integer_value(json_object_get(rec, "owner")) != (json_int_t)uid))
        return no_snapshot(err, "no such snapshot");
    const char *sp = json_string_value(json_object_get(rec, "provider"));
    if (*provider_io && (!sp || strcmp(*provider_io, sp) != 0))
        return no_snapshot(err, "snapshot belongs to another provider");
    *provider_io = sp;
    return 0;
}

int sandbox_create_check(struct provider_inst *pi, const char *name, uid_t uid,
                         sbx_err_t *err)
{
    if (!pi->enabled || !pi->loaded) {
        const char *why = !pi->enabled     ? "disabled in config"
                          : pi->load_error ? pi->load_error
                                           : "failed to load";
        return err_make_data(err, SBX_E_UNAVAILABLE,
                             json_pack("{s:s, s:s}", "provider", name, "reason", why),
                             "provider %s is unavailable: %s", name, why);
    }
    if (sandbox_count_owned(uid) >= D->cfg.max_sandboxes_per_uid)
        return err_make_data(err, SBX_E_LIMIT,
                             json_pack("{s:s, s:I}", "limit", "max_sandboxes_per_uid",
                                       "max", (json_int_t)D->cfg.max_sandboxes_per_uid),
                             "too many sandboxes (limit %lld)",
                             (long long)D->cfg.max_sandboxes_per_uid);
    return 0;
}

/* A first start's answer: also whether the backend was there already, and
 * how it differs from what was asked for. */
struct created {
    sbx_result_cb cb;
    void *privdata;
};

static void create_done(sbx_err_t *err, json_t *result, void *data)
{
    struct created cr = *(struct created *)data;
    free(data);
    const char *id = json_string_value(json_object_get(result, "id"));
    struct sandbox *sb = err ? NULL : sandbox_find_any(id);
    if (!sb) {
        cr.cb(err, result, cr.privdata);
        return;
    }
    json_t *r = json_copy(result);
    json_object_set_new(r, "reconnected", json_boolean(sb->backend_reconnected));
    if (sb->start_warnings)
        json_object_set(r, "warnings", sb->start_warnings);
    cr.cb(NULL, r, cr.privdata);
    json_decref(r);
}

int sandbox_create(const char *id, struct provider_inst *pi, uid_t uid, json_t *conf,
                   int start, sbx_result_cb cb, void *privdata, sbx_err_t *err)
{
    char gen[64];
    if (!id) {
        daemon_random_id("sb-", gen, sizeof(gen));
        id = gen;
    }
    struct sandbox *sb = NULL;
    if (sandbox_new(&sb, id, pi, uid, conf, err) < 0)
        return -1;
    sb->id_generated = id == gen;
    log_info("sandbox %s created (provider %s, uid %d)", sb->id, pi->ops->name, (int)uid);
    if (!start) {
        json_t *o = sandbox_to_json(sb);
        json_object_set_new(o, "reconnected", json_false());
        cb(NULL, o, privdata);
        json_decref(o);
        return 0;
    }
    sb->discard_on_fail = 1;
    struct created *cr = xcalloc(1, sizeof(*cr));
    cr->cb = cb;
    cr->privdata = privdata;
    sandbox_start(sb, create_done, cr);
    return 0;
}
