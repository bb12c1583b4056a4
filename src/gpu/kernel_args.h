/* The one argument of the paged-copy kernel (gpu/pages_kernel.cu), shared by
 * the kernel, its launcher (gpu/gpu_copy.c) and the fake driver of the tests,
 * which runs the same copy on the CPU. Passed by value as the kernel's only
 * parameter, so the launch ABI is this struct and nothing else. */
#ifndef XFER_GPU_KERNEL_ARGS_H
#define XFER_GPU_KERNEL_ARGS_H

#include <stdint.h>

#define XI_PAGES_KERNEL "xi_pages_copy"
/* Bytes one warp moves per item: 32 lanes x 8 vectors of 16 bytes, all
 * loads issued before the first store so that each warp keeps 4 KiB of
 * reads in flight. */
#define XI_PAGES_CHUNK 4096u
#define XI_PAGES_THREADS 512u
/* CTAs resident per SM: the launch bounds cap registers so that two fit
 * (32 warps, each with 4 KiB of loads in flight, per SM); the grid is
 * this many per SM, the rest is the kernel's grid-stride loop. */
#define XI_PAGES_CTAS_PER_SM 2u

struct xi_pages_args {
	uint64_t src_base, src_stride; /* page p of the source: src_base + p * src_stride */
	uint64_t dst_base, dst_stride;
	uint64_t page_len;
	uint64_t src_pages, dst_pages; /* device-readable uint32_t[npages] */
	uint32_t npages;
	uint32_t aligned; /* every address and page_len a multiple of 16 */
};

#endif
