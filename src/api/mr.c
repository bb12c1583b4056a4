/* Memory regions: local registration on every NIC, the remote descriptor, and
 * import of a peer's descriptor. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_api.h"
#include "core/objects.h"
#include "util/log.h"

int mr_register_on_nics(xfer_engine_t *e, xfer_mr_t *mr)
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
		int ret = e->ops.mr_reg(&e->nics[n], mr->reg_buf ? mr->reg_buf : mr->buf, mr->len, key,
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

void mr_release_on_nics(xfer_engine_t *e, xfer_mr_t *mr)
{
	if (!mr->registered)
		return;
	for (unsigned n = 0; n < e->nnics; n++)
		e->ops.mr_dereg(&e->nics[n], &mr->nic[n]);
	mr->registered = false;
}

static void list_add(xfer_engine_t *e, xfer_mr_t *mr)
{
	xfer_mr_t *head = &e->user_mrs;
	if (!head->next)
		head->next = head->prev = head;
	mr->next = head;
	mr->prev = head->prev;
	head->prev->next = mr;
	head->prev = mr;
}

static void list_del(xfer_mr_t *mr)
{
	if (!mr->next)
		return;
	mr->e->nregions--;
	mr->prev->next = mr->next;
	mr->next->prev = mr->prev;
	mr->next = mr->prev = NULL;
}

/* After the worker exited: unregister every user region (the structs stay
 * until xfer_mr_dereg or destroy). */
void mr_release_all(xfer_engine_t *e)
{
	xfer_mr_t *head = &e->user_mrs;
	pthread_mutex_lock(&e->ctl_lock);
	for (xfer_mr_t *mr = head->next; mr && mr != head; mr = mr->next)
		mr_release_on_nics(e, mr);
	pthread_mutex_unlock(&e->ctl_lock);
}

void mr_free_all(xfer_engine_t *e)
{
	xfer_mr_t *head = &e->user_mrs;
	while (head->next && head->next != head) {
		xfer_mr_t *mr = head->next;
		list_del(mr);
		gpu_mr_free(mr);
		free(mr);
	}
}

/* The worker finds a region named by a notice (only GPU regions get them). */
xfer_mr_t *mr_find(xfer_engine_t *e, uint64_t id)
{
	xfer_mr_t *head = &e->user_mrs;
	for (xfer_mr_t *mr = head->next; mr && mr != head; mr = mr->next)
		if (mr->id == id)
			return mr;
	return NULL;
}

int xfer_mr_is_gpu(const xfer_mr_t *mr)
{
	return mr->gpu;
}

static int reg_on_worker(xfer_engine_t *e, void *arg)
{
	xfer_mr_t *mr = arg;
	if (e->nregions >= e->attr.max_regions)
		return -ENOSPC;
	int ret = mr_register_on_nics(e, mr);
	if (!ret) {
		list_add(e, mr);
		e->nregions++;
	} else if (mr->native) {
		mr->native_err = ret;
	}
	return ret;
}

static int dereg_on_worker(xfer_engine_t *e, void *arg)
{
	xfer_mr_t *mr = arg;
	if (atomic_load_explicit(&mr->inflight, memory_order_acquire))
		return -EBUSY;
	mr_release_on_nics(e, mr);
	list_del(mr);
	return 0;
}

/* A region of host memory not yet registered anywhere (engine.c registers
 * its own buffers with it too). */
xfer_mr_t *mr_alloc(xfer_engine_t *e, void *buf, size_t len)
{
	xfer_mr_t *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	mr->e = e;
	mr->buf = buf;
	mr->len = len;
	mr->gpu = -1;
	return mr;
}

int xfer_mr_reg(xfer_engine_t *e, void *buf, size_t len, xfer_mr_t **out)
{
	if (!e || !buf || !len || !out || (uintptr_t)buf > UINTPTR_MAX - len)
		return -EINVAL;
	for (unsigned n = 0; n < e->nnics; n++)
		if (len > e->nics[n].max_msg && e->nics[n].max_msg < SIZE_MAX / 2)
			xdbg("region of %zu bytes exceeds one transfer on %s", len, e->nics[n].domain);
	xfer_mr_t *mr = mr_alloc(e, buf, len);
	if (!mr)
		return -ENOMEM;
	mr->id = atomic_fetch_add(&e->next_region_id, 1);
	int dev = cuda_device_of(buf), ret = 0;
	if (dev >= 0)
		ret = gpu_mr_prepare(e, mr, dev);
	if (!ret)
		ret = engine_call(e, reg_on_worker, mr);
	if (ret && mr->native_err) {
		ret = gpu_mr_fall_back(e, mr);
		if (!ret)
			ret = engine_call(e, reg_on_worker, mr);
	}
	gpu_mr_done(mr);
	if (ret) {
		gpu_mr_free(mr);
		free(mr);
		return ret;
	}
	*out = mr;
	return 0;
}

int xfer_mr_dereg(xfer_mr_t *mr)
{
	if (!mr)
		return -EINVAL;
	xfer_engine_t *e = mr->e;
	int ret = engine_call(e, dereg_on_worker, mr);
	if (ret == -ESHUTDOWN) {
		/* Stopping: once stop has released every registration (it may be
		 * doing so on another thread right now), only the struct remains. */
		while (!atomic_load(&e->stopped))
			sched_yield();
		pthread_mutex_lock(&e->ctl_lock);
		list_del(mr);
		pthread_mutex_unlock(&e->ctl_lock);
		ret = 0;
	}
	if (!ret) {
		gpu_mr_free(mr);
		free(mr);
	}
	return ret;
}

int xfer_mr_desc(const xfer_mr_t *mr, void *buf, size_t cap, size_t *need)
{
	const xfer_engine_t *e = mr->e;
	struct wire_desc d = {.engine_id = e->id, .len = mr->len, .nnics = (uint8_t)e->nnics};
	if (!mr->registered)
		return -ESHUTDOWN;
	for (unsigned n = 0; n < e->nnics; n++) {
		d.nic[n].base = mr->nic[n].base;
		d.nic[n].key = mr->nic[n].key;
	}
	d.region_id = mr->id;
	/* Native GPU memory is written in place: no mirror, no notice. */
	if (mr->gpu >= 0 && !mr->native)
		d.flags |= WIRE_DESC_STAGED;
	if (mr->has_ipc) {
		d.flags |= WIRE_DESC_IPC;
		d.host_id = e->host_id;
		memcpy(d.ipc, mr->ipc, sizeof(d.ipc));
		d.ipc_offset = mr->ipc_offset;
	}
	return wire_desc_encode(&d, buf, cap, need);
}

void *xfer_mr_addr(const xfer_mr_t *mr)
{
	return mr->buf;
}

size_t xfer_mr_len(const xfer_mr_t *mr)
{
	return mr->len;
}

static int revoke_on_worker(xfer_engine_t *e, void *arg)
{
	xfer_mr_t *mr = arg;
	/* Checked here, in line with submissions the worker already took. */
	if (atomic_load_explicit(&mr->inflight, memory_order_acquire))
		return -EBUSY;
	if (mr->revoked)
		return 0;
	/* Closing the provider registration retires its key; the next request
	 * that names it fails the key check at this end. Keys are never reused. */
	mr_release_on_nics(e, mr);
	mr->revoked = true;
	return 0;
}

int xfer_mr_revoke(xfer_mr_t *mr)
{
	if (!mr)
		return -EINVAL;
	int ret = engine_call(mr->e, revoke_on_worker, mr);
	return ret == -ESHUTDOWN ? 0 : ret;
}
