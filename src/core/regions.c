#include "core/regions.h"

#include <errno.h>
#include <stdlib.h>

#include "core/worker.h"
#include "gpu/gpu_copy.h"
#include "util/log.h"
#include "util/sys.h"

/* A key for one registration on a NIC whose keys we choose: uniformly
 * random over the provider's key width, never 0. Nothing about it follows
 * from the engine id, the region id or an earlier key, so a peer holding an
 * address or another region's descriptor cannot name this region, and a
 * writer holding a revoked descriptor cannot name its successor. Reuse: a
 * fresh key equals one of N keys this engine retired with probability
 * N / 2^bits (2^-44 after a million registrations with tcp's 64 bits), which
 * is why no list of retired keys is kept; a key equal to a live one is
 * refused by the provider and drawn again (register_one). */
static uint64_t fresh_key(unsigned bits)
{
	bool strong = true;
	uint64_t key;
	do {
		key = xi_random_u64(&strong);
		if (bits < 64)
			key &= (1ull << bits) - 1;
	} while (key == 0);
	if (!strong)
		xwarn("no CSPRNG here: region keys are not secret");
	return key;
}

/* Draws a new key when the provider refuses one (in use by a live region
 * of ours: -EACCES from FI_ENOKEY); a few tries, as a repeat is 2^-bits. */
static int register_one(xfer_engine_t *e, unsigned n, xfer_mr_t *mr)
{
	struct xfer_nic *nic = &e->nics[n];
	int ret = -EACCES;
	for (int attempt = 0; attempt < 4 && ret == -EACCES; attempt++) {
		uint64_t key = nic->key_bits ? fresh_key(nic->key_bits) : 0;
		ret = e->ops.mr_reg(nic, xi_mr_nic_bytes(mr), mr->len, key, mr->access,
				    mr->native ? &mr->mem : NULL, &mr->nic[n]);
		if (!nic->key_bits)
			break; /* the provider's key: drawing again changes nothing */
	}
	return ret;
}

int xi_mr_register_on_nics(xfer_engine_t *e, xfer_mr_t *mr)
{
	for (unsigned n = 0; n < e->nnics; n++) {
		int ret = register_one(e, n, mr);
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
	/* A staged GPU region's landings launch the copy kernel here: load it
	 * now (gpu_copy.c says why). On the worker (through reg_on_worker), whose
	 * GPU state it is. Regions written in place land by the NIC. */
	if (mr->gpu >= 0 && !mr->native && e->w)
		xi_gpu_prepare(e->w->gpu, mr->gpu);
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
