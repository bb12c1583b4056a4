#include "util/idmap.h"

#include <errno.h>
#include <stdlib.h>

#define IDMAP_MIN 16u

static inline uint32_t slot_of(const struct xi_idmap *m, uint64_t id)
{
	/* Fibonacci hashing: region ids are sequential, and this spreads them. */
	return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & m->mask;
}

static int alloc_slots(struct xi_idmap *m, uint32_t cap)
{
	m->keys = calloc(cap, sizeof(*m->keys));
	m->vals = calloc(cap, sizeof(*m->vals));
	if (!m->keys || !m->vals) {
		free(m->keys);
		free(m->vals);
		m->keys = NULL;
		m->vals = NULL;
		return -ENOMEM;
	}
	m->mask = cap - 1;
	return 0;
}

int xi_idmap_init(struct xi_idmap *m)
{
	m->count = 0;
	return alloc_slots(m, IDMAP_MIN);
}

void xi_idmap_destroy(struct xi_idmap *m)
{
	free(m->keys);
	free(m->vals);
	m->keys = NULL;
	m->vals = NULL;
	m->count = 0;
}

static void place(struct xi_idmap *m, uint64_t id, void *val)
{
	uint32_t i = slot_of(m, id);
	while (m->keys[i] && m->keys[i] != id)
		i = (i + 1) & m->mask;
	if (!m->keys[i])
		m->count++;
	m->keys[i] = id;
	m->vals[i] = val;
}

static int grow(struct xi_idmap *m)
{
	struct xi_idmap old = *m;
	if (old.mask >= (1u << 30) || alloc_slots(m, (old.mask + 1) * 2)) {
		*m = old;
		return -ENOMEM;
	}
	m->count = 0;
	for (uint32_t i = 0; i <= old.mask; i++)
		if (old.keys[i])
			place(m, old.keys[i], old.vals[i]);
	free(old.keys);
	free(old.vals);
	return 0;
}

int xi_idmap_put(struct xi_idmap *m, uint64_t id, void *val)
{
	if (!id)
		return -EINVAL;
	if (2 * (m->count + 1) > m->mask + 1 && grow(m))
		return -ENOMEM;
	place(m, id, val);
	return 0;
}

void *xi_idmap_get(const struct xi_idmap *m, uint64_t id)
{
	if (!id || !m->keys)
		return NULL;
	for (uint32_t i = slot_of(m, id); m->keys[i]; i = (i + 1) & m->mask)
		if (m->keys[i] == id)
			return m->vals[i];
	return NULL;
}

/* Backward-shift deletion, as in imm_table.c: no tombstones. */
void xi_idmap_del(struct xi_idmap *m, uint64_t id)
{
	if (!id || !m->keys)
		return;
	uint32_t hole = slot_of(m, id);
	while (m->keys[hole] && m->keys[hole] != id)
		hole = (hole + 1) & m->mask;
	if (!m->keys[hole])
		return;
	m->keys[hole] = 0;
	m->vals[hole] = NULL;
	m->count--;
	for (uint32_t i = (hole + 1) & m->mask; m->keys[i]; i = (i + 1) & m->mask) {
		uint32_t home = slot_of(m, m->keys[i]);
		int stays = (hole <= i) ? (home > hole && home <= i) : (home > hole || home <= i);
		if (!stays) {
			m->keys[hole] = m->keys[i];
			m->vals[hole] = m->vals[i];
			m->keys[i] = 0;
			m->vals[i] = NULL;
			hole = i;
		}
	}
}

void *xi_idmap_next(const struct xi_idmap *m, uint32_t *pos)
{
	while (m->keys && *pos <= m->mask) {
		uint32_t i = (*pos)++;
		if (m->keys[i])
			return m->vals[i];
	}
	return NULL;
}
