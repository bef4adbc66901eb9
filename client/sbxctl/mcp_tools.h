/*
 * mcp_tools.h - what the tool table (mcp_tools.c) and the tools
 * (mcp_proc.c, mcp_files.c, with their texts in mcp_text.c) share in
 * `sbxctl mcp`. The protocol floor sees the table only through
 * mcp_toolbox (mcp.h's struct mcp_toolbox).
 */
#ifndef SBXCTL_MCP_TOOLS_H
#define SBXCTL_MCP_TOOLS_H

#include "mcp.h"

enum kind { K_STRING, K_INT, K_ENV, K_COMMAND, K_SIGNAL };

struct param {
    const char *name;
    enum kind kind;
    int required;
    json_int_t lo, hi; /* K_INT */
    const char *desc;
};

struct tool {
    const char *name, *title, *desc;
    const struct param *params;
    const char *output_schema; /* JSON text */
    const char *annotations;   /* JSON text */
    int progress;
    void (*start)(struct call *c);
};

/* ---- mcp_tools.c ---- */
extern const struct mcp_toolbox mcp_toolbox;

/* ---- mcp_proc.c: the process tools ---- */
void mcp_exec_start(struct call *c);
void mcp_code_start(struct call *c);
void mcp_spawn_start(struct call *c);
void mcp_output_start(struct call *c);
void mcp_kill_start(struct call *c);
void mcp_info_start(struct call *c);
/* Cancellation or shutdown: kills c's remote process if it has one. */
void mcp_proc_cancel(struct call *c);
/* A progress message for c (malloc'd). */
char *mcp_proc_progress_text(struct call *c);
/* process.output, process.exit and process.started from sbxd (m is the
 * struct mcp): to the call that follows the process. */
void mcp_proc_notify(void *m, const char *method, json_t *params);

/* ---- mcp_files.c: the file tools (fs.* in the command sandbox) ---- */
void mcpf_read_start(struct call *c);
void mcpf_write_start(struct call *c);
void mcpf_edit_start(struct call *c);
void mcpf_list_start(struct call *c);
void mcpf_move_start(struct call *c);
void mcpf_info_start(struct call *c);

/* ---- mcp_text.c: results as people and models read them (issue 19) ---- */
/* exec_command / process_output: stdout, stderr, then the exit status. */
char *mcp_exec_text(json_t *s);
/* run_code: the console lines, the result (JSON), or the uncaught error. */
char *mcp_code_text(json_t *s);

#endif
