/* The raw libibverbs backend's private state: one NIC is one port of one
 * device with its protection domain, one completion queue, two shared
 * receive queues (SENDs; write-with-immediate arrivals), one UD queue pair
 * for connection handshakes, and a table of connections, each a pair of RC
 * queue pairs to one peer NIC. Only the worker thread touches it after open. */
#ifndef XFER_IBV_NIC_H
#define XFER_IBV_NIC_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/ibv/ibv_api.h"
#include "backend/ibv/ibv_link.h"
#include "backend/ibv/ibv_wire.h"

#define IBV_MAX_CONNS 2048  /* peers (with NICs) per NIC, passive ones included */
#define IBV_CHAIN_MAX 32    /* send WRs handed to the NIC in one post (one doorbell) */
#define IBV_CHAIN_BYTES 16384 /* larger requests are posted at once, not chained */
#define IBV_UD_RECVS 64
#define IBV_UD_SENDS 32
#define IBV_UD_SLOT 256     /* GRH (40) + a HELLO, rounded */
#define IBV_BACKLOG 32
/* Buckets of the message-QP index (a power of two, twice the table). */
#define IBV_QPN_BUCKETS 4096

enum { QP_MSG = 0, QP_DATA = 1 };
enum { REQ_SEND = 1, REQ_WRITE, REQ_RECV };

/* wr_id: a request's context (16-byte aligned), or an internal tag. */
enum { TAG_CTX = 0, TAG_IMM = 1, TAG_UD_RECV = 2, TAG_UD_SEND = 3 };
#define TAG_BITS 4
#define TAG_MASK 0xfull

/* What the backend keeps in a request's NIC_CTX_BYTES while it owns it. */
struct ibv_req {
	struct ibv_req *next; /* in a connection's queue, or the failed list */
	uint64_t laddr, raddr;
	uint32_t len, lkey, rkey, imm;
	uint32_t conn;
	int32_t status; /* on the failed list */
	uint8_t op;     /* REQ_* */
	uint8_t has_imm;
};
_Static_assert(sizeof(struct ibv_req) <= NIC_CTX_BYTES, "ibv_req must fit a request context");

struct ibv_req_list {
	struct ibv_req *head, *tail;
	uint32_t n;
};

struct ibv_conn {
	bool used;
	uint32_t refs;  /* address-vector entries naming it; 0: passive (the peer added us) */
	struct ibv_wire_addr remote;
	struct ibv_ah *ah; /* to the peer's UD QP */
	struct ibv_qp *qp[2];
	uint32_t psn[2];   /* our starting PSNs of this generation */
	uint32_t outstanding[2]; /* posted and not yet completed */
	struct ibv_link link;
	struct ibv_req_list queue; /* waiting for the link or for room in a send queue */
	uint64_t next_hello_ns, hello_gap_ns;
	uint64_t queued_since_ns; /* when the oldest queued request started waiting */
	uint64_t drain_until_ns;  /* draining: not before (SRQ WQEs in progress) */
	uint64_t active_ns;       /* last handshake or traffic, for evicting passive conns */
	uint8_t last_wqe;         /* bit per QP: IBV_EVENT_QP_LAST_WQE_REACHED seen */
	bool was_ready;           /* the link has been up: requests no longer wait for it */
	bool indexed;             /* qp[QP_MSG] is in the NIC's qpn index */
	uint32_t qpn_next;        /* next connection in the same qpn bucket, + 1 (0: none) */
};

struct ibv_nic {
	const struct ibv_api *api;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	struct ibv_cq *cq;
	struct ibv_srq *srq_msg, *srq_imm;
	struct ibv_qp *ud;
	struct ibv_device_attr dev;
	uint8_t port, gid_index, link_layer, mtu;
	uint16_t lid;
	uint64_t max_msg; /* the port's largest message */
	union ibv_gid gid;
	struct ibv_wire_addr self;
	uint32_t max_inline;
	uint32_t sq_depth[2];
	uint32_t imm_depth, imm_posted;
	bool armed; /* the CQ was armed for a wakeup: drain the channel */
	/* Handshake datagrams: receive and send slots in one local-only region. */
	uint8_t *ud_buf;
	struct ibv_mr *ud_mr;
	uint32_t ud_free[IBV_UD_SENDS], ud_nfree;
	/* Send WRs built and not yet posted, all for one QP (see ibv_post.c). */
	struct {
		uint32_t conn;
		uint8_t qp;
		int n;
		struct ibv_send_wr wr[IBV_CHAIN_MAX];
		struct ibv_sge sge[IBV_CHAIN_MAX];
	} chain;
	struct ibv_req_list failed; /* requests completed by us, not the NIC */
	struct ibv_wc backlog[IBV_BACKLOG];
	int nbacklog, backlog_pos;
	uint64_t next_tick_ns, next_async_ns, next_due_ns;
	uint64_t connect_timeout_ns;
	uint8_t rc_timeout, rc_retry, rnr_retry, min_rnr_timer;
	uint32_t nconns;
	struct ibv_conn conns[IBV_MAX_CONNS];
	/* Message QP number -> connection (+ 1; 0: empty), chained through
	 * ibv_conn.qpn_next: a received SEND names its sender by the local QP it
	 * arrived on (src_is), without a scan of the table per message. */
	uint32_t qpn_head[IBV_QPN_BUCKETS];
};

static inline struct ibv_req *req_of(void *ctx)
{
	return (struct ibv_req *)ctx;
}

uint64_t xi_ibv_now_ns(void);
void xi_ibv_req_push(struct ibv_req_list *l, struct ibv_req *r);
struct ibv_req *xi_ibv_req_pop(struct ibv_req_list *l);

/* ibv_errno.c */
int xi_ibv_wc_errno(enum ibv_wc_status st);

/* ibv_conn.c: connections and their queue pairs. */
int xi_ibv_conn_open_ud(struct ibv_nic *n);
/* The connection for a peer NIC address: an existing one (also a passive
 * one the peer opened) or a new one; starts the handshake. */
int xi_ibv_conn_get(struct ibv_nic *n, const struct ibv_wire_addr *remote, bool passive, uint32_t *idx);
void xi_ibv_conn_put(struct ibv_nic *n, uint32_t idx);
void xi_ibv_conn_destroy_all(struct ibv_nic *n);
void xi_ibv_conn_on_ud_recv(struct ibv_nic *n, const uint8_t *buf, uint32_t len, uint32_t src_qp);
/* A request on connection c failed with a transport error: reset its QPs. */
void xi_ibv_conn_failed(struct ibv_nic *n, uint32_t c, int status);
/* Timers: handshakes, connect timeouts, drains. Returns the next due time. */
uint64_t xi_ibv_conn_tick(struct ibv_nic *n, uint64_t now);
void xi_ibv_conn_async_events(struct ibv_nic *n);
bool xi_ibv_conn_ready(const struct ibv_nic *n, uint32_t c);
/* The connection whose message QP has number qpn, or UINT32_MAX. */
uint32_t xi_ibv_conn_of_msg_qpn(const struct ibv_nic *n, uint32_t qpn);

/* ibv_post.c */
void xi_ibv_post_chain_flush(struct ibv_nic *n);
/* Posts what waits on connection c, as room and the link allow. */
void xi_ibv_post_queued(struct ibv_nic *n, uint32_t c);
void xi_ibv_post_fail_queue(struct ibv_nic *n, uint32_t c, int status);
void xi_ibv_post_imm_refill(struct ibv_nic *n);

/* ibv_mr.c */
int xi_ibv_mr_access(const struct ibv_nic *n, bool remote);

/* The ops table's entries (ibv_open.c holds the table), prefixed xi_ibvb_ so
 * as not to shadow verbs.h. */
int xi_ibvb_mr_reg(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		   const struct nic_mem *mem,
		struct nic_mr *out);
void xi_ibvb_mr_dereg(struct xfer_nic *nic, struct nic_mr *mr);
int xi_ibvb_av_insert(struct xfer_nic *nic, const void *addr, size_t len, uint64_t *dest);
int xi_ibvb_av_remove(struct xfer_nic *nic, uint64_t dest);
int xi_ibvb_post_send(struct xfer_nic *nic, uint64_t dest, const void *buf, size_t len, void *desc,
		   void *ctx);
int xi_ibvb_post_recv(struct xfer_nic *nic, void *buf, size_t len, void *desc, void *ctx);
int xi_ibvb_post_write(struct xfer_nic *nic, const struct nic_write *w, void *ctx);
int xi_ibvb_poll(struct xfer_nic *nic, struct nic_event *ev, int max);
int xi_ibvb_wait_fd(struct xfer_nic *nic);
int xi_ibvb_trywait(struct xfer_nic *nic);
int xi_ibvb_src_is(struct xfer_nic *nic, uint64_t src, uint64_t dest);
extern struct backend_ops xi_ibv_ops;

#endif
