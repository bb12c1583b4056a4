/* Peers by engine id. A prefiller learns decoders from their requests; a
 * decoder adds prefill ranks when they join. An engine declared dead is
 * used no more; if it turns out to be alive (it was frozen, or cut off) it
 * can be added again once its old peer has been removed. Every call with
 * mu held. */
#ifndef XFER_KV_PEERS_H
#define XFER_KV_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv_state.h"

/* The peer with this engine id, adding it from addr when unknown (and
 * checking that the address is the sender's). -EBUSY for an engine
 * declared dead whose old peer is still being drained. */
int xi_kv_peer_for(struct kv_core *c, uint64_t engine_id, const uint8_t *addr, size_t len,
		   xfer_peer_t *out);
/* Adds a peer from its address (join); the table learns its engine id. */
int xi_kv_peer_add(struct kv_core *c, const void *addr, size_t len, xfer_peer_t *out);
/* The engine reported peer failures: marks the peers it declared dead and
 * hands each to the owner's handler as a KV_IT_PEER_DOWN item. */
void xi_kv_peers_check_down(struct kv_core *c);
void xi_kv_peers_free(struct kv_core *c);
/* Removes dead or unneeded peers once nothing is in flight to them; true
 * while some could not be removed yet. `keep` says which are still wanted. */
bool xi_kv_peer_reap(struct kv_core *c, bool (*keep)(void *owner, xfer_peer_t peer));

#endif
