#include "core/telemetry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/worker.h"
#include "util/log.h"

int xi_tel_init(struct worker *w)
{
	xfer_engine_t *e = w->e;
	struct xi_tel *t = aligned_alloc(64, (sizeof(*t) + 63) & ~(size_t)63);
	if (!t)
		return -ENOMEM;
	memset(t, 0, sizeof(*t));
	atomic_init(&t->on, atomic_load(&e->telemetry));
	/* Even when off: xfer_engine_telemetry may turn it on later. Zeroed
	 * here, on the worker: first touch places the slots on its node. */
	t->peers = aligned_alloc(64, (size_t)e->max_peers * sizeof(*t->peers));
	if (!t->peers || xi_idmap_init(&t->by_id)) {
		free(t->peers);
		free(t);
		return -ENOMEM;
	}
	memset(t->peers, 0, (size_t)e->max_peers * sizeof(*t->peers));
	w->tel = t;
	return 0;
}

void xi_tel_free(struct worker *w)
{
	if (!w->tel)
		return;
	xi_idmap_destroy(&w->tel->by_id);
	free(w->tel->peers);
	free(w->tel);
	w->tel = NULL;
}

unsigned xi_tel_code(int res)
{
	switch (-res) {
	case ETIMEDOUT:
		return XFER_STATS_ETIMEDOUT;
	case ECANCELED:
		return XFER_STATS_ECANCELED;
	case XFER_EPEER:
		return XFER_STATS_EPEER;
	case ECONNRESET:
		return XFER_STATS_ECONNRESET;
	case ECONNREFUSED:
		return XFER_STATS_ECONNREFUSED;
	case ECONNABORTED:
		return XFER_STATS_ECONNABORTED;
	case EHOSTUNREACH:
		return XFER_STATS_EHOSTUNREACH;
	case ENOTCONN:
		return XFER_STATS_ENOTCONN;
	case EPIPE:
		return XFER_STATS_EPIPE;
	case EIO:
		return XFER_STATS_EIO;
	case XFER_EFABRIC:
		return XFER_STATS_EFABRIC;
	case ENOSPC:
		return XFER_STATS_ENOSPC;
	case EBUSY:
		return XFER_STATS_EBUSY;
	case EACCES:
		return XFER_STATS_EACCES;
	case ESHUTDOWN:
		return XFER_STATS_ESHUTDOWN;
	default:
		return XFER_STATS_EOTHER;
	}
}

/* ------------------------------------------------------------ control path */

static void *index_value(uint32_t peer)
{
	return (void *)(uintptr_t)(peer + 1);
}

void xi_tel_peer_added(struct worker *w, uint32_t peer, uint64_t engine_id)
{
	struct xi_tel *t = w->tel;
	atomic_store_explicit(&t->peers[peer].engine_id, engine_id, memory_order_relaxed);
	/* The same engine added twice: its messages go to the first handle. */
	if (!xi_idmap_get(&t->by_id, engine_id) && xi_idmap_put(&t->by_id, engine_id, index_value(peer)))
		xwarn("telemetry: no memory to attribute messages to peer %u", peer);
}

void xi_tel_peer_removed(struct worker *w, uint32_t peer)
{
	struct xi_tel *t = w->tel;
	struct xi_tel_peer *p = &t->peers[peer];
	uint64_t id = atomic_load_explicit(&p->engine_id, memory_order_relaxed);
	/* A sequence lock with one writer: odd while the counters move. */
	unsigned seq = atomic_load_explicit(&t->seq, memory_order_relaxed);
	atomic_store_explicit(&t->seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	for (unsigned i = 0; i < TP_COUNT; i++) {
		xi_stat_own_add(&t->removed.c[i], atomic_load_explicit(&p->c[i], memory_order_relaxed));
		atomic_store_explicit(&p->c[i], 0, memory_order_relaxed);
	}
	atomic_store_explicit(&p->engine_id, 0, memory_order_relaxed);
	atomic_store_explicit(&t->seq, seq + 2, memory_order_release);

	if (xi_idmap_get(&t->by_id, id) != index_value(peer))
		return;
	/* Another handle on the same engine takes its messages over. */
	xi_idmap_del(&t->by_id, id);
	const xfer_engine_t *e = w->e;
	for (uint32_t i = 0; i < e->max_peers; i++) {
		if (i != peer && atomic_load_explicit(&t->peers[i].engine_id, memory_order_relaxed) == id) {
			if (xi_idmap_put(&t->by_id, id, index_value(i)))
				xwarn("telemetry: no memory to attribute messages to peer %u", i);
			break;
		}
	}
}

void xi_tel_msg_from(struct xi_tel *t, uint64_t src_id, uint64_t bytes)
{
	if (!xi_tel_on(t))
		return;
	uintptr_t v = (uintptr_t)xi_idmap_get(&t->by_id, src_id);
	if (!v)
		return; /* from an engine we hold no handle on */
	xi_stat_own_add(&t->peers[v - 1].c[TP_MSGS_RECEIVED], 1);
	xi_stat_own_add(&t->peers[v - 1].c[TP_BYTES_RECEIVED], bytes);
}

/* ----------------------------------------------------------------- readers */

static inline uint64_t ld(const xi_counter *c)
{
	return atomic_load_explicit((xi_counter *)c, memory_order_relaxed);
}

static const struct xi_tel *tel(const xfer_engine_t *e)
{
	return e->w ? e->w->tel : NULL;
}

unsigned xi_tel_seq_begin(const xfer_engine_t *e)
{
	const struct xi_tel *t = tel(e);
	if (!t)
		return 0;
	unsigned s;
	/* A fold is a few hundred stores on the worker: wait it out. */
	while ((s = atomic_load_explicit((atomic_uint *)&t->seq, memory_order_acquire)) & 1)
		xi_cpu_relax();
	return s;
}

bool xi_tel_seq_retry(const xfer_engine_t *e, unsigned seq)
{
	const struct xi_tel *t = tel(e);
	if (!t)
		return false;
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit((atomic_uint *)&t->seq, memory_order_relaxed) != seq;
}

bool xi_tel_enabled(const xfer_engine_t *e)
{
	return atomic_load_explicit(&((xfer_engine_t *)e)->telemetry, memory_order_relaxed);
}

void xi_tel_enable(xfer_engine_t *e, bool on)
{
	/* The worker's flag first when turning on, last when turning off: an op
	 * stamped at submission then finds the recorders on, or is not timed. */
	struct xi_tel *t = e->w ? e->w->tel : NULL;
	if (on && t)
		atomic_store_explicit(&t->on, true, memory_order_relaxed);
	atomic_store_explicit(&e->telemetry, on, memory_order_relaxed);
	if (!on && t)
		atomic_store_explicit(&t->on, false, memory_order_relaxed);
}

void xi_tel_read_engine(const xfer_engine_t *e, struct xfer_stats_engine *o)
{
	const struct xi_tel *t = tel(e);
	memset(o, 0, sizeof(*o));
	o->submit_again = atomic_load_explicit(&((xfer_engine_t *)e)->submit_again, memory_order_relaxed);
	if (!t)
		return;
	o->enabled = xi_tel_enabled(e);
	o->timeouts = ld(&t->timeouts);
	for (unsigned n = 0; n < e->nnics; n++)
		o->retries += ld(&t->nic[n].c[TN_RETRIES]);
	for (unsigned i = 0; i < XFER_STATS_CODES; i++)
		o->errors[i] = ld(&t->errors[i]);
}

static void read_slot(const struct xi_tel_peer *p, struct xfer_stats_peer *o)
{
	const xi_counter *c = p->c;
	o->ops = ld(&c[TP_OPS]);
	o->writes = ld(&c[TP_WRITES]);
	o->bytes_written = ld(&c[TP_BYTES_WRITTEN]);
	o->sends = ld(&c[TP_SENDS]);
	o->bytes_sent = ld(&c[TP_BYTES_SENT]);
	o->msgs_received = ld(&c[TP_MSGS_RECEIVED]);
	o->bytes_received = ld(&c[TP_BYTES_RECEIVED]);
	o->retries = ld(&c[TP_RETRIES]);
	o->timeouts = ld(&c[TP_TIMEOUTS]);
	for (unsigned i = 0; i < XFER_STATS_CODES; i++)
		o->errors[i] = ld(&c[TP_ERRORS + i]);
}

int xi_tel_read_peer(const xfer_engine_t *e, uint32_t peer, struct xfer_stats_peer *o)
{
	const struct xi_tel *t = tel(e);
	memset(o, 0, sizeof(*o));
	o->peer = peer;
	if (peer != XFER_PEER_NONE) {
		int state = atomic_load_explicit(&e->peers[peer].state, memory_order_acquire);
		if (state == PEER_FREE)
			return -ENOENT;
		o->state = state;
	}
	if (!t)
		return 0;
	const struct xi_tel_peer *p = peer == XFER_PEER_NONE ? &t->removed : &t->peers[peer];
	unsigned seq;
	uint64_t id;
	do {
		seq = xi_tel_seq_begin(e);
		id = ld(&p->engine_id);
		read_slot(p, o);
	} while (xi_tel_seq_retry(e, seq));
	if (peer == XFER_PEER_NONE)
		return 0;
	/* The slot's own copy of the engine id, not the peer table's plain
	 * field, which a re-add rewrites while we read. 0: removed while we
	 * looked, its figures are in the totals now. */
	if (!id)
		return -ENOENT;
	o->engine_id = id;
	return 0;
}

void xi_tel_read_nic(const xfer_engine_t *e, unsigned nic, struct xfer_stats_nic *o)
{
	const struct xi_tel *t = tel(e);
	memset(o, 0, sizeof(*o));
	o->nic = nic;
	if (!t)
		return;
	const xi_counter *c = t->nic[nic].c;
	o->writes = ld(&c[TN_WRITES]);
	o->bytes_written = ld(&c[TN_BYTES_WRITTEN]);
	o->sends = ld(&c[TN_SENDS]);
	o->bytes_sent = ld(&c[TN_BYTES_SENT]);
	o->probes = ld(&c[TN_PROBES]);
	o->retries = ld(&c[TN_RETRIES]);
	o->tx_errors = ld(&c[TN_TX_ERRORS]);
	o->imms_received = ld(&c[TN_IMMS_RECEIVED]);
	o->msgs_received = ld(&c[TN_MSGS_RECEIVED]);
	o->bytes_received = ld(&c[TN_BYTES_RECEIVED]);
	o->recv_errors = ld(&c[TN_RECV_ERRORS]);
}

void xi_tel_read_latency(const xfer_engine_t *e, uint32_t kind, struct xfer_stats_latency *o)
{
	const struct xi_tel *t = tel(e);
	memset(o, 0, sizeof(*o));
	o->kind = kind;
	if (!t)
		return;
	const struct xi_tel_hist *h = &t->lat[kind - 1];
	o->sum_ns = ld(&h->sum_ns);
	for (unsigned i = 0; i < XFER_STATS_BUCKETS; i++) {
		o->buckets[i] = ld(&h->buckets[i]);
		o->count += o->buckets[i];
	}
}
