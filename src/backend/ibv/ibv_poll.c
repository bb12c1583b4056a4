/* Polling for the raw backend: completions of the one CQ as core events,
 * requests we completed ourselves (never posted: no connection in time, a
 * failed post), handshake datagrams, and the timers of the connections.
 * Also the wait fd (the CQ's completion channel) and the arm-then-check
 * that makes sleeping on it safe. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "util/log.h"
#include "backend/ibv/ibv_nic.h"

#define TICK_NS 1000000ull    /* connection timers: at most every 1 ms */
#define ASYNC_NS 50000000ull  /* device events: every 50 ms */
#define IMM_REFILL 32

static uint32_t conn_of_qpn(const struct ibv_nic *n, uint32_t qpn)
{
	for (uint32_t i = 0; i < IBV_MAX_CONNS; i++)
		if (n->conns[i].used && (n->conns[i].qp[0]->qp_num == qpn || n->conns[i].qp[1]->qp_num == qpn))
			return i;
	return UINT32_MAX;
}

/* A failed receive means its QP failed too (a SEND too large for the
 * buffer, for one). */
static void recv_failed(struct ibv_nic *n, const struct ibv_wc *wc, int status)
{
	if (wc->status == IBV_WC_WR_FLUSH_ERR)
		return;
	uint32_t c = conn_of_qpn(n, wc->qp_num);
	if (c != UINT32_MAX)
		xi_ibv_conn_failed(n, c, status);
}

static void repost_ud(struct ibv_nic *n, uint32_t slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)(n->ud_buf + (size_t)slot * IBV_UD_SLOT),
			      .length = IBV_UD_SLOT, .lkey = n->ud_mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = ((uint64_t)slot << TAG_BITS) | TAG_UD_RECV, .sg_list = &sge,
				 .num_sge = 1}, *bad;
	if (n->api->post_recv(n->ud, &wr, &bad))
		xwarn("reposting a handshake receive failed: %s", strerror(errno));
}

/* One work completion; returns 1 when it became an event for the core. */
static int translate(struct ibv_nic *n, const struct ibv_wc *wc, struct nic_event *ev)
{
	int status = xi_ibv_wc_errno(wc->status);
	uint32_t slot = (uint32_t)(wc->wr_id >> TAG_BITS);
	switch (wc->wr_id & TAG_MASK) {
	case TAG_CTX: {
		struct ibv_req *r = (struct ibv_req *)(uintptr_t)wc->wr_id;
		memset(ev, 0, sizeof(*ev));
		ev->ctx = r;
		ev->status = status;
		if (r->op == REQ_RECV) {
			ev->type = NIC_EV_RECV;
			ev->len = wc->byte_len;
			if (status) {
				recv_failed(n, wc, status);
				return 1;
			}
			/* The sender is the peer the receiving RC queue pair was
			 * connected for: an RC QP takes packets from its one remote
			 * QP only, and that QP was announced by a handshake from the
			 * address the connection was made for. A QP of no connection
			 * (destroyed since) names nobody. */
			uint32_t c = xi_ibv_conn_of_msg_qpn(n, wc->qp_num);
			ev->has_src = true;
			ev->src = c == UINT32_MAX ? NIC_SRC_UNKNOWN : c;
			return 1;
		}
		ev->type = NIC_EV_TX;
		struct ibv_conn *c = &n->conns[r->conn];
		if (c->used) {
			c->outstanding[r->op == REQ_SEND ? QP_MSG : QP_DATA]--;
			if (status)
				xi_ibv_conn_failed(n, r->conn, status);
			else if (c->queue.n)
				xi_ibv_post_queued(n, r->conn);
		}
		if (status && wc->status != IBV_WC_WR_FLUSH_ERR)
			xdbg("request to peer NIC %016llx failed: %s (vendor error 0x%x)",
			     (unsigned long long)c->remote.uid, n->api->wc_status_str(wc->status), wc->vendor_err);
		return 1;
	}
	case TAG_IMM:
		n->imm_posted--;
		if (!status && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc->wc_flags & IBV_WC_WITH_IMM)) {
			memset(ev, 0, sizeof(*ev));
			ev->type = NIC_EV_REMOTE_WRITE;
			ev->imm = ntohl(wc->imm_data);
			return 1;
		}
		if (status)
			recv_failed(n, wc, status);
		return 0;
	case TAG_UD_RECV:
		if (slot < IBV_UD_RECVS) {
			if (!status)
				xi_ibv_conn_on_ud_recv(n, n->ud_buf + (size_t)slot * IBV_UD_SLOT, wc->byte_len, wc->src_qp);
			repost_ud(n, slot);
		}
		return 0;
	case TAG_UD_SEND:
		if (slot >= IBV_UD_RECVS && slot < IBV_UD_RECVS + IBV_UD_SENDS)
			n->ud_free[n->ud_nfree++] = slot;
		return 0;
	default:
		return 0;
	}
}

static void drain_channel(struct ibv_nic *n)
{
	struct ibv_cq *cq;
	void *cctx;
	while (!n->api->get_cq_event(n->channel, &cq, &cctx))
		n->api->ack_cq_events(cq, 1);
	n->armed = false;
}

int xi_ibvb_poll(struct xfer_nic *nic, struct nic_event *ev, int max)
{
	struct ibv_nic *n = nic->priv;
	int out = 0;
	if (n->armed)
		drain_channel(n);
	xi_ibv_post_chain_flush(n);
	uint64_t now = xi_ibv_now_ns();
	if (now >= n->next_tick_ns) {
		n->next_due_ns = xi_ibv_conn_tick(n, now);
		n->next_tick_ns = now + TICK_NS;
		if (now >= n->next_async_ns) {
			xi_ibv_conn_async_events(n);
			n->next_async_ns = now + ASYNC_NS;
		}
	}
	struct ibv_req *r;
	while (out < max && (r = xi_ibv_req_pop(&n->failed))) {
		memset(&ev[out], 0, sizeof(ev[out]));
		ev[out].type = r->op == REQ_RECV ? NIC_EV_RECV : NIC_EV_TX;
		ev[out].ctx = r;
		ev[out].status = r->status ? r->status : -EIO;
		out++;
	}
	while (out < max && n->backlog_pos < n->nbacklog)
		out += translate(n, &n->backlog[n->backlog_pos++], &ev[out]);
	if (n->backlog_pos == n->nbacklog)
		n->backlog_pos = n->nbacklog = 0;
	if (out < max) {
		struct ibv_wc wc[32];
		int want = max - out > 32 ? 32 : max - out;
		int got = n->api->poll_cq(n->cq, want, wc);
		if (got < 0) {
			xwarn("polling %s failed", nic->domain);
			got = 0;
		}
		for (int i = 0; i < got; i++)
			out += translate(n, &wc[i], &ev[out]);
	}
	if (n->imm_depth - n->imm_posted >= IMM_REFILL)
		xi_ibv_post_imm_refill(n);
	xi_ibv_post_chain_flush(n);
	return out;
}

int xi_ibvb_src_is(struct xfer_nic *nic, uint64_t src, uint64_t dest)
{
	const struct ibv_nic *n = nic->priv;
	/* Tokens are connection indices: dest (from av_insert) is one too. */
	return src != NIC_SRC_UNKNOWN && src == dest && dest < IBV_MAX_CONNS && n->conns[dest].used;
}

int xi_ibvb_wait_fd(struct xfer_nic *nic)
{
	struct ibv_nic *n = nic->priv;
	return n->channel->fd;
}

int xi_ibvb_trywait(struct xfer_nic *nic)
{
	struct ibv_nic *n = nic->priv;
	xi_ibv_post_chain_flush(n);
	if (n->failed.head || n->backlog_pos < n->nbacklog)
		return -EAGAIN;
	if (xi_ibv_now_ns() >= n->next_due_ns)
		return -EAGAIN; /* a handshake or drain timer is due */
	if (n->api->req_notify_cq(n->cq, 0))
		return -EAGAIN;
	n->armed = true;
	/* Completions that arrived before the arm raise no event: look once
	 * more, and keep what we find for the next poll. */
	int got = n->api->poll_cq(n->cq, IBV_BACKLOG, n->backlog);
	if (got > 0) {
		n->nbacklog = got;
		n->backlog_pos = 0;
		return -EAGAIN;
	}
	return 0;
}
