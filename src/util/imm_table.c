#include "util/imm_table.h"

#include <errno.h>
#include <stdlib.h>

static inline uint32_t hash32(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	x ^= x >> 16;
	return x;
}

int xi_imm_table_init(struct imm_table *t, uint32_t limit)
{
	uint32_t cap = 16;
	if (limit == 0 || limit > (1u << 24))
		return -EINVAL;
	/* Keep the load factor at most one half so probes stay short. */
	while (cap < 2 * limit)
		cap <<= 1;
	t->slots = calloc(cap, sizeof(*t->slots));
	if (!t->slots)
		return -ENOMEM;
	t->mask = cap - 1;
	t->used = t->armed = 0;
	t->limit = limit;
	return 0;
}

void xi_imm_table_destroy(struct imm_table *t)
{
	free(t->slots);
	t->slots = NULL;
}

struct imm_entry *xi_imm_table_get(struct imm_table *t, uint32_t imm, bool create)
{
	for (uint32_t i = hash32(imm) & t->mask;; i = (i + 1) & t->mask) {
		struct imm_entry *e = &t->slots[i];
		if (e->used && e->imm == imm)
			return e;
		if (!e->used) {
			if (!create || t->used >= t->limit)
				return NULL;
			*e = (struct imm_entry){.imm = imm, .used = true, .to.deadline_ns = UINT64_MAX};
			t->used++;
			return e;
		}
	}
}

/* Backward-shift deletion: later entries of the same probe run move up so that
 * lookups never stop early at the hole (no tombstones to clean up). */
void xi_imm_table_release(struct imm_table *t, struct imm_entry *e)
{
	uint32_t hole = (uint32_t)(e - t->slots);
	e->used = false;
	t->used--;
	for (uint32_t i = (hole + 1) & t->mask; t->slots[i].used; i = (i + 1) & t->mask) {
		uint32_t home = hash32(t->slots[i].imm) & t->mask;
		/* Move entry i into the hole unless its home lies cyclically in (hole, i]. */
		bool stays = (hole <= i) ? (home > hole && home <= i) : (home > hole || home <= i);
		if (!stays) {
			t->slots[hole] = t->slots[i];
			t->slots[i].used = false;
			hole = i;
		}
	}
}
