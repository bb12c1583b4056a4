#include "core/drive.h"

#include <sched.h>

#include "core/loop.h"
#include "core/worker.h"
#include "gpu/gpu_copy.h"
#include "util/sys.h"

/* How long the worker leaves its turns with the application after the last
 * application turn: a wait's answer comes within a few hundred ns of the
 * wait's end; an application that stops waiting gets its engine back
 * after this. */
#define DRIVE_HOLD_NS 20000ull

/* Windowed traffic goes back to the worker. An application turn that
 * ends with more than DRIVE_KEEP_MAX operations live gives the turns
 * back, and the worker grants them only with at most DRIVE_GRANT_MAX
 * live. A ping-pong (one or two live) keeps its turns; a window of 64
 * writes is posted by the worker on its own core while the application
 * reaps, as in busy_poll 1: measured on 16 cores, a thread that both
 * posted each tcp write (an inline sendmsg) and ran a turn per submission
 * moved 1 KiB writes at 0.67x the raw loop (docs/performance.md, branch
 * host8), busy_poll 1 at 1.02-1.06x; with these bounds, 0.99-1.02x
 * (section "main 8fc0a5b"). The gap between the two bounds keeps
 * a window of two or three from moving the turns back and forth. */
#define DRIVE_KEEP_MAX 2u
#define DRIVE_GRANT_MAX 1u

static bool run_turn(xfer_engine_t *e, unsigned st);

bool xi_drive_post(xfer_engine_t *e)
{
	unsigned st = atomic_load_explicit(&e->drive, memory_order_relaxed);
	return st == DRIVE_APP && run_turn(e, st);
}

bool xi_drive_turn(xfer_engine_t *e)
{
	if (!e->drive_ok)
		return false;
	unsigned st = atomic_load_explicit(&e->drive, memory_order_relaxed);
	if (st == DRIVE_WORKER) {
		/* Stop refuses new grants: the worker is quiescing. */
		if (atomic_load_explicit(&e->stopping, memory_order_relaxed))
			return false;
		atomic_compare_exchange_strong_explicit(&e->drive, &st, DRIVE_WANTED, memory_order_relaxed,
							memory_order_relaxed);
		return false;
	}
	if (st != DRIVE_APP)
		return false; /* not granted yet, or another thread's turn */
	return run_turn(e, st);
}

/* st: DRIVE_APP as last read. */
static bool run_turn(xfer_engine_t *e, unsigned st)
{
	if (!atomic_compare_exchange_strong_explicit(&e->drive, &st, DRIVE_TURN, memory_order_acquire,
						     memory_order_relaxed))
		return false;
	/* Ours: the worker is parked and every other application thread sees
	 * DRIVE_TURN. */
	struct worker *w = e->w;
	uint64_t now = xi_now_ns();
	xi_worker_loop_driven(w, now);
	atomic_store_explicit(&e->drive_last_ns, now, memory_order_relaxed);
	/* Give the turns back when this turn made the GPU object's first CUDA
	 * use (gpu_copy.c use_dev sets the context again on whichever thread
	 * calls it: its later turns are the worker's), or when a window of
	 * operations is live (DRIVE_KEEP_MAX). */
	if (xi_gpu_bound(w->gpu) || w->nlive > DRIVE_KEEP_MAX) {
		atomic_store_explicit(&e->drive, DRIVE_WORKER, memory_order_release);
		atomic_store_explicit(&e->drive_back, true, memory_order_release);
	} else {
		atomic_store_explicit(&e->drive, DRIVE_APP, memory_order_release);
	}
	return true;
}

/* Parked: the application runs the turns. Takes them back when none ran
 * for DRIVE_HOLD_NS or at stop; returns at once when the application gave
 * them back (its GPU object got bound, or a window is live). */
static void park(struct worker *w)
{
	xfer_engine_t *e = w->e;
	const bool yields = xi_spin_yields();
	const bool pause = xi_spin_pauses();
	uint64_t look = xi_now_ns() + DRIVE_HOLD_NS / 4;
	for (unsigned i = 1;; i++) {
		if (yields)
			sched_yield(); /* few CPUs: the driving thread may need ours */
		else if (pause)
			xi_cpu_relax();
		if ((i & 15) != 0)
			continue;
		if (atomic_load_explicit(&e->drive_back, memory_order_relaxed)) {
			atomic_store_explicit(&e->drive_back, false, memory_order_relaxed);
			look = 0; /* look at e->drive now */
		}
		uint64_t now = xi_now_ns();
		bool stop = atomic_load_explicit(&e->stopping, memory_order_relaxed);
		if (now < look && !stop)
			continue;
		look = now + DRIVE_HOLD_NS / 4;
		unsigned st = atomic_load_explicit(&e->drive, memory_order_acquire);
		if (st == DRIVE_WORKER || st == DRIVE_WANTED)
			return; /* given back (and maybe asked for again: refused while bound) */
		if (st != DRIVE_APP)
			continue; /* in an application turn: it ends soon */
		uint64_t last = atomic_load_explicit(&e->drive_last_ns, memory_order_relaxed);
		if (!stop && (last > now || now - last < DRIVE_HOLD_NS))
			continue;
		if (atomic_compare_exchange_strong_explicit(&e->drive, &st, DRIVE_WORKER, memory_order_acquire,
							    memory_order_relaxed))
			return;
	}
}

void xi_drive_worker(struct worker *w)
{
	xfer_engine_t *e = w->e;
	unsigned st = atomic_load_explicit(&e->drive, memory_order_relaxed);
	if (st != DRIVE_WANTED)
		return;
	/* The GPU object bound to this thread (its copies' context) stays
	 * here: refuse, and the request stays as it is, costing nothing. */
	if (xi_gpu_bound(w->gpu))
		return;
	/* A window in flight stays with the worker (DRIVE_KEEP_MAX). */
	if (w->nlive > DRIVE_GRANT_MAX)
		return;
	/* The hold counts from the grant until the first application turn. */
	atomic_store_explicit(&e->drive_last_ns, xi_now_ns(), memory_order_relaxed);
	if (!atomic_compare_exchange_strong_explicit(&e->drive, &st, DRIVE_APP, memory_order_release,
						     memory_order_relaxed))
		return;
	park(w);
}
