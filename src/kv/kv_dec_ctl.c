/* The decoder's state machine, run by its control thread (and by admit and
 * cancel) with core.mu held: immediate counters firing, prefillers' answers,
 * peer failures, and the deadlines that bound every request. */
#include <errno.h>
#include <stdlib.h>

#include "kv_dec.h"

struct kv_group *xi_kv_dec_group(xfer_kv_decoder_t *d, uint32_t id)
{
	struct kv_group *g = &d->groups[id % KV_GROUP_SLOTS];
	return g->used && g->gen == id / KV_GROUP_SLOTS ? g : NULL;
}

struct kv_dreq *xi_kv_dec_req_by_dseq(xfer_kv_decoder_t *d, uint64_t dseq)
{
	uint32_t slot = (uint32_t)(dseq & KV_SLOT_MASK);
	if (slot >= d->cfg.max_requests)
		return NULL;
	struct kv_dreq *r = &d->reqs[slot];
	return r->dseq == dseq && (r->state == DR_ACTIVE || r->state == DR_ABORTING) ? r : NULL;
}

static void push_event(xfer_kv_decoder_t *d, struct kv_dreq *r)
{
	uint32_t cap = d->cfg.max_requests;
	d->evq[(d->ev_head + d->ev_count) % cap] = (uint32_t)(r - d->reqs);
	d->ev_count++;
	pthread_cond_broadcast(&d->core.app_cv);
}

/* Nothing more can land: hand the request back with its one event. */
static void end(xfer_kv_decoder_t *d, struct kv_dreq *r)
{
	if (!r->expect_done) {
		/* Forget arrivals of this immediate (engine call: never on the worker). */
		uint32_t arrived;
		xfer_imm_disarm(d->core.e, r->imm, &arrived);
	}
	struct kv_group *g = xi_kv_dec_group(d, r->group);
	if (g)
		g->refs--;
	if (r->status == 0) {
		d->st.completed++;
		d->st.bytes_expected += r->bytes;
	} else if (r->status == -ECANCELED) {
		d->st.cancelled++;
	} else {
		d->st.failed++;
	}
	r->state = DR_ENDED;
	r->t_end = xi_kv_now_ns();
	push_event(d, r);
}

static bool quiesced(const struct kv_dreq *r)
{
	if (r->expect_done)
		return true; /* every write it will ever get has landed */
	for (uint32_t i = 0; i < r->nw; i++)
		if (!r->w[i].quiesced)
			return false;
	return true;
}

static void check(xfer_kv_decoder_t *d, struct kv_dreq *r)
{
	if (r->state == DR_ABORTING && quiesced(r))
		end(d, r);
}

static void send_cancel(xfer_kv_decoder_t *d, struct kv_dreq *r, struct kv_writer *w,
			struct kv_rank *rk, uint64_t now)
{
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(d->core.e, addr, sizeof(addr), NULL);
	struct kv_msg m = {.type = KV_MSG_CANCEL, .dseq = r->dseq, .id = r->id, .addr = addr,
			   .addr_len = (uint16_t)(alen > 0 ? alen : 0)};
	m.dst.tp_rank = d->cfg.layout.tp_rank;
	w->cancel_at = now + KV_CANCEL_RETRY_NS;
	w->cancel_sent = alen > 0 && xi_kv_send(&d->core, rk->peer, &m, NULL) == 0;
}

void xi_kv_dec_abort(xfer_kv_decoder_t *d, struct kv_dreq *r, int status)
{
	if (r->state == DR_ACTIVE) {
		uint64_t now = xi_kv_now_ns();
		r->state = DR_ABORTING;
		r->status = status;
		uint64_t grace = now + d->cfg.cancel_ms * 1000000ull;
		r->abort_deadline = grace < r->end_deadline ? grace : r->end_deadline;
		struct kv_group *g = xi_kv_dec_group(d, r->group);
		for (uint32_t i = 0; i < r->nw; i++) {
			struct kv_writer *w = &r->w[i];
			struct kv_rank *rk = g ? &g->ranks[w->rank] : NULL;
			if (!rk || rk->state == RANK_DEAD || !rk->lease.live || rk->lease.gen != w->lease_gen)
				w->quiesced = true; /* revoked already */
			if (!w->quiesced)
				send_cancel(d, r, w, rk, now);
		}
		xi_kv_core_kick(&d->core);
	}
	check(d, r);
}

static struct kv_writer *writer_from(xfer_kv_decoder_t *d, struct kv_dreq *r, uint64_t engine_id)
{
	struct kv_group *g = xi_kv_dec_group(d, r->group);
	for (uint32_t i = 0; g && i < r->nw; i++)
		if (g->ranks[r->w[i].rank].engine_id == engine_id)
			return &r->w[i];
	return NULL;
}

static void on_msg(xfer_kv_decoder_t *d, const struct kv_item *it)
{
	struct kv_msg m;
	if (xi_kv_msg_decode(it->data, it->len, &m)) {
		d->st.msgs_dropped++;
		return;
	}
	if (m.type == KV_MSG_BYE) {
		for (uint32_t s = 0; s < KV_GROUP_SLOTS; s++)
			for (uint32_t i = 0; d->groups[s].used && i < d->groups[s].n; i++)
				if (d->groups[s].ranks[i].engine_id == it->src_id &&
				    d->groups[s].ranks[i].state == RANK_LIVE)
					d->groups[s].ranks[i].state = RANK_LEFT;
		return;
	}
	struct kv_dreq *r = xi_kv_dec_req_by_dseq(d, m.dseq);
	struct kv_writer *w = r ? writer_from(d, r, it->src_id) : NULL;
	if (!w) {
		/* An answer about a request that has ended already (or a stranger). */
		if (m.type != KV_MSG_ACK && m.type != KV_MSG_FAIL)
			d->st.msgs_dropped++;
		return;
	}
	if (m.type == KV_MSG_ACK) {
		if (!w->quiesced)
			d->st.cancel_acks++;
		w->quiesced = true;
	} else if (m.type == KV_MSG_FAIL) {
		if (m.quiesced)
			w->quiesced = true;
		xi_kv_dec_abort(d, r, m.err);
	} else {
		d->st.msgs_dropped++;
	}
	check(d, r);
}

static void on_send_done(xfer_kv_decoder_t *d, struct kv_sendbuf *b, int res)
{
	struct kv_dreq *r = res < 0 ? xi_kv_dec_req_by_dseq(d, b->dseq) : NULL;
	if (r) {
		struct kv_writer *w = writer_from(d, r, b->engine_id);
		if (b->type == KV_MSG_REQ)
			xi_kv_dec_abort(d, r, res);
		else if (b->type == KV_MSG_CANCEL && w)
			w->cancel_sent = false; /* the tick sends it again */
	}
	free(b);
}

static void on_expect(xfer_kv_decoder_t *d, uint64_t dseq, int res)
{
	struct kv_dreq *r = xi_kv_dec_req_by_dseq(d, dseq);
	if (!r || res == -ECANCELED)
		return;
	if (res == 0) {
		r->expect_done = true;
		if (r->state == DR_ACTIVE)
			end(d, r);
		else
			check(d, r);
		return;
	}
	xi_kv_dec_abort(d, r, res);
}

static void on_peer_down(xfer_kv_decoder_t *d, const struct kv_item *it)
{
	xi_kv_peer_mark_dead(&d->core, it->peer);
	for (uint32_t s = 0; s < KV_GROUP_SLOTS; s++) {
		struct kv_group *g = &d->groups[s];
		for (uint32_t i = 0; g->used && i < g->n; i++) {
			struct kv_rank *rk = &g->ranks[i];
			if (rk->peer != it->peer || rk->engine_id != it->src_id || rk->state == RANK_DEAD)
				continue;
			rk->state = RANK_DEAD;
			/* Its writes may still be on their way (in our socket buffers). */
			xi_kv_dec_lease_revoke(d, g->gen * KV_GROUP_SLOTS + s, i, -XFER_EPEER);
		}
	}
}

void xi_kv_dec_on_item(void *owner, const struct kv_item *it)
{
	xfer_kv_decoder_t *d = owner;
	switch (it->kind) {
	case KV_IT_MSG:
		on_msg(d, it);
		break;
	case KV_IT_PEER_DOWN:
		on_peer_down(d, it);
		break;
	case KV_IT_CQE:
		if (it->cqe.kind == XFER_OP_SEND)
			on_send_done(d, (struct kv_sendbuf *)(uintptr_t)it->cqe.user_data, it->cqe.res);
		else if (it->cqe.kind == XFER_OP_EXPECT)
			on_expect(d, it->cqe.user_data, it->cqe.res);
		break;
	}
}

static bool group_wants_peer(void *owner, xfer_peer_t peer)
{
	xfer_kv_decoder_t *d = owner;
	for (uint32_t s = 0; s < KV_GROUP_SLOTS; s++)
		for (uint32_t i = 0; d->groups[s].used && i < d->groups[s].n; i++)
			if (d->groups[s].ranks[i].peer == peer)
				return true;
	return false;
}

/* A group that left, once no request refers to it: registrations and peers go. */
static bool retire_groups(xfer_kv_decoder_t *d)
{
	bool retired = false;
	for (uint32_t s = 0; s < KV_GROUP_SLOTS; s++) {
		struct kv_group *g = &d->groups[s];
		if (!g->used || !g->leaving || g->refs)
			continue;
		for (uint32_t i = 0; i < g->n; i++)
			xi_kv_dec_lease_drop(d, &g->ranks[i]);
		free(g->ranks);
		g->ranks = NULL;
		g->used = false;
		retired = true;
	}
	return retired;
}

static uint64_t tick_request(xfer_kv_decoder_t *d, struct kv_dreq *r, uint64_t now)
{
	if (r->state == DR_ACTIVE) {
		/* The immediate counter's deadline normally comes first. */
		if (now >= r->end_deadline)
			xi_kv_dec_abort(d, r, -ETIMEDOUT);
		else
			return r->end_deadline;
	}
	if (r->state != DR_ABORTING)
		return UINT64_MAX;
	struct kv_group *g = xi_kv_dec_group(d, r->group);
	if (now >= r->abort_deadline) {
		/* Not confirmed in time: make sure instead, by revocation. */
		for (uint32_t i = 0; i < r->nw && r->state == DR_ABORTING; i++)
			if (!r->w[i].quiesced)
				xi_kv_dec_lease_revoke(d, r->group, r->w[i].rank, -ECONNABORTED);
		check(d, r);
		return UINT64_MAX;
	}
	uint64_t next = r->abort_deadline;
	for (uint32_t i = 0; g && i < r->nw; i++) {
		struct kv_writer *w = &r->w[i];
		if (w->quiesced)
			continue;
		if (!w->cancel_sent && now >= w->cancel_at)
			send_cancel(d, r, w, &g->ranks[w->rank], now);
		if (!w->cancel_sent && w->cancel_at < next)
			next = w->cancel_at;
	}
	return next;
}

uint64_t xi_kv_dec_on_tick(void *owner, uint64_t now)
{
	xfer_kv_decoder_t *d = owner;
	uint64_t next = now + 1000000000ull;
	for (uint32_t s = 0; s < d->cfg.max_requests; s++) {
		uint64_t t = tick_request(d, &d->reqs[s], now);
		if (t < next)
			next = t;
	}
	if (retire_groups(d) || xi_kv_peer_reap(&d->core, group_wants_peer))
		if (now + 10000000ull < next)
			next = now + 10000000ull; /* peers still busy: try again soon */
	return next;
}
