/*
 * tar.c - tar streams made from a path and extracted into a directory (see
 * tar.h). The writer walks the tree depth first, each directory's names
 * sorted, and produces the archive a buffer at a time, so it can be pumped
 * as the channel has room. The reader is a state machine over the bytes as
 * they come (any cut), holding at most one header block and one bounded
 * metadata record.
 */
#include "tar.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define BLOCK 512

/* ---- header fields ---------------------------------------------------------- */

/* An octal field of n bytes (n-1 digits and a NUL); 0 if v does not fit. */
static int put_octal(char *f, size_t n, uint64_t v)
{
    if (n < 2 || (n - 1 < 22 && v >> (3 * (n - 1))))
        return 0;
    f[n - 1] = '\0';
    for (size_t i = n - 1; i-- > 0; v >>= 3)
        f[i] = (char)('0' + (v & 7));
    return 1;
}

static void put_cksum(char *h)
{
    unsigned sum = 0;
    memset(h + 148, ' ', 8);
    for (int i = 0; i < BLOCK; i++)
        sum += (unsigned char)h[i];
    put_octal(h + 148, 7, sum);
    h[155] = ' ';
}

/* A numeric field: octal (spaces/NULs around) or base-256. -1 if malformed. */
static int64_t get_num(const char *f, size_t n)
{
    const unsigned char *u = (const unsigned char *)f;
    if (u[0] & 0x80) {
        if (u[0] != 0x80)
            return -1; /* negative, or more than we take */
        uint64_t v = 0;
        for (size_t i = 1; i < n; i++) {
            if (v >> 55)
                return -1;
            v = v << 8 | u[i];
        }
        return v > INT64_MAX ? -1 : (int64_t)v;
    }
    size_t i = 0;
    while (i < n && (f[i] == ' ' || f[i] == '\0'))
        i++;
    if (i == n)
        return 0;
    uint64_t v = 0;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != ' ' && f[i] != '\0')
            return -1;
    return (int64_t)v;
}

static int cksum_ok(const char *h)
{
    int64_t want = get_num(h + 148, 8);
    unsigned u = 0;
    int s = 0;
    for (int i = 0; i < BLOCK; i++) {
        unsigned char c = i >= 148 && i < 156 ? ' ' : (unsigned char)h[i];
        u += c;
        s += (signed char)c;
    }
    return want >= 0 && (want == (int64_t)u || want == (int64_t)s);
}

/* ---- making an archive ---------------------------------------------------------- */

struct dir_frame {
    char **names;
    size_t n, i;
    size_t plen, alen; /* lengths of the path and archive name of the directory */
};

struct tar_out {
    char path[TAR_NAME_MAX + 256], aname[TAR_NAME_MAX + 256];
    char *top_path, *top_name;
    int follow, started, ended;
    int dry; /* tar_out_size: count file data, do not read it */
    struct dir_frame stack[TAR_DEPTH_MAX];
    int depth;
    /* the entry being sent: its header blocks, then data, then padding */
    char *hdr;
    size_t hlen, hpos;
    int fd;
    uint64_t data_left, pad_left;
    uint64_t entries;
    char msg[256];
};

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_names(struct dir_frame *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->names[i]);
    free(f->names);
    f->names = NULL;
    f->n = f->i = 0;
}

static int fail_out(struct tar_out *t, int e, const char *what)
{
    snprintf(t->msg, sizeof(t->msg), "%.200s: %s", what, strerror(e));
    errno = e;
    return -1;
}

/* Pushes the directory at t->path (names sorted). 0, or -1 with errno. */
static int push_dir(struct tar_out *t, size_t plen, size_t alen)
{
    if (t->depth >= TAR_DEPTH_MAX)
        return fail_out(t, ELOOP, t->path);
    DIR *d = opendir(t->path);
    if (!d)
        return fail_out(t, errno, t->path);
    struct dir_frame *f = &t->stack[t->depth];
    memset(f, 0, sizeof(*f));
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (f->n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = realloc(f->names, nc * sizeof(*nn));
            if (!nn)
                break;
            f->names = nn;
            cap = nc;
        }
        char *s = strdup(de->d_name);
        if (!s)
            break;
        f->names[f->n++] = s;
    }
    closedir(d);
    if (f->n)
        qsort(f->names, f->n, sizeof(*f->names), cmp_names);
    f->plen = plen;
    f->alen = alen;
    t->depth++;
    return 0;
}

static void pax_rec(char *out, size_t *len, const char *key, const char *val)
{
    size_t body = strlen(key) + strlen(val) + 3; /* " key=val\n" without the length */
    size_t digits = 1, total;
    for (;;) {
        total = body + digits;
        size_t d = 1;
        for (size_t x = total; x >= 10; x /= 10)
            d++;
        if (d == digits)
            break;
        digits = d;
    }
    *len += (size_t)snprintf(out + *len, total + 1, "%zu %s=%s\n", total, key, val);
}

/* Fills h (one block) as a ustar header. */
static void ustar(char *h, const char *name, char type, const struct stat *st,
                  uint64_t size, const char *link)
{
    memset(h, 0, BLOCK);
    size_t nl = strlen(name);
    if (nl <= 100) {
        memcpy(h, name, nl);
    } else {
        /* prefix/name at a slash; the caller made sure it fits */
        const char *s = strchr(name + nl - 101, '/');
        memcpy(h + 345, name, (size_t)(s - name));
        memcpy(h, s + 1, nl - (size_t)(s - name) - 1);
    }
    put_octal(h + 100, 8, st->st_mode & 07777);
    if (!put_octal(h + 108, 8, st->st_uid))
        put_octal(h + 108, 8, 0);
    if (!put_octal(h + 116, 8, st->st_gid))
        put_octal(h + 116, 8, 0);
    if (!put_octal(h + 124, 12, size))
        put_octal(h + 124, 12, 0);
    put_octal(h + 136, 12, st->st_mtim.tv_sec > 0 ? (uint64_t)st->st_mtim.tv_sec : 0);
    h[156] = type;
    if (link)
        memcpy(h + 157, link, strlen(link) < 100 ? strlen(link) : 100);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    if (type == '3' || type == '4') {
        put_octal(h + 329, 8, major(st->st_rdev));
        put_octal(h + 337, 8, minor(st->st_rdev));
    }
    put_cksum(h);
}

static int fits_ustar(const char *name)
{
    size_t nl = strlen(name);
    if (nl <= 100)
        return 1;
    const char *s = strchr(name + nl - 101, '/');
    return s && s != name && (size_t)(s - name) <= 155 && nl - (size_t)(s - name) - 1 > 0;
}

/* Sets up the entry at t->path named t->aname. 1 ready, 0 skipped, -1 failed. */
static int make_entry(struct tar_out *t, int follow)
{
    struct stat st;
    if ((follow ? stat(t->path, &st) : lstat(t->path, &st)) < 0)
        return fail_out(t, errno, t->path);
    char type, link[TAR_NAME_MAX + 1] = "";
    uint64_t size = 0;
    if (S_ISREG(st.st_mode)) {
        type = '0';
        t->fd = open(t->path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        if (t->fd < 0 || fstat(t->fd, &st) < 0)
            return fail_out(t, errno, t->path);
        size = (uint64_t)st.st_size;
    } else if (S_ISDIR(st.st_mode)) {
        type = '5';
    } else if (S_ISLNK(st.st_mode)) {
        type = '2';
        ssize_t n = readlink(t->path, link, TAR_NAME_MAX);
        if (n < 0)
            return fail_out(t, errno, t->path);
        link[n] = '\0';
    } else if (S_ISFIFO(st.st_mode)) {
        type = '6';
    } else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        type = S_ISCHR(st.st_mode) ? '3' : '4';
    } else {
        return 0; /* a socket: tar has no such entry */
    }
    char name[TAR_NAME_MAX + 258];
    snprintf(name, sizeof(name), "%s%s", t->aname, type == '5' ? "/" : "");
    char pax[3 * (TAR_NAME_MAX + 64)];
    size_t plen = 0;
    if (!fits_ustar(name))
        pax_rec(pax, &plen, "path", name);
    if (strlen(link) > 100)
        pax_rec(pax, &plen, "linkpath", link);
    if (size > 077777777777ull) {
        char v[24];
        snprintf(v, sizeof(v), "%llu", (unsigned long long)size);
        pax_rec(pax, &plen, "size", v);
    }
    size_t blocks = plen ? 2 + (plen + BLOCK - 1) / BLOCK : 1;
    free(t->hdr);
    t->hdr = calloc(blocks, BLOCK);
    if (!t->hdr)
        return fail_out(t, ENOMEM, t->path);
    char *h = t->hdr;
    if (plen) {
        struct stat ps = st;
        ps.st_mode = 0644;
        ustar(h, "././@PaxHeader", 'x', &ps, plen, NULL);
        memcpy(h + BLOCK, pax, plen);
        h += BLOCK * (blocks - 1);
    }
    ustar(h, fits_ustar(name) ? name : "././@LongName", type, &st, size, link);
    t->hlen = blocks * BLOCK;
    t->hpos = 0;
    t->data_left = size;
    t->pad_left = (BLOCK - size % BLOCK) % BLOCK;
    t->entries++;
    if (type == '5') {
        size_t pl = strlen(t->path), al = strlen(t->aname);
        if (push_dir(t, pl, al) < 0)
            return -1;
    }
    return 1;
}

/* The next entry's header into t->hdr; 0 when the tree is done, -1 failed. */
static int next_entry(struct tar_out *t)
{
    if (!t->started) {
        t->started = 1;
        snprintf(t->path, sizeof(t->path), "%s", t->top_path);
        snprintf(t->aname, sizeof(t->aname), "%s", t->top_name);
        int r = make_entry(t, t->follow);
        if (r != 0)
            return r;
    }
    while (t->depth > 0) {
        struct dir_frame *f = &t->stack[t->depth - 1];
        if (f->i >= f->n) {
            free_names(f);
            t->depth--;
            continue;
        }
        const char *nm = f->names[f->i++];
        int pl = snprintf(t->path + f->plen, sizeof(t->path) - f->plen, "%s%s",
                          f->plen && t->path[f->plen - 1] == '/' ? "" : "/", nm);
        int al = snprintf(t->aname + f->alen, sizeof(t->aname) - f->alen, "/%s", nm);
        if (pl < 0 || (size_t)pl >= sizeof(t->path) - f->plen || al < 0 ||
            f->alen + (size_t)al > TAR_NAME_MAX)
            return fail_out(t, ENAMETOOLONG, nm);
        /* A directory pushes a frame whose names extend this path: each
         * frame writes its names at its own length, so nothing is cut here. */
        int r = make_entry(t, 0);
        if (r != 0)
            return r;
    }
    return 0;
}

struct tar_out *tar_out_new(const char *path, const char *name, int follow)
{
    if (!path || !name || !*path || !*name || strlen(path) > TAR_NAME_MAX ||
        strlen(name) > TAR_NAME_MAX) {
        errno = EINVAL;
        return NULL;
    }
    struct tar_out *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->fd = -1;
    t->follow = follow;
    t->top_path = strdup(path);
    t->top_name = strdup(name);
    size_t nl = t->top_name ? strlen(t->top_name) : 0;
    while (nl > 1 && t->top_name[nl - 1] == '/')
        t->top_name[--nl] = '\0';
    if (!t->top_path || !t->top_name) {
        tar_out_free(t);
        errno = ENOMEM;
        return NULL;
    }
    struct stat st;
    if ((follow ? stat(path, &st) : lstat(path, &st)) < 0) {
        int e = errno;
        tar_out_free(t);
        errno = e;
        return NULL;
    }
    return t;
}

long tar_out_read(struct tar_out *t, void *buf, size_t cap)
{
    uint8_t *o = buf;
    size_t n = 0;
    while (n < cap) {
        if (t->hpos < t->hlen) {
            size_t k = t->hlen - t->hpos < cap - n ? t->hlen - t->hpos : cap - n;
            memcpy(o + n, t->hdr + t->hpos, k);
            t->hpos += k;
            n += k;
        } else if (t->data_left) {
            size_t want = t->data_left < cap - n ? (size_t)t->data_left : cap - n;
            ssize_t r = t->dry ? (ssize_t)want : read(t->fd, o + n, want);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return fail_out(t, errno, t->path);
            if (r == 0) {
                /* shrank while we read: the header promised more, so zeros */
                memset(o + n, 0, want);
                r = (ssize_t)want;
            }
            n += (size_t)r;
            t->data_left -= (uint64_t)r;
        } else if (t->pad_left) {
            size_t k = t->pad_left < cap - n ? (size_t)t->pad_left : cap - n;
            memset(o + n, 0, k);
            t->pad_left -= k;
            n += k;
        } else if (t->ended) {
            break;
        } else {
            if (t->fd >= 0)
                close(t->fd);
            t->fd = -1;
            int r = next_entry(t);
            if (r < 0)
                return -1;
            if (r == 0) {
                free(t->hdr);
                t->hdr = calloc(2, BLOCK);
                if (!t->hdr)
                    return fail_out(t, ENOMEM, "archive");
                t->hlen = 2 * BLOCK;
                t->hpos = 0;
                t->ended = 1;
            }
        }
    }
    return (long)n;
}

int64_t tar_out_size(const char *path, const char *name, int follow)
{
    struct tar_out *t = tar_out_new(path, name, follow);
    if (!t)
        return -1;
    t->dry = 1;
    static uint8_t scratch[1 << 16];
    int64_t total = 0;
    long n;
    while ((n = tar_out_read(t, scratch, sizeof(scratch))) > 0)
        total += n;
    int e = errno;
    tar_out_free(t);
    errno = e;
    return n < 0 ? -1 : total;
}

const char *tar_out_message(const struct tar_out *t)
{
    return t->msg;
}

uint64_t tar_out_entries(const struct tar_out *t)
{
    return t->entries;
}

void tar_out_free(struct tar_out *t)
{
    if (!t)
        return;
    while (t->depth > 0)
        free_names(&t->stack[--t->depth]);
    if (t->fd >= 0)
        close(t->fd);
    free(t->hdr);
    free(t->top_path);
    free(t->top_name);
    free(t);
}

/* ---- extracting ----------------------------------------------------------------- */

enum in_state { IN_HDR, IN_META, IN_DATA, IN_PAD, IN_END, IN_FAILED };

/* A directory whose mode or mtime is set at the end: its mode may shut this
 * side out of it, and every entry made in it moves its mtime. */
struct deferred {
    char *name;
    mode_t mode;
    int set_mode;
    int64_t mtime;
};

struct tar_in {
    int root;
    char *top;
    enum in_state st;
    char blk[BLOCK];
    size_t blen;
    char hdr[BLOCK];    /* the header of the entry whose data comes now */
    char type;          /* of that entry, or of the record being read */
    uint64_t left, pad; /* data still to come, then padding */
    int zeros;          /* zero blocks in a row */
    int fd;             /* the file being written, or -1: data skipped */
    int64_t mtime;
    mode_t mode;
    int owners;       /* chown entries to uid/gid */
    int64_t uid, gid; /* of the entry, from its header */
    char *meta;       /* a record's data so far */
    size_t mlen;
    char *long_name, *long_link; /* from the records before an entry */
    int64_t pax_size;
    int err;
    char msg[320];
    uint64_t entries, skipped;
    struct deferred *defer;
    size_t ndefer;
};

/* Fails the extraction: msg is "NAME: WHAT", or WHAT without a name. */
static int fail_in(struct tar_in *t, int e, const char *name, const char *what)
{
    if (t->st != IN_FAILED) {
        snprintf(t->msg, sizeof(t->msg), "%.*s%s%s", TAR_NAME_MAX / 16, name ? name : "",
                 name ? ": " : "", what);
        t->err = e;
        t->st = IN_FAILED;
        if (t->fd >= 0)
            close(t->fd);
        t->fd = -1;
    }
    errno = t->err;
    return -1;
}

struct tar_in *tar_in_new(int dirfd, const char *top)
{
    struct tar_in *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->root = dirfd;
    t->fd = -1;
    t->pax_size = -1;
    if (top && !(t->top = strdup(top))) {
        free(t);
        return NULL;
    }
    return t;
}

/* The entry's name made safe: relative, no `.` or empty components, no `..`.
 * Written to out (NUL-separated components in cs[]), count in *nc. -1 refused. */
static int split_name(struct tar_in *t, const char *name, char *out, char **cs, int *nc)
{
    size_t n = strlen(name);
    if (n == 0 || n > TAR_NAME_MAX || name[0] == '/')
        return -1;
    memcpy(out, name, n + 1);
    *nc = 0;
    int first = 1;
    for (char *p = out; *p;) {
        char *s = p;
        while (*p && *p != '/')
            p++;
        if (*p)
            *p++ = '\0';
        if (!*s || !strcmp(s, "."))
            continue;
        if (!strcmp(s, ".."))
            return -1;
        if (first && t->top) {
            first = 0;
            if (!*t->top)
                continue;
            s = t->top;
        }
        first = 0;
        if (*nc >= TAR_DEPTH_MAX)
            return -1;
        cs[(*nc)++] = s;
    }
    return 0;
}

/* Opens the directory cs[0..n) below the root (made 0755 when missing), never
 * through a symlink. fd, or -1 with errno. */
static int open_parent(struct tar_in *t, char **cs, int n)
{
    int fd = dup(t->root);
    for (int i = 0; i < n && fd >= 0; i++) {
        int nfd = openat(fd, cs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT) {
            if (mkdirat(fd, cs[i], 0755) < 0 && errno != EEXIST) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
            }
            nfd = openat(fd, cs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int e = errno;
        close(fd);
        errno = e == ELOOP ? ENOTDIR : e;
        fd = nfd;
    }
    return fd;
}

/* Unlinks what is at name in dir unless it is a directory (EISDIR then). */
static int clear_name(int dir, const char *name)
{
    struct stat st;
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return -1;
    }
    return unlinkat(dir, name, 0);
}

/* A directory's mode (set_mode) and mtime, kept for tar_in_finish. One that
 * only needs its mtime takes at most half of TAR_DEFER_MAX, so those whose
 * mode would shut this side out always have room; past it the mtime is set
 * now (and moved by what is made in it later, as before). */
static void defer_dir(struct tar_in *t, int dir, const char *base, const char *name,
                      mode_t mode, int set_mode)
{
    struct timespec ts[2] = {{t->mtime, 0}, {t->mtime, 0}};
    char *s = NULL;
    if (t->ndefer < (set_mode ? TAR_DEFER_MAX : TAR_DEFER_MAX / 2) &&
        (t->defer || (t->defer = calloc(TAR_DEFER_MAX, sizeof(*t->defer)))) &&
        (s = strdup(name))) {
        t->defer[t->ndefer++] = (struct deferred){s, mode, set_mode, t->mtime};
        return;
    }
    utimensat(dir, base, ts, AT_SYMLINK_NOFOLLOW);
}

/* Makes the entry whose header is t->hdr, named name. 0, or -1 failed. */
static int make(struct tar_in *t, const char *name, const char *link)
{
    char buf[TAR_NAME_MAX + 1], *cs[TAR_DEPTH_MAX];
    int nc;
    if (split_name(t, name, buf, cs, &nc) < 0)
        return fail_in(t, EPERM, name, "refused: outside the target directory");
    char type = t->type;
    if (nc == 0)
        return 0; /* the target itself ("./"): it is there */
    int dir = open_parent(t, cs, nc - 1);
    if (dir < 0)
        return fail_in(t, errno, name, "a directory on its way is missing or a symlink");
    const char *base = cs[nc - 1];
    int r = 0;
    mode_t mode = t->mode & 07777;
    if (type == '5') {
        struct stat st;
        if (mkdirat(dir, base, (mode | 0700) & 07777) < 0 && errno == EEXIST &&
            fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
            unlinkat(dir, base, 0) == 0)
            mkdirat(dir, base, (mode | 0700) & 07777);
        if (fstatat(dir, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
            r = -1;
        else if (fchmodat(dir, base, (mode | 0700) & 07777, 0) < 0)
            r = -1;
        else
            defer_dir(t, dir, base, name, mode, (mode & 0700) != 0700);
    } else if (type == '0' || type == '7' || type == '\0') {
        if (clear_name(dir, base) == 0)
            t->fd = openat(
                dir, base,
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
        r = t->fd < 0 ? -1 : 0;
    } else if (type == '2') {
        r = clear_name(dir, base) < 0 || symlinkat(link, dir, base) < 0 ? -1 : 0;
        if (r == 0) {
            struct timespec ts[2] = {{t->mtime, 0}, {t->mtime, 0}};
            utimensat(dir, base, ts, AT_SYMLINK_NOFOLLOW);
        }
    } else if (type == '1') {
        char lb[TAR_NAME_MAX + 1], *ls[TAR_DEPTH_MAX];
        int ln;
        if (split_name(t, link, lb, ls, &ln) < 0 || ln == 0) {
            close(dir);
            return fail_in(t, EPERM, name, "refused: a hard link to outside the target");
        }
        int ldir = open_parent(t, ls, ln - 1);
        r = ldir < 0 || clear_name(dir, base) < 0 ||
                    linkat(ldir, ls[ln - 1], dir, base, 0) < 0
                ? -1
                : 0;
        if (ldir >= 0)
            close(ldir);
    } else if (type == '6') {
        r = clear_name(dir, base) < 0 || mkfifoat(dir, base, mode) < 0 ? -1 : 0;
    } else {
        t->skipped++; /* devices need privileges we do not have; sockets, others */
    }
    if (r == 0 && t->owners && (type == '5' || type == '2' || type == '6') &&
        fchownat(dir, base, (uid_t)t->uid, (gid_t)t->gid, AT_SYMLINK_NOFOLLOW) < 0)
        r = -1;
    if (r == 0 && t->owners && t->fd >= 0 &&
        fchown(t->fd, (uid_t)t->uid, (gid_t)t->gid) < 0)
        r = -1;
    int e = errno;
    close(dir);
    if (r < 0)
        return fail_in(t, e, name, "cannot be made here");
    return 0;
}

void tar_in_set_owners(struct tar_in *t, int on)
{
    t->owners = on;
}

static char *take_meta_str(struct tar_in *t)
{
    char *s = malloc(t->mlen + 1);
    if (s) {
        memcpy(s, t->meta, t->mlen);
        s[t->mlen] = '\0';
        while (t->mlen && s[t->mlen - 1] == '\0')
            t->mlen--; /* GNU records end with NULs */
        s[t->mlen] = '\0';
    }
    return s;
}

/* A PAX record set: path, linkpath, size kept; the rest ignored. */
static int parse_pax(struct tar_in *t)
{
    size_t i = 0;
    while (i < t->mlen) {
        size_t len = 0, j = i;
        while (j < t->mlen && t->meta[j] >= '0' && t->meta[j] <= '9' &&
               len < TAR_META_MAX)
            len = len * 10 + (size_t)(t->meta[j++] - '0');
        if (j == i || j >= t->mlen || t->meta[j] != ' ' || len < j - i + 3 ||
            len > t->mlen - i || t->meta[i + len - 1] != '\n')
            return fail_in(t, EINVAL, NULL, "a malformed PAX header");
        char *kv = t->meta + j + 1, *end = t->meta + i + len - 1;
        char *eq = memchr(kv, '=', (size_t)(end - kv));
        if (!eq)
            return fail_in(t, EINVAL, NULL, "a malformed PAX record");
        size_t kl = (size_t)(eq - kv), vl = (size_t)(end - eq - 1);
        char **dst = kl == 4 && !memcmp(kv, "path", 4)       ? &t->long_name
                     : kl == 8 && !memcmp(kv, "linkpath", 8) ? &t->long_link
                                                             : NULL;
        if (dst) {
            if (vl > TAR_NAME_MAX || memchr(eq + 1, '\0', vl))
                return fail_in(t, EINVAL, NULL, "a PAX path that is too long or has NUL");
            free(*dst);
            *dst = strndup(eq + 1, vl);
        } else if (kl == 4 && !memcmp(kv, "size", 4)) {
            char v[24] = "";
            if (vl == 0 || vl >= sizeof(v))
                return fail_in(t, EINVAL, NULL, "a bad PAX size");
            memcpy(v, eq + 1, vl);
            char *e = NULL;
            long long s = strtoll(v, &e, 10);
            if (*e || s < 0)
                return fail_in(t, EINVAL, NULL, "a bad PAX size");
            t->pax_size = s;
        }
        i += len;
    }
    return 0;
}

static void reset_meta(struct tar_in *t)
{
    free(t->long_name);
    free(t->long_link);
    t->long_name = t->long_link = NULL;
    t->pax_size = -1;
}

/* A whole header block in t->blk. */
static int on_header(struct tar_in *t)
{
    static const char zero[BLOCK];
    if (!memcmp(t->blk, zero, BLOCK)) {
        if (++t->zeros == 2)
            t->st = IN_END;
        return 0;
    }
    t->zeros = 0;
    if (!cksum_ok(t->blk))
        return fail_in(t, EINVAL, NULL,
                       "not a tar archive (a header's checksum is wrong)");
    memcpy(t->hdr, t->blk, BLOCK);
    t->type = t->blk[156];
    int64_t size = get_num(t->blk + 124, 12);
    if (size < 0)
        return fail_in(t, EINVAL, NULL, "a header with a bad size");
    if (t->type == 'x' || t->type == 'g' || t->type == 'L' || t->type == 'K') {
        if ((uint64_t)size > TAR_META_MAX)
            return fail_in(t, EFBIG, NULL, "a metadata record over 64 KiB");
        t->left = (uint64_t)size;
        t->pad = (BLOCK - t->left % BLOCK) % BLOCK;
        t->mlen = 0;
        free(t->meta);
        t->meta = malloc(t->left ? t->left : 1);
        if (!t->meta)
            return fail_in(t, ENOMEM, NULL, "out of memory");
        t->st = IN_META;
        return 0;
    }
    if (t->pax_size >= 0)
        size = t->pax_size;
    char name[TAR_NAME_MAX + 1], link[TAR_NAME_MAX + 1];
    if (t->long_name) {
        snprintf(name, sizeof(name), "%s", t->long_name);
    } else if (t->blk[345] && !memcmp(t->blk + 257, "ustar", 5)) {
        snprintf(name, sizeof(name), "%.155s/%.100s", t->blk + 345, t->blk);
    } else {
        snprintf(name, sizeof(name), "%.100s", t->blk);
    }
    if (t->long_link)
        snprintf(link, sizeof(link), "%s", t->long_link);
    else
        snprintf(link, sizeof(link), "%.100s", t->blk + 157);
    reset_meta(t);
    int64_t mode = get_num(t->blk + 100, 8), mt = get_num(t->blk + 136, 12);
    t->mode = mode < 0 ? 0644 : (mode_t)(mode & 07777);
    t->mtime = mt < 0 ? 0 : mt;
    t->uid = get_num(t->blk + 108, 8);
    t->gid = get_num(t->blk + 116, 8);
    if (t->uid < 0 || t->gid < 0)
        t->uid = t->gid = 0;
    int has_data = t->type == '0' || t->type == '7' || t->type == '\0';
    t->left = has_data ? (uint64_t)size
              : (t->type == '5' || t->type == '2' || t->type == '1' || t->type == '6' ||
                 t->type == '3' || t->type == '4')
                  ? 0
                  : (uint64_t)size;
    t->pad = (BLOCK - t->left % BLOCK) % BLOCK;
    t->entries++;
    if (make(t, name, link) < 0)
        return -1;
    t->st = IN_DATA;
    return 0;
}

static int end_entry(struct tar_in *t)
{
    if (t->fd >= 0) {
        struct timespec ts[2] = {{t->mtime, 0}, {t->mtime, 0}};
        int r = fchmod(t->fd, t->mode);
        futimens(t->fd, ts);
        int e = errno;
        if (close(t->fd) < 0 && r == 0) {
            r = -1;
            e = errno;
        }
        t->fd = -1;
        if (r < 0)
            return fail_in(t, e, NULL, "a file's mode could not be set");
    }
    return 0;
}

static int on_meta_done(struct tar_in *t)
{
    if (t->type == 'x')
        return parse_pax(t);
    if (t->type == 'L' || t->type == 'K') {
        char *s = take_meta_str(t);
        if (!s || strlen(s) != t->mlen || t->mlen > TAR_NAME_MAX) {
            free(s);
            return fail_in(t, EINVAL, NULL, "a bad GNU long name");
        }
        char **dst = t->type == 'L' ? &t->long_name : &t->long_link;
        free(*dst);
        *dst = s;
    }
    return 0;
}

int tar_in_feed(struct tar_in *t, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0 || (t->st == IN_DATA && t->left == 0) ||
           (t->st == IN_META && t->left == 0)) {
        switch (t->st) {
        case IN_FAILED:
            errno = t->err;
            return -1;
        case IN_END:
            return 0; /* what follows the end blocks is ignored, as tar does */
        case IN_HDR: {
            size_t k = BLOCK - t->blen < n ? BLOCK - t->blen : n;
            memcpy(t->blk + t->blen, p, k);
            t->blen += k;
            p += k;
            n -= k;
            if (t->blen == BLOCK) {
                t->blen = 0;
                if (on_header(t) < 0)
                    return -1;
            }
            break;
        }
        case IN_META:
        case IN_DATA: {
            if (t->left == 0) {
                int r = t->st == IN_META ? on_meta_done(t) : end_entry(t);
                if (r < 0)
                    return -1;
                t->st = t->pad ? IN_PAD : IN_HDR;
                break;
            }
            size_t k = t->left < n ? (size_t)t->left : n;
            if (t->st == IN_META) {
                memcpy(t->meta + t->mlen, p, k);
                t->mlen += k;
            } else if (t->fd >= 0) {
                for (size_t off = 0; off < k;) {
                    ssize_t w = write(t->fd, p + off, k - off);
                    if (w < 0 && errno == EINTR)
                        continue;
                    if (w <= 0)
                        return fail_in(t, w < 0 ? errno : EIO, NULL,
                                       "writing a file failed");
                    off += (size_t)w;
                }
            }
            t->left -= k;
            p += k;
            n -= k;
            break;
        }
        case IN_PAD: {
            size_t k = t->pad < n ? (size_t)t->pad : n;
            t->pad -= k;
            p += k;
            n -= k;
            if (t->pad == 0)
                t->st = IN_HDR;
            break;
        }
        }
    }
    return 0;
}

int tar_in_finish(struct tar_in *t)
{
    if (t->st == IN_FAILED) {
        errno = t->err;
        return -1;
    }
    if (t->st != IN_END && !(t->st == IN_HDR && t->blen == 0))
        return fail_in(t, EINVAL, NULL, "the archive ends inside an entry");
    for (size_t i = t->ndefer; i-- > 0;) {
        char buf[TAR_NAME_MAX + 1], *cs[TAR_DEPTH_MAX];
        int nc;
        if (split_name(t, t->defer[i].name, buf, cs, &nc) < 0 || nc == 0)
            continue;
        int dir = open_parent(t, cs, nc - 1);
        if (dir >= 0) {
            struct timespec ts[2] = {{t->defer[i].mtime, 0}, {t->defer[i].mtime, 0}};
            /* deepest first: a parent's mode never shuts out a child's turn */
            utimensat(dir, cs[nc - 1], ts, AT_SYMLINK_NOFOLLOW);
            if (t->defer[i].set_mode)
                fchmodat(dir, cs[nc - 1], t->defer[i].mode, 0);
            close(dir);
        }
    }
    t->st = IN_END;
    return 0;
}

int tar_in_errno(const struct tar_in *t)
{
    return t->err;
}

const char *tar_in_message(const struct tar_in *t)
{
    return t->msg;
}

uint64_t tar_in_entries(const struct tar_in *t)
{
    return t->entries;
}

uint64_t tar_in_skipped(const struct tar_in *t)
{
    return t->skipped;
}

void tar_in_free(struct tar_in *t)
{
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    if (t->root >= 0)
        close(t->root);
    for (size_t i = 0; i < t->ndefer; i++)
        free(t->defer[i].name);
    free(t->defer);
    free(t->meta);
    reset_meta(t);
    free(t->top);
    free(t);
}
