/* Samples, quantiles and run lengths. Samples grow by doubling so that a
 * run of a million calls costs a handful of reallocations, not one per call. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdio.h>
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
	samples_free(&m->raw_post);
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

/* Whether CPUs a and b are hardware threads of one core (sysfs; false when
 * it cannot tell). Two busy threads on one core would halve each other. */
static bool smt_siblings(int a, int b)
{
	char path[96], list[256];
	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", a);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool found = false;
	if (fgets(list, sizeof(list), f)) {
		/* "0,8" or "0-1": ranges separated by commas. */
		for (char *t = strtok(list, ",\n"); t && !found; t = strtok(NULL, ",\n")) {
			int lo, hi;
			int k = sscanf(t, "%d-%d", &lo, &hi);
			if (k == 1)
				hi = lo;
			found = k >= 1 && b >= lo && b <= hi;
		}
	}
	fclose(f);
	return found;
}

int bench_layout(enum pin_side side, bool verbose)
{
	cpu_set_t now, one;
	int app = -1, worker = -1, total;
	if (pthread_getaffinity_np(pthread_self(), sizeof(now), &now))
		return -1;
	total = CPU_COUNT(&now);
	if (total < 4) {
		fprintf(stderr, "xfer-bench: --cpu-pin needs 4 CPUs, this process may use %d: "
				"nothing pinned\n", total);
		return -1;
	}
	/* From this side's end inwards: the application where raw_pin puts the
	 * raw loop, the worker on the next CPU that is not a hardware thread of
	 * the same core (the nearest one if every other is). */
	for (int k = 0; k < CPU_SETSIZE && worker < 0; k++) {
		int c = side == PIN_INITIATOR ? k : CPU_SETSIZE - 1 - k;
		if (!CPU_ISSET(c, &now))
			continue;
		if (app < 0)
			app = c;
		else if (!smt_siblings(app, c))
			worker = c;
	}
	for (int k = 0; k < CPU_SETSIZE && worker < 0; k++) {
		int c = side == PIN_INITIATOR ? k : CPU_SETSIZE - 1 - k;
		if (CPU_ISSET(c, &now) && c != app)
			worker = c;
	}
	CPU_ZERO(&one);
	CPU_SET(app, &one);
	if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one)) {
		fprintf(stderr, "xfer-bench: --cpu-pin: cannot pin to CPU %d\n", app);
		return -1;
	}
	if (verbose)
		fprintf(stderr, "xfer-bench: %s: application thread on CPU %d, worker on CPU %d%s\n",
			side == PIN_INITIATOR ? "initiator" : "target", app, worker,
			smt_siblings(app, worker) ? " (same core: no other left)" : "");
	return worker;
}
