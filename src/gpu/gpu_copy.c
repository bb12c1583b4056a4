/* GPU regions on the worker. Where the NICs register device memory in place
 * (FI_HMEM, gpu_mr.c) requests read and write GPU memory directly and none of
 * this applies. Otherwise:
 *  - a GPU source is copied to its pinned host mirror just before a request
 *    is posted from it;
 *  - a write into a peer's GPU region lands in the peer's host mirror without
 *    its immediate, and once it has landed a NOTICE message tells the peer
 *    which ranges to copy to the GPU and how many immediates to count, so an
 *    immediate never runs ahead of the data in GPU memory;
 *  - between GPUs of one host, the worker copies GPU to GPU through the
 *    peer's CUDA IPC mapping (NVLink where present) and sends a NOTICE with
 *    the count alone.
 * Staging copies block the worker; same-host copies run on a stream, and the
 * op waits (parked, with an event) until they are done before its notice.
 * Scatter entries get a notice each (gpu_scatter.c); this file holds what
 * both share. */
#include <errno.h>
#include <string.h>

#include "gpu/cuda_api.h"
#include "util/log.h"
#include "core/worker.h"

xfer_mr_t *mr_find(xfer_engine_t *e, uint64_t id);

static int use_dev(struct worker *w, int dev)
{
	if (w->cuda_dev == dev)
		return 0;
	int ret = cuda_use_device(dev);
	if (!ret)
		w->cuda_dev = dev;
	return ret;
}

/* The worker's own stream on `dev`, made current. It is non-blocking: a
 * synchronous cuMemcpy would go on the legacy default stream, which is
 * where PyTorch and most applications queue their kernels, and so would
 * wait for every kernel queued so far (a whole prefill) before copying. */
static CUstream worker_stream(struct worker *w, int dev)
{
	const struct cuda_api *c = cuda_get();
	if (!c || dev < 0 || dev >= GPU_DEVS || use_dev(w, dev))
		return NULL;
	if (!w->gpu_stream[dev] && c->cuStreamCreate((CUstream *)&w->gpu_stream[dev], CU_STREAM_NON_BLOCKING))
		return NULL;
	return w->gpu_stream[dev];
}

/* Staging copies still block the worker, but only for their own bytes. The
 * application must have finished writing a source before it submits (as
 * with any RDMA library); nothing here waits for its streams. */
int gpu_stage_src(struct worker *w, xfer_mr_t *src, uint64_t off, uint64_t len)
{
	const struct cuda_api *c = cuda_get();
	if (!len || src->gpu < 0 || !src->reg_buf)
		return 0; /* host memory, or GPU memory the NICs read in place */
	CUstream st = worker_stream(w, src->gpu);
	if (!st)
		return -XFER_ENOGPU;
	CUdeviceptr from = (CUdeviceptr)(uintptr_t)src->buf + off;
	if (c->cuMemcpyDtoHAsync((uint8_t *)src->reg_buf + off, from, len, st) || c->cuStreamSynchronize(st))
		return -EIO;
	return 0;
}

int gpu_stage_pages(struct worker *w, const struct xfer_paged_write *pw)
{
	const struct cuda_api *c = cuda_get();
	xfer_mr_t *src = pw->src;
	if (!pw->page_len || src->gpu < 0 || !src->reg_buf)
		return 0;
	CUstream st = worker_stream(w, src->gpu);
	if (!st)
		return -XFER_ENOGPU;
	/* One synchronization for the whole call, not one per page. Bounds
	 * were proven at submission. */
	for (uint32_t i = 0; i < pw->npages; i++) {
		uint64_t off = pw->src_base + (uint64_t)pw->src_pages[i] * pw->src_stride;
		if (c->cuMemcpyDtoHAsync((uint8_t *)src->reg_buf + off, (CUdeviceptr)(uintptr_t)src->buf + off,
					 pw->page_len, st))
			return -EIO;
	}
	return c->cuStreamSynchronize(st) ? -EIO : 0;
}

enum op_path gpu_rmr_path(const xfer_engine_t *e, const xfer_rmr_t *r)
{
	/* GPU to GPU on this host beats any NIC; native regions take it too. */
	if ((r->flags & WIRE_DESC_IPC) && e->gpu_ipc && r->host_id == e->host_id && !r->ipc_failed &&
	    cuda_get())
		return PATH_IPC;
	return (r->flags & WIRE_DESC_STAGED) ? PATH_STAGED : PATH_FABRIC;
}

enum op_path gpu_classify(const xfer_engine_t *e, const struct sub *s)
{
	const xfer_rmr_t *r = s->kind == SUB_WRITE ? s->u.write.dst
			      : s->kind == SUB_PAGED ? s->u.paged.dst
						     : NULL;
	return r ? gpu_rmr_path(e, r) : PATH_FABRIC;
}

int gpu_copy_to(struct worker *w, void *stream, uint64_t dst, xfer_mr_t *src, uint64_t src_off,
		uint64_t len)
{
	const struct cuda_api *c = cuda_get();
	CUstream st = stream;
	if (!len)
		return 0;
	if (src && src->gpu >= 0)
		return c->cuMemcpyDtoDAsync(dst, (CUdeviceptr)(uintptr_t)src->buf + src_off, len, st) ? -EIO
														 : 0;
	const void *from = src ? (const uint8_t *)src->buf + src_off : w->e->sink->buf;
	return c->cuMemcpyHtoDAsync(dst, from, len, st) ? -EIO : 0;
}

int gpu_ipc_begin(struct worker *w, xfer_rmr_t *r, int dev, void **stream)
{
	const struct cuda_api *c = cuda_get();
	if (!c || dev < 0 || dev >= GPU_DEVS)
		return -XFER_ENOGPU;
	if (w->gpu_count == GPU_RING)
		return -EAGAIN;
	/* Any device's context can open the handle; the caller prefers the
	 * source's. worker_stream makes it current. */
	if (!worker_stream(w, dev))
		return -XFER_ENOGPU;
	uint32_t slot = (w->gpu_head + w->gpu_count) % GPU_RING;
	void **ev = &w->gpu_events[dev][slot];
	if (!*ev && c->cuEventCreate((CUevent *)ev, CU_EVENT_DISABLE_TIMING))
		return -XFER_ENOGPU;
	if (!r->ipc_ptr) {
		CUipcMemHandle h;
		memcpy(&h, r->ipc, sizeof(h));
		CUdeviceptr opened = 0;
		if (c->cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) {
			r->ipc_failed = 1;
			xwarn("cannot open the peer's CUDA IPC handle; later writes go through host memory");
			return -EIO;
		}
		r->ipc_ptr = opened;
	}
	*stream = w->gpu_stream[dev];
	return 0;
}

void gpu_release(struct worker *w)
{
	const struct cuda_api *c = cuda_get();
	for (int dev = 0; c && dev < GPU_DEVS; dev++) {
		if (!w->gpu_stream[dev] || use_dev(w, dev))
			continue;
		for (uint32_t i = 0; i < GPU_RING; i++)
			if (w->gpu_events[dev][i])
				c->cuEventDestroy((CUevent)w->gpu_events[dev][i]);
		c->cuStreamDestroy((CUstream)w->gpu_stream[dev]);
		w->gpu_stream[dev] = NULL;
	}
}

int gpu_ipc_park(struct worker *w, int dev, struct op *op, struct wr *wr)
{
	const struct cuda_api *c = cuda_get();
	uint32_t slot = (w->gpu_head + w->gpu_count) % GPU_RING;
	void *ev = w->gpu_events[dev][slot];
	/* The notice must not overtake the bytes: it waits for this event. */
	if (c->cuEventRecord((CUevent)ev, (CUstream)w->gpu_stream[dev]))
		return -EIO;
	w->gpu_ring[slot] = (struct gpu_wait){.op = op, .event = ev, .wr = wr};
	w->gpu_count++;
	return 0;
}

static int copy_pages_one_by_one(struct worker *w, void *st, CUdeviceptr base, xfer_mr_t *src,
				 const struct xfer_paged_write *pw, uint32_t from, uint32_t to)
{
	int ret = 0;
	for (uint32_t i = from; i < to && !ret; i++)
		ret = gpu_copy_to(w, st, base + pw->dst_base + (uint64_t)pw->dst_pages[i] * pw->dst_stride, src,
				  pw->src_base + (uint64_t)pw->src_pages[i] * pw->src_stride, pw->page_len);
	return ret;
}

/* One driver call per page costs about 1.2 us of this thread's time, which
 * caps 16 KiB pages near 6 GB/s however fast NVLink is; a batch hands up to
 * GPU_BATCH pages over at once. Bounds were proven at submission. */
static int copy_pages(struct worker *w, void *st, CUdeviceptr base, xfer_mr_t *src,
		      const struct xfer_paged_write *pw)
{
	const struct cuda_api *c = cuda_get();
	if (!c->cuMemcpyBatchAsync || w->gpu_batch_off || !src || src->gpu < 0 || !pw->page_len)
		return copy_pages_one_by_one(w, st, base, src, pw, 0, pw->npages);
	CUmemcpyAttributes attr = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
	size_t first = 0;
	for (uint32_t i = 0; i < pw->npages;) {
		uint32_t start = i;
		size_t n = 0;
		for (; n < GPU_BATCH && i < pw->npages; n++, i++) {
			w->gpu_batch_dst[n] = base + pw->dst_base + (uint64_t)pw->dst_pages[i] * pw->dst_stride;
			w->gpu_batch_src[n] = (CUdeviceptr)(uintptr_t)src->buf + pw->src_base +
					      (uint64_t)pw->src_pages[i] * pw->src_stride;
			w->gpu_batch_len[n] = pw->page_len;
		}
		if (c->cuMemcpyBatchAsync(w->gpu_batch_dst, w->gpu_batch_src, w->gpu_batch_len, n, &attr, &first, 1,
					  (CUstream)st)) {
			/* Copies are idempotent: redo this batch, and the rest, page by page. */
			xwarn("the driver refused a batched copy; same-host paged writes copy page by page");
			w->gpu_batch_off = true;
			return copy_pages_one_by_one(w, st, base, src, pw, start, pw->npages);
		}
	}
	return 0;
}

int gpu_ipc_issue(struct worker *w, struct op *op)
{
	const struct sub *s = &op->s;
	xfer_rmr_t *r = (xfer_rmr_t *)(s->kind == SUB_WRITE ? s->u.write.dst : s->u.paged.dst);
	xfer_mr_t *src = s->kind == SUB_WRITE ? s->u.write.src : s->u.paged.src;
	int dev = src && src->gpu >= 0 ? src->gpu : 0;
	void *st;
	int ret = gpu_ipc_begin(w, r, dev, &st);
	if (ret)
		return ret;
	CUdeviceptr base = r->ipc_ptr + r->ipc_offset;
	if (s->kind == SUB_WRITE) {
		ret = gpu_copy_to(w, st, base + s->u.write.dst_off, src, s->u.write.src_off, s->u.write.len);
	} else {
		ret = copy_pages(w, st, base, src, &s->u.paged);
	}
	if (ret || (ret = gpu_ipc_park(w, dev, op, NULL)))
		return ret;
	op->phase = 2;
	return 1;
}

int gpu_poll(struct worker *w)
{
	const struct cuda_api *c = cuda_get();
	int n = 0;
	while (w->gpu_count) {
		struct gpu_wait *g = &w->gpu_ring[w->gpu_head];
		CUresult r = c->cuEventQuery((CUevent)g->event);
		if (r == CUDA_ERROR_NOT_READY)
			break;
		struct op *op = g->op;
		struct wr *wr = g->wr;
		w->gpu_head = (w->gpu_head + 1) % GPU_RING;
		w->gpu_count--;
		n++;
		if (wr) {
			gpu_entry_copied(w, wr, r != 0 ? -EIO : 0);
			continue;
		}
		op->phase = 1;
		op->data_total = op->posted;
		if (r != 0 || op->status != 0) {
			/* Failed, or cancelled or expired meanwhile: no notice, so no
			 * immediate is counted for bytes the caller gave up on. */
			op_fail(op, r != 0 ? -EIO : op->status);
			op_maybe_finish(w, op);
		} else {
			op->total = op->posted + gpu_notice_count(w->e, op);
			op_enqueue(w, op);
		}
	}
	return n;
}

static uint32_t ranges_per_notice(const xfer_engine_t *e, const struct op *op)
{
	uint32_t room = e->peers[op->s.peer].msg_max;
	if (room > e->attr.msg_max)
		room = e->attr.msg_max;
	return room > NOTICE_HDR + 16 ? (room - NOTICE_HDR) / 16 : 1;
}

uint32_t gpu_notice_count(const xfer_engine_t *e, const struct op *op)
{
	if (op->path == PATH_IPC || op->s.kind == SUB_WRITE)
		return 1;
	uint32_t per = ranges_per_notice(e, op);
	return (op->s.u.paged.npages + per - 1) / per;
}

void gpu_notice_frame(const xfer_engine_t *e, uint8_t *buf, size_t body)
{
	uint32_t hdr[4] = {MSG_MAGIC_NOTICE, (uint32_t)body, (uint32_t)e->id, (uint32_t)(e->id >> 32)};
	memcpy(buf, hdr, MSG_HDR_BYTES);
}

/* Builds notice k of op into buf (after the message header); returns its
 * body length. */
size_t gpu_notice_build(const xfer_engine_t *e, const struct op *op, uint32_t k, uint8_t *buf)
{
	const struct sub *s = &op->s;
	const xfer_rmr_t *r = s->kind == SUB_WRITE ? s->u.write.dst : s->u.paged.dst;
	uint32_t first = 0, n = 0, count;
	bool ranges = op->path == PATH_STAGED;
	if (s->kind == SUB_WRITE) {
		count = op->shards;
		n = ranges ? 1 : 0;
	} else if (!ranges) {
		count = s->u.paged.npages;
	} else {
		uint32_t per = ranges_per_notice(e, op);
		first = k * per;
		n = s->u.paged.npages - first < per ? s->u.paged.npages - first : per;
		count = n;
	}
	uint64_t id = r->region_id;
	uint32_t head[4] = {s->imm, (s->flags & XFER_F_IMM) ? count : 0, n, 0};
	memcpy(buf, &id, 8);
	memcpy(buf + 8, head, 16);
	uint8_t *p = buf + NOTICE_HDR;
	for (uint32_t i = 0; i < n; i++, p += 16) {
		uint64_t off, len;
		if (s->kind == SUB_WRITE) {
			off = s->u.write.dst_off;
			len = s->u.write.len;
		} else {
			const struct xfer_paged_write *pw = &s->u.paged;
			off = pw->dst_base + (uint64_t)pw->dst_pages[first + i] * pw->dst_stride;
			len = pw->page_len;
		}
		memcpy(p, &off, 8);
		memcpy(p + 8, &len, 8);
	}
	return NOTICE_HDR + (size_t)n * 16;
}

/* A peer says data landed in our mirror (or was copied to our GPU): make it
 * visible on the GPU, then count the immediates. Untrusted input: a notice
 * that names no GPU region of ours or a range outside it is dropped whole. */
void gpu_notice_received(struct worker *w, const uint8_t *body, size_t len)
{
	xfer_engine_t *e = w->e;
	uint64_t id;
	uint32_t head[4];
	if (len < NOTICE_HDR)
		return;
	memcpy(&id, body, 8);
	memcpy(head, body + 8, 16);
	uint32_t imm = head[0], count = head[1], n = head[2];
	if ((size_t)n > (len - NOTICE_HDR) / 16 || NOTICE_HDR + (size_t)n * 16 != len) {
		xwarn("dropping a malformed notice");
		return;
	}
	if (n) {
		xfer_mr_t *mr = mr_find(e, id);
		const struct cuda_api *c = cuda_get();
		/* Ranges name mirror bytes: a region written in place has none. */
		CUstream st = mr && mr->gpu >= 0 && mr->reg_buf && mr->registered ? worker_stream(w, mr->gpu) : NULL;
		if (!st) {
			xwarn("dropping a notice for region %llu: not a live GPU region here",
			      (unsigned long long)id);
			return;
		}
		const uint8_t *p = body + NOTICE_HDR;
		for (uint32_t i = 0; i < n; i++, p += 16) {
			uint64_t off, l;
			memcpy(&off, p, 8);
			memcpy(&l, p + 8, 8);
			if (off > mr->len || l > mr->len - off) {
				xwarn("dropping a notice with a range outside region %llu", (unsigned long long)id);
				return;
			}
		}
		p = body + NOTICE_HDR;
		for (uint32_t i = 0; i < n; i++, p += 16) {
			uint64_t off, l;
			memcpy(&off, p, 8);
			memcpy(&l, p + 8, 8);
			if (l && c->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)mr->buf + off,
						      (const uint8_t *)mr->reg_buf + off, l, st)) {
				xerr("copy to GPU failed; immediates of this notice withheld");
				return;
			}
		}
		if (c->cuStreamSynchronize(st)) {
			xerr("copy to GPU failed; immediates of this notice withheld");
			return;
		}
	}
	for (uint32_t i = 0; i < count; i++)
		imm_arrived(w, imm);
}
