/* Where a completion goes: what the caller gave in struct xfer_completion,
 * kept as one value by every record that completes later (a submission, an
 * armed immediate counter, a cancel), so that delivering one is the same
 * call everywhere (core/deliver.c). */
#ifndef XFER_UTIL_TARGET_H
#define XFER_UTIL_TARGET_H

#include <stdint.h>

#include "xfer.h"

struct xi_target {
	uint64_t user_data;
	xfer_complete_fn cb; /* NULL: the engine's completion queue */
	void *cb_ctx;
	volatile uint64_t *signal; /* stored just before delivery, when set */
	uint64_t signal_value;
	uint64_t deadline_ns; /* absolute; UINT64_MAX: none */
	uint64_t t_submit;    /* CLOCK_MONOTONIC ns at submission, for the latency
			       * histograms; 0: not timed (telemetry off) */
};

#endif
