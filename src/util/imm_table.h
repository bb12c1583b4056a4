/* Immediate counters: how often each 32-bit immediate has arrived, and which
 * immediates a caller is waiting on. Owned by one worker thread; fixed-size
 * open addressing so that arrivals never allocate. */
#ifndef XFER_IMM_TABLE_H
#define XFER_IMM_TABLE_H

#include <stdbool.h>
#include <stdint.h>

#include "xfer.h"

struct imm_entry {
	uint32_t imm;
	uint32_t count;    /* arrivals not yet consumed by an expectation */
	uint32_t expected; /* 0: not armed */
	bool used;
	uint64_t deadline_ns; /* UINT64_MAX: none */
	uint64_t user_data;
	xfer_complete_fn cb;
	void *cb_ctx;
	volatile uint64_t *signal;
	uint64_t signal_value;
};

struct imm_table {
	struct imm_entry *slots;
	uint32_t mask;
	uint32_t used, limit, armed;
};

int imm_table_init(struct imm_table *t, uint32_t limit);
void imm_table_destroy(struct imm_table *t);
/* Finds the entry for imm, creating it when create is set; NULL when full. */
struct imm_entry *imm_table_get(struct imm_table *t, uint32_t imm, bool create);
/* Frees an entry that is neither armed nor counting. */
void imm_table_release(struct imm_table *t, struct imm_entry *e);

#endif
