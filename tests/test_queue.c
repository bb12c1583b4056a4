/* The bounded MPMC queue: capacity is exact, a full queue refuses, and under
 * four producers and two consumers every element comes out exactly once. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "helpers.h"
#include "util/mpmc_queue.h"

#define PRODUCERS 4
#define CONSUMERS 2
#define PER_PRODUCER 200000

static struct mpmc_queue q;
static atomic_uchar seen[PRODUCERS * PER_PRODUCER];
static atomic_int consumed;

static void *producer(void *arg)
{
	uint64_t base = (uint64_t)(uintptr_t)arg * PER_PRODUCER;
	for (uint64_t i = 0; i < PER_PRODUCER; i++) {
		uint64_t v = base + i;
		while (!xi_mpmc_push(&q, &v))
			;
	}
	return NULL;
}

static void *consumer(void *arg)
{
	(void)arg;
	uint64_t v;
	while (atomic_load(&consumed) < PRODUCERS * PER_PRODUCER) {
		if (!xi_mpmc_pop(&q, &v))
			continue;
		CHECK(v < PRODUCERS * PER_PRODUCER);
		CHECK(atomic_fetch_add(&seen[v], 1) == 0);
		atomic_fetch_add(&consumed, 1);
	}
	return NULL;
}

int main(void)
{
	CHECK_RC(xi_mpmc_init(&q, 0, 8), -EINVAL);
	CHECK_OK(xi_mpmc_init(&q, 5, 24));
	CHECK(xi_mpmc_capacity(&q) == 8);
	uint8_t e[24], out[24];
	CHECK(xi_mpmc_empty_hint(&q));
	for (int i = 0; i < 8; i++) {
		memset(e, i, sizeof(e));
		CHECK(xi_mpmc_push(&q, e));
	}
	CHECK(!xi_mpmc_push(&q, e));
	for (int i = 0; i < 8; i++) {
		CHECK(xi_mpmc_pop(&q, out));
		CHECK(out[0] == i && out[23] == i);
	}
	CHECK(!xi_mpmc_pop(&q, out));
	xi_mpmc_destroy(&q);

	CHECK_OK(xi_mpmc_init(&q, 256, sizeof(uint64_t)));
	pthread_t p[PRODUCERS], c[CONSUMERS];
	for (uintptr_t i = 0; i < PRODUCERS; i++)
		CHECK(pthread_create(&p[i], NULL, producer, (void *)i) == 0);
	for (int i = 0; i < CONSUMERS; i++)
		CHECK(pthread_create(&c[i], NULL, consumer, NULL) == 0);
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(p[i], NULL);
	for (int i = 0; i < CONSUMERS; i++)
		pthread_join(c[i], NULL);
	for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++)
		CHECK(atomic_load(&seen[i]) == 1);
	xi_mpmc_destroy(&q);
	printf("queue: ok\n");
	return 0;
}
