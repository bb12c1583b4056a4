/* The initiator side of a connection: requests into the ring, completions
 * out of it. A request takes the slot of its ring position and keeps it
 * until its completion, so the payload there (and at its source address)
 * stays valid for as long as the target may still read it; the completion
 * names the position, which must be a slot of ours that is busy with it. */
#include <errno.h>
#include <string.h>

#include "util/log.h"
#include "backend/sm/sm.h"

struct sm_conn *xi_sm_conn_of(struct sm_nic *s, uint64_t dest)
{
	uint32_t h = (uint32_t)dest, gen = (uint32_t)(dest >> 32);
	if (h >= SM_MAX_CONNS || !s->handles[h] || s->gen[h] != gen)
		return NULL;
	return s->handles[h];
}

/* Takes the slot of the next position for ctx; false while it is busy. */
static bool claim(struct sm_conn *c, void *ctx, bool staged)
{
	struct sm_slot *sl = &c->slots[c->tail & (SM_SLOTS - 1)];
	if (sl->busy)
		return false;
	*sl = (struct sm_slot){.ctx = ctx, .seq = c->tail, .busy = true, .staged = staged};
	c->busy++;
	c->tail++;
	return true;
}

static struct sm_req *entry(struct sm_conn *c, uint64_t seq)
{
	return &c->reqs[seq & (SM_SLOTS - 1)];
}

static uint8_t *slot_data(struct sm_conn *c, uint64_t seq)
{
	return c->data + (size_t)(seq & (SM_SLOTS - 1)) * SM_INLINE;
}

/* Makes everything claimed so far visible to the target. */
static void commit(struct sm_conn *c)
{
	atomic_store_explicit(&c->seg->req_tail, c->tail, memory_order_release);
	xi_sm_kick(c);
}

/* Posts the pieces of the staged request while slots are free. */
static void push_pieces(struct sm_conn *c)
{
	struct sm_stage *st = &c->stage;
	bool any = false;
	while (st->active) {
		uint64_t piece = st->len - st->off < SM_INLINE ? st->len - st->off : SM_INLINE;
		bool first = st->off == 0, last = st->off + piece == st->len;
		uint64_t seq = c->tail;
		if (!claim(c, last ? st->ctx : NULL, last))
			break;
		*entry(c, seq) = (struct sm_req){.op = st->op, .len = piece, .total = st->len, .rkey = st->rkey,
				     .raddr = st->op == SM_OP_WRITE ? st->raddr + st->off : st->off,
				     .src = (uint64_t)(uintptr_t)(st->src + st->off), .imm = st->imm,
				     .flags = SM_F_INLINE | SM_F_CHUNK | (first ? SM_F_FIRST : 0) |
					      (last ? SM_F_LAST : 0) | (last && st->has_imm ? SM_F_IMM : 0)};
		memcpy(slot_data(c, seq), st->src + st->off, piece);
		st->off += piece;
		st->active = !last;
		any = true;
	}
	if (any)
		commit(c);
}

int xi_sm_post(struct sm_conn *c, uint8_t op, const void *buf, uint64_t len, uint64_t raddr,
	       uint64_t rkey, bool has_imm, uint32_t imm, void *ctx)
{
	/* The ring is ours from the hello on, so small requests (probes among
	 * them) go at once; a larger one waits for the ack, which says how the
	 * target can read it. */
	if ((c->state == SM_CONNECTING && len > SM_INLINE) || c->stage.active)
		return -EAGAIN;
	if (c->state == SM_BROKEN) {
		/* Accepted and failed by the next poll, like any request the peer
		 * did not answer: the core then probes the peer. */
		if (!claim(c, ctx, false))
			return -EAGAIN;
		xi_sm_conn_sweep_later(c);
		return 0;
	}
	if (len > SM_INLINE && !c->cma) {
		if (c->slots[c->tail & (SM_SLOTS - 1)].busy)
			return -EAGAIN;
		c->stage = (struct sm_stage){.active = true, .op = op, .has_imm = has_imm, .imm = imm,
					     .ctx = ctx, .src = buf, .len = len, .raddr = raddr, .rkey = rkey};
		push_pieces(c);
		return 0;
	}
	uint64_t seq = c->tail;
	if (!claim(c, ctx, false))
		return -EAGAIN;
	*entry(c, seq) = (struct sm_req){.op = op, .len = len, .src = (uint64_t)(uintptr_t)buf, .raddr = raddr,
			     .rkey = rkey, .imm = imm, .total = len,
			     .flags = (has_imm ? SM_F_IMM : 0) | (len <= SM_INLINE ? SM_F_INLINE : 0)};
	if (len <= SM_INLINE && len)
		memcpy(slot_data(c, seq), buf, len);
	commit(c);
	return 0;
}

/* A completion for a position we have nothing at: the peer is broken. */
static void bogus(struct sm_conn *c, const char *what)
{
	xwarn("shm: peer pid %d %s; dropping the connection", (int)c->pid, what);
	xi_sm_conn_break(c, -EPROTO);
}

void xi_sm_reap(struct sm_conn *c, struct sm_evbuf *b)
{
	if (!c->seg)
		return;
	uint64_t tail = atomic_load_explicit(&c->seg->cmp_tail, memory_order_acquire);
	if (tail - c->cmp_head > SM_SLOTS) {
		bogus(c, "wrote a completion index out of range");
		return;
	}
	uint64_t start = c->cmp_head;
	while (c->cmp_head != tail && !sm_ev_full(b)) {
		struct sm_cmp e;
		memcpy(&e, &c->cmps[c->cmp_head & (SM_SLOTS - 1)], sizeof(e));
		c->cmp_head++;
		struct sm_slot *sl = &c->slots[e.seq & (SM_SLOTS - 1)];
		if (!sl->busy || sl->seq != e.seq) {
			bogus(c, "completed a request we did not post");
			break;
		}
		int st = xi_sm_status_clean(e.status);
		sl->busy = false;
		c->busy--;
		if (!sl->ctx) {
			if (st && !c->piece_err)
				c->piece_err = st; /* a piece: told with the last one */
			continue;
		}
		if (sl->staged) {
			if (!st)
				st = c->piece_err;
			c->piece_err = 0;
		}
		sm_ev_tx(b, sl->ctx, st);
	}
	if (c->cmp_head != start && c->seg)
		atomic_store_explicit(&c->seg->cmp_head, c->cmp_head, memory_order_release);
	if (c->stage.active && c->state == SM_READY)
		push_pieces(c);
}

bool xi_sm_sweep(struct sm_conn *c, struct sm_evbuf *b)
{
	/* What the peer completed before it went is reported as it said. */
	if (c->seg && c->busy) {
		xi_sm_reap(c, b);
		if (sm_ev_full(b))
			return false;
	}
	xi_sm_conn_unmap(c);
	if (c->stage.active) {
		/* Its last piece was never posted, so no slot carries its context. */
		if (sm_ev_full(b))
			return false;
		sm_ev_tx(b, c->stage.ctx, c->fail);
		c->stage.active = false;
	}
	for (uint32_t i = 0; i < SM_SLOTS && c->busy; i++) {
		struct sm_slot *sl = &c->slots[i];
		if (!sl->busy)
			continue;
		if (sl->ctx) {
			if (sm_ev_full(b))
				return false;
			sm_ev_tx(b, sl->ctx, c->fail);
		}
		sl->busy = false;
		c->busy--;
	}
	c->piece_err = 0;
	return c->busy == 0;
}
