/* The engine and control thread shared by decoders and prefillers. */
#include "kv_core.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "kv_peers.h"
#include "kv_send.h"
#include "kv_wire.h"

/* The most completions one module keeps room for (entries of 16 bytes). */
#define KV_CREDITS_MAX (1u << 16)
#define RETRY_SEND_NS 200000ull
#define IDLE_TICK_NS 1000000000ull

uint64_t xi_kv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct timespec abs_ts(uint64_t when_ns)
{
	/* The condition variables run on CLOCK_MONOTONIC (see start). */
	return (struct timespec){.tv_sec = (time_t)(when_ns / 1000000000ull),
				 .tv_nsec = (long)(when_ns % 1000000000ull)};
}

/* ------------------------------------------- engine hooks (worker thread) */

static void on_recv(void *ctx, uint64_t src_id, const void *data, size_t len)
{
	struct kv_core *c = ctx;
	if (xi_kv_msg_is_ours(data, len))
		xi_kv_inbox_msg(&c->in, src_id, data, len);
	else if (c->app_recv)
		c->app_recv(c->app_recv_ctx, src_id, data, len);
}

static void on_peer_down(void *ctx, uint32_t peer, uint64_t engine_id, int reason)
{
	struct kv_core *c = ctx;
	xi_kv_inbox_peer_down(&c->in);
	if (c->app_down)
		c->app_down(c->app_down_ctx, peer, engine_id, reason);
}

/* --------------------------------------------------------- control thread */

static void handle(struct kv_core *c, const struct kv_item *it)
{
	if (!c->stopping)
		c->on_item(c->owner, it);
	else if (it->kind == KV_IT_CQE && it->cqe.kind == XFER_OP_SEND)
		free((void *)(uintptr_t)it->cqe.user_data); /* its kv_sendbuf */
}

static void drain(struct kv_core *c)
{
	struct kv_item it;
	while (xi_kv_inbox_pop(&c->in, &it)) {
		handle(c, &it);
		xi_kv_inbox_done(&c->in, &it);
	}
}

static void *control_main(void *arg)
{
	struct kv_core *c = arg;
	uint64_t next = 0;
	for (;;) {
		/* downs_seen: written by this thread only, read without the lock. */
		xi_kv_inbox_wait(&c->in, next, c->downs_seen);
		bool stop = xi_kv_inbox_stopping(&c->in);
		xi_kv_inbox_take_kick(&c->in);
		/* Read first: the completions the worker delivered before a peer's
		 * failure are then drained before the failure is handled. */
		uint32_t downs = xi_kv_inbox_peer_downs(&c->in);
		pthread_mutex_lock(&c->mu);
		drain(c);
		if (downs != c->downs_seen) {
			c->downs_seen = downs;
			if (!c->stopping)
				xi_kv_peers_check_down(c);
		}
		uint64_t now = xi_kv_now_ns();
		next = c->stopping ? now + IDLE_TICK_NS : c->on_tick(c->owner, now);
		if (!c->stopping && xi_kv_send_pending(c) && next > now + RETRY_SEND_NS)
			next = now + RETRY_SEND_NS; /* the submission queue was full: retry soon */
		if (c->credit_waiters)
			pthread_cond_broadcast(&c->credit_cv);
		pthread_mutex_unlock(&c->mu);
		if (stop)
			return NULL;
	}
}

static uint32_t credits_for(const struct xfer_attr *a)
{
	uint64_t n = (uint64_t)a->submit_depth + a->max_ops;
	return n > KV_CREDITS_MAX ? KV_CREDITS_MAX : n ? (uint32_t)n : 1;
}

int xi_kv_core_start(struct kv_core *c, const struct xfer_attr *attr)
{
	c->attr = *attr;
	c->app_recv = attr->on_recv;
	c->app_recv_ctx = attr->on_recv_ctx;
	c->app_down = attr->on_peer_down;
	c->app_down_ctx = attr->on_peer_down_ctx;
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->app_cv, &ca);
	pthread_cond_init(&c->credit_cv, &ca);
	pthread_condattr_destroy(&ca);
	/* Before the engine: its callbacks may run as soon as it exists. */
	int ret = xi_kv_inbox_init(&c->in, credits_for(attr), attr->recv_count, attr->msg_max,
				   attr->spin_us);
	if (ret)
		return ret;

	struct xfer_attr a = *attr;
	a.on_recv = on_recv;
	a.on_recv_ctx = c;
	a.on_peer_down = on_peer_down;
	a.on_peer_down_ctx = c;
	ret = xfer_engine_create(&a, &c->e);
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
	pthread_cond_broadcast(&c->credit_cv);
	pthread_mutex_unlock(&c->mu);
	/* Engine next: its stop completes everything in flight (into the inbox,
	 * which has room for all of it), and no callback runs after it. */
	if (c->e)
		xfer_engine_stop(c->e);
	if (c->thread_started) {
		xi_kv_inbox_stop(&c->in);
		pthread_join(c->thread, NULL);
		c->thread_started = false;
	}
	if (c->in.ring)
		drain(c);
	xi_kv_send_drop_pending(c);
	xi_kv_inbox_free(&c->in);
}

void xi_kv_core_kick(struct kv_core *c)
{
	xi_kv_inbox_kick(&c->in);
}

int xi_kv_core_wait_credit(struct kv_core *c)
{
	while (!c->stopping && !xi_kv_inbox_has_credit(&c->in)) {
		c->credit_waiters++;
		pthread_cond_wait(&c->credit_cv, &c->mu);
		c->credit_waiters--;
	}
	return c->stopping ? -ESHUTDOWN : 0;
}

void xi_kv_core_wait_events(struct kv_core *c, const uint32_t *count, uint64_t timeout_ms)
{
	uint64_t now = xi_kv_now_ns(), until = UINT64_MAX;
	if (timeout_ms < (UINT64_MAX - now) / 1000000ull)
		until = now + timeout_ms * 1000000ull;
	while (!*count && xi_kv_now_ns() < until) {
		struct timespec ts = abs_ts(until);
		pthread_cond_timedwait(&c->app_cv, &c->mu, &ts);
	}
}

uint64_t xi_kv_core_dropped(struct kv_core *c)
{
	return xi_kv_inbox_dropped(&c->in);
}
