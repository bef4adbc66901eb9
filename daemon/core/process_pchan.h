/*
 * process_pchan.h - the core's processes as the sink of the process channel
 * (io/pchan.h): output, backpressure and STARTED of a frame reach the
 * struct process the provider's lookup names.
 */
#ifndef SBXD_PROCESS_PCHAN_H
#define SBXD_PROCESS_PCHAN_H

#include "io/pchan.h"

/* proc pointers given to pchan are struct process *. */
extern const struct pchan_sink process_pchan_sink;

#endif
