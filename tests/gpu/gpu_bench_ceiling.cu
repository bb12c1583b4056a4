// xfer-gpu-bench, ceiling rows (XFER_BENCH_ONLY=ceiling alone, or after the
// staged rows with XFER_BENCH_CEILING=1): no xfer at all. A staged GPU write
// (gpu_bench_staged.cu) costs two small copies on the one GPU, in two
// processes: the source's device -> pinned host staging copy (D2H) and the
// target's pinned host -> device landing copy (H2D). These rows measure
// what the GPU gives that pair when nothing else runs, so that the staged
// rows' GPU / host ratio can be read against it:
//   pair       process A copies D2H and process B H2D at the same time, each
//              on one non-blocking stream with up to 16 copies in flight (an
//              event recorded after each, the oldest polled with
//              cudaEventQuery as the engine polls its ring), inside one
//              window of CLOCK_MONOTONIC (system-wide, so the two windows are
//              the same) of XFER_BENCH_STAGED_MS (default 100) ms; a side's
//              rate counts the copies it saw end inside the window. "pair"
//              is the lower of the two: the most GB/s a write that needs
//              both copies can have on this GPU.
//   pair 4s    pair with each side's copies spread round-robin over NSTREAM
//              streams (the engine uses one): whether more copy engines
//              lift the per-copy rate of small copies.
//   alone      A's D2H with B idle (blocked on the socket), then B's H2D
//              with A idle: against pair, what the two processes cost each
//              other.
//   memcpy     one CPU thread in A, memcpy between two pinned buffers: the
//              host side of a staged write's path.
//   after D2H  the same memcpy, each one right after a D2H copy into its
//              source (not timed; only the memcpy is): the CPU's copy of
//              bytes the GPU just wrote, which are not in the CPU's caches
//              as a host row's reused source and destination are. On shm a
//              staged write's transport copy (CMA) is this copy; the host
//              rows' copy is the hot one of the memcpy column.
// Rows: single 64 KiB, 1 MiB, 16 MiB copies; 1,024 x 4 KiB pages as one
// 4 MiB copy and as 1,024 copies of a page (random permutations on both
// sides, as the staged paged row's pages; 16 calls of 1,024 in flight).
// The buffers are those of a staged write: cudaMalloc'd device memory and
// cudaHostAlloc(portable | mapped) host memory (the engine's mirrors,
// src/api/mr_gpu.c), every copy of a row between the same bytes, as every
// write of a staged row is. Each mode's destination is zeroed before its
// window and checked after it (the last copy's bytes), so a broken copy
// cannot report speed.
// With XFER_BENCH_CEILING=1 the staged rows' host GB/s of the same run is
// printed beside each row, and ratio = pair / host (issue 14 asks the
// staged GPU rows for >= 0.8 x host); XFER_BENCH_ROW=n (a staged row) keeps
// the ceiling rows of that staged row only.
#include <time.h>
#include <vector>

#include "gpu_common.h"
#include "gpu_pattern.h"

namespace {

constexpr int DEPTH = 16, NSTREAM = 4;
constexpr uint32_t NPAGES = 1024, PAGE = 4096;
constexpr size_t MAXB = 16u << 20;

struct crow {
	const char *name;
	size_t bytes;
	bool pages;     // NPAGES copies of PAGE bytes, permuted, a call
	int staged_row; // the staged row whose host GB/s it is read against
};
const struct crow rows[] = {
	{"single      64 KiB", 64u << 10, false, 0},
	{"single    1024 KiB", 1u << 20, false, 1},
	{"single   16384 KiB", 16u << 20, false, 2},
	{"1024 x 4 KiB, 1 copy", NPAGES * PAGE, false, 3},
	{"1024 x 4 KiB, 1024 copies", NPAGES * PAGE, true, 3},
};
constexpr int NCROW = sizeof(rows) / sizeof(rows[0]);

enum { PAIR, D2H, H2D, MEMCPY, FRESH, PAIR4, NMODE };
enum { PREP = 1, GO, END };
struct cmsg {
	uint64_t cmd, row, mode, t_start, t_end;
};
struct cres {
	double gbs;
	uint64_t calls, bad;
};

uint64_t mono_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double window_s()
{
	const char *v = getenv("XFER_BENCH_STAGED_MS");
	double ms = v && *v ? atof(v) : 100.0;
	return (ms > 0 ? ms : 100.0) / 1e3; // 0 (the staged rows' "minimum of calls only"): the default window
}

// One process's buffers: dev (device), host and host2 (pinned, the
// engine's mirror flags), the page permutations and a device check's
// scratch.
struct side {
	void *dev, *host, *host2;
	cudaStream_t s, ss[NSTREAM]; // s is ss[0]
	cudaEvent_t ev[DEPTH];
	std::vector<uint32_t> sp, dp;
	uint32_t *lists;
	unsigned long long *bad;
};

void side_open(struct side *x)
{
	CK(cudaSetDevice(0));
	CK(cudaMalloc(&x->dev, MAXB));
	CK(cudaHostAlloc(&x->host, MAXB, cudaHostAllocPortable | cudaHostAllocMapped));
	CK(cudaHostAlloc(&x->host2, MAXB, cudaHostAllocPortable | cudaHostAllocMapped));
	for (int i = 0; i < NSTREAM; i++)
		CK(cudaStreamCreateWithFlags(&x->ss[i], cudaStreamNonBlocking));
	x->s = x->ss[0];
	for (int i = 0; i < DEPTH; i++)
		CK(cudaEventCreateWithFlags(&x->ev[i], cudaEventDisableTiming));
	perm_xs(x->sp, NPAGES, 4242);
	perm_xs(x->dp, NPAGES, 4242 + 1000);
	CK(cudaMalloc(&x->lists, 2 * NPAGES * sizeof(uint32_t)));
	CK(cudaMemcpy(x->lists, x->sp.data(), NPAGES * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(x->lists + NPAGES, x->dp.data(), NPAGES * 4, cudaMemcpyHostToDevice));
	CK(cudaMalloc(&x->bad, sizeof(*x->bad)));
}

void side_close(struct side *x)
{
	for (int i = 0; i < DEPTH; i++)
		CK(cudaEventDestroy(x->ev[i]));
	for (int i = 0; i < NSTREAM; i++)
		CK(cudaStreamDestroy(x->ss[i]));
	CK(cudaFree(x->dev));
	CK(cudaFree(x->lists));
	CK(cudaFree(x->bad));
	CK(cudaFreeHost(x->host));
	CK(cudaFreeHost(x->host2));
}

// The modes in which process B copies (H2D) too.
bool b_copies(int mode) { return mode == PAIR || mode == H2D || mode == PAIR4; }

uint64_t seed_of(int r, int mode) { return 7000 + 16 * (uint64_t)r + (uint64_t)mode; }

// One call of row r: D2H dev -> host, H2D host -> dev (MEMCPY: host -> host2
// by the CPU, see run_memcpy).
void issue(struct side *x, const struct crow &w, int mode, cudaStream_t st)
{
	cudaMemcpyKind k = mode == D2H ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
	char *src = (char *)(mode == D2H ? x->dev : x->host), *dst = (char *)(mode == D2H ? x->host : x->dev);
	if (!w.pages) {
		CK(cudaMemcpyAsync(dst, src, w.bytes, k, st));
		return;
	}
	for (uint32_t i = 0; i < NPAGES; i++)
		CK(cudaMemcpyAsync(dst + (size_t)x->dp[i] * PAGE, src + (size_t)x->sp[i] * PAGE, PAGE, k, st));
}

// The source filled with the mode's pattern, the destination zeroed, and
// one call made and finished (first use of the buffers, not timed).
void prep(struct side *x, int r, int mode)
{
	const struct crow &w = rows[r];
	uint64_t seed = seed_of(r, mode);
	if (mode == D2H) {
		fill_pat<<<264, 512>>>((uint64_t *)x->dev, w.bytes / 8, seed);
		CK(cudaGetLastError());
		CK(cudaDeviceSynchronize());
	} else {
		for (uint64_t i = 0; i < w.bytes / 8; i++)
			((uint64_t *)x->host)[i] = pat(i, seed);
	}
	if (mode == FRESH) {
		// The source is the device's pattern, put there by each D2H copy.
		fill_pat<<<264, 512>>>((uint64_t *)x->dev, w.bytes / 8, seed);
		CK(cudaGetLastError());
		CK(cudaDeviceSynchronize());
	}
	if (mode == MEMCPY || mode == FRESH) {
		memset(x->host2, 0, w.bytes);
		return;
	}
	issue(x, w, mode, x->s);
	CK(cudaStreamSynchronize(x->s));
	if (mode == D2H)
		memset(x->host, 0, w.bytes);
	else
		CK(cudaMemset(x->dev, 0, w.bytes));
	CK(cudaDeviceSynchronize());
}

// Words of the mode's destination that do not hold its pattern.
uint64_t verify(struct side *x, int r, int mode)
{
	const struct crow &w = rows[r];
	uint64_t seed = seed_of(r, mode);
	uint32_t n = w.pages ? NPAGES : 1;
	uint64_t pw = (w.pages ? PAGE : w.bytes) / 8;
	const std::vector<uint32_t> *sp = w.pages ? &x->sp : NULL, *dp = w.pages ? &x->dp : NULL;
	if (mode == D2H || mode == MEMCPY || mode == FRESH)
		return host_check((const uint64_t *)(mode == D2H ? x->host : x->host2), sp, dp, n, pw, seed);
	CK(cudaMemset(x->bad, 0, sizeof(*x->bad)));
	check_pat<<<264, 512>>>((const uint64_t *)x->dev, w.pages ? x->lists : NULL, w.pages ? x->lists + NPAGES : NULL, n,
				pw, seed, x->bad);
	CK(cudaGetLastError());
	unsigned long long nbad = 0;
	CK(cudaMemcpy(&nbad, x->bad, sizeof(nbad), cudaMemcpyDeviceToHost));
	return nbad;
}

void wait_until(uint64_t t)
{
	while (mono_ns() < t)
		;
}

// Calls of row r in [t_start, t_end), up to DEPTH in flight, call k on
// stream k % ns; the rate of the calls seen finished inside the window,
// over the time to the last.
struct cres run_copies(struct side *x, int r, int mode, uint64_t t_start, uint64_t t_end, int ns)
{
	const struct crow &w = rows[r];
	int head = 0, inflight = 0;
	uint64_t done = 0, t_last = t_start;
	wait_until(t_start);
	for (;;) {
		uint64_t now = mono_ns();
		if (now >= t_end)
			break;
		// The oldest call polled on every pass, full ring or not, as the
		// engine polls its ring: a call's end is stamped when it happens,
		// not when the ring next fills.
		if (inflight) {
			cudaError_t q = cudaEventQuery(x->ev[head]);
			if (q != cudaErrorNotReady) {
				CK(q);
				uint64_t t = mono_ns();
				if (t < t_end) {
					done++;
					t_last = t;
				}
				head = (head + 1) % DEPTH;
				inflight--;
				continue;
			}
			if (inflight == DEPTH)
				continue;
		}
		int k = (head + inflight) % DEPTH;
		issue(x, w, mode, x->ss[k % ns]);
		CK(cudaEventRecord(x->ev[k], x->ss[k % ns]));
		inflight++;
	}
	// The calls still in flight ended after the window: not counted.
	for (int i = 0; i < ns; i++)
		CK(cudaStreamSynchronize(x->ss[i]));
	double secs = (double)(t_last - t_start) / 1e9;
	return (struct cres){done && secs > 0 ? (double)w.bytes * (double)done / secs / 1e9 : 0, done, 0};
}

// One call of row r by the CPU: host -> host2, the pages permuted as the
// copies' are.
void host_copy(struct side *x, const struct crow &w)
{
	char *src = (char *)x->host, *dst = (char *)x->host2;
	if (!w.pages) {
		memcpy(dst, src, w.bytes);
		return;
	}
	for (uint32_t i = 0; i < NPAGES; i++)
		memcpy(dst + (size_t)x->dp[i] * PAGE, src + (size_t)x->sp[i] * PAGE, PAGE);
}

struct cres run_memcpy(struct side *x, int r, uint64_t t_start, uint64_t t_end)
{
	const struct crow &w = rows[r];
	uint64_t done = 0, t_last = t_start;
	wait_until(t_start);
	for (;;) {
		host_copy(x, w);
		uint64_t t = mono_ns();
		if (t >= t_end)
			break; // ended outside the window: not counted
		done++;
		t_last = t;
	}
	double secs = (double)(t_last - t_start) / 1e9;
	return (struct cres){done && secs > 0 ? (double)w.bytes * (double)done / secs / 1e9 : 0, done, 0};
}

// MEMCPY with a D2H copy into the source before each memcpy; only the
// memcpys are timed, their rate is bytes over their summed time.
struct cres run_fresh(struct side *x, int r, uint64_t t_start, uint64_t t_end)
{
	const struct crow &w = rows[r];
	uint64_t done = 0, busy = 0;
	wait_until(t_start);
	while (mono_ns() < t_end) {
		// One contiguous copy of the whole source, pages or not: the page
		// memcpys below then permute it as the MEMCPY mode does.
		CK(cudaMemcpyAsync(x->host, x->dev, w.bytes, cudaMemcpyDeviceToHost, x->s));
		CK(cudaStreamSynchronize(x->s));
		uint64_t t0 = mono_ns();
		host_copy(x, w);
		busy += mono_ns() - t0;
		done++;
	}
	double secs = (double)busy / 1e9;
	return (struct cres){done && secs > 0 ? (double)w.bytes * (double)done / secs / 1e9 : 0, done, 0};
}

// Process B: the H2D copies, on A's word.
void follower(int fd)
{
	struct side x;
	side_open(&x);
	for (;;) {
		struct cmsg m;
		get_blob(fd, &m, sizeof(m));
		if (m.cmd == END)
			break;
		int r = (int)m.row, mode = (int)m.mode;
		bool mine = b_copies(mode);
		if (m.cmd == PREP) {
			if (mine)
				prep(&x, r, H2D);
			send_u64(fd, 0);
			continue;
		}
		struct cres res = {0, 0, 0};
		if (mine) {
			res = run_copies(&x, r, H2D, m.t_start, m.t_end, mode == PAIR4 ? NSTREAM : 1);
			res.bad = verify(&x, r, H2D);
		}
		put_blob(fd, &res, sizeof(res));
	}
	side_close(&x);
}

// Process A: the D2H copies and the memcpy, the schedule, the table.
int leader(int fd, const double *host_gbs)
{
	struct side x;
	side_open(&x);
	const double win = window_s();
	const char *only = getenv("XFER_BENCH_ROW"); // a staged row: its ceiling rows alone
	printf("ceiling (no xfer): plain CUDA copies on GPU0, two processes, each one non-blocking stream with 16 copies\n"
	       "in flight, events polled; A device->pinned host (a staged write's staging), B pinned host->device (its\n"
	       "landing), at once in one %.0f ms window (XFER_BENCH_STAGED_MS) and each alone; memcpy: one CPU thread,\n"
	       "pinned -> pinned, same bytes each time (cache-hot, as a host row's); after D2H: that memcpy with a\n"
	       "D2H copy into its source before each (bytes the GPU just wrote: a staged write's copy on shm).\n"
	       "pair = min(A, B) at once: the most GB/s a write that needs both copies gets here; pair 4s: the same\n"
	       "with each side's copies round-robin on %d streams.\n",
	       win * 1e3, NSTREAM);
	if (host_gbs)
		printf("host: this run's staged row host GB/s; ratio = pair / host (issue 14: staged GPU >= 0.8 x host)\n");
	else
		printf("host/ratio: compare pair with the host GB/s of XFER_BENCH_ONLY=staged (or run it with "
		       "XFER_BENCH_CEILING=1)\n");
	printf("%-26s %13s %8s %8s %8s %8s %8s %8s %8s %9s %8s %6s  %s\n", "op (GB/s)", "calls A/B", "pair A", "pair B",
	       "pair", "pair 4s", "A alone", "B alone", "memcpy", "after D2H", "host", "ratio", "bytes");
	int fails = 0;
	for (int r = 0; r < NCROW; r++) {
		if (only && *only && atoi(only) != rows[r].staged_row)
			continue;
		struct cres a[NMODE], b[NMODE];
		uint64_t bad = 0;
		for (int mode = 0; mode < NMODE; mode++) {
			bool mine = mode != H2D, theirs = b_copies(mode);
			int what = mode == MEMCPY || mode == FRESH ? mode : D2H;
			struct cmsg m = {PREP, (uint64_t)r, (uint64_t)mode, 0, 0};
			if (theirs) {
				put_blob(fd, &m, sizeof(m));
				recv_u64(fd);
			}
			if (mine)
				prep(&x, r, what);
			// A start both can meet: the message's way (~10s of us) well inside.
			m.cmd = GO;
			m.t_start = mono_ns() + 2000000;
			m.t_end = m.t_start + (uint64_t)(win * 1e9);
			if (theirs)
				put_blob(fd, &m, sizeof(m));
			a[mode] = b[mode] = (struct cres){0, 0, 0};
			if (mine) {
				a[mode] = what == MEMCPY  ? run_memcpy(&x, r, m.t_start, m.t_end)
					  : what == FRESH ? run_fresh(&x, r, m.t_start, m.t_end)
							  : run_copies(&x, r, D2H, m.t_start, m.t_end,
								       mode == PAIR4 ? NSTREAM : 1);
				a[mode].bad = verify(&x, r, what);
			}
			if (theirs)
				get_blob(fd, &b[mode], sizeof(b[mode]));
			bad += a[mode].bad + b[mode].bad;
			// No call seen ending in a window is a failure too: no rate.
			if ((mine && !a[mode].calls) || (theirs && !b[mode].calls))
				bad++;
		}
		fails += bad != 0;
		double pair = std::min(a[PAIR].gbs, b[PAIR].gbs);
		double host = host_gbs ? host_gbs[rows[r].staged_row] : 0;
		char nc[32], hs[16] = "-", rs[16] = "-";
		snprintf(nc, sizeof(nc), "%llu/%llu", (unsigned long long)a[PAIR].calls, (unsigned long long)b[PAIR].calls);
		if (host > 0) {
			snprintf(hs, sizeof(hs), "%.2f", host);
			snprintf(rs, sizeof(rs), "%.2f", pair / host);
		}
		printf("%-26s %13s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %8s %6s  %s\n", rows[r].name, nc,
		       a[PAIR].gbs, b[PAIR].gbs, pair, std::min(a[PAIR4].gbs, b[PAIR4].gbs), a[D2H].gbs, b[H2D].gbs,
		       a[MEMCPY].gbs, a[FRESH].gbs, hs, rs,
		       bad ? "MISMATCH" : "verified");
		if (bad)
			printf("  row %d: %llu bad words or empty windows (A pair %llu, pair 4s %llu, alone %llu, memcpy %llu,"
			       " after D2H %llu; B pair %llu, pair 4s %llu, alone %llu)\n",
			       r, (unsigned long long)bad, (unsigned long long)a[PAIR].bad, (unsigned long long)a[PAIR4].bad,
			       (unsigned long long)a[D2H].bad, (unsigned long long)a[MEMCPY].bad, (unsigned long long)a[FRESH].bad,
			       (unsigned long long)b[PAIR].bad, (unsigned long long)b[PAIR4].bad, (unsigned long long)b[H2D].bad);
		fflush(stdout);
	}
	struct cmsg end = {END, 0, 0, 0, 0};
	put_blob(fd, &end, sizeof(end));
	printf("ceiling rows failing verification: %d\n", fails);
	side_close(&x);
	return fails;
}

} // namespace

int ceiling_side(int fd, int leads, const double *host_gbs)
{
	if (!leads) {
		follower(fd);
		return 0;
	}
	return leader(fd, host_gbs);
}

bool ceiling_wanted(void)
{
	const char *v = getenv("XFER_BENCH_CEILING");
	return v && !strcmp(v, "1");
}

// Alone (XFER_BENCH_ONLY=ceiling): process A leads and reports; B's exit
// status is 0 whatever its side returns, A's 1 when a row failed.
static int ceiling_a(int fd)
{
	return ceiling_side(fd, 1, NULL) ? 1 : 0;
}

static int ceiling_b(int fd)
{
	(void)ceiling_side(fd, 0, NULL);
	return 0;
}

int ceiling_bench_main(void)
{
	return run_two(ceiling_a, ceiling_b, "ceiling", "A", "B");
}
