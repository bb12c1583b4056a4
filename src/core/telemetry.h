/* Telemetry: per-peer, per-NIC and engine-wide counters and the per-kind
 * latency histograms behind xfer_stats_* (include/xfer.h). The worker is
 * the only writer of everything here (xi_stat_own_add: a plain add, no
 * locked instruction), each group on cache lines of its own; readers on any
 * thread load relaxed and aggregate. Nothing here allocates or locks after
 * xi_tel_init; with telemetry off (XFER_TELEMETRY=0, xfer_engine_telemetry)
 * every recorder returns at its first test, a relaxed load of `on` (a plain
 * load). The control path (peers added and removed) keeps its tables up to
 * date either way, so that telemetry can be turned on at any time.
 *
 * Removing a peer folds its counters into the "removed peers" totals and
 * zeroes its slot, inside a sequence count, so that a reader never sees
 * them in both places or in neither (xi_tel_seq_*). */
#ifndef XFER_CORE_TELEMETRY_H
#define XFER_CORE_TELEMETRY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/objects.h"
#include "util/hist.h"
#include "util/idmap.h"
#include "util/sys.h"

typedef atomic_uint_fast64_t xi_counter;

/* A peer's counters, in the order of struct xfer_stats_peer. */
enum xi_tel_peer_counter {
	TP_OPS,
	TP_WRITES,
	TP_BYTES_WRITTEN,
	TP_SENDS,
	TP_BYTES_SENT,
	TP_MSGS_RECEIVED,
	TP_BYTES_RECEIVED,
	TP_RETRIES,
	TP_TIMEOUTS,
	TP_ERRORS, /* XFER_STATS_CODES of them */
	TP_COUNT = TP_ERRORS + XFER_STATS_CODES,
};

struct xi_tel_peer {
	_Alignas(64) xi_counter c[TP_COUNT];
	xi_counter engine_id; /* the peer's engine while the slot is held, else 0 */
};

/* A NIC's counters, in the order of struct xfer_stats_nic. */
enum xi_tel_nic_counter {
	TN_WRITES,
	TN_BYTES_WRITTEN,
	TN_SENDS,
	TN_BYTES_SENT,
	TN_PROBES,
	TN_RETRIES,
	TN_TX_ERRORS,
	TN_IMMS_RECEIVED,
	TN_MSGS_RECEIVED,
	TN_BYTES_RECEIVED,
	TN_RECV_ERRORS,
	TN_COUNT,
};

struct xi_tel_nic {
	_Alignas(64) xi_counter c[TN_COUNT];
};

#define XI_TEL_KINDS 8 /* XFER_OP_SEND (1) .. XFER_OP_BARRIER (8) */
_Static_assert(XFER_OP_SEND == 1 && XFER_OP_BARRIER == XI_TEL_KINDS, "one histogram per op kind");

struct xi_tel_hist {
	_Alignas(64) xi_counter sum_ns;
	xi_counter buckets[XFER_STATS_BUCKETS];
};

struct xi_tel {
	atomic_bool on;
	_Alignas(64) atomic_uint seq; /* odd while a removed peer is folded in */
	_Alignas(64) xi_counter timeouts;
	xi_counter errors[XFER_STATS_CODES];
	struct xi_tel_nic nic[XFER_NIC_MAX];
	struct xi_tel_hist lat[XI_TEL_KINDS];
	struct xi_tel_peer removed;
	struct xi_tel_peer *peers; /* max_peers slots, by peer index; NULL when off */
	struct xi_idmap by_id;     /* engine id -> peer index + 1; the worker's own */
};

struct worker;

/* Allocates the tables (on the worker, at bring-up: first touch there). */
int xi_tel_init(struct worker *w);
void xi_tel_free(struct worker *w);

/* The class of res < 0 (enum xfer_stats_code). */
unsigned xi_tel_code(int res);

/* ---------------------------------------------------- control path (worker) */

/* Peer index `peer` now holds engine `engine_id`; its slot starts at 0. */
void xi_tel_peer_added(struct worker *w, uint32_t peer, uint64_t engine_id);
/* Its counters move to the removed peers' totals, its slot is zeroed. */
void xi_tel_peer_removed(struct worker *w, uint32_t peer);

/* ------------------------------------------------------ recorders (worker) */

static inline bool xi_tel_on(struct xi_tel *t)
{
	return atomic_load_explicit(&t->on, memory_order_relaxed);
}

/* Each takes the worker's w->tel and returns at once when telemetry is off. */

static inline void xi_tel_nic(struct xi_tel *t, unsigned n, enum xi_tel_nic_counter c, uint64_t by)
{
	if (xi_tel_on(t))
		xi_stat_own_add(&t->nic[n].c[c], by);
}

static inline void xi_tel_peer(struct xi_tel *t, uint32_t peer, enum xi_tel_peer_counter c, uint64_t by)
{
	if (xi_tel_on(t) && peer != XFER_PEER_NONE)
		xi_stat_own_add(&t->peers[peer].c[c], by);
}

/* A request was posted on NIC n: a write of `bytes`, or a SEND of them. */
static inline void xi_tel_nic_write(struct xi_tel *t, unsigned n, uint64_t bytes)
{
	xi_tel_nic(t, n, TN_WRITES, 1);
	xi_tel_nic(t, n, TN_BYTES_WRITTEN, bytes);
}

static inline void xi_tel_nic_send(struct xi_tel *t, unsigned n, uint64_t bytes)
{
	xi_tel_nic(t, n, TN_SENDS, 1);
	xi_tel_nic(t, n, TN_BYTES_SENT, bytes);
}

/* The same per peer, with the application's payload. */
static inline void xi_tel_peer_write(struct xi_tel *t, uint32_t peer, uint64_t bytes)
{
	xi_tel_peer(t, peer, TP_WRITES, 1);
	xi_tel_peer(t, peer, TP_BYTES_WRITTEN, bytes);
}

static inline void xi_tel_peer_send(struct xi_tel *t, uint32_t peer, uint64_t bytes)
{
	xi_tel_peer(t, peer, TP_SENDS, 1);
	xi_tel_peer(t, peer, TP_BYTES_SENT, bytes);
}

/* An operation to `peer` was told its result (once per operation). */
static inline void xi_tel_peer_op(struct xi_tel *t, uint32_t peer, int res)
{
	if (!xi_tel_on(t) || peer == XFER_PEER_NONE)
		return;
	xi_stat_own_add(&t->peers[peer].c[TP_OPS], 1);
	if (res < 0)
		xi_stat_own_add(&t->peers[peer].c[TP_ERRORS + xi_tel_code(res)], 1);
}

/* A scatter or barrier entry failed at member `peer`. */
static inline void xi_tel_peer_failed(struct xi_tel *t, uint32_t peer, int res)
{
	if (xi_tel_on(t) && peer != XFER_PEER_NONE && res < 0)
		xi_stat_own_add(&t->peers[peer].c[TP_ERRORS + xi_tel_code(res)], 1);
}

/* A deadline passed: of an operation to `peer` (XFER_PEER_NONE: none). */
static inline void xi_tel_timeout(struct xi_tel *t, uint32_t peer)
{
	if (!xi_tel_on(t))
		return;
	xi_stat_own_add(&t->timeouts, 1);
	if (peer != XFER_PEER_NONE)
		xi_stat_own_add(&t->peers[peer].c[TP_TIMEOUTS], 1);
}

/* An application message from engine src_id arrived: its peer, if any. */
void xi_tel_msg_from(struct xi_tel *t, uint64_t src_id, uint64_t bytes);

/* A completion is being delivered: its class and, when it was stamped at
 * submission, its latency (the one clock read telemetry adds per op). */
static inline void xi_tel_completed(struct xi_tel *t, const struct xi_target *to, int res, uint32_t kind)
{
	if (!xi_tel_on(t))
		return;
	if (res < 0)
		xi_stat_own_add(&t->errors[xi_tel_code(res)], 1);
	if (!to->t_submit || kind < 1 || kind > XI_TEL_KINDS)
		return;
	uint64_t now = xi_now_ns(), ns = now > to->t_submit ? now - to->t_submit : 0;
	struct xi_tel_hist *h = &t->lat[kind - 1];
	xi_stat_own_add(&h->sum_ns, ns);
	xi_stat_own_add(&h->buckets[xi_hist_bucket(ns)], 1);
}

/* ------------------------------------------------------ readers (any thread) */

/* A reader that wants the peers and the removed totals to add up takes the
 * sequence first and reads again while xi_tel_seq_retry says so. */
unsigned xi_tel_seq_begin(const xfer_engine_t *e);
bool xi_tel_seq_retry(const xfer_engine_t *e, unsigned seq);

bool xi_tel_enabled(const xfer_engine_t *e);
/* Turns the recorders and the submission stamps on or off (any thread). */
void xi_tel_enable(xfer_engine_t *e, bool on);
void xi_tel_read_engine(const xfer_engine_t *e, struct xfer_stats_engine *out);
/* -ENOENT when the slot is free (peer XFER_PEER_NONE: the removed totals). */
int xi_tel_read_peer(const xfer_engine_t *e, uint32_t peer, struct xfer_stats_peer *out);
void xi_tel_read_nic(const xfer_engine_t *e, unsigned nic, struct xfer_stats_nic *out);
void xi_tel_read_latency(const xfer_engine_t *e, uint32_t kind, struct xfer_stats_latency *out);

#endif
