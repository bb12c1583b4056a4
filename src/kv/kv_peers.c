/* Peers by engine id. A prefiller learns decoders from their requests; a
 * decoder adds prefill ranks when they join. An engine declared dead is
 * used no more; if it turns out to be alive (it was frozen, or cut off) it
 * can be added again once its old peer has been removed. */
#include <errno.h>
#include <stdlib.h>

#include "kv_core.h"

static struct kv_peer_ent *find_id(struct kv_core *c, uint64_t id)
{
	for (uint32_t i = 0; i < c->npeers; i++)
		if (c->peers[i].id == id)
			return &c->peers[i];
	return NULL;
}

static int remember(struct kv_core *c, uint64_t id, xfer_peer_t peer)
{
	if (c->npeers == c->peers_cap) {
		uint32_t cap = c->peers_cap ? c->peers_cap * 2 : 16;
		struct kv_peer_ent *p = realloc(c->peers, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		c->peers = p;
		c->peers_cap = cap;
	}
	c->peers[c->npeers++] = (struct kv_peer_ent){.id = id, .peer = peer};
	return 0;
}

/* Enters a freshly added engine peer in the table. */
static int adopt(struct kv_core *c, xfer_peer_t p, xfer_peer_t *out)
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
	int ret = remember(c, id, p);
	if (ret) {
		xfer_peer_remove(c->e, p);
		return ret;
	}
	*out = p;
	return 0;
}

int kv_peer_add(struct kv_core *c, const void *addr, size_t len, xfer_peer_t *out)
{
	xfer_peer_t p;
	int ret = xfer_peer_add(c->e, addr, len, &p);
	return ret ? ret : adopt(c, p, out);
}

int kv_peer_for(struct kv_core *c, uint64_t engine_id, const uint8_t *addr, size_t len,
		xfer_peer_t *out)
{
	struct kv_peer_ent *known = find_id(c, engine_id);
	if (known && !known->dead) {
		*out = known->peer;
		return 0;
	}
	xfer_peer_t p;
	int ret = xfer_peer_add(c->e, addr, len, &p);
	if (ret)
		return ret;
	if (xfer_peer_id(c->e, p) != engine_id) {
		/* Someone sent another engine's address as its own. */
		xfer_peer_remove(c->e, p);
		return -EPROTO;
	}
	return adopt(c, p, out);
}

void kv_peer_mark_dead(struct kv_core *c, xfer_peer_t peer)
{
	for (uint32_t i = 0; i < c->npeers; i++)
		if (c->peers[i].peer == peer)
			c->peers[i].dead = true;
}

bool kv_peer_reap(struct kv_core *c, bool (*keep)(void *owner, xfer_peer_t peer))
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
		c->peers[i] = c->peers[--c->npeers];
	}
	return left;
}
