/* The libfabric backend: its per-NIC state and every function its files
 * share (ofi_open.c: provider choice, opening, error mapping; ofi_mr.c:
 * registration; ofi_ops.c: address vector, posting, polling; ofi_conn.c:
 * resetting verbs connections that failed). */
#ifndef XFER_OFI_H
#define XFER_OFI_H

#include <stdbool.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "backend/backend.h"

/* What ofi_conn.c keeps per address-vector entry (verbs only). */
struct ofi_dest {
	uint32_t inflight; /* our requests posted and not yet completed */
	bool broken;       /* its connection failed: reset once inflight is 0 */
};

struct ofi_nic {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	int wait_fd;
	uint64_t mr_mode;
	bool source; /* FI_SOURCE: completions of receives name their sender */
	/* verbs;ofi_rxm: connections whose queue pair failed are reset (ofi_conn.c). */
	bool track;
	struct ofi_dest *dests; /* by fi_addr */
	uint32_t ndests, nbroken;
};

/* The backend's ops table (ofi_open.c), for the registry. */
extern const struct backend_ops xi_ofi_backend;

/* libfabric's codes above 255 have no errno twin; map them to ours. */
int xi_ofi_errno(int fi_ret);

/* ofi_conn.c: resetting rxm connections over verbs after an error. */
bool xi_ofi_conn_tracking(const struct fi_info *fi);
int xi_ofi_conn_added(struct ofi_nic *o, uint64_t dest);
void xi_ofi_conn_posted(struct ofi_nic *o, uint64_t dest, void *ctx);
/* A request completed; own_error: it failed for a reason of its own (not
 * flushed behind another), which leaves the queue pair in the error state. */
void xi_ofi_conn_done(struct xfer_nic *nic, struct ofi_nic *o, void *ctx, bool own_error);
void xi_ofi_conn_reset_idle(struct xfer_nic *nic, struct ofi_nic *o);
int xi_ofi_verbs_errno(int prov_errno, int fallback);

/* ofi_mr.c */
int xi_ofi_mr_reg(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		  const struct nic_mem *mem, struct nic_mr *out);
void xi_ofi_mr_dereg(struct xfer_nic *nic, struct nic_mr *mr);

/* ofi_ops.c */
int xi_ofi_av_insert(struct xfer_nic *nic, const void *addr, size_t len, uint64_t *dest);
int xi_ofi_av_remove(struct xfer_nic *nic, uint64_t dest);
int xi_ofi_post_send(struct xfer_nic *nic, uint64_t dest, const void *buf, size_t len, void *desc,
		     void *ctx);
int xi_ofi_post_recv(struct xfer_nic *nic, void *buf, size_t len, void *desc, void *ctx);
int xi_ofi_post_write(struct xfer_nic *nic, const struct nic_write *w, void *ctx);
int xi_ofi_poll(struct xfer_nic *nic, struct nic_event *ev, int max);
int xi_ofi_wait_fd(struct xfer_nic *nic);
int xi_ofi_trywait(struct xfer_nic *nic);
int xi_ofi_src_is(struct xfer_nic *nic, uint64_t src, uint64_t dest);

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
bool xi_ofi_mr_req_init(struct ofi_mr_req *r, void *buf, size_t len, uint64_t access, uint64_t key,
		     const struct nic_mem *mem, bool use_dmabuf);

#endif
