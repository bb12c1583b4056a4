/* XFER_CQ_BATCH's settings (core/cq_batch.h says what they do). */
#include "core/cq_batch.h"

#include <stdlib.h>

#define CQ_BATCH_MAX 4096u
#define CQ_BATCH_IDLE_NS 2000ull
#define CQ_BATCH_IDLE_MAX_NS 100000ull

/* A whole decimal number from the environment, or def (unset, malformed). */
static unsigned long long env_num(const char *name, unsigned long long def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	unsigned long long x = strtoull(v, &end, 10);
	return *end || *v == '-' ? def : x;
}

void xi_cq_batch_init(struct worker *w)
{
	unsigned long long n = env_num("XFER_CQ_BATCH", 0);
	/* 1 would hold a lone op's completion back: off. */
	w->cqb.n = n < 2 ? 0 : n > CQ_BATCH_MAX ? CQ_BATCH_MAX : (uint32_t)n;
	unsigned long long ns = env_num("XFER_CQ_BATCH_NS", CQ_BATCH_IDLE_NS);
	w->cqb.idle_ns = ns > CQ_BATCH_IDLE_MAX_NS ? CQ_BATCH_IDLE_MAX_NS : ns;
	for (unsigned i = 0; i < XFER_NIC_MAX; i++) {
		w->cqb.read_credits[i] = w->tx.credits[i];
		w->cqb.seen_credits[i] = w->tx.credits[i];
	}
}
