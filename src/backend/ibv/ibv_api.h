/* The libibverbs calls the raw RDMA backend makes, loaded at run time with
 * dlopen (like the CUDA driver, src/cuda/), so that libxfer loads and works
 * on machines without rdma-core. The headers (libibverbs-dev) are needed at
 * build time only; without them the backend is left out (ibv_none.c).
 *
 * Every call goes through this table, including the data path ones that
 * verbs.h defines inline over the provider's ops: a test can install a fake
 * table (xi_ibv_api_override) and see exactly what the backend asks for. No
 * exported ibv_* symbol is referenced directly, so libxfer has no link-time
 * dependency on libibverbs. */
#ifndef XFER_IBV_API_H
#define XFER_IBV_API_H

#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>

struct ibv_api {
	struct ibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	/* The exported symbol fills the leading (compat) part of the struct,
	 * which holds every field used here. */
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
	/* rdma-core >= 32, else NULL (the GID type is then read from sysfs). */
	int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index,
			    struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	/* rdma-core >= 29; optional access bits (relaxed ordering) need it. */
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				       unsigned int access);
	/* rdma-core >= 34, else NULL. */
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova,
					int fd, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
	int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_ctx,
				    struct ibv_comp_channel *ch, int vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	struct ibv_srq *(*create_srq)(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
	int (*destroy_srq)(struct ibv_srq *srq);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*destroy_qp)(struct ibv_qp *qp);
	struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
	int (*destroy_ah)(struct ibv_ah *ah);
	int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
	void (*ack_async_event)(struct ibv_async_event *ev);
	const char *(*wc_status_str)(enum ibv_wc_status status);
	/* The data path (inline in verbs.h: the provider's own functions). */
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
	int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
	int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
	int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
	int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
};

/* libibverbs, loaded on first use; NULL when it is not installed (or a
 * symbol every rdma-core since v17 has is missing). */
const struct ibv_api *xi_ibv_api_get(void);
/* Tests: use `fake` instead of libibverbs from now on (NULL: back to it). */
void xi_ibv_api_override(const struct ibv_api *fake);

#endif
