/* The sender's routing: which record and which combine row each (token,
 * slot) gets, and the route vector that tells every other rank. The GPU
 * kernels (moe_route_kernel, moe_route_wide_kernel in src/moe/cuda/moe_kernels.cu)
 * compute the same numbers in parallel;
 * this is the definition both are tested against. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

void xi_moe_route_compute(const struct xfer_moe_config *c, uint32_t round, uint32_t n,
		       const void *topk_idx, uint32_t idx_bytes, struct moe_route *r, uint32_t *rv)
{
	uint32_t E = c->num_experts, W = c->world_size, K = c->topk, L = E / W;
	memset(rv, 0, moe_route_words(E, W) * sizeof(uint32_t));
	uint32_t *cnt = rv, *rec = rv + E, *pairs = rv + E + W;
	for (uint32_t t = 0; t < n; t++) {
		uint32_t dest[XFER_MOE_TOPK_MAX], lead_of[XFER_MOE_TOPK_MAX], seen[XFER_MOE_TOPK_MAX];
		for (uint32_t k = 0; k < K; k++) {
			uint64_t s = (uint64_t)t * K + k;
			int64_t e = moe_topk_at(topk_idx, idx_bytes, s);
			dest[k] = UINT32_MAX;
			if (e < 0 || e >= (int64_t)E) {
				r->rec[s] = -1;
				r->lead[s] = 0;
				r->q[s] = 0;
				r->j[s] = 0;
				r->pb[s] = 0;
				r->comb[s] = -1;
				continue;
			}
			uint32_t d = (uint32_t)e / L, lk = k;
			for (uint32_t k2 = 0; k2 < k; k2++)
				if (dest[k2] == d) {
					lk = lead_of[k2];
					break;
				}
			dest[k] = d;
			lead_of[k] = lk;
			uint64_t ls = (uint64_t)t * K + lk;
			if (lk == k) { /* the token's first slot for rank d: a new record */
				r->lead[s] = 1;
				r->rec[s] = (int32_t)rec[d]++; /* local to d until the prefix below */
				r->pb[s] = pairs[d];
				seen[k] = 0;
			} else {
				r->lead[s] = 0;
				r->rec[s] = r->rec[ls];
				r->pb[s] = r->pb[ls];
			}
			r->q[s] = (uint8_t)seen[lk]++;
			pairs[d]++;
			r->j[s] = cnt[e]++;
		}
	}
	uint32_t so = 0, cbo = 0;
	for (uint32_t d = 0; d < W; d++) {
		r->so[d] = so;
		r->cbo[d] = cbo;
		so += rec[d];
		cbo += pairs[d];
	}
	for (uint64_t s = 0; s < (uint64_t)n * K; s++) {
		if (r->rec[s] < 0)
			continue;
		uint32_t d = (uint32_t)moe_topk_at(topk_idx, idx_bytes, s) / L;
		r->rec[s] += (int32_t)r->so[d];
		r->comb[s] = (int32_t)(r->cbo[d] + r->pb[s] + r->q[s]);
	}
	rv[moe_rv_stamp(E, W)] = round;
	rv[moe_rv_ntok(E, W)] = n;
}

int xi_moe_route_valid(const struct xfer_moe_config *c, uint32_t round, uint32_t src,
		    const uint32_t *row)
{
	(void)src;
	uint32_t E = c->num_experts, W = c->world_size, K = c->topk, L = E / W;
	if (row[moe_rv_stamp(E, W)] != round)
		return -ESTALE;
	uint64_t n = row[moe_rv_ntok(E, W)];
	if (n > c->max_tokens)
		return -EPROTO;
	uint64_t recs = 0, prs = 0;
	for (uint32_t d = 0; d < W; d++) {
		uint64_t rc = row[moe_rv_rec(E, d)], pr = row[moe_rv_pairs(E, W, d)], sum = 0;
		if (rc > n || pr < rc || pr > rc * K)
			return -EPROTO;
		for (uint32_t e = d * L; e < (d + 1) * L; e++)
			sum += row[e];
		if (sum != pr)
			return -EPROTO;
		recs += rc;
		prs += pr;
	}
	if (prs > n * K || recs > n * (K < W ? K : W))
		return -EPROTO;
	return 0;
}

int xi_moe_route_alloc(struct moe_route *r, uint32_t tokens, uint32_t topk, uint32_t world)
{
	memset(r, 0, sizeof(*r));
	size_t s = (size_t)tokens * topk;
	r->rec = calloc(s, sizeof(int32_t));
	r->lead = calloc(s, 1);
	r->q = calloc(s, 1);
	r->j = calloc(s, sizeof(uint32_t));
	r->pb = calloc(s, sizeof(uint32_t));
	r->comb = calloc(s, sizeof(int32_t));
	r->so = calloc(world, sizeof(uint32_t));
	r->cbo = calloc(world, sizeof(uint32_t));
	if (!r->rec || !r->lead || !r->q || !r->j || !r->pb || !r->comb || !r->so || !r->cbo) {
		xi_moe_route_free(r);
		return -ENOMEM;
	}
	return 0;
}

void xi_moe_route_free(struct moe_route *r)
{
	free(r->rec);
	free(r->lead);
	free(r->q);
	free(r->j);
	free(r->pb);
	free(r->comb);
	free(r->so);
	free(r->cbo);
	memset(r, 0, sizeof(*r));
}
