/*
 * docker_archive.h - tar streams of Docker sandboxes (fs.read/fs.write with
 * `format: "tar"`, PROTOCOL.md "Archives"): the agent's requests for a
 * running sandbox (docker_fs.c sends them), and the Engine API's archive
 * endpoints for a stopped one.
 */
#ifndef SBXD_DOCKER_ARCHIVE_H
#define SBXD_DOCKER_ARCHIVE_H

#include <jansson.h>
#include <stdint.h>

#include "err.h"

struct fs_call;

/* The FS_REQ payload of an archive call (tar_get, tar_more, tar_put; new
 * reference), or NULL when fc is not one. */
json_t *dkar_tar_req(const struct fs_call *fc);

/* fs_call_stopped / fs_release_stopped of the provider table: reads of a
 * stopped sandbox from the engine (stat, read, list, tar). */
int dkar_call_stopped(void *cookie, struct fs_call *fc, sbx_err_t *err);
struct sandbox;
void dkar_release_stopped(void *cookie, struct sandbox *sb, uint64_t handle, void *hdata);

#endif
