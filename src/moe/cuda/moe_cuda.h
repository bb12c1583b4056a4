/*
 * libxfer_moe_cuda.so: the MoE module's GPU half. Kernels for the four
 * halves of a round (dispatch send/recv, combine send/recv), launched on the
 * caller's stream (torch's current stream), CUDA-graph capturable; the GPU
 * buffers, their CUDA IPC handles for same-host ranks, and the waits on the
 * flags that other ranks and the host proxy raise.
 *
 * The protocol with remote ranks is libxfer's (xfer_moe_*): this library
 * fills a struct xfer_moe_buffers for xfer_moe_create and speaks to its
 * proxy through struct xfer_moe_ctl in pinned, device-mapped host memory.
 * Between ranks of one host the kernels talk directly: a receiver reads the
 * sender's records out of its send buffer (IPC), an expert rank writes the
 * combine rows into the origin's combine buffer (IPC), and flags in each
 * rank's "arena" say when (docs/moe.md, "Same-host path").
 *
 * Loadable without a GPU (the driver is reached through the runtime, and
 * the stream memory operations through dlopen at first use): every call then
 * fails with a message. Functions return 0 or a negative errno; the message
 * of the last failure is xfer_moe_cuda_error().
 */
#ifndef XFER_MOE_CUDA_H
#define XFER_MOE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "xfer_moe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XFER_MOE_CUDA_API __attribute__((visibility("default")))
#define XFER_MOE_CUDA_VERSION 3
/* xfer_moe_cuda_trace: rounds kept, stamps per round (10 kernels + the round) */
#define XFER_MOE_CUDA_TRACE_ROUNDS 1024
#define XFER_MOE_CUDA_TRACE_POINTS 11

enum xfer_moe_wait {
	/* a one-warp kernel spins on the flags (with the deadline): the right
	 * choice when every rank has a GPU of its own */
	XFER_MOE_WAIT_KERNEL = 0,
	/* the stream waits (cuStreamWaitValue32), holding no SM: for ranks that
	 * share a GPU, whose kernels the GPU time-slices; released by the host
	 * when a round fails */
	XFER_MOE_WAIT_STREAM = 1,
};

typedef struct xfer_moe_cuda xfer_moe_cuda_t;

XFER_MOE_CUDA_API int xfer_moe_cuda_version(void);
/* Last failure's message (thread-local); never NULL. */
XFER_MOE_CUDA_API const char *xfer_moe_cuda_error(void);

/* Allocates the GPU buffers on `device` and the pinned control words; fills
 * *bufs for xfer_moe_create. c must be the config given to xfer_moe_create
 * (host_of included). */
XFER_MOE_CUDA_API int xfer_moe_cuda_create(const struct xfer_moe_config *c, int device, int wait,
					   struct xfer_moe_buffers *bufs, xfer_moe_cuda_t **out);
/* This rank's IPC bytes (for every other rank) and every rank's, in rank
 * order: opens the handles of same-host ranks. */
XFER_MOE_CUDA_API int xfer_moe_cuda_ipc_info(const xfer_moe_cuda_t *g, void *buf, size_t cap);
XFER_MOE_CUDA_API int xfer_moe_cuda_connect(xfer_moe_cuda_t *g, const void *const *infos,
					    const size_t *lens);

/* Dispatch, send half: n tokens; x is [n][H] of dispatch_bytes, or bf16 to
 * be quantized here (quantize = 1, fp8 configs: one scale per 128
 * channels, amax/448); x_scales [n][H/128] float for fp8 input (else NULL);
 * topk_idx [n][K] int32 or int64 (idx_bytes). */
XFER_MOE_CUDA_API int xfer_moe_cuda_dispatch_send(xfer_moe_cuda_t *g, uint32_t n, const void *x,
						  const float *x_scales, int quantize,
						  const void *topk_idx, int idx_bytes, uint64_t stream);
/* Dispatch, receive half: expert rows into out_x [rows][H] (dispatch_bytes),
 * out_scales [rows][H/128] (fp8), counts [L], offsets [L+1] (may be NULL),
 * src_rank / src_token [rows] (may be NULL). */
XFER_MOE_CUDA_API int xfer_moe_cuda_dispatch_recv(xfer_moe_cuda_t *g, void *out_x, float *out_scales,
						  int32_t *counts, int32_t *offsets, int32_t *src_rank,
						  int32_t *src_token, uint64_t stream);
/* Combine: expert_out [rows][H] bf16 in the dispatch's layout; then out [n][H]
 * bf16 = sum over k of weights[t][k] (float [n][K]) times the rows, in fp32. */
XFER_MOE_CUDA_API int xfer_moe_cuda_combine_send(xfer_moe_cuda_t *g, const void *expert_out,
						 uint64_t stream);
XFER_MOE_CUDA_API int xfer_moe_cuda_combine_recv(xfer_moe_cuda_t *g, uint32_t n, const float *weights,
						 void *out, uint64_t stream);

/* 1 when contexts on `device` are shared through MPS (the CUDA MPS control
 * daemon runs; kernels of several processes then run at once instead of in
 * time slices), 0 when not, or a negative errno. */
XFER_MOE_CUDA_API int xfer_moe_cuda_mps_enabled(int device);
/* How many of this library's kernels the driver reports loaded after create
 * preloaded them (all: 10), or -1 when the driver cannot say. */
XFER_MOE_CUDA_API int xfer_moe_cuda_kernels_loaded(const xfer_moe_cuda_t *g);

/* Benchmark helper: a one-thread kernel on `stream` that stores the GPU's
 * global timer (ns, one clock for every process on the device) in *dst. */
XFER_MOE_CUDA_API int xfer_moe_cuda_stamp(uint64_t *dst, uint64_t stream);

/* Per-kernel stamps (created with XFER_MOE_TRACE=1 in the environment):
 * copies XFER_MOE_CUDA_TRACE_ROUNDS x XFER_MOE_CUDA_TRACE_POINTS x 2 words
 * (start, end ns on the global timer; point 10's start is the round) into
 * out, read on a stream of its own. Points in launch order: route, wait
 * (send), pack, wait (recv), plan, shuffle, wait (combine send), combine
 * send, wait (combine recv), combine recv; 0 where a kernel did not run.
 * Returns the words copied, 0 when tracing is off, or a negative errno. */
XFER_MOE_CUDA_API int xfer_moe_cuda_trace(xfer_moe_cuda_t *g, uint64_t *out, size_t words);

/* Diagnostics: the device round, this rank's arena flags (ready, cons,
 * comb per rank), the kernels' counters and the plan's totals, read on a
 * stream of its own (so also while a wait spins), as one line of text in
 * buf. Returns its length. */
XFER_MOE_CUDA_API int xfer_moe_cuda_debug(xfer_moe_cuda_t *g, char *buf, size_t cap);

/* The proxy's release hook (xfer_moe_set_release): raises every flag a
 * stream of this rank may wait on, on a stream of its own. */
XFER_MOE_CUDA_API void xfer_moe_cuda_release(void *g);
/* Blocks until every kernel of this module has finished (device sync of
 * its own streams is not enough: the caller's stream). Used by destroy. */
XFER_MOE_CUDA_API void xfer_moe_cuda_destroy(xfer_moe_cuda_t *g);

#ifdef __cplusplus
}
#endif
#endif
