/* Posting for the raw backend. Requests to a connection that is not ready,
 * or whose send queue is full, wait in the connection's queue (linked
 * through their own contexts: no allocation). Small requests to the same
 * queue pair are chained and handed to the NIC in one ibv_post_send (one
 * doorbell) when the chain is full, a large request follows, another queue
 * pair is addressed, or the worker polls; the worker polls after every
 * posting round, so nothing waits in a chain while it sleeps. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "util/log.h"
#include "backend/ibv/ibv_nic.h"

static inline int qp_of(const struct ibv_req *r)
{
	return r->op == REQ_SEND ? QP_MSG : QP_DATA;
}

static void fail_req(struct ibv_nic *n, struct ibv_req *r, int status)
{
	r->status = status;
	xi_ibv_req_push(&n->failed, r);
}

void xi_ibv_post_chain_flush(struct ibv_nic *n)
{
	if (!n->chain.n)
		return;
	struct ibv_conn *c = &n->conns[n->chain.conn];
	struct ibv_send_wr *bad = NULL;
	int ret = n->api->post_send(c->qp[n->chain.qp], &n->chain.wr[0], &bad);
	int count = n->chain.n;
	n->chain.n = 0;
	if (!ret)
		return;
	/* Everything from bad on never reached the NIC: we complete it. */
	xwarn("posting to peer NIC %016llx failed: %s", (unsigned long long)c->remote.uid, strerror(ret));
	int first = bad ? (int)(bad - &n->chain.wr[0]) : 0;
	for (int i = first >= 0 && first < count ? first : 0; i < count; i++) {
		c->outstanding[n->chain.qp]--;
		fail_req(n, (struct ibv_req *)(uintptr_t)n->chain.wr[i].wr_id, -ret);
	}
	xi_ibv_conn_failed(n, n->chain.conn, -ret);
}

static void chain_add(struct ibv_nic *n, struct ibv_req *r)
{
	int qp = qp_of(r);
	if (n->chain.n && (n->chain.conn != r->conn || n->chain.qp != qp))
		xi_ibv_post_chain_flush(n);
	int k = n->chain.n++;
	n->chain.conn = r->conn;
	n->chain.qp = (uint8_t)qp;
	struct ibv_sge *sge = &n->chain.sge[k];
	struct ibv_send_wr *wr = &n->chain.wr[k];
	*sge = (struct ibv_sge){.addr = r->laddr, .length = r->len, .lkey = r->lkey};
	*wr = (struct ibv_send_wr){.wr_id = (uint64_t)(uintptr_t)r, .sg_list = sge, .num_sge = r->len ? 1 : 0,
				   .send_flags = IBV_SEND_SIGNALED};
	if (r->len && r->len <= n->max_inline)
		wr->send_flags |= IBV_SEND_INLINE;
	if (r->op == REQ_SEND) {
		wr->opcode = IBV_WR_SEND;
	} else {
		wr->opcode = r->has_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
		wr->imm_data = htonl(r->imm);
		wr->wr.rdma.remote_addr = r->raddr;
		wr->wr.rdma.rkey = r->rkey;
	}
	if (k)
		n->chain.wr[k - 1].next = wr;
	n->conns[r->conn].outstanding[qp]++;
	if (n->chain.n == IBV_CHAIN_MAX || r->len > IBV_CHAIN_BYTES)
		xi_ibv_post_chain_flush(n);
}

static int submit(struct ibv_nic *n, struct ibv_req *r)
{
	struct ibv_conn *c = &n->conns[r->conn];
	int qp = qp_of(r);
	/* After a failure the link comes back on its own, but what is posted
	 * meanwhile fails at once, as on libfabric's rxm: the caller retries,
	 * and a dead peer does not hold the NIC's credits (which probes to
	 * other peers need) until a reconnect times out. Only a link that was
	 * never up holds requests for it. */
	if (!link_ready(&c->link) && c->was_ready) {
		fail_req(n, r, -ENOTCONN);
		return 0;
	}
	if (c->queue.n || !link_ready(&c->link) || c->outstanding[qp] >= n->sq_depth[qp]) {
		if (!c->queue.n)
			c->queued_since_ns = xi_ibv_now_ns();
		xi_ibv_req_push(&c->queue, r);
		return 0;
	}
	chain_add(n, r);
	return 0;
}

void xi_ibv_post_queued(struct ibv_nic *n, uint32_t idx)
{
	struct ibv_conn *c = &n->conns[idx];
	while (c->queue.head && link_ready(&c->link)) {
		int qp = qp_of(c->queue.head);
		if (c->outstanding[qp] >= n->sq_depth[qp])
			break;
		chain_add(n, xi_ibv_req_pop(&c->queue));
	}
	if (c->queue.n)
		c->queued_since_ns = xi_ibv_now_ns();
}

void xi_ibv_post_fail_queue(struct ibv_nic *n, uint32_t idx, int status)
{
	struct ibv_req *r;
	while ((r = xi_ibv_req_pop(&n->conns[idx].queue)))
		fail_req(n, r, status);
}

void xi_ibv_post_imm_refill(struct ibv_nic *n)
{
	struct ibv_recv_wr wr[32], *bad;
	while (n->imm_posted < n->imm_depth) {
		uint32_t k = n->imm_depth - n->imm_posted < 32 ? n->imm_depth - n->imm_posted : 32;
		for (uint32_t i = 0; i < k; i++)
			wr[i] = (struct ibv_recv_wr){.wr_id = TAG_IMM, .num_sge = 0,
						     .next = i + 1 < k ? &wr[i + 1] : NULL};
		if (n->api->post_srq_recv(n->srq_imm, wr, &bad)) {
			xwarn("posting immediate receives failed: %s", strerror(errno));
			return;
		}
		n->imm_posted += k;
	}
}

static struct ibv_conn *dest_conn(struct ibv_nic *n, uint64_t dest)
{
	return dest < IBV_MAX_CONNS && n->conns[dest].used && n->conns[dest].refs ? &n->conns[dest] : NULL;
}

int xi_ibvb_post_send(struct xfer_nic *nic, uint64_t dest, const void *buf, size_t len, void *desc, void *ctx)
{
	struct ibv_nic *n = nic->priv;
	if (!dest_conn(n, dest) || len > UINT32_MAX || !desc)
		return -EINVAL;
	struct ibv_req *r = req_of(ctx);
	*r = (struct ibv_req){.op = REQ_SEND, .laddr = (uintptr_t)buf, .len = (uint32_t)len,
			      .lkey = ((struct ibv_mr *)desc)->lkey, .conn = (uint32_t)dest};
	return submit(n, r);
}

int xi_ibvb_post_write(struct xfer_nic *nic, const struct nic_write *w, void *ctx)
{
	struct ibv_nic *n = nic->priv;
	/* A key wider than the device's 32 bits is no key of it. */
	if (w->len > n->max_msg)
		return -EMSGSIZE;
	if (!dest_conn(n, w->dest) || w->rkey > UINT32_MAX || (w->len && !w->desc))
		return -EINVAL;
	struct ibv_req *r = req_of(ctx);
	*r = (struct ibv_req){.op = REQ_WRITE, .laddr = (uintptr_t)w->buf, .len = (uint32_t)w->len,
			      .lkey = w->len ? ((struct ibv_mr *)w->desc)->lkey : 0, .raddr = w->raddr,
			      .rkey = (uint32_t)w->rkey, .imm = w->imm, .has_imm = (uint8_t)!!w->has_imm,
			      .conn = (uint32_t)w->dest};
	return submit(n, r);
}

int xi_ibvb_post_recv(struct xfer_nic *nic, void *buf, size_t len, void *desc, void *ctx)
{
	struct ibv_nic *n = nic->priv;
	if (len > UINT32_MAX || !desc)
		return -EINVAL;
	struct ibv_req *r = req_of(ctx);
	*r = (struct ibv_req){.op = REQ_RECV};
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = ((struct ibv_mr *)desc)->lkey};
	struct ibv_recv_wr wr = {.wr_id = (uint64_t)(uintptr_t)ctx, .sg_list = &sge, .num_sge = 1}, *bad;
	return n->api->post_srq_recv(n->srq_msg, &wr, &bad) ? -errno : 0;
}

int xi_ibvb_av_insert(struct xfer_nic *nic, const void *addr, size_t len, uint64_t *dest)
{
	struct ibv_nic *n = nic->priv;
	struct ibv_wire_addr a;
	if (xi_ibv_addr_decode(addr, len, &a))
		return -EINVAL;
	/* RoCE and InfiniBand ports cannot reach each other. */
	if (a.link_layer != n->link_layer)
		return -EPROTONOSUPPORT;
	uint32_t idx;
	int ret = xi_ibv_conn_get(n, &a, false, &idx);
	if (!ret)
		*dest = idx;
	return ret;
}

int xi_ibvb_av_remove(struct xfer_nic *nic, uint64_t dest)
{
	struct ibv_nic *n = nic->priv;
	if (!dest_conn(n, dest))
		return -EINVAL;
	xi_ibv_conn_put(n, (uint32_t)dest);
	return 0;
}
