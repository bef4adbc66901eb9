/*
 * fuzz_config.c - the YAML config loader: the input is a config file, read
 * by config_load_file over the built-in defaults with the providers' real
 * key tables (as sbxd -c and SIGHUP do). A failed load must leave the
 * config unchanged and say why.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "err.h"
#include "core/provider.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int fd = -1;
static char path[64];
static struct cfg_schema schemas[8];
static size_t nschemas;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fd < 0) {
        fd = memfd_create("sbxd-fuzz-config", MFD_CLOEXEC);
        if (fd < 0)
            abort();
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        for (size_t i = 0; sbx_providers[i] && nschemas < 8; i++) {
            schemas[nschemas].provider = sbx_providers[i]->name;
            schemas[nschemas].keys = sbx_providers[i]->config_keys;
            nschemas++;
        }
    }
    if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();

    struct sbx_config cfg;
    if (config_init_defaults(&cfg) < 0)
        abort();
    long long before = (long long)cfg.max_sessions;
    sbx_err_t err = {0};
    if (config_load_file(&cfg, path, schemas, nschemas, &err) < 0) {
        if (!err.msg || !err.msg[0])
            abort(); /* a refusal must say why */
        if ((long long)cfg.max_sessions != before)
            abort(); /* and leave the config as it was */
        err_clear(&err);
    }
    config_deinit(&cfg);
    return 0;
}
