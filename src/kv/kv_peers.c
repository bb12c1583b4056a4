/* Peers by engine id. A prefiller learns decoders from their requests; a
 * decoder adds prefill ranks when they join. An engine declared dead is
 * used no more; if it turns out to be alive (it was frozen, or cut off) it
 * can be added again once its old peer has been removed. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv_core.h"

static struct kv_peer_ent *find_id(struct kv_core *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->npeers; i++)
		if (c->peers[i].id == id)
			return &c->peers[i];
	return NULL;
}

static struct kv_peer_ent *find_addr(struct kv_core *c, const void *addr, size_t len)
{
	for (uint32_t i = 0; i < c->npeers; i++)
		if (c->peers[i].addr_len == len && !memcmp(c->peers[i].addr, addr, len))
			return &c->peers[i];
	return NULL;
}

static int remember(struct kv_core *c, uint64_t id, xfer_peer_t peer, const void *addr, size_t len)
{
	if (c->npeers == c->peers_cap) {
		uint32_t cap = c->peers_cap ? c->peers_cap * 2 : 16;
		struct kv_peer_ent *p = realloc(c->peers, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		c->peers = p;
		c->peers_cap = cap;
	}
	uint8_t *copy = malloc(len);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, addr, len);
	c->peers[c->npeers++] = (struct kv_peer_ent){.id = id, .peer = peer, .addr = copy, .addr_len = len};
	return 0;
}

/* Enters a freshly added engine peer in the table. */
static int adopt(struct kv_core *c, xfer_peer_t p, const void *addr, size_t len, xfer_peer_t *out)
{
	uint64_t id = xfer_peer_id(c->e, p);
	struct kv_peer_ent *known = find_id(c, id);
	if (known && known->dead && known->peer == XFER_PEER_NONE) {
		/* Declared dead, yet it speaks: it was only unreachable. Its old
		 * peer is gone (and with it whatever the engine still held), so it
		 * starts over as a new peer. */
		known->peer = p;
		known->dead = false;
		*out = p;
		return 0;
	}
	if (known) {
		/* One engine peer per remote engine: its liveness is tracked once. */
		xfer_peer_remove(c->e, p);
		if (known->dead)
			return -EBUSY; /* until its old peer can be removed */
		*out = known->peer;
		return 0;
	}
	int ret = remember(c, id, p, addr, len);
	if (ret) {
		xfer_peer_remove(c->e, p);
		return ret;
	}
	*out = p;
	return 0;
}

int xi_kv_peer_add(struct kv_core *c, const void *addr, size_t len, xfer_peer_t *out)
{
	/* Never add an address twice: with libfabric 1.17's shm, removing the
	 * duplicate unmaps the peer under the first one (the next send to it
	 * crashes). The same engine always gives the same address bytes. */
	struct kv_peer_ent *known = find_addr(c, addr, len);
	if (known && !known->dead) {
		*out = known->peer;
		return 0;
	}
	if (known && known->peer != XFER_PEER_NONE)
		return -EBUSY; /* dead, and its old peer is still being drained */
	xfer_peer_t p;
	int ret = xfer_peer_add(c->e, addr, len, &p);
	return ret ? ret : adopt(c, p, addr, len, out);
}

int xi_kv_peer_for(struct kv_core *c, uint64_t engine_id, const uint8_t *addr, size_t len,
		xfer_peer_t *out)
{
	struct kv_peer_ent *known = find_id(c, engine_id);
	if (known && !known->dead) {
		*out = known->peer;
		return 0;
	}
	struct kv_peer_ent *same = find_addr(c, addr, len);
	if (same && same->id != engine_id)
		return -EPROTO; /* someone sent another engine's address as its own */
	if (same && same->peer != XFER_PEER_NONE)
		return -EBUSY; /* dead, and its old peer is still being drained */
	xfer_peer_t p;
	int ret = xfer_peer_add(c->e, addr, len, &p);
	if (ret)
		return ret;
	if (xfer_peer_id(c->e, p) != engine_id) {
		xfer_peer_remove(c->e, p);
		return -EPROTO;
	}
	return adopt(c, p, addr, len, out);
}

void xi_kv_peer_mark_dead(struct kv_core *c, xfer_peer_t peer)
{
	for (uint32_t i = 0; i < c->npeers; i++)
		if (c->peers[i].peer == peer)
			c->peers[i].dead = true;
}

bool xi_kv_peer_reap(struct kv_core *c, bool (*keep)(void *owner, xfer_peer_t peer))
{
	bool left = false;
	for (uint32_t i = 0; i < c->npeers;) {
		struct kv_peer_ent *p = &c->peers[i];
		if (p->peer == XFER_PEER_NONE || (!p->dead && keep(c->owner, p->peer))) {
			i++;
			continue;
		}
		int ret = xfer_peer_remove(c->e, p->peer);
		if (ret == -EBUSY) {
			left = true;
			i++;
			continue;
		}
		/* Dead engines stay known (by id) so that they are never re-added. */
		if (p->dead) {
			p->peer = XFER_PEER_NONE;
			i++;
			continue;
		}
		free(p->addr);
		c->peers[i] = c->peers[--c->npeers];
	}
	return left;
}

void xi_kv_peers_free(struct kv_core *c)
{
	for (uint32_t i = 0; i < c->npeers; i++)
		free(c->peers[i].addr);
	free(c->peers);
	c->peers = NULL;
	c->npeers = c->peers_cap = 0;
}
