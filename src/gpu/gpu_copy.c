/* The worker's GPU copy engine (gpu_copy.h). Two kinds of copies:
 *  - synchronous staging copies between a GPU region and its pinned host
 *    mirror (xi_gpu_stage_*), now only a target's fallback. They block the
 *    worker, but only for their own bytes: the application must have
 *    finished writing a source before it submits (as with any RDMA
 *    library), and nothing here waits for its streams;
 *  - tracked copies between GPUs of one host (through a peer's CUDA IPC
 *    mapping, NVLink where present), host to GPU, or between a region and
 *    its mirror, issued on a stream (copy engine, or jobs of the copy
 *    kernel's next launch) and followed by an event; xi_gpu_poll reports
 *    each as it finishes, in order.
 * Every copy goes on this engine's own non-blocking stream of its device:
 * a synchronous cuMemcpy would use the legacy default stream, where PyTorch
 * and most applications queue their kernels, and so would wait for every
 * kernel queued so far (a whole prefill) before copying. */
#include "gpu/gpu_copy.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/cuda_api.h"
#include "gpu/fatbin.h"
#include "gpu/gpu_trace.h"
#include "gpu/kernel_args.h"
#include "util/log.h"
#include "util/sys.h"
#include "xfer.h"

struct gpu_wait {
	void *ctx;
	CUevent event; /* NULL while its kernel job waits in the open batch */
	int dev;
	uint32_t idx_bytes; /* of its device's page-list ring, freed when it fires */
	bool failed;        /* its batch's launch failed: reported as -EIO */
	uint32_t trace;     /* its trace record (XFER_GPU_TRACE) */
	/* The stream writes flag_seq to word flag_slot of its device's flags
	 * once the copy is done (0: no word, the event only). */
	uint32_t flag_seq, flag_slot;
};

/* Kernel jobs of calls posted in one turn of the worker, launched together
 * (xi_gpu_flush, or sooner when full or when other work must follow them on
 * the stream). The copies ended so far whose jobs are in it are the last
 * `waiting` entries of the ring: their events are recorded after the launch. */
struct kbatch {
	struct xi_pages_args a;
	int dev;
	uint32_t waiting;
	uint32_t trace;
	uint64_t bytes;
	/* Its first job's host end, where that job copies to (from) a mapped
	 * pinned buffer: a batch of that job alone goes to the copy engine as a
	 * DtoH (HtoD) copy. */
	void *lone_hdst;
	const void *lone_hsrc;
	/* Every job so far paged, with pages of XI_BULK_MIN_PAGE or more: with
	 * at most XI_BULK_MAX_BYTES in all, the bulk kernel's launch by default
	 * (launch_batch). */
	bool big_pages;
};

/* Measured on an H200 (docs/performance.md, runs gpu5-1, gpu5-2, main
 * 1ed6561, gpuk6-1, gpuk6-2): at 1,024 x 16 KiB pages (16 MiB a call) the
 * bulk kernel ran at 0.81-1.17x a contiguous copy against the tile
 * kernel's 0.60-0.93x, at 1,024 x 64 KiB (64 MiB) as fast or faster; at
 * 16,384 pages (256 MiB and 1 GiB a call) tile was as fast or faster
 * (16 KiB: 0.78-0.80 vs 0.74-0.80 in gpuk6-1/2), at 4 KiB better or
 * steadier. So bulk takes aligned launches of big pages up to
 * XI_BULK_MAX_BYTES. */
#define XI_BULK_MIN_PAGE (16u << 10)
#define XI_GPU_LAND_BATCH_MAX (256u << 10) /* the biggest landing batched (struct xi_gpu's land_batch) */
#define XI_BULK_MAX_BYTES (64ull << 20)

/* Page lists of kernels in flight: pinned host memory written here, which
 * the kernel reads over the bus for calls below 512 MiB, or copied first on
 * the stream into a device twin it reads (XFER_GPU_INDEX=mapped|device
 * forces one way). Used in FIFO order, like the copies ring. */
#define IDX_RING (4u << 20)

struct gpu_kernels {
	int state; /* 0 not tried, 1 loaded, -1 unavailable on this device */
	CUmodule mod;
	CUfunction fn, fn_tile, fn_bulk; /* the last two NULL where the fatbin lacks them */
	unsigned sms;
	uint8_t *host; /* IDX_RING bytes */
	CUdeviceptr host_dev, dev;
	uint64_t tail, used;
};

struct xi_gpu {
	const struct cuda_api *c;
	int cur_dev; /* device whose context is current on cur_thread, -1 none */
	/* The thread that made it current: a turn may run on a waiting
	 * application thread (busy_poll 2, core/drive.c), whose context is
	 * set again before it touches the GPU. */
	pthread_t cur_thread;
	CUstream stream[XI_GPU_DEVS];
	CUevent events[XI_GPU_DEVS][XI_GPU_RING];
	/* Copies in flight, oldest first, each with its event. */
	struct gpu_wait ring[XI_GPU_RING];
	uint32_t head, count;
	/* The copy being built between begin and end. */
	int dev;
	size_t nbatch;
	bool batch_off; /* the driver refused a batch: one call per piece from now on */
	CUdeviceptr batch_dst[XI_GPU_BATCH], batch_src[XI_GPU_BATCH];
	size_t batch_len[XI_GPU_BATCH];
	/* Page-list bytes reserved by the copy being built: returned if it is
	 * abandoned, handed to its ring entry at end. */
	uint32_t pend_idx;
	int index_mode; /* XFER_GPU_INDEX at creation: 0 by size, 1 mapped, 2 device */
	struct gpu_kernels k[XI_GPU_DEVS];
	struct kbatch kb;
	bool cur_in_batch;   /* the copy being built has a job in kb */
	bool cur_failed;     /* ... and kb's launch failed: the copy fails */
	uint64_t t_begin;    /* XFER_GPU_TRACE: when the copy being built began */
	bool batch_calls;    /* XFER_GPU_BATCH != 0: calls of a turn share a launch */
	uint64_t kernel_max; /* contiguous device copies up to this go by kernel */
	struct xi_gpu_trace *trace; /* made with the first stream: it needs a context */
	bool trace_tried;
	bool spread;      /* XFER_GPU_SPREAD=1: a launch's warps spread over every SM first */
	bool lone_engine; /* XFER_GPU_LONE != kernel: a batch of one contiguous copy goes to the copy engine */
	int pages_kind;   /* XFER_GPU_PAGES: PAGES_AUTO (default), PAGES_WARP, PAGES_TILE or PAGES_BULK */
	bool stage_kernel; /* XFER_GPU_STAGE=kernel: copies to/from mapped pinned memory join the kernel's batch */
	bool stage_kernel_dtoh; /* default (XFER_GPU_STAGE=kernel-dtoh): only those to mapped pinned memory (stagings) */
	/* Landings (mirror -> device) queued for one cuMemcpyBatchAsync when
	 * the open batch launches, before its kernel (XFER_GPU_LAND=batch, the
	 * default): on the target of staged writes the worker also makes the
	 * transport's copies (xfer's shm pulls), and a copy, its word and its
	 * event apiece cost it ~2.4 us a landing (traced on an H200, session 9).
	 * The pieces of copies ended so far and of the one being built. */
	bool land_batch;
	size_t nland;
	/* Only landings up to XI_GPU_LAND_BATCH_MAX bytes (a bigger one sends
	 * the batch, then goes alone): in a batch each landing's immediates
	 * wait for the whole batch, and the per-call cost saved is small beside
	 * a big copy. Measured on an H200 (docs/performance.md, session 10),
	 * every landing batched: staged shm 64 KiB singles 1.27x as fast as one
	 * copy each, but shm 1 MiB 0.62-0.65 against 0.65-0.83 and 16 MiB
	 * 8.3-9.3 against 10.3-11.0 GB/s. */
	uint32_t land_trace; /* their trace record (XFER_GPU_TRACE), while land_traced */
	bool land_traced;
	bool cur_land;       /* the copy being built has pieces among them */
	CUdeviceptr land_dst[XI_GPU_BATCH], land_src[XI_GPU_BATCH];
	size_t land_len[XI_GPU_BATCH];
	uint64_t stage_ahead; /* ops staging at most this many bytes start it behind a waiting FIFO head */
	bool stage_next;      /* default (XFER_GPU_STAGE_AHEAD=next): the op behind the head stages, any size */
	/* Copy-end words (unless XFER_GPU_DONE=event): after each copy (before
	 * its event) the stream writes a sequence number to a pinned host word,
	 * which xi_gpu_poll reads instead of querying the event: a query that
	 * finds the copy done cost this thread 1.6-1.9 us on an H200
	 * (docs/performance.md), on the way of every lone write. The event is
	 * still queried now and then: a copy that fails never writes its word. */
	bool done_flag;
	uint32_t *flags[XI_GPU_DEVS]; /* XI_GPU_RING words per device, pinned and mapped; NULL: events only */
	CUdeviceptr flags_dev[XI_GPU_DEVS];
	uint32_t flag_seq;
	uint32_t flag_polls;
};

/* Polls between two queries of the event of a copy that writes a word. */
#define FLAG_QUERY_EVERY 64u

/* AUTO: bulk for aligned launches of big pages up to XI_BULK_MAX_BYTES
 * (big_pages), tile for the rest; the others force one kernel (bulk:
 * aligned launches only). */
enum { PAGES_WARP, PAGES_TILE, PAGES_BULK, PAGES_AUTO };

static bool env_is(const char *name, const char *value)
{
	const char *v = getenv(name);
	return v && !strcmp(v, value);
}

struct xi_gpu *xi_gpu_create(void)
{
	const struct cuda_api *c = xi_cuda_get();
	if (!c)
		return NULL;
	struct xi_gpu *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->c = c;
	g->cur_dev = -1;
	g->dev = -1;
	g->index_mode = env_is("XFER_GPU_INDEX", "mapped") ? 1 : env_is("XFER_GPU_INDEX", "device") ? 2 : 0;
	g->batch_calls = !env_is("XFER_GPU_BATCH", "0");
	g->kernel_max = XI_GPU_KERNEL_MAX_DEFAULT;
	const char *km = getenv("XFER_GPU_KERNEL_MAX");
	if (km && *km) {
		/* G counts ("1G" was once 1 byte: every copy by the copy engine);
		 * beyond 64 bits, as large as it gets (every contiguous copy by
		 * kernel); anything after the suffix is ignored. */
		char *end;
		g->kernel_max = xi_parse_bytes(km, &end);
	}
	g->kb.dev = -1;
	/* Off by default: measured on an H200 (docs/performance.md), random
	 * pages ran at half speed spread (0.33-0.38x vs 0.76-0.92x a contiguous
	 * copy for 16/64 KiB pages), likely for want of TLB locality. */
	g->spread = env_is("XFER_GPU_SPREAD", "1");
	g->lone_engine = !env_is("XFER_GPU_LONE", "kernel");
	g->stage_kernel = env_is("XFER_GPU_STAGE", "kernel");
	/* By default (kernel-dtoh) a source's stagings join the batch, device
	 * -> host only: the SMs' stores to the mirror are posted writes over
	 * the bus, their loads from it (a landing) are round trips, which is
	 * what made landings by kernel slower than by the copy engine (runs
	 * gpu5-1/2). Measured on one H200 (docs/performance.md, session 9,
	 * 3 rounds): staged single 64 KiB +14-17 % GPU GB/s on shm and tcp,
	 * the other rows within the spread. XFER_GPU_STAGE=engine: every
	 * staging copy by the copy engine. */
	g->stage_kernel_dtoh = !g->stage_kernel && !env_is("XFER_GPU_STAGE", "engine");
	/* Early staging by default only for small ops: measured on an H200
	 * (docs/performance.md, runs stage7-1..3), for every op it made staged
	 * single 64 KiB writes 10-15 % faster on shm in each run, but 1 MiB
	 * singles and 64 MiB paged writes slower (their copies then compete
	 * with the transfer of the op before them). XFER_GPU_STAGE_AHEAD=1:
	 * every op, =0: none, =small: those alone (no "next" below). */
	g->stage_ahead = env_is("XFER_GPU_STAGE_AHEAD", "1")   ? UINT64_MAX
			 : env_is("XFER_GPU_STAGE_AHEAD", "0") ? 0
							       : XI_GPU_STAGE_AHEAD_MAX;
	/* And by default (next) the op right behind the one being posted
	 * stages whatever its size (double buffering: its copy runs while the
	 * transport takes the op before it; traced on one H200, a 1 MiB
	 * write's source copies went from one every ~100 us, each after the
	 * op before it left, to one every ~25 us). Measured (docs/performance.md,
	 * session 9, 5 rounds on two hosts): staged tcp single 1 MiB GPU GB/s
	 * +19 % on average, no row worse beyond the spread. */
	g->stage_next = g->stage_ahead == XI_GPU_STAGE_AHEAD_MAX && !env_is("XFER_GPU_STAGE_AHEAD", "small");
	/* On by default: in run gpu6-2 (one H200, 3 runs each, same session)
	 * lone writes ran 1.10x (64 KiB), 1.15x (1 MiB) and 1.04x (16 MiB) as
	 * fast as with event queries, and equal from 256 MiB and at 16 in
	 * flight (docs/performance.md). XFER_GPU_DONE=event: queries only. */
	g->done_flag = !env_is("XFER_GPU_DONE", "event") && c->cuStreamWriteValue32;
	g->land_batch = !env_is("XFER_GPU_LAND", "each") && c->cuMemcpyBatchAsync;
	/* Tile for most launches: in run gpu5-1 (one H200, 3 runs each, same
	 * session) it was the best or within noise of the best on every paged
	 * row and the steadiest; bulk where it wins (XI_BULK_MIN_PAGE). */
	g->pages_kind = env_is("XFER_GPU_PAGES", "warp")   ? PAGES_WARP
			: env_is("XFER_GPU_PAGES", "tile") ? PAGES_TILE
			: env_is("XFER_GPU_PAGES", "bulk") ? PAGES_BULK
							   : PAGES_AUTO; /* "auto", unset, or anything else */
	return g;
}

static int use_dev(struct xi_gpu *g, int dev)
{
	pthread_t self = pthread_self();
	if (g->cur_dev == dev && pthread_equal(g->cur_thread, self))
		return 0;
	int ret = xi_cuda_use_device(dev);
	if (!ret) {
		g->cur_dev = dev;
		g->cur_thread = self;
	}
	return ret;
}

static bool make_flags(struct xi_gpu *g, int dev);

/* The ring's events and copy-end words of dev, made with its stream (at GPU
 * registration, xi_gpu_prepare) rather than at each slot's first copy, where
 * each creation was a driver allocation on the way of one of the first 256
 * copies (run page7-3, H200: lone 64 KiB writes, call to completion p50
 * 12.6 us against 15.1 us with events made at first use), and the words'
 * pinned memory on the way of the first (run stage7-1: 1.0-1.3 ms of a
 * target's first landing, inside whatever the application was timing).
 * Best effort: a slot left without its event makes it at first use, as
 * before (XFER_GPU_EVENTS=lazy: always so, for A/B runs). */
static void make_ring(struct xi_gpu *g, int dev)
{
	if (g->done_flag)
		(void)make_flags(g, dev);
	if (env_is("XFER_GPU_EVENTS", "lazy"))
		return;
	for (uint32_t i = 0; i < XI_GPU_RING; i++)
		if (g->c->cuEventCreate(&g->events[dev][i], CU_EVENT_DISABLE_TIMING)) {
			g->events[dev][i] = NULL;
			break;
		}
}

/* This engine's stream on dev, with dev's context made current. */
static CUstream stream_of(struct xi_gpu *g, int dev)
{
	if (dev < 0 || dev >= XI_GPU_DEVS || use_dev(g, dev))
		return NULL;
	if (!g->stream[dev]) {
		if (g->c->cuStreamCreate(&g->stream[dev], CU_STREAM_NON_BLOCKING))
			return NULL;
		make_ring(g, dev);
	}
	if (!g->trace_tried) {
		g->trace_tried = true; /* pinned memory needs a current context */
		g->trace = xi_gpu_trace_create(g->c, XI_GPU_MAX_CTAS);
	}
	return g->stream[dev];
}

void xi_gpu_destroy(struct xi_gpu *g)
{
	if (!g)
		return;
	for (int dev = 0; dev < XI_GPU_DEVS; dev++) {
		if (!g->stream[dev] || use_dev(g, dev))
			continue;
		for (uint32_t i = 0; i < XI_GPU_RING; i++)
			if (g->events[dev][i])
				g->c->cuEventDestroy(g->events[dev][i]);
		/* Kernels still running read the page lists: let them finish. */
		g->c->cuStreamSynchronize(g->stream[dev]);
		g->c->cuStreamDestroy(g->stream[dev]);
		struct gpu_kernels *k = &g->k[dev];
		if (k->host)
			g->c->cuMemFreeHost(k->host);
		if (g->flags[dev])
			g->c->cuMemFreeHost(g->flags[dev]);
		if (k->dev)
			g->c->cuMemFree(k->dev);
	}
	xi_gpu_trace_destroy(g->trace);
	free(g);
}

/* ---------------------------------------------------------- copy kernels */

static struct gpu_kernels *kernels_of(struct xi_gpu *g, int dev)
{
	static int logged;
	struct gpu_kernels *k = &g->k[dev];
	const struct cuda_api *c = g->c;
	if (k->state)
		return k->state > 0 ? k : NULL;
	k->state = -1;
	const char *why = NULL;
	int sms = 0;
	if (env_is("XFER_GPU_KERNEL", "0"))
		why = "XFER_GPU_KERNEL=0";
	else if (!xi_gpu_fatbin_len)
		why = "built without nvcc";
	else if (!c->cuModuleLoadData || !c->cuModuleGetFunction || !c->cuLaunchKernel || !c->cuMemAlloc ||
		 !c->cuMemFree)
		why = "the driver lacks the module API";
	else if (c->cuModuleLoadData(&k->mod, xi_gpu_fatbin))
		why = "the driver would not load the fatbin (no sm_90 code or PTX for this GPU)";
	else if (c->cuModuleGetFunction(&k->fn, k->mod, XI_PAGES_KERNEL))
		why = "the fatbin lacks " XI_PAGES_KERNEL;
	else if (c->cuFuncLoad && c->cuFuncLoad(k->fn))
		why = "the driver would not load " XI_PAGES_KERNEL;
	else if (c->cuMemHostAlloc((void **)&k->host, IDX_RING, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) ||
		 c->cuMemHostGetDevicePointer(&k->host_dev, k->host, 0) || c->cuMemAlloc(&k->dev, IDX_RING))
		why = "no memory for page lists";
	if (why) {
		/* Asked for, or built so: information; anything else is a fault
		 * that costs speed. */
		bool chosen = !xi_gpu_fatbin_len || env_is("XFER_GPU_KERNEL", "0");
		if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) {
			if (chosen)
				xinfo("GPU copy kernels off (%s): paged GPU copies use the copy engine", why);
			else
				xwarn("GPU copy kernels off (%s): paged GPU copies use the copy engine", why);
		}
		return NULL;
	}
	CUdevice d = dev;
	if (!c->cuDeviceGetAttribute || c->cuDeviceGet(&d, dev) ||
	    c->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d) || sms <= 0)
		sms = 132;
	k->sms = (unsigned)sms;
	k->state = 1;
	/* Loaded now for the same reason as the warp kernel (lazy loading,
	 * xi_gpu_prepare); one that will not load leaves its launches to the
	 * warp kernel (tile's) or to the tile kernel (bulk's, by default). */
	for (int kind = PAGES_TILE; kind <= PAGES_BULK; kind++) {
		if (g->pages_kind != kind && g->pages_kind != PAGES_AUTO)
			continue;
		const char *name = kind == PAGES_TILE ? XI_PAGES_KERNEL_TILE : XI_PAGES_KERNEL_BULK;
		CUfunction *fn = kind == PAGES_TILE ? &k->fn_tile : &k->fn_bulk;
		if (c->cuModuleGetFunction(fn, k->mod, name) || (c->cuFuncLoad && c->cuFuncLoad(*fn))) {
			*fn = NULL;
			xwarn("GPU copy kernels: %s would not load: others copy its launches", name);
		}
	}
	xinfo("GPU copy kernels loaded on device %d (%d SMs, paged copies by %s%s)", dev, sms,
	      k->fn_tile ? XI_PAGES_KERNEL_TILE : k->fn_bulk ? XI_PAGES_KERNEL_BULK : XI_PAGES_KERNEL,
	      k->fn_tile && k->fn_bulk ? ", " XI_PAGES_KERNEL_BULK " for pages of 16 KiB and more, up to 64 MiB a launch" : "");
	return k;
}


/* n bytes of a page-list ring at *off, the bytes taken (n and any end
 * of the ring skipped) added to *taken: 0, -EAGAIN while copies in flight
 * hold it, or 1 for a list that would not fit even an empty ring. */

/* dev's copy-end words, once per device (make_ring): false, words off from
 * now on, if there is no mapped pinned memory for them. */
static bool make_flags(struct xi_gpu *g, int dev)
{
	if (g->flags[dev])
		return true;
	if (g->c->cuMemHostAlloc((void **)&g->flags[dev], XI_GPU_RING * sizeof(uint32_t),
				 CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) ||
	    g->c->cuMemHostGetDevicePointer(&g->flags_dev[dev], g->flags[dev], 0)) {
		xwarn("no mapped memory for the copy-end words of device %d: copies use events", dev);
		if (g->flags[dev])
			g->c->cuMemFreeHost(g->flags[dev]);
		g->flags[dev] = NULL;
		g->done_flag = false;
		return false;
	}
	memset(g->flags[dev], 0, XI_GPU_RING * sizeof(uint32_t));
	return true;
}

/* The stream's write of a fresh sequence number to word slot of dev's
 * flags, after everything queued on st so far: the value, or 0 (words off,
 * or no memory for them, or the driver refused: events only from now on). */
static uint32_t write_flag(struct xi_gpu *g, int dev, CUstream st, uint32_t slot)
{
	if (!g->done_flag || !make_flags(g, dev))
		return 0;
	uint32_t seq = ++g->flag_seq ? g->flag_seq : ++g->flag_seq; /* never 0 */
	if (g->c->cuStreamWriteValue32(st, g->flags_dev[dev] + slot * sizeof(uint32_t), seq, 0)) {
		xwarn("the driver refused a stream write (cuStreamWriteValue32): copies' ends are seen by events");
		g->done_flag = false;
		return 0;
	}
	return seq;
}

/* Launches the open batch: the landings queued since the last launch as one
 * batched copy, every kernel job as one kernel, then one event for all the
 * copies that ended with work in it (the last kb.waiting entries of the
 * ring). A failure fails those copies (and the one being built, if its work
 * was in it). */
static bool issue_lands(struct xi_gpu *g, CUstream st);
static bool launch_jobs(struct xi_gpu *g, CUstream st);

/* n copies handed to the driver in one call, in stream order on st (the
 * paged same-host writes' pieces, and batched landings). */
static CUresult memcpy_batch(struct xi_gpu *g, CUdeviceptr *dst, CUdeviceptr *src, size_t *len, size_t n,
			     CUstream st)
{
	CUmemcpyAttributes attr = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
	size_t first = 0;
	return g->c->cuMemcpyBatchAsync(dst, src, len, n, &attr, &first, 1, st);
}

static void launch_batch(struct xi_gpu *g)
{
	struct kbatch *b = &g->kb;
	if (!b->a.njobs && !g->nland)
		return;
	const struct cuda_api *c = g->c;
	CUstream st = stream_of(g, b->dev);
	/* Landings first: they are the batch's only host-to-device work, and
	 * every copy of the batch waits for the one event below anyway. */
	bool lands_ok = !g->nland || (st && issue_lands(g, st));
	bool ok = lands_ok;
	if (b->a.njobs)
		ok = launch_jobs(g, st) && ok;
	CUevent ev = NULL;
	uint32_t fslot = (g->head + g->count - 1) % XI_GPU_RING, seq = 0;
	if (ok && b->waiting) {
		seq = write_flag(g, b->dev, st, fslot);
		ev = g->events[b->dev][fslot];
		ok = !c->cuEventRecord(ev, st);
	}
	if (g->trace) {
		uint64_t now = xi_gpu_trace_now();
		if (b->a.njobs)
			xi_gpu_trace_rec(g->trace, b->trace)->t_recorded = now;
		if (g->land_traced)
			xi_gpu_trace_rec(g->trace, g->land_trace)->t_recorded = now;
	}
	for (uint32_t i = 0; i < b->waiting; i++) {
		struct gpu_wait *wt = &g->ring[(g->head + g->count - 1 - i) % XI_GPU_RING];
		wt->event = ok ? ev : NULL;
		wt->failed = !ok;
		wt->flag_seq = seq;
		wt->flag_slot = fslot;
	}
	if (!ok) {
		xerr("GPU copies failed to start (%s): %u copies fail", lands_ok ? "kernel launch" : "landings",
		     b->waiting + (g->cur_in_batch ? 1u : 0u));
		if (g->cur_in_batch)
			g->cur_failed = true;
	}
	g->cur_in_batch = false;
	g->cur_land = false;
	g->land_traced = false;
	b->a.njobs = 0;
	b->a.items = 0;
	b->a.trace = 0;
	b->waiting = 0;
	b->bytes = 0;
	b->dev = -1;
	b->lone_hdst = NULL;
	b->lone_hsrc = NULL;
	b->big_pages = false;
}

/* The driver's batched copy of the queued landings, or (refused) one copy
 * each from now on: copies are idempotent, so a batch the driver refused
 * part-way is redone whole. */
static bool issue_lands(struct xi_gpu *g, CUstream st)
{
	size_t n = g->nland;
	g->nland = 0;
	struct xi_trace_rec *tr = g->land_traced ? xi_gpu_trace_rec(g->trace, g->land_trace) : NULL;
	if (tr)
		tr->t_launch = xi_gpu_trace_now();
	bool ok = g->land_batch && !memcpy_batch(g, g->land_dst, g->land_src, g->land_len, n, st);
	if (!ok) {
		if (g->land_batch)
			xwarn("the driver refused a batched host-to-device copy; landings copy one by one");
		g->land_batch = false;
		ok = true;
		for (size_t i = 0; i < n && ok; i++)
			ok = !g->c->cuMemcpyHtoDAsync(g->land_dst[i], (const void *)(uintptr_t)g->land_src[i],
						      g->land_len[i], st);
	}
	if (tr) {
		tr->t_launched = xi_gpu_trace_now();
		tr->rt_launched = xi_gpu_trace_realtime();
	}
	return ok;
}

/* The open batch's kernel jobs: one launch (or the copy engine, for one
 * contiguous copy alone). */
static bool launch_jobs(struct xi_gpu *g, CUstream st)
{
	struct kbatch *b = &g->kb;
	const struct cuda_api *c = g->c;
	struct gpu_kernels *k = &g->k[b->dev];
	/* The kernel: bulk for the launches it takes (bulk copies need every
	 * address and length aligned), else tile, else the warp kernel. */
	CUfunction fn = k->fn;
	unsigned threads = XI_PAGES_THREADS, per_sm = XI_PAGES_CTAS_PER_SM;
	bool bulk_wins = b->big_pages && b->bytes <= XI_BULK_MAX_BYTES;
	if (k->fn_bulk && b->a.aligned && (g->pages_kind == PAGES_BULK || bulk_wins || !k->fn_tile)) {
		fn = k->fn_bulk;
		threads = XI_BULK_THREADS;
		per_sm = XI_BULK_CTAS_PER_SM;
	} else if (k->fn_tile) {
		fn = k->fn_tile;
	}
	uint64_t warps_per_cta = threads / 32, ctas = (b->a.items + warps_per_cta - 1) / warps_per_cta;
	/* Enough CTAs to fill every SM, no more: the rest is the kernel's
	 * grid-stride loop. */
	uint64_t most = (uint64_t)k->sms * per_sm;
	if (most > XI_GPU_MAX_CTAS)
		most = XI_GPU_MAX_CTAS;
	if (g->spread)
		ctas = b->a.items; /* one warp per CTA at least, over as many SMs as can be had */
	unsigned grid = (unsigned)(ctas < most ? ctas : most);
	struct xi_trace_rec *tr = g->trace ? xi_gpu_trace_rec(g->trace, b->trace) : NULL;
	if (tr) {
		b->a.trace = xi_gpu_trace_slots(g->trace, b->trace, grid);
		tr->ctas = grid;
		tr->calls = b->a.njobs;
		tr->items = b->a.items;
		tr->bytes = b->bytes;
		tr->t_launch = xi_gpu_trace_now();
	}
	void *params[] = {&b->a};
	const struct xi_pages_job *j0 = &b->a.job[0];
	bool ok;
	if (g->lone_engine && b->a.njobs == 1 && !j0->src_pages && !j0->dst_pages && j0->npages == 1) {
		/* One contiguous copy alone (one call in flight): measured on an
		 * H200, the copy engine returns it sooner than a launch does
		 * (docs/performance.md); the kernel is for batches and pages. */
		if (b->lone_hdst)
			ok = st && !c->cuMemcpyDtoHAsync(b->lone_hdst, (CUdeviceptr)j0->src_base, j0->page_len, st);
		else if (b->lone_hsrc)
			ok = st && !c->cuMemcpyHtoDAsync((CUdeviceptr)j0->dst_base, b->lone_hsrc, j0->page_len, st);
		else
			ok = st && !c->cuMemcpyDtoDAsync((CUdeviceptr)j0->dst_base, (CUdeviceptr)j0->src_base,
							 j0->page_len, st);
		if (tr) {
			tr->kind = XI_TRACE_ENGINE;
			tr->ctas = 0;
		}
	} else {
		b->a.spread = g->spread;
		ok = st && !c->cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, st, params, NULL);
	}
	if (tr) {
		tr->t_launched = xi_gpu_trace_now();
		tr->rt_launched = xi_gpu_trace_realtime();
	}
	return ok;
}

void xi_gpu_flush(struct xi_gpu *g)
{
	if (g)
		launch_batch(g);
}

/* Adds job j (its pages' bytes in all, aligned or not) of the copy being
 * built to the open batch. Cannot fail: a full or mismatched batch is
 * launched first. */
static void add_job(struct xi_gpu *g, struct xi_pages_job *j, uint64_t bytes, bool aligned)
{
	struct kbatch *b = &g->kb;
	uint64_t items = (uint64_t)j->npages * j->per_page;
	if (b->a.njobs && (b->a.njobs == XI_PAGES_JOBS || b->dev != g->dev || b->a.aligned != (uint32_t)aligned ||
			   b->a.items + items >= (1ull << 31)))
		launch_batch(g);
	if (!b->a.njobs) {
		b->dev = g->dev; /* landings queued before are this device's too (xi_gpu_copy_begin) */
		b->a.aligned = aligned;
		b->lone_hdst = NULL;
		b->lone_hsrc = NULL;
		b->big_pages = true;
		if (g->trace)
			b->trace = xi_gpu_trace_open(g->trace, XI_TRACE_KERNEL);
	}
	b->big_pages = b->big_pages && j->src_pages && j->page_len >= XI_BULK_MIN_PAGE;
	j->item0 = b->a.items;
	b->a.job[b->a.njobs++] = *j;
	b->a.items += (uint32_t)items;
	b->bytes += bytes;
	g->cur_in_batch = true;
}

/* ---------------------------------------------------------------- staging */

/* Staging copies follow whatever was queued on the stream before them. */
int xi_gpu_stage_dtoh(struct xi_gpu *g, int dev, void *dst, uint64_t src, size_t len)
{
	launch_batch(g);
	CUstream st = stream_of(g, dev);
	if (!st)
		return -XFER_ENOGPU;
	return len && g->c->cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, len, st) ? -EIO : 0;
}

int xi_gpu_stage_htod(struct xi_gpu *g, int dev, uint64_t dst, const void *src, size_t len)
{
	launch_batch(g);
	CUstream st = stream_of(g, dev);
	if (!st)
		return -XFER_ENOGPU;
	return len && g->c->cuMemcpyHtoDAsync((CUdeviceptr)dst, src, len, st) ? -EIO : 0;
}

int xi_gpu_stage_wait(struct xi_gpu *g, int dev)
{
	launch_batch(g);
	CUstream st = stream_of(g, dev);
	if (!st)
		return -XFER_ENOGPU;
	return g->c->cuStreamSynchronize(st) ? -EIO : 0;
}

/* -------------------------------------------------------------------- IPC */

int xi_gpu_ipc_open(struct xi_gpu *g, int dev, const uint8_t *handle, uint64_t *ptr)
{
	/* Any device's context can open the handle; the caller prefers the
	 * source's. */
	if (!stream_of(g, dev))
		return -XFER_ENOGPU;
	CUipcMemHandle h;
	memcpy(&h, handle, sizeof(h));
	CUdeviceptr opened = 0;
	if (g->c->cuIpcOpenMemHandle(&opened, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return -EIO;
	*ptr = opened;
	return 0;
}

void xi_gpu_ipc_close(uint64_t ptr)
{
	const struct cuda_api *c = ptr ? xi_cuda_get() : NULL;
	if (c)
		c->cuIpcCloseMemHandle((CUdeviceptr)ptr);
}

/* --------------------------------------------------------- tracked copies */

int xi_gpu_copy_begin(struct xi_gpu *g, int dev)
{
	if (dev < 0 || dev >= XI_GPU_DEVS)
		return -XFER_ENOGPU;
	if (g->count == XI_GPU_RING) {
		launch_batch(g); /* so that the copies holding the ring can finish */
		return -EAGAIN;
	}
	if ((g->kb.a.njobs || g->nland) && g->kb.dev != dev)
		launch_batch(g); /* a batch is one device's */
	if (!stream_of(g, dev))
		return -XFER_ENOGPU;
	uint32_t slot = (g->head + g->count) % XI_GPU_RING;
	CUevent *ev = &g->events[dev][slot];
	if (!*ev && g->c->cuEventCreate(ev, CU_EVENT_DISABLE_TIMING))
		return -XFER_ENOGPU;
	if (g->pend_idx && g->dev >= 0) {
		/* The previous copy was abandoned after reserving page lists. */
		g->k[g->dev].tail -= g->pend_idx;
		g->k[g->dev].used -= g->pend_idx;
	}
	g->pend_idx = 0;
	g->dev = dev;
	g->nbatch = 0;
	g->cur_in_batch = false;
	g->cur_failed = false;
	if (g->trace)
		g->t_begin = xi_gpu_trace_now();
	return 0;
}

/* Hands the pieces gathered so far to the driver in one call. Copies are
 * idempotent: a refused batch is redone piece by piece. */
static int flush_batch(struct xi_gpu *g)
{
	size_t n = g->nbatch;
	g->nbatch = 0;
	if (!n)
		return 0;
	if (!g->batch_off && !memcpy_batch(g, g->batch_dst, g->batch_src, g->batch_len, n, g->stream[g->dev]))
		return 0;
	if (!g->batch_off)
		xwarn("the driver refused a batched copy; same-host paged writes copy page by page");
	g->batch_off = true;
	int ret = 0;
	for (size_t i = 0; i < n && !ret; i++)
		ret = xi_gpu_copy_add(g, g->batch_dst[i], g->batch_src[i], NULL, g->batch_len[i]);
	return ret;
}

/* One contiguous copy (16-byte aligned, below 2^31 bytes: the callers check)
 * as a job of the kernel's next launch; the copy-engine batch gathered so far
 * goes to the stream first, so that the stream keeps the calls' order. */
static int contiguous_job(struct xi_gpu *g, uint64_t dst, uint64_t src, size_t len)
{
	int ret = flush_batch(g);
	if (ret)
		return ret;
	struct xi_pages_job j = {.src_base = src, .dst_base = dst, .page_len = (uint32_t)len, .npages = 1,
				 .per_page = (uint32_t)((len + XI_PAGES_CHUNK - 1) / XI_PAGES_CHUNK)};
	add_job(g, &j, len, true);
	return 0;
}

/* XFER_GPU_STAGE=kernel (both ways) or kernel-dtoh (the default: device
 * to host only): a copy between device memory and pinned host
 * memory mapped into the device (a staged region's mirror) as a job of the
 * kernel's next launch, so that the staging copies of the calls of one turn
 * share a launch and an event rather than costing a copy-engine call and an
 * event each (~5 us of the worker apiece); alone in its launch it still goes
 * to the copy engine (launch_batch). 1 when it does not apply (the copy
 * engine's copy follows), else 0 or the error. */
static int mapped_job(struct xi_gpu *g, uint64_t dst, uint64_t src, void *hdst, const void *hsrc, size_t len)
{
	CUdeviceptr mapped = 0;
	if (!(g->stage_kernel || (g->stage_kernel_dtoh && hdst)) || len > g->kernel_max || len >= (1ull << 31))
		return 1;
	struct gpu_kernels *k = kernels_of(g, g->dev);
	/* Not pinned and mapped (an application's host buffer): not a job. */
	if (!k || g->c->cuMemHostGetDevicePointer(&mapped, hdst ? hdst : (void *)hsrc, 0))
		return 1;
	if (hdst)
		dst = mapped;
	else
		src = mapped;
	if ((dst | src | len) & 15)
		return 1;
	int ret = contiguous_job(g, dst, src, len);
	if (ret)
		return ret;
	if (g->kb.a.njobs == 1) {
		g->kb.lone_hdst = hdst;
		g->kb.lone_hsrc = hsrc;
	}
	return 0;
}

int xi_gpu_copy_add(struct xi_gpu *g, uint64_t dst, uint64_t src, const void *src_host, size_t len)
{
	if (!len)
		return 0;
	if (src_host) {
		int ret = mapped_job(g, dst, 0, NULL, src_host, len);
		if (ret != 1)
			return ret;
	}
	launch_batch(g); /* jobs queued so far go first: the stream keeps order */
	CUstream st = g->stream[g->dev];
	if (src_host)
		return g->c->cuMemcpyHtoDAsync((CUdeviceptr)dst, src_host, len, st) ? -EIO : 0;
	return g->c->cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, len, st) ? -EIO : 0;
}

int xi_gpu_copy_add_land(struct xi_gpu *g, uint64_t dst, const void *mirror, size_t len)
{
	if (!len)
		return 0;
	int ret = mapped_job(g, dst, 0, NULL, mirror, len); /* XFER_GPU_STAGE=kernel */
	if (ret != 1 || !g->land_batch || len > XI_GPU_LAND_BATCH_MAX)
		return ret != 1 ? ret : xi_gpu_copy_add(g, dst, 0, mirror, len);
	if (g->nland == XI_GPU_BATCH)
		launch_batch(g); /* the copy being built, if it has pieces in it, gets its own event at end */
	struct kbatch *b = &g->kb;
	if (!b->a.njobs && !g->nland)
		b->dev = g->dev;
	if (g->trace && !g->land_traced) {
		g->land_trace = xi_gpu_trace_open(g->trace, XI_TRACE_ENGINE);
		g->land_traced = true;
		xi_gpu_trace_rec(g->trace, g->land_trace)->t_open = g->t_begin;
	}
	if (g->land_traced) {
		struct xi_trace_rec *tr = xi_gpu_trace_rec(g->trace, g->land_trace);
		tr->calls += !g->cur_land;
		tr->bytes += len;
	}
	g->land_dst[g->nland] = (CUdeviceptr)dst;
	g->land_src[g->nland] = (CUdeviceptr)(uintptr_t)mirror;
	g->land_len[g->nland++] = len;
	g->cur_in_batch = true;
	g->cur_land = true;
	return 0;
}

int xi_gpu_copy_add_dtoh(struct xi_gpu *g, void *dst_host, uint64_t src, size_t len)
{
	if (!len)
		return 0;
	int ret = mapped_job(g, 0, src, dst_host, NULL, len);
	if (ret != 1)
		return ret;
	launch_batch(g);
	return g->c->cuMemcpyDtoHAsync(dst_host, (CUdeviceptr)src, len, g->stream[g->dev]) ? -EIO : 0;
}


int xi_gpu_copy_add_batched(struct xi_gpu *g, uint64_t dst, uint64_t src, size_t len)
{
	if (!len)
		return 0;
	if (!g->c->cuMemcpyBatchAsync || g->batch_off)
		return xi_gpu_copy_add(g, dst, src, NULL, len);
	launch_batch(g);
	g->batch_dst[g->nbatch] = (CUdeviceptr)dst;
	g->batch_src[g->nbatch] = (CUdeviceptr)src;
	g->batch_len[g->nbatch] = len;
	return ++g->nbatch == XI_GPU_BATCH ? flush_batch(g) : 0;
}

int xi_gpu_host_dev(struct xi_gpu *g, void *host, uint64_t *dev)
{
	CUdeviceptr d = 0;
	if (g->c->cuMemHostGetDevicePointer(&d, host, 0))
		return -EIO;
	*dev = d;
	return 0;
}

int xi_gpu_copy_dtod(struct xi_gpu *g, uint64_t dst, uint64_t src, size_t len)
{
	if (!len)
		return 0;
	struct gpu_kernels *k = len <= g->kernel_max && len < (1ull << 31) ? kernels_of(g, g->dev) : NULL;
	if (!k || ((dst | src | len) & 15))
		return xi_gpu_copy_add(g, dst, src, NULL, len);
	return contiguous_job(g, dst, src, len);
}

int xi_gpu_copy_end(struct xi_gpu *g, void *ctx)
{
	if (g->cur_failed)
		return -EIO;
	int ret = flush_batch(g);
	if (ret)
		return ret;
	uint32_t slot = (g->head + g->count) % XI_GPU_RING;
	if (g->cur_in_batch) {
		/* Its event comes with the batch's launch. */
		g->ring[slot] = (struct gpu_wait){.ctx = ctx, .dev = g->dev, .idx_bytes = g->pend_idx,
						  .trace = g->cur_land ? g->land_trace : g->kb.trace};
		g->kb.waiting++;
		g->pend_idx = 0;
		g->count++;
		g->cur_in_batch = false;
		g->cur_land = false;
		if (!g->batch_calls || g->count == XI_GPU_RING)
			launch_batch(g);
		return 0;
	}
	launch_batch(g); /* jobs of earlier copies, before this one's event */
	uint32_t tr = 0;
	if (g->trace) {
		tr = xi_gpu_trace_open(g->trace, XI_TRACE_ENGINE);
		struct xi_trace_rec *r = xi_gpu_trace_rec(g->trace, tr);
		r->t_open = r->t_launch = g->t_begin;
		r->t_launched = xi_gpu_trace_now();
		r->rt_launched = xi_gpu_trace_realtime();
		r->calls = 1;
	}
	CUevent ev = g->events[g->dev][slot];
	uint32_t seq = write_flag(g, g->dev, g->stream[g->dev], slot);
	/* Whatever the caller sends after the copy must wait for this event. */
	if (g->c->cuEventRecord(ev, g->stream[g->dev]))
		return -EIO;
	if (g->trace)
		xi_gpu_trace_rec(g->trace, tr)->t_recorded = xi_gpu_trace_now();
	g->ring[slot] = (struct gpu_wait){.ctx = ctx, .event = ev, .dev = g->dev, .idx_bytes = g->pend_idx, .trace = tr,
					  .flag_seq = seq, .flag_slot = slot};
	g->pend_idx = 0;
	g->count++;
	return 0;
}

static CUresult query(struct xi_gpu *g, CUevent ev)
{
	if (!g->trace)
		return g->c->cuEventQuery(ev);
	uint64_t t0 = xi_gpu_trace_now();
	CUresult r = g->c->cuEventQuery(ev);
	xi_gpu_trace_query(g->trace, xi_gpu_trace_now() - t0, r != CUDA_ERROR_NOT_READY);
	return r;
}

int xi_gpu_poll(struct xi_gpu *g, struct xi_gpu_event *ev, int max)
{
	int n = 0;
	CUevent done = NULL; /* found finished in this poll: copies of one batch share it */
	while (n < max && g->count) {
		struct gpu_wait *wt = &g->ring[g->head];
		int status = 0;
		if (wt->failed) {
			status = -EIO;
		} else if (!wt->event) {
			break; /* its batch is not launched yet */
		} else if (wt->event != done) {
			CUresult r;
			if (wt->flag_seq && __atomic_load_n(&g->flags[wt->dev][wt->flag_slot], __ATOMIC_ACQUIRE) == wt->flag_seq)
				r = 0; /* the stream wrote its word: everything before it is done */
			else if (wt->flag_seq && ++g->flag_polls % FLAG_QUERY_EVERY)
				break;
			else
				r = query(g, wt->event);
			if (r == CUDA_ERROR_NOT_READY)
				break;
			status = r ? -EIO : 0;
			done = r ? NULL : wt->event;
		}
		if (g->trace)
			xi_gpu_trace_done(g->trace, wt->trace);
		ev[n++] = (struct xi_gpu_event){.ctx = wt->ctx, .status = status};
		g->k[wt->dev].used -= wt->idx_bytes;
		g->head = (g->head + 1) % XI_GPU_RING;
		g->count--;
	}
	return n;
}

uint64_t xi_gpu_stage_ahead(const struct xi_gpu *g)
{
	return g ? g->stage_ahead : 0;
}

bool xi_gpu_stage_next(const struct xi_gpu *g)
{
	return g && g->stage_next;
}

bool xi_gpu_bound(const struct xi_gpu *g)
{
	return g && g->cur_dev >= 0;
}

uint32_t xi_gpu_pending(const struct xi_gpu *g)
{
	return g ? g->count : 0;
}

void xi_gpu_forget(struct xi_gpu *g)
{
	if (!g)
		return;
	g->count = 0;
	g->kb.a.njobs = 0;
	g->kb.a.items = 0;
	g->kb.waiting = 0;
	g->kb.bytes = 0;
	g->kb.dev = -1;
	g->kb.big_pages = false;
	g->cur_in_batch = false;
	g->nland = 0;
	g->land_traced = false;
	g->cur_land = false;
	for (int dev = 0; dev < XI_GPU_DEVS; dev++)
		g->k[dev].used = 0;
}

/* ---------------------------------------------------------- paged copies */

int xi_gpu_kernels_on(struct xi_gpu *g, int dev)
{
	return g && stream_of(g, dev) && kernels_of(g, dev) ? 1 : 0;
}

/* Under lazy loading (CUDA's default since 12.2) a kernel's code is loaded
 * at its first launch, and loading may wait for every kernel running in the
 * context. A target's first landing would then wait for the application's
 * kernel that spins on that landing's signal word: a deadlock. So the
 * stream, the copy kernels (fully loaded) and their page-list memory are
 * made when a GPU region is registered, before any kernel can wait on it;
 * so are the copy-end words and the copy ring's events, which otherwise cost
 * the first copies of a device a millisecond (make_ring) and a
 * cuEventCreate each, on the worker, in the middle of the traffic. */
void xi_gpu_prepare(struct xi_gpu *g, int dev)
{
	/* stream_of makes the ring's events and words with the stream (make_ring). */
	if (g && stream_of(g, dev))
		(void)kernels_of(g, dev);
}

/* n bytes of a page-list ring at *off, the bytes taken (n and any end
 * of the ring skipped) added to *taken: 0, -EAGAIN while copies in flight
 * hold it, or 1 for a list that would not fit even an empty ring. */
static int idx_reserve(struct gpu_kernels *k, uint64_t n, uint64_t *off, uint32_t *taken)
{
	if (!k->used)
		k->tail = 0; /* empty: start over, so that any list that fits will */
	uint64_t pos = k->tail % IDX_RING, skip = pos + n > IDX_RING ? IDX_RING - pos : 0;
	if (n > IDX_RING)
		return 1;
	if (k->used + skip + n > IDX_RING)
		return -EAGAIN;
	*off = skip ? 0 : pos;
	k->tail += skip + n;
	k->used += skip + n;
	*taken += (uint32_t)(skip + n);
	return 0;
}

static int pages_by_engine(struct xi_gpu *g, const struct xi_gpu_pages *p)
{
	int ret = 0;
	for (uint32_t i = 0; i < p->npages && !ret; i++)
		ret = xi_gpu_copy_add_batched(g, p->dst_base + (uint64_t)p->dst_pages[i] * p->dst_stride,
					      p->src_base + (uint64_t)p->src_pages[i] * p->src_stride, p->page_len);
	return ret;
}

int xi_gpu_copy_pages(struct xi_gpu *g, const struct xi_gpu_pages *p)
{
	if (!p->npages || !p->page_len)
		return 0;
	struct gpu_kernels *k = kernels_of(g, g->dev);
	uint64_t per_page = (p->page_len + XI_PAGES_CHUNK - 1) / XI_PAGES_CHUNK, items = per_page * p->npages;
	if (!k || items >> 31 || p->page_len >> 31)
		return pages_by_engine(g, p); /* the kernel counts items in 32 bits, with room for its stride */
	uint64_t list = ((uint64_t)p->npages * sizeof(uint32_t) + 15) & ~(uint64_t)15, off = 0;
	int ret = idx_reserve(k, 2 * list, &off, &g->pend_idx);
	if (ret == 1 || (ret == -EAGAIN && !g->count))
		return pages_by_engine(g, p); /* too many pages for the ring */
	if (ret) {
		launch_batch(g); /* the copies holding the ring may be waiting for it */
		return ret;
	}
	memcpy(k->host + off, p->src_pages, p->npages * sizeof(uint32_t));
	memcpy(k->host + off + list, p->dst_pages, p->npages * sizeof(uint32_t));
	CUdeviceptr lists = k->host_dev + off;
	/* Pieces batched so far go first: the stream keeps them in order. */
	ret = flush_batch(g);
	if (ret)
		return ret;
	/* Measured on an H200 (docs/performance.md): reading the lists in place
	 * beats copying them first up to 256 MiB per call (0.57x vs 0.38x a
	 * contiguous copy at 1,024 x 16 KiB), not at 1 GiB (0.78x vs 0.85x),
	 * where the extra copy is amortized and the bus reads are not. The
	 * copy goes on the stream now, ahead of the launch that reads it. */
	bool device_lists = g->index_mode == 2 || (g->index_mode == 0 && p->page_len * p->npages >= (512ull << 20));
	if (device_lists) {
		if (g->c->cuMemcpyHtoDAsync(k->dev + off, k->host + off, 2 * list, g->stream[g->dev]))
			return -EIO;
		lists = k->dev + off;
	}
	struct xi_pages_job j = {
		.src_base = p->src_base,
		.src_stride = p->src_stride,
		.dst_base = p->dst_base,
		.dst_stride = p->dst_stride,
		.src_pages = lists,
		.dst_pages = lists + list,
		.page_len = (uint32_t)p->page_len,
		.npages = p->npages,
		.per_page = (uint32_t)per_page,
	};
	add_job(g, &j, p->page_len * p->npages,
		((p->src_base | p->src_stride | p->dst_base | p->dst_stride | p->page_len) & 15) == 0);
	return 0;
}
