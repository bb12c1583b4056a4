/* Log2 latency buckets: the bucket of a value in nanoseconds and each
 * bucket's upper bound, shared by the recorder (core/telemetry.h) and the
 * renderers, so that the two can never disagree about a boundary. Bucket i
 * holds values in (2^(i-1), 2^i] ns; bucket 0 holds 0 and 1; the last one
 * everything above 2^(XFER_STATS_BUCKETS-2) ns, so it has no finite bound. */
#ifndef XFER_UTIL_HIST_H
#define XFER_UTIL_HIST_H

#include <stdint.h>

#include "xfer.h"

static inline unsigned xi_hist_bucket(uint64_t ns)
{
	if (ns <= 1)
		return 0;
	/* ns - 1 >= 1, so clz is defined: the bit width of ns - 1 is ceil(log2(ns)). */
	unsigned b = 64u - (unsigned)__builtin_clzll(ns - 1);
	return b < XFER_STATS_BUCKETS - 1 ? b : XFER_STATS_BUCKETS - 1;
}

/* Upper bound of bucket i in ns (inclusive); UINT64_MAX for the last. */
static inline uint64_t xi_hist_bound_ns(unsigned i)
{
	return i < XFER_STATS_BUCKETS - 1 ? 1ull << i : UINT64_MAX;
}

#endif
