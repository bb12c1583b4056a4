#include "backend/sm/sm_keys.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>

#define INITIAL_CAP 64

int xi_sm_keys_init(struct sm_keys *k)
{
	k->tab = calloc(INITIAL_CAP, sizeof(*k->tab));
	k->cap = INITIAL_CAP;
	k->count = 0;
	return k->tab ? 0 : -ENOMEM;
}

void xi_sm_keys_free(struct sm_keys *k)
{
	free(k->tab);
	k->tab = NULL;
	k->cap = k->count = 0;
}

/* Keys are uniformly random, so their low bits are a fine hash. */
static size_t home(const struct sm_keys *k, uint64_t key)
{
	return (size_t)key & (k->cap - 1);
}

static void put(struct sm_keys *k, const struct sm_reg *r)
{
	size_t i = home(k, r->key);
	while (k->tab[i].key)
		i = (i + 1) & (k->cap - 1);
	k->tab[i] = *r;
	k->count++;
}

static int grow(struct sm_keys *k)
{
	struct sm_keys bigger = {.tab = calloc(k->cap * 2, sizeof(*k->tab)), .cap = k->cap * 2};
	if (!bigger.tab)
		return -ENOMEM;
	for (size_t i = 0; i < k->cap; i++)
		if (k->tab[i].key)
			put(&bigger, &k->tab[i]);
	free(k->tab);
	*k = bigger;
	return 0;
}

static uint64_t random_key(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
		/* No entropy source: still unpredictable enough to catch a forged
		 * descriptor by accident, but say nothing stronger. */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		v = ((uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&v;
	}
	return v;
}

int xi_sm_keys_add(struct sm_keys *k, void *base, uint64_t len, bool remote_write, uint64_t *key)
{
	if ((k->count + 1) * 2 > k->cap && grow(k))
		return -ENOMEM;
	struct sm_reg r = {.base = base, .len = len, .remote_write = remote_write};
	do
		r.key = random_key();
	while (r.key == 0 || xi_sm_keys_find(k, r.key));
	put(k, &r);
	*key = r.key;
	return 0;
}

const struct sm_reg *xi_sm_keys_find(const struct sm_keys *k, uint64_t key)
{
	if (!key || !k->tab)
		return NULL;
	for (size_t i = home(k, key);; i = (i + 1) & (k->cap - 1)) {
		if (k->tab[i].key == key)
			return &k->tab[i];
		if (!k->tab[i].key)
			return NULL;
	}
}

void xi_sm_keys_remove(struct sm_keys *k, uint64_t key)
{
	if (!key || !k->tab)
		return;
	size_t mask = k->cap - 1, i = home(k, key);
	while (k->tab[i].key != key) {
		if (!k->tab[i].key)
			return;
		i = (i + 1) & mask;
	}
	/* Backward shift: pull later members of the cluster into the hole when
	 * the hole lies between their home and where they sit. */
	for (size_t j = (i + 1) & mask; k->tab[j].key; j = (j + 1) & mask) {
		size_t h = home(k, k->tab[j].key);
		bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
		if (movable) {
			k->tab[i] = k->tab[j];
			i = j;
		}
	}
	k->tab[i] = (struct sm_reg){0};
	k->count--;
}
