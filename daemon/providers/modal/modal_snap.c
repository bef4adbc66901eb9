/*
 * modal_snap.c - how long Modal keeps the images of snapshots (issue 20).
 * TaskSnapshotFilesystem takes ttl_seconds (-1: never expires; left out:
 * Modal's default, 30 days today). Three kinds of image:
 *   - stop's (resume) images: -1, and sbxd deletes them itself when their
 *     sandbox is destroyed (modal_job.c, modal_job_end), so they never outlive it
 *     and never vanish under a stopped sandbox;
 *   - sandbox.snapshot's: the call's `ttl`, else providers.modal.snapshot_ttl_s,
 *     both clamped by providers.modal.snapshot_ttl_max_s (a client may ask
 *     less, never more; -1 there lets a client keep images forever);
 *   - SandboxSnapshotFs (the fallback) has no ttl: Modal's default applies,
 *     and the answer says so.
 */
#include <string.h>

#include "log.h"
#include "providers/modal/modal_int.h"

/* Modal's default lifetime of a snapshot image (JS SDK 0.8.0, Python 1.5.0). */
#define MODAL_DEFAULT_TTL_S (30 * 24 * 3600)

void modal_snap_ttl_load(struct mprov *mp, json_t *conf)
{
    json_t *v = json_object_get(conf, "snapshot_ttl_max_s");
    mp->snapshot_ttl_max_s = MODAL_DEFAULT_TTL_S;
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n == -1 || n >= 1)
            mp->snapshot_ttl_max_s = n;
        else
            log_warn("modal: snapshot_ttl_max_s must be -1 or 1 or more; %lld used",
                     (long long)mp->snapshot_ttl_max_s);
    }
    int64_t max = mp->snapshot_ttl_max_s, d = mp->snapshot_ttl_s;
    if (max > 0 && (d == -1 || d > max)) {
        log_warn("modal: snapshot_ttl_s %lld is beyond snapshot_ttl_max_s %lld: clamped",
                 (long long)d, (long long)max);
        mp->snapshot_ttl_s = max;
    }
}

int64_t modal_snap_ttl(const struct msb *ms)
{
    if (ms->step == ST_STOP_TSNAP)
        return -1;
    int64_t max = ms->mp->snapshot_ttl_max_s;
    int64_t t = ms->sb->snap_ttl ? ms->sb->snap_ttl : ms->mp->snapshot_ttl_s;
    if (max > 0 && (t == -1 || t > max))
        t = max;
    if (t == 0 && max > 0 && max < MODAL_DEFAULT_TTL_S)
        t = max; /* Modal's default would be beyond the ceiling */
    return t;
}

json_t *modal_snap_result(const struct msb *ms, const char *image_id, const char *via)
{
    json_t *o = json_pack("{s:s, s:s, s:s}", "image_id", image_id, "modal_sandbox_id",
                          nz(ms->sandbox_id), "via", via);
    int64_t t = modal_snap_ttl(ms);
    if (!strcmp(via, "SandboxSnapshotFs") || t == 0) {
        /* Whatever Modal keeps it for: nothing sbxd could set. */
        json_object_set_new(o, "ttl", json_string("modal default"));
        return o;
    }
    json_object_set_new(o, "ttl_s", json_integer(t));
    char ts[40];
    if (t > 0)
        json_object_set_new(o, "expires_at",
                            json_string(daemon_timestamp(daemon_now() + (double)t, ts)));
    return o;
}
