/*
 * api_mount.h - sandbox.mount / sandbox.unmount (api_mount.c), looked up by
 * api.c.
 */
#ifndef SBXD_API_MOUNT_H
#define SBXD_API_MOUNT_H

#include "rpc/api_args.h"

/* The handler of sandbox.mount or sandbox.unmount, or NULL. */
method_fn api_mount_lookup(const char *method);

#endif
