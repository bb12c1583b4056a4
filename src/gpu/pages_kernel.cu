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

/* The jobs from the parameter buffer into shared memory: lanes of a round
 * may name as many jobs as there are lanes, and the constant bank
 * serializes divergent reads. */
static __device__ __forceinline__ void load_jobs(struct xi_pages_job *job, const struct xi_pages_args &a)
{
	const uint32_t *from = (const uint32_t *)a.job;
	uint32_t *to = (uint32_t *)job;
	for (uint32_t i = threadIdx.x; i < a.njobs * (sizeof(job[0]) / 4); i += blockDim.x)
		to[i] = from[i];
}

/* Item `mine`'s source, destination and length. */
static __device__ __forceinline__ void resolve(const struct xi_pages_job *job, uint32_t njobs, uint32_t mine,
					       uint64_t *s_addr, uint64_t *d_addr, uint32_t *len)
{
	uint32_t lo = 0, hi = njobs - 1; /* the last job whose item0 <= mine */
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
	*s_addr = j->src_base + (uint64_t)sp * j->src_stride + off;
	*d_addr = j->dst_base + (uint64_t)dp * j->dst_stride + off;
	*len = j->page_len - off < XI_PAGES_CHUNK ? j->page_len - off : XI_PAGES_CHUNK;
}

extern "C" __global__ void __launch_bounds__(XI_PAGES_THREADS, XI_PAGES_CTAS_PER_SM)
	xi_pages_copy(const __grid_constant__ struct xi_pages_args a)
{
	__shared__ struct xi_pages_job job[XI_PAGES_JOBS];
	if (a.trace && threadIdx.x == 0)
		((volatile uint64_t *)a.trace)[2 * blockIdx.x] = global_ns();
	load_jobs(job, a);
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
		if (mine < a.items)
			resolve(job, a.njobs, mine, &s_addr, &d_addr, &len);
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

/* ------------------------------------------------- tile and bulk kernels */

/* Items per CTA turn: the launch's items spread evenly over the grid, a
 * multiple of `unit`, at most `most`. */
static __device__ __forceinline__ uint32_t tile_of(uint32_t items, uint32_t unit, uint32_t most)
{
	uint32_t t = (items + gridDim.x - 1) / gridDim.x;
	t = (t + unit - 1) / unit * unit;
	return t < most ? t : most;
}

static __device__ __forceinline__ void trace_start(const struct xi_pages_args &a)
{
	if (a.trace && threadIdx.x == 0)
		((volatile uint64_t *)a.trace)[2 * blockIdx.x] = global_ns();
}

static __device__ __forceinline__ void trace_end(const struct xi_pages_args &a)
{
	if (a.trace) {
		__syncthreads();
		if (threadIdx.x == 0)
			((volatile uint64_t *)a.trace)[2 * blockIdx.x + 1] = global_ns();
	}
}

/* The tile kernel: CTA c takes runs of consecutive items (c's tile, then
 * c + gridDim's, ...); its threads resolve one item each, so that the page
 * numbers of consecutive pages are read by consecutive lanes (one bus
 * transaction per warp where the lists live in host memory, rather than one
 * per lane); then each warp copies items of the run, 4 KiB of loads in
 * flight before its stores, as the warp kernel does. */
extern "C" __global__ void __launch_bounds__(XI_PAGES_THREADS, XI_PAGES_CTAS_PER_SM)
	xi_pages_tile(const __grid_constant__ struct xi_pages_args a)
{
	__shared__ struct xi_pages_job job[XI_PAGES_JOBS];
	__shared__ uint64_t ts[XI_TILE_ITEMS], td[XI_TILE_ITEMS];
	__shared__ uint32_t tl[XI_TILE_ITEMS];
	trace_start(a);
	load_jobs(job, a);
	const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const uint32_t tile = tile_of(a.items, nw, XI_TILE_ITEMS);
	for (uint32_t t0 = blockIdx.x * tile; t0 < a.items; t0 += gridDim.x * tile) {
		const uint32_t n = a.items - t0 < tile ? a.items - t0 : tile;
		__syncthreads(); /* the jobs are in; the previous run's copies are done with the arrays */
		for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
			resolve(job, a.njobs, t0 + i, &ts[i], &td[i], &tl[i]);
		__syncthreads();
		for (uint32_t i = warp; i < n; i += nw) {
			const uint8_t *s = (const uint8_t *)ts[i];
			uint8_t *d = (uint8_t *)td[i];
			const uint32_t len = tl[i];
			if (a.aligned) {
				const uint4 *s4 = (const uint4 *)s;
				uint4 *d4 = (uint4 *)d;
				const uint32_t nv = len / 16u;
				uint4 v[VEC_PER_LANE];
#pragma unroll
				for (uint32_t q = 0; q < VEC_PER_LANE; q++) {
					const uint32_t k = q * 32u + lane;
					if (k < nv)
						v[q] = __ldcs(s4 + k);
				}
#pragma unroll
				for (uint32_t q = 0; q < VEC_PER_LANE; q++) {
					const uint32_t k = q * 32u + lane;
					if (k < nv)
						__stcs(d4 + k, v[q]);
				}
			} else {
				for (uint32_t k = lane; k < len; k += 32u)
					d[k] = s[k];
			}
		}
	}
	trace_end(a);
}

static __device__ __forceinline__ uint32_t smem_u32(const void *p)
{
	return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void bulk_load(uint32_t stage, uint32_t bar, uint64_t src, uint32_t len)
{
	asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(len) : "memory");
	asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
			     stage),
		     "l"(src), "r"(len), "r"(bar)
		     : "memory");
}

static __device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity)
{
	uint32_t done = 0;
	while (!done)
		asm volatile("{\n\t.reg .pred p;\n\t"
			     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
			     "selp.u32 %0, 1, 0, p;\n\t}"
			     : "=r"(done)
			     : "r"(bar), "r"(parity)
			     : "memory");
}

static __device__ __forceinline__ void bulk_store(uint64_t dst, uint32_t stage, uint32_t len)
{
	asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(stage), "r"(len)
		     : "memory");
	asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* The bulk kernel (aligned launches: every address and length a multiple of
 * 16, as the bulk copies require): the tile kernel's resolution, then lane 0
 * of each warp runs a pipeline over its items of the run: up to
 * XI_BULK_STAGES loads (global -> shared, completing on a stage's mbarrier)
 * in flight, each item stored (shared -> global) as soon as it is in, its
 * stage reloaded once the store has read it. The copy engine of each SM
 * does the moving; the threads only issue. */
extern "C" __global__ void __launch_bounds__(XI_BULK_THREADS, XI_BULK_CTAS_PER_SM)
	xi_pages_bulk(const __grid_constant__ struct xi_pages_args a)
{
	__shared__ struct xi_pages_job job[XI_PAGES_JOBS];
	__shared__ uint64_t ts[XI_BULK_TILE], td[XI_BULK_TILE];
	__shared__ uint32_t tl[XI_BULK_TILE];
	__shared__ __align__(128) uint8_t stage[XI_BULK_THREADS / 32][XI_BULK_STAGES][XI_PAGES_CHUNK];
	__shared__ __align__(8) uint64_t bar[XI_BULK_THREADS / 32][XI_BULK_STAGES];
	trace_start(a);
	load_jobs(job, a);
	const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	if (lane == 0) {
		for (uint32_t s = 0; s < XI_BULK_STAGES; s++)
			asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[warp][s])) : "memory");
		asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
	}
	uint32_t phase = 0; /* bit s: the parity stage s's barrier completes next */
	const uint32_t tile = tile_of(a.items, nw, XI_BULK_TILE);
	for (uint32_t t0 = blockIdx.x * tile; t0 < a.items; t0 += gridDim.x * tile) {
		const uint32_t n = a.items - t0 < tile ? a.items - t0 : tile;
		__syncthreads();
		for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
			resolve(job, a.njobs, t0 + i, &ts[i], &td[i], &tl[i]);
		__syncthreads();
		if (lane)
			continue;
		/* This warp's items: warp, warp + nw, ...: m of them. */
		const uint32_t m = warp < n ? (n - warp + nw - 1) / nw : 0;
		for (uint32_t k = 0; k < m && k < XI_BULK_STAGES; k++) {
			const uint32_t i = warp + k * nw;
			bulk_load(smem_u32(stage[warp][k]), smem_u32(&bar[warp][k]), ts[i], tl[i]);
		}
		for (uint32_t k = 0; k < m; k++) {
			const uint32_t s = k % XI_BULK_STAGES, i = warp + k * nw;
			bar_wait(smem_u32(&bar[warp][s]), (phase >> s) & 1u);
			phase ^= 1u << s;
			bulk_store(td[i], smem_u32(stage[warp][s]), tl[i]);
			/* Store k-1 has read its stage (at most the newest store,
			 * k's, still reading): reload that stage. */
			if (k >= 1 && k - 1 + XI_BULK_STAGES < m) {
				asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
				const uint32_t ps = (k - 1) % XI_BULK_STAGES, pi = warp + (k - 1 + XI_BULK_STAGES) * nw;
				bulk_load(smem_u32(stage[warp][ps]), smem_u32(&bar[warp][ps]), ts[pi], tl[pi]);
			}
		}
		/* The stages are free for the next run (and the arrays: read above). */
		asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
	}
	if (lane == 0)
		asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
	trace_end(a);
}
