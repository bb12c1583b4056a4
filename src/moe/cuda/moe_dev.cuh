/*
 * What every MoE kernel knows: struct moe_dev, passed by value, with the
 * config, this rank's buffers and where things are in its arena; plus the
 * memory-ordering helpers.
 *
 * The arena is one device allocation per rank, laid out the same on every
 * rank (the configs are equal), exported through CUDA IPC so that same-host
 * ranks can raise its flags and write its route table:
 *   round                 the device's round counter (the route kernel bumps it)
 *   failed                1 once the proxy has failed (its release hook or a
 *                         wait kernel that saw ctl->p_error writes it)
 *   ready[W]              rank s's records and route vector of the round are
 *                         in its send buffer and our route table (s writes 1)
 *   cons[W]               rank s has read our records (s writes 1)
 *   comb[W]               rank s has written its combine rows for us (s writes 1)
 *   counters[16]          last-block detection of each kernel
 *   route[2][W][RV]       route vectors of same-host ranks, by round parity
 *   tok_*[T*K]            the sender's routing (moe_route.c's struct moe_route)
 *   plan                  the receiver's plan (moe_plan.c's struct moe_plan)
 *   q_row[rows]           row of each entry of the combine pair stream
 *   peer tables           this process's pointers to each rank's arena, send
 *                         buffer and combine buffer (0 for remote ranks)
 *   wait lists            the flags each wait point lowers, for the wait kernel
 *   trace                 per-kernel stamps of the last rounds (XFER_MOE_TRACE=1)
 * Flags are 1 ("go") or 0; the waiting side lowers them (docs/moe.md).
 */
#ifndef XFER_MOE_DEV_CUH
#define XFER_MOE_DEV_CUH

#include <stdint.h>

#include "moe_cuda.h"
#include "moe_format.h"
#include "xfer_moe.h"

enum { CNT_PACK_REMOTE, CNT_PACK_ALL, CNT_SHUFFLE, CNT_CSEND_REMOTE, CNT_CSEND_ALL, CNT_CRECV, CNT_ROUTE, CNT_N = 16 };
enum { MISC_REC_TOTAL, MISC_Q_REMOTE, MISC_Q_TOTAL, MISC_BAD, MISC_N = 8 };
enum { WP_SEND, WP_RECV, WP_CSEND, WP_CRECV, WP_N };
enum { PLAN_THREADS = 256 }; /* the plan kernel's one block (its scan is sized by it) */
/* moe_route_wide_kernel: its block size, and the most tokens and pairs
 * (n*K) it is used for (each block counts every pair; its shared memory
 * holds them: 4*(pairs + 4E + 2W) bytes, under 48 KiB) */
enum { ROUTE_WIDE_THREADS = 256, ROUTE_WIDE_TOKENS = 256, ROUTE_WIDE_PAIRS = 2048 };
/* Trace points (XFER_MOE_TRACE=1): per round, each kernel's first start and
 * last end on the GPU's global timer, in launch order; KT_ROUND holds the
 * round number (the slot is round % XFER_MOE_CUDA_TRACE_ROUNDS). */
enum { KT_ROUTE, KT_WAIT_SEND, KT_PACK, KT_WAIT_RECV, KT_PLAN, KT_SHUFFLE, KT_WAIT_CSEND, KT_CSEND,
       KT_WAIT_CRECV, KT_CRECV, KT_ROUND, KT_N };

struct moe_dev {
	uint32_t W, me, E, L, K, H, T, db, scales, P, O, layout, cap, align;
	uint32_t RV, RB, PB, SB, MB, CB, G; /* G: scale groups per token (H/128) */
	uint32_t n_remote;
	uint32_t comb_send_rows; /* rows the combine send buffer holds */
	uint32_t trace; /* 1: the kernels stamp o_trace (XFER_MOE_TRACE=1) */
	uint32_t sys;   /* 1: same-host flags need system scope (see fence_peers) */
	uint64_t timeout_ns;
	uint8_t *arena;
	uint8_t *send, *recv, *comb_send, *comb_recv;
	struct xfer_moe_ctl *ctl; /* device address of the pinned control words */
	uint32_t *rv_host, *rtab_host;
	/* arena offsets (bytes) */
	uint64_t o_round, o_failed, o_ready, o_cons, o_comb, o_cnt, o_route, o_trace;
	uint64_t o_rec, o_lead, o_q, o_j, o_pb, o_tcomb;
	uint64_t o_c, o_pr, o_cb, o_first, o_ovf, o_ntok, o_recpref, o_recsrc, o_qstart, o_qsrc;
	uint64_t o_counts, o_offsets, o_base, o_misc, o_qrow;
	uint64_t o_peer_arena, o_peer_send, o_peer_comb, o_same, o_wait, o_wait_rank;
	uint32_t wait_n[WP_N]; /* flags of each wait point (the lists hold W+1 each) */
};

#define ARENA(d, T, off) ((T *)((d).arena + (d).off))

/*
 * 32-bit flag loads and stores of a given ordering and scope, one PTX
 * instruction each, made by the two macros below: ld_acquire_sys,
 * ld_acquire_gpu, ld_relaxed_sys, st_release_sys, st_release_gpu,
 * st_relaxed_sys (the only ones used). The memory clobber keeps the
 * compiler from moving other accesses across them.
 */
#define MOE_FLAG_LOAD(sem, scope)                                                                  \
	__device__ __forceinline__ uint32_t ld_##sem##_##scope(const volatile uint32_t *p)         \
	{                                                                                          \
		uint32_t v;                                                                        \
		asm volatile("ld." #sem "." #scope ".global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); \
		return v;                                                                          \
	}
#define MOE_FLAG_STORE(sem, scope)                                                                 \
	__device__ __forceinline__ void st_##sem##_##scope(volatile uint32_t *p, uint32_t v)       \
	{                                                                                          \
		asm volatile("st." #sem "." #scope ".global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); \
	}
MOE_FLAG_LOAD(acquire, sys)
MOE_FLAG_LOAD(acquire, gpu)
MOE_FLAG_LOAD(relaxed, sys)
MOE_FLAG_STORE(release, sys)
MOE_FLAG_STORE(release, gpu)
MOE_FLAG_STORE(relaxed, sys)
#undef MOE_FLAG_LOAD
#undef MOE_FLAG_STORE

__device__ __forceinline__ uint64_t global_ns()
{
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__device__ __forceinline__ bool same_host(const moe_dev &d, uint32_t r)
{
	return ARENA(d, const uint8_t, o_same)[r] != 0;
}

__device__ __forceinline__ uint8_t *peer_arena(const moe_dev &d, uint32_t r)
{
	return (uint8_t *)ARENA(d, const uint64_t, o_peer_arena)[r];
}

/*
 * Memory ordering scopes. Flags for same-host ranks need system scope only
 * when one of them runs on another GPU (or a stream waits on them: the
 * stream's front end is no SM thread); ranks sharing this GPU (processes
 * under MPS, or time-sliced) are all within .gpu scope. d.sys says which
 * (set at connect; XFER_MOE_SYS_FENCES=1 forces system scope). The proxy's
 * control words need a system-scope release only when it then reads what
 * the kernels wrote (remote ranks: route vectors, records, rows); without
 * remote ranks it only follows the rounds, and a relaxed store does.
 * A fence.sc.sys per block was a measurable part of every grid kernel.
 */
__device__ __forceinline__ void fence_peers(const moe_dev &d)
{
	if (d.sys || d.n_remote)
		__threadfence_system();
	else
		__threadfence();
}

__device__ __forceinline__ void st_release_peer(const moe_dev &d, volatile uint32_t *p, uint32_t v)
{
	if (d.sys)
		st_release_sys(p, v);
	else
		st_release_gpu(p, v);
}

/* The acquire that pairs with a flag's release: system scope for the
 * proxy's flags (host = 1: it writes from the CPU) and for peers' when d.sys. */
__device__ __forceinline__ void ld_acquire_flag(const moe_dev &d, const volatile uint32_t *p, bool host)
{
	if (host || d.sys)
		(void)ld_acquire_sys(p);
	else
		(void)ld_acquire_gpu(p);
}

__device__ __forceinline__ void st_ctl(const moe_dev &d, volatile uint32_t *p, uint32_t v)
{
	if (d.n_remote)
		st_release_sys(p, v);
	else
		st_relaxed_sys(p, v);
}

/* First kernel-side error of the module (the proxy reports it). */
__device__ __forceinline__ void kernel_error(const moe_dev &d, uint32_t code, uint32_t info)
{
	if (atomicCAS((unsigned int *)&d.ctl->k_error, 0u, code) == 0u) {
		d.ctl->k_error_info = info;
		__threadfence_system();
	}
}

/* The proxy failed: every kernel of the round hands back nothing. Read from
 * the arena (device memory, an L2 hit), never from ctl->p_error in pinned
 * host memory: every thread of a grid reading a host word is one PCIe read
 * each, and the GPU serves those at ~15 million per second. The first GPU
 * runs showed it: a combine receive of 4,096 blocks x 256 threads took 68 ms,
 * one of 128 blocks 2.1 ms, a combine send of 1,056 blocks 17 ms, the same
 * ~65 ns per thread, while the kernels without that load ran in
 * microseconds. The word is set by the proxy's release hook (every failure
 * calls it) and by a wait kernel that sees ctl->p_error. */
__device__ __forceinline__ bool proxy_failed(const moe_dev &d)
{
	return *ARENA(d, const volatile uint32_t, o_failed) != 0;
}

/* The proxy's own word, in pinned host memory: for one thread that polls. */
__device__ __forceinline__ bool proxy_failed_host(const moe_dev &d)
{
	return ld_acquire_sys((const volatile uint32_t *)&d.ctl->p_error) != 0;
}

__device__ __forceinline__ void trace_at(const moe_dev &d, uint32_t round, uint32_t k, uint32_t end)
{
	if (d.trace)
		ARENA(d, uint64_t, o_trace)[((uint64_t)(round % XFER_MOE_CUDA_TRACE_ROUNDS) * KT_N + k) * 2 + end] =
			global_ns();
}

/* The route kernel opens the round's trace slot (one thread): the stamps of the
 * older round that used the slot out first, then the round number and the
 * route kernel's start, taken when its block began (t_start). */
__device__ __forceinline__ void trace_begin_round(const moe_dev &d, uint32_t round, uint64_t t_start)
{
	if (!d.trace)
		return;
	uint64_t *tr = ARENA(d, uint64_t, o_trace) + (uint64_t)(round % XFER_MOE_CUDA_TRACE_ROUNDS) * KT_N * 2;
	for (uint32_t i = 0; i < 2 * KT_N; i++)
		tr[i] = 0;
	tr[2 * KT_ROUND] = round;
	tr[2 * KT_ROUTE] = t_start;
}

/*
 * Programmatic dependent launch (kernel waits; XFER_MOE_PDL=0: not): pack,
 * shuffle and the combine receive are launched while the kernel before them
 * still runs, and wait here for it (its results visible); the kernel before
 * lets them launch only once it has passed its own wait on another rank, so
 * that no early grid holds SMs that the rank being waited for needs (on one
 * shared GPU that could deadlock until the deadline). Both are no-ops for a
 * kernel launched without the attribute.
 */
__device__ __forceinline__ void pdl_wait()
{
	asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void pdl_let_next_launch()
{
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/* A kernel's start: its block 0 (the scheduler starts blocks in order). */
__device__ __forceinline__ void trace_start(const moe_dev &d, uint32_t round, uint32_t k)
{
	if (d.trace && blockIdx.x == 0 && threadIdx.x == 0)
		trace_at(d, round, k, 0);
}

/* 16-byte copies; src may be another GPU's memory (IPC) or written by a
 * copy engine or a peer during an earlier kernel: read through L2. Four
 * loads in flight per thread before their stores (src and dst may alias as
 * far as the compiler knows, so a plain loop waits out each load). */
__device__ __forceinline__ void copy16(uint8_t *dst, const uint8_t *src, uint32_t bytes)
{
	const uint32_t step = blockDim.x * 16u;
	for (uint32_t o = threadIdx.x * 16u; o < bytes; o += 4 * step) {
		uint4 v[4];
#pragma unroll
		for (int j = 0; j < 4; j++)
			if (o + j * step < bytes)
				v[j] = __ldcg((const uint4 *)(src + o + j * step));
#pragma unroll
		for (int j = 0; j < 4; j++)
			if (o + j * step < bytes)
				*(uint4 *)(dst + o + j * step) = v[j];
	}
}

/* The same from shared memory (a global-space load must not see it). */
__device__ __forceinline__ void copy16_from_smem(uint8_t *dst, const uint8_t *src, uint32_t bytes)
{
	for (uint32_t o = threadIdx.x * 16u; o < bytes; o += blockDim.x * 16u)
		*(uint4 *)(dst + o) = *(const uint4 *)(src + o);
}

/* Signals that the last block of a kernel to reach it does; counters are
 * reset by that block, so that graph replays start from zero. */
__device__ __forceinline__ bool last_block(const moe_dev &d, uint32_t which)
{
	__shared__ bool last;
	__syncthreads();
	if (threadIdx.x == 0) {
		fence_peers(d);
		uint32_t *cnt = ARENA(d, uint32_t, o_cnt) + which;
		last = atomicAdd(cnt, 1u) == gridDim.x - 1;
		if (last) {
			*cnt = 0;
			fence_peers(d);
		}
	}
	__syncthreads();
	return last;
}

#endif
