/* The receive side: every NIC keeps recv_count bounce buffers posted; a
 * completed receive is decoded (wire/msg.h) and dispatched: liveness
 * messages and notices are handled and reposted at once, an application
 * message goes to on_recv or, by slot, to the inbox that xfer_recv reads
 * (which gives the slot back through the repost queue). */
#ifndef XFER_CORE_RX_H
#define XFER_CORE_RX_H

#include "backend/backend.h"

struct worker;
struct wr;

int xi_rx_init(struct worker *w);
void xi_rx_free(struct worker *w);
/* At bring-up: every receive buffer posted. */
void xi_rx_post_all(struct worker *w);
/* Slots xfer_recv gave back, posted again; returns how many. */
int xi_rx_take_reposts(struct worker *w);
void xi_rx_done(struct worker *w, struct wr *wr, const struct nic_event *ev);
/* Wakes xfer_recv_wait callers when messages were queued. */
void xi_rx_wake(struct worker *w);

#endif
