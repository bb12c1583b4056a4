#include "util/mpmc_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct cell_head {
	atomic_size_t seq;
};

static inline struct cell_head *cell_at(const struct mpmc_queue *q, size_t pos)
{
	return (struct cell_head *)(q->cells + (pos & q->mask) * q->cell_stride);
}

static inline void *cell_data(struct cell_head *c)
{
	return (unsigned char *)c + sizeof(*c);
}

int xi_mpmc_init(struct mpmc_queue *q, size_t capacity, size_t elem_size)
{
	size_t cap = 2;
	if (capacity == 0 || capacity > ((size_t)1 << 30) || elem_size == 0)
		return -EINVAL;
	while (cap < capacity)
		cap <<= 1;
	memset(q, 0, sizeof(*q));
	q->mask = cap - 1;
	q->elem_size = elem_size;
	q->cell_stride = (sizeof(struct cell_head) + elem_size + 7) & ~(size_t)7;
	/* No cell straddles two lines: a small one takes a power of two (a
	 * 16-byte completion's 24-byte cell would cross a line in every third
	 * cell), a large one whole lines. */
	if (q->cell_stride > XFER_CACHELINE)
		q->cell_stride = (q->cell_stride + XFER_CACHELINE - 1) & ~(size_t)(XFER_CACHELINE - 1);
	else
		while (XFER_CACHELINE % q->cell_stride)
			q->cell_stride += 8;
	q->cells = aligned_alloc(XFER_CACHELINE,
				 (cap * q->cell_stride + XFER_CACHELINE - 1) & ~(size_t)(XFER_CACHELINE - 1));
	if (!q->cells)
		return -ENOMEM;
	for (size_t i = 0; i < cap; i++)
		atomic_init(&cell_at(q, i)->seq, i);
	atomic_init(&q->enqueue_pos, 0);
	atomic_init(&q->dequeue_pos, 0);
	return 0;
}

void xi_mpmc_destroy(struct mpmc_queue *q)
{
	free(q->cells);
	q->cells = NULL;
}

void *xi_mpmc_claim(struct mpmc_queue *q, size_t *pos_out)
{
	size_t pos = atomic_load_explicit(&q->enqueue_pos, memory_order_relaxed);
	for (;;) {
		struct cell_head *c = cell_at(q, pos);
		size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		intptr_t dif = (intptr_t)seq - (intptr_t)pos;
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&q->enqueue_pos, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				*pos_out = pos;
				return cell_data(c);
			}
		} else if (dif < 0) {
			return NULL;
		} else {
			pos = atomic_load_explicit(&q->enqueue_pos, memory_order_relaxed);
		}
	}
}

void xi_mpmc_publish(struct mpmc_queue *q, size_t pos)
{
	atomic_store_explicit(&cell_at(q, pos)->seq, pos + 1, memory_order_release);
}

const void *xi_mpmc_take(struct mpmc_queue *q, size_t *pos_out)
{
	size_t pos = atomic_load_explicit(&q->dequeue_pos, memory_order_relaxed);
	for (;;) {
		struct cell_head *c = cell_at(q, pos);
		size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
		intptr_t dif = (intptr_t)seq - (intptr_t)(pos + 1);
		if (dif == 0) {
			if (atomic_compare_exchange_weak_explicit(&q->dequeue_pos, &pos, pos + 1,
								  memory_order_relaxed,
								  memory_order_relaxed)) {
				*pos_out = pos;
				return cell_data(c);
			}
		} else if (dif < 0) {
			return NULL;
		} else {
			pos = atomic_load_explicit(&q->dequeue_pos, memory_order_relaxed);
		}
	}
}

void xi_mpmc_release(struct mpmc_queue *q, size_t pos)
{
	atomic_store_explicit(&cell_at(q, pos)->seq, pos + q->mask + 1, memory_order_release);
}

bool xi_mpmc_push(struct mpmc_queue *q, const void *elem)
{
	size_t pos;
	void *cell = xi_mpmc_claim(q, &pos);
	if (!cell)
		return false;
	memcpy(cell, elem, q->elem_size);
	xi_mpmc_publish(q, pos);
	return true;
}

bool xi_mpmc_pop(struct mpmc_queue *q, void *elem)
{
	size_t pos;
	const void *cell = xi_mpmc_take(q, &pos);
	if (!cell)
		return false;
	memcpy(elem, cell, q->elem_size);
	xi_mpmc_release(q, pos);
	return true;
}

bool xi_mpmc_empty_hint(const struct mpmc_queue *q)
{
	size_t pos = atomic_load_explicit(&((struct mpmc_queue *)q)->dequeue_pos, memory_order_acquire);
	struct cell_head *c = cell_at(q, pos);
	return atomic_load_explicit(&c->seq, memory_order_acquire) != pos + 1;
}

size_t xi_mpmc_capacity(const struct mpmc_queue *q)
{
	return q->mask + 1;
}
