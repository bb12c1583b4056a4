/* The connection handshake of one peer, as pure state: no verbs calls, so
 * that simultaneous connects, lost messages, resets on either side and
 * restarted peers can be tested without a device (tests/test_ibv_link.c).
 *
 * Each side owns a pair of RC queue pairs per peer and numbers their
 * generations (epoch). A HELLO says "my QPs of generation E are these; mine
 * are connected to your generation A". A side connects its QPs to the
 * newest generation it has heard of, and a side whose QPs are connected to
 * an older generation of the peer resets them first (error state, flush,
 * reset, next epoch), because a queue pair cannot be pointed at another.
 * A link is ready once its QPs are connected and the peer has acknowledged
 * them; the caller performs the queue-pair transitions the actions name. */
#ifndef XFER_IBV_LINK_H
#define XFER_IBV_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/ibv/ibv_wire.h"

enum {
	LINK_REPLY = 1,   /* send our HELLO now */
	LINK_CONNECT = 2, /* connect our (fresh) QPs to peer_qpn/peer_psn: RTR, RTS */
	LINK_RESET = 4,   /* move our QPs to the error state; call xi_ibv_link_reset_done once flushed */
	LINK_READY = 8,   /* the link just became ready: post what waited */
};

struct ibv_link {
	uint32_t epoch;   /* generation of our QPs, from 1 */
	uint32_t r_epoch; /* the peer generation our QPs are (or were last) connected to */
	bool connected;   /* our QPs are at RTS, tied to r_epoch */
	bool acked;       /* the peer is connected to our current generation */
	bool draining;    /* our QPs are in the error state, flushing */
	uint32_t peer_qpn[2], peer_psn[2]; /* of r_epoch once connected */
	uint32_t pend_epoch; /* a newer peer generation heard while we could not connect */
	uint32_t pend_qpn[2], pend_psn[2];
};

void xi_ibv_link_init(struct ibv_link *l);
static inline bool link_ready(const struct ibv_link *l)
{
	return l->connected && l->acked && !l->draining;
}
/* A HELLO from the peer (already matched by uid): updates l, returns actions. */
int xi_ibv_link_on_hello(struct ibv_link *l, const struct ibv_hello *h);
/* One of our QPs failed: LINK_RESET (or 0 if already draining). */
int xi_ibv_link_fail(struct ibv_link *l);
/* Our QPs are flushed and back in INIT: next generation; LINK_REPLY, with
 * LINK_CONNECT when a newer peer generation is waiting. */
int xi_ibv_link_reset_done(struct ibv_link *l);
/* The handshake fields of our next HELLO (qpn/psn/src/dst are the caller's). */
void xi_ibv_link_hello_fields(const struct ibv_link *l, struct ibv_hello *h);

#endif
