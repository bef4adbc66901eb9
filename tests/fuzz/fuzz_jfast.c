/*
 * fuzz_jfast.c - daemon/rpc/jfast.c against jansson: whatever jfast_load
 * accepts, json_loadb (with the daemon's flags) accepts too and gives an
 * equal value: same types (an integer is not a real), same members, same
 * encoding byte for byte with sorted keys. Inputs it gives up on are fine.
 * And for every value jansson reads, jfast_dumps writes json_dumps's bytes.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/jfast.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                         \
    do {                                                                                 \
        if (!(c))                                                                        \
            abort();                                                                     \
    } while (0)

/* Whatever jansson reads, jfast_dumps writes as json_dumps does. */
static void check_dumps(const uint8_t *data, size_t size)
{
    json_t *j =
        json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!j)
        return;
    size_t len;
    char *a = jfast_dumps(j, &len);
    char *b = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK((!a && !b) || (a && b && strcmp(a, b) == 0 && len == strlen(b)));
    free(a);
    free(b);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_dumps(data, size);
    json_t *f = jfast_load((const char *)data, size);
    if (!f)
        return 0;
    json_error_t err;
    json_t *j =
        json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    CHECK(j);
    CHECK(json_equal(f, j));
    char *a = json_dumps(f, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    char *b = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
    CHECK(a && b && strcmp(a, b) == 0);
    /* Insertion order too: replies list members as the request gave them. */
    free(a);
    free(b);
    a = json_dumps(f, JSON_COMPACT | JSON_ENCODE_ANY);
    b = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
    json_decref(f);
    json_decref(j);
    return 0;
}
