/* The raw libfabric baseline's endpoints, shared by its setup (bench_raw_fabric.c)
 * and its loops (bench_raw.c). Deliberately plain: one RDM endpoint, CQ and
 * AV per NIC, busy polling, no threads, so it shows what the provider itself
 * can do on this machine. */
#ifndef XFER_BENCH_RAW_H
#define XFER_BENCH_RAW_H

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "bench_impl.h"

#define RAW_NIC_MAX 4
#define RAW_RECVS 64
#define RAW_ADDR_MAX 256

struct raw_rkey {
	uint64_t base, key;
};

struct raw_nic {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	uint64_t mr_mode;
	size_t tx_size;
	fi_addr_t peer;
	uint8_t addr[RAW_ADDR_MAX];
	size_t addrlen;
	struct fid_mr *sink_mr, *msg_mr;
	struct raw_rkey peer_sink; /* zero-length writes land here */
};

struct raw_mr {
	struct fid_mr *mr[RAW_NIC_MAX];
	void *desc[RAW_NIC_MAX];
	struct raw_rkey rkey[RAW_NIC_MAX];
};

struct rside {
	unsigned n;
	struct raw_nic nic[RAW_NIC_MAX];
	bool dc; /* endpoints default to delivery-complete */
	uint64_t next_key;
	/* Messages: RAW_RECVS receive slots then one send slot, one region. */
	uint8_t *msg_bufs;
	size_t msg_len;
	struct fi_context2 recv_ctx[RAW_RECVS];
	uint8_t sink[64];
};

int raw_mr_reg(struct rside *r, void *buf, size_t len, struct raw_mr *out);
void raw_mr_dereg(struct rside *r, struct raw_mr *m);
int raw_post_recv(struct rside *r, unsigned slot);
uint8_t *raw_recv_buf(struct rside *r, unsigned slot);
uint8_t *raw_send_buf(struct rside *r);
/* libfabric return codes to -errno, for messages. */
int raw_errno(ssize_t ret);

#endif
