/* The MoE module's private header: its state, the route and plan math shared
 * by the proxy and the CPU path, and the proxy's entry points. Built on the
 * public API (xfer.h) only. */
#ifndef XFER_MOE_PRIV_H
#define XFER_MOE_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "moe_format.h"
#include "xfer.h"
#include "xfer_moe.h"

/* Expert index i of a topk_idx array of int32 (idx_bytes 4) or int64 (8). */
static inline int64_t moe_topk_at(const void *idx, uint32_t idx_bytes, uint64_t i)
{
	return idx_bytes == 8 ? ((const int64_t *)idx)[i] : ((const int32_t *)idx)[i];
}

/* The control words between the kernels (or the CPU path) and the proxy:
 * a release store publishes what was written before it, an acquire load
 * sees it (they cross threads, and with a GPU, PCIe). */
static inline uint32_t moe_load_acq(volatile uint32_t *p)
{
	return atomic_load_explicit((_Atomic uint32_t *)p, memory_order_acquire);
}

static inline void moe_store_rel(volatile uint32_t *p, uint32_t v)
{
	atomic_store_explicit((_Atomic uint32_t *)p, v, memory_order_release);
}

/* ---------------------------------------------------------------- route */

/* One round's routing at the sender: per (token, slot) where its record and
 * its combine row are, and the route vector. Arrays of T*K entries. */
struct moe_route {
	int32_t *rec;      /* record index in the send buffer; -1: slot has no expert */
	uint8_t *lead;     /* 1: the first slot of its record (the one that packs it) */
	uint8_t *q;        /* position of the slot among its record's pairs */
	uint32_t *j;       /* ordinal among this rank's pairs to the slot's expert */
	uint32_t *pb;      /* the record's pair base (ordinal of its first pair) */
	int32_t *comb;     /* row of this pair's output in the combine receive buffer */
	uint32_t *so;      /* [W] first record of each destination in the send buffer */
	uint32_t *cbo;     /* [W] first combine row of each destination */
};

/* Fills r and the route vector rv (route_words) for n tokens; topk_idx is
 * int32 (idx_bytes 4) or int64 (8). Slots with an expert out of [0, E) are
 * empty. */
void xi_moe_route_compute(const struct xfer_moe_config *c, uint32_t round, uint32_t n,
		       const void *topk_idx, uint32_t idx_bytes, struct moe_route *r, uint32_t *rv);

/* ----------------------------------------------------------------- plan */

/* What receiver `me` makes of every source's route vector (rows[s] is s's). */
struct moe_plan {
	uint32_t *c;        /* [W] records from s */
	uint32_t *pr;       /* [W] pairs from s */
	uint64_t *first;    /* [W] first record of s: in s's send buffer (same host) or our private slot */
	uint64_t *ovf;      /* [W] first overflow record of s in our receive buffer (remote, c > P) */
	uint32_t *cb;       /* [W] first row of our pairs in s's combine receive buffer */
	uint32_t *qbase;    /* [W] first row of s in our combine pair stream (remote ranks first) */
	uint32_t *counts;   /* [L] rows per local expert */
	uint32_t *offsets;  /* [L+1] first row of each local expert */
	uint32_t *base;     /* [W*L] first row of s's pairs for expert e: base[s*L+e] */
	uint32_t q_remote, q_total, ovf_total;
	uint64_t rows_used;
};

/* Returns 0, or -ENOSPC with *why_rank = the expert (capacity) that overflowed. */
int xi_moe_plan_recv(const struct xfer_moe_config *c, const struct xfer_moe_sizes *z, uint32_t me,
		  const uint32_t *const *rows, struct moe_plan *p, uint32_t *why);

/* Where sender `me`'s overflow records land at every remote destination d
 * (record index in d's receive buffer), and whether every receiver's
 * overflow area holds what it gets: 0, or -ENOSPC with *bad = that rank. */
int xi_moe_plan_send(const struct xfer_moe_config *c, uint32_t me, const uint32_t *const *rows,
		  uint64_t *ovf_dst, uint32_t *bad);

/* Whether every rank's experts hold the rows the round gives them: 0, or
 * -ENOSPC with *bad = the first expert that overflows. */
int xi_moe_plan_capacity(const struct xfer_moe_config *c, const uint32_t *const *rows, uint32_t *bad);

/* Checks a route vector read from another rank (untrusted bytes): its stamp,
 * and counts that add up within the bounds its buffers assume. */
int xi_moe_route_valid(const struct xfer_moe_config *c, uint32_t round, uint32_t src,
		    const uint32_t *row);

/* ----------------------------------------------------------- the module */

enum moe_op_kind {
	MOE_OP_E_ROUTE = 1, MOE_OP_E_DATA, MOE_OP_E_CONS, MOE_OP_E_COMB,
	MOE_OP_S_ROUTE, MOE_OP_S_PRIV, MOE_OP_S_OVF, MOE_OP_S_CONS, MOE_OP_S_COMB,
	MOE_OP_BYE,   /* destroy's farewell: an expectation per rank and a barrier */
	MOE_OP_ABORT, /* another rank failed and names the culprit */
	MOE_OP_FAILED, /* another rank has failed too (or left): it needs nothing more from us */
};

/* The scatters the proxy posts in a round, one entry list each. */
enum moe_ent { MOE_ENT_ROUTE, MOE_ENT_PRIV, MOE_ENT_OVF, MOE_ENT_CONS, MOE_ENT_COMB, MOE_ENT_N };

/* One dispatch round (and its combine) as the proxy drives it; two slots,
 * by round parity, because a round's combine overlaps the next one's start. */
struct moe_slot {
	uint32_t round;
	bool active;
	uint32_t steps;            /* MOE_ST_* done */
	uint64_t t_start, t_comb;  /* when its route vector / combine rows were seen */
	atomic_uint ops;           /* engine operations of this slot not yet completed */
	atomic_uint route_left;    /* route vectors still to arrive */
	atomic_uint data_left;     /* per-source record counters, plus a guard */
	atomic_uint tx_left;       /* scatters out of the send buffer, plus a guard */
	atomic_uint cons_left;     /* destinations still to say they read our records */
	atomic_uint comb_left;     /* combine counters, plus a guard */
	atomic_uint comb_tx_left;  /* the combine scatter */
	uint32_t *rv;              /* this round's route vector (ours, in rtab) */
	uint32_t *cons_from;       /* [W] 1: that destination owes us a CONS */
	struct moe_plan plan;
	uint64_t *ovf_dst;         /* [W] */
	struct xfer_scatter_entry *ent[MOE_ENT_N]; /* a scatter's W entries, per kind */
	int32_t *status[MOE_ENT_N];                /* and their per-entry results */
};

struct moe_peer {
	xfer_peer_t peer;
	uint32_t member;          /* index in the group */
	bool remote;              /* reached through the engine (another host) */
	atomic_bool concluded;    /* it has failed too, or left: a failed rank may now leave */
	xfer_rmr_t *recv, *comb_recv, *rtab;
};

struct xfer_moe {
	struct xfer_moe_config cfg;
	struct xfer_moe_sizes z;
	uint32_t *host_of;        /* NULL or W entries (cfg.host_of points here) */
	xfer_engine_t *e;
	struct xfer_moe_buffers b;
	void *owned[8];           /* what create allocated */
	xfer_mr_t *mr_send, *mr_recv, *mr_comb_send, *mr_comb_recv, *mr_rv, *mr_rtab;
	struct moe_peer *peers;   /* [W]; ours unused */
	xfer_group_t *group;      /* every other rank, in rank order */
	uint32_t n_remote;
	bool connected;
	pthread_t thread;
	atomic_bool stop;
	/* destroy: the proxy posts what the kernels asked for (draining), says
	 * so (drained), then every rank waits for every other's farewell, so
	 * that no rank leaves while another still waits for its last rows */
	atomic_bool draining, drained, closing;
	atomic_uint bye_left, bye_ops;
	bool abort_armed, abort_sent; /* the proxy's own */
	atomic_bool abort_told;       /* the failure has been posted to every rank */
	atomic_uint abort_from;       /* 1 + the rank another rank blames, 0: none */
	_Atomic uint64_t abort_t;     /* when that came */
	atomic_uint concluded;        /* how many peers are concluded (moe_peer.concluded) */
	struct moe_slot slot[2];
	uint32_t next_round;      /* the next round the proxy waits for */
	/* failure: first wins, final */
	atomic_int failed;
	pthread_mutex_t fail_lock;
	char fail_msg[256];
	uint32_t fail_rank;
	bool released;
	xfer_moe_release_fn release_fn;
	void *release_ctx;
	/* stats */
	struct xfer_moe_stats st;
	pthread_mutex_t st_lock;
	/* the CPU path */
	struct moe_route route;
	struct moe_plan plan;
	uint32_t cpu_n;           /* tokens of the current round */
	uint32_t cpu_state;       /* which call may come next */
	uint32_t **rows;          /* [W] the proxy's view of the current round's route vectors */
	uint32_t **cpu_rows;      /* [W] the same for the CPU path's receive (another thread) */
	float *cpu_acc;           /* [H] the combine's fp32 accumulator */
	int32_t *cpu_rowq;        /* [expert_rows] each row's index in the combine pair stream */
};

/* Allocates a plan's arrays (freed with xi_moe_plan_free). */
int xi_moe_plan_alloc(struct moe_plan *p, uint32_t world, uint32_t local_experts);
void xi_moe_plan_free(struct moe_plan *p);
int xi_moe_route_alloc(struct moe_route *r, uint32_t tokens, uint32_t topk, uint32_t world);
void xi_moe_route_free(struct moe_route *r);

/* Records the module's failure (the first one wins) and releases every flag
 * a kernel may wait on; fmt names the rank and the round. */
void xi_moe_fail(struct xfer_moe *m, int err, uint32_t rank, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Marks rank r concluded (it has failed too, or left), once. */
void xi_moe_conclude(struct xfer_moe *m, uint32_t r);

/* The proxy thread (moe_proxy.c). */
void *xi_moe_proxy_main(void *arg);
/* Engine completion callback of every operation the proxy posts. */
void xi_moe_proxy_cb(void *ctx, const struct xfer_cqe *cqe);

uint64_t xi_moe_now_ns(void);
/* Rank r's route vector of round `round` as this rank sees it: ours in
 * route_vec, another's in route_table (where the engine or IPC put it). */
static inline uint32_t *moe_route_row(const struct xfer_moe *m, uint32_t round, uint32_t r)
{
	uint32_t RV = m->z.route_words;
	if (r == m->cfg.rank)
		return (uint32_t *)m->b.route_vec + (round & 1) * RV;
	return (uint32_t *)m->b.route_table + ((uint64_t)(round & 1) * m->cfg.world_size + r) * RV;
}
/* Rank of a group member. */
uint32_t xi_moe_member_rank(const struct xfer_moe *m, uint32_t member);

#endif
