#include "core/op.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/cancel.h"
#include "core/deliver.h"
#include "core/worker.h"
#include "util/sys.h"

int xi_ops_init(struct worker *w)
{
	const xfer_engine_t *e = w->e;
	w->ops = calloc(e->attr.max_ops, sizeof(*w->ops));
	if (!w->ops)
		return -ENOMEM;
	for (uint32_t i = e->attr.max_ops; i-- > 0;) {
		w->ops[i].next_post = w->free_ops;
		w->free_ops = &w->ops[i];
	}
	w->live.next_live = w->live.prev_live = &w->live;
	return 0;
}

void xi_ops_free(struct worker *w)
{
	free(w->ops);
	w->ops = NULL;
}

struct op *xi_op_start(struct worker *w, const struct sub *s)
{
	struct op *op = w->free_ops;
	if (!op)
		return NULL;
	w->free_ops = op->next_post;
	memset(op, 0, sizeof(*op));
	op->s = *s;
	if (s->t_call)
		op->t_deq = xi_now_ns();
	op->shards = 1;
	op->total = 1;
	op->nic_base = (uint8_t)(w->rr_nic++ % w->e->nnics);
	xi_note_deadline(w, s->to.deadline_ns);
	op->live = true;
	op->next_live = &w->live;
	op->prev_live = w->live.prev_live;
	w->live.prev_live->next_live = op;
	w->live.prev_live = op;
	w->nlive++;
	return op;
}

void xi_op_enqueue(struct worker *w, struct op *op)
{
	op->queued = true;
	op->next_post = NULL;
	if (w->post_tail)
		w->post_tail->next_post = op;
	else
		w->post_head = op;
	w->post_tail = op;
}

struct op *xi_op_fifo_head(const struct worker *w)
{
	return w->post_head;
}

void xi_op_fifo_pop(struct worker *w)
{
	struct op *op = w->post_head;
	w->post_head = op->next_post;
	if (!w->post_head)
		w->post_tail = NULL;
	op->queued = false;
}

void xi_op_posted(struct op *op)
{
	if (op->s.t_call) {
		uint64_t t = xi_now_ns();
		if (!op->posted)
			op->t_first_ret = t;
		op->t_last = t;
	}
	op->posted++;
}

void xi_op_complete_early(struct worker *w, struct op *op, int status)
{
	if (op->user_done)
		return;
	op->user_done = true;
	xi_deliver(w, &op->s.to, status, op->s.kind);
}

bool xi_op_multi_peer(const struct op *op)
{
	return op->s.kind == SUB_SCATTER || op->s.kind == SUB_BARRIER;
}

uint32_t xi_op_peer_of(const struct op *op, uint32_t i)
{
	if (op->s.kind == SUB_SCATTER)
		return op->s.u.scatter.group->peers[op->s.u.scatter.entries[i].member];
	if (op->s.kind == SUB_BARRIER)
		return op->s.u.barrier.group->peers[i];
	return op->s.peer;
}

void xi_op_entry_status(struct op *op, uint32_t i, int status)
{
	/* Once the user has its completion the array may be gone. */
	if (op->s.kind == SUB_SCATTER && op->s.u.scatter.status && !op->user_done)
		op->s.u.scatter.status[i] = status;
}

/* The group and every member: removing a member (and reusing its index)
 * while a scatter or barrier is in flight would retarget it. */
static void group_ref(xfer_engine_t *e, struct xfer_group *g, int delta)
{
	atomic_fetch_add_explicit(&g->inflight, (unsigned)delta, memory_order_relaxed);
	for (uint32_t i = 0; i < g->n; i++)
		atomic_fetch_add_explicit(&e->peers[g->peers[i]].inflight.taken, (unsigned)delta,
					  memory_order_relaxed);
}

/* The worker's half: one writer, so no locked add. */
static void drop(struct xi_inflight *c)
{
	atomic_store_explicit(&c->dropped, atomic_load_explicit(&c->dropped, memory_order_relaxed) + 1,
			      memory_order_release);
}

static xfer_mr_t *source_of(const struct sub *s)
{
	switch (s->kind) {
	case SUB_WRITE:
		return s->u.write.src;
	case SUB_PAGED:
		return s->u.paged.src;
	case SUB_SCATTER:
		return s->u.scatter.src;
	default:
		return NULL;
	}
}

static struct xfer_group *group_of(const struct sub *s)
{
	return s->kind == SUB_SCATTER ? s->u.scatter.group : s->kind == SUB_BARRIER ? s->u.barrier.group : NULL;
}

void xi_sub_ref(xfer_engine_t *e, const struct sub *s)
{
	xfer_mr_t *mr = source_of(s);
	struct xfer_group *g = group_of(s);
	if (mr)
		atomic_fetch_add_explicit(&mr->inflight.taken, 1, memory_order_relaxed);
	if (s->peer != XFER_PEER_NONE)
		atomic_fetch_add_explicit(&e->peers[s->peer].inflight.taken, 1, memory_order_relaxed);
	if (g)
		group_ref(e, g, 1);
}

void xi_sub_unref_refused(xfer_engine_t *e, const struct sub *s)
{
	xfer_mr_t *mr = source_of(s);
	struct xfer_group *g = group_of(s);
	if (mr)
		atomic_fetch_sub_explicit(&mr->inflight.taken, 1, memory_order_relaxed);
	if (g)
		group_ref(e, g, -1);
	if (s->peer != XFER_PEER_NONE)
		atomic_fetch_sub_explicit(&e->peers[s->peer].inflight.taken, 1, memory_order_relaxed);
}

/* Release order: whoever sees a count of 0 (dereg, peer removal) also sees
 * that the op is done with the object. */
void xi_sub_unref(xfer_engine_t *e, const struct sub *s)
{
	xfer_mr_t *mr = source_of(s);
	struct xfer_group *g = group_of(s);
	if (mr)
		drop(&mr->inflight);
	if (g) {
		/* Groups are judged by the application (xfer_group_destroy): one
		 * counter; their members' halves as any peer's. */
		atomic_fetch_sub_explicit(&g->inflight, 1, memory_order_release);
		for (uint32_t i = 0; i < g->n; i++)
			drop(&e->peers[g->peers[i]].inflight);
	}
	if (s->peer != XFER_PEER_NONE)
		drop(&e->peers[s->peer].inflight);
}

static void live_unlink(struct worker *w, struct op *op)
{
	if (!op->live)
		return;
	op->prev_live->next_live = op->next_live;
	op->next_live->prev_live = op->prev_live;
	op->live = false;
	w->nlive--;
}

static void trace_op(struct worker *w, const struct op *op)
{
	struct xfer_trace t = {.user_data = op->s.to.user_data, .kind = op->s.kind, .wrs = op->posted,
			       .t_call = op->s.t_call, .t_enq = op->s.t_enq, .t_deq = op->t_deq,
			       .t_first = op->t_first, .t_first_ret = op->t_first_ret, .t_last = op->t_last,
			       .t_done = xi_now_ns()};
	xi_mpmc_push(&w->e->traces, &t);
}

void xi_op_finish(struct worker *w, struct op *op)
{
	live_unlink(w, op);
	xi_sub_unref(w->e, &op->s);
	if (op->s.t_call)
		trace_op(w, op);
	/* Entries never posted (cut short by cancel, deadline or failure) carry
	 * the op's status, not the 0 they started with. */
	if (op->s.kind == SUB_SCATTER && op->s.u.scatter.status && !op->user_done)
		for (uint32_t i = op->posted; i < op->s.u.scatter.n; i++)
			op->s.u.scatter.status[i] = op->status ? op->status : -ECANCELED;
	if (!op->user_done)
		xi_deliver(w, &op->s.to, op->status, op->s.kind);
	if (op->cancels)
		xi_cancel_release(w, op);
	op->next_post = w->free_ops;
	w->free_ops = op;
}

bool xi_op_try_finish(struct worker *w, struct op *op)
{
	/* An op still in the posting FIFO is finished when it leaves it, so
	 * that the FIFO never holds a freed op. */
	if (op->queued || op->posted != op->total || op->done != op->posted || op->notices || op->copies)
		return false;
	xi_op_finish(w, op);
	return true;
}

void xi_ops_abandon(struct worker *w, int status)
{
	while (w->live.next_live != &w->live) {
		struct op *op = w->live.next_live;
		xi_op_fail(op, status);
		op->done = op->posted;
		op->notices = 0;
		op->copies = 0;
		xi_op_finish(w, op);
	}
	w->post_head = w->post_tail = NULL;
}
