/*
 * terminal.h - processes on a terminal (process.spawn/exec "pty"): which
 * providers have one, and window-size changes (process.resize).
 *
 * A provider offers terminals by having a proc_resize op; the process's
 * spec then carries "pty": {cols, rows}, and its output is one stream
 * (stdout) with whatever the terminal echoes.
 */
#ifndef SBXD_TERMINAL_H
#define SBXD_TERMINAL_H

#include "err.h"

struct sandbox;
struct process;

/* Largest cols and rows a client may ask for. */
#define TERMINAL_MAX_DIM 10000

/* 0 when sb's provider runs processes on a terminal; else -32011 with data
 * {provider, feature: "pty"}. */
int terminal_supported(struct sandbox *sb, sbx_err_t *err);
/*
 * Sets the window size of p's terminal (1..TERMINAL_MAX_DIM each). A queued
 * process starts with the new size; an exited one is -32001, one without a
 * terminal -32602 (param "pid").
 */
int process_resize(struct process *p, unsigned cols, unsigned rows, sbx_err_t *err);
/* -32011 for feature of sb's provider (errors are err.h's). */
int terminal_unsupported(sbx_err_t *err, struct sandbox *sb, const char *feature);

#endif
