/*
 * adoption.h - the window after an sbxd restart while providers list their
 * backends and adopt what they find (issue 16, item 12). Until every
 * provider that adopts at load (provider.h: adopts_at_load) has said it is
 * done, and every sandbox it adopted as running has its processes back, a
 * call naming an unknown sandbox or process waits (adoption_wait) instead of
 * answering "not found"; limits.adopt_wait_ms bounds the window.
 */
#ifndef SBXD_ADOPTION_H
#define SBXD_ADOPTION_H

struct sandbox;

typedef void (*adoption_cb)(void *privdata);

/* Before provider `name` loads: it will adopt; sandbox_adoption_done(name)
 * ends its part. Starts the adopt_wait_ms timer at the first call. */
void adoption_begin(const char *name);
/* 1 while the window is open. */
int adoption_pending(void);
/* cb(privdata) once the window closes (at once, before returning, when it is
 * not open). Runs on the loop; cb may call adoption_wait again. */
void adoption_wait(adoption_cb cb, void *privdata);
/* sandbox.c: sb was adopted running and waits for its provider's
 * sandbox_adopted (or goes: adoption_sandbox_end). */
void adoption_sandbox_begin(struct sandbox *sb);
void adoption_sandbox_end(struct sandbox *sb);
/* Shutdown: runs every waiter (the window is over) and stops the timer. */
void adoption_free_all(void);

#endif
