/* The few CUDA driver calls the engine makes, loaded at run time with
 * dlopen so that libxfer needs neither the CUDA toolkit to build nor a GPU
 * driver to load. The types mirror cuda.h's ABI; only what we use. */
#ifndef XFER_CUDA_API_H
#define XFER_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct {
	char reserved[64];
} CUipcMemHandle;

typedef struct {
	int type, id;
} CUmemLocation;
typedef struct {
	int srcAccessOrder;
	CUmemLocation srcLocHint, dstLocHint;
	unsigned flags;
} CUmemcpyAttributes;

#define CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 0x1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CUDA_ERROR_NOT_READY 600
#define CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED 124
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 0x1

struct cuda_api {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
	CUresult (*cuMemGetAddressRange)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
	CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *, CUdeviceptr);
	CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
	CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	/* CUDA >= 13 (cuMemcpyBatchAsync_v2); NULL before: one copy per page. */
	CUresult (*cuMemcpyBatchAsync)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
				       size_t *, size_t, CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuEventDestroy)(CUevent);
	/* Optional (NULL when the driver lacks them): dma-buf export. */
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuMemGetHandleForAddressRange)(void *, CUdeviceptr, size_t, int, unsigned long long);
	/* Optional: the embedded copy kernels (gpu/pages_kernel.cu). Without
	 * them paged copies go to the copy engine. */
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	/* CUDA 12.4+: finishes loading a lazily loaded function (NULL before). */
	CUresult (*cuFuncLoad)(CUfunction);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				   CUstream, void **, void **);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
};

/* The loaded API, or NULL (no driver, no device): then -XFER_ENOGPU. */
const struct cuda_api *xi_cuda_get(void);
/* Makes device `dev`'s primary context current on the calling thread. */
int xi_cuda_use_device(int dev);
/* Device ordinal owning ptr when it is CUDA device memory, else -1. */
int xi_cuda_device_of(const void *ptr);
/* Identifies this host among peers (same-host transports need it). */
uint64_t xi_cuda_host_id(void);
/* Tests only: make xi_cuda_get() return api (a fake driver) from now on. Call
 * it before any engine exists. */
void xi_cuda_api_override(const struct cuda_api *api);

#endif
