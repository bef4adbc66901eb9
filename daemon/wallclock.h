/*
 * wallclock.h - wall-clock times in nanoseconds since the Unix epoch, and
 * their RFC 3339 spelling: the time a process's output arrived (the
 * replay's timestamps, process.attach's since), written the way docker
 * logs -t writes them.
 */
#ifndef SBXD_WALLCLOCK_H
#define SBXD_WALLCLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Buffer size for wallclock_format: "2026-12-01T16:25:00.123456789Z" + NUL. */
#define WALLCLOCK_TEXT 32

/* CLOCK_REALTIME now, in ns since the epoch. */
int64_t wallclock_now_ns(void);
/* ns as UTC RFC 3339 with nine fraction digits (docker's RFC3339NanoFixed)
 * into buf (>= WALLCLOCK_TEXT bytes); returns its length. Years outside
 * 0000..9999 are clamped to them. */
size_t wallclock_format(char *buf, int64_t ns);
/* Parses an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM);
 * 't', 'z' and a space for 'T' accepted; at most nine fraction digits are
 * kept) of exactly len bytes into *out (ns since the epoch). Returns 0, or
 * -1 when it is not one or lies outside what int64 ns hold (1677..2262).
 * Never reads past len. */
int wallclock_parse(int64_t *out, const char *s, size_t len);

#endif
