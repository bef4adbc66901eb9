/*
 * tty.c - exec, run and attach on a terminal (--tty): the local terminal in
 * raw mode, its window size sent at the start and on every SIGWINCH
 * (process.resize), and docker's detach keys, Ctrl-P Ctrl-Q.
 *
 * In raw mode the local line discipline does nothing: Ctrl-C, Ctrl-Z and
 * Ctrl-D are bytes for the remote terminal, whose own line discipline turns
 * them into signals for its foreground job. So exec.c's signal handling
 * only sees SIGTERM/SIGHUP, and the detach keys are the way out.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <ev.h>

#include "sbxctl.h"

#define KEY_CTRL_P 0x10
#define KEY_CTRL_Q 0x11

struct ctl_tty {
    struct ev_loop *loop;
    sbx_async **acp;
    char *sandbox;
    json_int_t pid;
    int raw;     /* the local terminal is in raw mode (saved holds the old one) */
    int held_p;  /* a Ctrl-P was held back: it may start the detach keys */
    int started; /* ctl_tty_start ran: resizes go out */
    ev_signal winch;
    struct termios saved;
};

/* The one terminal a process has: restored at exit even if sbxctl dies early. */
static struct ctl_tty *active;

static void restore_at_exit(void)
{
    if (active)
        ctl_tty_restore(active);
}

/* The local window size, 80x24 when stdout and stdin are no terminal. */
static void local_size(unsigned *cols, unsigned *rows)
{
    struct winsize ws;
    *cols = 80;
    *rows = 24;
    if ((ioctl(1, TIOCGWINSZ, &ws) == 0 || ioctl(0, TIOCGWINSZ, &ws) == 0) &&
        ws.ws_col > 0 && ws.ws_row > 0) {
        *cols = ws.ws_col;
        *rows = ws.ws_row;
    }
}

struct ctl_tty *ctl_tty_new(struct ev_loop *loop, int make_raw)
{
    struct ctl_tty *t = ctl_nonnull(calloc(1, sizeof(*t)));
    t->loop = loop;
    t->pid = -1;
    if (make_raw && isatty(0) && tcgetattr(0, &t->saved) == 0) {
        struct termios raw = t->saved;
        cfmakeraw(&raw);
        /* Output post-processing stays off too: the remote terminal already
         * turned \n into \r\n. */
        if (tcsetattr(0, TCSADRAIN, &raw) == 0) {
            t->raw = 1;
            active = t;
            static int registered;
            if (!registered++)
                atexit(restore_at_exit);
        }
    }
    return t;
}

json_t *ctl_tty_pty_params(void)
{
    unsigned cols, rows;
    local_size(&cols, &rows);
    return sbx_pty_params(cols, rows);
}

static void resize_reply(sbx_async *ac, json_t *result, const sbx_rpc_error *err,
                         void *privdata)
{
    (void)ac;
    (void)result;
    (void)err; /* the process ended meanwhile: its exit ends the job */
    (void)privdata;
}

static void send_size(struct ctl_tty *t)
{
    sbx_async *ac = t->acp ? *t->acp : NULL;
    if (!ac || !t->started)
        return;
    unsigned cols, rows;
    local_size(&cols, &rows);
    sbx_async_call_new(ac, SBX_M_RESIZE,
                       json_pack("{s:s, s:I, s:i, s:i}", "sandbox", t->sandbox, "pid",
                                 t->pid, "cols", (int)cols, "rows", (int)rows),
                       resize_reply, NULL);
}

static void winch_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)loop;
    (void)revents;
    send_size(w->data);
}

void ctl_tty_start(struct ctl_tty *t, sbx_async **acp, const char *sandbox,
                   json_int_t pid, int send_now)
{
    t->acp = acp;
    free(t->sandbox);
    t->sandbox = ctl_nonnull(strdup(sandbox));
    t->pid = pid;
    t->started = 1;
    ev_signal_init(&t->winch, winch_cb, SIGWINCH);
    t->winch.data = t;
    ev_signal_start(t->loop, &t->winch);
    /* An attach: the program redraws for a size change, and the size may
     * differ from the terminal that started it. */
    if (send_now)
        send_size(t);
}

size_t ctl_tty_filter(struct ctl_tty *t, const char *in, size_t n, char *out, int *detach)
{
    size_t k = 0;
    *detach = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (t->held_p) {
            t->held_p = 0;
            if (ch == KEY_CTRL_Q) {
                *detach = 1;
                return k;
            }
            out[k++] = KEY_CTRL_P;
        }
        if (ch == KEY_CTRL_P)
            t->held_p = 1;
        else
            out[k++] = (char)ch;
    }
    return k;
}

void ctl_tty_restore(struct ctl_tty *t)
{
    if (!t || !t->raw)
        return;
    tcsetattr(0, TCSADRAIN, &t->saved);
    t->raw = 0;
}

void ctl_tty_free(struct ctl_tty *t)
{
    if (!t)
        return;
    ctl_tty_restore(t);
    if (t->started)
        ev_signal_stop(t->loop, &t->winch);
    if (active == t)
        active = NULL;
    free(t->sandbox);
    free(t);
}
