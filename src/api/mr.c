/* Memory regions: registration on every NIC (through the worker), the
 * descriptor peers import, revoke and deregistration. */
#include "api/mr.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "api/mr_gpu.h"
#include "core/call.h"
#include "core/regions.h"
#include "gpu/cuda_api.h"
#include "util/log.h"

void xi_mr_free_all(xfer_engine_t *e)
{
	uint32_t pos = 0;
	for (xfer_mr_t *mr; (mr = xi_regions_next(e, &pos));) {
		xi_gpu_mr_free(mr);
		free(mr);
	}
	/* The table goes with the engine (xi_regions_destroy). */
}

int xfer_mr_is_gpu(const xfer_mr_t *mr)
{
	return mr ? mr->gpu : -1;
}

static int reg_on_worker(xfer_engine_t *e, void *arg)
{
	xfer_mr_t *mr = arg;
	if (xi_regions_count(e) >= e->attr.max_regions)
		return -ENOSPC;
	int ret = xi_regions_add(e, mr);
	if (ret && mr->native)
		mr->native_err = ret;
	return ret;
}

static int dereg_on_worker(xfer_engine_t *e, void *arg)
{
	xfer_mr_t *mr = arg;
	if (xi_inflight(&mr->inflight))
		return -EBUSY;
	xi_mr_release_on_nics(e, mr);
	xi_regions_del(e, mr);
	return 0;
}

int xfer_mr_reg(xfer_engine_t *e, void *buf, size_t len, xfer_mr_t **out)
{
	if (!e || !buf || !len || !out || (uintptr_t)buf > UINTPTR_MAX - len)
		return -EINVAL;
	for (unsigned n = 0; n < e->nnics; n++)
		if (len > e->nics[n].max_msg && e->nics[n].max_msg < SIZE_MAX / 2)
			xdbg("region of %zu bytes exceeds one transfer on %s", len, e->nics[n].domain);
	/* Peers write into user regions: remote-writable. */
	xfer_mr_t *mr = xi_mr_alloc(e, buf, len, NIC_MR_REMOTE_WRITE);
	if (!mr)
		return -ENOMEM;
	mr->id = atomic_fetch_add(&e->next_region_id, 1);
	int dev = xi_cuda_device_of(buf), ret = 0;
	if (dev >= 0)
		ret = xi_gpu_mr_prepare(e, mr, dev);
	if (!ret)
		ret = xi_engine_call(e, reg_on_worker, mr);
	if (ret && mr->native_err) {
		ret = xi_gpu_mr_fall_back(e, mr);
		if (!ret)
			ret = xi_engine_call(e, reg_on_worker, mr);
	}
	xi_gpu_mr_done(mr);
	if (ret) {
		xi_gpu_mr_free(mr);
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
	int ret = xi_engine_call(e, dereg_on_worker, mr);
	if (ret == -ESHUTDOWN) {
		/* Stopping: once stop has released every registration (it may be
		 * doing so on another thread right now), only the struct remains. */
		while (!atomic_load(&e->stopped))
			sched_yield();
		pthread_mutex_lock(&e->ctl_lock);
		xi_regions_del(e, mr);
		pthread_mutex_unlock(&e->ctl_lock);
		ret = 0;
	}
	if (!ret) {
		xi_gpu_mr_free(mr);
		free(mr);
	}
	return ret;
}

int xfer_mr_desc(const xfer_mr_t *mr, void *buf, size_t cap, size_t *need)
{
	if (!mr || (cap && !buf))
		return -EINVAL;
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
	return xi_wire_desc_encode(&d, buf, cap, need);
}

void *xfer_mr_addr(const xfer_mr_t *mr)
{
	return mr ? mr->buf : NULL;
}

size_t xfer_mr_len(const xfer_mr_t *mr)
{
	return mr ? mr->len : 0;
}

static int revoke_on_worker(xfer_engine_t *e, void *arg)
{
	xfer_mr_t *mr = arg;
	/* Checked here, in line with submissions the worker already took. */
	if (xi_inflight(&mr->inflight))
		return -EBUSY;
	if (mr->revoked)
		return 0;
	/* Closing the provider registration retires its key; the next request
	 * that names it fails the key check at this end. Keys are never reused. */
	xi_mr_release_on_nics(e, mr);
	mr->revoked = true;
	return 0;
}

int xfer_mr_revoke(xfer_mr_t *mr)
{
	if (!mr)
		return -EINVAL;
	int ret = xi_engine_call(mr->e, revoke_on_worker, mr);
	return ret == -ESHUTDOWN ? 0 : ret;
}
