/* The engine, inbox and control thread shared by decoders and prefillers. */
#include "kv_core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t xi_kv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void push(struct kv_core *c, struct kv_item *it)
{
	pthread_mutex_lock(&c->in_mu);
	if (c->in_tail)
		c->in_tail->next = it;
	else
		c->in_head = it;
	c->in_tail = it;
	pthread_cond_signal(&c->in_cv);
	pthread_mutex_unlock(&c->in_mu);
}

/* Worker thread: allocation here is on the control path only (module
 * messages), never on the engine's data path. */
static void on_recv(void *ctx, uint64_t src_id, const void *data, size_t len)
{
	struct kv_core *c = ctx;
	if (!xi_kv_msg_is_ours(data, len)) {
		if (c->app_recv)
			c->app_recv(c->app_recv_ctx, src_id, data, len);
		return;
	}
	struct kv_item *it = malloc(sizeof(*it) + len);
	if (!it) {
		__atomic_add_fetch(&c->dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	*it = (struct kv_item){.kind = KV_IT_MSG, .src_id = src_id, .len = len};
	memcpy(it->data, data, len);
	push(c, it);
}

static void on_peer_down(void *ctx, uint32_t peer, uint64_t engine_id, int reason)
{
	struct kv_core *c = ctx;
	struct kv_item *it = malloc(sizeof(*it));
	if (it) {
		*it = (struct kv_item){.kind = KV_IT_PEER_DOWN, .src_id = engine_id, .peer = peer};
		push(c, it);
	}
	if (c->app_down)
		c->app_down(c->app_down_ctx, peer, engine_id, reason);
}

void xi_kv_core_cb(void *ctx, const struct xfer_cqe *cqe)
{
	struct kv_core *c = ctx;
	struct kv_item *it = malloc(sizeof(*it));
	if (!it) {
		/* Cannot happen short of exhaustion; the owner's deadlines recover. */
		__atomic_add_fetch(&c->dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	*it = (struct kv_item){.kind = KV_IT_CQE, .cqe = *cqe};
	push(c, it);
}

struct xfer_completion xi_kv_completion(struct kv_core *c, uint64_t user_data, uint64_t tag,
				     uint64_t timeout_ms)
{
	return (struct xfer_completion){.user_data = user_data, .cb = xi_kv_core_cb, .cb_ctx = c,
					.timeout_ms = timeout_ms, .tag = tag};
}

void xi_kv_core_kick(struct kv_core *c)
{
	pthread_mutex_lock(&c->in_mu);
	c->kicked = true;
	pthread_cond_signal(&c->in_cv);
	pthread_mutex_unlock(&c->in_mu);
}

static void deadline_ts(uint64_t when_ns, struct timespec *ts)
{
	/* The inbox condition variable runs on CLOCK_MONOTONIC (see start). */
	ts->tv_sec = (time_t)(when_ns / 1000000000ull);
	ts->tv_nsec = (long)(when_ns % 1000000000ull);
}

static void *control_main(void *arg)
{
	struct kv_core *c = arg;
	uint64_t next = 0;
	for (;;) {
		pthread_mutex_lock(&c->in_mu);
		while (!c->stop && !c->in_head && !c->kicked && xi_kv_now_ns() < next) {
			struct timespec ts;
			deadline_ts(next, &ts);
			pthread_cond_timedwait(&c->in_cv, &c->in_mu, &ts);
		}
		struct kv_item *list = c->in_head;
		c->in_head = c->in_tail = NULL;
		c->kicked = false;
		bool stop = c->stop;
		pthread_mutex_unlock(&c->in_mu);

		pthread_mutex_lock(&c->mu);
		while (list) {
			struct kv_item *it = list;
			list = it->next;
			if (!c->stopping)
				c->on_item(c->owner, it);
			else if (it->kind == KV_IT_CQE && it->cqe.kind == XFER_OP_SEND)
				free((void *)(uintptr_t)it->cqe.user_data); /* its kv_sendbuf */
			free(it);
		}
		uint64_t now = xi_kv_now_ns();
		next = c->stopping ? now + 1000000000ull : c->on_tick(c->owner, now);
		if (!c->stopping && xi_kv_send_pending(c) && next > now + 200000)
			next = now + 200000; /* the submission queue was full: retry soon */
		pthread_mutex_unlock(&c->mu);
		if (stop)
			return NULL;
	}
}

int xi_kv_core_start(struct kv_core *c, const struct xfer_attr *attr)
{
	c->attr = *attr;
	c->app_recv = attr->on_recv;
	c->app_recv_ctx = attr->on_recv_ctx;
	c->app_down = attr->on_peer_down;
	c->app_down_ctx = attr->on_peer_down_ctx;
	pthread_mutex_init(&c->mu, NULL);
	pthread_mutex_init(&c->in_mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->in_cv, &ca);
	pthread_cond_init(&c->app_cv, &ca);
	pthread_condattr_destroy(&ca);

	struct xfer_attr a = *attr;
	a.on_recv = on_recv;
	a.on_recv_ctx = c;
	a.on_peer_down = on_peer_down;
	a.on_peer_down_ctx = c;
	int ret = xfer_engine_create(&a, &c->e);
	if (ret)
		return ret;
	if (pthread_create(&c->thread, NULL, control_main, c)) {
		xfer_engine_destroy(c->e);
		c->e = NULL;
		return -EAGAIN;
	}
	c->thread_started = true;
	return 0;
}

void xi_kv_core_stop(struct kv_core *c)
{
	/* From here the control thread only frees send buffers: a region
	 * deregistered while the engine stops would escape its release. */
	pthread_mutex_lock(&c->mu);
	c->stopping = true;
	pthread_mutex_unlock(&c->mu);
	/* Engine next: its stop completes everything in flight, so the control
	 * thread sees the last completions before it exits. */
	if (c->e)
		xfer_engine_stop(c->e);
	if (c->thread_started) {
		pthread_mutex_lock(&c->in_mu);
		c->stop = true;
		pthread_cond_signal(&c->in_cv);
		pthread_mutex_unlock(&c->in_mu);
		pthread_join(c->thread, NULL);
		c->thread_started = false;
	}
	while (c->in_head) {
		struct kv_item *it = c->in_head;
		c->in_head = it->next;
		if (it->kind == KV_IT_CQE && it->cqe.kind == XFER_OP_SEND)
			free((void *)(uintptr_t)it->cqe.user_data);
		free(it);
	}
	while (c->pend_head) {
		struct kv_sendbuf *b = c->pend_head;
		c->pend_head = b->next;
		free(b);
	}
}
