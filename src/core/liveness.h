/* Peer liveness: heartbeats (PING/PONG), suspicion after transport errors,
 * goodbyes at stop, and death, which completes everything pending to the
 * peer with -XFER_EPEER. */
#ifndef XFER_CORE_LIVENESS_H
#define XFER_CORE_LIVENESS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/objects.h"

struct worker;
struct wr;
struct op;

int xi_hb_init(struct worker *w);
void xi_hb_free(struct worker *w);
/* A peer entered the table (on the worker: add_on_worker) or left it. */
void xi_hb_peer_added(struct worker *w, uint32_t peer);
void xi_hb_peer_removed(struct worker *w, uint32_t peer);

/* Deadline scan: probes due, allowances run out; *next lowers to the next due time. */
void xi_hb_scan(struct worker *w, uint64_t now, uint64_t *next);
/* A PING, PONG or BYE we posted completed with status. */
void xi_hb_done(struct worker *w, struct wr *wr, int status);
/* A PING, PONG or BYE arrived from the engine with id src_id. */
void xi_hb_message(struct worker *w, uint32_t magic, uint64_t src_id);
/* At stop: BYE to every live peer not yet told; returns how many are left. */
int xi_hb_goodbye(struct worker *w);

void xi_peer_down(struct worker *w, uint32_t peer, int reason);
void xi_peer_suspect(struct worker *w, uint32_t peer, int reason);
/* Whether status says the peer may be gone (connection errors, XFER_EPEER). */
bool xi_is_peer_failure(int status);
/* Request i of op failed with status: a scatter or barrier records it and
 * goes on with its other members, any other op stops; the request's peer
 * is probed when the error says it may be gone. */
void xi_request_failed(struct worker *w, struct op *op, uint32_t i, int status);

#endif
