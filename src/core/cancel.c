/* Cancellation by tag: cut short what is not yet posted, then wait until what
 * was posted has drained, so that the cancel's completion means nothing of
 * the cancelled operations can land any more. */
#include <errno.h>

#include "core/worker.h"

static void cancel_finish(struct worker *w, struct cancel_rec *c, int res)
{
	c->used = false;
	w->ncancels--;
	signal_store(c->signal, c->signal_value);
	worker_deliver(w, c->cb, c->cb_ctx, c->user_data, res, XFER_OP_CANCEL);
}

void cancel_start(struct worker *w, const struct sub *s)
{
	unsigned i;
	for (i = 0; i < MAX_CANCELS && w->cancels[i].used; i++)
		;
	if (i == MAX_CANCELS) {
		worker_deliver(w, s->cb, s->cb_ctx, s->user_data, -ENOSPC, XFER_OP_CANCEL);
		return;
	}
	struct cancel_rec *c = &w->cancels[i];
	*c = (struct cancel_rec){.used = true, .tag = s->tag, .deadline_ns = s->deadline_ns,
				 .user_data = s->user_data, .cb = s->cb, .cb_ctx = s->cb_ctx,
				 .signal = s->signal, .signal_value = s->signal_value};
	w->ncancels++;
	for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live) {
		if (op->s.tag != s->tag)
			continue;
		if (op->posted < op->total) {
			op_fail(op, -ECANCELED);
			c->cut++;
		}
		op->cancels |= 1ull << i;
		c->waiting++;
	}
	if (c->waiting == 0)
		cancel_finish(w, c, (int)c->cut);
	else
		worker_note_deadline(w, c->deadline_ns);
}

void cancel_op_finished(struct worker *w, struct op *op)
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

void cancel_expire(struct worker *w, uint64_t now, uint64_t *next)
{
	if (!w->ncancels)
		return;
	for (unsigned i = 0; i < MAX_CANCELS; i++) {
		struct cancel_rec *c = &w->cancels[i];
		if (!c->used)
			continue;
		if (c->deadline_ns > now) {
			if (c->deadline_ns < *next)
				*next = c->deadline_ns;
			continue;
		}
		/* Not quiesced in time: report that, and stop tracking the ops. */
		for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live)
			op->cancels &= ~(1ull << i);
		cancel_finish(w, c, -ETIMEDOUT);
	}
}
