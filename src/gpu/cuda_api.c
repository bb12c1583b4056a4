/* The CUDA driver API, loaded at run time (gpu/cuda_api.h). */
#include "gpu/cuda_api.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util/log.h"
#include "wire/wire.h"
#include "xfer.h"

static struct cuda_api api;
static int api_state; /* 0 unknown, 1 loaded, -1 unavailable */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct cuda_api *fake;

#define SYM(field, name)                                                                     \
	do {                                                                                 \
		*(void **)&api.field = dlsym(lib, name);                                     \
		if (!api.field) {                                                            \
			xinfo("CUDA driver lacks %s", name);                                 \
			return;                                                              \
		}                                                                            \
	} while (0)

static void load(void)
{
	api_state = -1;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		xinfo("no CUDA driver: %s", dlerror());
		return;
	}
	SYM(cuInit, "cuInit");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDeviceGetCount, "cuDeviceGetCount");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuPointerGetAttribute, "cuPointerGetAttribute");
	SYM(cuMemGetAddressRange, "cuMemGetAddressRange_v2");
	SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
	SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
	SYM(cuMemcpyDtoD, "cuMemcpyDtoD_v2");
	SYM(cuMemHostAlloc, "cuMemHostAlloc");
	SYM(cuMemFreeHost, "cuMemFreeHost");
	SYM(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
	SYM(cuIpcGetMemHandle, "cuIpcGetMemHandle");
	SYM(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2");
	SYM(cuIpcCloseMemHandle, "cuIpcCloseMemHandle");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
	SYM(cuStreamCreate, "cuStreamCreate");
	SYM(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	SYM(cuStreamSynchronize, "cuStreamSynchronize");
	SYM(cuEventCreate, "cuEventCreate");
	SYM(cuEventRecord, "cuEventRecord");
	SYM(cuEventQuery, "cuEventQuery");
	SYM(cuStreamDestroy, "cuStreamDestroy_v2");
	SYM(cuEventDestroy, "cuEventDestroy_v2");
	/* dma-buf export came with CUDA 11.7; older drivers just stage or
	 * register by address. */
	*(void **)&api.cuDeviceGetAttribute = dlsym(lib, "cuDeviceGetAttribute");
	*(void **)&api.cuMemcpyBatchAsync = dlsym(lib, "cuMemcpyBatchAsync_v2");
	*(void **)&api.cuMemGetHandleForAddressRange = dlsym(lib, "cuMemGetHandleForAddressRange");
	*(void **)&api.cuModuleLoadData = dlsym(lib, "cuModuleLoadData");
	*(void **)&api.cuModuleGetFunction = dlsym(lib, "cuModuleGetFunction");
	*(void **)&api.cuFuncLoad = dlsym(lib, "cuFuncLoad");
	*(void **)&api.cuLaunchKernel = dlsym(lib, "cuLaunchKernel");
	*(void **)&api.cuMemAlloc = dlsym(lib, "cuMemAlloc_v2");
	*(void **)&api.cuMemFree = dlsym(lib, "cuMemFree_v2");
	int n = 0;
	if (api.cuInit(0) != 0 || api.cuDeviceGetCount(&n) != 0 || n == 0) {
		xinfo("CUDA driver present but no usable GPU");
		return;
	}
	api_state = 1;
}

void xi_cuda_api_override(const struct cuda_api *a)
{
	fake = a;
}

const struct cuda_api *xi_cuda_get(void)
{
	if (fake)
		return fake;
	pthread_once(&once, load);
	return api_state == 1 ? &api : NULL;
}

int xi_cuda_use_device(int dev)
{
	const struct cuda_api *c = xi_cuda_get();
	CUdevice d;
	CUcontext ctx;
	if (!c)
		return -XFER_ENOGPU;
	if (c->cuDeviceGet(&d, dev) || c->cuDevicePrimaryCtxRetain(&ctx, d) || c->cuCtxSetCurrent(ctx))
		return -XFER_ENOGPU;
	return 0;
}

int xi_cuda_device_of(const void *ptr)
{
	const struct cuda_api *c = xi_cuda_get();
	unsigned type = 0;
	int dev = -1;
	if (!c)
		return -1;
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)ptr;
	if (c->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != 0 ||
	    type != CU_MEMORYTYPE_DEVICE)
		return -1;
	if (c->cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != 0)
		return -1;
	return dev;
}

uint64_t xi_cuda_host_id(void)
{
	/* The kernel's boot id differs between hosts and survives processes. */
	char id[64] = {0};
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (!fgets(id, sizeof(id), f))
			id[0] = 0;
		fclose(f);
	}
	uint64_t h = xi_wire_crc32(id, strlen(id));
	return (h << 32) | xi_wire_crc32(id, strlen(id) / 2);
}

int xfer_cuda_available(void)
{
	return xi_cuda_get() ? 1 : -XFER_ENOGPU;
}
