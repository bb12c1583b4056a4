/* GPU regions at registration. Where every NIC of the engine registers
 * device memory in place (the provider has FI_HMEM), the region is handed to
 * the NICs as it is, through a dma-buf when the driver exports one, and
 * peers write straight into GPU memory. Otherwise a pinned host mirror
 * carries its bytes (the staged path: core/path.c, core/notice.c). Either way a CUDA IPC
 * handle lets peers on this host copy GPU to GPU.
 *
 * One choice per region, not per NIC: the descriptor has one set of flags,
 * so an engine whose NICs disagree stages. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "api/mr_gpu.h"
#include "gpu/cuda_api.h"
#include "util/log.h"

static bool native_usable(const xfer_engine_t *e)
{
	if (!e->gpu_native || !e->nnics)
		return false;
	for (unsigned n = 0; n < e->nnics; n++)
		if (!atomic_load(&e->nics[n].gpu_native))
			return false;
	return true;
}

static void take_ipc(const struct cuda_api *c, xfer_mr_t *mr)
{
	CUdeviceptr base = 0;
	size_t size = 0;
	CUipcMemHandle h;
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)mr->buf;
	if (!c->cuMemGetAddressRange(&base, &size, p) && !c->cuIpcGetMemHandle(&h, base)) {
		memcpy(mr->ipc, &h, sizeof(mr->ipc));
		mr->ipc_offset = p - base;
		mr->has_ipc = true;
	}
}

/* A dma-buf of the pages holding the region, when every NIC can take one
 * and the driver exports them; registration falls back to the address. */
static void export_dmabuf(const xfer_engine_t *e, const struct cuda_api *c, xfer_mr_t *mr)
{
	for (unsigned n = 0; n < e->nnics; n++)
		if (!e->nics[n].dmabuf)
			return;
	if (!c->cuDeviceGetAttribute || !c->cuMemGetHandleForAddressRange)
		return;
	CUdevice d;
	int ok = 0;
	if (c->cuDeviceGet(&d, mr->gpu) ||
	    c->cuDeviceGetAttribute(&ok, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, d) || !ok)
		return;
	/* The driver exports whole host pages. */
	long ps = sysconf(_SC_PAGESIZE);
	uint64_t page = ps > 0 ? (uint64_t)ps : 4096, p = (uintptr_t)mr->buf, end;
	if (__builtin_add_overflow(p, (uint64_t)mr->len, &end) ||
	    __builtin_add_overflow(end, page - 1, &end))
		return;
	uint64_t start = p & ~(page - 1);
	end &= ~(page - 1);
	int fd = -1;
	if (c->cuMemGetHandleForAddressRange(&fd, (CUdeviceptr)start, (size_t)(end - start),
					     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) ||
	    fd < 0) {
		xdbg("no dma-buf for GPU region at %p; registering by address", mr->buf);
		return;
	}
	mr->mem.dmabuf_fd = fd;
	mr->mem.dmabuf_offset = p - start;
	mr->mem.dmabuf_base = (void *)(uintptr_t)start;
}

static int alloc_mirror(const struct cuda_api *c, xfer_mr_t *mr)
{
	if (c->cuMemHostAlloc(&mr->reg_buf, mr->len, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)) {
		mr->reg_buf = NULL;
		return -ENOMEM;
	}
	return 0;
}

int xi_gpu_mr_prepare(xfer_engine_t *e, xfer_mr_t *mr, int dev)
{
	const struct cuda_api *c = xi_cuda_get();
	mr->mem = (struct nic_mem){.cuda_dev = dev, .dmabuf_fd = -1};
	if (!c || xi_cuda_use_device(dev))
		return -XFER_ENOGPU;
	mr->gpu = dev;
	take_ipc(c, mr);
	if (native_usable(e)) {
		mr->native = true;
		export_dmabuf(e, c, mr);
		return 0;
	}
	return alloc_mirror(c, mr);
}

int xi_gpu_mr_fall_back(xfer_engine_t *e, xfer_mr_t *mr)
{
	const struct cuda_api *c = xi_cuda_get();
	/* A provider that says FI_HMEM but was built without CUDA (Debian's
	 * libfabric) refuses every such registration: stop asking it. */
	bool never = mr->native_err == -ENOSYS || mr->native_err == -EOPNOTSUPP;
	if (never)
		for (unsigned n = 0; n < e->nnics; n++)
			atomic_store(&e->nics[n].gpu_native, false);
	xwarn("registering GPU memory in place failed (%s); %s through a pinned host mirror",
	      xfer_strerror(mr->native_err), never ? "GPU regions of this engine go" : "this region goes");
	xi_gpu_mr_done(mr);
	mr->native = false;
	mr->native_err = 0;
	if (!c || xi_cuda_use_device(mr->gpu))
		return -XFER_ENOGPU;
	return alloc_mirror(c, mr);
}

void xi_gpu_mr_done(xfer_mr_t *mr)
{
	/* The NICs keep their own reference to a dma-buf they imported. */
	if (mr->gpu >= 0 && mr->mem.dmabuf_fd >= 0)
		close(mr->mem.dmabuf_fd);
	mr->mem.dmabuf_fd = -1;
}

void xi_gpu_mr_free(xfer_mr_t *mr)
{
	const struct cuda_api *c = xi_cuda_get();
	xi_gpu_mr_done(mr);
	if (mr->gpu >= 0 && mr->reg_buf && c)
		c->cuMemFreeHost(mr->reg_buf);
	mr->reg_buf = NULL;
}
