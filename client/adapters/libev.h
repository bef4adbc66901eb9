/*
 * adapters/libev.h - drive an sbx_async from a libev loop (header-only).
 *
 *   struct ev_loop *loop = EV_DEFAULT;
 *   sbx_async *ac = sbx_async_connect_unix(path);
 *   if (ac->c.err) { ...; sbx_async_free(ac); }
 *   sbx_libev_attach(loop, ac);
 *   ev_run(loop, 0);
 *
 * libsbx itself never links libev: everything here is static and compiled
 * into the program that includes it. The adapter state is freed by libsbx
 * (through the cleanup hook) when the context goes away.
 */
#ifndef SBX_ADAPTERS_LIBEV_H
#define SBX_ADAPTERS_LIBEV_H

#include <stdlib.h>

#include <ev.h>

#include <sbx/sbx_async.h>

#if !EV_MULTIPLICITY
#error "adapters/libev.h needs libev built with EV_MULTIPLICITY"
#endif

typedef struct sbx_libev_events {
    sbx_async *ac;
    struct ev_loop *loop;
    int reading, writing;
    ev_io rev, wev;
    ev_timer timer;
} sbx_libev_events;

static void sbx_libev_read_event(struct ev_loop *loop, ev_io *w, int revents)
{
    sbx_libev_events *e = (sbx_libev_events *)w->data;
    (void)loop;
    (void)revents;
    sbx_async_handle_read(e->ac);
}

static void sbx_libev_write_event(struct ev_loop *loop, ev_io *w, int revents)
{
    sbx_libev_events *e = (sbx_libev_events *)w->data;
    (void)loop;
    (void)revents;
    sbx_async_handle_write(e->ac);
}

static void sbx_libev_timer_event(struct ev_loop *loop, ev_timer *t, int revents)
{
    sbx_libev_events *e = (sbx_libev_events *)t->data;
    (void)loop;
    (void)revents;
    sbx_async_handle_timeout(e->ac);
}

static void sbx_libev_add_read(void *privdata)
{
    sbx_libev_events *e = (sbx_libev_events *)privdata;
    if (!e->reading) {
        e->reading = 1;
        ev_io_start(e->loop, &e->rev);
    }
}

static void sbx_libev_del_read(void *privdata)
{
    sbx_libev_events *e = (sbx_libev_events *)privdata;
    if (e->reading) {
        e->reading = 0;
        ev_io_stop(e->loop, &e->rev);
    }
}

static void sbx_libev_add_write(void *privdata)
{
    sbx_libev_events *e = (sbx_libev_events *)privdata;
    if (!e->writing) {
        e->writing = 1;
        ev_io_start(e->loop, &e->wev);
    }
}

static void sbx_libev_del_write(void *privdata)
{
    sbx_libev_events *e = (sbx_libev_events *)privdata;
    if (e->writing) {
        e->writing = 0;
        ev_io_stop(e->loop, &e->wev);
    }
}

static void sbx_libev_schedule_timer(void *privdata, int timeout_ms)
{
    sbx_libev_events *e = (sbx_libev_events *)privdata;
    /* Seconds as a double: an integer division would turn every sub-second
     * timeout into 0 and spin the loop. */
    ev_timer_stop(e->loop, &e->timer);
    ev_timer_set(&e->timer, timeout_ms / 1000.0, 0.);
    ev_timer_start(e->loop, &e->timer);
}

static void sbx_libev_cleanup(void *privdata)
{
    sbx_libev_events *e = (sbx_libev_events *)privdata;
    /* Stopping also clears pending events, so libev will not call into the
     * freed watchers later in this iteration. */
    sbx_libev_del_read(e);
    sbx_libev_del_write(e);
    ev_timer_stop(e->loop, &e->timer);
    free(e);
}

/**
 * Attaches ac to loop. Returns SBX_ERR if ac already has an adapter, failed
 * to connect, or on OOM. Not callable from a libsbx callback.
 */
static inline int sbx_libev_attach(struct ev_loop *loop, sbx_async *ac)
{
    sbx_async_ev hooks;
    sbx_libev_events *e;

    if (ac->ev.data != NULL || ac->c.fd < 0)
        return SBX_ERR;
    e = (sbx_libev_events *)calloc(1, sizeof(*e));
    if (e == NULL)
        return SBX_ERR;
    e->ac = ac;
    e->loop = loop;
    ev_io_init(&e->rev, sbx_libev_read_event, ac->c.fd, EV_READ);
    ev_io_init(&e->wev, sbx_libev_write_event, ac->c.fd, EV_WRITE);
    ev_init(&e->timer, sbx_libev_timer_event);
    e->rev.data = e;
    e->wev.data = e;
    e->timer.data = e;

    hooks.data = e;
    hooks.add_read = sbx_libev_add_read;
    hooks.del_read = sbx_libev_del_read;
    hooks.add_write = sbx_libev_add_write;
    hooks.del_write = sbx_libev_del_write;
    hooks.cleanup = sbx_libev_cleanup;
    hooks.schedule_timer = sbx_libev_schedule_timer;
    if (sbx_async_attach(ac, &hooks) != SBX_OK) {
        free(e);
        return SBX_ERR;
    }
    return SBX_OK;
}

#endif
