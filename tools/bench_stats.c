/* Samples, quantiles and run lengths. Samples grow by doubling so that a
 * run of a million calls costs a handful of reallocations, not one per call. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "xfer.h"

const char *const bench_op_name[OP_COUNT] = {"single", "paged", "imm", "send"};
const char *const bench_impl_name[IMPL_COUNT] = {"xfer", "raw", "ucx", "memcpy"};
const char *const ov_name[OV_COUNT] = {"call->enqueued", "enqueued->first post",
				       "post all WRs", "call->first post", "enqueued->taken",
				       "provider's first post call"};

uint64_t bench_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void samples_add(struct samples *s, uint64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 4096;
		uint32_t *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return; /* a lost sample only thins the distribution */
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

void samples_quantiles(struct samples *s, const double *q, double *out_us, int nq)
{
	if (s->n)
		qsort(s->v, s->n, sizeof(*s->v), cmp_u32);
	for (int i = 0; i < nq; i++) {
		if (!s->n) {
			out_us[i] = NAN;
			continue;
		}
		/* Nearest rank: the smallest sample with at least q of them at or below. */
		size_t rank = (size_t)ceil(q[i] * (double)s->n);
		out_us[i] = s->v[rank ? rank - 1 : 0] / 1e3;
	}
}

void samples_free(struct samples *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

void meas_free(struct meas *m)
{
	samples_free(&m->lat);
	for (int i = 0; i < OV_COUNT; i++)
		samples_free(&m->ov[i]);
}

void limits_for(const struct bench_opts *o, const struct bench_case *c, struct limits *l)
{
	memset(l, 0, sizeof(*l));
	if (o->iters) {
		l->iters = o->iters;
		l->warm_iters = o->iters / 10 ? o->iters / 10 : 1;
		if (l->warm_iters > 1000)
			l->warm_iters = 1000;
	} else {
		l->ns = (uint64_t)(o->seconds * 1e9 / o->rounds);
		/* A duration phase always completes at least one call (see
		 * bench_loop.c), so slow calls still get warmed up. */
		l->warm_ns = l->ns / 5 > 20000000ull ? l->ns / 5 : 20000000ull;
	}
	/* Large paged calls move hundreds of MiB; one warm-up call is plenty. */
	if (c->op == OP_PAGED && c->bytes * c->pages >= (64ull << 20) && o->iters)
		l->warm_iters = 1;
}

const char *bench_strerror(int err)
{
	return err == -EILSEQ ? "data verification failed (bytes differ)" : xfer_strerror(err);
}

void raw_pin(struct pin_state *p, enum pin_side side)
{
	cpu_set_t now, one;
	_Static_assert(sizeof(cpu_set_t) <= sizeof(p->saved), "pin_state.saved too small");
	p->pinned = false;
	if (pthread_getaffinity_np(pthread_self(), sizeof(now), &now) || CPU_COUNT(&now) < 2)
		return;
	int cpu = -1;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &now))
			continue;
		cpu = c;
		if (side == PIN_INITIATOR)
			break; /* the first; the target keeps going to the last */
	}
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	memcpy(p->saved, &now, sizeof(now));
	p->pinned = pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0;
}

void raw_unpin(struct pin_state *p)
{
	cpu_set_t saved;
	if (!p->pinned)
		return;
	memcpy(&saved, p->saved, sizeof(saved));
	pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
	p->pinned = false;
}
