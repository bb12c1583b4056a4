/* The target side of a connection: every request is applied here, by the
 * worker that also runs revoke and dereg, after its key and bounds were
 * checked against this NIC's live registrations. Payloads come from the
 * request's slot (inline), from the initiator's memory (process_vm_readv,
 * batched over consecutive requests), or in pieces staged through the slots
 * when the kernel does not let us read the initiator. Each request is
 * answered with exactly one completion: the writer learns of every refusal.
 * Nothing read from the segment is trusted: a request is copied out and
 * checked first, and a peer that breaks the rules loses its connection. */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "util/log.h"
#include "backend/sm/sm.h"

enum { CONSUMED, BLOCKED /* until a receive is posted */, LATER /* this poll is full */ };

static const uint8_t *slot_data(const struct sm_conn *c, uint64_t seq)
{
	return c->data + (size_t)(seq & (SM_SLOTS - 1)) * SM_INLINE;
}

static void mark_bad(struct sm_conn *c, const char *why)
{
	if (!c->bad)
		xwarn("shm: peer pid %d %s; dropping its connection", (int)c->pid, why);
	c->bad = true;
}

/* Answers request seq. An honest initiator always leaves room: it has a
 * slot busy for every completion not yet read. */
static void complete(struct sm_conn *c, uint64_t seq, int status)
{
	if (c->bad)
		return;
	if (c->cmp_tail - c->cmp_head_seen >= SM_SLOTS) {
		c->cmp_head_seen = atomic_load_explicit(&c->seg->cmp_head, memory_order_acquire);
		if (c->cmp_tail - c->cmp_head_seen >= SM_SLOTS) {
			mark_bad(c, "does not read its completions");
			return;
		}
	}
	struct sm_cmp *e = &c->cmps[c->cmp_tail & (SM_SLOTS - 1)];
	e->seq = seq;
	e->status = status;
	e->reserved = 0;
	c->cmp_tail++;
	atomic_store_explicit(&c->seg->cmp_tail, c->cmp_tail, memory_order_release);
	xi_sm_kick(c);
}

static void ev_remote_write(struct sm_evbuf *b, uint32_t imm)
{
	b->ev[b->n++] = (struct nic_event){.type = NIC_EV_REMOTE_WRITE, .imm = imm};
}

static void ev_recv(struct sm_evbuf *b, void *ctx, size_t len, int status)
{
	b->ev[b->n++] = (struct nic_event){.type = NIC_EV_RECV, .status = status, .ctx = ctx,
					   .len = status ? 0 : len};
}

static uint8_t *dest_of(const struct sm_nic *s, uint64_t key, uint64_t off, uint64_t len)
{
	return xi_sm_reg_range(xi_sm_keys_find(&s->keys, key), off, len);
}

static int pull_errno(int err)
{
	return err == ESRCH ? -ECONNRESET : -err; /* ESRCH: the initiator is gone */
}

/* Reads len bytes at the initiator's src into dst, from byte skip on. */
static int pull(pid_t pid, uint8_t *dst, uint64_t src, size_t len, size_t skip)
{
	dst += skip;
	src += skip;
	len -= skip;
	while (len) {
		struct iovec l = {.iov_base = dst, .iov_len = len};
		struct iovec r = {.iov_base = (void *)(uintptr_t)src, .iov_len = len};
		ssize_t k = process_vm_readv(pid, &l, 1, &r, 1, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return pull_errno(errno);
		if (k == 0)
			return -EFAULT;
		dst += k;
		src += (uint64_t)k;
		len -= (size_t)k;
	}
	return 0;
}

/* ------------------------------------------------------------ CMA batches */

static void finish_pull(struct sm_conn *c, const struct sm_pull *p, int st, struct sm_evbuf *b)
{
	if (!p->last) {
		if (st)
			c->piece_err = st; /* the rest of that request is not pulled */
		return;
	}
	if (!st && p->has_imm)
		ev_remote_write(b, p->imm);
	complete(c, p->seq, st);
}

/* One process_vm_readv for every pull queued; entries it did not finish
 * are retried one by one to learn which failed and why. */
static void flush(struct sm_nic *s, struct sm_evbuf *b)
{
	if (!s->nbatch)
		return;
	struct sm_conn *c = s->batch_conn;
	ssize_t got = process_vm_readv(c->pid, s->liov, s->nbatch, s->riov, s->nbatch, 0);
	size_t done = got > 0 ? (size_t)got : 0;
	for (uint32_t i = 0; i < s->nbatch; i++) {
		int st = 0;
		if (done >= s->liov[i].iov_len) {
			done -= s->liov[i].iov_len;
		} else {
			st = pull(c->pid, s->liov[i].iov_base, (uint64_t)(uintptr_t)s->riov[i].iov_base,
				  s->liov[i].iov_len, done);
			done = 0;
		}
		finish_pull(c, &s->pulls[i], st, b);
	}
	s->nbatch = 0;
	s->batch_conn = NULL;
}

/* Queues (a piece of) the write at c->pos. Returns false once this poll's
 * byte budget is spent. */
static bool add_pull(struct sm_conn *c, const struct sm_req_view *v, uint64_t *budget, struct sm_evbuf *b)
{
	struct sm_nic *s = c->nic;
	if (c->piece_err) {
		complete(c, c->pos++, c->piece_err);
		c->piece_off = 0;
		c->piece_err = 0;
		return true;
	}
	/* Checked again for every piece: a revoke between two pieces stops the rest. */
	uint8_t *dst = dest_of(s, v->rkey, v->raddr, v->len);
	if (!dst) {
		complete(c, c->pos++, -EACCES);
		c->piece_off = 0;
		return true;
	}
	uint64_t piece = v->len - c->piece_off;
	if (piece > *budget)
		piece = *budget;
	if (!piece && v->len)
		return false;
	if (s->nbatch == SM_BATCH)
		flush(s, b);
	uint32_t i = s->nbatch++;
	s->batch_conn = c;
	s->liov[i] = (struct iovec){.iov_base = dst + c->piece_off, .iov_len = piece};
	s->riov[i] = (struct iovec){.iov_base = (void *)(uintptr_t)(v->src + c->piece_off), .iov_len = piece};
	bool last = c->piece_off + piece == v->len;
	s->pulls[i] = (struct sm_pull){.seq = c->pos, .len = piece, .last = last,
				       .has_imm = v->flags & SM_F_IMM, .imm = v->imm};
	*budget -= piece;
	if (last) {
		c->pos++;
		c->piece_off = 0;
	} else {
		c->piece_off += piece;
	}
	return last;
}

/* ------------------------------------------------------------ inline data */

static void write_whole(struct sm_conn *c, const struct sm_req_view *v, struct sm_evbuf *b)
{
	uint8_t *dst = dest_of(c->nic, v->rkey, v->raddr, v->len);
	if (!dst) {
		complete(c, c->pos++, -EACCES);
		return;
	}
	if (v->len)
		memcpy(dst, slot_data(c, c->pos), v->len);
	if (v->flags & SM_F_IMM)
		ev_remote_write(b, v->imm);
	complete(c, c->pos++, 0);
}

/* A piece of a staged write: the whole range is checked at the first, each
 * piece again as it lands; the immediate follows the last. */
static void write_piece(struct sm_conn *c, const struct sm_req_view *v, struct sm_evbuf *b)
{
	struct sm_assembly *a = &c->as;
	if (v->flags & SM_F_FIRST) {
		*a = (struct sm_assembly){.active = true, .op = SM_OP_WRITE, .total = v->total,
					  .raddr = v->raddr};
		if (!dest_of(c->nic, v->rkey, v->raddr, v->total))
			a->status = -EACCES;
	} else if (!a->active || a->op != SM_OP_WRITE) {
		complete(c, c->pos++, -EPROTO);
		return;
	}
	if (!a->status && (v->total != a->total || v->raddr != a->raddr + a->off || v->len > a->total - a->off))
		a->status = -EPROTO;
	if (!a->status) {
		uint8_t *dst = dest_of(c->nic, v->rkey, v->raddr, v->len);
		if (dst)
			memcpy(dst, slot_data(c, c->pos), v->len);
		else
			a->status = -EACCES;
	}
	a->off += v->len;
	int st = a->status;
	if (v->flags & SM_F_LAST) {
		if (!st && a->off != a->total)
			st = -EPROTO;
		if (!st && (v->flags & SM_F_IMM))
			ev_remote_write(b, v->imm);
		a->active = false;
	}
	complete(c, c->pos++, st);
}

/* ------------------------------------------------------------------ SENDs */

static struct sm_recv pop_recv(struct sm_nic *s)
{
	struct sm_recv r = s->recvs[s->rhead];
	s->rhead = (s->rhead + 1) % s->rcap;
	s->rcount--;
	return r;
}

/* The receive buffer of an unfinished staged SEND goes back to the front. */
static void give_back_recv(struct sm_conn *c)
{
	struct sm_nic *s = c->nic;
	if (!c->as.active || c->as.op != SM_OP_SEND || !c->as.recv_ctx)
		return;
	s->rhead = (s->rhead + s->rcap - 1) % s->rcap;
	s->recvs[s->rhead] = (struct sm_recv){.buf = c->as.recv_buf, .len = c->as.recv_len,
					      .ctx = c->as.recv_ctx};
	s->rcount++;
	c->as.active = false;
	c->as.recv_ctx = NULL;
}

/* The completions a peer wrote before it sent us a message are reported
 * before the message: they travel on the other connection of the pair, and
 * a message such as BYE (the peer's engine stops: the core fails what is
 * pending to it) must not overtake them. False when the poll has no room
 * left for them and the message. */
static bool reap_first(struct sm_conn *c, struct sm_evbuf *b)
{
	struct sm_nic *s = c->nic;
	for (uint32_t i = 0; i < s->nini; i++) {
		struct sm_conn *ic = s->ini[i];
		if (ic->pid != c->pid || ic->state == SM_BROKEN || !ic->busy || !ic->seg)
			continue;
		xi_sm_reap(ic, b);
		if (ic->seg && atomic_load_explicit(&ic->seg->cmp_tail, memory_order_acquire) != ic->cmp_head)
			return false;
	}
	return !sm_ev_full(b);
}

static void deliver(struct sm_conn *c, uint64_t seq, const struct sm_req_view *v, struct sm_recv r,
		    struct sm_evbuf *b)
{
	int st = 0;
	if (v->len > r.len)
		st = -EMSGSIZE; /* larger than the receiver's buffers: refused at both ends */
	else if (v->flags & SM_F_INLINE)
		memcpy(r.buf, slot_data(c, seq), v->len);
	else
		st = pull(c->pid, r.buf, v->src, v->len, 0);
	ev_recv(b, r.ctx, v->len, st);
	complete(c, seq, st);
}

/* No receive is posted (or SENDs wait before this one): it waits, consumed
 * from the ring, so that writes behind it are not held up. */
static void defer(struct sm_conn *c, const struct sm_req_view *v)
{
	struct sm_nic *s = c->nic;
	struct sm_defer *d = &c->defers[c->pos & (SM_SLOTS - 1)];
	*d = (struct sm_defer){.c = c, .seq = c->pos++, .v = *v};
	if (s->dtail)
		s->dtail->next = d;
	else
		s->dhead = d;
	s->dtail = d;
	c->ndefer++;
}

void xi_sm_match_defers(struct sm_nic *s, struct sm_evbuf *b)
{
	while (s->dhead && s->rcount && !sm_ev_full(b)) {
		struct sm_defer *d = s->dhead;
		if (!reap_first(d->c, b))
			break;
		s->dhead = d->next;
		if (!s->dhead)
			s->dtail = NULL;
		d->c->ndefer--;
		deliver(d->c, d->seq, &d->v, pop_recv(s), b);
	}
}

void xi_sm_forget_defers(struct sm_conn *c)
{
	struct sm_nic *s = c->nic;
	struct sm_defer **pp = &s->dhead, *last = NULL;
	give_back_recv(c);
	while (c->ndefer && *pp) {
		struct sm_defer *d = *pp;
		if (d->c == c) {
			*pp = d->next;
			c->ndefer--;
		} else {
			last = d;
			pp = &d->next;
		}
	}
	/* The tail is the last node kept, or unchanged when the walk stopped early. */
	if (!*pp)
		s->dtail = last;
}

/* A piece of a staged SEND (no CMA): it holds its connection until a
 * receive is free, then fills it piece by piece. */
static int send_piece(struct sm_conn *c, const struct sm_req_view *v, struct sm_evbuf *b)
{
	struct sm_nic *s = c->nic;
	struct sm_assembly *a = &c->as;
	if (v->flags & SM_F_FIRST) {
		if (s->dhead || !s->rcount)
			return BLOCKED;
		if (!reap_first(c, b))
			return LATER;
		give_back_recv(c); /* a SEND the initiator abandoned half way */
		struct sm_recv r = pop_recv(s);
		*a = (struct sm_assembly){.active = true, .op = SM_OP_SEND, .total = v->total,
					  .recv_ctx = r.ctx, .recv_buf = r.buf, .recv_len = r.len,
					  .status = v->total > r.len ? -EMSGSIZE : 0};
	} else if (!a->active || a->op != SM_OP_SEND) {
		complete(c, c->pos++, -EPROTO);
		return CONSUMED;
	}
	if (!a->status && (v->total != a->total || v->raddr != a->off || v->len > a->total - a->off))
		a->status = -EPROTO;
	if (!a->status)
		memcpy(a->recv_buf + a->off, slot_data(c, c->pos), v->len);
	a->off += v->len;
	int st = a->status;
	if (v->flags & SM_F_LAST) {
		if (!st && a->off != a->total)
			st = -EPROTO;
		ev_recv(b, a->recv_ctx, a->total, st);
		a->active = false;
		a->recv_ctx = NULL;
	}
	complete(c, c->pos++, st);
	return CONSUMED;
}

static int serve_send(struct sm_conn *c, const struct sm_req_view *v, struct sm_evbuf *b)
{
	struct sm_nic *s = c->nic;
	if (v->flags & SM_F_CHUNK)
		return send_piece(c, v, b);
	if (!(v->flags & SM_F_INLINE) && !c->cma) {
		complete(c, c->pos++, -EPROTO);
		return CONSUMED;
	}
	if (s->dhead || !s->rcount) {
		defer(c, v);
		return CONSUMED;
	}
	if (!reap_first(c, b))
		return LATER;
	uint64_t seq = c->pos++;
	deliver(c, seq, v, pop_recv(s), b);
	return CONSUMED;
}

/* ------------------------------------------------------------------ serve */

void xi_sm_serve(struct sm_conn *c, struct sm_evbuf *b)
{
	struct sm_nic *s = c->nic;
	if (c->state != SM_READY || c->bad)
		return;
	uint64_t tail = atomic_load_explicit(&c->seg->req_tail, memory_order_acquire);
	if (tail - c->pos > SM_SLOTS) {
		mark_bad(c, "wrote a request index out of range");
		return;
	}
	uint64_t budget = SM_POLL_BYTES, start = c->pos;
	c->blocked = false;
	while (c->pos != tail && !c->bad && b->n + (int)s->nbatch < b->max) {
		struct sm_req raw;
		struct sm_req_view v;
		memcpy(&raw, &c->reqs[c->pos & (SM_SLOTS - 1)], sizeof(raw));
		if (xi_sm_req_parse(&raw, &v)) {
			flush(s, b);
			complete(c, c->pos++, -EPROTO);
			continue;
		}
		if (v.op == SM_OP_WRITE && !(v.flags & SM_F_INLINE)) {
			if (!c->cma) {
				flush(s, b);
				complete(c, c->pos++, -EPROTO);
				continue;
			}
			if (!add_pull(c, &v, &budget, b))
				break;
			continue;
		}
		flush(s, b);
		if (v.op == SM_OP_SEND) {
			int r = serve_send(c, &v, b);
			if (r == BLOCKED)
				c->blocked = true;
			if (r != CONSUMED)
				break;
		} else if (v.flags & SM_F_CHUNK) {
			write_piece(c, &v, b);
		} else {
			write_whole(c, &v, b);
		}
	}
	flush(s, b);
	if (c->pos != start && !c->bad)
		atomic_store_explicit(&c->seg->req_head, c->pos, memory_order_relaxed);
}
