/* Registration on one RDMA device, split from the ops so that tests can
 * drive it through a fake libibverbs (tests/test_ibv_fake.c). */
#ifndef XFER_IBV_MR_H
#define XFER_IBV_MR_H

#include <stdbool.h>

#include "backend/backend.h"
#include "backend/ibv/ibv_api.h"

/* Host memory (or device memory a peer-memory client can pin) by address. */
struct ibv_mr *xi_ibv_mr_host(const struct ibv_api *api, struct ibv_pd *pd, void *buf, size_t len, int access);
/* Device memory: its dma-buf when it has one (ibv_reg_dmabuf_mr), else, or
 * when that fails, by address. */
struct ibv_mr *xi_ibv_mr_device(const struct ibv_api *api, struct ibv_pd *pd, void *buf, size_t len,
			     const struct nic_mem *mem, int access);
/* mr_reg with the access the region needs: remote = peers write into it. */
int xi_ibv_mr_reg_access(struct xfer_nic *nic, void *buf, size_t len, const struct nic_mem *mem, bool remote,
		      struct nic_mr *out);

#endif
