#include "core/imm_counters.h"

#include <errno.h>

#include "core/deliver.h"
#include "core/telemetry.h"
#include "core/worker.h"
#include "util/sys.h"

static void fire(struct worker *w, struct imm_entry *en, int res)
{
	struct xi_target to = en->to;
	if (res == 0)
		en->count -= en->expected;
	en->expected = 0;
	en->to.deadline_ns = UINT64_MAX;
	w->imm.armed--;
	if (en->count == 0)
		xi_imm_table_release(&w->imm, en);
	xi_deliver(w, &to, res, XFER_OP_EXPECT);
}

void xi_imm_arrived(struct worker *w, uint32_t imm, uint32_t n)
{
	xfer_engine_t *e = w->e;
	if (!n)
		return;
	struct imm_entry *en = xi_imm_table_get(&w->imm, imm, true);
	xi_stat_own_add(&e->st.imms_received, n);
	if (!en) {
		xi_stat_own_add(&e->st.imms_dropped, n);
		return;
	}
	/* n at once is n single arrivals: one expectation fires, the rest carry.
	 * The saturation is for form: 2^64 arrivals do not happen. */
	en->count = en->count > UINT64_MAX - n ? UINT64_MAX : en->count + n;
	if (en->expected && en->count >= en->expected)
		fire(w, en, 0);
}

void xi_imm_arm(struct worker *w, const struct sub *s)
{
	struct imm_entry *en = xi_imm_table_get(&w->imm, s->imm, true);
	if (!en) {
		xi_deliver(w, &s->to, -ENOSPC, XFER_OP_EXPECT);
		return;
	}
	if (en->expected) {
		xi_deliver(w, &s->to, -EBUSY, XFER_OP_EXPECT);
		return;
	}
	en->expected = s->u.expect.count;
	en->to = s->to;
	w->imm.armed++;
	xi_note_deadline(w, en->to.deadline_ns);
	if (en->count >= en->expected)
		fire(w, en, 0);
}

int xi_imm_disarm(struct worker *w, uint32_t imm, uint32_t *arrived)
{
	struct imm_entry *en = xi_imm_table_get(&w->imm, imm, false);
	*arrived = 0;
	if (!en)
		return 0;
	/* The API reports 32 bits; what lies beyond is discarded all the same. */
	*arrived = en->count > UINT32_MAX ? UINT32_MAX : (uint32_t)en->count;
	en->count = 0;
	if (en->expected)
		fire(w, en, -ECANCELED); /* releases the entry since count is 0 */
	else
		xi_imm_table_release(&w->imm, en);
	return 0;
}

void xi_imm_expire(struct worker *w, uint64_t now, uint64_t *next_deadline)
{
	if (w->imm.armed == 0)
		return;
	for (uint32_t i = 0; i <= w->imm.mask; i++) {
		struct imm_entry *en = &w->imm.slots[i];
		if (!en->used || !en->expected)
			continue;
		if (en->to.deadline_ns <= now) {
			xi_tel_timeout(w->tel, XFER_PEER_NONE);
			fire(w, en, -ETIMEDOUT);
			/* Release may have shifted a later entry into slot i. */
			i--;
		} else if (en->to.deadline_ns < *next_deadline) {
			*next_deadline = en->to.deadline_ns;
		}
	}
}

void xi_imm_cancel_all(struct worker *w, int status)
{
	for (uint32_t i = 0; i <= w->imm.mask && w->imm.armed; i++) {
		struct imm_entry *en = &w->imm.slots[i];
		if (en->used && en->expected) {
			fire(w, en, status);
			i--;
		}
	}
}
