/*
 * api_process.h - the process.* methods (api_process.c), looked up by api.c.
 */
#ifndef SBXD_API_PROCESS_H
#define SBXD_API_PROCESS_H

#include "rpc/api_args.h"

/* The handler of a process.* method, or NULL. */
method_fn api_process_lookup(const char *method);

#endif
