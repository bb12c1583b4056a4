/* The worker's private state: the types every core module works on, and
 * nothing else (each module's functions are in its own header). Only the
 * worker thread touches it, and only files of src/core/ include this header
 * (tests/check_layers.py enforces that). Each block of struct worker says
 * which module owns it; no other module writes it. */
#ifndef XFER_CORE_WORKER_H
#define XFER_CORE_WORKER_H

#include "core/objects.h"
#include "util/imm_table.h"

struct op_path;   /* core/path.h */
struct xi_gpu;    /* gpu/gpu_copy.h */
struct xi_tel;    /* core/telemetry.h */

enum wr_kind {
	WR_OP,     /* request slot of an op (data write, SEND, op-wide notice) */
	WR_RECV,   /* a posted receive buffer */
	WR_HB,     /* PING */
	WR_PONG,   /* PONG or BYE */
	WR_NOTICE, /* the notice of one entry or copy, carried by its own context */
	WR_COPY,   /* a GPU copy in flight, whose context becomes its notice */
	WR_STAGE,  /* a GPU source's copy into its host mirror, before its requests */
	WR_LANDING, /* a target's copy of a notice's ranges from its mirror to the GPU */
};

/* Notices merged into one at most (core/notice.c): a poll of the GPU's
 * copies reports at most this many. */
#define XI_NOTICE_MERGE 32

/* One posted request; the backend's context must come first. The context
 * the backend returns with a completion leads straight back to its op. */
struct wr {
	_Alignas(16) unsigned char prov[NIC_CTX_BYTES];
	struct op *op;
	uint32_t slot;    /* receive slot (WR_RECV), request index (WR_OP/NOTICE/COPY), peer (probes) */
	uint32_t sendbuf; /* the SEND bounce buffer it carries, else UINT32_MAX (core/tx.c) */
	uint8_t nic;
	uint8_t kind;
	uint8_t staged;   /* WR_NOTICE: the range written is in the peer's mirror */
	uint32_t wlen;    /* a posted write's bytes, counted in tx_state.wbytes until it completes */
	struct wr *next_free; /* also links notices waiting to be posted */
};

enum op_phase {
	OP_DATA,    /* the data requests (or copies) */
	OP_NOTICES, /* a staged write's notices, after all its data landed */
};

struct op {
	struct sub s;
	const struct op_path *path; /* how it travels: chosen once in accept (core/path.c) */
	uint8_t phase;              /* enum op_phase */
	uint32_t data_total;        /* requests of the data phase; notices are numbered after */
	struct op *next_post;
	struct op *prev_live, *next_live; /* in-flight list for deadline scans */
	uint32_t posted, total, done;
	uint32_t notices; /* notices carried by entry contexts, started and not completed */
	uint32_t copies;  /* GPU copies in flight */
	int32_t status;
	bool cut;        /* cancelled, expired or stopped (xi_op_fail): no more notices */
	bool src_mirror; /* the source is GPU memory the NICs read through its host mirror */
	bool src_staged; /* the bytes the op sends are all in the mirror already */
	bool src_staging; /* ...are being copied there (a WR_STAGE in flight) */
	bool src_stage_failed;
	uint8_t nic_base;
	uint8_t shards;
	/* A write longer than a NIC's max_msg goes as `chunks` requests per
	 * shard of at most `chunk_len` bytes; only each shard's last chunk
	 * carries the immediate, posted once every other chunk completed. */
	uint32_t chunks;
	uint64_t chunk_len;
	bool lanes_init;
	uint32_t lane_next[XFER_NIC_MAX]; /* paged writes: next page per NIC */
	bool user_done; /* the user already got its completion (deadline, peer death) */
	bool queued;    /* in the posting FIFO */
	bool live;
	uint64_t cancels; /* bit i: cancel record i waits for this op */
	uint64_t t_deq, t_first, t_first_ret, t_last; /* tracing */
};

#define MAX_CANCELS 64

struct cancel_rec {
	bool used;
	uint64_t tag;
	uint32_t waiting, cut;
	struct xi_target to;
};

struct peer_hb {
	uint64_t sent_at;   /* last PING posted */
	uint64_t last_pong; /* or when the peer was added, or when pings could go again */
	uint64_t deferred_since; /* PINGs found no probe credit here since then, 0: none */
	uint64_t suspect_since, next_probe;
	uint64_t stalled_since; /* the provider refused PINGs (-EAGAIN) since then */
	bool outstanding;       /* a PING not yet completed */
	bool pong_capable;      /* the peer has answered a PING */
	bool suspect;
	bool bye_sent;
};

/* The send side (core/tx.c): every post takes a credit of its NIC and a
 * context; SENDs also a bounce buffer. Liveness probes have credits and
 * contexts of their own that data never takes. */
struct tx_state {
	uint32_t credits[XFER_NIC_MAX];
	uint32_t reserve; /* credits per NIC (and contexts per NIC) kept for probes */
	struct wr *wrs, *free_wrs;
	uint32_t nfree_wrs, wr_reserve;
	uint32_t *free_send, nfree_send;
	/* XFER_TX_BYTES (0: off): bytes of writes in the provider per NIC at
	 * most; the first write always goes. Writes shorter than wbytes_min_len
	 * (XFER_TX_BYTES_MIN_LEN) are neither held nor counted. */
	uint64_t wbytes[XFER_NIC_MAX], wbytes_max, wbytes_min_len;
};

/* A peer's notice whose ranges are being copied from our mirror to the GPU
 * (core/notice.c): its immediates count once the copy's event fires. */
struct landing {
	struct wr wr; /* first: the copy's context, kind WR_LANDING */
	uint32_t imm, count;
	struct landing *next_free;
};

struct worker {
	xfer_engine_t *e;
	/* core/op.c */
	struct op *ops, *free_ops; /* free list via next_post */
	struct op *post_head, *post_tail;
	struct op live; /* sentinel of the in-flight list */
	uint32_t nlive;
	uint32_t rr_nic;
	/* core/tx.c */
	struct tx_state tx;
	/* core/rx.c */
	struct wr *recv_wrs;
	bool inbox_pushed;
	/* core/deliver.c */
	struct xfer_cqe *overflow;
	uint32_t ov_head, ov_count, ov_cap;
	bool cq_pushed;
	/* core/imm_counters.c */
	struct imm_table imm;
	/* core/cancel.c */
	struct cancel_rec cancels[MAX_CANCELS];
	uint32_t ncancels;
	/* core/liveness.c */
	struct peer_hb *hb;
	uint32_t nsuspect;
	/* core/notice.c */
	struct wr *notice_head, *notice_tail; /* notices waiting for a credit or buffer */
	struct landing *landings, *free_landings; /* XI_LANDINGS, where a GPU is */
	uint32_t *landing_idx, landing_idx_max;   /* a notice's ranges as page numbers */
	uint64_t ahead_until; /* a peer's copy to us was announced: stay awake until its count, or this */
	/* Copies that finished in one poll of the GPU, whose notices go as one
	 * (same peer, region and immediate): the first's context carries it.
	 * Empty outside poll_gpu (core/loop.c). */
	struct wr *merge[XI_NOTICE_MERGE];
	uint32_t nmerge;
	uint64_t merge_count;
	bool merge_off; /* XFER_NOTICE_MERGE=0: one notice per copy */
	/* core/telemetry.c: counters and histograms the readers aggregate */
	struct xi_tel *tel;
	/* gpu/gpu_copy.c, NULL without a CUDA driver */
	struct xi_gpu *gpu;
	/* core/loop.c, core/thread.c */
	uint64_t next_scan_ns;
	uint64_t caught_up_ns; /* start of the last turn whose polls drained every NIC's queue */
	int epfd;
	bool all_nics_have_fd;
	uint64_t doze_ns; /* next sleep without a NIC wait object */
	uint64_t reply_watch_ns; /* busy-poll with cores to spare: see await_reply (core/loop.c) */
	uint32_t arrivals;  /* immediates and messages from peers polled this turn */
	uint32_t gpu_busy;  /* GPU copies in flight as last published (e->gpu_busy) */
};

/* Stops posting the rest of op (cancel, deadline, stop, failure); what is
 * posted still completes normally, and no further notice is sent. */
static inline void xi_op_fail(struct op *op, int status)
{
	if (op->status == 0)
		op->status = status;
	op->total = op->posted;
	op->cut = true;
}

/* Something is due at deadline_ns: the next scan must not start later. */
static inline void xi_note_deadline(struct worker *w, uint64_t deadline_ns)
{
	if (deadline_ns < w->next_scan_ns)
		w->next_scan_ns = deadline_ns;
}

#endif
