/* GPU regions at registration: in place on NICs with FI_HMEM, or through a
 * pinned host mirror; a CUDA IPC handle for peers on this host either way. */
#ifndef XFER_API_MR_GPU_H
#define XFER_API_MR_GPU_H

#include "core/objects.h"

/* Readies a region of device dev for registration: in place on NICs with
 * FI_HMEM (with a dma-buf where possible), else with a pinned host mirror. */
int xi_gpu_mr_prepare(xfer_engine_t *e, xfer_mr_t *mr, int dev);
/* Registering in place failed (mr->native_err): mirror the region instead. */
int xi_gpu_mr_fall_back(xfer_engine_t *e, xfer_mr_t *mr);
/* Registration is over: the dma-buf fd, if any, is closed. */
void xi_gpu_mr_done(xfer_mr_t *mr);
/* The region's mirror, if any (the struct itself is the caller's). */
void xi_gpu_mr_free(xfer_mr_t *mr);

#endif
