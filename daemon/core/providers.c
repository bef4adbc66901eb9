/* providers.c - the registry of compiled-in providers. */
#include "core/provider.h"

extern const struct sbx_provider sbx_provider_js;
extern const struct sbx_provider sbx_provider_duktape;
extern const struct sbx_provider sbx_provider_docker;
extern const struct sbx_provider sbx_provider_modal;

const struct sbx_provider *const sbx_providers[] = {
    &sbx_provider_js,
    &sbx_provider_duktape,
    &sbx_provider_docker,
    &sbx_provider_modal,
    NULL,
};
