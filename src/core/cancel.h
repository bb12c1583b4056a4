/* Cancellation by tag (xfer_cancel): cut short what is not yet posted, then
 * wait until what was posted has drained, so that the cancel's completion
 * means nothing of the cancelled operations can land any more. */
#ifndef XFER_CORE_CANCEL_H
#define XFER_CORE_CANCEL_H

#include <stdint.h>

#include "core/objects.h"

struct worker;
struct op;

void xi_cancel_start(struct worker *w, const struct sub *s);
/* Records past their deadline complete with -ETIMEDOUT and stop tracking
 * their ops; *next lowers to the earliest deadline left. */
void xi_cancel_expire(struct worker *w, uint64_t now, uint64_t *next);

/* op finished: the records it held complete once none waits any more. */
void xi_cancel_release(struct worker *w, struct op *op);

#endif
