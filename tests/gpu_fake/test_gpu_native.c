/* Native GPU registration (FI_HMEM), checked without the hardware it is
 * for. No provider here registers device memory in place, so:
 *   req     what ofi_mr.c asks of libfabric for device memory: iface
 *           FI_HMEM_CUDA, the device ordinal, the dma-buf when the headers
 *           know them (libfabric >= 1.20);
 *   select  the engine's choice, through an instrumented backend (libfabric
 *           underneath) whose NICs claim FI_HMEM or not, and the fake CUDA
 *           driver: a GPU region on FI_HMEM NICs is registered in place with
 *           its device (and dma-buf) and gets no mirror nor STAGED flag; on
 *           other NICs, or after the NIC refused, it is mirrored and staged;
 *   hints   the real providers: tcp is asked for FI_HMEM and falls back,
 *           libfabric's shm (ofi-shm) is asked only with XFER_GPU_NATIVE=1
 *           and then offers it; a registration it cannot do (libfabric
 *           without CUDA) falls back; xfer's own shm always stages;
 *   e2e     two processes whose NICs claim FI_HMEM: single, paged and
 *           scatter writes go straight into the (fake) device memory with
 *           their immediates, no staging copy and no notice.
 * What this cannot show: that a real FI_HMEM provider (efa, verbs) works. */
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "backend/registry.h"
#include "fake_cuda.h"
#include "helpers.h"
#include "backend/ofi/ofi.h"
#include "wire/wire.h"

/* --------------------------------------------------- instrumented backend */

static struct {
	int force;    /* -1: as the provider says; 0/1: NICs claim FI_HMEM or not */
	bool dmabuf;  /* NICs claim to take dma-bufs */
	int fail_dev; /* error for registrations of device memory; 0: succeed */
} cfg = {.force = -1};

static struct {
	int dev_regs, host_regs;
	int dev, fd, fd_open;
	void *buf, *host_buf, *base;
	uint64_t off;
	size_t len;
	int want_hmem;
} rec;

static int inst_open(struct xfer_nic *nic, const char *prov, const char *dom)
{
	rec.want_hmem = nic->want_hmem;
	int ret = xi_ofi_backend.open(nic, prov, dom);
	if (!ret && cfg.force >= 0) {
		atomic_store(&nic->gpu_native, cfg.force == 1);
		nic->dmabuf = cfg.dmabuf;
	}
	return ret;
}

static int inst_mr_reg(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		       const struct nic_mem *mem, struct nic_mr *out)
{
	if (mem && mem->cuda_dev >= 0) {
		rec.dev_regs++;
		rec.dev = mem->cuda_dev;
		rec.buf = buf;
		rec.len = len;
		rec.fd = mem->dmabuf_fd;
		rec.fd_open = mem->dmabuf_fd >= 0 && fcntl(mem->dmabuf_fd, F_GETFD) != -1;
		rec.off = mem->dmabuf_offset;
		rec.base = mem->dmabuf_base;
		if (cfg.fail_dev)
			return cfg.fail_dev;
		/* The fake driver's device memory is host memory: register it so. */
		return xi_ofi_backend.mr_reg(nic, buf, len, key, access, NULL, out);
	}
	rec.host_regs++;
	rec.host_buf = buf;
	return xi_ofi_backend.mr_reg(nic, buf, len, key, access, mem, out);
}

static struct backend_ops inst;

static void use_instrumented(void)
{
	inst = xi_ofi_backend;
	inst.open = inst_open;
	inst.mr_reg = inst_mr_reg;
	xi_backend_override(&inst);
}

static uint8_t desc_flags(const xfer_mr_t *mr)
{
	uint8_t d[XFER_DESC_MAX];
	struct wire_desc wd;
	int len = xfer_mr_desc(mr, d, sizeof(d), NULL);
	CHECK(len > 0);
	CHECK_OK(xi_wire_desc_decode(d, (size_t)len, &wd));
	return wd.flags;
}

static const char *gpu_path(xfer_engine_t *e)
{
	struct xfer_nic_info ni;
	CHECK_OK(xfer_engine_nic_info(e, 0, &ni));
	return ni.gpu_path;
}

static size_t page(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* ------------------------------------------------------------------- req */

static int case_req(void)
{
	struct nic_mem mem = {.cuda_dev = 3, .dmabuf_fd = 42, .dmabuf_offset = 100,
			      .dmabuf_base = (void *)0x7000};
	struct ofi_mr_req r;
	char buf[64];
	bool dmabuf = xi_ofi_mr_req_init(&r, buf, sizeof(buf), FI_REMOTE_WRITE, 77, &mem, true);
	CHECK(r.attr.iface == FI_HMEM_CUDA && r.attr.device.cuda == 3);
	CHECK(r.attr.access == FI_REMOTE_WRITE && r.attr.requested_key == 77 && r.attr.iov_count == 1);
	CHECK(dmabuf == (OFI_HAVE_DMABUF != 0));
#if OFI_HAVE_DMABUF
	CHECK(r.flags == FI_MR_DMABUF && r.attr.dmabuf == &r.dmabuf && r.dmabuf.fd == 42);
	CHECK(r.dmabuf.offset == 100 && r.dmabuf.len == sizeof(buf) && r.dmabuf.base_addr == (void *)0x7000);
#else
	CHECK(r.flags == 0);
#endif
	/* By address: what dma-buf-less drivers and headers get. */
	CHECK(!xi_ofi_mr_req_init(&r, buf, sizeof(buf), FI_REMOTE_WRITE, 77, &mem, false));
	CHECK(r.flags == 0 && r.attr.mr_iov == &r.iov && r.iov.iov_base == buf && r.iov.iov_len == sizeof(buf));
	CHECK(r.attr.iface == FI_HMEM_CUDA && r.attr.device.cuda == 3);
	mem.dmabuf_fd = -1;
	CHECK(!xi_ofi_mr_req_init(&r, buf, sizeof(buf), FI_REMOTE_WRITE, 77, &mem, true));
	printf("req: FI_HMEM_CUDA on device 3, dma-buf form %s\n",
	       OFI_HAVE_DMABUF ? "built" : "not in these headers (libfabric < 1.20)");
	return 0;
}

/* ---------------------------------------------------------------- select */

static xfer_engine_t *engine(int force, bool dmabuf)
{
	cfg.force = force;
	cfg.dmabuf = dmabuf;
	struct xfer_attr a;
	t_attr(&a);
	return t_engine(&a);
}

/* Pinned mirrors allocated since before: the pinned allocations less the
 * page-list ring that comes with each load of the copy kernels. */
static uint64_t mirrors_since(struct fake_cuda_counts before)
{
	struct fake_cuda_counts now = fake_cuda_counts();
	/* Neither the page-list ring of a module load nor the copy-end words
	 * (made at a device's first staged registration) are mirrors. */
	return (now.host_allocs - before.host_allocs) - (now.module_loads - before.module_loads) -
	       (now.small_host_allocs - before.small_host_allocs);
}

static int case_select(void)
{
	fake_cuda_install();
	use_instrumented();
	uint8_t *gpu = fake_cuda_alloc(1u << 20, 2), host[4096];
	CHECK(gpu);
	uint8_t *buf = gpu + page() + 100;
	const size_t len = 10000;
	xfer_mr_t *mr;

	/* NICs with FI_HMEM and dma-bufs: in place, through a dma-buf. */
	xfer_engine_t *e = engine(1, true);
	CHECK(rec.want_hmem == 1);
	CHECK(!strcmp(gpu_path(e), "native"));
	struct fake_cuda_counts before = fake_cuda_counts();
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	struct fake_cuda_counts after = fake_cuda_counts();
	CHECK(rec.dev_regs == (int)xfer_engine_nic_count(e) && rec.host_regs == 0);
	CHECK(rec.dev == 2 && rec.buf == buf && rec.len == len);
	CHECK(after.host_allocs == before.host_allocs); /* no mirror */
	CHECK(rec.fd >= 0 && rec.fd_open);
	CHECK(rec.base == gpu + page() && rec.off == 100);
	CHECK(after.dmabuf_exports == before.dmabuf_exports + 1);
	CHECK(after.last_dmabuf_ptr == (uintptr_t)(gpu + page()));
	CHECK(after.last_dmabuf_size == (100 + len + page() - 1) / page() * page());
	CHECK(fcntl(rec.fd, F_GETFD) == -1); /* closed once registered */
	CHECK(xfer_mr_is_gpu(mr) == 2);
	CHECK((desc_flags(mr) & WIRE_DESC_STAGED) == 0);
	CHECK(desc_flags(mr) & WIRE_DESC_IPC); /* same-host peers still copy GPU to GPU */
	CHECK_OK(xfer_mr_dereg(mr));
	/* Host memory on the same NICs: the plain path. */
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, host, sizeof(host), &mr));
	CHECK(rec.dev_regs == 0 && rec.host_regs >= 1 && rec.host_buf == host);
	CHECK_OK(xfer_mr_dereg(mr));
	/* A driver without dma-buf export: in place, by address. */
	fake_cuda_set_dmabuf(0);
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	CHECK(rec.dev_regs >= 1 && rec.fd == -1 && rec.dev == 2);
	CHECK_OK(xfer_mr_dereg(mr));
	fake_cuda_set_dmabuf(1);
	/* A transient failure stages this region; the NIC stays native. */
	cfg.fail_dev = -ENOMEM;
	before = fake_cuda_counts();
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	CHECK(rec.dev_regs == 1 && mirrors_since(before) == 1);
	CHECK(rec.host_buf != buf && desc_flags(mr) & WIRE_DESC_STAGED);
	CHECK(!strcmp(gpu_path(e), "native"));
	CHECK_OK(xfer_mr_dereg(mr));
	/* A NIC that cannot register device memory at all (FI_HMEM but no
	 * CUDA in libfabric): staged from now on, without asking again. */
	cfg.fail_dev = -ENOSYS;
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	CHECK(rec.dev_regs == 1 && desc_flags(mr) & WIRE_DESC_STAGED);
	CHECK(!strcmp(gpu_path(e), "staged"));
	xfer_mr_t *mr2;
	CHECK_OK(xfer_mr_reg(e, gpu, 4096, &mr2));
	CHECK(rec.dev_regs == 1 && desc_flags(mr2) & WIRE_DESC_STAGED);
	CHECK_OK(xfer_mr_dereg(mr2));
	CHECK_OK(xfer_mr_dereg(mr));
	cfg.fail_dev = 0;
	xfer_engine_destroy(e);

	/* FI_HMEM without dma-buf import (libfabric < 1.20): by address, and
	 * the driver is not asked for a dma-buf. */
	e = engine(1, false);
	before = fake_cuda_counts();
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	CHECK(rec.dev_regs >= 1 && rec.fd == -1);
	CHECK(fake_cuda_counts().dmabuf_exports == before.dmabuf_exports);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);

	/* NICs without FI_HMEM: a mirror, registered as host memory. */
	e = engine(0, false);
	CHECK(!strcmp(gpu_path(e), "staged"));
	before = fake_cuda_counts();
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	CHECK(rec.dev_regs == 0 && rec.host_regs >= 1 && rec.host_buf != buf);
	CHECK(mirrors_since(before) == 1);
	CHECK(desc_flags(mr) & WIRE_DESC_STAGED);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);

	/* XFER_GPU_NATIVE=0: FI_HMEM is not asked for, and even a NIC that has
	 * it stages. XFER_GPU_NATIVE=1: asked of every provider. */
	setenv("XFER_GPU_NATIVE", "0", 1);
	e = engine(1, true);
	CHECK(rec.want_hmem == 0 && !strcmp(gpu_path(e), "staged"));
	memset(&rec, 0, sizeof(rec));
	CHECK_OK(xfer_mr_reg(e, buf, len, &mr));
	CHECK(rec.dev_regs == 0 && desc_flags(mr) & WIRE_DESC_STAGED);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	setenv("XFER_GPU_NATIVE", "1", 1);
	e = engine(1, true);
	CHECK(rec.want_hmem == 2);
	xfer_engine_destroy(e);
	unsetenv("XFER_GPU_NATIVE");
	fake_cuda_free(gpu);
	printf("select: in place on FI_HMEM NICs (dma-buf or address), mirrored otherwise and after refusal\n");
	return 0;
}

/* ----------------------------------------------------------------- hints */

static int case_hints(void)
{
	fake_cuda_install();
	uint8_t *gpu = fake_cuda_alloc(1u << 16, 0);
	CHECK(gpu);
	struct xfer_attr a;
	t_attr(&a);
	const char *prov = t_provider();
	xfer_engine_t *e = t_engine(&a);
	/* tcp is asked and has no FI_HMEM here; shm is not asked by default. */
	CHECK(!strcmp(gpu_path(e), "staged"));
	xfer_engine_destroy(e);
	setenv("XFER_GPU_NATIVE", "1", 1);
	e = t_engine(&a);
	const char *path = gpu_path(e);
	printf("hints: %s with XFER_GPU_NATIVE=1: %s\n", prov, path);
	if (!strcmp(prov, "ofi-shm"))
		CHECK(!strcmp(path, "native")); /* libfabric 1.17's shm offers FI_HMEM when asked */
	if (!strcmp(prov, "shm"))
		CHECK(!strcmp(path, "staged")); /* xfer's same-host backend registers no device memory */
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, gpu, 1u << 16, &mr));
	/* Registered in place, or refused by a libfabric without CUDA and then
	 * mirrored: the descriptor and the NIC's path agree either way. */
	bool staged_desc = desc_flags(mr) & WIRE_DESC_STAGED;
	CHECK(staged_desc == !strcmp(gpu_path(e), "staged"));
	printf("hints: a GPU region on %s registers %s\n", prov, staged_desc ? "staged" : "in place");
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	unsetenv("XFER_GPU_NATIVE");
	fake_cuda_free(gpu);
	return 0;
}

/* ------------------------------------------------------------------- e2e */

#define LEN (1u << 20)
#define PAGES 16u
#define PG 4096u
#define NENT 5

static const uint64_t ent_len[NENT] = {1000, 0, 65536, 1, 4096};

static int e2e_target(int idx, int fd, void *arg)
{
	(void)idx, (void)arg;
	fake_cuda_install();
	use_instrumented();
	xfer_engine_t *e = engine(1, true);
	t_connect(e, fd);
	uint8_t *gpu = fake_cuda_alloc(LEN, 1), *want = malloc(LEN);
	CHECK(gpu && want);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, gpu, LEN, &mr));
	CHECK((desc_flags(mr) & WIRE_DESC_STAGED) == 0);
	t_fill(want, LEN, 21);
	struct xfer_completion c = {0};
	CHECK_OK(xfer_expect_imm(e, 1, 1, &c));
	t_send_desc(fd, mr);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	CHECK(memcmp(gpu, want, LEN) == 0);
	memset(gpu, 0, LEN);
	t_sync_worker(e);
	CHECK_OK(xfer_expect_imm(e, 2, PAGES, &c));
	t_send_u64(fd, 1);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	for (uint32_t i = 0; i < PAGES; i++)
		CHECK(memcmp(gpu + (size_t)(PAGES - 1 - i) * PG, want + (size_t)i * PG, PG) == 0);
	memset(gpu, 0, LEN);
	t_sync_worker(e);
	CHECK_OK(xfer_expect_imm(e, 3, NENT, &c));
	t_send_u64(fd, 2);
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	for (int k = 0; k < NENT; k++)
		CHECK(memcmp(gpu + (size_t)k * 100000, want + (size_t)k * 50000, ent_len[k]) == 0);
	/* Nothing was copied here: no notice came, no mirror exists. */
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(fc.htod == 0 && fc.host_allocs == 0);
	t_send_u64(fd, 3);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	fake_cuda_free(gpu);
	free(want);
	return 0;
}

static int e2e_source(int n, const int *fds, void *arg)
{
	(void)n, (void)arg;
	int fd = fds[0];
	fake_cuda_install();
	use_instrumented();
	/* Through the NICs, not the same-host IPC path. */
	setenv("XFER_GPU_IPC", "0", 1);
	xfer_engine_t *e = engine(1, true);
	xfer_peer_t peer = t_connect(e, fd);
	uint8_t *src = fake_cuda_alloc(LEN, 0);
	CHECK(src);
	t_fill(src, LEN, 21);
	xfer_mr_t *mr;
	CHECK_OK(xfer_mr_reg(e, src, LEN, &mr));
	xfer_rmr_t *dst = t_recv_rmr(e, peer, fd);
	struct xfer_write w = {.src = mr, .dst = dst, .len = LEN, .imm = 1, .flags = XFER_F_IMM};
	CHECK_OK(xfer_write(e, &w, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	uint32_t sp[PAGES], dp[PAGES];
	for (uint32_t i = 0; i < PAGES; i++) {
		sp[i] = i;
		dp[i] = PAGES - 1 - i;
	}
	struct xfer_paged_write pw = {.src = mr, .dst = dst, .page_len = PG, .src_pages = sp,
				      .src_stride = PG, .dst_pages = dp, .dst_stride = PG,
				      .npages = PAGES, .imm = 2, .flags = XFER_F_IMM};
	CHECK(t_recv_u64(fd) == 1);
	CHECK_OK(xfer_write_paged(e, &pw, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	xfer_group_t *g;
	CHECK_OK(xfer_group_create(e, &peer, 1, &g));
	struct xfer_scatter_entry en[NENT];
	int32_t st[NENT];
	for (int k = 0; k < NENT; k++)
		en[k] = (struct xfer_scatter_entry){.member = 0, .src_off = (uint64_t)k * 50000,
						    .len = ent_len[k], .dst = dst,
						    .dst_off = (uint64_t)k * 100000};
	struct xfer_scatter sc = {.src = mr, .entries = en, .n = NENT, .imm = 3, .flags = XFER_F_IMM,
				  .status = st};
	CHECK(t_recv_u64(fd) == 2);
	CHECK_OK(xfer_scatter(e, g, &sc, NULL));
	CHECK_RC(t_wait_cqe(e, 30000).res, 0);
	for (int k = 0; k < NENT; k++)
		CHECK_RC(st[k], 0);
	CHECK(t_recv_u64(fd) == 3);
	/* One request per write, page and entry: no notices; and the source
	 * was read in place, never staged. */
	struct xfer_stats s;
	xfer_engine_stats(e, &s);
	CHECK(s.wrs_posted == 1 + PAGES + NENT);
	struct fake_cuda_counts fc = fake_cuda_counts();
	CHECK(fc.dtoh == 0 && fc.host_allocs == 0);
	CHECK_OK(xfer_group_destroy(g));
	xfer_rmr_free(dst);
	CHECK_OK(xfer_mr_dereg(mr));
	xfer_engine_destroy(e);
	fake_cuda_free(src);
	printf("e2e: single, %u pages and %d scatter entries written in place, no staging, no notices\n",
	       PAGES, NENT);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "select";
	if (!strcmp(mode, "req"))
		return case_req();
	if (!strcmp(mode, "select"))
		return case_select();
	if (!strcmp(mode, "hints"))
		return case_hints();
	if (!strcmp(mode, "e2e"))
		return t_run_procs(1, e2e_target, e2e_source, NULL);
	fprintf(stderr, "unknown mode %s\n", mode);
	return 2;
}
