/* Memory registration on one RDMA device. Keys are the device's (the rkey
 * a peer needs travels in the region descriptor); a region is addressed by
 * its virtual address, so its remote base is the address itself. Host
 * memory and device memory by address go through ibv_reg_mr_iova2 (with
 * relaxed ordering where rdma-core and the device support it); device
 * memory with a dma-buf goes through ibv_reg_dmabuf_mr first. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "util/log.h"
#include "backend/ibv/ibv_mr.h"
#include "backend/ibv/ibv_nic.h"

/* Relaxed ordering lets the PCIe root complex reorder the NIC's writes into
 * memory (a large gain for GPU memory and on some CPUs). It is an optional
 * access bit: rdma-core drops it where the kernel lacks optional access
 * support and the kernel drops it where the device lacks it, so asking is
 * always safe. Remote readers and writers never see partial ordering
 * effects because completions and immediates still follow the data. */
int xi_ibv_mr_access(const struct ibv_nic *n, bool remote)
{
	int a = IBV_ACCESS_LOCAL_WRITE;
	if (remote)
		a |= IBV_ACCESS_REMOTE_WRITE; /* never read: no REMOTE_READ */
	if (n->api->reg_mr_iova2)
		a |= IBV_ACCESS_RELAXED_ORDERING;
	return a;
}

struct ibv_mr *xi_ibv_mr_host(const struct ibv_api *api, struct ibv_pd *pd, void *buf, size_t len, int access)
{
	if (api->reg_mr_iova2)
		return api->reg_mr_iova2(pd, buf, len, (uint64_t)(uintptr_t)buf, (unsigned)access);
	return api->reg_mr(pd, buf, len, access & ~IBV_ACCESS_OPTIONAL_RANGE);
}

struct ibv_mr *xi_ibv_mr_device(const struct ibv_api *api, struct ibv_pd *pd, void *buf, size_t len,
			     const struct nic_mem *mem, int access)
{
	if (mem->dmabuf_fd >= 0 && api->reg_dmabuf_mr) {
		/* The dma-buf covers whole pages from dmabuf_base; the region starts
		 * dmabuf_offset bytes in. The iova is the region's virtual address
		 * so that remote addresses mean the same on every path. */
		struct ibv_mr *mr = api->reg_dmabuf_mr(pd, mem->dmabuf_offset, len,
						       (uint64_t)(uintptr_t)buf, mem->dmabuf_fd, access);
		if (mr)
			return mr;
		xinfo("dma-buf registration of GPU memory failed (%s); registering by address",
		      strerror(errno));
	}
	/* By address: works where the kernel has a peer-memory client for the
	 * GPU (nvidia-peermem). */
	return xi_ibv_mr_host(api, pd, buf, len, access);
}

int xi_ibv_mr_reg_access(struct xfer_nic *nic, void *buf, size_t len, const struct nic_mem *mem, bool remote,
		      struct nic_mr *out)
{
	struct ibv_nic *n = nic->priv;
	int access = xi_ibv_mr_access(n, remote);
	errno = 0;
	struct ibv_mr *mr = mem && mem->cuda_dev >= 0 ? xi_ibv_mr_device(n->api, n->pd, buf, len, mem, access)
						      : xi_ibv_mr_host(n->api, n->pd, buf, len, access);
	if (!mr)
		return errno ? -errno : -EIO;
	out->handle = mr;
	out->desc = mr;
	out->key = mr->rkey;
	out->base = (uint64_t)(uintptr_t)buf;
	return 0;
}

/* Only regions peers write into (NIC_MR_REMOTE_WRITE: the application's
 * and the sink) get IBV_ACCESS_REMOTE_WRITE; the core's bounce buffers are
 * local-only, so no peer, forged key or not, can write into them. */
int xi_ibvb_mr_reg(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		   const struct nic_mem *mem, struct nic_mr *out)
{
	(void)key;
	return xi_ibv_mr_reg_access(nic, buf, len, mem, (access & NIC_MR_REMOTE_WRITE) != 0, out);
}

void xi_ibvb_mr_dereg(struct xfer_nic *nic, struct nic_mr *mr)
{
	struct ibv_nic *n = nic->priv;
	if (mr->handle)
		n->api->dereg_mr(mr->handle);
	mr->handle = NULL;
}
