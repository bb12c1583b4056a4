/* A paged copy's page pairs listed by region (XFER_GPU_ORDER, gpu_copy.c):
 * the copy kernel visits a launch's pages in list order, its CTAs each a run
 * of consecutive list entries, so a list grouped by the 2 MiB region of one
 * side's pages has every CTA reading (or writing) a few regions rather than
 * as many as its pages. The pairs are the same; only their order changes,
 * which no caller can see (every page of a call lands before its event). */
#ifndef XFER_GPU_PAGE_ORDER_H
#define XFER_GPU_PAGE_ORDER_H

#include <stdint.h>

/* Regions a list is grouped into at most: larger spans group by coarser
 * regions (a power of two of 2 MiB), so the count array stays this small. */
#define XI_ORDER_BUCKETS 1024u
#define XI_ORDER_REGION_SHIFT 21

/* The n pairs (key[i], other[i]) into out_key / out_other, grouped by the
 * region of key[i] * stride (a stable counting sort: within a region, list
 * order). stride * max(key) must not overflow (the submit path checked each
 * page's bounds). count: XI_ORDER_BUCKETS words of scratch. */
void xi_page_order(const uint32_t *key, const uint32_t *other, uint32_t n, uint64_t stride, uint32_t *out_key,
		   uint32_t *out_other, uint32_t *count);

#endif
