/* Immediate-counter semantics on top of util/imm_table: arrivals before
 * arming count, an expectation fires exactly once, the excess carries over. */
#ifndef XFER_CORE_IMM_COUNTERS_H
#define XFER_CORE_IMM_COUNTERS_H

#include <stdint.h>

#include "core/objects.h"

struct worker;

/* n arrivals of imm (a write with it, or a notice counting n). */
void xi_imm_arrived(struct worker *w, uint32_t imm, uint32_t n);
void xi_imm_arm(struct worker *w, const struct sub *s);
/* Forgets imm's arrivals (*arrived: how many); an armed expectation
 * completes with -ECANCELED. On the worker (a control call). */
int xi_imm_disarm(struct worker *w, uint32_t imm, uint32_t *arrived);
void xi_imm_expire(struct worker *w, uint64_t now, uint64_t *next_deadline);
void xi_imm_cancel_all(struct worker *w, int status);

#endif
