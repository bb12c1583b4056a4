/* The worker thread's life: pin, bring the NICs up on the pinned core (so
 * that their memory is NUMA-local), loop, sleep when idle, quiesce on stop. */
#ifndef XFER_CORE_THREAD_H
#define XFER_CORE_THREAD_H

#include "core/objects.h"

/* Starts the worker and waits for its bring-up; its result. */
int xi_worker_create(xfer_engine_t *e);
/* After the thread exited: frees the worker's state. */
void xi_worker_destroy(xfer_engine_t *e);

#endif
