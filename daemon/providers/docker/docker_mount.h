/*
 * docker_mount.h - sandbox.mount / sandbox.unmount on Docker (docker_mount.c):
 * the provider ops of provider.h's sb_mount / sb_unmount.
 */
#ifndef SBXD_DOCKER_MOUNT_H
#define SBXD_DOCKER_MOUNT_H

#include <jansson.h>

#include "err.h"

struct sandbox;

typedef void (*dkm_done_fn)(void *data, json_t *result, sbx_err_t *err);

int dkm_mount(void *cookie, struct sandbox *sb, const char *source, const char *target,
              int ro, dkm_done_fn done, void *data, sbx_err_t *err);
int dkm_unmount(void *cookie, struct sandbox *sb, const char *target, dkm_done_fn done,
                void *data, sbx_err_t *err);

#endif
