/*
 * terminal.c - processes on a terminal: the provider check and resize.
 */
#include "core/terminal.h"

#include <jansson.h>

#include "core/process.h"
#include "core/provider.h"
#include "core/sandbox.h"
#include "daemon.h"
#include "sbx_proto.h"

int terminal_unsupported(sbx_err_t *err, struct sandbox *sb, const char *feature)
{
    const char *name = sb->prov->ops->name;
    return err_make_data(err, SBX_E_UNSUPPORTED,
                         json_pack("{s:s, s:s}", "provider", name, "feature", feature),
                         "the %s provider does not support %s", name, feature);
}

int terminal_supported(struct sandbox *sb, sbx_err_t *err)
{
    if (sb->prov->ops->proc_resize)
        return 0;
    return terminal_unsupported(err, sb, "pty");
}

int process_resize(struct process *p, unsigned cols, unsigned rows, sbx_err_t *err)
{
    if (!p->pty)
        return err_make_data(err, SBX_E_PARAMS, json_pack("{s:s}", "param", "pid"),
                             "process %u has no terminal", p->pid);
    if (p->state == P_EXITED)
        return err_make_data(err, SBX_E_STATE,
                             json_pack("{s:s, s:I, s:s}", "sandbox", p->sb->id, "pid",
                                       (json_int_t)p->pid, "status", "exited"),
                             "process %u has exited", p->pid);
    /* The spec's size is what a (re)spawn of a queued process uses. */
    json_object_set_new(p->spec, "pty",
                        json_pack("{s:i, s:i}", "cols", (int)cols, "rows", (int)rows));
    if (p->state == P_QUEUED)
        return 0;
    return p->sb->prov->ops->proc_resize(p->sb->prov->cookie, p, cols, rows, err);
}
