/* The immediate counter's boundary (white-box): 2^32 + 1 arrivals of one
 * immediate, injected on the worker as a peer's notices would deliver them,
 * then an expectation of 2^32 - 1 and one of 2. Both fire at once: the
 * counter is 64-bit and keeps what a 32-bit one would have lost past 2^32
 * (it used to stop at 2^32 - 1, so the second expectation never fired).
 * Disarm reports 32 bits, saturated. */
#include <stdint.h>

#include "core/call.h"
#include "core/imm_counters.h"
#include "core/objects.h"
#include "helpers.h"

#define IMM 0xabcu

static int arrive(xfer_engine_t *e, void *arg)
{
	xi_imm_arrived(e->w, IMM, *(uint32_t *)arg);
	return 0;
}

static void inject(xfer_engine_t *e, uint32_t n)
{
	CHECK_OK(xi_engine_call(e, arrive, &n));
}

static void expect_fires(xfer_engine_t *e, uint32_t count, uint64_t ud)
{
	struct xfer_completion c = {.user_data = ud, .timeout_ms = 2000};
	CHECK_OK(xfer_expect_imm(e, IMM, count, &c));
	struct xfer_cqe cqe = t_wait_cqe(e, 5000);
	CHECK(cqe.user_data == ud);
	CHECK_RC(cqe.res, 0);
}

int main(void)
{
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	inject(e, UINT32_MAX); /* 2^32 - 1 */
	inject(e, 2);          /* 2^32 + 1 in all */
	expect_fires(e, UINT32_MAX, 1);
	expect_fires(e, 2, 2); /* the two past 2^32 - 1 were kept */
	uint32_t left = 7;
	CHECK_OK(xfer_imm_disarm(e, IMM, &left));
	CHECK(left == 0);
	/* Disarm of more than 2^32 - 1 arrivals reports 2^32 - 1 and clears all. */
	inject(e, UINT32_MAX);
	inject(e, 5);
	CHECK_OK(xfer_imm_disarm(e, IMM, &left));
	CHECK(left == UINT32_MAX);
	CHECK_OK(xfer_imm_disarm(e, IMM, &left));
	CHECK(left == 0);
	struct xfer_stats st;
	xfer_engine_stats(e, &st);
	CHECK(st.imms_received == 2ull * UINT32_MAX + 7);
	xfer_engine_destroy(e);
	fprintf(stderr, "immediate counter past 2^32: ok\n");
	return 0;
}
