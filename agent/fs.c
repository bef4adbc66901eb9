/*
 * fs.c - sbx-init's file requests (proto/CHANNEL.md "Files"): stat, list,
 * read, write through a temporary file and rename, mkdir, remove, rename and
 * inotify watches, done in this process (no process per operation) as the
 * agent's own uid/gid, which is the container's user: the one a command
 * gets. Paths are as this process sees them: the container's root.
 *
 * Reads are produced by fs_pump() while the output queue has room, like
 * process output; writes are written as their frames arrive (the daemon
 * paces them: one chunk, then flush or commit, then the next).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

#define FS_MAX_REQS 64     /* reads and open writes at once */
#define FS_MAX_WATCHES 64  /* watches at once */
#define FS_MAX_DIRS 8192   /* inotify watches of one recursive watch */
#define FS_QUEUE_MAX 65536 /* events queued per watch, the most a request may ask */
#define FS_FLUSH_MS 50     /* one FS_EVENT per watch at most this often */
#define FS_LIST_MAX 4096   /* entries of one list answer */
#define FS_LIST_BYTES (900u << 10)
#define FS_WRITE_IDLE_MS (10 * 60 * 1000) /* an abandoned write's temporary file goes */
#define FS_DEPTH_MAX 16

enum fs_kind { FSK_READ, FSK_WRITE };

struct fs_req {
    uint32_t id;
    enum fs_kind kind;
    int fd;
    /* read */
    uint64_t off, left, sent, size;
    int64_t mtime_ms;
    /* write */
    char *path, *tmp; /* tmp NULL: append straight to path */
    int mode;         /* -1: none asked */
    uint64_t written;
    int err; /* the first write error, reported at flush/commit */
    int64_t last_ms;
};

struct fs_ev {
    char *path;
    uint8_t kind;
};

struct fs_dir {
    int wd;
    char *path;
};

struct fs_watch {
    uint32_t id;
    int ifd;
    bool recursive;
    char *root;
    struct fs_dir *dirs;
    size_t ndirs, dcap;
    struct fs_ev *q;
    size_t nq, qmax;
    uint64_t dropped;
    int64_t next_ms; /* earliest next FS_EVENT */
};

static struct fs_req *reqs[FS_MAX_REQS];
static size_t nreqs;
static struct fs_watch *watches[FS_MAX_WATCHES];
static size_t nwatches;

static const char *const kinds[] = {"create", "modify", "delete", "rename"};

/* ---- answers ----------------------------------------------------------------- */

static void send_ok(uint32_t id, struct buf *b)
{
    if (!b->len)
        buf_puts(b, "{}");
    agent_send_buf(SBX_CHAN_FS_RESULT, id, b);
}

static int64_t mtime_ms(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000;
}

static const char *type_name(mode_t m)
{
    if (S_ISREG(m))
        return "file";
    if (S_ISDIR(m))
        return "dir";
    if (S_ISLNK(m))
        return "symlink";
    if (S_ISFIFO(m))
        return "fifo";
    if (S_ISSOCK(m))
        return "socket";
    if (S_ISCHR(m))
        return "char";
    if (S_ISBLK(m))
        return "block";
    return "other";
}

/* {"type",...} members of st (no braces); target read for a symlink at path. */
static void put_stat(struct buf *b, const char *path, const struct stat *st)
{
    buf_printf(b, "\"type\":\"%s\",\"size\":%lld,\"mode\":%u,\"mtime_ms\":%lld",
               type_name(st->st_mode), (long long)st->st_size,
               (unsigned)(st->st_mode & 07777), (long long)mtime_ms(st));
    if (S_ISLNK(st->st_mode)) {
        char t[PATH_MAX];
        ssize_t n = readlink(path, t, sizeof(t));
        if (n >= 0) {
            buf_puts(b, ",\"target\":");
            json_put_str(b, t, (size_t)n);
        }
    }
}

/* ---- requests ---------------------------------------------------------------- */

static struct fs_req *find_req(uint32_t id)
{
    for (size_t i = 0; i < nreqs; i++)
        if (reqs[i]->id == id)
            return reqs[i];
    return NULL;
}

static void free_req(struct fs_req *r)
{
    for (size_t i = 0; i < nreqs; i++)
        if (reqs[i] == r) {
            reqs[i] = reqs[--nreqs];
            break;
        }
    if (r->fd >= 0)
        close(r->fd);
    if (r->tmp)
        unlink(r->tmp);
    free(r->tmp);
    free(r->path);
    free(r);
}

/* A string member without NUL, or NULL. */
static const char *get_str(const struct jval *o, const char *key)
{
    const struct jval *v = json_get(o, key);
    if (!v || v->type != J_STR || strlen(v->str) != v->len || v->len == 0)
        return NULL;
    return v->str;
}

static int64_t get_int(const struct jval *o, const char *key, int64_t dflt)
{
    const struct jval *v = json_get(o, key);
    return v && v->type == J_NUM && v->is_int ? v->ival : dflt;
}

static bool get_bool(const struct jval *o, const char *key, bool dflt)
{
    const struct jval *v = json_get(o, key);
    if (v && v->type == J_TRUE)
        return true;
    if (v && v->type == J_FALSE)
        return false;
    return dflt;
}

static void op_stat(uint32_t id, const struct jval *q, const char *path)
{
    struct stat st;
    int r = get_bool(q, "follow", true) ? stat(path, &st) : lstat(path, &st);
    if (r < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    struct buf b = {0};
    buf_puts(&b, "{");
    put_stat(&b, path, &st);
    buf_printf(&b, ",\"uid\":%u,\"gid\":%u}", (unsigned)st.st_uid, (unsigned)st.st_gid);
    send_ok(id, &b);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

struct lister {
    struct buf b;
    int64_t skip, limit, seen, count;
    bool more;
};

/* Lists dir (depth levels) into l; returns -1 with errno on the top level. */
static int list_dir(struct lister *l, const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof(*nn));
            if (!nn)
                break;
            names = nn;
        }
        names[n++] = xstrndup(de->d_name, strlen(de->d_name));
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (l->more)
            break;
        char p[PATH_MAX];
        int pl = snprintf(p, sizeof(p), "%s%s%s", dir,
                          dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", names[i]);
        struct stat st;
        if (pl < 0 || (size_t)pl >= sizeof(p) || lstat(p, &st) < 0)
            continue; /* gone meanwhile, or too long to name */
        if (l->seen++ >= l->skip) {
            if (l->count >= l->limit || l->b.len > FS_LIST_BYTES) {
                l->more = true;
                break;
            }
            buf_puts(&l->b, l->count ? ",{\"name\":" : "{\"name\":");
            json_put_str(&l->b, names[i], strlen(names[i]));
            buf_puts(&l->b, ",\"path\":");
            json_put_str(&l->b, p, (size_t)pl);
            buf_puts(&l->b, ",");
            put_stat(&l->b, p, &st);
            buf_puts(&l->b, "}");
            l->count++;
        }
        if (depth > 1 && S_ISDIR(st.st_mode))
            list_dir(l, p, depth - 1);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return 0;
}

static void op_list(uint32_t id, const struct jval *q, const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        agent_send_fs_err(id, ENOTDIR, NULL);
        return;
    }
    struct lister l = {.skip = get_int(q, "skip", 0), .limit = get_int(q, "limit", 1000)};
    int64_t depth = get_int(q, "depth", 1);
    if (depth < 1 || depth > FS_DEPTH_MAX || l.skip < 0 || l.limit < 1) {
        agent_send_fs_err(id, EINVAL, "bad depth, skip or limit");
        return;
    }
    if (l.limit > FS_LIST_MAX)
        l.limit = FS_LIST_MAX;
    buf_puts(&l.b, "{\"entries\":[");
    if (list_dir(&l, path, (int)depth) < 0) {
        int e = errno;
        buf_deinit(&l.b);
        agent_send_fs_err(id, e, NULL);
        return;
    }
    buf_printf(&l.b, "],\"more\":%s}", l.more ? "true" : "false");
    send_ok(id, &l.b);
}

static struct fs_req *new_req(uint32_t id, enum fs_kind kind)
{
    struct fs_req *r = xcalloc(1, sizeof(*r));
    r->id = id;
    r->kind = kind;
    r->fd = -1;
    r->mode = -1;
    r->last_ms = now_ms();
    reqs[nreqs++] = r;
    return r;
}

static void op_read(uint32_t id, const struct jval *q, const char *path)
{
    int64_t off = get_int(q, "offset", 0), len = get_int(q, "length", 0);
    if (off < 0 || len < 0 || len > (int64_t)SBX_CHAN_FS_READ_MAX) {
        agent_send_fs_err(id, EINVAL, "bad offset or length");
        return;
    }
    /* O_NONBLOCK: a FIFO must not hang the agent in open(). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        agent_send_fs_err(id, e, NULL);
        return;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        agent_send_fs_err(id, S_ISDIR(st.st_mode) ? EISDIR : EINVAL,
                          S_ISDIR(st.st_mode) ? NULL : "not a regular file");
        return;
    }
    struct fs_req *r = new_req(id, FSK_READ);
    r->fd = fd;
    r->off = (uint64_t)off;
    r->left = (uint64_t)len;
    r->size = (uint64_t)st.st_size;
    r->mtime_ms = mtime_ms(&st);
}

/* mkdir -p of path itself. 0, or -1 with errno. */
static int mkdirs(const char *path, mode_t mode)
{
    char p[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof(p)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(p, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (mkdir(p, mode) < 0 && errno != EEXIST)
            return -1;
        if (stat(p, &st) < 0)
            return -1;
        if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        p[i] = c;
    }
    return 0;
}

/* The directory part of path (malloc'd); "/" for "/x". */
static char *dir_of(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s || s == path)
        return xstrndup("/", 1);
    return xstrndup(path, (size_t)(s - path));
}

static void op_open(uint32_t id, const struct jval *q, const char *path)
{
    if (find_req(id)) {
        agent_send_fs_err(id, EBUSY, "request id in use");
        return;
    }
    bool append = get_bool(q, "append", false);
    int64_t mode = get_int(q, "mode", -1);
    if (mode < -1 || mode > 07777) {
        agent_send_fs_err(id, EINVAL, "bad mode");
        return;
    }
    if (get_bool(q, "mkdir_parents", false)) {
        char *d = dir_of(path);
        int r = mkdirs(d, 0755);
        free(d);
        if (r < 0) {
            agent_send_fs_err(id, errno, NULL);
            return;
        }
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        agent_send_fs_err(id, EISDIR, NULL);
        return;
    }
    struct fs_req *r = new_req(id, FSK_WRITE);
    r->path = xstrndup(path, strlen(path));
    r->mode = (int)mode;
    if (append) {
        r->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
                     mode >= 0 ? (mode_t)mode : 0666);
    } else {
        /* Beside the target, so that rename stays on its file system. */
        char *d = dir_of(path);
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t tl = strlen(d) + strlen(base) + 16;
        r->tmp = xmalloc(tl);
        for (int tries = 0; tries < 16 && r->fd < 0; tries++) {
            static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
            char rnd[7];
            uint64_t x = (uint64_t)now_ms() * 6364136223846793005ull +
                         (uint64_t)getpid() * 1442695040888963407ull + id + tries * 977u;
            for (int k = 0; k < 6; k++) {
                rnd[k] = al[x % 36];
                x = x / 36 * 2862933555777941757ull + 3037000493ull;
            }
            rnd[6] = '\0';
            snprintf(r->tmp, tl, "%s/.%s.sbx-%s", strcmp(d, "/") ? d : "", base, rnd);
            r->fd =
                open(r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0600);
            if (r->fd < 0 && errno != EEXIST)
                break;
        }
        free(d);
        if (r->fd < 0) {
            free(r->tmp);
            r->tmp = NULL;
        }
    }
    if (r->fd < 0) {
        int e = errno;
        free_req(r);
        agent_send_fs_err(id, e, NULL);
        return;
    }
    send_ok(id, &(struct buf){0});
}

static void write_data(struct fs_req *r, const uint8_t *d, size_t n)
{
    r->last_ms = now_ms();
    while (n > 0 && !r->err) {
        ssize_t w = write(r->fd, d, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r->err = w < 0 ? errno : EIO;
            break;
        }
        d += w;
        n -= (size_t)w;
        r->written += (uint64_t)w;
    }
}

static void op_flush(struct fs_req *r, bool commit)
{
    uint32_t id = r->id;
    if (r->err) {
        int e = r->err;
        free_req(r);
        agent_send_fs_err(id, e, NULL);
        return;
    }
    if (!commit) {
        struct buf b = {0};
        buf_printf(&b, "{\"size\":%llu}", (unsigned long long)r->written);
        send_ok(id, &b);
        return;
    }
    if (r->tmp) {
        /* The new file takes the mode asked for, else the one it replaces,
         * else what a plain create would give. */
        mode_t mode;
        struct stat st;
        if (r->mode >= 0) {
            mode = (mode_t)r->mode;
        } else if (stat(r->path, &st) == 0) {
            mode = st.st_mode & 07777;
        } else {
            mode_t um = umask(0);
            umask(um);
            mode = 0666 & ~um;
        }
        if (fchmod(r->fd, mode) < 0 || rename(r->tmp, r->path) < 0) {
            int e = errno;
            free_req(r);
            agent_send_fs_err(id, e, NULL);
            return;
        }
        free(r->tmp);
        r->tmp = NULL;
    } else if (r->mode >= 0) {
        fchmod(r->fd, (mode_t)r->mode);
    }
    struct buf b = {0};
    struct stat st;
    uint64_t size = fstat(r->fd, &st) == 0 ? (uint64_t)st.st_size : r->written;
    buf_printf(&b, "{\"size\":%llu}", (unsigned long long)size);
    free_req(r);
    send_ok(id, &b);
}

static void op_mkdir(uint32_t id, const struct jval *q, const char *path)
{
    int64_t mode = get_int(q, "mode", 0777);
    if (mode < 0 || mode > 07777) {
        agent_send_fs_err(id, EINVAL, "bad mode");
        return;
    }
    struct stat st;
    bool existed = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    int r = get_bool(q, "parents", false) ? mkdirs(path, (mode_t)mode)
                                          : mkdir(path, (mode_t)mode);
    if (r < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    struct buf b = {0};
    buf_printf(&b, "{\"created\":%s}", existed ? "false" : "true");
    send_ok(id, &b);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)f;
    return (flag == FTW_DP ? rmdir(p) : unlink(p)) < 0 ? -1 : 0;
}

static void op_remove(uint32_t id, const struct jval *q, const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    int r;
    if (!S_ISDIR(st.st_mode))
        r = unlink(path);
    else if (get_bool(q, "recursive", false))
        r = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
    else
        r = rmdir(path);
    if (r < 0) {
        agent_send_fs_err(id, errno ? errno : EIO, NULL);
        return;
    }
    send_ok(id, &(struct buf){0});
}

static void op_rename(uint32_t id, const struct jval *q, const char *path)
{
    const char *to = get_str(q, "to");
    if (!to) {
        agent_send_fs_err(id, EINVAL, "\"to\" is required");
        return;
    }
    int r = get_bool(q, "overwrite", true)
                ? rename(path, to)
                : renameat2(AT_FDCWD, path, AT_FDCWD, to, RENAME_NOREPLACE);
    if (r < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    send_ok(id, &(struct buf){0});
}

/* ---- watches ----------------------------------------------------------------- */

static struct fs_watch *find_watch(uint32_t id)
{
    for (size_t i = 0; i < nwatches; i++)
        if (watches[i]->id == id)
            return watches[i];
    return NULL;
}

static void free_watch(struct fs_watch *w)
{
    for (size_t i = 0; i < nwatches; i++)
        if (watches[i] == w) {
            watches[i] = watches[--nwatches];
            break;
        }
    close(w->ifd);
    for (size_t i = 0; i < w->ndirs; i++)
        free(w->dirs[i].path);
    for (size_t i = 0; i < w->nq; i++)
        free(w->q[i].path);
    free(w->dirs);
    free(w->q);
    free(w->root);
    free(w);
}

#define WATCH_MASK                                                                       \
    (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |  \
     IN_ONLYDIR)

/* Adds an inotify watch on dir and, when recursive, on its subdirectories. */
static void watch_add(struct fs_watch *w, const char *dir, int level)
{
    if (w->ndirs >= FS_MAX_DIRS) {
        w->dropped++;
        return;
    }
    int wd = inotify_add_watch(w->ifd, dir, WATCH_MASK);
    if (wd < 0)
        return;
    if (w->ndirs == w->dcap) {
        w->dcap = w->dcap ? w->dcap * 2 : 16;
        w->dirs = realloc(w->dirs, w->dcap * sizeof(*w->dirs));
        if (!w->dirs)
            abort();
    }
    w->dirs[w->ndirs++] = (struct fs_dir){wd, xstrndup(dir, strlen(dir))};
    if (!w->recursive || level > 64)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[PATH_MAX];
        int n = snprintf(p, sizeof(p), "%s/%s", strcmp(dir, "/") ? dir : "", de->d_name);
        if (n > 0 && (size_t)n < sizeof(p))
            watch_add(w, p, level + 1);
    }
    closedir(d);
}

static void op_watch(uint32_t id, const struct jval *q, const char *path)
{
    if (find_watch(id)) {
        agent_send_fs_err(id, EBUSY, "watch id in use");
        return;
    }
    if (nwatches >= FS_MAX_WATCHES) {
        agent_send_fs_err(id, EBUSY, "too many watches");
        return;
    }
    struct stat st;
    if (stat(path, &st) < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        agent_send_fs_err(id, ENOTDIR, "only directories can be watched");
        return;
    }
    int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ifd < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    struct fs_watch *w = xcalloc(1, sizeof(*w));
    w->id = id;
    w->ifd = ifd;
    w->recursive = get_bool(q, "recursive", false);
    w->root = xstrndup(path, strlen(path));
    int64_t qm = get_int(q, "queue", 1024);
    w->qmax = qm < 1 ? 1 : qm > FS_QUEUE_MAX ? FS_QUEUE_MAX : (size_t)qm;
    watches[nwatches++] = w;
    watch_add(w, path, 0);
    if (w->ndirs == 0) {
        int e = errno;
        free_watch(w);
        agent_send_fs_err(id, e ? e : EIO, NULL);
        return;
    }
    send_ok(id, &(struct buf){0});
}

/* Our own temporary files (.NAME.sbx-XXXXXX) are not news to anyone. */
static bool is_tmp_name(const char *n)
{
    size_t l = strlen(n);
    return n[0] == '.' && l > 12 && memcmp(n + l - 11, ".sbx-", 5) == 0;
}

static void queue_event(struct fs_watch *w, const char *path, int kind)
{
    for (size_t i = 0; i < w->nq; i++)
        if (w->q[i].kind == kind && !strcmp(w->q[i].path, path))
            return; /* coalesced */
    if (w->nq >= w->qmax) {
        w->dropped++;
        return;
    }
    if (!w->q)
        w->q = xcalloc(w->qmax, sizeof(*w->q));
    w->q[w->nq++] = (struct fs_ev){xstrndup(path, strlen(path)), (uint8_t)kind};
}

static const char *dir_path(struct fs_watch *w, int wd)
{
    for (size_t i = 0; i < w->ndirs; i++)
        if (w->dirs[i].wd == wd)
            return w->dirs[i].path;
    return NULL;
}

static void watch_read(struct fs_watch *w)
{
    _Alignas(struct inotify_event) char ev[16384];
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(w->ifd, ev, sizeof(ev));
        if (n <= 0)
            return;
        for (char *p = ev; p < ev + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            p += sizeof(*e) + e->len;
            if (e->mask & IN_Q_OVERFLOW) {
                w->dropped++;
                continue;
            }
            const char *dir = dir_path(w, e->wd);
            if (!dir)
                continue;
            if (e->mask & (IN_IGNORED | IN_DELETE_SELF)) {
                if (e->mask & IN_DELETE_SELF && !strcmp(dir, w->root))
                    queue_event(w, dir, 2);
                continue;
            }
            if (!e->len || is_tmp_name(e->name))
                continue;
            char full[PATH_MAX];
            int fl = snprintf(full, sizeof(full), "%s/%s", strcmp(dir, "/") ? dir : "",
                              e->name);
            if (fl < 0 || (size_t)fl >= sizeof(full))
                continue;
            int kind = e->mask & (IN_CREATE | IN_MOVED_TO) ? 0
                       : e->mask & IN_MODIFY               ? 1
                       : e->mask & IN_DELETE               ? 2
                                                           : 3;
            queue_event(w, full, kind);
            if (w->recursive && e->mask & IN_ISDIR && e->mask & (IN_CREATE | IN_MOVED_TO))
                watch_add(w, full, 1);
        }
    }
}

static void watch_flush(struct fs_watch *w, int64_t now)
{
    if ((w->nq == 0 && w->dropped == 0) || now < w->next_ms)
        return;
    struct buf b = {0};
    size_t i = 0;
    buf_puts(&b, "{\"events\":[");
    for (; i < w->nq && b.len < (512u << 10); i++) {
        buf_puts(&b, i ? ",{\"path\":" : "{\"path\":");
        json_put_str(&b, w->q[i].path, strlen(w->q[i].path));
        buf_printf(&b, ",\"kind\":\"%s\"}", kinds[w->q[i].kind]);
        free(w->q[i].path);
    }
    buf_printf(&b, "],\"dropped\":%llu}", (unsigned long long)w->dropped);
    memmove(w->q, w->q + i, (w->nq - i) * sizeof(*w->q));
    w->nq -= i;
    w->dropped = 0;
    w->next_ms = now + FS_FLUSH_MS;
    agent_send_buf(SBX_CHAN_FS_EVENT, w->id, &b);
}

/* ---- the channel's side ---------------------------------------------------------- */

static void on_req(uint32_t id, const uint8_t *payload, size_t n)
{
    char err[128];
    struct jval *q = json_parse((const char *)payload, n, err, sizeof(err));
    const char *op = q && q->type == J_OBJ ? get_str(q, "op") : NULL;
    if (!op) {
        agent_send_fs_err(id, EINVAL, q ? "\"op\" is required" : err);
        json_free(q);
        return;
    }
    if (fs_tar_req(id, op, q)) {
        json_free(q);
        return;
    }
    struct fs_req *r = find_req(id);
    if (!strcmp(op, "flush") || !strcmp(op, "commit")) {
        if (!r || r->kind != FSK_WRITE)
            agent_send_fs_err(id, EBADF, "no open write with this id");
        else
            op_flush(r, op[0] == 'c');
        json_free(q);
        return;
    }
    const char *path = get_str(q, "path");
    if (!path || path[0] != '/') {
        agent_send_fs_err(id, EINVAL, "\"path\" must be an absolute path");
        json_free(q);
        return;
    }
    if ((!strcmp(op, "read") || !strcmp(op, "open")) && nreqs >= FS_MAX_REQS) {
        agent_send_fs_err(id, EBUSY, "too many file requests at once");
    } else if (r && (!strcmp(op, "read") || !strcmp(op, "open"))) {
        agent_send_fs_err(id, EBUSY, "request id in use");
    } else if (!strcmp(op, "stat")) {
        op_stat(id, q, path);
    } else if (!strcmp(op, "list")) {
        op_list(id, q, path);
    } else if (!strcmp(op, "read")) {
        op_read(id, q, path);
    } else if (!strcmp(op, "open")) {
        op_open(id, q, path);
    } else if (!strcmp(op, "mkdir")) {
        op_mkdir(id, q, path);
    } else if (!strcmp(op, "remove")) {
        op_remove(id, q, path);
    } else if (!strcmp(op, "rename")) {
        op_rename(id, q, path);
    } else if (!strcmp(op, "watch")) {
        op_watch(id, q, path);
    } else {
        agent_send_fs_err(id, EINVAL, "unknown op");
    }
    json_free(q);
}

void fs_frame(uint8_t type, uint32_t id, const uint8_t *payload, size_t n)
{
    struct fs_req *r = find_req(id);
    switch (type) {
    case SBX_CHAN_FS_REQ:
        on_req(id, payload, n);
        return;
    case SBX_CHAN_FS_DATA:
        if (fs_tar_data(id, payload, n))
            return;
        if (r && r->kind == FSK_WRITE)
            write_data(r, payload, n);
        /* else a write that failed or was cancelled: its bytes go nowhere */
        return;
    case SBX_CHAN_FS_CANCEL: {
        fs_tar_cancel(id);
        if (r)
            free_req(r);
        struct fs_watch *w = find_watch(id);
        if (w)
            free_watch(w);
        return;
    }
    }
}

bool fs_has_output(void)
{
    if (fs_tar_has_output())
        return true;
    for (size_t i = 0; i < nreqs; i++)
        if (reqs[i]->kind == FSK_READ)
            return true;
    return false;
}

void fs_pump(void)
{
    static uint8_t chunk[SBX_CHAN_FS_FRAME];
    fs_tar_pump();
    for (size_t i = 0; i < nreqs && agent_out_room();) {
        struct fs_req *r = reqs[i];
        if (r->kind != FSK_READ) {
            i++;
            continue;
        }
        ssize_t n = 0;
        if (r->left > 0) {
            size_t want = r->left < sizeof(chunk) ? (size_t)r->left : sizeof(chunk);
            n = pread(r->fd, chunk, want, (off_t)r->off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0) {
                uint32_t id = r->id;
                int e = errno;
                free_req(r);
                agent_send_fs_err(id, e, NULL);
                continue;
            }
            if (n > 0) {
                agent_send(SBX_CHAN_FS_DATA, r->id, chunk, (size_t)n);
                r->off += (uint64_t)n;
                r->left -= (uint64_t)n;
                r->sent += (uint64_t)n;
            }
        }
        if (r->left == 0 || n == 0) {
            struct buf b = {0};
            buf_printf(&b, "{\"size\":%llu,\"n\":%llu,\"eof\":%s,\"mtime_ms\":%lld}",
                       (unsigned long long)r->size, (unsigned long long)r->sent,
                       n == 0 || r->off >= r->size ? "true" : "false",
                       (long long)r->mtime_ms);
            uint32_t id = r->id;
            free_req(r);
            send_ok(id, &b);
        }
    }
}

int fs_poll_fds(int *fds, uint32_t *ids, int max)
{
    int n = 0;
    for (size_t i = 0; i < nwatches && n < max; i++) {
        ids[n] = watches[i]->id;
        fds[n++] = watches[i]->ifd;
    }
    return n;
}

void fs_ready(uint32_t id)
{
    struct fs_watch *w = find_watch(id);
    if (w)
        watch_read(w);
}

int fs_timers(int64_t now)
{
    int64_t next = -1;
    fs_tar_timers(now);
    for (size_t i = 0; i < nreqs;) {
        struct fs_req *r = reqs[i];
        if (r->kind == FSK_WRITE && now - r->last_ms > FS_WRITE_IDLE_MS) {
            free_req(r); /* the daemon forgot it: nobody will commit */
            continue;
        }
        i++;
    }
    for (size_t i = 0; i < nwatches && agent_out_room(); i++) {
        struct fs_watch *w = watches[i];
        watch_flush(w, now);
        if (w->nq || w->dropped) {
            int64_t t = w->next_ms > now ? w->next_ms : now;
            if (next < 0 || t < next)
                next = t;
        }
    }
    if (nreqs && (next < 0 || now + 60000 < next))
        next = now + 60000;
    return next < 0 ? -1 : (int)(next - now);
}

void fs_reset(void)
{
    fs_tar_reset();
    while (nreqs)
        free_req(reqs[0]);
    while (nwatches)
        free_watch(watches[0]);
}
