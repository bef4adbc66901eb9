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

struct call;
struct session;

/* snapshot.list: refreshes the registry from every provider (or the one
 * named, may be NULL) that lists its own, then answers c with the
 * snapshots visible to c's session. */
void snapshot_list(struct call *c, const char *provider);
/* snapshot.delete of id (owner checked): the provider removes its backend
 * object, then the registry entry goes; answers c. */
void snapshot_delete(struct call *c, const char *id);
/* The record of id when the session may use it (its owner's or admin), else
 * NULL. Borrowed. */
json_t *snapshot_get(struct session *s, const char *id);
/* How many snapshots uid owns and the bytes their data takes ("bytes" of
 * each record), for limits.max_snapshots_per_uid / snapshot_bytes_per_uid. */
void snapshot_usage(uid_t uid, int *count_out, size_t *bytes_out);
/* The data of a record as a new reference: large data is kept encoded
 * ("data_text") and parsed here, for the one sandbox that starts from it. */
json_t *snapshot_data(json_t *rec);

#endif
