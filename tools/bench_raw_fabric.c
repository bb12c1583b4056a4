/* Opening the raw baseline's endpoints: the provider and the NICs are the
 * ones the engine reported, the fi_getinfo hints are the engine's, and
 * delivery-complete is asked for exactly when the engine got it, so both
 * sides of a comparison run on the same transport with the same mr_mode and
 * the same completion semantics (unless --raw-completion transmit). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>

#include "bench_raw.h"

int raw_errno(ssize_t ret)
{
	if (ret >= 0)
		return 0;
	return ret > -256 ? (int)ret : -EIO;
}

static struct fi_info *query(const char *prov, uint64_t op_flags)
{
	struct fi_info *h = fi_allocinfo(), *list = NULL;
	if (!h)
		return NULL;
	h->caps = FI_MSG | FI_RMA;
	h->ep_attr->type = FI_EP_RDM;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->domain_attr->mr_mode =
		FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->tx_attr->op_flags = op_flags;
	h->fabric_attr->prov_name = strdup(prov);
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &list);
	fi_freeinfo(h);
	return ret ? NULL : list;
}

static int open_nic(struct raw_nic *n, const char *prov, const char *domain, bool want_dc,
		    bool *dc)
{
	static const uint64_t tries[] = {FI_DELIVERY_COMPLETE, 0};
	struct fi_info *list = NULL, *fi = NULL;
	for (unsigned t = want_dc ? 0 : 1; t < 2 && !fi; t++) {
		list = query(prov, tries[t]);
		for (fi = list; fi; fi = fi->next)
			if (!strcmp(fi->fabric_attr->prov_name, prov) &&
			    (!domain || !strcmp(fi->domain_attr->name, domain)) &&
			    fi->domain_attr->cq_data_size >= 4)
				break;
		if (!fi)
			fi_freeinfo(list);
	}
	if (!fi)
		return -ENODEV;
	n->info = fi_dupinfo(fi);
	fi_freeinfo(list);
	if (!n->info)
		return -ENOMEM;
	fi = n->info;
	*dc = (fi->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
	n->mr_mode = fi->domain_attr->mr_mode;
	n->tx_size = fi->tx_attr->size;
	struct fi_cq_attr cq = {.format = FI_CQ_FORMAT_DATA,
				.size = fi->tx_attr->size + fi->rx_attr->size + 64,
				.wait_obj = FI_WAIT_NONE};
	struct fi_av_attr av = {.type = FI_AV_TABLE};
	int ret = fi_fabric(fi->fabric_attr, &n->fabric, NULL);
	if (!ret)
		ret = fi_domain(n->fabric, fi, &n->domain, NULL);
	if (!ret)
		ret = fi_cq_open(n->domain, &cq, &n->cq, NULL);
	if (!ret)
		ret = fi_av_open(n->domain, &av, &n->av, NULL);
	if (!ret)
		ret = fi_endpoint(n->domain, fi, &n->ep, NULL);
	if (!ret)
		ret = fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_ep_bind(n->ep, &n->av->fid, 0);
	if (!ret)
		ret = fi_enable(n->ep);
	if (!ret) {
		n->addrlen = sizeof(n->addr);
		ret = fi_getname(&n->ep->fid, n->addr, &n->addrlen);
	}
	if (ret)
		fprintf(stderr, "xfer-bench: raw: opening %s on %s: %s\n", prov,
			domain ? domain : "(first)", fi_strerror(-ret));
	return raw_errno(ret);
}

static void close_nic(struct raw_nic *n)
{
	struct fid *f[] = {n->sink_mr ? &n->sink_mr->fid : NULL, n->msg_mr ? &n->msg_mr->fid : NULL,
			   n->ep ? &n->ep->fid : NULL, n->av ? &n->av->fid : NULL,
			   n->cq ? &n->cq->fid : NULL, n->domain ? &n->domain->fid : NULL,
			   n->fabric ? &n->fabric->fid : NULL};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i])
			fi_close(f[i]);
	if (n->info)
		fi_freeinfo(n->info);
	memset(n, 0, sizeof(*n));
}

static int reg_one(struct rside *r, struct raw_nic *n, void *buf, size_t len, struct fid_mr **mr,
		   void **desc, struct raw_rkey *rk)
{
	uint64_t access = FI_SEND | FI_RECV | FI_WRITE | FI_REMOTE_WRITE | FI_READ | FI_REMOTE_READ;
	int ret = fi_mr_reg(n->domain, buf, len, access, 0, r->next_key++, 0, mr, NULL);
	if (!ret && (n->mr_mode & FI_MR_ENDPOINT)) {
		ret = fi_mr_bind(*mr, &n->ep->fid, 0);
		if (!ret)
			ret = fi_mr_enable(*mr);
		if (ret)
			fi_close(&(*mr)->fid);
	}
	if (ret) {
		*mr = NULL;
		return raw_errno(ret);
	}
	if (desc)
		*desc = fi_mr_desc(*mr);
	if (rk) {
		rk->key = fi_mr_key(*mr);
		rk->base = (n->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)buf : 0;
	}
	return 0;
}

int raw_mr_reg(struct rside *r, void *buf, size_t len, struct raw_mr *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < r->n; i++) {
		int ret = reg_one(r, &r->nic[i], buf, len, &out->mr[i], &out->desc[i], &out->rkey[i]);
		if (ret) {
			raw_mr_dereg(r, out);
			return ret;
		}
	}
	return 0;
}

void raw_mr_dereg(struct rside *r, struct raw_mr *m)
{
	for (unsigned i = 0; i < r->n; i++)
		if (m->mr[i])
			fi_close(&m->mr[i]->fid);
	memset(m, 0, sizeof(*m));
}

uint8_t *raw_recv_buf(struct rside *r, unsigned slot)
{
	return r->msg_bufs + (size_t)slot * r->msg_len;
}

uint8_t *raw_send_buf(struct rside *r)
{
	return r->msg_bufs + (size_t)RAW_RECVS * r->msg_len;
}

int raw_post_recv(struct rside *r, unsigned slot)
{
	struct raw_nic *n = &r->nic[0];
	ssize_t ret;
	do {
		ret = fi_recv(n->ep, raw_recv_buf(r, slot), r->msg_len, fi_mr_desc(n->msg_mr),
			      FI_ADDR_UNSPEC, &r->recv_ctx[slot]);
		if (ret == -FI_EAGAIN) {
			struct fi_cq_data_entry e;
			/* Progress only; nothing can be waiting here during setup. */
			(void)fi_cq_read(n->cq, &e, 0);
		}
	} while (ret == -FI_EAGAIN);
	return raw_errno(ret);
}

int rside_open(struct rside **out, const char *provider, const char *const *nics, unsigned nnics,
	       bool want_dc)
{
	struct rside *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* Keys only matter where the application picks them (mr_mode without
	 * FI_MR_PROV_KEY); random bits keep two runs from colliding. */
	r->next_key = ((uint64_t)bench_now_ns() & 0xffff) << 16 | 1;
	int ret = 0;
	for (unsigned i = 0; i < nnics && i < RAW_NIC_MAX && !ret; i++, r->n++)
		ret = open_nic(&r->nic[i], provider, nics[i], want_dc, &r->dc);
	r->msg_len = BENCH_MSG_MAX + 64;
	if (!ret) {
		r->msg_bufs = bench_alloc((RAW_RECVS + 1) * r->msg_len);
		ret = r->msg_bufs ? 0 : -ENOMEM;
	}
	for (unsigned i = 0; i < r->n && !ret; i++) {
		ret = reg_one(r, &r->nic[i], r->sink, sizeof(r->sink), &r->nic[i].sink_mr, NULL, NULL);
		if (!ret)
			ret = reg_one(r, &r->nic[i], r->msg_bufs, (RAW_RECVS + 1) * r->msg_len,
				      &r->nic[i].msg_mr, NULL, NULL);
	}
	if (ret) {
		rside_close(r);
		return ret;
	}
	*out = r;
	return 0;
}

/* What travels in MSG_RAWADDR, per NIC. */
struct raw_wire {
	uint32_t len;
	uint8_t addr[RAW_ADDR_MAX];
	struct raw_rkey sink;
};

int rside_connect(struct rside *r, struct ctl *ctl)
{
	struct raw_wire w[RAW_NIC_MAX] = {0};
	for (unsigned i = 0; i < r->n; i++) {
		w[i].len = (uint32_t)r->nic[i].addrlen;
		memcpy(w[i].addr, r->nic[i].addr, r->nic[i].addrlen);
		w[i].sink.key = fi_mr_key(r->nic[i].sink_mr);
		w[i].sink.base = (r->nic[i].mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)r->sink : 0;
	}
	uint32_t len;
	int ret = ctl_send(ctl, MSG_RAWADDR, w, r->n * (uint32_t)sizeof(w[0]));
	if (!ret)
		ret = ctl_expect(ctl, MSG_RAWADDR, w, sizeof(w), &len, 60000);
	if (ret)
		return ret;
	if (len == 0)
		return -ENODEV; /* the peer could not open the baseline */
	if (len != r->n * sizeof(w[0])) {
		fprintf(stderr, "xfer-bench: raw: the peer has a different number of NICs\n");
		return -EPROTO;
	}
	for (unsigned i = 0; i < r->n && !ret; i++) {
		if (fi_av_insert(r->nic[i].av, w[i].addr, 1, &r->nic[i].peer, 0, NULL) != 1)
			ret = -EHOSTUNREACH;
		r->nic[i].peer_sink = w[i].sink;
	}
	for (unsigned s = 0; s < RAW_RECVS && !ret; s++)
		ret = raw_post_recv(r, s);
	return ret;
}

const char *rside_completion(const struct rside *r)
{
	return r->dc ? "delivery-complete" : "provider default";
}

void rside_close(struct rside *r)
{
	if (!r)
		return;
	/* Endpoints close before their buffers go: shm would leave files behind
	 * in /dev/shm otherwise. */
	for (unsigned i = 0; i < r->n; i++)
		close_nic(&r->nic[i]);
	bench_free(r->msg_bufs, (RAW_RECVS + 1) * r->msg_len);
	free(r);
}
