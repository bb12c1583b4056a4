/* Peers and groups: parsing a peer's address, entering it in every NIC's
 * address vector, removal, and groups of peers for scatter and barrier. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/call.h"
#include "core/liveness.h"

struct peer_add_args {
	const struct wire_addr *a;
	uint32_t index;
};

static int add_on_worker(xfer_engine_t *e, void *arg)
{
	struct peer_add_args *pa = arg;
	const struct wire_addr *a = pa->a;
	uint32_t i;
	for (i = 0; i < e->max_peers; i++)
		if (atomic_load(&e->peers[i].state) == PEER_FREE)
			break;
	if (i == e->max_peers)
		return -ENOSPC;
	struct peer *p = &e->peers[i];
	/* The same engine added again shares the address entries of the first
	 * handle (removal keeps them while any handle remains): providers may
	 * keep one connection per remote address, and two entries for it can
	 * tear each other down (shm does). */
	for (uint32_t k = 0; k < e->max_peers; k++) {
		if (atomic_load(&e->peers[k].state) == PEER_LIVE && e->peers[k].engine_id == a->engine_id) {
			memcpy(p->dest, e->peers[k].dest, sizeof(p->dest));
			memcpy(p->sink, e->peers[k].sink, sizeof(p->sink));
			goto filled;
		}
	}
	/* With different NIC counts, local NIC n talks to remote NIC n mod theirs. */
	for (unsigned n = 0; n < e->nnics; n++) {
		unsigned rn = n % a->nnics;
		int ret = e->ops.av_insert(&e->nics[n], a->nic[rn].bytes, a->nic[rn].len, &p->dest[n]);
		if (ret) {
			while (n-- > 0)
				e->ops.av_remove(&e->nics[n], p->dest[n]);
			return ret;
		}
		p->sink[n].base = a->nic[rn].sink_base;
		p->sink[n].key = a->nic[rn].sink_key;
	}
filled:
	p->engine_id = a->engine_id;
	p->nnics = a->nnics;
	p->msg_max = a->msg_max;
	xi_hb_peer_added(e->w, i);
	atomic_store(&p->inflight.taken, 0);
	atomic_store(&p->inflight.dropped, 0);
	atomic_store(&p->state, PEER_LIVE);
	pa->index = i;
	return 0;
}

int xfer_peer_add(xfer_engine_t *e, const void *addr, size_t len, xfer_peer_t *out)
{
	struct wire_addr a;
	if (!e || !out)
		return -EINVAL;
	int ret = xi_wire_addr_decode(addr, len, &a);
	if (ret)
		return ret;
	if (strcmp(a.provider, xfer_engine_provider(e)) != 0)
		return -XFER_EPROVIDER;
	struct peer_add_args pa = {.a = &a};
	ret = xi_engine_call(e, add_on_worker, &pa);
	if (ret)
		return ret;
	*out = pa.index;
	return 0;
}

static int remove_on_worker(xfer_engine_t *e, void *arg)
{
	struct peer *p = &e->peers[*(xfer_peer_t *)arg];
	if (atomic_load(&p->state) == PEER_FREE)
		return -ENOENT;
	if (xi_inflight(&p->inflight))
		return -EBUSY;
	uint32_t self = *(xfer_peer_t *)arg;
	for (unsigned n = 0; n < e->nnics; n++) {
		/* Providers may hand out one address entry for a remote engine added
		 * twice (shm does); removing it under the other handle would pull it
		 * from under that peer. */
		bool shared = false;
		for (uint32_t i = 0; i < e->max_peers && !shared; i++)
			shared = i != self && atomic_load(&e->peers[i].state) != PEER_FREE &&
				 e->peers[i].dest[n] == p->dest[n];
		if (!shared)
			e->ops.av_remove(&e->nics[n], p->dest[n]);
	}
	xi_hb_peer_removed(e->w, self);
	atomic_store(&p->state, PEER_FREE);
	return 0;
}

int xfer_peer_remove(xfer_engine_t *e, xfer_peer_t peer)
{
	if (!e || peer >= e->max_peers)
		return -EINVAL;
	return xi_engine_call(e, remove_on_worker, &peer);
}

uint64_t xfer_peer_id(const xfer_engine_t *e, xfer_peer_t peer)
{
	if (!e || peer >= e->max_peers)
		return 0;
	struct peer *p = &e->peers[peer];
	return atomic_load(&p->state) != PEER_FREE ? p->engine_id : 0;
}

int xfer_peer_state(const xfer_engine_t *e, xfer_peer_t peer)
{
	if (!e || peer >= e->max_peers)
		return -ENOENT;
	int st = atomic_load(&e->peers[peer].state);
	return st == PEER_FREE ? -ENOENT : st;
}

unsigned xfer_peer_shards(const xfer_engine_t *e, xfer_peer_t peer)
{
	if (!e || peer >= e->max_peers || atomic_load(&e->peers[peer].state) == PEER_FREE)
		return 0;
	unsigned r = e->peers[peer].nnics;
	return r < e->nnics ? r : e->nnics;
}

int xfer_group_create(xfer_engine_t *e, const xfer_peer_t *peers, uint32_t n, xfer_group_t **out)
{
	if (!e || !peers || !n || n > e->max_peers || !out)
		return -EINVAL;
	if (atomic_load(&e->stopping))
		return -ESHUTDOWN;
	for (uint32_t i = 0; i < n; i++)
		if (xfer_peer_state(e, peers[i]) < 0)
			return -ENOENT;
	xfer_group_t *g = calloc(1, sizeof(*g) + n * sizeof(g->peers[0]));
	if (!g)
		return -ENOMEM;
	g->e = e;
	g->n = n;
	memcpy(g->peers, peers, n * sizeof(g->peers[0]));
	*out = g;
	return 0;
}

int xfer_group_destroy(xfer_group_t *g)
{
	if (!g)
		return 0;
	if (atomic_load(&g->inflight))
		return -EBUSY;
	free(g);
	return 0;
}

uint32_t xfer_group_size(const xfer_group_t *g)
{
	return g->n;
}
