/* Connections of one NIC: per peer NIC a pair of RC queue pairs (messages
 * on the SEND shared receive queue, data on the write-with-immediate one),
 * connected by the UD handshake of ibv_link.h. A connection is made by
 * av_insert (active) or by the first HELLO of a peer that added us before
 * we added it (passive), so that a target need not add its writers. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "util/log.h"
#include "backend/ibv/ibv_nic.h"

#define UD_QKEY 0x2f0e4b1du
#define HELLO_FIRST_NS 5000000ull   /* 5 ms, doubling */
#define HELLO_MAX_NS 1000000000ull  /* up to 1 s */
#define DRAIN_MIN_NS 50000000ull    /* at least 50 ms in the error state, unless LAST_WQE says done */
#define QP_INLINE 64

void xi_ibv_req_push(struct ibv_req_list *l, struct ibv_req *r)
{
	r->next = NULL;
	if (l->tail)
		l->tail->next = r;
	else
		l->head = r;
	l->tail = r;
	l->n++;
}

struct ibv_req *xi_ibv_req_pop(struct ibv_req_list *l)
{
	struct ibv_req *r = l->head;
	if (r) {
		l->head = r->next;
		if (!l->head)
			l->tail = NULL;
		l->n--;
	}
	return r;
}

/* PSNs are 24 bits; a fresh random one per generation keeps packets of an
 * earlier generation from being taken for this one's. */
static uint32_t next_psn(struct ibv_nic *n)
{
	uint64_t x = n->self.uid ^ xi_ibv_now_ns() ^ ((uint64_t)n->nconns << 32);
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return (uint32_t)x & IBV_PSN_MASK;
}

static void fill_ah(const struct ibv_nic *n, const struct ibv_wire_addr *r, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->port_num = n->port;
	ah->dlid = r->lid;
	/* RoCE always needs the GRH; InfiniBand within one subnet does not. */
	if (n->link_layer == IBV_LINK_LAYER_ETHERNET || !r->lid) {
		ah->is_global = 1;
		memcpy(ah->grh.dgid.raw, r->gid, 16);
		ah->grh.sgid_index = n->gid_index;
		ah->grh.hop_limit = 64;
	}
}

static struct ibv_qp *qp_create(struct ibv_nic *n, int which)
{
	struct ibv_qp_init_attr a = {
		.send_cq = n->cq, .recv_cq = n->cq, .srq = which == QP_MSG ? n->srq_msg : n->srq_imm,
		.qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = {.max_send_wr = n->sq_depth[which], .max_send_sge = 1, .max_recv_sge = 1,
			.max_inline_data = QP_INLINE}};
	struct ibv_qp *qp = n->api->create_qp(n->pd, &a);
	if (!qp) {
		/* Devices without inline sends. */
		a.cap.max_inline_data = 0;
		qp = n->api->create_qp(n->pd, &a);
	}
	if (qp && (!n->max_inline || a.cap.max_inline_data < n->max_inline))
		n->max_inline = a.cap.max_inline_data;
	return qp;
}

static int qp_init(struct ibv_nic *n, struct ibv_qp *qp, int which)
{
	/* Only the data QP accepts RDMA WRITEs; nothing may read. */
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = n->port,
				.qp_access_flags = which == QP_DATA ? IBV_ACCESS_REMOTE_WRITE : 0};
	return n->api->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
		       ? -errno
		       : 0;
}

static int qp_connect(struct ibv_nic *n, struct ibv_conn *c, int which)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = (enum ibv_mtu)(c->remote.mtu < n->mtu ? c->remote.mtu : n->mtu),
				.dest_qp_num = c->link.peer_qpn[which], .rq_psn = c->link.peer_psn[which],
				.max_dest_rd_atomic = 1, .min_rnr_timer = n->min_rnr_timer};
	fill_ah(n, &c->remote, &a.ah_attr);
	if (n->api->modify_qp(c->qp[which], &a,
			      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return -errno;
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = n->rc_timeout,
				 .retry_cnt = n->rc_retry, .rnr_retry = n->rnr_retry,
				 .sq_psn = c->psn[which], .max_rd_atomic = 1};
	if (n->api->modify_qp(c->qp[which], &a,
			      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		return -errno;
	return 0;
}

static void qp_error(struct ibv_nic *n, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	if (n->api->modify_qp(qp, &a, IBV_QP_STATE))
		xwarn("moving QP %u to the error state failed: %s", qp->qp_num, strerror(errno));
}

/* After the flush: RESET drops nothing now, then INIT for the next generation. */
static int qp_recycle(struct ibv_nic *n, struct ibv_conn *c)
{
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
		if (n->api->modify_qp(c->qp[i], &a, IBV_QP_STATE))
			return -errno;
		int ret = qp_init(n, c->qp[i], i);
		if (ret)
			return ret;
		c->psn[i] = next_psn(n);
	}
	return 0;
}

static void send_hello(struct ibv_nic *n, struct ibv_conn *c, uint64_t now)
{
	c->next_hello_ns = now + c->hello_gap_ns;
	c->hello_gap_ns = c->hello_gap_ns * 2 > HELLO_MAX_NS ? HELLO_MAX_NS : c->hello_gap_ns * 2;
	if (!n->ud_nfree)
		return; /* the next retry sends it */
	uint32_t slot = n->ud_free[--n->ud_nfree];
	uint8_t *buf = n->ud_buf + (size_t)slot * IBV_UD_SLOT;
	struct ibv_hello h = {.src = n->self, .dst_uid = c->remote.uid};
	xi_ibv_link_hello_fields(&c->link, &h);
	for (int i = 0; i < 2; i++) {
		h.qpn[i] = c->qp[i]->qp_num;
		h.psn[i] = c->psn[i];
	}
	xi_ibv_hello_encode(&h, buf);
	xdbg("hello to %016llx: epoch %u, ack %u%s", (unsigned long long)c->remote.uid, h.epoch, h.ack_epoch,
	     h.flags & IBV_HELLO_READY ? ", ready" : "");
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = IBV_HELLO_BYTES, .lkey = n->ud_mr->lkey};
	struct ibv_send_wr wr = {.wr_id = ((uint64_t)slot << TAG_BITS) | TAG_UD_SEND, .sg_list = &sge,
				 .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				 .wr.ud = {.ah = c->ah, .remote_qpn = c->remote.ud_qpn, .remote_qkey = UD_QKEY}},
			   *bad;
	if (n->api->post_send(n->ud, &wr, &bad)) {
		xdbg("handshake send failed: %s", strerror(errno));
		n->ud_free[n->ud_nfree++] = slot;
	}
}

static void begin_drain(struct ibv_nic *n, struct ibv_conn *c, uint64_t now)
{
	/* Whatever is chained for this connection goes first, then fails with
	 * the rest of its QP. */
	xi_ibv_post_chain_flush(n);
	for (int i = 0; i < 2; i++)
		qp_error(n, c->qp[i]);
	c->drain_until_ns = now + DRAIN_MIN_NS;
	c->last_wqe = 0;
	/* What waited for room in a send queue fails with the QP's requests;
	 * what waits for a first connection keeps waiting. */
	if (c->was_ready)
		xi_ibv_post_fail_queue(n, (uint32_t)(c - n->conns), -ECONNRESET);
}

static void apply(struct ibv_nic *n, uint32_t idx, int act, uint64_t now)
{
	struct ibv_conn *c = &n->conns[idx];
	if (act & LINK_RESET)
		begin_drain(n, c, now);
	if (act & LINK_CONNECT) {
		int ret = qp_connect(n, c, QP_MSG);
		if (!ret)
			ret = qp_connect(n, c, QP_DATA);
		if (ret) {
			xwarn("connecting to peer NIC %016llx failed: %s", (unsigned long long)c->remote.uid,
			      strerror(-ret));
			if (xi_ibv_link_fail(&c->link))
				begin_drain(n, c, now);
			return;
		}
	}
	if (act & LINK_REPLY) {
		c->hello_gap_ns = HELLO_FIRST_NS;
		send_hello(n, c, now);
	}
	if (act & LINK_READY) {
		c->was_ready = true;
		xdbg("connected to peer NIC %016llx (epoch %u, theirs %u)", (unsigned long long)c->remote.uid,
		     c->link.epoch, c->link.r_epoch);
		xi_ibv_post_queued(n, idx);
	}
}

static uint32_t qpn_bucket(uint32_t qpn)
{
	return (qpn * 2654435761u) >> 20 & (IBV_QPN_BUCKETS - 1);
}

/* QPs keep their numbers across resets (qp_recycle), so a connection is
 * indexed once, from creation to destruction. */
static void qpn_index(struct ibv_nic *n, uint32_t idx)
{
	struct ibv_conn *c = &n->conns[idx];
	uint32_t b = qpn_bucket(c->qp[QP_MSG]->qp_num);
	c->qpn_next = n->qpn_head[b];
	n->qpn_head[b] = idx + 1;
	c->indexed = true;
}

static void qpn_unindex(struct ibv_nic *n, uint32_t idx)
{
	struct ibv_conn *c = &n->conns[idx];
	if (!c->indexed)
		return;
	uint32_t *link = &n->qpn_head[qpn_bucket(c->qp[QP_MSG]->qp_num)];
	while (*link && *link != idx + 1)
		link = &n->conns[*link - 1].qpn_next;
	if (*link)
		*link = c->qpn_next;
	c->indexed = false;
}

uint32_t xi_ibv_conn_of_msg_qpn(const struct ibv_nic *n, uint32_t qpn)
{
	for (uint32_t i = n->qpn_head[qpn_bucket(qpn)]; i; i = n->conns[i - 1].qpn_next) {
		const struct ibv_conn *c = &n->conns[i - 1];
		if (c->used && c->qp[QP_MSG]->qp_num == qpn)
			return i - 1;
	}
	return UINT32_MAX;
}

static void conn_destroy(struct ibv_nic *n, uint32_t idx)
{
	struct ibv_conn *c = &n->conns[idx];
	qpn_unindex(n, idx);
	if (n->chain.n && n->chain.conn == idx)
		xi_ibv_post_chain_flush(n);
	xi_ibv_post_fail_queue(n, idx, -ECONNABORTED);
	for (int i = 0; i < 2; i++)
		if (c->qp[i])
			n->api->destroy_qp(c->qp[i]);
	if (c->ah)
		n->api->destroy_ah(c->ah);
	memset(c, 0, sizeof(*c));
	n->nconns--;
}

void xi_ibv_conn_destroy_all(struct ibv_nic *n)
{
	for (uint32_t i = 0; i < IBV_MAX_CONNS; i++)
		if (n->conns[i].used)
			conn_destroy(n, i);
}

/* A free slot, evicting the least recently active passive connection that
 * has nothing in flight when the table is full. */
static int conn_slot(struct ibv_nic *n, uint32_t *idx)
{
	uint32_t victim = UINT32_MAX;
	for (uint32_t i = 0; i < IBV_MAX_CONNS; i++) {
		const struct ibv_conn *c = &n->conns[i];
		if (!c->used) {
			*idx = i;
			return 0;
		}
		if (!c->refs && !c->outstanding[0] && !c->outstanding[1] &&
		    (victim == UINT32_MAX || c->active_ns < n->conns[victim].active_ns))
			victim = i;
	}
	if (victim == UINT32_MAX)
		return -ENOSPC;
	xinfo("connection table full: dropping the idle passive connection to %016llx",
	      (unsigned long long)n->conns[victim].remote.uid);
	conn_destroy(n, victim);
	*idx = victim;
	return 0;
}

static int conn_new(struct ibv_nic *n, const struct ibv_wire_addr *remote, uint32_t *out)
{
	uint32_t idx;
	int ret = conn_slot(n, &idx);
	if (ret)
		return ret;
	struct ibv_conn *c = &n->conns[idx];
	memset(c, 0, sizeof(*c));
	c->used = true;
	c->remote = *remote;
	n->nconns++;
	struct ibv_ah_attr ah;
	fill_ah(n, remote, &ah);
	uint64_t t0 = xi_ibv_now_ns();
	c->ah = n->api->create_ah(n->pd, &ah);
	xdbg("address handle to %016llx: %llu us", (unsigned long long)remote->uid,
	     (unsigned long long)(xi_ibv_now_ns() - t0) / 1000);
	ret = c->ah ? 0 : -errno;
	for (int i = 0; i < 2 && !ret; i++) {
		c->qp[i] = qp_create(n, i);
		ret = c->qp[i] ? qp_init(n, c->qp[i], i) : -errno;
		c->psn[i] = next_psn(n);
	}
	if (ret) {
		xwarn("creating a connection to peer NIC %016llx failed: %s", (unsigned long long)remote->uid,
		      strerror(-ret));
		conn_destroy(n, idx);
		return ret;
	}
	qpn_index(n, idx);
	xi_ibv_link_init(&c->link);
	c->active_ns = xi_ibv_now_ns();
	c->hello_gap_ns = HELLO_FIRST_NS;
	c->next_hello_ns = c->active_ns;
	*out = idx;
	return 0;
}

static uint32_t conn_find(const struct ibv_nic *n, uint64_t uid)
{
	for (uint32_t i = 0; i < IBV_MAX_CONNS; i++)
		if (n->conns[i].used && n->conns[i].remote.uid == uid)
			return i;
	return UINT32_MAX;
}

/* Whether two addresses name the same UD queue pair on the same port. A
 * connection is bound to the address it was made for: the sender identity
 * of src_is rests on that. */
static bool same_place(const struct ibv_wire_addr *a, const struct ibv_wire_addr *b)
{
	return a->ud_qpn == b->ud_qpn && a->lid == b->lid && !memcmp(a->gid, b->gid, sizeof(a->gid));
}

int xi_ibv_conn_get(struct ibv_nic *n, const struct ibv_wire_addr *remote, bool passive, uint32_t *idx)
{
	uint32_t i = conn_find(n, remote->uid);
	if (i != UINT32_MAX && !same_place(&n->conns[i].remote, remote)) {
		/* Someone else claimed this uid first (a HELLO names any uid it
		 * likes): the application's address wins over an idle passive
		 * connection; two added addresses with one uid are refused. */
		struct ibv_conn *c = &n->conns[i];
		if (passive || c->refs || c->outstanding[0] || c->outstanding[1])
			return -EADDRINUSE;
		xinfo("dropping a passive connection that claimed peer NIC %016llx from another address",
		      (unsigned long long)remote->uid);
		conn_destroy(n, i);
		i = UINT32_MAX;
	}
	if (i == UINT32_MAX) {
		int ret = conn_new(n, remote, &i);
		if (ret)
			return ret;
	}
	if (!passive)
		n->conns[i].refs++;
	*idx = i;
	/* An active connection starts its handshake at once. */
	if (!passive && !link_ready(&n->conns[i].link) && !n->conns[i].link.draining)
		send_hello(n, &n->conns[i], xi_ibv_now_ns());
	return 0;
}

void xi_ibv_conn_put(struct ibv_nic *n, uint32_t idx)
{
	struct ibv_conn *c = &n->conns[idx];
	if (!c->used || !c->refs)
		return;
	if (--c->refs)
		return;
	/* Nothing of ours is in flight (the core removes idle peers only). A
	 * working link stays, passive, for the peer's traffic to us. */
	xi_ibv_post_fail_queue(n, idx, -ECONNABORTED);
	if (!link_ready(&c->link))
		conn_destroy(n, idx);
}

bool xi_ibv_conn_ready(const struct ibv_nic *n, uint32_t c)
{
	return link_ready(&n->conns[c].link);
}

void xi_ibv_conn_on_ud_recv(struct ibv_nic *n, const uint8_t *buf, uint32_t len, uint32_t src_qp)
{
	struct ibv_hello h;
	/* The first 40 bytes of a UD receive are the GRH slot. */
	if (len < 40 || xi_ibv_hello_decode(buf + 40, len - 40, &h)) {
		xdbg("dropping a malformed handshake datagram of %u bytes", len);
		return;
	}
	if (h.dst_uid != n->self.uid || h.src.ud_qpn != src_qp || h.src.link_layer != n->link_layer)
		return; /* for an earlier incarnation of us, or forged */
	xdbg("hello from %016llx: epoch %u, ack %u%s", (unsigned long long)h.src.uid, h.epoch, h.ack_epoch,
	     h.flags & IBV_HELLO_READY ? ", ready" : "");
	uint32_t idx = conn_find(n, h.src.uid);
	if (idx != UINT32_MAX && !same_place(&n->conns[idx].remote, &h.src)) {
		xdbg("dropping a hello for peer NIC %016llx from another queue pair (%u, not %u)",
		     (unsigned long long)h.src.uid, h.src.ud_qpn, n->conns[idx].remote.ud_qpn);
		return;
	}
	if (idx == UINT32_MAX && xi_ibv_conn_get(n, &h.src, true, &idx))
		return;
	struct ibv_conn *c = &n->conns[idx];
	uint64_t now = xi_ibv_now_ns();
	c->active_ns = now;
	apply(n, idx, xi_ibv_link_on_hello(&c->link, &h), now);
}

void xi_ibv_conn_failed(struct ibv_nic *n, uint32_t idx, int status)
{
	struct ibv_conn *c = &n->conns[idx];
	if (!c->used)
		return;
	int act = xi_ibv_link_fail(&c->link);
	if (act) {
		xinfo("connection to peer NIC %016llx failed (%s): resetting it",
		      (unsigned long long)c->remote.uid, strerror(-status));
		apply(n, idx, act, xi_ibv_now_ns());
	}
}

static void finish_drain(struct ibv_nic *n, uint32_t idx, uint64_t now)
{
	struct ibv_conn *c = &n->conns[idx];
	if (!c->refs) {
		conn_destroy(n, idx); /* passive: the peer reconnects if it wants to */
		return;
	}
	int ret = qp_recycle(n, c);
	if (ret) {
		xwarn("resetting the QPs to peer NIC %016llx failed: %s", (unsigned long long)c->remote.uid,
		      strerror(-ret));
		xi_ibv_post_fail_queue(n, idx, ret);
		c->drain_until_ns = now + HELLO_MAX_NS; /* try again later */
		return;
	}
	c->hello_gap_ns = HELLO_FIRST_NS;
	apply(n, idx, xi_ibv_link_reset_done(&c->link), now);
}

uint64_t xi_ibv_conn_tick(struct ibv_nic *n, uint64_t now)
{
	uint64_t next = now + HELLO_MAX_NS;
	for (uint32_t i = 0, seen = 0; i < IBV_MAX_CONNS && seen < n->nconns; i++) {
		struct ibv_conn *c = &n->conns[i];
		if (!c->used)
			continue;
		seen++;
		if (c->link.draining) {
			if (!c->outstanding[0] && !c->outstanding[1] &&
			    (now >= c->drain_until_ns || c->last_wqe == 3))
				finish_drain(n, i, now);
			else if (c->drain_until_ns < next)
				next = c->drain_until_ns;
			if (!c->used)
				continue;
		}
		if (!link_ready(&c->link) && !c->link.draining) {
			if (now >= c->next_hello_ns)
				send_hello(n, c, now);
			if (c->next_hello_ns < next)
				next = c->next_hello_ns;
		}
		/* Requests wait for a connection only so long. */
		if (c->queue.n && !link_ready(&c->link)) {
			if (now - c->queued_since_ns >= n->connect_timeout_ns) {
				xinfo("no connection to peer NIC %016llx after %llu ms: failing %u requests",
				      (unsigned long long)c->remote.uid,
				      (unsigned long long)(n->connect_timeout_ns / 1000000), c->queue.n);
				xi_ibv_post_fail_queue(n, i, -EHOSTUNREACH);
			} else if (c->queued_since_ns + n->connect_timeout_ns < next) {
				next = c->queued_since_ns + n->connect_timeout_ns;
			}
		}
	}
	return next;
}

static uint32_t conn_of_qp(const struct ibv_nic *n, const struct ibv_qp *qp, int *which)
{
	for (uint32_t i = 0; i < IBV_MAX_CONNS; i++)
		for (int k = 0; k < 2; k++)
			if (n->conns[i].used && n->conns[i].qp[k] == qp) {
				*which = k;
				return i;
			}
	return UINT32_MAX;
}

void xi_ibv_conn_async_events(struct ibv_nic *n)
{
	struct ibv_async_event ev;
	while (!n->api->get_async_event(n->ctx, &ev)) {
		int which = 0;
		uint32_t idx;
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			idx = conn_of_qp(n, ev.element.qp, &which);
			if (idx != UINT32_MAX)
				xi_ibv_conn_failed(n, idx, -EIO);
			break;
		case IBV_EVENT_QP_LAST_WQE_REACHED:
			idx = conn_of_qp(n, ev.element.qp, &which);
			if (idx != UINT32_MAX)
				n->conns[idx].last_wqe |= (uint8_t)(1u << which);
			break;
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_DEVICE_FATAL:
			xwarn("RDMA device event: %d (port or device failed)", ev.event_type);
			break;
		default:
			xdbg("RDMA async event %d", ev.event_type);
		}
		n->api->ack_async_event(&ev);
	}
}
