/* Peers that die or come back: SIGKILL of the target in the middle of large
 * paged writes, submissions to a peer already known dead, and a restarted
 * peer whose old descriptors must be refused. */
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cases.h"

#define K_CALLS 4
#define K_PAGES 10000u
#define K_PAGE 64u

/* Both ends probe each other, as peers in production would. One second of
 * allowance, times the time scale: these cases run 20 times in a row, also
 * under TSan, and with half a second a worker starved that long on a loaded
 * 2-core machine (or on an emulated CPU) has had its own silence blamed on
 * the healthy stable peer. */
static void fast_heartbeat(struct xfer_attr *a, int role)
{
	if (role <= 1) {
		a->heartbeat_ms = 100;
		a->heartbeat_misses = 10 * t_time_scale();
	}
}

/* Waits until the engine declares the target dead (heartbeats or a transport
 * error); fails the case past `ms`. */
static void wait_dead(struct fault_init *f, uint64_t ms)
{
	uint64_t start = mono_ns();
	ms *= t_time_scale();
	while (xfer_peer_state(f->e, f->t) != XFER_PEER_DEAD) {
		CHECK(ms_since(start) < ms);
		usleep(1000);
	}
	fprintf(stderr, "target declared dead %llu ms after we started waiting\n",
		(unsigned long long)ms_since(start));
}

static void submit_pages(struct fault_init *f, uint64_t base)
{
	static uint32_t idx[K_PAGES];
	for (uint32_t i = 0; i < K_PAGES; i++)
		idx[i] = i;
	for (uint64_t k = 0; k < K_CALLS; k++) {
		struct xfer_paged_write pw = {.src = f->src, .dst = f->t_rmr, .page_len = K_PAGE,
					      .src_pages = idx, .src_stride = K_PAGE, .dst_pages = idx,
					      .dst_stride = K_PAGE, .npages = K_PAGES, .imm = 7,
					      .flags = XFER_F_IMM};
		/* Scaled: where immediates follow as notices (verbs with SRX) the
		 * target counts none before a whole write of 10,000 pages has
		 * completed, which takes over 3 s on two NICs in the rxe VM. */
		struct xfer_completion c = {.user_data = base + k, .timeout_ms = 3000ull * t_time_scale()};
		CHECK_OK(xfer_write_paged(f->e, &pw, &c));
	}
}

static int kill_init(struct fault_init *f)
{
	t_child_may_die = 0;
	submit_pages(f, 500);
	int32_t res[K_CALLS];
	/* Within the operations' deadline (3 s, scaled) plus slack: never a hang. */
	reap_exactly(f->e, 500, K_CALLS, res, 6000);
	int failed = 0;
	for (int k = 0; k < K_CALLS; k++) {
		/* Finished before the kill, or failed: which error depends on where
		 * the provider noticed (reset, cancel, deadline, peer death). */
		failed += res[k] != 0;
		fprintf(stderr, "paged write %d: %s\n", k, xfer_strerror(res[k]));
	}
	wait_dead(f, 3000);
	uint64_t start = mono_ns();
	CHECK_RC(xfer_write_imm(f->e, f->t, 1, NULL), -XFER_EPEER);
	struct xfer_write w = {.src = f->src, .dst = f->t_rmr, .len = 8};
	CHECK_RC(xfer_write(f->e, &w, NULL), -XFER_EPEER);
	CHECK(ms_since(start) < 50);
	(void)failed;
	reap_none(f->e, 100);
	return 0;
}

static int kill_target(struct fault_target *t)
{
	/* The first 50 pages' immediates, or (notices) the first write's. */
	struct xfer_completion c = {.user_data = 1, .timeout_ms = 10000ull * t_time_scale()};
	CHECK_OK(xfer_expect_imm(t->e, 7, 50, &c));
	CHECK_RC(t_wait_cqe(t->e, 10000).res, 0);
	raise(SIGKILL);
	return 1;
}

const struct fault_case case_kill_target = {"kill_target_mid_paged", kill_init, kill_target,
					    fast_heartbeat};

/* ------------------------------------------------------ already dead peer */

static int dead_init(struct fault_init *f)
{
	t_child_may_die = 0;
	/* Our xfer_peer_add of the target is done only now: a target that died
	 * before it would make shm's connect fail with -ECONNREFUSED in the
	 * set-up, not in the case. */
	t_send_u64(f->fd_t, 1); /* you may die now */
	CHECK(t_recv_u64(f->fd_t) == 1); /* about to die */
	wait_dead(f, 3000);
	CHECK_RC(xfer_write_imm(f->e, f->t, 1, NULL), -XFER_EPEER);
	CHECK_RC(xfer_send(f->e, f->t, "x", 1, NULL), -XFER_EPEER);
	uint32_t idx = 0;
	struct xfer_paged_write pw = {.src = f->src, .dst = f->t_rmr, .page_len = 8, .src_pages = &idx,
				      .dst_pages = &idx, .npages = 1};
	CHECK_RC(xfer_write_paged(f->e, &pw, NULL), -XFER_EPEER);
	xfer_rmr_t *r = NULL;
	uint8_t d[XFER_DESC_MAX] = {0};
	CHECK(xfer_rmr_import(f->e, f->t, d, sizeof(d), &r) < 0);
	/* Once nothing is in flight to it, the dead peer can be removed. */
	CHECK_OK(xfer_peer_remove(f->e, f->t));
	CHECK(xfer_peer_state(f->e, f->t) == -ENOENT);
	return 0;
}

static int dead_target(struct fault_target *t)
{
	CHECK(t_recv_u64(t->fd) == 1);
	t_send_u64(t->fd, 1);
	raise(SIGKILL);
	return 1;
}

const struct fault_case case_dead_peer = {"submit_to_dead_peer", dead_init, dead_target,
					  fast_heartbeat};

/* ------------------------------------------------------------- restart */

static int restart_init(struct fault_init *f)
{
	uint8_t old_desc[XFER_DESC_MAX], addr[XFER_ADDR_MAX];
	t_send_u64(f->fd_t, 1); /* set up: the target may restart now */
	size_t olen = t_recv_blob(f->fd_t, old_desc, sizeof(old_desc));
	size_t alen = t_recv_blob(f->fd_t, addr, sizeof(addr)); /* the new incarnation */
	wait_dead(f, 3000);
	xfer_peer_t p2;
	CHECK_OK(xfer_peer_add(f->e, addr, alen, &p2));
	CHECK(p2 != f->t);
	CHECK(xfer_peer_id(f->e, p2) != xfer_peer_id(f->e, f->t));
	/* The old incarnation's descriptors are refused... */
	xfer_rmr_t *r = NULL;
	CHECK_RC(xfer_rmr_import(f->e, p2, old_desc, olen, &r), -XFER_EFOREIGN);
	struct xfer_write w = {.src = f->src, .dst = f->t_rmr, .len = 8};
	CHECK_RC(xfer_write(f->e, &w, NULL), -XFER_EPEER);
	/* ...and the new one's work. */
	xfer_rmr_t *fresh = t_recv_rmr(f->e, p2, f->fd_t);
	w.dst = fresh;
	w.len = 4096;
	w.imm = 4;
	w.flags = XFER_F_IMM;
	struct xfer_completion c = {.user_data = 77};
	CHECK_OK(xfer_write(f->e, &w, &c));
	int32_t res = -1;
	reap_exactly(f->e, 77, 1, &res, 5000);
	CHECK_RC(res, 0);
	CHECK(t_recv_u64(f->fd_t) == 1);
	xfer_rmr_free(fresh);
	return 0;
}

static int restart_target(struct fault_target *t)
{
	uint8_t desc[XFER_DESC_MAX], addr[XFER_ADDR_MAX];
	CHECK(t_recv_u64(t->fd) == 1);
	int dlen = xfer_mr_desc(t->mr, desc, sizeof(desc), NULL);
	CHECK(dlen > 0);
	t_send_blob(t->fd, desc, (size_t)dlen);
	/* The same process starts over with a new engine: a new incarnation. */
	CHECK_OK(xfer_mr_dereg(t->mr));
	xfer_engine_destroy(t->e);
	struct xfer_attr a;
	t_attr(&a);
	fast_heartbeat(&a, 1);
	t->e = t_engine(&a);
	int alen = xfer_engine_addr(t->e, addr, sizeof(addr), NULL);
	t_send_blob(t->fd, addr, (size_t)alen);
	CHECK_OK(xfer_mr_reg(t->e, t->buf + F_GUARD, F_REGION, &t->mr));
	t_send_desc(t->fd, t->mr);
	struct xfer_completion c = {.user_data = 1};
	CHECK_OK(xfer_expect_imm(t->e, 4, 1, &c));
	CHECK_RC(t_wait_cqe(t->e, 10000).res, 0);
	uint8_t want[4096];
	t_fill(want, sizeof(want), 1);
	(void)want; /* the first 64 KiB of the source is the stable peer's scratch */
	t_send_u64(t->fd, 1);
	return 0;
}

const struct fault_case case_peer_restart = {"peer_restart", restart_init, restart_target,
					     fast_heartbeat};

/* ------------------------------------------ a dead peer holding every credit */

/* The target stops making progress (its worker blocks, as a hung host's
 * would) while the initiator's writes to it hold every posting credit of
 * the NIC; those requests never complete. The stable peer, alive, must stay
 * LIVE with heartbeats on: a probe that cannot be posted for lack of
 * credits here is not the peer's silence, and probes have credits of their
 * own. The hung target itself must still be declared dead. */

#define W_IMM 0x3ed9
#define W_LEN 4096u
#define W_WATCH_MS 2500

static atomic_int released;

static void wedge_cb(void *ctx, const struct xfer_cqe *cqe)
{
	const struct fault_target *t = ctx;
	(void)cqe;
	t_send_u64(t->fd, 1);          /* wedged: the worker is in here */
	CHECK(t_recv_u64(t->fd) == 2); /* released by the initiator */
	atomic_store(&released, 1);
}

static int wedge_target(struct fault_target *t)
{
	struct xfer_completion c = {.user_data = 1, .cb = wedge_cb, .cb_ctx = t, .timeout_ms = 60000};
	CHECK_OK(xfer_expect_imm(t->e, W_IMM, 1, &c));
	while (!atomic_load(&released))
		usleep(1000);
	return 0;
}

static int wedge_init(struct fault_init *f)
{
	struct xfer_nic_info ni;
	CHECK_OK(xfer_engine_nic_info(f->e, 0, &ni));
	/* More writes than the NIC takes at once: every credit held, more queued. */
	uint32_t n = ni.tx_depth + 256;
	usleep(300000 * t_time_scale()); /* both peers answer PINGs by now */
	CHECK(xfer_peer_state(f->e, f->s) == XFER_PEER_LIVE);
	struct xfer_completion c0 = {.user_data = 999, .timeout_ms = 60000};
	CHECK_OK(xfer_write_imm(f->e, f->t, W_IMM, &c0));
	CHECK(t_recv_u64(f->fd_t) == 1);
	for (uint32_t i = 0; i < n; i++) {
		/* Past the first 64 KiB of the source: the stable peer's scratch,
		 * rewritten by stable_check while these may still be in flight. */
		struct xfer_write w = {.src = f->src, .dst = f->t_rmr, .src_off = 65536 + (i % 64) * W_LEN,
				       .dst_off = (i % 64) * W_LEN, .len = W_LEN};
		struct xfer_completion c = {.user_data = 1000 + i, .timeout_ms = 60000};
		CHECK_OK(xfer_write(f->e, &w, &c));
	}
	/* Two and a half allowances (both scaled by t_time_scale): the stable
	 * peer stays live throughout; the hung target is declared dead, which
	 * completes every write to it early. */
	uint64_t start = mono_ns();
	while (ms_since(start) < W_WATCH_MS * t_time_scale()) {
		CHECK(xfer_peer_state(f->e, f->s) == XFER_PEER_LIVE);
		usleep(10000);
	}
	CHECK(xfer_peer_state(f->e, f->t) == XFER_PEER_DEAD);
	/* Each exactly once: failed with the target's death (or done before it,
	 * where the provider completes a write once it is queued, as shm). */
	int32_t *res = calloc(n + 1, sizeof(*res));
	CHECK(res);
	reap_exactly(f->e, 999, n + 1, res, 10000);
	for (uint32_t i = 0; i <= n; i++)
		CHECK(res[i] == 0 || res[i] == -XFER_EPEER);
	free(res);
	/* Released, the target drains what it was sent; our credits return. */
	t_send_u64(f->fd_t, 2);
	return 0;
}

const struct fault_case case_dead_peer_credits = {"dead_peer_holds_credits", wedge_init, wedge_target,
						  fast_heartbeat};

/* ------------------------------------------------------ kill mid scatter */

#define S_CALLS 4
#define S_ENTRIES 1024u
#define S_LEN 1024u

/* Scatters to {target, stable peer}, entries alternating; the target kills
 * itself after 50 have arrived. Every scatter completes in time, no entry
 * to the stable peer fails, the group is free again, the target is dead. */
static int kill_scatter_init(struct fault_init *f)
{
	t_child_may_die = 0;
	static struct xfer_scatter_entry en[S_ENTRIES];
	static int32_t status[S_CALLS][S_ENTRIES];
	xfer_peer_t members[2] = {f->t, f->s};
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(f->e, members, 2, &g));
	for (uint32_t i = 0; i < S_ENTRIES; i++) {
		uint32_t k = i / 2;
		en[i] = (struct xfer_scatter_entry){.member = i & 1, .src_off = (uint64_t)(k % 64) * S_LEN,
						    .len = S_LEN, .dst = (i & 1) ? f->s_rmr : f->t_rmr,
						    .dst_off = (uint64_t)(k % ((i & 1) ? 64 : 1024)) * S_LEN};
	}
	uint64_t start = mono_ns();
	for (uint64_t k = 0; k < S_CALLS; k++) {
		struct xfer_scatter sc = {.src = f->src, .entries = en, .n = S_ENTRIES, .imm = 9,
					  .flags = XFER_F_IMM, .status = status[k]};
		struct xfer_completion c = {.user_data = 600 + k, .timeout_ms = 10000 * t_time_scale()};
		CHECK_OK(xfer_scatter(f->e, g, &sc, &c));
	}
	int32_t res[S_CALLS];
	/* Before their deadline: the deadline would complete them early, and
	 * entries still in flight would then go on landing unobserved. */
	reap_exactly(f->e, 600, S_CALLS, res, 10000);
	uint64_t took = ms_since(start);
	uint32_t to_target_failed = 0;
	for (int k = 0; k < S_CALLS; k++) {
		CHECK(res[k] != -ETIMEDOUT);
		for (uint32_t i = 0; i < S_ENTRIES; i++) {
			if (i & 1)
				CHECK_RC(status[k][i], 0); /* the stable peer is unaffected */
			else
				to_target_failed += status[k][i] != 0;
		}
	}
	fprintf(stderr, "%d scatters done in %llu ms; %u of %u entries to the killed target failed\n",
		S_CALLS, (unsigned long long)took, to_target_failed, S_CALLS * S_ENTRIES / 2);
	/* Nothing is left in flight to the dead member. */
	CHECK_OK(xfer_group_destroy(g));
	wait_dead(f, 5000);
	reap_none(f->e, 100);
	return 0;
}

/* ----------------------------------------------- dead member of a group */

#define DM_SCATTER_IMM 0x5ca77e5u
#define DM_BARRIER_IMM 0xba221e5u

/* The target dies; a scatter to the group {target, stable} then fails the
 * target's entry (a transport error, or -XFER_EPEER once heartbeats have
 * declared it dead) while the stable member gets its bytes and immediate.
 * Then, with the target declared dead, a barrier skips it with -XFER_EPEER
 * and still reaches the stable member. Heartbeats are on: on tcp;ofi_rxm a
 * write to the dead member is refused with -EAGAIN while rxm reconnects,
 * and the engine's posting FIFO holds the live member's entry behind it
 * until the member is declared dead. */
static int dead_member_init(struct fault_init *f)
{
	t_child_may_die = 0;
	/* A member that worked before it died: the connection to it is up. */
	struct xfer_write w = {.src = f->src, .dst = f->t_rmr, .len = 4096};
	struct xfer_completion wc = {.user_data = 699, .timeout_ms = 8000};
	int32_t res = 0;
	CHECK_OK(xfer_write(f->e, &w, &wc));
	reap_exactly(f->e, 699, 1, &res, 12000);
	CHECK_RC(res, 0);
	t_send_u64(f->fd_t, 1); /* die now */
	uint8_t byte;
	while (read(f->fd_t, &byte, 1) > 0) /* its socket closes when it is gone */
		;
	xfer_peer_t members[2] = {f->t, f->s};
	xfer_group_t *g = NULL;
	CHECK_OK(xfer_group_create(f->e, members, 2, &g));
	uint64_t cmd = STABLE_EXPECT | STABLE_VERIFY | DM_SCATTER_IMM;
	t_send_u64(f->fd_s, cmd);
	CHECK(t_recv_u64(f->fd_s) == cmd); /* armed */
	t_fill(f->src_buf + 8192, 4096, DM_SCATTER_IMM);
	struct xfer_scatter_entry en[2] = {
		{.member = 0, .src_off = 0, .len = 4096, .dst = f->t_rmr, .dst_off = 0},
		{.member = 1, .src_off = 8192, .len = 4096, .dst = f->s_rmr, .dst_off = 0}};
	int32_t status[2] = {1, 1};
	struct xfer_scatter sc = {.src = f->src, .entries = en, .n = 2, .imm = DM_SCATTER_IMM,
				  .flags = XFER_F_IMM, .status = status};
	struct xfer_completion c = {.user_data = 700, .timeout_ms = 8000};
	uint64_t start = mono_ns();
	int rc = xfer_scatter(f->e, g, &sc, &c);
	if (rc == -XFER_EPEER) {
		fprintf(stderr, "target already declared dead at submission: scatter refused\n");
	} else {
		CHECK_OK(rc);
		reap_exactly(f->e, 700, 1, &res, 12000);
		fprintf(stderr, "scatter: %s after %llu ms; dead member %s, live member %s\n",
			xfer_strerror(res), (unsigned long long)ms_since(start), xfer_strerror(status[0]),
			xfer_strerror(status[1]));
		CHECK(res < 0 && status[0] < 0);
		CHECK_RC(status[1], 0);
		CHECK(t_recv_u64(f->fd_s) == cmd); /* bytes and immediate verified */
	}
	wait_dead(f, 8000);
	if (rc == -XFER_EPEER) {
		/* Still show the live member is unaffected: scatter to it alone. */
		t_send_u64(f->fd_s, cmd);
		CHECK(t_recv_u64(f->fd_s) == cmd);
		struct xfer_scatter one = {.src = f->src, .entries = &en[1], .n = 1, .imm = DM_SCATTER_IMM,
					   .flags = XFER_F_IMM};
		CHECK_OK(xfer_scatter(f->e, g, &one, &c));
		reap_exactly(f->e, 700, 1, &res, 12000);
		CHECK_RC(res, 0);
		CHECK(t_recv_u64(f->fd_s) == cmd);
	}
	cmd = STABLE_EXPECT | DM_BARRIER_IMM;
	t_send_u64(f->fd_s, cmd);
	CHECK(t_recv_u64(f->fd_s) == cmd);
	struct xfer_completion bc = {.user_data = 701, .timeout_ms = 8000};
	CHECK_OK(xfer_barrier(f->e, g, DM_BARRIER_IMM, &bc));
	reap_exactly(f->e, 701, 1, &res, 12000);
	CHECK_RC(res, -XFER_EPEER);
	CHECK(t_recv_u64(f->fd_s) == cmd); /* the live member got the barrier */
	CHECK_OK(xfer_group_destroy(g));
	reap_none(f->e, 100);
	return 0;
}

static int kill_scatter_target(struct fault_target *t)
{
	struct xfer_completion c = {.user_data = 1, .timeout_ms = 10000};
	CHECK_OK(xfer_expect_imm(t->e, 9, 50, &c));
	CHECK_RC(t_wait_cqe(t->e, 10000).res, 0);
	raise(SIGKILL);
	return 1;
}

static int dead_member_target(struct fault_target *t)
{
	CHECK(t_recv_u64(t->fd) == 1);
	raise(SIGKILL);
	return 1;
}

/* An allowance of two seconds: on a loaded 2-core machine (this case runs
 * 20 times in a row beside other tests, and under TSan) the initiator's
 * worker has been starved for over half a second, and then its own missed
 * PINGs make the healthy stable peer look dead. */
static void heartbeat_2s(struct xfer_attr *a, int role)
{
	if (role <= 1) {
		a->heartbeat_ms = 100;
		a->heartbeat_misses = 20 * t_time_scale();
	}
}

const struct fault_case case_kill_scatter = {"kill_target_mid_scatter", kill_scatter_init,
					     kill_scatter_target, heartbeat_2s};
const struct fault_case case_dead_member = {"scatter_dead_member", dead_member_init, dead_member_target,
					    fast_heartbeat};
