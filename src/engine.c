/* Engine lifecycle: create, bring-up on the worker thread, stop, destroy. */

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cuda_api.h"
#include "log.h"
#include "worker.h"

uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t deadline_after_ms(uint64_t ms)
{
	if (ms == 0 || ms > UINT64_MAX / 2000000ull)
		return UINT64_MAX;
	return now_ns() + ms * 1000000ull;
}

void futex_wake_all(atomic_uint *word)
{
	syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int futex_wait_ms(atomic_uint *word, unsigned expected, uint64_t timeout_ms)
{
	struct timespec ts = {.tv_sec = (time_t)(timeout_ms / 1000),
			      .tv_nsec = (long)(timeout_ms % 1000) * 1000000L};
	if (syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0))
		return -errno;
	return 0;
}

void engine_kick(xfer_engine_t *e)
{
	/* Pairs with the fence in sleep_idle: either the worker sees our push or
	 * we see it asleep. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&e->worker_sleeping, memory_order_relaxed)) {
		uint64_t one = 1;
		ssize_t r = write(e->wake_fd, &one, sizeof(one));
		(void)r;
	}
}

int engine_call(xfer_engine_t *e, int (*fn)(xfer_engine_t *, void *), void *arg)
{
	struct engine_call call = {.fn = fn, .arg = arg};
	struct sub s = {.kind = SUB_CALL, .peer = XFER_PEER_NONE, .u.call = &call};
	int ret;
	pthread_mutex_lock(&e->ctl_lock);
	if (atomic_load(&e->stopping) || !e->thread_started) {
		pthread_mutex_unlock(&e->ctl_lock);
		return -ESHUTDOWN;
	}
	sem_init(&call.done, 0, 0);
	while (!mpmc_push(&e->subq, &s)) {
		engine_kick(e);
		usleep(50);
	}
	engine_kick(e);
	while (sem_wait(&call.done) && errno == EINTR)
		;
	sem_destroy(&call.done);
	ret = call.result;
	pthread_mutex_unlock(&e->ctl_lock);
	return ret;
}

static int reg_internal(xfer_engine_t *e, void *buf, size_t len, xfer_mr_t **out);

static const struct backend_ops *backend_override;

void engine_backend_override(const struct backend_ops *ops)
{
	backend_override = ops;
}

static int open_nics(xfer_engine_t *e)
{
	char *list = e->nics_req ? strdup(e->nics_req) : NULL, *save = NULL;
	const char *name = list ? strtok_r(list, ",", &save) : NULL;
	int ret = 0;
	if (e->nics_req && !list)
		return -ENOMEM;
	do {
		if (e->nnics == XFER_NIC_MAX) {
			ret = -E2BIG;
			break;
		}
		struct xfer_nic *nic = &e->nics[e->nnics];
		nic->ops = &e->ops;
		nic->index = e->nnics;
		nic->want_hmem = e->gpu_native;
		ret = e->ops.open(nic, e->provider_req, name);
		if (ret) {
			xerr("no usable NIC %s for provider %s: %s", name ? name : "(first)",
			     e->provider_req, xfer_strerror(ret));
			break;
		}
		/* All NICs of a group must speak the same provider. */
		if (e->nnics && strcmp(nic->provider, e->nics[0].provider) != 0) {
			e->ops.close(nic);
			ret = -XFER_EPROVIDER;
			break;
		}
		e->nnics++;
	} while (name && (name = strtok_r(NULL, ",", &save)));
	free(list);
	return ret;
}

/* Runs on the worker thread, after pinning. */
int engine_bringup(xfer_engine_t *e, struct worker *w)
{
	int ret = open_nics(e);
	if (ret)
		return ret;
	e->recv_slots = e->attr.recv_count * e->nnics;
	for (unsigned n = 0; n < e->nnics; n++) {
		if (e->attr.recv_count > e->nics[n].rx_size)
			return -EINVAL;
	}
	ret = worker_setup_buffers(w);
	if (ret)
		return ret;
	size_t recv_bytes = (size_t)e->recv_slots * e->slot_bytes;
	/* Three slots past SEND_BUFS hold the liveness PING, PONG and BYE, which
	 * never change. */
	size_t send_bytes = (size_t)(SEND_BUFS + 3) * e->slot_bytes;
	e->recv_bufs = aligned_alloc(4096, (recv_bytes + 4095) & ~(size_t)4095);
	e->send_bufs = aligned_alloc(4096, (send_bytes + 4095) & ~(size_t)4095);
	void *sink = aligned_alloc(64, SINK_BYTES);
	if (!e->recv_bufs || !e->send_bufs || !sink) {
		free(sink);
		return -ENOMEM;
	}
	memset(sink, 0, SINK_BYTES);
	uint32_t probe[4] = {MSG_MAGIC_HB, 0, (uint32_t)e->id, (uint32_t)(e->id >> 32)};
	memcpy(e->send_bufs + (size_t)SEND_BUFS * e->slot_bytes, probe, sizeof(probe));
	probe[0] = MSG_MAGIC_PONG;
	memcpy(e->send_bufs + (size_t)(SEND_BUFS + 1) * e->slot_bytes, probe, sizeof(probe));
	probe[0] = MSG_MAGIC_BYE;
	memcpy(e->send_bufs + (size_t)(SEND_BUFS + 2) * e->slot_bytes, probe, sizeof(probe));
	if ((ret = reg_internal(e, sink, SINK_BYTES, &e->sink)))
		return free(sink), ret;
	if ((ret = reg_internal(e, e->recv_bufs, recv_bytes, &e->recv_mr)))
		return ret;
	if ((ret = reg_internal(e, e->send_bufs, send_bytes, &e->send_mr)))
		return ret;
	ret = mpmc_init(&e->inbox, e->recv_slots, sizeof(uint32_t));
	if (!ret)
		ret = mpmc_init(&e->repost, e->recv_slots, sizeof(uint32_t));
	if (ret)
		return ret;
	worker_post_initial_recvs(w);
	return 0;
}

/* mr.c */
xfer_mr_t *mr_alloc(xfer_engine_t *e, void *buf, size_t len);
int mr_register_on_nics(xfer_engine_t *e, xfer_mr_t *mr);
void mr_release_on_nics(xfer_engine_t *e, xfer_mr_t *mr);

static int reg_internal(xfer_engine_t *e, void *buf, size_t len, xfer_mr_t **out)
{
	xfer_mr_t *mr = mr_alloc(e, buf, len);
	if (!mr)
		return -ENOMEM;
	int ret = mr_register_on_nics(e, mr);
	if (ret) {
		free(mr);
		return ret;
	}
	*out = mr;
	return 0;
}

static int validate_attr(const struct xfer_attr *a)
{
	if (!a->submit_depth || a->submit_depth > (1u << 22) || !a->max_ops || a->max_ops > (1u << 22))
		return -EINVAL;
	if (!a->recv_count || a->recv_count > 65536 || a->msg_max > (1u << 24))
		return -EINVAL;
	if (!a->imm_slots || a->imm_slots > (1u << 22) || !a->max_regions)
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
	xlog_level = attr->log_level;
	e->attr = *attr;
	e->provider_req = strdup(attr->provider ? attr->provider : "auto");
	e->nics_req = attr->nics && *attr->nics ? strdup(attr->nics) : NULL;
	e->attr.provider = e->provider_req;
	e->attr.nics = e->nics_req;
	e->ops = backend_override ? *backend_override
		 : !strcmp(e->provider_req, "shm") ? xi_sm_backend_ops : ofi_backend_ops;
	backend_fill_stubs(&e->ops);
	e->slot_bytes = (uint32_t)((MSG_HDR_BYTES + attr->msg_max + 63) & ~63u);
	e->max_peers = MAX_PEERS_DEFAULT;
	e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&e->ctl_lock, NULL);
	do {
		if (getrandom(&e->id, sizeof(e->id), 0) != sizeof(e->id))
			e->id = now_ns() ^ ((uint64_t)getpid() << 32);
	} while (e->id == 0);
	atomic_init(&e->next_key, (e->id & 0xffffffffull) << 16);
	atomic_init(&e->next_region_id, 1);
	e->host_id = cuda_host_id();
	const char *ipc = getenv("XFER_GPU_IPC");
	e->gpu_ipc = !(ipc && !strcmp(ipc, "0"));
	const char *native = getenv("XFER_GPU_NATIVE");
	e->gpu_native = !native || !*native ? 1 : !strcmp(native, "0") ? 0 : !strcmp(native, "1") ? 2 : 1;
	e->peers = calloc(e->max_peers, sizeof(*e->peers));
	if (!e->provider_req || (attr->nics && *attr->nics && !e->nics_req) || e->wake_fd < 0 ||
	    !e->peers) {
		ret = -ENOMEM;
		goto fail;
	}
	if ((ret = mpmc_init(&e->subq, attr->submit_depth, sizeof(struct sub))))
		goto fail;
	if ((ret = mpmc_init(&e->cq, (size_t)attr->max_ops + attr->imm_slots, sizeof(struct xfer_cqe))))
		goto fail;
	if ((ret = mpmc_init(&e->traces, 65536, sizeof(struct xfer_trace))))
		goto fail;
	if ((ret = worker_create(e)))
		goto fail;
	*out = e;
	return 0;
fail:
	xfer_engine_destroy(e);
	return ret;
}

/* mr.c keeps the list of user regions so that stop can release them. */
void mr_release_all(xfer_engine_t *e);
void mr_free_all(xfer_engine_t *e);

static void release_internal(xfer_engine_t *e, xfer_mr_t **mr, bool free_buf)
{
	if (!*mr)
		return;
	mr_release_on_nics(e, *mr);
	if (free_buf)
		free((*mr)->buf);
	free(*mr);
	*mr = NULL;
}

void xfer_engine_stop(xfer_engine_t *e)
{
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
	/* The worker has exited: this thread may now touch the NICs. Regions go
	 * before endpoints so nothing can land in memory the user frees next. */
	mr_release_all(e);
	release_internal(e, &e->sink, true);
	release_internal(e, &e->recv_mr, false);
	release_internal(e, &e->send_mr, false);
	for (unsigned n = 0; n < e->nnics; n++)
		e->ops.close(&e->nics[n]);
	atomic_store(&e->stopped, true);
}

void xfer_engine_destroy(xfer_engine_t *e)
{
	if (!e)
		return;
	xfer_engine_stop(e);
	mr_free_all(e);
	worker_destroy(e);
	mpmc_destroy(&e->subq);
	mpmc_destroy(&e->cq);
	mpmc_destroy(&e->inbox);
	mpmc_destroy(&e->repost);
	mpmc_destroy(&e->traces);
	free(e->recv_bufs);
	free(e->send_bufs);
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
	return e->id;
}

const char *xfer_engine_provider(const xfer_engine_t *e)
{
	return e->nnics ? e->nics[0].provider : "";
}

unsigned xfer_engine_nic_count(const xfer_engine_t *e)
{
	return e->nnics;
}

const char *xfer_engine_nic_name(const xfer_engine_t *e, unsigned i)
{
	return i < e->nnics ? e->nics[i].domain : NULL;
}

int xfer_engine_addr(const xfer_engine_t *e, void *buf, size_t cap, size_t *need)
{
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
	return wire_addr_encode(&a, buf, cap, need);
}

void xfer_engine_stats(const xfer_engine_t *e, struct xfer_stats *o)
{
	xfer_engine_t *m = (xfer_engine_t *)e;
	o->ops_submitted = atomic_load(&m->st.ops_submitted);
	o->ops_completed = atomic_load(&m->st.ops_completed);
	o->ops_failed = atomic_load(&m->st.ops_failed);
	o->wrs_posted = atomic_load(&m->st.wrs_posted);
	o->bytes_written = atomic_load(&m->st.bytes_written);
	o->imms_received = atomic_load(&m->st.imms_received);
	o->imms_dropped = atomic_load(&m->st.imms_dropped);
	o->msgs_received = atomic_load(&m->st.msgs_received);
	o->worker_sleeps = atomic_load(&m->st.worker_sleeps);
}

void xfer_engine_trace(xfer_engine_t *e, int enable)
{
	atomic_store(&e->tracing, enable != 0);
}

int xfer_trace_read(xfer_engine_t *e, struct xfer_trace *out, int max)
{
	int n = 0;
	if (!e || !out || max < 0)
		return -EINVAL;
	while (n < max && mpmc_pop(&e->traces, &out[n]))
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
