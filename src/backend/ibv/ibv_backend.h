/* The raw libibverbs RC backend (docs/design.md §16), as the rest of
 * libxfer sees it, with or without it built in (ibv_none.c stands in
 * without rdma-core headers). Everything else is private to src/backend/ibv. */
#ifndef XFER_IBV_BACKEND_H
#define XFER_IBV_BACKEND_H

#include "backend/backend.h"

/* The ops table for provider "ibverbs" ("auto" too when an RDMA port is
 * active here), else NULL: libfabric serves the name. */
const struct backend_ops *xi_ibv_select(const char *provider);
/* The smallest completion-queue limit (max_cqe) of the usable RDMA ports,
 * or -1 when there is none (or no libibverbs). */
int xi_ibv_min_cqe(void);

#endif
