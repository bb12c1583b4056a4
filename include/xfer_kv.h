/*
 * xfer_kv — KV-cache transfer for prefill/decode disaggregation, on top of xfer.
 *
 * A decode rank owns a pool of KV pages. For each request it allocates pages,
 * sends every prefill rank that holds some of its heads a request message
 * (its page indices, its layout, a region descriptor and the immediate to
 * use), and waits for an exact count of immediates. A prefill rank, after
 * each layer of its prefill, writes that layer's pages straight into the
 * decode rank's memory with paged WRITEs, then writes the extra context
 * (last hidden state, first token) as the final write. Nothing depends on
 * the order in which writes land.
 *
 * Prefill and decode may use different tensor parallelism: with GQA each
 * prefill rank writes only the heads the destination holds, as contiguous
 * head ranges where the layouts allow it; with MLA (the same latent on every
 * rank) each decode rank is written by exactly one prefill rank.
 *
 * A request that is cancelled, times out or loses a prefill rank gives its
 * pages back only once nothing more can land in them: every prefill rank
 * involved has confirmed that its writes have drained, or the registration
 * that rank writes through has been revoked (xfer_mr_revoke).
 *
 * Conventions are those of xfer.h: 0 or a count on success, -errno on error.
 * Every function is thread-safe. Each decoder or prefiller runs one control
 * thread of its own and an xfer engine that it creates.
 */
#ifndef XFER_KV_H
#define XFER_KV_H

#include <stddef.h>
#include <stdint.h>

#include "xfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ layout */

enum xfer_kv_kind {
	XFER_KV_GQA = 1, /* K and V for each of kv_heads heads, sharded by head */
	XFER_KV_MLA = 2, /* one compressed latent per token, identical on every rank */
};

#define XFER_KV_TP_MAX 64
#define XFER_KV_HEADS_MAX 256
#define XFER_KV_SEGS_MAX (2 * XFER_KV_HEADS_MAX)

/*
 * One rank's KV cache. Byte offset of element e of token t of head h (local
 * index among the heads this rank holds), K (c = 0) or V (c = 1), in page p
 * of layer l:
 *
 *   separate (fused = 0):  ((l*2 + c)*pages + p)*page_bytes + h*head_bytes + t*row + e*dtype
 *   fused    (fused = 1):  (l*pages + p)*page_bytes + (h*2 + c)*head_bytes + t*row + e*dtype
 *   MLA:                   (l*pages + p)*page_bytes + t*row + e*dtype
 *
 * with row = head_dim*dtype_bytes, head_bytes = page_tokens*row and
 * page_bytes = local heads * head_bytes (times 2 when fused). Heads are the
 * outer dimension of a page so that a run of heads is one contiguous write.
 *
 * Head sharding: with tp_size <= kv_heads (dividing it) rank r holds heads
 * [r*kv_heads/tp_size, (r+1)*kv_heads/tp_size); with tp_size > kv_heads
 * (a multiple of it) each head is replicated and rank r holds head
 * r / (tp_size/kv_heads). MLA layouts have kv_heads = 1, held by every rank.
 */
struct xfer_kv_layout {
	uint32_t kind;        /* enum xfer_kv_kind */
	uint32_t layers;
	uint32_t pages;       /* pages per layer in this rank's pool */
	uint32_t page_tokens; /* tokens per page; the same on both sides */
	uint32_t kv_heads;    /* KV heads of the whole model (MLA: 1) */
	uint32_t head_dim;    /* elements per head and token (MLA: latent width) */
	uint32_t dtype_bytes;
	uint32_t fused;       /* GQA only: K and V of a head side by side in one plane */
	uint32_t tp_size, tp_rank;
};

/* 0, or -EINVAL naming nothing more; xfer_kv_layout_why says which rule. */
int xfer_kv_layout_check(const struct xfer_kv_layout *l);
const char *xfer_kv_layout_why(const struct xfer_kv_layout *l);
/* Bytes of the whole pool this layout describes. */
uint64_t xfer_kv_layout_bytes(const struct xfer_kv_layout *l);
/* Heads this rank holds: [*first, *first + return value). */
uint32_t xfer_kv_local_heads(const struct xfer_kv_layout *l, uint32_t *first);
/* Offset of token 0 of global head `head`, component c (0 K, 1 V; MLA: 0) in
 * page p of layer l; UINT64_MAX when this rank does not hold that head. */
uint64_t xfer_kv_offset(const struct xfer_kv_layout *l, uint32_t layer, uint32_t page,
			uint32_t head, uint32_t c);
/* Bytes of one head's K (or V, or MLA latent) in one page. */
uint64_t xfer_kv_head_bytes(const struct xfer_kv_layout *l);

/* One paged write per layer: for layer l, page pair i goes from
 * src + l*src_layer_stride + src_off + src_page[i]*src_page_stride
 * to dst + l*dst_layer_stride + dst_off + dst_page[i]*dst_page_stride. */
struct xfer_kv_seg {
	uint64_t src_off, dst_off, len;
};

struct xfer_kv_plan {
	uint32_t nsegs;  /* 0: this source rank writes no heads to that destination */
	uint32_t writes_ctx; /* this source rank writes the destination's extra context */
	uint64_t src_layer_stride, dst_layer_stride;
	uint64_t src_page_stride, dst_page_stride;
	struct xfer_kv_seg segs[XFER_KV_SEGS_MAX];
};

/* What source rank src (src->tp_rank) writes to destination rank dst: the
 * heads it is assigned among those dst holds, merged into the fewest
 * contiguous runs. -EINVAL when the two layouts cannot exchange pages. */
int xfer_kv_plan(const struct xfer_kv_layout *src, const struct xfer_kv_layout *dst,
		 struct xfer_kv_plan *out);
/* Immediates destination dst expects from source rank src for npages pages. */
uint64_t xfer_kv_plan_count(const struct xfer_kv_plan *p, uint32_t layers, uint32_t npages);

/* ---------------------------------------------------------------- decoder */

typedef struct xfer_kv_decoder xfer_kv_decoder_t;

struct xfer_kv_dec_config {
	struct xfer_kv_layout layout; /* this decode rank */
	void *kv;                     /* xfer_kv_layout_bytes(&layout) bytes */
	uint32_t ctx_bytes;           /* extra context per request; 0: none */
	uint32_t max_requests;        /* admitted and not yet released */
	uint32_t imm_base, imm_span;  /* immediates used: imm_base + [0, imm_span) */
	uint64_t cancel_ms;           /* an abort waits this long for confirmations */
};
void xfer_kv_dec_config_init(struct xfer_kv_dec_config *c);

/* Creates the decoder and its engine from attr (the application's on_recv
 * and on_peer_down still get every message and peer failure that is not
 * the module's). */
int xfer_kv_decoder_create(const struct xfer_kv_dec_config *cfg, const struct xfer_attr *attr,
			   xfer_kv_decoder_t **out);
/* Stops the engine first (nothing lands afterwards), then frees everything. */
void xfer_kv_decoder_destroy(xfer_kv_decoder_t *d);
xfer_engine_t *xfer_kv_decoder_engine(xfer_kv_decoder_t *d);

/* A prefill instance: one entry per TP rank, in rank order. */
struct xfer_kv_rank {
	const void *addr; /* xfer_engine_addr() bytes of that rank's engine */
	size_t addr_len;
	struct xfer_kv_layout layout;
};

enum xfer_kv_group_state {
	XFER_KV_GROUP_LIVE = 1,
	XFER_KV_GROUP_LEFT = 2, /* a rank said goodbye: admissions are refused */
	XFER_KV_GROUP_DEAD = 3, /* a rank failed: admissions are refused */
};

/* A prefill instance joins (any time, decoders keep running). */
int xfer_kv_dec_join(xfer_kv_decoder_t *d, const struct xfer_kv_rank *ranks, uint32_t n,
		     uint32_t *group);
/* It leaves: its requests are aborted (each still ends with an event) and
 * its peers are removed once nothing refers to them. */
int xfer_kv_dec_leave(xfer_kv_decoder_t *d, uint32_t group);
/* enum xfer_kv_group_state, or -ENOENT. */
int xfer_kv_dec_group_state(xfer_kv_decoder_t *d, uint32_t group);

#define XFER_KV_APP_MAX 1024

struct xfer_kv_request {
	uint64_t id;         /* the application's id, unique per attempt across decoders */
	uint32_t group;      /* the prefill instance that computes it */
	uint32_t tokens;     /* prompt length: ceil(tokens/page_tokens) pages */
	uint64_t timeout_ms; /* the request ends (done or failed) within this; 0: 30 s */
	const void *app;     /* opaque bytes for the prefiller (up to XFER_KV_APP_MAX) */
	uint32_t app_len;
};

/* Allocates pages and a context slot, arms the immediate counter and sends
 * the request to every prefill rank that writes to this rank. -ENOSPC: no
 * free pages or request slots; -EEXIST: id in use; -XFER_EPEER / -ESHUTDOWN:
 * the group is dead or left. */
int xfer_kv_dec_admit(xfer_kv_decoder_t *d, const struct xfer_kv_request *r);
/* Aborts a request: its event follows once its pages are safe to reuse.
 * -EALREADY once its event is queued, -ENOENT for no such id. */
int xfer_kv_dec_cancel(xfer_kv_decoder_t *d, uint64_t id);

/* Exactly one per admitted request. On success the pages hold the KV cache
 * and ctx the extra context; on failure nothing can land in them any more. */
struct xfer_kv_dec_event {
	uint64_t id;
	int32_t status;       /* 0, -ECANCELED, -ETIMEDOUT, -XFER_EPEER, or the prefiller's error */
	uint32_t npages;
	const uint32_t *pages; /* valid until xfer_kv_dec_release */
	void *ctx;            /* ctx_bytes bytes, valid until release */
	uint64_t elapsed_ns;  /* from admission to this event */
};
/* Takes up to max events, waiting up to timeout_ms for the first; 0 when none. */
int xfer_kv_dec_poll(xfer_kv_decoder_t *d, struct xfer_kv_dec_event *ev, int max,
		     uint64_t timeout_ms);
/* Returns the request's pages and context slot to the pool once its event
 * has been taken by xfer_kv_dec_poll (-EBUSY before). */
int xfer_kv_dec_release(xfer_kv_decoder_t *d, uint64_t id);
/* Pages of an admitted request, for the application's block table. */
int xfer_kv_dec_pages(xfer_kv_decoder_t *d, uint64_t id, const uint32_t **pages, uint32_t *n);
uint32_t xfer_kv_dec_free_pages(xfer_kv_decoder_t *d);

struct xfer_kv_dec_stats {
	uint64_t admitted, completed, failed, cancelled;
	uint64_t cancel_acks;   /* aborts confirmed by the prefiller */
	uint64_t revocations;   /* registrations withdrawn from unresponsive or dead prefillers */
	uint64_t bytes_expected; /* KV bytes of completed requests */
	uint64_t msgs_dropped;  /* malformed or unexpected messages */
};
void xfer_kv_dec_stats(xfer_kv_decoder_t *d, struct xfer_kv_dec_stats *out);

/* -------------------------------------------------------------- prefiller */

typedef struct xfer_kv_prefiller xfer_kv_prefiller_t;

struct xfer_kv_pf_config {
	struct xfer_kv_layout layout; /* this prefill rank */
	void *kv;                     /* xfer_kv_layout_bytes(&layout) bytes */
	uint32_t ctx_bytes;           /* largest extra context (xfer_kv_pf_finish) */
	uint32_t max_jobs;            /* requests in progress */
	uint64_t job_timeout_ms;      /* a job whose decode ranks do not all ask gives up after */
};
void xfer_kv_pf_config_init(struct xfer_kv_pf_config *c);

int xfer_kv_prefiller_create(const struct xfer_kv_pf_config *cfg, const struct xfer_attr *attr,
			     xfer_kv_prefiller_t **out);
void xfer_kv_prefiller_destroy(xfer_kv_prefiller_t *p);
xfer_engine_t *xfer_kv_prefiller_engine(xfer_kv_prefiller_t *p);

enum xfer_kv_pf_event_type {
	XFER_KV_PF_NEW = 1,       /* a decode rank asked for request `id`: start its prefill */
	XFER_KV_PF_CANCELLED = 2, /* every decode rank of `id` gave up: its prefill may stop */
	XFER_KV_PF_DONE = 3,      /* nothing of `id` is in flight any more: its pages are free */
	XFER_KV_PF_LEFT = 4,      /* after xfer_kv_pf_leave: drained, decoders told */
};

struct xfer_kv_pf_event {
	uint32_t type;
	int32_t status; /* DONE: 0 when every decode rank got everything */
	uint64_t id;
	uint32_t tokens, npages;
	uint32_t app_len;
	uint8_t app[XFER_KV_APP_MAX];
};
int xfer_kv_pf_poll(xfer_kv_prefiller_t *p, struct xfer_kv_pf_event *ev, int max,
		    uint64_t timeout_ms);

/* The prefill's own pages for request id (the list is copied; the pages
 * themselves must stay untouched until DONE). May come before or after NEW;
 * -ESTALE when the request has already ended (every decode rank gave up). */
int xfer_kv_pf_bind(xfer_kv_prefiller_t *p, uint64_t id, const uint32_t *pages, uint32_t n);
/* Layers [0, layers) of id are computed: their writes go out now. It never
 * waits for the network (a full submission queue is retried by the control
 * thread), only, briefly, for the prefiller's lock, so a per-layer watcher
 * callback (a GPU progress flag) can drive it from any thread. */
int xfer_kv_pf_layers_done(xfer_kv_prefiller_t *p, uint64_t id, uint32_t layers);
/* Every layer is done; ctx (len bytes, copied) is written as the final write. */
int xfer_kv_pf_finish(xfer_kv_prefiller_t *p, uint64_t id, const void *ctx, uint32_t len);
/* Refuses new requests, lets the jobs in progress finish, then says goodbye
 * to every decoder it knows (XFER_KV_PF_LEFT follows). */
int xfer_kv_pf_leave(xfer_kv_prefiller_t *p);

struct xfer_kv_pf_stats {
	uint64_t jobs, jobs_failed, requests, cancels;
	uint64_t writes, bytes; /* paged and context writes submitted */
	uint64_t writes_cut;    /* writes a cancellation cut short before all of it was posted */
	uint64_t msgs_dropped;
};
void xfer_kv_pf_stats(xfer_kv_prefiller_t *p, struct xfer_kv_pf_stats *out);

#ifdef __cplusplus
}
#endif
#endif
