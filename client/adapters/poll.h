/*
 * adapters/poll.h - drive an sbx_async with poll(2), no event library needed
 * (header-only; meant for tests and small tools).
 *
 *   sbx_async *ac = sbx_async_connect_unix(path);
 *   sbx_poll_attach(ac);
 *   while (!done && sbx_poll_tick(ac, 100) >= 0)
 *       ;
 *
 * sbx_poll_tick returns -1 once ac has been freed (or was never attached):
 * stop using ac then.
 */
#ifndef SBX_ADAPTERS_POLL_H
#define SBX_ADAPTERS_POLL_H

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#include <sbx/sbx_async.h>

#ifndef CLOCK_MONOTONIC
#error                                                                                   \
    "adapters/poll.h needs POSIX clocks: compile with -D_POSIX_C_SOURCE=200809L (or _GNU_SOURCE)"
#endif

typedef struct sbx_poll_events {
    sbx_async *ac;
    int reading, writing;
    int in_tick, deleted;
    int timer_armed;
    long long deadline_ms;
} sbx_poll_events;

static long long sbx_poll_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sbx_poll_add_read(void *privdata)
{
    ((sbx_poll_events *)privdata)->reading = 1;
}

static void sbx_poll_del_read(void *privdata)
{
    ((sbx_poll_events *)privdata)->reading = 0;
}

static void sbx_poll_add_write(void *privdata)
{
    ((sbx_poll_events *)privdata)->writing = 1;
}

static void sbx_poll_del_write(void *privdata)
{
    ((sbx_poll_events *)privdata)->writing = 0;
}

static void sbx_poll_schedule_timer(void *privdata, int timeout_ms)
{
    sbx_poll_events *e = (sbx_poll_events *)privdata;
    e->timer_armed = 1;
    e->deadline_ms = sbx_poll_now_ms() + timeout_ms;
}

static void sbx_poll_cleanup(void *privdata)
{
    sbx_poll_events *e = (sbx_poll_events *)privdata;
    /* Inside a tick the tick still needs e; it frees it on the way out. */
    if (e->in_tick)
        e->deleted = 1;
    else
        free(e);
}

/** Attaches ac. Returns SBX_ERR if already attached, not connected, or OOM. */
static inline int sbx_poll_attach(sbx_async *ac)
{
    sbx_async_ev hooks;
    sbx_poll_events *e;

    if (ac->ev.data != NULL || ac->c.fd < 0)
        return SBX_ERR;
    e = (sbx_poll_events *)calloc(1, sizeof(*e));
    if (e == NULL)
        return SBX_ERR;
    e->ac = ac;
    hooks.data = e;
    hooks.add_read = sbx_poll_add_read;
    hooks.del_read = sbx_poll_del_read;
    hooks.add_write = sbx_poll_add_write;
    hooks.del_write = sbx_poll_del_write;
    hooks.cleanup = sbx_poll_cleanup;
    hooks.schedule_timer = sbx_poll_schedule_timer;
    if (sbx_async_attach(ac, &hooks) != SBX_OK) {
        free(e);
        return SBX_ERR;
    }
    return SBX_OK;
}

/**
 * Waits up to timeout_ms (< 0: forever, or until the timer) for one round of
 * events and handles it. Returns the number of events handled (0 on a quiet
 * timeout) or -1 when ac is gone.
 */
static inline int sbx_poll_tick(sbx_async *ac, int timeout_ms)
{
    sbx_poll_events *e = (sbx_poll_events *)ac->ev.data;
    struct pollfd pfd;
    int n, handled = 0;

    if (e == NULL || ac->ev.cleanup != sbx_poll_cleanup)
        return -1;
    if (e->timer_armed) {
        long long left = e->deadline_ms - sbx_poll_now_ms();
        if (left < 0)
            left = 0;
        if (timeout_ms < 0 || left < timeout_ms)
            timeout_ms = (int)left;
    }
    pfd.fd = ac->c.fd;
    pfd.events = (short)((e->reading ? POLLIN : 0) | (e->writing ? POLLOUT : 0));
    pfd.revents = 0;
    n = poll(&pfd, 1, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : -1;

    e->in_tick = 1;
    if (e->reading && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
        sbx_async_handle_read(ac);
        handled++;
    }
    if (!e->deleted && e->writing && (pfd.revents & (POLLOUT | POLLHUP | POLLERR))) {
        sbx_async_handle_write(ac);
        handled++;
    }
    if (!e->deleted && e->timer_armed && sbx_poll_now_ms() >= e->deadline_ms) {
        e->timer_armed = 0;
        sbx_async_handle_timeout(ac);
        handled++;
    }
    if (e->deleted) {
        free(e);
        return -1;
    }
    e->in_tick = 0;
    return handled;
}

#endif
