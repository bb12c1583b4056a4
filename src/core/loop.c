/* The worker thread: takes submissions, posts them to its NICs as credits
 * allow, polls completions and delivers results. Everything it needs is
 * preallocated in worker_setup_buffers; the loop never allocates or locks. */

#include "core/worker.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "util/log.h"

#define SCAN_INTERVAL_NS 1000000ull
#define POLL_BATCH 32

static inline uint64_t relaxed_inc(atomic_uint_fast64_t *c, uint64_t by)
{
	return atomic_fetch_add_explicit(c, by, memory_order_relaxed);
}

void worker_note_deadline(struct worker *w, uint64_t deadline_ns)
{
	if (deadline_ns < w->next_scan_ns)
		w->next_scan_ns = deadline_ns;
}

/* ------------------------------------------------------------ completions */

void worker_deliver(struct worker *w, xfer_complete_fn cb, void *ctx, uint64_t user_data, int res,
		    uint32_t kind)
{
	xfer_engine_t *e = w->e;
	struct xfer_cqe c = {.user_data = user_data, .res = res, .kind = kind};
	relaxed_inc(&e->st.ops_completed, 1);
	if (res < 0)
		relaxed_inc(&e->st.ops_failed, 1);
	if (cb) {
		cb(ctx, &c);
		return;
	}
	if (w->ov_count == 0 && mpmc_push(&e->cq, &c)) {
		w->cq_pushed = true;
		return;
	}
	/* The application is not reaping; hold the entry. New submissions are not
	 * taken while anything waits here, which bounds the overflow. */
	if (w->ov_count == w->ov_cap) {
		xerr("completion overflow full; dropping completion of %llu", (unsigned long long)user_data);
		return;
	}
	w->overflow[(w->ov_head + w->ov_count) % w->ov_cap] = c;
	w->ov_count++;
}

static int flush_overflow(struct worker *w)
{
	int n = 0;
	while (w->ov_count && mpmc_push(&w->e->cq, &w->overflow[w->ov_head])) {
		w->ov_head = (w->ov_head + 1) % w->ov_cap;
		w->ov_count--;
		n++;
	}
	if (n)
		w->cq_pushed = true;
	return n;
}

void worker_flush_overflow(struct worker *w)
{
	flush_overflow(w);
	if (w->cq_pushed) {
		atomic_fetch_add(&w->e->cq_seq, 1);
		futex_wake_all(&w->e->cq_seq);
		w->cq_pushed = false;
	}
}

/* -------------------------------------------------------------- operations */

static void live_unlink(struct worker *w, struct op *op)
{
	if (!op->live)
		return;
	op->prev_live->next_live = op->next_live;
	op->next_live->prev_live = op->prev_live;
	op->live = false;
	w->nlive--;
}

static void release_refs(xfer_engine_t *e, const struct sub *s)
{
	xfer_mr_t *mr = NULL;
	struct xfer_group *g = NULL;
	if (s->kind == SUB_WRITE)
		mr = s->u.write.src;
	else if (s->kind == SUB_PAGED)
		mr = s->u.paged.src;
	else if (s->kind == SUB_SCATTER)
		mr = s->u.scatter.src, g = s->u.scatter.group;
	else if (s->kind == SUB_BARRIER)
		g = s->u.barrier.group;
	if (mr)
		atomic_fetch_sub_explicit(&mr->inflight, 1, memory_order_release);
	if (g)
		group_ref(e, g, -1);
	if (s->peer != XFER_PEER_NONE)
		atomic_fetch_sub_explicit(&e->peers[s->peer].inflight, 1, memory_order_release);
}

static void trace_op(struct worker *w, const struct op *op)
{
	struct xfer_trace t = {.user_data = op->s.user_data, .kind = op->s.kind, .wrs = op->posted,
			       .t_call = op->s.t_call, .t_enq = op->s.t_enq, .t_deq = op->t_deq,
			       .t_first = op->t_first, .t_first_ret = op->t_first_ret, .t_last = op->t_last, .t_done = now_ns()};
	mpmc_push(&w->e->traces, &t);
}

/* The last request of op is done: release what it held and tell the user,
 * unless a deadline already did. */
static void op_finish(struct worker *w, struct op *op)
{
	live_unlink(w, op);
	if (op->s.kind == SUB_SEND && op->send_buf != UINT32_MAX)
		w->free_send[w->nfree_send++] = op->send_buf;
	release_refs(w->e, &op->s);
	if (op->s.t_call)
		trace_op(w, op);
	/* Entries never posted (cut short by cancel, deadline or failure) carry
	 * the op's status, not the 0 they started with. */
	if (op->s.kind == SUB_SCATTER && op->s.u.scatter.status && !op->user_done)
		for (uint32_t i = op->posted; i < op->s.u.scatter.n; i++)
			op->s.u.scatter.status[i] = op->status ? op->status : -ECANCELED;
	if (!op->user_done) {
		signal_store(op->s.signal, op->s.signal_value);
		worker_deliver(w, op->s.cb, op->s.cb_ctx, op->s.user_data, op->status, op->s.kind);
	}
	if (op->cancels)
		cancel_op_finished(w, op);
	op->next_post = w->free_ops;
	w->free_ops = op;
}

void op_enqueue(struct worker *w, struct op *op)
{
	op->queued = true;
	op->next_post = NULL;
	if (w->post_tail)
		w->post_tail->next_post = op;
	else
		w->post_head = op;
	w->post_tail = op;
}

void op_maybe_finish(struct worker *w, struct op *op)
{
	if (op->phase == 2)
		return; /* GPU copies in flight */
	/* Data into a staged GPU region has landed: now the notices. */
	if (op->path == PATH_STAGED && op->phase == 0 && !op->queued && op->posted == op->total &&
	    op->done == op->posted && op->status == 0) {
		op->phase = 1;
		op->data_total = op->posted;
		op->total = op->posted + gpu_notice_count(w->e, op);
		op_enqueue(w, op);
		return;
	}
	/* An op still in the posting FIFO is finished by post_pending instead,
	 * so that the FIFO never holds a freed op. */
	if (!op->queued && op->posted == op->total && op->done == op->posted && !op->notices)
		op_finish(w, op);
}

void op_fail(struct op *op, int status)
{
	if (op->status == 0)
		op->status = status;
	op->total = op->posted;
	op->cut = true;
}

void op_complete_early(struct worker *w, struct op *op, int status)
{
	if (op->user_done)
		return;
	op->user_done = true;
	signal_store(op->s.signal, op->s.signal_value);
	worker_deliver(w, op->s.cb, op->s.cb_ctx, op->s.user_data, status, op->s.kind);
}

struct wr *wr_get(struct worker *w)
{
	struct wr *wr = w->free_wrs;
	if (wr)
		w->free_wrs = wr->next_free;
	return wr;
}

void wr_put(struct worker *w, struct wr *wr)
{
	wr->next_free = w->free_wrs;
	w->free_wrs = wr;
}

static inline bool peer_usable(const struct peer *p)
{
	return atomic_load_explicit(&p->state, memory_order_relaxed) == PEER_LIVE;
}

static unsigned wr_nic(const xfer_engine_t *e, const struct op *op, uint32_t i)
{
	if (op->s.flags & XFER_F_PIN)
		return XFER_F_NIC_OF(op->s.flags);
	return (op->nic_base + i) % e->nnics;
}

/* Fills the remote side of request i of a write to region r. */
static void to_region(struct nic_write *nw, const xfer_rmr_t *r, unsigned n, uint64_t off)
{
	const struct wire_rkey *rk = &r->nic[n % r->nnics];
	nw->raddr = rk->base + off;
	nw->rkey = rk->key;
}

/* Builds request i of op for NIC n. Returns 0, -EAGAIN (no bounce buffer
 * yet) or -XFER_EPEER (its peer is dead: the request is skipped). */
static int build(struct worker *w, struct op *op, uint32_t i, unsigned n, struct nic_write *nw)
{
	xfer_engine_t *e = w->e;
	const struct sub *s = &op->s;
	const struct peer *p = s->peer != XFER_PEER_NONE ? &e->peers[s->peer] : NULL;
	nw->has_imm = !!(s->flags & XFER_F_IMM);
	nw->imm = s->imm;
	switch (s->kind) {
	case SUB_IMM:
		nw->buf = e->sink->buf;
		nw->desc = e->sink->nic[n].desc;
		nw->raddr = p->sink[n].base;
		nw->rkey = p->sink[n].key;
		break;
	case SUB_WRITE: {
		xfer_mr_t *src = s->u.write.src ? s->u.write.src : e->sink;
		/* Shard i of k: the first len % k shards are one byte longer. */
		uint64_t k = op->shards, base = s->u.write.len / k, rem = s->u.write.len % k;
		uint64_t off = i * base + (i < rem ? i : rem);
		nw->len = base + (i < rem);
		if (gpu_stage_src(w, src, s->u.write.src_off + off, nw->len))
			return -EIO;
		nw->buf = (uint8_t *)(src->reg_buf ? src->reg_buf : src->buf) + s->u.write.src_off + off;
		nw->desc = src->nic[n].desc;
		to_region(nw, s->u.write.dst, n, s->u.write.dst_off + off);
		break;
	}
	case SUB_PAGED: {
		const struct xfer_paged_write *pw = &s->u.paged;
		/* Bounds were proven at submission; these cannot overflow. */
		uint64_t soff = pw->src_base + (uint64_t)pw->src_pages[i] * pw->src_stride;
		if (!op->src_staged) {
			if (gpu_stage_pages(w, pw))
				return -EIO;
			op->src_staged = true;
		}
		nw->buf = (uint8_t *)(pw->src->reg_buf ? pw->src->reg_buf : pw->src->buf) + soff;
		nw->len = pw->page_len;
		nw->desc = pw->src->nic[n].desc;
		to_region(nw, pw->dst, n, pw->dst_base + (uint64_t)pw->dst_pages[i] * pw->dst_stride);
		break;
	}
	case SUB_SCATTER: {
		const struct xfer_scatter_entry *en = &s->u.scatter.entries[i];
		p = &e->peers[s->u.scatter.group->peers[en->member]];
		if (!peer_usable(p))
			return -XFER_EPEER;
		xfer_mr_t *src = s->u.scatter.src ? s->u.scatter.src : e->sink;
		uint64_t off = en->len ? en->src_off : 0;
		if (gpu_stage_src(w, src, off, en->len))
			return -EIO;
		nw->buf = (uint8_t *)(src->reg_buf ? src->reg_buf : src->buf) + off;
		nw->len = en->len;
		nw->desc = src->nic[n].desc;
		to_region(nw, en->dst, n, en->dst_off);
		/* Into a staged GPU region the immediate rides on the entry's notice. */
		if (en->dst->flags & WIRE_DESC_STAGED)
			nw->has_imm = 0;
		break;
	}
	case SUB_BARRIER:
		p = &e->peers[s->u.barrier.group->peers[i]];
		if (!peer_usable(p))
			return -XFER_EPEER;
		nw->buf = e->sink->buf;
		nw->desc = e->sink->nic[n].desc;
		nw->raddr = p->sink[n].base;
		nw->rkey = p->sink[n].key;
		nw->has_imm = 1;
		break;
	case SUB_SEND:
		break;
	default:
		return -EINVAL;
	}
	if (!peer_usable(p))
		return -XFER_EPEER;
	nw->dest = p->dest[n];
	/* Into a staged GPU region the immediate rides on the notice instead. */
	if (op->path == PATH_STAGED)
		nw->has_imm = 0;
	return 0;
}

/* Notice k of op, built in its own bounce buffer. */
static int post_notice(struct worker *w, struct op *op, struct wr *wr, unsigned n, uint32_t k)
{
	xfer_engine_t *e = w->e;
	const struct peer *p = &e->peers[op->s.peer];
	if (!peer_usable(p))
		return -XFER_EPEER;
	if (!w->nfree_send)
		return -EAGAIN;
	uint32_t b = w->free_send[--w->nfree_send];
	uint8_t *buf = e->send_bufs + (size_t)b * e->slot_bytes;
	size_t body = gpu_notice_build(e, op, k, buf + MSG_HDR_BYTES);
	gpu_notice_frame(e, buf, body);
	int ret = e->ops.post_send(&e->nics[n], p->dest[n], buf, MSG_HDR_BYTES + body,
				   e->send_mr->nic[n].desc, wr);
	if (ret)
		w->free_send[w->nfree_send++] = b;
	else
		wr->sendbuf = b;
	return ret;
}

static int post_send_op(struct worker *w, struct op *op, struct wr *wr, unsigned n)
{
	xfer_engine_t *e = w->e;
	const struct sub *s = &op->s;
	const struct peer *p = &e->peers[s->peer];
	if (!peer_usable(p))
		return -XFER_EPEER;
	if (op->send_buf == UINT32_MAX) {
		if (!w->nfree_send)
			return -EAGAIN;
		op->send_buf = w->free_send[--w->nfree_send];
		uint8_t *b = e->send_bufs + (size_t)op->send_buf * e->slot_bytes;
		uint32_t hdr[4] = {MSG_MAGIC, s->u.send.len, (uint32_t)e->id, (uint32_t)(e->id >> 32)};
		memcpy(b, hdr, MSG_HDR_BYTES);
		if (s->u.send.len)
			memcpy(b + MSG_HDR_BYTES, s->u.send.buf, s->u.send.len);
	}
	return e->ops.post_send(&e->nics[n], p->dest[n], e->send_bufs + (size_t)op->send_buf * e->slot_bytes,
				MSG_HDR_BYTES + s->u.send.len, e->send_mr->nic[n].desc, wr);
}

static bool multi_peer(const struct op *op)
{
	return op->s.kind == SUB_SCATTER || op->s.kind == SUB_BARRIER;
}

void scatter_entry_status(struct op *op, uint32_t i, int status)
{
	/* Once the user has its completion the array may be gone. */
	if (op->s.kind == SUB_SCATTER && op->s.u.scatter.status && !op->user_done)
		op->s.u.scatter.status[i] = status;
}

void scatter_entry_failed(struct worker *w, struct op *op, uint32_t i, int status)
{
	scatter_entry_status(op, i, status);
	if (op->status == 0)
		op->status = status;
	if (is_peer_failure(status))
		peer_suspect(w, op->s.u.scatter.group->peers[op->s.u.scatter.entries[i].member], status);
}

/* Posts request i of op on NIC n. 0, -EAGAIN (no credit, context or buffer:
 * try later) or the error that fails it. */
static int post_wr(struct worker *w, struct op *op, uint32_t i, unsigned n, uint64_t *len)
{
	xfer_engine_t *e = w->e;
	if (!w->credits[n])
		return -EAGAIN;
	struct nic_write nw = {0};
	int ret = 0;
	if (op->s.kind != SUB_SEND && !op->phase && (ret = build(w, op, i, n, &nw)))
		return ret;
	struct wr *wr = wr_get(w);
	if (!wr)
		return -EAGAIN;
	wr->op = op;
	wr->nic = (uint8_t)n;
	wr->kind = WR_OP;
	wr->slot = i;
	wr->sendbuf = UINT32_MAX;
	/* Stamped before the provider call: "first post" is when the engine
	 * hands the first request over; what the provider then spends inside
	 * its post call (4-12 us for tcp;ofi_rxm, which sends inline) is its
	 * own figure, t_first_ret - t_first. */
	if (op->s.t_call && !op->posted)
		op->t_first = now_ns();
	if (op->phase)
		ret = post_notice(w, op, wr, n, i - op->data_total);
	else
		ret = op->s.kind == SUB_SEND ? post_send_op(w, op, wr, n) : e->ops.post_write(&e->nics[n], &nw, wr);
	if (ret) {
		wr_put(w, wr);
		return ret;
	}
	*len = nw.len;
	return 0;
}

static void posted_one(struct worker *w, struct op *op, unsigned n, uint64_t len)
{
	w->credits[n]--;
	if (op->s.t_call) {
		uint64_t t = now_ns();
		if (!op->posted)
			op->t_first_ret = t;
		op->t_last = t;
	}
	op->posted++;
	relaxed_inc(&w->e->st.wrs_posted, 1);
	relaxed_inc(&w->e->st.bytes_written, len);
}

/* Pages of one paged write go round robin over the NICs, each NIC with its
 * own cursor, so that a NIC that is full (or whose provider says -EAGAIN)
 * does not hold back the others: the group then runs at the sum of its
 * links rather than at twice the slowest moment of either. */
static int post_lanes(struct worker *w, struct op *op)
{
	const unsigned nn = w->e->nnics;
	if (!op->lanes_init) {
		for (unsigned k = 0; k < nn; k++)
			op->lane_next[k] = (k + nn - op->nic_base % nn) % nn;
		op->lanes_init = true;
	}
	bool moved = true;
	while (moved && op->status == 0 && op->posted < op->total) {
		moved = false;
		for (unsigned k = 0; k < nn && op->status == 0; k++) {
			uint32_t i = op->lane_next[k];
			if (i >= op->total)
				continue;
			uint64_t len = 0;
			int ret = post_wr(w, op, i, k, &len);
			if (ret == -EAGAIN)
				continue;
			if (ret < 0) {
				op_fail(op, ret);
				break;
			}
			op->lane_next[k] = i + nn;
			posted_one(w, op, k, len);
			moved = true;
		}
	}
	return op->status == 0 && op->posted < op->total ? -EAGAIN : 0;
}

/* Posts as much of op as credits allow. -EAGAIN: stalled, try later. */
static int op_post(struct worker *w, struct op *op)
{
	xfer_engine_t *e = w->e;
	if (op->path == PATH_IPC && op->phase == 0 && op->status == 0) {
		int ret = gpu_ipc_issue(w, op);
		const xfer_rmr_t *r = op->s.kind == SUB_WRITE ? op->s.u.write.dst : op->s.u.paged.dst;
		if (ret == 1)
			return 1; /* parked until its copies finish */
		if (ret == -EAGAIN)
			return -EAGAIN;
		if (ret && r->ipc_failed) {
			/* No IPC after all: through the NICs (a mirror, or in place). */
			op->path = (uint8_t)gpu_rmr_path(e, r);
			goto post;
		}
		if (ret) {
			op_fail(op, ret);
			return 0;
		}
	}
post:
	if (op->s.kind == SUB_PAGED && op->phase == 0 && e->nnics > 1 && !(op->s.flags & XFER_F_PIN))
		return post_lanes(w, op);
	while (op->posted < op->total) {
		uint32_t i = op->posted;
		unsigned n = op->phase ? (op->nic_base % e->nnics) : wr_nic(e, op, i);
		uint64_t len = 0;
		/* A scatter entry into a GPU region on this host is a copy, not a
		 * request: it takes no credit and completes in gpu_poll. */
		int ret = op->s.kind == SUB_SCATTER ? gpu_scatter_ipc(w, op, i, n) : 0;
		if (ret == 1) {
			op->posted++;
			continue;
		}
		if (ret == 0)
			ret = post_wr(w, op, i, n, &len);
		if (ret == -EAGAIN)
			return -EAGAIN;
		if (ret < 0) {
			if (multi_peer(op)) {
				/* One member's failure does not stop the others. */
				scatter_entry_status(op, i, ret);
				if (op->status == 0)
					op->status = ret;
				op->posted++;
				op->done++;
				continue;
			}
			op_fail(op, ret);
			break;
		}
		posted_one(w, op, n, len);
	}
	return 0;
}

static int post_pending(struct worker *w)
{
	int n = 0;
	while (w->post_head) {
		struct op *op = w->post_head;
		int ret = op_post(w, op);
		if (ret == -EAGAIN)
			break;
		w->post_head = op->next_post;
		if (!w->post_head)
			w->post_tail = NULL;
		op->queued = false;
		if (ret != 1)
			op_maybe_finish(w, op);
		n++;
	}
	return n;
}

static void accept_op(struct worker *w, const struct sub *s)
{
	struct op *op = w->free_ops;
	w->free_ops = op->next_post;
	memset(op, 0, sizeof(*op));
	op->s = *s;
	op->send_buf = UINT32_MAX;
	if (s->t_call)
		op->t_deq = now_ns();
	op->shards = 1;
	switch (s->kind) {
	case SUB_PAGED:
		op->total = s->u.paged.npages;
		break;
	case SUB_SCATTER:
		op->total = s->u.scatter.n;
		break;
	case SUB_BARRIER:
		op->total = s->u.barrier.group->n;
		break;
	case SUB_WRITE:
		if (s->flags & XFER_F_SHARD)
			op->shards = (uint8_t)xfer_peer_shards(w->e, s->peer);
		op->total = op->shards;
		break;
	default:
		op->total = 1;
	}
	op->nic_base = (uint8_t)(w->rr_nic++ % w->e->nnics);
	worker_note_deadline(w, s->deadline_ns);
	/* Append to the live list (deadline scans) and the posting FIFO. */
	op->live = true;
	op->next_live = &w->live;
	op->prev_live = w->live.prev_live;
	w->live.prev_live->next_live = op;
	w->live.prev_live = op;
	w->nlive++;
	op->path = (uint8_t)gpu_classify(w->e, s);
	op_enqueue(w, op);
}

static void handle_sub(struct worker *w, const struct sub *s)
{
	switch (s->kind) {
	case SUB_CALL:
		s->u.call->result = s->u.call->fn(w->e, s->u.call->arg);
		sem_post(&s->u.call->done);
		break;
	case SUB_EXPECT:
		imm_arm(w, s);
		break;
	case SUB_CANCEL:
		cancel_start(w, s);
		break;
	default:
		accept_op(w, s);
	}
}

static int take_submissions(struct worker *w)
{
	xfer_engine_t *e = w->e;
	int n = 0;
	uint32_t slot;
	struct sub s;
	while (mpmc_pop(&e->repost, &slot)) {
		struct wr *wr = &w->recv_wrs[slot];
		e->ops.post_recv(&e->nics[wr->nic], e->recv_bufs + (size_t)slot * e->slot_bytes,
				 e->slot_bytes, e->recv_mr->nic[wr->nic].desc, wr);
		n++;
	}
	/* Take no more than can be held: a free op for every submission and an
	 * empty overflow. */
	while (n < 256 && w->free_ops && w->ov_count == 0 && mpmc_pop(&e->subq, &s)) {
		handle_sub(w, &s);
		n++;
	}
	return n;
}

/* ----------------------------------------------------------------- events */

static void repost_recv(struct worker *w, struct wr *wr)
{
	xfer_engine_t *e = w->e;
	e->ops.post_recv(&e->nics[wr->nic], e->recv_bufs + (size_t)wr->slot * e->slot_bytes,
			 e->slot_bytes, e->recv_mr->nic[wr->nic].desc, wr);
}

static void on_recv(struct worker *w, struct wr *wr, const struct nic_event *ev)
{
	xfer_engine_t *e = w->e;
	const uint8_t *b = e->recv_bufs + (size_t)wr->slot * e->slot_bytes;
	uint32_t hdr[4];
	if (ev->status < 0) {
		if (!atomic_load_explicit(&e->stopping, memory_order_relaxed)) {
			xwarn("receive failed on %s: %s", e->nics[wr->nic].domain, xfer_strerror(ev->status));
			repost_recv(w, wr);
		}
		return;
	}
	memcpy(hdr, b, MSG_HDR_BYTES);
	if (ev->len == MSG_HDR_BYTES &&
	    (hdr[0] == MSG_MAGIC_HB || hdr[0] == MSG_MAGIC_PONG || hdr[0] == MSG_MAGIC_BYE)) {
		repost_recv(w, wr);
		hb_message(w, hdr[0], (uint64_t)hdr[2] | (uint64_t)hdr[3] << 32);
		return;
	}
	if (ev->len >= MSG_HDR_BYTES && hdr[0] == MSG_MAGIC_NOTICE) {
		gpu_notice_received(w, b + MSG_HDR_BYTES, ev->len - MSG_HDR_BYTES);
		repost_recv(w, wr);
		return;
	}
	if (ev->len < MSG_HDR_BYTES || hdr[0] != MSG_MAGIC || hdr[1] > e->attr.msg_max ||
	    (size_t)hdr[1] + MSG_HDR_BYTES != ev->len) {
		xwarn("dropping malformed message of %zu bytes", ev->len);
		repost_recv(w, wr);
		return;
	}
	relaxed_inc(&e->st.msgs_received, 1);
	if (e->attr.on_recv) {
		uint64_t src = (uint64_t)hdr[2] | (uint64_t)hdr[3] << 32;
		e->attr.on_recv(e->attr.on_recv_ctx, src, b + MSG_HDR_BYTES, hdr[1]);
		repost_recv(w, wr);
		return;
	}
	/* The inbox holds every slot, so this push cannot fail. */
	mpmc_push(&e->inbox, &wr->slot);
	w->inbox_pushed = true;
}

static void on_tx(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	uint32_t i = wr->slot;
	if (wr->kind == WR_HB || wr->kind == WR_PONG) {
		hb_done(w, wr, status);
		return;
	}
	w->credits[wr->nic]++;
	if (wr->sendbuf != UINT32_MAX)
		w->free_send[w->nfree_send++] = wr->sendbuf;
	if (wr->kind == WR_NOTICE) {
		gpu_notice_done(w, wr, status);
		return;
	}
	op->done++;
	scatter_entry_status(op, i, status);
	/* A scatter entry in a peer's mirror: this context carries its notice. */
	if (status == 0 && op->s.kind == SUB_SCATTER && gpu_entry_staged(op, i))
		gpu_entry_landed(w, wr, true);
	else
		wr_put(w, wr);
	if (status < 0) {
		uint32_t peer = op->s.peer;
		if (multi_peer(op)) {
			if (op->status == 0)
				op->status = status;
			if (op->s.kind == SUB_SCATTER)
				peer = op->s.u.scatter.group->peers[op->s.u.scatter.entries[i].member];
			else
				peer = op->s.u.barrier.group->peers[i];
		} else {
			op_fail(op, status);
		}
		if (is_peer_failure(status) && peer != XFER_PEER_NONE)
			peer_suspect(w, peer, status);
	}
	op_maybe_finish(w, op);
}

static int poll_nics(struct worker *w)
{
	xfer_engine_t *e = w->e;
	struct nic_event ev[POLL_BATCH];
	int total = 0;
	for (unsigned n = 0; n < e->nnics; n++) {
		int got = e->ops.poll(&e->nics[n], ev, POLL_BATCH);
		if (got < 0) {
			xwarn("polling %s failed: %s", e->nics[n].domain, xfer_strerror(got));
			continue;
		}
		for (int i = 0; i < got; i++) {
			switch (ev[i].type) {
			case NIC_EV_REMOTE_WRITE:
				imm_arrived(w, ev[i].imm);
				break;
			case NIC_EV_RECV:
				on_recv(w, ev[i].ctx, &ev[i]);
				break;
			case NIC_EV_TX: {
				struct wr *wr = ev[i].ctx;
				on_tx(w, wr, ev[i].status);
				break;
			}
			}
		}
		total += got;
	}
	return total;
}

/* -------------------------------------------------------------- deadlines */

static void expire_ops(struct worker *w, uint64_t now, uint64_t *next)
{
	for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live) {
		if (op->user_done)
			continue;
		if (op->s.deadline_ns > now) {
			if (op->s.deadline_ns < *next)
				*next = op->s.deadline_ns;
			continue;
		}
		/* Tell the user now; requests already posted may still land, so the
		 * op keeps its region and peer references until they drain. */
		op_fail(op, -ETIMEDOUT);
		op_complete_early(w, op, -ETIMEDOUT);
		/* A request that outlived its deadline may mean a dead peer: probe. */
		if (op->s.peer != XFER_PEER_NONE)
			peer_suspect(w, op->s.peer, -ETIMEDOUT);
	}
}

static uint64_t scan_deadlines(struct worker *w, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	expire_ops(w, now, &next);
	imm_expire(w, now, &next);
	cancel_expire(w, now, &next);
	hb_scan(w, now, &next);
	return next;
}

/* ------------------------------------------------------------------ loop */

static void signal_app(struct worker *w)
{
	xfer_engine_t *e = w->e;
	if (w->cq_pushed) {
		w->cq_pushed = false;
		atomic_fetch_add_explicit(&e->cq_seq, 1, memory_order_release);
		if (atomic_load(&e->cq_waiters))
			futex_wake_all(&e->cq_seq);
	}
	if (w->inbox_pushed) {
		w->inbox_pushed = false;
		atomic_fetch_add_explicit(&e->inbox_seq, 1, memory_order_release);
		if (atomic_load(&e->inbox_waiters))
			futex_wake_all(&e->inbox_seq);
	}
}

int worker_loop_once(struct worker *w, uint64_t now)
{
	int n = 0;
	if (w->ov_count)
		n += flush_overflow(w);
	n += take_submissions(w);
	n += post_pending(w);
	n += poll_nics(w);
	if (w->gpu_count)
		n += gpu_poll(w);
	if (w->notice_head)
		n += gpu_notices_flush(w);
	if (w->post_head)
		n += post_pending(w);
	if (now >= w->next_scan_ns) {
		/* Scans are at least SCAN_INTERVAL_NS apart; deadlines are that precise. */
		uint64_t next = scan_deadlines(w, now);
		uint64_t soon = now + SCAN_INTERVAL_NS;
		w->next_scan_ns = next < soon ? soon : next;
	}
	signal_app(w);
	return n;
}

/* Completes everything still pending with status, waiting a bounded time for
 * posted requests to drain so that none can complete after we return. */
void worker_quiesce(struct worker *w, int status)
{
	xfer_engine_t *e = w->e;
	struct sub s;
	while (mpmc_pop(&e->subq, &s)) {
		if (s.kind == SUB_CALL) {
			s.u.call->result = -ESHUTDOWN;
			sem_post(&s.u.call->done);
			continue;
		}
		release_refs(e, &s);
		signal_store(s.signal, s.signal_value);
		worker_deliver(w, s.cb, s.cb_ctx, s.user_data, status, s.kind);
	}
	for (struct op *op = w->post_head; op; op = op->next_post)
		op_fail(op, status);
	uint64_t give_up = now_ns() + 2000000000ull;
	/* Goodbyes get a moment to leave (and shm a few polls to map peers). */
	for (uint64_t until = now_ns() + 300000000ull; hb_goodbye(w) && now_ns() < until;)
		poll_nics(w);
	for (uint64_t until = now_ns() + 5000000ull; now_ns() < until;)
		poll_nics(w);
	while (w->nlive && now_ns() < give_up) {
		post_pending(w);
		poll_nics(w);
		if (w->gpu_count)
			gpu_poll(w);
		if (w->notice_head)
			gpu_notices_flush(w);
		flush_overflow(w);
	}
	/* Whatever is still posted is abandoned: the endpoints close next, after
	 * which nothing can complete. */
	w->gpu_count = 0;
	w->notice_head = w->notice_tail = NULL;
	while (w->live.next_live != &w->live) {
		struct op *op = w->live.next_live;
		op_fail(op, status);
		op->done = op->posted;
		op->notices = 0;
		op_finish(w, op);
	}
	w->post_head = w->post_tail = NULL;
	imm_cancel_all(w, status);
	cancel_expire(w, UINT64_MAX, &give_up);
	signal_app(w);
}

/* ----------------------------------------------------------------- setup */

int worker_setup_buffers(struct worker *w)
{
	xfer_engine_t *e = w->e;
	uint32_t nwr = 0;
	for (unsigned n = 0; n < e->nnics; n++) {
		w->credits[n] = e->nics[n].tx_size;
		nwr += e->nics[n].tx_size;
	}
	w->ops = calloc(e->attr.max_ops, sizeof(*w->ops));
	w->wrs = calloc(nwr, sizeof(*w->wrs));
	w->recv_wrs = calloc(e->recv_slots, sizeof(*w->recv_wrs));
	w->free_send = calloc(SEND_BUFS, sizeof(*w->free_send));
	/* Every source of a completion at once: ops, armed counters, queued
	 * submissions (stop), cancels. */
	w->ov_cap = e->attr.max_ops + e->attr.imm_slots + e->attr.submit_depth + MAX_CANCELS + 16;
	w->overflow = calloc(w->ov_cap, sizeof(*w->overflow));
	w->hb = calloc(e->max_peers, sizeof(*w->hb));
	if (!w->ops || !w->wrs || !w->recv_wrs || !w->free_send || !w->overflow || !w->hb)
		return -ENOMEM;
	int ret = imm_table_init(&w->imm, e->attr.imm_slots);
	if (ret)
		return ret;
	for (uint32_t i = e->attr.max_ops; i-- > 0;) {
		w->ops[i].next_post = w->free_ops;
		w->free_ops = &w->ops[i];
	}
	for (uint32_t i = nwr; i-- > 0;)
		wr_put(w, &w->wrs[i]);
	for (uint32_t i = 0; i < SEND_BUFS; i++)
		w->free_send[w->nfree_send++] = i;
	w->live.next_live = w->live.prev_live = &w->live;
	return 0;
}

void worker_post_initial_recvs(struct worker *w)
{
	xfer_engine_t *e = w->e;
	for (uint32_t slot = 0; slot < e->recv_slots; slot++) {
		struct wr *wr = &w->recv_wrs[slot];
		wr->kind = WR_RECV;
		wr->slot = slot;
		wr->nic = (uint8_t)(slot / e->attr.recv_count);
		repost_recv(w, wr);
	}
}
