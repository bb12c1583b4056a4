// xfer-gpu-bench: same-host GPU -> GPU through the engine (CUDA IPC path),
// two processes, against a contiguous cross-process device copy
// (cudaMemcpyAsync into the peer's IPC mapping, a third process) of the same
// bytes measured in the same run. Every row's bytes are verified at the
// target, and its immediates counted there.
//
//   paged  4/16/64 KiB pages x 1,024 and x 16,384, random permutations on
//          both sides, `it` calls in flight; baseline: `it` contiguous copies
//          of npages * page_len bytes
//   single 64 KiB .. 1 GiB writes, 1 and 16 in flight; baseline the same
//          copies (1 in flight: each synchronized)
//
// Environment: XFER_TEST_PROVIDER (default shm) for addresses and notices;
// XFER_BENCH_ONLY=paged|single, or =staged for the rows of
// gpu_bench_staged.cu (GPU memory through host mirrors over a NIC provider
// vs host memory on that provider; XFER_BENCH_STAGED_MS, default 100: each
// variant's least time), =ceiling for the rows of gpu_bench_ceiling.cu (no
// xfer: the staged write's two copies, device->pinned host and pinned
// host->device, by plain CUDA calls in two processes at once and each
// alone, and a pinned memcpy; XFER_BENCH_CEILING=1 adds them after the
// staged rows with each one's ratio to the staged row's host GB/s);
// XFER_BENCH_ROW=n runs row n alone (paged
// rows 0..5 in the order printed, then single sizes 6..10, both depths);
// XFER_BENCH_ORDER=src|dst lists the paged rows' page pairs by source or
// destination page (the same copies);
// XFER_BENCH_TRACE=1 traces the single rows at 1 in flight with the engine's
// own op trace (xfer_engine_trace) and prints where a write's time goes,
// and each paged row's calls (ptrace lines: every stage against the loop's
// start);
// the library's XFER_GPU_KERNEL=0 (paged copies by the copy engine),
// XFER_GPU_BATCH=0 (one launch per call), XFER_GPU_KERNEL_MAX (contiguous
// copies by kernel up to this many bytes) and XFER_GPU_TRACE for A/B runs
// and stage timings.
#include <algorithm>
#include <time.h>
#include <vector>

#include "gpu_common.h"
#include "gpu_pattern.h"

static const uint32_t page_sizes[] = {4u << 10, 16u << 10, 64u << 10};
static const uint32_t page_counts[] = {1024u, 16384u};
#define NPS 3
#define NPC 2
#define NPAGED (NPS * NPC)
static const size_t sizes[] = {64u << 10, 1u << 20, 16u << 20, 256u << 20, 1u << 30};
#define NS (sizeof(sizes) / sizeof(sizes[0]))
static const int depths[] = {1, 16};
#define ND 2
#define NROWS (NPAGED + NS * ND)
#define MAXLEN (1ull << 30)

static bool run_paged = true, run_single = true, bench_trace;
static int only_row = -1; // XFER_BENCH_ROW: paged rows 0..5, then single sizes 6..10

static bool want_paged(int row) { return run_paged && (only_row < 0 || only_row == row); }
static bool want_single(size_t i) { return run_single && (only_row < 0 || only_row == NPAGED + (int)i); }

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

// XFER_BENCH_ORDER=src|dst: the same page pairs (the same copy, verified
// alike), listed by source or destination page rather than in random
// order: whether the order the kernel visits pages in costs it (DRAM and
// TLB locality) is then an A/B of one setting.
static int pair_order; // 0 as drawn, 1 by source page, 2 by destination page
static void order_pairs(std::vector<uint32_t> &sp, std::vector<uint32_t> &dp)
{
	if (!pair_order)
		return;
	std::vector<std::pair<uint32_t, uint32_t>> v(sp.size());
	for (size_t i = 0; i < sp.size(); i++)
		v[i] = pair_order == 1 ? std::make_pair(sp[i], dp[i]) : std::make_pair(dp[i], sp[i]);
	std::sort(v.begin(), v.end());
	for (size_t i = 0; i < sp.size(); i++) {
		sp[i] = pair_order == 1 ? v[i].first : v[i].second;
		dp[i] = pair_order == 1 ? v[i].second : v[i].first;
	}
}

static uint32_t row_pl(int r) { return page_sizes[r / NPC]; }
static uint32_t row_np(int r) { return page_counts[r % NPC]; }
// Calls per paged row: about 1 GiB moved, 4..64 calls.
static int paged_iters(int r)
{
	uint64_t total = (uint64_t)row_pl(r) * row_np(r), it = (1ull << 30) / total;
	return (int)std::min<uint64_t>(64, std::max<uint64_t>(4, it));
}
static int single_iters(size_t n) { return n >= (256u << 20) ? 8 : n >= (16u << 20) ? 32 : 256; }

// ------------------------------------------------------------- op trace

static double pct(std::vector<double> &v, double p)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	return v[(size_t)(p * (double)(v.size() - 1))];
}

// Where the traced writes' time went (seen[k]: when the application had
// the completion of call k, CLOCK_MONOTONIC like the engine's stamps). For
// a same-host GPU write "first post" is the copy handed to the GPU engine
// and "last post" its notice (core/path.c, core/notice.c).
static void print_trace(xfer_engine_t *e, const char *op, const std::vector<uint64_t> &seen,
			const std::vector<uint64_t> &at_target)
{
	static const char *names[] = {"call->queued",          "queued->worker took it", "took->copy issued",
				      "copy issued->notice posted (launch, copy, event)",
				      "notice posted->completion", "completion->application has it",
				      "call->application has it", "notice posted->target application has the imm",
				      "writer has completion->target has the imm"};
	enum { NCOL = 9 };
	std::vector<struct xfer_trace> t(seen.size() + 64);
	int n = xfer_trace_read(e, t.data(), (int)t.size());
	std::vector<double> col[NCOL];
	for (int i = 0; i < n; i++) {
		const struct xfer_trace &r = t[i];
		if (r.user_data >= seen.size() || !seen[r.user_data] || !r.t_first || !r.t_last)
			continue;
		uint64_t app = seen[r.user_data], tgt = at_target[r.user_data];
		uint64_t st[NCOL] = {r.t_enq - r.t_call, r.t_deq - r.t_enq, r.t_first - r.t_deq, r.t_last - r.t_first,
				     r.t_done - r.t_last, app - r.t_done, app - r.t_call, tgt - r.t_last, tgt - app};
		for (int c = 0; c < NCOL; c++)
			if (c < 7 || tgt)
				col[c].push_back((double)(int64_t)st[c] / 1e3);
	}
	// Mean and max beside the percentiles: a row's rate is its mean, and a
	// few slow calls move it where p50 does not.
	for (int c = 0; c < NCOL; c++) {
		double sum = 0;
		for (double v : col[c])
			sum += v;
		double mean = col[c].empty() ? 0 : sum / (double)col[c].size();
		double p50 = pct(col[c], 0.5), p90 = pct(col[c], 0.9), p99 = pct(col[c], 0.99);
		double mx = col[c].empty() ? 0 : col[c].back(); // pct sorted it
		printf("  trace %s: %-50s n %4zu  p50 %8.2f  p90 %8.2f  p99 %8.2f  max %8.2f  mean %8.2f us\n", op, names[c],
		       col[c].size(), p50, p90, p99, mx, mean);
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// A traced paged row (all its calls in flight at once): each call's stages
// in us from t0 (the loop's start, CLOCK_MONOTONIC like the engine's stamps
// and XFER_GPU_TRACE's t_* columns, printed so that the kernels' records can
// be laid beside them), every call. "issued" is the
// copy handed to the GPU engine, "queued" its return (page lists copied,
// job added or launched), "notice" the count-only notice posted after the
// copy's end was seen, "app" when the application had the completion.
static void print_paged_trace(xfer_engine_t *e, const char *op, uint64_t t0, const std::vector<uint64_t> &seen)
{
	std::vector<struct xfer_trace> t(seen.size() + 64);
	int n = xfer_trace_read(e, t.data(), (int)t.size());
	std::sort(t.begin(), t.begin() + (n > 0 ? n : 0),
		  [](const struct xfer_trace &a, const struct xfer_trace &b) { return a.user_data < b.user_data; });
	uint64_t last = 0;
	for (uint64_t s : seen)
		last = std::max(last, s);
	printf("  ptrace %s: t0 %llu ns (CLOCK_MONOTONIC), last completion at +%.2f us, %d records\n", op,
	       (unsigned long long)t0, (double)(int64_t)(last - t0) / 1e3, n);
	auto rel = [t0](uint64_t v) { return v ? (double)(int64_t)(v - t0) / 1e3 : -1.0; };
	for (int i = 0; i < n; i++) {
		const struct xfer_trace &r = t[i];
		if (r.user_data >= seen.size())
			continue;
		printf("  ptrace %s: call %3llu  call %8.2f  enq %8.2f  took %8.2f  issued %8.2f  queued %8.2f"
		       "  notice %8.2f  done %8.2f  app %8.2f us\n",
		       op, (unsigned long long)r.user_data, rel(r.t_call), rel(r.t_enq), rel(r.t_deq), rel(r.t_first),
		       rel(r.t_first_ret), rel(r.t_last), rel(r.t_done), rel(seen[r.user_data]));
	}
}

// ------------------------------------------------------------- baseline

static void baseline(int rx_fd, int tx_fd)
{
	CK(cudaSetDevice(0));
	cudaIpcMemHandle_t h;
	get_blob(rx_fd, &h, sizeof(h));
	void *dst, *src;
	CK(cudaIpcOpenMemHandle(&dst, h, cudaIpcMemLazyEnablePeerAccess));
	CK(cudaMalloc(&src, MAXLEN));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	double r[NROWS] = {0};
	for (int row = 0; row < NPAGED; row++) {
		if (!want_paged(row))
			continue;
		size_t n = (size_t)row_pl(row) * row_np(row);
		int it = paged_iters(row);
		CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
		CK(cudaStreamSynchronize(s));
		double t0 = now_s();
		for (int k = 0; k < it; k++)
			CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
		CK(cudaStreamSynchronize(s));
		r[row] = (double)n * it / (now_s() - t0) / 1e9;
	}
	for (size_t i = 0; i < NS; i++)
		for (int d = 0; d < ND && want_single(i); d++) {
			int it = single_iters(sizes[i]);
			CK(cudaMemcpyAsync(dst, src, sizes[i], cudaMemcpyDeviceToDevice, s));
			CK(cudaStreamSynchronize(s));
			double t0 = now_s();
			for (int k = 0; k < it; k++) {
				CK(cudaMemcpyAsync(dst, src, sizes[i], cudaMemcpyDeviceToDevice, s));
				if (depths[d] == 1)
					CK(cudaStreamSynchronize(s));
			}
			CK(cudaStreamSynchronize(s));
			r[NPAGED + i * ND + d] = (double)sizes[i] * it / (now_s() - t0) / 1e9;
		}
	CK(cudaIpcCloseMemHandle(dst));
	put_blob(tx_fd, r, sizeof(r));
}

// ------------------------------------------------------------- target

// CMD_STAMP (XFER_BENCH_TRACE): the target waits for `imms` writes of
// immediate `imm` one at a time and sends back when it had each.
enum { CMD_ZERO = 1, CMD_CHECK_PAGED, CMD_CHECK_SINGLE, CMD_END, CMD_STAMP };
struct check {
	uint64_t cmd, row, seed, imm, imms, len;
};

// The target application's side of a traced row: each immediate awaited
// alone (an arrival before the expectation counts for it), and when this
// process had it, CLOCK_MONOTONIC (system-wide: comparable with the writer's).
static void stamp_arrivals(xfer_engine_t *e, int fd, uint32_t imm, uint64_t n)
{
	std::vector<uint64_t> st(n);
	struct xfer_completion xc;
	memset(&xc, 0, sizeof(xc));
	xc.timeout_ms = 20000;
	XK(xfer_expect_imm(e, imm, 1, &xc));
	send_u64(fd, 0); // armed: the writes may start
	for (uint64_t k = 0; k < n; k++) {
		XK(gpu_wait(e).res);
		st[k] = mono_ns();
		if (k + 1 < n)
			XK(xfer_expect_imm(e, imm, 1, &xc));
	}
	put_blob(fd, st.data(), n * sizeof(uint64_t));
}

static int receiver(int fd, int base_fd, int dev)
{
	CK(cudaSetDevice(dev));
	void *dst;
	CK(cudaMalloc(&dst, MAXLEN));
	// The baseline first: the sender waits for its figures.
	cudaIpcMemHandle_t h;
	CK(cudaIpcGetMemHandle(&h, dst));
	put_blob(base_fd, &h, sizeof(h));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, dst, MAXLEN, &mr));
	uint8_t desc[XFER_DESC_MAX];
	int dl = xfer_mr_desc(mr, desc, sizeof(desc), NULL);
	put_blob(fd, desc, (size_t)dl);
	unsigned long long *bad;
	uint32_t *lists;
	CK(cudaMalloc(&bad, sizeof(*bad)));
	CK(cudaMalloc(&lists, 2 * 16384 * sizeof(uint32_t)));
	for (;;) {
		struct check c;
		get_blob(fd, &c, sizeof(c));
		if (c.cmd == CMD_END)
			break;
		if (c.cmd == CMD_STAMP) {
			stamp_arrivals(e, fd, (uint32_t)c.imm, c.imms);
			continue;
		}
		if (c.cmd == CMD_ZERO) {
			CK(cudaMemset(dst, 0, MAXLEN));
			CK(cudaDeviceSynchronize());
			send_u64(fd, 0);
			continue;
		}
		// The immediates first: they promise the data is there.
		struct xfer_completion xc;
		memset(&xc, 0, sizeof(xc));
		xc.timeout_ms = 20000;
		XK(xfer_expect_imm(e, (uint32_t)c.imm, (uint32_t)c.imms, &xc));
		struct xfer_cqe q = gpu_wait(e);
		uint64_t res = q.res ? 1ull << 40 : 0;
		CK(cudaMemset(bad, 0, sizeof(*bad)));
		if (c.cmd == CMD_CHECK_PAGED) {
			uint32_t n = row_np((int)c.row), pw = row_pl((int)c.row) / 8;
			std::vector<uint32_t> sp, dp;
			perm_xs(sp, n, c.seed);
			perm_xs(dp, n, c.seed + 1000);
			CK(cudaMemcpy(lists, sp.data(), n * 4, cudaMemcpyHostToDevice));
			CK(cudaMemcpy(lists + n, dp.data(), n * 4, cudaMemcpyHostToDevice));
			check_pat<<<528, 512>>>((const uint64_t *)dst, lists, lists + n, n, pw, c.seed, bad);
		} else {
			check_pat<<<528, 512>>>((const uint64_t *)dst, NULL, NULL, 1, c.len / 8, c.seed, bad);
		}
		CK(cudaGetLastError());
		unsigned long long nbad = 0;
		CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
		send_u64(fd, res + nbad);
	}
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	return 0;
}

// ------------------------------------------------------------- source

static uint64_t ask(int fd, struct check c)
{
	put_blob(fd, &c, sizeof(c));
	return recv_u64(fd);
}

static int sender(int fd, int base_fd, int dst_dev)
{
	double base[NROWS];
	get_blob(base_fd, base, sizeof(base)); // the baseline ran alone, first
	CK(cudaSetDevice(0));
	xfer_peer_t peer;
	xfer_engine_t *e = gpu_engine(fd, &peer);
	void *src;
	CK(cudaMalloc(&src, MAXLEN));
	xfer_mr_t *mr;
	XK(xfer_mr_reg(e, src, MAXLEN, &mr));
	uint8_t desc[XFER_DESC_MAX];
	size_t dl = get_blob(fd, desc, sizeof(desc));
	xfer_rmr_t *dst;
	XK(xfer_rmr_import(e, peer, desc, dl, &dst));
	const char *k = getenv("XFER_GPU_KERNEL");
	printf("same-host GPU0 -> GPU%d, two processes, xfer (CUDA IPC path, paged copies %s) vs a contiguous\n"
	       "cross-process device copy (cudaMemcpyAsync into the IPC mapping) of the same bytes, same run\n",
	       dst_dev, k && !strcmp(k, "0") ? "by the copy engine: XFER_GPU_KERNEL=0" : "by kernel where loaded");
	const char *kb = getenv("XFER_GPU_BATCH"), *km = getenv("XFER_GPU_KERNEL_MAX"), *tr = getenv("XFER_GPU_TRACE");
	const char *sp = getenv("XFER_SPIN_US");
	printf("settings: XFER_GPU_BATCH=%s XFER_GPU_KERNEL_MAX=%s XFER_GPU_TRACE=%s XFER_SPIN_US=%s XFER_BENCH_ORDER=%s\n",
	       kb ? kb : "(default: on)", km ? km : "(default)", tr ? tr : "(off)", sp ? sp : "(default)",
	       pair_order == 1 ? "src" : pair_order == 2 ? "dst" : "(random)");
	printf("%-26s %5s %10s %10s %7s  %s\n", "op", "calls", "xfer GB/s", "base GB/s", "ratio", "bytes");
	int fails = 0;
	uint32_t imm = 1000;
	for (int row = 0; row < NPAGED; row++, imm++) {
		if (!want_paged(row))
			continue;
		uint32_t pl = row_pl(row), n = row_np(row);
		int it = paged_iters(row);
		uint64_t seed = 77 + row;
		std::vector<uint32_t> sp, dp;
		perm_xs(sp, n, seed);
		perm_xs(dp, n, seed + 1000);
		order_pairs(sp, dp);
		ask(fd, (struct check){CMD_ZERO, 0, 0, 0, 0, 0});
		fill_pat<<<528, 512>>>((uint64_t *)src, (uint64_t)n * pl / 8, seed);
		CK(cudaDeviceSynchronize());
		struct xfer_paged_write pw;
		memset(&pw, 0, sizeof(pw));
		pw.src = mr;
		pw.dst = dst;
		pw.page_len = pl;
		pw.src_pages = sp.data();
		pw.src_stride = pl;
		pw.dst_pages = dp.data();
		pw.dst_stride = pl;
		pw.npages = n;
		pw.imm = imm;
		pw.flags = XFER_F_IMM;
		XK(xfer_write_paged(e, &pw, NULL)); // warm-up: opens the mapping, loads the kernel
		XK(gpu_wait(e).res);
		// Traced (XFER_BENCH_TRACE=1): the same loop, each call's op trace
		// and when the application had its completion, against t0.
		std::vector<uint64_t> seen(bench_trace ? (size_t)it : 0);
		if (bench_trace)
			xfer_engine_trace(e, 1);
		struct xfer_stats st0, st1;
		xfer_engine_stats(e, &st0);
		uint64_t t0_ns = mono_ns();
		double t0 = now_s();
		for (int i = 0; i < it; i++) {
			struct xfer_completion c;
			memset(&c, 0, sizeof(c));
			c.user_data = (uint64_t)i;
			XK(xfer_write_paged(e, &pw, &c));
		}
		for (int i = 0; i < it; i++) {
			struct xfer_cqe q = gpu_wait(e);
			XK(q.res);
			if (q.user_data < seen.size())
				seen[q.user_data] = mono_ns();
		}
		double gbs = (double)n * pl * it / (now_s() - t0) / 1e9;
		xfer_engine_stats(e, &st1);
		if (bench_trace) {
			xfer_engine_trace(e, 0);
			char op[64];
			snprintf(op, sizeof(op), "paged %u x %u KiB", n, pl >> 10);
			print_paged_trace(e, op, t0_ns, seen);
			// Whether the worker slept in the loop, and how many requests
			// (here: the copies' notices and announcements) it posted.
			printf("  ptrace %s: worker sleeps %llu, requests posted %llu\n", op,
			       (unsigned long long)(st1.worker_sleeps - st0.worker_sleeps),
			       (unsigned long long)(st1.wrs_posted - st0.wrs_posted));
		}
		uint64_t bad = ask(fd, (struct check){CMD_CHECK_PAGED, (uint64_t)row, seed, imm, (uint64_t)n * (it + 1), 0});
		fails += bad != 0;
		char op[64];
		snprintf(op, sizeof(op), "paged %5u x %2u KiB", n, pl >> 10);
		printf("%-26s %5d %10.2f %10.2f %7.2f  %s\n", op, it, gbs, base[row], gbs / base[row],
		       bad ? "MISMATCH" : "verified");
		if (bad)
			printf("  %llu bad words%s\n", (unsigned long long)(bad & ((1ull << 40) - 1)),
			       bad >> 40 ? ", immediates missing" : "");
		fflush(stdout);
	}
	for (size_t i = 0; i < NS; i++, imm++) {
		if (!want_single(i))
			continue;
		uint64_t seed = 500 + i;
		ask(fd, (struct check){CMD_ZERO, 0, 0, 0, 0, 0});
		fill_pat<<<528, 512>>>((uint64_t *)src, sizes[i] / 8, seed);
		CK(cudaDeviceSynchronize());
		struct xfer_write w;
		memset(&w, 0, sizeof(w));
		w.src = mr;
		w.dst = dst;
		w.len = sizes[i];
		w.imm = imm;
		w.flags = XFER_F_IMM;
		XK(xfer_write(e, &w, NULL));
		XK(gpu_wait(e).res);
		int total = 1;
		double gbs[ND];
		for (int d = 0; d < ND; d++) {
			int it = single_iters(sizes[i]), inflight = 0;
			// Traced: 1 in flight, every call (user_data k2), and when the
			// application had each completion.
			bool traced = bench_trace && depths[d] == 1;
			std::vector<uint64_t> seen(traced ? (size_t)it : 0), at_target(seen.size());
			// Traced writes carry an immediate of their own, which the
			// target awaits write by write (CMD_STAMP).
			const uint32_t imm_row = w.imm;
			if (traced) {
				w.imm = imm_row | 0x80000u;
				ask(fd, (struct check){CMD_STAMP, 0, 0, w.imm, (uint64_t)it, 0});
				xfer_engine_trace(e, 1);
			}
			double t0 = now_s();
			for (int k2 = 0; k2 < it; k2++) {
				if (inflight == depths[d]) {
					struct xfer_cqe q = gpu_wait(e);
					XK(q.res);
					if (traced && q.user_data < seen.size())
						seen[q.user_data] = mono_ns();
					inflight--;
				}
				struct xfer_completion c;
				memset(&c, 0, sizeof(c));
				c.user_data = (uint64_t)k2;
				XK(xfer_write(e, &w, &c));
				inflight++;
			}
			for (; inflight; inflight--) {
				struct xfer_cqe q = gpu_wait(e);
				XK(q.res);
				if (traced && q.user_data < seen.size())
					seen[q.user_data] = mono_ns();
			}
			gbs[d] = (double)sizes[i] * it / (now_s() - t0) / 1e9;
			if (!traced)
				total += it;
			if (traced) {
				xfer_engine_trace(e, 0);
				get_blob(fd, at_target.data(), at_target.size() * sizeof(uint64_t));
				w.imm = imm_row;
				char op[64];
				snprintf(op, sizeof(op), "single %zu KiB", sizes[i] >> 10);
				print_trace(e, op, seen, at_target);
			}
		}
		uint64_t bad = ask(fd, (struct check){CMD_CHECK_SINGLE, 0, seed, imm, (uint64_t)total, sizes[i]});
		fails += bad != 0;
		for (int d = 0; d < ND; d++) {
			char op[64];
			snprintf(op, sizeof(op), "single %7zu KiB, %2d in flight", sizes[i] >> 10, depths[d]);
			double b = base[NPAGED + i * ND + d];
			printf("%-26s %5d %10.2f %10.2f %7.2f  %s\n", op, single_iters(sizes[i]), gbs[d], b, gbs[d] / b,
			       bad ? "MISMATCH" : "verified");
		}
		fflush(stdout);
	}
	// No answer to this one: the receiver leaves its loop and tears down.
	struct check end = {CMD_END, 0, 0, 0, 0, 0};
	put_blob(fd, &end, sizeof(end));
	printf("rows failing verification: %d\n", fails);
	xfer_rmr_free(dst);
	xfer_mr_dereg(mr);
	xfer_engine_destroy(e);
	return fails ? 1 : 0;
}

int main(void)
{
	int gpus = gpu_count_forksafe();
	if (!gpus) {
		fprintf(stderr, "SKIP: no GPU here\n");
		return 77;
	}
	int dst_dev = gpus > 1 ? 1 : 0;
	const char *only = getenv("XFER_BENCH_ONLY");
	if (only && !strcmp(only, "staged"))
		return staged_bench_main(); // gpu_bench_staged.cu
	if (only && !strcmp(only, "ceiling"))
		return ceiling_bench_main(); // gpu_bench_ceiling.cu
	if (only && !strcmp(only, "paged"))
		run_single = false;
	if (only && !strcmp(only, "single"))
		run_paged = false;
	const char *tr = getenv("XFER_BENCH_TRACE");
	bench_trace = tr && !strcmp(tr, "1");
	const char *ord = getenv("XFER_BENCH_ORDER");
	pair_order = ord && !strcmp(ord, "src") ? 1 : ord && !strcmp(ord, "dst") ? 2 : 0;
	const char *row = getenv("XFER_BENCH_ROW");
	if (row && *row)
		only_row = atoi(row);
	if (!getenv("XFER_TEST_PROVIDER"))
		setenv("XFER_TEST_PROVIDER", "shm", 1);
	int sv[2], rb[2], bt[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || socketpair(AF_UNIX, SOCK_STREAM, 0, rb) ||
	    socketpair(AF_UNIX, SOCK_STREAM, 0, bt))
		return 1;
	pid_t rx = fork();
	if (rx == 0) {
		int rc_ = receiver(sv[1], rb[0], dst_dev);
		fflush(stdout);
		_exit(rc_);
	}
	pid_t bp = fork();
	if (bp == 0) {
		baseline(rb[1], bt[0]);
		fflush(stdout);
		_exit(0);
	}
	pid_t tx = fork();
	if (tx == 0) {
		int rc_ = sender(sv[0], bt[1], dst_dev);
		fflush(stdout);
		_exit(rc_);
	}
	int st0 = 0, st1 = 0, st2 = 0;
	waitpid(bp, &st0, 0);
	waitpid(tx, &st1, 0);
	waitpid(rx, &st2, 0);
	if (!WIFEXITED(st0) || WEXITSTATUS(st0) || !WIFEXITED(st1) || WEXITSTATUS(st1) || !WIFEXITED(st2) ||
	    WEXITSTATUS(st2)) {
		fprintf(stderr, "xfer run failed (baseline %d, sender %d, receiver %d)\n", st0, st1, st2);
		return 1;
	}
	return 0;
}
