/* The two measurement loops every implementation shares, so that xfer and
 * its baselines are timed by the same code: a windowed throughput loop and
 * a ping-pong. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PEAK_NS 10000000ull /* peak bandwidth is the best stretch this long */
#define REAP_MAX 64

struct window_state {
	uint64_t *t_call; /* per slot */
	uint32_t *free_slots, nfree;
	uint64_t posted, done;
};

struct peak {
	uint64_t t0, bytes0;
	double best;
};

static void peak_note(struct peak *p, uint64_t now, uint64_t bytes)
{
	if (now - p->t0 < PEAK_NS)
		return;
	double bps = (double)(bytes - p->bytes0) * 1e9 / (double)(now - p->t0);
	if (bps > p->best)
		p->best = bps;
	p->t0 = now;
	p->bytes0 = bytes;
}

/* Runs calls until the phase's limit, then drains. Timed phases record. */
static int run_phase(const struct win_ops *o, uint64_t iters, uint64_t ns,
		     struct window_state *st, struct meas *m, bool timed)
{
	uint32_t slots[REAP_MAX];
	uint64_t start = bench_now_ns(), last = start, posted0 = st->posted, done0 = st->done;
	struct peak pk = {.t0 = start};
	bool stopping = false;
	while (!stopping || st->posted != st->done) {
		while (!stopping && st->nfree) {
			uint64_t now = bench_now_ns();
			if ((iters && st->posted - posted0 >= iters) || (ns && now - start >= ns)) {
				/* A duration phase still needs one call to have a figure. */
				if (!(ns && st->posted == posted0)) {
					stopping = true;
					break;
				}
			}
			uint32_t slot = st->free_slots[--st->nfree];
			st->t_call[slot] = now;
			int ret = o->post(o->ctx, st->posted, slot);
			if (ret == -EAGAIN) {
				st->nfree++;
				break;
			}
			if (ret < 0)
				return ret;
			st->posted++;
		}
		if (st->posted == st->done)
			continue;
		int n = o->reap(o->ctx, slots, REAP_MAX);
		if (n < 0)
			return n;
		if (n == 0) {
			/* Nothing for a second with calls in flight: count it as stuck
			 * rather than hang the whole matrix. */
			if (bench_now_ns() - last > 30000000000ull)
				return -ETIMEDOUT;
			continue;
		}
		uint64_t now = bench_now_ns();
		last = now;
		for (int i = 0; i < n; i++) {
			if (timed)
				samples_add(&m->lat, now - st->t_call[slots[i]]);
			st->free_slots[st->nfree++] = slots[i];
		}
		st->done += (uint64_t)n;
		if (timed)
			peak_note(&pk, now, (st->done - done0) * o->bytes_per_call);
		if (ns && now - start >= ns)
			stopping = true;
	}
	if (timed) {
		m->calls = st->done - done0;
		m->wrs = m->calls * o->wrs_per_call;
		m->bytes = m->calls * o->bytes_per_call;
		m->t_ns = last - start;
		m->peak_bps = pk.best;
		if (m->peak_bps == 0 && m->t_ns)
			m->peak_bps = (double)m->bytes * 1e9 / (double)m->t_ns;
	}
	return 0;
}

int drive_window(const struct win_ops *o, uint32_t window, const struct limits *lim, struct meas *m)
{
	struct window_state st = {0};
	st.t_call = calloc(window, sizeof(*st.t_call));
	st.free_slots = calloc(window, sizeof(*st.free_slots));
	if (!st.t_call || !st.free_slots) {
		free(st.t_call);
		free(st.free_slots);
		return -ENOMEM;
	}
	for (uint32_t i = window; i-- > 0;)
		st.free_slots[st.nfree++] = i;
	int ret = run_phase(o, lim->warm_iters, lim->warm_ns, &st, m, false);
	if (!ret) {
		if (o->phase)
			o->phase(o->ctx, 1);
		ret = run_phase(o, lim->iters, lim->ns, &st, m, true);
		if (o->phase)
			o->phase(o->ctx, 0);
	}
	m->posted_all = st.posted;
	free(st.t_call);
	free(st.free_slots);
	return ret;
}

static int pp_phase(const struct pp_ops *o, uint64_t iters, uint64_t ns, uint64_t *seq,
		    struct meas *m, bool timed)
{
	uint64_t start = bench_now_ns(), now = start, n = 0;
	while (!((iters && n >= iters) || (ns && now - start >= ns && n))) {
		uint64_t t0 = bench_now_ns();
		int ret = o->ping(o->ctx, (*seq)++);
		if (!ret)
			ret = o->pong(o->ctx);
		if (ret)
			return ret;
		now = bench_now_ns();
		if (timed)
			samples_add(&m->lat, (now - t0) / 2);
		n++;
	}
	if (timed) {
		m->calls = n;
		m->wrs = n;
		m->bytes = n * o->bytes;
		m->t_ns = now - start;
		m->peak_bps = m->t_ns ? (double)m->bytes * 1e9 / (double)m->t_ns : 0;
	}
	return 0;
}

int drive_pingpong(const struct pp_ops *o, const struct limits *lim, struct meas *m)
{
	uint64_t seq = 0;
	int ret = pp_phase(o, lim->warm_iters, lim->warm_ns, &seq, m, false);
	if (!ret) {
		if (o->phase)
			o->phase(o->ctx, 1);
		ret = pp_phase(o, lim->iters, lim->ns, &seq, m, true);
		if (o->phase)
			o->phase(o->ctx, 0);
	}
	int sret = o->stop(o->ctx);
	m->posted_all = seq;
	return ret ? ret : sret;
}
