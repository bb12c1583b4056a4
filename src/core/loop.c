/* One turn of the worker: take submissions, post what credits allow, poll
 * the NICs and the GPU copy engine, run due scans, wake application
 * threads. Everything it needs is preallocated in xi_worker_setup; the loop
 * never allocates or locks. */
#include "core/loop.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/call.h"
#include "core/cancel.h"
#include "core/deliver.h"
#include "core/imm_counters.h"
#include "core/liveness.h"
#include "core/notice.h"
#include "core/op.h"
#include "core/path.h"
#include "core/subq.h"
#include "core/rx.h"
#include "core/telemetry.h"
#include "core/tx.h"
#include "gpu/gpu_copy.h"
#include "util/log.h"
#include "util/sys.h"

#define SCAN_INTERVAL_NS 1000000ull
#define POLL_BATCH 32
#define TAKE_MAX 256 /* submissions per turn, so that polling is never starved */
/* How long a worker watches for the application's answer to a peer's
 * arrival (await_reply); XFER_REPLY_WATCH_NS overrides it, 0 turns it off. */
#define REPLY_WATCH_NS 1500ull
#define REPLY_WATCH_MAX_NS 100000ull

int xi_worker_setup(struct worker *w)
{
	int ret;
	if ((ret = xi_tel_init(w)) || (ret = xi_tx_init(w)) || (ret = xi_ops_init(w)) ||
	    (ret = xi_deliver_init(w)) || (ret = xi_hb_init(w)) || (ret = xi_rx_init(w)) ||
	    (ret = xi_imm_table_init(&w->imm, w->e->attr.imm_slots)))
		return ret;
	/* Only where the CUDA driver loads. */
	w->gpu = xi_gpu_create();
	w->e->drive_ok = w->e->attr.busy_poll == 2;
	/* XFER_DRIVE_POST=0: a submission waits for the next wait's turn (A/B). */
	const char *dp = getenv("XFER_DRIVE_POST");
	w->e->drive_post = !(dp && !strcmp(dp, "0"));
	/* Where threads yield their spins (few CPUs), the application's thread
	 * may need this very CPU to answer: watching would only delay it. */
	w->reply_watch_ns = w->e->attr.busy_poll && !xi_spin_yields() ? REPLY_WATCH_NS : 0;
	const char *v = getenv("XFER_REPLY_WATCH_NS");
	if (v && w->e->attr.busy_poll) {
		char *end;
		unsigned long long ns = strtoull(v, &end, 10);
		if (end != v && !*end)
			w->reply_watch_ns = ns > REPLY_WATCH_MAX_NS ? REPLY_WATCH_MAX_NS : ns;
	}
	return xi_notice_init(w);
}

void xi_worker_free(struct worker *w)
{
	xi_imm_table_destroy(&w->imm);
	xi_notice_free(w);
	xi_ops_free(w);
	xi_tx_free(w);
	xi_deliver_free(w);
	xi_hb_free(w);
	xi_rx_free(w);
	xi_tel_free(w);
}

/* ------------------------------------------------------------ submissions */

static void handle_sub(struct worker *w, const struct sub *s)
{
	switch (s->kind) {
	case SUB_CALL:
		xi_call_run(w->e, s->u.call);
		break;
	case SUB_EXPECT:
		xi_imm_arm(w, s);
		break;
	case SUB_CANCEL:
		xi_cancel_start(w, s);
		break;
	default:
		xi_path_accept(w, s);
	}
}

static int take_submissions(struct worker *w)
{
	int n = 0;
	struct sub s;
	/* Take no more than can be held: a free op for every submission, and no
	 * completion waiting for the application to reap (core/deliver.c). */
	while (n < TAKE_MAX && w->free_ops && !xi_deliver_backlog(w) && xi_subq_pop(&w->e->subq, &s)) {
		handle_sub(w, &s);
		n++;
	}
	return n;
}

/* ----------------------------------------------------------------- events */

static void tx_done(struct worker *w, struct wr *wr, int status)
{
	xi_tx_complete(w, wr);
	if (status < 0)
		xi_tel_nic(w->tel, wr->nic, TN_TX_ERRORS, 1);
	switch (wr->kind) {
	case WR_HB:
	case WR_PONG:
		xi_hb_done(w, wr, status);
		break;
	case WR_NOTICE:
		xi_notice_done(w, wr, status);
		break;
	default:
		xi_path_sent(w, wr, status);
	}
}

/* Returns how many events; *drained: every NIC returned fewer than a batch. */
static int poll_nics(struct worker *w, bool *drained)
{
	xfer_engine_t *e = w->e;
	struct nic_event ev[POLL_BATCH];
	int total = 0;
	*drained = true;
	for (unsigned n = 0; n < e->nnics; n++) {
		int got = e->ops.poll(&e->nics[n], ev, POLL_BATCH);
		if (got < 0) {
			xwarn("polling %s failed: %s", e->nics[n].domain, xfer_strerror(got));
			continue;
		}
		for (int i = 0; i < got; i++) {
			switch (ev[i].type) {
			case NIC_EV_REMOTE_WRITE:
				w->arrivals++;
				xi_tel_nic(w->tel, n, TN_IMMS_RECEIVED, 1);
				xi_imm_arrived(w, ev[i].imm, 1);
				break;
			case NIC_EV_RECV:
				w->arrivals++;
				xi_rx_done(w, ev[i].ctx, &ev[i]);
				break;
			case NIC_EV_TX:
				tx_done(w, ev[i].ctx, ev[i].status);
				break;
			}
		}
		total += got;
		if (got == POLL_BATCH)
			*drained = false;
	}
	return total;
}

/* Finished GPU copies come back like NIC completions, by context. */
static int poll_gpu(struct worker *w)
{
	struct xi_gpu_event ev[POLL_BATCH];
	int got = xi_gpu_pending(w->gpu) ? xi_gpu_poll(w->gpu, ev, POLL_BATCH) : 0;
	for (int i = 0; i < got; i++) {
		struct wr *wr = ev[i].ctx;
		if (wr->kind == WR_COPY) {
			xi_notice_copied(w, wr, ev[i].status);
			continue;
		}
		/* Copies' notices held to go as one go before anything else. */
		xi_notice_merge_flush(w);
		if (wr->kind == WR_STAGE)
			xi_path_staged_src(w, wr, ev[i].status);
		else
			xi_notice_landed_gpu(w, wr, ev[i].status);
	}
	xi_notice_merge_flush(w);
	return got;
}

/* -------------------------------------------------------------- deadlines */

static void expire_ops(struct worker *w, uint64_t now, uint64_t *next)
{
	for (struct op *op = w->live.next_live; op != &w->live; op = op->next_live) {
		if (op->user_done)
			continue;
		if (op->s.to.deadline_ns > now) {
			if (op->s.to.deadline_ns < *next)
				*next = op->s.to.deadline_ns;
			continue;
		}
		/* Tell the user now; requests already posted may still land, so the
		 * op keeps its region and peer references until they drain. */
		xi_op_fail(op, -ETIMEDOUT);
		xi_tel_timeout(w->tel, op->s.peer);
		xi_op_complete_early(w, op, -ETIMEDOUT);
		/* A request that outlived its deadline may mean a dead peer: probe. */
		if (op->s.peer != XFER_PEER_NONE)
			xi_peer_suspect(w, op->s.peer, -ETIMEDOUT);
	}
}

static uint64_t scan_deadlines(struct worker *w, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	expire_ops(w, now, &next);
	xi_imm_expire(w, now, &next);
	xi_cancel_expire(w, now, &next);
	xi_hb_scan(w, now, &next);
	return next;
}

/* ------------------------------------------------------------------ loop */

static void wake_app(struct worker *w)
{
	xi_deliver_wake(w);
	xi_rx_wake(w);
}

/* The application's waits read these (api/completions.c): stored only when
 * a copy began or finished (finished: copies reported this turn), so that a
 * long copy costs their spinning reads no cache-line transfers. */
static void publish_gpu(struct worker *w, uint64_t now, int finished)
{
	/* A copy a peer announced to us counts as one of ours: what waits for
	 * its immediate is a copy away too. */
	uint32_t busy = xi_gpu_pending(w->gpu) + xi_notice_expected(w, now);
	if (busy == w->gpu_busy && !finished)
		return;
	bool began = busy && !w->gpu_busy;
	w->gpu_busy = busy;
	atomic_store_explicit(&w->e->gpu_moved_ns, now, memory_order_relaxed);
	atomic_store_explicit(&w->e->gpu_busy, busy, memory_order_release);
	/* A wait that went to sleep before the copies began (a target's, for
	 * the immediate of a copy announced to it) wakes and spins instead. */
	if (began)
		xi_deliver_nudge(w);
}

/* Busy-poll mode with cores to spare: an application waiting for its peer
 * (an immediate's expectation firing, a message) usually answers at once (a
 * ping-pong's pong, a MoE combine after its dispatch). Its submission lands
 * a few hundred ns after our push; without this watch it waits for the rest
 * of the turn and the next round of NIC polls (on tcp a provider progress
 * call of a microsecond or more). So after a turn in which a peer's arrival
 * was handed to the application, take and post what it submits, NICs
 * unpolled, until something is posted or reply_watch_ns pass: nothing that
 * the application waits for can come back from the peer sooner than a
 * round trip after that answer.
 * Only after arrivals handed over, never after a plain write completion:
 * the initiator of a ping-pong gets its write's completion shortly before
 * the pong, which a watch would hold up. Returns the work done. */
static int await_reply(struct worker *w)
{
	const struct mpmc_queue *q = &w->e->subq;
	/* From now, not from the turn's start: on tcp the turn's provider poll
	 * alone can outlast the watch. */
	uint64_t end = xi_now_ns() + w->reply_watch_ns;
	int n = 0;
	const bool pause = xi_spin_pauses();
	for (unsigned i = 1;; i++) {
		if (!xi_mpmc_empty_hint(q)) {
			n += take_submissions(w);
			int posted = xi_path_post_pending(w);
			n += posted;
			/* The answer is out (an expectation re-armed alone is not):
			 * back to the NICs, where its echo and the peer's next
			 * request come in. On shm the target applies writes in its
			 * poll, so a watch held past the answer delays them. */
			if (posted)
				return n;
		}
		/* A clock read (vDSO) every 16 looks keeps the watch cheap. */
		if ((i & 15) == 0 && xi_now_ns() >= end)
			return n;
		if (pause)
			xi_cpu_relax();
	}
}

/* watch: the reply watch may run (not in a turn of the application's own
 * thread, whose answer comes only after the turn returns). */
static int turn(struct worker *w, uint64_t now, bool watch)
{
	int n = 0;
	if (xi_deliver_backlog(w))
		n += xi_deliver_flush(w);
	n += take_submissions(w);
	n += xi_path_post_pending(w);
	/* Receive buffers the application handed back go to the provider after
	 * its submissions: a message's answer (the xfer_send right after the
	 * xfer_recv that returned the buffer) is not held up by the receive
	 * post (on tcp;ofi_rxm a provider call); buffers are many, and the
	 * answer's own answer is a round trip away. */
	n += xi_rx_take_reposts(w);
	bool drained;
	n += poll_nics(w, &drained);
	/* Landings the notices just taken started wait in one batch (as the
	 * posts' kernel jobs do): to the GPU now, once for all of them. */
	xi_gpu_flush(w->gpu);
	/* Liveness verdicts wait for a drained queue: a PONG still queued here
	 * is no miss (core/liveness.c). */
	if (drained)
		w->caught_up_ns = now;
	int copied = poll_gpu(w);
	n += copied;
	if (xi_notice_waiting(w))
		n += xi_notice_flush(w);
	if (xi_op_fifo_head(w))
		n += xi_path_post_pending(w);
	if (now >= w->next_scan_ns) {
		/* Scans are at least SCAN_INTERVAL_NS apart; deadlines are that precise. */
		uint64_t next = scan_deadlines(w, now);
		uint64_t soon = now + SCAN_INTERVAL_NS;
		w->next_scan_ns = next < soon ? soon : next;
	}
	bool reply_due = w->arrivals && (w->cq_pushed || w->inbox_pushed);
	w->arrivals = 0;
	if (w->gpu)
		publish_gpu(w, now, copied);
	wake_app(w);
	if (watch && reply_due && w->reply_watch_ns)
		n += await_reply(w);
	return n;
}

int xi_worker_loop_once(struct worker *w, uint64_t now)
{
	return turn(w, now, true);
}

int xi_worker_loop_driven(struct worker *w, uint64_t now)
{
	return turn(w, now, false);
}

bool xi_worker_copying(const struct worker *w, uint64_t now)
{
	return xi_gpu_pending(w->gpu) || xi_notice_expected(w, now);
}

bool xi_worker_busy(const struct worker *w)
{
	return xi_op_fifo_head(w) || xi_deliver_backlog(w) || xi_gpu_pending(w->gpu) || xi_notice_waiting(w);
}

/* Completes everything still pending with status, waiting a bounded time for
 * posted requests to drain so that none can complete after we return. */
void xi_worker_quiesce(struct worker *w, int status)
{
	xfer_engine_t *e = w->e;
	struct sub s;
	bool drained;
	while (xi_subq_pop(&e->subq, &s)) {
		if (s.kind == SUB_CALL) {
			xi_call_refuse(s.u.call);
			continue;
		}
		xi_sub_unref(e, &s);
		xi_tel_peer_op(w->tel, s.peer, status);
		xi_deliver(w, &s.to, status, s.kind);
	}
	for (struct op *op = xi_op_fifo_head(w); op; op = op->next_post)
		xi_op_fail(op, status);
	uint64_t give_up = xi_now_ns() + 2000000000ull;
	/* Goodbyes get a moment to leave (and shm a few polls to map peers). */
	for (uint64_t until = xi_now_ns() + 300000000ull; xi_hb_goodbye(w) && xi_now_ns() < until;)
		poll_nics(w, &drained);
	for (uint64_t until = xi_now_ns() + 5000000ull; xi_now_ns() < until;)
		poll_nics(w, &drained);
	while (w->nlive && xi_now_ns() < give_up) {
		xi_path_post_pending(w);
		poll_nics(w, &drained);
		poll_gpu(w);
		if (xi_notice_waiting(w))
			xi_notice_flush(w);
		xi_deliver_flush(w);
	}
	/* Whatever is still posted is abandoned: the endpoints close next, after
	 * which nothing can complete. */
	xi_gpu_forget(w->gpu);
	if (w->gpu)
		publish_gpu(w, xi_now_ns(), 0); /* none in flight now: no wait spins for them */
	xi_notice_forget(w);
	xi_ops_abandon(w, status);
	xi_imm_cancel_all(w, status);
	xi_cancel_expire(w, UINT64_MAX, &give_up);
	wake_app(w);
}
