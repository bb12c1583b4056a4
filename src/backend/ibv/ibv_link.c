/* The handshake state machine (see ibv_link.h). */
#include <string.h>

#include "backend/ibv/ibv_link.h"

void xi_ibv_link_init(struct ibv_link *l)
{
	memset(l, 0, sizeof(*l));
	l->epoch = 1;
}

static int take_pending(struct ibv_link *l)
{
	l->r_epoch = l->pend_epoch;
	memcpy(l->peer_qpn, l->pend_qpn, sizeof(l->peer_qpn));
	memcpy(l->peer_psn, l->pend_psn, sizeof(l->peer_psn));
	l->pend_epoch = 0;
	l->connected = true;
	l->acked = false;
	return LINK_CONNECT | LINK_REPLY;
}

int xi_ibv_link_on_hello(struct ibv_link *l, const struct ibv_hello *h)
{
	int act = 0;
	/* Older than what we already know: a retransmission from the past. */
	if (h->epoch < l->r_epoch || h->epoch < l->pend_epoch)
		return 0;
	if (h->epoch > l->r_epoch) {
		l->pend_epoch = h->epoch;
		memcpy(l->pend_qpn, h->qpn, sizeof(l->pend_qpn));
		memcpy(l->pend_psn, h->psn, sizeof(l->pend_psn));
		if (l->draining)
			return 0; /* connects once reset */
		if (l->connected) {
			/* Our QPs point at a generation the peer has left. */
			l->connected = l->acked = false;
			l->draining = true;
			return LINK_RESET;
		}
		act |= take_pending(l);
	}
	if (!l->connected) {
		/* We reset after being connected to this generation: tell the peer
		 * our new one, which makes it reset too. */
		return l->draining ? 0 : LINK_REPLY;
	}
	if (h->ack_epoch == l->epoch && !l->acked) {
		l->acked = true;
		act |= LINK_READY;
	}
	if (h->ack_epoch != l->epoch || !(h->flags & IBV_HELLO_READY))
		act |= LINK_REPLY;
	return act;
}

int xi_ibv_link_fail(struct ibv_link *l)
{
	if (l->draining)
		return 0;
	l->connected = l->acked = false;
	l->draining = true;
	return LINK_RESET;
}

int xi_ibv_link_reset_done(struct ibv_link *l)
{
	l->draining = false;
	l->connected = l->acked = false;
	l->epoch++;
	if (l->pend_epoch > l->r_epoch)
		return take_pending(l);
	return LINK_REPLY;
}

void xi_ibv_link_hello_fields(const struct ibv_link *l, struct ibv_hello *h)
{
	h->epoch = l->epoch;
	h->ack_epoch = l->connected ? l->r_epoch : 0;
	h->flags = link_ready(l) ? IBV_HELLO_READY : 0;
}
