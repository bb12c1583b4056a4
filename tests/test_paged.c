/* Paged WRITEs: 10,000 pages with random source and destination indices and
 * strides (several calls, one of 10,000 pages), an immediate per page, and
 * the target's whole region checked by checksum against what the pages
 * should have produced. */
#include <string.h>

#include "helpers.h"

struct layout {
	uint64_t page_len, src_stride, dst_stride, src_base, dst_base;
	uint32_t npages, src_slots, dst_slots;
};

static const struct layout layouts[] = {
	/* page_len, src_stride, dst_stride, src_base, dst_base, npages, src_slots, dst_slots */
	{1024, 1024, 1024, 0, 0, 10000, 10000, 10000},
	{4096, 8192, 4096 + 512, 64, 3, 2000, 2048, 4000},
	{100, 256, 100, 7, 0, 3000, 3000, 3000},
	{65536, 65536, 65536 * 2, 0, 4096, 64, 64, 128},
};
#define NLAYOUTS (sizeof(layouts) / sizeof(layouts[0]))

static uint64_t region_len(uint64_t base, uint64_t stride, uint32_t slots, uint64_t page_len)
{
	return base + (uint64_t)(slots - 1) * stride + page_len;
}

/* Both processes derive the same index arrays from the layout number:
 * source indices drawn at random (repeats allowed), destination indices a
 * random permutation (each destination written once, so the result does not
 * depend on the order pages land). */
static void make_indices(size_t li, uint32_t *sp, uint32_t *dp)
{
	const struct layout *l = &layouts[li];
	uint64_t s = 0x1234 + li;
	uint32_t *perm = malloc(sizeof(uint32_t) * l->dst_slots);
	CHECK(perm);
	for (uint32_t i = 0; i < l->dst_slots; i++)
		perm[i] = i;
	for (uint32_t i = l->dst_slots - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(t_rand(&s) % (i + 1));
		uint32_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	for (uint32_t i = 0; i < l->npages; i++) {
		sp[i] = (uint32_t)(t_rand(&s) % l->src_slots);
		dp[i] = perm[i];
	}
	free(perm);
}

static int initiator(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	for (size_t li = 0; li < NLAYOUTS; li++) {
		const struct layout *l = &layouts[li];
		uint64_t slen = region_len(l->src_base, l->src_stride, l->src_slots, l->page_len);
		uint8_t *src = malloc(slen);
		uint32_t *sp = malloc(4 * l->npages), *dp = malloc(4 * l->npages);
		CHECK(src && sp && dp);
		t_fill(src, slen, 99 + li);
		make_indices(li, sp, dp);
		xfer_mr_t *mr;
		CHECK_OK(xfer_mr_reg(e, src, slen, &mr));
		xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
		/* The first layout goes as one call; the others in chunks. */
		uint32_t chunk = li == 0 ? l->npages : 700, calls = 0;
		for (uint32_t first = 0; first < l->npages; first += chunk, calls++) {
			uint32_t n = l->npages - first < chunk ? l->npages - first : chunk;
			struct xfer_paged_write w = {
				.src = mr, .dst = dst, .page_len = l->page_len,
				.src_pages = sp + first, .src_stride = l->src_stride, .src_base = l->src_base,
				.dst_pages = dp + first, .dst_stride = l->dst_stride, .dst_base = l->dst_base,
				.npages = n, .imm = (uint32_t)(7000 + li), .flags = XFER_F_IMM};
			struct xfer_completion c = {.user_data = first};
			CHECK_OK(xfer_write_paged(e, &w, &c));
		}
		for (uint32_t k = 0; k < calls; k++) {
			struct xfer_cqe cqe = t_wait_cqe(e, 60000);
			CHECK_RC(cqe.res, 0);
			CHECK(cqe.kind == XFER_OP_PAGED);
		}
		CHECK(t_recv_u64(fd) == li);
		xfer_rmr_free(dst);
		CHECK_OK(xfer_mr_dereg(mr));
		free(src);
		free(sp);
		free(dp);
	}
	xfer_engine_destroy(e);
	return 0;
}

static int target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	(void)t_connect(e, fd);
	for (size_t li = 0; li < NLAYOUTS; li++) {
		const struct layout *l = &layouts[li];
		uint64_t slen = region_len(l->src_base, l->src_stride, l->src_slots, l->page_len);
		uint64_t dlen = region_len(l->dst_base, l->dst_stride, l->dst_slots, l->page_len);
		uint8_t *dst = malloc(dlen), *want = malloc(dlen), *src = malloc(slen);
		uint32_t *sp = malloc(4 * l->npages), *dp = malloc(4 * l->npages);
		CHECK(dst && want && src && sp && dp);
		memset(dst, 0x5A, dlen);
		memset(want, 0x5A, dlen);
		t_fill(src, slen, 99 + li);
		make_indices(li, sp, dp);
		for (uint32_t i = 0; i < l->npages; i++)
			memcpy(want + l->dst_base + (uint64_t)dp[i] * l->dst_stride,
			       src + l->src_base + (uint64_t)sp[i] * l->src_stride, l->page_len);
		xfer_mr_t *mr;
		CHECK_OK(xfer_mr_reg(e, dst, dlen, &mr));
		struct xfer_completion c = {.user_data = li};
		CHECK_OK(xfer_expect_imm(e, (uint32_t)(7000 + li), l->npages, &c));
		t_send_desc(fd, mr);
		struct xfer_cqe cqe = t_wait_cqe(e, 60000);
		CHECK(cqe.kind == XFER_OP_EXPECT && cqe.res == 0 && cqe.user_data == li);
		CHECK(t_checksum(dst, dlen) == t_checksum(want, dlen));
		CHECK(memcmp(dst, want, dlen) == 0);
		/* Exactly npages arrived: nothing is left over. */
		uint32_t left = 99;
		CHECK_OK(xfer_imm_disarm(e, (uint32_t)(7000 + li), &left));
		CHECK(left == 0);
		t_send_u64(fd, li);
		CHECK_OK(xfer_mr_dereg(mr));
		free(dst);
		free(want);
		free(src);
		free(sp);
		free(dp);
	}
	xfer_engine_destroy(e);
	return 0;
}

int main(void)
{
	return t_run_pair(initiator, target, NULL);
}
