/* Immediate counters: how often each 32-bit immediate has arrived, and which
 * immediates a caller is waiting on. Owned by one worker thread; fixed-size
 * open addressing so that arrivals never allocate. */
#ifndef XFER_IMM_TABLE_H
#define XFER_IMM_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/target.h"

struct imm_entry {
	uint32_t imm;
	/* Arrivals not yet consumed by an expectation: 64-bit, so it cannot
	 * wrap (2^64 arrivals: 584 years at a billion a second), and an
	 * expectation after 2^32 arrivals still finds every one of them. */
	uint64_t count;
	uint32_t expected; /* 0: not armed */
	bool used;
	struct xi_target to; /* the armed expectation's completion (deadline UINT64_MAX: none) */
};

struct imm_table {
	struct imm_entry *slots;
	uint32_t mask;
	uint32_t used, limit, armed;
};

int xi_imm_table_init(struct imm_table *t, uint32_t limit);
void xi_imm_table_destroy(struct imm_table *t);
/* Finds the entry for imm, creating it when create is set; NULL when full. */
struct imm_entry *xi_imm_table_get(struct imm_table *t, uint32_t imm, bool create);
/* Frees an entry that is neither armed nor counting. */
void xi_imm_table_release(struct imm_table *t, struct imm_entry *e);

#endif
