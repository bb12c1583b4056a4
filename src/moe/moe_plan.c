/* What a round's route vectors imply: where each source's records are and
 * where their pairs go in the expert layout (receiver), where our overflow
 * records land at each destination (sender), and whether every buffer holds
 * what the round needs. Every rank sees the same route vectors, so every
 * rank reaches the same verdict. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"

static bool is_remote(const struct xfer_moe_config *c, uint32_t a, uint32_t b)
{
	return a != b && moe_host(c->host_of, a) != moe_host(c->host_of, b);
}

static uint32_t over(uint32_t n, uint32_t p)
{
	return n > p ? n - p : 0;
}

int xi_moe_plan_recv(const struct xfer_moe_config *c, const struct xfer_moe_sizes *z, uint32_t me,
		  const uint32_t *const *rows, struct moe_plan *p, uint32_t *why)
{
	uint32_t W = c->world_size, E = c->num_experts, L = E / W, P = c->private_tokens;
	uint32_t e0 = me * L;
	uint64_t ovf = 0;
	for (uint32_t s = 0; s < W; s++) {
		const uint32_t *row = rows[s];
		p->c[s] = row[moe_rv_rec(E, me)];
		p->pr[s] = row[moe_rv_pairs(E, W, me)];
		uint64_t so = 0, cb = 0;
		for (uint32_t d = 0; d < me; d++) {
			so += row[moe_rv_rec(E, d)];
			cb += row[moe_rv_pairs(E, W, d)];
		}
		p->cb[s] = (uint32_t)cb;
		if (is_remote(c, s, me)) {
			p->first[s] = (uint64_t)s * P;
			p->ovf[s] = (uint64_t)W * P + ovf;
			ovf += over(p->c[s], P);
		} else {
			p->first[s] = so;
			p->ovf[s] = 0;
		}
	}
	p->ovf_total = (uint32_t)ovf;
	if (ovf > c->overflow_tokens) {
		*why = me;
		return -ENOSPC;
	}
	uint64_t off = 0, used = 0;
	for (uint32_t e = 0; e < L; e++) {
		uint64_t n = 0;
		for (uint32_t s = 0; s < W; s++)
			n += rows[s][e0 + e];
		p->counts[e] = (uint32_t)n;
		used += n;
		if (c->layout == XFER_MOE_PADDED) {
			if (n > c->expert_capacity) {
				*why = e0 + e;
				return -ENOSPC;
			}
			p->offsets[e] = e * c->expert_capacity;
		} else {
			p->offsets[e] = (uint32_t)off;
			off += (n + c->expert_align - 1) / c->expert_align * c->expert_align;
			if (off > c->expert_capacity) {
				*why = e0 + e;
				return -ENOSPC;
			}
		}
	}
	p->offsets[L] = c->layout == XFER_MOE_PADDED ? L * c->expert_capacity : (uint32_t)off;
	p->rows_used = c->layout == XFER_MOE_PADDED ? used : off;
	for (uint32_t e = 0; e < L; e++) {
		uint32_t b = p->offsets[e];
		for (uint32_t s = 0; s < W; s++) {
			p->base[(uint64_t)s * L + e] = b;
			b += rows[s][e0 + e];
		}
	}
	/* The combine sends remote rows first, so that the engine starts while
	 * the same-host rows are still being copied; remote rows are also the
	 * prefix of the combine send buffer, one contiguous block per source. */
	uint64_t q = 0;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t s = 0; s < W; s++)
			if (is_remote(c, s, me) == (pass == 0)) {
				p->qbase[s] = (uint32_t)q;
				q += p->pr[s];
				if (pass == 0)
					p->q_remote = (uint32_t)q;
			}
	if (!z->remote_ranks)
		p->q_remote = 0;
	p->q_total = (uint32_t)q;
	if (p->q_remote > z->comb_send_rows) {
		*why = e0;
		return -ENOSPC;
	}
	return 0;
}

int xi_moe_plan_send(const struct xfer_moe_config *c, uint32_t me, const uint32_t *const *rows,
		  uint64_t *ovf_dst, uint32_t *bad)
{
	uint32_t W = c->world_size, E = c->num_experts, P = c->private_tokens;
	int rc = 0;
	for (uint32_t d = 0; d < W; d++) {
		uint64_t before = 0, total = 0;
		for (uint32_t s = 0; s < W; s++) {
			if (!is_remote(c, s, d))
				continue;
			uint32_t o = over(rows[s][moe_rv_rec(E, d)], P);
			if (s < me)
				before += o;
			total += o;
		}
		ovf_dst[d] = (uint64_t)W * P + before;
		if (total > c->overflow_tokens && !rc) {
			*bad = d;
			rc = -ENOSPC;
		}
	}
	return rc;
}

int xi_moe_plan_capacity(const struct xfer_moe_config *c, const uint32_t *const *rows, uint32_t *bad)
{
	uint32_t W = c->world_size, E = c->num_experts, L = E / W;
	for (uint32_t d = 0; d < W; d++) {
		uint64_t off = 0;
		for (uint32_t e = d * L; e < (d + 1) * L; e++) {
			uint64_t n = 0;
			for (uint32_t s = 0; s < W; s++)
				n += rows[s][e];
			off += (n + c->expert_align - 1) / c->expert_align * c->expert_align;
			if ((c->layout == XFER_MOE_PADDED && n > c->expert_capacity) ||
			    (c->layout == XFER_MOE_PACKED && off > c->expert_capacity)) {
				*bad = e;
				return -ENOSPC;
			}
		}
	}
	return 0;
}

int xi_moe_plan_alloc(struct moe_plan *p, uint32_t world, uint32_t local_experts)
{
	memset(p, 0, sizeof(*p));
	p->c = calloc(world, sizeof(uint32_t));
	p->pr = calloc(world, sizeof(uint32_t));
	p->first = calloc(world, sizeof(uint64_t));
	p->ovf = calloc(world, sizeof(uint64_t));
	p->cb = calloc(world, sizeof(uint32_t));
	p->qbase = calloc(world, sizeof(uint32_t));
	p->counts = calloc(local_experts, sizeof(uint32_t));
	p->offsets = calloc(local_experts + 1, sizeof(uint32_t));
	p->base = calloc((size_t)world * local_experts, sizeof(uint32_t));
	if (!p->c || !p->pr || !p->first || !p->ovf || !p->cb || !p->qbase || !p->counts ||
	    !p->offsets || !p->base) {
		xi_moe_plan_free(p);
		return -ENOMEM;
	}
	return 0;
}

void xi_moe_plan_free(struct moe_plan *p)
{
	free(p->c);
	free(p->pr);
	free(p->first);
	free(p->ovf);
	free(p->cb);
	free(p->qbase);
	free(p->counts);
	free(p->offsets);
	free(p->base);
	memset(p, 0, sizeof(*p));
}
