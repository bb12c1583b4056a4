/* Deferred completion-queue reads while the worker is posting (XFER_CQ_BATCH).
 *
 * On tcp;ofi_rxm a CQ read that finds the queue empty runs the provider's
 * progress (a poll() syscall, 0.3-1 us). A worker fed one operation per turn
 * by the application reads its CQ on every turn: about one progress call per
 * write, where a raw loop that posts a window and then reads makes ~0.1.
 * With XFER_CQ_BATCH=N (N >= 2; unset or 0: every turn reads, as before) a
 * NIC's read is skipped while all of these hold:
 *   - at least N of our requests are outstanding on that NIC (a lone op, a
 *     ping-pong with fewer than N in flight, reads exactly as before);
 *   - fewer than N requests were posted on it since its last read;
 *   - a request was posted on it within the last XFER_CQ_BATCH_NS (default
 *     2 us): once posting stops, the next turn reads, so an application that
 *     waits for completions before submitting more waits at most that long;
 *   - the NIC has a data credit left and no operation waits to be posted
 *     (waiting: the caller's word): what is stuck for credits, contexts or
 *     bounce buffers gets them only from completions, so a read is due.
 * So a read is at most N posts or N x XFER_CQ_BATCH_NS away, which bounds
 * how long the provider's progress (tcp sends queued data from it) and every
 * completion can be held up; deadlines are scanned as before (core/loop.c),
 * and a skipped turn does not count as drained for liveness verdicts. */
#ifndef XFER_CORE_CQ_BATCH_H
#define XFER_CORE_CQ_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tx.h"
#include "core/worker.h"

/* Reads XFER_CQ_BATCH / XFER_CQ_BATCH_NS into w (at setup). */
void xi_cq_batch_init(struct worker *w);

/* Whether NIC n's CQ read can wait this turn (now: the turn's start). Credits
 * come back only from reads, so between two reads of a NIC its credits only
 * fall: the fall since the last read is the number of posts since then. */
static inline bool xi_cq_batch_defer(struct worker *w, unsigned n, uint64_t now, bool waiting)
{
	struct cq_batch *b = &w->cqb;
	if (!b->n)
		return false;
	uint32_t credits = w->tx.credits[n];
	if (credits != b->seen_credits[n]) {
		b->seen_credits[n] = credits;
		b->post_ns[n] = now;
	}
	uint32_t outstanding = w->e->nics[n].tx_size - credits;
	return !waiting && xi_tx_ready(w, n, TX_DATA) && outstanding >= b->n &&
	       b->read_credits[n] - credits < b->n && now - b->post_ns[n] < b->idle_ns;
}

/* NIC n's CQ was read (its completions handled). */
static inline void xi_cq_batch_read(struct worker *w, unsigned n)
{
	w->cqb.read_credits[n] = w->tx.credits[n];
	w->cqb.seen_credits[n] = w->tx.credits[n];
}

#endif
