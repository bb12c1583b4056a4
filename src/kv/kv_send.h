/* Module messages out: each SEND owns its buffer until it completes, and one
 * that cannot be submitted yet (a full queue, no inbox credit) waits on a
 * list the control thread retries, in the order sent. */
#ifndef XFER_KV_SEND_H
#define XFER_KV_SEND_H

#include <stdbool.h>

#include "kv_state.h"
#include "kv_wire.h"

/* Encodes and sends m to peer. Returns 0 or the submission error. Call
 * with mu held. */
int xi_kv_send(struct kv_core *c, xfer_peer_t peer, const struct kv_msg *m, const uint32_t *pages);
/* Retries pending sends; true while some remain. Call with mu held (the
 * control thread: a SEND that fails now reaches the owner's handler as its
 * completion would). */
bool xi_kv_send_pending(struct kv_core *c);
/* Frees what never left (the module stops). */
void xi_kv_send_drop_pending(struct kv_core *c);

#endif
