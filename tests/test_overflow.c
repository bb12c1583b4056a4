/* Stop without reaping: every accepted submission completes exactly once.
 * The submission queue's depth 4097 is no power of two, so the queue holds
 * 8192; the completions the worker owes at stop (everything queued, plus
 * what it took) must all fit where it keeps them until the application
 * reaps, or some would be dropped (issue 13, item 5). Expectations on one
 * immediate make the load: the first is armed and never fires, every later
 * one fails at once with -EBUSY, and with a completion queue of two entries
 * the worker soon stops taking submissions, so the queue fills. */
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#define DEPTH 4097u
#define MAX_ACCEPT (4u * DEPTH + 64u)

int main(void)
{
	struct xfer_attr a;
	t_attr(&a);
	a.submit_depth = DEPTH;
	a.max_ops = 1;
	a.imm_slots = 1;
	xfer_engine_t *e = t_engine(&a);
	uint64_t accepted = 0, again_since = 0;
	for (;;) {
		CHECK(accepted < MAX_ACCEPT);
		struct xfer_completion c = {.user_data = accepted, .timeout_ms = 600000};
		int rc = xfer_expect_imm(e, 7, 1000000, &c);
		if (rc == -EAGAIN) {
			/* Full for 200 ms: the worker has stopped taking work. */
			if (!again_since)
				again_since = t_now_ms();
			else if (t_now_ms() - again_since > 200)
				break;
			usleep(1000);
			continue;
		}
		CHECK_OK(rc);
		again_since = 0;
		accepted++;
	}
	/* More than the queue's nominal depth is waiting. */
	CHECK(accepted > DEPTH + 1);
	xfer_engine_stop(e);
	unsigned char *seen = calloc(accepted, 1);
	CHECK(seen);
	uint64_t reaped = 0;
	struct xfer_cqe cq[64];
	for (int n; (n = xfer_cq_poll(e, cq, 64)) > 0;) {
		for (int i = 0; i < n; i++) {
			CHECK(cq[i].user_data < accepted && seen[cq[i].user_data]++ == 0);
			CHECK(cq[i].kind == XFER_OP_EXPECT);
			CHECK(cq[i].res == -EBUSY || cq[i].res == -ECANCELED);
		}
		reaped += (uint64_t)n;
	}
	printf("overflow: %llu accepted, %llu reaped after stop\n", (unsigned long long)accepted,
	       (unsigned long long)reaped);
	CHECK(reaped == accepted);
	free(seen);
	xfer_engine_destroy(e);
	return 0;
}
