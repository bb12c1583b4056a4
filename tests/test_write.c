/* Single WRITEs of 1 B .. 64 MiB with immediates, verified byte for byte at
 * the target, including that no byte around the written range changed. */
#include <string.h>

#include "helpers.h"

#define REGION (64u << 20)
#define GUARD 4096u

static const uint64_t sizes[] = {1, 7, 64, 4095, 4096, 65537, 1u << 20, 5u << 20, 64u << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static uint64_t offset_for(uint64_t size)
{
	/* Unaligned offsets where there is room, to catch alignment assumptions. */
	return size + 13 <= REGION ? 13 : REGION - size;
}

static int initiator(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	uint8_t *src = malloc(REGION + 3);
	CHECK(src);
	xfer_mr_t *mr;
	/* Register at an odd address: any alignment must work. */
	CHECK_OK(xfer_mr_reg(e, src + 3, REGION, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	CHECK(xfer_rmr_len(dst) == REGION);

	for (size_t i = 0; i < NSIZES; i++) {
		uint64_t size = sizes[i];
		t_fill(src + 3, size, size);
		struct xfer_write w = {.src = mr, .src_off = 0, .dst = dst, .dst_off = offset_for(size),
				       .len = size, .imm = (uint32_t)(100 + i), .flags = XFER_F_IMM};
		struct xfer_completion c = {.user_data = 1000 + i};
		CHECK_OK(xfer_write(e, &w, &c));
		struct xfer_cqe cqe = t_wait_cqe(e, 30000);
		CHECK(cqe.user_data == 1000 + i);
		CHECK_RC(cqe.res, 0);
		CHECK(cqe.kind == XFER_OP_WRITE);
		CHECK(t_recv_u64(fd) == size); /* target verified */
	}
	/* The whole region once more, sharded over the NICs both sides have
	 * (one shard with one NIC): on RDMA each shard is longer than max_msg
	 * and goes as chunks, the immediate on each shard's last. */
	t_fill(src + 3, REGION, 7);
	struct xfer_write w = {.src = mr, .dst = dst, .len = REGION, .imm = 200,
			       .flags = XFER_F_IMM | XFER_F_SHARD};
	struct xfer_completion c = {.user_data = 2000};
	CHECK(t_recv_u64(fd) == 200); /* armed */
	CHECK_OK(xfer_write(e, &w, &c));
	struct xfer_cqe cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.user_data == 2000 && cqe.kind == XFER_OP_WRITE);
	CHECK_RC(cqe.res, 0);
	CHECK(t_recv_u64(fd) == REGION); /* target verified */
	struct xfer_stats st;
	xfer_engine_stats(e, &st);
	CHECK(st.ops_completed == NSIZES + 1);
	CHECK(st.ops_failed == 0);
	xfer_rmr_free(dst);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(src);
	return 0;
}

/* never armed: disarming it is only a round trip through the worker */
#define ORDER_IMM 0xfffffff0u

static int target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	uint8_t *buf = malloc(REGION + 2 * GUARD);
	CHECK(buf);
	memset(buf, 0xA5, REGION + 2 * GUARD);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, buf + GUARD, REGION, &mr));
	t_send_desc(fd, mr);
	uint8_t *expect = malloc(REGION);
	CHECK(expect);

	/* Each expectation is armed before the initiator is told to go on: the
	 * protocol a real receiver follows. ThreadSanitizer cannot see causality
	 * that travels through another process, so after each memset a
	 * synchronous call through the worker (disarming a value never armed)
	 * orders the memset before the next write lands: the expectation alone is
	 * only queued, and a busy-polling worker may serve the next write in the
	 * same poll of its NICs before it takes the queue. */
	struct xfer_completion first = {.user_data = 0};
	CHECK_OK(xfer_expect_imm(e, 100, 1, &first));
	for (size_t i = 0; i < NSIZES; i++) {
		uint64_t size = sizes[i], off = offset_for(size);
		struct xfer_cqe cqe = t_wait_cqe(e, 30000);
		CHECK(cqe.kind == XFER_OP_EXPECT && cqe.user_data == i && cqe.res == 0);
		t_fill(expect, size, size);
		CHECK(memcmp(buf + GUARD + off, expect, size) == 0);
		for (uint64_t k = 0; k < GUARD + off; k++)
			CHECK(buf[k] == 0xA5);
		for (uint64_t k = GUARD + off + size; k < REGION + 2 * GUARD; k++)
			if (buf[k] != 0xA5) {
				fprintf(stderr, "byte %llu after the write changed\n", (unsigned long long)k);
				return 1;
			}
		memset(buf + GUARD + off, 0xA5, size);
		(void)xfer_imm_disarm(e, ORDER_IMM, NULL);
		if (i + 1 < NSIZES) {
			struct xfer_completion c = {.user_data = i + 1};
			CHECK_OK(xfer_expect_imm(e, (uint32_t)(100 + i + 1), 1, &c));
		}
		t_send_u64(fd, size);
	}
	unsigned shards = xfer_peer_shards(e, peer);
	struct xfer_completion sc = {.user_data = 200};
	CHECK_OK(xfer_expect_imm(e, 200, shards, &sc));
	t_send_u64(fd, 200);
	struct xfer_cqe cqe = t_wait_cqe(e, 30000);
	CHECK(cqe.kind == XFER_OP_EXPECT && cqe.user_data == 200 && cqe.res == 0);
	t_fill(expect, REGION, 7);
	CHECK(memcmp(buf + GUARD, expect, REGION) == 0);
	uint32_t extra = 1;
	CHECK_OK(xfer_imm_disarm(e, 200, &extra));
	CHECK(extra == 0); /* exactly one immediate per shard */
	t_send_u64(fd, REGION);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	free(buf);
	free(expect);
	return 0;
}

int main(void)
{
	return t_run_pair(initiator, target, NULL);
}
