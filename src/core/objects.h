/* Internal layout of an engine. One domain group (a worker thread and the
 * 1..XFER_NIC_MAX NICs it owns) does all the work; application threads only
 * validate requests and hand them over through lock-free queues. */
#ifndef XFER_ENGINE_H
#define XFER_ENGINE_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "util/imm_table.h"
#include "util/mpmc_queue.h"
#include "wire/wire.h"
#include "xfer.h"

#define MSG_HDR_BYTES 16
#define MSG_MAGIC 0x58464d53u    /* "XFMS": an application message */
#define MSG_MAGIC_HB 0x58464842u   /* "XFHB": a liveness probe, never delivered */
#define MSG_MAGIC_PONG 0x58465047u /* "XFPG": the answer to a probe */
#define MSG_MAGIC_BYE 0x58464259u  /* "XFBY": the sender's engine is stopping */
#define MSG_MAGIC_NOTICE 0x58464e54u /* "XFNT": data for a GPU region landed or was copied */
#define NOTICE_HDR 24u
#define SEND_BUFS 128
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
	SUB_CALL = 16, /* run a control function on the worker */
};

struct engine_call {
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
	uint64_t user_data;
	xfer_complete_fn cb;
	void *cb_ctx;
	uint64_t deadline_ns;
	uint64_t tag;
	volatile uint64_t *signal;
	uint64_t signal_value;
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
		} scatter;
		struct {
			struct xfer_group *group;
		} barrier;
		struct engine_call *call;
	} u;
};

struct xfer_mr {
	xfer_engine_t *e;
	struct xfer_mr *prev, *next; /* the engine's list of user regions */
	bool registered;
	void *buf;
	size_t len;
	uint64_t id;     /* names the region in notices */
	int gpu;         /* CUDA device of buf, -1 for host memory */
	void *reg_buf;   /* the pinned host mirror of staged GPU memory, else NULL (NICs see buf) */
	bool native;     /* GPU memory registered in place on every NIC (FI_HMEM) */
	int native_err;  /* why that registration failed, before falling back to a mirror */
	struct nic_mem mem; /* how native GPU memory is described to the NICs */
	bool has_ipc;
	uint8_t ipc[64]; /* CUDA IPC handle of the allocation holding buf */
	uint64_t ipc_offset;
	atomic_uint inflight;
	bool revoked;
	struct nic_mr nic[XFER_NIC_MAX];
};

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
	atomic_uint inflight;
	uint64_t engine_id;
	uint32_t msg_max;
	uint8_t nnics;
	uint64_t dest[XFER_NIC_MAX];      /* per local NIC */
	struct wire_rkey sink[XFER_NIC_MAX]; /* per local NIC */
};

struct worker; /* worker.c */

struct xfer_engine {
	struct xfer_attr attr;
	char *provider_req, *nics_req;
	uint64_t id;
	unsigned nnics;
	struct xfer_nic nics[XFER_NIC_MAX];
	struct backend_ops ops;

	struct mpmc_queue subq;   /* struct sub: application -> worker */
	struct mpmc_queue cq;     /* struct xfer_cqe: worker -> application */
	struct mpmc_queue inbox;  /* uint32 receive slot: worker -> application */
	struct mpmc_queue repost; /* uint32 receive slot: application -> worker */
	struct mpmc_queue traces; /* struct xfer_trace: worker -> benchmark */
	atomic_bool tracing;

	_Alignas(64) atomic_uint worker_sleeping;
	int wake_fd;
	_Alignas(64) atomic_uint cq_seq;
	atomic_uint cq_waiters;
	_Alignas(64) atomic_uint inbox_seq;
	atomic_uint inbox_waiters;
	_Alignas(64) atomic_bool stopping;
	atomic_bool stopped;
	atomic_uint submitters; /* submissions between their stop check and push */

	uint32_t max_peers;
	struct peer *peers;
	pthread_mutex_t ctl_lock; /* serializes control calls, never the data path */

	xfer_mr_t user_mrs;  /* sentinel of the list of user regions */
	uint32_t nregions;
	xfer_mr_t *sink;     /* target of immediate-only writes */
	xfer_mr_t *recv_mr;  /* bouncing receive buffers, all NICs */
	xfer_mr_t *send_mr;  /* bounce buffers for outgoing SENDs */
	uint8_t *recv_bufs, *send_bufs;
	uint32_t recv_slots; /* recv_count * nnics */
	uint32_t slot_bytes; /* msg_max + header */
	atomic_uint_fast64_t next_key;
	atomic_uint_fast64_t next_region_id;
	uint64_t host_id;
	bool gpu_ipc; /* same-host GPU copies allowed (XFER_GPU_IPC=0 forces staging) */
	uint8_t gpu_native; /* XFER_GPU_NATIVE: 0 never FI_HMEM (stage), 1 auto, 2 ask every provider */

	struct worker *w;
	pthread_t thread;
	bool thread_started;

	struct {
		atomic_uint_fast64_t ops_submitted, ops_completed, ops_failed, wrs_posted,
			bytes_written, imms_received, imms_dropped, msgs_received, worker_sleeps;
	} st;
};

uint64_t now_ns(void);
void group_ref(xfer_engine_t *e, struct xfer_group *g, int delta);
uint64_t deadline_after_ms(uint64_t ms);

/* Runs fn on the worker thread and returns its result (control path). */
int engine_call(xfer_engine_t *e, int (*fn)(xfer_engine_t *, void *), void *arg);
/* Wakes the worker if it sleeps; called after every push to its queues. */
void engine_kick(xfer_engine_t *e);
void futex_wake_all(atomic_uint *word);
int futex_wait_ms(atomic_uint *word, unsigned expected, uint64_t timeout_ms);

/* Tests only: engines created from now on use ops instead of libfabric's. */
void engine_backend_override(const struct backend_ops *ops);

/* gpu_mr.c: how a GPU region reaches the NICs. */
bool gpu_native_usable(const xfer_engine_t *e);
/* Readies a region of device `dev` for registration: in place on NICs with
 * FI_HMEM (with a dma-buf where possible), else with a pinned host mirror. */
int gpu_mr_prepare(xfer_engine_t *e, xfer_mr_t *mr, int dev);
/* Registering in place failed (mr->native_err): mirror the region instead. */
int gpu_mr_fall_back(xfer_engine_t *e, xfer_mr_t *mr);
/* Registration is over: the dma-buf fd, if any, is closed. */
void gpu_mr_done(xfer_mr_t *mr);
void gpu_mr_free(xfer_mr_t *mr);

int worker_create(xfer_engine_t *e);
void worker_destroy(xfer_engine_t *e);
void *worker_main(void *arg);

#endif
