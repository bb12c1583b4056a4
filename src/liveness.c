/* Peer liveness: a small probe message to every live peer each heartbeat
 * interval, at most one outstanding per peer. A probe that fails, or stays
 * unanswered for `heartbeat_misses` intervals, or a transport error on any
 * request, marks the peer dead: everything pending to it completes with
 * -XFER_EPEER and new submissions fail fast. Probes queue behind data on a
 * saturated link, which is why the default allowance is generous. */
#include <errno.h>

#include "log.h"
#include "worker.h"

bool is_peer_failure(int status)
{
	switch (-status) {
	case ECONNRESET:
	case ECONNREFUSED:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENOTCONN:
	case EPIPE:
	case XFER_EPEER:
		return true;
	default:
		return false;
	}
}

void peer_down(struct worker *w, uint32_t idx, int reason)
{
	xfer_engine_t *e = w->e;
	struct peer *p = &e->peers[idx];
	int expected = PEER_LIVE;
	if (!atomic_compare_exchange_strong(&p->state, &expected, PEER_DEAD))
		return;
	xwarn("peer %u (engine %016llx) is down: %s", idx, (unsigned long long)p->engine_id,
	      xfer_strerror(reason));
	for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live) {
		if (op->s.peer != idx)
			continue;
		op_fail(op, -XFER_EPEER);
		op_complete_early(w, op, -XFER_EPEER);
	}
	w->hb[idx].outstanding = false;
	if (e->attr.on_peer_down)
		e->attr.on_peer_down(e->attr.on_peer_down_ctx, idx, p->engine_id, reason);
}

void hb_done(struct worker *w, struct wr *wr, int status)
{
	uint32_t idx = wr->slot;
	w->credits[wr->nic]++;
	wr_put(w, wr);
	w->hb[idx].outstanding = false;
	if (status < 0 && atomic_load(&w->e->peers[idx].state) == PEER_LIVE)
		peer_down(w, idx, status);
}

static void hb_send(struct worker *w, uint32_t idx, uint64_t now)
{
	xfer_engine_t *e = w->e;
	unsigned n = idx % e->nnics;
	if (!w->credits[n])
		return;
	struct wr *wr = wr_get(w);
	if (!wr)
		return;
	wr->op = NULL;
	wr->kind = WR_HB;
	wr->slot = idx;
	wr->nic = (uint8_t)n;
	uint8_t *probe = e->send_bufs + (size_t)SEND_BUFS * e->slot_bytes;
	int ret = e->ops.post_send(&e->nics[n], e->peers[idx].dest[n], probe, MSG_HDR_BYTES,
				   e->send_mr->nic[n].desc, wr);
	if (ret) {
		wr_put(w, wr);
		if (ret != -EAGAIN)
			peer_down(w, idx, ret);
		return;
	}
	w->credits[n]--;
	w->hb[idx].outstanding = true;
	w->hb[idx].sent_at = now;
}

void hb_scan(struct worker *w, uint64_t now, uint64_t *next)
{
	xfer_engine_t *e = w->e;
	const uint64_t every = (uint64_t)e->attr.heartbeat_ms * 1000000ull;
	if (!every)
		return;
	const uint64_t allowance = every * (e->attr.heartbeat_misses ? e->attr.heartbeat_misses : 1);
	for (uint32_t i = 0; i < e->max_peers; i++) {
		if (atomic_load_explicit(&e->peers[i].state, memory_order_relaxed) != PEER_LIVE)
			continue;
		struct peer_hb *h = &w->hb[i];
		uint64_t due;
		if (h->outstanding) {
			due = h->sent_at + allowance;
			if (now >= due) {
				peer_down(w, i, -ETIMEDOUT);
				continue;
			}
		} else {
			due = h->sent_at + every;
			if (now >= due) {
				hb_send(w, i, now);
				due = now + every;
			}
		}
		if (due < *next)
			*next = due;
	}
}
