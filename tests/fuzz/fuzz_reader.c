/*
 * fuzz_reader.c - libsbx's receive path: the frame reader fed in pieces the
 * input chooses, every frame classified and, when it is a process.output
 * notification, decoded with sbx_output_decode as clients do. Frames must
 * come out the same however the bytes were cut: the input is read twice,
 * once whole and once in pieces, and the two frame sequences compared.
 * And every frame must be what jansson reads from its line: the reader's
 * hand-written process.output fast path may never disagree with it (a line
 * jansson refuses must be refused too).
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbx/sbx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAMES 4096

/* Feeds data in pieces of `piece` bytes (0: all at once); dumps each frame
 * into out (compact JSON, '\n' after each). Returns the reader's error. */
static int read_all(const uint8_t *data, size_t size, size_t piece, char **out)
{
    sbx_reader *r = sbx_reader_new();
    if (!r)
        abort();
    sbx_reader_set_max_frame(r, 64 * 1024);
    size_t cap = 1024, len = 0;
    char *text = malloc(cap);
    int err = 0, n = 0;
    json_t *none;
    /* Clients ask before anything arrived (sbx_call's pump does). */
    if (sbx_reader_get_frame(r, &none) != SBX_OK || none)
        abort();
    for (size_t off = 0; off < size && !err;) {
        size_t k = piece && size - off > piece ? piece : size - off;
        if (sbx_reader_feed(r, (const char *)data + off, k) != SBX_OK) {
            err = sbx_reader_err(r);
            break;
        }
        off += k;
        for (;;) {
            json_t *f;
            if (sbx_reader_get_frame(r, &f) != SBX_OK) {
                err = sbx_reader_err(r);
                if (!sbx_reader_errstr(r)[0])
                    abort(); /* an error says what */
                break;
            }
            if (!f)
                break;
            if (++n > MAX_FRAMES)
                abort();
            json_t *params = json_object_get(f, "params");
            const char *method = json_string_value(json_object_get(f, "method"));
            if (method && strcmp(method, "process.output") == 0) {
                char *d;
                size_t dl;
                int stream;
                if (sbx_output_decode(&stream, &d, &dl, params) == SBX_OK) {
                    if (d[dl] != '\0')
                        abort(); /* documented NUL terminator */
                    free(d);
                }
            }
            char *s = json_dumps(f, JSON_COMPACT | JSON_ENCODE_ANY | JSON_SORT_KEYS);
            json_decref(f);
            if (!s)
                abort();
            size_t sl = strlen(s);
            while (len + sl + 2 > cap)
                cap *= 2;
            text = realloc(text, cap);
            memcpy(text + len, s, sl);
            len += sl;
            text[len++] = '\n';
            free(s);
        }
    }
    text[len] = '\0';
    *out = text;
    sbx_reader_free(r);
    return err;
}

/* jansson alone, line by line, as the reader worked before its fast path. */
static void check_lines(const uint8_t *data, size_t size)
{
    sbx_reader *r = sbx_reader_new();
    if (!r)
        abort();
    sbx_reader_set_max_frame(r, 64 * 1024);
    if (sbx_reader_feed(r, (const char *)data, size) != SBX_OK)
        abort();
    const char *p = (const char *)data, *end = p + size;
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            break;
        size_t n = (size_t)(nl - p);
        const char *line = p;
        p = nl + 1;
        size_t k = 0;
        while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r'))
            k++;
        if (k == n)
            continue; /* blank: skipped by both */
        json_t *f = NULL;
        int rc = sbx_reader_get_frame(r, &f);
        json_t *ref = n <= 64 * 1024 ? json_loadb(line, n, JSON_ALLOW_NUL, NULL) : NULL;
        if (rc == SBX_OK && (!f || !ref || !json_equal(f, ref)))
            abort(); /* a frame jansson reads differently, or not at all */
        json_decref(f);
        json_decref(ref);
        if (rc != SBX_OK)
            break; /* jansson refused it too, or too large/deep: reader errors stick */
    }
    sbx_reader_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t piece = (size_t)data[0] % 64 + 1;
    data++;
    size--;
    char *whole, *cut;
    int e1 = read_all(data, size, 0, &whole);
    int e2 = read_all(data, size, piece, &cut);
    /* The same frames in the same order, and the same error (if any) after
     * them, however the bytes were cut. */
    if (e1 != e2 || strcmp(whole, cut) != 0)
        abort();
    check_lines(data, size);
    free(whole);
    free(cut);
    return 0;
}
