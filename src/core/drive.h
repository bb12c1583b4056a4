/* Application-driven progress (busy_poll 2): a thread spinning in a
 * busy-poll wait runs the worker's turns itself, so that its submissions
 * are posted and its completions reaped on its own core, without the two
 * thread hand-offs (submission queue, completion queue) of each wait.
 *
 * Exactly one thread runs a turn at a time (libfabric is opened
 * FI_THREAD_DOMAIN, struct worker has one owner). The word e->drive says
 * who may:
 *   DRIVE_WORKER  the worker thread (its loop as always);
 *   DRIVE_WANTED  a waiting thread asked; the worker grants between turns;
 *   DRIVE_APP     granted: the worker is parked; an application thread
 *                 that takes DRIVE_APP -> DRIVE_TURN runs one turn and
 *                 puts DRIVE_APP back;
 *   DRIVE_TURN    an application thread is in a turn.
 * The grant outlives the wait that asked for it: a ping-pong's answer,
 * submitted between two waits, is posted by the next wait's first turn
 * with no hand-off at all. The parked worker takes its turns back
 * (DRIVE_APP -> DRIVE_WORKER) once no application turn ran for
 * DRIVE_HOLD_NS, at stop, or when the engine's GPU object gets bound to a
 * thread (its first CUDA use). A window of operations in flight (more than
 * two live) is the worker's too: an application turn that ends with one
 * gives the turns back, and the worker grants none while more than one is
 * live, so that a stream of writes is posted from the worker's core while
 * the application reaps (busy_poll 1's split). It reads the word only every quarter of
 * the hold, so that an application turn's two writes seldom find the line
 * away. Every change of hands is an acquire/release pair on e->drive. */
#ifndef XFER_CORE_DRIVE_H
#define XFER_CORE_DRIVE_H

#include <stdbool.h>

#include "core/objects.h"

enum { DRIVE_WORKER, DRIVE_WANTED, DRIVE_APP, DRIVE_TURN };

struct worker;

/* Application side, from a busy-poll wait: runs one turn if the turns are
 * ours (asking for them first if they are not). Returns true if it ran
 * one. */
bool xi_drive_turn(xfer_engine_t *e);
/* Application side, right after a submission: runs one turn only if the
 * turns are already the application's (never asks for them), so that the
 * submission is posted by the thread that made it instead of waiting for
 * the next wait's first turn. */
bool xi_drive_post(xfer_engine_t *e);
/* Worker side, between its turns: grants a request and stays parked until
 * it takes the turns back. */
void xi_drive_worker(struct worker *w);

#endif
