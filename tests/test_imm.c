/* Immediate counters: 1,000 immediates from 4 concurrent submitter threads
 * fire an expectation exactly once; arrivals before arming count; the excess
 * carries over; deadlines and disarm report what arrived. The initiator's
 * completions are reaped by two threads at once, each exactly once. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define THREADS 4
#define PER_THREAD 250
#define TOTAL (THREADS * PER_THREAD)

struct ctx {
	xfer_engine_t *e;
	xfer_peer_t peer;
	xfer_rmr_t *rmr;
	uint32_t imm;
	int tid;
};

/* Half the immediates go as immediate-only writes, half as zero-length writes
 * into a region: both must count the same. */
static void *submitter(void *arg)
{
	struct ctx *c = arg;
	for (int i = 0; i < PER_THREAD; i++) {
		struct xfer_completion comp = {.user_data = (uint64_t)c->tid * PER_THREAD + (uint64_t)i};
		int rc;
		do {
			if (i & 1) {
				struct xfer_write w = {.dst = c->rmr, .dst_off = 5, .len = 0, .imm = c->imm,
						       .flags = XFER_F_IMM};
				rc = xfer_write(c->e, &w, &comp);
			} else {
				rc = xfer_write_imm(c->e, c->peer, c->imm, &comp);
			}
			if (rc == -EAGAIN)
				usleep(5);
		} while (rc == -EAGAIN);
		CHECK_OK(rc);
	}
	return NULL;
}

static atomic_int reaped;
static atomic_uchar seen[TOTAL];

static void *reaper(void *arg)
{
	xfer_engine_t *e = arg;
	struct xfer_cqe c[16];
	while (atomic_load(&reaped) < TOTAL) {
		int n = xfer_cq_wait(e, c, 16, 100);
		if (n == -ETIMEDOUT)
			continue;
		CHECK(n > 0);
		for (int i = 0; i < n; i++) {
			CHECK_RC(c[i].res, 0);
			CHECK(c[i].user_data < TOTAL);
			CHECK(atomic_fetch_add(&seen[c[i].user_data], 1) == 0);
		}
		atomic_fetch_add(&reaped, n);
	}
	return NULL;
}

static void burst(xfer_engine_t *e, xfer_peer_t peer, xfer_rmr_t *rmr, uint32_t imm)
{
	pthread_t th[THREADS], rp[2];
	struct ctx cx[THREADS];
	atomic_store(&reaped, 0);
	for (int i = 0; i < TOTAL; i++)
		atomic_store(&seen[i], 0);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&rp[i], NULL, reaper, e) == 0);
	for (int i = 0; i < THREADS; i++) {
		cx[i] = (struct ctx){e, peer, rmr, imm, i};
		CHECK(pthread_create(&th[i], NULL, submitter, &cx[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(rp[i], NULL);
	CHECK(atomic_load(&reaped) == TOTAL);
}

static void send_n(xfer_engine_t *e, xfer_peer_t peer, uint32_t imm, int n)
{
	for (int i = 0; i < n; i++)
		CHECK_OK(xfer_write_imm(e, peer, imm, NULL));
	for (int i = 0; i < n; i++)
		CHECK_RC(t_wait_cqe(e, 30000).res, 0);
}

static int initiator(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	xfer_rmr_t *rmr = t_recv_rmr(e, peer, fd);

	send_n(e, peer, 1, 10); /* phase 1: arrivals before arming */
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2); /* phase 2: armed, then the burst */
	burst(e, peer, rmr, 2);
	CHECK(t_recv_u64(fd) == 3); /* phase 3: arming races the burst */
	burst(e, peer, rmr, 3);
	CHECK(t_recv_u64(fd) == 4); /* phase 4: partial count, then disarm */
	send_n(e, peer, 4, 5);
	t_send_u64(fd, 4);
	CHECK(t_recv_u64(fd) == 5);
	xfer_rmr_free(rmr);
	xfer_engine_destroy(e);
	return 0;
}

static void expect_none(xfer_engine_t *e, uint64_t ms)
{
	struct xfer_cqe c;
	CHECK_RC(xfer_cq_wait(e, &c, 1, ms), -ETIMEDOUT);
}

static int target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	(void)t_connect(e, fd);
	static uint8_t region[64];
	memset(region, 0x3C, sizeof(region));
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, region, sizeof(region), &mr));
	t_send_desc(fd, mr);
	struct xfer_cqe c;

	/* 1: ten arrived before arming; expecting ten fires at once. */
	CHECK(t_recv_u64(fd) == 1);
	struct xfer_completion done = {.user_data = 1};
	CHECK_OK(xfer_expect_imm(e, 1, 10, &done));
	c = t_wait_cqe(e, 10000);
	CHECK(c.user_data == 1 && c.res == 0 && c.kind == XFER_OP_EXPECT);
	/* Nothing is left: one more times out, exactly once. */
	struct xfer_completion shortd = {.user_data = 11, .timeout_ms = 200};
	CHECK_OK(xfer_expect_imm(e, 1, 1, &shortd));
	c = t_wait_cqe(e, 10000);
	CHECK(c.user_data == 11 && c.res == -ETIMEDOUT);
	expect_none(e, 300);

	/* 2: armed first; 1,000 from four threads fire it once. */
	struct xfer_completion d2 = {.user_data = 2};
	CHECK_OK(xfer_expect_imm(e, 2, TOTAL, &d2));
	struct xfer_completion dup = {.user_data = 22};
	CHECK_OK(xfer_expect_imm(e, 2, 5, &dup)); /* already armed */
	c = t_wait_cqe(e, 10000);
	CHECK(c.user_data == 22 && c.res == -EBUSY);
	t_send_u64(fd, 2);
	c = t_wait_cqe(e, 60000);
	CHECK(c.user_data == 2 && c.res == 0);
	expect_none(e, 300);
	uint32_t left = 99;
	CHECK_OK(xfer_imm_disarm(e, 2, &left));
	CHECK(left == 0);

	/* 3: arm for 600 while the burst lands, then 400 more: the excess of the
	 * first carries over, and both fire once. */
	t_send_u64(fd, 3);
	usleep(2000);
	struct xfer_completion d3 = {.user_data = 3};
	CHECK_OK(xfer_expect_imm(e, 3, 600, &d3));
	c = t_wait_cqe(e, 60000);
	CHECK(c.user_data == 3 && c.res == 0);
	struct xfer_completion d33 = {.user_data = 33};
	CHECK_OK(xfer_expect_imm(e, 3, TOTAL - 600, &d33));
	c = t_wait_cqe(e, 60000);
	CHECK(c.user_data == 33 && c.res == 0);
	expect_none(e, 300);
	CHECK_OK(xfer_imm_disarm(e, 3, &left));
	CHECK(left == 0);

	/* 4: five of ten arrive; disarm cancels the expectation and says five. */
	t_send_u64(fd, 4);
	CHECK(t_recv_u64(fd) == 4);
	struct xfer_completion d4 = {.user_data = 4};
	CHECK_OK(xfer_expect_imm(e, 4, 10, &d4));
	usleep(100000);
	CHECK(xfer_cq_poll(e, &c, 1) == 0);
	CHECK_OK(xfer_imm_disarm(e, 4, &left));
	CHECK(left == 5);
	c = t_wait_cqe(e, 10000);
	CHECK(c.user_data == 4 && c.res == -ECANCELED);
	CHECK_OK(xfer_imm_disarm(e, 4, &left));
	CHECK(left == 0);
	CHECK_RC(xfer_expect_imm(e, 5, 0, NULL), -EINVAL);

	/* Zero-length writes did not touch the region. */
	for (size_t i = 0; i < sizeof(region); i++)
		CHECK(region[i] == 0x3C);
	struct xfer_stats st;
	xfer_engine_stats(e, &st);
	CHECK(st.imms_received == 10 + 2 * TOTAL + 5);
	CHECK(st.imms_dropped == 0);
	t_send_u64(fd, 5);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	return 0;
}

int main(void)
{
	return t_run_pair(initiator, target, NULL);
}
