/*
 * notify.h - the protocol floor's side of the core's events (core/events.h):
 * process.output, process.exit, sandbox.status, sandbox.progress and the
 * providers' other notifications, and tool.call requests, encoded here.
 */
#ifndef SBXD_NOTIFY_H
#define SBXD_NOTIFY_H

/* Registers the events table with the core (session.c, before the first
 * client; idempotent). */
void notify_init(void);

#endif
