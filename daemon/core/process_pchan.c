/*
 * process_pchan.c - struct process as a pchan sink (process_pchan.h).
 */
#include "core/process_pchan.h"
#include "core/provider.h"

static void sink_output(void *proc, int is_stderr, const uint8_t *data, size_t len)
{
    process_output(proc, is_stderr ? SBX_STREAM_STDERR : SBX_STREAM_STDOUT, data, len);
}

static int sink_blocked(void *proc)
{
    return process_output_blocked(proc);
}

static void sink_started(void *proc, long os_pid)
{
    process_started(proc, os_pid);
}

const struct pchan_sink process_pchan_sink = {
    .output = sink_output,
    .blocked = sink_blocked,
    .started = sink_started,
};
