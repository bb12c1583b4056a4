/* The MoE module's life: create (engine, buffers, registrations), the
 * connection bytes every rank hands every other, connect (peers, imported
 * regions, the group, the proxy thread), failure, destroy. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe.h"

uint64_t xi_moe_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t xi_moe_member_rank(const struct xfer_moe *m, uint32_t member)
{
	return member < m->cfg.rank ? member : member + 1;
}

static void release_flags(struct xfer_moe *m)
{
	struct xfer_moe_ctl *ctl = m->b.ctl;
	moe_store_rel(&ctl->recv_flag, 1);
	moe_store_rel(&ctl->comb_flag, 1);
	moe_store_rel(&ctl->tx_ready, 1);
	moe_store_rel(&ctl->comb_tx_ready, 1);
}

void xi_moe_fail(struct xfer_moe *m, int err, uint32_t rank, const char *fmt, ...)
{
	/* Under the lock, so that whoever sees `failed` and then asks for the
	 * message (xfer_moe_status, which takes the lock) gets this one, never
	 * the empty one of a failure half recorded. */
	int zero = 0;
	pthread_mutex_lock(&m->fail_lock);
	if (!atomic_compare_exchange_strong(&m->failed, &zero, err ? err : -EIO)) {
		pthread_mutex_unlock(&m->fail_lock);
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->fail_msg, sizeof(m->fail_msg), fmt, ap);
	va_end(ap);
	m->fail_rank = rank;
	m->b.ctl->p_error_rank = rank;
	atomic_store_explicit((_Atomic int32_t *)&m->b.ctl->p_error, err ? err : -EIO,
			      memory_order_release);
	pthread_mutex_unlock(&m->fail_lock);
	/* Whatever waits on these learns of the failure from p_error instead of
	 * hanging; the GPU's own flags are released by the proxy (release_fn). */
	release_flags(m);
}

int xfer_moe_status(const xfer_moe_t *mc, char *msg, size_t cap, uint32_t *rank)
{
	struct xfer_moe *m = (struct xfer_moe *)mc;
	if (!m)
		return -EINVAL;
	pthread_mutex_lock(&m->fail_lock);
	int err = atomic_load(&m->failed);
	if (msg && cap)
		snprintf(msg, cap, "%s", err ? m->fail_msg : "");
	if (rank)
		*rank = err ? m->fail_rank : UINT32_MAX;
	pthread_mutex_unlock(&m->fail_lock);
	return err;
}

void xi_moe_conclude(struct xfer_moe *m, uint32_t r)
{
	if (r < m->cfg.world_size && r != m->cfg.rank && !atomic_exchange(&m->peers[r].concluded, true))
		atomic_fetch_add(&m->concluded, 1);
}

static void peer_down(void *ctx, uint32_t peer, uint64_t engine_id, int reason)
{
	struct xfer_moe *m = ctx;
	(void)engine_id;
	for (uint32_t r = 0; r < m->cfg.world_size; r++)
		if (r != m->cfg.rank && m->peers[r].peer == peer)
			xi_moe_conclude(m, r); /* a failed rank no longer waits for it */
	if (atomic_load(&m->closing))
		return; /* ranks leave one by one once all have said goodbye */
	uint32_t blamed = atomic_load(&m->abort_from);
	for (uint32_t r = 0; r < m->cfg.world_size; r++)
		if (r != m->cfg.rank && m->peers[r].peer == peer) {
			/* A rank that left after reporting another's failure is not the culprit. */
			if (blamed && blamed - 1 != r)
				xi_moe_fail(m, -XFER_EPEER, blamed - 1, "rank %u failed (another rank reported it; "
					 "rank %u has since left)", blamed - 1, r);
			else
				xi_moe_fail(m, -XFER_EPEER, r, "rank %u was declared dead (%s: no answer to "
					 "liveness probes)", r, xfer_strerror(reason));
			return;
		}
}

static void *alloc_zero(struct xfer_moe *m, uint64_t bytes)
{
	if (!bytes)
		return NULL;
	void *p = aligned_alloc(64, (size_t)((bytes + 63) & ~63ull));
	if (!p)
		return NULL;
	memset(p, 0, (size_t)bytes);
	for (unsigned i = 0; i < sizeof(m->owned) / sizeof(m->owned[0]); i++)
		if (!m->owned[i]) {
			m->owned[i] = p;
			return p;
		}
	free(p);
	return NULL;
}

static int reg(struct xfer_moe *m, void *buf, uint64_t len, xfer_mr_t **out)
{
	if (!len)
		return 0;
	if (!buf)
		return -EINVAL;
	return xfer_mr_reg(m->e, buf, (size_t)len, out);
}

static int slots_alloc(struct xfer_moe *m)
{
	uint32_t W = m->cfg.world_size;
	for (int i = 0; i < 2; i++) {
		struct moe_slot *s = &m->slot[i];
		if (xi_moe_plan_alloc(&s->plan, W, m->z.local_experts))
			return -ENOMEM;
		s->cons_from = calloc(W, sizeof(uint32_t));
		s->ovf_dst = calloc(W, sizeof(uint64_t));
		if (!s->cons_from || !s->ovf_dst)
			return -ENOMEM;
		for (int k = 0; k < MOE_ENT_N; k++) {
			s->ent[k] = calloc(W, sizeof(struct xfer_scatter_entry));
			s->status[k] = calloc(W, sizeof(int32_t));
			if (!s->ent[k] || !s->status[k])
				return -ENOMEM;
		}
	}
	return 0;
}

static void slots_free(struct xfer_moe *m)
{
	for (int i = 0; i < 2; i++) {
		struct moe_slot *s = &m->slot[i];
		xi_moe_plan_free(&s->plan);
		free(s->cons_from);
		free(s->ovf_dst);
		for (int k = 0; k < MOE_ENT_N; k++) {
			free(s->ent[k]);
			free(s->status[k]);
		}
	}
}

int xfer_moe_create(const struct xfer_moe_config *c, const struct xfer_attr *attr,
		    const struct xfer_moe_buffers *b, xfer_moe_t **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (xfer_moe_config_check(c))
		return -EINVAL;
	struct xfer_moe *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	pthread_mutex_init(&m->fail_lock, NULL);
	pthread_mutex_init(&m->st_lock, NULL);
	m->cfg = *c;
	xfer_moe_config_resolve(&m->cfg);
	uint32_t W = m->cfg.world_size;
	int rc = -ENOMEM;
	if (c->host_of) {
		m->host_of = malloc(W * sizeof(uint32_t));
		if (!m->host_of)
			goto fail;
		memcpy(m->host_of, c->host_of, W * sizeof(uint32_t));
	}
	m->cfg.host_of = m->host_of;
	xfer_moe_sizes(&m->cfg, &m->z);
	m->n_remote = m->z.remote_ranks;
	m->fail_rank = UINT32_MAX;
	m->next_round = 1;
	if (b)
		m->b = *b;
	/* What the caller leaves out is host memory of ours (the CPU path). */
	if ((!m->b.send && !(m->b.send = alloc_zero(m, m->z.send_bytes))) ||
	    (!m->b.recv && m->z.recv_bytes && !(m->b.recv = alloc_zero(m, m->z.recv_bytes))) ||
	    (!m->b.comb_send && m->z.comb_send_bytes &&
	     !(m->b.comb_send = alloc_zero(m, m->z.comb_send_bytes))) ||
	    (!m->b.comb_recv && !(m->b.comb_recv = alloc_zero(m, m->z.comb_recv_bytes))) ||
	    (!m->b.route_vec && !(m->b.route_vec = alloc_zero(m, m->z.route_vec_bytes))) ||
	    (!m->b.route_table && !(m->b.route_table = alloc_zero(m, m->z.route_table_bytes))) ||
	    (!m->b.ctl && !(m->b.ctl = alloc_zero(m, sizeof(struct xfer_moe_ctl)))))
		goto fail;
	memset(m->b.ctl, 0, sizeof(*m->b.ctl));
	m->b.ctl->tx_ready = 1;
	m->b.ctl->comb_tx_ready = 1;
	m->b.ctl->p_error_rank = UINT32_MAX;
	m->peers = calloc(W, sizeof(*m->peers));
	m->rows = calloc(W, sizeof(*m->rows));
	m->cpu_rows = calloc(W, sizeof(*m->cpu_rows));
	if (m->peers)
		for (uint32_t r = 0; r < W; r++)
			m->peers[r].peer = XFER_PEER_NONE;
	if (!m->peers || !m->rows || !m->cpu_rows || slots_alloc(m) ||
	    xi_moe_route_alloc(&m->route, m->cfg.max_tokens, m->cfg.topk, W) ||
	    xi_moe_plan_alloc(&m->plan, W, m->z.local_experts))
		goto fail;
	m->cpu_rowq = calloc(m->z.expert_rows, sizeof(int32_t));
	m->cpu_acc = calloc(m->cfg.hidden, sizeof(float));
	if (!m->cpu_rowq || !m->cpu_acc)
		goto fail;

	struct xfer_attr a;
	if (attr)
		a = *attr;
	else
		xfer_attr_init(&a);
	uint32_t imms = 16 * W + 256;
	if (a.imm_slots < imms)
		a.imm_slots = imms;
	a.on_peer_down = peer_down;
	a.on_peer_down_ctx = m;
	if ((rc = xfer_engine_create(&a, &m->e)))
		goto fail;
	if (m->n_remote) {
		if ((rc = reg(m, m->b.send, m->z.send_bytes, &m->mr_send)) ||
		    (rc = reg(m, m->b.recv, m->z.recv_bytes, &m->mr_recv)) ||
		    (rc = reg(m, m->b.comb_send, m->z.comb_send_bytes, &m->mr_comb_send)) ||
		    (rc = reg(m, m->b.comb_recv, m->z.comb_recv_bytes, &m->mr_comb_recv)) ||
		    (rc = reg(m, m->b.route_vec, m->z.route_vec_bytes, &m->mr_rv)) ||
		    (rc = reg(m, m->b.route_table, m->z.route_table_bytes, &m->mr_rtab)))
			goto fail;
	}
	*out = m;
	return 0;
fail:
	xfer_moe_destroy(m);
	return rc;
}

void xfer_moe_set_release(xfer_moe_t *m, xfer_moe_release_fn fn, void *ctx)
{
	m->release_fn = fn;
	m->release_ctx = ctx;
}

/*
 * Connection bytes: magic, version, rank, world, host, then the engine
 * address and three region descriptors (route table, receive buffer,
 * combine receive buffer; empty when unused), each with its length, and an
 * FNV-1a checksum. Parsed as untrusted input.
 */
#define MOE_INFO_MAGIC 0x454f4d58u /* "XMOE" */
#define MOE_INFO_VERSION 1u
#define MOE_INFO_HDR 36u

static uint32_t fnv1a(const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

int xfer_moe_local_info(const xfer_moe_t *m, void *buf, size_t cap, size_t *need)
{
	if (!m)
		return -EINVAL;
	uint8_t addr[XFER_ADDR_MAX], desc[3][XFER_DESC_MAX];
	int alen = xfer_engine_addr(m->e, addr, sizeof(addr), NULL);
	if (alen < 0)
		return alen;
	xfer_mr_t *mrs[3] = {m->mr_rtab, m->mr_recv, m->mr_comb_recv};
	int dlen[3];
	for (int i = 0; i < 3; i++) {
		dlen[i] = mrs[i] ? xfer_mr_desc(mrs[i], desc[i], XFER_DESC_MAX, NULL) : 0;
		if (dlen[i] < 0)
			return dlen[i];
	}
	size_t n = MOE_INFO_HDR + (size_t)alen + (size_t)dlen[0] + (size_t)dlen[1] + (size_t)dlen[2] + 4;
	if (need)
		*need = n;
	if (!buf || cap < n)
		return -ENOSPC;
	uint8_t *p = buf;
	put32(p, MOE_INFO_MAGIC);
	put32(p + 4, MOE_INFO_VERSION);
	put32(p + 8, m->cfg.rank);
	put32(p + 12, m->cfg.world_size);
	put32(p + 16, moe_host(m->cfg.host_of, m->cfg.rank));
	put32(p + 20, (uint32_t)alen);
	for (int i = 0; i < 3; i++)
		put32(p + 24 + 4 * i, (uint32_t)dlen[i]);
	size_t o = MOE_INFO_HDR;
	memcpy(p + o, addr, (size_t)alen);
	o += (size_t)alen;
	for (int i = 0; i < 3; i++) {
		memcpy(p + o, desc[i], (size_t)dlen[i]);
		o += (size_t)dlen[i];
	}
	put32(p + o, fnv1a(p, o));
	return (int)n;
}

struct moe_info {
	uint32_t rank, world, host;
	const uint8_t *addr, *desc[3];
	uint32_t alen, dlen[3];
};

static int parse_info(const void *buf, size_t len, struct moe_info *in)
{
	const uint8_t *p = buf;
	if (!p || len < MOE_INFO_HDR + 4)
		return -XFER_EBADWIRE;
	if (get32(p) != MOE_INFO_MAGIC)
		return -XFER_EBADWIRE;
	if (get32(p + 4) != MOE_INFO_VERSION)
		return -XFER_EVERSION;
	if (fnv1a(p, len - 4) != get32(p + len - 4))
		return -XFER_EBADWIRE;
	in->rank = get32(p + 8);
	in->world = get32(p + 12);
	in->host = get32(p + 16);
	in->alen = get32(p + 20);
	uint64_t total = MOE_INFO_HDR + (uint64_t)in->alen + 4;
	if (in->alen == 0 || in->alen > XFER_ADDR_MAX)
		return -XFER_EBADWIRE;
	for (int i = 0; i < 3; i++) {
		in->dlen[i] = get32(p + 24 + 4 * i);
		if (in->dlen[i] > XFER_DESC_MAX)
			return -XFER_EBADWIRE;
		total += in->dlen[i];
	}
	if (total != len)
		return -XFER_EBADWIRE;
	size_t o = MOE_INFO_HDR;
	in->addr = p + o;
	o += in->alen;
	for (int i = 0; i < 3; i++) {
		in->desc[i] = p + o;
		o += in->dlen[i];
	}
	return 0;
}

int xfer_moe_connect(xfer_moe_t *m, const void *const *infos, const size_t *lens)
{
	if (!m || !infos || !lens || m->connected)
		return -EINVAL;
	uint32_t W = m->cfg.world_size, me = m->cfg.rank;
	xfer_peer_t *members = calloc(W, sizeof(xfer_peer_t));
	if (!members)
		return -ENOMEM;
	int rc = 0;
	uint32_t n = 0;
	for (uint32_t r = 0; r < W && !rc; r++) {
		if (r == me)
			continue;
		struct moe_info in;
		if ((rc = parse_info(infos[r], lens[r], &in)))
			break;
		if (in.rank != r || in.world != W) {
			rc = -XFER_EFOREIGN;
			break;
		}
		struct moe_peer *p = &m->peers[r];
		p->remote = moe_host(m->cfg.host_of, r) != moe_host(m->cfg.host_of, me);
		if ((rc = xfer_peer_add(m->e, in.addr, in.alen, &p->peer)))
			break;
		p->member = n;
		members[n++] = p->peer;
		/* Every rank takes the route vectors when any rank is remote; only
		 * remote ranks' buffers are written through the engine. */
		if (m->n_remote && (!in.dlen[0] || (p->remote && (!in.dlen[1] || !in.dlen[2])))) {
			rc = -XFER_EBADWIRE;
			break;
		}
		if (m->n_remote)
			rc = xfer_rmr_import(m->e, p->peer, in.desc[0], in.dlen[0], &p->rtab);
		if (!rc && m->n_remote && p->remote)
			rc = xfer_rmr_import(m->e, p->peer, in.desc[1], in.dlen[1], &p->recv);
		if (!rc && m->n_remote && p->remote)
			rc = xfer_rmr_import(m->e, p->peer, in.desc[2], in.dlen[2], &p->comb_recv);
	}
	if (!rc && n)
		rc = xfer_group_create(m->e, members, n, &m->group);
	free(members);
	if (rc)
		return rc;
	if ((rc = pthread_create(&m->thread, NULL, xi_moe_proxy_main, m)))
		return -rc;
	m->connected = true;
	return 0;
}

void xfer_moe_get_buffers(const xfer_moe_t *m, struct xfer_moe_buffers *b)
{
	*b = m->b;
}

xfer_engine_t *xfer_moe_engine(const xfer_moe_t *m)
{
	return m ? m->e : NULL;
}

void xfer_moe_get_stats(const xfer_moe_t *mc, struct xfer_moe_stats *s)
{
	struct xfer_moe *m = (struct xfer_moe *)mc;
	pthread_mutex_lock(&m->st_lock);
	*s = m->st;
	pthread_mutex_unlock(&m->st_lock);
}

/* How long leaving waits for other ranks (their farewells, their failing
 * too): the deadline, capped at 10 s so that destroy stays bounded. */
static uint64_t leave_ms(const struct xfer_moe *m)
{
	return m->cfg.timeout_ms < 10000 ? m->cfg.timeout_ms : 10000;
}

static void nap_ms(unsigned ms)
{
	nanosleep(&(struct timespec){ms / 1000, (long)(ms % 1000) * 1000000}, NULL);
}

/* Waits for cond(m) until the deadline, polling every millisecond. */
static bool wait_for(struct xfer_moe *m, bool (*cond)(struct xfer_moe *), uint64_t ms)
{
	uint64_t end = xi_moe_now_ns() + ms * 1000000ull;
	while (!cond(m) && !atomic_load(&m->failed)) {
		if (xi_moe_now_ns() > end)
			return false;
		nap_ms(1);
	}
	return cond(m);
}

static bool is_drained(struct xfer_moe *m)
{
	return atomic_load(&m->drained);
}

static bool byes_done(struct xfer_moe *m)
{
	return !atomic_load(&m->bye_left) && !atomic_load(&m->bye_ops);
}

/* Leaving: post what we still owe (the last CONS, the last combine rows),
 * then tell every rank and hear from every rank, so that nobody tears its
 * engine down under a rank that still waits for it. Bounded: a dead rank
 * costs at most the deadline. */
static void farewell(struct xfer_moe *m)
{
	uint64_t ms = leave_ms(m);
	atomic_store(&m->draining, true);
	if (!wait_for(m, is_drained, ms) || !m->group)
		return;
	uint32_t W = m->cfg.world_size, me = m->cfg.rank;
	atomic_store(&m->bye_left, W - 1);
	for (uint32_t r = 0; r < W; r++) {
		if (r == me)
			continue;
		struct xfer_completion c = {.user_data = (uint64_t)MOE_OP_BYE << 56 | 1, .cb = xi_moe_proxy_cb,
					    .cb_ctx = m, .timeout_ms = ms};
		atomic_fetch_add(&m->bye_ops, 1);
		if (xfer_expect_imm(m->e, moe_imm(MOE_PH_BYE, 0, r), 1, &c))
			atomic_fetch_sub(&m->bye_ops, 1);
	}
	struct xfer_completion c = {.user_data = (uint64_t)MOE_OP_BYE << 56, .cb = xi_moe_proxy_cb,
				    .cb_ctx = m, .timeout_ms = ms};
	atomic_fetch_add(&m->bye_ops, 1);
	if (xfer_barrier(m->e, m->group, moe_imm(MOE_PH_BYE, 0, me), &c))
		atomic_fetch_sub(&m->bye_ops, 1);
	wait_for(m, byes_done, ms);
}

static bool abort_told(struct xfer_moe *m)
{
	return atomic_load(&m->abort_told) && !atomic_load(&m->bye_ops);
}

static bool all_concluded(struct xfer_moe *m)
{
	return atomic_load(&m->concluded) + 1 >= m->cfg.world_size;
}

void xfer_moe_destroy(xfer_moe_t *m)
{
	if (!m)
		return;
	if (m->connected && !atomic_load(&m->failed))
		farewell(m);
	/* A failed rank first tells the others whom it blames (the proxy
	 * does), or they would blame it for leaving. */
	uint64_t end = xi_moe_now_ns() + 2000000000ull;
	while (m->connected && atomic_load(&m->failed) && !abort_told(m) && xi_moe_now_ns() < end)
		nap_ms(1);
	/* Then it stays until every other rank has failed too (or left): a
	 * failure every rank detects by itself (capacity) must be found by each
	 * from the data this rank sent, not reported as this rank's departure
	 * by a rank that is slower to get there (a loaded machine). Each rank
	 * told of the failure fails within the proxy's grace; bounded all the
	 * same, a rank that hangs costs at most the deadline (capped at 10 s). */
	end = xi_moe_now_ns() + leave_ms(m) * 1000000ull;
	while (m->connected && atomic_load(&m->failed) && !all_concluded(m) && xi_moe_now_ns() < end)
		nap_ms(1);
	atomic_store(&m->closing, true);
	if (m->connected) {
		atomic_store(&m->stop, true);
		pthread_join(m->thread, NULL);
	}
	if (m->e)
		xfer_engine_stop(m->e); /* every callback has run once this returns */
	if (m->group)
		xfer_group_destroy(m->group);
	xfer_engine_destroy(m->e);
	if (m->peers)
		for (uint32_t r = 0; r < m->cfg.world_size; r++) {
			xfer_rmr_free(m->peers[r].recv);
			xfer_rmr_free(m->peers[r].comb_recv);
			xfer_rmr_free(m->peers[r].rtab);
		}
	free(m->peers);
	free(m->rows);
	free(m->cpu_rows);
	slots_free(m);
	xi_moe_route_free(&m->route);
	xi_moe_plan_free(&m->plan);
	free(m->cpu_rowq);
	free(m->cpu_acc);
	for (unsigned i = 0; i < sizeof(m->owned) / sizeof(m->owned[0]); i++)
		free(m->owned[i]);
	free(m->host_of);
	pthread_mutex_destroy(&m->fail_lock);
	pthread_mutex_destroy(&m->st_lock);
	free(m);
}
