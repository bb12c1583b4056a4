#include "core/cancel.h"

#include <errno.h>

#include "core/deliver.h"
#include "core/telemetry.h"
#include "core/worker.h"

static void cancel_finish(struct worker *w, struct cancel_rec *c, int res)
{
	c->used = false;
	w->ncancels--;
	xi_deliver(w, &c->to, res, XFER_OP_CANCEL);
}

void xi_cancel_start(struct worker *w, const struct sub *s)
{
	unsigned i;
	for (i = 0; i < MAX_CANCELS && w->cancels[i].used; i++)
		;
	if (i == MAX_CANCELS) {
		xi_deliver(w, &s->to, -ENOSPC, XFER_OP_CANCEL);
		return;
	}
	struct cancel_rec *c = &w->cancels[i];
	*c = (struct cancel_rec){.used = true, .tag = s->tag, .to = s->to};
	w->ncancels++;
	for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live) {
		if (op->s.tag != s->tag)
			continue;
		/* Unposted requests, or a GPU copy whose notice is still to come:
		 * cut, so that no immediate counts for what the caller gave up (an
		 * op a deadline or failure cut already is not counted again). */
		if (!op->cut && (op->posted < op->total || op->copies)) {
			xi_op_fail(op, -ECANCELED);
			c->cut++;
		}
		op->cancels |= 1ull << i;
		c->waiting++;
	}
	if (c->waiting == 0)
		cancel_finish(w, c, (int)c->cut);
	else
		xi_note_deadline(w, c->to.deadline_ns);
}

void xi_cancel_release(struct worker *w, struct op *op)
{
	for (unsigned i = 0; op->cancels; i++) {
		if (!(op->cancels & (1ull << i)))
			continue;
		op->cancels &= ~(1ull << i);
		struct cancel_rec *c = &w->cancels[i];
		if (--c->waiting == 0)
			cancel_finish(w, c, (int)c->cut);
	}
}

void xi_cancel_expire(struct worker *w, uint64_t now, uint64_t *next)
{
	if (!w->ncancels)
		return;
	for (unsigned i = 0; i < MAX_CANCELS; i++) {
		struct cancel_rec *c = &w->cancels[i];
		if (!c->used)
			continue;
		if (c->to.deadline_ns > now) {
			if (c->to.deadline_ns < *next)
				*next = c->to.deadline_ns;
			continue;
		}
		/* Not quiesced in time: report that, and stop tracking the ops. */
		for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live)
			op->cancels &= ~(1ull << i);
		xi_tel_timeout(w->tel, XFER_PEER_NONE);
		cancel_finish(w, c, -ETIMEDOUT);
	}
}
