/* Decoder state. A request holds pages and a context slot from admission
 * until the application releases it; in between it is ACTIVE (waiting for
 * its immediates), ABORTING (waiting until no prefill rank can still write
 * into it), then ENDED (its one event queued) and POLLED (event taken). */
#ifndef XFER_KV_DEC_H
#define XFER_KV_DEC_H

#include "kv_core.h"
#include "kv_stack.h"
#include "xfer_kv.h"

#define KV_SLOT_BITS 20
#define KV_SLOT_MASK ((1u << KV_SLOT_BITS) - 1)
#define KV_CANCEL_RETRY_NS 50000000ull

/* The registration one prefill rank writes through. Revoking it stops that
 * rank's late writes without touching what other ranks write. */
struct kv_lease {
	xfer_mr_t *kv, *ctx;
	uint8_t kv_desc[XFER_DESC_MAX], ctx_desc[XFER_DESC_MAX];
	uint16_t kv_len, ctx_len;
	uint32_t gen;
	bool live;
};

enum kv_rank_state { RANK_LIVE = 1, RANK_LEFT = 2, RANK_DEAD = 3 };

struct kv_rank {
	xfer_peer_t peer;
	uint64_t engine_id;
	struct xfer_kv_layout layout;
	uint32_t nsegs;  /* of its plan towards this decode rank */
	bool writes_ctx;
	int state;
	struct kv_lease lease;
};

struct kv_group {
	bool used, leaving;
	uint32_t gen; /* group id = gen << 12 | slot */
	uint32_t n;
	uint32_t refs; /* requests not yet ended */
	struct kv_rank *ranks;
};

#define KV_GROUP_SLOTS 4096u

enum kv_dreq_state { DR_FREE = 0, DR_ACTIVE, DR_ABORTING, DR_ENDED, DR_POLLED };

struct kv_writer {
	uint32_t rank;
	uint32_t lease_gen; /* the registration its request named */
	bool quiesced;      /* nothing more from it can land */
	bool cancel_sent;
	uint64_t cancel_at; /* when to (re)send CANCEL */
};

struct kv_dreq {
	int state;
	uint64_t id, dseq;
	uint32_t imm, group, npages, ctx_slot, nw;
	uint32_t *pages;
	uint64_t t_admit, t_end, end_deadline, abort_deadline;
	uint64_t expected, bytes;
	int32_t status;
	bool expect_done;
	struct kv_writer w[XFER_KV_TP_MAX];
};

struct xfer_kv_decoder {
	struct kv_core core;
	struct xfer_kv_dec_config cfg;
	uint64_t kv_bytes, ctx_stride;
	uint8_t *ctx_mem;
	struct kv_stack free_pages, free_slots;
	struct kv_dreq *reqs;
	uint64_t seq;
	struct kv_group *groups;
	uint32_t *evq; /* request slots whose event waits for poll */
	uint32_t ev_head, ev_count;
	struct xfer_kv_dec_stats st;
};

/* kv_dec_ctl.c: the state machine, called with core.mu held. */
struct kv_dreq *xi_kv_dec_req_by_dseq(xfer_kv_decoder_t *d, uint64_t dseq);
struct kv_group *xi_kv_dec_group(xfer_kv_decoder_t *d, uint32_t id);
void xi_kv_dec_abort(xfer_kv_decoder_t *d, struct kv_dreq *r, int status);
void xi_kv_dec_on_item(void *owner, const struct kv_item *it);
uint64_t xi_kv_dec_on_tick(void *owner, uint64_t now);

/* kv_dec_lease.c */
int xi_kv_dec_lease_ensure(xfer_kv_decoder_t *d, struct kv_rank *rk);
/* Withdraws the rank's registration: its writers are quiesced, and requests
 * still waiting for data from it are aborted with `status`. */
void xi_kv_dec_lease_revoke(xfer_kv_decoder_t *d, uint32_t group, uint32_t rank, int status);
void xi_kv_dec_lease_drop(xfer_kv_decoder_t *d, struct kv_rank *rk);

#endif
