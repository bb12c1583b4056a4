/* An engine's NICs and internal buffers: opened and registered by the
 * worker as it starts (on its pinned core, so that first touch places them
 * on its NUMA node), released by the stopping thread once it exited. */
#ifndef XFER_CORE_BRINGUP_H
#define XFER_CORE_BRINGUP_H

#include "core/objects.h"

struct worker;

/* On the worker thread: NICs, the worker's state, the receive and SEND
 * bounce buffers and the sink, registered; every receive posted. */
int xi_engine_bringup(xfer_engine_t *e, struct worker *w);
/* After the worker exited: user regions, then internal ones, leave the NICs
 * (so that nothing can land in memory the application frees next), then
 * the endpoints close. */
void xi_engine_teardown(xfer_engine_t *e);
/* At destroy: the internal buffers themselves. */
void xi_engine_free_buffers(xfer_engine_t *e);

#endif
