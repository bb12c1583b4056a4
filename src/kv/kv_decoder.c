/* The decoder's public calls: creation, prefill instances joining and
 * leaving, admission, cancellation, events and release. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_dec.h"

#define DEFAULT_TIMEOUT_MS 30000
#define DEFAULT_CANCEL_MS 1000
#define DEFAULT_IMM_BASE 0x4b560000u /* "KV" in the high half */
#define DEFAULT_IMM_SPAN (1u << 16)

void xfer_kv_dec_config_init(struct xfer_kv_dec_config *c)
{
	memset(c, 0, sizeof(*c));
	c->max_requests = 256;
	c->imm_base = DEFAULT_IMM_BASE;
	c->imm_span = DEFAULT_IMM_SPAN;
	c->cancel_ms = DEFAULT_CANCEL_MS;
}

static void free_all(xfer_kv_decoder_t *d)
{
	if (d->groups)
		for (uint32_t s = 0; s < KV_GROUP_SLOTS; s++)
			free(d->groups[s].ranks);
	if (d->reqs)
		for (uint32_t s = 0; s < d->cfg.max_requests; s++)
			free(d->reqs[s].pages);
	free(d->groups);
	free(d->reqs);
	free(d->evq);
	free(d->ctx_mem);
	xi_kv_peers_free(&d->core);
	xi_kv_stack_free(&d->free_pages);
	xi_kv_stack_free(&d->free_slots);
	free(d);
}

int xfer_kv_decoder_create(const struct xfer_kv_dec_config *cfg, const struct xfer_attr *attr,
			   xfer_kv_decoder_t **out)
{
	if (!cfg || !attr || !out || !cfg->kv || xfer_kv_layout_check(&cfg->layout))
		return -EINVAL;
	if (!cfg->max_requests || cfg->max_requests > KV_SLOT_MASK || !cfg->imm_span ||
	    cfg->imm_span < cfg->max_requests || cfg->imm_base > UINT32_MAX - (cfg->imm_span - 1) ||
	    cfg->max_requests >= attr->imm_slots)
		return -EINVAL;
	xfer_kv_decoder_t *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->kv_bytes = xfer_kv_layout_bytes(&cfg->layout);
	d->ctx_stride = ((uint64_t)cfg->ctx_bytes + 63) / 64 * 64;
	d->reqs = calloc(cfg->max_requests, sizeof(*d->reqs));
	d->evq = calloc(cfg->max_requests, sizeof(*d->evq));
	d->groups = calloc(KV_GROUP_SLOTS, sizeof(*d->groups));
	if (cfg->ctx_bytes)
		d->ctx_mem = aligned_alloc(64, d->ctx_stride * cfg->max_requests);
	if (!d->reqs || !d->evq || !d->groups || (cfg->ctx_bytes && !d->ctx_mem) ||
	    xi_kv_stack_init(&d->free_pages, cfg->layout.pages) ||
	    xi_kv_stack_init(&d->free_slots, cfg->max_requests)) {
		free_all(d);
		return -ENOMEM;
	}
	if (d->ctx_mem)
		memset(d->ctx_mem, 0, d->ctx_stride * cfg->max_requests);
	d->core.owner = d;
	d->core.on_item = xi_kv_dec_on_item;
	d->core.on_tick = xi_kv_dec_on_tick;
	int ret = xi_kv_core_start(&d->core, attr);
	if (ret) {
		xi_kv_core_stop(&d->core);
		free_all(d);
		return ret;
	}
	*out = d;
	return 0;
}

void xfer_kv_decoder_destroy(xfer_kv_decoder_t *d)
{
	if (!d)
		return;
	xi_kv_core_stop(&d->core);
	/* Destroying the engine frees every region still registered. */
	xfer_engine_destroy(d->core.e);
	free_all(d);
}

xfer_engine_t *xfer_kv_decoder_engine(xfer_kv_decoder_t *d)
{
	return d ? d->core.e : NULL;
}

/* ----------------------------------------------------------------- groups */

static int join_locked(xfer_kv_decoder_t *d, const struct xfer_kv_rank *ranks, uint32_t n,
		       uint32_t *group)
{
	uint32_t s;
	for (s = 0; s < KV_GROUP_SLOTS && d->groups[s].used; s++)
		;
	if (s == KV_GROUP_SLOTS)
		return -ENOSPC;
	struct kv_rank *rk = calloc(n, sizeof(*rk));
	if (!rk)
		return -ENOMEM;
	int ret = 0;
	uint32_t i;
	for (i = 0; i < n && !ret; i++) {
		struct xfer_kv_plan *plan = malloc(sizeof(*plan));
		const struct xfer_kv_layout *l = &ranks[i].layout;
		if (!plan)
			ret = -ENOMEM;
		else if (l->tp_size != n || l->tp_rank != i ||
			 xfer_kv_plan(l, &d->cfg.layout, plan))
			ret = -EINVAL;
		else if (!(ret = xi_kv_peer_add(&d->core, ranks[i].addr, ranks[i].addr_len, &rk[i].peer)))
			rk[i] = (struct kv_rank){.peer = rk[i].peer,
						 .engine_id = xfer_peer_id(d->core.e, rk[i].peer),
						 .layout = *l, .nsegs = plan->nsegs,
						 .writes_ctx = plan->writes_ctx, .state = RANK_LIVE};
		free(plan);
	}
	if (ret) {
		/* Peers added for this group go with the next reap (nothing keeps them). */
		free(rk);
		xi_kv_core_kick(&d->core);
		return ret;
	}
	struct kv_group *g = &d->groups[s];
	*g = (struct kv_group){.used = true, .gen = g->gen + 1, .n = n, .ranks = rk};
	*group = g->gen * KV_GROUP_SLOTS + s;
	/* Introduce ourselves: the ranks add us now, so that liveness probes
	 * work before the first request (and a rank that dies early is seen). */
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(d->core.e, addr, sizeof(addr), NULL);
	struct kv_msg hello = {.type = KV_MSG_HELLO, .addr = addr, .addr_len = (uint16_t)alen};
	for (i = 0; i < n && alen > 0; i++)
		xi_kv_send(&d->core, rk[i].peer, &hello, NULL);
	return 0;
}

int xfer_kv_dec_join(xfer_kv_decoder_t *d, const struct xfer_kv_rank *ranks, uint32_t n,
		     uint32_t *group)
{
	if (!d || !ranks || !n || n > XFER_KV_TP_MAX || !group)
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	int ret = join_locked(d, ranks, n, group);
	pthread_mutex_unlock(&d->core.mu);
	return ret;
}

int xfer_kv_dec_leave(xfer_kv_decoder_t *d, uint32_t group)
{
	if (!d)
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	struct kv_group *g = xi_kv_dec_group(d, group);
	int ret = g && !g->leaving ? 0 : -ENOENT;
	if (!ret) {
		g->leaving = true;
		for (uint32_t s = 0; s < d->cfg.max_requests; s++)
			if (d->reqs[s].group == group && d->reqs[s].state == DR_ACTIVE)
				xi_kv_dec_abort(d, &d->reqs[s], -ESHUTDOWN);
		xi_kv_core_kick(&d->core);
	}
	pthread_mutex_unlock(&d->core.mu);
	return ret;
}

static int group_state(const struct kv_group *g)
{
	int st = g->leaving ? XFER_KV_GROUP_LEFT : XFER_KV_GROUP_LIVE;
	for (uint32_t i = 0; i < g->n; i++) {
		if (g->ranks[i].state == RANK_DEAD)
			return XFER_KV_GROUP_DEAD;
		if (g->ranks[i].state == RANK_LEFT)
			st = XFER_KV_GROUP_LEFT;
	}
	return st;
}

int xfer_kv_dec_group_state(xfer_kv_decoder_t *d, uint32_t group)
{
	if (!d)
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	struct kv_group *g = xi_kv_dec_group(d, group);
	int ret = g ? group_state(g) : -ENOENT;
	pthread_mutex_unlock(&d->core.mu);
	return ret;
}

/* -------------------------------------------------------------- admission */

static struct kv_dreq *find_id(xfer_kv_decoder_t *d, uint64_t id)
{
	for (uint32_t s = 0; s < d->cfg.max_requests; s++)
		if (d->reqs[s].state != DR_FREE && d->reqs[s].id == id)
			return &d->reqs[s];
	return NULL;
}

static bool imm_in_use(xfer_kv_decoder_t *d, uint32_t imm)
{
	for (uint32_t s = 0; s < d->cfg.max_requests; s++)
		if (d->reqs[s].state != DR_FREE && d->reqs[s].imm == imm)
			return true;
	return false;
}

/* One writer's REQ, in as many chunks as its page list needs. */
static int send_req(xfer_kv_decoder_t *d, struct kv_dreq *r, const struct xfer_kv_request *spec,
		    struct kv_rank *rk, uint64_t expected, uint32_t xfer_ms)
{
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(d->core.e, addr, sizeof(addr), NULL);
	if (alen < 0)
		return alen;
	struct kv_msg m = {.type = KV_MSG_REQ, .dseq = r->dseq, .id = r->id, .imm = r->imm,
			   .expected = (uint32_t)expected, .tokens = spec->tokens,
			   .npages = r->npages, .ctx_cap = d->cfg.ctx_bytes, .xfer_ms = xfer_ms,
			   .ctx_off = (uint64_t)r->ctx_slot * d->ctx_stride,
			   .src = rk->layout, .dst = d->cfg.layout, .addr = addr,
			   .addr_len = (uint16_t)alen, .kv_desc = rk->lease.kv_desc,
			   .kv_desc_len = rk->lease.kv_len, .ctx_desc = rk->lease.ctx_desc,
			   .ctx_desc_len = rk->lease.ctx_len, .app = spec->app,
			   .app_len = (uint16_t)spec->app_len};
	size_t fixed = xi_kv_req_fixed_len(&m);
	if (fixed + 4 > d->core.attr.msg_max)
		return -EMSGSIZE;
	uint32_t per = (uint32_t)((d->core.attr.msg_max - fixed) / 4);
	for (uint32_t first = 0; first < r->npages; first += per) {
		m.first = first;
		m.count = r->npages - first < per ? r->npages - first : per;
		int ret = xi_kv_send(&d->core, rk->peer, &m, r->pages + first);
		if (ret)
			return ret;
	}
	return 0;
}

static int admit_locked(xfer_kv_decoder_t *d, const struct xfer_kv_request *spec)
{
	struct kv_group *g = xi_kv_dec_group(d, spec->group);
	if (!g)
		return -ENOENT;
	int gs = group_state(g);
	if (gs != XFER_KV_GROUP_LIVE)
		return gs == XFER_KV_GROUP_DEAD ? -XFER_EPEER : -ESHUTDOWN;
	if (find_id(d, spec->id))
		return -EEXIST;
	const struct xfer_kv_layout *me = &d->cfg.layout;
	uint32_t npages = (uint32_t)(((uint64_t)spec->tokens + me->page_tokens - 1) / me->page_tokens);
	if (npages > KV_NPAGES_MAX)
		return -E2BIG;
	uint32_t slot;
	if (!xi_kv_stack_pop(&d->free_slots, &slot, 1))
		return -ENOSPC;
	struct kv_dreq *r = &d->reqs[slot];
	uint32_t *pages = malloc((size_t)npages * sizeof(*pages));
	if (!pages || !xi_kv_stack_pop(&d->free_pages, pages, npages)) {
		free(pages);
		xi_kv_stack_push(&d->free_slots, &slot, 1);
		return -ENOSPC;
	}
	uint64_t timeout = spec->timeout_ms ? spec->timeout_ms : DEFAULT_TIMEOUT_MS;
	uint64_t cancel = d->cfg.cancel_ms < timeout / 2 ? d->cfg.cancel_ms : timeout / 2;
	uint64_t now = xi_kv_now_ns();
	free(r->pages);
	*r = (struct kv_dreq){.id = spec->id, .group = spec->group, .npages = npages,
			      .ctx_slot = slot, .pages = pages, .t_admit = now,
			      .end_deadline = now + timeout * 1000000ull};
	do {
		d->seq++;
		r->imm = d->cfg.imm_base + (uint32_t)(d->seq % d->cfg.imm_span);
	} while (imm_in_use(d, r->imm));
	r->dseq = d->seq << KV_SLOT_BITS | slot;

	int ret = 0;
	uint64_t total = 0, hb = xfer_kv_head_bytes(me);
	for (uint32_t i = 0; i < g->n && !ret; i++) {
		struct kv_rank *rk = &g->ranks[i];
		if (!rk->nsegs && !rk->writes_ctx)
			continue;
		if (!(ret = xi_kv_dec_lease_ensure(d, rk))) {
			r->w[r->nw++] = (struct kv_writer){.rank = i, .lease_gen = rk->lease.gen};
			total += (uint64_t)rk->nsegs * me->layers * npages + rk->writes_ctx;
		}
	}
	if (!ret && total > UINT32_MAX)
		ret = -E2BIG;
	struct xfer_completion c = xi_kv_completion(&d->core, r->dseq, 0, timeout - cancel);
	if (!ret)
		ret = xfer_expect_imm(d->core.e, r->imm, (uint32_t)total, &c);
	if (ret) {
		xi_kv_stack_push(&d->free_pages, pages, npages);
		xi_kv_stack_push(&d->free_slots, &slot, 1);
		r->state = DR_FREE;
		return ret;
	}
	uint32_t first;
	r->expected = total;
	r->bytes = (uint64_t)npages * hb * me->layers * xfer_kv_local_heads(me, &first) *
		   (me->kind == XFER_KV_GQA ? 2 : 1);
	r->state = DR_ACTIVE;
	g->refs++;
	d->st.admitted++;
	if (d->ctx_mem)
		memset(d->ctx_mem + (uint64_t)slot * d->ctx_stride, 0, d->ctx_stride);
	/* From here on the request ends only through its event. */
	for (uint32_t i = 0; i < r->nw && !ret; i++) {
		struct kv_rank *rk = &g->ranks[r->w[i].rank];
		ret = send_req(d, r, spec, rk, (uint64_t)rk->nsegs * me->layers * npages + rk->writes_ctx,
			       (uint32_t)(timeout - cancel));
	}
	if (ret)
		xi_kv_dec_abort(d, r, ret);
	xi_kv_core_kick(&d->core);
	return 0;
}

int xfer_kv_dec_admit(xfer_kv_decoder_t *d, const struct xfer_kv_request *r)
{
	if (!d || !r || !r->tokens || r->app_len > XFER_KV_APP_MAX || (r->app_len && !r->app))
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	int ret = admit_locked(d, r);
	pthread_mutex_unlock(&d->core.mu);
	return ret;
}

int xfer_kv_dec_cancel(xfer_kv_decoder_t *d, uint64_t id)
{
	if (!d)
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	struct kv_dreq *r = find_id(d, id);
	int ret = !r ? -ENOENT : r->state == DR_ENDED || r->state == DR_POLLED ? -EALREADY : 0;
	if (!ret)
		xi_kv_dec_abort(d, r, -ECANCELED);
	pthread_mutex_unlock(&d->core.mu);
	return ret;
}

/* ------------------------------------------------------- events, release */

static void fill_event(xfer_kv_decoder_t *d, struct kv_dreq *r, struct xfer_kv_dec_event *ev)
{
	*ev = (struct xfer_kv_dec_event){.id = r->id, .status = r->status, .npages = r->npages,
					 .pages = r->pages,
					 .ctx = d->ctx_mem ? d->ctx_mem + (uint64_t)r->ctx_slot * d->ctx_stride
							   : NULL,
					 .elapsed_ns = r->t_end - r->t_admit};
}

int xfer_kv_dec_poll(xfer_kv_decoder_t *d, struct xfer_kv_dec_event *ev, int max,
		     uint64_t timeout_ms)
{
	if (!d || !ev || max <= 0)
		return -EINVAL;
	uint64_t until = xi_kv_now_ns() + timeout_ms * 1000000ull;
	pthread_mutex_lock(&d->core.mu);
	while (!d->ev_count && xi_kv_now_ns() < until) {
		struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
				      .tv_nsec = (long)(until % 1000000000ull)};
		pthread_cond_timedwait(&d->core.app_cv, &d->core.mu, &ts);
	}
	int n = 0;
	while (n < max && d->ev_count) {
		struct kv_dreq *r = &d->reqs[d->evq[d->ev_head]];
		d->ev_head = (d->ev_head + 1) % d->cfg.max_requests;
		d->ev_count--;
		r->state = DR_POLLED;
		fill_event(d, r, &ev[n++]);
	}
	pthread_mutex_unlock(&d->core.mu);
	return n;
}

int xfer_kv_dec_release(xfer_kv_decoder_t *d, uint64_t id)
{
	if (!d)
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	struct kv_dreq *r = find_id(d, id);
	int ret = !r ? -ENOENT : r->state != DR_POLLED ? -EBUSY : 0;
	if (!ret) {
		xi_kv_stack_push(&d->free_pages, r->pages, r->npages);
		xi_kv_stack_push(&d->free_slots, &r->ctx_slot, 1);
		r->state = DR_FREE;
	}
	pthread_mutex_unlock(&d->core.mu);
	return ret;
}

int xfer_kv_dec_pages(xfer_kv_decoder_t *d, uint64_t id, const uint32_t **pages, uint32_t *n)
{
	if (!d || !pages || !n)
		return -EINVAL;
	pthread_mutex_lock(&d->core.mu);
	struct kv_dreq *r = find_id(d, id);
	if (r) {
		*pages = r->pages;
		*n = r->npages;
	}
	pthread_mutex_unlock(&d->core.mu);
	return r ? 0 : -ENOENT;
}

uint32_t xfer_kv_dec_free_pages(xfer_kv_decoder_t *d)
{
	pthread_mutex_lock(&d->core.mu);
	uint32_t n = d->free_pages.n;
	pthread_mutex_unlock(&d->core.mu);
	return n;
}

void xfer_kv_dec_stats(xfer_kv_decoder_t *d, struct xfer_kv_dec_stats *out)
{
	pthread_mutex_lock(&d->core.mu);
	*out = d->st;
	out->msgs_dropped += __atomic_load_n(&d->core.dropped, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&d->core.mu);
}
