/* The worker's private state: operation pool, posting credits, immediate
 * counters, cancellations, peer liveness. Only the worker thread touches it. */
#ifndef XFER_WORKER_H
#define XFER_WORKER_H

#include "core/objects.h"

enum wr_kind { WR_OP, WR_RECV, WR_HB, WR_PONG, WR_NOTICE /* of one scatter entry */ };

#define MAX_CANCELS 64
#define GPU_RING 256
#define GPU_BATCH 512
#define GPU_DEVS 16

/* One posted request; the backend's context must come first. */
struct wr {
	_Alignas(16) unsigned char prov[NIC_CTX_BYTES];
	struct op *op;
	uint32_t slot; /* receive slot (WR_RECV), request index (WR_OP), peer (WR_HB) */
	uint32_t sendbuf; /* bounce buffer a notice was built in, else UINT32_MAX */
	uint8_t nic;
	uint8_t kind;
	uint8_t staged; /* WR_NOTICE: the entry's range is in the peer's mirror */
	struct wr *next_free; /* also links notices waiting to be posted */
};

enum op_path {
	PATH_FABRIC, /* requests straight to the NICs */
	PATH_STAGED, /* into a peer's GPU region through its host mirror, then notices */
	PATH_IPC,    /* GPU to GPU on this host, then a notice */
};

struct op {
	struct sub s;
	uint8_t path;        /* enum op_path */
	uint8_t phase;       /* 0: data, 1: notices, 2: GPU copies in flight */
	uint32_t data_total; /* requests of the data phase */
	struct op *next_post;
	struct op *prev_live, *next_live; /* in-flight list for deadline scans */
	uint32_t posted, total, done;
	uint32_t notices; /* scatter: entry notices started and not yet completed */
	int32_t status;
	bool cut; /* cancelled, expired or stopped (op_fail): no more notices */
	uint32_t send_buf;
	uint8_t nic_base;
	uint8_t shards;
	bool lanes_init;
	bool src_staged; /* a paged write's GPU source is in its mirror */
	uint32_t lane_next[XFER_NIC_MAX]; /* paged writes: next page per NIC */
	bool user_done; /* the user already got its completion (deadline, peer death) */
	bool queued;    /* in the posting FIFO */
	bool live;
	uint64_t cancels; /* bit i: cancel record i waits for this op */
	uint64_t t_deq, t_first, t_first_ret, t_last; /* tracing */
};

struct cancel_rec {
	bool used;
	volatile uint64_t *signal;
	uint64_t signal_value;
	uint64_t tag;
	uint32_t waiting, cut;
	uint64_t deadline_ns, user_data;
	xfer_complete_fn cb;
	void *cb_ctx;
};

struct peer_hb {
	uint64_t sent_at;     /* last PING */
	uint64_t last_pong;
	uint64_t suspect_since, next_probe;
	uint64_t stalled_since; /* PINGs refused with -EAGAIN since then */
	bool outstanding;     /* a PING not yet completed */
	bool pong_capable;    /* the peer has answered a PING */
	bool suspect;
	bool bye_sent;
};

/* How long a probe sent on suspicion may stay unanswered with heartbeats off. */
#define SUSPECT_PROBE_MS 2000

struct worker {
	xfer_engine_t *e;
	struct op *ops;
	struct op *free_ops; /* via next_post */
	struct wr *wrs, *free_wrs;
	struct wr *recv_wrs;
	uint32_t credits[XFER_NIC_MAX];
	struct op *post_head, *post_tail;
	struct op live; /* sentinel */
	uint32_t nlive;
	uint32_t *free_send, nfree_send;
	struct imm_table imm;
	struct cancel_rec cancels[MAX_CANCELS];
	uint32_t ncancels;
	struct peer_hb *hb;
	uint32_t nsuspect;
	struct xfer_cqe *overflow;
	uint32_t ov_head, ov_count, ov_cap;
	uint64_t next_scan_ns;
	uint32_t rr_nic;
	int epfd;
	bool all_nics_have_fd;
	bool cq_pushed, inbox_pushed;
	int cuda_dev; /* device whose context is current on the worker, -1 none */
	uint64_t doze_ns; /* next sleep without a NIC wait object */
	/* Same-host GPU copies in flight, oldest first, each with its event. */
	struct gpu_wait {
		struct op *op;
		void *event;
		struct wr *wr; /* a scatter entry's copy: its notice-to-be; NULL: the whole op */
	} gpu_ring[GPU_RING];
	uint32_t gpu_head, gpu_count;
	void *gpu_stream[GPU_DEVS];
	void *gpu_events[GPU_DEVS][GPU_RING];
	/* A paged same-host write's pages, handed to the driver in one call. */
	unsigned long long gpu_batch_dst[GPU_BATCH], gpu_batch_src[GPU_BATCH]; /* CUdeviceptr */
	size_t gpu_batch_len[GPU_BATCH];
	bool gpu_batch_off; /* the driver refused a batch: one copy per page */
	struct wr *notice_head, *notice_tail; /* scatter notices waiting for a credit or buffer */
};

/* gpu_path.c */
int gpu_stage_src(struct worker *w, xfer_mr_t *src, uint64_t off, uint64_t len);
/* Every page of a paged write from a GPU region, into its mirror, at once. */
int gpu_stage_pages(struct worker *w, const struct xfer_paged_write *pw);
/* How a write reaches remote region r from here. */
enum op_path gpu_rmr_path(const xfer_engine_t *e, const xfer_rmr_t *r);
enum op_path gpu_classify(const xfer_engine_t *e, const struct sub *s);
/* Opens r's IPC mapping (once) and readies device dev's stream and the next
 * ring slot: 0, -EAGAIN (ring full), -EIO with r->ipc_failed set (no IPC to
 * r after all) or -XFER_ENOGPU. */
int gpu_ipc_begin(struct worker *w, xfer_rmr_t *r, int dev, void **stream);
/* Issues one copy of len bytes to dst (device address) on stream. */
int gpu_copy_to(struct worker *w, void *stream, uint64_t dst, xfer_mr_t *src, uint64_t src_off,
		uint64_t len);
/* Records an event behind the copies on dev's stream and parks op (and wr,
 * for one scatter entry) until it fires. */
int gpu_ipc_park(struct worker *w, int dev, struct op *op, struct wr *wr);
/* On the worker as it exits: its CUDA streams and events (copies still
 * running finish first, in the driver). */
void gpu_release(struct worker *w);
/* Writes a notice's message header in front of its body. */
void gpu_notice_frame(const xfer_engine_t *e, uint8_t *buf, size_t body);
/* Issues op's same-host GPU copies; 1 when parked until they finish. */
int gpu_ipc_issue(struct worker *w, struct op *op);
/* Moves ops whose copies finished on to their notices; returns how many. */
int gpu_poll(struct worker *w);
void op_enqueue(struct worker *w, struct op *op);
void op_maybe_finish(struct worker *w, struct op *op);
uint32_t gpu_notice_count(const xfer_engine_t *e, const struct op *op);
size_t gpu_notice_build(const xfer_engine_t *e, const struct op *op, uint32_t k, uint8_t *buf);
void gpu_notice_received(struct worker *w, const uint8_t *body, size_t len);

/* gpu_scatter.c: scatter entries into GPU regions, each with its own notice. */
/* Entry i through CUDA IPC: 1 issued and parked, 0 not an IPC entry (post it
 * to NIC n as usual), -EAGAIN, or the error that fails the entry. */
int gpu_scatter_ipc(struct worker *w, struct op *op, uint32_t i, unsigned n);
/* Whether entry i's write landed in a mirror and needs a notice. */
bool gpu_entry_staged(const struct op *op, uint32_t i);
/* Entry data is in place (wr carried it, or waits for its IPC copy's
 * notice): start its notice when one is due, else release wr. */
void gpu_entry_landed(struct worker *w, struct wr *wr, bool staged);
/* The IPC copy of an entry finished with status. */
void gpu_entry_copied(struct worker *w, struct wr *wr, int status);
/* An entry's notice completed at the provider (credit and buffer returned). */
void gpu_notice_done(struct worker *w, struct wr *wr, int status);
/* Posts waiting notices in order; returns how many left the list. */
int gpu_notices_flush(struct worker *w);

int worker_setup_buffers(struct worker *w);
void worker_post_initial_recvs(struct worker *w);
int worker_loop_once(struct worker *w, uint64_t now);
void worker_quiesce(struct worker *w, int status);
/* Drains the overflow into the CQ from an application thread after stop. */
void worker_flush_overflow(struct worker *w);

/* imm_counters.c */
void imm_arrived(struct worker *w, uint32_t imm);
void imm_arm(struct worker *w, const struct sub *s);
int imm_disarm(struct worker *w, uint32_t imm, uint32_t *arrived);
void imm_expire(struct worker *w, uint64_t now, uint64_t *next_deadline);
void imm_cancel_all(struct worker *w, int status);

/* liveness.c */
void hb_scan(struct worker *w, uint64_t now, uint64_t *next_deadline);
void hb_done(struct worker *w, struct wr *wr, int status);
void hb_message(struct worker *w, uint32_t magic, uint64_t src_id);
/* Sends BYE to the live peers not yet told; returns how many are left. */
int hb_goodbye(struct worker *w);
void peer_down(struct worker *w, uint32_t peer, int reason);
void peer_suspect(struct worker *w, uint32_t peer, int reason);
bool is_peer_failure(int status);

/* cancel.c */
void cancel_start(struct worker *w, const struct sub *s);
void cancel_op_finished(struct worker *w, struct op *op);
void cancel_expire(struct worker *w, uint64_t now, uint64_t *next_deadline);

/* Before a completion is delivered: its optional mapped-memory signal. */
static inline void signal_store(volatile uint64_t *p, uint64_t v)
{
	if (p)
		__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* worker.c, shared with the files above */
void worker_deliver(struct worker *w, xfer_complete_fn cb, void *ctx, uint64_t user_data, int res,
		    uint32_t kind);
void worker_note_deadline(struct worker *w, uint64_t deadline_ns);
/* Stops posting the rest of op; what is posted still completes normally. */
void op_fail(struct op *op, int status);
/* Scatter entry i failed: its status, the op's first error, and a probe of
 * its member when the error says the peer may be gone. */
void scatter_entry_failed(struct worker *w, struct op *op, uint32_t i, int status);
void scatter_entry_status(struct op *op, uint32_t i, int status);
/* Tells the user now (deadline, peer death); the op lives on until drained. */
void op_complete_early(struct worker *w, struct op *op, int status);
struct wr *wr_get(struct worker *w);
void wr_put(struct worker *w, struct wr *wr);

#endif
