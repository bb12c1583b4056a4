/* Page pairs grouped by region (page_order.h). Three passes over the lists,
 * no allocation: the largest key (for the region size), the count per
 * region, then each pair to its place. */
#include "gpu/page_order.h"

#include <string.h>

#include "util/u32_max.h"

void xi_page_order(const uint32_t *key, const uint32_t *other, uint32_t n, uint64_t stride, uint32_t *out_key,
		   uint32_t *out_other, uint32_t *count)
{
	const uint32_t top = xi_u32_max(key, n);
	/* The span the keys cover, in regions no finer than 2 MiB and no more
	 * than XI_ORDER_BUCKETS of them. */
	const uint64_t span = (uint64_t)top * stride;
	unsigned shift = XI_ORDER_REGION_SHIFT;
	while (shift < 63 && (span >> shift) >= XI_ORDER_BUCKETS)
		shift++;
	memset(count, 0, XI_ORDER_BUCKETS * sizeof(*count));
	for (uint32_t i = 0; i < n; i++)
		count[((uint64_t)key[i] * stride) >> shift]++;
	uint32_t at = 0;
	for (uint32_t b = 0; b < XI_ORDER_BUCKETS; b++) {
		const uint32_t c = count[b];
		count[b] = at;
		at += c;
	}
	for (uint32_t i = 0; i < n; i++) {
		const uint32_t to = count[((uint64_t)key[i] * stride) >> shift]++;
		out_key[to] = key[i];
		out_other[to] = other[i];
	}
}
