/*
 * The formats every side of the MoE module agrees on: the route vector, the
 * dispatch record, the immediates. Included by the C module and by the CUDA
 * kernels (src/moe/cuda), so only plain C that C++ also accepts.
 *
 * Route vector of source s (u32 words), written once per round:
 *   [0, E)          pairs (token, slot) of s routed to expert e
 *   [E, E+W)        records (distinct tokens) of s for rank d
 *   [E+W, E+2W)     pairs of s for rank d
 *   E+2W            the round it belongs to (checked by every reader)
 *   E+2W+1          tokens s dispatched this round
 * padded to a multiple of 4 words (16 bytes).
 *
 * Record (one per token and destination rank), record_bytes long:
 *   payload  H*dispatch_bytes, padded to 16
 *   scales   H/128 floats, padded to 16 (fp8 only)
 *   meta     struct moe_meta with npairs used entries, padded to 16
 * A source's records for one rank are consecutive in token order; its pairs
 * for that rank are numbered in (token, slot) order, so that the combine
 * rows it gets back need no index: pair p of s's pairs for rank d lands at
 * row (pairs of s for ranks < d) + p of s's combine receive buffer.
 * Pair j of expert e: s's j-th pair routed to e, in (token, slot) order.
 */
#ifndef XFER_MOE_FORMAT_H
#define XFER_MOE_FORMAT_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOE_HD __host__ __device__ __forceinline__
#else
#define MOE_HD static inline
#endif

#define MOE_ALIGN16(x) (((x) + 15u) & ~15u)

struct moe_pair {
	uint16_t k;      /* top-k slot at the source */
	uint16_t expert; /* expert index local to the destination rank */
	uint32_t j;      /* this pair's ordinal among the source's pairs to that expert */
};

struct moe_meta {
	uint32_t token;     /* token index at the source */
	uint32_t npairs;    /* pairs of this token for this rank, >= 1 */
	uint32_t pair_base; /* ordinal of the first among the source's pairs for this rank */
	uint32_t round;     /* the round it was packed in */
	struct moe_pair pair[1]; /* npairs of them, in slot order (the struct is only a view) */
};

MOE_HD uint32_t moe_meta_bytes(uint32_t topk)
{
	return MOE_ALIGN16(16u + 8u * topk);
}

MOE_HD uint32_t moe_route_words(uint32_t experts, uint32_t world)
{
	return (experts + 2u * world + 2u + 3u) & ~3u;
}

MOE_HD uint32_t moe_rv_rec(uint32_t experts, uint32_t d)
{
	return experts + d;
}

MOE_HD uint32_t moe_rv_pairs(uint32_t experts, uint32_t world, uint32_t d)
{
	return experts + world + d;
}

MOE_HD uint32_t moe_rv_stamp(uint32_t experts, uint32_t world)
{
	return experts + 2u * world;
}

MOE_HD uint32_t moe_rv_ntok(uint32_t experts, uint32_t world)
{
	return experts + 2u * world + 1u;
}

/*
 * Immediates: 8 bits of kind tag, the phase, 11 bits of round and the
 * source rank, so that a counter names the rank that failed to deliver and
 * a late arrival of an earlier round can never count for the current one.
 */
enum moe_phase {
	MOE_PH_ROUTE = 1, /* a source's route vector */
	MOE_PH_DATA = 2,  /* a source's records: private burst, overflow */
	MOE_PH_CONS = 3,  /* a destination has read our records: its slots are free */
	MOE_PH_COMB = 4,  /* an expert rank's combine rows */
	MOE_PH_BYE = 5,   /* a rank is leaving: it has sent everything it owed */
	MOE_PH_ABORT = 6, /* a rank failed; the round field names the rank to blame */
	MOE_PH_FAILED = 7, /* the source has failed too (after its ABORT): it waits for nothing more */
};
#define MOE_IMM_TAG 0x4du /* 'M' */

MOE_HD uint32_t moe_imm(uint32_t phase, uint32_t round, uint32_t src)
{
	return (MOE_IMM_TAG << 24) | ((phase & 7u) << 21) | ((round & 0x7ffu) << 10) | (src & 0x3ffu);
}

/* Host id of rank r: every rank alone when the config gives none. */
MOE_HD uint32_t moe_host(const uint32_t *host_of, uint32_t r)
{
	return host_of ? host_of[r] : r;
}

/* 32-bit round numbers wrap: a is at or past b. */
MOE_HD int moe_round_ge(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b) >= 0;
}

#endif
