/* See fake_cuda.h. Every entry point takes one lock: the worker thread and
 * application threads call in concurrently, as they do into a real driver. */
#include "fake_cuda.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gpu/cuda_api.h"
#include "gpu/kernel_args.h"

#define MAX_ALLOCS 64
#define ERR 1 /* CUDA_ERROR_INVALID_VALUE */

struct alloc {
	uint8_t *p;
	size_t len, maplen;
	int dev, fd;
	int opened; /* mapped from another process's handle */
};

/* A queued copy, or (kernel set) a launch of the paged-copy kernel, run on
 * the CPU when its turn comes. */
struct copy {
	void *dst;
	const void *src;
	size_t len;
	int kernel;
	int write_value; /* cuStreamWriteValue32: store value at dst */
	uint32_t value;
	struct xi_pages_args args;
};

/* What the GPU kernel does, byte for byte: every job of the launch. */
static void run_pages(const struct xi_pages_args *a)
{
	for (uint32_t k = 0; k < a->njobs; k++) {
		const struct xi_pages_job *j = &a->job[k];
		const uint32_t *sp = (const uint32_t *)(uintptr_t)j->src_pages;
		const uint32_t *dp = (const uint32_t *)(uintptr_t)j->dst_pages;
		for (uint32_t i = 0; i < j->npages; i++)
			memcpy((uint8_t *)(uintptr_t)(j->dst_base + (uint64_t)(dp ? dp[i] : i) * j->dst_stride),
			       (const uint8_t *)(uintptr_t)(j->src_base + (uint64_t)(sp ? sp[i] : i) * j->src_stride),
			       j->page_len);
	}
}

static void run_copy(const struct copy *c)
{
	if (c->kernel)
		run_pages(&c->args);
	else if (c->write_value)
		__atomic_store_n((uint32_t *)c->dst, c->value, __ATOMIC_RELEASE);
	else
		memcpy(c->dst, c->src, c->len);
}

struct stream {
	struct copy *q;
	size_t n, cap, done;
};

struct event {
	struct stream *st;
	size_t upto;
	int queries;
};

struct handle {
	uint32_t magic;
	int32_t pid, fd;
	uint64_t len;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc allocs[MAX_ALLOCS];
static struct fake_cuda_counts counts;
static int dmabuf_on = 1;
static int hold;

static struct alloc *find(uint64_t p)
{
	for (int i = 0; i < MAX_ALLOCS; i++)
		if (allocs[i].p && p >= (uintptr_t)allocs[i].p && p < (uintptr_t)allocs[i].p + allocs[i].len)
			return &allocs[i];
	return NULL;
}

static struct alloc *slot(void)
{
	for (int i = 0; i < MAX_ALLOCS; i++)
		if (!allocs[i].p)
			return &allocs[i];
	return NULL;
}

static size_t page_round(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	return (len + pg - 1) / pg * pg;
}

void *fake_cuda_alloc(size_t len, int dev)
{
	int fd = memfd_create("fake-gpu", MFD_CLOEXEC);
	size_t maplen = page_round(len);
	if (fd < 0 || ftruncate(fd, (off_t)maplen))
		return NULL;
	void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return NULL;
	pthread_mutex_lock(&lock);
	struct alloc *a = slot();
	if (a)
		*a = (struct alloc){.p = p, .len = len, .maplen = maplen, .dev = dev, .fd = fd};
	pthread_mutex_unlock(&lock);
	return a ? p : NULL;
}

void fake_cuda_free(void *p)
{
	pthread_mutex_lock(&lock);
	struct alloc *a = find((uintptr_t)p);
	if (a) {
		munmap(a->p, a->maplen);
		if (a->fd >= 0)
			close(a->fd);
		memset(a, 0, sizeof(*a));
	}
	pthread_mutex_unlock(&lock);
}

void fake_cuda_hold_events(int on)
{
	pthread_mutex_lock(&lock);
	hold = on;
	pthread_mutex_unlock(&lock);
}

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_shut, gate_waiters;

void fake_cuda_gate(int shut)
{
	pthread_mutex_lock(&gate_lock);
	gate_shut = shut;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_lock);
}

int fake_cuda_gate_waiting(void)
{
	pthread_mutex_lock(&gate_lock);
	int n = gate_waiters;
	pthread_mutex_unlock(&gate_lock);
	return n;
}

static void gate_pass(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_waiters++;
	while (gate_shut)
		pthread_cond_wait(&gate_cv, &gate_lock);
	gate_waiters--;
	pthread_mutex_unlock(&gate_lock);
}

void fake_cuda_set_dmabuf(int on)
{
	pthread_mutex_lock(&lock);
	dmabuf_on = on;
	pthread_mutex_unlock(&lock);
}

struct fake_cuda_counts fake_cuda_counts(void)
{
	pthread_mutex_lock(&lock);
	struct fake_cuda_counts c = counts;
	pthread_mutex_unlock(&lock);
	return c;
}

#define LOCKED(body)                                   \
	do {                                           \
		pthread_mutex_lock(&lock);             \
		CUresult r_ = (body);                  \
		pthread_mutex_unlock(&lock);           \
		return r_;                             \
	} while (0)

static CUresult ok0(void)
{
	return 0;
}

static CUresult f_init(unsigned f)
{
	(void)f;
	return 0;
}

static CUresult f_device_get(CUdevice *d, int ord)
{
	*d = ord;
	return ord >= 0 && ord < 4 ? 0 : ERR;
}

static CUresult f_device_count(int *n)
{
	*n = 4;
	return 0;
}

static CUresult f_ctx_retain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)(uintptr_t)(d + 1);
	return 0;
}

static CUresult f_ctx_set(CUcontext c)
{
	(void)c;
	return 0;
}

static CUresult pointer_attr(void *data, int attr, CUdeviceptr p)
{
	struct alloc *a = find(p);
	if (!a)
		return ERR; /* host memory the driver does not know */
	if (attr == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
		*(unsigned *)data = CU_MEMORYTYPE_DEVICE;
	else if (attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
		*(int *)data = a->dev;
	else
		return ERR;
	return 0;
}

static CUresult f_pointer_attr(void *data, int attr, CUdeviceptr p)
{
	LOCKED(pointer_attr(data, attr, p));
}

static CUresult address_range(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	struct alloc *a = find(p);
	if (!a)
		return ERR;
	*base = (uintptr_t)a->p;
	*size = a->len;
	return 0;
}

static CUresult f_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	LOCKED(address_range(base, size, p));
}

static CUresult f_htod(CUdeviceptr dst, const void *src, size_t len)
{
	pthread_mutex_lock(&lock);
	counts.htod++;
	pthread_mutex_unlock(&lock);
	memcpy((void *)(uintptr_t)dst, src, len);
	return 0;
}

static CUresult f_dtoh(void *dst, CUdeviceptr src, size_t len)
{
	pthread_mutex_lock(&lock);
	counts.dtoh++;
	pthread_mutex_unlock(&lock);
	memcpy(dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static CUresult f_dtod(CUdeviceptr dst, CUdeviceptr src, size_t len)
{
	memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, len);
	return 0;
}

static CUresult f_host_alloc(void **p, size_t len, unsigned flags)
{
	(void)flags;
	*p = aligned_alloc(64, (len + 63) & ~(size_t)63);
	pthread_mutex_lock(&lock);
	counts.host_allocs++;
	counts.small_host_allocs += len < 4096;
	pthread_mutex_unlock(&lock);
	return *p ? 0 : 2;
}

static CUresult f_free_host(void *p)
{
	free(p);
	return 0;
}

static CUresult f_host_dev_ptr(CUdeviceptr *d, void *p, unsigned f)
{
	(void)f;
	*d = (uintptr_t)p;
	return 0;
}

static CUresult ipc_get(CUipcMemHandle *h, CUdeviceptr base)
{
	struct alloc *a = find(base);
	if (!a || (uintptr_t)a->p != base || a->opened)
		return ERR;
	struct handle fh = {.magic = 0x46414b45, .pid = getpid(), .fd = a->fd, .len = a->len};
	memset(h, 0, sizeof(*h));
	memcpy(h, &fh, sizeof(fh));
	return 0;
}

static CUresult f_ipc_get(CUipcMemHandle *h, CUdeviceptr base)
{
	LOCKED(ipc_get(h, base));
}

static CUresult f_ipc_open(CUdeviceptr *out, CUipcMemHandle h, unsigned flags)
{
	struct handle fh;
	char path[64];
	(void)flags;
	memcpy(&fh, &h, sizeof(fh));
	if (fh.magic != 0x46414b45)
		return ERR;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", fh.pid, fh.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return ERR;
	size_t maplen = page_round(fh.len);
	void *p = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return ERR;
	pthread_mutex_lock(&lock);
	struct alloc *a = slot();
	if (a) {
		*a = (struct alloc){.p = p, .len = fh.len, .maplen = maplen, .dev = 0, .fd = -1, .opened = 1};
		counts.ipc_opens++;
	}
	pthread_mutex_unlock(&lock);
	if (!a) {
		munmap(p, maplen);
		return ERR;
	}
	*out = (uintptr_t)p;
	return 0;
}

static CUresult f_ipc_close(CUdeviceptr p)
{
	pthread_mutex_lock(&lock);
	struct alloc *a = find(p);
	if (a && a->opened) {
		munmap(a->p, a->maplen);
		memset(a, 0, sizeof(*a));
	}
	pthread_mutex_unlock(&lock);
	return a ? 0 : ERR;
}

static CUresult f_stream_create(CUstream *s, unsigned flags)
{
	(void)flags;
	*s = calloc(1, sizeof(struct stream));
	return *s ? 0 : 2;
}

static CUresult enqueue(CUstream s, void *dst, const void *src, size_t len)
{
	struct stream *st = (struct stream *)s;
	if (st->n == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 64;
		struct copy *q = realloc(st->q, cap * sizeof(*q));
		if (!q)
			return 2;
		st->q = q;
		st->cap = cap;
	}
	st->q[st->n++] = (struct copy){.dst = dst, .src = src, .len = len};
	return 0;
}

static CUresult f_module_load(CUmodule *m, const void *image)
{
	*m = (CUmodule)(uintptr_t)image;
	pthread_mutex_lock(&lock);
	counts.module_loads++;
	pthread_mutex_unlock(&lock);
	return 0;
}

static CUresult f_module_fn(CUfunction *f, CUmodule m, const char *name)
{
	(void)m;
	/* The three kernels of one argument, told apart at launch by their
	 * handle: 1 warp, 2 tile, 3 bulk. */
	uintptr_t which = !strcmp(name, XI_PAGES_KERNEL)        ? 1
			  : !strcmp(name, XI_PAGES_KERNEL_TILE) ? 2
			  : !strcmp(name, XI_PAGES_KERNEL_BULK) ? 3
								: 0;
	*f = (CUfunction)which;
	return which ? 0 : ERR;
}

static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
			 unsigned shmem, CUstream s, void **params, void **extra)
{
	(void)shmem;
	uintptr_t which = (uintptr_t)f;
	unsigned threads = which == 3 ? XI_BULK_THREADS : XI_PAGES_THREADS;
	if (!which || which > 3 || !gx || gy != 1 || gz != 1 || bx != threads || by != 1 || bz != 1 || !params || extra)
		return ERR;
	const struct xi_pages_args *a = params[0];
	if (which == 3 && !a->aligned)
		return ERR; /* bulk copies need 16-byte addresses and lengths */
	uint32_t items = 0;
	for (uint32_t k = 0; k < a->njobs; k++) {
		/* The launcher's bookkeeping, as the kernel relies on it. */
		const struct xi_pages_job *j = &a->job[k];
		if (j->item0 != items || j->per_page != (j->page_len + XI_PAGES_CHUNK - 1) / XI_PAGES_CHUNK)
			return ERR;
		items += j->npages * j->per_page;
	}
	if (!a->njobs || a->njobs > XI_PAGES_JOBS || items != a->items)
		return ERR;
	gate_pass();
	pthread_mutex_lock(&lock);
	counts.launches++;
	counts.by_kernel[which - 1]++;
	counts.jobs += a->njobs;
	pthread_mutex_unlock(&lock);
	CUresult r = enqueue(s, NULL, NULL, 0);
	if (!r) {
		struct stream *st = (struct stream *)s;
		st->q[st->n - 1].kernel = 1;
		memcpy(&st->q[st->n - 1].args, params[0], sizeof(struct xi_pages_args));
	}
	return r;
}

static CUresult f_mem_alloc(CUdeviceptr *p, size_t len)
{
	void *m = calloc(1, len);
	*p = (uintptr_t)m;
	return m ? 0 : 2;
}

static CUresult f_mem_free(CUdeviceptr p)
{
	free((void *)(uintptr_t)p);
	return 0;
}

static CUresult f_dtod_async(CUdeviceptr dst, CUdeviceptr src, size_t len, CUstream s)
{
	pthread_mutex_lock(&lock);
	counts.dtod++;
	pthread_mutex_unlock(&lock);
	return enqueue(s, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, len);
}

static CUresult f_htod_async(CUdeviceptr dst, const void *src, size_t len, CUstream s)
{
	pthread_mutex_lock(&lock);
	counts.htod++;
	pthread_mutex_unlock(&lock);
	return enqueue(s, (void *)(uintptr_t)dst, src, len);
}

static CUresult f_dtoh_async(void *dst, CUdeviceptr src, size_t len, CUstream s)
{
	pthread_mutex_lock(&lock);
	counts.dtoh++;
	pthread_mutex_unlock(&lock);
	return enqueue(s, dst, (const void *)(uintptr_t)src, len);
}

static CUresult f_write_value(CUstream s, CUdeviceptr addr, uint32_t value, unsigned flags)
{
	(void)flags;
	pthread_mutex_lock(&lock);
	counts.write_values++;
	pthread_mutex_unlock(&lock);
	CUresult r = enqueue(s, (void *)(uintptr_t)addr, NULL, sizeof(value));
	if (!r) {
		struct stream *st = (struct stream *)s;
		st->q[st->n - 1].write_value = 1;
		st->q[st->n - 1].value = value;
	}
	return r;
}

static CUresult f_stream_sync(CUstream s)
{
	struct stream *st = (struct stream *)s;
	pthread_mutex_lock(&lock);
	counts.syncs++;
	pthread_mutex_unlock(&lock);
	for (; st->done < st->n; st->done++)
		run_copy(&st->q[st->done]);
	return 0;
}

static CUresult f_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t n, CUmemcpyAttributes *attrs,
		       size_t *idx, size_t nattrs, CUstream s)
{
	if (!n || !nattrs || idx[0] != 0 || attrs[0].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM)
		return ERR;
	pthread_mutex_lock(&lock);
	counts.batches++;
	/* Counted by direction, as the single copies are: "device" memory is
	 * this fake's allocations, anything else host memory. */
	for (size_t i = 0; i < n; i++) {
		bool to_dev = find(dsts[i]) != NULL, from_dev = find(srcs[i]) != NULL;
		if (to_dev && !from_dev)
			counts.htod++;
		else if (from_dev && !to_dev)
			counts.dtoh++;
		else
			counts.dtod++;
	}
	pthread_mutex_unlock(&lock);
	for (size_t i = 0; i < n; i++) {
		CUresult r = enqueue(s, (void *)(uintptr_t)dsts[i], (const void *)(uintptr_t)srcs[i], sizes[i]);
		if (r)
			return r;
	}
	return 0;
}

static CUresult f_stream_destroy(CUstream s)
{
	struct stream *st = (struct stream *)s;
	free(st->q);
	free(st);
	return 0;
}

static CUresult f_event_destroy(CUevent e)
{
	free(e);
	return 0;
}

static CUresult f_event_create(CUevent *e, unsigned flags)
{
	(void)flags;
	*e = calloc(1, sizeof(struct event));
	pthread_mutex_lock(&lock);
	counts.events_made++;
	pthread_mutex_unlock(&lock);
	return *e ? 0 : 2;
}

static CUresult f_event_record(CUevent e, CUstream s)
{
	struct event *ev = (struct event *)e;
	struct stream *st = (struct stream *)s;
	ev->st = st;
	ev->upto = st->n;
	ev->queries = 0;
	return 0;
}

static CUresult f_event_query(CUevent e)
{
	struct event *ev = (struct event *)e;
	pthread_mutex_lock(&lock);
	int held = hold;
	pthread_mutex_unlock(&lock);
	if (held)
		return CUDA_ERROR_NOT_READY;
	struct stream *st = ev->st;
	if (++ev->queries < 3) {
		/* A stream that writes words (copy-end words) gets there at the
		 * second query, which still says not ready: a word then seen is
		 * the only sign that its copies are done. */
		bool words = false;
		for (size_t i = st ? st->done : 0; st && i < ev->upto; i++)
			words |= st->q[i].write_value != 0;
		for (; words && ev->queries == 2 && st->done < ev->upto; st->done++)
			run_copy(&st->q[st->done]);
		return CUDA_ERROR_NOT_READY;
	}
	for (; st && st->done < ev->upto; st->done++)
		run_copy(&st->q[st->done]);
	pthread_mutex_lock(&lock);
	counts.events_done++;
	pthread_mutex_unlock(&lock);
	return 0;
}

static CUresult f_device_attr(int *v, int attr, CUdevice d)
{
	(void)d;
	pthread_mutex_lock(&lock);
	*v = attr == CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED ? dmabuf_on : 0;
	pthread_mutex_unlock(&lock);
	return 0;
}

static CUresult dmabuf(void *handle, CUdeviceptr p, size_t size, int type)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	struct alloc *a = find(p);
	if (!dmabuf_on || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD || !a || a->fd < 0 || p % pg ||
	    size % pg || p + size > (uintptr_t)a->p + a->maplen)
		return ERR;
	/* Any open file stands in for the dma-buf; callers only close it. */
	int fd = dup(a->fd);
	if (fd < 0)
		return ERR;
	*(int *)handle = fd;
	counts.dmabuf_exports++;
	counts.last_dmabuf_ptr = p;
	counts.last_dmabuf_size = size;
	return 0;
}

static CUresult f_dmabuf(void *handle, CUdeviceptr p, size_t size, int type, unsigned long long flags)
{
	(void)flags;
	LOCKED(dmabuf(handle, p, size, type));
}

static const struct cuda_api fake_api = {
	.cuInit = f_init,
	.cuDeviceGet = f_device_get,
	.cuDeviceGetCount = f_device_count,
	.cuDevicePrimaryCtxRetain = f_ctx_retain,
	.cuCtxSetCurrent = f_ctx_set,
	.cuPointerGetAttribute = f_pointer_attr,
	.cuMemGetAddressRange = f_address_range,
	.cuMemcpyHtoD = f_htod,
	.cuMemcpyDtoH = f_dtoh,
	.cuMemcpyDtoD = f_dtod,
	.cuMemHostAlloc = f_host_alloc,
	.cuMemFreeHost = f_free_host,
	.cuMemHostGetDevicePointer = f_host_dev_ptr,
	.cuIpcGetMemHandle = f_ipc_get,
	.cuIpcOpenMemHandle = f_ipc_open,
	.cuIpcCloseMemHandle = f_ipc_close,
	.cuCtxSynchronize = ok0,
	.cuStreamCreate = f_stream_create,
	.cuMemcpyDtoDAsync = f_dtod_async,
	.cuMemcpyHtoDAsync = f_htod_async,
	.cuMemcpyDtoHAsync = f_dtoh_async,
	.cuStreamSynchronize = f_stream_sync,
	.cuMemcpyBatchAsync = f_batch,
	.cuEventCreate = f_event_create,
	.cuEventRecord = f_event_record,
	.cuEventQuery = f_event_query,
	.cuStreamDestroy = f_stream_destroy,
	.cuEventDestroy = f_event_destroy,
	.cuDeviceGetAttribute = f_device_attr,
	.cuMemGetHandleForAddressRange = f_dmabuf,
	.cuModuleLoadData = f_module_load,
	.cuModuleGetFunction = f_module_fn,
	.cuLaunchKernel = f_launch,
	.cuMemAlloc = f_mem_alloc,
	.cuMemFree = f_mem_free,
	.cuStreamWriteValue32 = f_write_value,
};

void fake_cuda_install(void)
{
	xi_cuda_api_override(&fake_api);
}
