/* The objects behind the public handles (engine, regions, remote regions,
 * peers, groups) and the submission that carries a request from an
 * application thread to the worker. Shared by the core and the API layer;
 * the worker's private state is in core/worker.h. One domain group (a
 * worker thread and the 1..XFER_NIC_MAX NICs it owns) does all the work;
 * application threads only validate requests and hand them over through
 * lock-free queues. */
#ifndef XFER_CORE_OBJECTS_H
#define XFER_CORE_OBJECTS_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/idmap.h"
#include "util/mpmc_queue.h"
#include "util/target.h"
#include "wire/wire.h"
#include "xfer.h"

#define SEND_BUFS 128 /* SEND bounce buffers of an engine (core/tx.c) */
#define SINK_BYTES 64
#define MAX_PEERS_DEFAULT 1024

enum sub_kind {
	SUB_SEND = XFER_OP_SEND,
	SUB_WRITE = XFER_OP_WRITE,
	SUB_PAGED = XFER_OP_PAGED,
	SUB_IMM = XFER_OP_IMM,
	SUB_EXPECT = XFER_OP_EXPECT,
	SUB_CANCEL = XFER_OP_CANCEL,
	SUB_SCATTER = XFER_OP_SCATTER,
	SUB_BARRIER = XFER_OP_BARRIER,
	SUB_CALL = 16, /* run a control function on the worker (core/call.c) */
};

struct xi_call {
	int (*fn)(struct xfer_engine *e, void *arg);
	void *arg;
	int result;
	sem_t done;
};

/* A submission, copied by value into the queue so that the caller's struct
 * can be reused at once. */
struct sub {
	uint8_t kind;
	uint32_t flags;
	uint32_t imm;
	uint32_t peer;
	struct xi_target to;
	uint64_t tag;
	uint64_t t_call, t_enq; /* only when tracing */
	union {
		struct {
			const void *buf;
			uint32_t len;
		} send;
		struct {
			xfer_mr_t *src;
			const xfer_rmr_t *dst;
			uint64_t src_off, dst_off, len;
		} write;
		struct xfer_paged_write paged;
		struct {
			uint32_t count;
		} expect;
		struct {
			xfer_mr_t *src;
			struct xfer_group *group;
			const struct xfer_scatter_entry *entries;
			int32_t *status;
			uint32_t n;
			uint8_t dst_flags; /* WIRE_DESC_* of all entries' regions, or'ed */
		} scatter;
		struct {
			struct xfer_group *group;
		} barrier;
		struct xi_call *call;
	} u;
};

/* Operations in flight that name an object (a region, a peer), counted in
 * two halves so that no cache line bounces between the application and the
 * worker on every operation: submitters add to `taken` (and take it back
 * when the queue refuses them), the worker alone adds to `dropped` when an
 * operation lets go. In flight = taken - dropped; only the worker judges it
 * (xi_inflight), in line with the submissions it has taken.
 * Each half has a line of its own, whatever the alignment of the struct
 * holding it: 60 bytes of padding on either side leave no other field
 * within 64 bytes of it. Padding between the halves alone was not enough:
 * `taken` shared its line with the peer's `state`, which the worker reads
 * on every post, so each submission's increment took the line from the
 * worker and the worker's next post took it back. */
struct xi_inflight {
	char pad_before_[60];
	atomic_uint taken;
	char pad_[60];
	atomic_uint dropped;
	char pad_after_[60];
};

static inline unsigned xi_inflight(struct xi_inflight *c)
{
	unsigned dropped = atomic_load_explicit(&c->dropped, memory_order_relaxed);
	return atomic_load_explicit(&c->taken, memory_order_acquire) - dropped;
}

struct xfer_mr {
	xfer_engine_t *e;
	bool registered;
	bool listed;     /* in the engine's region table (core/regions.c) */
	void *buf;
	size_t len;
	uint64_t id;     /* names the region in notices */
	int gpu;         /* CUDA device of buf, -1 for host memory */
	void *reg_buf;   /* the pinned host mirror of staged GPU memory, else NULL (NICs see buf) */
	bool native;     /* GPU memory registered in place on every NIC (FI_HMEM) */
	int native_err;  /* why that registration failed, before falling back to a mirror */
	unsigned access; /* NIC_MR_*: user regions and the sink are remote-writable */
	struct nic_mem mem; /* how native GPU memory is described to the NICs */
	bool has_ipc;
	uint8_t ipc[64]; /* CUDA IPC handle of the allocation holding buf */
	uint64_t ipc_offset;
	struct xi_inflight inflight;
	bool revoked;
	struct nic_mr nic[XFER_NIC_MAX];
};

/* The bytes the NICs read and write: the host mirror of a staged GPU region. */
static inline uint8_t *xi_mr_nic_bytes(const xfer_mr_t *mr)
{
	return (uint8_t *)(mr->reg_buf ? mr->reg_buf : mr->buf);
}

struct xfer_group {
	xfer_engine_t *e;
	atomic_uint inflight;
	uint32_t n;
	uint32_t peers[];
};

struct xfer_rmr {
	xfer_engine_t *e;
	uint32_t peer;
	uint64_t engine_id;
	uint64_t len;
	uint8_t nnics;
	struct wire_rkey nic[XFER_NIC_MAX];
	uint8_t flags; /* WIRE_DESC_* */
	uint64_t region_id, host_id, ipc_offset;
	uint8_t ipc[64];
	uint64_t ipc_ptr; /* opened lazily by the worker; closed by xfer_rmr_free */
	int ipc_failed;
};

enum peer_state { PEER_FREE = 0, PEER_LIVE = XFER_PEER_LIVE, PEER_DEAD = XFER_PEER_DEAD };

struct peer {
	_Atomic int state;
	struct xi_inflight inflight;
	uint64_t engine_id;
	uint32_t msg_max;
	uint8_t nnics;
	uint64_t dest[XFER_NIC_MAX];      /* per local NIC */
	struct wire_rkey sink[XFER_NIC_MAX]; /* per local NIC */
};

static inline bool xi_peer_live(const struct peer *p)
{
	return atomic_load_explicit(&p->state, memory_order_relaxed) == PEER_LIVE;
}

struct worker; /* core/worker.h: the worker thread's private state */

/* Fields are grouped by who writes them, each group on its own cache lines:
 * an application thread's submission must not invalidate a line the worker
 * reads on every loop (stopping, peers), nor the worker's counters a line
 * every submitter writes. The static asserts below keep it so. */
struct xfer_engine {
	/* Set at creation, read by everyone. */
	struct xfer_attr attr;
	char *provider_req, *nics_req;
	uint64_t id;
	unsigned nnics;
	struct xfer_nic nics[XFER_NIC_MAX];
	struct backend_ops ops;
	uint32_t max_peers;
	struct peer *peers;
	struct worker *w;
	uint64_t host_id;
	bool gpu_ipc; /* same-host GPU copies allowed (XFER_GPU_IPC=0 forces staging) */
	uint8_t gpu_native; /* XFER_GPU_NATIVE: 0 never FI_HMEM (stage), 1 auto, 2 ask every provider */
	atomic_uint trace_every; /* xfer_engine_trace: 0 off, else one call in N */
	atomic_bool telemetry; /* XFER_TELEMETRY or xfer_engine_telemetry: submissions stamped (core/telemetry.h) */
	pthread_t thread;
	bool thread_started;

	/* Set at bring-up (core/bringup.c). */
	xfer_mr_t *sink;    /* target of immediate-only writes */
	xfer_mr_t *recv_mr; /* bouncing receive buffers, all NICs */
	xfer_mr_t *send_mr; /* bounce buffers for outgoing SENDs, then the probes */
	uint8_t *recv_bufs, *send_bufs;
	uint32_t recv_slots; /* recv_count * nnics */
	uint32_t slot_bytes; /* msg_max + header */
	bool drive_ok; /* busy_poll 2 and the worker may hand its turns over (core/drive.c) */
	bool drive_post; /* ... and a submission runs a turn when the turns are the application's */

	/* The control path (serialized by ctl_lock, run on the worker). */
	pthread_mutex_t ctl_lock;
	struct xi_idmap regions; /* user regions by id (core/regions.c) */
	atomic_uint_fast64_t next_region_id;

	struct mpmc_queue subq;   /* struct sub: application -> worker */
	struct mpmc_queue cq;     /* struct xfer_cqe: worker -> application */
	struct mpmc_queue inbox;  /* uint32 receive slot: worker -> application */
	struct mpmc_queue repost; /* uint32 receive slot: application -> worker */
	struct mpmc_queue traces; /* struct xfer_trace: worker -> benchmark */

	/* Written once at stop; read by the worker every loop and by submitters. */
	_Alignas(64) atomic_bool stopping;
	atomic_bool stopped;
	/* Written by every submission. */
	_Alignas(64) atomic_uint submitters; /* submissions between their stop check and push */
	atomic_uint_fast64_t ops_submitted;
	atomic_uint_fast64_t submit_again; /* refused: the queue was full */
	/* Sleep and wake handshakes, one line each. */
	_Alignas(64) atomic_uint worker_sleeping;
	int wake_fd;
	_Alignas(64) atomic_uint cq_seq;
	atomic_uint cq_waiters;
	_Alignas(64) atomic_uint inbox_seq;
	atomic_uint inbox_waiters;
	/* Written by the worker when they change: its GPU copies in flight and
	 * when that number last moved (a copy began or finished). A wait spins
	 * rather than sleeps while they move (api/completions.c). */
	_Alignas(64) atomic_uint gpu_busy;
	atomic_uint_fast64_t gpu_moved_ns;
	/* Who runs the worker's turns (busy_poll 2, core/drive.c), and when a
	 * waiting application thread last ran one: written when the turns
	 * change hands and by each turn of an application thread. */
	_Alignas(64) atomic_uint drive;
	atomic_uint_fast64_t drive_last_ns;
	/* Set by an application turn that gives the turns back while the
	 * worker is parked. The parked worker reads it every 16 spins (a line
	 * nobody writes in a ping-pong, so those reads cost the application
	 * nothing) and so ends the park at once, not at its next look at
	 * e->drive, which is up to a quarter of the hold (5 us) away. */
	_Alignas(64) atomic_bool drive_back;
	/* Written by the worker only (xi_stat_own_add). */
	_Alignas(64) struct {
		atomic_uint_fast64_t ops_completed, ops_failed, wrs_posted, bytes_written, imms_received,
			imms_dropped, msgs_received, worker_sleeps, msgs_refused;
	} st;
};

#define XI_LINE(f) (offsetof(struct xfer_engine, f) / 64)
_Static_assert(XI_LINE(submitters) != XI_LINE(stopping), "submitters false-share with stopping");
_Static_assert(XI_LINE(submitters) != XI_LINE(peers), "submitters false-share with peers");
_Static_assert(XI_LINE(ops_submitted) != XI_LINE(st.ops_completed),
	       "submit-side and worker-side counters false-share");
_Static_assert(XI_LINE(stopping) != XI_LINE(worker_sleeping), "stopping false-shares with the sleep flag");
_Static_assert(XI_LINE(gpu_busy) != XI_LINE(cq_seq) && XI_LINE(gpu_busy) != XI_LINE(st.ops_completed),
	       "the GPU copy count false-shares with a wait's line or the worker's counters");
_Static_assert(XI_LINE(drive) != XI_LINE(gpu_busy) && XI_LINE(drive) != XI_LINE(st.ops_completed),
	       "the drive word false-shares with the worker's lines");
_Static_assert(XI_LINE(drive_back) != XI_LINE(drive), "the give-back flag false-shares with the drive word");
#undef XI_LINE

#endif
