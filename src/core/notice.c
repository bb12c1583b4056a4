/* Scatter entries into GPU regions. Entries are independent (one member's
 * failure does not stop the others), so each gets its own notice rather
 * than the op-wide notice phase of single and paged writes:
 *  - an entry into a staged region is written to the member's host mirror
 *    without its immediate. When that write completes, the request context
 *    (wr) that carried it becomes the entry's NOTICE, naming the range to
 *    copy to the GPU and the immediate to count only after the copy;
 *  - an entry into a GPU region on this host is copied (device to device,
 *    or host to device) through CUDA IPC and parked until its event fires;
 *    then the wr it reserved carries a notice with the count alone. Without
 *    XFER_F_IMM there is nothing to announce and no notice is sent.
 * A notice that cannot be posted yet (no credit or bounce buffer) waits in
 * the worker's notice list holding its wr; wrs are bounded, so is the list.
 * The op finishes once every entry's data and notice have completed, so its
 * one completion comes after every immediate it carries has been sent. */
#include <errno.h>
#include <string.h>

#include "core/worker.h"

static const struct xfer_scatter_entry *entry_of(const struct op *op, uint32_t i)
{
	return &op->s.u.scatter.entries[i];
}

static struct peer *member_of(xfer_engine_t *e, const struct op *op, uint32_t i)
{
	return &e->peers[op->s.u.scatter.group->peers[entry_of(op, i)->member]];
}

bool gpu_entry_staged(const struct op *op, uint32_t i)
{
	return (entry_of(op, i)->dst->flags & WIRE_DESC_STAGED) != 0;
}

int gpu_scatter_ipc(struct worker *w, struct op *op, uint32_t i, unsigned n)
{
	xfer_engine_t *e = w->e;
	const struct xfer_scatter_entry *en = entry_of(op, i);
	xfer_rmr_t *r = (xfer_rmr_t *)en->dst;
	if (gpu_rmr_path(e, r) != PATH_IPC)
		return 0;
	if (atomic_load_explicit(&member_of(e, op, i)->state, memory_order_relaxed) != PEER_LIVE)
		return -XFER_EPEER;
	xfer_mr_t *src = op->s.u.scatter.src;
	int dev = src && src->gpu >= 0 ? src->gpu : 0;
	/* Reserved now so that the notice never waits for a context. */
	struct wr *wr = wr_get(w);
	if (!wr)
		return -EAGAIN;
	void *st;
	int ret = gpu_ipc_begin(w, r, dev, &st);
	if (!ret)
		ret = gpu_copy_to(w, st, r->ipc_ptr + r->ipc_offset + en->dst_off, src, en->src_off, en->len);
	if (!ret)
		ret = gpu_ipc_park(w, dev, op, wr);
	if (ret) {
		wr_put(w, wr);
		/* The handle would not open: this entry and later ones go by NIC. */
		return ret == -EIO && r->ipc_failed ? 0 : ret;
	}
	wr->op = op;
	wr->slot = i;
	wr->nic = (uint8_t)n;
	wr->kind = WR_NOTICE;
	wr->sendbuf = UINT32_MAX;
	return 1;
}

/* The body: region id, imm, count, ranges (one for a staged entry). */
static size_t entry_notice_build(const struct op *op, uint32_t i, bool staged, uint8_t *buf)
{
	const struct xfer_scatter_entry *en = entry_of(op, i);
	uint64_t id = en->dst->region_id;
	uint32_t head[4] = {op->s.imm, (op->s.flags & XFER_F_IMM) ? 1u : 0u, staged ? 1u : 0u, 0};
	memcpy(buf, &id, 8);
	memcpy(buf + 8, head, 16);
	if (!staged)
		return NOTICE_HDR;
	memcpy(buf + NOTICE_HDR, &en->dst_off, 8);
	memcpy(buf + NOTICE_HDR + 8, &en->len, 8);
	return NOTICE_HDR + 16;
}

/* 0 posted, -EAGAIN (no credit or bounce buffer yet), or the error. */
static int notice_try(struct worker *w, struct wr *wr)
{
	xfer_engine_t *e = w->e;
	struct op *op = wr->op;
	const struct peer *p = member_of(e, op, wr->slot);
	unsigned n = wr->nic;
	if (atomic_load_explicit(&p->state, memory_order_relaxed) != PEER_LIVE)
		return -XFER_EPEER;
	if (!w->credits[n] || !w->nfree_send)
		return -EAGAIN;
	uint32_t b = w->free_send[--w->nfree_send];
	uint8_t *buf = e->send_bufs + (size_t)b * e->slot_bytes;
	size_t body = entry_notice_build(op, wr->slot, wr->staged, buf + MSG_HDR_BYTES);
	gpu_notice_frame(e, buf, body);
	int ret = e->ops.post_send(&e->nics[n], p->dest[n], buf, MSG_HDR_BYTES + body,
				   e->send_mr->nic[n].desc, wr);
	if (ret) {
		w->free_send[w->nfree_send++] = b;
		return ret;
	}
	wr->sendbuf = b;
	w->credits[n]--;
	atomic_fetch_add_explicit(&e->st.wrs_posted, 1, memory_order_relaxed);
	return 0;
}

static void notice_queue(struct worker *w, struct wr *wr)
{
	wr->next_free = NULL;
	if (w->notice_tail)
		w->notice_tail->next_free = wr;
	else
		w->notice_head = wr;
	w->notice_tail = wr;
}

/* A notice that will never be posted: the entry did not reach GPU memory. */
static void notice_drop(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	op->notices--;
	if (op->cut)
		scatter_entry_status(op, wr->slot, op->status ? op->status : status);
	else
		scatter_entry_failed(w, op, wr->slot, status);
	wr_put(w, wr);
}

void gpu_entry_landed(struct worker *w, struct wr *wr, bool staged)
{
	struct op *op = wr->op;
	if (!staged && !(op->s.flags & XFER_F_IMM)) {
		wr_put(w, wr); /* copied in place, nothing to count */
		return;
	}
	wr->kind = WR_NOTICE;
	wr->staged = staged;
	wr->sendbuf = UINT32_MAX;
	op->notices++;
	/* Cut short (cancel, deadline, stop): no immediate for bytes the caller
	 * gave up on, as for single writes. */
	if (op->cut) {
		notice_drop(w, wr, -ECANCELED);
		return;
	}
	/* Behind notices already waiting, so they go out in order. */
	int ret = w->notice_head ? -EAGAIN : notice_try(w, wr);
	if (ret == -EAGAIN)
		notice_queue(w, wr);
	else if (ret)
		notice_drop(w, wr, ret);
}

void gpu_entry_copied(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	op->done++;
	if (status) {
		scatter_entry_failed(w, op, wr->slot, status);
		wr_put(w, wr);
	} else {
		gpu_entry_landed(w, wr, false);
	}
	op_maybe_finish(w, op);
}

void gpu_notice_done(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	op->notices--;
	if (status < 0)
		scatter_entry_failed(w, op, wr->slot, status);
	wr_put(w, wr);
	op_maybe_finish(w, op);
}

int gpu_notices_flush(struct worker *w)
{
	int n = 0;
	while (w->notice_head) {
		struct wr *wr = w->notice_head;
		struct op *op = wr->op;
		int ret = op->cut ? -ECANCELED : notice_try(w, wr);
		if (ret == -EAGAIN)
			break;
		w->notice_head = wr->next_free;
		if (!w->notice_head)
			w->notice_tail = NULL;
		if (ret)
			notice_drop(w, wr, ret);
		op_maybe_finish(w, op);
		n++;
	}
	return n;
}
