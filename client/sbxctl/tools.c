/*
 * tools.c - `--tool NAME=COMMAND` on exec and run: sbxctl itself answers the
 * program's `external_NAME(args)` calls by running COMMAND with /bin/sh, the
 * call's args as JSON on its stdin. Exit 0: its stdout is the result (JSON
 * when it parses as JSON, else the text as a string, one trailing newline
 * dropped). Any other exit: a tool error whose message is its stderr.
 *
 * Several calls may be in flight (Promise.all): each runs as its own child,
 * watched by the job's libev loop, so the stream of output goes on meanwhile.
 * What a command prints is bounded (TOOL_OUT_MAX); past it the call fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sbxctl.h"

#include "../adapters/libev.h"

#define TOOL_OUT_MAX (16u << 20)
#define TOOL_ERR_KEEP 2048

extern char **environ;

struct tool {
    char *name;
    char *command;
};

struct tcall {
    struct ctl_tools *t;
    struct tcall *next;
    char *call_id;
    pid_t pid;
    int status; /* -1 until reaped */
    ev_child cw;
    ev_io in_w, out_w, err_w;
    char *in; /* the args JSON */
    size_t in_len, in_off;
    char *out;
    size_t out_len, out_cap;
    int too_big;
    char err[TOOL_ERR_KEEP + 1];
    size_t err_len;
};

struct ctl_tools {
    struct tool *v;
    size_t n;
    struct ev_loop *loop;
    sbx_async **acp; /* the job's connection, NULL once it is gone */
    struct tcall *calls;
};

struct ctl_tools *ctl_tools_new(void)
{
    return ctl_nonnull(calloc(1, sizeof(struct ctl_tools)));
}

const char *ctl_tools_add(struct ctl_tools *t, const char *spec)
{
    const char *eq = strchr(spec, '=');
    if (!eq)
        return spec; /* a name only: registered, answered by nobody here */
    if (eq == spec || !eq[1])
        usage_error("--tool wants NAME or NAME=COMMAND, not '%s'", spec);
    struct tool *v = ctl_nonnull(realloc(t->v, (t->n + 1) * sizeof(*v)));
    t->v = v;
    v[t->n].name = ctl_nonnull(strndup(spec, (size_t)(eq - spec)));
    v[t->n].command = ctl_nonnull(strdup(eq + 1));
    return v[t->n++].name;
}

static const char *command_of(struct ctl_tools *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0)
            return t->v[i].command;
    return NULL;
}

static void reply(struct ctl_tools *t, const char *call_id, json_t *result,
                  const char *err)
{
    sbx_async *ac = t->acp ? *t->acp : NULL;
    if (ac)
        sbx_async_tool_reply(ac, call_id, result, err ? SBX_E_TOOL : 0, err);
}

static void call_free(struct tcall *c)
{
    struct ctl_tools *t = c->t;
    for (struct tcall **pp = &t->calls; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    ev_child_stop(t->loop, &c->cw);
    int fds[3] = {c->in_w.fd, c->out_w.fd, c->err_w.fd};
    ev_io_stop(t->loop, &c->in_w);
    ev_io_stop(t->loop, &c->out_w);
    ev_io_stop(t->loop, &c->err_w);
    for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(c->call_id);
    free(c->in);
    free(c->out);
    free(c);
}

/* Answers once the child is reaped and both of its outputs are at EOF. */
static void maybe_done(struct tcall *c)
{
    if (c->status < 0 || c->out_w.fd >= 0 || c->err_w.fd >= 0)
        return;
    struct ctl_tools *t = c->t;
    if (c->too_big) {
        reply(t, c->call_id, NULL, "the tool command printed more than 16 MiB");
    } else if (WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0) {
        json_t *r = json_loadb(c->out ? c->out : "", c->out_len, JSON_DECODE_ANY, NULL);
        if (!r) {
            size_t n = c->out_len;
            if (n && c->out[n - 1] == '\n')
                n--;
            r = json_stringn(c->out ? c->out : "", n);
            if (!r) /* not UTF-8 */
                r = json_string("");
        }
        reply(t, c->call_id, r, NULL);
        json_decref(r);
    } else {
        char msg[TOOL_ERR_KEEP + 64];
        while (c->err_len && (c->err[c->err_len - 1] == '\n'))
            c->err_len--;
        c->err[c->err_len] = '\0';
        if (c->err_len)
            snprintf(msg, sizeof(msg), "%s", c->err);
        else if (WIFEXITED(c->status))
            snprintf(msg, sizeof(msg), "the tool command exited %d",
                     WEXITSTATUS(c->status));
        else
            snprintf(msg, sizeof(msg), "the tool command was killed by signal %d",
                     WTERMSIG(c->status));
        reply(t, c->call_id, NULL, msg);
    }
    call_free(c);
}

static void close_w(struct tcall *c, ev_io *w)
{
    ev_io_stop(c->t->loop, w);
    close(w->fd);
    w->fd = -1;
}

static void in_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcall *c = w->data;
    while (c->in_off < c->in_len) {
        ssize_t n = write(w->fd, c->in + c->in_off, c->in_len - c->in_off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0)
            break; /* the command does not read its stdin: fine */
        c->in_off += (size_t)n;
    }
    close_w(c, w);
}

/* Reads what w's pipe holds: the byte count, or 0 when nothing came now or
 * the pipe ended (then it is closed and c may be gone: touch it no more). */
static ssize_t read_pipe(struct tcall *c, ev_io *w, char *buf, size_t size)
{
    ssize_t n = read(w->fd, buf, size);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (n <= 0) {
        close_w(c, w);
        maybe_done(c);
        return 0;
    }
    return n;
}

static void out_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcall *c = w->data;
    char buf[65536];
    ssize_t n = read_pipe(c, w, buf, sizeof(buf));
    if (n == 0)
        return;
    if (c->out_len + (size_t)n > TOOL_OUT_MAX) {
        c->too_big = 1;
        return; /* keep draining so the command is not blocked */
    }
    if (c->out_len + (size_t)n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap * 2 : 65536;
        while (cap < c->out_len + (size_t)n)
            cap *= 2;
        c->out = ctl_nonnull(realloc(c->out, cap));
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, buf, (size_t)n);
    c->out_len += (size_t)n;
}

static void err_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct tcall *c = w->data;
    char buf[4096];
    ssize_t n = read_pipe(c, w, buf, sizeof(buf));
    if (n == 0)
        return;
    size_t room = TOOL_ERR_KEEP - c->err_len;
    size_t k = (size_t)n < room ? (size_t)n : room;
    memcpy(c->err + c->err_len, buf, k);
    c->err_len += k;
}

static void child_cb(struct ev_loop *loop, ev_child *w, int revents)
{
    struct tcall *c = w->data;
    ev_child_stop(loop, w);
    c->status = w->rstatus;
    maybe_done(c);
}

static int start(struct tcall *c, const char *command)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    int rc = -1;
    if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
        pipe2(err, O_CLOEXEC) < 0)
        goto out;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    char sh[] = "sh", dash_c[] = "-c";
    char *argv[] = {sh, dash_c, (char *)command, NULL};
    rc = posix_spawn(&c->pid, "/bin/sh", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        rc = -1;
        goto out;
    }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    struct ev_loop *loop = c->t->loop;
    ev_child_init(&c->cw, child_cb, c->pid, 0);
    ev_io_init(&c->in_w, in_cb, in[1], EV_WRITE);
    ev_io_init(&c->out_w, out_cb, out[0], EV_READ);
    ev_io_init(&c->err_w, err_cb, err[0], EV_READ);
    c->cw.data = c->in_w.data = c->out_w.data = c->err_w.data = c;
    ev_child_start(loop, &c->cw);
    ev_io_start(loop, &c->in_w);
    ev_io_start(loop, &c->out_w);
    ev_io_start(loop, &c->err_w);
    in[1] = out[0] = err[0] = -1; /* owned by the watchers now */
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0)
            close(in[i]);
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    return rc;
}

static void tool_cb(sbx_async *ac, const char *call_id, const char *tool, json_t *args,
                    json_t *params, void *privdata)
{
    struct ctl_tools *t = privdata;
    const char *command = command_of(t, tool);
    if (!command) {
        char msg[300];
        snprintf(msg, sizeof(msg),
                 "sbxctl has no command for tool %.200s (--tool %.40s=COMMAND)", tool,
                 tool);
        sbx_async_tool_reply(ac, call_id, NULL, SBX_E_TOOL, msg);
        return;
    }
    struct tcall *c = ctl_nonnull(calloc(1, sizeof(*c)));
    c->t = t;
    c->status = -1;
    c->in_w.fd = c->out_w.fd = c->err_w.fd = -1;
    c->call_id = ctl_nonnull(strdup(call_id));
    c->in = ctl_nonnull(
        json_dumps(args ? args : json_null(), JSON_COMPACT | JSON_ENCODE_ANY));
    c->in_len = strlen(c->in);
    if (start(c, command) < 0) {
        sbx_async_tool_reply(ac, call_id, NULL, SBX_E_TOOL,
                             "cannot start /bin/sh for the tool");
        free(c->call_id);
        free(c->in);
        free(c);
        return;
    }
    c->next = t->calls;
    t->calls = c;
}

void ctl_tools_attach(struct ctl_tools *t, struct ev_loop *loop, sbx_async **acp)
{
    t->loop = loop;
    t->acp = acp;
    sbx_async_set_tool_cb(*acp, tool_cb, t);
}

void ctl_tools_free(struct ctl_tools *t)
{
    if (!t)
        return;
    while (t->calls) {
        struct tcall *c = t->calls;
        if (c->status < 0 && c->pid > 0) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, NULL, 0);
        }
        call_free(c);
    }
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].name);
        free(t->v[i].command);
    }
    free(t->v);
    free(t);
}
