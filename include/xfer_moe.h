/*
 * xfer_moe — expert-parallel MoE dispatch and combine on top of xfer.
 *
 * Every rank of a group of W ranks holds E/W experts. Dispatch sends each of
 * a rank's tokens to the ranks that hold its top-k experts — once per rank,
 * however many of its experts that rank holds — and lays the received tokens
 * out expert-major for a grouped GEMM. Combine sends each expert output back
 * to the rank the token came from, which sums the top-k outputs weighted, in
 * fp32 and in slot order k = 0..K-1, so that the same inputs give the same
 * bits.
 *
 * One round of dispatch, as seen by rank r (docs/moe.md has the whole
 * protocol and the buffer formulas):
 *   1. route: count the tokens per destination rank and per expert, give each
 *      (token, rank) pair its record slot; the counts form r's route vector;
 *   2. pack: each record (payload, fp8 scales, routing metadata) into r's
 *      send buffer, grouped by destination;
 *   3. the proxy thread scatters the route vector to every rank with an
 *      immediate and, without waiting for anyone's counts, writes the first
 *      `private_tokens` records for each remote rank into r's private slot
 *      there; once every rank's route vector has arrived it knows every
 *      receive offset, writes the rest into the shared overflow area, and
 *      arms one immediate counter per source whose completion releases the
 *      receive flag;
 *   4. receive: once released, the records are shuffled into the expert
 *      layout.
 * Ranks on the same host (same host id) skip the engine: GPU kernels read
 * each other's send buffers and write each other's combine buffers through
 * CUDA IPC (libxfer_moe_cuda.so, python/xfer/moe.py); this library's part is
 * the protocol with the remote ranks, and the whole CPU path.
 *
 * Conventions are those of xfer.h: 0 or a count on success, -errno on error.
 */
#ifndef XFER_MOE_H
#define XFER_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define XFER_MOE_RANKS_MAX 1024
#define XFER_MOE_EXPERTS_MAX 1024
#define XFER_MOE_TOPK_MAX 32
#define XFER_MOE_TOKENS_MAX 32768
#define XFER_MOE_SCALE_BLOCK 128 /* fp8 payloads: one float scale per 128 channels */
#define XFER_MOE_AUTO UINT32_MAX /* a size the module derives from the others */

enum xfer_moe_layout {
	/* expert_x is [L][expert_capacity][hidden]: expert e's rows start at
	 * e * expert_capacity (DeepEP low-latency / pplx-kernels shape) */
	XFER_MOE_PADDED = 0,
	/* expert_x is [expert_capacity][hidden]: expert e's rows follow expert
	 * e-1's, each segment starting on a multiple of expert_align rows */
	XFER_MOE_PACKED = 1,
};

struct xfer_moe_config {
	uint32_t world_size;      /* W ranks */
	uint32_t rank;            /* this rank, < W */
	uint32_t num_experts;     /* E, a multiple of W; rank r holds [r*E/W, (r+1)*E/W) */
	uint32_t topk;            /* K experts per token, <= XFER_MOE_TOPK_MAX */
	uint32_t hidden;          /* H channels per token, a multiple of 16 */
	uint32_t max_tokens;      /* T: most tokens one rank dispatches in one round */
	uint32_t dispatch_bytes;  /* 1 (fp8) or 2 (bf16): bytes per dispatched channel */
	uint32_t scales;          /* 1: records carry H/128 float scales (fp8); 0: none */
	uint32_t combine_bytes;   /* 2 (bf16) */
	uint32_t private_tokens;  /* P: records per source written before any offset is known */
	uint32_t overflow_tokens; /* O: shared overflow records (all remote sources together) */
	uint32_t layout;          /* enum xfer_moe_layout */
	uint32_t expert_capacity; /* padded: rows per expert; packed: rows in all */
	uint32_t expert_align;    /* packed: rows an expert's segment is aligned to (>= 1) */
	uint64_t timeout_ms;      /* deadline of a round, from its route step */
	/* W host ids: ranks with this rank's id are reached through IPC (GPU)
	 * and never through the engine. NULL: every rank is on a host of its own
	 * (every other rank through the engine; the CPU path). Copied. */
	const uint32_t *host_of;
};

/* Defaults: bf16 both ways, padded layout, 30 s, and XFER_MOE_AUTO sizes:
 * P = min(T, 256), O = W*(T-P) (never overflows), expert_capacity W*T
 * (padded) or W*T*K + L*(align-1) (packed), align 1. The rest is 0. */
void xfer_moe_config_init(struct xfer_moe_config *c);
/* 0 or -EINVAL; xfer_moe_config_why names the rule broken (NULL when valid).
 * xfer_moe_config_resolve replaces XFER_MOE_AUTO sizes by their values. */
int xfer_moe_config_check(const struct xfer_moe_config *c);
const char *xfer_moe_config_why(const struct xfer_moe_config *c);
void xfer_moe_config_resolve(struct xfer_moe_config *c);

/* Every buffer size follows from the config (formulas in docs/moe.md). */
struct xfer_moe_sizes {
	uint32_t local_experts;  /* L = E/W */
	uint32_t record_bytes;   /* one dispatched (token, rank) record */
	uint32_t payload_bytes;  /* H*dispatch_bytes rounded up to 16 */
	uint32_t scale_bytes;    /* (H/128)*4 rounded up to 16, or 0 */
	uint32_t meta_bytes;     /* 16 + 8K rounded up to 16 */
	uint32_t combine_row_bytes; /* H*combine_bytes rounded up to 16 */
	uint32_t route_words;    /* u32 words of one route vector */
	uint32_t remote_ranks;   /* ranks reached through the engine */
	uint64_t send_records;   /* T*min(K, W) */
	uint64_t recv_records;   /* W*P + O, 0 without remote ranks */
	uint64_t expert_rows;    /* padded: L*capacity; packed: capacity */
	uint64_t comb_send_rows; /* rows the combine sends through the engine, at most */
	uint64_t comb_recv_rows; /* T*K */
	uint64_t send_bytes, recv_bytes, comb_send_bytes, comb_recv_bytes;
	uint64_t route_vec_bytes;   /* 2 route vectors (parity) */
	uint64_t route_table_bytes; /* 2 x W route vectors (parity) */
};
int xfer_moe_sizes(const struct xfer_moe_config *c, struct xfer_moe_sizes *s);

/*
 * Control words shared by the kernels (GPU, or the CPU path's functions) and
 * the proxy. For a GPU they live in pinned, device-mapped host memory. Kernel
 * words carry round numbers; flags are 1 ("go") or 0 and are reset by the
 * side that waits on them, so that a CUDA graph can wait on a constant.
 */
struct xfer_moe_ctl {
	/* written by the kernels, read by the proxy: the last round that... */
	volatile uint32_t k_route;      /* ...wrote its route vector */
	volatile uint32_t k_packed;     /* ...packed every record for remote ranks */
	volatile uint32_t k_recv_done;  /* ...finished reading its received records */
	volatile uint32_t k_comb_packed;/* ...packed every combine row for remote ranks */
	volatile uint32_t k_comb_done;  /* ...finished its combine */
	volatile uint32_t k_error;      /* first kernel-side error (XFER_MOE_KERR_*), 0: none */
	volatile uint32_t k_error_info; /* its detail (a rank, an expert) */
	volatile uint32_t round;        /* the CPU path's round counter (a GPU keeps its own) */
	uint32_t pad0[8];
	/* written by the proxy (1), awaited and reset (0) by the kernels */
	volatile uint32_t recv_flag;     /* every remote record of this round has landed */
	volatile uint32_t comb_flag;     /* every remote combine row has landed */
	volatile uint32_t tx_ready;      /* the send buffer may be written (initially 1) */
	volatile uint32_t comb_tx_ready; /* the combine send buffer may be written (initially 1) */
	volatile int32_t p_error;        /* the proxy's failure (-errno), 0: none */
	volatile uint32_t p_error_rank;  /* the rank it names, or UINT32_MAX */
	uint32_t pad1[10];
};

enum {
	XFER_MOE_KERR_CAPACITY = 1, /* an expert (info) got more rows than the layout holds, or
				     * (info = 2^31 | rank) a receive buffer overflowed */
	XFER_MOE_KERR_STALE = 2,    /* a record or route vector of rank (info) is from another round */
	XFER_MOE_KERR_TIMEOUT = 3,  /* a kernel waited past the deadline for rank (info) */
};

/* Memory the caller provides (the GPU path allocates it in libxfer_moe_cuda;
 * NULL fields are allocated here, in host memory: the CPU path). Buffers of
 * size 0 in xfer_moe_sizes are not used. */
struct xfer_moe_buffers {
	void *send, *recv, *comb_send, *comb_recv; /* host or device */
	void *route_vec, *route_table;             /* host */
	struct xfer_moe_ctl *ctl;                  /* host (device-mapped for a GPU) */
};

typedef struct xfer_moe xfer_moe_t;

/* Watchdog hook for the GPU path: when a round fails, the proxy calls it so
 * that whatever a GPU stream waits on is released (the kernels then see
 * ctl->p_error and produce empty outputs). Runs on the proxy thread. */
typedef void (*xfer_moe_release_fn)(void *ctx);

/* Creates the engine (attr: NULL for defaults and XFER_* variables; its
 * on_peer_down is taken over) and registers the buffers. */
int xfer_moe_create(const struct xfer_moe_config *c, const struct xfer_attr *attr,
		    const struct xfer_moe_buffers *b, xfer_moe_t **out);
void xfer_moe_set_release(xfer_moe_t *m, xfer_moe_release_fn fn, void *ctx);
/* This rank's connection bytes (engine address and region descriptors) for
 * every other rank; -ENOSPC with *need when cap is too small. */
int xfer_moe_local_info(const xfer_moe_t *m, void *buf, size_t cap, size_t *need);
/* Every rank's connection bytes, in rank order (this rank's own ignored):
 * adds the peers, imports their regions, starts the proxy thread. */
int xfer_moe_connect(xfer_moe_t *m, const void *const *infos, const size_t *lens);
/* 0, or the failure that ended the module (it is final): -errno, with a
 * message naming the rank and round in msg, and the rank in *rank
 * (UINT32_MAX when none is to blame). Any argument may be NULL. */
int xfer_moe_status(const xfer_moe_t *m, char *msg, size_t cap, uint32_t *rank);
/* The buffers in use, including those allocated here. */
void xfer_moe_get_buffers(const xfer_moe_t *m, struct xfer_moe_buffers *b);
xfer_engine_t *xfer_moe_engine(const xfer_moe_t *m);
/* Stops the proxy, destroys the engine, frees what it allocated. */
void xfer_moe_destroy(xfer_moe_t *m);

/* What the proxy did, summed over rounds (CLOCK_MONOTONIC ns). busy_ns is
 * time spent acting (posting, planning); the rest it waited. */
struct xfer_moe_stats {
	uint64_t rounds, combines; /* rounds the proxy saw begin; combines it sent */
	uint64_t busy_ns;           /* acting on behalf of the rounds */
	uint64_t route_to_rows_ns;  /* route vector seen -> every route vector in */
	uint64_t route_to_recv_ns;  /* route vector seen -> receive flag released */
	uint64_t comb_to_flag_ns;   /* combine packed -> combine flag released */
	uint64_t private_records, overflow_records; /* sent through the engine */
	uint64_t bytes_sent;
};
void xfer_moe_get_stats(const xfer_moe_t *m, struct xfer_moe_stats *s);
/* Diagnostics: one line on what the proxy has done of the rounds in flight
 * and what each still waits for (route vectors, tokens, CONS, combine rows,
 * its own scatters), and its stats; for a log when a round seems stuck.
 * Returns the length written to buf (truncated to cap), or -EINVAL. */
int xfer_moe_debug_state(const xfer_moe_t *m, char *buf, size_t cap);

/* ------------------------------------------------------------- CPU path */
/*
 * The same protocol with host tensors, packing and unpacking on the calling
 * thread. Only with host buffers and every other rank remote (host_of NULL).
 * Calls on one module follow dispatch_send, dispatch_recv, [combine_send,
 * combine_recv], dispatch_send, ... Pointers are to contiguous row-major
 * arrays and are read during the call only.
 */
struct xfer_moe_tokens {
	uint32_t n;              /* tokens, <= max_tokens */
	const void *x;           /* [n][H] elements of dispatch_bytes */
	const float *scales;     /* [n][H/128] when config.scales */
	const void *topk_idx;    /* [n][K] int32 or int64; < 0: no expert */
	uint32_t idx_bytes;      /* 4 or 8 */
};
struct xfer_moe_expert_out {
	void *x;                 /* expert_rows x H elements of dispatch_bytes */
	float *scales;           /* expert_rows x H/128 when config.scales */
	int32_t *counts;         /* [L] rows per local expert */
	int32_t *offsets;        /* [L+1] first row of each expert, NULL allowed */
	int32_t *src_rank;       /* [expert_rows] rank each row came from, NULL allowed */
	int32_t *src_token;      /* [expert_rows] its token index there, NULL allowed */
};
int xfer_moe_cpu_dispatch_send(xfer_moe_t *m, const struct xfer_moe_tokens *t);
int xfer_moe_cpu_dispatch_recv(xfer_moe_t *m, const struct xfer_moe_expert_out *o);
/* expert_out: expert_rows x H bf16, rows as dispatch laid them out. */
int xfer_moe_cpu_combine_send(xfer_moe_t *m, const void *expert_out);
/* out: [n][H] bf16 = sum over k of weights[t][k] * expert output, fp32. */
int xfer_moe_cpu_combine_recv(xfer_moe_t *m, const float *weights, void *out);

#ifdef __cplusplus
}
#endif
#endif
