/* kv-bench-inbox: what the KV module's completion path costs the engine's
 * worker, and how many completions per second its control thread takes.
 *
 * A thread stands in for the worker: it calls the completion callback the
 * module gives every submission, n times, keeping at most as many in flight
 * as the module has credits (as submissions would). The module's control
 * thread hands each to a handler that counts it. Printed: completions per
 * second through the module, and the CPU time the calling thread spent per
 * completion (what the worker would lose) next to the whole process's.
 * No data moves; the engine exists only because the module makes one.
 *
 *   kv-bench-inbox [n]     (default 2,000,000; $XFER_TEST_PROVIDER as the tests) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kv_core.h"
#include "kv_test.h"

struct bench {
	struct kv_core core;
	_Atomic uint64_t handled;
	uint64_t n, window;
	double thread_cpu_s;
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t process_cpu_ns(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

static void on_item(void *owner, const struct kv_item *it)
{
	struct bench *b = owner;
	CHECK(it->kind == KV_IT_CQE && it->cqe.kind == XFER_OP_WRITE);
	atomic_fetch_add_explicit(&b->handled, 1, memory_order_release);
}

static uint64_t on_tick(void *owner, uint64_t now)
{
	(void)owner;
	return now + 1000000000ull;
}

static void *worker(void *arg)
{
	struct bench *b = arg;
	struct xfer_completion c;
	/* The target every module submission carries (one credit, given back
	 * as each is handled, so the window stands in for the credits). */
	pthread_mutex_lock(&b->core.mu);
	CHECK(xi_kv_inbox_credit(&b->core.in, &c, 0, 0, 0));
	xi_kv_inbox_settle(&b->core.in, -1);
	pthread_mutex_unlock(&b->core.mu);
	uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (uint64_t i = 0; i < b->n; i++) {
		/* Every credit out: a submission would wait. Sleeping (not
		 * spinning) keeps the wait out of this thread's CPU time. */
		while (i - atomic_load_explicit(&b->handled, memory_order_acquire) >= b->window)
			usleep(20);
		struct xfer_cqe cqe = {.user_data = i, .kind = XFER_OP_WRITE};
		c.cb(c.cb_ctx, &cqe);
	}
	b->thread_cpu_s = (double)(clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e9;
	return NULL;
}

int main(int argc, char **argv)
{
	struct bench *b = calloc(1, sizeof(*b));
	CHECK(b);
	b->n = argc > 1 ? strtoull(argv[1], NULL, 10) : 2000000;
	CHECK(b->n > 0);
	struct xfer_attr a;
	kvt_attr(&a, 0);
	b->core.owner = b;
	b->core.on_item = on_item;
	b->core.on_tick = on_tick;
	int rc = xi_kv_core_start(&b->core, &a);
	if (rc == -XFER_ENOPROV || rc == -ENODEV) {
		fprintf(stderr, "SKIP: provider %s not available\n", a.provider);
		return T_SKIP;
	}
	CHECK_OK(rc);
	b->window = b->core.in.credits;
	uint64_t t0 = clock_ns(CLOCK_MONOTONIC), c0 = process_cpu_ns();
	pthread_t t;
	CHECK(pthread_create(&t, NULL, worker, b) == 0);
	while (atomic_load_explicit(&b->handled, memory_order_acquire) < b->n)
		usleep(1000);
	double wall = (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e9;
	double cpu = (double)(process_cpu_ns() - c0) / 1e9;
	pthread_join(t, NULL);
	printf("%llu completions (window %llu): %.0f completions/s; calling thread %.1f ns CPU each, "
	       "process %.1f ns CPU each\n",
	       (unsigned long long)b->n, (unsigned long long)b->window, (double)b->n / wall,
	       b->thread_cpu_s * 1e9 / (double)b->n, cpu * 1e9 / (double)b->n);
	xi_kv_core_stop(&b->core);
	xfer_engine_destroy(b->core.e);
	free(b);
	return 0;
}
