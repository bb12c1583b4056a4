/* The one way a completion leaves the worker, for operations, expectations,
 * cancels and stop alike: its signal word, the counters, then its callback
 * or the completion queue. While the application does not reap, entries
 * wait in an overflow ring and the worker takes no new work, so the ring's
 * size bounds it and no completion is ever dropped. */
#ifndef XFER_CORE_DELIVER_H
#define XFER_CORE_DELIVER_H

#include <stdbool.h>

#include "core/objects.h"

struct worker;

/* Sizes the overflow ring from the engine's queues (created before). */
int xi_deliver_init(struct worker *w);
void xi_deliver_free(struct worker *w);
void xi_deliver(struct worker *w, const struct xi_target *t, int res, uint32_t kind);
/* Moves waiting entries into the completion queue; returns how many. */
int xi_deliver_flush(struct worker *w);
/* Completions wait in the overflow: the worker must not take new work. */
bool xi_deliver_backlog(const struct worker *w);
/* Wakes application threads waiting for completions, when any were queued. */
void xi_deliver_wake(struct worker *w);
/* Makes the next xi_deliver_wake wake the application's completion waits
 * although nothing was queued, so that they look again at how to wait (a
 * GPU copy began: they spin while it runs, api/completions.c). */
void xi_deliver_nudge(struct worker *w);
/* After stop, on an application thread: whatever the worker could not queue
 * moves into the completion queue; false when nothing waited. */
bool xi_deliver_after_stop(xfer_engine_t *e);

#endif
