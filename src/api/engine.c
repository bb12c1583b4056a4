/* Engine lifecycle (create, stop, destroy) and what an engine says about
 * itself (address, NICs, traces); its statistics are in api/stats.c. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "api/mr.h"
#include "backend/registry.h"
#include "core/bringup.h"
#include "core/regions.h"
#include "core/subq.h"
#include "core/thread.h"
#include "gpu/cuda_api.h"
#include "util/log.h"
#include "util/sys.h"
#include "wire/msg.h"

static int validate_attr(const struct xfer_attr *a)
{
	if (!a->submit_depth || a->submit_depth > (1u << 22) || !a->max_ops || a->max_ops > (1u << 22))
		return -EINVAL;
	if (!a->recv_count || a->recv_count > 65536 || a->msg_max > (1u << 24))
		return -EINVAL;
	if (!a->imm_slots || a->imm_slots > (1u << 22) || !a->max_regions)
		return -EINVAL;
	if (a->busy_poll > 2) /* room for modes later */
		return -EINVAL;
	return 0;
}

int xfer_engine_create(const struct xfer_attr *attr, xfer_engine_t **out)
{
	struct xfer_attr defaults;
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!attr) {
		xfer_attr_init(&defaults);
		attr = &defaults;
	}
	int ret = validate_attr(attr);
	if (ret)
		return ret;
	/* The engine holds cache-line-aligned members (queue positions, flags). */
	size_t esize = (sizeof(xfer_engine_t) + 63) & ~(size_t)63;
	xfer_engine_t *e = aligned_alloc(64, esize);
	if (!e)
		return -ENOMEM;
	memset(e, 0, esize);
	xi_log_level = attr->log_level;
	e->attr = *attr;
	e->provider_req = strdup(attr->provider ? attr->provider : "auto");
	e->nics_req = attr->nics && *attr->nics ? strdup(attr->nics) : NULL;
	e->attr.provider = e->provider_req;
	e->attr.nics = e->nics_req;
	e->ops = *xi_backend_find(e->provider_req ? e->provider_req : "auto");
	xi_backend_fill_stubs(&e->ops);
	e->slot_bytes = (uint32_t)((XI_MSG_HDR + attr->msg_max + 63) & ~63u);
	e->max_peers = MAX_PEERS_DEFAULT;
	e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&e->ctl_lock, NULL);
	do {
		if (getrandom(&e->id, sizeof(e->id), 0) != sizeof(e->id))
			e->id = xi_now_ns() ^ ((uint64_t)getpid() << 32);
	} while (e->id == 0);
	atomic_init(&e->next_region_id, 1);
	e->host_id = xi_cuda_host_id();
	const char *ipc = getenv("XFER_GPU_IPC");
	e->gpu_ipc = !(ipc && !strcmp(ipc, "0"));
	const char *tel = getenv("XFER_TELEMETRY");
	atomic_init(&e->telemetry, !(tel && !strcmp(tel, "0")));
	const char *native = getenv("XFER_GPU_NATIVE");
	e->gpu_native = !native || !*native ? 1 : !strcmp(native, "0") ? 0 : !strcmp(native, "1") ? 2 : 1;
	e->peers = calloc(e->max_peers, sizeof(*e->peers));
	if (!e->provider_req || (attr->nics && *attr->nics && !e->nics_req) || e->wake_fd < 0 ||
	    !e->peers || xi_regions_init(e)) {
		ret = -ENOMEM;
		goto fail;
	}
	if ((ret = xi_subq_init(&e->subq, attr->submit_depth)))
		goto fail;
	if ((ret = xi_mpmc_init(&e->cq, (size_t)attr->max_ops + attr->imm_slots, sizeof(struct xfer_cqe))))
		goto fail;
	if ((ret = xi_mpmc_init(&e->traces, 65536, sizeof(struct xfer_trace))))
		goto fail;
	if ((ret = xi_worker_create(e)))
		goto fail;
	*out = e;
	return 0;
fail:
	xfer_engine_destroy(e);
	return ret;
}

void xfer_engine_stop(xfer_engine_t *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->ctl_lock);
	bool first = !atomic_exchange(&e->stopping, true);
	pthread_mutex_unlock(&e->ctl_lock);
	if (!first)
		return;
	/* Submitters that saw stopping == false have pushed by now or see true. */
	while (atomic_load(&e->submitters))
		sched_yield();
	if (e->thread_started) {
		uint64_t one = 1;
		ssize_t r = write(e->wake_fd, &one, sizeof(one));
		(void)r;
		pthread_join(e->thread, NULL);
		e->thread_started = false;
	}
	/* The worker has exited: this thread may now touch the NICs. */
	xi_engine_teardown(e);
	atomic_store(&e->stopped, true);
}

void xfer_engine_destroy(xfer_engine_t *e)
{
	if (!e)
		return;
	xfer_engine_stop(e);
	xi_mr_free_all(e);
	xi_regions_destroy(e);
	xi_worker_destroy(e);
	xi_mpmc_destroy(&e->subq);
	xi_mpmc_destroy(&e->cq);
	xi_mpmc_destroy(&e->inbox);
	xi_mpmc_destroy(&e->repost);
	xi_mpmc_destroy(&e->traces);
	xi_engine_free_buffers(e);
	free(e->peers);
	if (e->wake_fd >= 0)
		close(e->wake_fd);
	pthread_mutex_destroy(&e->ctl_lock);
	free(e->provider_req);
	free(e->nics_req);
	free(e);
}

uint64_t xfer_engine_id(const xfer_engine_t *e)
{
	return e ? e->id : 0;
}

const char *xfer_engine_provider(const xfer_engine_t *e)
{
	return e && e->nnics ? e->nics[0].provider : "";
}

unsigned xfer_engine_nic_count(const xfer_engine_t *e)
{
	return e ? e->nnics : 0;
}

const char *xfer_engine_nic_name(const xfer_engine_t *e, unsigned i)
{
	return e && i < e->nnics ? e->nics[i].domain : NULL;
}

int xfer_engine_addr(const xfer_engine_t *e, void *buf, size_t cap, size_t *need)
{
	if (!e || (cap && !buf))
		return -EINVAL;
	struct wire_addr a = {.engine_id = e->id, .nnics = (uint8_t)e->nnics, .msg_max = e->attr.msg_max};
	if (atomic_load(&e->stopped))
		return -ESHUTDOWN;
	snprintf(a.provider, sizeof(a.provider), "%s", e->nics[0].provider);
	for (unsigned n = 0; n < e->nnics; n++) {
		if (e->nics[n].addrlen > WIRE_NIC_ADDR_MAX)
			return -EOVERFLOW;
		a.nic[n].len = (uint16_t)e->nics[n].addrlen;
		memcpy(a.nic[n].bytes, e->nics[n].addr, e->nics[n].addrlen);
		a.nic[n].sink_base = e->sink->nic[n].base;
		a.nic[n].sink_key = e->sink->nic[n].key;
	}
	return xi_wire_addr_encode(&a, buf, cap, need);
}

void xfer_engine_trace(xfer_engine_t *e, int enable)
{
	if (e)
		atomic_store(&e->trace_every, enable > 0 ? (unsigned)enable : 0u);
}

int xfer_trace_read(xfer_engine_t *e, struct xfer_trace *out, int max)
{
	int n = 0;
	if (!e || !out || max < 0)
		return -EINVAL;
	while (n < max && xi_mpmc_pop(&e->traces, &out[n]))
		n++;
	return n;
}

int xfer_engine_nic_info(const xfer_engine_t *e, unsigned i, struct xfer_nic_info *out)
{
	if (!e || !out || i >= e->nnics)
		return -EINVAL;
	const struct xfer_nic *n = &e->nics[i];
	memset(out, 0, sizeof(*out));
	snprintf(out->provider, sizeof(out->provider), "%s", n->provider);
	snprintf(out->domain, sizeof(out->domain), "%s", n->domain);
	out->tx_depth = n->tx_size;
	out->rx_depth = n->rx_size;
	out->max_msg = n->max_msg;
	out->delivery_complete = n->delivery_complete;
	out->gpu_path = e->gpu_native && atomic_load(&n->gpu_native) ? "native" : "staged";
	return 0;
}
