/*
 * test_obuf.c - the chunked output buffer (obuf.h): appends that cross 16 KiB
 * chunk boundaries, iovecs bounded by the caller's count, consumption that
 * returns memory chunk by chunk, adopted buffers (owned, freed on every
 * path), and a randomized append/consume run checked byte for byte against
 * a flat copy. The byte limits and marks on top of it are the session's
 * (test_session.c).
 */
#include <stdlib.h>

#include "io/obuf.h"
#include "testhelp.h"

static int chunks(const struct obuf *b)
{
    int n = 0;
    for (const struct obuf_chunk *c = b->head; c; c = c->next)
        n++;
    return n;
}

static void test_boundaries(void)
{
    struct obuf b;
    obuf_init(&b);
    test_cond("a new obuf is empty", b.bytes == 0 && !b.head && !b.tail);
    test_eq_int("an empty append allocates nothing", obuf_append(&b, "", 0), 0);
    test_cond("and counts nothing", b.bytes == 0 && chunks(&b) == 0);
    static char full[OBUF_CHUNK];
    memset(full, 'f', sizeof(full));
    obuf_append(&b, full, sizeof(full));
    test_cond("exactly one chunk's worth fills one chunk",
              b.bytes == OBUF_CHUNK && chunks(&b) == 1);
    obuf_append(&b, "x", 1);
    test_cond("one byte more starts a second chunk",
              chunks(&b) == 2 && b.bytes == OBUF_CHUNK + 1);
    obuf_append(&b, "yz", 2);
    test_cond("small appends fill the tail chunk", chunks(&b) == 2);

    struct iovec iov[4];
    test_eq_int("obuf_iov never fills more than asked", obuf_iov(&b, iov, 1), 1);
    test_eq_int("and gives one iovec per chunk", obuf_iov(&b, iov, 4), 2);
    test_cond("in order", iov[0].iov_len == OBUF_CHUNK && iov[1].iov_len == 3 &&
                              memcmp(iov[1].iov_base, "xyz", 3) == 0);
    obuf_consume(&b, OBUF_CHUNK - 1);
    test_cond("a partly written chunk stays", chunks(&b) == 2 && b.bytes == 4);
    obuf_iov(&b, iov, 4);
    test_cond("its rest comes first",
              iov[0].iov_len == 1 && ((char *)iov[0].iov_base)[0] == 'f');
    obuf_consume(&b, 1);
    test_eq_int("a chunk written out is freed at once", chunks(&b), 1);
    obuf_consume(&b, 100);
    test_cond("consuming more than is queued empties it",
              b.bytes == 0 && !b.head && !b.tail);
    obuf_append(&b, "again", 5);
    test_cond("an emptied obuf takes appends again",
              b.bytes == 5 && b.head == b.tail && b.head);
    obuf_deinit(&b);
    test_cond("deinit leaves it empty", b.bytes == 0 && !b.head);
    obuf_deinit(&b); /* twice is harmless */
}

static void test_adopt(void)
{
    struct obuf b;
    obuf_init(&b);
    obuf_append(&b, "ab", 2);
    char *own = malloc(10);
    memcpy(own, "0123456789", 10);
    test_eq_int("an adopted buffer is queued", obuf_adopt(&b, own, 10), 0);
    obuf_append(&b, "cd", 2);
    struct iovec iov[8];
    int n = obuf_iov(&b, iov, 8);
    test_cond("without a copy, between the bytes around it",
              n == 3 && iov[1].iov_base == own && iov[1].iov_len == 10 &&
                  memcmp(iov[2].iov_base, "cd", 2) == 0 && b.bytes == 14);
    test_eq_int("an empty adopted buffer is freed and adds nothing",
                obuf_adopt(&b, malloc(1), 0), 0);
    test_eq_int("so the count is unchanged", b.bytes, 14);
    obuf_consume(&b, 7);
    n = obuf_iov(&b, iov, 8);
    test_cond("consume stops inside an adopted buffer",
              n == 2 && iov[0].iov_len == 5 && ((char *)iov[0].iov_base)[0] == '5');
    obuf_deinit(&b); /* frees own: valgrind/ASan would report a leak */
}

/* Random appends and consumes against a flat reference copy. */
static void test_random(void)
{
    struct obuf b;
    obuf_init(&b);
    size_t cap = 4 << 20, ref_start = 0, ref_end = 0;
    char *ref = malloc(cap);
    char *tmp = malloc(70000);
    unsigned seed = 22;
    int ok = 1;
    for (int round = 0; round < 400 && ok; round++) {
        size_t n = (size_t)(rand_r(&seed) % 40000);
        if (ref_end + n > cap) {
            memmove(ref, ref + ref_start, ref_end - ref_start);
            ref_end -= ref_start;
            ref_start = 0;
        }
        for (size_t i = 0; i < n; i++)
            tmp[i] = (char)rand_r(&seed);
        if (rand_r(&seed) % 3 == 0 && n > 0) {
            char *own = malloc(n);
            memcpy(own, tmp, n);
            obuf_adopt(&b, own, n);
        } else {
            obuf_append(&b, tmp, n);
        }
        memcpy(ref + ref_end, tmp, n);
        ref_end += n;
        size_t take = (size_t)(rand_r(&seed) % 45000);
        if (take > ref_end - ref_start)
            take = ref_end - ref_start;
        /* Check the first `take` bytes through the iovecs, then consume them. */
        struct iovec iov[64];
        int k = obuf_iov(&b, iov, 64);
        size_t off = 0;
        for (int i = 0; i < k && off < take; i++) {
            size_t m = iov[i].iov_len < take - off ? iov[i].iov_len : take - off;
            if (memcmp(iov[i].iov_base, ref + ref_start + off, m) != 0)
                ok = 0;
            off += m;
        }
        obuf_consume(&b, take);
        ref_start += take;
        if (b.bytes != ref_end - ref_start)
            ok = 0;
    }
    test_cond("400 random appends, adoptions and consumes keep every byte in order", ok);
    obuf_deinit(&b);
    free(ref);
    free(tmp);
}

int main(void)
{
    test_boundaries();
    test_adopt();
    test_random();
    return test_report();
}
