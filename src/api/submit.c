/* Submissions from application threads: validate everything against its
 * region with overflow-safe arithmetic, then hand the request to the worker.
 * No allocation, lock or system call unless the worker sleeps. */
#include <errno.h>
#include <string.h>

#include "core/call.h"
#include "core/drive.h"
#include "core/imm_counters.h"
#include "core/op.h"
#include "core/path.h"
#include "core/subq.h"
#include "util/sys.h"
#include "util/u32_max.h"

/* The call's first stamp, or 0 when it is not traced. A trace of one call
 * in N (counted per submitting thread) keeps the clock reads, about 0.1 us
 * of the worker's time per traced call, off most calls of a benchmark. */
static inline uint64_t trace_clock(xfer_engine_t *e)
{
	static _Thread_local unsigned count;
	unsigned every = e ? atomic_load_explicit(&e->trace_every, memory_order_relaxed) : 0;
	if (!every || (every > 1 && ++count % every))
		return 0;
	return xi_now_ns();
}

/* Checked first so that a stopped engine says so rather than reporting the
 * regions it released as invalid. */
static inline bool stopped(xfer_engine_t *e)
{
	return atomic_load_explicit(&e->stopping, memory_order_relaxed);
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

/* The largest index of a page list. Bounds are monotonic in the index (base
 * + idx * stride grows with idx), so the largest page in bounds means every
 * page is: one check per list rather than two overflow checks per page. On
 * the H200 host 16,384-page calls were posted ~47 us apart while the GPU
 * copied each (64 MiB of 4 KiB pages) in 39 us; the per-page checks were
 * the application's share of that (a loaded 2-vCPU box, best of 5: ~90 us
 * per call before, ~13 us after). */
static uint32_t max_index(const uint32_t *v, uint32_t n)
{
	return xi_u32_max(v, n);
}

static void fill_completion(xfer_engine_t *e, struct sub *s, const struct xfer_completion *c,
			    uint64_t t_call)
{
	uint64_t timeout = e->attr.timeout_ms;
	s->t_call = t_call;
	if (c) {
		s->tag = c->tag;
		s->to = (struct xi_target){.user_data = c->user_data, .cb = c->cb, .cb_ctx = c->cb_ctx,
					   .signal = c->signal, .signal_value = c->signal_value};
		if (c->timeout_ms)
			timeout = c->timeout_ms;
	}
	/* One clock read serves the deadline and the latency histograms: with a
	 * deadline (the default) the submission stamp costs nothing more. */
	bool timed = atomic_load_explicit(&e->telemetry, memory_order_relaxed);
	uint64_t now = timeout || timed ? xi_now_ns() : 0;
	s->to.deadline_ns = xi_deadline_from(now, timeout);
	s->to.t_submit = timed ? now : 0;
}

static struct peer *live_peer(xfer_engine_t *e, xfer_peer_t peer)
{
	if (peer >= e->max_peers)
		return NULL;
	struct peer *p = &e->peers[peer];
	return atomic_load_explicit(&p->state, memory_order_acquire) == PEER_LIVE ? p : NULL;
}

/* -ENOENT for no such peer, -XFER_EPEER for one that failed. */
static int peer_error(xfer_engine_t *e, xfer_peer_t peer)
{
	if (peer < e->max_peers && atomic_load(&e->peers[peer].state) == PEER_DEAD)
		return -XFER_EPEER;
	return -ENOENT;
}

static int check_flags(const xfer_engine_t *e, uint32_t flags, uint32_t allowed)
{
	uint32_t known = XFER_F_IMM | XFER_F_PIN | (0xffu << 8) | (allowed & XFER_F_SHARD);
	if (flags & ~known)
		return -EINVAL;
	if (!(flags & XFER_F_PIN) && XFER_F_NIC_OF(flags))
		return -EINVAL;
	if ((flags & XFER_F_PIN) && XFER_F_NIC_OF(flags) >= e->nnics)
		return -EINVAL;
	if ((flags & XFER_F_PIN) && (flags & XFER_F_SHARD))
		return -EINVAL;
	return 0;
}

/* A remote region is usable while its owner is the live peer it was imported
 * for; a restarted peer (new engine id) makes it stale. */
static int check_rmr(xfer_engine_t *e, const xfer_rmr_t *r)
{
	if (!r || r->e != e)
		return -EINVAL;
	struct peer *p = &e->peers[r->peer];
	int state = atomic_load_explicit(&p->state, memory_order_acquire);
	if (state == PEER_FREE || p->engine_id != r->engine_id)
		return -ESTALE;
	return state == PEER_LIVE ? 0 : -XFER_EPEER;
}

static int max_msg_ok(const xfer_engine_t *e, uint64_t len)
{
	for (unsigned n = 0; n < e->nnics; n++)
		if (len > e->nics[n].max_msg)
			return -EMSGSIZE;
	return 0;
}

static int submit(xfer_engine_t *e, struct sub *s)
{
	if (s->t_call) /* traced: trace_clock stamped it */
		s->t_enq = xi_now_ns();
	atomic_fetch_add(&e->submitters, 1);
	if (atomic_load(&e->stopping)) {
		atomic_fetch_sub(&e->submitters, 1);
		return -ESHUTDOWN;
	}
	/* References are taken before the push so that deregistering or removing
	 * the peer sees them; the worker drops them when the op finishes. */
	xi_sub_ref(e, s);
	bool ok = xi_subq_push(&e->subq, s);
	if (!ok)
		xi_sub_unref_refused(e, s);
	atomic_fetch_sub(&e->submitters, 1);
	if (!ok) {
		atomic_fetch_add_explicit(&e->submit_again, 1, memory_order_relaxed);
		xi_engine_kick(e);
		return -EAGAIN;
	}
	atomic_fetch_add_explicit(&e->ops_submitted, 1, memory_order_relaxed);
	xi_engine_kick(e);
	/* busy_poll 2 with the turns the application's (core/drive.c): post it
	 * now, from this thread; XFER_DRIVE_POST=0 leaves it to the next wait. */
	if (e->drive_ok && e->drive_post)
		xi_drive_post(e);
	return 0;
}

int xfer_send(xfer_engine_t *e, xfer_peer_t peer, const void *buf, size_t len,
	      const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || (len && !buf))
		return -EINVAL;
	if (stopped(e))
		return -ESHUTDOWN;
	if (len > e->attr.msg_max)
		return -EMSGSIZE;
	struct peer *p = live_peer(e, peer);
	if (!p)
		return peer_error(e, peer);
	/* The receiver's buffers are as large as its address says: a larger
	 * message would be truncated there, so it is refused here. */
	if (len > p->msg_max)
		return -EMSGSIZE;
	struct sub s = {.kind = SUB_SEND, .peer = peer};
	s.u.send.buf = buf;
	s.u.send.len = (uint32_t)len;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}

int xfer_write(xfer_engine_t *e, const struct xfer_write *w, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !w)
		return -EINVAL;
	if (stopped(e))
		return -ESHUTDOWN;
	int ret = check_flags(e, w->flags, XFER_F_SHARD);
	if (ret)
		return ret;
	if ((ret = check_rmr(e, w->dst)))
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
	/* Longer than a NIC's max_msg is fine: the worker splits it. */
	if (!xi_write_chunks_ok(e, w->len))
		return -EMSGSIZE;
	struct sub s = {.kind = SUB_WRITE, .peer = w->dst->peer, .flags = w->flags, .imm = w->imm};
	s.u.write.src = w->src;
	s.u.write.dst = w->dst;
	s.u.write.src_off = w->src_off;
	s.u.write.dst_off = w->dst_off;
	s.u.write.len = w->len;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}

int xfer_write_paged(xfer_engine_t *e, const struct xfer_paged_write *w,
		     const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !w || !w->src || !w->npages || !w->src_pages || !w->dst_pages)
		return -EINVAL;
	if (stopped(e))
		return -ESHUTDOWN;
	if (w->src->e != e || !w->src->registered)
		return -EINVAL;
	int ret = check_flags(e, w->flags, 0);
	if (ret)
		return ret;
	if ((ret = check_rmr(e, w->dst)))
		return ret;
	const uint64_t slen = w->src->len, dlen = w->dst->len;
	if (!page_ok(w->src_base, max_index(w->src_pages, w->npages), w->src_stride, w->page_len, slen) ||
	    !page_ok(w->dst_base, max_index(w->dst_pages, w->npages), w->dst_stride, w->page_len, dlen))
		return -EINVAL;
	/* After the bounds: a page outside its region is -EINVAL on every NIC,
	 * whatever its max_msg. */
	if ((ret = max_msg_ok(e, w->page_len)))
		return ret;
	struct sub s = {.kind = SUB_PAGED, .peer = w->dst->peer, .flags = w->flags, .imm = w->imm};
	s.u.paged = *w;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}

int xfer_write_imm(xfer_engine_t *e, xfer_peer_t peer, uint32_t imm, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e)
		return -EINVAL;
	if (!live_peer(e, peer))
		return peer_error(e, peer);
	struct sub s = {.kind = SUB_IMM, .peer = peer, .flags = XFER_F_IMM, .imm = imm};
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}

int xfer_expect_imm(xfer_engine_t *e, uint32_t imm, uint32_t count, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !count)
		return -EINVAL;
	struct sub s = {.kind = SUB_EXPECT, .peer = XFER_PEER_NONE, .imm = imm};
	s.u.expect.count = count;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}

struct disarm_args {
	uint32_t imm, arrived;
};

static int disarm_on_worker(xfer_engine_t *e, void *arg)
{
	struct disarm_args *d = arg;
	return xi_imm_disarm(e->w, d->imm, &d->arrived);
}

int xfer_imm_disarm(xfer_engine_t *e, uint32_t imm, uint32_t *arrived)
{
	struct disarm_args d = {.imm = imm};
	if (!e)
		return -EINVAL;
	int ret = xi_engine_call(e, disarm_on_worker, &d);
	if (arrived)
		*arrived = d.arrived;
	return ret;
}

int xfer_cancel(xfer_engine_t *e, uint64_t tag, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !tag)
		return -EINVAL;
	struct sub s = {.kind = SUB_CANCEL, .peer = XFER_PEER_NONE};
	fill_completion(e, &s, c, t_call);
	s.tag = tag;
	return submit(e, &s);
}

int xfer_scatter(xfer_engine_t *e, xfer_group_t *g, const struct xfer_scatter *sc,
		 const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !g || g->e != e || !sc || !sc->n || !sc->entries)
		return -EINVAL;
	if (stopped(e))
		return -ESHUTDOWN;
	int ret = check_flags(e, sc->flags, 0);
	if (ret)
		return ret;
	if (sc->src && (sc->src->e != e || !sc->src->registered))
		return -EINVAL;
	uint8_t dst_flags = 0;
	for (uint32_t i = 0; i < sc->n; i++) {
		const struct xfer_scatter_entry *en = &sc->entries[i];
		if (en->member >= g->n || !en->dst)
			return -EINVAL;
		dst_flags |= en->dst->flags;
		if ((ret = check_rmr(e, en->dst)))
			return ret;
		if (en->dst->peer != g->peers[en->member])
			return -XFER_EFOREIGN;
		if (en->len && (!sc->src || !range_ok(en->src_off, en->len, sc->src->len)))
			return -EINVAL;
		if (!range_ok(en->dst_off, en->len, en->dst->len))
			return -EINVAL;
		if ((ret = max_msg_ok(e, en->len)))
			return ret;
	}
	struct sub s = {.kind = SUB_SCATTER, .peer = XFER_PEER_NONE, .flags = sc->flags, .imm = sc->imm};
	s.u.scatter.src = sc->src;
	s.u.scatter.group = g;
	s.u.scatter.entries = sc->entries;
	s.u.scatter.status = sc->status;
	s.u.scatter.n = sc->n;
	s.u.scatter.dst_flags = dst_flags;
	if (sc->status)
		for (uint32_t i = 0; i < sc->n; i++)
			sc->status[i] = 0;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}

int xfer_barrier(xfer_engine_t *e, xfer_group_t *g, uint32_t imm, const struct xfer_completion *c)
{
	uint64_t t_call = trace_clock(e);
	if (!e || !g || g->e != e)
		return -EINVAL;
	struct sub s = {.kind = SUB_BARRIER, .peer = XFER_PEER_NONE, .flags = XFER_F_IMM, .imm = imm};
	s.u.barrier.group = g;
	fill_completion(e, &s, c, t_call);
	return submit(e, &s);
}
