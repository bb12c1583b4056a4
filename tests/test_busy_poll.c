/* Busy-poll completion mode (attr busy_poll / XFER_BUSY_POLL) on one
 * engine: the worker never sleeps, waits still end at their deadline, a
 * zero timeout still means "look once", and out-of-range values are
 * refused. Data moving in this mode is covered by the provider tests run
 * with XFER_BUSY_POLL=1 (tests/CMakeLists.txt). */
#include <unistd.h>

#include "helpers.h"

static uint64_t sleeps_after_idle(uint32_t busy_poll)
{
	struct xfer_attr a;
	t_attr(&a);
	a.busy_poll = busy_poll;
	a.spin_us = 0; /* the default mode would sleep at once */
	xfer_engine_t *e = t_engine(&a);
	usleep(200000);
	struct xfer_stats st;
	xfer_engine_stats(e, &st);
	xfer_engine_destroy(e);
	return st.worker_sleeps;
}

int main(void)
{
	struct xfer_attr a;
	xfer_engine_t *e = NULL;
	t_attr(&a);
	a.busy_poll = 3;
	CHECK_RC(xfer_engine_create(&a, &e), -EINVAL);

	/* The default mode sleeps when idle; busy-poll never does. */
	CHECK(sleeps_after_idle(0) > 0);
	CHECK(sleeps_after_idle(1) == 0);

	t_attr(&a);
	a.busy_poll = 1;
	e = t_engine(&a);
	struct xfer_cqe c[4];
	t_check_wait_deadlines(e);
	/* A completion queued by the worker ends the spin: a cancel of a tag
	 * nothing carries completes at once, having cut nothing short. */
	struct xfer_completion cc = {.user_data = 77};
	CHECK_OK(xfer_cancel(e, 12345, &cc));
	CHECK_RC(xfer_cq_wait(e, c, 4, 10000), 1);
	CHECK(c[0].user_data == 77 && c[0].kind == XFER_OP_CANCEL && c[0].res == 0);
	xfer_engine_destroy(e);
	return 0;
}
