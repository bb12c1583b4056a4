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
 *             "ibverbs" is no provider and "auto" still makes an engine;
 *   src       a received SEND names the connection whose message QP it
 *             arrived on (src_is), nobody for a QP of no connection; a
 *             HELLO or an added address that claims a known peer's uid from
 *             another queue pair does not take its connection over.
 * A real device's registration of GPU memory is for the GPU machine. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "backend/ibv/ibv_mr.h"
#include "backend/ibv/ibv_nic.h"
#include "backend/ibv/ibv_wire.h"
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

/* ------------------------------------------------------ sender identity */

static struct ibv_qp qps[16];
static int nqps;
static struct ibv_ah the_ah;
static struct ibv_wc script[4];
static int nscript;

static struct ibv_qp *fake_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	(void)pd, (void)attr;
	CHECK(nqps < 16);
	qps[nqps].qp_num = 0x100 + (uint32_t)nqps * 7;
	return &qps[nqps++];
}
static int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	(void)qp, (void)attr, (void)mask;
	return 0;
}
static int fake_destroy_qp(struct ibv_qp *qp)
{
	qp->qp_num = 0xdead; /* a destroyed QP's number must not be looked up */
	return 0;
}
static struct ibv_ah *fake_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	(void)pd, (void)attr;
	return &the_ah;
}
static int fake_destroy_ah(struct ibv_ah *ah)
{
	(void)ah;
	return 0;
}
static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	(void)cq;
	int k = nscript < n ? nscript : n;
	memcpy(wc, script, (size_t)k * sizeof(*wc));
	nscript = 0;
	return k;
}

static uint64_t add(struct xfer_nic *nic, uint64_t uid, uint32_t ud_qpn, int *ret)
{
	struct ibv_wire_addr a = {.link_layer = IBV_LINK_LAYER_ETHERNET, .port = 1, .mtu = 5,
				  .ud_qpn = ud_qpn, .uid = uid};
	a.gid[15] = (uint8_t)uid;
	uint8_t b[IBV_ADDR_BYTES];
	xi_ibv_addr_encode(&a, b);
	uint64_t dest = UINT64_MAX;
	*ret = xi_ibv_ops.av_insert(nic, b, sizeof(b), &dest);
	return dest;
}

/* A SEND of ours from the message QP numbered qpn: the token it names. */
static uint64_t recv_from(struct xfer_nic *nic, uint32_t qpn)
{
	static _Alignas(16) uint8_t ctx[NIC_CTX_BYTES];
	struct ibv_req *r = (struct ibv_req *)ctx;
	*r = (struct ibv_req){.op = REQ_RECV};
	script[0] = (struct ibv_wc){.wr_id = (uint64_t)(uintptr_t)ctx, .status = IBV_WC_SUCCESS,
				    .opcode = IBV_WC_RECV, .byte_len = 24, .qp_num = qpn};
	nscript = 1;
	struct nic_event ev;
	CHECK(xi_ibv_ops.poll(nic, &ev, 1) == 1);
	CHECK(ev.type == NIC_EV_RECV && ev.ctx == ctx && ev.status == 0 && ev.has_src);
	return ev.src;
}

static void hello(struct ibv_nic *n, uint64_t uid, uint32_t ud_qpn)
{
	struct ibv_hello h = {.dst_uid = n->self.uid, .epoch = 1, .qpn = {0x900, 0x901}, .psn = {1, 2}};
	h.src = (struct ibv_wire_addr){.link_layer = IBV_LINK_LAYER_ETHERNET, .port = 1, .mtu = 5,
				       .ud_qpn = ud_qpn, .uid = uid};
	h.src.gid[15] = (uint8_t)uid;
	uint8_t b[40 + IBV_HELLO_BYTES] = {0};
	xi_ibv_hello_encode(&h, b + 40);
	xi_ibv_conn_on_ud_recv(n, b, sizeof(b), ud_qpn);
}

static int src_cases(void)
{
	static struct ibv_api sapi = {.create_qp = fake_create_qp, .modify_qp = fake_modify_qp,
				      .destroy_qp = fake_destroy_qp, .create_ah = fake_create_ah,
				      .destroy_ah = fake_destroy_ah, .poll_cq = fake_poll_cq};
	static struct ibv_nic n; /* large: not on the stack */
	n.api = &sapi;
	n.link_layer = IBV_LINK_LAYER_ETHERNET;
	n.self.uid = 0x5e1f;
	n.next_tick_ns = UINT64_MAX; /* no connection timers here */
	struct xfer_nic nic = {.priv = &n};
	int ret;
	uint64_t a = add(&nic, 0xa, 100, &ret);
	CHECK_OK(ret);
	uint64_t b = add(&nic, 0xb, 200, &ret);
	CHECK_OK(ret);
	CHECK(a != b);
	const uint32_t a_msg = n.conns[a].qp[QP_MSG]->qp_num, a_data = n.conns[a].qp[QP_DATA]->qp_num;
	const uint32_t b_msg = n.conns[b].qp[QP_MSG]->qp_num;

	uint64_t s = recv_from(&nic, a_msg);
	CHECK(xi_ibv_ops.src_is(&nic, s, a) == 1 && xi_ibv_ops.src_is(&nic, s, b) == 0);
	s = recv_from(&nic, b_msg);
	CHECK(xi_ibv_ops.src_is(&nic, s, b) == 1 && xi_ibv_ops.src_is(&nic, s, a) == 0);
	/* SENDs never arrive on a data QP; a QP of nobody names nobody. */
	CHECK(recv_from(&nic, a_data) == NIC_SRC_UNKNOWN);
	CHECK(recv_from(&nic, 0x7777) == NIC_SRC_UNKNOWN);
	CHECK(xi_ibv_ops.src_is(&nic, NIC_SRC_UNKNOWN, a) == 0);

	/* A HELLO claiming a's uid from another UD queue pair changes nothing. */
	uint32_t before = n.nconns;
	hello(&n, 0xa, 999);
	CHECK(n.nconns == before && n.conns[a].remote.ud_qpn == 100 && !n.conns[a].link.connected);
	/* The real one connects a. */
	hello(&n, 0xa, 100);
	CHECK(n.conns[a].link.connected && n.conns[a].link.peer_qpn[QP_MSG] == 0x900);

	/* A stranger's HELLO makes a passive connection, which names it... */
	hello(&n, 0xc, 300);
	CHECK(n.nconns == before + 1);
	uint32_t c_idx = UINT32_MAX;
	for (uint32_t i = 0; i < IBV_MAX_CONNS; i++)
		if (n.conns[i].used && n.conns[i].remote.uid == 0xc)
			c_idx = i;
	CHECK(c_idx != UINT32_MAX && n.conns[c_idx].refs == 0);
	const uint32_t c_msg = n.conns[c_idx].qp[QP_MSG]->qp_num;
	s = recv_from(&nic, c_msg);
	CHECK(s == c_idx);
	/* ...but once the application adds uid 0xc at another address, that
	 * address gets a connection of its own, and the claimant's QP names
	 * nobody any more. */
	uint64_t c = add(&nic, 0xc, 301, &ret);
	CHECK_OK(ret);
	CHECK(n.conns[c].remote.ud_qpn == 301 && n.conns[c].refs == 1);
	CHECK(recv_from(&nic, c_msg) == NIC_SRC_UNKNOWN);
	s = recv_from(&nic, n.conns[c].qp[QP_MSG]->qp_num);
	CHECK(xi_ibv_ops.src_is(&nic, s, c) == 1);
	/* Two added addresses with one uid: the second is refused. */
	add(&nic, 0xc, 302, &ret);
	CHECK_RC(ret, -EADDRINUSE);

	/* A removed peer's QP names nobody (b never connected: it goes). */
	CHECK_OK(xi_ibv_ops.av_remove(&nic, b));
	CHECK(!n.conns[b].used);
	CHECK(recv_from(&nic, b_msg) == NIC_SRC_UNKNOWN);
	CHECK(xi_ibv_ops.src_is(&nic, b, b) == 0);
	s = recv_from(&nic, a_msg);
	CHECK(xi_ibv_ops.src_is(&nic, s, a) == 1);
	xi_ibv_conn_destroy_all(&n);
	CHECK(n.nconns == 0);
	for (uint32_t i = 0; i < IBV_QPN_BUCKETS; i++)
		CHECK(n.qpn_head[i] == 0);
	printf("src: SENDs name their connection, forged hellos and claims take nothing over\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "mr";
	if (!strcmp(mode, "mr"))
		return mr_cases();
	if (!strcmp(mode, "absent"))
		return absent();
	if (!strcmp(mode, "src"))
		return src_cases();
	fprintf(stderr, "usage: %s mr|absent|src\n", argv[0]);
	return 2;
}
