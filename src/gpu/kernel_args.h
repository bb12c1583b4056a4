/* The one argument of the copy kernel (gpu/pages_kernel.cu), shared by the
 * kernel, its launcher (gpu/gpu_copy.c) and the fake driver of the tests,
 * which runs the same copy on the CPU. Passed by value as the kernel's only
 * parameter, so the launch ABI is this struct and nothing else.
 *
 * One launch carries up to XI_PAGES_JOBS jobs: the copies of several calls
 * that were queued together (a launch and its event cost the worker about as
 * much as a 16 MiB copy takes on the GPU, so merging calls is what lets small
 * calls keep up). The jobs travel in the parameter buffer itself, which the
 * GPU broadcasts from its constant bank: no extra copy, no read over the bus. */
#ifndef XFER_GPU_KERNEL_ARGS_H
#define XFER_GPU_KERNEL_ARGS_H

#include <stdint.h>

/* Three kernels of one argument (XFER_GPU_PAGES=warp|tile|bulk forces one;
 * by default bulk for aligned launches of pages of 16 KiB and more up to
 * 64 MiB a launch, tile for the rest: gpu_copy.c; pages_kernel.cu):
 * warp: each warp resolves 32 items' addresses at once, lanes far apart;
 * tile: a CTA resolves a run of consecutive items into shared memory first
 * (the page-list reads of a warp coalesce), then its warps copy them;
 * bulk: tile's resolution, then Hopper bulk copies (cp.async.bulk global ->
 * shared -> global, a few in flight per warp), aligned launches only. */
#define XI_PAGES_KERNEL "xi_pages_copy"
#define XI_PAGES_KERNEL_TILE "xi_pages_tile"
#define XI_PAGES_KERNEL_BULK "xi_pages_bulk"
/* Bytes one warp moves per item: 32 lanes x 8 vectors of 16 bytes, all
 * loads issued before the first store so that each warp keeps 4 KiB of
 * reads in flight. */
#define XI_PAGES_CHUNK 4096u
#define XI_PAGES_THREADS 512u
/* CTAs resident per SM: the launch bounds cap registers so that two fit
 * (32 warps, each with 4 KiB of loads in flight, per SM); the grid is
 * this many per SM, the rest is the kernel's grid-stride loop. */
#define XI_PAGES_CTAS_PER_SM 2u
/* tile: the same geometry; a CTA resolves at most XI_TILE_ITEMS at once. */
#define XI_TILE_ITEMS 512u
/* bulk: 2 warps per CTA, each keeping XI_BULK_STAGES items of 4 KiB in
 * shared memory (32 KiB a CTA, static: under the 48 KiB that needs no
 * opt-in), 6 CTAs per SM (6 x 36 KiB fit an H100/H200 SM's 228 KiB;
 * run gpuk6-1: as fast as 5 or faster on every paged row but 1024 x 4 KiB,
 * where it was steadier). */
#define XI_BULK_THREADS 64u
#define XI_BULK_STAGES 4u
#define XI_BULK_TILE 64u
#define XI_BULK_CTAS_PER_SM 6u
/* Jobs per launch: 32 x 64 bytes keeps the parameter buffer at 2 KiB (the
 * driver's limit is 4 KiB). */
#define XI_PAGES_JOBS 32u

/* One call's copy: page i (i < npages) goes from
 *   src_base + src_page(i) * src_stride  to  dst_base + dst_page(i) * dst_stride,
 * page_len bytes, where src_page(i) = src_pages[i], or i itself when
 * src_pages is 0 (likewise dst): a contiguous write is one page. */
struct xi_pages_job {
	uint64_t src_base, src_stride;
	uint64_t dst_base, dst_stride;
	uint64_t src_pages, dst_pages; /* device-readable uint32_t[npages], or 0 */
	uint32_t page_len;             /* below 2^31 */
	uint32_t npages;
	uint32_t item0;    /* this job's first item in the launch's item space */
	uint32_t per_page; /* items (XI_PAGES_CHUNK bytes each) per page */
};

struct xi_pages_args {
	struct xi_pages_job job[XI_PAGES_JOBS];
	uint32_t njobs;
	uint32_t items;   /* sum of npages * per_page: below 2^31 */
	uint32_t aligned; /* every address, stride and page_len a multiple of 16 */
	/* Warp w of the item order is warp w / gridDim of CTA w % gridDim
	 * (else warp w % 16 of CTA w / 16): a small launch's items then run
	 * one warp per SM on every SM rather than 16 warps on a few
	 * (XFER_GPU_SPREAD=1; off by default: slower for random pages). */
	uint32_t spread;
	/* XFER_GPU_TRACE only, else 0: uint64_t[2 * gridDim.x] the kernel fills
	 * with each CTA's %globaltimer at its start and its end. */
	uint64_t trace;
};

#endif
