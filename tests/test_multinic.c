/* Two hosts (network namespaces) joined by two veth pairs: a domain group of
 * two NICs on each side (or two against one with "2x1"). Sharded single
 * writes, paged writes, scatter and barrier are verified byte for byte, and a
 * write pinned to NIC 1 must cross the second link: the per-veth byte
 * counters say which link carried it (the bug class where a request built
 * for NIC i is posted on NIC 0). tcp only: shm does not cross hosts. */
#include <string.h>

#include "helpers.h"
#include "netns.h"

#define REGION (32u << 20)
#define SHARDED (16u << 20)
#define PAGES 10000u
#define PAGE 1024u
#define PINNED (8u << 20)

static struct netns_pair net;
static int b_nics = 2;

static xfer_engine_t *host_engine(int host, int nics)
{
	netns_enter(&net, host);
	char list[64];
	netns_nic_list(&net, host, nics, list, sizeof(list));
	struct xfer_attr a;
	xfer_attr_init(&a);
	a.provider = "tcp";
	a.nics = list;
	a.timeout_ms = 30000;
	xfer_engine_t *e = t_engine(&a);
	CHECK(xfer_engine_nic_count(e) == (unsigned)nics);
	for (int i = 0; i < nics; i++)
		CHECK(!strcmp(xfer_engine_nic_name(e, (unsigned)i), net.ifname[host][i]));
	return e;
}

static void perm(uint32_t *p, uint32_t n, uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++)
		p[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(t_rand(&seed) % (i + 1)), t = p[i];
		p[i] = p[j];
		p[j] = t;
	}
}

static const struct xfer_scatter_entry scatter_shape[] = {
	{0, 100, 0, NULL, 27u << 20},	    /* zero length: only the immediate */
	{0, 200, 5000, NULL, 28u << 20},
	{0, 1u << 20, 1u << 20, NULL, 29u << 20},
};
#define NSCATTER 3

static void wait_ok(xfer_engine_t *e)
{
	struct xfer_cqe c = t_wait_cqe(e, 30000);
	CHECK_RC(c.res, 0);
}

static int host_a(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = host_engine(0, 2);
	xfer_peer_t peer = t_connect(e, fd);
	unsigned shards = xfer_peer_shards(e, peer);
	CHECK(shards == (unsigned)(b_nics < 2 ? b_nics : 2));
	uint8_t *src = malloc(REGION);
	CHECK(src);
	t_fill(src, REGION, 11);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, REGION, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);

	/* 1: one sharded write. */
	struct xfer_write w = {.src = mr, .dst = dst, .len = SHARDED, .imm = 1,
			       .flags = XFER_F_IMM | XFER_F_SHARD};
	CHECK_OK(xfer_write(e, &w, NULL));
	wait_ok(e);
	CHECK(t_recv_u64(fd) == 1);

	/* 2: 10,000 pages, split across the NICs. */
	uint32_t *sp = malloc(4 * PAGES), *dp = malloc(4 * PAGES);
	perm(sp, PAGES, 1);
	perm(dp, PAGES, 2);
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = PAGE, .src_pages = sp,
				      .src_stride = PAGE, .dst_pages = dp, .dst_stride = PAGE,
				      .dst_base = SHARDED, .npages = PAGES, .imm = 2, .flags = XFER_F_IMM};
	CHECK_OK(xfer_write_paged(e, &pw, NULL));
	wait_ok(e);
	CHECK(t_recv_u64(fd) == 2);

	/* 3: scatter and barrier through a group. */
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(e, &peer, 1, &g));
	struct xfer_scatter_entry en[NSCATTER];
	memcpy(en, scatter_shape, sizeof(en));
	for (int i = 0; i < NSCATTER; i++)
		en[i].dst = dst;
	int32_t status[NSCATTER] = {-1, -1, -1};
	struct xfer_scatter sc = {.src = mr, .entries = en, .n = NSCATTER, .imm = 3, .flags = XFER_F_IMM,
				  .status = status};
	struct xfer_completion c = {.user_data = 3};
	CHECK_OK(xfer_scatter(e, g, &sc, &c));
	struct xfer_cqe cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.user_data == 3 && cqe.res == 0 && cqe.kind == XFER_OP_SCATTER);
	for (int i = 0; i < NSCATTER; i++)
		CHECK(status[i] == 0);
	CHECK_OK(xfer_barrier(e, g, 4, NULL));
	wait_ok(e);
	CHECK(t_recv_u64(fd) == 3);

	/* 4: pinned to NIC 1, the bytes must leave through the second veth. */
	if (b_nics == 2) {
		uint64_t tx0 = netns_tx_bytes(net.ifname[0][0]), tx1 = netns_tx_bytes(net.ifname[0][1]);
		struct xfer_write pin = {.src = mr, .dst = dst, .len = PINNED, .imm = 5,
					 .flags = XFER_F_IMM | XFER_F_NIC(1)};
		CHECK_OK(xfer_write(e, &pin, NULL));
		wait_ok(e);
		uint64_t d0 = netns_tx_bytes(net.ifname[0][0]) - tx0;
		uint64_t d1 = netns_tx_bytes(net.ifname[0][1]) - tx1;
		fprintf(stderr, "pinned to NIC 1: %llu bytes on %s, %llu on %s\n", (unsigned long long)d1,
			net.ifname[0][1], (unsigned long long)d0, net.ifname[0][0]);
		CHECK(d1 >= PINNED);
		CHECK(d0 < PINNED / 8);
		CHECK(t_recv_u64(fd) == 4);
		struct xfer_write bad = pin;
		bad.flags = XFER_F_NIC(2);
		CHECK_RC(xfer_write(e, &bad, NULL), -EINVAL);
	}
	CHECK_OK(xfer_group_destroy(g));
	xfer_rmr_free(dst);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(src);
	free(sp);
	free(dp);
	return 0;
}

static void expect(xfer_engine_t *e, uint32_t imm, uint32_t n)
{
	struct xfer_completion c = {.user_data = imm};
	CHECK_OK(xfer_expect_imm(e, imm, n, &c));
}

static int host_b(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	xfer_engine_t *e = host_engine(1, b_nics);
	xfer_peer_t peer = t_connect(e, fd);
	unsigned shards = xfer_peer_shards(e, peer);
	uint8_t *dst = calloc(1, REGION), *want = malloc(REGION);
	CHECK(dst && want);
	t_fill(want, REGION, 11);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, dst, REGION, &mr));
	expect(e, 1, shards);
	t_send_desc(fd, mr);
	wait_ok(e);
	CHECK(memcmp(dst, want, SHARDED) == 0);
	expect(e, 2, PAGES);
	t_send_u64(fd, 1);

	wait_ok(e);
	uint32_t *sp = malloc(4 * PAGES), *dp = malloc(4 * PAGES);
	perm(sp, PAGES, 1);
	perm(dp, PAGES, 2);
	for (uint32_t i = 0; i < PAGES; i++)
		CHECK(memcmp(dst + SHARDED + (size_t)dp[i] * PAGE, want + (size_t)sp[i] * PAGE, PAGE) == 0);
	expect(e, 3, NSCATTER);
	expect(e, 4, 1);
	t_send_u64(fd, 2);

	wait_ok(e);
	wait_ok(e);
	for (int i = 0; i < NSCATTER; i++) {
		const struct xfer_scatter_entry *s = &scatter_shape[i];
		CHECK(memcmp(dst + s->dst_off, want + s->src_off, s->len) == 0);
		if (s->len == 0)
			CHECK(dst[s->dst_off] == 0);
	}
	if (b_nics == 2)
		expect(e, 5, 1);
	t_send_u64(fd, 3);
	if (b_nics == 2) {
		wait_ok(e);
		CHECK(memcmp(dst, want, PINNED) == 0);
		t_send_u64(fd, 4);
	}
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(dst);
	free(want);
	free(sp);
	free(dp);
	return 0;
}

int main(int argc, char **argv)
{
	if (strcmp(t_provider(), "tcp") != 0) {
		fprintf(stderr, "SKIP: hosts in network namespaces need a network provider (tcp)\n");
		return T_SKIP;
	}
	if (argc > 1 && !strcmp(argv[1], "2x1"))
		b_nics = 1;
	netns_create(&net, 2, NULL);
	int rc = t_run_pair(host_a, host_b, NULL);
	netns_destroy(&net);
	return rc;
}
