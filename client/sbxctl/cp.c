/*
 * cp.c - sbxctl cp [-a] [-L] SRC DEST: files and directories between this
 * machine and a sandbox with `docker cp`'s rules. One side is ID:PATH; the
 * other a local path, or `-`: a tar stream on standard input (extracted
 * into ID:PATH, a directory) or standard output (ID:PATH as an archive
 * whose top entry is its base name).
 *
 * Everything moves as one tar stream (PROTOCOL.md "Archives"): the sandbox
 * makes and extracts its side (sbx-init, as the command user), and this
 * side uses the same code (agent/tar.c), so a tree is one transfer, not a
 * call per file. Which directory receives the stream and under which top
 * name is decided here, from whether DEST exists, is a directory, or ends
 * in `/`, and whether SRC ends in `/.` (its contents):
 *
 *   SRC file -> DEST missing or a file: DEST (DEST/ missing: an error)
 *            -> DEST a directory:       DEST/basename(SRC)
 *   SRC dir  -> DEST missing:           DEST, made, with SRC's contents
 *            -> DEST a directory:       DEST/basename(SRC), or with SRC/.
 *                                       the contents straight into DEST
 *            -> DEST a file:            an error
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../agent/tar.h"
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

/* p's last component (trailing slashes ignored) into out. */
static void base_into(const char *p, char *out, size_t cap)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    size_t s = n;
    while (s > 0 && p[s - 1] != '/')
        s--;
    snprintf(out, cap, "%.*s", (int)(n - s), p + s);
}

/* p's directory (trailing slashes ignored) into out: "." when it has none. */
static void dir_into(const char *p, char *out, size_t cap)
{
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    while (n > 0 && p[n - 1] != '/')
        n--;
    while (n > 1 && p[n - 1] == '/')
        n--;
    if (n == 0)
        snprintf(out, cap, "%s", p[0] == '/' ? "/" : ".");
    else
        snprintf(out, cap, "%.*s", (int)n, p);
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && !strcmp(s + n - t, tail);
}

/* "x/." (or "x/./"): the contents of x. Strips the mark from a copy. */
static int contents_only(const char *p, char *out, size_t cap)
{
    snprintf(out, cap, "%s", p);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    if (!(n >= 2 && !strcmp(out + n - 2, "/.")) && strcmp(out, "."))
        return 0;
    if (!strcmp(out, "."))
        return 1;
    out[n - 2] = '\0';
    if (!out[0])
        snprintf(out, cap, "/");
    return 1;
}

/* The type of sandbox path ("file", "dir", ...) into t, or "" when missing. */
static void remote_type(sbx_ctx *c, const char *id, const char *path, int follow, char *t,
                        size_t cap)
{
    json_t *r = NULL;
    sbx_rpc_error *e = NULL;
    t[0] = '\0';
    if (sbx_call_new(c, &r, &e, SBX_M_FS_STAT,
                     json_pack("{s:s, s:s, s:b}", "sandbox", id, "path", path, "follow",
                               follow)) != SBX_OK) {
        sbx_rpc_error_free(e);
        return;
    }
    snprintf(t, cap, "%s", json_string_value(json_object_get(r, "type")) ?: "");
    json_decref(r);
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

static long source_tar(void *buf, size_t cap, void *privdata)
{
    return tar_out_read(privdata, buf, cap);
}

static int sink_tar(const void *data, size_t len, void *privdata)
{
    return tar_in_feed(privdata, data, len);
}

/* ---- the two directions ---------------------------------------------------------- */

struct cp {
    int follow, archive;
    const char *id;
};

/* Local src into the sandbox at dest (docker cp's rules, above). */
static int upload(sbx_ctx *c, const struct cp *o, const char *src, const char *dest)
{
    char spath[PATH_MAX], name[NAME_MAX + 1], dir[PATH_MAX + 2], t[16];
    int contents = contents_only(src, spath, sizeof(spath));
    struct stat st;
    if ((o->follow ? stat(spath, &st) : lstat(spath, &st)) < 0) {
        warnx_("%s: %s", src, strerror(errno));
        return EXIT_RPC;
    }
    int sdir = S_ISDIR(st.st_mode);
    remote_type(c, o->id, dest, 1, t, sizeof(t));
    if (!strcmp(t, "dir")) {
        snprintf(dir, sizeof(dir), "%s", dest);
        if (contents && sdir)
            snprintf(name, sizeof(name), ".");
        else
            base_into(spath, name, sizeof(name));
    } else if (t[0] && sdir) {
        warnx_("%s:%s: cannot copy a directory to a file", o->id, dest);
        return EXIT_RPC;
    } else if (!t[0] && !sdir && ends_with(dest, "/")) {
        warnx_("%s:%s: no such directory", o->id, dest);
        return EXIT_RPC;
    } else {
        dir_into(dest, dir, sizeof(dir));
        base_into(dest, name, sizeof(name));
    }
    /* measured first, so the stream can go raw (its size said up front) */
    int64_t size = tar_out_size(spath, name, o->follow);
    struct tar_out *to = size >= 0 ? tar_out_new(spath, name, o->follow) : NULL;
    if (!to) {
        warnx_("%s: %s", src, strerror(errno));
        return EXIT_RPC;
    }
    json_t *opts = json_pack("{s:s}", "format", "tar");
    sbx_rpc_error *e = NULL;
    int rc = sbx_fs_write_sized(c, NULL, &e, o->id, dir, opts, (uint64_t)size, source_tar,
                                to) == SBX_OK
                 ? 0
                 : EXIT_RPC;
    if (rc && !e && tar_out_message(to)[0])
        warnx_("%s", tar_out_message(to));
    else if (rc)
        fail_rpc(c, e);
    json_decref(opts);
    tar_out_free(to);
    return rc;
}

/* The sandbox's src to local dest (docker cp's rules, above). */
static int download(sbx_ctx *c, const struct cp *o, const char *src, const char *dest)
{
    char spath[PATH_MAX], dir[PATH_MAX + 2], top[NAME_MAX + 1], t[16];
    int contents = contents_only(src, spath, sizeof(spath));
    remote_type(c, o->id, spath, o->follow, t, sizeof(t));
    if (!t[0]) {
        warnx_("%s:%s: no such file or directory", o->id, src);
        return EXIT_RPC;
    }
    int sdir = !strcmp(t, "dir");
    struct stat st;
    int dexists = stat(dest, &st) == 0, ddir = dexists && S_ISDIR(st.st_mode);
    const char *topp = NULL;
    if (ddir) {
        snprintf(dir, sizeof(dir), "%s", dest);
        topp = contents && sdir ? "" : NULL;
    } else if (dexists && sdir) {
        warnx_("%s: cannot copy a directory to a file", dest);
        return EXIT_RPC;
    } else if (!dexists && !sdir && ends_with(dest, "/")) {
        warnx_("%s: no such directory", dest);
        return EXIT_RPC;
    } else {
        dir_into(dest, dir, sizeof(dir));
        base_into(dest, top, sizeof(top));
        topp = top;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        warnx_("%s: %s", dir, strerror(errno));
        return EXIT_RPC;
    }
    struct tar_in *ti = tar_in_new(dfd, topp);
    if (!ti) {
        close(dfd);
        warnx_("out of memory");
        return EXIT_RPC;
    }
    tar_in_set_owners(ti, o->archive);
    json_t *opts = json_pack("{s:b}", "follow", o->follow);
    sbx_rpc_error *e = NULL;
    int rc = 0;
    if (sbx_fs_archive_read(c, &e, o->id, spath, opts, sink_tar, ti) != SBX_OK ||
        tar_in_finish(ti) < 0) {
        if (tar_in_errno(ti))
            warnx_("%s: %s (%s)", dest, tar_in_message(ti), strerror(tar_in_errno(ti)));
        else
            fail_rpc(c, e);
        rc = EXIT_RPC;
    }
    json_decref(opts);
    tar_in_free(ti);
    return rc;
}

/* ---- the verb ------------------------------------------------------------------- */

/* "ID:PATH" -> id (malloc'd) and path; NULL when s is local. */
static char *split_remote(const char *s, const char **path)
{
    const char *colon = strchr(s, ':');
    if (!colon || colon == s)
        return NULL;
    if (strchr(s, '/') && strchr(s, '/') < colon)
        return NULL;
    *path = colon[1] ? colon + 1 : ".";
    return ctl_nonnull(strndup(s, (size_t)(colon - s)));
}

static const struct opt cp_opts[] = {
    {"archive", 'a', 0, 1},
    {"follow-link", 'L', 0, 2},
    {NULL, 0, 0, 0},
};

static int run(sbx_ctx *c, struct cp *o, const char *src, const char *spath,
               const char *dest, const char *dpath)
{
    sbx_rpc_error *e = NULL;
    if (!strcmp(src, "-")) {
        /* a tar stream into an existing directory, as docker cp - does */
        char t[16];
        remote_type(c, o->id, dpath, 1, t, sizeof(t));
        if (strcmp(t, "dir")) {
            warnx_("%s:%s: %s", o->id, dpath,
                   t[0] ? "not a directory" : "no such directory");
            return EXIT_RPC;
        }
        json_t *opts = json_pack("{s:s}", "format", "tar");
        int rc = sbx_fs_write_fd(c, NULL, &e, o->id, dpath, opts, 0) == SBX_OK
                     ? 0
                     : fail_rpc(c, e);
        json_decref(opts);
        return rc;
    }
    if (!strcmp(dest, "-")) {
        json_t *opts = json_pack("{s:b}", "follow", o->follow);
        int rc =
            sbx_fs_archive_read(c, &e, o->id, spath, opts, sink_fd, &(int){1}) == SBX_OK
                ? 0
                : fail_rpc(c, e);
        json_decref(opts);
        return rc;
    }
    return spath ? download(c, o, spath, dest) : upload(c, o, src, dpath);
}

int cmd_cp(int argc, char **argv)
{
    struct parser p;
    const char *pos[2] = {0};
    int n = 0, o;
    struct cp opts = {0};
    parser_init(&p, argc, argv);
    while ((o = opt_next(&p, cp_opts)) != OPT_END) {
        switch (o) {
        case OPT_HELP:
            verb_help();
        case OPT_ARG:
            arg_positional(pos, &n, 2, p.arg);
            break;
        case 1:
            opts.archive = 1;
            break;
        case 2:
            opts.follow = 1;
            break;
        }
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
    opts.id = sid ? sid : did;
    sbx_ctx *c = ctl_connect();
    int rc = run(c, &opts, pos[0], spath, pos[1], dpath);
    free(sid);
    free(did);
    sbx_free(c);
    return rc;
}
