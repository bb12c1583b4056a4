/* The largest of n 32-bit words (0 for none). Eight running maxima rather
 * than one: a single one chains every compare on the one before it (about
 * 0.5 ns a word on the 2-vCPU host, 8 us for a 16,384-page list), eight
 * let the CPU overlap them (about half that). Page lists of paged writes
 * are scanned with it at submission (their bounds) and when grouped by
 * region (gpu/page_order.c). */
#ifndef XFER_UTIL_U32_MAX_H
#define XFER_UTIL_U32_MAX_H

#include <stdint.h>

static inline uint32_t xi_u32_max(const uint32_t *v, uint32_t n)
{
	uint32_t m[8] = {0}, i = 0;
	for (; n - i >= 8; i += 8)
		for (unsigned k = 0; k < 8; k++)
			m[k] = v[i + k] > m[k] ? v[i + k] : m[k];
	uint32_t top = 0;
	for (unsigned k = 0; k < 8; k++)
		top = m[k] > top ? m[k] : top;
	for (; i < n; i++)
		top = v[i] > top ? v[i] : top;
	return top;
}

#endif
