/*
 * adoption.c - the restart window (adoption.h): which providers are still
 * listing, how many adopted sandboxes still wait for their processes, and
 * the calls that wait for both. A handful of providers and waiters: lists.
 */
#include "core/adoption.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "log.h"
#include "core/sandbox_obj.h"
#include "xalloc.h"

struct adopt_waiter {
    struct adopt_waiter *next;
    adoption_cb cb;
    void *privdata;
};

static const char *listing[MAX_PROVIDERS]; /* providers still listing */
static int nlisting, nsandboxes, over;
static struct adopt_waiter *waiters, **wtail = &waiters;
static ev_timer timer;

int adoption_pending(void)
{
    return !over && (nlisting > 0 || nsandboxes > 0);
}

/* The window closed: every waiter runs, oldest first. New waiters added by a
 * callback find the window closed and run at once. */
static void close_window(void)
{
    over = 1;
    ev_timer_stop(D->loop, &timer);
    while (waiters) {
        struct adopt_waiter *w = waiters;
        waiters = w->next;
        if (!waiters)
            wtail = &waiters;
        w->cb(w->privdata);
        free(w);
    }
}

static void maybe_close(void)
{
    if (!over && nlisting == 0 && nsandboxes == 0 && ev_is_active(&timer)) {
        log_info("adoption after the restart finished");
        close_window();
    }
}

static void timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    log_warn("adoption not finished after %lld ms (limits.adopt_wait_ms): %d provider(s) "
             "still listing, %d sandbox(es) still reconnecting; calls are served now",
             (long long)D->cfg.adopt_wait_ms, nlisting, nsandboxes);
    close_window();
}

void adoption_begin(const char *name)
{
    if (over || D->cfg.adopt_wait_ms <= 0 || nlisting >= MAX_PROVIDERS)
        return;
    if (!ev_is_active(&timer)) {
        ev_timer_init(&timer, timeout_cb, (double)D->cfg.adopt_wait_ms / 1000.0, 0.);
        ev_timer_start(D->loop, &timer);
    }
    listing[nlisting++] = name;
}

void sandbox_adoption_done(const char *name)
{
    for (int i = 0; i < nlisting; i++)
        if (strcmp(listing[i], name) == 0) {
            listing[i] = listing[--nlisting];
            maybe_close();
            return;
        }
}

void adoption_sandbox_begin(struct sandbox *sb)
{
    if (adoption_pending() && !sb->adopting) {
        sb->adopting = 1;
        nsandboxes++;
    }
}

void adoption_sandbox_end(struct sandbox *sb)
{
    if (!sb->adopting)
        return;
    sb->adopting = 0;
    nsandboxes--;
    maybe_close();
}

void sandbox_adopted(struct sandbox *sb)
{
    adoption_sandbox_end(sb);
}

void adoption_wait(adoption_cb cb, void *privdata)
{
    if (!adoption_pending()) {
        cb(privdata);
        return;
    }
    struct adopt_waiter *w = xcalloc(1, sizeof(*w));
    w->cb = cb;
    w->privdata = privdata;
    *wtail = w;
    wtail = &w->next;
}

void adoption_free_all(void)
{
    close_window();
}
