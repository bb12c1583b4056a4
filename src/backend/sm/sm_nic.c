/* The same-host backend's ops table: opening a NIC (a listening socket),
 * registrations (the target's key table), address vector entries
 * (connections), posting, polling and the wait fd (an epoll set over the
 * NIC's sockets, so the worker can sleep: a producer that publishes to a
 * consumer about to sleep sends it one byte). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "backend/sm/sm.h"
#include "backend/sm/sm_backend.h"

#define SM_TX_DEPTH 1024u
#define SM_RX_DEPTH 1024u

static void sm_close(struct xfer_nic *nic)
{
	struct sm_nic *s = nic->priv;
	if (!s)
		return;
	xi_sm_close_all(s);
	xi_sm_keys_free(&s->keys);
	free(s->recvs);
	free(s);
	nic->priv = NULL;
}

static int sm_open(struct xfer_nic *nic, const char *provider, const char *domain)
{
	(void)provider; /* the engine chose this backend by it */
	if (domain && strlen(domain) >= sizeof(nic->domain))
		return -ENODEV;
	struct sm_nic *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->nic = nic;
	s->lfd = s->ep = -1;
	s->uid = geteuid();
	const char *cma = getenv("XFER_SM_CMA");
	s->cma_allowed = !(cma && !strcmp(cma, "0"));
	s->rcap = SM_RX_DEPTH;
	s->recvs = calloc(s->rcap, sizeof(*s->recvs));
	nic->priv = s;
	int ret = s->recvs ? xi_sm_keys_init(&s->keys) : -ENOMEM;
	if (!ret)
		ret = xi_sm_listen(s);
	if (!ret) {
		int len = xi_sm_addr_encode(&s->addr, nic->addr, sizeof(nic->addr));
		ret = len < 0 ? len : 0;
		nic->addrlen = (size_t)len;
	}
	if (ret) {
		xerr("opening the same-host NIC failed: %s", strerror(-ret));
		sm_close(nic);
		return ret;
	}
	snprintf(nic->provider, sizeof(nic->provider), "shm");
	snprintf(nic->domain, sizeof(nic->domain), "%s", domain ? domain : "shm");
	nic->tx_size = SM_TX_DEPTH;
	nic->rx_size = SM_RX_DEPTH;
	nic->max_msg = UINT64_MAX;
	nic->key_bits = 0; /* keys are ours: random */
	atomic_store(&nic->gpu_native, false);
	nic->dmabuf = false;
	nic->delivery_complete = true;
	xinfo("NIC %u: xfer same-host backend on %s, %u slots x %u B inline per connection, CMA %s",
	      nic->index, nic->domain, SM_SLOTS, SM_INLINE, s->cma_allowed ? "when permitted" : "off");
	return 0;
}

static int sm_mr_reg(struct xfer_nic *nic, void *buf, size_t len, uint64_t key, unsigned access,
		     const struct nic_mem *mem, struct nic_mr *out)
{
	struct sm_nic *s = nic->priv;
	(void)key;
	if (mem && mem->cuda_dev >= 0)
		return -EOPNOTSUPP; /* GPU regions reach us through a host mirror */
	uint64_t k;
	int ret = xi_sm_keys_add(&s->keys, buf, len, (access & NIC_MR_REMOTE_WRITE) != 0, &k);
	if (ret)
		return ret;
	*out = (struct nic_mr){.handle = s, .key = k, .base = 0};
	return 0;
}

static void sm_mr_dereg(struct xfer_nic *nic, struct nic_mr *mr)
{
	struct sm_nic *s = nic->priv;
	if (mr->handle)
		xi_sm_keys_remove(&s->keys, mr->key);
	mr->handle = NULL;
}

static int sm_av_insert(struct xfer_nic *nic, const void *addr, size_t len, uint64_t *dest)
{
	struct sm_nic *s = nic->priv;
	struct sm_addr a;
	if (xi_sm_addr_decode(addr, len, &a))
		return -EINVAL;
	struct sm_conn *c;
	int ret = xi_sm_connect(s, &a, &c);
	if (ret)
		return ret;
	*dest = (uint64_t)s->gen[c->handle] << 32 | c->handle;
	return 0;
}

static int sm_av_remove(struct xfer_nic *nic, uint64_t dest)
{
	struct sm_nic *s = nic->priv;
	struct sm_conn *c = xi_sm_conn_of(s, dest);
	if (!c)
		return -EINVAL;
	/* The handle is gone now; what is still in flight fails at the next
	 * poll, and the sweep frees the connection once nothing is. */
	s->handles[c->handle] = NULL;
	s->gen[c->handle]++;
	c->removed = true;
	xi_sm_conn_break(c, -ECANCELED);
	xi_sm_conn_sweep_later(c);
	return 0;
}

static int sm_post_send(struct xfer_nic *nic, uint64_t dest, const void *buf, size_t len, void *desc,
			void *ctx)
{
	(void)desc;
	struct sm_conn *c = xi_sm_conn_of(nic->priv, dest);
	return c ? xi_sm_post(c, SM_OP_SEND, buf, len, 0, 0, false, 0, ctx) : -EINVAL;
}

static int sm_post_write(struct xfer_nic *nic, const struct nic_write *w, void *ctx)
{
	struct sm_conn *c = xi_sm_conn_of(nic->priv, w->dest);
	return c ? xi_sm_post(c, SM_OP_WRITE, w->buf, w->len, w->raddr, w->rkey, w->has_imm, w->imm, ctx)
		 : -EINVAL;
}

static int sm_post_recv(struct xfer_nic *nic, void *buf, size_t len, void *desc, void *ctx)
{
	struct sm_nic *s = nic->priv;
	(void)desc;
	if (s->rcount == s->rcap)
		return -ENOSPC;
	s->recvs[(s->rhead + s->rcount++) % s->rcap] = (struct sm_recv){.buf = buf, .len = len, .ctx = ctx};
	return 0;
}

static void disarm(struct sm_nic *s)
{
	for (uint32_t i = 0; i < s->ntgt; i++)
		if (s->tgt[i]->seg)
			atomic_store_explicit(&s->tgt[i]->seg->req_sleeping, 0, memory_order_relaxed);
	for (uint32_t i = 0; i < s->nini; i++)
		if (s->ini[i]->seg)
			atomic_store_explicit(&s->ini[i]->seg->cmp_sleeping, 0, memory_order_relaxed);
	s->armed = false;
}

static void run_sweeps(struct sm_nic *s, struct sm_evbuf *b)
{
	for (uint32_t i = 0; i < s->nsweeps && !sm_ev_full(b);) {
		struct sm_conn *c = s->sweeps[i];
		if (!xi_sm_sweep(c, b))
			break; /* out of room for events */
		c->sweep = false;
		s->sweeps[i] = s->sweeps[--s->nsweeps];
		if (c->removed)
			xi_sm_conn_free(c);
	}
}

/* Completions of our requests (and the failures of broken connections). */
static void reap_all(struct sm_nic *s, struct sm_evbuf *b)
{
	if (s->nsweeps)
		run_sweeps(s, b);
	uint32_t n = s->nini, start = s->rr_ini++;
	for (uint32_t k = 0; k < n && !sm_ev_full(b); k++) {
		struct sm_conn *c = s->ini[(start + k) % n];
		if (c->state != SM_BROKEN && c->busy)
			xi_sm_reap(c, b);
	}
}

/* Requests of our peers, and SENDs that waited for a receive. */
static void serve_all(struct sm_nic *s, struct sm_evbuf *b)
{
	if (s->dhead && s->rcount)
		xi_sm_match_defers(s, b);
	uint32_t n = s->ntgt, start = s->rr_tgt++;
	bool bad = false;
	for (uint32_t k = 0; k < n && !sm_ev_full(b); k++) {
		struct sm_conn *c = s->tgt[(start + k) % n];
		xi_sm_serve(c, b);
		bad |= c->bad;
	}
	for (uint32_t i = 0; bad && i < s->ntgt;) {
		if (s->tgt[i]->bad)
			xi_sm_conn_drop(s->tgt[i]); /* the last one moved into i */
		else
			i++;
	}
}

static int sm_poll(struct xfer_nic *nic, struct nic_event *ev, int max)
{
	struct sm_nic *s = nic->priv;
	struct sm_evbuf b = {.ev = ev, .max = max};
	if (s->armed)
		disarm(s);
	/* Sockets carry only setup, wake-ups and deaths: a busy worker looks at
	 * them once a millisecond (a sleeping one is woken by them), and first
	 * thing after it was kept from running, so that a peer's death is seen
	 * before the core's liveness scan blames the silence on it. */
	s->polls++;
	uint64_t now = xi_sm_now_ns();
	if (s->nacks || now - s->last_ctl_ns >= SM_CTL_NS) {
		xi_sm_control(s);
		s->last_ctl_ns = now;
	}
	/* Both sides share the event budget: the one that goes first, in
	 * turns, gets at most half of it, so that a stream of completions (or
	 * of failures from a dead peer) never starves the requests of others,
	 * nor the other way round. */
	bool reap_first = s->polls & 1;
	b.max = max > 1 ? max / 2 : max;
	if (reap_first)
		reap_all(s, &b);
	else
		serve_all(s, &b);
	b.max = max;
	if (reap_first)
		serve_all(s, &b);
	else
		reap_all(s, &b);
	xi_sm_flush_kicks(s);
	return b.n;
}

static int sm_wait_fd(struct xfer_nic *nic)
{
	struct sm_nic *s = nic->priv;
	return s->ep;
}

static int sm_trywait(struct xfer_nic *nic)
{
	struct sm_nic *s = nic->priv;
	xi_sm_flush_kicks(s);
	/* Read what the sockets hold, so that the epoll set is quiet when we
	 * sleep on it and wakes us only for news. */
	xi_sm_control(s);
	s->last_ctl_ns = xi_sm_now_ns();
	if (s->nsweeps || (s->dhead && s->rcount))
		return -EAGAIN;
	for (uint32_t i = 0; i < s->ntgt; i++)
		if (s->tgt[i]->state == SM_READY)
			atomic_store_explicit(&s->tgt[i]->seg->req_sleeping, 1, memory_order_relaxed);
	for (uint32_t i = 0; i < s->nini; i++)
		if (s->ini[i]->state != SM_BROKEN && s->ini[i]->busy)
			atomic_store_explicit(&s->ini[i]->seg->cmp_sleeping, 1, memory_order_relaxed);
	s->armed = true;
	/* Pairs with the fence in xi_sm_flush_kicks (Dekker). */
	atomic_thread_fence(memory_order_seq_cst);
	for (uint32_t i = 0; i < s->ntgt; i++) {
		struct sm_conn *c = s->tgt[i];
		if (c->state != SM_READY)
			continue;
		if (c->bad || (atomic_load_explicit(&c->seg->req_tail, memory_order_relaxed) != c->pos &&
			       !(c->blocked && !s->rcount)))
			return -EAGAIN;
	}
	for (uint32_t i = 0; i < s->nini; i++) {
		struct sm_conn *c = s->ini[i];
		if (c->state != SM_BROKEN && c->busy &&
		    atomic_load_explicit(&c->seg->cmp_tail, memory_order_relaxed) != c->cmp_head)
			return -EAGAIN;
	}
	return 0;
}

static const struct backend_ops sm_backend_ops = {
	.name = "sm",
	.open = sm_open,
	.close = sm_close,
	.mr_reg = sm_mr_reg,
	.mr_dereg = sm_mr_dereg,
	.av_insert = sm_av_insert,
	.av_remove = sm_av_remove,
	.post_send = sm_post_send,
	.post_recv = sm_post_recv,
	.post_write = sm_post_write,
	.poll = sm_poll,
	.wait_fd = sm_wait_fd,
	.trywait = sm_trywait,
};

/* The registry asks: "shm" is ours (libfabric's shm is "ofi-shm"). */
const struct backend_ops *xi_sm_select(const char *provider)
{
	return !strcmp(provider, "shm") ? &sm_backend_ops : NULL;
}
