/* Bad input gets a clear error and changes nothing: out-of-range offsets and
 * lengths (2^64-1, wrapping sums, page index * stride overflow), malformed
 * descriptors and addresses, a descriptor of another engine, a stale one.
 * The target's guard bytes and region are checked after every attempt. */
#include <stdint.h>
#include <string.h>

#include "helpers.h"

#define LEN 8192u
#define GUARD 4096u

static void expect_rc(int got, int want, const char *what)
{
	if (got != want) {
		fprintf(stderr, "%s: got %d (%s), want %d (%s)\n", what, got, xfer_strerror(got), want,
			xfer_strerror(want));
		exit(1);
	}
}

static int initiator(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_peer_t peer = t_connect(e, fd);
	static uint8_t src[LEN];
	t_fill(src, LEN, 5);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, LEN, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	const uint64_t M = UINT64_MAX;

	struct {
		uint64_t src_off, dst_off, len;
		const char *what;
	} single[] = {
		{0, 0, LEN + 1, "len past both regions"},
		{1, 0, LEN, "src range past end"},
		{0, 1, LEN, "dst range past end"},
		{0, M, 1, "dst_off 2^64-1"},
		{M, 0, 1, "src_off 2^64-1"},
		{0, 0, M, "len 2^64-1"},
		{0, 16, M - 15, "dst_off + len wraps to 0"},
		{16, 0, M - 15, "src_off + len wraps to 0"},
		{LEN, 0, 1, "src_off at end"},
		{0, LEN + 1, 0, "zero-length past end"},
	};
	for (size_t i = 0; i < sizeof(single) / sizeof(single[0]); i++) {
		struct xfer_write w = {.src = mr, .src_off = single[i].src_off, .dst = dst,
				       .dst_off = single[i].dst_off, .len = single[i].len, .imm = 9,
				       .flags = XFER_F_IMM};
		expect_rc(xfer_write(e, &w, NULL), -EINVAL, single[i].what);
	}
	struct xfer_write nosrc = {.dst = dst, .len = 4};
	expect_rc(xfer_write(e, &nosrc, NULL), -EINVAL, "data without a source region");
	struct xfer_write badflag = {.src = mr, .dst = dst, .len = 4, .flags = 0x80};
	expect_rc(xfer_write(e, &badflag, NULL), -EINVAL, "unknown flag");

	uint32_t ok_idx[2] = {0, 1}, huge[2] = {0, UINT32_MAX}, far[2] = {1, 2}, mid[3] = {0, UINT32_MAX, 1};
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = 1024, .src_pages = ok_idx,
				      .src_stride = 1024, .dst_pages = ok_idx, .dst_stride = 1024,
				      .npages = 2, .imm = 9, .flags = XFER_F_IMM};
	struct xfer_paged_write p = pw;
	p.dst_pages = huge;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "page index past region");
	p = pw;
	p.src_pages = mid; /* the bad index neither first nor last */
	p.dst_pages = (uint32_t[3]){0, 1, 0};
	p.npages = 3;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "source page index past region mid-list");
	p = pw;
	p.dst_stride = M / 2 + 1;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "index * stride overflows");
	p = pw;
	p.dst_base = M - 100;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "base + offset overflows");
	p = pw;
	p.src_pages = far;
	p.src_stride = LEN / 2;
	p.page_len = LEN / 2 + 1;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "last page crosses end");
	p = pw;
	p.npages = 0;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "no pages");
	p = pw;
	p.page_len = M;
	expect_rc(xfer_write_paged(e, &p, NULL), -EINVAL, "page_len 2^64-1");

	/* Untrusted descriptor bytes. */
	uint8_t desc[XFER_DESC_MAX], bad[XFER_DESC_MAX];
	size_t dlen = t_recv_blob(fd, desc, sizeof(desc)); /* the foreign engine's */
	xfer_rmr_t *r = NULL;
	expect_rc(xfer_rmr_import(e, peer, desc, dlen, &r), -XFER_EFOREIGN, "foreign descriptor");
	int mylen = xfer_mr_desc(mr, bad, sizeof(bad), NULL);
	CHECK(mylen > 0);
	expect_rc(xfer_rmr_import(e, peer, bad, (size_t)mylen, &r), -XFER_EFOREIGN,
		  "our own descriptor for the peer");
	expect_rc(xfer_rmr_import(e, peer, desc, 5, &r), -XFER_EBADWIRE, "truncated descriptor");
	expect_rc(xfer_rmr_import(e, peer, NULL, 0, &r), -XFER_EBADWIRE, "empty descriptor");
	memcpy(bad, desc, dlen);
	bad[4] = 9;
	expect_rc(xfer_rmr_import(e, peer, bad, dlen, &r), -XFER_EVERSION, "wrong version");
	memcpy(bad, desc, dlen);
	bad[dlen / 2] ^= 1;
	expect_rc(xfer_rmr_import(e, peer, bad, dlen, &r), -XFER_EBADWIRE, "corrupted descriptor");
	expect_rc(xfer_rmr_import(e, 777, desc, dlen, &r), -ENOENT, "unknown peer");
	uint8_t garbage[300];
	t_fill(garbage, sizeof(garbage), 1);
	expect_rc(xfer_rmr_import(e, peer, garbage, sizeof(garbage), &r), -XFER_EBADWIRE, "garbage");
	xfer_peer_t p2;
	expect_rc(xfer_peer_add(e, garbage, sizeof(garbage), &p2), -XFER_EBADWIRE, "garbage address");
	CHECK(r == NULL);

	/* Edge that must work: the last byte of the region, and zero length at the end. */
	struct xfer_write edge = {.src = mr, .src_off = LEN - 1, .dst = dst, .dst_off = LEN - 1, .len = 1};
	CHECK_OK(xfer_write(e, &edge, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	struct xfer_write zend = {.dst = dst, .dst_off = LEN, .len = 0, .imm = 1, .flags = XFER_F_IMM};
	CHECK_OK(xfer_write(e, &zend, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);

	/* A removed peer's regions are stale; the re-added peer needs a new import. */
	CHECK_OK(xfer_peer_remove(e, peer));
	expect_rc(xfer_write(e, &edge, NULL), -ESTALE, "region of a removed peer");
	expect_rc(xfer_write_imm(e, peer, 1, NULL), -ENOENT, "removed peer");
	t_send_u64(fd, 1);
	CHECK(t_recv_u64(fd) == 2);
	xfer_rmr_free(dst);
	CHECK_OK(xfer_mr_dereg(mr));
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
	static uint8_t buf[LEN + 2 * GUARD];
	memset(buf, 0xEE, sizeof(buf));
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, buf + GUARD, LEN, &mr));
	t_send_desc(fd, mr);

	xfer_engine_t *other = t_engine(&a);
	static uint8_t obuf[64];
	xfer_mr_t *omr;
	CHECK_OK(xfer_mr_reg(other, obuf, sizeof(obuf), &omr));
	t_send_desc(fd, omr);

	struct xfer_completion c = {.user_data = 1};
	CHECK_OK(xfer_expect_imm(e, 1, 1, &c));
	CHECK(t_recv_u64(fd) == 1);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	/* Only the last byte of the region changed; no immediate 9 ever arrived. */
	uint8_t want[LEN];
	t_fill(want, LEN, 5);
	for (size_t i = 0; i < sizeof(buf); i++) {
		uint8_t expect = (i == GUARD + LEN - 1) ? want[LEN - 1] : 0xEE;
		if (buf[i] != expect) {
			fprintf(stderr, "byte %zu changed: %02x\n", i, buf[i]);
			return 1;
		}
	}
	uint32_t left = 0;
	CHECK_OK(xfer_imm_disarm(e, 9, &left));
	CHECK(left == 0);
	t_send_u64(fd, 2);
	CHECK_OK(xfer_mr_dereg(omr));
	xfer_engine_destroy(other);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	return 0;
}

static int local_checks(void)
{
	struct xfer_attr a;
	t_attr(&a);
	xfer_engine_t *e = t_engine(&a);
	xfer_mr_t *mr = NULL;
	static uint8_t b[16];
	CHECK_RC(xfer_mr_reg(e, NULL, 16, &mr), -EINVAL);
	CHECK_RC(xfer_mr_reg(e, b, 0, &mr), -EINVAL);
	CHECK_RC(xfer_mr_reg(e, (void *)(UINTPTR_MAX - 8), 16, &mr), -EINVAL);
	CHECK_RC(xfer_expect_imm(e, 1, 0, NULL), -EINVAL);
	uint8_t addr[XFER_ADDR_MAX];
	size_t need = 0;
	CHECK_RC(xfer_engine_addr(e, addr, 4, &need), -ENOSPC);
	CHECK(need > 4);
	int len = xfer_engine_addr(e, addr, sizeof(addr), NULL);
	CHECK(len > 0 && (size_t)len == need);
	xfer_peer_t p;
	for (int cut = 0; cut < len; cut++)
		CHECK(xfer_peer_add(e, addr, (size_t)cut, &p) < 0);
	/* An address from another provider is refused by name. */
	const char *other = strcmp(xfer_engine_provider(e), "shm") ? "shm" : "tcp";
	struct xfer_attr oa;
	t_attr(&oa);
	oa.provider = other;
	oa.nics = strcmp(other, "tcp") ? NULL : "lo";
	xfer_engine_t *o = NULL;
	if (xfer_engine_create(&oa, &o) == 0) {
		CHECK_RC(xfer_peer_add(o, addr, (size_t)len, &p), -XFER_EPROVIDER);
		xfer_engine_destroy(o);
	}
	CHECK(strcmp(xfer_strerror(-XFER_EFOREIGN), "unknown xfer error") != 0);
	CHECK(strcmp(xfer_strerror(-EINVAL), xfer_strerror(EINVAL)) == 0);
	xfer_engine_destroy(e);
	return 0;
}

int main(void)
{
	/* In a child of its own: a process that opened an RDMA device must not
	 * fork peers that use it. librdmacm (under libfabric's verbs) keeps its
	 * device contexts open after the engine is gone, a forked peer inherits
	 * them, and the kernel refuses commands written to another process's
	 * uverbs file (EACCES on every doorbell: the peer's requests never
	 * complete). docs/design.md §16.2, "Fork". */
	int rc = t_run_isolated(local_checks);
	if (rc)
		return rc;
	return t_run_pair(initiator, target, NULL);
}
