/* Peer liveness. Each heartbeat interval a probe (PING) goes to every live
 * peer, at most one outstanding per peer; a peer that has added us as well
 * answers with a PONG. A peer is dead when, for `heartbeat_misses` intervals:
 * its PINGs stay unsent or keep failing, or, once it has answered PONGs, it
 * stops answering (the only signal on providers that complete a send as soon
 * as it is queued, such as shm). A transport error on any request (connection
 * reset) makes the peer suspect and starts probing at once, heartbeats or not:
 * providers also drop a connection when the peer rejects one bad write, and
 * such a peer is alive. Death completes everything pending to the peer with
 * -XFER_EPEER and makes new submissions fail fast. Probes queue behind data
 * on a saturated link, which is why the default allowance is generous. */
#include <errno.h>

#include "util/log.h"
#include "core/worker.h"

#define SUSPECT_RETRY_NS 50000000ull

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
	case ECANCELED: /* tcp;ofi_rxm flushes requests with it when a connection drops */
	case XFER_EPEER:
		return true;
	default:
		return false;
	}
}

static uint64_t allowance_ns(const xfer_engine_t *e)
{
	if (!e->attr.heartbeat_ms)
		return SUSPECT_PROBE_MS * 1000000ull;
	return (uint64_t)e->attr.heartbeat_ms * 1000000ull *
	       (e->attr.heartbeat_misses ? e->attr.heartbeat_misses : 1);
}

static void clear_suspect(struct worker *w, struct peer_hb *h)
{
	if (h->suspect) {
		h->suspect = false;
		w->nsuspect--;
	}
}

void peer_down(struct worker *w, uint32_t idx, int reason)
{
	xfer_engine_t *e = w->e;
	struct peer *p = &e->peers[idx];
	int expected = PEER_LIVE;
	if (!atomic_compare_exchange_strong(&p->state, &expected, PEER_DEAD))
		return;
	/* A peer that said goodbye is no news; one that vanished is. */
	xlog(reason == -ESHUTDOWN ? XFER_LOG_INFO : XFER_LOG_WARN, "peer %u (engine %016llx) is down: %s", idx,
	     (unsigned long long)p->engine_id, xfer_strerror(reason));
	for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live) {
		if (op->s.peer != idx)
			continue;
		op_fail(op, -XFER_EPEER);
		op_complete_early(w, op, -XFER_EPEER);
	}
	clear_suspect(w, &w->hb[idx]);
	if (e->attr.on_peer_down)
		e->attr.on_peer_down(e->attr.on_peer_down_ctx, idx, p->engine_id, reason);
}

/* Posts a PING or PONG from the constant buffers after the SEND bounce slots. */
static int post_probe(struct worker *w, uint32_t idx, uint32_t which, uint8_t kind)
{
	xfer_engine_t *e = w->e;
	unsigned n = idx % e->nnics;
	if (!w->credits[n])
		return -EAGAIN;
	struct wr *wr = wr_get(w);
	if (!wr)
		return -EAGAIN;
	wr->op = NULL;
	wr->kind = kind;
	wr->slot = idx;
	wr->nic = (uint8_t)n;
	uint8_t *msg = e->send_bufs + (size_t)(SEND_BUFS + which) * e->slot_bytes;
	int ret = e->ops.post_send(&e->nics[n], e->peers[idx].dest[n], msg, MSG_HDR_BYTES,
				   e->send_mr->nic[n].desc, wr);
	if (ret) {
		wr_put(w, wr);
		return ret;
	}
	w->credits[n]--;
	return 0;
}

static void ping(struct worker *w, uint32_t idx, uint64_t now)
{
	struct peer_hb *h = &w->hb[idx];
	int ret = post_probe(w, idx, 0, WR_HB);
	xdbg("ping peer %u: %d", idx, ret);
	if (ret == 0) {
		h->outstanding = true;
		h->sent_at = now;
		h->stalled_since = 0;
	} else if (ret == -EAGAIN) {
		/* A peer that stops draining its queue (shm, when it died) refuses
		 * our sends forever; scanning counts how long. */
		if (!h->stalled_since)
			h->stalled_since = now;
	} else {
		peer_suspect(w, idx, ret);
	}
}

void peer_suspect(struct worker *w, uint32_t idx, int reason)
{
	struct peer_hb *h = &w->hb[idx];
	if (atomic_load(&w->e->peers[idx].state) != PEER_LIVE || h->suspect)
		return;
	xinfo("peer %u suspect after %s; probing", idx, xfer_strerror(reason));
	h->suspect = true;
	h->suspect_since = now_ns();
	h->next_probe = h->suspect_since;
	w->nsuspect++;
	worker_note_deadline(w, h->next_probe);
}

void hb_done(struct worker *w, struct wr *wr, int status)
{
	uint32_t idx = wr->slot;
	struct peer_hb *h = &w->hb[idx];
	w->credits[wr->nic]++;
	bool was_ping = wr->kind == WR_HB;
	wr_put(w, wr);
	if (!was_ping)
		return; /* a PONG we sent: nothing to learn */
	h->outstanding = false;
	if (status < 0) {
		peer_suspect(w, idx, status);
		return;
	}
	/* A peer that answers PONGs is cleared only by one. */
	if (!h->pong_capable)
		clear_suspect(w, h);
}

/* Finds the peer with this engine id; linear, but only probes come here. */
static int32_t peer_by_id(xfer_engine_t *e, uint64_t id)
{
	for (uint32_t i = 0; i < e->max_peers; i++)
		if (atomic_load_explicit(&e->peers[i].state, memory_order_relaxed) == PEER_LIVE &&
		    e->peers[i].engine_id == id)
			return (int32_t)i;
	return -1;
}

/* At stop: tell every live peer we are going, so that it fails what it has
 * pending to us now instead of after its heartbeat allowance (and so that
 * providers that queue sends to a closed endpoint, like shm, do not hide it). */
int hb_goodbye(struct worker *w)
{
	xfer_engine_t *e = w->e;
	int pending = 0;
	for (uint32_t i = 0; i < e->max_peers; i++) {
		if (atomic_load_explicit(&e->peers[i].state, memory_order_relaxed) != PEER_LIVE ||
		    w->hb[i].bye_sent)
			continue;
		/* shm answers -EAGAIN until it has mapped a peer: retried by the caller. */
		int ret = post_probe(w, i, 2, WR_PONG);
		if (ret == -EAGAIN)
			pending++;
		else
			w->hb[i].bye_sent = true;
	}
	return pending;
}

void hb_message(struct worker *w, uint32_t magic, uint64_t src_id)
{
	int32_t idx = peer_by_id(w->e, src_id);
	xdbg("%s from %016llx (peer %d)", magic == MSG_MAGIC_HB ? "ping" : "pong",
	     (unsigned long long)src_id, idx);
	if (idx < 0)
		return;
	struct peer_hb *h = &w->hb[idx];
	if (magic == MSG_MAGIC_HB) {
		post_probe(w, (uint32_t)idx, 1, WR_PONG);
		return;
	}
	if (magic == MSG_MAGIC_BYE) {
		peer_down(w, (uint32_t)idx, -ESHUTDOWN);
		return;
	}
	h->pong_capable = true;
	h->last_pong = now_ns();
	clear_suspect(w, h);
}

void hb_scan(struct worker *w, uint64_t now, uint64_t *next)
{
	xfer_engine_t *e = w->e;
	const uint64_t every = (uint64_t)e->attr.heartbeat_ms * 1000000ull;
	if (!every && !w->nsuspect)
		return;
	const uint64_t allowance = allowance_ns(e);
	for (uint32_t i = 0; i < e->max_peers; i++) {
		if (atomic_load_explicit(&e->peers[i].state, memory_order_relaxed) != PEER_LIVE)
			continue;
		struct peer_hb *h = &w->hb[i];
		uint64_t due = UINT64_MAX;
		if (h->suspect) {
			if (now >= h->suspect_since + allowance) {
				peer_down(w, i, -ETIMEDOUT);
				continue;
			}
			if (!h->outstanding && now >= h->next_probe) {
				ping(w, i, now);
				h->next_probe = now + SUSPECT_RETRY_NS;
			}
			due = h->next_probe < h->suspect_since + allowance ? h->next_probe
									   : h->suspect_since + allowance;
		}
		if (h->stalled_since && now >= h->stalled_since + allowance) {
			peer_down(w, i, -ETIMEDOUT); /* its queue stayed full */
			continue;
		}
		if (every) {
			if (h->outstanding && now >= h->sent_at + allowance) {
				peer_down(w, i, -ETIMEDOUT); /* a probe that never left */
				continue;
			}
			if (h->pong_capable && now >= h->last_pong + allowance) {
				peer_down(w, i, -ETIMEDOUT); /* stopped answering */
				continue;
			}
			if (!h->outstanding && now >= h->sent_at + every)
				ping(w, i, now);
			uint64_t beat = h->sent_at + every;
			if (beat <= now)
				beat = now + every;
			if (beat < due)
				due = beat;
		}
		if (due < *next)
			*next = due;
	}
}
