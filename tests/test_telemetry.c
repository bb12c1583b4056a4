/* Telemetry (xfer_stats_*): two engines in this process run a known
 * sequence of operations, one of them failing on purpose (a write into a
 * revoked region), and every per-peer, per-NIC and latency figure must
 * match it exactly. Then the versioned copies, the removed peers' totals,
 * the Prometheus text and an engine with XFER_TELEMETRY=0. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "wire/msg.h" /* XI_MSG_HDR: the NIC counts whole messages */

#define LEN_A 4096u
#define LEN_B 1000u
#define IMM_DATA 0x51u
#define IMM_ONLY 0x52u
#define IMM_NEVER 0x53u

struct side {
	xfer_engine_t *e;
	xfer_peer_t peer;
};

static void connect_pair(struct side *a, struct side *b)
{
	char addr[XFER_ADDR_MAX];
	int len = xfer_engine_addr(b->e, addr, sizeof(addr), NULL);
	CHECK(len > 0);
	CHECK_OK(xfer_peer_add(a->e, addr, (size_t)len, &a->peer));
	len = xfer_engine_addr(a->e, addr, sizeof(addr), NULL);
	CHECK(len > 0);
	CHECK_OK(xfer_peer_add(b->e, addr, (size_t)len, &b->peer));
}

/* Every peer removed before the engines go: on ofi-shm, the BYE an engine
 * sends at destroy to an engine of this process already destroyed crashes
 * inside libfabric 1.17 (seen in this test, not a telemetry matter). */
static void teardown(struct side *a, struct side *b)
{
	struct side *s[2] = {a, b};
	for (int k = 0; k < 2; k++) {
		xfer_peer_t ids[8];
		int n = xfer_stats_peers(s[k]->e, ids, 8);
		for (int i = 0; i < n && i < 8; i++)
			CHECK_OK(xfer_peer_remove(s[k]->e, ids[i]));
	}
	xfer_engine_destroy(a->e);
	xfer_engine_destroy(b->e);
}

static xfer_rmr_t *import(xfer_engine_t *e, xfer_peer_t peer, const xfer_mr_t *mr)
{
	char desc[XFER_DESC_MAX];
	int len = xfer_mr_desc(mr, desc, sizeof(desc), NULL);
	CHECK(len > 0);
	xfer_rmr_t *r;
	CHECK_OK(xfer_rmr_import(e, peer, desc, (size_t)len, &r));
	return r;
}

static int wait_ok(xfer_engine_t *e, uint64_t user_data)
{
	struct xfer_cqe c = t_wait_cqe(e, 20000);
	CHECK(c.user_data == user_data);
	return c.res;
}

static struct xfer_stats_peer peer_of(xfer_engine_t *e, xfer_peer_t p)
{
	struct xfer_stats_peer s = {.size = sizeof(s)};
	CHECK_OK(xfer_stats_peer(e, p, &s));
	CHECK(s.size == sizeof(s));
	return s;
}

static struct xfer_stats_nic nic0(xfer_engine_t *e)
{
	struct xfer_stats_nic s = {.size = sizeof(s)};
	CHECK_OK(xfer_stats_nic(e, 0, &s));
	return s;
}

static struct xfer_stats_latency lat(xfer_engine_t *e, uint32_t kind)
{
	struct xfer_stats_latency s = {.size = sizeof(s)};
	CHECK_OK(xfer_stats_latency(e, kind, &s));
	uint64_t sum = 0;
	for (unsigned i = 0; i < XFER_STATS_BUCKETS; i++)
		sum += s.buckets[i];
	CHECK(sum == s.count);
	CHECK(s.count == 0 || s.sum_ns > 0);
	return s;
}

static uint64_t errors_sum(const uint64_t *errors)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < XFER_STATS_CODES; i++)
		n += errors[i];
	return n;
}

/* The versioned copy: a caller that knows only the first fields gets those,
 * the rest of its structure zeroed, and the size filled. */
static void check_versioning(xfer_engine_t *e, xfer_peer_t p, const struct xfer_stats_peer *full)
{
	struct {
		struct xfer_stats_peer s;
		uint64_t later[4]; /* a field a later version of the caller knows */
	} big;
	memset(&big, 0xab, sizeof(big));
	big.s.size = sizeof(big);
	CHECK_OK(xfer_stats_peer(e, p, &big.s));
	CHECK(big.s.size == sizeof(struct xfer_stats_peer));
	CHECK(big.s.ops == full->ops && big.later[0] == 0 && big.later[3] == 0);

	struct xfer_stats_peer small;
	memset(&small, 0xab, sizeof(small));
	small.size = (uint32_t)(offsetof(struct xfer_stats_peer, ops) + sizeof(uint64_t));
	CHECK_OK(xfer_stats_peer(e, p, &small));
	CHECK(small.size == offsetof(struct xfer_stats_peer, ops) + sizeof(uint64_t));
	CHECK(small.ops == full->ops && small.peer == p);
	CHECK(small.writes == 0xababababababababull); /* past its size: not ours to touch */

	small.size = (uint32_t)offsetof(struct xfer_stats_peer, engine_id);
	CHECK_RC(xfer_stats_peer(e, p, &small), -EINVAL);
	struct xfer_stats_nic n = {.size = 4};
	CHECK_RC(xfer_stats_nic(e, 0, &n), -EINVAL);
	n.size = sizeof(n);
	CHECK_RC(xfer_stats_nic(e, xfer_engine_nic_count(e), &n), -EINVAL);
	struct xfer_stats_latency l = {.size = sizeof(l)};
	CHECK_RC(xfer_stats_latency(e, 0, &l), -EINVAL);
	CHECK_RC(xfer_stats_latency(e, XFER_OP_BARRIER + 1, &l), -EINVAL);
	small.size = sizeof(small);
	CHECK_RC(xfer_stats_peer(e, 12345, &small), -ENOENT);
}

static char *render(xfer_engine_t *e)
{
	size_t need = 0;
	char tiny[8];
	CHECK_RC(xfer_stats_prometheus(e, tiny, sizeof(tiny), &need), -ENOSPC);
	CHECK(need > sizeof(tiny));
	size_t cap = need + 4096; /* the text may grow between two calls */
	char *buf = malloc(cap);
	CHECK(buf);
	/* The exact-size checks hold for one text: the worker may still count
	 * (a retry counter gaining a digit between two calls lengthens the
	 * text), so the three calls are repeated until they saw the same text
	 * length. Counters only grow, so a longer text is still -ENOSPC. */
	int n = 0, again = 0;
	for (int tries = 0; tries < 100; tries++) {
		n = xfer_stats_prometheus(e, buf, cap, NULL);
		CHECK(n > 0 && (size_t)n == strlen(buf));
		CHECK_RC(xfer_stats_prometheus(e, buf, (size_t)n, &need), -ENOSPC); /* no room for the NUL */
		again = xfer_stats_prometheus(e, buf, cap, NULL);
		if (need == (size_t)n + 1 && again == n)
			break;
	}
	CHECK(need == (size_t)n + 1);
	CHECK(again == n);
	return buf;
}

static bool has_line(const char *text, const char *line)
{
	size_t len = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += len)
		if ((p == text || p[-1] == '\n') && p[len] == '\n')
			return true;
	return false;
}

/* A reader on its own thread all along (the sanitizers check that reading
 * races with nothing the worker does, peer removal included). */
struct reader {
	xfer_engine_t *e;
	atomic_bool stop;
	unsigned long renders;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	static char text[1 << 18];
	while (!atomic_load(&r->stop)) {
		CHECK(xfer_stats_prometheus(r->e, text, sizeof(text), NULL) > 0);
		struct xfer_stats_peer p = {.size = sizeof(p)};
		int rc = xfer_stats_peer(r->e, 0, &p);
		CHECK(rc == 0 || rc == -ENOENT);
		r->renders++;
	}
	return NULL;
}

static void check_disabled(void)
{
	setenv("XFER_TELEMETRY", "0", 1);
	struct xfer_attr at;
	t_attr(&at);
	at.heartbeat_ms = 0;
	struct side a = {t_engine(&at)}, b = {t_engine(&at)};
	unsetenv("XFER_TELEMETRY");
	connect_pair(&a, &b);
	struct xfer_completion c = {.user_data = 9};
	CHECK_OK(xfer_write_imm(a.e, a.peer, IMM_ONLY, &c));
	CHECK_OK(wait_ok(a.e, 9));
	struct xfer_stats_engine s = {.size = sizeof(s)};
	CHECK_OK(xfer_stats_engine(a.e, &s));
	CHECK(s.enabled == 0);
	struct xfer_stats_peer p = peer_of(a.e, a.peer);
	CHECK(p.ops == 0 && p.writes == 0 && p.state == XFER_PEER_LIVE);
	CHECK(nic0(a.e).writes == 0);
	CHECK(lat(a.e, XFER_OP_IMM).count == 0);
	struct xfer_stats base;
	xfer_engine_stats(a.e, &base);
	CHECK(base.ops_completed == 1); /* the engine-wide counters still count */
	char *text = render(a.e);
	CHECK(strstr(text, "xfer_telemetry_enabled{engine=\"") && strstr(text, "\"} 0\n"));
	free(text);

	/* On at run time: the next operation counts; off again: figures freeze. */
	xfer_engine_telemetry(a.e, 1);
	CHECK_OK(xfer_stats_engine(a.e, &s));
	CHECK(s.enabled == 1);
	c.user_data = 10;
	CHECK_OK(xfer_write_imm(a.e, a.peer, IMM_ONLY, &c));
	CHECK_OK(wait_ok(a.e, 10));
	p = peer_of(a.e, a.peer);
	CHECK(p.ops == 1 && p.writes == 1 && nic0(a.e).writes == 1 && lat(a.e, XFER_OP_IMM).count == 1);
	xfer_engine_telemetry(a.e, 0);
	c.user_data = 11;
	CHECK_OK(xfer_write_imm(a.e, a.peer, IMM_ONLY, &c));
	CHECK_OK(wait_ok(a.e, 11));
	p = peer_of(a.e, a.peer);
	CHECK(p.ops == 1 && p.writes == 1 && lat(a.e, XFER_OP_IMM).count == 1);
	xfer_engine_stats(a.e, &base);
	CHECK(base.ops_completed == 3);
	teardown(&a, &b);
}

int main(void)
{
	unsetenv("XFER_TELEMETRY");
	struct xfer_attr at;
	t_attr(&at);
	at.heartbeat_ms = 0; /* no probes: every message below is the test's */
	struct side a = {t_engine(&at)}, b = {t_engine(&at)};
	connect_pair(&a, &b);
	CHECK(xfer_engine_nic_count(a.e) >= 1);
	struct reader rd = {.e = a.e};
	pthread_t rt;
	CHECK(pthread_create(&rt, NULL, reader_main, &rd) == 0);

	char *src_buf = calloc(1, LEN_A), *dst_buf = calloc(1, LEN_A);
	CHECK(src_buf && dst_buf);
	xfer_mr_t *src, *dst;
	CHECK_OK(xfer_mr_reg(a.e, src_buf, LEN_A, &src));
	CHECK_OK(xfer_mr_reg(b.e, dst_buf, LEN_A, &dst));
	xfer_rmr_t *rdst = import(a.e, a.peer, dst);

	/* The known sequence, one operation at a time (each on NIC 0: the
	 * test's engines have one). */
	struct xfer_completion c = {0};
	struct xfer_write w = {.src = src, .dst = rdst, .len = LEN_A};
	c.user_data = 1;
	CHECK_OK(xfer_write(a.e, &w, &c)); /* 1: a write */
	CHECK_OK(wait_ok(a.e, 1));
	w.len = LEN_B;
	w.flags = XFER_F_IMM;
	w.imm = IMM_DATA;
	c.user_data = 2;
	CHECK_OK(xfer_write(a.e, &w, &c)); /* 2: a write with an immediate */
	CHECK_OK(wait_ok(a.e, 2));
	c.user_data = 3;
	CHECK_OK(xfer_write_imm(a.e, a.peer, IMM_ONLY, &c)); /* 3: an immediate alone */
	CHECK_OK(wait_ok(a.e, 3));
	for (uint64_t i = 0; i < 2; i++) { /* 4, 5: messages of 10 and 20 bytes */
		c.user_data = 4 + i;
		CHECK_OK(xfer_send(a.e, a.peer, src_buf, 10 * (i + 1), &c));
		CHECK_OK(wait_ok(a.e, 4 + i));
	}
	c.user_data = 6;
	c.timeout_ms = 50;
	CHECK_OK(xfer_expect_imm(a.e, IMM_NEVER, 1, &c)); /* 6: an expectation that times out */
	CHECK_RC(wait_ok(a.e, 6), -ETIMEDOUT);
	c.timeout_ms = 0;

	/* B sees both immediates and both messages. */
	c.user_data = 7;
	CHECK_OK(xfer_expect_imm(b.e, IMM_DATA, 1, &c));
	CHECK_OK(wait_ok(b.e, 7));
	c.user_data = 8;
	CHECK_OK(xfer_expect_imm(b.e, IMM_ONLY, 1, &c));
	CHECK_OK(wait_ok(b.e, 8));
	char msg[64];
	struct xfer_msg_info info;
	for (int i = 0; i < 2; i++)
		CHECK(xfer_recv_wait(b.e, msg, sizeof(msg), &info, 20000) >= 0);

	/* B's view: what landed, per NIC; the messages, per peer. */
	struct xfer_stats_nic nb = nic0(b.e);
	CHECK(nb.imms_received == 2);
	CHECK(nb.msgs_received == 2 && nb.bytes_received == 30 + 2 * XI_MSG_HDR);
	CHECK(nb.writes == 0 && nb.sends == 0 && nb.recv_errors == 0);
	struct xfer_stats_peer pb = peer_of(b.e, b.peer);
	CHECK(pb.msgs_received == 2 && pb.bytes_received == 30);
	CHECK(pb.ops == 0 && pb.writes == 0 && errors_sum(pb.errors) == 0);
	CHECK(lat(b.e, XFER_OP_EXPECT).count == 2);

	/* What A received so far (nothing: B sent nothing); the failure below
	 * may make A probe B (a suspect peer), so receptions are read now. */
	struct xfer_stats_nic na0 = nic0(a.e);
	CHECK(na0.imms_received == 0 && na0.msgs_received == 0 && na0.recv_errors == 0 && na0.probes == 0);

	/* 9: the forced failure, a write into a region B revoked. */
	CHECK_OK(xfer_mr_revoke(dst));
	w.len = LEN_A;
	w.flags = 0;
	c.user_data = 9;
	c.timeout_ms = 5000;
	CHECK_OK(xfer_write(a.e, &w, &c));
	int fail = wait_ok(a.e, 9);
	/* Without delivery-complete (ofi-shm) a write into a revoked key reports
	 * success, and nothing lands (docs/failure-semantics.md): there, the
	 * expectation is the only failure. */
	struct xfer_nic_info ni;
	CHECK_OK(xfer_engine_nic_info(a.e, 0, &ni));
	bool told = ni.delivery_complete;
	CHECK(told ? fail < 0 : fail == 0);
	unsigned nfail = fail < 0;
	int code = fail < 0 ? xfer_stats_code_of(fail) : XFER_STATS_ETIMEDOUT;
	CHECK(code >= 0 && code < XFER_STATS_CODES && xfer_stats_code_of(0) == -1);
	CHECK(xfer_stats_code_name((unsigned)code) && !xfer_stats_code_name(XFER_STATS_CODES));
	bool timed_out = fail == -ETIMEDOUT;
	fprintf(stderr, "forced failure on %s: %s (class %s)\n", xfer_engine_provider(a.e), xfer_strerror(fail),
		fail < 0 ? xfer_stats_code_name((unsigned)code) : "none");

	/* A's view of B. */
	struct xfer_stats_peer p = peer_of(a.e, a.peer);
	CHECK(p.peer == a.peer && p.state == XFER_PEER_LIVE && p.engine_id == xfer_engine_id(b.e));
	CHECK(p.ops == 6);    /* 3 writes, 1 immediate, 2 messages */
	CHECK(p.writes == 4); /* every write request posted, the failed one included */
	CHECK(p.bytes_written == 2 * LEN_A + LEN_B);
	CHECK(p.sends == 2 && p.bytes_sent == 30);
	CHECK(p.msgs_received == 0 && p.bytes_received == 0);
	CHECK(p.timeouts == (timed_out ? 1u : 0u));
	CHECK(p.errors[code] == nfail && errors_sum(p.errors) == nfail);
	check_versioning(a.e, a.peer, &p);

	struct xfer_stats_engine en = {.size = sizeof(en)};
	CHECK_OK(xfer_stats_engine(a.e, &en));
	CHECK(en.enabled == 1 && en.submit_again == 0);
	CHECK(en.timeouts == 1u + timed_out);
	CHECK(en.errors[XFER_STATS_ETIMEDOUT] == 1u + timed_out);
	CHECK(en.errors[code] == (code == XFER_STATS_ETIMEDOUT ? 1u + nfail : nfail) && errors_sum(en.errors) == 1 + nfail);

	struct xfer_stats_nic na = nic0(a.e);
	CHECK(na.writes == 4 && na.bytes_written == 2 * LEN_A + LEN_B);
	CHECK(na.sends == 2 && na.bytes_sent == 30 + 2 * XI_MSG_HDR);
	fprintf(stderr, "A nic0: writes %llu tx_errors %llu probes %llu retries %llu\n", (unsigned long long)na.writes, (unsigned long long)na.tx_errors, (unsigned long long)na.probes, (unsigned long long)na.retries);
	/* The failed write, and on tcp the probes the suspect peer then gets,
	 * which may fail on the torn-down connection too. A deadline is no NIC error. */
	uint64_t nic_fail = nfail && !timed_out;
	CHECK(na.tx_errors >= nic_fail && na.tx_errors <= nic_fail + na.probes);
	CHECK(p.retries <= na.retries); /* the provider's flow control: not predictable */
	CHECK(na.retries == en.retries);

	/* Completion counts per kind, every one of them stamped. */
	CHECK(lat(a.e, XFER_OP_WRITE).count == 3);
	(void)na0;
	CHECK(lat(a.e, XFER_OP_IMM).count == 1);
	CHECK(lat(a.e, XFER_OP_SEND).count == 2);
	CHECK(lat(a.e, XFER_OP_EXPECT).count == 1);
	CHECK(lat(a.e, XFER_OP_PAGED).count == 0 && lat(a.e, XFER_OP_SCATTER).count == 0);
	/* The expectation waited out its 50 ms deadline. */
	struct xfer_stats_latency le = lat(a.e, XFER_OP_EXPECT);
	/* One sample: it is the sum, and it sits in the bucket whose bounds hold
	 * it, (2^(b-1), 2^b] ns (how late past 50 ms depends on the machine's load). */
	CHECK(le.sum_ns >= 50000000ull);
	unsigned lb = 0;
	while (lb < XFER_STATS_BUCKETS && !le.buckets[lb])
		lb++;
	CHECK(lb >= 26 && lb < XFER_STATS_BUCKETS - 1 && le.buckets[lb] == 1); /* 2^25 < 50 ms */
	CHECK(le.sum_ns <= 1ull << lb && le.sum_ns > 1ull << (lb - 1));

	/* The Prometheus text has those figures. */
	char *text = render(a.e);
	char line[256];
	snprintf(line, sizeof(line), "xfer_peer_writes_total{engine=\"%016llx\",peer=\"%u\",peer_engine=\"%016llx\"} 4",
		 (unsigned long long)xfer_engine_id(a.e), a.peer, (unsigned long long)xfer_engine_id(b.e));
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "xfer_op_latency_seconds_count{engine=\"%016llx\",kind=\"write\"} 3",
		 (unsigned long long)xfer_engine_id(a.e));
	CHECK(has_line(text, line));
	snprintf(line, sizeof(line), "xfer_op_latency_seconds_bucket{engine=\"%016llx\",kind=\"write\",le=\"+Inf\"} 3",
		 (unsigned long long)xfer_engine_id(a.e));
	CHECK(has_line(text, line));
	CHECK(strstr(text, "# TYPE xfer_op_latency_seconds histogram\n"));
	free(text);

	/* Listing, then removal: the peer's figures move to the totals. */
	xfer_peer_t ids[4];
	CHECK(xfer_stats_peers(a.e, ids, 4) == 1 && ids[0] == a.peer);
	CHECK(xfer_stats_peers(a.e, NULL, 0) == 1);
	struct xfer_stats_peer none = peer_of(a.e, XFER_PEER_NONE);
	CHECK(none.peer == XFER_PEER_NONE && none.ops == 0 && none.engine_id == 0);
	xfer_rmr_free(rdst);
	CHECK_OK(xfer_peer_remove(a.e, a.peer));
	struct xfer_stats_peer gone = {.size = sizeof(gone)};
	CHECK_RC(xfer_stats_peer(a.e, a.peer, &gone), -ENOENT);
	CHECK(xfer_stats_peers(a.e, ids, 4) == 0);
	none = peer_of(a.e, XFER_PEER_NONE);
	CHECK(none.ops == p.ops && none.writes == p.writes && none.bytes_written == p.bytes_written);
	CHECK(none.sends == p.sends && none.errors[code] == p.errors[code]);
	/* A new peer in the same slot starts from zero. */
	connect_pair(&a, &b);
	CHECK(peer_of(a.e, a.peer).ops == 0 && peer_of(a.e, a.peer).writes == 0);
	atomic_store(&rd.stop, true);
	CHECK(pthread_join(rt, NULL) == 0);
	CHECK(rd.renders > 0);

	xfer_mr_dereg(src);
	xfer_mr_dereg(dst);
	teardown(&a, &b);
	free(src_buf);
	free(dst_buf);

	check_disabled();
	printf("test_telemetry: ok\n");
	return 0;
}
