/* Bounded lock-free queue (Vyukov's sequence-per-cell design). Many threads may
 * push and pop; a full queue refuses instead of growing, which is how the
 * engine turns overload into -EAGAIN. Producers and consumers advance
 * positions on separate cache lines so they do not false-share. */
#ifndef XFER_MPMC_QUEUE_H
#define XFER_MPMC_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XFER_CACHELINE 64

struct mpmc_queue {
	_Alignas(XFER_CACHELINE) atomic_size_t enqueue_pos;
	_Alignas(XFER_CACHELINE) atomic_size_t dequeue_pos;
	_Alignas(XFER_CACHELINE) size_t mask;
	size_t elem_size;
	size_t cell_stride;
	unsigned char *cells;
};

/* capacity is rounded up to a power of two. */
int xi_mpmc_init(struct mpmc_queue *q, size_t capacity, size_t elem_size);
void xi_mpmc_destroy(struct mpmc_queue *q);
bool xi_mpmc_push(struct mpmc_queue *q, const void *elem);
bool xi_mpmc_pop(struct mpmc_queue *q, void *elem);
/* A hint only: may be stale by the time the caller acts on it. */
bool xi_mpmc_empty_hint(const struct mpmc_queue *q);
size_t xi_mpmc_capacity(const struct mpmc_queue *q);

#endif
