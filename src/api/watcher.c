/* The GPU-progress watcher: a 64-bit word in host memory that GPU kernels
 * can write (pinned and mapped into the device address space when CUDA is
 * present; plain host memory otherwise, for CPU producers), and a thread
 * that polls it and calls back with (old, new) whenever it changes. A kernel
 * that finishes a layer bumps the word; the callback submits that layer's
 * paged writes. Writes to mapped memory are ordinary stores, so they work
 * inside CUDA Graphs. Two modes (xfer.h): spin, on a pinned core of its own,
 * the default for GPU words; hybrid, spinning a while after each change,
 * then short naps. The naps set a 1 us timer slack: with Linux's default of
 * 50 us a "10 us" nanosleep lasts ~60 us, which is what made an idle watcher
 * answer in 42-54 us (issue 14). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/cuda_api.h"
#include "util/log.h"
#include "util/sys.h"
#include "xfer.h"

struct xfer_watcher {
	volatile uint64_t *word; /* its own 64-byte line, from the allocation below */
	uint64_t dev_ptr;
	bool cuda;
	xfer_watch_fn cb;
	void *ctx;
	uint32_t spin_us; /* XFER_SPIN_FOREVER: spin mode */
	atomic_bool stop;
	pthread_t thread;
};

/* Spin mode's core: XFER_WATCHER_CPU, or the last CPU of the process's
 * set (the worker, pinned near its NIC, usually sits low). */
static void pin_spinner(void)
{
	const char *v = getenv("XFER_WATCHER_CPU");
	cpu_set_t set;
	int cpu = -1;
	if (v && *v) {
		char *end;
		long c = strtol(v, &end, 10);
		if (*end || c < -1 || c >= CPU_SETSIZE) {
			xwarn("ignoring XFER_WATCHER_CPU=%s: a CPU number or -1", v);
			c = -2;
		}
		if (c == -1)
			return;
		cpu = (int)c;
	}
	if (cpu < 0 && !sched_getaffinity(0, sizeof(set), &set))
		for (int i = CPU_SETSIZE - 1; i >= 0 && cpu < 0; i--)
			if (CPU_ISSET(i, &set))
				cpu = i;
	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	int ret = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (ret)
		xwarn("cannot pin the watcher to CPU %d: %s", cpu, xfer_strerror(-ret));
	else
		xinfo("watcher spinning on CPU %d", cpu);
}

/* spin_us as the caller gave it to the mode the thread runs in. */
static uint32_t mode_of(uint32_t spin_us, bool gpu_word)
{
	const char *m = getenv("XFER_WATCHER_MODE");
	if (spin_us)
		return spin_us;
	if (m && !strcmp(m, "spin"))
		return XFER_SPIN_FOREVER;
	if (m && !strcmp(m, "hybrid"))
		return 1000;
	if (m && *m)
		xwarn("ignoring XFER_WATCHER_MODE=%s: spin or hybrid", m);
	return gpu_word ? XFER_SPIN_FOREVER : 1000;
}

static void *watch(void *arg)
{
	struct xfer_watcher *w = arg;
	/* The word was zeroed before this thread started: a bump that came first
	 * is still reported, as (0, value). */
	uint64_t last = 0, idle_since = xi_now_ns();
	if (w->spin_us == XFER_SPIN_FOREVER)
		pin_spinner();
	else
		prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
		uint64_t v = __atomic_load_n(w->word, __ATOMIC_ACQUIRE);
		if (v != last) {
			w->cb(w->ctx, last, v);
			last = v;
			idle_since = xi_now_ns();
			continue;
		}
		if (w->spin_us != XFER_SPIN_FOREVER && xi_now_ns() - idle_since > (uint64_t)w->spin_us * 1000) {
			struct timespec ts = {0, 10000};
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
	w->spin_us = mode_of(spin_us, w->cuda);
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
	return w->word;
}

uint64_t xfer_watcher_device_ptr(xfer_watcher_t *w)
{
	return w->dev_ptr;
}
