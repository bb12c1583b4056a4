/* The worker-to-control-thread ring of the KV module (kv_inbox.h). */
#include "kv_inbox.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A ring entry that carries a message: src_id in user_data, its length in res. */
#define KIND_MSG 0u /* no XFER_OP_* is 0 */

int xi_kv_inbox_init(struct kv_inbox *in, uint32_t credits, uint32_t nslots, uint32_t slot_bytes,
		     uint32_t spin_us)
{
	memset(in, 0, sizeof(*in));
	uint64_t need = (uint64_t)credits + nslots, size = 1;
	while (size < need)
		size <<= 1;
	if (size > UINT32_MAX / 2)
		return -ENOMEM;
	in->ring = calloc(size, sizeof(*in->ring));
	/* One byte at least: a module message is never empty, but msg_max may be 0. */
	in->slots = calloc(nslots ? nslots : 1, slot_bytes ? slot_bytes : 1);
	if (!in->ring || !in->slots) {
		xi_kv_inbox_free(in);
		return -ENOMEM;
	}
	in->mask = (uint32_t)size - 1;
	in->nslots = nslots;
	in->slot_bytes = slot_bytes;
	in->credits = credits;
	in->spin_ns = (uint64_t)spin_us * 1000;
	return 0;
}

void xi_kv_inbox_free(struct kv_inbox *in)
{
	free(in->ring);
	free(in->slots);
	in->ring = NULL;
	in->slots = NULL;
}

/* ---------------------------------------------------------------- credits */

bool xi_kv_inbox_credit(struct kv_inbox *in, struct xfer_completion *c, uint64_t user_data,
			uint64_t tag, uint64_t timeout_ms)
{
	if (in->credits_used == in->credits)
		return false;
	in->credits_used++;
	*c = (struct xfer_completion){.user_data = user_data, .cb = xi_kv_inbox_cqe, .cb_ctx = in,
				      .timeout_ms = timeout_ms, .tag = tag};
	return true;
}

bool xi_kv_inbox_has_credit(const struct kv_inbox *in)
{
	return in->credits_used < in->credits;
}

int xi_kv_inbox_settle(struct kv_inbox *in, int ret)
{
	if (ret)
		in->credits_used--;
	return ret;
}

/* ----------------------------------------------------------------- waking */

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)word, op, val, ts, NULL, 0);
}

/* After a store the control thread must see: the seq_cst fence pairs with
 * the one in xi_kv_inbox_wait, so either it sees our store or we see it
 * asleep. Only the first waker after it fell asleep makes the system call. */
static void wake(struct kv_inbox *in)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&in->sleeping, memory_order_relaxed) ||
	    !atomic_exchange_explicit(&in->sleeping, 0, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&in->wake_seq, 1, memory_order_relaxed);
	futex(&in->wake_seq, FUTEX_WAKE_PRIVATE, 1, NULL);
}

void xi_kv_inbox_kick(struct kv_inbox *in)
{
	atomic_store_explicit(&in->kicked, 1, memory_order_relaxed);
	wake(in);
}

void xi_kv_inbox_stop(struct kv_inbox *in)
{
	atomic_store_explicit(&in->stop, 1, memory_order_relaxed);
	wake(in);
}

/* ----------------------------------------------------------- worker side */

static bool push(struct kv_inbox *in, const struct xfer_cqe *e)
{
	uint32_t t = atomic_load_explicit(&in->tail, memory_order_relaxed);
	if (t - in->head_seen > in->mask) {
		in->head_seen = atomic_load_explicit(&in->head, memory_order_acquire);
		if (t - in->head_seen > in->mask)
			return false;
	}
	in->ring[t & in->mask] = *e;
	atomic_store_explicit(&in->tail, t + 1, memory_order_release);
	return true;
}

void xi_kv_inbox_cqe(void *ctx, const struct xfer_cqe *cqe)
{
	struct kv_inbox *in = ctx;
	/* Credits make a full ring impossible; should it happen anyway, the
	 * owner's deadlines end what this completion would have. */
	if (!push(in, cqe))
		atomic_fetch_add_explicit(&in->dropped, 1, memory_order_relaxed);
	wake(in);
}

void xi_kv_inbox_msg(struct kv_inbox *in, uint64_t src_id, const void *data, size_t len)
{
	uint32_t m = in->msg_tail;
	if (m - in->msg_head_seen >= in->nslots)
		in->msg_head_seen = atomic_load_explicit(&in->msg_head, memory_order_acquire);
	if (m - in->msg_head_seen >= in->nslots || len > in->slot_bytes || len > INT32_MAX) {
		atomic_fetch_add_explicit(&in->dropped, 1, memory_order_relaxed);
		return;
	}
	memcpy(in->slots + (size_t)(m % in->nslots) * in->slot_bytes, data, len);
	struct xfer_cqe e = {.user_data = src_id, .res = (int32_t)len, .kind = KIND_MSG};
	if (!push(in, &e)) {
		atomic_fetch_add_explicit(&in->dropped, 1, memory_order_relaxed);
		return;
	}
	in->msg_tail = m + 1;
	wake(in);
}

void xi_kv_inbox_peer_down(struct kv_inbox *in)
{
	atomic_fetch_add_explicit(&in->peers_down, 1, memory_order_release);
	wake(in);
}

/* --------------------------------------------------- control-thread side */

static bool pending(struct kv_inbox *in, uint32_t downs)
{
	return atomic_load_explicit(&in->tail, memory_order_acquire) !=
		       atomic_load_explicit(&in->head, memory_order_relaxed) ||
	       atomic_load_explicit(&in->kicked, memory_order_relaxed) ||
	       atomic_load_explicit(&in->stop, memory_order_relaxed) ||
	       atomic_load_explicit(&in->peers_down, memory_order_relaxed) != downs;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void xi_kv_inbox_wait(struct kv_inbox *in, uint64_t until_ns, uint32_t downs)
{
	uint64_t now = now_ns();
	if (now >= until_ns || pending(in, downs))
		return;
	/* Under a steady stream the worker would otherwise wake us for nearly
	 * every completion; on few cores, give the CPU away while polling. */
	for (uint64_t spin_until = now + in->spin_ns; now < spin_until && now < until_ns; now = now_ns()) {
		sched_yield();
		if (pending(in, downs))
			return;
	}
	if (now >= until_ns)
		return;
	uint32_t seq = atomic_load_explicit(&in->wake_seq, memory_order_relaxed);
	atomic_store_explicit(&in->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (!pending(in, downs)) {
		uint64_t left = until_ns - now;
		struct timespec ts = {.tv_sec = (time_t)(left / 1000000000ull),
				      .tv_nsec = (long)(left % 1000000000ull)};
		/* Returns at a wake, at the timeout, or at once if one came first. */
		futex(&in->wake_seq, FUTEX_WAIT_PRIVATE, seq, &ts);
	}
	atomic_store_explicit(&in->sleeping, 0, memory_order_relaxed);
}

bool xi_kv_inbox_take_kick(struct kv_inbox *in)
{
	return atomic_exchange_explicit(&in->kicked, 0, memory_order_relaxed) != 0;
}

bool xi_kv_inbox_stopping(struct kv_inbox *in)
{
	return atomic_load_explicit(&in->stop, memory_order_relaxed) != 0;
}

uint32_t xi_kv_inbox_peer_downs(struct kv_inbox *in)
{
	return atomic_load_explicit(&in->peers_down, memory_order_acquire);
}

bool xi_kv_inbox_pop(struct kv_inbox *in, struct kv_item *it)
{
	uint32_t h = atomic_load_explicit(&in->head, memory_order_relaxed);
	if (h == in->tail_seen) {
		in->tail_seen = atomic_load_explicit(&in->tail, memory_order_acquire);
		if (h == in->tail_seen)
			return false;
	}
	const struct xfer_cqe e = in->ring[h & in->mask];
	atomic_store_explicit(&in->head, h + 1, memory_order_release);
	if (e.kind != KIND_MSG) {
		*it = (struct kv_item){.kind = KV_IT_CQE, .cqe = e};
		return true;
	}
	/* Messages leave in the order they came: this one is in the oldest slot
	 * not given back yet. */
	uint32_t m = atomic_load_explicit(&in->msg_head, memory_order_relaxed);
	*it = (struct kv_item){.kind = KV_IT_MSG, .src_id = e.user_data, .len = (size_t)e.res,
			       .data = in->slots + (size_t)(m % in->nslots) * in->slot_bytes};
	return true;
}

void xi_kv_inbox_done(struct kv_inbox *in, const struct kv_item *it)
{
	if (it->kind == KV_IT_MSG)
		atomic_store_explicit(&in->msg_head, atomic_load_explicit(&in->msg_head, memory_order_relaxed) + 1,
				      memory_order_release);
	else if (it->kind == KV_IT_CQE && in->credits_used)
		in->credits_used--;
}

uint64_t xi_kv_inbox_dropped(struct kv_inbox *in)
{
	return atomic_load_explicit(&in->dropped, memory_order_relaxed);
}
