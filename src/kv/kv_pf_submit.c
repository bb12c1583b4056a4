/* The prefiller's data path: per ready layer, one paged write per plan
 * segment into each destination, then the context as the final write; and
 * stopping a destination so that nothing more of it can land. */
#include <errno.h>

#include "kv_pf.h"

static uint64_t remaining_ms(const struct kv_dest *d)
{
	uint64_t now = xi_kv_now_ns();
	return d->deadline > now ? (d->deadline - now) / 1000000ull + 1 : 1;
}

static int submit_layer_seg(xfer_kv_prefiller_t *p, struct kv_dest *d)
{
	const struct kv_job *j = d->job;
	const struct xfer_kv_plan *pl = d->plan;
	const struct xfer_kv_seg *sg = &pl->segs[d->next_seg];
	struct xfer_paged_write w = {
		.src = p->kv_mr, .dst = d->kv, .page_len = sg->len,
		.src_pages = j->src_pages, .src_stride = pl->src_page_stride,
		.src_base = d->next_layer * pl->src_layer_stride + sg->src_off,
		.dst_pages = d->dst_pages, .dst_stride = pl->dst_page_stride,
		.dst_base = d->next_layer * pl->dst_layer_stride + sg->dst_off,
		.npages = j->npages, .imm = d->imm, .flags = XFER_F_IMM};
	struct xfer_completion c = xi_kv_completion(&p->core, (uint64_t)(uintptr_t)d, d->tag, remaining_ms(d));
	int ret = xfer_write_paged(p->core.e, &w, &c);
	if (!ret) {
		p->st.writes++;
		p->st.bytes += sg->len * j->npages;
	}
	return ret;
}

static int submit_ctx(xfer_kv_prefiller_t *p, struct kv_dest *d)
{
	const struct kv_job *j = d->job;
	struct xfer_completion c = xi_kv_completion(&p->core, (uint64_t)(uintptr_t)d, d->tag, remaining_ms(d));
	if (!d->ctx)
		return xfer_write_imm(p->core.e, d->peer, d->imm, &c);
	if (j->ctx_len > d->ctx_cap)
		return -EMSGSIZE;
	struct xfer_write w = {.src = j->ctx_len ? p->ctx_mr : NULL,
			       .src_off = (uint64_t)j->ctx_slot * p->cfg.ctx_bytes, .dst = d->ctx,
			       .dst_off = d->ctx_off, .len = j->ctx_len, .imm = d->imm,
			       .flags = XFER_F_IMM};
	int ret = xfer_write(p->core.e, &w, &c);
	if (!ret) {
		p->st.writes++;
		p->st.bytes += j->ctx_len;
	}
	return ret;
}

void xi_kv_pf_pump(xfer_kv_prefiller_t *p, struct kv_dest *d)
{
	const struct kv_job *j = d->job;
	const uint32_t layers = p->cfg.layout.layers;
	d->blocked = false;
	while (d->state == DS_ACTIVE && j->bound) {
		int ret;
		if (d->next_layer < j->layers_ready && d->next_layer < layers) {
			ret = submit_layer_seg(p, d);
			if (!ret && ++d->next_seg == d->plan->nsegs) {
				d->next_seg = 0;
				d->next_layer++;
			}
		} else if (d->next_layer == layers && j->finished && d->plan->writes_ctx && !d->ctx_sent) {
			ret = submit_ctx(p, d);
			d->ctx_sent = !ret;
		} else {
			break;
		}
		if (ret == -EAGAIN) {
			d->blocked = true; /* the control thread retries */
			xi_kv_core_kick(&p->core);
			return;
		}
		if (ret) {
			xi_kv_pf_dest_stop(p, d, ret, RP_FAIL);
			return;
		}
		d->outstanding++;
	}
	bool all_sent = d->next_layer == layers && (!d->plan->writes_ctx || d->ctx_sent);
	if (d->state == DS_ACTIVE && all_sent && j->finished && !d->outstanding) {
		d->state = DS_COMPLETE;
		xi_kv_pf_job_check(p, d->job);
	}
}

void xi_kv_pf_pump_job(xfer_kv_prefiller_t *p, struct kv_job *j)
{
	for (struct kv_dest *d = j->dests; d && j->used;) {
		struct kv_dest *next = d->next; /* the job may end inside */
		xi_kv_pf_pump(p, d);
		d = next;
	}
}

void xi_kv_pf_reply(xfer_kv_prefiller_t *p, struct kv_dest *d, bool quiesced)
{
	struct kv_msg m = {.dseq = d->dseq};
	if (d->reply == RP_ACK && quiesced) {
		m.type = KV_MSG_ACK;
	} else {
		m.type = KV_MSG_FAIL;
		m.err = d->err < 0 ? d->err : -ECANCELED;
		m.quiesced = quiesced;
	}
	/* A dead decoder cannot be told; it no longer needs to be. */
	xi_kv_send(&p->core, d->peer, &m, NULL);
}

void xi_kv_pf_cancel_retry(xfer_kv_prefiller_t *p, struct kv_dest *d)
{
	struct xfer_completion c = xi_kv_completion(&p->core, (uint64_t)(uintptr_t)d, 0, 0);
	int ret = xfer_cancel(p->core.e, d->tag, &c);
	d->cancel_pending = ret == -EAGAIN;
	if (d->cancel_pending) {
		xi_kv_core_kick(&p->core);
	} else if (ret) {
		/* Cannot drain through the engine: say so, the decoder revokes. */
		d->state = DS_QUIESCED;
		xi_kv_pf_reply(p, d, false);
		xi_kv_pf_job_check(p, d->job);
	}
}

void xi_kv_pf_dest_stop(xfer_kv_prefiller_t *p, struct kv_dest *d, int err, int reply)
{
	if (d->state != DS_ACTIVE && d->state != DS_COMPLETE)
		return;
	d->state = DS_DRAINING;
	d->err = err;
	d->reply = reply;
	/* Nothing is submitted for it any more (mu is held), so the cancel
	 * covers every write it has: its completion means none can land. */
	xi_kv_pf_cancel_retry(p, d);
}
