/* Prefiller state. A job is one request id (it may be written to several
 * decode ranks); each decode rank that asked is a destination with its own
 * pages, registration, immediate and cancellation tag. */
#ifndef XFER_KV_PF_H
#define XFER_KV_PF_H

#include "kv_core.h"
#include "kv_stack.h"
#include "xfer_kv.h"

enum kv_dest_state {
	DS_ACTIVE = 1,   /* writing as layers become ready */
	DS_DRAINING = 2, /* stopped; its cancel is draining what was posted */
	DS_QUIESCED = 3, /* stopped and drained; the decoder has been told */
	DS_COMPLETE = 4, /* everything written and completed */
};

enum kv_reply { RP_ACK = 1, RP_FAIL = 2 };

struct kv_job;

struct kv_dest {
	struct kv_dest *next;
	struct kv_job *job;
	xfer_peer_t peer;
	uint64_t engine_id, dseq, tag, deadline;
	uint32_t imm, dst_rank, ctx_cap;
	uint64_t ctx_off;
	uint32_t *dst_pages;
	xfer_rmr_t *kv, *ctx;
	struct xfer_kv_plan *plan;
	uint32_t next_layer, next_seg, outstanding;
	bool ctx_sent, blocked, cancel_pending;
	int state, reply;
	int32_t err;
};

struct kv_job {
	bool used, know_dsts, bound, finished, aborted, cancel_told, new_told;
	uint64_t id, deadline;
	uint32_t tokens, npages, layers_ready, ctx_len, ctx_slot, dst_tp;
	uint64_t expected_mask, attached_mask; /* decode ranks, by tp_rank */
	uint64_t gone_mask; /* decode ranks that cancelled before their request came */
	uint32_t *src_pages;
	struct kv_dest *dests;
	uint32_t app_len;
	uint8_t app[XFER_KV_APP_MAX];
};

/* A request whose page list arrives in several chunks. */
struct kv_partial {
	bool used;
	uint64_t src_id, dseq, t_first;
	uint32_t npages, got;
	uint32_t *pages;
	uint8_t *seen;
	uint8_t *first_msg; /* a copy of one chunk, for the fixed fields */
	size_t first_len;
};

/* Recently finished jobs and cancelled-before-seen requests, so that a late
 * message about them is answered rather than starting something new. */
enum kv_tomb_kind {
	TOMB_JOB = 1,  /* key: a job id that has ended */
	TOMB_DSEQ = 2, /* src_id, key: a decoder's request cancelled before it came */
	TOMB_GONE = 3, /* key: job id, rank: a decode rank that will not ask for it */
};

struct kv_tomb {
	uint32_t kind, rank;
	uint64_t src_id, key;
	uint64_t until;
};

#define KV_TOMBS 4096u
#define KV_TOMB_NS (300ull * 1000000000ull)
#define KV_PARTIAL_NS (10ull * 1000000000ull)

struct xfer_kv_prefiller {
	struct kv_core core;
	struct xfer_kv_pf_config cfg;
	xfer_mr_t *kv_mr, *ctx_mr;
	uint8_t *ctx_mem;
	struct kv_job *jobs;
	struct kv_stack free_ctx;
	struct kv_partial *partials;
	uint32_t npartials;
	struct kv_tomb tombs[KV_TOMBS];
	uint32_t tomb_next;
	uint64_t next_tag;
	struct xfer_kv_pf_event *evq;
	uint32_t ev_head, ev_count, ev_cap;
	bool leaving, bye_sent, left_told;
	uint32_t bye_pending;
	struct xfer_kv_pf_stats st;
};

/* kv_pf_jobs.c (mu held) */
struct kv_job *xi_kv_pf_job_find(xfer_kv_prefiller_t *p, uint64_t id);
struct kv_job *xi_kv_pf_job_new(xfer_kv_prefiller_t *p, uint64_t id);
/* Frees the job once every destination is done and nothing is in flight. */
void xi_kv_pf_job_check(xfer_kv_prefiller_t *p, struct kv_job *j);
void xi_kv_pf_event(xfer_kv_prefiller_t *p, uint32_t type, int32_t status, const struct kv_job *j);
void xi_kv_pf_tomb_add(xfer_kv_prefiller_t *p, uint32_t kind, uint64_t src_id, uint64_t key, uint32_t rank);
bool xi_kv_pf_tomb_has(xfer_kv_prefiller_t *p, uint32_t kind, uint64_t src_id, uint64_t key);

/* kv_pf_submit.c (mu held) */
/* Submits whatever of dest is ready, until the queue is full. */
void xi_kv_pf_pump(xfer_kv_prefiller_t *p, struct kv_dest *dst);
void xi_kv_pf_pump_job(xfer_kv_prefiller_t *p, struct kv_job *j);
/* Stops dest: its cancel drains what was posted, then `reply` goes out. */
void xi_kv_pf_dest_stop(xfer_kv_prefiller_t *p, struct kv_dest *dst, int err, int reply);
void xi_kv_pf_cancel_retry(xfer_kv_prefiller_t *p, struct kv_dest *dst);
void xi_kv_pf_reply(xfer_kv_prefiller_t *p, struct kv_dest *dst, bool quiesced);

/* kv_pf_req.c (mu held) */
void xi_kv_pf_on_req_chunk(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m,
		     const void *raw, size_t len);
void xi_kv_pf_on_cancel(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m);
/* A decoder joined: know it now, so that liveness probes are answered
 * before its first request (some providers detect a dead peer only once it
 * has answered one). */
void xi_kv_pf_on_hello(xfer_kv_prefiller_t *p, uint64_t src_id, const struct kv_msg *m);
void xi_kv_pf_partials_expire(xfer_kv_prefiller_t *p, uint64_t now);

/* kv_pf_ctl.c */
void xi_kv_pf_on_item(void *owner, const struct kv_item *it);
uint64_t xi_kv_pf_on_tick(void *owner, uint64_t now);

#endif
