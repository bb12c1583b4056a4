/* Turning ops into requests, one way per path (path.h). Request i of an op
 * is built from its submission alone (build()); what a path adds is where
 * the immediate goes and what follows the data. Posting stops at the first
 * op that cannot go on (head of line), so requests leave in submission
 * order and the provider is never asked to queue more than it accepts. */
#include "core/path.h"

#include <errno.h>
#include <string.h>

#include "core/liveness.h"
#include "core/notice.h"
#include "core/op.h"
#include "core/telemetry.h"
#include "core/tx.h"
#include "gpu/gpu_copy.h"
#include "util/log.h"
#include "util/sys.h"
#include "wire/msg.h"

static const struct op_path path_fabric, path_staged, path_ipc, path_scatter_gpu;

/* One request: 0 posted (and counted), -EAGAIN (try later), or the error
 * that fails it. */
typedef int (*request_fn)(struct worker *w, struct op *op, uint32_t i, unsigned n);

static unsigned wr_nic(const xfer_engine_t *e, const struct op *op, uint32_t i)
{
	if (op->s.flags & XFER_F_PIN)
		return XFER_F_NIC_OF(op->s.flags);
	return (op->nic_base + i) % e->nnics;
}

static xfer_mr_t *source_of(const struct op *op)
{
	const struct sub *s = &op->s;
	return s->kind == SUB_WRITE ? s->u.write.src : s->kind == SUB_PAGED ? s->u.paged.src
			       : s->kind == SUB_SCATTER ? s->u.scatter.src : NULL;
}

/* ------------------------------------------------------ building requests */

/* Fills the remote side of a request to region r through NIC n. */
static void to_region(struct nic_write *nw, const xfer_rmr_t *r, unsigned n, uint64_t off)
{
	const struct wire_rkey *rk = &r->nic[n % r->nnics];
	nw->raddr = rk->base + off;
	nw->rkey = rk->key;
}

/* Nothing to place: such a write goes to the peer's sink, whose key and
 * address every device accepts (some check a zero-length write's, which may
 * name a region's end or a region just revoked). */
static void to_sink(struct nic_write *nw, const struct peer *p, unsigned n)
{
	nw->raddr = p->sink[n].base;
	nw->rkey = p->sink[n].key;
}

/* Request i of op for NIC n: 0, or -XFER_EPEER (its peer is dead: the
 * request is skipped). Bounds were proven at submission. */
static int build(struct worker *w, const struct op *op, uint32_t i, unsigned n, struct nic_write *nw)
{
	xfer_engine_t *e = w->e;
	const struct sub *s = &op->s;
	const struct peer *p = &e->peers[xi_op_peer_of(op, i)];
	if (!xi_peer_live(p))
		return -XFER_EPEER;
	nw->dest = p->dest[n];
	nw->has_imm = !!(s->flags & XFER_F_IMM);
	nw->imm = s->imm;
	switch (s->kind) {
	case SUB_IMM:
	case SUB_BARRIER:
		nw->buf = e->sink->buf;
		nw->desc = e->sink->nic[n].desc;
		to_sink(nw, p, n);
		nw->has_imm = 1;
		return 0;
	case SUB_WRITE: {
		xfer_mr_t *src = s->u.write.src ? s->u.write.src : e->sink;
		/* Request i is chunk i / k of shard i % k. Shards: the first len % k
		 * are one byte longer. Chunks: chunk_len bytes each, the last what
		 * remains (nothing but the immediate when the shard is short). */
		uint64_t k = op->shards, base = s->u.write.len / k, rem = s->u.write.len % k;
		uint64_t sh = i % k, chunk = i / k;
		uint64_t sh_len = base + (sh < rem), off = sh * base + (sh < rem ? sh : rem);
		uint64_t c_off = chunk * op->chunk_len;
		if (c_off > sh_len)
			c_off = sh_len;
		nw->len = sh_len - c_off < op->chunk_len ? sh_len - c_off : op->chunk_len;
		off += c_off;
		if (chunk + 1 < op->chunks)
			nw->has_imm = 0;
		nw->buf = xi_mr_nic_bytes(src) + s->u.write.src_off + off;
		nw->desc = src->nic[n].desc;
		to_region(nw, s->u.write.dst, n, s->u.write.dst_off + off);
		if (!nw->len)
			to_sink(nw, p, n);
		return 0;
	}
	case SUB_PAGED: {
		const struct xfer_paged_write *pw = &s->u.paged;
		nw->buf = xi_mr_nic_bytes(pw->src) + pw->src_base + (uint64_t)pw->src_pages[i] * pw->src_stride;
		nw->len = pw->page_len;
		nw->desc = pw->src->nic[n].desc;
		to_region(nw, pw->dst, n, pw->dst_base + (uint64_t)pw->dst_pages[i] * pw->dst_stride);
		return 0;
	}
	case SUB_SCATTER: {
		const struct xfer_scatter_entry *en = &s->u.scatter.entries[i];
		xfer_mr_t *src = s->u.scatter.src ? s->u.scatter.src : e->sink;
		nw->buf = xi_mr_nic_bytes(src) + (en->len ? en->src_off : 0);
		nw->len = en->len;
		nw->desc = src->nic[n].desc;
		to_region(nw, en->dst, n, en->dst_off);
		if (!nw->len)
			to_sink(nw, p, n);
		return 0;
	}
	default:
		return -EINVAL;
	}
}

/* The DtoH pieces of a staging copy: every byte op will send from src. */
static int stage_pieces(struct worker *w, const struct op *op, const xfer_mr_t *src)
{
	const struct sub *s = &op->s;
	uint8_t *mirror = (uint8_t *)src->reg_buf;
	uint64_t dev = (uint64_t)(uintptr_t)src->buf;
	int ret = 0;
	switch (s->kind) {
	case SUB_WRITE:
		return xi_gpu_copy_add_dtoh(w->gpu, mirror + s->u.write.src_off, dev + s->u.write.src_off,
					    s->u.write.len);
	case SUB_PAGED: {
		const struct xfer_paged_write *pw = &s->u.paged;
		uint64_t mirror_dev;
		if (xi_gpu_kernels_on(w->gpu, src->gpu) && !xi_gpu_host_dev(w->gpu, mirror, &mirror_dev)) {
			/* One gather kernel into the mapped mirror (same layout as the
			 * region) rather than a copy-engine call per page. */
			struct xi_gpu_pages pg = {
				.src_base = dev + pw->src_base,
				.src_stride = pw->src_stride,
				.dst_base = mirror_dev + pw->src_base,
				.dst_stride = pw->src_stride,
				.page_len = pw->page_len,
				.src_pages = pw->src_pages,
				.dst_pages = pw->src_pages,
				.npages = pw->npages,
			};
			return xi_gpu_copy_pages(w->gpu, &pg);
		}
		for (uint32_t i = 0; i < pw->npages && !ret; i++) {
			uint64_t off = pw->src_base + (uint64_t)pw->src_pages[i] * pw->src_stride;
			ret = xi_gpu_copy_add_dtoh(w->gpu, mirror + off, dev + off, pw->page_len);
		}
		return ret;
	}
	case SUB_SCATTER:
		for (uint32_t i = 0; i < s->u.scatter.n && !ret; i++) {
			const struct xfer_scatter_entry *en = &s->u.scatter.entries[i];
			ret = xi_gpu_copy_add_dtoh(w->gpu, mirror + en->src_off, dev + en->src_off, en->len);
		}
		return ret;
	default:
		return 0;
	}
}

/* A GPU source the NICs read through its host mirror: all of the op's bytes
 * go to the mirror, once, before its first request, as one tracked copy
 * whose event the worker polls like a completion (xi_path_staged_src); the
 * op waits at the FIFO's head meanwhile (-EAGAIN) and the worker goes on
 * with everything else. 0 when the bytes are there, or -EIO. */
static int stage_source(struct worker *w, struct op *op)
{
	xfer_mr_t *src = source_of(op);
	if (op->src_staged)
		return 0;
	if (op->src_stage_failed || !w->gpu)
		return -EIO;
	if (op->src_staging)
		return -EAGAIN;
	struct wr *wr = xi_tx_wr(w, TX_DATA);
	if (!wr)
		return -EAGAIN;
	int ret = xi_gpu_copy_begin(w->gpu, src->gpu);
	if (!ret)
		ret = stage_pieces(w, op, src);
	if (!ret)
		ret = xi_gpu_copy_end(w->gpu, wr);
	if (ret) {
		xi_tx_wr_put(w, wr);
		return ret == -EAGAIN ? -EAGAIN : -EIO;
	}
	*wr = (struct wr){.op = op, .slot = op->posted, .nic = op->nic_base, .kind = WR_STAGE, .sendbuf = UINT32_MAX};
	op->copies++;
	op->src_staging = true;
	return -EAGAIN;
}

void xi_path_staged_src(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	op->copies--;
	op->src_staging = false;
	if (status)
		op->src_stage_failed = true; /* its requests fail with -EIO */
	else
		op->src_staged = true;
	xi_tx_wr_put(w, wr);
	xi_op_try_finish(w, op);
}

static int send_request(struct worker *w, const struct op *op, unsigned n, struct wr *wr)
{
	xfer_engine_t *e = w->e;
	const struct sub *s = &op->s;
	const struct peer *p = &e->peers[s->peer];
	if (!xi_peer_live(p))
		return -XFER_EPEER;
	uint32_t b;
	uint8_t *buf = xi_tx_buf(w, &b);
	if (!buf)
		return -EAGAIN;
	xi_msg_put_hdr(buf, XI_MSG_APP, s->u.send.len, e->id);
	if (s->u.send.len)
		memcpy(buf + XI_MSG_HDR, s->u.send.buf, s->u.send.len);
	int ret = xi_tx_send(w, n, p->dest[n], b, XI_MSG_HDR + s->u.send.len, wr);
	if (ret == 0)
		xi_tel_peer_send(w->tel, s->peer, s->u.send.len);
	else if (ret == -EAGAIN)
		xi_tel_peer(w->tel, s->peer, TP_RETRIES, 1); /* the provider's refusal */
	return ret;
}

/* Posts request i of op on NIC n; with_imm false: the immediate rides on a
 * notice instead (a mirror must be copied to the GPU before it counts). */
static int post_request(struct worker *w, struct op *op, uint32_t i, unsigned n, bool with_imm)
{
	if (!xi_tx_ready(w, n, TX_DATA))
		return -EAGAIN;
	struct wr *wr = xi_tx_wr(w, TX_DATA);
	if (!wr)
		return -EAGAIN;
	wr->op = op;
	wr->nic = (uint8_t)n;
	wr->kind = WR_OP;
	wr->slot = i;
	/* Stamped before the provider call: "first post" is when the engine
	 * hands the first request over; what the provider then spends inside
	 * its post call (4-12 us for tcp;ofi_rxm, which sends inline) is its
	 * own figure, t_first_ret - t_first. */
	if (op->s.t_call && !op->posted)
		op->t_first = xi_now_ns();
	int ret;
	if (op->s.kind == SUB_SEND) {
		ret = send_request(w, op, n, wr);
	} else if ((op->s.kind == SUB_IMM || op->s.kind == SUB_BARRIER) && w->e->nics[n].imm_by_msg) {
		ret = xi_notice_imm(w, wr);
	} else {
		struct nic_write nw = {0};
		ret = build(w, op, i, n, &nw);
		if (!ret && op->src_mirror)
			ret = stage_source(w, op);
		nw.has_imm &= with_imm;
		if (!ret)
			ret = xi_tx_write(w, n, &nw, wr);
		/* Only the provider's post says -EAGAIN on this branch. */
		if (ret == 0)
			xi_tel_peer_write(w->tel, xi_op_peer_of(op, i), nw.len);
		else if (ret == -EAGAIN)
			xi_tel_peer(w->tel, xi_op_peer_of(op, i), TP_RETRIES, 1);
	}
	if (ret) {
		xi_tx_wr_put(w, wr);
		return ret;
	}
	xi_op_posted(op);
	return 0;
}

/* A chunked write's immediate-carrying last chunks wait until every other
 * chunk completed: only then is all of the write's data at the target, on
 * any provider, ordered or not, so the immediate counts it exactly once
 * (posting in index order puts them last). */
static bool chunk_fence(const struct op *op, uint32_t i)
{
	uint32_t before = op->chunks > 1 ? op->shards * (op->chunks - 1) : 0;
	return before && (op->s.flags & XFER_F_IMM) && i >= before && op->done < before;
}

static int fabric_request(struct worker *w, struct op *op, uint32_t i, unsigned n)
{
	if (chunk_fence(op, i))
		return -EAGAIN;
	return post_request(w, op, i, n, true);
}

static int staged_request(struct worker *w, struct op *op, uint32_t i, unsigned n)
{
	return post_request(w, op, i, n, false);
}

/* ---------------------------------------------------------- posting loops */

/* Requests in index order, request i on NIC wr_nic(i). */
static int post_in_order(struct worker *w, struct op *op, request_fn req)
{
	while (op->posted < op->total) {
		uint32_t i = op->posted;
		int ret = req(w, op, i, wr_nic(w->e, op, i));
		if (ret == -EAGAIN)
			return -EAGAIN;
		if (ret < 0) {
			xi_request_failed(w, op, i, ret);
			if (!xi_op_multi_peer(op))
				break;
			/* One member's failure does not stop the others. */
			op->posted++;
			op->done++;
		}
	}
	return 0;
}

/* Pages of one paged write go round robin over the NICs, each NIC with its
 * own cursor, so that a NIC that is full (or whose provider says -EAGAIN)
 * does not hold back the others: the group then runs at the sum of its
 * links rather than at twice the slowest moment of either. */
static int post_lanes(struct worker *w, struct op *op, request_fn req)
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
			int ret = req(w, op, i, k);
			if (ret == -EAGAIN)
				continue;
			if (ret < 0) {
				xi_request_failed(w, op, i, ret);
				break;
			}
			op->lane_next[k] = i + nn;
			moved = true;
		}
	}
	return op->status == 0 && op->posted < op->total ? -EAGAIN : 0;
}

static int post_data(struct worker *w, struct op *op, request_fn req)
{
	if (op->s.kind == SUB_PAGED && w->e->nnics > 1 && !(op->s.flags & XFER_F_PIN))
		return post_lanes(w, op, req);
	return post_in_order(w, op, req);
}

/* --------------------------------------------------------------- settling */

static void settle_plain(struct worker *w, struct op *op)
{
	xi_op_try_finish(w, op);
}

static void sent_plain(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	uint32_t i = wr->slot;
	op->done++;
	xi_op_entry_status(op, i, status);
	xi_tx_wr_put(w, wr);
	if (status < 0)
		xi_request_failed(w, op, i, status);
	op->path->settle(w, op);
}

/* ----------------------------------------------------------------- fabric */

static int post_fabric(struct worker *w, struct op *op)
{
	return post_data(w, op, fabric_request);
}

static const struct op_path path_fabric = {"fabric", post_fabric, sent_plain, settle_plain};

/* ----------------------------------------------------------------- staged */

static int post_notices(struct worker *w, struct op *op)
{
	unsigned n = op->nic_base;
	while (op->posted < op->total) {
		int ret = xi_notice_post(w, op, op->posted - op->data_total, n);
		if (ret == -EAGAIN)
			return -EAGAIN;
		if (ret < 0) {
			xi_request_failed(w, op, op->posted, ret);
			break;
		}
		xi_op_posted(op);
	}
	return 0;
}

static int post_staged(struct worker *w, struct op *op)
{
	if (op->phase == OP_NOTICES)
		return post_notices(w, op);
	return post_data(w, op, staged_request);
}

/* Data in a peer's mirror has all landed: now the notices. */
static void settle_staged(struct worker *w, struct op *op)
{
	if (op->phase == OP_DATA && !op->queued && op->posted == op->total && op->done == op->posted &&
	    op->status == 0) {
		xi_notice_phase(w, op);
		return;
	}
	xi_op_try_finish(w, op);
}

static const struct op_path path_staged = {"staged", post_staged, sent_plain, settle_staged};

/* -------------------------------------------------------------------- ipc */

/* How a write reaches remote region r from here. */
static const struct op_path *rmr_path(const struct worker *w, const xfer_rmr_t *r)
{
	const xfer_engine_t *e = w->e;
	/* GPU to GPU on this host beats any NIC; native regions take it too. */
	if ((r->flags & WIRE_DESC_IPC) && e->gpu_ipc && r->host_id == e->host_id && !r->ipc_failed && w->gpu)
		return &path_ipc;
	return (r->flags & WIRE_DESC_STAGED) ? &path_staged : &path_fabric;
}

/* Begins a copy into r on device dev, opening r's IPC mapping once: 0,
 * -EAGAIN (copies ring full), -EIO with r->ipc_failed set (no IPC to r
 * after all), or -XFER_ENOGPU. */
static int ipc_begin(struct worker *w, xfer_rmr_t *r, int dev)
{
	int ret = xi_gpu_copy_begin(w->gpu, dev);
	if (ret || r->ipc_ptr)
		return ret;
	if (xi_gpu_ipc_open(w->gpu, dev, r->ipc, &r->ipc_ptr)) {
		r->ipc_failed = 1;
		xwarn("cannot open the peer's CUDA IPC handle; later writes go through host memory");
		return -EIO;
	}
	return 0;
}

/* len bytes at off of src (a GPU region, host memory, or nothing) to dst. */
static int copy_piece(struct worker *w, uint64_t dst, const xfer_mr_t *src, uint64_t off, uint64_t len)
{
	if (!len)
		return 0;
	if (src->gpu >= 0) /* by kernel or copy engine, as gpu_copy picks by size */
		return xi_gpu_copy_dtod(w->gpu, dst, (uint64_t)(uintptr_t)src->buf + off, len);
	return xi_gpu_copy_add(w->gpu, dst, 0, (const uint8_t *)src->buf + off, len);
}

static int copy_op(struct worker *w, const struct op *op, const xfer_rmr_t *r)
{
	const struct sub *s = &op->s;
	uint64_t base = r->ipc_ptr + r->ipc_offset;
	if (s->kind == SUB_WRITE)
		return copy_piece(w, base + s->u.write.dst_off, s->u.write.src, s->u.write.src_off, s->u.write.len);
	const struct xfer_paged_write *pw = &s->u.paged;
	if (pw->src->gpu >= 0) {
		/* GPU to GPU: one gather/scatter kernel for every page. */
		struct xi_gpu_pages pg = {
			.src_base = (uint64_t)(uintptr_t)pw->src->buf + pw->src_base,
			.src_stride = pw->src_stride,
			.dst_base = base + pw->dst_base,
			.dst_stride = pw->dst_stride,
			.page_len = pw->page_len,
			.src_pages = pw->src_pages,
			.dst_pages = pw->dst_pages,
			.npages = pw->npages,
		};
		return xi_gpu_copy_pages(w->gpu, &pg);
	}
	int ret = 0;
	for (uint32_t i = 0; i < pw->npages && !ret; i++) {
		uint64_t dst = base + pw->dst_base + (uint64_t)pw->dst_pages[i] * pw->dst_stride;
		uint64_t off = pw->src_base + (uint64_t)pw->src_pages[i] * pw->src_stride;
		ret = copy_piece(w, dst, pw->src, off, pw->page_len);
	}
	return ret;
}

/* The whole op as one tracked copy, its context reserved for the notice
 * that follows (core/notice.c). */
static int post_ipc(struct worker *w, struct op *op)
{
	const struct sub *s = &op->s;
	xfer_rmr_t *r = (xfer_rmr_t *)(s->kind == SUB_WRITE ? s->u.write.dst : s->u.paged.dst);
	xfer_mr_t *src = source_of(op);
	if (op->status)
		return 0;
	if (!xi_peer_live(&w->e->peers[s->peer])) {
		xi_op_fail(op, -XFER_EPEER);
		return 0;
	}
	struct wr *wr = xi_tx_wr(w, TX_DATA);
	if (!wr)
		return -EAGAIN;
	/* Trace: "first post" is the copy handed to the GPU engine, "last" the
	 * notice (core/notice.c), so a traced op shows launch, copy and notice. */
	if (op->s.t_call)
		op->t_first = xi_now_ns();
	int ret = ipc_begin(w, r, src && src->gpu >= 0 ? src->gpu : 0);
	if (!ret)
		ret = copy_op(w, op, r);
	if (!ret)
		ret = xi_gpu_copy_end(w->gpu, wr);
	if (ret) {
		xi_tx_wr_put(w, wr);
		if (ret == -EAGAIN)
			return -EAGAIN;
		if (r->ipc_failed) {
			/* No IPC after all: through the NICs (a mirror, or in place). */
			op->path = rmr_path(w, r);
			return op->path->post(w, op);
		}
		xi_op_fail(op, ret);
		return 0;
	}
	*wr = (struct wr){.op = op, .slot = 0, .nic = op->nic_base, .kind = WR_COPY, .sendbuf = UINT32_MAX};
	op->total = op->posted = 1;
	op->copies = 1;
	if (op->s.t_call)
		op->t_first_ret = op->t_last = xi_now_ns();
	uint64_t bytes = s->kind == SUB_WRITE ? s->u.write.len : (uint64_t)s->u.paged.npages * s->u.paged.page_len;
	xi_notice_ahead(w, op, bytes);
	/* One write to the peer, whatever the copy engine splits it into. */
	xi_tel_peer_write(w->tel, s->peer, bytes);
	return 0;
}

static const struct op_path path_ipc = {"ipc", post_ipc, sent_plain, settle_plain};

/* ------------------------------------------------------------ scatter-gpu */

/* Entry i through CUDA IPC: 0 issued (counted as posted; it takes no credit
 * and completes as a GPU event), 1 not possible after all (the handle would
 * not open: go by NIC), -EAGAIN, or the error that fails the entry. */
static int ipc_entry(struct worker *w, struct op *op, uint32_t i, unsigned n)
{
	const struct xfer_scatter_entry *en = &op->s.u.scatter.entries[i];
	xfer_rmr_t *r = (xfer_rmr_t *)en->dst;
	xfer_mr_t *src = op->s.u.scatter.src ? op->s.u.scatter.src : w->e->sink;
	if (!xi_peer_live(&w->e->peers[xi_op_peer_of(op, i)]))
		return -XFER_EPEER;
	/* Reserved now so that the notice never waits for a context. */
	struct wr *wr = xi_tx_wr(w, TX_DATA);
	if (!wr)
		return -EAGAIN;
	int ret = ipc_begin(w, r, src->gpu >= 0 ? src->gpu : 0);
	if (!ret)
		ret = copy_piece(w, r->ipc_ptr + r->ipc_offset + en->dst_off, src, en->src_off, en->len);
	if (!ret)
		ret = xi_gpu_copy_end(w->gpu, wr);
	if (ret) {
		xi_tx_wr_put(w, wr);
		return ret == -EIO && r->ipc_failed ? 1 : ret;
	}
	*wr = (struct wr){.op = op, .slot = i, .nic = (uint8_t)n, .kind = WR_COPY, .sendbuf = UINT32_MAX};
	op->copies++;
	xi_op_posted(op);
	xi_tel_peer_write(w->tel, xi_op_peer_of(op, i), en->len);
	return 0;
}

static int scatter_gpu_request(struct worker *w, struct op *op, uint32_t i, unsigned n)
{
	const xfer_rmr_t *dst = op->s.u.scatter.entries[i].dst;
	const struct op_path *p = rmr_path(w, dst);
	if (p == &path_ipc) {
		int ret = ipc_entry(w, op, i, n);
		if (ret != 1)
			return ret;
		p = rmr_path(w, dst);
	}
	/* Into a staged region the immediate rides on the entry's notice, and so
	 * it does from NICs whose writes cannot carry one. */
	return post_request(w, op, i, n, p != &path_staged && !w->e->nics[n].imm_by_msg);
}

static int post_scatter_gpu(struct worker *w, struct op *op)
{
	return post_in_order(w, op, scatter_gpu_request);
}

/* An entry written into a member's mirror: the context that carried it
 * becomes the entry's notice. */
static void sent_scatter_gpu(struct worker *w, struct wr *wr, int status)
{
	struct op *op = wr->op;
	uint32_t i = wr->slot;
	op->done++;
	xi_op_entry_status(op, i, status);
	bool staged = op->s.u.scatter.entries[i].dst->flags & WIRE_DESC_STAGED;
	if (status == 0 && (staged || w->e->nics[wr->nic].imm_by_msg))
		xi_notice_landed(w, wr, staged);
	else
		xi_tx_wr_put(w, wr);
	if (status < 0)
		xi_request_failed(w, op, i, status);
	xi_op_try_finish(w, op);
}

static const struct op_path path_scatter_gpu = {"scatter-gpu", post_scatter_gpu, sent_scatter_gpu,
						settle_plain};

/* ----------------------------------------------------------------- accept */

uint64_t xi_min_max_msg(const xfer_engine_t *e)
{
	uint64_t max = UINT64_MAX;
	for (unsigned n = 0; n < e->nnics; n++)
		if (e->nics[n].max_msg && e->nics[n].max_msg < max)
			max = e->nics[n].max_msg;
	return max;
}

bool xi_write_chunks_ok(const xfer_engine_t *e, uint64_t len)
{
	return len / xi_min_max_msg(e) < (1u << 20);
}

/* Splits each shard of a write into pieces no NIC refuses as too long
 * (submission bounded their number: xi_write_chunks_ok). */
static void write_chunks(const xfer_engine_t *e, struct op *op)
{
	uint64_t max = xi_min_max_msg(e), k = op->shards, len = op->s.u.write.len;
	uint64_t shard = len / k + (len % k != 0);
	op->chunks = 1;
	op->chunk_len = shard;
	if (shard > max) {
		op->chunks = (uint32_t)(shard / max + (shard % max != 0));
		op->chunk_len = max;
	}
}

/* The engine's NICs (one provider, bring-up checks) cannot carry an
 * immediate on a write, and s has one: its writes go without it and a
 * notice counts it once they all completed locally, as into a mirror. */
static bool imm_by_notice(const struct worker *w, const struct sub *s)
{
	return w->e->nics[0].imm_by_msg && (s->flags & XFER_F_IMM);
}

static const struct op_path *in_place(const struct worker *w, const struct sub *s, const struct op_path *p)
{
	return p == &path_fabric && imm_by_notice(w, s) ? &path_staged : p;
}

static const struct op_path *choose(const struct worker *w, const struct sub *s)
{
	switch (s->kind) {
	case SUB_WRITE:
		return in_place(w, s, rmr_path(w, s->u.write.dst));
	case SUB_PAGED:
		return in_place(w, s, rmr_path(w, s->u.paged.dst));
	case SUB_SCATTER:
		return (s->u.scatter.dst_flags & (WIRE_DESC_STAGED | WIRE_DESC_IPC)) || imm_by_notice(w, s)
			       ? &path_scatter_gpu
			       : &path_fabric;
	default:
		return &path_fabric;
	}
}

void xi_path_accept(struct worker *w, const struct sub *s)
{
	const xfer_engine_t *e = w->e;
	struct op *op = xi_op_start(w, s);
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
		if (s->flags & XFER_F_SHARD) {
			/* k = min(L, R) shards: more pieces than remote NICs add nothing. */
			unsigned r = e->peers[s->peer].nnics;
			op->shards = (uint8_t)(r < e->nnics ? r : e->nnics);
			if (!op->shards)
				op->shards = 1; /* a referenced peer has NICs; never divide by 0 */
		}
		write_chunks(e, op);
		op->total = op->shards * op->chunks;
		break;
	default:
		break;
	}
	const xfer_mr_t *src = source_of(op);
	op->src_mirror = src && src->gpu >= 0 && src->reg_buf;
	op->path = choose(w, s);
	/* A staged write of no bytes has nothing to land: its notice alone. */
	if (op->path == &path_staged && s->kind == SUB_WRITE && !s->u.write.len)
		xi_notice_phase(w, op);
	else
		xi_op_enqueue(w, op);
}

/* Ops behind a FIFO head that waits whose source staging may start now. */
#define STAGE_AHEAD 32

/* Whether op stages at most max bytes (stage_pieces copies them). */
static bool stages_at_most(const struct op *op, uint64_t max)
{
	const struct sub *s = &op->s;
	switch (s->kind) {
	case SUB_WRITE:
		return s->u.write.len <= max;
	case SUB_PAGED:
		return s->u.paged.page_len == 0 || s->u.paged.npages <= max / s->u.paged.page_len;
	case SUB_SCATTER: {
		uint64_t left = max;
		for (uint32_t i = 0; i < s->u.scatter.n; i++) {
			if (s->u.scatter.entries[i].len > left)
				return false;
			left -= s->u.scatter.entries[i].len;
		}
		return true;
	}
	default:
		return true;
	}
}

/* The head waits (for its source's staging copy, credit, ...): the staging
 * copies of the ops behind it that stage at most xi_gpu_stage_ahead() bytes
 * start now, so that their copies overlap (and share a launch,
 * XFER_GPU_STAGE=kernel) instead of each op's copy starting only once the
 * op before it has left the FIFO. Their requests still go in FIFO order.
 * Restaging bytes an op before it still sends is harmless: a source may not
 * change until its write completes, so the bytes are the same.
 * By default (XFER_GPU_STAGE_AHEAD=next; not with =small) the op right
 * behind the head stages too, whatever its size (only one: a big op's copy
 * then overlaps the transfer before it without a queue of big copies
 * competing with it). */
static void stage_ahead(struct worker *w, struct op *head)
{
	const uint64_t max = xi_gpu_stage_ahead(w->gpu);
	const bool next = xi_gpu_stage_next(w->gpu);
	if (!max && !next)
		return;
	int k = 0;
	for (struct op *op = head->next_post; op && k < STAGE_AHEAD; op = op->next_post, k++) {
		if (!op->src_mirror || op->src_staged || op->src_staging || op->src_stage_failed ||
		    (!stages_at_most(op, max) && !(next && k == 0)))
			continue;
		if (stage_source(w, op) == -EAGAIN && !op->src_staging)
			break; /* no wr or the copies ring is full: later */
	}
}

int xi_path_post_pending(struct worker *w)
{
	int n = 0;
	for (struct op *op; (op = xi_op_fifo_head(w));) {
		/* By default (XFER_GPU_STAGE_AHEAD=next) the next op's staging
		 * copy starts before this one's requests go, so that it runs
		 * while the transport takes them (on xfer's shm the post itself
		 * copies). */
		if (op->src_mirror && op->src_staged && xi_gpu_stage_next(w->gpu))
			stage_ahead(w, op);
		if (op->path->post(w, op) == -EAGAIN) {
			stage_ahead(w, op);
			break;
		}
		xi_op_fifo_pop(w);
		op->path->settle(w, op);
		n++;
	}
	/* Same-host GPU copies posted above wait in one kernel batch: launch
	 * it now, once for all of them. */
	xi_gpu_flush(w->gpu);
	return n;
}

void xi_path_sent(struct worker *w, struct wr *wr, int status)
{
	wr->op->path->sent(w, wr, status);
}
