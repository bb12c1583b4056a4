/* The prefiller's control thread: messages from decoders, completions of
 * its writes and cancels, decoders that die, and its timers. */
#include <errno.h>
#include <stdlib.h>

#include "kv_pf.h"

static void on_msg(xfer_kv_prefiller_t *p, const struct kv_item *it)
{
	struct kv_msg m;
	if (xi_kv_msg_decode(it->data, it->len, &m)) {
		p->st.msgs_dropped++;
		return;
	}
	if (m.type == KV_MSG_REQ)
		xi_kv_pf_on_req_chunk(p, it->src_id, &m, it->data, it->len);
	else if (m.type == KV_MSG_CANCEL)
		xi_kv_pf_on_cancel(p, it->src_id, &m);
	else if (m.type == KV_MSG_HELLO)
		xi_kv_pf_on_hello(p, it->src_id, &m);
	else
		p->st.msgs_dropped++;
}

static void on_write_done(xfer_kv_prefiller_t *p, struct kv_dest *d, int res)
{
	d->outstanding--;
	p->st.writes_cut += res == -ECANCELED;
	/* -ECANCELED comes only from our own cancel, already under way. */
	if (res < 0 && d->state == DS_ACTIVE)
		xi_kv_pf_dest_stop(p, d, res, RP_FAIL);
	if (d->state == DS_ACTIVE)
		xi_kv_pf_pump(p, d);
	else
		xi_kv_pf_job_check(p, d->job);
}

static void on_cancel_done(xfer_kv_prefiller_t *p, struct kv_dest *d, int res)
{
	if (res == -ENOSPC) {
		/* The engine tracks a bounded number of cancels at once. */
		d->cancel_pending = true;
		xi_kv_core_kick(&p->core);
		return;
	}
	d->state = DS_QUIESCED;
	xi_kv_pf_reply(p, d, res >= 0);
	xi_kv_pf_job_check(p, d->job);
}

static void on_send_done(xfer_kv_prefiller_t *p, struct kv_sendbuf *b)
{
	if (b->type == KV_MSG_BYE && p->bye_pending)
		p->bye_pending--;
	free(b);
}

static void on_peer_down(xfer_kv_prefiller_t *p, const struct kv_item *it)
{
	xi_kv_peer_mark_dead(&p->core, it->peer);
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++) {
		struct kv_job *j = &p->jobs[i];
		for (struct kv_dest *d = j->used ? j->dests : NULL; d; d = d->next)
			if (d->engine_id == it->src_id)
				xi_kv_pf_dest_stop(p, d, -XFER_EPEER, RP_FAIL);
	}
}

void xi_kv_pf_on_item(void *owner, const struct kv_item *it)
{
	xfer_kv_prefiller_t *p = owner;
	switch (it->kind) {
	case KV_IT_MSG:
		on_msg(p, it);
		break;
	case KV_IT_PEER_DOWN:
		on_peer_down(p, it);
		break;
	case KV_IT_CQE: {
		void *ptr = (void *)(uintptr_t)it->cqe.user_data;
		if (it->cqe.kind == XFER_OP_SEND)
			on_send_done(p, ptr);
		else if (it->cqe.kind == XFER_OP_CANCEL)
			on_cancel_done(p, ptr, it->cqe.res);
		else
			on_write_done(p, ptr, it->cqe.res);
		break;
	}
	}
}

static bool wanted(void *owner, xfer_peer_t peer)
{
	xfer_kv_prefiller_t *p = owner;
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++)
		for (struct kv_dest *d = p->jobs[i].used ? p->jobs[i].dests : NULL; d; d = d->next)
			if (d->peer == peer)
				return true;
	/* Decoders stay known while we are in service: they come back. */
	return !p->bye_sent;
}

static void say_goodbye(xfer_kv_prefiller_t *p)
{
	p->bye_sent = true;
	struct kv_msg m = {.type = KV_MSG_BYE};
	for (uint32_t i = 0; i < p->core.npeers; i++)
		if (!p->core.peers[i].dead && xi_kv_send(&p->core, p->core.peers[i].peer, &m, NULL) == 0)
			p->bye_pending++;
}

static uint64_t tick_job(xfer_kv_prefiller_t *p, struct kv_job *j, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	bool all_asked = j->know_dsts &&
			 ((j->attached_mask | j->gone_mask) & j->expected_mask) == j->expected_mask;
	if (!all_asked && !j->aborted) {
		if (now >= j->deadline) {
			j->aborted = true; /* stop waiting for decode ranks that never asked */
			xi_kv_pf_job_check(p, j);
			if (!j->used)
				return next;
		} else {
			next = j->deadline;
		}
	}
	for (struct kv_dest *d = j->dests; d && j->used;) {
		struct kv_dest *nd = d->next;
		if (d->state == DS_ACTIVE && now >= d->deadline)
			xi_kv_pf_dest_stop(p, d, -ETIMEDOUT, RP_FAIL); /* the decoder gave up by now */
		else if (d->state == DS_ACTIVE && d->deadline < next)
			next = d->deadline;
		if (d->cancel_pending)
			xi_kv_pf_cancel_retry(p, d);
		else if (d->blocked && d->state == DS_ACTIVE)
			xi_kv_pf_pump(p, d);
		if (j->used && (d->cancel_pending || d->blocked))
			next = now + 200000;
		d = nd;
	}
	return next;
}

uint64_t xi_kv_pf_on_tick(void *owner, uint64_t now)
{
	xfer_kv_prefiller_t *p = owner;
	uint64_t next = now + 1000000000ull;
	uint32_t active = 0;
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++) {
		if (!p->jobs[i].used)
			continue;
		uint64_t t = tick_job(p, &p->jobs[i], now);
		if (t < next)
			next = t;
		active += p->jobs[i].used;
	}
	xi_kv_pf_partials_expire(p, now);
	if (p->leaving && !active && !p->bye_sent)
		say_goodbye(p);
	if (p->bye_sent && !p->bye_pending && !p->left_told) {
		p->left_told = true;
		xi_kv_pf_event(p, XFER_KV_PF_LEFT, 0, NULL);
	}
	if (xi_kv_peer_reap(&p->core, wanted) && now + 10000000ull < next)
		next = now + 10000000ull;
	return next;
}
