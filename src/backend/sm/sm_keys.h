/* The target's registrations: remote key -> (base, length, access). Keys
 * are random 64-bit values, so a made-up key names nothing; a key leaves the
 * table when its region is revoked or deregistered, on the worker thread that
 * also applies every incoming request, so that removal is an exact fence:
 * once it returned, no later request lands in the region. Open addressing
 * with linear probing and backward-shift deletion: a lookup (the data path)
 * never allocates; insertion (the control path) may grow the table. */
#ifndef XFER_SM_KEYS_H
#define XFER_SM_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sm_reg {
	uint64_t key; /* 0: empty */
	uint8_t *base;
	uint64_t len;
	bool remote_write;
};

struct sm_keys {
	struct sm_reg *tab;
	size_t cap; /* a power of two */
	size_t count;
};

int xi_sm_keys_init(struct sm_keys *k);
void xi_sm_keys_free(struct sm_keys *k);
/* Enters a region under a fresh random key (in *key); -ENOMEM. */
int xi_sm_keys_add(struct sm_keys *k, void *base, uint64_t len, bool remote_write, uint64_t *key);
void xi_sm_keys_remove(struct sm_keys *k, uint64_t key);
const struct sm_reg *xi_sm_keys_find(const struct sm_keys *k, uint64_t key);

/* Where [off, off + len) of region r lies, or NULL when the region does not
 * take remote writes or the range leaves it (overflow-safe). */
static inline uint8_t *xi_sm_reg_range(const struct sm_reg *r, uint64_t off, uint64_t len)
{
	if (!r || !r->remote_write || off > r->len || len > r->len - off)
		return NULL;
	return r->base + off;
}

#endif
