/* The submission queue (application threads -> worker) carries a struct sub
 * packed into as few cache lines as its kind and its completion need: an
 * immediate, an expectation or a message of the usual kind (completion by
 * user_data, the default deadline, telemetry on) travels in the one line
 * that also holds the cell's sequence number; a write takes two, a paged
 * write or a callback completion more. Every line a submission writes must
 * move from the submitter's core to the worker's, and the whole 184-byte
 * struct took three: on a ping-pong that hand-off was most of the engine's
 * cost over the raw provider loop (docs/performance.md, host runs). */
#ifndef XFER_CORE_SUBQ_H
#define XFER_CORE_SUBQ_H

#include <stdbool.h>
#include <stddef.h>

#include "core/objects.h"

int xi_subq_init(struct mpmc_queue *q, size_t capacity);
/* false: the queue is full. */
bool xi_subq_push(struct mpmc_queue *q, const struct sub *s);
/* false: the queue is empty. */
bool xi_subq_pop(struct mpmc_queue *q, struct sub *s);
/* The bytes s takes in its cell (for the tests). */
size_t xi_subq_packed_len(const struct sub *s);

#endif
