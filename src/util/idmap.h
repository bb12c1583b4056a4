/* A map from a 64-bit id (never 0) to a pointer: open addressing with
 * linear probing, kept at most half full, growing on insert. Inserts and
 * deletes belong to the control path (they may allocate); lookups never
 * allocate and take O(1) expected time, for the worker's data path. One
 * owner at a time: no internal locking. */
#ifndef XFER_UTIL_IDMAP_H
#define XFER_UTIL_IDMAP_H

#include <stdint.h>

struct xi_idmap {
	uint64_t *keys; /* 0: empty slot */
	void **vals;
	uint32_t mask, count;
};

int xi_idmap_init(struct xi_idmap *m);
void xi_idmap_destroy(struct xi_idmap *m);
/* Adds or replaces; 0 or -ENOMEM (the map is unchanged then). */
int xi_idmap_put(struct xi_idmap *m, uint64_t id, void *val);
void *xi_idmap_get(const struct xi_idmap *m, uint64_t id);
void xi_idmap_del(struct xi_idmap *m, uint64_t id);
/* Visits every value: start with *pos = 0; NULL when done. The map must
 * not change while it is visited. */
void *xi_idmap_next(const struct xi_idmap *m, uint32_t *pos);

#endif
