/* The worker's GPU copy engine (gpu_copy.h). Two kinds of copies:
 *  - staging copies between a GPU region and its pinned host mirror, for
 *    NICs that cannot reach device memory. They block the worker, but only
 *    for their own bytes: the application must have finished writing a
 *    source before it submits (as with any RDMA library), and nothing here
 *    waits for its streams;
 *  - tracked copies between GPUs of one host (through a peer's CUDA IPC
 *    mapping, NVLink where present) or host to GPU, issued on a stream and
 *    followed by an event; xi_gpu_poll reports each as it finishes, in order.
 * Every copy goes on this engine's own non-blocking stream of its device:
 * a synchronous cuMemcpy would use the legacy default stream, where PyTorch
 * and most applications queue their kernels, and so would wait for every
 * kernel queued so far (a whole prefill) before copying. */
#include "gpu/gpu_copy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_api.h"
#include "util/log.h"
#include "xfer.h"

struct gpu_wait {
	void *ctx;
	CUevent event;
};

struct xi_gpu {
	const struct cuda_api *c;
	int cur_dev; /* device whose context is current on this thread, -1 none */
	CUstream stream[XI_GPU_DEVS];
	CUevent events[XI_GPU_DEVS][XI_GPU_RING];
	/* Copies in flight, oldest first, each with its event. */
	struct gpu_wait ring[XI_GPU_RING];
	uint32_t head, count;
	/* The copy being built between begin and end. */
	int dev;
	size_t nbatch;
	bool batch_off; /* the driver refused a batch: one call per piece from now on */
	CUdeviceptr batch_dst[XI_GPU_BATCH], batch_src[XI_GPU_BATCH];
	size_t batch_len[XI_GPU_BATCH];
};

struct xi_gpu *xi_gpu_create(void)
{
	const struct cuda_api *c = xi_cuda_get();
	if (!c)
		return NULL;
	struct xi_gpu *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->c = c;
	g->cur_dev = -1;
	g->dev = -1;
	return g;
}

static int use_dev(struct xi_gpu *g, int dev)
{
	if (g->cur_dev == dev)
		return 0;
	int ret = xi_cuda_use_device(dev);
	if (!ret)
		g->cur_dev = dev;
	return ret;
}

/* This engine's stream on dev, with dev's context made current. */
static CUstream stream_of(struct xi_gpu *g, int dev)
{
	if (dev < 0 || dev >= XI_GPU_DEVS || use_dev(g, dev))
		return NULL;
	if (!g->stream[dev] && g->c->cuStreamCreate(&g->stream[dev], CU_STREAM_NON_BLOCKING))
		return NULL;
	return g->stream[dev];
}

void xi_gpu_destroy(struct xi_gpu *g)
{
	if (!g)
		return;
	for (int dev = 0; dev < XI_GPU_DEVS; dev++) {
		if (!g->stream[dev] || use_dev(g, dev))
			continue;
		for (uint32_t i = 0; i < XI_GPU_RING; i++)
			if (g->events[dev][i])
				g->c->cuEventDestroy(g->events[dev][i]);
		g->c->cuStreamDestroy(g->stream[dev]);
	}
	free(g);
}

/* ---------------------------------------------------------------- staging */

int xi_gpu_stage_dtoh(struct xi_gpu *g, int dev, void *dst, uint64_t src, size_t len)
{
	CUstream st = stream_of(g, dev);
	if (!st)
		return -XFER_ENOGPU;
	return len && g->c->cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, len, st) ? -EIO : 0;
}

int xi_gpu_stage_htod(struct xi_gpu *g, int dev, uint64_t dst, const void *src, size_t len)
{
	CUstream st = stream_of(g, dev);
	if (!st)
		return -XFER_ENOGPU;
	return len && g->c->cuMemcpyHtoDAsync((CUdeviceptr)dst, src, len, st) ? -EIO : 0;
}

int xi_gpu_stage_wait(struct xi_gpu *g, int dev)
{
	CUstream st = stream_of(g, dev);
	if (!st)
		return -XFER_ENOGPU;
	return g->c->cuStreamSynchronize(st) ? -EIO : 0;
}

/* -------------------------------------------------------------------- IPC */

int xi_gpu_ipc_open(struct xi_gpu *g, int dev, const uint8_t *handle, uint64_t *ptr)
{
	/* Any device's context can open the handle; the caller prefers the
	 * source's. */
	if (!stream_of(g, dev))
		return -XFER_ENOGPU;
	CUipcMemHandle h;
	memcpy(&h, handle, sizeof(h));
	CUdeviceptr opened = 0;
	if (g->c->cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return -EIO;
	*ptr = opened;
	return 0;
}

void xi_gpu_ipc_close(uint64_t ptr)
{
	const struct cuda_api *c = ptr ? xi_cuda_get() : NULL;
	if (c)
		c->cuIpcCloseMemHandle((CUdeviceptr)ptr);
}

/* --------------------------------------------------------- tracked copies */

int xi_gpu_copy_begin(struct xi_gpu *g, int dev)
{
	if (dev < 0 || dev >= XI_GPU_DEVS)
		return -XFER_ENOGPU;
	if (g->count == XI_GPU_RING)
		return -EAGAIN;
	if (!stream_of(g, dev))
		return -XFER_ENOGPU;
	uint32_t slot = (g->head + g->count) % XI_GPU_RING;
	CUevent *ev = &g->events[dev][slot];
	if (!*ev && g->c->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING))
		return -XFER_ENOGPU;
	g->dev = dev;
	g->nbatch = 0;
	return 0;
}

int xi_gpu_copy_add(struct xi_gpu *g, uint64_t dst, uint64_t src, const void *src_host, size_t len)
{
	CUstream st = g->stream[g->dev];
	if (!len)
		return 0;
	if (src_host)
		return g->c->cuMemcpyHtoDAsync((CUdeviceptr)dst, src_host, len, st) ? -EIO : 0;
	return g->c->cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, len, st) ? -EIO : 0;
}

/* Hands the pieces gathered so far to the driver in one call. Copies are
 * idempotent: a refused batch is redone piece by piece. */
static int flush_batch(struct xi_gpu *g)
{
	size_t n = g->nbatch, first = 0;
	g->nbatch = 0;
	if (!n)
		return 0;
	CUmemcpyAttributes attr = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
	if (!g->batch_off && !g->c->cuMemcpyBatchAsync(g->batch_dst, g->batch_src, g->batch_len, n, &attr,
						       &first, 1, g->stream[g->dev]))
		return 0;
	if (!g->batch_off)
		xwarn("the driver refused a batched copy; same-host paged writes copy page by page");
	g->batch_off = true;
	int ret = 0;
	for (size_t i = 0; i < n && !ret; i++)
		ret = xi_gpu_copy_add(g, g->batch_dst[i], g->batch_src[i], NULL, g->batch_len[i]);
	return ret;
}

int xi_gpu_copy_add_batched(struct xi_gpu *g, uint64_t dst, uint64_t src, size_t len)
{
	if (!len)
		return 0;
	if (!g->c->cuMemcpyBatchAsync || g->batch_off)
		return xi_gpu_copy_add(g, dst, src, NULL, len);
	g->batch_dst[g->nbatch] = (CUdeviceptr)dst;
	g->batch_src[g->nbatch] = (CUdeviceptr)src;
	g->batch_len[g->nbatch] = len;
	return ++g->nbatch == XI_GPU_BATCH ? flush_batch(g) : 0;
}

int xi_gpu_copy_end(struct xi_gpu *g, void *ctx)
{
	int ret = flush_batch(g);
	if (ret)
		return ret;
	uint32_t slot = (g->head + g->count) % XI_GPU_RING;
	CUevent ev = g->events[g->dev][slot];
	/* Whatever the caller sends after the copy must wait for this event. */
	if (g->c->cuEventRecord(ev, g->stream[g->dev]))
		return -EIO;
	g->ring[slot] = (struct gpu_wait){.ctx = ctx, .event = ev};
	g->count++;
	return 0;
}

int xi_gpu_poll(struct xi_gpu *g, struct xi_gpu_event *ev, int max)
{
	int n = 0;
	while (n < max && g->count) {
		struct gpu_wait *wt = &g->ring[g->head];
		CUresult r = g->c->cuEventQuery(wt->event);
		if (r == CUDA_ERROR_NOT_READY)
			break;
		ev[n++] = (struct xi_gpu_event){.ctx = wt->ctx, .status = r ? -EIO : 0};
		g->head = (g->head + 1) % XI_GPU_RING;
		g->count--;
	}
	return n;
}

uint32_t xi_gpu_pending(const struct xi_gpu *g)
{
	return g ? g->count : 0;
}

void xi_gpu_forget(struct xi_gpu *g)
{
	if (g)
		g->count = 0;
}
