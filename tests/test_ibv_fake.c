/* The raw RDMA backend's memory registration through a fake libibverbs
 * (xi_ibv_api_override), where no device is needed:
 *   dmabuf    device memory with a dma-buf goes to ibv_reg_dmabuf_mr with
 *             the buffer's offset in the dma-buf, its length, its virtual
 *             address as iova and relaxed ordering; if the device refuses,
 *             the same memory is registered by address;
 *   host      host memory by address (ibv_reg_mr_iova2, iova = address),
 *             remote-writable or local-only as asked, never remote-readable;
 *             an rdma-core without reg_mr_iova2 gets plain ibv_reg_mr
 *             without the optional bits it would refuse;
 *   absent    with no libibverbs to load (XFER_IBVERBS_LIB names none),
 *             "ibverbs" is no provider and "auto" still makes an engine.
 * A real device's registration of GPU memory is for the GPU machine. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "backend/ibv/ibv_mr.h"
#include "backend/ibv/ibv_nic.h"
#include "helpers.h"

static struct record {
	int dmabuf_calls, iova_calls, plain_calls;
	uint64_t offset, iova;
	size_t len;
	int fd, access;
	void *addr;
	int dmabuf_errno; /* the fake device refuses dma-bufs with it, 0: accepts */
} rec;

static struct ibv_mr the_mr = {.lkey = 0x1111, .rkey = 0x2222};

static struct ibv_mr *fake_dmabuf(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
				  int access)
{
	(void)pd;
	rec.dmabuf_calls++;
	rec.offset = offset, rec.len = len, rec.iova = iova, rec.fd = fd, rec.access = access;
	if (rec.dmabuf_errno) {
		errno = rec.dmabuf_errno;
		return NULL;
	}
	return &the_mr;
}

static struct ibv_mr *fake_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	(void)pd;
	rec.iova_calls++;
	rec.addr = addr, rec.len = len, rec.iova = iova, rec.access = (int)access;
	return &the_mr;
}

static struct ibv_mr *fake_reg(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)pd;
	rec.plain_calls++;
	rec.addr = addr, rec.len = len, rec.access = access;
	return &the_mr;
}

static struct ibv_mr *failing_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				    unsigned access)
{
	(void)pd, (void)addr, (void)len, (void)iova, (void)access;
	errno = EFAULT;
	return NULL;
}

static struct ibv_api api = {.reg_dmabuf_mr = fake_dmabuf, .reg_mr_iova2 = fake_iova2, .reg_mr = fake_reg};

static void reg(struct xfer_nic *nic, void *buf, size_t len, const struct nic_mem *mem, bool remote,
		struct nic_mr *out)
{
	memset(&rec, 0, offsetof(struct record, dmabuf_errno));
	CHECK_OK(xi_ibv_mr_reg_access(nic, buf, len, mem, remote, out));
	CHECK(out->handle == &the_mr && out->desc == &the_mr);
	CHECK(out->key == 0x2222 && out->base == (uint64_t)(uintptr_t)buf);
}

static int mr_cases(void)
{
	static struct ibv_nic n; /* large: not on the stack */
	n.api = &api;
	struct xfer_nic nic = {.priv = &n};
	static uint8_t gpu[3 * 4096];
	uint8_t *buf = gpu + 4096 + 100;
	struct nic_mem mem = {.cuda_dev = 0, .dmabuf_fd = 7, .dmabuf_offset = 4096 + 100,
			      .dmabuf_base = gpu};
	struct nic_mr out;
	const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_RELAXED_ORDERING;

	/* dmabuf: straight to ibv_reg_dmabuf_mr. */
	reg(&nic, buf, 5000, &mem, true, &out);
	CHECK(rec.dmabuf_calls == 1 && rec.iova_calls == 0);
	CHECK(rec.fd == 7 && rec.offset == 4096 + 100 && rec.len == 5000);
	CHECK(rec.iova == (uint64_t)(uintptr_t)buf && rec.access == remote);
	/* ... and by address when the device refuses the dma-buf. */
	rec.dmabuf_errno = EOPNOTSUPP;
	reg(&nic, buf, 5000, &mem, true, &out);
	CHECK(rec.dmabuf_calls == 1 && rec.iova_calls == 1);
	CHECK(rec.addr == buf && rec.iova == (uint64_t)(uintptr_t)buf && rec.len == 5000);
	rec.dmabuf_errno = 0;
	/* Device memory without a dma-buf: by address (peer memory). */
	mem.dmabuf_fd = -1;
	reg(&nic, buf, 5000, &mem, true, &out);
	CHECK(rec.dmabuf_calls == 0 && rec.iova_calls == 1 && rec.access == remote);

	/* host: remote-writable or local-only, never remote-readable. */
	reg(&nic, buf, 64, NULL, true, &out);
	CHECK(rec.iova_calls == 1 && rec.access == remote && !(rec.access & IBV_ACCESS_REMOTE_READ));
	reg(&nic, buf, 64, NULL, false, &out);
	CHECK(rec.access == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING));
	/* Through the ops table: the core's access argument decides. */
	CHECK_OK(xi_ibv_ops.mr_reg(&nic, buf, 64, 0, NIC_MR_LOCAL, NULL, &out));
	CHECK(!(rec.access & IBV_ACCESS_REMOTE_WRITE));
	CHECK_OK(xi_ibv_ops.mr_reg(&nic, buf, 64, 0, NIC_MR_REMOTE_WRITE, NULL, &out));
	CHECK(rec.access == remote);
	/* An old rdma-core: plain ibv_reg_mr, no optional bits, no dma-buf. */
	api.reg_mr_iova2 = NULL;
	api.reg_dmabuf_mr = NULL;
	mem.dmabuf_fd = 7;
	reg(&nic, buf, 64, &mem, true, &out);
	CHECK(rec.plain_calls == 1 && rec.dmabuf_calls == 0);
	CHECK(rec.access == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
	/* A refusal is an errno for the core, which then mirrors GPU memory. */
	api.reg_mr_iova2 = failing_iova2;
	api.reg_dmabuf_mr = fake_dmabuf;
	rec.dmabuf_errno = EOPNOTSUPP;
	CHECK_RC(xi_ibv_mr_reg_access(&nic, buf, 64, &mem, true, &out), -EFAULT);
	printf("mr: dma-buf, fallback by address, host and local-only registrations as expected\n");
	return 0;
}

static int absent(void)
{
	setenv("XFER_IBVERBS_LIB", "/nonexistent/libibverbs.so.1", 1);
	CHECK(xi_ibv_api_get() == NULL);
	struct xfer_attr a;
	xfer_attr_init(&a);
	a.provider = "ibverbs";
	xfer_engine_t *e = NULL;
	CHECK_RC(xfer_engine_create(&a, &e), -XFER_ENOPROV);
	/* auto goes to libfabric's order (tcp is always there), and so does
	 * an explicit libfabric provider. */
	a.provider = "auto";
	CHECK_OK(xfer_engine_create(&a, &e));
	CHECK(strcmp(xfer_engine_provider(e), "ibverbs") != 0);
	xfer_engine_destroy(e);
	a.provider = "tcp";
	a.nics = "lo";
	CHECK_OK(xfer_engine_create(&a, &e));
	xfer_engine_destroy(e);
	printf("absent: no libibverbs, \"ibverbs\" is no provider, libfabric works\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "mr";
	if (!strcmp(mode, "mr"))
		return mr_cases();
	if (!strcmp(mode, "absent"))
		return absent();
	fprintf(stderr, "usage: %s mr|absent\n", argv[0]);
	return 2;
}
