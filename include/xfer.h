/*
 * xfer — point-to-point data movement for LLM systems.
 *
 * Semantics are reliable but unordered: every operation completes exactly once,
 * but nothing is promised about the order in which operations land. Receivers
 * learn that data has arrived by counting 32-bit immediates (xfer_expect_imm),
 * never by relying on the order of writes.
 *
 * Conventions: functions return 0 or a positive count on success and a negative
 * errno (or -XFER_E*) on failure; xfer_strerror() names every code. Handles are
 * opaque. Addresses and memory-region descriptors are plain bytes that the
 * application moves between processes itself.
 */
#ifndef XFER_H
#define XFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XFER_VERSION_MAJOR 0
#define XFER_VERSION_MINOR 1
#define XFER_VERSION_PATCH 0

/* Version of the library actually loaded, "MAJOR.MINOR.PATCH" (the header's
 * macros say what a program was compiled against). Static string. */
const char *xfer_version(void);

/* Library-specific error codes; returned negated like errno values. */
enum {
	XFER_EBADWIRE = 257,  /* address or descriptor bytes are malformed */
	XFER_EVERSION = 258,  /* address or descriptor of an unsupported version */
	XFER_EFOREIGN = 259,  /* descriptor belongs to an engine other than the peer */
	XFER_EPROVIDER = 260, /* address was made by a different provider */
	XFER_EPEER = 261,     /* the peer failed or is unreachable */
	XFER_EFABRIC = 262,   /* provider error with no errno equivalent */
	XFER_ENOGPU = 263,    /* no GPU or CUDA driver available */
	XFER_ENOPROV = 264,   /* no provider matches the request */
};

const char *xfer_strerror(int err);

/* ----------------------------------------------------------------- logging */

/* Levels of xfer_attr.log_level and XFER_LOG_LEVEL (which also takes the
 * names "error", "warn", "info", "debug"). A negative level logs nothing. */
enum xfer_log_level { XFER_LOG_ERROR = 0, XFER_LOG_WARN = 1, XFER_LOG_INFO = 2, XFER_LOG_DEBUG = 3 };

/* Log handler: one call per line, msg without a trailing newline and valid
 * only during the call. It runs on the thread that logs, often an engine's
 * worker: it must be quick and must not call xfer_log_set_handler. */
typedef void (*xfer_log_fn)(void *ctx, int level, const char *msg);
/* Process-wide. fn NULL restores the default (stderr, "xfer[pid] level: msg").
 * Returns once no thread is still inside the previous handler, so that its
 * ctx may then be freed. */
void xfer_log_set_handler(xfer_log_fn fn, void *ctx);

/* ------------------------------------------------------------------ engine */

typedef struct xfer_engine xfer_engine_t;
typedef struct xfer_mr xfer_mr_t;   /* a local registered region */
typedef struct xfer_rmr xfer_rmr_t; /* an imported remote region */
typedef uint32_t xfer_peer_t;       /* index returned by xfer_peer_add */

#define XFER_PEER_NONE UINT32_MAX

/* Receive handler: runs on the worker thread; data is valid only during the call. */
typedef void (*xfer_recv_fn)(void *ctx, uint64_t src_id, const void *data, size_t len);
/* Peer-failure handler: runs on the worker thread once per failed peer, after
 * every pending operation to it has completed with -XFER_EPEER. */
typedef void (*xfer_peer_down_fn)(void *ctx, uint32_t peer, uint64_t engine_id, int reason);
/* An xfer_peer_down_fn that only writes 8 bytes (a uint64_t 1) to the file
 * descriptor ctx, given as (void *)(intptr_t)fd: an eventfd, or the write end
 * of a pipe opened O_NONBLOCK. For bindings that must not run code on the
 * worker; their own thread reads the descriptor and asks xfer_peer_state. */
void xfer_peer_down_notify_fd(void *ctx, uint32_t peer, uint64_t engine_id, int reason);

struct xfer_attr {
	const char *provider;  /* "auto", "tcp", "shm" (xfer's own, same host), "verbs", "efa",
				* "ofi-shm" (libfabric's shm) or a full libfabric name */
	const char *nics;      /* comma-separated domain names ("lo,veth0"); NULL: first */
	int worker_cpu;        /* CPU to pin the worker to; -1: unpinned; XFER_CPU_AUTO */
	uint32_t submit_depth; /* capacity of the submission queue (power of two) */
	uint32_t max_ops;      /* operations in flight in the worker */
	uint32_t recv_count;   /* bouncing receive buffers per NIC */
	uint32_t msg_max;      /* largest SEND payload in bytes */
	uint32_t imm_slots;    /* distinct immediate values tracked at once */
	uint32_t max_regions;  /* registered regions at once (-ENOSPC past it) */
	uint32_t spin_us;      /* worker busy-polls this long before sleeping (XFER_SPIN_FOREVER: never sleeps) */
	/* 1: busy-poll completion mode. The worker never sleeps or yields, and
	 * xfer_cq_wait / xfer_recv_wait spin on the queue until their deadline
	 * instead of sleeping on a futex: two cores kept busy per engine for the
	 * shortest hand-off. 2: busy-poll, and a thread waiting in
	 * xfer_cq_wait / xfer_recv_wait runs the worker's turns itself (posting
	 * what was submitted, reaping what completes) while the worker thread
	 * stands by (docs/config.md). 0 (default): spin briefly, then sleep. */
	uint32_t busy_poll;
	uint64_t timeout_ms;   /* default deadline of waits and operations */
	int log_level;         /* enum xfer_log_level; process-wide, set at creation */
	xfer_recv_fn on_recv;  /* optional: receive by callback instead of xfer_recv */
	void *on_recv_ctx;
	uint32_t heartbeat_ms;     /* liveness probe interval per peer; 0: off */
	uint32_t heartbeat_misses; /* intervals without an answer before a peer is dead */
	xfer_peer_down_fn on_peer_down;
	void *on_peer_down_ctx;
};

/* Fills defaults, then applies XFER_* environment variables (docs/config.md). */
void xfer_attr_init(struct xfer_attr *attr);

int xfer_engine_create(const struct xfer_attr *attr, xfer_engine_t **out);
/* Stops the worker: submissions not yet taken and requests not yet posted
 * complete with -ECANCELED; posted requests get up to 2 s to finish and then
 * complete with their own result (or -ECANCELED if abandoned). Nothing
 * completes or lands after it returns, later submissions fail with
 * -ESHUTDOWN, and the completion queue stays readable. Idempotent. */
void xfer_engine_stop(xfer_engine_t *e);
/* Stops, then frees the engine and every region still registered with it. */
void xfer_engine_destroy(xfer_engine_t *e);

/* Identity of this engine (random per creation; doubles as its incarnation). */
uint64_t xfer_engine_id(const xfer_engine_t *e);
/* Provider actually chosen, e.g. "tcp;ofi_rxm", and how many NICs are open. */
const char *xfer_engine_provider(const xfer_engine_t *e);
unsigned xfer_engine_nic_count(const xfer_engine_t *e);
/* Domain (interface) name of NIC i, e.g. "lo"; NULL past the last. */
const char *xfer_engine_nic_name(const xfer_engine_t *e, unsigned i);

struct xfer_nic_info {
	char provider[32];
	char domain[64];
	uint32_t tx_depth, rx_depth;
	uint64_t max_msg;
	/* 1: a write completes once its data is at the target, and a write the
	 * target rejects completes with an error. 0 (ofi-shm): completes once sent;
	 * a rejected write still lands nothing, but the writer is not told. */
	int delivery_complete;
	/* "native": opened with FI_HMEM, GPU regions registered in place (untested
	 * on hardware); "staged": through a pinned host mirror. */
	const char *gpu_path;
};
int xfer_engine_nic_info(const xfer_engine_t *e, unsigned i, struct xfer_nic_info *out);

/* Serializes the engine address. Returns the length, or -ENOSPC if cap is too
 * small (with the required length in *need when need is not NULL). */
#define XFER_ADDR_MAX 2048
int xfer_engine_addr(const xfer_engine_t *e, void *buf, size_t cap, size_t *need);

/* Parses a peer's address (untrusted bytes) and makes it reachable. */
int xfer_peer_add(xfer_engine_t *e, const void *addr, size_t len, xfer_peer_t *out);
/* -EBUSY while operations to the peer are in flight. */
int xfer_peer_remove(xfer_engine_t *e, xfer_peer_t peer);
/* Engine id carried by a peer's address; 0 if the handle is not valid. */
uint64_t xfer_peer_id(const xfer_engine_t *e, xfer_peer_t peer);

enum xfer_peer_state { XFER_PEER_LIVE = 1, XFER_PEER_DEAD = 2 };
/* XFER_PEER_LIVE, XFER_PEER_DEAD (failed: submissions return -XFER_EPEER
 * until it is removed), or -ENOENT. */
int xfer_peer_state(const xfer_engine_t *e, xfer_peer_t peer);
/* How many times one sharded write (XFER_F_SHARD) to this peer delivers its
 * immediate: min(our NIC count, the peer's). */
unsigned xfer_peer_shards(const xfer_engine_t *e, xfer_peer_t peer);

/* --------------------------------------------------------- memory regions */

#define XFER_DESC_MAX 512

/* Registers [buf, buf+len) on every NIC of the engine for local and remote
 * access. buf may be CUDA device memory (detected through the driver): where
 * every NIC has FI_HMEM (gpu_path "native") it is registered in place,
 * elsewhere its bytes travel through a pinned host mirror, and peers on the
 * same host copy GPU to GPU through CUDA IPC; the API and the completion
 * semantics are the same (an immediate counts only once the data is in GPU
 * memory). -XFER_ENOGPU if device memory cannot be used. */
int xfer_mr_reg(xfer_engine_t *e, void *buf, size_t len, xfer_mr_t **out);
/* The CUDA device holding the region, or -1 for host memory. */
int xfer_mr_is_gpu(const xfer_mr_t *mr);
/* 1 when a CUDA driver and GPU are usable here, else -XFER_ENOGPU. */
int xfer_cuda_available(void);
/* -EBUSY while operations using the region are in flight. */
int xfer_mr_dereg(xfer_mr_t *mr);
/* Withdraws the registration but keeps the handle: once this returns, a
 * remote write that names the region fails at this end (the initiator sees
 * an error) and nothing more is written; descriptors already handed out stay
 * dead, since keys are never reused. The region can no longer be used at all
 * (-EINVAL); xfer_mr_dereg frees the handle. -EBUSY while local operations
 * read from it. Use it before reusing memory whose writer may be dead or
 * unresponsive; register again to hand out a new descriptor. */
int xfer_mr_revoke(xfer_mr_t *mr);
/* Serializes the remote descriptor; same return convention as xfer_engine_addr. */
int xfer_mr_desc(const xfer_mr_t *mr, void *buf, size_t cap, size_t *need);
void *xfer_mr_addr(const xfer_mr_t *mr);
size_t xfer_mr_len(const xfer_mr_t *mr);

/* Parses a descriptor (untrusted bytes) that must belong to `peer`. */
int xfer_rmr_import(xfer_engine_t *e, xfer_peer_t peer, const void *desc, size_t len,
		    xfer_rmr_t **out);
void xfer_rmr_free(xfer_rmr_t *rmr);
size_t xfer_rmr_len(const xfer_rmr_t *rmr);

/* ------------------------------------------------------------ submissions */

/*
 * Every submission carries user_data and completes exactly once, either as an
 * entry in the completion queue or, when cb is set, by a call to cb on the
 * worker thread. Buffers, index arrays and remote regions named by a
 * submission must stay valid until it completes. A full submission queue
 * returns -EAGAIN: poll completions and try again.
 */
struct xfer_cqe {
	uint64_t user_data;
	int32_t res;   /* 0 or -errno */
	uint32_t kind; /* enum xfer_op_kind */
};

typedef void (*xfer_complete_fn)(void *ctx, const struct xfer_cqe *cqe);

enum xfer_op_kind {
	XFER_OP_SEND = 1,
	XFER_OP_WRITE = 2,
	XFER_OP_PAGED = 3,
	XFER_OP_IMM = 4,    /* immediate-only write to a peer */
	XFER_OP_EXPECT = 5, /* an immediate counter reached its target */
	XFER_OP_CANCEL = 6,
	XFER_OP_SCATTER = 7,
	XFER_OP_BARRIER = 8,
};

#define XFER_F_IMM (1u << 0)   /* the write carries `imm` */
#define XFER_F_SHARD (1u << 1) /* split one write over the NICs (see xfer_peer_shards) */
#define XFER_F_PIN (1u << 2)   /* post every request on NIC XFER_F_NIC_OF(flags) */
#define XFER_F_NIC(n) (XFER_F_PIN | ((uint32_t)(n) << 8))
#define XFER_F_NIC_OF(flags) (((flags) >> 8) & 0xffu)

struct xfer_completion {
	uint64_t user_data;
	xfer_complete_fn cb; /* NULL: deliver to the completion queue */
	void *cb_ctx;
	uint64_t timeout_ms; /* 0: engine default */
	uint64_t tag;        /* groups operations for xfer_cancel; 0: none */
	/* Optional: stored (release) just before the completion is delivered, so
	 * that a GPU kernel polling mapped memory (or any thread) can start
	 * without a host round trip. Host memory, or a watcher-style mapped word. */
	volatile uint64_t *signal;
	uint64_t signal_value;
};

/* SEND of len bytes, at most our msg_max and the peer's (-EMSGSIZE); the
 * peer receives it in a bouncing buffer. */
int xfer_send(xfer_engine_t *e, xfer_peer_t peer, const void *buf, size_t len,
	      const struct xfer_completion *c);

struct xfer_write {
	xfer_mr_t *src;
	uint64_t src_off;
	const xfer_rmr_t *dst;
	uint64_t dst_off;
	uint64_t len; /* 0 is allowed: an immediate-only write into dst */
	uint32_t imm;
	uint32_t flags; /* XFER_F_IMM */
};
int xfer_write(xfer_engine_t *e, const struct xfer_write *w, const struct xfer_completion *c);

/* Page i is copied from src_base + src_pages[i]*src_stride to
 * dst_base + dst_pages[i]*dst_stride, page_len bytes; with XFER_F_IMM every
 * page delivers `imm` once, so the receiver expects npages. The index arrays
 * are checked at submission and read again while posting: keep them valid
 * and unchanged until completion. */
struct xfer_paged_write {
	xfer_mr_t *src;
	const xfer_rmr_t *dst;
	uint64_t page_len;
	const uint32_t *src_pages;
	uint64_t src_stride;
	uint64_t src_base;
	const uint32_t *dst_pages;
	uint64_t dst_stride;
	uint64_t dst_base;
	uint32_t npages;
	uint32_t imm;
	uint32_t flags;
};
int xfer_write_paged(xfer_engine_t *e, const struct xfer_paged_write *w,
		     const struct xfer_completion *c);

/* Delivers `imm` once to the peer with no data (a zero-length write into a
 * region every engine keeps for the purpose). */
int xfer_write_imm(xfer_engine_t *e, xfer_peer_t peer, uint32_t imm,
		   const struct xfer_completion *c);

/* ------------------------------------------------------------ peer groups */

typedef struct xfer_group xfer_group_t;

/* A fixed set of peers, resolved once, for scatter and barrier. */
int xfer_group_create(xfer_engine_t *e, const xfer_peer_t *peers, uint32_t n, xfer_group_t **out);
/* -EBUSY while a scatter or barrier on it is in flight. */
int xfer_group_destroy(xfer_group_t *g);
uint32_t xfer_group_size(const xfer_group_t *g);

struct xfer_scatter_entry {
	uint32_t member; /* index into the group */
	uint64_t src_off;
	uint64_t len; /* 0: only the immediate */
	const xfer_rmr_t *dst; /* a region of that member */
	uint64_t dst_off;
};

/* One call, a different slice to each entry's member; with XFER_F_IMM each
 * entry delivers `imm` once to its member (into a GPU region, once the bytes
 * are in GPU memory). src and the regions may be GPU or host memory, mixed.
 * Completes once for the whole call with the first error; status (optional,
 * n entries) receives each entry's own result before the completion is
 * delivered. */
struct xfer_scatter {
	xfer_mr_t *src;
	const struct xfer_scatter_entry *entries;
	uint32_t n;
	uint32_t imm;
	uint32_t flags;
	int32_t *status;
};
int xfer_scatter(xfer_engine_t *e, xfer_group_t *g, const struct xfer_scatter *s,
		 const struct xfer_completion *c);
/* Delivers `imm` once to every member (each expects xfer_group_size()
 * arrivals when all members barrier on the same immediate). */
int xfer_barrier(xfer_engine_t *e, xfer_group_t *g, uint32_t imm, const struct xfer_completion *c);

/* ------------------------------------------------------------ cancellation */

/* Cancels every operation submitted with this tag (before this call). Each
 * of them still completes exactly once: -ECANCELED if it was cut short, or
 * its own result if it had finished. The cancel itself completes (kind
 * XFER_OP_CANCEL, res = how many were cut short) once every request of those
 * operations has completed at the provider, or with -ETIMEDOUT at its
 * deadline (-ENOSPC: 64 cancels already pending). Where the NIC has
 * delivery-complete (xfer_nic_info), that means nothing of them can still
 * land; on transmit-complete providers (ofi-shm) a small write already handed
 * over may still be applied when the target next polls. */
int xfer_cancel(xfer_engine_t *e, uint64_t tag, const struct xfer_completion *c);

/* -------------------------------------------------------- immediate counters */

/* Completes (kind XFER_OP_EXPECT) once `imm` has arrived `count` times in
 * total, counting arrivals from before this call; those `count` arrivals are
 * consumed, later ones count toward the next expectation. The completion
 * carries -ETIMEDOUT if the deadline passes first, -EBUSY if `imm` is already
 * armed, -ENOSPC if imm_slots distinct immediates are already tracked. */
int xfer_expect_imm(xfer_engine_t *e, uint32_t imm, uint32_t count,
		    const struct xfer_completion *c);
/* Drops the expectation (if any, it completes with -ECANCELED) and returns, in
 * *arrived, how many times `imm` has arrived and not been consumed; those
 * arrivals are forgotten. */
int xfer_imm_disarm(xfer_engine_t *e, uint32_t imm, uint32_t *arrived);

/* ------------------------------------------------------------- completions */

/* Non-blocking: copies up to max entries; returns how many. */
int xfer_cq_poll(xfer_engine_t *e, struct xfer_cqe *cqes, int max);
/* Waits until at least one entry or timeout_ms passes (-ETIMEDOUT). */
int xfer_cq_wait(xfer_engine_t *e, struct xfer_cqe *cqes, int max, uint64_t timeout_ms);

/* ----------------------------------------------------------------- receives */

struct xfer_msg_info {
	uint64_t src_id; /* engine id of the sender */
	size_t len;      /* full message length; only min(len, cap) bytes copied */
};
/* Takes one received message (when no on_recv handler is set): copies it into
 * buf and returns its buffer to the provider. Returns 1, or 0 if none waits. */
int xfer_recv(xfer_engine_t *e, void *buf, size_t cap, struct xfer_msg_info *info);
/* As xfer_recv but waits up to timeout_ms (-ETIMEDOUT). */
int xfer_recv_wait(xfer_engine_t *e, void *buf, size_t cap, struct xfer_msg_info *info,
		   uint64_t timeout_ms);

/* ------------------------------------------------------------------ watcher */

typedef struct xfer_watcher xfer_watcher_t;
/* Runs on the watcher's thread; may submit operations, must not block long. */
typedef void (*xfer_watch_fn)(void *ctx, uint64_t old_value, uint64_t new_value);

/* A 64-bit word that a GPU kernel (or any thread) bumps, and a thread that
 * calls cb(old, new) when it changes. The word is pinned host memory mapped
 * into the GPU when CUDA is present (write it from a kernel through
 * xfer_watcher_device_ptr; CUDA Graph capture and replay work, since it is a
 * plain store), plain host memory otherwise.
 *
 * spin_us picks the thread's mode:
 *   0 (default)  spin mode for a watcher whose word is mapped into a GPU,
 *                hybrid with a 1000 us window otherwise;
 *   XFER_SPIN_FOREVER  spin mode: the thread polls without ever sleeping on
 *                a core of its own (pinned: XFER_WATCHER_CPU=<cpu>, default
 *                the last CPU this process may use; XFER_WATCHER_CPU=-1
 *                leaves it unpinned), as the fabric-lib watcher does;
 *   other        hybrid mode, for hosts without a core to spare: spins
 *                spin_us after each change, then naps of about 10 us (timer
 *                slack 1 us) until the word moves again.
 * XFER_WATCHER_MODE=spin|hybrid overrides the default of spin_us 0. */
#define XFER_SPIN_FOREVER 0xffffffffu
int xfer_watcher_create(xfer_watch_fn cb, void *ctx, uint32_t spin_us, xfer_watcher_t **out);
void xfer_watcher_destroy(xfer_watcher_t *w);
volatile uint64_t *xfer_watcher_word(xfer_watcher_t *w);
/* Device address of the word (0 without CUDA). */
uint64_t xfer_watcher_device_ptr(xfer_watcher_t *w);

/* ----------------------------------------------------------------- topology */

enum { XFER_DEV_NIC = 1, XFER_DEV_GPU = 2 };
struct xfer_topo_dev {
	int kind;      /* XFER_DEV_NIC or XFER_DEV_GPU */
	char name[64]; /* interface name ("eth0", "mlx5_0") or "gpuN" */
	char pci[16];  /* PCI address, "" when not on PCI */
	int numa;      /* NUMA node, -1 when unknown */
};
/* Lists GPUs, then NICs; returns how many exist (may exceed max), or
 * -EOPNOTSUPP when built without hwloc. */
int xfer_topology(struct xfer_topo_dev *out, int max);
/* The NICs that belong with GPU `gpu` (same NUMA node, else all), as the
 * comma list xfer_attr.nics takes; returns how many. */
int xfer_topology_nics_for_gpu(int gpu, char *nics, size_t cap);

/* worker_cpu value: pin the worker to the cores of its first NIC's NUMA node. */
#define XFER_CPU_AUTO (-2)

/* -------------------------------------------------------------- statistics */

struct xfer_stats {
	uint64_t ops_submitted;
	uint64_t ops_completed;
	uint64_t ops_failed;
	uint64_t wrs_posted;
	uint64_t bytes_written;
	uint64_t imms_received;
	uint64_t imms_dropped; /* arrivals lost because imm_slots were all in use */
	uint64_t msgs_received;
	uint64_t worker_sleeps;
	/* messages dropped because their sender is not the peer they name, or
	 * no peer of ours (where the provider names senders: docs/failure-semantics.md) */
	uint64_t msgs_refused;
};
void xfer_engine_stats(const xfer_engine_t *e, struct xfer_stats *out);

/* --------------------------------------------------------------- telemetry */

/*
 * Per-peer, per-NIC and per-kind figures, on by default (XFER_TELEMETRY=0
 * turns them off at engine creation, xfer_engine_telemetry at any time:
 * while off they stay as they were, and only struct xfer_stats counts;
 * an operation is timed only if telemetry was on at its submission and at
 * its completion). The worker writes its counters with plain stores to
 * lines of its own; readers load them relaxed, so a snapshot is not
 * mutually consistent while work is in flight, and exact once it is idle.
 *
 * Versioned structures: set `size` to sizeof the structure before the call.
 * The library fills the fields that both it and the caller know, zeroes
 * the rest of the caller's structure, and sets `size` to the bytes it
 * filled; later versions only add fields at the end. -EINVAL when `size`
 * does not cover the fields up to and including the identification ones.
 */

/* Error classes of the errors[] arrays below: a completion's -errno goes to
 * its own class, or to XFER_STATS_EOTHER. */
enum xfer_stats_code {
	XFER_STATS_EOTHER = 0,
	XFER_STATS_ETIMEDOUT,
	XFER_STATS_ECANCELED,
	XFER_STATS_EPEER, /* -XFER_EPEER */
	XFER_STATS_ECONNRESET,
	XFER_STATS_ECONNREFUSED,
	XFER_STATS_ECONNABORTED,
	XFER_STATS_EHOSTUNREACH,
	XFER_STATS_ENOTCONN,
	XFER_STATS_EPIPE,
	XFER_STATS_EIO,
	XFER_STATS_EFABRIC, /* -XFER_EFABRIC */
	XFER_STATS_ENOSPC,
	XFER_STATS_EBUSY,
	XFER_STATS_EACCES,
	XFER_STATS_ESHUTDOWN,
};
#define XFER_STATS_CODES 16
/* Latency buckets: bucket i counts latencies in (2^(i-1), 2^i] ns, bucket 0
 * those of at most 1 ns, the last one everything above 2^62 ns. */
#define XFER_STATS_BUCKETS 64

/* "ETIMEDOUT", ..., "EPEER", "other" for class i; NULL past the last. */
const char *xfer_stats_code_name(unsigned i);
/* The class of a result (0 or -errno): XFER_STATS_E*, or -1 for res >= 0. */
int xfer_stats_code_of(int res);

struct xfer_stats_engine {
	uint32_t size;
	uint32_t enabled;      /* 1 unless XFER_TELEMETRY=0 or xfer_engine_telemetry(e, 0) */
	uint64_t submit_again; /* submissions refused with -EAGAIN (queue full) */
	uint64_t retries;      /* posts the provider refused (-EAGAIN) and that were tried again, all NICs */
	uint64_t timeouts;     /* operations, expectations and cancels whose deadline passed */
	uint64_t errors[XFER_STATS_CODES]; /* completions with res < 0, every kind, by class */
};
int xfer_stats_engine(const xfer_engine_t *e, struct xfer_stats_engine *out);
/* Turns the figures below on (enable != 0) or off, from any thread. */
void xfer_engine_telemetry(xfer_engine_t *e, int enable);

/* Lists the peer handles the engine holds (live or dead); returns how many
 * exist, which may exceed max. */
int xfer_stats_peers(const xfer_engine_t *e, xfer_peer_t *peers, int max);

/* One peer's figures; peer XFER_PEER_NONE: the totals of every peer removed
 * so far, folded in at xfer_peer_remove. -ENOENT: no such peer. */
struct xfer_stats_peer {
	uint32_t size;
	uint32_t peer;      /* the handle, or XFER_PEER_NONE for the removed peers' totals */
	uint64_t engine_id; /* its engine; 0 for the removed peers' totals */
	int32_t state;      /* XFER_PEER_LIVE or XFER_PEER_DEAD; 0 for the totals */
	uint32_t reserved;
	uint64_t ops;            /* its send, write, paged and imm operations that completed */
	uint64_t writes;         /* write requests posted to it: writes, shards, pages, imm-only, entries */
	uint64_t bytes_written;  /* their payload */
	uint64_t sends;          /* application SENDs posted to it */
	uint64_t bytes_sent;     /* their payload */
	uint64_t msgs_received;  /* application messages from its engine */
	uint64_t bytes_received; /* their payload */
	uint64_t retries;        /* its posts refused by the provider (-EAGAIN), tried again */
	uint64_t timeouts;       /* its operations whose deadline passed */
	/* Its operations that failed, by class; a scatter or barrier entry
	 * that failed at this member counts here too. */
	uint64_t errors[XFER_STATS_CODES];
};
int xfer_stats_peer(const xfer_engine_t *e, xfer_peer_t peer, struct xfer_stats_peer *out);

/* NIC i's figures (xfer_engine_nic_name names it); -EINVAL past the last.
 * What arrives is counted where it lands: a peer's write with an immediate
 * is seen by the NIC that reports it, with no length and no sender (the
 * fabric does not say who wrote), so it is counted per NIC only. */
struct xfer_stats_nic {
	uint32_t size;
	uint32_t nic;
	uint64_t writes;         /* write requests posted on it */
	uint64_t bytes_written;  /* their payload */
	uint64_t sends;          /* SENDs posted on it: messages and GPU notices, not probes */
	uint64_t bytes_sent;     /* whole messages, headers included */
	uint64_t probes;         /* PING, PONG and BYE posted */
	uint64_t retries;        /* posts the provider refused with -EAGAIN */
	uint64_t tx_errors;      /* requests of any kind that completed with an error */
	uint64_t imms_received;  /* peers' writes with an immediate that landed through it */
	uint64_t msgs_received;  /* messages received: application, notices and probes */
	uint64_t bytes_received; /* whole messages, headers included */
	uint64_t recv_errors;    /* receives that failed or held a malformed message */
};
int xfer_stats_nic(const xfer_engine_t *e, unsigned nic, struct xfer_stats_nic *out);

/* Submission to completion (the completion delivered, to the queue or the
 * callback) of one op kind (XFER_OP_*), recorded on the worker. */
struct xfer_stats_latency {
	uint32_t size;
	uint32_t kind;
	uint64_t count;  /* the sum of buckets[] */
	uint64_t sum_ns;
	uint64_t buckets[XFER_STATS_BUCKETS];
};
int xfer_stats_latency(const xfer_engine_t *e, uint32_t kind, struct xfer_stats_latency *out);

/* Everything above and struct xfer_stats, in the Prometheus text format
 * (version 0.0.4), every series labelled engine="<id, 16 hex digits>".
 * Writes a NUL-terminated text and returns its length, or -ENOSPC when cap
 * is too small, with the bytes needed (NUL included) in *need when need is
 * not NULL; the text can grow between two calls (a peer added): allow for it. */
int xfer_stats_prometheus(const xfer_engine_t *e, char *buf, size_t cap, size_t *need);

/* Host-proxy overhead tracing (benchmarks): when enabled, each operation
 * leaves one record with CLOCK_MONOTONIC timestamps in ns. Records that do
 * not fit in the trace ring (65,536) are dropped, never waited for.
 * xfer_engine_trace's enable: 0 off, 1 every operation, N > 1 one
 * operation in N (counted per submitting thread), so that a benchmark of
 * small operations does not pay the clock reads on all of them. */
struct xfer_trace {
	uint64_t user_data;
	uint32_t kind;
	uint32_t wrs;      /* requests posted */
	uint64_t t_call;   /* the submit function was entered */
	uint64_t t_enq;    /* validated and handed to the worker */
	uint64_t t_deq;    /* the worker took it */
	uint64_t t_first;  /* first request handed to the provider (before its post call) */
	uint64_t t_last;   /* last request posted (after its post call returned) */
	uint64_t t_done;   /* completion delivered */
	uint64_t t_first_ret; /* the provider's post call for the first request returned */
};
void xfer_engine_trace(xfer_engine_t *e, int enable);
int xfer_trace_read(xfer_engine_t *e, struct xfer_trace *out, int max);

#ifdef __cplusplus
}
#endif
#endif
