/* Prefill jobs: creation, the events the application sees, and the end of a
 * job once nothing of it can still be written. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_pf.h"

struct kv_job *xi_kv_pf_job_find(xfer_kv_prefiller_t *p, uint64_t id)
{
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++)
		if (p->jobs[i].used && p->jobs[i].id == id)
			return &p->jobs[i];
	return NULL;
}

struct kv_job *xi_kv_pf_job_new(xfer_kv_prefiller_t *p, uint64_t id)
{
	uint32_t slot;
	for (uint32_t i = 0; i < p->cfg.max_jobs; i++) {
		struct kv_job *j = &p->jobs[i];
		if (j->used)
			continue;
		if (!xi_kv_stack_pop(&p->free_ctx, &slot, 1))
			return NULL;
		*j = (struct kv_job){.used = true, .id = id, .ctx_slot = slot,
				     .deadline = xi_kv_now_ns() + p->cfg.job_timeout_ms * 1000000ull};
		uint64_t now = xi_kv_now_ns();
		for (uint32_t t = 0; t < KV_TOMBS; t++)
			if (p->tombs[t].kind == TOMB_GONE && p->tombs[t].key == id && p->tombs[t].until > now)
				j->gone_mask |= 1ull << p->tombs[t].rank;
		p->st.jobs++;
		return j;
	}
	return NULL;
}

void xi_kv_pf_event(xfer_kv_prefiller_t *p, uint32_t type, int32_t status, const struct kv_job *j)
{
	if (p->ev_count == p->ev_cap) {
		/* Grow, keeping the order: the application may be slow to poll. */
		uint32_t cap = p->ev_cap ? p->ev_cap * 2 : 64;
		struct xfer_kv_pf_event *q = malloc(cap * sizeof(*q));
		if (!q)
			return;
		for (uint32_t i = 0; i < p->ev_count; i++)
			q[i] = p->evq[(p->ev_head + i) % p->ev_cap];
		free(p->evq);
		p->evq = q;
		p->ev_head = 0;
		p->ev_cap = cap;
	}
	struct xfer_kv_pf_event *ev = &p->evq[(p->ev_head + p->ev_count++) % p->ev_cap];
	memset(ev, 0, offsetof(struct xfer_kv_pf_event, app));
	ev->type = type;
	ev->status = status;
	if (j) {
		ev->id = j->id;
		ev->tokens = j->tokens;
		ev->npages = j->npages;
		ev->app_len = j->app_len;
		memcpy(ev->app, j->app, j->app_len);
	}
	pthread_cond_broadcast(&p->core.app_cv);
}

void xi_kv_pf_tomb_add(xfer_kv_prefiller_t *p, uint32_t kind, uint64_t src_id, uint64_t key, uint32_t rank)
{
	p->tombs[p->tomb_next++ % KV_TOMBS] = (struct kv_tomb){
		.kind = kind, .rank = rank, .src_id = src_id, .key = key, .until = xi_kv_now_ns() + KV_TOMB_NS};
}

bool xi_kv_pf_tomb_has(xfer_kv_prefiller_t *p, uint32_t kind, uint64_t src_id, uint64_t key)
{
	uint64_t now = xi_kv_now_ns();
	for (uint32_t i = 0; i < KV_TOMBS; i++)
		if (p->tombs[i].kind == kind && p->tombs[i].until > now && p->tombs[i].src_id == src_id &&
		    p->tombs[i].key == key)
			return true;
	return false;
}

static void dest_free(struct kv_dest *d)
{
	xfer_rmr_free(d->kv);
	xfer_rmr_free(d->ctx);
	free(d->dst_pages);
	free(d->plan);
	free(d);
}

void xi_kv_pf_job_check(xfer_kv_prefiller_t *p, struct kv_job *j)
{
	if (!j->used)
		return;
	bool any_live = false, all_done = true;
	int32_t status = 0;
	for (struct kv_dest *d = j->dests; d; d = d->next) {
		if (d->state == DS_ACTIVE || d->state == DS_COMPLETE)
			any_live = true;
		if ((d->state != DS_COMPLETE && d->state != DS_QUIESCED) || d->outstanding)
			all_done = false;
		if (d->state == DS_QUIESCED && !status)
			status = d->err ? d->err : -ECANCELED;
	}
	bool all_asked = j->know_dsts &&
			 ((j->attached_mask | j->gone_mask) & j->expected_mask) == j->expected_mask;
	/* Every decode rank gave up: the application may stop computing. */
	if ((all_asked || j->aborted) && j->dests && !any_live && !j->cancel_told) {
		j->cancel_told = true;
		xi_kv_pf_event(p, XFER_KV_PF_CANCELLED, status, j);
	}
	if (!all_done || !(all_asked || j->aborted))
		return;
	if (!j->aborted && !j->finished && any_live)
		return;
	if (!status && j->aborted && !all_asked)
		status = -ETIMEDOUT;
	if (status)
		p->st.jobs_failed++;
	xi_kv_pf_event(p, XFER_KV_PF_DONE, status, j);
	xi_kv_pf_tomb_add(p, TOMB_JOB, 0, j->id, 0);
	while (j->dests) {
		struct kv_dest *d = j->dests;
		j->dests = d->next;
		dest_free(d);
	}
	free(j->src_pages);
	xi_kv_stack_push(&p->free_ctx, &j->ctx_slot, 1);
	*j = (struct kv_job){0};
}
