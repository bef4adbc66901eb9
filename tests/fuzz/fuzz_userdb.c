/*
 * fuzz_userdb.c - what sbxd reads from an image to learn who a container
 * runs as (docker_sec.c, policy.c): the Engine's tar answer for /etc/passwd
 * and /etc/group, and the user spec. The image is the user's: any bytes.
 * Input: spec NUL passwd-tar NUL group-text (missing parts are empty).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "providers/docker/docker_int.h"
#include "providers/docker/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *d = (const char *)data;
    const char *z1 = memchr(d, 0, size);
    size_t sl = z1 ? (size_t)(z1 - d) : size;
    char spec[256];
    snprintf(spec, sizeof(spec), "%.*s", (int)(sl < 255 ? sl : 255), d);
    const char *rest = z1 ? z1 + 1 : d + size;
    size_t rl = (size_t)(d + size - rest);
    const char *z2 = memchr(rest, 0, rl);
    size_t tl = z2 ? (size_t)(z2 - rest) : rl;
    const char *grp = z2 ? z2 + 1 : rest + rl;
    size_t gl = (size_t)(d + size - grp);

    /* the tar part, copied so that reads past it are caught */
    char *tar = malloc(tl ? tl : 1);
    memcpy(tar, rest, tl);
    size_t n = 0;
    int link = 0;
    const char *f = dks_tar_first_file(tar, tl, &n, &link);
    if (f && (f < tar || f + n > tar + tl))
        abort();
    char *g = malloc(gl ? gl : 1);
    memcpy(g, grp, gl);

    struct policy_user u;
    char why[200];
    policy_user_spell(spec, &u);
    if (policy_user_resolve(&u, f, f ? n : 0, g, gl, why, sizeof(why)) == 0) {
        sbx_err_t err = {0};
        policy_user_ids_check(spec, &u, &err);
        err_clear(&err);
        if (u.nsgids < 0 || u.nsgids > (int)(sizeof(u.sgids) / sizeof(u.sgids[0])))
            abort();
    }
    free(tar);
    free(g);
    return 0;
}
