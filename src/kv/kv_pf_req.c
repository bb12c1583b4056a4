/* Requests and cancellations arriving at a prefiller: chunk assembly,
 * validation of everything the decoder claims, and attaching a destination
 * to its job. Every refusal is answered with a FAIL that says nothing was
 * written, so that the decoder can reuse its pages at once. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_pf.h"

static bool same_layout(const struct xfer_kv_layout *a, const struct xfer_kv_layout *b)
{
	return !memcmp(a, b, sizeof(*a));
}

static void refuse(xfer_kv_prefiller_t *p, xfer_peer_t peer, uint64_t dseq, int err)
{
	struct kv_msg m = {.type = KV_MSG_FAIL, .dseq = dseq, .err = err, .quiesced = 1};
	xi_kv_send(&p->core, peer, &m, NULL);
}

static struct kv_dest *find_dest(xfer_kv_prefiller_t *p, uint64_t src_id, uint64_t dseq)
{
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++)
		for (struct kv_dest *d = p->jobs[i].used ? p->jobs[i].dests : NULL; d; d = d->next)
			if (d->engine_id == src_id && d->dseq == dseq)
				return d;
	return NULL;
}

/* The decode ranks this rank writes to, for a decoder of layout dst. */
static int dsts_of(const struct xfer_kv_layout *me, const struct xfer_kv_layout *dst, uint64_t *mask)
{
	struct xfer_kv_plan *pl = malloc(sizeof(*pl));
	if (!pl)
		return -ENOMEM;
	*mask = 0;
	for (uint32_t r = 0; r < dst->tp_size; r++) {
		struct xfer_kv_layout l = *dst;
		l.tp_rank = r;
		if (!xfer_kv_plan(me, &l, pl) && (pl->nsegs || pl->writes_ctx))
			*mask |= 1ull << r;
	}
	free(pl);
	return 0;
}

/* Checks a complete request; returns the plan, or NULL with *err set. */
static struct xfer_kv_plan *check_req(xfer_kv_prefiller_t *p, const struct kv_msg *m,
				      const uint32_t *pages, int *err)
{
	const struct xfer_kv_layout *me = &p->cfg.layout;
	*err = -EPROTO;
	if (!same_layout(&m->src, me) || xfer_kv_layout_check(&m->dst))
		return NULL;
	if ((uint64_t)m->npages * me->page_tokens < m->tokens ||
	    (uint64_t)(m->npages - 1) * me->page_tokens >= m->tokens)
		return NULL;
	for (uint32_t i = 0; i < m->npages; i++)
		if (pages[i] >= m->dst.pages)
			return NULL;
	if (m->ctx_cap && (!m->ctx_desc_len || m->ctx_off > UINT64_MAX - m->ctx_cap))
		return NULL;
	struct xfer_kv_plan *pl = malloc(sizeof(*pl));
	if (!pl) {
		*err = -ENOMEM;
		return NULL;
	}
	if (xfer_kv_plan(me, &m->dst, pl) ||
	    xfer_kv_plan_count(pl, me->layers, m->npages) != m->expected ||
	    (!pl->nsegs && !pl->writes_ctx)) {
		free(pl);
		return NULL;
	}
	return pl;
}

static int import(xfer_kv_prefiller_t *p, struct kv_dest *d, const struct kv_msg *m)
{
	int ret = xfer_rmr_import(p->core.e, d->peer, m->kv_desc, m->kv_desc_len, &d->kv);
	if (!ret && m->ctx_cap)
		ret = xfer_rmr_import(p->core.e, d->peer, m->ctx_desc, m->ctx_desc_len, &d->ctx);
	return ret;
}

static void drop_fresh(xfer_kv_prefiller_t *p, struct kv_job *j)
{
	xi_kv_stack_push(&p->free_ctx, &j->ctx_slot, 1);
	p->st.jobs--;
	*j = (struct kv_job){0};
}

static int attach(xfer_kv_prefiller_t *p, uint64_t src_id, xfer_peer_t peer, const struct kv_msg *m,
		  uint32_t *pages, struct xfer_kv_plan *pl)
{
	if (xi_kv_pf_tomb_has(p, TOMB_JOB, 0, m->id))
		return -ESTALE; /* that job has ended */
	struct kv_job *j = xi_kv_pf_job_find(p, m->id);
	bool fresh = !j;
	if (j && j->know_dsts && j->dst_tp != m->dst.tp_size)
		return -EPROTO;
	if (j && (j->attached_mask >> m->dst.tp_rank & 1))
		return -EEXIST;
	if (j && j->bound && j->npages != m->npages)
		return -EINVAL;
	if (!j && !(j = xi_kv_pf_job_new(p, m->id)))
		return -EBUSY;
	struct kv_dest *d = calloc(1, sizeof(*d));
	int ret = d ? 0 : -ENOMEM;
	if (d) {
		*d = (struct kv_dest){.job = j, .peer = peer, .engine_id = src_id, .dseq = m->dseq,
				      .tag = ++p->next_tag, .imm = m->imm, .dst_rank = m->dst.tp_rank,
				      .ctx_cap = m->ctx_cap, .ctx_off = m->ctx_off, .state = DS_ACTIVE,
				      .deadline = xi_kv_now_ns() + (uint64_t)m->xfer_ms * 1000000ull};
		ret = import(p, d, m);
	}
	if (!ret && !j->know_dsts)
		ret = dsts_of(&p->cfg.layout, &m->dst, &j->expected_mask);
	if (ret) {
		if (d) {
			xfer_rmr_free(d->kv);
			xfer_rmr_free(d->ctx);
			free(d);
		}
		if (fresh)
			drop_fresh(p, j);
		return ret;
	}
	d->dst_pages = pages;
	d->plan = pl;
	if (!pl->nsegs)
		d->next_layer = p->cfg.layout.layers; /* only the context */
	j->know_dsts = true;
	j->dst_tp = m->dst.tp_size;
	j->attached_mask |= 1ull << m->dst.tp_rank;
	d->next = j->dests;
	j->dests = d;
	p->st.requests++;
	if (!j->npages)
		j->npages = m->npages;
	if (!j->new_told) {
		/* The first decode rank to ask starts the prefill. */
		j->new_told = true;
		j->tokens = m->tokens;
		j->app_len = m->app_len;
		memcpy(j->app, m->app, m->app_len);
		xi_kv_pf_event(p, XFER_KV_PF_NEW, 0, j);
	}
	xi_kv_pf_pump(p, d);
	return 0;
}

/* A complete request: pages is malloc'd and taken over (or freed). */
static void on_req(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m, uint32_t *pages)
{
	xfer_peer_t peer;
	if (xi_kv_pf_tomb_has(p, TOMB_DSEQ, src_id, m->dseq) ||
	    xi_kv_peer_for(&p->core, src_id, m->addr, m->addr_len, &peer)) {
		/* Cancelled before it arrived, or from a sender we cannot answer. */
		free(pages);
		return;
	}
	int err;
	struct xfer_kv_plan *pl = p->leaving ? NULL : check_req(p, m, pages, &err);
	if (p->leaving)
		err = -ESHUTDOWN;
	if (pl && (err = attach(p, src_id, peer, m, pages, pl)) == 0)
		return;
	free(pl);
	free(pages);
	p->st.msgs_dropped += err == -EPROTO;
	refuse(p, peer, m->dseq, err);
}

static uint32_t *copy_pages(const struct kv_msg *m, uint32_t *into)
{
	for (uint32_t i = 0; i < m->count; i++)
		into[m->first + i] = xi_kv_page_at(m, i);
	return into;
}

static void partial_free(struct kv_partial *pa)
{
	free(pa->pages);
	free(pa->seen);
	free(pa->first_msg);
	*pa = (struct kv_partial){0};
}

static struct kv_partial *partial_for(xfer_kv_prefiller_t *p, uint64_t src_id, uint64_t dseq)
{
	struct kv_partial *spare = NULL;
	for (uint32_t i = 0; i < p->npartials; i++) {
		struct kv_partial *pa = &p->partials[i];
		if (pa->used && pa->src_id == src_id && pa->dseq == dseq)
			return pa;
		if (!pa->used && !spare)
			spare = pa;
	}
	return spare;
}

/* Chunks must agree on everything but their pages. */
static bool same_fixed(const struct kv_msg *a, const struct kv_msg *b)
{
	return a->id == b->id && a->imm == b->imm && a->expected == b->expected &&
	       a->tokens == b->tokens && a->npages == b->npages && a->ctx_cap == b->ctx_cap &&
	       a->ctx_off == b->ctx_off && same_layout(&a->src, &b->src) &&
	       same_layout(&a->dst, &b->dst) && a->kv_desc_len == b->kv_desc_len &&
	       !memcmp(a->kv_desc, b->kv_desc, a->kv_desc_len) && a->ctx_desc_len == b->ctx_desc_len &&
	       !memcmp(a->ctx_desc, b->ctx_desc, a->ctx_desc_len);
}

void xi_kv_pf_on_req_chunk(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m,
		     const void *raw, size_t len)
{
	if (m->count == m->npages) {
		uint32_t *pages = malloc((size_t)m->npages * sizeof(*pages));
		if (pages)
			on_req(p, src_id, m, copy_pages(m, pages));
		return;
	}
	struct kv_partial *pa = partial_for(p, src_id, m->dseq);
	if (!pa) {
		p->st.msgs_dropped++; /* too many requests half-received */
		return;
	}
	struct kv_msg first;
	if (!pa->used) {
		*pa = (struct kv_partial){.used = true, .src_id = src_id, .dseq = m->dseq,
					  .t_first = xi_kv_now_ns(), .npages = m->npages,
					  .pages = malloc((size_t)m->npages * sizeof(uint32_t)),
					  .seen = calloc(m->npages, 1), .first_msg = malloc(len),
					  .first_len = len};
		if (!pa->pages || !pa->seen || !pa->first_msg) {
			partial_free(pa);
			return;
		}
		memcpy(pa->first_msg, raw, len);
	} else if (xi_kv_msg_decode(pa->first_msg, pa->first_len, &first) || !same_fixed(&first, m)) {
		p->st.msgs_dropped++;
		return;
	}
	for (uint32_t i = 0; i < m->count; i++) {
		if (!pa->seen[m->first + i]) {
			pa->seen[m->first + i] = 1;
			pa->got++;
		}
	}
	copy_pages(m, pa->pages);
	if (pa->got < pa->npages)
		return;
	uint32_t *pages = pa->pages;
	pa->pages = NULL;
	if (xi_kv_msg_decode(pa->first_msg, pa->first_len, &first) == 0)
		on_req(p, src_id, &first, pages);
	else
		free(pages);
	partial_free(pa);
}

void xi_kv_pf_partials_expire(xfer_kv_prefiller_t *p, uint64_t now)
{
	for (uint32_t i = 0; i < p->npartials; i++)
		if (p->partials[i].used && now - p->partials[i].t_first > KV_PARTIAL_NS)
			partial_free(&p->partials[i]);
}

void xi_kv_pf_on_cancel(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m)
{
	p->st.cancels++;
	struct kv_dest *d = find_dest(p, src_id, m->dseq);
	if (d) {
		if (d->state == DS_ACTIVE || d->state == DS_COMPLETE)
			xi_kv_pf_dest_stop(p, d, -ECANCELED, RP_ACK);
		else if (d->state == DS_QUIESCED)
			xi_kv_pf_reply(p, d, true);
		/* DRAINING: its answer follows when the drain completes. */
		return;
	}
	/* Never seen (or already over): nothing of it is in flight here. A
	 * request that arrives later is ignored. */
	struct kv_partial *pa = partial_for(p, src_id, m->dseq);
	if (pa && pa->used)
		partial_free(pa);
	xi_kv_pf_tomb_add(p, TOMB_DSEQ, src_id, m->dseq, 0);
	/* The job need not wait for that decode rank's request. */
	struct kv_job *j = xi_kv_pf_job_find(p, m->id);
	if (j) {
		j->gone_mask |= 1ull << m->dst.tp_rank;
		xi_kv_pf_job_check(p, j);
	} else {
		xi_kv_pf_tomb_add(p, TOMB_GONE, 0, m->id, m->dst.tp_rank);
	}
	xfer_peer_t peer;
	if (xi_kv_peer_for(&p->core, src_id, m->addr, m->addr_len, &peer) == 0) {
		struct kv_msg ack = {.type = KV_MSG_ACK, .dseq = m->dseq};
		xi_kv_send(&p->core, peer, &ack, NULL);
	}
}

void xi_kv_pf_on_hello(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m)
{
	xfer_peer_t peer;
	if (xi_kv_peer_for(&p->core, src_id, m->addr, m->addr_len, &peer))
		p->st.msgs_dropped++;
}
