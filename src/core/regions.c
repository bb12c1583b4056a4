#include "core/regions.h"

#include <errno.h>
#include <stdlib.h>

int xi_mr_register_on_nics(xfer_engine_t *e, xfer_mr_t *mr)
{
	for (unsigned n = 0; n < e->nnics; n++) {
		/* A fresh key per registration, never reused within this engine, so a
		 * descriptor of a region that was deregistered cannot reach its successor. */
		uint64_t key = 0;
		if (e->nics[n].key_bits) {
			key = atomic_fetch_add(&e->next_key, 1);
			if (e->nics[n].key_bits < 64)
				key &= (1ull << e->nics[n].key_bits) - 1;
		}
		int ret = e->ops.mr_reg(&e->nics[n], xi_mr_nic_bytes(mr), mr->len, key, mr->access,
					mr->native ? &mr->mem : NULL, &mr->nic[n]);
		if (ret) {
			while (n-- > 0)
				e->ops.mr_dereg(&e->nics[n], &mr->nic[n]);
			return ret;
		}
	}
	mr->registered = true;
	return 0;
}

void xi_mr_release_on_nics(xfer_engine_t *e, xfer_mr_t *mr)
{
	if (!mr->registered)
		return;
	for (unsigned n = 0; n < e->nnics; n++)
		e->ops.mr_dereg(&e->nics[n], &mr->nic[n]);
	mr->registered = false;
}

xfer_mr_t *xi_mr_alloc(xfer_engine_t *e, void *buf, size_t len, unsigned access)
{
	xfer_mr_t *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	mr->e = e;
	mr->buf = buf;
	mr->len = len;
	mr->gpu = -1;
	mr->access = access;
	return mr;
}

int xi_regions_init(xfer_engine_t *e)
{
	return xi_idmap_init(&e->regions);
}

void xi_regions_destroy(xfer_engine_t *e)
{
	xi_idmap_destroy(&e->regions);
}

uint32_t xi_regions_count(const xfer_engine_t *e)
{
	return e->regions.count;
}

int xi_regions_add(xfer_engine_t *e, xfer_mr_t *mr)
{
	int ret = xi_mr_register_on_nics(e, mr);
	if (ret)
		return ret;
	/* Growing the table is the one allocation; undo the registration if it fails. */
	if ((ret = xi_idmap_put(&e->regions, mr->id, mr))) {
		xi_mr_release_on_nics(e, mr);
		return ret;
	}
	mr->listed = true;
	return 0;
}

void xi_regions_del(xfer_engine_t *e, xfer_mr_t *mr)
{
	if (!mr->listed)
		return;
	xi_idmap_del(&e->regions, mr->id);
	mr->listed = false;
}

xfer_mr_t *xi_regions_find(const xfer_engine_t *e, uint64_t id)
{
	return xi_idmap_get(&e->regions, id);
}

void xi_regions_release_all(xfer_engine_t *e)
{
	pthread_mutex_lock(&e->ctl_lock);
	uint32_t pos = 0;
	for (xfer_mr_t *mr; (mr = xi_idmap_next(&e->regions, &pos));)
		xi_mr_release_on_nics(e, mr);
	pthread_mutex_unlock(&e->ctl_lock);
}

xfer_mr_t *xi_regions_next(const xfer_engine_t *e, uint32_t *pos)
{
	return xi_idmap_next(&e->regions, pos);
}
