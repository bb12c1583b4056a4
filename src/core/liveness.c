/* Peer liveness. Each heartbeat interval a probe (PING) goes to every live
 * peer, at most one outstanding per peer; a peer that has added us as well
 * answers with a PONG. A peer is dead when, for `heartbeat_misses`
 * intervals: the provider keeps refusing its PINGs, a posted PING never
 * completes, or, once it has answered PONGs, it stops answering (the only
 * signal on providers that complete a send as soon as it is queued, such
 * as shm). A PING that cannot be posted for lack of credits here is no
 * miss: that is our queue, not the peer, and the clock of its PONGs stops
 * meanwhile (probes have credits of their own in core/tx.c, which data
 * never takes, so that is rare). Nor is a PONG or completion that waits in
 * our own completion queue: verdicts come only from a turn that found the
 * queues drained (caught_up_ns), so a worker that falls behind (an error
 * flood from another peer's dropped connection) blames no one. A transport
 * error on any request (connection reset) makes the peer suspect and starts
 * probing at once, heartbeats or not: providers also drop a connection when
 * the peer rejects one bad write, and such a peer is alive. Death completes
 * everything pending to the peer with -XFER_EPEER and makes new submissions
 * fail fast. Probes queue behind data on a saturated link, which is why the
 * default allowance is generous. */
#include "core/liveness.h"

#include <errno.h>
#include <stdlib.h>

#include "core/op.h"
#include "core/telemetry.h"
#include "core/tx.h"
#include "util/log.h"
#include "util/sys.h"
#include "wire/msg.h"

#define SUSPECT_RETRY_NS 50000000ull
/* How long a probe sent on suspicion may stay unanswered with heartbeats off. */
#define SUSPECT_PROBE_MS 2000

int xi_hb_init(struct worker *w)
{
	w->hb = calloc(w->e->max_peers, sizeof(*w->hb));
	return w->hb ? 0 : -ENOMEM;
}

void xi_hb_free(struct worker *w)
{
	free(w->hb);
	w->hb = NULL;
}

bool xi_is_peer_failure(int status)
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

/* since + allowance has passed, as of a turn that had caught up with every
 * completion that arrived by then. */
static bool overdue(const struct worker *w, uint64_t since, uint64_t allowance)
{
	return w->caught_up_ns >= since + allowance;
}

static void clear_suspect(struct worker *w, struct peer_hb *h)
{
	if (h->suspect) {
		h->suspect = false;
		w->nsuspect--;
	}
}

void xi_hb_peer_added(struct worker *w, uint32_t idx)
{
	uint64_t now = xi_now_ns();
	w->hb[idx] = (struct peer_hb){.sent_at = now, .last_pong = now};
	xi_note_deadline(w, 0); /* let the next scan schedule its heartbeats */
}

void xi_hb_peer_removed(struct worker *w, uint32_t idx)
{
	clear_suspect(w, &w->hb[idx]);
	w->hb[idx] = (struct peer_hb){0};
}

void xi_peer_down(struct worker *w, uint32_t idx, int reason)
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
		xi_op_fail(op, -XFER_EPEER);
		xi_op_complete_early(w, op, -XFER_EPEER);
	}
	clear_suspect(w, &w->hb[idx]);
	if (e->attr.on_peer_down)
		e->attr.on_peer_down(e->attr.on_peer_down_ctx, idx, p->engine_id, reason);
}

void xi_peer_suspect(struct worker *w, uint32_t idx, int reason)
{
	struct peer_hb *h = &w->hb[idx];
	if (atomic_load(&w->e->peers[idx].state) != PEER_LIVE || h->suspect)
		return;
	xinfo("peer %u suspect after %s; probing", idx, xfer_strerror(reason));
	h->suspect = true;
	h->suspect_since = xi_now_ns();
	h->next_probe = h->suspect_since;
	w->nsuspect++;
	xi_note_deadline(w, h->next_probe);
}

void xi_request_failed(struct worker *w, struct op *op, uint32_t i, int status)
{
	if (xi_op_multi_peer(op)) {
		xi_tel_peer_failed(w->tel, xi_op_peer_of(op, i), status);
		xi_op_entry_status(op, i, status);
		if (op->status == 0)
			op->status = status;
	} else {
		xi_op_fail(op, status);
	}
	uint32_t peer = xi_op_peer_of(op, i);
	if (xi_is_peer_failure(status) && peer != XFER_PEER_NONE)
		xi_peer_suspect(w, peer, status);
}

/* Probes to a peer go on NIC `peer index mod L`. */
static int post_probe(struct worker *w, uint32_t idx, enum tx_probe which, uint8_t kind)
{
	unsigned n = idx % w->e->nnics;
	return xi_tx_probe(w, n, w->e->peers[idx].dest[n], which, kind, idx);
}

static void ping(struct worker *w, uint32_t idx, uint64_t now)
{
	struct peer_hb *h = &w->hb[idx];
	int ret = post_probe(w, idx, TX_PING, WR_HB);
	xdbg("ping peer %u: %d", idx, ret);
	if (ret == 0) {
		h->outstanding = true;
		h->sent_at = now;
		h->stalled_since = 0;
		/* The time no probe could leave here is not the peer's silence. */
		if (h->deferred_since) {
			h->last_pong += now - h->deferred_since;
			h->deferred_since = 0;
		}
	} else if (ret == -ENOBUFS) {
		if (!h->deferred_since)
			h->deferred_since = now;
	} else if (ret == -EAGAIN) {
		/* A peer that stops draining its queue (shm, when it died) makes the
		 * provider refuse our sends to it forever; scanning counts how long. */
		if (!h->stalled_since)
			h->stalled_since = now;
	} else {
		xi_peer_suspect(w, idx, ret);
	}
}

void xi_hb_done(struct worker *w, struct wr *wr, int status)
{
	uint32_t idx = wr->slot;
	struct peer_hb *h = &w->hb[idx];
	bool was_ping = wr->kind == WR_HB;
	xi_tx_wr_put(w, wr);
	if (!was_ping)
		return; /* a PONG or BYE we sent: nothing to learn */
	h->outstanding = false;
	if (status < 0) {
		xi_peer_suspect(w, idx, status);
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
int xi_hb_goodbye(struct worker *w)
{
	xfer_engine_t *e = w->e;
	int pending = 0;
	for (uint32_t i = 0; i < e->max_peers; i++) {
		if (atomic_load_explicit(&e->peers[i].state, memory_order_relaxed) != PEER_LIVE ||
		    w->hb[i].bye_sent)
			continue;
		/* shm answers -EAGAIN until it has mapped a peer: retried by the caller. */
		int ret = post_probe(w, i, TX_BYE, WR_PONG);
		if (ret == -EAGAIN || ret == -ENOBUFS)
			pending++;
		else
			w->hb[i].bye_sent = true;
	}
	return pending;
}

void xi_hb_message(struct worker *w, uint32_t magic, uint64_t src_id)
{
	int32_t idx = peer_by_id(w->e, src_id);
	xdbg("%s from %016llx (peer %d)", magic == XI_MSG_PING ? "ping" : magic == XI_MSG_PONG ? "pong" : "bye",
	     (unsigned long long)src_id, idx);
	if (idx < 0)
		return;
	struct peer_hb *h = &w->hb[idx];
	if (magic == XI_MSG_PING) {
		post_probe(w, (uint32_t)idx, TX_PONG, WR_PONG);
		return;
	}
	if (magic == XI_MSG_BYE) {
		xi_peer_down(w, (uint32_t)idx, -ESHUTDOWN);
		return;
	}
	h->pong_capable = true;
	h->last_pong = xi_now_ns();
	clear_suspect(w, h);
}

void xi_hb_scan(struct worker *w, uint64_t now, uint64_t *next)
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
			if (overdue(w, h->suspect_since, allowance)) {
				xi_peer_down(w, i, -ETIMEDOUT);
				continue;
			}
			if (!h->outstanding && now >= h->next_probe) {
				ping(w, i, now);
				h->next_probe = now + SUSPECT_RETRY_NS;
			}
			due = h->next_probe < h->suspect_since + allowance ? h->next_probe
									   : h->suspect_since + allowance;
		}
		if (h->stalled_since && overdue(w, h->stalled_since, allowance)) {
			xi_peer_down(w, i, -ETIMEDOUT); /* its queue stayed full */
			continue;
		}
		if (every) {
			if (h->outstanding && overdue(w, h->sent_at, allowance)) {
				xi_peer_down(w, i, -ETIMEDOUT); /* a probe that never left */
				continue;
			}
			if (h->pong_capable && !h->deferred_since && overdue(w, h->last_pong, allowance)) {
				xi_peer_down(w, i, -ETIMEDOUT); /* stopped answering */
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
