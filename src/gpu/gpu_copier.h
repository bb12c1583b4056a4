/* The copy thread of a worker's GPU copy engine (XFER_GPU_COPIER=1): it owns
 * the CUDA calls of staging copies, so that the worker's transport loop
 * never pays them. Traced on an H200 (docs/performance.md, branch gpuk6), a
 * 64 KiB staging copy cost the worker ~2.4 us to queue, ~0.35 us for its
 * event and 1.6-2.6 us for the query that found it done, on the same
 * thread that (on xfer's shm) copies every write's bytes itself; the
 * staged 64 KiB row stayed near 0.6x host memory.
 *
 * The worker (gpu_copy.c) hands it whole tracked copies made only of
 * pieces between device memory and pinned host memory (a source's bytes
 * into its mirror, a target's landing out of it) through a single-producer
 * ring: a plain store of the command and a release of the ring's tail, no
 * lock, no allocation, a system call only to wake the thread after it went
 * idle. The thread issues them on its own stream per device (the copies
 * of one pass through the ring share one event), polls their ends, and
 * publishes each command's result in a word the worker reads
 * (xi_copier_done), keyed by a sequence number, so that a result can never
 * be taken for a later copy that reuses the slot. It spins while copies are
 * queued or in flight, and for XI_COPIER_SPIN_NS after, then sleeps. */
#ifndef XFER_GPU_COPIER_H
#define XFER_GPU_COPIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu/cuda_api.h"

struct xi_copier;

/* Pieces of one command at most: single writes' staging and landings are
 * one piece; anything with more stays on the worker. */
#define XI_COPIER_PIECES 4
/* Commands in flight at most: as many as the worker's copies ring. */
#define XI_COPIER_RING 256u

struct xi_copier_piece {
	uint64_t dev; /* device address */
	void *host;   /* pinned host memory (to_host: the destination) */
	size_t len;
	bool to_host; /* device to host, else host to device */
};

struct xi_copier_cmd {
	uint32_t seq;  /* never 0; xi_copier_done's key */
	uint32_t slot; /* the worker's ring slot, < XI_COPIER_RING */
	int dev;
	uint32_t n;
	struct xi_copier_piece p[XI_COPIER_PIECES];
};

/* The thread, started; NULL when it cannot be (the caller copies itself).
 * words: the stream writes a word after each pass's copies, which the
 * thread reads instead of querying the event (gpu_copy.c's copy-end words). */
struct xi_copier *xi_copier_start(const struct cuda_api *c, bool words);
/* On the worker, with dev's context current (xi_gpu_prepare, at a GPU
 * region's registration), before any command for dev: the thread's stream,
 * events and words for dev, made here rather than at a first copy (none of
 * those calls then runs while an application's kernel may wait on the
 * copy). 0, or -EIO: then no command for dev may be pushed. */
int xi_copier_prepare(struct xi_copier *k, int dev);
/* Joins it. Commands not yet issued are dropped (the worker forgot them);
 * copies issued finish first, in the driver. */
void xi_copier_stop(struct xi_copier *k);
/* The worker only. false when the ring is full (never, while the worker
 * keeps at most XI_COPIER_RING copies in flight). */
bool xi_copier_push(struct xi_copier *k, const struct xi_copier_cmd *cmd);
/* The worker only: 0 while command seq of slot runs, 1 done, -EIO failed. */
int xi_copier_done(const struct xi_copier *k, uint32_t slot, uint32_t seq);
/* Queues piece p on stream st (whichever thread owns it): 0 or -EIO. */
int xi_copier_piece_issue(const struct cuda_api *c, const struct xi_copier_piece *p, CUstream st);

#endif
