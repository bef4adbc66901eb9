/*
 * stats.c - sandbox.stats in the core: the checks before the provider
 * samples, and the id and time stamped on what it found.
 */
#include "core/stats.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "sbx_proto.h"
#include "core/terminal.h"
#include "xalloc.h"

struct stats_req {
    char *id;
    stats_done_fn done;
    void *data;
};

static void stamped(void *data, json_t *stats, sbx_err_t *err)
{
    struct stats_req *r = data;
    if (stats) {
        char ts[40];
        json_object_set_new(stats, "id", json_string(r->id));
        json_object_set_new(stats, "time",
                            json_string(daemon_timestamp(daemon_now(), ts)));
    }
    r->done(r->data, stats, err);
    free(r->id);
    free(r);
}

int sandbox_stats(struct sandbox *sb, int with_size, stats_done_fn done, void *data,
                  sbx_err_t *err)
{
    const struct sbx_provider *ops = sb->prov->ops;
    if (!ops->sb_stats)
        return terminal_unsupported(err, sb, "stats");
    if (sb->status != SB_RUNNING)
        return err_make_data(err, SBX_E_STATE,
                             json_pack("{s:s, s:s}", "sandbox", sb->id, "status",
                                       sandbox_status_name(sb->status)),
                             "sandbox %s is %s", sb->id, sandbox_status_name(sb->status));
    struct stats_req *r = xcalloc(1, sizeof(*r));
    r->id = xstrdup(sb->id);
    r->done = done;
    r->data = data;
    int ret = ops->sb_stats(sb->prov->cookie, sb, with_size, stamped, r, err);
    if (ret < 0) {
        free(r->id);
        free(r);
    }
    return ret;
}
