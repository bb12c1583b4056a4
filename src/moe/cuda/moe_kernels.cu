/*
 * The MoE kernels, one per step of a round; the numbers they compute are
 * those of the C module's reference code (moe_route.c, moe_plan.c,
 * moe_cpu.c), which tests/moe checks against brute force.
 *
 *   route      (1 block)   per-warp histograms in shared memory, in token
 *                          order, give every (token, slot) its record, pair
 *                          ordinals and combine row; the route vector goes to
 *                          the proxy (pinned host) and to same-host ranks
 *   route_wide (a block per token + 1) the same numbers for few tokens
 *                          (decode), from order-free counts (see there)
 *   pack       (a block per token) records into the send buffer, remote
 *                          destinations first (then the proxy may post)
 *   plan       (1 block)   the receiver's plan from every route vector
 *   shuffle    (grid)      records into the expert layout
 *   comb_send  (grid)      remote rows into the combine send buffer, then
 *                          same-host rows straight into their origin's
 *                          combine buffer (IPC)
 *   comb_recv  (a block per token) fp32 sum in slot order, no contraction
 *   wait       (1 warp)    spins on the flags of a wait point, lowers them
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "moe_dev.cuh"
#include "moe_kernels.cuh"

/* ------------------------------------------------------------------ wait */

/* The flags of wait point wp: device addresses (ours or a peer's arena,
 * or the proxy's mapped words), d.wait_n[wp] of them; the parallel list at
 * o_wait_rank names the rank each waits for (UINT32_MAX: the proxy). */
__device__ __forceinline__ const uint64_t *wait_list(const moe_dev &d, uint32_t wp)
{
	return ARENA(d, const uint64_t, o_wait) + (uint64_t)wp * (d.W + 1);
}

/* One thread lowers every flag of wp (a wait that left them raised). */
__device__ __forceinline__ void lower_flags(const moe_dev &d, uint32_t wp)
{
	const uint64_t *flags = wait_list(d, wp);
	for (uint32_t f = 0; f < d.wait_n[wp]; f++)
		*(volatile uint32_t *)flags[f] = 0u;
}

/* A wait point, run by one warp (threads 0..31 of a block): spins until
 * each of its flags is 1, then lowers it; the deadline, or the proxy's
 * failure, ends the wait. Its own kernel, or (XFER_MOE_FUSE=1, kernel
 * waits) the end of the route kernel and the start of the plan kernel, a
 * launch fewer each. */
__device__ void wait_flags(const moe_dev &d, uint32_t wp, uint32_t round, bool lower = true, bool stamp = true)
{
	const uint64_t *flags = wait_list(d, wp);
	const uint32_t *ranks = ARENA(d, const uint32_t, o_wait_rank) + (uint64_t)wp * (d.W + 1);
	const uint32_t kt = wp == WP_SEND ? KT_WAIT_SEND : wp == WP_RECV ? KT_WAIT_RECV
			    : wp == WP_CSEND ? KT_WAIT_CSEND : KT_WAIT_CRECV;
	if (threadIdx.x == 0 && stamp)
		trace_at(d, round, kt, 0);
	uint64_t t0 = global_ns();
	for (uint32_t f = threadIdx.x; f < d.wait_n[wp]; f += 32) {
		volatile uint32_t *p = (volatile uint32_t *)flags[f];
		/* The proxy's flag waits on counters that name the rank that did not
		 * deliver, with the same deadline: a grace, so that their error,
		 * which says more, is the one reported. */
		uint64_t limit = d.timeout_ns + (ranks[f] == UINT32_MAX ? 1000000000ull : 0ull);
		/* spin on relaxed loads, then one acquire of the scope the flag's
		 * writer released at (the proxy's: system; peers': d.sys) */
		const bool host = ranks[f] == UINT32_MAX;
		for (uint32_t spin = 0; ld_relaxed_sys(p) != 1u; spin++) {
			/* the proxy's word is in host memory: looked at now and then */
			if ((spin & 63u) == 63u && proxy_failed_host(d)) {
				*ARENA(d, volatile uint32_t, o_failed) = 1u;
				break;
			}
			if (proxy_failed(d))
				break;
			if (global_ns() - t0 > limit) {
				kernel_error(d, XFER_MOE_KERR_TIMEOUT, ranks[f]);
				break;
			}
			__nanosleep(64);
		}
		ld_acquire_flag(d, p, host);
		if (lower) /* else the grid's last block lowers them (moe_route_pack_kernel) */
			*p = 0u;
	}
	__syncwarp();
	if (threadIdx.x == 0) {
		__threadfence(); /* what the flags announced, before the block goes on */
		if (stamp)
			trace_at(d, round, kt, 1);
	}
	pdl_let_next_launch(); /* the wait is over: the next kernel may launch */
}

__global__ void moe_wait_kernel(moe_dev d, uint32_t wp)
{
	wait_flags(d, wp, *ARENA(d, const uint32_t, o_round));
}

__global__ void moe_stamp_kernel(uint64_t *dst)
{
	*dst = global_ns();
}

/* ----------------------------------------------------------------- route */

__device__ __forceinline__ int64_t load_idx(const void *idx, int idx_bytes, uint64_t i)
{
	return idx_bytes == 8 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

/* One slot of the route kernel between its passes: the record number
 * local to (warp, rank) or -1, the expert, the expert ordinal and pair base
 * local to the warp, and the slot's rank among the token's pairs there. */
struct slot_v {
	int32_t r;
	uint32_t e, j, pb, q;
};
enum { ROUTE_CACHE = 4 }; /* tokens per warp kept in registers between passes (decode: 128 tokens, 32 warps) */

/* The lanes whose keys equal this lane's, for two keys at once: what
 * __match_any_sync gives, from K shuffles each. Only lanes < K can match
 * another (the others carry keys of their own); match.any cost the route
 * kernel 21 us for 128 tokens and 426 us for 4,096 (32 warps of one block
 * issue it, and its cost grows with the number of distinct keys: here
 * 25-32). */
__device__ __forceinline__ void match_slots(uint32_t ka, uint32_t kb, uint32_t K, uint32_t lane, uint32_t *ma,
					    uint32_t *mb)
{
	uint32_t a = 1u << lane, b = 1u << lane;
	for (uint32_t j = 0; j < K; j++) {
		uint32_t ja = __shfl_sync(0xffffffffu, ka, j), jb = __shfl_sync(0xffffffffu, kb, j);
		a |= (uint32_t)(ja == ka) << j;
		b |= (uint32_t)(jb == kb) << j;
	}
	*ma = a;
	*mb = b;
}

/* Pass 1 for token t (warp-collective; lane k is slot k): the warp's
 * histograms in shared memory, and the slot's pass-1 numbers in the arena
 * (pack reads the lead flags; the uncached pass 3 the rest). */
__device__ __forceinline__ slot_v route_slot(const moe_dev &d, uint32_t *sm, uint32_t w, uint32_t lane,
					     uint32_t t, int64_t e64)
{
	const uint32_t E = d.E, W = d.W, K = d.K, L = d.L, NW = blockDim.x / 32;
	uint32_t *he = sm, *hr = he + NW * E, *hp = hr + NW * W;
	const uint32_t lt = (1u << lane) - 1u;
	bool valid = e64 >= 0 && e64 < (int64_t)E;
	uint32_t e = valid ? (uint32_t)e64 : 0u, dd = valid ? e / L : 0u;
	uint32_t peers_e, peers_d;
	match_slots(valid ? e : (0x80000000u | lane), valid ? dd : (0x80000000u | lane), K, lane, &peers_e,
		    &peers_d);
	uint32_t lead_e = __ffs(peers_e) - 1;
	uint32_t lead_d = __ffs(peers_d) - 1;
	uint32_t be = valid && lane == lead_e ? he[w * E + e] : 0u;
	uint32_t br = valid && lane == lead_d ? hr[w * W + dd] : 0u;
	uint32_t bp = valid && lane == lead_d ? hp[w * W + dd] : 0u;
	be = __shfl_sync(0xffffffffu, be, lead_e);
	br = __shfl_sync(0xffffffffu, br, lead_d);
	bp = __shfl_sync(0xffffffffu, bp, lead_d);
	__syncwarp();
	if (valid && lane == lead_e)
		he[w * E + e] += __popc(peers_e);
	if (valid && lane == lead_d) {
		hr[w * W + dd] += 1u;
		hp[w * W + dd] += __popc(peers_d);
	}
	__syncwarp();
	slot_v x;
	x.r = valid ? (int32_t)br : -1;
	x.e = e;
	x.j = be + __popc(peers_e & lt);
	x.pb = bp;
	x.q = (uint8_t)__popc(peers_d & lt);
	if (lane < K) {
		uint64_t s = (uint64_t)t * K + lane;
		ARENA(d, int32_t, o_rec)[s] = x.r; /* local to (warp, rank) until pass 3 */
		ARENA(d, uint8_t, o_lead)[s] = valid && lane == lead_d;
		ARENA(d, uint8_t, o_q)[s] = (uint8_t)x.q;
		ARENA(d, uint32_t, o_j)[s] = x.j;
		ARENA(d, uint32_t, o_pb)[s] = x.pb;
	}
	return x;
}

/* Slot s's pass-1 numbers, back from the arena (the uncached path). */
__device__ __forceinline__ slot_v route_load(const moe_dev &d, const void *idx, int idx_bytes, uint64_t s)
{
	slot_v x;
	x.r = ARENA(d, const int32_t, o_rec)[s];
	x.e = (uint32_t)load_idx(idx, idx_bytes, s); /* unused when x.r < 0 (no dependent load) */
	x.j = ARENA(d, const uint32_t, o_j)[s];
	x.pb = ARENA(d, const uint32_t, o_pb)[s];
	x.q = ARENA(d, const uint8_t, o_q)[s];
	return x;
}

/* Pass 3 for slot s: the global numbers from the warps' prefixes. */
__device__ __forceinline__ void route_finish(const moe_dev &d, const uint32_t *sm, uint32_t w, uint64_t s,
					     const slot_v &x)
{
	const uint32_t E = d.E, W = d.W, L = d.L, NW = blockDim.x / 32;
	const uint32_t *he = sm, *hr = he + NW * E, *hp = hr + NW * W;
	const uint32_t *tot_e = hp + NW * W, *tot_r = tot_e + E, *tot_p = tot_r + W;
	const uint32_t *so = tot_p + W, *cbo = so + W;
	if (x.r < 0) {
		ARENA(d, int32_t, o_tcomb)[s] = -1;
		return;
	}
	uint32_t dd = x.e / L;
	uint32_t pb = hp[w * W + dd] + x.pb;
	ARENA(d, int32_t, o_rec)[s] = (int32_t)(so[dd] + hr[w * W + dd] + (uint32_t)x.r);
	ARENA(d, uint32_t, o_pb)[s] = pb;
	ARENA(d, uint32_t, o_j)[s] = he[w * E + x.e] + x.j;
	ARENA(d, int32_t, o_tcomb)[s] = (int32_t)(cbo[dd] + pb + x.q);
}

/*
 * The route vector of the round (moe_format.h's layout: pairs per expert,
 * records and pairs per rank, the round's stamp, the token count), written
 * by the block that holds the totals to every place a reader looks: the
 * proxy's pinned host copy (with remote ranks; it scatters it) and each
 * same-host rank's route table (IPC), in the slot of this round's parity.
 * Ours is among them (we are a same-host rank of ourselves): the plan
 * kernel reads every same-host source, this rank included, from its own
 * table (remote ones from the host copy the proxy received). Block-
 * collective; both route kernels end their counting with it.
 */
__device__ __forceinline__ void publish_route_vector(const moe_dev &d, uint32_t round, uint32_t n,
						     const uint32_t *per_expert, const uint32_t *rank_records,
						     const uint32_t *rank_pairs)
{
	const uint32_t E = d.E, W = d.W, RV = d.RV, par = round & 1u;
	for (uint32_t dst = 0; dst <= W; dst++) {
		uint32_t *out;
		if (dst == W) {
			if (!d.n_remote)
				continue;
			out = d.rv_host + (uint64_t)par * RV;
		} else {
			if (!same_host(d, dst))
				continue;
			out = (uint32_t *)(peer_arena(d, dst) + d.o_route) + ((uint64_t)par * W + d.me) * RV;
		}
		for (uint32_t i = threadIdx.x; i < RV; i += blockDim.x)
			out[i] = i < E ? per_expert[i] : i < E + W ? rank_records[i - E]
				: i < E + 2 * W ? rank_pairs[i - E - W] : i == moe_rv_stamp(E, W) ? round
				: i == moe_rv_ntok(E, W) ? n : 0u;
	}
}

/* Up to 32 warps: 64 registers a thread at most (the slot cache must not
 * make a 1,024-thread launch fail). */
__global__ void __launch_bounds__(1024) moe_route_kernel(moe_dev d, uint32_t n, const void *idx, int idx_bytes,
							 uint32_t wait_after)
{
	extern __shared__ uint32_t sm[];
	const uint32_t NW = blockDim.x / 32, w = threadIdx.x / 32, lane = threadIdx.x % 32;
	const uint32_t E = d.E, W = d.W, K = d.K, tid = threadIdx.x, bd = blockDim.x;
	uint32_t *he = sm, *hr = he + NW * E, *hp = hr + NW * W;
	uint32_t *tot_e = hp + NW * W, *tot_r = tot_e + E, *tot_p = tot_r + W;
	uint32_t *so = tot_p + W, *cbo = so + W;
	__shared__ uint32_t s_round;
	uint64_t t_start = global_ns();
	for (uint32_t i = tid; i < NW * (E + 2 * W); i += bd)
		sm[i] = 0;
	if (tid == 0) {
		uint32_t *rp = ARENA(d, uint32_t, o_round);
		s_round = *rp + 1;
		*rp = s_round;
		trace_begin_round(d, s_round, t_start);
	}
	__syncthreads();
	const uint32_t round = s_round;
	const uint32_t per = (n + NW - 1) / NW, t0 = min(n, w * per), t1 = min(n, t0 + per);
	/* Pass 1: each warp walks its tokens in order; lane k is slot k. With
	 * at most ROUTE_CACHE tokens per warp (decode) every token's indices are
	 * loaded at once and each slot's numbers stay in registers for pass 3;
	 * else one token at a time, through the arena. */
	struct slot_v v[ROUTE_CACHE];
	const bool cached = per <= ROUTE_CACHE;
	if (cached) {
		int64_t ev[ROUTE_CACHE];
#pragma unroll
		for (uint32_t i = 0; i < ROUTE_CACHE; i++)
			ev[i] = t0 + i < t1 && lane < K ? load_idx(idx, idx_bytes, (uint64_t)(t0 + i) * K + lane) : -1;
#pragma unroll
		for (uint32_t i = 0; i < ROUTE_CACHE; i++)
			if (t0 + i < t1)
				v[i] = route_slot(d, sm, w, lane, t0 + i, ev[i]);
	} else { /* the next token's indices loaded while this one is counted */
		int64_t nxt = t0 < t1 && lane < K ? load_idx(idx, idx_bytes, (uint64_t)t0 * K + lane) : -1;
		for (uint32_t t = t0; t < t1; t++) {
			int64_t cur = nxt;
			nxt = t + 1 < t1 && lane < K ? load_idx(idx, idx_bytes, (uint64_t)(t + 1) * K + lane) : -1;
			route_slot(d, sm, w, lane, t, cur);
		}
	}
	__syncthreads();
	/* Pass 2: warp histograms become exclusive prefixes (warps hold
	 * consecutive tokens, so token order is kept), totals per expert/rank. */
	for (uint32_t e = tid; e < E; e += bd) {
		uint32_t run = 0;
		for (uint32_t w2 = 0; w2 < NW; w2++) {
			uint32_t v = he[w2 * E + e];
			he[w2 * E + e] = run;
			run += v;
		}
		tot_e[e] = run;
	}
	for (uint32_t r = tid; r < W; r += bd) {
		uint32_t run_r = 0, run_p = 0;
		for (uint32_t w2 = 0; w2 < NW; w2++) {
			uint32_t vr = hr[w2 * W + r], vp = hp[w2 * W + r];
			hr[w2 * W + r] = run_r;
			hp[w2 * W + r] = run_p;
			run_r += vr;
			run_p += vp;
		}
		tot_r[r] = run_r;
		tot_p[r] = run_p;
	}
	__syncthreads();
	if (tid == 0) {
		uint32_t a = 0, b = 0;
		for (uint32_t r = 0; r < W; r++) {
			so[r] = a;
			cbo[r] = b;
			a += tot_r[r];
			b += tot_p[r];
		}
	}
	__syncthreads();
	/* Pass 3: global numbers. */
	if (cached) {
#pragma unroll
		for (uint32_t i = 0; i < ROUTE_CACHE; i++)
			if (t0 + i < t1 && lane < K)
				route_finish(d, sm, w, (uint64_t)(t0 + i) * K + lane, v[i]);
	} else if (lane < K) { /* the next slot's numbers loaded before this one's are stored */
		struct slot_v nxt;
		if (t0 < t1)
			nxt = route_load(d, idx, idx_bytes, (uint64_t)t0 * K + lane);
		for (uint32_t t = t0; t < t1; t++) {
			struct slot_v cur = nxt;
			if (t + 1 < t1)
				nxt = route_load(d, idx, idx_bytes, (uint64_t)(t + 1) * K + lane);
			route_finish(d, sm, w, (uint64_t)t * K + lane, cur);
		}
	}
	publish_route_vector(d, round, n, tot_e, tot_r, tot_p);
	__syncthreads();
	if (tid == 0) {
		fence_peers(d);
		st_ctl(d, &d.ctl->k_route, round);
		trace_at(d, round, KT_ROUTE, 1);
	}
	if (wait_after < WP_N && tid < 32)
		wait_flags(d, wait_after, round); /* lets the pack kernel launch once it is over */
	else if (wait_after >= WP_N)
		pdl_let_next_launch(); /* the next kernel is the wait kernel: a normal launch */
}

/*
 * The route kernel for few tokens (decode): a block per token, plus block 0
 * for the route vector, instead of one block that walks every token (17-19
 * us for 128 tokens on an H200, run moe3-2: one SM's issue rate). Every
 * block loads all n*K indices into shared memory and counts them per expert
 * with shared atomics, as pairs and as "lead" slots (a token's first slot
 * for a rank: one record each), over all tokens and over the tokens before
 * its own; counts are order-free, so the atomics give the same numbers as
 * the walk in token order. A rank's records and pairs are sums over its
 * experts, so the numbers of moe_route_kernel follow without a scan across
 * blocks: for slot k of token t going to expert e of rank dd,
 *   rec   = sum of lead(all tokens) over experts of ranks < dd + lead(before t) of dd's experts
 *   pb    = pairs(before t) of dd's experts;  q = earlier slots of t to dd
 *   j     = pairs(before t) of e + earlier slots of t to e
 *   tcomb = pairs(all tokens) over experts of ranks < dd + pb + q
 * The redundant counting is n*K atomics per block: used while n*K is small.
 * The last block to finish bumps the round, tells the proxy and runs the
 * fused send wait.
 */
/* The wide route's work for block b: returns the round; token blocks
 * (b > 0) leave their token's slots in tok (for the fused pack) and in the
 * arena. sm: 4*(n*K + 4E + 2W) bytes. */
struct tok_route {
	int32_t rec[XFER_MOE_TOPK_MAX];
	uint32_t e[XFER_MOE_TOPK_MAX], j[XFER_MOE_TOPK_MAX], pb[XFER_MOE_TOPK_MAX];
	uint8_t lead[XFER_MOE_TOPK_MAX];
};

__device__ uint32_t route_wide(const moe_dev &d, uint32_t n, const void *idx, int idx_bytes, uint32_t *sm,
			       tok_route &tok)
{
	const uint32_t E = d.E, W = d.W, K = d.K, L = d.L, tid = threadIdx.x, bd = blockDim.x;
	const uint32_t NW = bd / 32, w = tid / 32, lane = tid % 32, b = blockIdx.x, NP = n * K;
	int32_t *s_x = (int32_t *)sm; /* [n*K]: the expert, -1 for an empty slot */
	uint32_t *c_all = sm + NP, *l_all = c_all + E, *c_bef = l_all + E, *l_bef = c_bef + E;
	uint32_t *r_rec = l_bef + E, *r_pair = r_rec + W; /* block 0: per rank */
	__shared__ uint32_t s_round;
	const uint64_t t_start = global_ns();
	if (tid == 0)
		s_round = *ARENA(d, const uint32_t, o_round) + 1; /* the last block stores it */
	for (uint32_t i = tid; i < NP; i += bd) {
		int64_t e = load_idx(idx, idx_bytes, i);
		s_x[i] = e >= 0 && e < (int64_t)E ? (int32_t)e : -1;
	}
	for (uint32_t i = tid; i < 4 * E; i += bd)
		c_all[i] = 0;
	__syncthreads();
	const uint32_t round = s_round;
	if (b == 0 && tid == 0)
		trace_begin_round(d, round, t_start);
	const uint32_t t = b - 1; /* this block's token (b > 0) */
	for (uint32_t i = tid; i < NP; i += bd) {
		const int32_t e = s_x[i];
		if (e < 0)
			continue;
		const uint32_t tt = i / K, k = i - tt * K, dd = (uint32_t)e / L;
		bool lead = true;
		for (uint32_t k2 = 0; k2 < k; k2++) {
			const int32_t e2 = s_x[tt * K + k2];
			if (e2 >= 0 && (uint32_t)e2 / L == dd) {
				lead = false;
				break;
			}
		}
		atomicAdd(&c_all[e], 1u);
		if (lead)
			atomicAdd(&l_all[e], 1u);
		if (b > 0 && tt < t) {
			atomicAdd(&c_bef[e], 1u);
			if (lead)
				atomicAdd(&l_bef[e], 1u);
		}
	}
	__syncthreads();
	if (b > 0) {
		/* a warp per slot of token t */
		for (uint32_t k = w; k < K; k += NW) {
			const uint64_t s = (uint64_t)t * K + k;
			const int32_t e = s_x[s];
			if (e < 0) { /* as the walk leaves an empty slot */
				if (lane == 0) {
					tok.rec[k] = -1;
					tok.e[k] = 0;
					tok.lead[k] = 0;
					tok.j[k] = tok.pb[k] = 0;
					ARENA(d, int32_t, o_rec)[s] = -1;
					ARENA(d, uint8_t, o_lead)[s] = 0;
					ARENA(d, uint8_t, o_q)[s] = 0;
					ARENA(d, uint32_t, o_j)[s] = 0;
					ARENA(d, uint32_t, o_pb)[s] = 0;
					ARENA(d, int32_t, o_tcomb)[s] = -1;
				}
				continue;
			}
			const uint32_t dd = (uint32_t)e / L, lo = dd * L;
			uint32_t so = 0, cbo = 0, br = 0, bp = 0;
			for (uint32_t x = lane; x < lo; x += 32) {
				so += l_all[x];
				cbo += c_all[x];
			}
			for (uint32_t x = lo + lane; x < lo + L; x += 32) {
				br += l_bef[x];
				bp += c_bef[x];
			}
#pragma unroll
			for (int off = 16; off; off >>= 1) {
				so += __shfl_xor_sync(0xffffffffu, so, off);
				cbo += __shfl_xor_sync(0xffffffffu, cbo, off);
				br += __shfl_xor_sync(0xffffffffu, br, off);
				bp += __shfl_xor_sync(0xffffffffu, bp, off);
			}
			if (lane == 0) {
				uint32_t q = 0, jj = 0;
				for (uint32_t k2 = 0; k2 < k; k2++) {
					const int32_t e2 = s_x[(uint64_t)t * K + k2];
					if (e2 < 0)
						continue;
					q += (uint32_t)e2 / L == dd;
					jj += e2 == e;
				}
				const uint32_t j = c_bef[e] + jj;
				tok.rec[k] = (int32_t)(so + br);
				tok.e[k] = (uint32_t)e;
				tok.lead[k] = q == 0;
				tok.j[k] = j;
				tok.pb[k] = bp;
				ARENA(d, int32_t, o_rec)[s] = (int32_t)(so + br);
				ARENA(d, uint8_t, o_lead)[s] = q == 0;
				ARENA(d, uint8_t, o_q)[s] = (uint8_t)q;
				ARENA(d, uint32_t, o_j)[s] = j;
				ARENA(d, uint32_t, o_pb)[s] = bp;
				ARENA(d, int32_t, o_tcomb)[s] = (int32_t)(cbo + bp + q);
			}
		}
	} else {
		/* the route vector: ours, the proxy's (pinned host), same-host ranks' */
		for (uint32_t r = w; r < W; r += NW) {
			uint32_t rr = 0, rp = 0;
			for (uint32_t x = r * L + lane; x < (r + 1) * L; x += 32) {
				rr += l_all[x];
				rp += c_all[x];
			}
#pragma unroll
			for (int off = 16; off; off >>= 1) {
				rr += __shfl_xor_sync(0xffffffffu, rr, off);
				rp += __shfl_xor_sync(0xffffffffu, rp, off);
			}
			if (lane == 0) {
				r_rec[r] = rr;
				r_pair[r] = rp;
			}
		}
		__syncthreads();
		publish_route_vector(d, round, n, c_all, r_rec, r_pair);
	}
	__syncthreads(); /* tok complete */
	return round;
}

/* The last block's part: the round is stored, the proxy told. */
__device__ __forceinline__ void route_wide_done(const moe_dev &d, uint32_t round)
{
	if (threadIdx.x == 0) {
		*ARENA(d, uint32_t, o_round) = round;
		fence_peers(d);
		st_ctl(d, &d.ctl->k_route, round);
		trace_at(d, round, KT_ROUTE, 1);
	}
	__syncthreads();
}

__global__ void __launch_bounds__(ROUTE_WIDE_THREADS) moe_route_wide_kernel(moe_dev d, uint32_t n, const void *idx,
									    int idx_bytes, uint32_t wait_after)
{
	extern __shared__ uint32_t sm[];
	__shared__ tok_route tok;
	const uint32_t round = route_wide(d, n, idx, idx_bytes, sm, tok);
	if (!last_block(d, CNT_ROUTE))
		return;
	route_wide_done(d, round);
	if (wait_after < WP_N && threadIdx.x < 32)
		wait_flags(d, wait_after, round); /* lets the pack kernel launch once it is over */
	else if (wait_after >= WP_N)
		pdl_let_next_launch();
}

/* ------------------------------------------------------------------ pack */

/* Stages token t's payload (and scales) in shared memory: as given, or
 * quantized from bf16 to fp8 e4m3 with one scale per 128 channels
 * (amax / 448, as the torch reference: x / scale, round to nearest). */
__device__ void stage_token(const moe_dev &d, uint8_t *buf, uint32_t t, const uint8_t *x,
			    const float *xs, int quant)
{
	if (!quant) {
		copy16(buf, x + (uint64_t)t * d.H * d.db, d.H * d.db);
		if (d.SB)
			for (uint32_t g = threadIdx.x; g < d.G; g += blockDim.x)
				((float *)(buf + d.PB))[g] = xs[(uint64_t)t * d.G + g];
		return;
	}
	const __nv_bfloat16 *row = (const __nv_bfloat16 *)x + (uint64_t)t * d.H;
	const uint32_t chunks = d.H / 8, lim = (chunks + 31u) & ~31u;
	for (uint32_t c = threadIdx.x; c < lim; c += blockDim.x) {
		float v[8], amax = 0.0f;
		bool in = c < chunks;
		if (in) {
			uint4 raw = *(const uint4 *)(row + (uint64_t)c * 8);
			const __nv_bfloat16 *b = (const __nv_bfloat16 *)&raw;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				v[i] = __bfloat162float(b[i]);
				amax = fmaxf(amax, fabsf(v[i]));
			}
		}
		/* 16 chunks of 8 channels make a group of 128 */
#pragma unroll
		for (int off = 8; off; off >>= 1)
			amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
		if (!in)
			continue;
		float scale = fmaxf(amax, 1e-4f) / 448.0f;
		uint8_t q[8];
#pragma unroll
		for (int i = 0; i < 8; i += 2) {
			__nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(
				make_float2(__fdiv_rn(v[i], scale), __fdiv_rn(v[i + 1], scale)), __NV_SATFINITE, __NV_E4M3);
			q[i] = (uint8_t)(p & 0xff);
			q[i + 1] = (uint8_t)(p >> 8);
		}
		*(uint2 *)(buf + (uint64_t)c * 8) = *(const uint2 *)q;
		if (c % 16 == 0)
			((float *)(buf + d.PB))[c / 16] = scale;
	}
}

/* Our records of the round are in the send buffer: every same-host rank
 * may read them (one thread). */
__device__ __forceinline__ void raise_ready(const moe_dev &d, uint32_t round)
{
	for (uint32_t r = 0; r < d.W; r++)
		if (r != d.me && same_host(d, r))
			st_release_peer(d, (uint32_t *)(peer_arena(d, r) + d.o_ready) + d.me, 1u);
	trace_at(d, round, KT_PACK, 1);
}

/* Token t's records of one pass into the send buffer (pass 0: remote
 * destinations, 1: same-host), from its routing in shared memory and its
 * staged payload in buf; block-collective. */
__device__ void pack_records(const moe_dev &d, uint32_t t, uint32_t n, const uint8_t *buf, const int32_t *s_rec,
			     const uint8_t *s_lead, const uint32_t *s_e, const uint32_t *s_j, const uint32_t *s_pb,
			     uint32_t round, uint32_t *s_meta, int pass)
{
	const uint32_t K = d.K, L = d.L;
	for (uint32_t k = 0; t < n && k < K; k++) {
		if (!s_lead[k])
			continue;
		uint32_t dd = s_e[k] / L;
		if (same_host(d, dd) == (pass == 0))
			continue;
		uint8_t *rec = d.send + (uint64_t)s_rec[k] * d.RB;
		copy16_from_smem(rec, buf, d.PB + d.SB);
		if (threadIdx.x == 0) {
			uint32_t np = 0;
			for (uint32_t k2 = k; k2 < K; k2++) {
				if (s_rec[k2] != s_rec[k])
					continue;
				s_meta[4 + 2 * np] = k2 | ((s_e[k2] - dd * L) << 16);
				s_meta[5 + 2 * np] = s_j[k2];
				np++;
			}
			s_meta[0] = t;
			s_meta[1] = np;
			s_meta[2] = s_pb[k];
			s_meta[3] = round;
		}
		__syncthreads();
		uint32_t *meta = (uint32_t *)(rec + d.PB + d.SB);
		for (uint32_t i = threadIdx.x; i < 4 + 2 * s_meta[1]; i += blockDim.x)
			meta[i] = s_meta[i];
		__syncthreads();
	}
}

__global__ void __launch_bounds__(1024) moe_pack_kernel(moe_dev d, uint32_t n, const uint8_t *x, const float *xs, int quant,
				const void *idx, int idx_bytes)
{
	extern __shared__ uint4 smem4[];
	uint8_t *buf = (uint8_t *)smem4;
	__shared__ uint32_t s_meta[4 + 2 * XFER_MOE_TOPK_MAX];
	/* the token's routing, loaded once by K threads: thread 0's record
	 * headers then need no chain of dependent global loads */
	__shared__ int32_t s_rec[XFER_MOE_TOPK_MAX];
	__shared__ uint32_t s_e[XFER_MOE_TOPK_MAX], s_j[XFER_MOE_TOPK_MAX], s_pb[XFER_MOE_TOPK_MAX];
	__shared__ uint8_t s_lead[XFER_MOE_TOPK_MAX];
	const uint32_t t = blockIdx.x, K = d.K;
	pdl_wait();
	const uint32_t round = *ARENA(d, const uint32_t, o_round);
	trace_start(d, round, KT_PACK);
	if (t < n && threadIdx.x < K) {
		uint64_t s = (uint64_t)t * K + threadIdx.x;
		int32_t r = ARENA(d, const int32_t, o_rec)[s];
		s_rec[threadIdx.x] = r;
		s_lead[threadIdx.x] = ARENA(d, const uint8_t, o_lead)[s];
		s_e[threadIdx.x] = (uint32_t)load_idx(idx, idx_bytes, s); /* used only where r >= 0 */
		s_j[threadIdx.x] = ARENA(d, const uint32_t, o_j)[s];
		s_pb[threadIdx.x] = ARENA(d, const uint32_t, o_pb)[s];
	}
	if (t < n)
		stage_token(d, buf, t, x, xs, quant);
	__syncthreads();
	for (int pass = 0; pass < 2; pass++) { /* remote destinations first */
		pack_records(d, t, n, buf, s_rec, s_lead, s_e, s_j, s_pb, round, s_meta, pass);
		/* the proxy posts the remote ones (it looks only with remote ranks) */
		if (pass == 0 && d.n_remote && last_block(d, CNT_PACK_REMOTE) && threadIdx.x == 0)
			st_release_sys(&d.ctl->k_packed, round);
	}
	if (last_block(d, CNT_PACK_ALL) && threadIdx.x == 0)
		raise_ready(d, round);
}

/*
 * Route and pack in one kernel (few tokens, kernel waits, no remote ranks:
 * the default for decode on one host): a block per token as in
 * moe_route_wide_kernel, which then stages and writes its token's records
 * itself: a launch, its gap and the pack's reloads of the routing fewer.
 * The send wait (our records of the round before read by every same-host
 * rank) is each block's before it writes the send buffer; the flags are
 * lowered by the last block, before it raises the ready flags (so no peer
 * can raise them again for the next round before they are lowered). Trace:
 * route ends and the wait is stamped when block 0 passes them.
 */
__global__ void __launch_bounds__(1024) moe_route_pack_kernel(moe_dev d, uint32_t n, const uint8_t *x,
							     const float *xs, int quant, const void *idx,
							     int idx_bytes)
{
	extern __shared__ uint4 smem4[];
	uint8_t *buf = (uint8_t *)smem4;                            /* the token, d.PB + d.SB bytes */
	uint32_t *sm = (uint32_t *)(buf + ((d.PB + d.SB + 15u) & ~15u)); /* route_wide's counts */
	__shared__ tok_route tok;
	__shared__ uint32_t s_meta[4 + 2 * XFER_MOE_TOPK_MAX];
	const uint32_t b = blockIdx.x, t = b - 1;
	const uint32_t round = route_wide(d, n, idx, idx_bytes, sm, tok);
	if (b == 0 && threadIdx.x == 0)
		trace_at(d, round, KT_ROUTE, 1);
	if (b > 0 && t < n)
		stage_token(d, buf, t, x, xs, quant);
	if (threadIdx.x < 32)
		wait_flags(d, WP_SEND, round, false, b == 0);
	__syncthreads();
	if (b == 0 && threadIdx.x == 0)
		trace_at(d, round, KT_PACK, 0);
	if (b > 0)
		for (int pass = 0; pass < 2; pass++)
			pack_records(d, t, n, buf, tok.rec, tok.lead, tok.e, tok.j, tok.pb, round, s_meta, pass);
	if (!last_block(d, CNT_ROUTE))
		return;
	if (threadIdx.x == 0) {
		lower_flags(d, WP_SEND);
		*ARENA(d, uint32_t, o_round) = round;
		fence_peers(d);
		st_ctl(d, &d.ctl->k_route, round);
		raise_ready(d, round);
	}
}

/* ------------------------------------------------------------------ plan */

__device__ __forceinline__ const uint32_t *row_of(const moe_dev &d, uint32_t round, uint32_t s)
{
	uint64_t at = ((uint64_t)(round & 1u) * d.W + s) * d.RV;
	return same_host(d, s) ? ARENA(d, const uint32_t, o_route) + at : d.rtab_host + at;
}

__device__ void plan_zero(const moe_dev &d, int32_t *counts, int32_t *offsets)
{
	for (uint32_t e = threadIdx.x; e < d.L; e += blockDim.x) {
		counts[e] = 0;
		if (offsets)
			offsets[e] = 0;
	}
	if (threadIdx.x == 0) {
		uint32_t *misc = ARENA(d, uint32_t, o_misc);
		misc[MISC_REC_TOTAL] = misc[MISC_Q_REMOTE] = misc[MISC_Q_TOTAL] = 0;
		misc[MISC_BAD] = 1;
		if (offsets)
			offsets[d.L] = 0;
	}
}

/*
 * The receiver's plan (moe_plan.c's numbers). Every route-vector word it
 * needs is loaded once, all at the same time, into shared memory (the
 * counts of our experts from every source are E words, E <= 1,024); the
 * rest works there: a dependent chain of global loads per step was 8.5 us.
 */
__global__ void moe_plan_kernel(moe_dev d, int32_t *counts, int32_t *offsets, uint32_t wait_before)
{
	const uint32_t W = d.W, E = d.E, L = d.L, me = d.me, P = d.P, tid = threadIdx.x, bd = blockDim.x;
	const uint32_t round = *ARENA(d, const uint32_t, o_round);
	uint32_t *pc = ARENA(d, uint32_t, o_c), *ppr = ARENA(d, uint32_t, o_pr), *pcb = ARENA(d, uint32_t, o_cb);
	uint64_t *pfirst = ARENA(d, uint64_t, o_first), *povf = ARENA(d, uint64_t, o_ovf);
	uint32_t *pntok = ARENA(d, uint32_t, o_ntok);
	uint32_t *recpref = ARENA(d, uint32_t, o_recpref), *recsrc = ARENA(d, uint32_t, o_recsrc);
	uint32_t *qstart = ARENA(d, uint32_t, o_qstart), *qsrc = ARENA(d, uint32_t, o_qsrc);
	uint32_t *pcounts = ARENA(d, uint32_t, o_counts), *poff = ARENA(d, uint32_t, o_offsets);
	uint32_t *pbase = ARENA(d, uint32_t, o_base), *misc = ARENA(d, uint32_t, o_misc);
	__shared__ uint32_t s_cnt[XFER_MOE_EXPERTS_MAX];   /* [s][e]: source s's pairs for our expert e */
	__shared__ uint32_t s_ecnt[XFER_MOE_EXPERTS_MAX];  /* [e]: our expert e's pairs */
	__shared__ uint32_t s_eoff[XFER_MOE_EXPERTS_MAX + 1];
	__shared__ uint32_t s_pc[XFER_MOE_RANKS_MAX], s_ppr[XFER_MOE_RANKS_MAX];
	__shared__ uint64_t s_scan[PLAN_THREADS];
	__shared__ uint32_t s_bad_e;
	__shared__ int bad;
	if (wait_before < WP_N) {
		if (tid < 32)
			wait_flags(d, wait_before, round);
		__syncthreads();
	}
	pdl_let_next_launch(); /* past any wait on another rank: the shuffle may launch */
	if (tid == 0) {
		trace_at(d, round, KT_PLAN, 0);
		bad = proxy_failed(d) ? 1 : 0;
		s_bad_e = UINT32_MAX;
	}
	/* every load at once: per source its stamp, records and pairs for us
	 * and before us, tokens; per (source, expert of ours) the count */
	for (uint32_t s = tid; s < W; s += bd) {
		const uint32_t *row = row_of(d, round, s);
		uint32_t so = 0, cb = 0;
		for (uint32_t r = 0; r < me; r++) {
			so += __ldcv(row + moe_rv_rec(E, r));
			cb += __ldcv(row + moe_rv_pairs(E, W, r));
		}
		uint32_t stamp = __ldcv(row + moe_rv_stamp(E, W));
		uint32_t c = __ldcv(row + moe_rv_rec(E, me)), pp = __ldcv(row + moe_rv_pairs(E, W, me));
		uint32_t nt = __ldcv(row + moe_rv_ntok(E, W));
		if (stamp != round) {
			kernel_error(d, XFER_MOE_KERR_STALE, s);
			bad = 1;
		}
		s_pc[s] = c;
		s_ppr[s] = pp;
		pc[s] = c;
		ppr[s] = pp;
		pntok[s] = nt;
		pcb[s] = cb;
		pfirst[s] = same_host(d, s) ? (uint64_t)so : (uint64_t)s * P;
	}
	for (uint32_t i = tid; i < W * L; i += bd) {
		uint32_t s = i / L, e = i - s * L;
		s_cnt[i] = __ldcv(row_of(d, round, s) + me * L + e);
	}
	__syncthreads();
	if (bad) {
		plan_zero(d, counts, offsets);
		return;
	}
	for (uint32_t e = tid; e < L; e += bd) {
		uint32_t n = 0;
		for (uint32_t s2 = 0; s2 < W; s2++)
			n += s_cnt[s2 * L + e];
		s_ecnt[e] = n;
		pcounts[e] = n;
	}
	__syncthreads();
	/* Experts' offsets: a block-wide prefix sum, each thread a run of
	 * consecutive experts; the first expert over capacity is the one named
	 * (as one walk in expert order finds it). */
	const uint32_t per = (L + bd - 1) / bd, e0 = min(L, tid * per), e1 = min(L, e0 + per);
	const bool padded = d.layout == XFER_MOE_PADDED;
	uint64_t mine = 0;
	for (uint32_t e = e0; e < e1; e++)
		mine += padded ? 0 : (s_ecnt[e] + d.align - 1) / d.align * d.align;
	s_scan[tid] = mine;
	__syncthreads();
	for (uint32_t o = 1; o < bd; o <<= 1) { /* inclusive scan (Hillis-Steele) */
		uint64_t v = tid >= o ? s_scan[tid - o] : 0;
		__syncthreads();
		s_scan[tid] += v;
		__syncthreads();
	}
	uint64_t off = s_scan[tid] - mine;
	for (uint32_t e = e0; e < e1; e++) {
		uint32_t cnt = s_ecnt[e];
		if (padded) {
			s_eoff[e] = e * d.cap;
			if (cnt > d.cap)
				atomicMin(&s_bad_e, e);
		} else {
			s_eoff[e] = (uint32_t)off;
			off += (cnt + d.align - 1) / d.align * d.align;
			if (off > d.cap)
				atomicMin(&s_bad_e, e);
		}
		poff[e] = s_eoff[e];
	}
	__syncthreads();
	if (tid == 0) {
		/* sources in order: remote ones first (the engine's), then this host's */
		uint64_t ovf = 0, rec = 0, q = 0;
		uint32_t k = 0, q_remote = 0;
		for (int pass = 0; pass < 2; pass++)
			for (uint32_t s = 0; s < W; s++) {
				if (same_host(d, s) == (pass == 0))
					continue;
				uint32_t c = s_pc[s];
				if (pass == 0) {
					povf[s] = (uint64_t)W * P + ovf;
					ovf += c > P ? c - P : 0;
				} else {
					povf[s] = 0;
				}
				recsrc[k] = s;
				recpref[k] = (uint32_t)rec;
				qsrc[k] = s;
				qstart[k] = (uint32_t)q;
				rec += c;
				q += s_ppr[s];
				k++;
				if (pass == 0)
					q_remote = (uint32_t)q;
			}
		recpref[W] = (uint32_t)rec;
		qstart[W] = (uint32_t)q;
		misc[MISC_Q_REMOTE] = d.n_remote ? q_remote : 0;
		if (s_bad_e != UINT32_MAX) {
			kernel_error(d, XFER_MOE_KERR_CAPACITY, me * L + s_bad_e);
			bad = 1;
		}
		s_eoff[L] = padded ? L * d.cap : (uint32_t)s_scan[bd - 1];
		poff[L] = s_eoff[L];
		/* the overflow area; the combine send buffer (only tokens whose top-k
		 * repeat an expert can exceed it) */
		if (ovf > d.O || (d.n_remote ? q_remote : 0) > d.comb_send_rows) {
			kernel_error(d, XFER_MOE_KERR_CAPACITY, 0x80000000u | me); /* a buffer, not an expert */
			bad = 1;
		}
		misc[MISC_REC_TOTAL] = (uint32_t)rec;
		misc[MISC_Q_TOTAL] = (uint32_t)q;
		misc[MISC_BAD] = 0;
	}
	__syncthreads();
	if (bad) {
		plan_zero(d, counts, offsets);
		return;
	}
	for (uint32_t e = tid; e < L; e += bd) {
		uint32_t b = s_eoff[e];
		for (uint32_t s = 0; s < W; s++) {
			pbase[(uint64_t)s * L + e] = b;
			b += s_cnt[s * L + e];
		}
		counts[e] = (int32_t)s_ecnt[e];
		if (offsets)
			offsets[e] = (int32_t)s_eoff[e];
	}
	if (tid == 0 && offsets)
		offsets[L] = (int32_t)s_eoff[L];
	__syncthreads();
	if (tid == 0)
		trace_at(d, round, KT_PLAN, 1);
}

/* --------------------------------------------------------------- shuffle */

/* Largest k with pref[k] <= g (pref has W+1 entries, pref[0] = 0). */
__device__ __forceinline__ uint32_t find_src(const uint32_t *pref, uint32_t W, uint32_t g)
{
	uint32_t lo = 0, hi = W;
	while (hi - lo > 1) {
		uint32_t mid = (lo + hi) / 2;
		if (pref[mid] <= g)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

__global__ void moe_shuffle_kernel(moe_dev d, uint8_t *out_x, float *out_s, int32_t *src_rank,
				   int32_t *src_token)
{
	const uint32_t W = d.W, L = d.L, P = d.P, K = d.K, me = d.me;
	pdl_wait();
	const uint32_t round = *ARENA(d, const uint32_t, o_round);
	const uint32_t *misc = ARENA(d, const uint32_t, o_misc);
	const uint32_t *recpref = ARENA(d, const uint32_t, o_recpref), *recsrc = ARENA(d, const uint32_t, o_recsrc);
	const uint32_t *qstart = ARENA(d, const uint32_t, o_qstart);
	const uint64_t *pfirst = ARENA(d, const uint64_t, o_first), *povf = ARENA(d, const uint64_t, o_ovf);
	const uint32_t *ppr = ARENA(d, const uint32_t, o_pr), *pntok = ARENA(d, const uint32_t, o_ntok);
	const uint32_t *pbase = ARENA(d, const uint32_t, o_base), *poff = ARENA(d, const uint32_t, o_offsets);
	const uint32_t *pcounts = ARENA(d, const uint32_t, o_counts);
	int32_t *qrow = ARENA(d, int32_t, o_qrow);
	__shared__ uint32_t meta[4 + 2 * XFER_MOE_TOPK_MAX];
	__shared__ uint64_t s_row[XFER_MOE_TOPK_MAX];
	__shared__ int ok;
	trace_start(d, round, KT_SHUFFLE);
	const uint32_t total = misc[MISC_BAD] ? 0 : misc[MISC_REC_TOTAL];
	for (uint32_t g = blockIdx.x; g < total; g += gridDim.x) {
		uint32_t k = find_src(recpref, W, g), s = recsrc[k], q = g - recpref[k];
		const uint8_t *rec;
		if (same_host(d, s))
			rec = (const uint8_t *)ARENA(d, const uint64_t, o_peer_send)[s] + (pfirst[s] + q) * d.RB;
		else if (q < P)
			rec = d.recv + (pfirst[s] + q) * d.RB;
		else
			rec = d.recv + (povf[s] + q - P) * d.RB;
		/* a record from another rank is untrusted: every index in it must
		 * fall within what its route vector announced. Its header words are
		 * loaded at once (a thread each); thread 0 checks the header, thread
		 * p pair p. */
		const uint32_t *m = (const uint32_t *)(rec + d.PB + d.SB);
		if (threadIdx.x < 4 + 2 * K)
			meta[threadIdx.x] = __ldcg(m + threadIdx.x);
		__syncthreads();
		const uint32_t np = meta[1];
		bool head = true, pair = true;
		if (threadIdx.x == 0)
			head = meta[3] == round && meta[0] < pntok[s] && np >= 1 && np <= K && meta[2] <= ppr[s] &&
			       np <= ppr[s] - meta[2];
		if (np <= K && threadIdx.x < np) {
			const uint32_t p = threadIdx.x, ke = meta[4 + 2 * p], j = meta[5 + 2 * p], e = ke >> 16;
			pair = (ke & 0xffffu) < K && e < L;
			if (pair) {
				uint32_t end = s + 1 < W ? pbase[(uint64_t)(s + 1) * L + e] : poff[e] + pcounts[e];
				pair = j < end - pbase[(uint64_t)s * L + e];
				s_row[p] = (uint64_t)pbase[(uint64_t)s * L + e] + j;
			}
		}
		int all_good = __syncthreads_and(head && pair);
		if (threadIdx.x == 0) {
			ok = all_good;
			if (!ok)
				kernel_error(d, XFER_MOE_KERR_STALE, s);
		}
		__syncthreads();
		if (ok) { /* the record read once, written to each of its pairs' rows */
			for (uint32_t o = threadIdx.x * 16u; o < d.PB; o += blockDim.x * 16u) {
				uint4 v = __ldcg((const uint4 *)(rec + o));
				for (uint32_t p = 0; p < np; p++)
					*(uint4 *)(out_x + s_row[p] * d.PB + o) = v;
			}
			for (uint32_t i = threadIdx.x; i < (d.SB ? d.G : 0u); i += blockDim.x) {
				float v = __ldcg((const float *)(rec + d.PB) + i);
				for (uint32_t p = 0; p < np; p++)
					out_s[s_row[p] * d.G + i] = v;
			}
			if (threadIdx.x < np) {
				uint64_t row = s_row[threadIdx.x];
				if (src_rank)
					src_rank[row] = (int32_t)s;
				if (src_token)
					src_token[row] = (int32_t)meta[0];
				qrow[qstart[k] + meta[2] + threadIdx.x] = (int32_t)row;
			}
		}
		__syncthreads();
	}
	if (last_block(d, CNT_SHUFFLE) && threadIdx.x == 0) {
		for (uint32_t r = 0; r < W; r++)
			if (r != me && same_host(d, r))
				st_release_peer(d, (uint32_t *)(peer_arena(d, r) + d.o_cons) + me, 1u);
		st_ctl(d, &d.ctl->k_recv_done, round);
		trace_at(d, round, KT_SHUFFLE, 1);
	}
}

/* --------------------------------------------------------------- combine */

__global__ void moe_comb_send_kernel(moe_dev d, const uint8_t *eo)
{
	const uint32_t W = d.W, me = d.me, rowb = d.H * 2;
	const uint32_t round = *ARENA(d, const uint32_t, o_round);
	const uint32_t *misc = ARENA(d, const uint32_t, o_misc);
	const uint32_t *qstart = ARENA(d, const uint32_t, o_qstart), *qsrc = ARENA(d, const uint32_t, o_qsrc);
	const uint32_t *pcb = ARENA(d, const uint32_t, o_cb);
	const int32_t *qrow = ARENA(d, const int32_t, o_qrow);
	const uint64_t *peer_comb = ARENA(d, const uint64_t, o_peer_comb);
	trace_start(d, round, KT_CSEND);
	bool fine = !misc[MISC_BAD] && !proxy_failed(d);
	uint32_t qr = fine ? misc[MISC_Q_REMOTE] : 0, qt = fine ? misc[MISC_Q_TOTAL] : 0;
	for (uint32_t q = blockIdx.x; q < qr; q += gridDim.x)
		copy16(d.comb_send + (uint64_t)q * d.CB, eo + (uint64_t)qrow[q] * rowb, rowb);
	/* the proxy scatters the remote rows once they are packed; without
	 * remote ranks it only follows the round, and the last block says it
	 * below (one fence and counter a block fewer) */
	if (d.n_remote && last_block(d, CNT_CSEND_REMOTE) && threadIdx.x == 0)
		st_release_sys(&d.ctl->k_comb_packed, round);
	for (uint32_t q = qr + blockIdx.x; q < qt; q += gridDim.x) {
		uint32_t k = find_src(qstart, W, q), s = qsrc[k];
		uint8_t *dst = (uint8_t *)peer_comb[s] + (uint64_t)(pcb[s] + q - qstart[k]) * d.CB;
		copy16(dst, eo + (uint64_t)qrow[q] * rowb, rowb);
	}
	if (last_block(d, CNT_CSEND_ALL) && threadIdx.x == 0) {
		for (uint32_t r = 0; r < W; r++)
			if (r != me && same_host(d, r))
				st_release_peer(d, (uint32_t *)(peer_arena(d, r) + d.o_comb) + me, 1u);
		if (!d.n_remote)
			st_ctl(d, &d.ctl->k_comb_packed, round);
		trace_at(d, round, KT_CSEND, 1);
	}
}

__global__ void __launch_bounds__(1024) moe_comb_recv_kernel(moe_dev d, uint32_t n, const float *wts, uint16_t *out)
{
	const uint32_t t = blockIdx.x, K = d.K, H = d.H;
	pdl_wait();
	const uint32_t round = *ARENA(d, const uint32_t, o_round);
	const int32_t *tcomb = ARENA(d, const int32_t, o_tcomb);
	/* the token's rows and weights, loaded once by K threads */
	__shared__ int32_t s_r[XFER_MOE_TOPK_MAX];
	__shared__ float s_w[XFER_MOE_TOPK_MAX];
	trace_start(d, round, KT_CRECV);
	bool failed = proxy_failed(d) || ARENA(d, const uint32_t, o_misc)[MISC_BAD];
	if (t < n && threadIdx.x < K) {
		s_r[threadIdx.x] = failed ? -1 : tcomb[(uint64_t)t * K + threadIdx.x];
		s_w[threadIdx.x] = wts[(uint64_t)t * K + threadIdx.x];
	}
	__syncthreads();
	enum { BATCH = 8 }; /* rows loaded before any is summed: their loads overlap */
	for (uint32_t c = threadIdx.x; t < n && c < H / 8; c += blockDim.x) {
		float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
		for (uint32_t k0 = 0; k0 < K; k0 += BATCH) {
			uint4 raw[BATCH];
#pragma unroll
			for (int b = 0; b < BATCH; b++) {
				uint32_t k = k0 + b;
				int32_t r = k < K ? s_r[k] : -1;
				raw[b] = r < 0 ? make_uint4(0, 0, 0, 0)
					       : __ldcg((const uint4 *)(d.comb_recv + (uint64_t)r * d.CB) + c);
			}
#pragma unroll
			for (int b = 0; b < BATCH; b++) {
				uint32_t k = k0 + b;
				if (k >= K || s_r[k] < 0)
					continue;
				float w = s_w[k];
				const __nv_bfloat16 *y = (const __nv_bfloat16 *)&raw[b];
#pragma unroll
				for (int i = 0; i < 8; i++) /* slot order; one rounding per product and per sum */
					acc[i] = __fadd_rn(acc[i], __fmul_rn(w, __bfloat162float(y[i])));
			}
		}
		__nv_bfloat16 o[8];
#pragma unroll
		for (int i = 0; i < 8; i++)
			o[i] = __float2bfloat16_rn(acc[i]);
		*((uint4 *)(out + (uint64_t)t * H) + c) = *(const uint4 *)o;
	}
	if (last_block(d, CNT_CRECV) && threadIdx.x == 0) {
		st_ctl(d, &d.ctl->k_comb_done, round);
		trace_at(d, round, KT_CRECV, 1);
	}
}
