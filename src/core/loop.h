/* The worker's turn and its end (core/thread.c runs them). */
#ifndef XFER_CORE_LOOP_H
#define XFER_CORE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

struct worker;

/* Allocates every module's state (at bring-up, on the pinned worker, so
 * that first touch places it on the worker's NUMA node). */
int xi_worker_setup(struct worker *w);
void xi_worker_free(struct worker *w);
/* One turn; returns how much work it found (0: idle). */
int xi_worker_loop_once(struct worker *w, uint64_t now);
/* The same turn run by a waiting application thread (core/drive.c): no
 * reply watch, since the answer it would watch for is that thread's own. */
int xi_worker_loop_driven(struct worker *w, uint64_t now);
/* Work the worker holds that no NIC event announces: it must not sleep. */
bool xi_worker_busy(const struct worker *w);
/* A GPU copy of ours is in flight, or a peer's to us was announced and has
 * not been counted yet: the worker stays awake (core/thread.c). */
bool xi_worker_copying(const struct worker *w, uint64_t now);
/* Stop: completes everything pending with status (bounded wait for posted
 * requests, then abandons them). */
void xi_worker_quiesce(struct worker *w, int status);

#endif
