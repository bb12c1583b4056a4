#include "core/deliver.h"

#include <errno.h>
#include <stdlib.h>

#include "core/telemetry.h"
#include "core/worker.h"
#include "util/log.h"
#include "util/sys.h"

/* Every completion that can be owed when the worker stops taking work (one
 * per op, armed counter and cancel record, plus the submission that found
 * the queue full), and every submission stop can still find queued. The
 * queue's capacity is its rounded one: mpmc_init rounds up. */
int xi_deliver_init(struct worker *w)
{
	const xfer_engine_t *e = w->e;
	w->ov_cap = (uint32_t)(e->attr.max_ops + e->attr.imm_slots + MAX_CANCELS + 1 +
			       xi_mpmc_capacity(&e->subq));
	w->overflow = calloc(w->ov_cap, sizeof(*w->overflow));
	return w->overflow ? 0 : -ENOMEM;
}

void xi_deliver_free(struct worker *w)
{
	free(w->overflow);
	w->overflow = NULL;
}

static inline void signal_store(volatile uint64_t *p, uint64_t v)
{
	if (p)
		__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

void xi_deliver(struct worker *w, const struct xi_target *t, int res, uint32_t kind)
{
	xfer_engine_t *e = w->e;
	struct xfer_cqe c = {.user_data = t->user_data, .res = res, .kind = kind};
	/* Before the completion: a kernel polling mapped memory may start now. */
	signal_store(t->signal, t->signal_value);
	xi_stat_own_add(&e->st.ops_completed, 1);
	if (res < 0)
		xi_stat_own_add(&e->st.ops_failed, 1);
	xi_tel_completed(w->tel, t, res, kind);
	if (t->cb) {
		t->cb(t->cb_ctx, &c);
		return;
	}
	if (w->ov_count == 0 && xi_mpmc_push(&e->cq, &c)) {
		w->cq_pushed = true;
		return;
	}
	if (w->ov_count == w->ov_cap) {
		/* Cannot happen: the worker stops taking work while this ring holds
		 * anything, and the ring holds all that can be owed then. */
		xerr("completion overflow full; dropping completion of %llu", (unsigned long long)t->user_data);
		return;
	}
	w->overflow[(w->ov_head + w->ov_count) % w->ov_cap] = c;
	w->ov_count++;
}

int xi_deliver_flush(struct worker *w)
{
	int n = 0;
	while (w->ov_count && xi_mpmc_push(&w->e->cq, &w->overflow[w->ov_head])) {
		w->ov_head = (w->ov_head + 1) % w->ov_cap;
		w->ov_count--;
		n++;
	}
	if (n)
		w->cq_pushed = true;
	return n;
}

bool xi_deliver_backlog(const struct worker *w)
{
	return w->ov_count != 0;
}

void xi_deliver_wake(struct worker *w)
{
	xfer_engine_t *e = w->e;
	if (!w->cq_pushed)
		return;
	w->cq_pushed = false;
	atomic_fetch_add_explicit(&e->cq_seq, 1, memory_order_release);
	if (atomic_load(&e->cq_waiters))
		xi_futex_wake_all(&e->cq_seq);
}

void xi_deliver_nudge(struct worker *w)
{
	w->cq_pushed = true;
}

bool xi_deliver_after_stop(xfer_engine_t *e)
{
	struct worker *w = e->w;
	if (!w || !atomic_load(&e->stopped))
		return false;
	/* Application threads may race here; the control lock orders them. */
	pthread_mutex_lock(&e->ctl_lock);
	bool any = w->ov_count != 0;
	if (any) {
		xi_deliver_flush(w);
		w->cq_pushed = true;
		xi_deliver_wake(w);
	}
	pthread_mutex_unlock(&e->ctl_lock);
	return any;
}
