/* The inbox: everything an engine's worker tells the module (completions of
 * its submissions, module messages, peer failures), carried to the module's
 * control thread without allocating or locking on the worker.
 *
 * It is a preallocated single-producer ring (the worker is the only thread
 * that runs completion callbacks and on_recv, include/xfer.h) of
 * struct xfer_cqe, plus as many message slots of msg_max bytes as one NIC of
 * the engine has receive buffers. Two rules keep it from overflowing:
 *   - every submission takes a credit first (xi_kv_inbox_credit) and the
 *     ring holds one entry per credit plus one per message slot, so a
 *     completion always finds room; a submission without a credit waits on
 *     the control thread, as it would after -EAGAIN from the engine;
 *   - a message finds a free slot or is dropped (counted), as the engine
 *     drops what it cannot take; the protocol's deadlines and retries cover
 *     it, exactly as they cover a lost message.
 * Peer failures are a counter, not entries: the control thread then looks
 * for the peers the engine declared dead, so no number of failures can fill
 * the ring either.
 *
 * The control thread sleeps on a futex and the worker wakes it only when it
 * sleeps (the same store / fence / load pairing as engine_kick). */
#ifndef XFER_KV_INBOX_H
#define XFER_KV_INBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer.h"

enum kv_item_kind { KV_IT_MSG = 1, KV_IT_CQE = 2, KV_IT_PEER_DOWN = 3 };

/* One thing the worker told the module, as the owner's handler sees it. */
struct kv_item {
	uint32_t kind;
	uint64_t src_id;     /* MSG: sender; PEER_DOWN: engine id */
	uint32_t peer;       /* PEER_DOWN */
	struct xfer_cqe cqe; /* CQE */
	const uint8_t *data; /* MSG: valid until xi_kv_inbox_done */
	size_t len;          /* MSG */
};

#define KV_CACHELINE 64

struct kv_inbox {
	/* Written by the worker only. */
	_Alignas(KV_CACHELINE) _Atomic uint32_t tail;
	uint32_t head_seen;     /* the last head it read */
	uint32_t msg_tail;      /* messages copied in */
	uint32_t msg_head_seen; /* the last msg_head it read */
	/* Written by the control thread only. */
	_Alignas(KV_CACHELINE) _Atomic uint32_t head;
	_Atomic uint32_t msg_head; /* message slots given back */
	uint32_t tail_seen;
	/* Written by anyone: waking the control thread. */
	_Alignas(KV_CACHELINE) _Atomic uint32_t wake_seq; /* the futex word */
	_Atomic uint32_t sleeping;
	_Atomic uint32_t kicked;
	_Atomic uint32_t stop;
	_Atomic uint32_t peers_down; /* bumped once per on_peer_down */
	_Atomic uint64_t dropped;    /* messages without a free slot */
	/* Fixed once made. */
	_Alignas(KV_CACHELINE) struct xfer_cqe *ring;
	uint32_t mask;
	uint8_t *slots;
	uint32_t nslots;
	uint32_t slot_bytes;
	uint64_t spin_ns; /* the control thread polls this long before it sleeps */
	/* Credits: taken and given back with the owner's lock held. */
	uint32_t credits, credits_used;
};

/* Room for `credits` submissions in flight and `nslots` messages of up to
 * slot_bytes each; the control thread polls spin_us before it sleeps (the
 * engine's own spin_us: a wake is a system call on both sides). -ENOMEM. */
int xi_kv_inbox_init(struct kv_inbox *in, uint32_t credits, uint32_t nslots, uint32_t slot_bytes,
		     uint32_t spin_us);
void xi_kv_inbox_free(struct kv_inbox *in);

/* The completion target of a submission, taking one credit; false when
 * every credit is out (the caller retries as on -EAGAIN). Owner's lock held. */
bool xi_kv_inbox_credit(struct kv_inbox *in, struct xfer_completion *c, uint64_t user_data,
			uint64_t tag, uint64_t timeout_ms);
bool xi_kv_inbox_has_credit(const struct kv_inbox *in);
/* Gives back the credit of a submission that returned ret != 0 (it never
 * completes); returns ret. Owner's lock held. */
int xi_kv_inbox_settle(struct kv_inbox *in, int ret);

/* Worker side (the engine calls xi_kv_inbox_cqe as the callback of every
 * module submission): no allocation, no lock, a system call only to wake a
 * sleeping control thread. */
void xi_kv_inbox_cqe(void *in, const struct xfer_cqe *cqe);
void xi_kv_inbox_msg(struct kv_inbox *in, uint64_t src_id, const void *data, size_t len);
void xi_kv_inbox_peer_down(struct kv_inbox *in);

/* Any thread: wake the control thread (work to retry, a new deadline), or
 * tell it to exit. */
void xi_kv_inbox_kick(struct kv_inbox *in);
void xi_kv_inbox_stop(struct kv_inbox *in);

/* Control thread. Sleeps until something is pending (an entry, a kick, a
 * stop, or more peer failures than the `downs_seen` it handled) or until
 * `until_ns` (CLOCK_MONOTONIC) passes. */
void xi_kv_inbox_wait(struct kv_inbox *in, uint64_t until_ns, uint32_t downs_seen);
/* Clears the kick; true if there was one. */
bool xi_kv_inbox_take_kick(struct kv_inbox *in);
bool xi_kv_inbox_stopping(struct kv_inbox *in);
/* How many peer failures the worker reported so far (read before popping:
 * what the worker delivered first is then in the ring). */
uint32_t xi_kv_inbox_peer_downs(struct kv_inbox *in);
/* Takes the oldest entry; for a message, data points into its slot. */
bool xi_kv_inbox_pop(struct kv_inbox *in, struct kv_item *it);
/* The entry is handled: its slot, or its credit, is free again (owner's lock held). */
void xi_kv_inbox_done(struct kv_inbox *in, const struct kv_item *it);
uint64_t xi_kv_inbox_dropped(struct kv_inbox *in);

#endif
