/* The submission hand-off alone, between two pinned threads: thread A pushes
 * an immediate's submission, thread B (standing in for the worker) takes it
 * and answers with a completion, A takes that: one round trip through the
 * two queues, no provider. Measured both ways in the same run, in turns:
 * "whole", the 184-byte struct sub copied into a 192-byte cell (the queue
 * before src/core/subq.c), and "packed" (xi_subq_push/pop). Prints p10/p50/
 * p90 of the round trip per way and the packed/whole ratio of the medians.
 *
 *   xfer-bench-handoff [CPU_A CPU_B [ROUND_TRIPS [TURNS]]]  (default 0 1 200000 5)
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/subq.h"

static struct mpmc_queue sq, cq;
static int packed, trips;
static int cpu_b;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (pthread_setaffinity_np(pthread_self(), sizeof(s), &s))
		fprintf(stderr, "bench_handoff: cannot pin to CPU %d (unpinned)\n", cpu);
}

static void *worker(void *arg)
{
	(void)arg;
	pin(cpu_b);
	struct sub s;
	for (int i = 0; i < trips; i++) {
		if (packed)
			while (!xi_subq_pop(&sq, &s))
				;
		else
			while (!xi_mpmc_pop(&sq, &s))
				;
		struct xfer_cqe c = {.user_data = s.to.user_data, .kind = s.kind};
		while (!xi_mpmc_push(&cq, &c))
			;
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* One turn of one way: the p50 round trip, ns. */
static uint64_t turn(int way, uint64_t *lat, uint64_t out[3])
{
	packed = way;
	if (packed ? xi_subq_init(&sq, 4096) : xi_mpmc_init(&sq, 4096, sizeof(struct sub)))
		exit(1);
	if (xi_mpmc_init(&cq, 4096, sizeof(struct xfer_cqe)))
		exit(1);
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	struct xfer_cqe c;
	for (int i = 0; i < trips; i++) {
		/* What xfer_write_imm hands over: user_data, deadline, telemetry stamp. */
		uint64_t t0 = now_ns();
		struct sub s = {.kind = SUB_IMM, .peer = 1, .flags = XFER_F_IMM, .imm = (uint32_t)i};
		s.to.user_data = (uint64_t)i;
		s.to.deadline_ns = t0 + 1000000000ull;
		s.to.t_submit = t0;
		if (packed)
			while (!xi_subq_push(&sq, &s))
				;
		else
			while (!xi_mpmc_push(&sq, &s))
				;
		while (!xi_mpmc_pop(&cq, &c))
			;
		lat[i] = now_ns() - t0;
	}
	pthread_join(t, NULL);
	xi_mpmc_destroy(&sq);
	xi_mpmc_destroy(&cq);
	qsort(lat, (size_t)trips, sizeof(*lat), cmp_u64);
	out[0] = lat[trips / 10];
	out[1] = lat[trips / 2];
	out[2] = lat[trips * 9 / 10];
	return out[1];
}

int main(int argc, char **argv)
{
	int cpu_a = argc > 2 ? atoi(argv[1]) : 0;
	cpu_b = argc > 2 ? atoi(argv[2]) : 1;
	trips = argc > 3 ? atoi(argv[3]) : 200000;
	int turns = argc > 4 ? atoi(argv[4]) : 5;
	if (trips < 10 || turns < 1 || turns > 64)
		return 2;
	pin(cpu_a);
	uint64_t *lat = malloc(sizeof(*lat) * (size_t)trips);
	uint64_t p50[2][64], q[3];
	if (!lat)
		return 1;
	printf("handoff: CPUs %d and %d, %d round trips per turn, %d turns each way\n", cpu_a, cpu_b,
	       trips, turns);
	for (int k = 0; k < turns; k++)
		for (int way = 0; way < 2; way++) {
			p50[way][k] = turn(way, lat, q);
			printf("  turn %d %-6s round trip p10 %4llu  p50 %4llu  p90 %4llu ns\n", k,
			       way ? "packed" : "whole", (unsigned long long)q[0], (unsigned long long)q[1],
			       (unsigned long long)q[2]);
		}
	for (int way = 0; way < 2; way++)
		qsort(p50[way], (size_t)turns, sizeof(uint64_t), cmp_u64);
	uint64_t w = p50[0][turns / 2], p = p50[1][turns / 2];
	printf("handoff: median of the turns' p50: whole %llu ns, packed %llu ns, packed/whole %.2f, "
	       "saved %lld ns per round trip\n",
	       (unsigned long long)w, (unsigned long long)p, w ? (double)p / (double)w : 0.0,
	       (long long)w - (long long)p);
	free(lat);
	return 0;
}
