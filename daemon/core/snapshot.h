/*
 * snapshot.h - the snapshot registry (D->snapshots): ids, owners and the
 * providers' data, kept in memory and refreshed from the providers that
 * hold snapshots beyond sbxd's life (provider.h: snapshot_list).
 */
#ifndef SBXD_SNAPSHOT_H
#define SBXD_SNAPSHOT_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

#include "core/sandbox_obj.h"

/* snapshot.list: refreshes the registry from every provider (or the one
 * named, may be NULL) that lists its own, then calls cb with {snapshots,
 * errors?}: those uid may see (admin: all). */
void snapshot_list(const char *provider, uid_t uid, int admin, sbx_result_cb cb,
                   void *privdata);
/* snapshot.delete of id (uid's own, or any for admin): the provider removes
 * its backend object, then the registry entry goes; then cb. */
void snapshot_delete(const char *id, uid_t uid, int admin, sbx_result_cb cb,
                     void *privdata);
/* The record of id when uid may use it (its owner's, or admin), else NULL.
 * Borrowed. */
json_t *snapshot_get(uid_t uid, int admin, const char *id);
/* How many snapshots uid owns and the bytes their data takes ("bytes" of
 * each record), for limits.max_snapshots_per_uid / snapshot_bytes_per_uid. */
void snapshot_usage(uid_t uid, int *count_out, size_t *bytes_out);
/* The data of a record as a new reference: large data is kept encoded
 * ("data_text") and parsed here, for the one sandbox that starts from it. */
json_t *snapshot_data(json_t *rec);

#endif
