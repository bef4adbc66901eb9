/*
 * cp.c - sbxctl cp SRC DEST: files and directories between this machine and
 * a sandbox, `docker cp` style. One side is ID:PATH; the other a local path,
 * or `-`: a tar stream on standard input (extracted into ID:PATH, a
 * directory) or standard output (ID:PATH as an archive whose top entry is
 * its base name). Directories are copied recursively over fs.list, fs.read,
 * fs.mkdir and fs.write, each file streamed in chunks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxctl.h"

/* ---- helpers ------------------------------------------------------------------- */

static int fail_rpc(sbx_ctx *c, sbx_rpc_error *e)
{
    if (e)
        print_rpc_error(e);
    else
        warnx_("%s", c->errstr);
    sbx_rpc_error_free(e);
    return EXIT_RPC;
}

static const char *base_of(const char *p)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    const char *s = p + n;
    while (s > p && s[-1] != '/')
        s--;
    return s;
}

/* "a/" + "b" without doubling the slash; malloc'd. */
static char *join(const char *a, const char *b)
{
    size_t n = strlen(a);
    char *s = ctl_nonnull(malloc(n + strlen(b) + 2));
    snprintf(s, n + strlen(b) + 2, "%s%s%s", a, n && a[n - 1] == '/' ? "" : "/", b);
    return s;
}

/* The type of sandbox path ("file", "dir", ...), or NULL when missing. */
static char *remote_type(sbx_ctx *c, const char *id, const char *path)
{
    json_t *r = NULL;
    sbx_rpc_error *e = NULL;
    if (sbx_call_new(c, &r, &e, SBX_M_FS_STAT,
                     json_pack("{s:s, s:s}", "sandbox", id, "path", path)) != SBX_OK) {
        sbx_rpc_error_free(e);
        return NULL;
    }
    const char *t = json_string_value(json_object_get(r, "type"));
    char *s = t ? ctl_nonnull(strdup(t)) : NULL;
    json_decref(r);
    return s;
}

static int sink_fd(const void *data, size_t len, void *privdata)
{
    int fd = *(int *)privdata;
    const char *d = data;
    while (len) {
        ssize_t w = write(fd, d, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        d += w;
        len -= (size_t)w;
    }
    return 0;
}

static long source_fd(void *buf, size_t cap, void *privdata)
{
    int fd = *(int *)privdata;
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, (char *)buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return (long)n;
}

/* ---- upload -------------------------------------------------------------------- */

static int up_file(sbx_ctx *c, const char *id, const char *local, const char *remote,
                   mode_t mode)
{
    int fd = open(local, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        warnx_("%s: %s", local, strerror(errno));
        return EXIT_RPC;
    }
    json_t *opts = json_pack("{s:i}", "mode", (int)(mode & 07777));
    sbx_rpc_error *e = NULL;
    int rc =
        sbx_fs_write_fd(c, NULL, &e, id, remote, opts, fd) == SBX_OK ? 0 : fail_rpc(c, e);
    json_decref(opts);
    close(fd);
    return rc;
}

static int up_tree(sbx_ctx *c, const char *id, const char *local, const char *remote)
{
    struct stat st;
    if (lstat(local, &st) < 0) {
        warnx_("%s: %s", local, strerror(errno));
        return EXIT_RPC;
    }
    if (S_ISREG(st.st_mode))
        return up_file(c, id, local, remote, st.st_mode);
    if (!S_ISDIR(st.st_mode)) {
        warnx_("%s: skipped (not a file or directory)", local);
        return 0;
    }
    sbx_rpc_error *e = NULL;
    if (sbx_call_new(c, NULL, &e, SBX_M_FS_MKDIR,
                     json_pack("{s:s, s:s, s:b, s:i}", "sandbox", id, "path", remote,
                               "parents", 1, "mode", (int)(st.st_mode & 07777))) !=
        SBX_OK)
        return fail_rpc(c, e);
    DIR *d = opendir(local);
    if (!d) {
        warnx_("%s: %s", local, strerror(errno));
        return EXIT_RPC;
    }
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *l = join(local, de->d_name), *r = join(remote, de->d_name);
        rc = up_tree(c, id, l, r);
        free(l);
        free(r);
    }
    closedir(d);
    return rc;
}

/* ---- download -------------------------------------------------------------------- */

static int down_file(sbx_ctx *c, const char *id, const char *remote, const char *local,
                     int mode)
{
    int fd = open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode ? mode : 0644);
    if (fd < 0) {
        warnx_("%s: %s", local, strerror(errno));
        return EXIT_RPC;
    }
    sbx_rpc_error *e = NULL;
    int rc = sbx_fs_read_stream(c, &e, id, remote, sink_fd, &fd) == SBX_OK
                 ? 0
                 : fail_rpc(c, e);
    close(fd);
    return rc;
}

static int down_tree(sbx_ctx *c, const char *id, const char *remote, const char *local)
{
    char *t = remote_type(c, id, remote);
    if (!t) {
        warnx_("%s:%s: no such file or directory", id, remote);
        return EXIT_RPC;
    }
    int is_dir = !strcmp(t, "dir");
    free(t);
    if (!is_dir)
        return down_file(c, id, remote, local, 0);
    if (mkdir(local, 0755) < 0 && errno != EEXIST) {
        warnx_("%s: %s", local, strerror(errno));
        return EXIT_RPC;
    }
    int rc = 0;
    const char *cursor = NULL;
    json_t *page = NULL;
    do {
        json_t *q = json_pack("{s:s, s:s}", "sandbox", id, "path", remote);
        if (cursor)
            json_object_set_new(q, "cursor", json_string(cursor));
        json_decref(page);
        page = NULL;
        sbx_rpc_error *e = NULL;
        if (sbx_call_new(c, &page, &e, SBX_M_FS_LIST, q) != SBX_OK) {
            rc = fail_rpc(c, e);
            break;
        }
        size_t i;
        json_t *ent;
        json_array_foreach(json_object_get(page, "entries"), i, ent) {
            const char *name = json_string_value(json_object_get(ent, "name"));
            const char *type = json_string_value(json_object_get(ent, "type"));
            if (!name || !type || strchr(name, '/') || !strcmp(name, "..") ||
                !strcmp(name, "."))
                continue; /* never write outside local */
            char *r = join(remote, name), *l = join(local, name);
            if (!strcmp(type, "dir"))
                rc = down_tree(c, id, r, l);
            else if (!strcmp(type, "file"))
                rc = down_file(c, id, r, l,
                               (int)json_integer_value(json_object_get(ent, "mode")));
            else if (!strcmp(type, "symlink") && json_object_get(ent, "target"))
                rc = symlink(json_string_value(json_object_get(ent, "target")), l) < 0 &&
                             errno != EEXIST
                         ? (warnx_("%s: %s", l, strerror(errno)), EXIT_RPC)
                         : 0;
            free(r);
            free(l);
            if (rc)
                break;
        }
        cursor = rc ? NULL : json_string_value(json_object_get(page, "cursor"));
    } while (cursor);
    json_decref(page);
    return rc;
}

/* ---- tar (ustar) on stdin / stdout ------------------------------------------------- */

static void octal(char *f, size_t n, unsigned long long v)
{
    snprintf(f, n, "%0*llo", (int)n - 1, v);
}

static int tar_header(int fd, const char *name, char type, unsigned mode,
                      unsigned long long size, const char *link)
{
    char h[512] = {0};
    size_t nl = strlen(name);
    if (nl > 100) {
        /* split into prefix/name at a slash */
        const char *s = name + nl - 100;
        s = strchr(s, '/');
        if (!s || s - name > 155) {
            warnx_("%s: name too long for ustar: skipped", name);
            return 1;
        }
        memcpy(h + 345, name, (size_t)(s - name));
        memcpy(h, s + 1, strlen(s + 1));
    } else {
        memcpy(h, name, nl);
    }
    octal(h + 100, 8, mode & 07777);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, size);
    octal(h + 136, 12, 0);
    h[156] = type;
    if (link)
        snprintf(h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    return sink_fd(h, 512, &fd) ? -1 : 0;
}

static int tar_out(sbx_ctx *c, const char *id, const char *remote, const char *name,
                   int fd)
{
    json_t *st = NULL;
    sbx_rpc_error *e = NULL;
    if (sbx_call_new(c, &st, &e, SBX_M_FS_STAT,
                     json_pack("{s:s, s:s, s:b}", "sandbox", id, "path", remote, "follow",
                               0)) != SBX_OK)
        return fail_rpc(c, e);
    const char *type = json_string_value(json_object_get(st, "type"));
    unsigned mode = (unsigned)json_integer_value(json_object_get(st, "mode"));
    unsigned long long size =
        (unsigned long long)json_integer_value(json_object_get(st, "size"));
    int rc = 0;
    if (type && !strcmp(type, "file")) {
        rc = tar_header(fd, name, '0', mode, size, NULL);
        if (rc == 0) {
            int ffd = fd;
            if (sbx_fs_read_stream(c, &e, id, remote, sink_fd, &ffd) != SBX_OK)
                rc = fail_rpc(c, e);
            static const char zero[512];
            if (!rc && size % 512)
                rc = sink_fd(zero, 512 - size % 512, &ffd) ? EXIT_RPC : 0;
        }
    } else if (type && !strcmp(type, "symlink")) {
        rc = tar_header(fd, name, '2', mode, 0,
                        json_string_value(json_object_get(st, "target")));
    } else if (type && !strcmp(type, "dir")) {
        char *dn = join(name, "");
        rc = tar_header(fd, dn, '5', mode, 0, NULL);
        free(dn);
        const char *cursor = NULL;
        json_t *page = NULL;
        while (rc <= 0) {
            json_t *q = json_pack("{s:s, s:s}", "sandbox", id, "path", remote);
            if (cursor)
                json_object_set_new(q, "cursor", json_string(cursor));
            json_decref(page);
            page = NULL;
            if (sbx_call_new(c, &page, &e, SBX_M_FS_LIST, q) != SBX_OK) {
                rc = fail_rpc(c, e);
                break;
            }
            size_t i;
            json_t *ent;
            json_array_foreach(json_object_get(page, "entries"), i, ent) {
                const char *n = json_string_value(json_object_get(ent, "name"));
                char *r = join(remote, n), *l = join(name, n);
                rc = tar_out(c, id, r, l, fd);
                free(r);
                free(l);
                if (rc > 0)
                    break;
            }
            cursor = json_string_value(json_object_get(page, "cursor"));
            if (!cursor)
                break;
        }
        json_decref(page);
    }
    json_decref(st);
    return rc > 0 ? rc : 0;
}

/* Reads exactly n bytes from fd (0 ok, -1 short). */
static int read_full(int fd, void *buf, size_t n)
{
    return source_fd(buf, n, &fd) == (long)n ? 0 : -1;
}

struct bounded {
    int fd;
    unsigned long long left;
};

static long source_bounded(void *buf, size_t cap, void *privdata)
{
    struct bounded *b = privdata;
    size_t n = b->left < cap ? (size_t)b->left : cap;
    if (n && read_full(b->fd, buf, n) < 0)
        return -1;
    b->left -= n;
    return (long)n;
}

static int tar_in(sbx_ctx *c, const char *id, const char *dir, int fd)
{
    char h[512];
    for (;;) {
        if (read_full(fd, h, 512) < 0) {
            warnx_("the tar stream ends early");
            return EXIT_RPC;
        }
        int zero = 1;
        for (int i = 0; i < 512 && zero; i++)
            zero = h[i] == 0;
        if (zero)
            return 0;
        char name[260] = {0};
        if (h[345])
            snprintf(name, sizeof(name), "%.155s/%.100s", h + 345, h);
        else
            snprintf(name, sizeof(name), "%.100s", h);
        unsigned long long orig = strtoull(h + 124, NULL, 8), size = orig;
        unsigned mode = (unsigned)strtoul(h + 100, NULL, 8) & 07777;
        char type = h[156];
        size_t nl = strlen(name);
        while (nl && name[nl - 1] == '/')
            name[--nl] = '\0';
        if (strstr(name, "..") || name[0] == '/') {
            warnx_("%s: refused (outside the target directory)", name);
            return EXIT_RPC;
        }
        char *remote = join(dir, name);
        sbx_rpc_error *e = NULL;
        int rc = 0;
        if (type == '5') {
            if (sbx_call_new(c, NULL, &e, SBX_M_FS_MKDIR,
                             json_pack("{s:s, s:s, s:b, s:i}", "sandbox", id, "path",
                                       remote, "parents", 1, "mode", (int)mode)) !=
                SBX_OK)
                rc = fail_rpc(c, e);
        } else if (type == '0' || type == '\0') {
            struct bounded b = {fd, size};
            json_t *opts = json_pack("{s:i, s:b}", "mode", (int)mode, "mkdir_parents", 1);
            if (sbx_fs_write_stream(c, NULL, &e, id, remote, opts, source_bounded, &b) !=
                SBX_OK)
                rc = fail_rpc(c, e);
            json_decref(opts);
            size = b.left; /* what is still unread of this entry */
        } else {
            warnx_("%s: tar entry type '%c' skipped", name, type);
        }
        free(remote);
        if (rc)
            return rc;
        /* the rest of the entry and its padding */
        unsigned long long skip = size + (512 - orig % 512) % 512;
        char junk[4096];
        while (skip) {
            size_t n = skip < sizeof(junk) ? (size_t)skip : sizeof(junk);
            if (read_full(fd, junk, n) < 0)
                return EXIT_RPC;
            skip -= n;
        }
    }
}

/* ---- the verb ------------------------------------------------------------------- */

/* "ID:PATH" -> id (malloc'd) and path; NULL when s is local. */
static char *split_remote(const char *s, const char **path)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s || strchr(s, '/') < colon)
        return NULL;
    if (strchr(s, '/') && strchr(s, '/') < colon)
        return NULL;
    *path = colon[1] ? colon + 1 : ".";
    return ctl_nonnull(strndup(s, (size_t)(colon - s)));
}

int cmd_cp(int argc, char **argv)
{
    struct parser p;
    const char *pos[2] = {0};
    int n = 0, o;
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, NULL)) != OPT_END) {
        if (o == OPT_HELP)
            verb_help();
        if (n == 2)
            usage_error("unexpected argument: %s", p.arg);
        pos[n++] = p.arg;
    }
    if (n < 2)
        usage_error("missing %s", n ? "DEST" : "SRC");
    const char *spath = NULL, *dpath = NULL;
    char *sid = strcmp(pos[0], "-") ? split_remote(pos[0], &spath) : NULL;
    char *did = strcmp(pos[1], "-") ? split_remote(pos[1], &dpath) : NULL;
    if (!sid == !did) {
        free(sid);
        free(did);
        usage_error("exactly one of SRC and DEST is ID:PATH");
    }
    sbx_ctx *c = ctl_connect();
    int rc;
    if (did) {
        char *t = remote_type(c, did, dpath);
        if (!strcmp(pos[0], "-")) {
            /* a tar stream into an existing directory */
            if (!t || strcmp(t, "dir")) {
                warnx_("%s:%s: not a directory", did, dpath);
                rc = EXIT_RPC;
            } else {
                rc = tar_in(c, did, dpath, 0);
            }
        } else {
            char *dest = t && !strcmp(t, "dir") ? join(dpath, base_of(pos[0]))
                                                : ctl_nonnull(strdup(dpath));
            rc = up_tree(c, did, pos[0], dest);
            free(dest);
        }
        free(t);
    } else if (!strcmp(pos[1], "-")) {
        rc = tar_out(c, sid, spath, base_of(spath), 1);
        static const char end[1024];
        if (!rc && sink_fd(end, sizeof(end), &(int){1}))
            rc = EXIT_RPC;
    } else {
        struct stat st;
        char *dest = stat(pos[1], &st) == 0 && S_ISDIR(st.st_mode)
                         ? join(pos[1], base_of(spath))
                         : ctl_nonnull(strdup(pos[1]));
        rc = down_tree(c, sid, spath, dest);
        free(dest);
    }
    free(sid);
    free(did);
    sbx_free(c);
    return rc;
}
