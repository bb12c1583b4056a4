/* Guessing and forging (issue 13, item 1): a writer fenced by revoke that
 * re-tries its old key plus or minus a little on the re-registered memory, a
 * peer holding one region's descriptor reaching the neighbouring region
 * (through that region's key and an offset, and through keys next to
 * either), a peer holding only the engine's address naming user regions, a
 * peer that knows the keys of the target's receive and SEND buffers (read
 * from the target itself, the worst case), and a third engine that sends a
 * message and a BYE claiming to be the honest peer. Nothing may land, no
 * forged byte may reach the application, and the honest peer stays LIVE. */
#include <string.h>
#include <unistd.h>

#include "cases.h"
#include "core/objects.h"
#include "wire/msg.h"
#include "wire/wire.h"

static void zero_or_die(const uint8_t *p, size_t len, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i]) {
			fprintf(stderr, "%s: byte %zu changed\n", what, i);
			exit(1);
		}
}

static void no_imm(xfer_engine_t *e, uint32_t imm)
{
	uint32_t n = 1;
	CHECK_OK(xfer_imm_disarm(e, imm, &n));
	CHECK(n == 0);
}

/* Imports the edited descriptor d and writes through it: 4 KiB with
 * immediate 99 at dst_off, then 4 KiB plain. Where the provider reports a
 * rejected write (delivery-complete) both must fail; the target's checks
 * (nothing landed, no immediate) apply everywhere. */
static void refused(struct fault_init *f, const struct wire_desc *d, uint64_t dst_off, uint64_t ud)
{
	uint8_t b[XFER_DESC_MAX];
	int len = xi_wire_desc_encode(d, b, sizeof(b), NULL);
	CHECK(len > 0);
	xfer_rmr_t *r = NULL;
	CHECK_OK(xfer_rmr_import(f->e, f->t, b, (size_t)len, &r));
	int32_t res[2];
	for (int i = 0; i < 2; i++) {
		struct xfer_write w = {.src = f->src, .dst = r, .len = 4096, .dst_off = dst_off, .imm = 99,
				       .flags = i ? 0 : XFER_F_IMM};
		struct xfer_completion c = {.user_data = ud + (uint64_t)i, .timeout_ms = 5000};
		CHECK_OK(xfer_write(f->e, &w, &c));
	}
	reap_exactly(f->e, ud, 2, res, 8000);
	struct xfer_nic_info ni;
	CHECK_OK(xfer_engine_nic_info(f->e, 0, &ni));
	for (int i = 0; i < 2; i++) {
		CHECK(res[i] != -ETIMEDOUT);
		CHECK(res[i] < 0 || !ni.delivery_complete);
	}
	xfer_rmr_free(r);
}

static struct wire_desc recv_desc(int fd)
{
	uint8_t b[XFER_DESC_MAX];
	size_t len = t_recv_blob(fd, b, sizeof(b));
	struct wire_desc d;
	CHECK_OK(xi_wire_desc_decode(b, len, &d));
	return d;
}

static void send_desc_of(int fd, const xfer_mr_t *mr)
{
	t_send_desc(fd, mr);
}

/* The peer that misbehaved is still a live peer, at both ends. */
static void still_live(struct fault_init *f)
{
	CHECK(xfer_peer_state(f->e, f->t) == XFER_PEER_LIVE);
}

/* ------------------------------------- old key +- n after revoke + re-register */

static int rereg_init(struct fault_init *f)
{
	struct wire_desc old = recv_desc(f->fd_t);
	CHECK(t_recv_u64(f->fd_t) == 1); /* revoked, the same memory registered again */
	uint64_t ud = 100;
	for (int64_t delta = -4; delta <= 4; delta++) {
		struct wire_desc d = old;
		for (unsigned n = 0; n < d.nnics; n++)
			d.nic[n].key += (uint64_t)delta;
		refused(f, &d, 0, ud);
		ud += 2;
	}
	still_live(f);
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

static int rereg_target(struct fault_target *t)
{
	send_desc_of(t->fd, t->mr);
	CHECK_OK(xfer_mr_revoke(t->mr));
	xfer_mr_t *again = NULL;
	CHECK_OK(xfer_mr_reg(t->e, t->buf + F_GUARD, F_REGION, &again));
	t_send_u64(t->fd, 1);
	CHECK(t_recv_u64(t->fd) == 2);
	t_sync_worker(t->e);
	zero_or_die(t->buf + F_GUARD, F_REGION, "re-registered region");
	no_imm(t->e, 99);
	CHECK(xfer_peer_state(t->e, t->init) == XFER_PEER_LIVE);
	CHECK_OK(xfer_mr_dereg(again));
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_old_key_rereg = {"old_key_after_reregister", rereg_init, rereg_target, NULL};

/* ------------------------------------------------------- the neighbour region */

#define NB_LEN (256u << 10)

static int write_retrying(struct fault_init *f, const xfer_rmr_t *r, uint32_t imm, uint64_t ud)
{
	/* tcp;ofi_rxm drops the connection after a rejected write and reconnects
	 * on demand; a write in that window fails for that reason alone. */
	int32_t res = -1;
	for (int attempt = 0; attempt < 40; attempt++) {
		struct xfer_write w = {.src = f->src, .src_off = 65536, .dst = r, .len = 100, .imm = imm,
				       .flags = XFER_F_IMM};
		struct xfer_completion c = {.user_data = ud};
		CHECK_OK(xfer_write(f->e, &w, &c));
		reap_exactly(f->e, ud, 1, &res, 5000);
		if (res != -ENOTCONN && res != -ECONNRESET)
			break;
		usleep(50000);
	}
	return res;
}

static int nb_init(struct fault_init *f)
{
	struct wire_desc a = recv_desc(f->fd_t), b = recv_desc(f->fd_t);
	uint64_t dist = t_recv_u64(f->fd_t); /* B's first byte minus A's */
	uint64_t ud = 200;
	/* A's key, with an offset that reaches B (addresses are offsets into the
	 * region on tcp, virtual addresses on others: the same sum either way). */
	struct wire_desc d = a;
	d.len = UINT64_MAX; /* so that our own bounds check lets it go */
	refused(f, &d, dist, ud);
	ud += 2;
	/* Keys next to A's and to B's, at B's address. */
	for (int64_t delta = -3; delta <= 3; delta++) {
		if (!delta)
			continue;
		d = b;
		for (unsigned n = 0; n < d.nnics; n++)
			d.nic[n].key = a.nic[n].key + (uint64_t)delta;
		refused(f, &d, 0, ud);
		d = b;
		for (unsigned n = 0; n < d.nnics; n++)
			d.nic[n].key = b.nic[n].key + (uint64_t)delta;
		refused(f, &d, 0, ud + 2);
		ud += 4;
	}
	/* B's own descriptor does reach it: the forgeries aimed at real bytes. */
	uint8_t raw[XFER_DESC_MAX];
	int len = xi_wire_desc_encode(&b, raw, sizeof(raw), NULL);
	CHECK(len > 0);
	xfer_rmr_t *rb = NULL;
	CHECK_OK(xfer_rmr_import(f->e, f->t, raw, (size_t)len, &rb));
	CHECK_RC(write_retrying(f, rb, 77, 300), 0);
	xfer_rmr_free(rb);
	still_live(f);
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

static int nb_target(struct fault_target *t)
{
	uint8_t *nb = calloc(1, NB_LEN);
	CHECK(nb);
	xfer_mr_t *mb = NULL;
	CHECK_OK(xfer_mr_reg(t->e, nb, NB_LEN, &mb));
	struct xfer_completion c = {.user_data = 77, .timeout_ms = 20000};
	CHECK_OK(xfer_expect_imm(t->e, 77, 1, &c));
	send_desc_of(t->fd, t->mr);
	send_desc_of(t->fd, mb);
	t_send_u64(t->fd, (uint64_t)(uintptr_t)nb - (uint64_t)(uintptr_t)(t->buf + F_GUARD));
	CHECK(t_recv_u64(t->fd) == 2);
	CHECK_RC(t_wait_cqe(t->e, 10000).res, 0);
	uint32_t extra = 0;
	CHECK_OK(xfer_imm_disarm(t->e, 77, &extra));
	t_sync_worker(t->e);
	zero_or_die(t->buf + F_GUARD, F_REGION, "region A");
	uint8_t want[65536 + 100];
	t_fill(want, sizeof(want), 1);
	CHECK(memcmp(nb, want + 65536, 100) == 0);
	zero_or_die(nb + 100, NB_LEN - 100, "region B past the honest write");
	no_imm(t->e, 99);
	CHECK(xfer_peer_state(t->e, t->init) == XFER_PEER_LIVE);
	CHECK_OK(xfer_mr_dereg(mb));
	free(nb);
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_neighbour = {"neighbour_region", nb_init, nb_target, NULL};

/* --------------------------------------------------- only the engine's address */

static int addr_init(struct fault_init *f)
{
	uint8_t raw[XFER_ADDR_MAX];
	size_t alen = t_recv_blob(f->fd_t, raw, sizeof(raw));
	struct wire_addr a;
	CHECK_OK(xi_wire_addr_decode(raw, alen, &a));
	struct wire_desc d = {.engine_id = a.engine_id, .len = F_REGION, .nnics = a.nnics};
	uint64_t ud = 400;
	/* The keys the engine used to hand out (its id, shifted, counting up),
	 * and keys next to the sink's, which every address carries. */
	for (uint64_t k = 0; k < 8; k++) {
		for (uint64_t region = 1; region <= 2; region++) {
			d.region_id = region;
			for (unsigned n = 0; n < d.nnics; n++)
				d.nic[n] = (struct wire_rkey){.key = ((a.engine_id & 0xffffffffull) << 16) + k};
			refused(f, &d, 0, ud);
			for (unsigned n = 0; n < d.nnics; n++)
				d.nic[n] = (struct wire_rkey){.key = a.nic[n].sink_key + k + 1};
			refused(f, &d, 0, ud + 2);
			ud += 4;
		}
	}
	still_live(f);
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

static int addr_target(struct fault_target *t)
{
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(t->e, addr, sizeof(addr), NULL);
	CHECK(alen > 0);
	t_send_blob(t->fd, addr, (size_t)alen);
	CHECK(t_recv_u64(t->fd) == 2);
	t_sync_worker(t->e);
	zero_or_die(t->buf + F_GUARD, F_REGION, "user region");
	no_imm(t->e, 99);
	CHECK(xfer_peer_state(t->e, t->init) == XFER_PEER_LIVE);
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_address_only = {"address_only_peer", addr_init, addr_target, NULL};

/* --------------------------------------------- the receive and SEND buffers */

static void hb_on(struct xfer_attr *a, int role)
{
	/* An allowance of 5 s, generous for a loaded machine (and TSan), that
	 * the wait below outlasts: a PONG path the attack had broken would
	 * have the peer declared dead by then. */
	if (role != 2) {
		a->heartbeat_ms = 200;
		a->heartbeat_misses = 25;
	}
}

#define HONEST_LEN 256u

static int bufs_init(struct fault_init *f)
{
	/* A SEND that will wait in the target's inbox while we attack it. */
	uint8_t msg[HONEST_LEN];
	t_fill(msg, sizeof(msg), 42);
	struct xfer_completion c = {.user_data = 500, .timeout_ms = 5000};
	CHECK_OK(xfer_send(f->e, f->t, msg, sizeof(msg), &c));
	int32_t res = -1;
	reap_exactly(f->e, 500, 1, &res, 8000);
	CHECK_RC(res, 0);
	t_send_u64(f->fd_t, 1);
	/* The target tells us its internal keys, as a peer that guessed them
	 * would know them, and where the buffers lie. */
	uint64_t ud = 510;
	for (int which = 0; which < 2; which++) {
		struct wire_desc d = recv_desc(f->fd_t);
		uint64_t len = d.len < F_REGION ? d.len : F_REGION;
		for (uint64_t off = 0; off + 4096 <= len; off += len / 4 > 4096 ? len / 4 : 4096) {
			refused(f, &d, off, ud);
			ud += 2;
		}
	}
	/* Heartbeats keep flowing: the target's PONGs are not ours to change. */
	usleep(6000 * 1000);
	still_live(f);
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

/* An internal registration as a descriptor of our engine, for the attacker. */
static void send_internal(struct fault_target *t, const xfer_mr_t *mr)
{
	struct wire_desc d = {.engine_id = xfer_engine_id(t->e), .len = mr->len, .nnics = (uint8_t)t->e->nnics,
			      .region_id = 1};
	for (unsigned n = 0; n < t->e->nnics; n++)
		d.nic[n] = (struct wire_rkey){.base = mr->nic[n].base, .key = mr->nic[n].key};
	uint8_t b[XFER_DESC_MAX];
	int len = xi_wire_desc_encode(&d, b, sizeof(b), NULL);
	CHECK(len > 0);
	t_send_blob(t->fd, b, (size_t)len);
}

static int bufs_target(struct fault_target *t)
{
	CHECK(t_recv_u64(t->fd) == 1); /* the honest SEND is in our inbox */
	t_sync_worker(t->e);
	send_internal(t, t->e->recv_mr);
	send_internal(t, t->e->send_mr);
	CHECK(t_recv_u64(t->fd) == 2);
	t_sync_worker(t->e);
	uint8_t got[HONEST_LEN + 64], want[HONEST_LEN];
	struct xfer_msg_info info;
	CHECK(xfer_recv_wait(t->e, got, sizeof(got), &info, 5000) == 1);
	t_fill(want, sizeof(want), 42);
	CHECK(info.len == HONEST_LEN && memcmp(got, want, HONEST_LEN) == 0);
	CHECK(info.src_id == xfer_peer_id(t->e, t->init));
	CHECK(xfer_recv(t->e, got, sizeof(got), &info) == 0); /* nothing forged besides */
	no_imm(t->e, 99);
	CHECK(xfer_peer_state(t->e, t->init) == XFER_PEER_LIVE);
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_internal_bufs = {"internal_buffers", bufs_init, bufs_target, hb_on};

/* ------------------------------------------------------- a forged sender id */

/* In the stable peer's process: an engine of ours that the target never
 * added, modified to claim the initiator's engine id in every message it
 * sends (APP, and the BYE of its shutdown), as an attacker's build would. */
static int forger(int fd)
{
	uint8_t addr[XFER_ADDR_MAX];
	size_t alen = t_recv_blob(fd, addr, sizeof(addr));
	uint64_t victim = t_recv_u64(fd);
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *z = t_engine(&a);
	/* The probes' headers were built at bring-up: rewrite their sender. */
	for (size_t off = 0; off + XI_MSG_HDR <= z->send_mr->len; off += z->slot_bytes) {
		uint64_t id;
		memcpy(&id, z->send_bufs + off + 8, 8);
		if (id == z->id)
			memcpy(z->send_bufs + off + 8, &victim, 8);
	}
	z->id = victim;
	xfer_peer_t p;
	CHECK_OK(xfer_peer_add(z, addr, alen, &p));
	static const char forged_msg[] = "forged: stop everything";
	struct xfer_completion c = {.user_data = 1, .timeout_ms = 5000};
	CHECK_OK(xfer_send(z, p, forged_msg, sizeof(forged_msg), &c));
	struct xfer_cqe cqe = t_wait_cqe(z, 8000);
	fprintf(stderr, "forged SEND completed with %d\n", cqe.res);
	xfer_engine_destroy(z); /* says BYE, as the victim */
	t_send_u64(fd, 1);
	return 0;
}

static int forged_init(struct fault_init *f)
{
	uint8_t addr[XFER_ADDR_MAX];
	size_t alen = t_recv_blob(f->fd_t, addr, sizeof(addr));
	t_send_u64(f->fd_s, F_STABLE_HOOK);
	t_send_blob(f->fd_s, addr, alen);
	t_send_u64(f->fd_s, xfer_engine_id(f->e));
	CHECK(t_recv_u64(f->fd_s) == 1);
	usleep(300 * 1000);
	t_send_u64(f->fd_t, 1);
	CHECK(t_recv_u64(f->fd_t) == 1);
	/* We were not declared dead by the forged BYE: an honest SEND arrives. */
	still_live(f);
	static const char honest[] = "honest";
	struct xfer_completion c = {.user_data = 600, .timeout_ms = 5000};
	CHECK_OK(xfer_send(f->e, f->t, honest, sizeof(honest), &c));
	int32_t res = -1;
	reap_exactly(f->e, 600, 1, &res, 8000);
	CHECK_RC(res, 0);
	t_send_u64(f->fd_t, 2);
	CHECK(t_recv_u64(f->fd_t) == 2);
	return 0;
}

static int forged_target(struct fault_target *t)
{
	uint8_t addr[XFER_ADDR_MAX], got[256];
	int alen = xfer_engine_addr(t->e, addr, sizeof(addr), NULL);
	CHECK(alen > 0);
	t_send_blob(t->fd, addr, (size_t)alen);
	CHECK(t_recv_u64(t->fd) == 1);
	t_sync_worker(t->e);
	struct xfer_msg_info info;
	CHECK(xfer_recv_wait(t->e, got, sizeof(got), &info, 300) == -ETIMEDOUT);
	struct xfer_stats st;
	xfer_engine_stats(t->e, &st);
	fprintf(stderr, "target refused %llu forged message(s)\n", (unsigned long long)st.msgs_refused);
	CHECK(st.msgs_refused >= 1);
	CHECK(xfer_peer_state(t->e, t->init) == XFER_PEER_LIVE);
	t_send_u64(t->fd, 1);
	CHECK(t_recv_u64(t->fd) == 2);
	CHECK(xfer_recv_wait(t->e, got, sizeof(got), &info, 5000) == 1);
	CHECK(info.src_id == xfer_peer_id(t->e, t->init) && !strcmp((char *)got, "honest"));
	t_send_u64(t->fd, 2);
	return 0;
}

const struct fault_case case_forged_sender = {"forged_sender_id", forged_init, forged_target, NULL,
					      NULL, forger};
