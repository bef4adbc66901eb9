/*
 * modal_state.c - the Modal provider's state file: serializing every sandbox
 * this daemon runs (and its snapshots), writing it off the loop on a thread
 * of its own, reading it back at load. It reads the provider's records and
 * calls nothing above modal_util.c; adopting what it read (which needs the
 * lifecycle and the processes) is modal.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "providers/modal/modal_int.h"
#include "sbx_proto.h"
#include "xalloc.h"

/* ---- state file: what survives an sbxd restart -------------------------------------
 *
 * Modal sandboxes outlive sbxd. So that a restarted sbxd lists them again with
 * their env, working dir and lifetime, and re-adopts their running processes,
 * each sandbox this daemon started is kept in a JSON file (mode 0600: env
 * values may be secrets), rewritten whole (write + rename) within a second
 * of a change, at most once a second, and at shutdown. The file is authoritative for
 * sbxd's view (conf, owner, lifetime, exec ids); Modal is authoritative for what still
 * runs: after adoption each sandbox is checked (SandboxGetTaskId) and each
 * process's output is read again from its first batch; what Modal no longer
 * knows is reported as lost, never dropped silently.
 *
 * {"version": 1, "server_url": URL,
 *  "sandboxes": {ID: {owner, conf, runtime_env, created_at, expires_at, stopped,
 *                     modal: {...}, procs: [{pid, exec_id, tag, command,
 *                     started_at, deadline}]}},
 *  "snapshots": {SNAP: {owner, created_at, sandbox, data}}}
 */

#define STATE_VERSION 1
/* Changes are gathered and written at most once per this many seconds (and
 * at shutdown), on the writer thread. */
#define STATE_SAVE_DELAY_S 1.0

static void put_str(json_t *o, const char *k, const char *v)
{
    if (v)
        json_object_set_new(o, k, json_string(v));
}

static const char *get_str(json_t *o, const char *k)
{
    return json_string_value(json_object_get(o, k));
}

static json_t *msb_state(struct msb *ms)
{
    struct sandbox *sb = ms->sb;
    json_t *m = json_object();
    put_str(m, "app_name", ms->app_name);
    put_str(m, "env_name", ms->env_name);
    put_str(m, "app_id", ms->app_id);
    put_str(m, "image_tag", ms->image_tag);
    put_str(m, "image_id", ms->image_id);
    put_str(m, "resume_image", ms->resume_image);
    put_str(m, "sandbox_id", ms->sandbox_id);
    put_str(m, "task_id", ms->task_id);
    put_str(m, "workdir", ms->workdir);
    put_str(m, "secret_id", ms->secret_id);
    json_object_set_new(m, "cpu", json_real(ms->cpu));
    json_object_set_new(m, "memory_mb", json_integer(ms->memory_mb));
    json_object_set_new(m, "timeout_secs", json_integer(ms->timeout_secs));
    json_object_set_new(m, "idle_secs", json_integer(ms->idle_secs));
    if (ms->baked_env)
        json_object_set(m, "baked_env", ms->baked_env);
    json_t *procs = json_array();
    for (struct mproc *x = ms->procs; x; x = x->next) {
        if (x->reported || x->have_exit || !x->p)
            continue;
        struct process *p = x->p;
        double deadline = p->timeout_ms > 0 && p->started_at > 0
                              ? p->started_at + p->timeout_ms / 1000.0
                              : 0;
        /* Without an exec id (ContainerExec not answered yet) it is kept too:
         * after a restart it is reported lost and its tag killed. */
        json_t *pe = json_pack("{s:I, s:s, s:s, s:f, s:f}", "pid", (json_int_t)p->pid,
                               "tag", x->tag, "command", p->display ? p->display : "",
                               "started_at", p->started_at, "deadline", deadline);
        if (x->exec_id)
            json_object_set_new(pe, "exec_id", json_string(x->exec_id));
        if (x->exec_id && x->router)
            json_object_set_new(pe, "router_task", json_string(nz(x->rexec_task)));
        json_array_append_new(procs, pe);
    }
    json_t *conf = json_deep_copy(sb->conf);
    json_t *e = json_pack(
        "{s:I, s:o, s:f, s:f, s:b, s:o, s:o}", "owner", (json_int_t)sb->owner, "conf",
        conf, "created_at", sb->created_at, "expires_at", sb->expires_at, "stopped",
        sb->status == SB_STOPPED || (!ms->sandbox_id && ms->resume_image), "modal", m,
        "procs", procs);
    if (sb->runtime_env)
        json_object_set(e, "runtime_env", sb->runtime_env);
    return e;
}

/* The whole state as compact JSON (malloc'd), serialized on the loop: the
 * writer thread gets a copy and touches nothing else. */
static char *state_serialize(struct mprov *mp)
{
    json_t *sbs = json_object();
    for (struct msb *ms = mp->all; ms; ms = ms->all_next) {
        struct sandbox *sb = ms->sb;
        if (ms->destroyed || sb->status == SB_DESTROYING || sb->status == SB_DESTROYED ||
            (!ms->sandbox_id && !ms->resume_image))
            continue;
        json_object_set_new(sbs, sb->id, msb_state(ms));
    }
    json_t *root =
        json_pack("{s:i, s:s, s:o, s:O}", "version", STATE_VERSION, "server_url",
                  nz(mp->url), "sandboxes", sbs, "snapshots", mp->snaps);
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text)
        x_oom("json_dumps");
    return text;
}

/* On the writer thread: text to path (write + fsync-free rename, as before).
 * Returns 0 or an errno. */
static int state_put(const char *path, const char *text)
{
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    /* Never through a link someone else planted, never into their file. */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    size_t len = strlen(text), off = 0;
    int e = 0;
    while (off < len && !e) {
        ssize_t n = write(fd, text + off, len - off);
        if (n < 0 && errno != EINTR)
            e = errno;
        else if (n > 0)
            off += (size_t)n;
    }
    if (close(fd) < 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) < 0)
        e = errno;
    if (e)
        unlink(tmp);
    return e;
}

/* The writer thread: writes the newest state handed over, until told to quit
 * (and then what is still pending). Only w's fields under w->mu are shared. */
static void *writer_main(void *arg)
{
    struct mprov *mp = arg;
    struct state_writer *w = &mp->writer;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->next && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->next)
            break;
        char *text = w->next;
        w->next = NULL;
        pthread_mutex_unlock(&w->mu);
        int e = state_put(mp->state_path, text);
        free(text);
        pthread_mutex_lock(&w->mu);
        if (e) {
            w->error = e;
            ev_async_send(D->loop, &w->done);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* On the loop: a write failed on the thread. */
static void writer_done_cb(struct ev_loop *loop, ev_async *a, int revents)
{
    struct mprov *mp = a->data;
    pthread_mutex_lock(&mp->writer.mu);
    int e = mp->writer.error;
    mp->writer.error = 0;
    pthread_mutex_unlock(&mp->writer.mu);
    if (e)
        log_warn("modal: cannot write the state file %s: %s; a restarted sbxd will not "
                 "find these sandboxes",
                 mp->state_path, strerror(e));
}

/* A write (about 2 ms on ext4: write + rename) must not block the loop: the
 * loop serializes, the writer thread writes. A newer state replaces one the
 * thread has not taken yet. */
static void state_write(struct mprov *mp)
{
    ev_timer_stop(D->loop, &mp->save_timer);
    mp->dirty = 0;
    if (!mp->state_path)
        return;
    struct state_writer *w = &mp->writer;
    if (!w->started) {
        if (pthread_create(&w->thread, NULL, writer_main, mp) != 0) {
            /* No thread: write here rather than lose the state. */
            char *text = state_serialize(mp);
            int e = state_put(mp->state_path, text);
            free(text);
            if (e)
                log_warn("modal: cannot write the state file %s: %s", mp->state_path,
                         strerror(e));
            return;
        }
        w->started = 1;
    }
    char *text = state_serialize(mp);
    pthread_mutex_lock(&w->mu);
    free(w->next);
    w->next = text;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void save_timer_cb(struct ev_loop *loop, ev_timer *w, int revents);

void modal_state_init(struct mprov *mp)
{
    ev_init(&mp->save_timer, save_timer_cb);
    mp->save_timer.data = mp;
    struct state_writer *w = &mp->writer;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    ev_async_init(&w->done, writer_done_cb);
    w->done.data = mp;
    ev_async_start(D->loop, &w->done);
    ev_unref(D->loop); /* the writer's wakeup alone keeps no loop alive */
}

/* At unload: the last state handed over is written before the thread ends. */
void modal_state_deinit(struct mprov *mp)
{
    struct state_writer *w = &mp->writer;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    ev_ref(D->loop);
    ev_async_stop(D->loop, &w->done);
    free(w->next);
    w->next = NULL;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void modal_state_flush(struct mprov *mp)
{
    if (mp->dirty)
        state_write(mp);
}

static void save_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    state_write(w->data);
}

void modal_state_dirty(struct mprov *mp)
{
    if (!mp->state_path || mp->dirty || D->draining)
        return;
    mp->dirty = 1;
    ev_timer_set(&mp->save_timer, STATE_SAVE_DELAY_S, 0.);
    ev_timer_start(D->loop, &mp->save_timer);
}

/* Reads the state file; a missing file is an empty state. */
void modal_state_read(struct mprov *mp)
{
    mp->snaps = json_object();
    if (!mp->state_path)
        return;
    json_error_t je = {0};
    int fd = open(mp->state_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            log_warn("modal: cannot open the state file %s: %s; starting without it",
                     mp->state_path, strerror(errno));
        return;
    }
    /* It names owners: only a file of ours that nobody else may write counts. */
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 022)) {
        log_warn("modal: state file %s is not a regular file owned by this user and "
                 "writable only by it; ignored",
                 mp->state_path);
        close(fd);
        return;
    }
    json_t *root = json_loadfd(fd, 0, &je);
    close(fd);
    if (!root) {
        log_warn("modal: state file %s is unreadable (%s); starting without it",
                 mp->state_path, je.text);
        return;
    }
    const char *url = get_str(root, "server_url");
    if (json_integer_value(json_object_get(root, "version")) != STATE_VERSION || !url ||
        strcmp(url, nz(mp->url)) != 0) {
        log_warn("modal: state file %s is for another server or version (%s); ignored",
                 mp->state_path, url ? url : "?");
        json_decref(root);
        return;
    }
    json_t *snaps = json_object_get(root, "snapshots");
    if (json_is_object(snaps))
        json_object_update(mp->snaps, snaps);
    json_t *sbs = json_object_get(root, "sandboxes");
    if (json_is_object(sbs) && json_object_size(sbs) > 0)
        mp->saved = json_incref(sbs);
    json_decref(root);
}

/* Where the state file lives: providers.modal.state_file, else
 * $STATE_DIRECTORY (systemd's StateDirectory=sbxd) or the socket's folder,
 * named after the socket so that daemons sharing a folder keep apart. */
char *modal_state_path(json_t *conf)
{
    const char *f = json_string_value(json_object_get(conf, "state_file"));
    if (f)
        return f[0] ? xstrdup(f) : NULL; /* "" turns it off */
    const char *sock = D->cfg.socket_path ? D->cfg.socket_path : "sbxd.sock";
    char *a = xstrdup(sock), *b = xstrdup(sock);
    const char *dir = getenv("STATE_DIRECTORY");
    if (dir && strchr(dir, ':'))
        dir = NULL; /* several directories: use the socket's */
    char *path =
        xasprintf("%s/%s.modal.json", dir && dir[0] ? dir : dirname(a), basename(b));
    free(a);
    free(b);
    return path;
}
