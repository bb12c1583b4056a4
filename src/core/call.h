/* The control path: a control call (region registration, peer add/remove,
 * revoke, disarm) runs on the worker, pushed into the same submission queue
 * as the data, so it is ordered after what was submitted before it; the
 * caller waits on a semaphore. A mutex serializes control calls, never the
 * data path. Calling one from a worker callback deadlocks. */
#ifndef XFER_CORE_CALL_H
#define XFER_CORE_CALL_H

#include "core/objects.h"

/* Runs fn on the worker thread and returns its result; -ESHUTDOWN once stopping. */
int xi_engine_call(xfer_engine_t *e, int (*fn)(xfer_engine_t *, void *), void *arg);
/* Wakes the worker if it sleeps; called after every push to its queues. */
void xi_engine_kick(xfer_engine_t *e);
/* On the worker: runs a call taken from the queue. */
void xi_call_run(xfer_engine_t *e, struct xi_call *c);
/* At stop: a call still queued fails with -ESHUTDOWN. */
void xi_call_refuse(struct xi_call *c);

#endif
