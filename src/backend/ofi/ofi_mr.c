/* Memory registration on one libfabric domain. Host memory takes the plain
 * fi_mr_reg path. CUDA memory, on a domain opened with FI_HMEM, is
 * registered in place with fi_mr_regattr (iface FI_HMEM_CUDA and its device
 * ordinal), first through a dma-buf when the caller exported one and the
 * headers are new enough, so the NIC writes straight into GPU memory. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "util/log.h"
#include "backend/ofi/ofi.h"

/* Local registrations are what this engine posts from or receives into;
 * only remote-writable ones accept peers' writes. */
#define ACCESS_LOCAL (FI_SEND | FI_RECV | FI_WRITE)
#define ACCESS_REMOTE (ACCESS_LOCAL | FI_READ | FI_REMOTE_WRITE | FI_REMOTE_READ)

bool xi_ofi_mr_req_init(struct ofi_mr_req *r, void *buf, size_t len, uint64_t access, uint64_t key,
		     const struct nic_mem *mem, bool use_dmabuf)
{
	memset(r, 0, sizeof(*r));
	r->attr.access = access;
	r->attr.requested_key = key;
	r->attr.iface = FI_HMEM_CUDA;
	r->attr.device.cuda = mem->cuda_dev;
#if OFI_HAVE_DMABUF
	if (use_dmabuf && mem->dmabuf_fd >= 0) {
		r->dmabuf.fd = mem->dmabuf_fd;
		r->dmabuf.offset = mem->dmabuf_offset;
		r->dmabuf.len = len;
		r->dmabuf.base_addr = mem->dmabuf_base;
		r->attr.dmabuf = &r->dmabuf;
		r->attr.iov_count = 1;
		r->flags = FI_MR_DMABUF;
		(void)buf;
		return true;
	}
#else
	(void)use_dmabuf;
#endif
	r->iov.iov_base = buf;
	r->iov.iov_len = len;
	r->attr.mr_iov = &r->iov;
	r->attr.iov_count = 1;
	return false;
}

static int reg_device(struct ofi_nic *o, void *buf, size_t len, uint64_t key, uint64_t access,
		      const struct nic_mem *mem, struct fid_mr **mr)
{
	struct ofi_mr_req r;
	int ret = -FI_ENOSYS;
	if (xi_ofi_mr_req_init(&r, buf, len, access, key, mem, true)) {
		ret = fi_mr_regattr(o->domain, &r.attr, r.flags, mr);
		if (!ret)
			return 0;
		/* Drivers and kernels without dma-buf import still register by address. */
		xinfo("dma-buf registration of GPU memory failed (%s); registering by address",
		      fi_strerror(-ret));
		xi_ofi_mr_req_init(&r, buf, len, access, key, mem, false);
	}
	return fi_mr_regattr(o->domain, &r.attr, r.flags, mr);
}

int xi_ofi_mr_reg(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		  const struct nic_mem *mem, struct nic_mr *out)
{
	struct ofi_nic *o = nic->priv;
	struct fid_mr *mr = NULL;
	uint64_t acc = (access & NIC_MR_REMOTE_WRITE) ? ACCESS_REMOTE : ACCESS_LOCAL;
	int ret;
	if (mem && mem->cuda_dev >= 0)
		ret = reg_device(o, buf, len, key, acc, mem, &mr);
	else
		ret = fi_mr_reg(o->domain, buf, len, acc, 0, key, 0, &mr, NULL);
	if (ret)
		return xi_ofi_errno(ret);
	if (o->mr_mode & FI_MR_ENDPOINT) {
		ret = fi_mr_bind(mr, &o->ep->fid, 0);
		if (!ret)
			ret = fi_mr_enable(mr);
		if (ret) {
			fi_close(&mr->fid);
			return xi_ofi_errno(ret);
		}
	}
	out->handle = mr;
	out->desc = fi_mr_desc(mr);
	out->key = fi_mr_key(mr);
	out->base = (o->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
	return 0;
}

void xi_ofi_mr_dereg(struct xfer_nic *nic, struct nic_mr *mr)
{
	(void)nic;
	if (mr->handle)
		fi_close(&((struct fid_mr *)mr->handle)->fid);
	mr->handle = NULL;
}
