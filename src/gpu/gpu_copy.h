/* The GPU copy engine of one worker: its CUDA streams (one per device), the
 * ring of copies in flight with their events, IPC mappings, and the host
 * mirror copies of staged regions. It takes plain device addresses and
 * opaque contexts and knows nothing of operations: finished copies come
 * back from xi_gpu_poll as {ctx, status} events, the way a NIC reports its
 * completions. It exists only where the CUDA driver loads (xi_gpu_create
 * returns NULL otherwise), and only its worker thread uses it.
 *
 * Staging copies are tracked copies too: a source's into its mirror
 * (xi_gpu_copy_add_dtoh, or a gather kernel into the mirror's mapped
 * address: xi_gpu_host_dev), a target's from its mirror to the GPU (a
 * scatter kernel, or host-to-device pieces). The synchronous xi_gpu_stage_*
 * calls remain only for a target whose landings are all in use.
 *
 * Paged copies between GPUs, and contiguous ones up to XFER_GPU_KERNEL_MAX
 * bytes (default XI_GPU_KERNEL_MAX_DEFAULT; larger ones go to the copy
 * engine, which is faster there), run on the embedded copy kernel
 * (gpu/fatbin.h) where it loads; XFER_GPU_KERNEL=0 turns it off. The calls
 * a worker posts in one turn share one launch and one event (xi_gpu_flush
 * launches them; XFER_GPU_BATCH=0: one launch per call). The kernel reads its
 * page lists from pinned host memory below 512 MiB per call and from a
 * device copy of them above (XFER_GPU_INDEX=mapped|device forces one).
 * A copy's end is seen in a word its stream writes after it
 * (cuStreamWriteValue32), read by the poll, the event then only catching
 * failures; XFER_GPU_DONE=event, or a driver without stream writes: by
 * querying its event. XFER_GPU_TRACE times every stage (gpu/gpu_trace.h). */
#ifndef XFER_GPU_COPY_H
#define XFER_GPU_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XI_GPU_RING 256 /* copies in flight; beyond that, callers wait */
#define XI_GPU_BATCH 512
#define XI_GPU_DEVS 16
#define XI_GPU_MAX_CTAS 1024u /* a launch's grid at most */
/* Contiguous copies up to this go by kernel: below it a launch shared by the
 * calls of a turn beats one copy-engine copy and event each. */
#define XI_GPU_KERNEL_MAX_DEFAULT (16ull << 20)
/* Ops staging at most this much start it early by default (gpu_copy.c). */
#define XI_GPU_STAGE_AHEAD_MAX (256ull << 10)

struct xi_gpu;

struct xi_gpu_event {
	void *ctx;  /* what xi_gpu_copy_end was given */
	int status; /* 0 or -EIO */
};

struct xi_gpu *xi_gpu_create(void);
/* On the owning thread as it exits: streams and events. Copies still running
 * finish first, in the driver. */
void xi_gpu_destroy(struct xi_gpu *g);

/* Synchronous staging on device dev's stream (the fallback above). */
int xi_gpu_stage_dtoh(struct xi_gpu *g, int dev, void *dst, uint64_t src, size_t len);
int xi_gpu_stage_htod(struct xi_gpu *g, int dev, uint64_t dst, const void *src, size_t len);
int xi_gpu_stage_wait(struct xi_gpu *g, int dev);

/* Opens a peer's CUDA IPC handle (64 bytes) in this process: 0 with *ptr
 * set, or -EIO when it will not open. xi_gpu_ipc_close may run on any thread. */
int xi_gpu_ipc_open(struct xi_gpu *g, int dev, const uint8_t *handle, uint64_t *ptr);
void xi_gpu_ipc_close(uint64_t ptr);

/* One tracked copy: begin on device dev (0, -EAGAIN when XI_GPU_RING copies
 * are in flight, -XFER_ENOGPU), add its pieces, then end, which records the
 * event that xi_gpu_poll reports with ctx. A piece that fails (-EIO) leaves
 * the copy unfinished: the caller fails its work and does not call end. */
int xi_gpu_copy_begin(struct xi_gpu *g, int dev);
/* src_host NULL: device to device from src, else host to device. */
int xi_gpu_copy_add(struct xi_gpu *g, uint64_t dst, uint64_t src, const void *src_host, size_t len);
/* Host to device from a registered mirror (pinned memory known to the
 * driver): a landing. By default the landings of one worker turn go to the
 * driver as one batched copy with one event (xi_gpu_flush), like kernel
 * jobs; XFER_GPU_LAND=each: one copy-engine copy and event apiece. */
int xi_gpu_copy_add_land(struct xi_gpu *g, uint64_t dst, const void *mirror, size_t len);
/* Device to (pinned) host memory: a staging copy the worker does not wait for. */
int xi_gpu_copy_add_dtoh(struct xi_gpu *g, void *dst_host, uint64_t src, size_t len);
/* Device to device, handed to the driver in batches (one call costs about
 * 1.2 us of this thread, which would cap 16 KiB pages near 6 GB/s). */
int xi_gpu_copy_add_batched(struct xi_gpu *g, uint64_t dst, uint64_t src, size_t len);
/* Device to device, contiguous: by the copy kernel up to XFER_GPU_KERNEL_MAX
 * bytes (16-byte aligned), else by the copy engine. */
int xi_gpu_copy_dtod(struct xi_gpu *g, uint64_t dst, uint64_t src, size_t len);
/* Ends the copy being built. One whose work is a kernel job gets its event
 * when its batch launches (xi_gpu_flush), so its caller may end several
 * copies before the GPU sees any. */
int xi_gpu_copy_end(struct xi_gpu *g, void *ctx);
/* The device address of mapped pinned host memory (a region's mirror),
 * for kernels that gather into it or scatter from it: 0 or -EIO. */
int xi_gpu_host_dev(struct xi_gpu *g, void *host, uint64_t *dev);
/* Launches the kernel jobs and batched landings of the copies ended so
 * far: the worker calls it once it has posted what it could in a turn, and
 * after it has taken what its NICs returned (notices start landings). */
void xi_gpu_flush(struct xi_gpu *g);

/* Pages of a paged copy between device addresses (the destination may be a
 * peer's IPC mapping): page src_pages[i] at src_base + page * src_stride to
 * dst_pages[i] likewise. */
struct xi_gpu_pages {
	uint64_t src_base, src_stride, dst_base, dst_stride, page_len;
	const uint32_t *src_pages, *dst_pages; /* host memory, read before the call returns */
	uint32_t npages;
};
/* Adds every page to the copy being built: one job of the gather/scatter
 * kernel's next launch (its page lists copied to a ring the kernel reads,
 * freed when the copy's event fires), or, where the kernels did not load,
 * the copy engine page by page. 0, -EAGAIN (the page-list ring is full: retry once copies
 * finish), or -EIO. */
int xi_gpu_copy_pages(struct xi_gpu *g, const struct xi_gpu_pages *p);
/* Whether paged copies on dev run as kernels: 1, 0 (copy engine), for tests
 * and benchmarks' labels. Loads the kernels on first use. */
int xi_gpu_kernels_on(struct xi_gpu *g, int dev);
/* The stream and copy kernels of dev made now (at GPU registration), not at
 * first use: see gpu_copy.c. Best effort: a failure is the one the first use
 * would meet (kernels off: logged once, copies by the copy engine). */
void xi_gpu_prepare(struct xi_gpu *g, int dev);

/* Finished copies, oldest first, at most max; stops at the first running one. */
int xi_gpu_poll(struct xi_gpu *g, struct xi_gpu_event *ev, int max);
/* The most bytes an op may stage for the worker to start its source
 * staging while it is still queued behind one that waits (core/path.c):
 * XI_GPU_STAGE_AHEAD_MAX by default (and =small), XFER_GPU_STAGE_AHEAD=1
 * every op, =0 none. */
uint64_t xi_gpu_stage_ahead(const struct xi_gpu *g);
/* By default (XFER_GPU_STAGE_AHEAD=next; not with =small, =1 or =0):
 * besides those, the op right behind the FIFO head stages whatever its
 * size, also while the head is being posted. */
bool xi_gpu_stage_next(const struct xi_gpu *g);
/* A CUDA context was made current for it (its first copy, staging or
 * mapping): from then on its turns stay on the worker (core/drive.c). */
bool xi_gpu_bound(const struct xi_gpu *g);
uint32_t xi_gpu_pending(const struct xi_gpu *g);
/* Stop: copies still in flight are no longer reported. */
void xi_gpu_forget(struct xi_gpu *g);

#endif
