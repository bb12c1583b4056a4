/* The notice protocol of GPU regions that NICs cannot write in place. Data
 * for such a region lands in its host mirror without its immediate, or is
 * copied GPU to GPU on this host; a NOTICE then tells the owner which
 * ranges to copy to the GPU and how many immediates to count, so that an
 * immediate never runs ahead of the data in GPU memory.
 *  - A staged single or paged write sends its notices as a phase of its own
 *    once all its data landed (several for a large paged write).
 *  - A scatter entry, or a GPU copy, gets one notice, carried by the request
 *    context that carried its data (or reserved for its copy), because
 *    entries are independent.
 * The same notices, with no ranges, carry the immediates of writes into
 * regions written in place when the NICs cannot carry them on a write
 * (nic->imm_by_msg): the op is staged only for that, and its notice goes
 * once every write completed locally.
 * Once an op is cut short (cancel, deadline, stop) no notice goes out, so no
 * immediate counts for bytes the caller gave up on. The message itself is
 * wire/msg.h's; the copies are gpu/gpu_copy.h's. */
#ifndef XFER_CORE_NOTICE_H
#define XFER_CORE_NOTICE_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/msg.h"

struct worker;
struct op;
struct wr;

/* All data of a staged write landed: its notices are next (requeued). */
void xi_notice_phase(struct worker *w, struct op *op);
/* Posts notice k of a staged write on NIC n: 0, -EAGAIN, or the error. */
int xi_notice_post(struct worker *w, struct op *op, uint32_t k, unsigned n);

/* Request wr->slot of wr->op, an immediate with no data (xfer_write_imm, a
 * barrier's member), as a notice alone on NIC wr->nic, for NICs whose writes
 * cannot carry one (nic->imm_by_msg); wr completes it like the write it
 * replaces: 0, -EAGAIN (no credit or bounce buffer yet), or the error. */
int xi_notice_imm(struct worker *w, struct wr *wr);

/* The data of entry wr->slot is in place (wr carried it to a mirror, or its
 * GPU copy finished): its notice goes out when one is due, else wr is freed. */
void xi_notice_landed(struct worker *w, struct wr *wr, bool staged);
/* The GPU copy that wr stands for finished with status. */
void xi_notice_copied(struct worker *w, struct wr *wr, int status);
/* An entry's notice completed at the provider. */
void xi_notice_done(struct worker *w, struct wr *wr, int status);
/* A same-host GPU copy of `bytes` for op has just been issued: a long one
 * is announced to the target (a notice with nothing to count), so that its
 * worker and its waits on the immediate stay awake until the counting
 * notice comes, instead of sleeping through the copy and waking after it.
 * Best effort, and a no-op for a receiver that predates it. */
void xi_notice_ahead(struct worker *w, const struct op *op, uint64_t bytes);
/* A peer announced a copy to us and its count has not come yet (bounded). */
bool xi_notice_expected(const struct worker *w, uint64_t now);
/* Posts waiting notices in order; returns how many left the list. */
int xi_notice_flush(struct worker *w);
bool xi_notice_waiting(const struct worker *w);
/* Stop: waiting notices are abandoned, and landings in flight with them. */
void xi_notice_forget(struct worker *w);

/* A peer's notice arrived (untrusted): copy the ranges from our mirror to
 * the GPU, then count the immediates. One naming no GPU region of ours, or
 * a range outside it, is dropped whole. The copy is a tracked one the
 * worker polls (xi_notice_landed_gpu counts the immediates when it is
 * done), so that the worker never waits for the GPU; it falls back to a
 * synchronous copy only while every landing is in use. */
void xi_notice_received(struct worker *w, const struct xi_notice *n);
/* The copy of landing wr finished with status: count its immediates (or,
 * after a failure, withhold them). */
void xi_notice_landed_gpu(struct worker *w, struct wr *wr, int status);

/* Landings of this worker (only where a GPU copy engine exists). */
int xi_notice_init(struct worker *w);
void xi_notice_free(struct worker *w);

#endif
