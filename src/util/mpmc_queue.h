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

/* capacity is rounded up to a power of two. No cell straddles two cache
 * lines; a cell larger than a line starts on one, so that an element written short (xi_mpmc_claim) keeps its
 * first bytes on the line that carries the cell's sequence number. */
int xi_mpmc_init(struct mpmc_queue *q, size_t capacity, size_t elem_size);
void xi_mpmc_destroy(struct mpmc_queue *q);
bool xi_mpmc_push(struct mpmc_queue *q, const void *elem);
bool xi_mpmc_pop(struct mpmc_queue *q, void *elem);
/* In two steps, for elements of varying length: claim a cell (NULL: the
 * queue is full), write up to elem_size bytes into it, publish it. Only the
 * bytes written travel between cores; the reader must know how many there
 * are from the element's first bytes. Likewise take (NULL: empty), read,
 * release. Between the two steps the cell is the caller's alone; cells
 * behind it wait (a reader sees the queue empty there). */
void *xi_mpmc_claim(struct mpmc_queue *q, size_t *pos);
void xi_mpmc_publish(struct mpmc_queue *q, size_t pos);
const void *xi_mpmc_take(struct mpmc_queue *q, size_t *pos);
void xi_mpmc_release(struct mpmc_queue *q, size_t pos);
/* A hint only: may be stale by the time the caller acts on it. */
bool xi_mpmc_empty_hint(const struct mpmc_queue *q);
size_t xi_mpmc_capacity(const struct mpmc_queue *q);

#endif
