/*
 * jdepth.c - the nesting check of jdepth.h. Recursive, but bounded: it
 * stops at max, and jansson's own parser refuses deeper input
 * (JSON_PARSER_MAX_DEPTH) before a value could reach here.
 */
#include "io/jdepth.h"

int jdepth_ok(json_t *v, int depth, int max)
{
    if (depth > max)
        return 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
            if (!jdepth_ok(x, depth + 1, max))
                return 0;
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
            if (!jdepth_ok(x, depth + 1, max))
                return 0;
    }
    return 1;
}
