#include "core/notice.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/imm_counters.h"
#include "core/liveness.h"
#include "core/op.h"
#include "core/regions.h"
#include "core/tx.h"
#include "gpu/gpu_copy.h"
#include "util/log.h"
#include "util/sys.h"

/* ------------------------------------------------- a staged write's notices */

static const xfer_rmr_t *dst_of(const struct op *op)
{
	return op->s.kind == SUB_WRITE ? op->s.u.write.dst : op->s.u.paged.dst;
}

/* Ranges per notice: what the smaller of the two engines' receive buffers holds. */
static uint32_t ranges_per_notice(const xfer_engine_t *e, const struct op *op)
{
	uint32_t room = e->peers[op->s.peer].msg_max;
	return xi_notice_ranges_max(room < e->attr.msg_max ? room : e->attr.msg_max);
}

/* Into a mirror the notice names the ranges to copy; a region written in
 * place (a staged op only because its NICs cannot carry immediates,
 * nic->imm_by_msg) needs one notice that counts them all. */
static bool into_mirror(const struct op *op)
{
	return dst_of(op)->flags & WIRE_DESC_STAGED;
}

static uint32_t notice_count(const xfer_engine_t *e, const struct op *op)
{
	if (op->s.kind == SUB_WRITE || !into_mirror(op))
		return 1;
	uint32_t per = ranges_per_notice(e, op);
	return (op->s.u.paged.npages + per - 1) / per;
}

void xi_notice_phase(struct worker *w, struct op *op)
{
	op->phase = OP_NOTICES;
	op->data_total = op->posted;
	op->total = op->posted + notice_count(w->e, op);
	xi_op_enqueue(w, op);
}

/* A notice that names no ranges (nothing to copy out of a mirror): it
 * counts n->count immediates, or with none announces a copy to come
 * (xi_notice_ahead). Its length, or -ENOSPC. */
static int encode_rangeless(const xfer_engine_t *e, uint8_t *buf, const struct xi_notice *n)
{
	struct wire_cursor c;
	xi_notice_begin(&c, buf, e->slot_bytes, e->id, n);
	return xi_notice_end(&c, n);
}

/* Notice k of a staged write: a single write's one range (its shards count
 * as one immediate each), or the k-th run of a paged write's pages. */
static int build_op_notice(const xfer_engine_t *e, const struct op *op, uint32_t k, uint8_t *buf)
{
	const struct sub *s = &op->s;
	const bool imm = s->flags & XFER_F_IMM;
	struct xi_notice n = {.region_id = dst_of(op)->region_id, .imm = s->imm};
	if (!into_mirror(op)) {
		n.count = imm ? (s->kind == SUB_WRITE ? op->shards : s->u.paged.npages) : 0;
		return encode_rangeless(e, buf, &n);
	}
	struct wire_cursor c;
	if (s->kind == SUB_WRITE) {
		n.nranges = 1;
		n.count = imm ? op->shards : 0;
		xi_notice_begin(&c, buf, e->slot_bytes, e->id, &n);
		xi_notice_add(&c, s->u.write.dst_off, s->u.write.len);
		return xi_notice_end(&c, &n);
	}
	const struct xfer_paged_write *pw = &s->u.paged;
	uint32_t per = ranges_per_notice(e, op), first = k * per;
	n.nranges = pw->npages - first < per ? pw->npages - first : per;
	n.count = imm ? n.nranges : 0;
	xi_notice_begin(&c, buf, e->slot_bytes, e->id, &n);
	for (uint32_t i = first; i < first + n.nranges; i++)
		xi_notice_add(&c, pw->dst_base + (uint64_t)pw->dst_pages[i] * pw->dst_stride, pw->page_len);
	return xi_notice_end(&c, &n);
}

/* A context and a bounce buffer for a notice of its own, both or neither. */
static struct wr *notice_wr(struct worker *w, uint32_t *b, uint8_t **buf)
{
	struct wr *wr = xi_tx_wr(w, TX_DATA);
	*buf = wr ? xi_tx_buf(w, b) : NULL;
	if (wr && !*buf) {
		xi_tx_wr_put(w, wr);
		wr = NULL;
	}
	return wr;
}

int xi_notice_post(struct worker *w, struct op *op, uint32_t k, unsigned n)
{
	xfer_engine_t *e = w->e;
	const struct peer *p = &e->peers[op->s.peer];
	if (!xi_peer_live(p))
		return -XFER_EPEER;
	if (!xi_tx_ready(w, n, TX_DATA))
		return -EAGAIN;
	uint32_t b;
	uint8_t *buf;
	struct wr *wr = notice_wr(w, &b, &buf);
	if (!wr)
		return -EAGAIN;
	int len = build_op_notice(e, op, k, buf);
	if (len < 0) {
		xi_tx_buf_put(w, b);
		xi_tx_wr_put(w, wr);
		return len;
	}
	*wr = (struct wr){.op = op, .slot = op->data_total + k, .nic = (uint8_t)n, .kind = WR_OP,
			  .sendbuf = UINT32_MAX};
	int ret = xi_tx_send(w, n, p->dest[n], b, (size_t)len, wr);
	if (ret)
		xi_tx_wr_put(w, wr);
	return ret;
}

/* ------------------------------------------------ entry and copy notices */

/* The notice of entry wr->slot: one range when its bytes wait in the
 * member's mirror, none after a copy in place. A scatter entry counts one
 * immediate; a copied single or paged write what its requests would have;
 * a bare immediate (xi_notice_imm) its one. */
static uint32_t entry_count(const struct wr *wr)
{
	const struct op *op = wr->op;
	const struct sub *s = &op->s;
	if (!(s->flags & XFER_F_IMM))
		return 0;
	return s->kind == SUB_SCATTER ? 1 : s->kind == SUB_WRITE ? op->shards : s->u.paged.npages;
}

/* count: the immediates it counts, entry_count(wr) unless it speaks for
 * several copies (xi_notice_merge_flush). */
static int build_entry_notice(const xfer_engine_t *e, const struct wr *wr, uint8_t *buf, uint32_t count)
{
	const struct op *op = wr->op;
	const struct sub *s = &op->s;
	const struct xfer_scatter_entry *en = s->kind == SUB_SCATTER ? &s->u.scatter.entries[wr->slot] : NULL;
	if (s->kind == SUB_IMM || s->kind == SUB_BARRIER)
		return encode_rangeless(e, buf, &(struct xi_notice){.imm = s->imm, .count = 1});
	struct xi_notice n = {.region_id = en ? en->dst->region_id : dst_of(op)->region_id, .imm = s->imm,
			      .count = count, .nranges = wr->staged ? 1 : 0};
	struct wire_cursor c;
	xi_notice_begin(&c, buf, e->slot_bytes, e->id, &n);
	if (wr->staged)
		xi_notice_add(&c, en->dst_off, en->len);
	return xi_notice_end(&c, &n);
}

/* 0 posted, -EAGAIN (no credit or bounce buffer yet), or the error. */
static int notice_send(struct worker *w, struct wr *wr, uint32_t count)
{
	xfer_engine_t *e = w->e;
	const struct peer *p = &e->peers[xi_op_peer_of(wr->op, wr->slot)];
	unsigned n = wr->nic;
	if (!xi_peer_live(p))
		return -XFER_EPEER;
	if (!xi_tx_ready(w, n, TX_DATA))
		return -EAGAIN;
	uint32_t b;
	uint8_t *buf = xi_tx_buf(w, &b);
	if (!buf)
		return -EAGAIN;
	int len = build_entry_notice(e, wr, buf, count);
	if (len < 0) {
		xi_tx_buf_put(w, b);
		return len;
	}
	return xi_tx_send(w, n, p->dest[n], b, (size_t)len, wr);
}

static int notice_try(struct worker *w, struct wr *wr)
{
	return notice_send(w, wr, entry_count(wr));
}

int xi_notice_imm(struct worker *w, struct wr *wr)
{
	return notice_try(w, wr);
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
		xi_op_entry_status(op, wr->slot, op->status ? op->status : status);
	else
		xi_request_failed(w, op, wr->slot, status);
	xi_tx_wr_put(w, wr);
}

/* A single or paged write copied in place (CUDA IPC) is complete for its
 * writer once its notice is posted: its bytes are in the target's GPU
 * memory (the copy's event fired) and the notice carries nothing but the
 * count, which the transport delivers in order behind anything posted
 * before it, as an RDMA NIC delivers a write's immediate after its ack. So
 * the op stops waiting for the notice's own completion (on xfer's shm that
 * is the target's worker taking it: a round trip, and a wake-up when that
 * worker slept through a long copy). Its context lives on alone until the
 * transport completes it. Kept: a staged notice (the target copies its
 * ranges out of the mirror the writer would reuse) and a scatter entry's
 * (its status says which member took its notice). */
static bool notice_detaches(const struct wr *wr)
{
	return !wr->staged && wr->op->s.kind != SUB_SCATTER;
}

/* wr's notice was handed to the transport. */
static void notice_posted(struct wr *wr)
{
	struct op *op = wr->op;
	if (op->s.t_call)
		op->t_last = xi_now_ns(); /* trace: the last thing the op posts */
	if (!notice_detaches(wr))
		return;
	op->notices--;
	wr->slot = xi_op_peer_of(op, wr->slot); /* the peer, for a failure's verdict */
	wr->op = NULL;
}

/* A detached notice completed: a failure (the peer died before taking it)
 * cannot reach the op, which has completed; the target's expectation times
 * out, and the peer is probed as after any failed request. */
static void detached_done(struct worker *w, struct wr *wr, int status)
{
	if (status < 0) {
		xdbg("notice of a completed GPU copy to peer %u failed: %s", wr->slot, xfer_strerror(status));
		if (xi_is_peer_failure(status) && wr->slot < w->e->max_peers && xi_peer_live(&w->e->peers[wr->slot]))
			xi_peer_suspect(w, wr->slot, status);
	}
	xi_tx_wr_put(w, wr);
}

/* A copy this long outlasts the target's spin (50 us by default) or its
 * wake-up: the target is told when it starts (xi_notice_ahead). */
#define AHEAD_MIN_BYTES (32ull << 20)

void xi_notice_ahead(struct worker *w, const struct op *op, uint64_t bytes)
{
	xfer_engine_t *e = w->e;
	const struct sub *s = &op->s;
	unsigned n = op->nic_base;
	const struct peer *p = &e->peers[s->peer];
	if (!(s->flags & XFER_F_IMM) || bytes < AHEAD_MIN_BYTES || !xi_peer_live(p) || !xi_tx_ready(w, n, TX_DATA))
		return;
	/* Best effort: without a context or a bounce buffer the target only
	 * wakes when the counting notice comes. */
	uint32_t b;
	uint8_t *buf;
	struct wr *wr = notice_wr(w, &b, &buf);
	if (!wr)
		return;
	int len = encode_rangeless(e, buf, &(struct xi_notice){.region_id = dst_of(op)->region_id, .imm = s->imm});
	/* Completes like a copy's detached notice (xi_notice_done). */
	*wr = (struct wr){.op = NULL, .slot = s->peer, .nic = (uint8_t)n, .kind = WR_NOTICE, .sendbuf = UINT32_MAX};
	if (len < 0 || xi_tx_send(w, n, p->dest[n], b, (size_t)len, wr)) {
		if (len < 0)
			xi_tx_buf_put(w, b);
		xi_tx_wr_put(w, wr);
	}
}

/* wr, which carried the data (or its copy), carries the notice next. */
static void as_notice(struct wr *wr, bool staged)
{
	wr->kind = WR_NOTICE;
	wr->staged = staged;
	wr->sendbuf = UINT32_MAX;
}

void xi_notice_landed(struct worker *w, struct wr *wr, bool staged)
{
	struct op *op = wr->op;
	if (!staged && !(op->s.flags & XFER_F_IMM)) {
		xi_tx_wr_put(w, wr); /* copied in place, nothing to count */
		return;
	}
	as_notice(wr, staged);
	op->notices++;
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
	else
		notice_posted(wr);
}

/* ------------------------------------------- notices of copies done together */

/* Copies of one launch finish together (one event), and a burst of calls
 * shares launches: each copy's own notice cost the worker 2.5-4.6 us (a
 * send on shm, the op's completion; run page7-1, 1024 x 4 KiB pages, 64
 * calls: 64 notices, half the row's time), so the notices of copies that
 * one poll found done, to one peer, region and immediate, go as one that
 * counts them all. The target counts the same immediates, in the same
 * order with respect to everything else posted to it (nothing else is
 * posted between them), and every op completes once that notice is
 * posted, as it would once its own was. Only notices that detach (a copy
 * in place, not a scatter entry's) and only while no notice waits for a
 * credit: then each goes its own way, in order. */
static bool mergeable(const struct worker *w, const struct wr *wr)
{
	const struct op *op = wr->op;
	return !w->merge_off && !w->notice_head && !op->cut && (op->s.flags & XFER_F_IMM) &&
	       (op->s.kind == SUB_WRITE || op->s.kind == SUB_PAGED);
}

static bool same_notice(const struct wr *a, const struct wr *b)
{
	return a->nic == b->nic && xi_op_peer_of(a->op, a->slot) == xi_op_peer_of(b->op, b->slot) &&
	       dst_of(a->op)->region_id == dst_of(b->op)->region_id && a->op->s.imm == b->op->s.imm;
}

void xi_notice_merge_flush(struct worker *w)
{
	const uint32_t n = w->nmerge;
	if (!n)
		return;
	struct wr *first = w->merge[0];
	const uint64_t total = w->merge_count;
	w->nmerge = 0;
	w->merge_count = 0;
	int ret = -EAGAIN;
	if (n > 1 && !w->notice_head) {
		as_notice(first, false);
		ret = notice_send(w, first, (uint32_t)total);
	}
	if (ret) {
		/* Alone, or the one notice cannot go now: each its own way (queued
		 * in order, or failed as it would have alone). */
		for (uint32_t i = 0; i < n; i++) {
			struct op *op = w->merge[i]->op;
			op->notices--;
			xi_notice_landed(w, w->merge[i], false);
			xi_op_try_finish(w, op);
		}
		return;
	}
	struct op *op0 = first->op;
	notice_posted(first); /* the first's context carries it, detached */
	xi_op_try_finish(w, op0);
	for (uint32_t i = 1; i < n; i++) {
		struct op *op = w->merge[i]->op;
		if (op->s.t_call)
			op->t_last = xi_now_ns();
		op->notices--;
		xi_tx_wr_put(w, w->merge[i]);
		xi_op_try_finish(w, op);
	}
}

void xi_notice_copied(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	op->copies--;
	op->done++;
	if (!status && mergeable(w, wr)) {
		const uint32_t c = entry_count(wr);
		if (w->nmerge && (w->nmerge == XI_NOTICE_MERGE || !same_notice(w->merge[0], wr) ||
				  w->merge_count + c > UINT32_MAX))
			xi_notice_merge_flush(w);
		/* Its notice is due: the op waits for it (xi_notice_merge_flush). */
		op->notices++;
		w->merge[w->nmerge++] = wr;
		w->merge_count += c;
		return;
	}
	xi_notice_merge_flush(w); /* those held go first */
	if (status) {
		xi_request_failed(w, op, wr->slot, status);
		xi_tx_wr_put(w, wr);
	} else {
		xi_notice_landed(w, wr, false);
	}
	xi_op_try_finish(w, op);
}

void xi_notice_done(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	if (!op) {
		detached_done(w, wr, status);
		return;
	}
	op->notices--;
	if (status < 0)
		xi_request_failed(w, op, wr->slot, status);
	xi_tx_wr_put(w, wr);
	xi_op_try_finish(w, op);
}

int xi_notice_flush(struct worker *w)
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
		else
			notice_posted(wr);
		xi_op_try_finish(w, op);
		n++;
	}
	return n;
}

bool xi_notice_waiting(const struct worker *w)
{
	return w->notice_head != NULL;
}

/* Copies of notices' ranges in flight at most: the GPU copy ring's size. */
#define XI_LANDINGS XI_GPU_RING

static void landings_reset(struct worker *w)
{
	w->free_landings = NULL;
	for (uint32_t i = 0; w->landings && i < XI_LANDINGS; i++) {
		w->landings[i].next_free = w->free_landings;
		w->free_landings = &w->landings[i];
	}
}

int xi_notice_init(struct worker *w)
{
	const char *m = getenv("XFER_NOTICE_MERGE");
	w->merge_off = m && !strcmp(m, "0");
	if (!w->gpu)
		return 0;
	w->landings = calloc(XI_LANDINGS, sizeof(*w->landings));
	/* Page numbers of the largest notice our receive buffers hold. */
	w->landing_idx_max = xi_notice_ranges_max(w->e->attr.msg_max);
	w->landing_idx = calloc(w->landing_idx_max ? w->landing_idx_max : 1, sizeof(*w->landing_idx));
	if (!w->landings || !w->landing_idx)
		return -ENOMEM;
	landings_reset(w);
	return 0;
}

void xi_notice_free(struct worker *w)
{
	free(w->landings);
	free(w->landing_idx);
	w->landings = w->free_landings = NULL;
	w->landing_idx = NULL;
}

void xi_notice_forget(struct worker *w)
{
	w->notice_head = w->notice_tail = NULL;
	landings_reset(w); /* their copies were forgotten with the GPU's */
}

/* ----------------------------------------------------------- the receiver */

/* A paged write's ranges (all one length, on 16-byte boundaries: the
 * common case) land by one scatter kernel reading the mapped mirror, rather
 * than one copy-engine call each (about 5 us of the worker apiece): 0, 1
 * (not such ranges, or no kernel: copy them one by one), or the error. */
static int land_by_kernel(struct worker *w, const xfer_mr_t *mr, const struct xi_notice *n)
{
	uint64_t off, len, mirror_dev;
	if (n->nranges < 2 || !w->landing_idx || n->nranges > w->landing_idx_max || !xi_gpu_kernels_on(w->gpu, mr->gpu))
		return 1;
	xi_notice_range(n, 0, &off, &len);
	const uint64_t page = len;
	for (uint32_t i = 0; i < n->nranges; i++) {
		xi_notice_range(n, i, &off, &len);
		if (len != page || (off | len) & 15 || off / 16 > UINT32_MAX)
			return 1;
		w->landing_idx[i] = (uint32_t)(off / 16);
	}
	if (xi_gpu_host_dev(w->gpu, mr->reg_buf, &mirror_dev))
		return 1;
	struct xi_gpu_pages pg = {
		.src_base = mirror_dev,
		.src_stride = 16,
		.dst_base = (uint64_t)(uintptr_t)mr->buf,
		.dst_stride = 16,
		.page_len = page,
		.src_pages = w->landing_idx,
		.dst_pages = w->landing_idx,
		.npages = n->nranges,
	};
	/* A full page-list ring must not cost the notice its immediates: then
	 * the ranges go one by one. */
	int ret = xi_gpu_copy_pages(w->gpu, &pg);
	return ret == -EAGAIN ? 1 : ret;
}

/* How long a target stays awake for a copy it was told of (the copy's
 * end, which the counting notice brings, normally comes much sooner). */
#define AHEAD_NS 100000000ull

bool xi_notice_expected(const struct worker *w, uint64_t now)
{
	return w->ahead_until > now;
}

void xi_notice_received(struct worker *w, const struct xi_notice *n)
{
	xfer_engine_t *e = w->e;
	if (!n->nranges) {
		/* Nothing to count: a copy to us has begun (xi_notice_ahead); else
		 * a copy's count, which ends the wait for it. */
		w->ahead_until = n->count ? 0 : xi_now_ns() + AHEAD_NS;
		if (!n->count)
			return;
	}
	if (n->nranges) {
		xfer_mr_t *mr = xi_regions_find(e, n->region_id);
		/* Ranges name mirror bytes: a region written in place has none. */
		if (!w->gpu || !mr || mr->gpu < 0 || !mr->reg_buf || !mr->registered) {
			xwarn("dropping a notice for region %llu: not a live GPU region here",
			      (unsigned long long)n->region_id);
			return;
		}
		for (uint32_t i = 0; i < n->nranges; i++) {
			uint64_t off, len;
			xi_notice_range(n, i, &off, &len);
			if (off > mr->len || len > mr->len - off) {
				xwarn("dropping a notice with a range outside region %llu",
				      (unsigned long long)n->region_id);
				return;
			}
		}
		struct landing *l = w->free_landings;
		if (l && xi_gpu_copy_begin(w->gpu, mr->gpu) == 0) {
			int ret = land_by_kernel(w, mr, n);
			for (uint32_t i = 0; i < n->nranges && ret == 1; i++) {
				uint64_t off, len;
				xi_notice_range(n, i, &off, &len);
				ret = xi_gpu_copy_add_land(w->gpu, (uint64_t)(uintptr_t)mr->buf + off,
							   (const uint8_t *)mr->reg_buf + off, len);
				if (!ret && i + 1 < n->nranges)
					ret = 1;
			}
			l->wr.kind = WR_LANDING;
			if (!ret)
				ret = xi_gpu_copy_end(w->gpu, &l->wr);
			if (ret) {
				xerr("copy to GPU failed; immediates of this notice withheld");
				return;
			}
			w->free_landings = l->next_free;
			l->imm = n->imm;
			l->count = n->count;
			return;
		}
		/* Every landing in use (or the copy ring full): copy now. */
		int ret = 0;
		for (uint32_t i = 0; i < n->nranges && !ret; i++) {
			uint64_t off, len;
			xi_notice_range(n, i, &off, &len);
			ret = xi_gpu_stage_htod(w->gpu, mr->gpu, (uint64_t)(uintptr_t)mr->buf + off,
						(const uint8_t *)mr->reg_buf + off, len);
		}
		if (ret || xi_gpu_stage_wait(w->gpu, mr->gpu)) {
			xerr("copy to GPU failed; immediates of this notice withheld");
			return;
		}
	}
	xi_imm_arrived(w, n->imm, n->count);
}

void xi_notice_landed_gpu(struct worker *w, struct wr *wr, int status)
{
	struct landing *l = (struct landing *)wr;
	if (status)
		xerr("copy to GPU failed; immediates of this notice withheld");
	else
		xi_imm_arrived(w, l->imm, l->count);
	l->next_free = w->free_landings;
	w->free_landings = l;
}
