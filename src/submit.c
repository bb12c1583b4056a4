/* Submissions from application threads: validate everything against its
 * region with overflow-safe arithmetic, then hand the request to the worker.
 * No allocation, lock or system call unless the worker sleeps. */
#include <errno.h>
#include <string.h>

#include "engine.h"

static inline uint64_t trace_clock(xfer_engine_t *e)
{
	return e && atomic_load_explicit(&e->tracing, memory_order_relaxed) ? now_ns() : 0;
}

static inline bool range_ok(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

/* base + idx * stride + len <= size, without wrapping. */
static inline bool page_ok(uint64_t base, uint32_t idx, uint64_t stride, uint64_t len, uint64_t size)
{
	uint64_t pos;
	if (__builtin_mul_overflow((uint64_t)idx, stride, &pos) || __builtin_add_overflow(pos, base, &pos))
		return false;
	return range_ok(pos, len, size);
}

static void fill_completion(xfer_engine_t *e, struct sub *s, const struct xfer_completion *c,
			    uint64_t t_call)
{
	s->t_call = t_call;
	uint64_t timeout = e->attr.timeout_ms;
	if (c) {
		s->user_data = c->user_data;
		s->cb = c->cb;
		s->cb_ctx = c->cb_ctx;
		if (c->timeout_ms)
			timeout = c->timeout_ms;
	}
	s->deadline_ns = deadline_after_ms(timeout);
}

static struct peer *live_peer(xfer_engine_t *e, xfer_peer_t peer)
{
	if (peer >= e->max_peers)
		return NULL;
	struct peer *p = &e->peers[peer];
	return atomic_load_explicit(&p->state, memory_order_acquire) == PEER_LIVE ? p : NULL;
}

/* A remote region is usable while its owner is the live peer it was imported
 * for; a restarted peer (new engine id) makes it stale. */
static int check_rmr(xfer_engine_t *e, const xfer_rmr_t *r)
{
	if (!r || r->e != e)
		return -EINVAL;
	struct peer *p = live_peer(e, r->peer);
	if (!p || p->engine_id != r->engine_id)
		return -ESTALE;
	return 0;
}

static int max_msg_ok(const xfer_engine_t *e, uint64_t len)
{
	for (unsigned n = 0; n < e->nnics; n++)
		if (len > e->nics[n].max_msg)
			return -EMSGSIZE;
	return 0;
}

static int submit(xfer_engine_t *e, struct sub *s, xfer_mr_t *mr)
{
	if (atomic_load_explicit(&e->tracing, memory_order_relaxed))
		s->t_enq = now_ns();
	atomic_fetch_add(&e->submitters, 1);
	if (atomic_load(&e->stopping)) {
		atomic_fetch_sub(&e->submitters, 1);
		return -ESHUTDOWN;
	}
	/* References are taken before the push so that deregistering or removing
	 * the peer sees them; the worker drops them when the op finishes. */
	if (mr)
		atomic_fetch_add_explicit(&mr->inflight, 1, memory_order_relaxed);
	if (s->peer != XFER_PEER_NONE)
		atomic_fetch_add_explicit(&e->peers[s->peer].inflight, 1, memory_order_relaxed);
	bool ok = mpmc_push(&e->subq, s);
	if (!ok) {
		if (mr)
			atomic_fetch_sub_explicit(&mr->inflight, 1, memory_order_relaxed);
		if (s->peer != XFER_PEER_NONE)
			atomic_fetch_sub_explicit(&e->peers[s->peer].inflight, 1, memory_order_relaxed);
	}
	atomic_fetch_sub(&e->submitters, 1);
	if (!ok) {
		engine_kick(e);
		return -EAGAIN;
	}
	atomic_fetch_add_explicit(&e->st.ops_submitted, 1, memory_order_relaxed);
	engine_kick(e);
	return 0;
}

int xfer_send(xfer_engine_t *e, xfer_peer_t peer, const void *buf, size_t len,
	      const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || (len && !buf))
		return -EINVAL;
	if (len > e->attr.msg_max)
		return -EMSGSIZE;
	if (!live_peer(e, peer))
		return -ENOENT;
	struct sub s = {.kind = SUB_SEND, .peer = peer};
	s.u.send.buf = buf;
	s.u.send.len = (uint32_t)len;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s, NULL);
}

int xfer_write(xfer_engine_t *e, const struct xfer_write *w, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !w || (w->flags & ~XFER_F_IMM))
		return -EINVAL;
	int ret = check_rmr(e, w->dst);
	if (ret)
		return ret;
	if (w->src) {
		if (w->src->e != e || !w->src->registered)
			return -EINVAL;
		if (!range_ok(w->src_off, w->len, w->src->len))
			return -EINVAL;
	} else if (w->len) {
		return -EINVAL;
	}
	if (!range_ok(w->dst_off, w->len, w->dst->len))
		return -EINVAL;
	if ((ret = max_msg_ok(e, w->len)))
		return ret;
	struct sub s = {.kind = SUB_WRITE, .peer = w->dst->peer, .flags = w->flags, .imm = w->imm};
	s.u.write.src = w->src;
	s.u.write.dst = w->dst;
	s.u.write.src_off = w->src_off;
	s.u.write.dst_off = w->dst_off;
	s.u.write.len = w->len;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s, w->src);
}

int xfer_write_paged(xfer_engine_t *e, const struct xfer_paged_write *w,
		     const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !w || !w->src || !w->npages || !w->src_pages || !w->dst_pages ||
	    (w->flags & ~XFER_F_IMM))
		return -EINVAL;
	if (w->src->e != e || !w->src->registered)
		return -EINVAL;
	int ret = check_rmr(e, w->dst);
	if (ret)
		return ret;
	if ((ret = max_msg_ok(e, w->page_len)))
		return ret;
	const uint64_t slen = w->src->len, dlen = w->dst->len;
	for (uint32_t i = 0; i < w->npages; i++) {
		if (!page_ok(w->src_base, w->src_pages[i], w->src_stride, w->page_len, slen) ||
		    !page_ok(w->dst_base, w->dst_pages[i], w->dst_stride, w->page_len, dlen))
			return -EINVAL;
	}
	struct sub s = {.kind = SUB_PAGED, .peer = w->dst->peer, .flags = w->flags, .imm = w->imm};
	s.u.paged = *w;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s, w->src);
}

int xfer_write_imm(xfer_engine_t *e, xfer_peer_t peer, uint32_t imm, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e)
		return -EINVAL;
	if (!live_peer(e, peer))
		return -ENOENT;
	struct sub s = {.kind = SUB_IMM, .peer = peer, .flags = XFER_F_IMM, .imm = imm};
	fill_completion(e, &s, c, t_call);
	return submit(e, &s, NULL);
}

int xfer_expect_imm(xfer_engine_t *e, uint32_t imm, uint32_t count, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !count)
		return -EINVAL;
	struct sub s = {.kind = SUB_EXPECT, .peer = XFER_PEER_NONE, .imm = imm};
	s.u.expect.count = count;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s, NULL);
}

struct disarm_args {
	uint32_t imm, arrived;
};

/* worker.h's imm_disarm, reached through the worker. */
struct worker;
int imm_disarm(struct worker *w, uint32_t imm, uint32_t *arrived);

static int disarm_on_worker(xfer_engine_t *e, void *arg)
{
	struct disarm_args *d = arg;
	return imm_disarm(e->w, d->imm, &d->arrived);
}

int xfer_imm_disarm(xfer_engine_t *e, uint32_t imm, uint32_t *arrived)
{
	struct disarm_args d = {.imm = imm};
	if (!e)
		return -EINVAL;
	int ret = engine_call(e, disarm_on_worker, &d);
	if (arrived)
		*arrived = d.arrived;
	return ret;
}
