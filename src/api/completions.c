/* The application side of completions and received messages: non-blocking
 * polls, and waits that spin briefly and then sleep on a futex (or, in
 * busy-poll mode, spin until the deadline). */
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "core/call.h"
#include "core/deliver.h"
#include "core/drive.h"
#include "util/sys.h"
#include "wire/msg.h"

/* A wait polls at least this long before it sleeps, and as long as the
 * worker spins (spin_us) when that is longer: a round trip that the worker
 * waits out awake (tcp's, ~40 us on loopback) then costs no futex wake-up
 * on the application's side either. */
#define WAIT_SPIN_MIN_NS 20000ull
/* ... and for as long as the engine's GPU copies keep moving (one began or
 * finished this recently): what the wait is for is then usually a copy
 * away, and a copy outlasts spin_us (a 256 MiB one takes ~130 us on an
 * H200), after which a futex wake-up would come on top of it. Copies that
 * stop moving for this long (a wedged GPU) keep no wait awake; the wait's
 * own timeout holds throughout. */
#define WAIT_GPU_STALL_NS 100000000ull

int xfer_cq_poll(xfer_engine_t *e, struct xfer_cqe *cqes, int max)
{
	int n = 0;
	if (!e || !cqes || max < 0)
		return -EINVAL;
	while (n < max && xi_mpmc_pop(&e->cq, &cqes[n]))
		n++;
	/* Completions the worker could not queue before it stopped. */
	if (n == 0 && atomic_load(&e->stopped) && xi_deliver_after_stop(e))
		while (n < max && xi_mpmc_pop(&e->cq, &cqes[n]))
			n++;
	return n;
}

/* Busy-poll mode: spins on the queue itself until the deadline, never
 * sleeping, so that the worker's push is seen one cache-line transfer
 * later instead of after a futex wake-up (or a sched_yield) on our side. */
static int spin_for(xfer_engine_t *e, uint64_t end, int (*try)(void *), void *arg)
{
	int n;
	const bool pause = xi_spin_pauses();
	const bool yields = e->drive_ok && xi_spin_yields();
	for (unsigned spins = 0; (n = try(arg)) == 0; spins++) {
		/* The clock is cheap (vDSO) but not free: look every 64 polls. */
		if ((spins & 63) == 0 && xi_now_ns() >= end)
			return -ETIMEDOUT;
		/* busy_poll 2: run the worker's turn here when it is ours
		 * (core/drive.c); what it completes is looked for at once. */
		if (e->drive_ok && xi_drive_turn(e)) {
			/* Few CPUs (2-4): both processes' waiting threads may share
			 * one; a thread that never yields holds it a time slice. */
			if (yields)
				sched_yield();
			continue;
		}
		if (pause)
			xi_cpu_relax();
	}
	return n;
}

static bool gpu_moving(const xfer_engine_t *e, uint64_t now)
{
	if (!atomic_load_explicit(&e->gpu_busy, memory_order_acquire))
		return false;
	uint64_t moved = atomic_load_explicit(&e->gpu_moved_ns, memory_order_relaxed);
	return now < moved || now - moved < WAIT_GPU_STALL_NS;
}

/* Waits on `seq` until try() yields something or the timeout passes;
 * gpu: what it waits for may be a GPU copy's completion (the CQ, not
 * received messages). */
static int wait_for(xfer_engine_t *e, atomic_uint *seq, atomic_uint *waiters, uint64_t timeout_ms,
		    bool gpu, int (*try)(void *), void *arg)
{
	uint64_t start = xi_now_ns();
	uint64_t end = timeout_ms > UINT64_MAX / 2000000ull ? UINT64_MAX : start + timeout_ms * 1000000ull;
	if (e->attr.busy_poll)
		return spin_for(e, end, try, arg);
	uint64_t spin_ns = (uint64_t)e->attr.spin_us * 1000;
	if (spin_ns < WAIT_SPIN_MIN_NS)
		spin_ns = WAIT_SPIN_MIN_NS;
	int n;
	while ((n = try(arg)) == 0) {
		uint64_t now = xi_now_ns();
		if (now >= end)
			return -ETIMEDOUT;
		if (now - start < spin_ns || (gpu && gpu_moving(e, now))) {
			if (xi_spin_yields())
				sched_yield(); /* let the worker run on small machines */
			else
				xi_cpu_relax();
			continue;
		}
		unsigned s = atomic_load(seq);
		atomic_fetch_add(waiters, 1);
		if ((n = try(arg)) != 0) {
			atomic_fetch_sub(waiters, 1);
			return n;
		}
		uint64_t left_ms = (end - now + 999999) / 1000000;
		xi_futex_wait_ms(seq, s, left_ms > 100 ? 100 : left_ms);
		atomic_fetch_sub(waiters, 1);
	}
	return n;
}

struct cq_try {
	xfer_engine_t *e;
	struct xfer_cqe *cqes;
	int max;
};

static int try_cq(void *arg)
{
	struct cq_try *t = arg;
	return xfer_cq_poll(t->e, t->cqes, t->max);
}

int xfer_cq_wait(xfer_engine_t *e, struct xfer_cqe *cqes, int max, uint64_t timeout_ms)
{
	if (!e || !cqes || max <= 0)
		return -EINVAL;
	struct cq_try t = {e, cqes, max};
	return wait_for(e, &e->cq_seq, &e->cq_waiters, timeout_ms, true, try_cq, &t);
}

int xfer_recv(xfer_engine_t *e, void *buf, size_t cap, struct xfer_msg_info *info)
{
	uint32_t slot;
	if (!e || (cap && !buf))
		return -EINVAL;
	if (e->attr.on_recv)
		return -EINVAL;
	if (!e->recv_bufs || !xi_mpmc_pop(&e->inbox, &slot))
		return 0;
	/* The worker decoded this message when it arrived; its header holds. */
	const uint8_t *b = e->recv_bufs + (size_t)slot * e->slot_bytes;
	struct xi_msg m;
	xi_msg_get_hdr(b, &m);
	size_t len = m.len;
	memcpy(buf, m.body, len < cap ? len : cap);
	if (info) {
		info->src_id = m.src_id;
		info->len = len;
	}
	/* The repost queue holds every slot, so this push cannot fail. */
	xi_mpmc_push(&e->repost, &slot);
	xi_engine_kick(e);
	return 1;
}

struct recv_try {
	xfer_engine_t *e;
	void *buf;
	size_t cap;
	struct xfer_msg_info *info;
};

static int try_recv(void *arg)
{
	struct recv_try *t = arg;
	return xfer_recv(t->e, t->buf, t->cap, t->info);
}

int xfer_recv_wait(xfer_engine_t *e, void *buf, size_t cap, struct xfer_msg_info *info,
		   uint64_t timeout_ms)
{
	if (!e)
		return -EINVAL;
	struct recv_try t = {e, buf, cap, info};
	return wait_for(e, &e->inbox_seq, &e->inbox_waiters, timeout_ms, false, try_recv, &t);
}
