/* Immediate-counter semantics on top of imm_table: arrivals before arming
 * count, an expectation fires exactly once, the excess carries over. */
#include <errno.h>

#include "core/worker.h"

static void fire(struct worker *w, struct imm_entry *en, int res)
{
	xfer_complete_fn cb = en->cb;
	void *ctx = en->cb_ctx;
	uint64_t ud = en->user_data;
	volatile uint64_t *sig = en->signal;
	uint64_t sigv = en->signal_value;
	if (res == 0)
		en->count -= en->expected;
	en->expected = 0;
	en->deadline_ns = UINT64_MAX;
	w->imm.armed--;
	if (en->count == 0)
		imm_table_release(&w->imm, en);
	signal_store(sig, sigv);
	worker_deliver(w, cb, ctx, ud, res, XFER_OP_EXPECT);
}

void imm_arrived(struct worker *w, uint32_t imm)
{
	xfer_engine_t *e = w->e;
	struct imm_entry *en = imm_table_get(&w->imm, imm, true);
	atomic_fetch_add_explicit(&e->st.imms_received, 1, memory_order_relaxed);
	if (!en) {
		atomic_fetch_add_explicit(&e->st.imms_dropped, 1, memory_order_relaxed);
		return;
	}
	en->count++;
	if (en->expected && en->count >= en->expected)
		fire(w, en, 0);
}

void imm_arm(struct worker *w, const struct sub *s)
{
	struct imm_entry *en = imm_table_get(&w->imm, s->imm, true);
	if (!en) {
		worker_deliver(w, s->cb, s->cb_ctx, s->user_data, -ENOSPC, XFER_OP_EXPECT);
		return;
	}
	if (en->expected) {
		worker_deliver(w, s->cb, s->cb_ctx, s->user_data, -EBUSY, XFER_OP_EXPECT);
		return;
	}
	en->expected = s->u.expect.count;
	en->deadline_ns = s->deadline_ns;
	en->user_data = s->user_data;
	en->cb = s->cb;
	en->cb_ctx = s->cb_ctx;
	en->signal = s->signal;
	en->signal_value = s->signal_value;
	w->imm.armed++;
	worker_note_deadline(w, en->deadline_ns);
	if (en->count >= en->expected)
		fire(w, en, 0);
}

int imm_disarm(struct worker *w, uint32_t imm, uint32_t *arrived)
{
	struct imm_entry *en = imm_table_get(&w->imm, imm, false);
	*arrived = 0;
	if (!en)
		return 0;
	*arrived = en->count;
	en->count = 0;
	if (en->expected)
		fire(w, en, -ECANCELED); /* releases the entry since count is 0 */
	else
		imm_table_release(&w->imm, en);
	return 0;
}

void imm_expire(struct worker *w, uint64_t now, uint64_t *next_deadline)
{
	if (w->imm.armed == 0)
		return;
	for (uint32_t i = 0; i <= w->imm.mask; i++) {
		struct imm_entry *en = &w->imm.slots[i];
		if (!en->used || !en->expected)
			continue;
		if (en->deadline_ns <= now) {
			fire(w, en, -ETIMEDOUT);
			/* Release may have shifted a later entry into slot i. */
			i--;
		} else if (en->deadline_ns < *next_deadline) {
			*next_deadline = en->deadline_ns;
		}
	}
}

void imm_cancel_all(struct worker *w, int status)
{
	for (uint32_t i = 0; i <= w->imm.mask && w->imm.armed; i++) {
		struct imm_entry *en = &w->imm.slots[i];
		if (en->used && en->expected) {
			fire(w, en, status);
			i--;
		}
	}
}
