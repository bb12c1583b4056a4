/* A fake CUDA driver for host-only tests of the GPU paths. Its "device
 * memory" is host memory in a memfd, so an IPC handle made in one process
 * opens in another; asynchronous copies run only when their event is
 * queried for the third time (the second, still not ready, where the stream
 * writes a word after them: cuStreamWriteValue32), so a notice sent before
 * the copy finished would deliver an immediate ahead of the data and fail
 * the test. Nothing
 * here says anything about a real GPU or NIC. */
#ifndef XFER_FAKE_CUDA_H
#define XFER_FAKE_CUDA_H

#include <stddef.h>
#include <stdint.h>

struct fake_cuda_counts {
	uint64_t host_allocs;    /* pinned allocations: mirrors, and one page-list ring per module load */
	uint64_t small_host_allocs; /* ... of which below 4 KiB: the copy engine's copy-end words (1 KiB a device) */
	uint64_t module_loads;   /* copy kernels loaded (at an engine's first staged GPU region) */
	uint64_t dtoh;           /* staging copies out of device memory */
	uint64_t htod;           /* copies into device memory (notices, IPC from host) */
	uint64_t dtod;           /* IPC copies between devices */
	uint64_t ipc_opens;
	uint64_t dmabuf_exports;
	uint64_t last_dmabuf_ptr, last_dmabuf_size;
	uint64_t launches; /* copy-kernel launches */
	uint64_t by_kernel[3]; /* ... of the warp, tile and bulk kernels (XFER_GPU_PAGES) */
	uint64_t jobs;     /* calls' copies they carried (several per launch when batched) */
	uint64_t batches;  /* cuMemcpyBatchAsync calls (their copies counted by direction above) */
	uint64_t syncs;    /* cuStreamSynchronize calls: a thread blocked on the GPU */
	uint64_t write_values; /* cuStreamWriteValue32 calls (copy-end words) */
	uint64_t events_done;  /* event queries that found the work done */
	uint64_t events_made;  /* cuEventCreate calls */
};

/* Makes libxfer use the fake driver in this process (before any engine). */
void fake_cuda_install(void);
/* Device memory of device `dev`, zeroed. */
void *fake_cuda_alloc(size_t len, int dev);
void fake_cuda_free(void *p);
/* While on, no asynchronous copy finishes (events stay not ready). */
void fake_cuda_hold_events(int on);
/* While the gate is shut, a kernel launch waits at it (outside every lock),
 * so that a test can queue submissions behind a worker that is known to be
 * busy; fake_cuda_gate_waiting says whether a launch is waiting there. */
void fake_cuda_gate(int shut);
int fake_cuda_gate_waiting(void);
/* Whether devices report dma-buf export (default 1). */
void fake_cuda_set_dmabuf(int on);
struct fake_cuda_counts fake_cuda_counts(void);

#endif
