/*
 * fs_tar.c - sbx-init's tar requests (proto/CHANNEL.md "Files", tar_get,
 * tar_more, tar_put): fs.read/fs.write with `format: "tar"`, the archives
 * made and extracted by tar.c in this process, as the agent's uid/gid (the
 * command user's), with the container's paths.
 *
 * A get is a request that lives across calls: each tar_get/tar_more asks
 * for `length` bytes (the daemon's credit), which fs_tar_pump() produces
 * while the output queue has room, then answers {n, eof}. A put is fed its
 * FS_DATA frames as they come, like an open write, and answers flush and
 * commit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "tar.h"

#define TAR_REQS_MAX 16              /* gets and puts at once */
#define TAR_IDLE_MS (10 * 60 * 1000) /* forgotten by the daemon: dropped */

struct tar_req {
    uint32_t id;
    struct tar_out *out; /* a get */
    struct tar_in *in;   /* a put */
    uint64_t left;       /* a get's credit: bytes still to send in this call */
    uint64_t sent, total;
    int asked; /* a get: a call is being answered */
    int64_t last_ms;
};

static struct tar_req *treqs[TAR_REQS_MAX];
static size_t ntreqs;

static struct tar_req *find(uint32_t id)
{
    for (size_t i = 0; i < ntreqs; i++)
        if (treqs[i]->id == id)
            return treqs[i];
    return NULL;
}

static void drop(struct tar_req *r)
{
    for (size_t i = 0; i < ntreqs; i++)
        if (treqs[i] == r) {
            treqs[i] = treqs[--ntreqs];
            break;
        }
    tar_out_free(r->out);
    tar_in_free(r->in);
    free(r);
}

static int64_t credit(const struct jval *q)
{
    const struct jval *v = json_get(q, "length");
    if (!v || v->type != J_NUM || !v->is_int || v->ival <= 0 ||
        v->ival > (int64_t)SBX_CHAN_FS_READ_MAX)
        return -1;
    return v->ival;
}

static const char *str_of(const struct jval *q, const char *key)
{
    const struct jval *v = json_get(q, key);
    if (!v || v->type != J_STR || strlen(v->str) != v->len || v->len == 0)
        return NULL;
    return v->str;
}

static struct tar_req *add(uint32_t id)
{
    struct tar_req *r = xcalloc(1, sizeof(*r));
    r->id = id;
    r->last_ms = now_ms();
    treqs[ntreqs++] = r;
    return r;
}

/* tar_get {path, follow, name?, length}: the archive of path, its top entry
 * named name (default the base name). */
static void op_get(uint32_t id, const struct jval *q, const char *path)
{
    int64_t len = credit(q);
    if (len < 0) {
        agent_send_fs_err(id, EINVAL, "bad length");
        return;
    }
    const struct jval *f = json_get(q, "follow");
    const char *name = str_of(q, "name");
    if (!name) {
        name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        if (!*name)
            name = ".";
    }
    if (strchr(name, '/') && strcmp(name, ".")) {
        agent_send_fs_err(id, EINVAL, "name must be one path component");
        return;
    }
    struct tar_out *out = tar_out_new(path, name, f && f->type == J_TRUE);
    if (!out) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    struct tar_req *r = add(id);
    r->out = out;
    r->left = (uint64_t)len;
    r->asked = 1;
}

/* tar_put {path}: path is an existing directory; the archive is extracted
 * into it as FS_DATA comes. */
static void op_put(uint32_t id, const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        agent_send_fs_err(id, errno, NULL);
        return;
    }
    struct tar_in *in = tar_in_new(fd, NULL);
    if (!in) {
        close(fd);
        agent_send_fs_err(id, ENOMEM, NULL);
        return;
    }
    add(id)->in = in;
    struct buf b = {0};
    buf_puts(&b, "{}");
    agent_send_buf(SBX_CHAN_FS_RESULT, id, &b);
}

static void answer_put(struct tar_req *r, int commit)
{
    uint32_t id = r->id;
    if (commit && tar_in_finish(r->in) == 0) {
        struct buf b = {0};
        buf_printf(&b, "{\"size\":%llu,\"entries\":%llu,\"skipped\":%llu}",
                   (unsigned long long)r->total,
                   (unsigned long long)tar_in_entries(r->in),
                   (unsigned long long)tar_in_skipped(r->in));
        drop(r);
        agent_send_buf(SBX_CHAN_FS_RESULT, id, &b);
        return;
    }
    if (tar_in_errno(r->in)) {
        int e = tar_in_errno(r->in);
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", tar_in_message(r->in));
        drop(r);
        agent_send_fs_err(id, e, msg);
        return;
    }
    struct buf b = {0};
    buf_printf(&b, "{\"size\":%llu}", (unsigned long long)r->total);
    agent_send_buf(SBX_CHAN_FS_RESULT, id, &b);
}

bool fs_tar_req(uint32_t id, const char *op, const struct jval *q)
{
    struct tar_req *r = find(id);
    bool get = !strcmp(op, "tar_get"), put = !strcmp(op, "tar_put");
    if (r && r->in && (!strcmp(op, "flush") || !strcmp(op, "commit"))) {
        r->last_ms = now_ms();
        answer_put(r, op[0] == 'c');
        return true;
    }
    if (!strcmp(op, "tar_more")) {
        int64_t len = credit(q);
        if (!r || !r->out || r->asked)
            agent_send_fs_err(id, EBADF, "no archive being read with this id");
        else if (len < 0)
            agent_send_fs_err(id, EINVAL, "bad length");
        else {
            r->left = (uint64_t)len;
            r->sent = 0;
            r->asked = 1;
            r->last_ms = now_ms();
        }
        return true;
    }
    if (!get && !put)
        return false;
    const char *path = str_of(q, "path");
    if (!path || path[0] != '/')
        agent_send_fs_err(id, EINVAL, "\"path\" must be an absolute path");
    else if (r)
        agent_send_fs_err(id, EBUSY, "request id in use");
    else if (ntreqs >= TAR_REQS_MAX)
        agent_send_fs_err(id, EBUSY, "too many archives at once");
    else if (get)
        op_get(id, q, path);
    else
        op_put(id, path);
    return true;
}

bool fs_tar_data(uint32_t id, const uint8_t *payload, size_t n)
{
    struct tar_req *r = find(id);
    if (!r || !r->in)
        return false;
    r->last_ms = now_ms();
    r->total += n;
    /* A refusal is kept and answered at the next flush or commit; the
     * bytes after it go nowhere. */
    tar_in_feed(r->in, payload, n);
    return true;
}

bool fs_tar_cancel(uint32_t id)
{
    struct tar_req *r = find(id);
    if (!r)
        return false;
    drop(r);
    return true;
}

bool fs_tar_has_output(void)
{
    for (size_t i = 0; i < ntreqs; i++)
        if (treqs[i]->out && treqs[i]->asked)
            return true;
    return false;
}

void fs_tar_pump(void)
{
    static uint8_t chunk[SBX_CHAN_FS_FRAME];
    for (size_t i = 0; i < ntreqs && agent_out_room(); i++) {
        struct tar_req *r = treqs[i];
        if (!r->out || !r->asked)
            continue;
        size_t want = r->left < sizeof(chunk) ? (size_t)r->left : sizeof(chunk);
        long n = want ? tar_out_read(r->out, chunk, want) : 0;
        if (n < 0) {
            uint32_t id = r->id;
            int e = errno;
            char msg[300];
            snprintf(msg, sizeof(msg), "%s", tar_out_message(r->out));
            drop(r);
            agent_send_fs_err(id, e, msg);
            i--;
            continue;
        }
        if (n > 0) {
            agent_send(SBX_CHAN_FS_DATA, r->id, chunk, (size_t)n);
            r->left -= (uint64_t)n;
            r->sent += (uint64_t)n;
        }
        if (r->left > 0 && n > 0)
            continue;
        int eof = n == 0 || (size_t)n < want;
        struct buf b = {0};
        buf_printf(&b, "{\"n\":%llu,\"eof\":%s,\"entries\":%llu}",
                   (unsigned long long)r->sent, eof ? "true" : "false",
                   (unsigned long long)tar_out_entries(r->out));
        uint32_t id = r->id;
        r->asked = 0;
        r->last_ms = now_ms();
        if (eof) {
            drop(r);
            i--;
        }
        agent_send_buf(SBX_CHAN_FS_RESULT, id, &b);
    }
}

void fs_tar_timers(int64_t now)
{
    for (size_t i = 0; i < ntreqs;) {
        if (!treqs[i]->asked && now - treqs[i]->last_ms > TAR_IDLE_MS) {
            drop(treqs[i]);
            continue;
        }
        i++;
    }
}

void fs_tar_reset(void)
{
    while (ntreqs)
        drop(treqs[0]);
}
