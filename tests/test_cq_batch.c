/* XFER_CQ_BATCH's rule (core/cq_batch.h) on a worker with one NIC of 64
 * credits, posts simulated by taking credits: a NIC with fewer than N
 * requests outstanding is read every turn; otherwise reads wait for N posts
 * or for posting to stop for XFER_CQ_BATCH_NS, unless the NIC is out of
 * credits or an operation waits to be posted; unset, every turn reads. */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "core/cq_batch.h"
#include "core/objects.h"

#define TX 64

static void setup(struct worker *w, xfer_engine_t *e, const char *batch)
{
	memset(w, 0, sizeof(*w));
	memset(e, 0, sizeof(*e));
	e->nnics = 1;
	e->nics[0].tx_size = TX;
	w->e = e;
	w->tx.credits[0] = TX;
	if (batch)
		setenv("XFER_CQ_BATCH", batch, 1);
	else
		unsetenv("XFER_CQ_BATCH");
	setenv("XFER_CQ_BATCH_NS", "2000", 1);
	xi_cq_batch_init(w);
}

/* An operation waits in the posting FIFO (for credits, contexts, buffers). */
static bool waiting;

/* The turn at `now`: posts `posts` requests, then reads unless deferred.
 * Returns whether it read. */
static bool turn(struct worker *w, uint64_t now, unsigned posts)
{
	w->tx.credits[0] -= posts;
	if (xi_cq_batch_defer(w, 0, now, waiting))
		return false;
	xi_cq_batch_read(w, 0);
	return true;
}

int main(void)
{
	static xfer_engine_t e;
	struct worker w;

	/* Off (unset, 0, 1, malformed): every turn reads, 64 in flight or not. */
	const char *off[] = {NULL, "0", "1", "8x", "-8"};
	for (unsigned i = 0; i < sizeof(off) / sizeof(off[0]); i++) {
		setup(&w, &e, off[i]);
		uint64_t now = 1000000;
		for (unsigned k = 0; k < TX; k++, now += 100)
			CHECK(turn(&w, now, 1));
	}

	/* A lone op, and up to N-1 in flight: read every turn. */
	setup(&w, &e, "8");
	uint64_t now = 1000000;
	for (unsigned k = 0; k < 7; k++, now += 100)
		CHECK(turn(&w, now, 1));

	/* From N outstanding on: a read after every N posts, one post a turn. */
	setup(&w, &e, "8");
	now = 1000000;
	CHECK(turn(&w, now, 8)); /* 8 outstanding, read at once (first sight) */
	unsigned reads = 0;
	for (unsigned k = 0; k < 40; k++) {
		now += 100;
		reads += turn(&w, now, 1);
	}
	CHECK(reads == 5);

	/* Posting stops: a read within XFER_CQ_BATCH_NS of the last post. */
	now += 1900;
	CHECK(!turn(&w, now, 0));
	now += 200;
	CHECK(turn(&w, now, 0));
	/* And every idle turn after it reads (nothing posted since). */
	now += 10;
	CHECK(turn(&w, now, 0));

	/* Completions bring the NIC below N outstanding: read every turn. */
	w.tx.credits[0] = TX - 3;
	xi_cq_batch_read(&w, 0);
	for (unsigned k = 0; k < 4; k++) {
		now += 100;
		CHECK(turn(&w, now, 1));
	}

	/* A burst of N or more posts in one turn: read in that turn. */
	setup(&w, &e, "8");
	now = 1000000;
	CHECK(turn(&w, now, 20));
	now += 100;
	CHECK(!turn(&w, now, 1));
	now += 100;
	CHECK(turn(&w, now, 9));

	/* Out of credits, or work waiting for what completions free: read. */
	setup(&w, &e, "8");
	now = 1000000;
	CHECK(turn(&w, now, TX - 4));
	now += 100;
	CHECK(!turn(&w, now, 3));
	now += 100;
	CHECK(turn(&w, now, 1)); /* the last credit: 4 posts since, but none left */
	w.tx.credits[0] = 16;
	xi_cq_batch_read(&w, 0);
	now += 100;
	CHECK(!turn(&w, now, 1));
	waiting = true;
	now += 100;
	CHECK(turn(&w, now, 1));
	waiting = false;
	now += 100;
	CHECK(!turn(&w, now, 1));
	return 0;
}
