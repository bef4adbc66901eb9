/*
 * fuzz_agent_tar.c - hostile tar streams into sbx-init's extractor
 * (agent/tar.c, through agent/tar.h): what fs.write {format: "tar"} and
 * sbxctl cp feed it. The input is cut into pieces where its first byte
 * says, as frames would cut it, and extracted into a fresh directory.
 * Beyond the sanitizers, it checks the one promise that matters: nothing
 * is made outside the target (its parent holds only the target and the
 * sentinel, and the sentinel stays empty), whatever names, links and
 * metadata records the archive carries.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tar.h"

static char base[64], root[96], sentinel[96];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    if (flag == FTW_DP)
        rmdir(p);
    else
        unlink(p);
    return 0;
}

static void setup(void)
{
    if (base[0])
        return;
    snprintf(base, sizeof(base), "/tmp/fuzz-tar.XXXXXX");
    if (!mkdtemp(base))
        abort();
    snprintf(root, sizeof(root), "%s/root", base);
    snprintf(sentinel, sizeof(sentinel), "%s/outside", base);
    mkdir(sentinel, 0700);
}

/* Entries of dir other than . and .. */
static int count(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1 || size > (1u << 20))
        return 0;
    nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(root, 0700);
    int fd = open(root, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        abort();
    const char *tops[] = {NULL, "", "renamed"};
    struct tar_in *t = tar_in_new(fd, tops[data[0] % 3]);
    size_t cut = 1 + (data[0] >> 2) * 37u;
    for (size_t off = 1; off < size;) {
        size_t n = size - off < cut ? size - off : cut;
        if (tar_in_feed(t, data + off, n) < 0)
            break;
        off += n;
    }
    tar_in_finish(t);
    if (tar_in_errno(t) && !tar_in_message(t)[0])
        abort(); /* every failure says why */
    tar_in_free(t);
    /* base holds root and the sentinel only; the sentinel stays empty */
    if (count(base) != 2 || count(sentinel) != 0)
        abort();
    return 0;
}
