/*
 * wk_spawn.c - checks of SPAWN request fields that both workers accept the
 * same way.
 */
#include <string.h>

#include "workers/common/wk.h"

const char *wk_check_tools(const json_t *tools)
{
    size_t i;
    json_t *t;

    if (!tools)
        return NULL;
    if (!json_is_array(tools) || json_array_size(tools) > WK_MAX_TOOLS)
        return "tools must be an array of at most 256 names";
    json_array_foreach(tools, i, t) {
        if (!json_is_string(t) || json_string_length(t) == 0 ||
            json_string_length(t) > WK_TOOL_NAME_MAX ||
            memchr(json_string_value(t), '\0', json_string_length(t)))
            return "tool names must be non-empty strings of at most 128 bytes";
    }
    return NULL;
}
