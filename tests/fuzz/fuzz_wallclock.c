/*
 * fuzz_wallclock.c - daemon/wallclock.c's RFC 3339 parser takes a client's
 * bytes (process.attach since): it reads exactly the bytes it is given,
 * never overflows, and whatever it accepts comes back the same through
 * wallclock_format and wallclock_parse.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wallclock.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size ? size : 1); /* exactly size bytes: ASan sees an over-read */
    if (!s)
        return 0;
    memcpy(s, data, size);
    int64_t v;
    if (wallclock_parse(&v, s, size) == 0) {
        char b[WALLCLOCK_TEXT];
        size_t n = wallclock_format(b, v);
        int64_t w;
        if (n != 30 || wallclock_parse(&w, b, n) != 0 || w != v)
            abort();
    }
    free(s);
    return 0;
}
