#ifndef XFER_OFI_NIC_H
#define XFER_OFI_NIC_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

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

#endif
