#include "core/rx.h"

#include <errno.h>
#include <stdlib.h>

#include "core/liveness.h"
#include "core/notice.h"
#include "core/telemetry.h"
#include "core/worker.h"
#include "util/log.h"
#include "util/sys.h"
#include "wire/msg.h"

int xi_rx_init(struct worker *w)
{
	w->recv_wrs = calloc(w->e->recv_slots, sizeof(*w->recv_wrs));
	return w->recv_wrs ? 0 : -ENOMEM;
}

void xi_rx_free(struct worker *w)
{
	free(w->recv_wrs);
	w->recv_wrs = NULL;
}

static void repost(struct worker *w, struct wr *wr)
{
	xfer_engine_t *e = w->e;
	e->ops.post_recv(&e->nics[wr->nic], e->recv_bufs + (size_t)wr->slot * e->slot_bytes, e->slot_bytes,
			 e->recv_mr->nic[wr->nic].desc, wr);
}

void xi_rx_post_all(struct worker *w)
{
	xfer_engine_t *e = w->e;
	for (uint32_t slot = 0; slot < e->recv_slots; slot++) {
		struct wr *wr = &w->recv_wrs[slot];
		wr->kind = WR_RECV;
		wr->slot = slot;
		wr->nic = (uint8_t)(slot / e->attr.recv_count);
		repost(w, wr);
	}
}

int xi_rx_take_reposts(struct worker *w)
{
	int n = 0;
	uint32_t slot;
	while (xi_mpmc_pop(&w->e->repost, &slot)) {
		repost(w, &w->recv_wrs[slot]);
		n++;
	}
	return n;
}

/* Where the backend names senders, a message that claims the engine id of
 * a live peer of ours must come from that peer's entry on this NIC: a peer
 * cannot speak for another one, nor a stranger for a peer (a forged BYE,
 * PONG, NOTICE or message). A message whose id is no peer's comes from a
 * stranger introducing itself, which the API allows (a server learns its
 * clients from their first message): it is delivered as before, its id
 * unverified, and probes and notices from strangers change nothing. Linear
 * in the peer table, as the liveness lookup; messages are not the data path. */
static bool sender_ok(xfer_engine_t *e, unsigned nic, const struct nic_event *ev, uint64_t claimed)
{
	if (!ev->has_src)
		return true;
	bool named = false;
	for (uint32_t i = 0; i < e->max_peers; i++) {
		const struct peer *p = &e->peers[i];
		if (!xi_peer_live(p) || p->engine_id != claimed)
			continue;
		if (e->ops.src_is(&e->nics[nic], ev->src, p->dest[nic]) == 1)
			return true;
		named = true;
	}
	return !named;
}

void xi_rx_done(struct worker *w, struct wr *wr, const struct nic_event *ev)
{
	xfer_engine_t *e = w->e;
	const uint8_t *b = e->recv_bufs + (size_t)wr->slot * e->slot_bytes;
	if (ev->status < 0) {
		/* At stop the provider flushes every posted receive: no error. */
		if (!atomic_load_explicit(&e->stopping, memory_order_relaxed)) {
			xwarn("receive failed on %s: %s", e->nics[wr->nic].domain, xfer_strerror(ev->status));
			xi_tel_nic(w->tel, wr->nic, TN_RECV_ERRORS, 1);
			repost(w, wr);
		}
		return;
	}
	struct xi_msg m;
	if (xi_msg_decode(b, ev->len, e->attr.msg_max, &m)) {
		xwarn("dropping malformed message of %zu bytes", ev->len);
		xi_tel_nic(w->tel, wr->nic, TN_RECV_ERRORS, 1);
		repost(w, wr);
		return;
	}
	if (!sender_ok(e, wr->nic, ev, m.src_id)) {
		xi_stat_add(&e->st.msgs_refused, 1);
		xi_tel_nic(w->tel, wr->nic, TN_RECV_ERRORS, 1);
		xdbg("dropping a message that claims to come from %016llx", (unsigned long long)m.src_id);
		repost(w, wr);
		return;
	}
	xi_tel_nic(w->tel, wr->nic, TN_MSGS_RECEIVED, 1);
	xi_tel_nic(w->tel, wr->nic, TN_BYTES_RECEIVED, ev->len);
	switch (m.magic) {
	case XI_MSG_PING:
	case XI_MSG_PONG:
	case XI_MSG_BYE:
		repost(w, wr);
		xi_hb_message(w, m.magic, m.src_id);
		return;
	case XI_MSG_NOTICE:
		xi_notice_received(w, &m.notice);
		repost(w, wr);
		return;
	default: /* XI_MSG_APP */
		break;
	}
	xi_stat_own_add(&e->st.msgs_received, 1);
	xi_tel_msg_from(w->tel, m.src_id, m.len);
	if (e->attr.on_recv) {
		e->attr.on_recv(e->attr.on_recv_ctx, m.src_id, m.body, m.len);
		repost(w, wr);
		return;
	}
	/* The inbox holds every slot, so this push cannot fail. */
	xi_mpmc_push(&e->inbox, &wr->slot);
	w->inbox_pushed = true;
}

void xi_rx_wake(struct worker *w)
{
	xfer_engine_t *e = w->e;
	if (!w->inbox_pushed)
		return;
	w->inbox_pushed = false;
	atomic_fetch_add_explicit(&e->inbox_seq, 1, memory_order_release);
	if (atomic_load(&e->inbox_waiters))
		xi_futex_wake_all(&e->inbox_seq);
}
