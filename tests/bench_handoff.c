/* The submission hand-off alone, between two pinned threads: thread A does
 * what xfer_write_imm does to shared memory (counts the op in its peer's
 * `taken`, pushes the submission), thread B (standing in for the worker)
 * takes it, reads the peer's state as a post does, and answers with a
 * completion, A takes that: one round trip, no provider. Four ways in the
 * same run, in turns: the cell "whole" (the 184-byte struct sub in a
 * 192-byte cell, the queue before src/core/subq.c) or "packed"
 * (xi_subq_push/pop), and the peer's counter on the state's line ("shared":
 * struct xi_inflight before it had padding on both sides) or on a line of
 * its own ("own": struct peer now). Prints p10/p50/p90 of the round trip
 * per way and each way's median against whole+shared (the engine before).
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
static int packed, own, trips;
static int cpu_b;

/* The peer's first bytes as they were: state, then the submitters' half. */
struct old_peer {
	_Atomic int state;
	atomic_uint taken;
	char pad_[64];
	atomic_uint dropped;
};
static struct old_peer old_peer;
static struct peer new_peer;

static atomic_uint *taken_of(void)
{
	return own ? &new_peer.inflight.taken : &old_peer.taken;
}

static int state_of(void)
{
	return atomic_load_explicit(own ? &new_peer.state : &old_peer.state, memory_order_relaxed);
}

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
		struct xfer_cqe c = {.user_data = s.to.user_data, .kind = s.kind, .res = state_of()};
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
	packed = way & 1;
	own = (way >> 1) & 1;
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
		atomic_fetch_add_explicit(taken_of(), 1, memory_order_relaxed);
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
	uint64_t p50[4][64], q[3];
	static const char *names[4] = {"whole+shared", "packed+shared", "whole+own", "packed+own"};
	if (!lat)
		return 1;
	printf("handoff: CPUs %d and %d, %d round trips per turn, %d turns each way\n", cpu_a, cpu_b,
	       trips, turns);
	for (int k = 0; k < turns; k++)
		for (int way = 0; way < 4; way++) {
			p50[way][k] = turn(way, lat, q);
			printf("  turn %d %-13s round trip p10 %4llu  p50 %4llu  p90 %4llu ns\n", k, names[way],
			       (unsigned long long)q[0], (unsigned long long)q[1], (unsigned long long)q[2]);
		}
	for (int way = 0; way < 4; way++)
		qsort(p50[way], (size_t)turns, sizeof(uint64_t), cmp_u64);
	uint64_t base = p50[0][turns / 2];
	for (int way = 0; way < 4; way++) {
		uint64_t m = p50[way][turns / 2];
		printf("handoff: %-13s median p50 %4llu ns, %+5lld ns against whole+shared (%.2fx)\n",
		       names[way], (unsigned long long)m, (long long)m - (long long)base,
		       base ? (double)m / (double)base : 0.0);
	}
	free(lat);
	return 0;
}
