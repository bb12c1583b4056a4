/* The GPU-progress watcher: a 64-bit word in host memory that GPU kernels
 * can write (pinned and mapped into the device address space when CUDA is
 * present; plain host memory otherwise, for CPU producers), and a thread
 * that polls it and calls back with (old, new) whenever it changes. A kernel
 * that finishes a layer bumps the word; the callback submits that layer's
 * paged writes. Writes to mapped memory are ordinary stores, so they work
 * inside CUDA Graphs. The thread spins while the word moves and backs off to
 * short sleeps when it does not. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/cuda_api.h"
#include "util/sys.h"
#include "xfer.h"

struct xfer_watcher {
	volatile uint64_t *word; /* its own 64-byte line, from the allocation below */
	uint64_t dev_ptr;
	bool cuda;
	xfer_watch_fn cb;
	void *ctx;
	uint32_t spin_us;
	atomic_bool stop;
	pthread_t thread;
};

static void *watch(void *arg)
{
	struct xfer_watcher *w = arg;
	/* The word was zeroed before this thread started: a bump that came first
	 * is still reported, as (0, value). */
	uint64_t last = 0, idle_since = xi_now_ns();
	while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
		uint64_t v = __atomic_load_n(w->word, __ATOMIC_ACQUIRE);
		if (v != last) {
			w->cb(w->ctx, last, v);
			last = v;
			idle_since = xi_now_ns();
			continue;
		}
		if (xi_now_ns() - idle_since > (uint64_t)w->spin_us * 1000) {
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
		}
		xi_cpu_relax();
	}
	return NULL;
}

int xfer_watcher_create(xfer_watch_fn cb, void *ctx, uint32_t spin_us, xfer_watcher_t **out)
{
	if (!cb || !out)
		return -EINVAL;
	struct xfer_watcher *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	const struct cuda_api *c = xi_cuda_get();
	void *mem = NULL;
	if (c && !xi_cuda_use_device(0) &&
	    !c->cuMemHostAlloc(&mem, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)) {
		CUdeviceptr d = 0;
		if (c->cuMemHostGetDevicePointer(&d, mem, 0)) {
			c->cuMemFreeHost(mem);
			mem = NULL;
		} else {
			w->dev_ptr = d;
			w->cuda = true;
		}
	}
	if (!mem)
		mem = aligned_alloc(64, 64);
	if (!mem) {
		free(w);
		return -ENOMEM;
	}
	memset(mem, 0, 64);
	w->word = mem;
	w->cb = cb;
	w->ctx = ctx;
	w->spin_us = spin_us ? spin_us : 1000;
	int ret = pthread_create(&w->thread, NULL, watch, w);
	if (ret) {
		if (w->cuda)
			c->cuMemFreeHost(mem);
		else
			free(mem);
		free(w);
		return -ret;
	}
	*out = w;
	return 0;
}

void xfer_watcher_destroy(xfer_watcher_t *w)
{
	if (!w)
		return;
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	if (w->cuda)
		xi_cuda_get()->cuMemFreeHost((void *)w->word);
	else
		free((void *)w->word);
	free(w);
}

volatile uint64_t *xfer_watcher_word(xfer_watcher_t *w)
{
	return w ? w->word : NULL;
}

uint64_t xfer_watcher_device_ptr(xfer_watcher_t *w)
{
	return w ? w->dev_ptr : 0;
}
