/* Leases: the decoder registers its KV pool (and context slots) once per
 * prefill rank. When a rank stops answering, or dies, revoking its lease is
 * what guarantees that none of its late writes lands; the other ranks keep
 * writing through their own registrations of the same memory. */
#include <errno.h>

#include "kv_dec.h"

static int reg(xfer_kv_decoder_t *d, void *buf, size_t len, xfer_mr_t **mr, uint8_t *desc,
	       uint16_t *desc_len)
{
	int ret = xfer_mr_reg(d->core.e, buf, len, mr);
	if (ret)
		return ret;
	ret = xfer_mr_desc(*mr, desc, XFER_DESC_MAX, NULL);
	if (ret < 0) {
		xfer_mr_dereg(*mr);
		*mr = NULL;
		return ret;
	}
	*desc_len = (uint16_t)ret;
	return 0;
}

int xi_kv_dec_lease_ensure(xfer_kv_decoder_t *d, struct kv_rank *rk)
{
	struct kv_lease *l = &rk->lease;
	if (l->live)
		return 0;
	int ret = reg(d, d->cfg.kv, d->kv_bytes, &l->kv, l->kv_desc, &l->kv_len);
	if (ret)
		return ret;
	if (d->ctx_mem) {
		ret = reg(d, d->ctx_mem, d->ctx_stride * d->cfg.max_requests, &l->ctx, l->ctx_desc,
			  &l->ctx_len);
		if (ret) {
			xfer_mr_dereg(l->kv);
			l->kv = NULL;
			return ret;
		}
	}
	l->gen++;
	l->live = true;
	return 0;
}

static void withdraw(xfer_mr_t **mr)
{
	if (!*mr)
		return;
	/* The decoder never reads from these regions, so revoking cannot be
	 * refused as busy; deregistering then frees the handle. */
	xfer_mr_revoke(*mr);
	xfer_mr_dereg(*mr);
	*mr = NULL;
}

void xi_kv_dec_lease_drop(xfer_kv_decoder_t *d, struct kv_rank *rk)
{
	(void)d;
	withdraw(&rk->lease.kv);
	withdraw(&rk->lease.ctx);
	rk->lease.live = false;
}

void xi_kv_dec_lease_revoke(xfer_kv_decoder_t *d, uint32_t group, uint32_t rank, int status)
{
	struct kv_group *g = xi_kv_dec_group(d, group);
	if (!g || rank >= g->n)
		return;
	struct kv_rank *rk = &g->ranks[rank];
	if (!rk->lease.live)
		return;
	uint32_t gen = rk->lease.gen;
	xi_kv_dec_lease_drop(d, rk);
	d->st.revocations++;
	for (uint32_t s = 0; s < d->cfg.max_requests; s++) {
		struct kv_dreq *r = &d->reqs[s];
		if ((r->state != DR_ACTIVE && r->state != DR_ABORTING) || r->group != group)
			continue;
		for (uint32_t i = 0; i < r->nw; i++) {
			struct kv_writer *w = &r->w[i];
			if (w->rank != rank || w->lease_gen != gen || w->quiesced)
				continue;
			w->quiesced = true;
			/* Its data can no longer all arrive. */
			if (!r->expect_done)
				xi_kv_dec_abort(d, r, status);
		}
	}
}
