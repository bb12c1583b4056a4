/* Operations on the worker: the preallocated pool, the in-flight list that
 * deadline, cancel and peer-death scans walk, the posting FIFO, and an op's
 * end. An op is finished when every request it posted (and every notice and
 * GPU copy it started) has completed; only then are its references
 * released. Telling the user early (deadline, peer death) does not end it:
 * the provider may still be reading its source. */
#ifndef XFER_CORE_OP_H
#define XFER_CORE_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/objects.h"

struct worker;
struct op;

int xi_ops_init(struct worker *w);
void xi_ops_free(struct worker *w);
/* A free op for s, on the in-flight list, with nothing to post yet; NULL
 * when the pool is empty. */
struct op *xi_op_start(struct worker *w, const struct sub *s);
/* At the tail of the posting FIFO; xi_op_fifo_head/_pop take it out. */
void xi_op_enqueue(struct worker *w, struct op *op);
struct op *xi_op_fifo_head(const struct worker *w);
void xi_op_fifo_pop(struct worker *w);
/* A request of op was handed to the NIC: counted (and stamped when tracing). */
void xi_op_posted(struct op *op);
/* Tells the user now (deadline, peer death); the op lives on until drained. */
void xi_op_complete_early(struct worker *w, struct op *op, int status);
/* Finishes op if nothing of it is outstanding; true when it did. */
bool xi_op_try_finish(struct worker *w, struct op *op);
/* Releases op's references and tells the user (unless told early). */
void xi_op_finish(struct worker *w, struct op *op);
/* Stop, after the bounded wait: every op still in flight finishes now with
 * status (its requests are abandoned), and the FIFO empties. */
void xi_ops_abandon(struct worker *w, int status);
/* Scatter entry i's status, while the caller's array may still be read. */
void xi_op_entry_status(struct op *op, uint32_t i, int status);
/* The peer request i of op goes to (scatter and barrier: its member). */
uint32_t xi_op_peer_of(const struct op *op, uint32_t i);
/* Scatter and barrier: one member's failure does not stop the others. */
bool xi_op_multi_peer(const struct op *op);

/* The references a submission holds from its push to its op's end (source
 * region, peer, group and every member): removing any of them meanwhile
 * fails with -EBUSY. */
void xi_sub_ref(xfer_engine_t *e, const struct sub *s);
void xi_sub_unref(xfer_engine_t *e, const struct sub *s);
/* The submitter takes its references back: the queue refused the push. */
void xi_sub_unref_refused(xfer_engine_t *e, const struct sub *s);

#endif
