/* What an engine has counted: struct xfer_stats, and the versioned
 * telemetry structures (per peer, per NIC, per kind) read from the worker's
 * counters in core/telemetry.c. Any thread, any time until destroy; no
 * lock, no call onto the worker. */
#include <errno.h>
#include <string.h>

#include "core/telemetry.h"

void xfer_engine_stats(const xfer_engine_t *e, struct xfer_stats *o)
{
	xfer_engine_t *m = (xfer_engine_t *)e;
	if (!o)
		return;
	if (!e) {
		memset(o, 0, sizeof(*o));
		return;
	}
	o->ops_submitted = atomic_load_explicit(&m->ops_submitted, memory_order_relaxed);
	o->ops_completed = atomic_load_explicit(&m->st.ops_completed, memory_order_relaxed);
	o->ops_failed = atomic_load_explicit(&m->st.ops_failed, memory_order_relaxed);
	o->wrs_posted = atomic_load_explicit(&m->st.wrs_posted, memory_order_relaxed);
	o->bytes_written = atomic_load_explicit(&m->st.bytes_written, memory_order_relaxed);
	o->imms_received = atomic_load_explicit(&m->st.imms_received, memory_order_relaxed);
	o->imms_dropped = atomic_load_explicit(&m->st.imms_dropped, memory_order_relaxed);
	o->msgs_received = atomic_load_explicit(&m->st.msgs_received, memory_order_relaxed);
	o->worker_sleeps = atomic_load_explicit(&m->st.worker_sleeps, memory_order_relaxed);
	o->msgs_refused = atomic_load_explicit(&m->st.msgs_refused, memory_order_relaxed);
}

static const char *const code_names[XFER_STATS_CODES] = {
	[XFER_STATS_EOTHER] = "other",
	[XFER_STATS_ETIMEDOUT] = "ETIMEDOUT",
	[XFER_STATS_ECANCELED] = "ECANCELED",
	[XFER_STATS_EPEER] = "EPEER",
	[XFER_STATS_ECONNRESET] = "ECONNRESET",
	[XFER_STATS_ECONNREFUSED] = "ECONNREFUSED",
	[XFER_STATS_ECONNABORTED] = "ECONNABORTED",
	[XFER_STATS_EHOSTUNREACH] = "EHOSTUNREACH",
	[XFER_STATS_ENOTCONN] = "ENOTCONN",
	[XFER_STATS_EPIPE] = "EPIPE",
	[XFER_STATS_EIO] = "EIO",
	[XFER_STATS_EFABRIC] = "EFABRIC",
	[XFER_STATS_ENOSPC] = "ENOSPC",
	[XFER_STATS_EBUSY] = "EBUSY",
	[XFER_STATS_EACCES] = "EACCES",
	[XFER_STATS_ESHUTDOWN] = "ESHUTDOWN",
};

const char *xfer_stats_code_name(unsigned i)
{
	return i < XFER_STATS_CODES ? code_names[i] : NULL;
}

int xfer_stats_code_of(int res)
{
	return res < 0 ? (int)xi_tel_code(res) : -1;
}

/* The versioned copy: the fields both sides know, the caller's others
 * zeroed, `size` set to what was filled. `head` is the size of the
 * identification fields every version has. */
static int give(void *out, const void *full, size_t full_size, size_t head)
{
	uint32_t want;
	memcpy(&want, out, sizeof(want));
	if (want < head)
		return -EINVAL;
	size_t n = want < full_size ? want : full_size;
	memcpy(out, full, n);
	memset((char *)out + n, 0, want - n);
	uint32_t filled = (uint32_t)n;
	memcpy(out, &filled, sizeof(filled));
	return 0;
}

int xfer_stats_engine(const xfer_engine_t *e, struct xfer_stats_engine *out)
{
	if (!e || !out)
		return -EINVAL;
	struct xfer_stats_engine s;
	xi_tel_read_engine(e, &s);
	return give(out, &s, sizeof(s), offsetof(struct xfer_stats_engine, submit_again));
}

void xfer_engine_telemetry(xfer_engine_t *e, int enable)
{
	if (e)
		xi_tel_enable(e, enable != 0);
}

int xfer_stats_peers(const xfer_engine_t *e, xfer_peer_t *peers, int max)
{
	if (!e || max < 0 || (max && !peers))
		return -EINVAL;
	int n = 0;
	for (uint32_t i = 0; i < e->max_peers; i++) {
		if (atomic_load_explicit(&e->peers[i].state, memory_order_relaxed) == PEER_FREE)
			continue;
		if (n < max)
			peers[n] = i;
		n++;
	}
	return n;
}

int xfer_stats_peer(const xfer_engine_t *e, xfer_peer_t peer, struct xfer_stats_peer *out)
{
	if (!e || !out)
		return -EINVAL;
	if (peer != XFER_PEER_NONE && peer >= e->max_peers)
		return -ENOENT;
	struct xfer_stats_peer s;
	int ret = xi_tel_read_peer(e, peer, &s);
	if (ret)
		return ret;
	return give(out, &s, sizeof(s), offsetof(struct xfer_stats_peer, ops));
}

int xfer_stats_nic(const xfer_engine_t *e, unsigned nic, struct xfer_stats_nic *out)
{
	if (!e || !out || nic >= e->nnics)
		return -EINVAL;
	struct xfer_stats_nic s;
	xi_tel_read_nic(e, nic, &s);
	return give(out, &s, sizeof(s), offsetof(struct xfer_stats_nic, writes));
}

int xfer_stats_latency(const xfer_engine_t *e, uint32_t kind, struct xfer_stats_latency *out)
{
	if (!e || !out || kind < XFER_OP_SEND || kind > XFER_OP_BARRIER)
		return -EINVAL;
	struct xfer_stats_latency s;
	xi_tel_read_latency(e, kind, &s);
	return give(out, &s, sizeof(s), offsetof(struct xfer_stats_latency, count));
}
