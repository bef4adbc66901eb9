/*
 * docker_pty.c - terminals of Docker sandboxes. sbx-init opens the pty
 * (agent/pty.c) when a SPAWN carries "pty": {cols, rows}; a resize is a
 * RESIZE frame to it (proto/CHANNEL.md). The docker-exec mode has no agent
 * and refuses terminals in d_proc_spawn (-32011).
 */
#include <stdint.h>

#include "providers/docker/docker_int.h"
#include "core/process.h"
#include "sbx_chan.h"
#include "sbx_proto.h"

int dkpty_proc_resize(void *cookie, struct process *p, unsigned cols, unsigned rows,
                      sbx_err_t *err)
{
    struct dk_proc *dpp = p->pdata;
    struct dk_sb *ds = p->sb->pdata;
    (void)cookie;
    /* Not sent yet: the SPAWN takes the size from the spec (terminal.c). */
    if (!dpp || !ds || !dpp->spawned)
        return 0;
    /* While the agent is being reattached a resize is dropped: the next one
     * the client sends (a terminal sends one per change) sets it. */
    if (!ds->ready)
        return 0;
    uint8_t b[8];
    sbx_chan_put_u32(b, cols);
    sbx_chan_put_u32(b + 4, rows);
    if (dka_send_frame(ds, SBX_CHAN_RESIZE, p->pid, b, sizeof(b)) < 0)
        return err_make(err, SBX_E_PROVIDER, "docker: the agent channel is closed");
    return 0;
}
