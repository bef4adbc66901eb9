/*
 * api_fs.h - the fs.* method handlers (api_fs.c), listed in api.c's table.
 */
#ifndef SBXD_API_FS_H
#define SBXD_API_FS_H

#include <jansson.h>

struct call;

void m_fs_read(struct call *c, json_t *params);
void m_fs_write(struct call *c, json_t *params);
void m_fs_list(struct call *c, json_t *params);
void m_fs_stat(struct call *c, json_t *params);
void m_fs_mkdir(struct call *c, json_t *params);
void m_fs_remove(struct call *c, json_t *params);
void m_fs_rename(struct call *c, json_t *params);
void m_fs_watch(struct call *c, json_t *params);
void m_fs_unwatch(struct call *c, json_t *params);

#endif
