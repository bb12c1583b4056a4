/*
 * libxfer_moe_cuda.so, host side: buffers, the arena's layout, CUDA IPC
 * between same-host ranks, the wait points and the launchers of the kernels
 * (moe_kernels.cu) on the caller's stream.
 */
#include <cuda.h> /* types of the stream memory operations only: no libcuda link */
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe_cuda.h"
#include "moe_kernels.cuh"

#define ENOGPU 263 /* XFER_ENOGPU */

static thread_local char last_err[320];

extern "C" XFER_MOE_CUDA_API const char *xfer_moe_cuda_error(void)
{
	return last_err;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_version(void)
{
	return XFER_MOE_CUDA_VERSION;
}

__attribute__((format(printf, 2, 3))) static int fail(int rc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_err, sizeof(last_err), fmt, ap);
	va_end(ap);
	return rc;
}

static int cuda_fail(cudaError_t e, const char *what)
{
	int rc = (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
		  e == cudaErrorInitializationError)
			 ? -ENOGPU
			 : -EIO;
	return fail(rc, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU(call, what)                               \
	do {                                         \
		cudaError_t e_ = (call);             \
		if (e_ != cudaSuccess)               \
			return cuda_fail(e_, what);  \
	} while (0)

typedef CUresult (*batch_fn)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
typedef CUresult (*func_load_fn)(CUfunction);
typedef CUresult (*func_is_loaded_fn)(CUfunctionLoadingState *, CUfunction);
typedef CUresult (*loading_mode_fn)(CUmoduleLoadingMode *);

/* Driver entry points the runtime does not wrap: found at first use, so
 * that this library loads (and fails politely) without a driver. Any of
 * them may be missing (older drivers); callers cope. */
struct driver_fns {
	batch_fn batch;
	func_load_fn func_load;
	func_is_loaded_fn func_is_loaded;
	loading_mode_fn loading_mode;
};

static const struct driver_fns *driver(void)
{
	static struct driver_fns fns;
	static bool tried;
	if (!tried) {
		tried = true;
		void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (h) {
			fns.batch = (batch_fn)dlsym(h, "cuStreamBatchMemOp_v2");
			fns.func_load = (func_load_fn)dlsym(h, "cuFuncLoad");
			fns.func_is_loaded = (func_is_loaded_fn)dlsym(h, "cuFuncIsLoaded");
			fns.loading_mode = (loading_mode_fn)dlsym(h, "cuModuleGetLoadingMode");
		}
	}
	return &fns;
}

static batch_fn batch_op(void)
{
	return driver()->batch;
}

/* Every kernel of this library, for preloading. */
static const void *const all_kernels[] = {
	(const void *)moe_wait_kernel, (const void *)moe_route_kernel, (const void *)moe_pack_kernel,
	(const void *)moe_plan_kernel, (const void *)moe_shuffle_kernel, (const void *)moe_comb_send_kernel,
	(const void *)moe_stamp_kernel, (const void *)moe_comb_recv_kernel, (const void *)moe_route_wide_kernel,
	(const void *)moe_route_pack_kernel,
};
#define N_KERNELS (sizeof(all_kernels) / sizeof(all_kernels[0]))

/*
 * Loads every kernel now. With lazy loading (the default since CUDA 12.2) a
 * kernel is loaded at its first launch, and loading may synchronize the
 * whole context: everything queued must finish, and the driver holds back
 * other threads' work meanwhile. A first launch behind a wait that the host
 * proxy releases (engine path: the proxy needs the engine's staging copies,
 * which are driver calls of this context) then deadlocks until the wait's
 * deadline. The first GPU run showed exactly that: round 1 of every engine
 * run timed out (docs/moe.md, "Waits on a GPU"). cudaFuncGetAttributes needs
 * the loaded function; cuFuncLoad, where the driver has it, says so
 * explicitly. Returns how many kernels the driver reports loaded (-1: it
 * cannot say).
 */
static int preload_kernels(void)
{
	const struct driver_fns *dr = driver();
	int loaded = dr->func_is_loaded ? 0 : -1;
	for (size_t i = 0; i < N_KERNELS; i++) {
		cudaFuncAttributes fa;
		if (cudaFuncGetAttributes(&fa, all_kernels[i]) != cudaSuccess)
			return fail(-EIO, "cudaFuncGetAttributes (preloading kernel %zu): %s", i,
				    cudaGetErrorString(cudaGetLastError()));
		cudaFunction_t fn = NULL;
		if (cudaGetFuncBySymbol(&fn, all_kernels[i]) != cudaSuccess || !fn) {
			cudaGetLastError();
			loaded = -1;
			continue;
		}
		if (dr->func_load)
			dr->func_load((CUfunction)fn);
		CUfunctionLoadingState st = CU_FUNCTION_LOADING_STATE_UNLOADED;
		if (loaded >= 0 && dr->func_is_loaded((CUfunctionLoadingState *)&st, (CUfunction)fn) == CUDA_SUCCESS &&
		    st == CU_FUNCTION_LOADING_STATE_LOADED)
			loaded++;
	}
	return loaded;
}

struct ipc_blob {
	uint32_t magic, version, rank, world;
	int32_t pid, device;
	uint8_t uuid[16];
	uint64_t arena_bytes, send_bytes, comb_bytes;
	cudaIpcMemHandle_t h[3]; /* arena, send buffer, combine receive buffer */
};
#define IPC_MAGIC 0x434f4d58u /* "XMOC" */

struct xfer_moe_cuda {
	int device, wait;
	struct xfer_moe_config cfg;
	struct xfer_moe_sizes z;
	moe_dev d;
	uint8_t *arena, *send, *recv, *comb_send, *comb_recv;
	uint64_t arena_bytes;
	struct xfer_moe_ctl *ctl_h;
	uint32_t *rv_h, *rtab_h;
	cudaIpcMemHandle_t ipc[3];
	void **opened;          /* [3*W] handles opened from same-host ranks */
	uint8_t *same;          /* [W] */
	uint32_t *ones;         /* [W] of 1: what release copies over the flags */
	uint32_t route_threads, route_smem, pack_smem;
	uint32_t tok_threads; /* a block per token (pack, combine receive): a thread per 8 channels */
	uint32_t grid_shuffle, grid_csend; /* blocks of the grid-stride kernels */
	CUdeviceptr *wait_ptr[WP_N]; /* W+1 each, for stream waits */
	cudaStream_t rel;
	uint32_t *dbg_h;        /* pinned: what debug reads of the arena */
	int kernels_loaded;     /* preload_kernels' answer */
	bool fuse;              /* send and receive waits inside route / plan (XFER_MOE_FUSE=0: not) */
	bool pdl;               /* programmatic dependent launch (kernel waits; XFER_MOE_PDL=0: not) */
	bool route_wide;        /* few tokens: moe_route_wide_kernel (XFER_MOE_ROUTE_WIDE=0: not) */
	bool route_pack;        /* ... and route + pack in one kernel where it can (XFER_MOE_ROUTE_PACK=0: not) */
	uint32_t smem_optin;    /* the most dynamic shared memory a block may have */
	uint8_t uuid[16];
	bool connected;
};

/* An XFER_MOE_* on/off switch (docs/moe.md): unset or empty gives
 * the default, "0" off, anything else on. */
static bool env_switch(const char *name, bool dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	return strcmp(v, "0") != 0;
}

static uint64_t place(uint64_t *at, uint64_t bytes)
{
	uint64_t o = *at;
	*at = (o + bytes + 15) & ~15ull;
	return o;
}

static void layout_arena(xfer_moe_cuda_t *g)
{
	moe_dev &d = g->d;
	uint64_t at = 0, W = d.W, TK = (uint64_t)d.T * d.K, WP1 = (uint64_t)WP_N * (W + 1);
	d.o_round = place(&at, 16);
	d.o_failed = place(&at, 16);
	d.o_ready = place(&at, 4 * W);
	d.o_cons = place(&at, 4 * W);
	d.o_comb = place(&at, 4 * W);
	d.o_cnt = place(&at, 4 * CNT_N);
	d.o_route = place(&at, 2 * W * d.RV * 4);
	d.o_rec = place(&at, 4 * TK);
	d.o_lead = place(&at, TK);
	d.o_q = place(&at, TK);
	d.o_j = place(&at, 4 * TK);
	d.o_pb = place(&at, 4 * TK);
	d.o_tcomb = place(&at, 4 * TK);
	d.o_c = place(&at, 4 * W);
	d.o_pr = place(&at, 4 * W);
	d.o_cb = place(&at, 4 * W);
	d.o_first = place(&at, 8 * W);
	d.o_ovf = place(&at, 8 * W);
	d.o_ntok = place(&at, 4 * W);
	d.o_recpref = place(&at, 4 * (W + 1));
	d.o_recsrc = place(&at, 4 * W);
	d.o_qstart = place(&at, 4 * (W + 1));
	d.o_qsrc = place(&at, 4 * W);
	d.o_counts = place(&at, 4 * d.L);
	d.o_offsets = place(&at, 4 * (d.L + 1));
	d.o_base = place(&at, 4 * W * d.L);
	d.o_misc = place(&at, 4 * MISC_N);
	d.o_qrow = place(&at, 4 * g->z.expert_rows);
	d.o_peer_arena = place(&at, 8 * W);
	d.o_peer_send = place(&at, 8 * W);
	d.o_peer_comb = place(&at, 8 * W);
	d.o_same = place(&at, W);
	d.o_wait = place(&at, 8 * WP1);
	d.o_wait_rank = place(&at, 4 * WP1);
	/* always there (the arena's size must not depend on a rank's environment) */
	d.o_trace = place(&at, 8ull * 2 * KT_N * XFER_MOE_CUDA_TRACE_ROUNDS);
	g->arena_bytes = at;
}

static int alloc_dev(uint8_t **p, uint64_t bytes, const char *what)
{
	*p = NULL;
	if (!bytes)
		return 0;
	CU(cudaMalloc((void **)p, bytes), what);
	CU(cudaMemset(*p, 0, bytes), what);
	return 0;
}

static int alloc_pinned(void **h, void **dptr, uint64_t bytes, const char *what)
{
	CU(cudaHostAlloc(h, bytes, cudaHostAllocMapped | cudaHostAllocPortable), what);
	memset(*h, 0, bytes);
	CU(cudaHostGetDevicePointer(dptr, *h, 0), what);
	return 0;
}

/* The flags each wait point lowers: same-host ranks' in our arena, the
 * proxy's in the pinned control words (only with remote ranks). */
static int build_waits(xfer_moe_cuda_t *g)
{
	moe_dev &d = g->d;
	uint32_t W = d.W;
	uint64_t *dev = (uint64_t *)calloc((size_t)WP_N * (W + 1), 8);
	uint32_t *rank = (uint32_t *)calloc((size_t)WP_N * (W + 1), 4);
	if (!dev || !rank) {
		free(dev);
		free(rank);
		return fail(-ENOMEM, "out of memory");
	}
	uint64_t arena_offs[WP_N] = {d.o_cons, d.o_ready, 0, d.o_comb};
	volatile uint32_t *proxy_flag[WP_N] = {&d.ctl->tx_ready, &d.ctl->recv_flag, &d.ctl->comb_tx_ready,
					       &d.ctl->comb_flag};
	for (int wp = 0; wp < WP_N; wp++) {
		uint32_t n = 0;
		uint64_t *list = dev + (uint64_t)wp * (W + 1);
		if (arena_offs[wp])
			for (uint32_t s = 0; s < W; s++)
				if (s != d.me && g->same[s]) {
					rank[(uint64_t)wp * (W + 1) + n] = s;
					list[n++] = (uint64_t)(uintptr_t)(g->arena + arena_offs[wp] + 4ull * s);
				}
		if (d.n_remote) {
			rank[(uint64_t)wp * (W + 1) + n] = UINT32_MAX;
			list[n++] = (uint64_t)(uintptr_t)proxy_flag[wp];
		}
		d.wait_n[wp] = n;
		g->wait_ptr[wp] = (CUdeviceptr *)calloc(W + 1, sizeof(CUdeviceptr));
		if (!g->wait_ptr[wp]) {
			free(dev);
			free(rank);
			return fail(-ENOMEM, "out of memory");
		}
		for (uint32_t i = 0; i < n; i++)
			g->wait_ptr[wp][i] = (CUdeviceptr)list[i];
	}
	cudaError_t e = cudaMemcpy(g->arena + d.o_wait, dev, (size_t)WP_N * (W + 1) * 8, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(g->arena + d.o_wait_rank, rank, (size_t)WP_N * (W + 1) * 4, cudaMemcpyHostToDevice);
	free(dev);
	free(rank);
	CU(e, "cudaMemcpy (wait lists)");
	return 0;
}

static int write_peer_tables(xfer_moe_cuda_t *g)
{
	uint32_t W = g->d.W;
	uint64_t *t = (uint64_t *)calloc(3 * (size_t)W, 8);
	if (!t)
		return fail(-ENOMEM, "out of memory");
	for (uint32_t s = 0; s < W; s++) {
		void **o = g->opened + 3 * (size_t)s;
		bool me = s == g->d.me;
		t[s] = (uint64_t)(uintptr_t)(me ? g->arena : o[0]);
		t[W + s] = (uint64_t)(uintptr_t)(me ? g->send : o[1]);
		t[2 * W + s] = (uint64_t)(uintptr_t)(me ? g->comb_recv : o[2]);
	}
	cudaError_t e = cudaMemcpy(g->arena + g->d.o_peer_arena, t, 8ull * W, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(g->arena + g->d.o_peer_send, t + W, 8ull * W, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(g->arena + g->d.o_peer_comb, t + 2 * W, 8ull * W, cudaMemcpyHostToDevice);
	if (e == cudaSuccess)
		e = cudaMemcpy(g->arena + g->d.o_same, g->same, W, cudaMemcpyHostToDevice);
	free(t);
	CU(e, "cudaMemcpy (peer tables)");
	return 0;
}

static int create(const struct xfer_moe_config *c, int device, int wait, xfer_moe_cuda_t *g,
		  struct xfer_moe_buffers *bufs)
{
	if (xfer_moe_config_check(c))
		return fail(-EINVAL, "invalid MoE config: %s", xfer_moe_config_why(c));
	g->cfg = *c;
	xfer_moe_config_resolve(&g->cfg);
	xfer_moe_sizes(&g->cfg, &g->z);
	const struct xfer_moe_config &k = g->cfg;
	uint32_t W = k.world_size;
	g->device = device;
	g->wait = wait;
	g->same = (uint8_t *)calloc(W, 1);
	g->ones = (uint32_t *)malloc(4ull * W);
	g->opened = (void **)calloc(3 * (size_t)W, sizeof(void *));
	if (!g->same || !g->ones || !g->opened)
		return fail(-ENOMEM, "out of memory");
	for (uint32_t s = 0; s < W; s++) {
		g->same[s] = moe_host(c->host_of, s) == moe_host(c->host_of, k.rank);
		g->ones[s] = 1;
	}
	g->cfg.host_of = NULL; /* the caller's array: only `same` is kept of it */
	if (wait == XFER_MOE_WAIT_STREAM && !batch_op())
		return fail(-ENOSYS, "stream waits need cuStreamBatchMemOp_v2 from libcuda.so.1 (not found)");
	int ndev = 0;
	CU(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
	if (device < 0 || device >= ndev)
		return fail(-ENODEV, "no CUDA device %d (%d present)", device, ndev);
	CU(cudaSetDevice(device), "cudaSetDevice");
	cudaDeviceProp prop;
	CU(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
	memcpy(g->uuid, &prop.uuid, 16);
	moe_dev &d = g->d;
	memset(&d, 0, sizeof(d));
	d.W = W;
	d.me = k.rank;
	d.E = k.num_experts;
	d.L = g->z.local_experts;
	d.K = k.topk;
	d.H = k.hidden;
	d.T = k.max_tokens;
	d.db = k.dispatch_bytes;
	d.scales = k.scales;
	d.P = k.private_tokens;
	d.O = k.overflow_tokens;
	d.layout = k.layout;
	d.cap = k.expert_capacity;
	d.align = k.expert_align;
	d.RV = g->z.route_words;
	d.RB = g->z.record_bytes;
	d.PB = g->z.payload_bytes;
	d.SB = g->z.scale_bytes;
	d.MB = g->z.meta_bytes;
	d.CB = g->z.combine_row_bytes;
	d.G = k.hidden / XFER_MOE_SCALE_BLOCK;
	d.n_remote = g->z.remote_ranks;
	d.comb_send_rows = (uint32_t)g->z.comb_send_rows;
	d.timeout_ns = k.timeout_ms * 1000000ull;
	d.trace = env_switch("XFER_MOE_TRACE", false);
	g->fuse = env_switch("XFER_MOE_FUSE", true);
	g->route_wide = env_switch("XFER_MOE_ROUTE_WIDE", true);
	g->route_pack = env_switch("XFER_MOE_ROUTE_PACK", true);
	g->pdl = env_switch("XFER_MOE_PDL", true) && wait == XFER_MOE_WAIT_KERNEL; /* on by default (kernel waits) */
	layout_arena(g);
	int rc;
	if ((rc = alloc_dev(&g->arena, g->arena_bytes, "cudaMalloc (arena)")) ||
	    (rc = alloc_dev(&g->send, g->z.send_bytes, "cudaMalloc (send buffer)")) ||
	    (rc = alloc_dev(&g->recv, g->z.recv_bytes, "cudaMalloc (receive buffer)")) ||
	    (rc = alloc_dev(&g->comb_send, g->z.comb_send_bytes, "cudaMalloc (combine send buffer)")) ||
	    (rc = alloc_dev(&g->comb_recv, g->z.comb_recv_bytes, "cudaMalloc (combine receive buffer)")))
		return rc;
	void *ctl_d, *rv_d, *rtab_d;
	if ((rc = alloc_pinned((void **)&g->ctl_h, &ctl_d, sizeof(struct xfer_moe_ctl), "cudaHostAlloc (control words)")) ||
	    (rc = alloc_pinned((void **)&g->rv_h, &rv_d, g->z.route_vec_bytes, "cudaHostAlloc (route vectors)")) ||
	    (rc = alloc_pinned((void **)&g->rtab_h, &rtab_d, g->z.route_table_bytes, "cudaHostAlloc (route table)")))
		return rc;
	/* The same initial values xfer_moe_create gives them. */
	g->ctl_h->tx_ready = 1;
	g->ctl_h->comb_tx_ready = 1;
	g->ctl_h->p_error_rank = UINT32_MAX;
	d.arena = g->arena;
	d.send = g->send;
	d.recv = g->recv;
	d.comb_send = g->comb_send;
	d.comb_recv = g->comb_recv;
	d.ctl = (struct xfer_moe_ctl *)ctl_d;
	d.rv_host = (uint32_t *)rv_d;
	d.rtab_host = (uint32_t *)rtab_d;
	/* Our records start out read: the first round need not wait. */
	CU(cudaMemcpy(g->arena + d.o_cons, g->ones, 4ull * W, cudaMemcpyHostToDevice), "cudaMemcpy (flags)");
	if ((rc = write_peer_tables(g)) || (rc = build_waits(g)))
		return rc;
	/* The route kernel: as many warps as the histograms leave room for. */
	uint32_t per_warp = (d.E + 2 * W) * 4, fixed = (d.E + 4 * W) * 4;
	uint32_t nw = (uint32_t)((46 * 1024 - (int)fixed) / (int)per_warp);
	nw = nw < 1 ? 1 : nw > 32 ? 32 : nw;
	cudaFuncAttributes rfa; /* and no more threads than its registers allow */
	if (cudaFuncGetAttributes(&rfa, moe_route_kernel) == cudaSuccess && rfa.maxThreadsPerBlock >= 32 &&
	    nw > (uint32_t)rfa.maxThreadsPerBlock / 32)
		nw = (uint32_t)rfa.maxThreadsPerBlock / 32;
	g->route_threads = nw * 32;
	g->route_smem = nw * per_warp + fixed;
	if (g->route_smem > 48 * 1024)
		CU(cudaFuncSetAttribute(moe_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					(int)g->route_smem), "cudaFuncSetAttribute (route)");
	/* One pass over a token's channels (8 per thread) instead of 3.5 with
	 * 256 threads (hidden 7168: 896 threads); multiples of 32 (the fp8
	 * scale groups are 16 lanes of one warp). */
	uint32_t tt = (d.H / 8 + 31) / 32 * 32;
	g->tok_threads = tt < 128 ? 128 : tt > 1024 ? 1024 : tt;
	g->pack_smem = d.PB + d.SB;
	if (g->pack_smem > (uint32_t)prop.sharedMemPerBlockOptin)
		return fail(-EINVAL, "a token of %u bytes does not fit in shared memory (%zu)", g->pack_smem,
			    (size_t)prop.sharedMemPerBlockOptin);
	if (g->pack_smem > 48 * 1024)
		CU(cudaFuncSetAttribute(moe_pack_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
					(int)g->pack_smem), "cudaFuncSetAttribute (pack)");
	/* the fused route + pack: the token and route_wide's counts (launch checks
	 * the sum); the most dynamic shared memory is the opt-in limit less the
	 * kernel's static shared memory (asking for the whole limit is
	 * cudaErrorInvalidValue: run moe4-1) */
	cudaFuncAttributes rpa;
	CU(cudaFuncGetAttributes(&rpa, moe_route_pack_kernel), "cudaFuncGetAttributes (route + pack)");
	g->smem_optin = (uint32_t)(prop.sharedMemPerBlockOptin - rpa.sharedSizeBytes);
	CU(cudaFuncSetAttribute(moe_route_pack_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
				(int)g->smem_optin), "cudaFuncSetAttribute (route + pack)");
	/* Grid-stride kernels (shuffle, combine send): enough blocks that a
	 * prefill round (thousands of records) is not latency-bound per block,
	 * but never more than there can be work for (a record per source and
	 * token; a row per pair): a grid of 8 blocks per SM fills the GPU, and
	 * a process sharing it (MPS) cannot start even a one-thread kernel until
	 * blocks retire. XFER_MOE_GRID caps both (an experiment's knob). */
	uint64_t full = 8ull * (uint64_t)prop.multiProcessorCount;
	const char *gv = getenv("XFER_MOE_GRID");
	if (gv && atoi(gv) > 0)
		full = (uint64_t)atoi(gv);
	uint64_t recs = (uint64_t)W * d.T, rows = recs * (d.K < d.L ? d.K : d.L);
	g->grid_shuffle = (uint32_t)(recs < full ? (recs ? recs : 1) : full);
	g->grid_csend = (uint32_t)(rows < full ? (rows ? rows : 1) : full);
	CU(cudaIpcGetMemHandle(&g->ipc[0], g->arena), "cudaIpcGetMemHandle (arena)");
	CU(cudaIpcGetMemHandle(&g->ipc[1], g->send), "cudaIpcGetMemHandle (send buffer)");
	CU(cudaIpcGetMemHandle(&g->ipc[2], g->comb_recv), "cudaIpcGetMemHandle (combine buffer)");
	CU(cudaStreamCreateWithFlags(&g->rel, cudaStreamNonBlocking), "cudaStreamCreate");
	/* pinned, so that debug's copy is a plain DMA on its own stream (a
	 * copy to pageable memory goes through the driver's staging buffers) */
	CU(cudaHostAlloc((void **)&g->dbg_h, 4ull * (1 + 3 * W + CNT_N + MISC_N), cudaHostAllocPortable),
	   "cudaHostAlloc (debug)");
	if ((g->kernels_loaded = preload_kernels()) < -1)
		return g->kernels_loaded;
	memset(bufs, 0, sizeof(*bufs));
	bufs->send = g->send;
	bufs->recv = g->recv;
	bufs->comb_send = g->comb_send;
	bufs->comb_recv = g->comb_recv;
	bufs->route_vec = g->rv_h;
	bufs->route_table = g->rtab_h;
	bufs->ctl = g->ctl_h;
	return 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_create(const struct xfer_moe_config *c, int device,
						      int wait, struct xfer_moe_buffers *bufs,
						      xfer_moe_cuda_t **out)
{
	if (!c || !bufs || !out || (wait != XFER_MOE_WAIT_KERNEL && wait != XFER_MOE_WAIT_STREAM))
		return fail(-EINVAL, "xfer_moe_cuda_create: bad arguments");
	*out = NULL;
	xfer_moe_cuda_t *g = (xfer_moe_cuda_t *)calloc(1, sizeof(*g));
	if (!g)
		return fail(-ENOMEM, "out of memory");
	int rc = create(c, device, wait, g, bufs);
	if (rc) {
		char keep[sizeof(last_err)];
		memcpy(keep, last_err, sizeof(keep));
		xfer_moe_cuda_destroy(g);
		memcpy(last_err, keep, sizeof(keep));
		return rc;
	}
	*out = g;
	return 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_ipc_info(const xfer_moe_cuda_t *g, void *buf, size_t cap)
{
	if (!g || !buf || cap < sizeof(struct ipc_blob))
		return fail(-ENOSPC, "xfer_moe_cuda_ipc_info: %zu bytes needed", sizeof(struct ipc_blob));
	struct ipc_blob b;
	memset(&b, 0, sizeof(b));
	b.magic = IPC_MAGIC;
	b.version = XFER_MOE_CUDA_VERSION;
	b.rank = g->d.me;
	b.world = g->d.W;
	b.pid = (int32_t)getpid();
	b.device = g->device;
	memcpy(b.uuid, g->uuid, 16);
	b.arena_bytes = g->arena_bytes;
	b.send_bytes = g->z.send_bytes;
	b.comb_bytes = g->z.comb_recv_bytes;
	memcpy(b.h, g->ipc, sizeof(b.h));
	memcpy(buf, &b, sizeof(b));
	return (int)sizeof(b);
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_connect(xfer_moe_cuda_t *g, const void *const *infos,
						       const size_t *lens)
{
	if (!g || !infos || !lens || g->connected)
		return fail(-EINVAL, "xfer_moe_cuda_connect: bad arguments");
	CU(cudaSetDevice(g->device), "cudaSetDevice");
	uint32_t W = g->d.W;
	/* System-scope flags only when needed (moe_dev.cuh, fence_peers): a
	 * same-host rank on another GPU, or stream waits (the stream's front
	 * end reads the flags, not an SM thread of this GPU). */
	g->d.sys = env_switch("XFER_MOE_SYS_FENCES", false) || g->wait == XFER_MOE_WAIT_STREAM;
	for (uint32_t s = 0; s < W; s++) {
		if (s == g->d.me || !g->same[s])
			continue;
		struct ipc_blob b;
		if (lens[s] != sizeof(b) || !infos[s])
			return fail(-EPROTO, "rank %u: IPC information of %zu bytes, want %zu", s, lens[s], sizeof(b));
		memcpy(&b, infos[s], sizeof(b));
		if (b.magic != IPC_MAGIC || b.version != XFER_MOE_CUDA_VERSION || b.rank != s || b.world != W)
			return fail(-EPROTO, "rank %u: IPC information of another module or version", s);
		if (b.arena_bytes != g->arena_bytes || b.send_bytes != g->z.send_bytes ||
		    b.comb_bytes != g->z.comb_recv_bytes)
			return fail(-EPROTO, "rank %u has another MoE configuration (buffer sizes differ)", s);
		if (memcmp(b.uuid, g->uuid, 16) != 0)
			g->d.sys = 1;
		void **o = g->opened + 3 * (size_t)s;
		for (int i = 0; i < 3; i++) {
			cudaError_t e = cudaIpcOpenMemHandle(&o[i], b.h[i], cudaIpcMemLazyEnablePeerAccess);
			if (e != cudaSuccess)
				return fail(-EIO, "rank %u (pid %d, device %d): cudaIpcOpenMemHandle: %s", s, b.pid,
					    b.device, cudaGetErrorString(e));
		}
	}
	int rc = write_peer_tables(g);
	if (rc)
		return rc;
	g->connected = true;
	return 0;
}

/* A wait point: the stream waits for every flag to be 1 and lowers them, or
 * a one-warp kernel does the same with the deadline. */
static int wait_point(xfer_moe_cuda_t *g, int wp, cudaStream_t st)
{
	uint32_t n = g->d.wait_n[wp];
	if (!n)
		return 0;
	if (g->wait == XFER_MOE_WAIT_KERNEL) {
		moe_wait_kernel<<<1, 32, 0, st>>>(g->d, (uint32_t)wp);
		CU(cudaGetLastError(), "launching the wait kernel");
		return 0;
	}
	const uint32_t CHUNK = 64;
	CUstreamBatchMemOpParams ops[CHUNK];
	for (int write = 0; write < 2; write++) /* every wait before any lowering */
		for (uint32_t i = 0; i < n; i += CHUNK) {
			uint32_t m = n - i < CHUNK ? n - i : CHUNK;
			memset(ops, 0, sizeof(ops));
			for (uint32_t j = 0; j < m; j++) {
				if (!write) {
					ops[j].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
					ops[j].waitValue.address = g->wait_ptr[wp][i + j];
					ops[j].waitValue.value = 1;
					ops[j].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
				} else {
					ops[j].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
					ops[j].writeValue.address = g->wait_ptr[wp][i + j];
					ops[j].writeValue.value = 0;
					ops[j].writeValue.flags = 0;
				}
			}
			CUresult r = batch_op()((CUstream)st, m, ops, 0);
			if (r != CUDA_SUCCESS)
				return fail(-EIO, "cuStreamBatchMemOp (%s): CUresult %d", write ? "lower" : "wait", (int)r);
		}
	return 0;
}

/* Whether wait point wp runs inside its neighbour kernel (the default;
 * XFER_MOE_FUSE=0: a kernel of its own): kernel waits only (a stream wait
 * holds no SM and needs no kernel), and only without remote ranks, whose
 * waits on the proxy can last milliseconds, during which the route kernel's
 * block would hold a whole SM's registers. */
static bool fuse(const xfer_moe_cuda_t *g, int wp)
{
	return g->fuse && g->wait == XFER_MOE_WAIT_KERNEL && g->d.wait_n[wp] > 0 && !g->d.n_remote;
}

/* Launches kernel k after the kernel before it on st: with programmatic
 * dependent launch where this object uses it (moe_dev.cuh, pdl_wait). */
template <typename... P, typename... A>
static cudaError_t launch(const xfer_moe_cuda_t *g, bool pdl, void (*k)(P...), uint32_t grid, uint32_t block,
			  uint32_t smem, cudaStream_t st, A... args)
{
	cudaLaunchConfig_t cfg = {};
	cudaLaunchAttribute attr[1];
	cfg.gridDim = dim3(grid);
	cfg.blockDim = dim3(block);
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	if (pdl && g->pdl) {
		attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		attr[0].val.programmaticStreamSerializationAllowed = 1;
		cfg.attrs = attr;
		cfg.numAttrs = 1;
	}
	return cudaLaunchKernelEx(&cfg, k, ((P)args)...);
}

static int ready(xfer_moe_cuda_t *g, const char *op)
{
	if (!g)
		return fail(-EINVAL, "%s: no module", op);
	if (!g->connected)
		return fail(-EINVAL, "%s: not connected", op);
	CU(cudaSetDevice(g->device), "cudaSetDevice");
	return 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_dispatch_send(xfer_moe_cuda_t *g, uint32_t n, const void *x,
							     const float *x_scales, int quantize,
							     const void *topk_idx, int idx_bytes,
							     uint64_t stream)
{
	int rc = ready(g, "dispatch_send");
	if (rc)
		return rc;
	const moe_dev &d = g->d;
	if (n > d.T)
		return fail(-EINVAL, "dispatch_send: %u tokens, max_tokens is %u", n, d.T);
	if (n && (!x || !topk_idx))
		return fail(-EINVAL, "dispatch_send: no tokens or no indices");
	if (idx_bytes != 4 && idx_bytes != 8)
		return fail(-EINVAL, "dispatch_send: indices of %d bytes", idx_bytes);
	if (quantize && !(d.db == 1 && d.scales))
		return fail(-EINVAL, "dispatch_send: quantizing needs an fp8 config with scales");
	if (n && d.scales && !quantize && !x_scales)
		return fail(-EINVAL, "dispatch_send: fp8 tokens without their scales");
	cudaStream_t st = (cudaStream_t)(uintptr_t)stream;
	uint32_t fused = fuse(g, WP_SEND) ? (uint32_t)WP_SEND : (uint32_t)WP_N;
	/* few tokens (decode): a block per token, which with kernel waits and
	 * no remote ranks also packs its token; else one block walks them all */
	const bool wide = g->route_wide && n <= ROUTE_WIDE_TOKENS && n * d.K <= ROUTE_WIDE_PAIRS;
	const uint32_t wide_smem = 4u * (n * d.K + 4 * d.E + 2 * d.W);
	const uint32_t rp_smem = (g->pack_smem + 15u) / 16u * 16u + wide_smem;
	if (wide && g->route_pack && g->fuse && g->wait == XFER_MOE_WAIT_KERNEL && !d.n_remote &&
	    rp_smem <= g->smem_optin) {
		moe_route_pack_kernel<<<n + 1, g->tok_threads, rp_smem, st>>>(d, n, (const uint8_t *)x, x_scales,
									      quantize, topk_idx, idx_bytes);
		CU(cudaGetLastError(), "launching the route + pack kernel");
		return 0;
	}
	if (wide)
		moe_route_wide_kernel<<<n + 1, ROUTE_WIDE_THREADS, wide_smem, st>>>(d, n, topk_idx, idx_bytes, fused);
	else
		moe_route_kernel<<<1, g->route_threads, g->route_smem, st>>>(d, n, topk_idx, idx_bytes, fused);
	CU(cudaGetLastError(), "launching the route kernel");
	if (fused == WP_N && (rc = wait_point(g, WP_SEND, st)))
		return rc;
	CU(launch(g, true, moe_pack_kernel, n ? n : 1, g->tok_threads, g->pack_smem, st, d, n, (const uint8_t *)x,
		  x_scales, quantize, topk_idx, idx_bytes),
	   "launching the pack kernel");
	return 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_dispatch_recv(xfer_moe_cuda_t *g, void *out_x, float *out_scales,
							     int32_t *counts, int32_t *offsets,
							     int32_t *src_rank, int32_t *src_token,
							     uint64_t stream)
{
	int rc = ready(g, "dispatch_recv");
	if (rc)
		return rc;
	if (!out_x || !counts || (g->d.SB && !out_scales))
		return fail(-EINVAL, "dispatch_recv: an output is missing");
	cudaStream_t st = (cudaStream_t)(uintptr_t)stream;
	uint32_t fused = fuse(g, WP_RECV) ? (uint32_t)WP_RECV : (uint32_t)WP_N;
	if (fused == WP_N && (rc = wait_point(g, WP_RECV, st)))
		return rc;
	moe_plan_kernel<<<1, PLAN_THREADS, 0, st>>>(g->d, counts, offsets, fused);
	CU(cudaGetLastError(), "launching the plan kernel");
	CU(launch(g, true, moe_shuffle_kernel, g->grid_shuffle, 256, 0, st, g->d, (uint8_t *)out_x, out_scales,
		  src_rank, src_token),
	   "launching the shuffle kernel");
	return 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_combine_send(xfer_moe_cuda_t *g, const void *expert_out,
							    uint64_t stream)
{
	int rc = ready(g, "combine_send");
	if (rc)
		return rc;
	if (!expert_out)
		return fail(-EINVAL, "combine_send: no expert output");
	cudaStream_t st = (cudaStream_t)(uintptr_t)stream;
	if ((rc = wait_point(g, WP_CSEND, st)))
		return rc;
	moe_comb_send_kernel<<<g->grid_csend, 256, 0, st>>>(g->d, (const uint8_t *)expert_out);
	CU(cudaGetLastError(), "launching the combine send kernel");
	return 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_combine_recv(xfer_moe_cuda_t *g, uint32_t n, const float *weights,
							    void *out, uint64_t stream)
{
	int rc = ready(g, "combine_recv");
	if (rc)
		return rc;
	if (n > g->d.T || (n && (!weights || !out)))
		return fail(-EINVAL, "combine_recv: bad token count or missing buffers");
	cudaStream_t st = (cudaStream_t)(uintptr_t)stream;
	if ((rc = wait_point(g, WP_CRECV, st)))
		return rc;
	/* after a wait kernel only (else the kernel before is the caller's) */
	CU(launch(g, g->d.wait_n[WP_CRECV] > 0, moe_comb_recv_kernel, n ? n : 1, g->tok_threads, 0, st, g->d, n,
		  weights, (uint16_t *)out),
	   "launching the combine receive kernel");
	return 0;
}

static int list(char *buf, size_t cap, int o, const char *name, const uint32_t *v, uint32_t n)
{
	o += snprintf(buf + o, o < (int)cap ? cap - (size_t)o : 0, " %s[", name);
	for (uint32_t i = 0; i < n && o < (int)cap; i++)
		o += snprintf(buf + o, cap - (size_t)o, "%s%u", i ? "," : "", v[i]);
	o += snprintf(buf + o, o < (int)cap ? cap - (size_t)o : 0, "]");
	return o;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_debug(xfer_moe_cuda_t *g, char *buf, size_t cap)
{
	if (!g || !buf || !cap)
		return fail(-EINVAL, "xfer_moe_cuda_debug: bad arguments");
	CU(cudaSetDevice(g->device), "cudaSetDevice");
	const moe_dev &d = g->d;
	uint32_t W = d.W, *h = g->dbg_h;
	uint64_t offs[6] = {d.o_round, d.o_ready, d.o_cons, d.o_comb, d.o_cnt, d.o_misc};
	uint32_t cnt[6] = {1, W, W, W, CNT_N, MISC_N}, at = 0;
	cudaError_t e = cudaSuccess;
	for (int i = 0; i < 6 && e == cudaSuccess; i++) {
		e = cudaMemcpyAsync(h + at, g->arena + offs[i], 4ull * cnt[i], cudaMemcpyDeviceToHost, g->rel);
		at += cnt[i];
	}
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(g->rel);
	if (e != cudaSuccess)
		return cuda_fail(e, "reading the arena");
	const struct xfer_moe_ctl *c = g->ctl_h;
	int o = snprintf(buf, cap, "rank %u: device round %u; ctl k_route %u k_packed %u k_recv_done %u "
			 "k_comb_packed %u k_comb_done %u k_error %u/%u recv_flag %u comb_flag %u tx_ready %u "
			 "comb_tx_ready %u p_error %d/%u; wait %s;", d.me, h[0], c->k_route, c->k_packed,
			 c->k_recv_done, c->k_comb_packed, c->k_comb_done, c->k_error, c->k_error_info,
			 c->recv_flag, c->comb_flag, c->tx_ready, c->comb_tx_ready, c->p_error, c->p_error_rank,
			 g->wait == XFER_MOE_WAIT_STREAM ? "stream" : "kernel");
	o = list(buf, cap, o, "ready", h + 1, W);
	o = list(buf, cap, o, "cons", h + 1 + W, W);
	o = list(buf, cap, o, "comb", h + 1 + 2 * W, W);
	o = list(buf, cap, o, "counters", h + 1 + 3 * W, 6);
	o = list(buf, cap, o, "misc(rec,q_remote,q_total,bad)", h + 1 + 3 * W + CNT_N, 4);
	CUmoduleLoadingMode lm = (CUmoduleLoadingMode)0;
	const struct driver_fns *dr = driver();
	bool lm_ok = dr->loading_mode && dr->loading_mode(&lm) == CUDA_SUCCESS;
	int mps = xfer_moe_cuda_mps_enabled(g->device);
	o += snprintf(buf + o, o < (int)cap ? cap - (size_t)o : 0, "; kernels loaded %d/%zu (module loading %s), mps %d",
		      g->kernels_loaded, N_KERNELS, !lm_ok ? "?" : lm == CU_MODULE_LAZY_LOADING ? "lazy" : "eager", mps);
	return o < (int)cap ? o : (int)cap - 1;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_trace(xfer_moe_cuda_t *g, uint64_t *out, size_t words)
{
	const size_t need = 2ull * KT_N * XFER_MOE_CUDA_TRACE_ROUNDS;
	if (!g || !out)
		return fail(-EINVAL, "xfer_moe_cuda_trace: bad arguments");
	if (!g->d.trace)
		return 0;
	if (words < need)
		return fail(-ENOSPC, "xfer_moe_cuda_trace: %zu words needed", need);
	CU(cudaSetDevice(g->device), "cudaSetDevice");
	CU(cudaMemcpyAsync(out, g->arena + g->d.o_trace, 8 * need, cudaMemcpyDeviceToHost, g->rel),
	   "reading the trace");
	CU(cudaStreamSynchronize(g->rel), "reading the trace");
	return (int)need;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_mps_enabled(int device)
{
	int v = 0;
	CU(cudaDeviceGetAttribute(&v, cudaDevAttrMpsEnabled, device), "cudaDeviceGetAttribute (MPS)");
	return v ? 1 : 0;
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_kernels_loaded(const xfer_moe_cuda_t *g)
{
	return g ? g->kernels_loaded : fail(-EINVAL, "no module");
}

extern "C" XFER_MOE_CUDA_API int xfer_moe_cuda_stamp(uint64_t *dst, uint64_t stream)
{
	moe_stamp_kernel<<<1, 1, 0, (cudaStream_t)(uintptr_t)stream>>>(dst);
	CU(cudaGetLastError(), "launching the stamp kernel");
	return 0;
}

extern "C" XFER_MOE_CUDA_API void xfer_moe_cuda_release(void *p)
{
	xfer_moe_cuda_t *g = (xfer_moe_cuda_t *)p;
	if (!g || !g->arena || cudaSetDevice(g->device) != cudaSuccess)
		return;
	uint64_t W = g->d.W;
	/* the kernels' failure word first: whatever a raised flag lets run sees it */
	cudaMemcpyAsync(g->arena + g->d.o_failed, g->ones, 4, cudaMemcpyHostToDevice, g->rel);
	cudaMemcpyAsync(g->arena + g->d.o_ready, g->ones, 4 * W, cudaMemcpyHostToDevice, g->rel);
	cudaMemcpyAsync(g->arena + g->d.o_cons, g->ones, 4 * W, cudaMemcpyHostToDevice, g->rel);
	cudaMemcpyAsync(g->arena + g->d.o_comb, g->ones, 4 * W, cudaMemcpyHostToDevice, g->rel);
	cudaStreamSynchronize(g->rel);
}

extern "C" XFER_MOE_CUDA_API void xfer_moe_cuda_destroy(xfer_moe_cuda_t *g)
{
	if (!g)
		return;
	if (cudaSetDevice(g->device) == cudaSuccess && g->arena) {
		/* Nothing of ours may still wait or run: raise our flags, then let
		 * the device drain (the caller's streams included). */
		if (g->rel)
			xfer_moe_cuda_release(g);
		cudaDeviceSynchronize();
	}
	if (g->opened)
		for (size_t i = 0; i < 3 * (size_t)g->d.W; i++)
			if (g->opened[i])
				cudaIpcCloseMemHandle(g->opened[i]);
	cudaFree(g->arena);
	cudaFree(g->send);
	cudaFree(g->recv);
	cudaFree(g->comb_send);
	cudaFree(g->comb_recv);
	if (g->ctl_h)
		cudaFreeHost(g->ctl_h);
	if (g->rv_h)
		cudaFreeHost(g->rv_h);
	if (g->rtab_h)
		cudaFreeHost(g->rtab_h);
	if (g->rel)
		cudaStreamDestroy(g->rel);
	if (g->dbg_h)
		cudaFreeHost(g->dbg_h);
	for (int i = 0; i < WP_N; i++)
		free(g->wait_ptr[i]);
	free(g->opened);
	free(g->same);
	free(g->ones);
	free(g);
}
