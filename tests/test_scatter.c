/* SCATTER from one root to 4 and to 8 peer processes, a different slice to
 * each (lengths 0 .. 1 MiB, some members getting two), verified at every
 * peer; then a BARRIER across all the processes, each waiting for an
 * immediate from every other. */
#include <string.h>

#include "helpers.h"

#define SRC_LEN (4u << 20)
#define DST_LEN (2u << 20)
#define IMM_SCATTER 0x5c
#define IMM_BARRIER 0xba

static const uint64_t lens[] = {0, 1, 4096, 65537, 1u << 20, 3, 777, 100000};
static int nchild;

/* Entry k goes to member k % nchild; members 0 and 1 also get a second one. */
static int nentries(void)
{
	return nchild + 2;
}

static struct xfer_scatter_entry entry(int k)
{
	struct xfer_scatter_entry en = {0};
	en.member = (uint32_t)(k % nchild);
	en.len = lens[k % 8];
	if (k >= nchild)
		en.len = 12345 + (uint64_t)k;
	en.src_off = (uint64_t)k * 400000;
	en.dst_off = k >= nchild ? (1u << 20) + 8 : 16;
	return en;
}

static void exchange_all(xfer_engine_t *e, int fd, int self, xfer_peer_t *peers)
{
	/* Every process's address, relayed by the root. */
	uint8_t addr[XFER_ADDR_MAX];
	for (int i = 0; i <= nchild; i++) {
		size_t len = t_recv_blob(fd, addr, sizeof(addr));
		if (i != self)
			CHECK_OK(xfer_peer_add(e, addr, len, &peers[i]));
	}
}

static int child(int idx, int fd, void *arg)
{
	(void)arg;
	int self = idx + 1;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	uint8_t addr[XFER_ADDR_MAX];
	int alen = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	t_send_blob(fd, addr, (size_t)alen);
	xfer_peer_t peers[16];
	exchange_all(e, fd, self, peers);
	uint8_t *dst = calloc(1, DST_LEN), *want = malloc(SRC_LEN);
	CHECK(dst && want);
	t_fill(want, SRC_LEN, 3);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, dst, DST_LEN, &mr));
	int mine = 0;
	for (int k = 0; k < nentries(); k++)
		mine += entry(k).member == (uint32_t)idx;
	struct xfer_completion c = {.user_data = 1};
	CHECK_OK(xfer_expect_imm(e, IMM_SCATTER, (uint32_t)mine, &c));
	t_send_desc(fd, mr);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	for (int k = 0; k < nentries(); k++) {
		struct xfer_scatter_entry en = entry(k);
		if (en.member != (uint32_t)idx)
			continue;
		CHECK(memcmp(dst + en.dst_off, want + en.src_off, en.len) == 0);
		if (en.len == 0)
			CHECK(dst[en.dst_off] == 0);
	}
	/* Barrier: an immediate to every other process, and one from each. */
	xfer_peer_t others[16];
	int n = 0;
	for (int i = 0; i <= nchild; i++)
		if (i != self)
			others[n++] = peers[i];
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(e, others, (uint32_t)n, &g));
	c.user_data = 2;
	CHECK_OK(xfer_expect_imm(e, IMM_BARRIER, (uint32_t)n, &c));
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2); /* everyone is armed */
	CHECK_OK(xfer_barrier(e, g, IMM_BARRIER, NULL));
	for (int got = 0; got < 2; got++) {
		struct xfer_cqe cqe = t_wait_cqe(e, 30000);
		CHECK_RC(cqe.res, 0);
	}
	t_send_u64(fd, 3);
	CHECK(t_recv_u64(fd) == 4);
	CHECK_OK(xfer_group_destroy(g));
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(dst);
	free(want);
	return 0;
}

static int root(int n, const int *fds, void *arg)
{
	(void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	uint8_t addrs[17][XFER_ADDR_MAX];
	size_t alen[17];
	alen[0] = (size_t)xfer_engine_addr(e, addrs[0], XFER_ADDR_MAX, NULL);
	for (int i = 0; i < n; i++)
		alen[i + 1] = t_recv_blob(fds[i], addrs[i + 1], XFER_ADDR_MAX);
	for (int i = 0; i < n; i++)
		for (int k = 0; k <= n; k++)
			t_send_blob(fds[i], addrs[k], alen[k]);
	xfer_peer_t peers[16];
	for (int i = 0; i < n; i++)
		CHECK_OK(xfer_peer_add(e, addrs[i + 1], alen[i + 1], &peers[i]));
	uint8_t *src = malloc(SRC_LEN);
	CHECK(src);
	t_fill(src, SRC_LEN, 3);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, SRC_LEN, &mr));
	xfer_rmr_t *rmr[16];
	for (int i = 0; i < n; i++)
		rmr[i] = t_recv_rmr(e, peers[i], fds[i]);
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(e, peers, (uint32_t)n, &g));
	CHECK(xfer_group_size(g) == (uint32_t)n);
	struct xfer_scatter_entry en[18];
	int32_t status[18];
	for (int k = 0; k < nentries(); k++) {
		en[k] = entry(k);
		en[k].dst = rmr[en[k].member];
	}
	/* A member's entry must name that member's region. */
	struct xfer_scatter_entry wrong = en[0];
	wrong.dst = rmr[1];
	struct xfer_scatter bad = {.src = mr, .entries = &wrong, .n = 1};
	CHECK_RC(xfer_scatter(e, g, &bad, NULL), -XFER_EFOREIGN);
	wrong = en[0];
	wrong.member = (uint32_t)n;
	CHECK_RC(xfer_scatter(e, g, &bad, NULL), -EINVAL);

	struct xfer_scatter sc = {.src = mr, .entries = en, .n = (uint32_t)nentries(), .imm = IMM_SCATTER,
				  .flags = XFER_F_IMM, .status = status};
	struct xfer_completion c = {.user_data = 42};
	CHECK_OK(xfer_scatter(e, g, &sc, &c));
	struct xfer_cqe cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.user_data == 42 && cqe.kind == XFER_OP_SCATTER);
	CHECK_RC(cqe.res, 0);
	for (int k = 0; k < nentries(); k++)
		CHECK(status[k] == 0);
	/* Barrier across everyone, the root included. */
	c.user_data = 2;
	CHECK_OK(xfer_expect_imm(e, IMM_BARRIER, (uint32_t)n, &c));
	for (int i = 0; i < n; i++)
		CHECK(t_recv_u64(fds[i]) == 1);
	for (int i = 0; i < n; i++)
		t_send_u64(fds[i], 2);
	CHECK_OK(xfer_barrier(e, g, IMM_BARRIER, NULL));
	for (int got = 0; got < 2; got++)
		CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	for (int i = 0; i < n; i++)
		CHECK(t_recv_u64(fds[i]) == 3);
	for (int i = 0; i < n; i++)
		t_send_u64(fds[i], 4);
	CHECK_OK(xfer_group_destroy(g));
	for (int i = 0; i < n; i++)
		xfer_rmr_free(rmr[i]);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(src);
	return 0;
}

int main(int argc, char **argv)
{
	nchild = argc > 1 ? atoi(argv[1]) : 4;
	CHECK(nchild >= 2 && nchild <= 8);
	return t_run_procs(nchild, child, root, NULL);
}
