#ifndef XFER_OFI_NIC_H
#define XFER_OFI_NIC_H

#include <stdbool.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

struct nic_mem;

struct ofi_nic {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	int wait_fd;
	uint64_t mr_mode;
};

/* libfabric's codes above 255 have no errno twin; map them to ours. */
int ofi_errno(int fi_ret);

/* dma-buf registration arrived in libfabric 1.20 (FI_MR_DMABUF, struct
 * fi_mr_dmabuf); with older headers only the iface/device form exists. */
#ifdef FI_MR_DMABUF
#define OFI_HAVE_DMABUF 1
#else
#define OFI_HAVE_DMABUF 0
#endif

/* One fi_mr_regattr request for device memory, kept apart from the call so
 * that tests can check what would be asked of the provider. */
struct ofi_mr_req {
	struct fi_mr_attr attr;
	struct iovec iov;
#if OFI_HAVE_DMABUF
	struct fi_mr_dmabuf dmabuf;
#endif
	uint64_t flags; /* for fi_mr_regattr */
};

/* Fills r to register [buf, buf+len) of CUDA device mem->cuda_dev as
 * FI_HMEM_CUDA; through mem's dma-buf when use_dmabuf (and it has one, and
 * the headers know dma-bufs). Returns whether the dma-buf form was built. */
bool ofi_mr_req_init(struct ofi_mr_req *r, void *buf, size_t len, uint64_t access, uint64_t key,
		     const struct nic_mem *mem, bool use_dmabuf);

#endif
