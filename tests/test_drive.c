/* busy_poll 2 (core/drive.c): a waiting application thread runs the
 * worker's turns. On one engine: waits still end at their deadline and a
 * zero timeout still means "look once"; every completion reaches exactly
 * one waiter when several threads wait at once; the worker takes its
 * turns back when the application stops waiting (a submission then
 * completes without a wait), and the engine stops while a thread waits.
 * Data moving in this mode: the provider tests run with XFER_BUSY_POLL=2
 * (tests/CMakeLists.txt). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#define N_CANCELS 4000
#define N_WAITERS 3

static xfer_engine_t *drive_engine(void)
{
	struct xfer_attr a;
	t_attr(&a);
	a.busy_poll = 2;
	return t_engine(&a);
}

static void cancel_one(xfer_engine_t *e, uint64_t ud)
{
	struct xfer_completion cc = {.user_data = ud};
	int ret;
	while ((ret = xfer_cancel(e, 1000000 + ud, &cc)) == -EAGAIN)
		sched_yield();
	CHECK_OK(ret);
}

struct shared {
	xfer_engine_t *e;
	atomic_uint got;
	atomic_uchar seen[N_CANCELS];
	atomic_uint dup;
};

static void *waiter(void *arg)
{
	struct shared *s = arg;
	struct xfer_cqe c[8];
	while (atomic_load(&s->got) < N_CANCELS) {
		int n = xfer_cq_wait(s->e, c, 8, 20);
		if (n == -ETIMEDOUT)
			continue;
		if (n < 0)
			break;
		for (int i = 0; i < n; i++) {
			uint64_t ud = c[i].user_data;
			if (ud >= N_CANCELS || c[i].kind != XFER_OP_CANCEL || atomic_exchange(&s->seen[ud], 1))
				atomic_fetch_add(&s->dup, 1);
			atomic_fetch_add(&s->got, 1);
		}
	}
	return NULL;
}

struct stopper {
	xfer_engine_t *e;
	int ret;
	uint64_t took_ms;
};

static void *wait_through_stop(void *arg)
{
	struct stopper *s = arg;
	struct xfer_cqe c[4];
	uint64_t t0 = t_now_ms();
	s->ret = xfer_cq_wait(s->e, c, 4, 3000);
	s->took_ms = t_now_ms() - t0;
	return NULL;
}

int main(void)
{
	xfer_engine_t *e = drive_engine();
	struct xfer_cqe c[4];

	/* Deadlines hold, and nothing completes twice. */
	t_check_wait_deadlines(e);
	cancel_one(e, 7);
	CHECK_RC(xfer_cq_wait(e, c, 4, 10000), 1);
	CHECK(c[0].user_data == 7 && c[0].kind == XFER_OP_CANCEL && c[0].res == 0);
	CHECK_RC(xfer_cq_wait(e, c, 4, 20), -ETIMEDOUT);

	/* The waits above ran the turns; nobody waits now. A submission still
	 * completes: the worker takes its turns back. */
	cancel_one(e, 8);
	int n = 0;
	for (uint64_t end = t_now_ms() + 5000; n == 0 && t_now_ms() < end;)
		n = xfer_cq_poll(e, c, 4);
	CHECK(n == 1 && c[0].user_data == 8);

	/* Several waiting threads, one submitter: each completion once. */
	struct shared *s = calloc(1, sizeof(*s));
	CHECK(s != NULL);
	s->e = e;
	pthread_t th[N_WAITERS];
	for (int i = 0; i < N_WAITERS; i++)
		CHECK(pthread_create(&th[i], NULL, waiter, s) == 0);
	for (uint64_t i = 0; i < N_CANCELS; i++) {
		cancel_one(e, i);
		if ((i & 255) == 0)
			usleep(100); /* now and then nobody drives for a while */
	}
	for (int i = 0; i < N_WAITERS; i++)
		pthread_join(th[i], NULL);
	CHECK(atomic_load(&s->dup) == 0);
	CHECK(atomic_load(&s->got) == N_CANCELS);
	for (int i = 0; i < N_CANCELS; i++)
		CHECK(atomic_load(&s->seen[i]) == 1);
	free(s);

	/* The worker never slept. */
	struct xfer_stats st;
	xfer_engine_stats(e, &st);
	CHECK(st.worker_sleeps == 0);

	/* Stop while a thread waits (and may hold the turns): the stop ends,
	 * and so does the wait, by its deadline at the latest. */
	struct stopper sp = {.e = e};
	pthread_t w;
	CHECK(pthread_create(&w, NULL, wait_through_stop, &sp) == 0);
	usleep(50000);
	xfer_engine_stop(e);
	pthread_join(w, NULL);
	CHECK(sp.ret == -ETIMEDOUT || sp.ret >= 0);
	CHECK(sp.took_ms < 10000);
	xfer_engine_destroy(e);
	return 0;
}
