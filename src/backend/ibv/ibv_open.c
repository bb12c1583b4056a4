/* Finding and opening one RDMA port for the raw libibverbs backend: the
 * device and port, the GID a RoCE peer reaches us by, the queues every
 * connection shares, and the ops table. Also the probes other parts use:
 * whether "auto" should pick this backend, and the CQ limit libfabric's
 * verbs provider must stay within (src/ofi/ofi_open.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "backend/ibv/ibv_nic.h"
#include "backend/ibv/ibv_backend.h"
#include "xfer.h"

#define UD_QKEY 0x2f0e4b1du

uint64_t xi_ibv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned env_uint(const char *name, unsigned def, unsigned max)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return def;
	unsigned long x = strtoul(v, &end, 0);
	if (*end || x > max) {
		xwarn("ignoring %s=%s (0..%u)", name, v, max);
		return def;
	}
	return (unsigned)x;
}

/* Only InfiniBand-transport channel adapters do RC as we use it: that
 * leaves out iWARP (no immediates with RDMA WRITE, different CM) and EFA
 * (SRD only), which libfabric drives better. */
static bool device_kind_ok(const struct ibv_device *d)
{
	return d->node_type == IBV_NODE_CA && d->transport_type == IBV_TRANSPORT_IB;
}

static int gid_type(const struct ibv_api *api, struct ibv_context *ctx, uint8_t port, int idx)
{
	if (api->query_gid_ex) {
		struct ibv_gid_entry ent;
		if (!api->query_gid_ex(ctx, port, (uint32_t)idx, &ent, 0, sizeof(ent)))
			return (int)ent.gid_type;
	}
	/* Older rdma-core: the kernel's sysfs says "RoCE v2" or "IB/RoCE v1". */
	char path[256], type[32] = {0};
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
		 ctx->device->name, port, idx);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(type, sizeof(type), f))
		type[0] = 0;
	fclose(f);
	return strstr(type, "v2") ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
}

/* A RoCE GID for RC: v2 (routable, UDP) over v1; among v2, an IPv4-mapped
 * address, then a global IPv6 one, then link-local. XFER_IBV_GID_INDEX
 * picks one by hand. */
static int pick_gid(const struct ibv_api *api, struct ibv_context *ctx, uint8_t port,
		    const struct ibv_port_attr *pa, union ibv_gid *out)
{
	int forced = (int)env_uint("XFER_IBV_GID_INDEX", 0xffff, 0xffff);
	if (forced != 0xffff)
		return api->query_gid(ctx, port, forced, out) ? -1 : forced;
	if (pa->link_layer != IBV_LINK_LAYER_ETHERNET)
		return api->query_gid(ctx, port, 0, out) ? -1 : 0;
	int best = -1, best_score = 0;
	for (int i = 0; i < pa->gid_tbl_len; i++) {
		union ibv_gid g;
		static const uint8_t zero[16], v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (api->query_gid(ctx, port, i, &g) || !memcmp(g.raw, zero, 16))
			continue;
		int type = gid_type(api, ctx, port, i), score = 1;
		if (type == IBV_GID_TYPE_ROCE_V2) {
			bool link_local = g.raw[0] == 0xfe && (g.raw[1] & 0xc0) == 0x80;
			score = !memcmp(g.raw, v4map, 12) ? 4 : link_local ? 2 : 3;
		}
		if (score > best_score) {
			best = i, best_score = score;
			*out = g;
		}
	}
	return best;
}

static int modify_ud(struct ibv_nic *n)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = n->port,
				.qkey = UD_QKEY};
	if (n->api->modify_qp(n->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		return -errno;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (n->api->modify_qp(n->ud, &a, IBV_QP_STATE))
		return -errno;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
	if (n->api->modify_qp(n->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		return -errno;
	return 0;
}

int xi_ibv_conn_open_ud(struct ibv_nic *n)
{
	const struct ibv_api *api = n->api;
	size_t bytes = (size_t)(IBV_UD_RECVS + IBV_UD_SENDS) * IBV_UD_SLOT;
	n->ud_buf = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
	if (!n->ud_buf)
		return -ENOMEM;
	memset(n->ud_buf, 0, bytes);
	/* Local access only: nothing may write here remotely. */
	n->ud_mr = api->reg_mr(n->pd, n->ud_buf, bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!n->ud_mr)
		return -errno;
	struct ibv_qp_init_attr qa = {.send_cq = n->cq, .recv_cq = n->cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = IBV_UD_SENDS, .max_recv_wr = IBV_UD_RECVS,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	n->ud = api->create_qp(n->pd, &qa);
	if (!n->ud)
		return -errno;
	int ret = modify_ud(n);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < IBV_UD_RECVS; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)(n->ud_buf + (size_t)i * IBV_UD_SLOT),
				      .length = IBV_UD_SLOT, .lkey = n->ud_mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = ((uint64_t)i << TAG_BITS) | TAG_UD_RECV, .sg_list = &sge,
					 .num_sge = 1}, *bad;
		if (api->post_recv(n->ud, &wr, &bad))
			return -errno;
	}
	for (uint32_t i = 0; i < IBV_UD_SENDS; i++)
		n->ud_free[n->ud_nfree++] = IBV_UD_RECVS + i;
	return 0;
}

static void nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Queues shared by every connection, sized within the device's limits: the
 * CQ holds a completion for every request the core may have posted (its
 * credits), every posted receive and every handshake datagram, so it cannot
 * overflow; rxe allows 32,767 entries, ConnectX about 4 million. */
static int open_queues(struct xfer_nic *nic, struct ibv_nic *n)
{
	const struct ibv_api *api = n->api;
	uint32_t max_wr = (uint32_t)n->dev.max_qp_wr, max_srq = (uint32_t)n->dev.max_srq_wr;
	uint32_t tx = 2048, rx = 4096, imm = 2048;
	if (tx > max_wr)
		tx = max_wr;
	if (rx > max_srq)
		rx = max_srq;
	if (imm > max_srq)
		imm = max_srq;
	const uint32_t fixed = IBV_UD_RECVS + IBV_UD_SENDS + 64;
	while ((uint64_t)tx + rx + imm + fixed > (uint64_t)n->dev.max_cqe && tx > 64) {
		tx /= 2, rx /= 2, imm /= 2;
	}
	if ((uint64_t)tx + rx + imm + fixed > (uint64_t)n->dev.max_cqe)
		return -ENOSPC;
	n->sq_depth[QP_MSG] = 128 < tx ? 128 : tx;
	n->sq_depth[QP_DATA] = 1024 < tx ? 1024 : tx;
	n->imm_depth = imm;
	n->channel = api->create_comp_channel(n->ctx);
	if (!n->channel)
		return -errno;
	nonblock(n->channel->fd);
	nonblock(n->ctx->async_fd);
	n->cq = api->create_cq(n->ctx, (int)(tx + rx + imm + fixed), NULL, n->channel, 0);
	if (!n->cq)
		return -errno;
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = rx, .max_sge = 1}};
	n->srq_msg = api->create_srq(n->pd, &sa);
	if (!n->srq_msg)
		return -errno;
	/* Write-with-immediate arrivals consume a receive WQE but place no data:
	 * these have no buffer at all. */
	sa = (struct ibv_srq_init_attr){.attr = {.max_wr = imm, .max_sge = 1}};
	n->srq_imm = api->create_srq(n->pd, &sa);
	if (!n->srq_imm)
		return -errno;
	xi_ibv_post_imm_refill(n);
	if (n->imm_posted != n->imm_depth)
		return -EIO;
	nic->tx_size = tx;
	nic->rx_size = rx;
	return 0;
}

/* Queue pairs before the core releases its registrations (receives are
 * posted into them, peers' writes may be in flight to them). */
static void ibv_shutdown(struct xfer_nic *nic)
{
	struct ibv_nic *n = nic->priv;
	if (!n)
		return;
	xi_ibv_conn_destroy_all(n);
	/* The SEND receive queue holds the core's receive buffers. */
	if (n->srq_msg)
		n->api->destroy_srq(n->srq_msg);
	n->srq_msg = NULL;
}

static void ibv_close(struct xfer_nic *nic)
{
	struct ibv_nic *n = nic->priv;
	if (!n)
		return;
	const struct ibv_api *api = n->api;
	xi_ibv_conn_destroy_all(n);
	if (n->ud)
		api->destroy_qp(n->ud);
	if (n->ud_mr)
		api->dereg_mr(n->ud_mr);
	free(n->ud_buf);
	if (n->srq_msg)
		api->destroy_srq(n->srq_msg);
	if (n->srq_imm)
		api->destroy_srq(n->srq_imm);
	if (n->cq) {
		if (n->armed) {
			struct ibv_cq *cq;
			void *cctx;
			while (!api->get_cq_event(n->channel, &cq, &cctx))
				api->ack_cq_events(cq, 1);
		}
		api->destroy_cq(n->cq);
	}
	if (n->channel)
		api->destroy_comp_channel(n->channel);
	if (n->pd)
		api->dealloc_pd(n->pd);
	if (n->ctx)
		api->close_device(n->ctx);
	free(n);
	nic->priv = NULL;
}

/* Port `port` of the device behind ctx, if it is usable: active, IB or
 * Ethernet, with a GID. */
static bool port_usable(const struct ibv_api *api, struct ibv_context *ctx, uint8_t port,
			struct ibv_port_attr *pa, union ibv_gid *gid, int *gid_index)
{
	memset(pa, 0, sizeof(*pa));
	if (api->query_port(ctx, port, pa) || pa->state != IBV_PORT_ACTIVE)
		return false;
	if (pa->link_layer != IBV_LINK_LAYER_ETHERNET && pa->link_layer != IBV_LINK_LAYER_INFINIBAND)
		return false;
	*gid_index = pick_gid(api, ctx, port, pa, gid);
	return *gid_index >= 0;
}

/* The name the engine reports and matches: the device, with ":port" when
 * the device has several ports. */
static void nic_name(char *buf, size_t cap, const char *dev, uint8_t port, uint8_t nports)
{
	if (nports > 1)
		snprintf(buf, cap, "%s:%u", dev, port);
	else
		snprintf(buf, cap, "%s", dev);
}

static bool name_matches(const char *want, const char *dev, uint8_t port)
{
	if (!want)
		return true;
	size_t dl = strlen(dev);
	if (strncmp(want, dev, dl) != 0)
		return false;
	if (!want[dl])
		return true;
	char *end;
	unsigned long p = strtoul(want + dl + 1, &end, 10);
	return want[dl] == ':' && !*end && p == port;
}

/* Opens the first usable port that matches `domain` ("dev" or "dev:port";
 * NULL: any) and fills n's device, port and address fields. */
static int find_port(struct ibv_nic *n, const char *domain, char *name, size_t cap)
{
	const struct ibv_api *api = n->api;
	int num = 0, ret = domain ? -ENODEV : -XFER_ENOPROV;
	struct ibv_device **list = api->get_device_list(&num);
	if (!list)
		return ret;
	for (int d = 0; d < num && !n->ctx; d++) {
		const char *dev = api->get_device_name(list[d]);
		if (!dev || !device_kind_ok(list[d]))
			continue;
		if (domain && strncmp(domain, dev, strlen(dev)) != 0)
			continue;
		struct ibv_context *ctx = api->open_device(list[d]);
		struct ibv_device_attr da;
		if (!ctx)
			continue;
		if (api->query_device(ctx, &da)) {
			api->close_device(ctx);
			continue;
		}
		for (uint8_t p = 1; p <= da.phys_port_cnt && !n->ctx; p++) {
			struct ibv_port_attr pa;
			union ibv_gid gid;
			int gi;
			if (!name_matches(domain, dev, p) || !port_usable(api, ctx, p, &pa, &gid, &gi))
				continue;
			n->ctx = ctx;
			n->dev = da;
			n->port = p;
			n->gid = gid;
			n->gid_index = (uint8_t)gi;
			n->link_layer = pa.link_layer;
			n->mtu = (uint8_t)pa.active_mtu;
			n->lid = pa.lid;
			n->max_msg = pa.max_msg_sz;
			n->self = (struct ibv_wire_addr){.link_layer = pa.link_layer, .port = p,
							 .mtu = n->mtu, .gid_index = n->gid_index,
							 .lid = pa.lid};
			memcpy(n->self.gid, gid.raw, 16);
			nic_name(name, cap, dev, p, da.phys_port_cnt);
			ret = 0;
		}
		if (!n->ctx)
			api->close_device(ctx);
	}
	api->free_device_list(list);
	return ret;
}

static int ibv_open(struct xfer_nic *nic, const char *provider, const char *domain)
{
	(void)provider;
	const struct ibv_api *api = xi_ibv_api_get();
	if (!api)
		return domain ? -ENODEV : -XFER_ENOPROV;
	struct ibv_nic *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->api = api;
	nic->priv = n;
	char name[64] = {0};
	int ret = find_port(n, domain, name, sizeof(name));
	if (ret) {
		ibv_close(nic);
		return ret;
	}
	n->pd = api->alloc_pd(n->ctx);
	ret = n->pd ? open_queues(nic, n) : -errno;
	if (!ret)
		ret = xi_ibv_conn_open_ud(n);
	if (ret) {
		xerr("opening ibverbs on %s failed: %s", name, xfer_strerror(ret));
		ibv_close(nic);
		return ret;
	}
	/* RC timing (see docs/design.md §14): local ACK timeout 4.096 us x
	 * 2^timeout, retried retry_cnt times before the QP fails; receiver-not-
	 * ready NAKs are retried forever (7) after min_rnr_timer (12: 0.64 ms),
	 * so a receiver short of buffers slows a sender down instead of
	 * failing it. */
	bool soft = n->dev.vendor_id == 0 || n->dev.vendor_id == 0xffffff || !strncmp(name, "rxe", 3) ||
		    !strncmp(name, "siw", 3);
	/* 14 (67 ms; with 6 retries a dead peer fails a QP after about 0.5 s)
	 * on hardware. A software device ACKs from a kernel thread that may
	 * wait for a CPU: under emulation ACKs lagged past 67 ms and every
	 * timeout resent the whole window, so there 16 (268 ms; about 1.9 s to
	 * fail). Retries: 6, not 7, because rxe takes 7 for "forever" (as RNR
	 * retries mean in the spec), and then a dead peer's QP never fails. */
	n->rc_timeout = (uint8_t)env_uint("XFER_IBV_TIMEOUT", soft ? 16 : 14, 31);
	n->rc_retry = (uint8_t)env_uint("XFER_IBV_RETRY", 6, 6);
	n->rnr_retry = 7;
	n->min_rnr_timer = 12;
	n->connect_timeout_ns = (uint64_t)env_uint("XFER_IBV_CONNECT_MS", 3000, 3600000) * 1000000ull;
	do {
		if (getrandom(&n->self.uid, sizeof(n->self.uid), 0) != sizeof(n->self.uid))
			n->self.uid = xi_ibv_now_ns() ^ ((uint64_t)getpid() << 40) ^ (uintptr_t)n;
	} while (!n->self.uid);
	n->self.ud_qpn = n->ud->qp_num;
	xi_ibv_addr_encode(&n->self, nic->addr);
	nic->addrlen = IBV_ADDR_BYTES;
	snprintf(nic->provider, sizeof(nic->provider), "ibverbs");
	snprintf(nic->domain, sizeof(nic->domain), "%s", name);
	nic->max_msg = n->max_msg;
	nic->key_bits = 0; /* rkeys are the device's */
	/* An RC write completes once the responder acknowledged it: the data is
	 * at the target, and a rejected write fails at the writer. */
	nic->delivery_complete = true;
	/* Device memory in place: worth trying on hardware (GPUDirect through
	 * a dma-buf or nvidia-peermem; a refusal falls back to a host mirror),
	 * never on software devices, unless forced (XFER_GPU_NATIVE=1). */
	atomic_store(&nic->gpu_native, nic->want_hmem == 2 || (nic->want_hmem == 1 && !soft));
	nic->dmabuf = api->reg_dmabuf_mr != NULL;
	n->next_tick_ns = n->next_async_ns = xi_ibv_now_ns();
	char gid[64];
	snprintf(gid, sizeof(gid), "%02x%02x:...:%02x%02x:%02x%02x", n->gid.raw[0], n->gid.raw[1],
		 n->gid.raw[12], n->gid.raw[13], n->gid.raw[14], n->gid.raw[15]);
	xinfo("NIC %u: ibverbs on %s port %u (%s, GID %u %s, MTU %d), tx %u rx %u, max_msg %llu, "
	      "CQ %d", nic->index, name, n->port,
	      n->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", n->gid_index, gid,
	      128 << n->mtu, nic->tx_size, nic->rx_size, (unsigned long long)nic->max_msg, n->cq->cqe);
	return 0;
}

struct backend_ops xi_ibv_ops = {
	.name = "ibverbs",
	.open = ibv_open,
	.shutdown = ibv_shutdown,
	.close = ibv_close,
	.mr_reg = xi_ibvb_mr_reg,
	.mr_dereg = xi_ibvb_mr_dereg,
	.av_insert = xi_ibvb_av_insert,
	.av_remove = xi_ibvb_av_remove,
	.post_send = xi_ibvb_post_send,
	.post_recv = xi_ibvb_post_recv,
	.post_write = xi_ibvb_post_write,
	.poll = xi_ibvb_poll,
	.wait_fd = xi_ibvb_wait_fd,
	.trywait = xi_ibvb_trywait,
	.src_is = xi_ibvb_src_is,
};

/* ------------------------------------------------------------- probes */

/* Calls fn for every usable port of every RC-capable device; stops at the
 * first nonzero return. */
static int each_port(int (*fn)(const struct ibv_device_attr *, void *), void *arg)
{
	const struct ibv_api *api = xi_ibv_api_get();
	int num = 0, ret = 0;
	struct ibv_device **list = api ? api->get_device_list(&num) : NULL;
	if (!list)
		return 0;
	for (int d = 0; d < num && !ret; d++) {
		if (!device_kind_ok(list[d]))
			continue;
		struct ibv_context *ctx = api->open_device(list[d]);
		struct ibv_device_attr da;
		if (!ctx)
			continue;
		if (!api->query_device(ctx, &da)) {
			for (uint8_t p = 1; p <= da.phys_port_cnt && !ret; p++) {
				struct ibv_port_attr pa;
				union ibv_gid gid;
				int gi;
				if (port_usable(api, ctx, p, &pa, &gid, &gi))
					ret = fn(&da, arg);
			}
		}
		api->close_device(ctx);
	}
	api->free_device_list(list);
	return ret;
}

static int found(const struct ibv_device_attr *da, void *arg)
{
	(void)da, (void)arg;
	return 1;
}

static int min_cqe(const struct ibv_device_attr *da, void *arg)
{
	int *m = arg;
	if (*m < 0 || da->max_cqe < *m)
		*m = da->max_cqe;
	return 0;
}

const struct backend_ops *xi_ibv_select(const char *provider)
{
	if (provider && !strcmp(provider, "ibverbs"))
		return &xi_ibv_ops;
	if (provider && *provider && strcmp(provider, "auto") != 0)
		return NULL;
	/* auto: RC on an RDMA device when there is one (XFER_IBV_AUTO=0 keeps
	 * auto on libfabric's order). */
	if (!env_uint("XFER_IBV_AUTO", 1, 1))
		return NULL;
	return each_port(found, NULL) ? &xi_ibv_ops : NULL;
}

int xi_ibv_min_cqe(void)
{
	int m = -1;
	each_port(min_cqe, &m);
	return m;
}
