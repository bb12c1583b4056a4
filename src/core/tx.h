/* The send side, the only owner of what posting consumes: credits per NIC
 * (the provider's transmit depth), request contexts, SEND bounce buffers,
 * and the post statistics. Every post goes through here: data writes,
 * SENDs, notices and liveness probes. Probes have credits and contexts of
 * their own (TX_PROBE), which data never takes, so that requests stuck to
 * a dead peer cannot keep a live one from being probed. */
#ifndef XFER_CORE_TX_H
#define XFER_CORE_TX_H

#include "core/worker.h"

enum tx_class {
	TX_DATA,  /* requests of operations: counted in wrs_posted */
	TX_PROBE, /* PING, PONG, BYE: may use the reserve, never counted */
};

enum tx_probe { TX_PING, TX_PONG, TX_BYE };

int xi_tx_init(struct worker *w);
void xi_tx_free(struct worker *w);

/* Whether NIC n has a credit for a request of class c. */
static inline bool xi_tx_ready(const struct worker *w, unsigned n, enum tx_class c)
{
	return w->tx.credits[n] > (c == TX_DATA ? w->tx.reserve : 0);
}

/* A request context, or NULL (none left for class c). */
static inline struct wr *xi_tx_wr(struct worker *w, enum tx_class c)
{
	struct wr *wr = w->tx.free_wrs;
	if (!wr || (c == TX_DATA && w->tx.nfree_wrs <= w->tx.wr_reserve))
		return NULL;
	w->tx.free_wrs = wr->next_free;
	w->tx.nfree_wrs--;
	wr->sendbuf = UINT32_MAX;
	return wr;
}

static inline void xi_tx_wr_put(struct worker *w, struct wr *wr)
{
	wr->next_free = w->tx.free_wrs;
	w->tx.free_wrs = wr;
	w->tx.nfree_wrs++;
}

/* A SEND bounce buffer of slot_bytes (its index in *b), or NULL. */
uint8_t *xi_tx_buf(struct worker *w, uint32_t *b);
void xi_tx_buf_put(struct worker *w, uint32_t b);

/* Posts on NIC n, taking a credit: 0, or the provider's error (nothing
 * taken). A SEND's bounce buffer b then belongs to wr until its completion;
 * on error it is given back here. */
int xi_tx_write(struct worker *w, unsigned n, const struct nic_write *nw, struct wr *wr);
int xi_tx_send(struct worker *w, unsigned n, uint64_t dest, uint32_t b, size_t len, struct wr *wr);
/* A liveness message from its constant buffer: -ENOBUFS when no probe
 * credit or context is left here (not the peer's fault), else as above. */
int xi_tx_probe(struct worker *w, unsigned n, uint64_t dest, enum tx_probe which, uint8_t kind,
		uint32_t slot);
/* A posted request completed: its credit and bounce buffer come back (the
 * context stays with the caller). */
void xi_tx_complete(struct worker *w, struct wr *wr);
/* Writes the probes' constant messages (after the SEND bounce buffers). */
void xi_tx_write_probes(xfer_engine_t *e);

#endif
