/* Remote keys and region lifetime: a forged key, a descriptor that outlived
 * its registration (also when the same memory was registered again), and a
 * revoked region must all make the writer see an error while not one byte
 * changes at the target. */
#include <string.h>
#include <unistd.h>

#include "cases.h"
#include "wire/wire.h"

/* The target's region stays all zero in these cases. */
static void expect_untouched(struct fault_target *t)
{
	t_sync_worker(t->e);
	for (size_t i = 0; i < F_REGION; i++)
		if (t->buf[F_GUARD + i] != 0) {
			fprintf(stderr, "target byte %zu changed\n", i);
			exit(1);
		}
}

/* Writes 4 KiB + imm through rmr and expects an error completion in time. */
static void expect_rejected(struct fault_init *f, const xfer_rmr_t *rmr, uint64_t ud)
{
	struct xfer_write w = {.src = f->src, .dst = rmr, .len = 4096, .dst_off = 4096, .imm = 99,
			       .flags = XFER_F_IMM};
	struct xfer_completion c = {.user_data = ud, .timeout_ms = 5000};
	uint64_t start = mono_ns();
	CHECK_OK(xfer_write(f->e, &w, &c));
	int32_t res = 0;
	reap_exactly(f->e, ud, 1, &res, 8000);
	struct xfer_nic_info ni;
	CHECK_OK(xfer_engine_nic_info(f->e, 0, &ni));
	/* Without delivery-complete the writer cannot be told; the target's
	 * checks (nothing landed, no immediate) still apply. */
	if (res >= 0 && ni.delivery_complete) {
		fprintf(stderr, "write through a dead key succeeded\n");
		exit(1);
	}
	fprintf(stderr, "rejected with %d (%s) after %llu ms\n", res, xfer_strerror(res),
		(unsigned long long)ms_since(start));
}

static xfer_rmr_t *forge(struct fault_init *f, uint64_t key_delta)
{
	uint8_t d[XFER_DESC_MAX];
	size_t len = t_recv_blob(f->fd_t, d, sizeof(d));
	struct wire_desc wd;
	CHECK_OK(xi_wire_desc_decode(d, len, &wd));
	for (unsigned n = 0; n < wd.nnics; n++)
		wd.nic[n].key += key_delta;
	int elen = xi_wire_desc_encode(&wd, d, sizeof(d), NULL);
	CHECK(elen > 0);
	xfer_rmr_t *r = NULL;
	CHECK_OK(xfer_rmr_import(f->e, f->t, d, (size_t)elen, &r));
	return r;
}

static int forged_init(struct fault_init *f)
{
	xfer_rmr_t *r = forge(f, 0x10000);
	expect_rejected(f, r, 1);
	xfer_rmr_free(r);
	t_send_u64(f->fd_t, 1);
	CHECK(t_recv_u64(f->fd_t) == 1);
	return 0;
}

static int untouched_target(struct fault_target *t)
{
	t_send_desc(t->fd, t->mr);
	CHECK(t_recv_u64(t->fd) == 1);
	expect_untouched(t);
	uint32_t n = 1;
	CHECK_OK(xfer_imm_disarm(t->e, 99, &n));
	CHECK(n == 0);
	t_send_u64(t->fd, 1);
	return 0;
}

const struct fault_case case_forged_key = {"forged_key", forged_init, untouched_target, NULL};

/* ------------------------------------------------- the engine's own buffers */

/* Keys used to be sequential within an engine, and the sink's is in every
 * address: a peer could guess those of the receive and SEND bounce buffers,
 * registered right after it. Keys are random now and those buffers are
 * registered for local access only; writes through the old guesses are
 * rejected (where addresses are offsets, as on tcp, guessing the address is
 * trivial too). internal_buffers (cases_guess.c) writes through the real
 * keys. */
static int bounce_init(struct fault_init *f)
{
	uint8_t addr[XFER_ADDR_MAX], d[XFER_DESC_MAX];
	size_t alen = t_recv_blob(f->fd_t, addr, sizeof(addr));
	size_t dlen = t_recv_blob(f->fd_t, d, sizeof(d));
	struct wire_addr a;
	struct wire_desc wd;
	CHECK_OK(xi_wire_addr_decode(addr, alen, &a));
	CHECK_OK(xi_wire_desc_decode(d, dlen, &wd));
	if (wd.nic[0].base != 0) {
		fprintf(stderr, "SKIP: remote addresses are virtual addresses here; a forger cannot guess them\n");
		t_send_u64(f->fd_t, 1);
		CHECK(t_recv_u64(f->fd_t) == 1);
		return 0;
	}
	/* Bring-up registers the sink, then the receive buffers, then the SEND
	 * buffers, one key each per NIC. */
	for (uint64_t k = 1; k <= 2; k++) {
		for (unsigned n = 0; n < wd.nnics; n++)
			wd.nic[n].key = a.nic[n].sink_key + k * wd.nnics;
		wd.len = 65536;
		wd.flags = 0;
		int elen = xi_wire_desc_encode(&wd, d, sizeof(d), NULL);
		CHECK(elen > 0);
		xfer_rmr_t *r = NULL;
		CHECK_OK(xfer_rmr_import(f->e, f->t, d, (size_t)elen, &r));
		/* tcp;ofi_rxm drops the connection after a rejected write and
		 * reconnects on demand: a write in that window fails for that
		 * reason alone, so try until the key itself is judged. */
		int32_t res = 0;
		for (int attempt = 0; attempt < 40; attempt++) {
			struct xfer_write w = {.src = f->src, .dst = r, .len = 4096, .dst_off = 4096, .imm = 99,
					       .flags = XFER_F_IMM};
			struct xfer_completion c = {.user_data = 20 + k};
			CHECK_OK(xfer_write(f->e, &w, &c));
			reap_exactly(f->e, 20 + k, 1, &res, 8000);
			if (res != -ENOTCONN && res != -ECONNRESET)
				break;
			usleep(50000);
		}
		fprintf(stderr, "%s buffers: write rejected with %d (%s)\n", k == 1 ? "receive" : "SEND", res,
			xfer_strerror(res));
		CHECK(res < 0 && res != -ENOTCONN && res != -ECONNRESET);
		xfer_rmr_free(r);
	}
	t_send_u64(f->fd_t, 1);
	CHECK(t_recv_u64(f->fd_t) == 1);
	return 0;
}

static int bounce_target(struct fault_target *t)
{
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(t->e, addr, sizeof(addr), NULL);
	CHECK(alen > 0);
	t_send_blob(t->fd, addr, (size_t)alen);
	return untouched_target(t);
}

const struct fault_case case_forged_bounce = {"forged_bounce_key", bounce_init, bounce_target, NULL};

/* ---------------------------------------------------------- stale descriptors */

static int stale_init(struct fault_init *f)
{
	CHECK(t_recv_u64(f->fd_t) == 1); /* deregistered */
	expect_rejected(f, f->t_rmr, 10);
	xfer_rmr_t *fresh = t_recv_rmr(f->e, f->t, f->fd_t); /* same memory, registered again */
	expect_rejected(f, f->t_rmr, 11);
	/* The new descriptor works. tcp;ofi_rxm drops the connection when the
	 * target rejects a write and reconnects on demand; requests in that
	 * window fail with -ENOTCONN, and an application retries them. */
	struct xfer_write w = {.src = f->src, .src_off = 65536, .dst = fresh, .len = 100, .dst_off = 0,
			       .imm = 12, .flags = XFER_F_IMM};
	int32_t res = -1;
	for (int attempt = 0; attempt < 40; attempt++) {
		struct xfer_completion c = {.user_data = 12};
		CHECK_OK(xfer_write(f->e, &w, &c));
		reap_exactly(f->e, 12, 1, &res, 5000);
		if (res != -ENOTCONN && res != -ECONNRESET)
			break;
		usleep(50000);
	}
	CHECK_RC(res, 0);
	CHECK(xfer_peer_state(f->e, f->t) == XFER_PEER_LIVE);
	xfer_rmr_free(fresh);
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

static int stale_target(struct fault_target *t)
{
	CHECK_OK(xfer_mr_dereg(t->mr));
	t->mr = NULL;
	t_send_u64(t->fd, 1);
	CHECK_OK(xfer_mr_reg(t->e, t->buf + F_GUARD, F_REGION, &t->mr));
	struct xfer_completion c = {.user_data = 12};
	CHECK_OK(xfer_expect_imm(t->e, 12, 1, &c));
	t_send_desc(t->fd, t->mr);
	CHECK(t_recv_u64(t->fd) == 2);
	/* The immediate says the data landed (a completion at the writer does
	 * not, on transmit-complete providers). Retries may have landed more. */
	CHECK_RC(t_wait_cqe(t->e, 10000).res, 0);
	uint32_t extra = 0;
	CHECK_OK(xfer_imm_disarm(t->e, 12, &extra));
	/* Only the 100 bytes through the new descriptor landed. */
	uint8_t *want = malloc(65536 + 100);
	CHECK(want);
	t_fill(want, 65536 + 100, 1); /* what the source holds past the stable peer's scratch */
	CHECK(memcmp(t->buf + F_GUARD, want + 65536, 100) == 0);
	free(want);
	for (size_t i = 100; i < F_REGION; i++)
		CHECK(t->buf[F_GUARD + i] == 0);
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_stale_desc = {"stale_descriptor", stale_init, stale_target, NULL};

/* -------------------------------------------------------------- revocation */

#define REV_PAGES 256u
#define REV_PAGE 4096u

static int revoke_init(struct fault_init *f)
{
	uint32_t idx[REV_PAGES];
	for (uint32_t i = 0; i < REV_PAGES; i++)
		idx[i] = i;
	/* First the pages land... */
	struct xfer_paged_write pw = {.src = f->src, .dst = f->t_rmr, .page_len = REV_PAGE,
				      .src_pages = idx, .src_stride = REV_PAGE, .dst_pages = idx,
				      .dst_stride = REV_PAGE, .npages = REV_PAGES, .imm = 5,
				      .flags = XFER_F_IMM};
	struct xfer_completion c = {.user_data = 20, .timeout_ms = 5000};
	CHECK_OK(xfer_write_paged(f->e, &pw, &c));
	int32_t res = -1;
	reap_exactly(f->e, 20, 1, &res, 8000);
	CHECK_RC(res, 0);
	CHECK(t_recv_u64(f->fd_t) == 1); /* ...then the target revokes. */
	/* Late writes of the aborted request: every one must fail. */
	pw.imm = 6;
	c.user_data = 21;
	uint64_t start = mono_ns();
	CHECK_OK(xfer_write_paged(f->e, &pw, &c));
	reap_exactly(f->e, 21, 1, &res, 8000);
	struct xfer_nic_info ni;
	CHECK_OK(xfer_engine_nic_info(f->e, 0, &ni));
	CHECK(res < 0 || !ni.delivery_complete);
	fprintf(stderr, "late paged write failed with %s after %llu ms\n", xfer_strerror(res),
		(unsigned long long)ms_since(start));
	expect_rejected(f, f->t_rmr, 22);
	/* Plain writes (no immediate) must be refused just the same. shm 1.17
	 * checks keys only for writes that carry data and stalls on refused ones
	 * past its inline size, so there the cancel handshake is the tool
	 * (docs/failure-semantics.md). */
	if (ni.delivery_complete) {
		struct xfer_write plain = {.src = f->src, .src_off = 65536, .dst = f->t_rmr, .len = 65536};
		struct xfer_completion pc = {.user_data = 23, .timeout_ms = 5000};
		CHECK_OK(xfer_write(f->e, &plain, &pc));
		reap_exactly(f->e, 23, 1, &res, 8000);
		CHECK(res < 0);
	}
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

static int revoke_target(struct fault_target *t)
{
	struct xfer_completion c = {.user_data = 1, .timeout_ms = 10000};
	CHECK_OK(xfer_expect_imm(t->e, 5, REV_PAGES, &c));
	CHECK_RC(t_wait_cqe(t->e, 10000).res, 0);
	CHECK_OK(xfer_mr_revoke(t->mr));
	/* The pages now belong to another request: poison them and remember. */
	memset(t->buf + F_GUARD, 0x77, F_REGION);
	uint64_t sum = t_checksum(t->buf + F_GUARD, F_REGION);
	t_send_u64(t->fd, 1);
	CHECK(t_recv_u64(t->fd) == 2);
	t_sync_worker(t->e);
	CHECK(t_checksum(t->buf + F_GUARD, F_REGION) == sum);
	uint32_t n = 1;
	CHECK_OK(xfer_imm_disarm(t->e, 6, &n));
	CHECK(n == 0);
	CHECK_RC(xfer_mr_revoke(t->mr), 0); /* idempotent */
	struct xfer_write w = {.src = t->mr, .dst = NULL, .len = 1};
	CHECK(xfer_write(t->e, &w, NULL) < 0);
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_revoke = {"revoke_late_writes", revoke_init, revoke_target, NULL};

/* ------------------------------------------------- deregister while in flight */

static int busy_init(struct fault_init *f)
{
	enum { N = 256 };
	for (uint64_t i = 0; i < N; i++) {
		struct xfer_write w = {.src = f->src, .dst = f->t_rmr, .len = F_REGION};
		struct xfer_completion c = {.user_data = 100 + i};
		int rc;
		while ((rc = xfer_write(f->e, &w, &c)) == -EAGAIN)
			;
		CHECK_OK(rc);
	}
	/* Submitted a moment ago, 256 MiB cannot have landed yet. */
	CHECK_RC(xfer_mr_dereg(f->src), -EBUSY);
	CHECK_RC(xfer_mr_revoke(f->src), -EBUSY);
	int32_t res[N];
	reap_exactly(f->e, 100, N, res, 60000);
	for (int i = 0; i < N; i++)
		CHECK_RC(res[i], 0);
	t_send_u64(f->fd_t, 1);
	CHECK(t_recv_u64(f->fd_t) == 1);
	return 0;
}

static int busy_target(struct fault_target *t)
{
	CHECK(t_recv_u64(t->fd) == 1);
	t_sync_worker(t->e);
	/* Past the first 64 KiB (the stable peer's scratch) the source holds seed 1. */
	uint8_t *want = malloc(F_REGION);
	CHECK(want);
	t_fill(want, F_REGION, 1);
	CHECK(memcmp(t->buf + F_GUARD + 65536, want + 65536, F_REGION - 65536) == 0);
	free(want);
	t_send_u64(t->fd, 1);
	return 0;
}

const struct fault_case case_dereg_busy = {"dereg_in_flight", busy_init, busy_target, NULL};
