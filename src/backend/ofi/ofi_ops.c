/* The libfabric data path: posting and polling for one NIC (registration is
 * in ofi_mr.c). Runs on the NIC's worker thread only (FI_THREAD_DOMAIN). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "util/log.h"
#include "backend/ofi/ofi.h"

int xi_ofi_av_insert(struct xfer_nic *nic, const void *addr, size_t len, uint64_t *dest)
{
	struct ofi_nic *o = nic->priv;
	fi_addr_t fa = FI_ADDR_NOTAVAIL;
	(void)len;
	int ret = fi_av_insert(o->av, addr, 1, &fa, 0, NULL);
	if (ret != 1)
		return ret < 0 ? xi_ofi_errno(ret) : -EINVAL;
	ret = xi_ofi_conn_added(o, fa);
	if (ret) {
		fi_av_remove(o->av, &fa, 1, 0);
		return ret;
	}
	*dest = fa;
	return 0;
}

int xi_ofi_av_remove(struct xfer_nic *nic, uint64_t dest)
{
	struct ofi_nic *o = nic->priv;
	fi_addr_t fa = dest;
	if (o->track && dest < o->ndests && o->dests[dest].broken) {
		o->dests[dest].broken = false; /* nothing left to reset */
		o->nbroken--;
	}
	return xi_ofi_errno(fi_av_remove(o->av, &fa, 1, 0));
}

/* verbs: a destination whose connection failed takes nothing until rxm has
 * dropped it (ofi_conn.c); the core suspects the peer and probes it. */
static bool broken(const struct ofi_nic *o, uint64_t dest)
{
	return o->track && (dest >= o->ndests || o->dests[dest].broken);
}

/* A posted request (ret 0) is counted against its destination. */
static int posted(struct ofi_nic *o, uint64_t dest, void *ctx, ssize_t ret)
{
	if (ret == 0 && o->track)
		xi_ofi_conn_posted(o, dest, ctx);
	return xi_ofi_errno((int)ret);
}

int xi_ofi_post_send(struct xfer_nic *nic, uint64_t dest, const void *buf, size_t len, void *desc,
		  void *ctx)
{
	struct ofi_nic *o = nic->priv;
	if (broken(o, dest))
		return -ENOTCONN;
	return posted(o, dest, ctx, fi_send(o->ep, buf, len, desc, dest, ctx));
}

int xi_ofi_post_recv(struct xfer_nic *nic, void *buf, size_t len, void *desc, void *ctx)
{
	struct ofi_nic *o = nic->priv;
	return xi_ofi_errno((int)fi_recv(o->ep, buf, len, desc, FI_ADDR_UNSPEC, ctx));
}

int xi_ofi_post_write(struct xfer_nic *nic, const struct nic_write *w, void *ctx)
{
	struct ofi_nic *o = nic->priv;
	ssize_t ret;
	if (broken(o, w->dest))
		return -ENOTCONN;
	if (w->len == 0) {
		/* Immediate only. Delivery-complete adds nothing without data, and
		 * shm 1.17 never completes a zero-length write that asks for it. */
		struct iovec iov = {.iov_base = (void *)w->buf, .iov_len = 0};
		struct fi_rma_iov rma = {.addr = w->raddr, .len = 0, .key = w->rkey};
		void *desc = w->desc;
		struct fi_msg_rma msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = w->dest,
					 .rma_iov = &rma, .rma_iov_count = 1, .context = ctx,
					 .data = w->imm};
		uint64_t flags = FI_COMPLETION | FI_TRANSMIT_COMPLETE | (w->has_imm ? FI_REMOTE_CQ_DATA : 0);
		return posted(o, w->dest, ctx, fi_writemsg(o->ep, &msg, flags));
	}
	if (w->has_imm)
		ret = fi_writedata(o->ep, w->buf, w->len, w->desc, w->imm, w->dest, w->raddr, w->rkey,
				   ctx);
	else
		ret = fi_write(o->ep, w->buf, w->len, w->desc, w->dest, w->raddr, w->rkey, ctx);
	return posted(o, w->dest, ctx, ret);
}

static void translate(struct xfer_nic *nic, struct ofi_nic *o, const struct fi_cq_data_entry *c,
		      fi_addr_t from, struct nic_event *ev)
{
	bool source = o->source;
	memset(ev, 0, sizeof(*ev));
	if ((c->flags & FI_REMOTE_WRITE) || (c->flags & FI_REMOTE_CQ_DATA && !(c->flags & FI_RECV))) {
		ev->type = NIC_EV_REMOTE_WRITE;
		ev->imm = (uint32_t)c->data;
	} else if (c->flags & FI_RECV) {
		ev->type = NIC_EV_RECV;
		ev->ctx = c->op_context;
		ev->len = c->len;
		ev->has_src = source;
		ev->src = from == FI_ADDR_NOTAVAIL ? NIC_SRC_UNKNOWN : from;
	} else {
		ev->type = NIC_EV_TX;
		ev->ctx = c->op_context;
		if (o->track && ev->ctx)
			xi_ofi_conn_done(nic, o, ev->ctx, false);
	}
}

/* The next entry is an error: 1 with ev filled, 0 when it is nothing of
 * ours (a remote write that failed at the target has no context), -1 when
 * it cannot be read. */
static int read_error(struct xfer_nic *nic, struct ofi_nic *o, struct nic_event *ev)
{
	struct fi_cq_err_entry err = {0};
	if (fi_cq_readerr(o->cq, &err, 0) != 1)
		return -1;
	memset(ev, 0, sizeof(*ev));
	ev->type = (err.flags & FI_RECV) ? NIC_EV_RECV : NIC_EV_TX;
	ev->ctx = err.op_context;
	ev->status = xi_ofi_errno(-err.err);
	if (ev->status == 0)
		ev->status = -EIO;
	/* verbs passes the work completion's status up: a rejected key is
	 * -EACCES (the request's own failure, not the peer's), a request flushed
	 * behind a failed one -ECONNRESET (retried by the application), as on
	 * the raw backend. */
	if (o->track)
		ev->status = xi_ofi_verbs_errno(err.prov_errno, ev->status);
	xdbg("completion error on %s: %s (prov %d)", nic->domain, fi_strerror(err.err), err.prov_errno);
	if (o->track && ev->ctx && ev->type == NIC_EV_TX)
		xi_ofi_conn_done(nic, o, ev->ctx, ev->status != -ECONNRESET);
	return ev->ctx ? 1 : 0;
}

/* Up to max events, errors included: a connection that drops flushes every
 * request on it as an error, and reading those one per call would leave
 * the completions behind them (a live peer's PONG) waiting for as many
 * calls. */
int xi_ofi_poll(struct xfer_nic *nic, struct nic_event *ev, int max)
{
	struct ofi_nic *o = nic->priv;
	struct fi_cq_data_entry c[32];
	fi_addr_t from[32];
	int n = 0;
	if (max > 32)
		max = 32;
	while (n < max) {
		ssize_t want = max - n;
		ssize_t got = o->source ? fi_cq_readfrom(o->cq, c, (size_t)want, from)
					: fi_cq_read(o->cq, c, (size_t)want);
		if (got > 0) {
			for (ssize_t i = 0; i < got; i++)
				translate(nic, o, &c[i], o->source ? from[i] : FI_ADDR_NOTAVAIL, &ev[n + i]);
			n += (int)got;
			if (got < want)
				break; /* drained: no second call on the common path */
			continue;
		}
		if (got == -FI_EAGAIN)
			break;
		if (got == -FI_EAVAIL) {
			int r = read_error(nic, o, &ev[n]);
			if (r < 0)
				break;
			n += r;
			continue;
		}
		return n ? n : xi_ofi_errno((int)got);
	}
	if (o->nbroken && o->track)
		xi_ofi_conn_reset_idle(nic, o);
	return n;
}

int xi_ofi_wait_fd(struct xfer_nic *nic)
{
	struct ofi_nic *o = nic->priv;
	return o->wait_fd;
}

int xi_ofi_trywait(struct xfer_nic *nic)
{
	struct ofi_nic *o = nic->priv;
	struct fid *f = &o->cq->fid;
	if (o->wait_fd < 0)
		return 0;
	int ret = fi_trywait(o->fabric, &f, 1);
	return ret == 0 ? 0 : -EAGAIN;
}

int xi_ofi_src_is(struct xfer_nic *nic, uint64_t src, uint64_t dest)
{
	(void)nic;
	/* FI_SOURCE reports the sender's entry in our address vector. */
	return src != NIC_SRC_UNKNOWN && src == dest;
}
