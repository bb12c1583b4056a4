/* The kernels of moe_kernels.cu, for the launchers in moe_host.cu. */
#ifndef XFER_MOE_KERNELS_CUH
#define XFER_MOE_KERNELS_CUH

#include "moe_dev.cuh"

__global__ void moe_wait_kernel(moe_dev d, uint32_t wp);
__global__ void __launch_bounds__(1024) moe_route_kernel(moe_dev d, uint32_t n, const void *idx, int idx_bytes, uint32_t wait_after);
__global__ void __launch_bounds__(ROUTE_WIDE_THREADS) moe_route_wide_kernel(moe_dev d, uint32_t n, const void *idx,
									    int idx_bytes, uint32_t wait_after);
__global__ void __launch_bounds__(1024) moe_route_pack_kernel(moe_dev d, uint32_t n, const uint8_t *x,
							     const float *xs, int quant, const void *idx,
							     int idx_bytes);
__global__ void __launch_bounds__(1024) moe_pack_kernel(moe_dev d, uint32_t n, const uint8_t *x, const float *xs, int quant,
				const void *idx, int idx_bytes);
__global__ void moe_plan_kernel(moe_dev d, int32_t *counts, int32_t *offsets, uint32_t wait_before);
__global__ void moe_shuffle_kernel(moe_dev d, uint8_t *out_x, float *out_s, int32_t *src_rank,
				   int32_t *src_token);
__global__ void moe_comb_send_kernel(moe_dev d, const uint8_t *eo);
__global__ void moe_stamp_kernel(uint64_t *dst);
__global__ void __launch_bounds__(1024) moe_comb_recv_kernel(moe_dev d, uint32_t n, const float *wts, uint16_t *out);

#endif
