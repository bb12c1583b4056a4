/*
 * The CPU path: the kernels' four halves on the calling thread, with host
 * memory, every other rank remote. They speak to the proxy through the same
 * control words as the GPU kernels, so the protocol under test is the one
 * the GPU runs with its remote ranks. Records from other ranks are untrusted
 * bytes: every index in them is checked against the route vectors.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "moe.h"

enum { CPU_IDLE = 0, CPU_DSENT, CPU_DRECV, CPU_CSENT };

static int failed(const struct xfer_moe *m)
{
	return atomic_load(&((struct xfer_moe *)m)->failed);
}

/* Waits for a flag the proxy raises, then lowers it (the kernels' protocol).
 * The deadline has a grace over the proxy's own, so that the proxy's error,
 * which names the rank, is the one reported. */
static int wait_flag(struct xfer_moe *m, volatile uint32_t *flag, uint32_t round, const char *what)
{
	uint64_t t0 = xi_moe_now_ns(), limit = (m->cfg.timeout_ms + 1000) * 1000000ull;
	long nap = 0;
	while (moe_load_acq(flag) != 1) {
		if (failed(m))
			return failed(m);
		uint64_t el = xi_moe_now_ns() - t0;
		if (el > limit) {
			xi_moe_fail(m, -ETIMEDOUT, UINT32_MAX, "round %u: timed out waiting for %s", round, what);
			return -ETIMEDOUT;
		}
		if (el > 50000) {
			nap = nap ? (nap * 2 > 200000 ? 200000 : nap * 2) : 1000;
			nanosleep(&(struct timespec){0, nap}, NULL);
		}
	}
	moe_store_rel(flag, 0);
	return failed(m);
}

static bool remote(const struct xfer_moe *m, uint32_t r)
{
	return r != m->cfg.rank && moe_host(m->cfg.host_of, r) != moe_host(m->cfg.host_of, m->cfg.rank);
}

static void pack(struct xfer_moe *m, const struct xfer_moe_tokens *t, uint32_t round, bool rem)
{
	const struct xfer_moe_config *c = &m->cfg;
	uint32_t K = c->topk, H = c->hidden, L = m->z.local_experts, db = c->dispatch_bytes;
	uint32_t PB = m->z.payload_bytes, SB = m->z.scale_bytes, RB = m->z.record_bytes;
	const struct moe_route *r = &m->route;
	for (uint32_t tok = 0; tok < t->n; tok++)
		for (uint32_t k = 0; k < K; k++) {
			uint64_t s = (uint64_t)tok * K + k;
			if (!r->lead[s])
				continue;
			uint32_t d = (uint32_t)moe_topk_at(t->topk_idx, t->idx_bytes, s) / L;
			if (remote(m, d) != rem)
				continue;
			uint8_t *rec = (uint8_t *)m->b.send + (uint64_t)r->rec[s] * RB;
			memcpy(rec, (const uint8_t *)t->x + (uint64_t)tok * H * db, (size_t)H * db);
			if (SB)
				memcpy(rec + PB, t->scales + (uint64_t)tok * (H / XFER_MOE_SCALE_BLOCK),
				       H / XFER_MOE_SCALE_BLOCK * sizeof(float));
			struct moe_meta *mt = (struct moe_meta *)(rec + PB + SB);
			uint32_t np = 0;
			for (uint32_t k2 = k; k2 < K; k2++) {
				uint64_t s2 = (uint64_t)tok * K + k2;
				if (r->rec[s2] != r->rec[s])
					continue;
				uint32_t e = (uint32_t)moe_topk_at(t->topk_idx, t->idx_bytes, s2);
				mt->pair[np].k = (uint16_t)k2;
				mt->pair[np].expert = (uint16_t)(e - d * L);
				mt->pair[np].j = r->j[s2];
				np++;
			}
			mt->token = tok;
			mt->npairs = np;
			mt->pair_base = r->pb[s];
			mt->round = round;
		}
}

int xfer_moe_cpu_dispatch_send(xfer_moe_t *m, const struct xfer_moe_tokens *t)
{
	if (!m || !t || !m->connected)
		return -EINVAL;
	const struct xfer_moe_config *c = &m->cfg;
	if (m->n_remote + 1 != c->world_size)
		return -EOPNOTSUPP; /* same-host ranks need the GPU path (IPC) */
	if (t->n > c->max_tokens || (t->n && (!t->x || !t->topk_idx)) ||
	    (t->idx_bytes != 4 && t->idx_bytes != 8) || (t->n && c->scales && !t->scales))
		return -EINVAL;
	if (m->cpu_state != CPU_IDLE && m->cpu_state != CPU_DRECV)
		return -EPROTO;
	int rc = failed(m);
	if (rc)
		return rc;
	uint32_t i = m->b.ctl->round + 1;
	m->b.ctl->round = i;
	if (m->n_remote && (rc = wait_flag(m, &m->b.ctl->tx_ready, i, "the send buffer to drain")))
		return rc;
	uint32_t *rv = (uint32_t *)m->b.route_vec + (i & 1) * m->z.route_words;
	xi_moe_route_compute(c, i, t->n, t->topk_idx, t->idx_bytes, &m->route, rv);
	moe_store_rel(&m->b.ctl->k_route, i);
	pack(m, t, i, true); /* remote ranks first: the proxy starts on them at once */
	moe_store_rel(&m->b.ctl->k_packed, i);
	pack(m, t, i, false);
	m->cpu_n = t->n;
	m->cpu_state = CPU_DSENT;
	return failed(m);
}

/* A record from rank s (untrusted when remote): every index within what
 * s's route vector announced. */
static bool record_ok(const struct xfer_moe *m, const struct moe_meta *mt, uint32_t round,
		      const uint32_t *row, uint32_t pairs_from)
{
	const struct xfer_moe_config *c = &m->cfg;
	uint32_t E = c->num_experts, W = c->world_size, L = m->z.local_experts;
	uint32_t e0 = c->rank * L;
	if (mt->round != round || mt->token >= row[moe_rv_ntok(E, W)] || !mt->npairs ||
	    mt->npairs > c->topk || mt->pair_base > pairs_from || mt->npairs > pairs_from - mt->pair_base)
		return false;
	for (uint32_t p = 0; p < mt->npairs; p++)
		if (mt->pair[p].k >= c->topk || mt->pair[p].expert >= L ||
		    mt->pair[p].j >= row[e0 + mt->pair[p].expert])
			return false;
	return true;
}

int xfer_moe_cpu_dispatch_recv(xfer_moe_t *m, const struct xfer_moe_expert_out *o)
{
	if (!m || !o || !o->x || !o->counts || (m->cfg.scales && !o->scales))
		return -EINVAL;
	if (m->cpu_state != CPU_DSENT)
		return -EPROTO;
	const struct xfer_moe_config *c = &m->cfg;
	uint32_t W = c->world_size, me = c->rank, L = m->z.local_experts;
	uint32_t H = c->hidden, db = c->dispatch_bytes, P = c->private_tokens;
	uint32_t PB = m->z.payload_bytes, SB = m->z.scale_bytes, RB = m->z.record_bytes;
	uint32_t i = m->b.ctl->round;
	int rc = 0;
	if (m->n_remote && (rc = wait_flag(m, &m->b.ctl->recv_flag, i, "the tokens of every rank")))
		goto empty;
	for (uint32_t s = 0; s < W; s++)
		m->cpu_rows[s] = moe_route_row(m, i, s);
	uint32_t bad = 0;
	struct moe_plan *p = &m->plan;
	if ((rc = xi_moe_plan_recv(c, &m->z, me, (const uint32_t *const *)m->cpu_rows, p, &bad))) {
		xi_moe_fail(m, rc, me, "round %u: expert %u would receive more rows than its layout holds "
			 "(expert_capacity %u)", i, bad, c->expert_capacity);
		goto empty;
	}
	for (uint32_t s = 0; s < W; s++) {
		const uint32_t *row = m->cpu_rows[s];
		for (uint32_t q = 0; q < p->c[s]; q++) {
			const uint8_t *rec;
			if (s == me)
				rec = (const uint8_t *)m->b.send + (p->first[s] + q) * RB;
			else if (q < P)
				rec = (const uint8_t *)m->b.recv + (p->first[s] + q) * RB;
			else
				rec = (const uint8_t *)m->b.recv + (p->ovf[s] + q - P) * RB;
			const struct moe_meta *mt = (const struct moe_meta *)(rec + PB + SB);
			if (!record_ok(m, mt, i, row, p->pr[s])) {
				rc = -EPROTO;
				xi_moe_fail(m, rc, s, "round %u: record %u from rank %u is malformed or of "
					 "another round", i, q, s);
				goto empty;
			}
			for (uint32_t pp = 0; pp < mt->npairs; pp++) {
				uint32_t e = mt->pair[pp].expert;
				uint64_t rowi = (uint64_t)p->base[(uint64_t)s * L + e] + mt->pair[pp].j;
				memcpy((uint8_t *)o->x + rowi * H * db, rec, (size_t)H * db);
				if (SB)
					memcpy(o->scales + rowi * (H / XFER_MOE_SCALE_BLOCK), rec + PB,
					       H / XFER_MOE_SCALE_BLOCK * sizeof(float));
				if (o->src_rank)
					o->src_rank[rowi] = (int32_t)s;
				if (o->src_token)
					o->src_token[rowi] = (int32_t)mt->token;
				m->cpu_rowq[rowi] = (int32_t)(p->qbase[s] + mt->pair_base + pp);
			}
		}
	}
	for (uint32_t e = 0; e < L; e++) {
		o->counts[e] = (int32_t)p->counts[e];
		if (o->offsets)
			o->offsets[e] = (int32_t)p->offsets[e];
	}
	if (o->offsets)
		o->offsets[L] = (int32_t)p->offsets[L];
	moe_store_rel(&m->b.ctl->k_recv_done, i);
	m->cpu_state = CPU_DRECV;
	return 0;
empty:
	/* A failed round hands back no rows rather than stale ones. */
	for (uint32_t e = 0; e < L; e++)
		o->counts[e] = 0;
	m->cpu_state = CPU_DRECV;
	return rc ? rc : failed(m);
}

int xfer_moe_cpu_combine_send(xfer_moe_t *m, const void *expert_out)
{
	if (!m || !expert_out)
		return -EINVAL;
	if (m->cpu_state != CPU_DRECV)
		return -EPROTO;
	int rc = failed(m);
	if (rc)
		return rc;
	uint32_t i = m->b.ctl->round, L = m->z.local_experts, me = m->cfg.rank;
	uint32_t CB = m->z.combine_row_bytes, rowb = m->cfg.hidden * m->cfg.combine_bytes;
	if (m->n_remote && (rc = wait_flag(m, &m->b.ctl->comb_tx_ready, i, "the combine send buffer")))
		return rc;
	const struct moe_plan *p = &m->plan;
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t e = 0; e < L; e++)
			for (uint32_t r = p->offsets[e]; r < p->offsets[e] + p->counts[e]; r++) {
				uint32_t q = (uint32_t)m->cpu_rowq[r];
				const uint8_t *src = (const uint8_t *)expert_out + (uint64_t)r * rowb;
				if (pass == 0 && q < p->q_remote)
					memcpy((uint8_t *)m->b.comb_send + (uint64_t)q * CB, src, rowb);
				else if (pass == 1 && q >= p->q_remote) /* ours: the only local source */
					memcpy((uint8_t *)m->b.comb_recv +
						       (uint64_t)(p->cb[me] + q - p->qbase[me]) * CB,
					       src, rowb);
			}
		if (pass == 0)
			moe_store_rel(&m->b.ctl->k_comb_packed, i);
	}
	m->cpu_state = CPU_CSENT;
	return failed(m);
}

static float bf16_to_f32(uint16_t v)
{
	uint32_t u = (uint32_t)v << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* NaN stays a (quiet) NaN */
	u += 0x7fffu + ((u >> 16) & 1u);         /* round to nearest, ties to even */
	return (uint16_t)(u >> 16);
}

int xfer_moe_cpu_combine_recv(xfer_moe_t *m, const float *weights, void *out)
{
	if (!m || (m->cpu_n && (!weights || !out)))
		return -EINVAL;
	if (m->cpu_state != CPU_CSENT)
		return -EPROTO;
	uint32_t i = m->b.ctl->round, K = m->cfg.topk, H = m->cfg.hidden, CB = m->z.combine_row_bytes;
	int rc = 0;
	if (m->n_remote && (rc = wait_flag(m, &m->b.ctl->comb_flag, i, "the combine rows of every rank"))) {
		m->cpu_state = CPU_IDLE;
		return rc;
	}
	float *acc = m->cpu_acc;
	for (uint32_t t = 0; t < m->cpu_n; t++) {
		for (uint32_t h = 0; h < H; h++)
			acc[h] = 0.0f;
		/* Slot order, one rounding per product and per sum (this file is
		 * built with -ffp-contract=off): the bits the torch reference and
		 * the GPU kernel (__fmul_rn, __fadd_rn) produce. */
		for (uint32_t k = 0; k < K; k++) {
			int32_t r = m->route.comb[(uint64_t)t * K + k];
			if (r < 0)
				continue;
			float w = weights[(uint64_t)t * K + k];
			const uint16_t *y = (const uint16_t *)((const uint8_t *)m->b.comb_recv + (uint64_t)r * CB);
			for (uint32_t h = 0; h < H; h++) {
				float prod = w * bf16_to_f32(y[h]);
				acc[h] = acc[h] + prod;
			}
		}
		uint16_t *dst = (uint16_t *)out + (uint64_t)t * H;
		for (uint32_t h = 0; h < H; h++)
			dst[h] = f32_to_bf16(acc[h]);
	}
	moe_store_rel(&m->b.ctl->k_comb_done, i);
	m->cpu_state = CPU_IDLE;
	return failed(m);
}
