/*
 * The host proxy: one thread per module that turns the kernels' control
 * words into engine operations, round by round (docs/moe.md, "Protocol").
 *
 *   k_route(i)    -> arm a counter per source for its route vector; scatter
 *                    ours to every rank
 *   k_packed(i)   -> once each destination has read our records of round
 *                    i-1 (its CONS), write the first P records for it into
 *                    our private slot there
 *   route vectors -> check them, compute the offsets, write the overflow,
 *                    arm a counter per source for its records; the last one
 *                    to complete releases recv_flag (on the engine's worker,
 *                    no hop through this thread)
 *   k_recv_done   -> CONS to every source that sent us records
 *   k_comb_packed -> scatter the combine rows back; counters per expert rank
 *                    release comb_flag
 *
 * Every wait on another rank is an immediate counter with the round's
 * deadline, and every immediate names its source, so a rank that never
 * delivers is the rank the error names. Engine callbacks only count and
 * store flags; this thread does every submission (retrying -EAGAIN, which a
 * callback must not).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "moe.h"

#define ST_ROUTE (1u << 0)     /* route vector sent, route counters armed */
#define ST_PRIV (1u << 1)      /* private bursts sent, CONS counters armed */
#define ST_ROWS (1u << 2)      /* every route vector in, overflow sent, record counters armed */
#define ST_CONS (1u << 3)      /* our sources told their slots are free */
#define ST_COMB (1u << 4)      /* combine rows sent, combine counters armed */
#define ST_NOCOMB (1u << 5)    /* the next round began without a combine */
#define ST_COMB_DONE (1u << 6) /* the combine's receive finished */

/* How long another rank's failure report waits for this rank's own finding:
 * long enough for a proxy thread on a loaded machine to get its turn. */
#define ABORT_GRACE_NS 1000000000ull

static uint64_t ud_make(int kind, int slot, uint32_t round, uint32_t src)
{
	return (uint64_t)kind << 56 | (uint64_t)slot << 52 | (uint64_t)round << 20 | src;
}

static void nap_ns(long ns)
{
	struct timespec ts = {0, ns};
	nanosleep(&ts, NULL);
}

static const char *phase_what(int kind)
{
	switch (kind) {
	case MOE_OP_E_ROUTE: return "its route vector";
	case MOE_OP_E_DATA: return "its tokens";
	case MOE_OP_E_CONS: return "the word that it had read our tokens";
	case MOE_OP_E_COMB: return "its combine rows";
	case MOE_OP_S_ROUTE: return "our route vector";
	case MOE_OP_S_PRIV: return "our private burst";
	case MOE_OP_S_OVF: return "our overflow tokens";
	case MOE_OP_S_CONS: return "our CONS";
	default: return "our combine rows";
	}
}

static bool peer_dead(const struct xfer_moe *m, uint32_t r)
{
	return r != m->cfg.rank && xfer_peer_state(m->e, m->peers[r].peer) == XFER_PEER_DEAD;
}

/* Raises a flag the receive kernels wait on (recv_flag, comb_flag) and adds
 * the time since the phase began (since) to its statistic. */
static void release_flag(struct xfer_moe *m, volatile uint32_t *flag, uint64_t *stat_ns, uint64_t since)
{
	uint64_t t = xi_moe_now_ns();
	moe_store_rel(flag, 1);
	pthread_mutex_lock(&m->st_lock);
	*stat_ns += t - since;
	pthread_mutex_unlock(&m->st_lock);
}

static void release_recv(struct xfer_moe *m, struct moe_slot *s)
{
	release_flag(m, &m->b.ctl->recv_flag, &m->st.route_to_recv_ns, s->t_start);
}

static void release_comb(struct xfer_moe *m, struct moe_slot *s)
{
	release_flag(m, &m->b.ctl->comb_flag, &m->st.comb_to_flag_ns, s->t_comb);
}

static void fail_op(struct xfer_moe *m, struct moe_slot *s, int kind, uint32_t round, uint32_t src,
		    int res)
{
	if (kind >= MOE_OP_S_ROUTE) {
		int k = kind == MOE_OP_S_ROUTE ? MOE_ENT_ROUTE : kind == MOE_OP_S_PRIV ? MOE_ENT_PRIV
			: kind == MOE_OP_S_OVF ? MOE_ENT_OVF : kind == MOE_OP_S_CONS ? MOE_ENT_CONS : MOE_ENT_COMB;
		uint32_t rank = UINT32_MAX;
		for (uint32_t i = 0; i < m->cfg.world_size; i++)
			if (s->status[k][i] < 0) {
				rank = xi_moe_member_rank(m, s->ent[k][i].member);
				res = s->status[k][i];
				break;
			}
		if (rank == UINT32_MAX)
			xi_moe_fail(m, res, rank, "round %u: writing %s failed: %s", round, phase_what(kind),
				 xfer_strerror(res));
		else
			xi_moe_fail(m, res, rank, "round %u: writing %s to rank %u failed: %s%s", round,
				 phase_what(kind), rank, xfer_strerror(res),
				 peer_dead(m, rank) ? " (the rank was declared dead)" : "");
		return;
	}
	uint32_t blamed = atomic_load(&m->abort_from);
	if (blamed && blamed - 1 != src) /* src may only be waiting for the rank another blames */
		xi_moe_fail(m, -XFER_EPEER, blamed - 1, "rank %u failed (another rank reported it); here, "
			 "round %u: waiting for %s from rank %u: %s", blamed - 1, round, phase_what(kind), src,
			 xfer_strerror(res));
	else if (res == -ETIMEDOUT)
		xi_moe_fail(m, res, src, "round %u: rank %u did not deliver %s within %" PRIu64 " ms%s", round,
			 src, phase_what(kind), m->cfg.timeout_ms,
			 peer_dead(m, src) ? " (the rank was declared dead)" : "");
	else
		xi_moe_fail(m, res, src, "round %u: waiting for %s from rank %u failed: %s", round,
			 phase_what(kind), src, xfer_strerror(res));
}

void xi_moe_proxy_cb(void *ctx, const struct xfer_cqe *cqe)
{
	struct xfer_moe *m = ctx;
	int kind = (int)(cqe->user_data >> 56);
	if (kind == MOE_OP_ABORT) {
		/* Acted on by the proxy after a grace: a failure every rank
		 * detects by itself (capacity) keeps its own, precise, error. */
		if (cqe->res >= 0) {
			atomic_store(&m->abort_t, xi_moe_now_ns());
			atomic_store(&m->abort_from, (uint32_t)(cqe->user_data & 0xfffff) + 1);
		}
		return;
	}
	if (kind == MOE_OP_FAILED) {
		if (cqe->res >= 0)
			xi_moe_conclude(m, (uint32_t)(cqe->user_data & 0xfffff));
		return;
	}
	if (kind == MOE_OP_BYE) { /* no slot: destroy counts them */
		if (cqe->res >= 0 && (cqe->user_data & 1))
			atomic_fetch_sub(&m->bye_left, 1);
		atomic_fetch_sub(&m->bye_ops, 1);
		return;
	}
	struct moe_slot *s = &m->slot[(cqe->user_data >> 52) & 1];
	uint32_t round = (uint32_t)(cqe->user_data >> 20), src = cqe->user_data & 0xfffff;
	if (cqe->res < 0)
		fail_op(m, s, kind, round, src, cqe->res);
	switch (kind) {
	case MOE_OP_E_ROUTE:
		atomic_fetch_sub(&s->route_left, 1);
		break;
	case MOE_OP_E_DATA:
		if (atomic_fetch_sub(&s->data_left, 1) == 1 && cqe->res >= 0)
			release_recv(m, s);
		break;
	case MOE_OP_E_CONS:
		atomic_fetch_sub(&s->cons_left, 1);
		break;
	case MOE_OP_E_COMB:
		if (atomic_fetch_sub(&s->comb_left, 1) == 1 && cqe->res >= 0)
			release_comb(m, s);
		break;
	case MOE_OP_S_ROUTE:
	case MOE_OP_S_PRIV:
	case MOE_OP_S_OVF:
		if (atomic_fetch_sub(&s->tx_left, 1) == 1)
			moe_store_rel(&m->b.ctl->tx_ready, 1);
		break;
	case MOE_OP_S_COMB:
		if (atomic_fetch_sub(&s->comb_tx_left, 1) == 1)
			moe_store_rel(&m->b.ctl->comb_tx_ready, 1);
		break;
	default:
		break;
	}
	atomic_fetch_sub(&s->ops, 1); /* last: the slot may be reused from here on */
}

static struct xfer_completion done_by(struct xfer_moe *m, int kind, struct moe_slot *s,
				      uint32_t src)
{
	struct xfer_completion c = {.user_data = ud_make(kind, (int)(s - m->slot), s->round, src),
				    .cb = xi_moe_proxy_cb, .cb_ctx = m, .timeout_ms = m->cfg.timeout_ms};
	return c;
}

/* The proxy is not the engine's worker, so it may wait for the queue to
 * drain; it gives up at the round's deadline. */
static bool full_wait(struct xfer_moe *m, int rc, uint64_t t0)
{
	if (rc != -EAGAIN || atomic_load(&m->stop))
		return false;
	if (xi_moe_now_ns() - t0 > m->cfg.timeout_ms * 1000000ull)
		return false;
	nap_ns(10000);
	return true;
}

static void expect(struct xfer_moe *m, struct moe_slot *s, int kind, uint32_t phase, uint32_t src,
		   uint32_t count)
{
	struct xfer_completion c = done_by(m, kind, s, src);
	/* A CONS is owed once its sender has received the round, which may wait
	 * on a third rank: its lateness names nobody. A rank that never sends
	 * it is caught by the next round's route counter. */
	if (kind == MOE_OP_E_CONS)
		c.timeout_ms = UINT64_MAX / 2;
	atomic_fetch_add(&s->ops, 1);
	int rc;
	uint64_t t0 = xi_moe_now_ns();
	while (full_wait(m, rc = xfer_expect_imm(m->e, moe_imm(phase, s->round, src), count, &c), t0))
		;
	if (rc) {
		atomic_fetch_sub(&s->ops, 1);
		xi_moe_fail(m, rc, UINT32_MAX, "round %u: arming a counter failed: %s", s->round,
			 xfer_strerror(rc));
	}
}

/* Posts the n entries of ent[k]; false (nothing posted) when n is 0. */
static bool scatter(struct xfer_moe *m, struct moe_slot *s, int kind, int k, uint32_t n,
		    xfer_mr_t *src, uint32_t phase)
{
	if (!n)
		return false;
	struct xfer_scatter sc = {.src = src, .entries = s->ent[k], .n = n,
				  .imm = moe_imm(phase, s->round, m->cfg.rank), .flags = XFER_F_IMM,
				  .status = s->status[k]};
	struct xfer_completion c = done_by(m, kind, s, m->cfg.rank);
	atomic_fetch_add(&s->ops, 1);
	int rc;
	uint64_t t0 = xi_moe_now_ns();
	while (full_wait(m, rc = xfer_scatter(m->e, m->group, &sc, &c), t0))
		;
	if (rc) {
		atomic_fetch_sub(&s->ops, 1);
		xi_moe_fail(m, rc, UINT32_MAX, "round %u: posting %s failed: %s", s->round,
			 phase_what(kind), xfer_strerror(rc));
		return false;
	}
	uint64_t bytes = 0;
	for (uint32_t i = 0; i < n; i++)
		bytes += s->ent[k][i].len;
	pthread_mutex_lock(&m->st_lock);
	m->st.bytes_sent += bytes;
	pthread_mutex_unlock(&m->st_lock);
	return true;
}

static bool remote(const struct xfer_moe *m, uint32_t r)
{
	return r != m->cfg.rank && m->peers[r].remote;
}

static void step_route(struct xfer_moe *m, struct moe_slot *s)
{
	uint32_t W = m->cfg.world_size, me = m->cfg.rank, RV = m->z.route_words;
	atomic_store(&s->route_left, W - 1);
	for (uint32_t r = 0; r < W; r++)
		if (r != me)
			expect(m, s, MOE_OP_E_ROUTE, MOE_PH_ROUTE, r, 1);
	uint32_t n = 0;
	for (uint32_t r = 0; r < W; r++) {
		if (r == me)
			continue;
		s->ent[MOE_ENT_ROUTE][n] = (struct xfer_scatter_entry){
			.member = m->peers[r].member, .src_off = (uint64_t)(s->round & 1) * RV * 4,
			.len = (uint64_t)RV * 4, .dst = m->peers[r].rtab,
			.dst_off = ((uint64_t)(s->round & 1) * W + me) * RV * 4};
		n++;
	}
	atomic_fetch_add(&s->tx_left, 1);
	if (!scatter(m, s, MOE_OP_S_ROUTE, MOE_ENT_ROUTE, n, m->mr_rv, MOE_PH_ROUTE))
		atomic_fetch_sub(&s->tx_left, 1);
	s->steps |= ST_ROUTE;
}

static void step_priv(struct xfer_moe *m, struct moe_slot *s)
{
	uint32_t W = m->cfg.world_size, E = m->cfg.num_experts, me = m->cfg.rank;
	uint32_t P = m->cfg.private_tokens, RB = m->z.record_bytes;
	uint64_t so = 0, recs = 0;
	uint32_t n = 0;
	for (uint32_t d = 0; d < W; d++) {
		uint32_t c = s->rv[moe_rv_rec(E, d)];
		s->cons_from[d] = 0;
		if (remote(m, d) && c && P) {
			uint32_t k = c < P ? c : P;
			s->ent[MOE_ENT_PRIV][n++] = (struct xfer_scatter_entry){
				.member = m->peers[d].member, .src_off = so * RB, .len = (uint64_t)k * RB,
				.dst = m->peers[d].recv, .dst_off = (uint64_t)me * P * RB};
			recs += k;
		}
		if (remote(m, d) && c)
			s->cons_from[d] = 1;
		so += c;
	}
	uint32_t owed = 0;
	for (uint32_t d = 0; d < W; d++)
		owed += s->cons_from[d];
	atomic_store(&s->cons_left, owed);
	for (uint32_t d = 0; d < W; d++)
		if (s->cons_from[d])
			expect(m, s, MOE_OP_E_CONS, MOE_PH_CONS, d, 1);
	atomic_fetch_add(&s->tx_left, 1);
	if (!scatter(m, s, MOE_OP_S_PRIV, MOE_ENT_PRIV, n, m->mr_send, MOE_PH_DATA))
		atomic_fetch_sub(&s->tx_left, 1);
	pthread_mutex_lock(&m->st_lock);
	m->st.private_records += recs;
	pthread_mutex_unlock(&m->st_lock);
	s->steps |= ST_PRIV;
}

static void step_rows(struct xfer_moe *m, struct moe_slot *s)
{
	uint32_t W = m->cfg.world_size, E = m->cfg.num_experts, me = m->cfg.rank;
	uint32_t P = m->cfg.private_tokens, RB = m->z.record_bytes, i = s->round;
	for (uint32_t r = 0; r < W; r++) {
		m->rows[r] = moe_route_row(m, i, r);
		int rc = xi_moe_route_valid(&m->cfg, i, r, m->rows[r]);
		if (rc) {
			xi_moe_fail(m, -EPROTO, r, "round %u: the route vector of rank %u is %s", i, r,
				 rc == -ESTALE ? "of another round" : "inconsistent");
			return;
		}
	}
	const uint32_t *const *rows = (const uint32_t *const *)m->rows;
	uint32_t bad = 0;
	if (xi_moe_plan_send(&m->cfg, me, rows, s->ovf_dst, &bad)) {
		xi_moe_fail(m, -ENOSPC, bad,
			 "round %u: rank %u would receive more overflow tokens than its %u "
			 "(overflow_tokens; private_tokens %u)", i, bad, m->cfg.overflow_tokens, P);
		return;
	}
	/* Every rank checks every rank's experts, so that all fail alike. */
	if (xi_moe_plan_capacity(&m->cfg, rows, &bad) ||
	    xi_moe_plan_recv(&m->cfg, &m->z, me, rows, &s->plan, &bad)) {
		uint32_t owner = bad / m->z.local_experts;
		xi_moe_fail(m, -ENOSPC, owner, "round %u: expert %u (rank %u) would receive more rows "
			 "than its layout holds (expert_capacity %u)", i, bad, owner,
			 m->cfg.expert_capacity);
		return;
	}
	/* Overflow: records past the P the private slot took. */
	uint64_t so = 0, recs = 0;
	uint32_t n = 0;
	for (uint32_t d = 0; d < W; d++) {
		uint32_t c = s->rv[moe_rv_rec(E, d)];
		if (remote(m, d) && c > P) {
			s->ent[MOE_ENT_OVF][n++] = (struct xfer_scatter_entry){
				.member = m->peers[d].member, .src_off = (so + P) * RB,
				.len = (uint64_t)(c - P) * RB, .dst = m->peers[d].recv,
				.dst_off = s->ovf_dst[d] * RB};
			recs += c - P;
		}
		so += c;
	}
	/* One counter per source that sends us anything, plus a guard so that
	 * the flag goes up once, after the last of them is armed. */
	atomic_store(&s->data_left, 1);
	for (uint32_t r = 0; r < W; r++) {
		uint32_t c = s->plan.c[r];
		if (!remote(m, r) || !c)
			continue;
		atomic_fetch_add(&s->data_left, 1);
		expect(m, s, MOE_OP_E_DATA, MOE_PH_DATA, r, (P ? 1u : 0u) + (c > P ? 1u : 0u));
	}
	if (atomic_fetch_sub(&s->data_left, 1) == 1 && !atomic_load(&m->failed))
		release_recv(m, s);
	atomic_fetch_add(&s->tx_left, 1);
	if (!scatter(m, s, MOE_OP_S_OVF, MOE_ENT_OVF, n, m->mr_send, MOE_PH_DATA))
		atomic_fetch_sub(&s->tx_left, 1);
	/* The guard taken at activation: route, private and overflow scatters
	 * are all posted now, so the last to complete frees the send buffer. */
	if (atomic_fetch_sub(&s->tx_left, 1) == 1)
		moe_store_rel(&m->b.ctl->tx_ready, 1);
	pthread_mutex_lock(&m->st_lock);
	m->st.overflow_records += recs;
	m->st.route_to_rows_ns += xi_moe_now_ns() - s->t_start;
	pthread_mutex_unlock(&m->st_lock);
	s->steps |= ST_ROWS;
}

static void step_cons(struct xfer_moe *m, struct moe_slot *s)
{
	uint32_t W = m->cfg.world_size, n = 0;
	for (uint32_t r = 0; r < W; r++)
		if (remote(m, r) && s->plan.c[r])
			s->ent[MOE_ENT_CONS][n++] = (struct xfer_scatter_entry){
				.member = m->peers[r].member, .len = 0, .dst = m->peers[r].rtab};
	scatter(m, s, MOE_OP_S_CONS, MOE_ENT_CONS, n, NULL, MOE_PH_CONS);
	s->steps |= ST_CONS;
}

static void step_comb(struct xfer_moe *m, struct moe_slot *s)
{
	uint32_t W = m->cfg.world_size, E = m->cfg.num_experts, CB = m->z.combine_row_bytes;
	s->t_comb = xi_moe_now_ns();
	atomic_store(&s->comb_left, 1);
	for (uint32_t d = 0; d < W; d++)
		if (remote(m, d) && s->rv[moe_rv_pairs(E, W, d)]) {
			atomic_fetch_add(&s->comb_left, 1);
			expect(m, s, MOE_OP_E_COMB, MOE_PH_COMB, d, 1);
		}
	if (atomic_fetch_sub(&s->comb_left, 1) == 1 && !atomic_load(&m->failed))
		release_comb(m, s);
	uint32_t n = 0;
	for (uint32_t r = 0; r < W; r++)
		if (remote(m, r) && s->plan.pr[r])
			s->ent[MOE_ENT_COMB][n++] = (struct xfer_scatter_entry){
				.member = m->peers[r].member, .src_off = (uint64_t)s->plan.qbase[r] * CB,
				.len = (uint64_t)s->plan.pr[r] * CB, .dst = m->peers[r].comb_recv,
				.dst_off = (uint64_t)s->plan.cb[r] * CB};
	atomic_store(&s->comb_tx_left, 1);
	if (!scatter(m, s, MOE_OP_S_COMB, MOE_ENT_COMB, n, m->mr_comb_send, MOE_PH_COMB) ||
	    atomic_load(&m->failed))
		moe_store_rel(&m->b.ctl->comb_tx_ready, 1);
	pthread_mutex_lock(&m->st_lock);
	m->st.combines++;
	pthread_mutex_unlock(&m->st_lock);
	s->steps |= ST_COMB;
}

static void names_dead(const struct xfer_moe *m, char *buf, size_t cap, uint32_t *first)
{
	size_t o = 0;
	buf[0] = 0;
	*first = UINT32_MAX;
	for (uint32_t r = 0; r < m->cfg.world_size && o + 16 < cap; r++)
		if (peer_dead(m, r)) {
			o += (size_t)snprintf(buf + o, cap - o, "%srank %u", o ? ", " : "", r);
			if (*first == UINT32_MAX)
				*first = r;
		}
}

/* A round whose local half does not finish within the deadline (plus a
 * grace, so that the per-source counters, which name a rank, expire first). */
static void watchdog(struct xfer_moe *m, struct moe_slot *s, uint64_t now)
{
	uint64_t limit = (m->cfg.timeout_ms + 500) * 1000000ull;
	const char *what = NULL;
	uint64_t since = 0;
	if (!(s->steps & ST_CONS)) {
		what = "dispatch";
		since = s->t_start;
	} else if ((s->steps & ST_COMB) && !(s->steps & ST_COMB_DONE)) {
		what = "combine";
		since = s->t_comb;
	}
	if (!what || now < since || now - since < limit)
		return; /* since may be later than now: the steps stamp it afresh */
	char dead[128];
	uint32_t first;
	names_dead(m, dead, sizeof(dead), &first);
	if (first != UINT32_MAX)
		xi_moe_fail(m, -XFER_EPEER, first, "round %u: %s did not finish within %" PRIu64
			 " ms; dead: %s", s->round, what, m->cfg.timeout_ms, dead);
	else
		xi_moe_fail(m, -ETIMEDOUT, UINT32_MAX, "round %u: %s did not finish within %" PRIu64
			 " ms: this rank's own %s half never ran, or waits on a same-host rank "
			 "(none was declared dead)", s->round, what, m->cfg.timeout_ms, what);
}

static bool progress(struct xfer_moe *m, struct moe_slot *s, uint64_t now)
{
	struct xfer_moe_ctl *ctl = m->b.ctl;
	uint32_t i = s->round, before = s->steps;
	bool engine = m->n_remote > 0;
	uint64_t t0 = xi_moe_now_ns();
	if (engine && !(s->steps & ST_ROUTE))
		step_route(m, s);
	if (engine && !(s->steps & ST_PRIV) && moe_round_ge(moe_load_acq(&ctl->k_packed), i)) {
		struct moe_slot *prev = &m->slot[(i - 1) & 1];
		if (i == 1 || prev->round != i - 1 || !atomic_load(&prev->cons_left))
			step_priv(m, s);
	}
	if (engine && (s->steps & ST_PRIV) && !(s->steps & ST_ROWS) && !atomic_load(&s->route_left))
		step_rows(m, s);
	if (!(s->steps & ST_CONS) && (!engine || (s->steps & ST_ROWS)) &&
	    moe_round_ge(moe_load_acq(&ctl->k_recv_done), i)) {
		if (engine)
			step_cons(m, s);
		s->steps |= ST_CONS;
	}
	if (!(s->steps & (ST_COMB | ST_NOCOMB)) && (s->steps & ST_CONS) &&
	    moe_round_ge(moe_load_acq(&ctl->k_comb_packed), i)) {
		if (engine)
			step_comb(m, s);
		else
			s->t_comb = now;
		s->steps |= ST_COMB;
	}
	if ((s->steps & ST_COMB) && !(s->steps & ST_COMB_DONE) &&
	    moe_round_ge(moe_load_acq(&ctl->k_comb_done), i))
		s->steps |= ST_COMB_DONE;
	if (s->steps != before) {
		pthread_mutex_lock(&m->st_lock);
		m->st.busy_ns += xi_moe_now_ns() - t0;
		pthread_mutex_unlock(&m->st_lock);
	}
	watchdog(m, s, now);
	bool finished = (s->steps & ST_CONS) && (s->steps & (ST_COMB_DONE | ST_NOCOMB));
	if (finished && !atomic_load(&s->ops))
		s->active = false;
	return s->steps != before;
}

/* Everything the kernels asked of us is posted and has completed. */
static bool drained(struct xfer_moe *m)
{
	struct xfer_moe_ctl *ctl = m->b.ctl;
	if (moe_round_ge(moe_load_acq(&ctl->k_route), m->next_round))
		return false;
	for (int k = 0; k < 2; k++) {
		struct moe_slot *s = &m->slot[k];
		if (!s->active)
			continue;
		uint32_t i = s->round;
		if (atomic_load(&s->ops) ||
		    (moe_round_ge(moe_load_acq(&ctl->k_recv_done), i) && !(s->steps & ST_CONS)) ||
		    (moe_round_ge(moe_load_acq(&ctl->k_comb_packed), i) && !(s->steps & ST_COMB)))
			return false;
	}
	return true;
}

static bool activate(struct xfer_moe *m, uint64_t now)
{
	struct xfer_moe_ctl *ctl = m->b.ctl;
	uint32_t i = m->next_round;
	if (!moe_round_ge(moe_load_acq(&ctl->k_route), i))
		return false;
	struct moe_slot *prev = &m->slot[(i - 1) & 1], *s = &m->slot[i & 1];
	if (prev->active && prev->round == i - 1 && !(prev->steps & (ST_COMB | ST_NOCOMB))) {
		/* The kernels ran the previous round's combine before this route
		 * step, if they ran it at all: its word is already there. */
		if (moe_round_ge(moe_load_acq(&ctl->k_comb_packed), i - 1) || !(prev->steps & ST_CONS))
			return false;
		prev->steps |= ST_NOCOMB;
	}
	if (s->active)
		return false; /* round i-2 still has operations in flight */
	uint32_t RV = m->z.route_words, E = m->cfg.num_experts, W = m->cfg.world_size;
	s->round = i;
	s->steps = 0;
	s->t_start = now;
	s->t_comb = 0;
	atomic_store(&s->route_left, 0);
	atomic_store(&s->data_left, 0);
	atomic_store(&s->tx_left, 1); /* guard, dropped once the overflow is posted */
	atomic_store(&s->cons_left, 0);
	atomic_store(&s->comb_left, 0);
	atomic_store(&s->comb_tx_left, 0);
	s->rv = (uint32_t *)m->b.route_vec + (i & 1) * RV;
	s->active = true;
	m->next_round = i + 1;
	pthread_mutex_lock(&m->st_lock);
	m->st.rounds++;
	pthread_mutex_unlock(&m->st_lock);
	/* The GPU writes the host copy of its route vector only for the engine. */
	if (m->n_remote && s->rv[moe_rv_stamp(E, W)] != i)
		xi_moe_fail(m, -EPROTO, m->cfg.rank, "round %u: this rank's route vector says round %u",
			 i, s->rv[moe_rv_stamp(E, W)]);
	return true;
}

/* One counter per rank that could be blamed: another rank that fails tells
 * us whom it blames, so that everyone names the same culprit rather than the
 * first rank that left because of it. No deadline: armed for the module's
 * life (destroy's stop completes them). */
static void arm_abort(struct xfer_moe *m)
{
	for (uint32_t r = 0; r < m->cfg.world_size && m->group; r++) {
		struct xfer_completion c = {.user_data = (uint64_t)MOE_OP_ABORT << 56 | r,
					    .cb = xi_moe_proxy_cb, .cb_ctx = m, .timeout_ms = UINT64_MAX / 2};
		xfer_expect_imm(m->e, moe_imm(MOE_PH_ABORT, r, 0), 1, &c);
		if (r == m->cfg.rank)
			continue;
		struct xfer_completion f = {.user_data = (uint64_t)MOE_OP_FAILED << 56 | r,
					    .cb = xi_moe_proxy_cb, .cb_ctx = m, .timeout_ms = UINT64_MAX / 2};
		xfer_expect_imm(m->e, moe_imm(MOE_PH_FAILED, 0, r), 1, &f);
	}
	m->abort_armed = true;
}

/* Our failure, told to every rank (the culprit we name, or ourselves). */
static void send_abort(struct xfer_moe *m)
{
	m->abort_sent = true;
	if (!m->group || atomic_load(&m->closing)) {
		atomic_store(&m->abort_told, true);
		return;
	}
	pthread_mutex_lock(&m->fail_lock);
	uint32_t who = m->fail_rank < m->cfg.world_size ? m->fail_rank : m->cfg.rank;
	pthread_mutex_unlock(&m->fail_lock);
	struct xfer_completion c = {.user_data = (uint64_t)MOE_OP_BYE << 56, .cb = xi_moe_proxy_cb,
				    .cb_ctx = m, .timeout_ms = 2000};
	atomic_fetch_add(&m->bye_ops, 1);
	if (xfer_barrier(m->e, m->group, moe_imm(MOE_PH_ABORT, who, 0), &c))
		atomic_fetch_sub(&m->bye_ops, 1);
	/* and that we have failed too: a failed rank leaves once all have */
	atomic_fetch_add(&m->bye_ops, 1);
	if (xfer_barrier(m->e, m->group, moe_imm(MOE_PH_FAILED, 0, m->cfg.rank), &c))
		atomic_fetch_sub(&m->bye_ops, 1);
	atomic_store(&m->abort_told, true);
}

void *xi_moe_proxy_main(void *arg)
{
	struct xfer_moe *m = arg;
	if (!m->abort_armed)
		arm_abort(m);
	uint64_t last = xi_moe_now_ns();
	long nap = 0;
	while (!atomic_load(&m->stop)) {
		uint64_t now = xi_moe_now_ns();
		if (atomic_load(&m->failed)) {
			if (!m->abort_sent)
				send_abort(m);
			if (!m->released) {
				m->released = true;
				if (m->release_fn)
					m->release_fn(m->release_ctx);
			}
			nap_ns(1000000);
			continue;
		}
		uint32_t kerr = moe_load_acq(&m->b.ctl->k_error);
		if (kerr) {
			uint32_t info = m->b.ctl->k_error_info, me = m->cfg.rank;
			if (kerr == XFER_MOE_KERR_CAPACITY && (info & 0x80000000u))
				xi_moe_fail(m, -ENOSPC, me, "the plan kernel of rank %u found its receive or "
					 "combine send buffer too small (overflow_tokens)", me);
			else if (kerr == XFER_MOE_KERR_CAPACITY)
				xi_moe_fail(m, -ENOSPC, me, "the plan kernel of rank %u found expert %u over its "
					 "capacity (expert_capacity)", me, info);
			else if (kerr == XFER_MOE_KERR_TIMEOUT)
				xi_moe_fail(m, -ETIMEDOUT, info, "a wait kernel of rank %u waited past the deadline "
					 "(%" PRIu64 " ms) for %s %u", me, m->cfg.timeout_ms,
					 info == UINT32_MAX ? "the proxy of" : "rank", info == UINT32_MAX ? me : info);
			else
				xi_moe_fail(m, -EPROTO, info, "a kernel of rank %u found a record or route vector of "
					 "rank %u malformed or of another round", me, info);
		}
		bool did = activate(m, now);
		for (int k = 0; k < 2; k++)
			if (m->slot[k].active)
				did |= progress(m, &m->slot[k], now);
		/* Another rank's report acts only after a grace, and after this
		 * pass's progress, so that a failure this rank can find by itself
		 * in what has arrived (capacity) is the one it reports. */
		uint32_t blamed = atomic_load(&m->abort_from);
		if (blamed && !atomic_load(&m->failed) && now > atomic_load(&m->abort_t) + ABORT_GRACE_NS) {
			uint32_t who = blamed - 1;
			xi_moe_fail(m, -XFER_EPEER, who, "rank %u failed (another rank reported it)%s", who,
				 who == m->cfg.rank ? "; this rank's own failure came first elsewhere" : "");
			continue;
		}
		if (atomic_load(&m->draining) && !did)
			atomic_store(&m->drained, drained(m));
		if (did) {
			last = now;
			nap = 0;
			continue;
		}
		/* Spin while a round may be about to need us, then back off:
		 * 1 ms of polling, then naps growing to 100 us. */
		if (now - last < 1000000ull)
			continue;
		nap = nap ? (nap * 2 > 100000 ? 100000 : nap * 2) : 2000;
		nap_ns(nap);
	}
	return NULL;
}

/* Diagnostics for a stuck round (xfer_moe_debug_state): what the proxy has
 * done of each slot and what it still waits for. Read from another thread
 * while the proxy runs: plain fields are read relaxed, a snapshot that may be
 * a moment old, never acted on. */
static uint32_t peek32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static bool peek_bool(const bool *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

int xfer_moe_debug_state(const xfer_moe_t *mc, char *buf, size_t cap)
{
	const struct xfer_moe *m = mc;
	if (!m || !buf || !cap)
		return -EINVAL;
	static const char *const step_names[] = {"route", "priv", "rows", "cons", "comb", "nocomb", "comb_done"};
	struct xfer_moe_stats st;
	xfer_moe_get_stats(mc, &st);
	int o = snprintf(buf, cap, "proxy: next round %u, %u remote ranks, failed %d, abort_from %u; "
			 "stats rounds %" PRIu64 " combines %" PRIu64 " private %" PRIu64 " overflow %" PRIu64
			 " bytes %" PRIu64 " busy %" PRIu64 " us",
			 peek32(&m->next_round), m->n_remote, atomic_load(&m->failed), atomic_load(&m->abort_from),
			 st.rounds, st.combines, st.private_records, st.overflow_records, st.bytes_sent,
			 st.busy_ns / 1000);
	for (int k = 0; k < 2; k++) {
		const struct moe_slot *s = &m->slot[k];
		uint32_t steps = peek32(&s->steps);
		o += snprintf(buf + o, o < (int)cap ? cap - (size_t)o : 0, "; slot %d: round %u %s steps", k,
			      peek32(&s->round), peek_bool(&s->active) ? "active" : "idle");
		for (unsigned b = 0; b < sizeof(step_names) / sizeof(step_names[0]); b++)
			if (steps & (1u << b))
				o += snprintf(buf + o, o < (int)cap ? cap - (size_t)o : 0, " %s", step_names[b]);
		o += snprintf(buf + o, o < (int)cap ? cap - (size_t)o : 0,
			      "; waiting for: route vectors %u, sources' tokens %u, our scatters %u, CONS %u, "
			      "combine rows %u, combine scatter %u; engine ops %u",
			      atomic_load(&s->route_left), atomic_load(&s->data_left), atomic_load(&s->tx_left),
			      atomic_load(&s->cons_left), atomic_load(&s->comb_left), atomic_load(&s->comb_tx_left),
			      atomic_load(&s->ops));
	}
	return o < (int)cap ? o : (int)cap - 1;
}
