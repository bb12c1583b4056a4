// The gather/scatter copy (kernel_args.h): every job of the launch, each a
// paged or contiguous copy of one call, in one kernel. Built into a fatbin at
// build time and loaded through the driver API (gpu_copy.c); per-page
// copy-engine calls cost ~4 us of the worker each, which caps small pages
// far below the GPU's bandwidth.
//
// Work is split into items of XI_PAGES_CHUNK bytes (a page has per_page of
// them; the jobs' items follow each other); warp w takes items w, w + nwarps,
// w + 2 nwarps, ... in rounds of 32: first each lane works out the addresses
// of one item of the round (its job, its page, and the page numbers, which
// may live in host memory a bus round trip away: 32 of them in flight at
// once rather than one per item), then the warp copies the 32 items one
// after the other, the addresses broadcast by shuffles.
#include <stdint.h>

#include "gpu/kernel_args.h"

#define VEC_PER_LANE (XI_PAGES_CHUNK / 32u / 16u)

static __device__ __forceinline__ uint64_t global_ns(void)
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

extern "C" __global__ void __launch_bounds__(XI_PAGES_THREADS, XI_PAGES_CTAS_PER_SM)
	xi_pages_copy(const __grid_constant__ struct xi_pages_args a)
{
	__shared__ struct xi_pages_job job[XI_PAGES_JOBS];
	if (a.trace && threadIdx.x == 0)
		((volatile uint64_t *)a.trace)[2 * blockIdx.x] = global_ns();
	{
		/* The jobs into shared memory: lanes of a round may name as many
		 * jobs as there are lanes, and the constant bank serializes
		 * divergent reads. */
		const uint32_t *from = (const uint32_t *)a.job;
		uint32_t *to = (uint32_t *)job;
		for (uint32_t i = threadIdx.x; i < a.njobs * (sizeof(job[0]) / 4); i += blockDim.x)
			to[i] = from[i];
	}
	__syncthreads();
	const uint32_t lane = threadIdx.x & 31u;
	const uint32_t warp = a.spread ? (threadIdx.x >> 5) * gridDim.x + blockIdx.x
				       : (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	const uint32_t nwarps = (gridDim.x * blockDim.x) >> 5;
	/* 32-bit item arithmetic: the launcher keeps items below 2^31 and the
	 * grid below 2^16 warps, so that base + 32 * nwarps cannot wrap. */
	for (uint32_t base = warp; base < a.items; base += 32u * nwarps) {
		const uint32_t mine = base + lane * nwarps;
		uint64_t s_addr = 0, d_addr = 0;
		uint32_t len = 0;
		if (mine < a.items) {
			uint32_t lo = 0, hi = a.njobs - 1; /* the last job whose item0 <= mine */
			while (lo < hi) {
				const uint32_t mid = (lo + hi + 1) / 2;
				if (job[mid].item0 <= mine)
					lo = mid;
				else
					hi = mid - 1;
			}
			const struct xi_pages_job *j = &job[lo];
			const uint32_t rel = mine - j->item0, page = rel / j->per_page;
			const uint32_t off = (rel - page * j->per_page) * XI_PAGES_CHUNK;
			const uint32_t sp = j->src_pages ? __ldg((const uint32_t *)j->src_pages + page) : page;
			const uint32_t dp = j->dst_pages ? __ldg((const uint32_t *)j->dst_pages + page) : page;
			s_addr = j->src_base + (uint64_t)sp * j->src_stride + off;
			d_addr = j->dst_base + (uint64_t)dp * j->dst_stride + off;
			len = j->page_len - off < XI_PAGES_CHUNK ? j->page_len - off : XI_PAGES_CHUNK;
		}
		for (uint32_t k = 0; k < 32u && base + k * nwarps < a.items; k++) {
			const uint8_t *s = (const uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)s_addr, k);
			uint8_t *d = (uint8_t *)__shfl_sync(0xffffffffu, (unsigned long long)d_addr, k);
			const uint32_t n = __shfl_sync(0xffffffffu, len, k);
			if (a.aligned) {
				const uint4 *s4 = (const uint4 *)s;
				uint4 *d4 = (uint4 *)d;
				const uint32_t nv = n / 16u;
				uint4 v[VEC_PER_LANE];
#pragma unroll
				for (uint32_t q = 0; q < VEC_PER_LANE; q++) {
					const uint32_t i = q * 32u + lane;
					if (i < nv)
						v[q] = __ldcs(s4 + i);
				}
#pragma unroll
				for (uint32_t q = 0; q < VEC_PER_LANE; q++) {
					const uint32_t i = q * 32u + lane;
					if (i < nv)
						__stcs(d4 + i, v[q]);
				}
			} else {
				for (uint32_t i = lane; i < n; i += 32u)
					d[i] = s[i];
			}
		}
	}
	if (a.trace) {
		__syncthreads();
		if (threadIdx.x == 0)
			((volatile uint64_t *)a.trace)[2 * blockIdx.x + 1] = global_ns();
	}
}
