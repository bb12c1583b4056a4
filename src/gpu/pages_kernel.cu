// The paged gather/scatter copy (kernel_args.h): page src_pages[i] of the
// source to page dst_pages[i] of the destination, for every i, in one launch.
// Built into a fatbin at build time and loaded through the driver API
// (gpu_copy.c); per-page copy-engine calls cost ~4 us of the worker each,
// which caps small pages far below the GPU's bandwidth.
//
// Work is split into items of XI_PAGES_CHUNK bytes (a page has
// ceil(page_len / CHUNK) of them); each warp takes items in a grid-stride
// loop, so small pages spread one per warp over every SM and big pages get
// many warps.
#include <stdint.h>

#include "gpu/kernel_args.h"

#define VEC_PER_LANE (XI_PAGES_CHUNK / 32u / 16u)

extern "C" __global__ void __launch_bounds__(XI_PAGES_THREADS, XI_PAGES_CTAS_PER_SM) xi_pages_copy(struct xi_pages_args a)
{
	const uint32_t lane = threadIdx.x & 31u;
	const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const uint32_t nwarps = (gridDim.x * blockDim.x) >> 5;
	/* 32-bit item arithmetic: the launcher keeps items below 2^31, so that
	 * it + nwarps cannot wrap. */
	const uint32_t per_page = (uint32_t)((a.page_len + XI_PAGES_CHUNK - 1) / XI_PAGES_CHUNK);
	const uint32_t items = per_page * a.npages;
	const uint32_t *sp = (const uint32_t *)a.src_pages, *dp = (const uint32_t *)a.dst_pages;
	for (uint32_t it = warp; it < items; it += nwarps) {
		const uint32_t page = it / per_page;
		const uint64_t off = (uint64_t)(it - page * per_page) * XI_PAGES_CHUNK;
		const uint32_t n = (uint32_t)(a.page_len - off < XI_PAGES_CHUNK ? a.page_len - off : XI_PAGES_CHUNK);
		const uint8_t *s = (const uint8_t *)(a.src_base + (uint64_t)__ldg(sp + page) * a.src_stride) + off;
		uint8_t *d = (uint8_t *)(a.dst_base + (uint64_t)__ldg(dp + page) * a.dst_stride) + off;
		if (a.aligned) {
			const uint4 *s4 = (const uint4 *)s;
			uint4 *d4 = (uint4 *)d;
			const uint32_t nv = n / 16u;
			uint4 v[VEC_PER_LANE];
#pragma unroll
			for (uint32_t k = 0; k < VEC_PER_LANE; k++) {
				const uint32_t j = k * 32u + lane;
				if (j < nv)
					v[k] = __ldcs(s4 + j);
			}
#pragma unroll
			for (uint32_t k = 0; k < VEC_PER_LANE; k++) {
				const uint32_t j = k * 32u + lane;
				if (j < nv)
					__stcs(d4 + j, v[k]);
			}
		} else {
			for (uint32_t j = lane; j < n; j += 32u)
				d[j] = s[j];
		}
	}
}
